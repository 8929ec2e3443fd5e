"""What a run says about itself and its results: the machine and run description, the tables (rich), the JSON.

Every results file and every plot carries the run's description (`run_info`): CPU model, the cpu Target the
kernels were compiled for (its x86 level and vector kind), the threads our kernels use, the load average at
the start and end of the run, the mode (quick, default, full), the date, and whether the run was interrupted
(`partial`). `caption` is the one-line form a plot puts under its title.
"""

from __future__ import annotations

import io
import os
import platform
from datetime import UTC, datetime
from typing import IO

from benchmarks.runner import Bench, fmt_value

WIDE = 200  # columns for a table printed to a file or pipe (rich would otherwise wrap at 80)


def machine_info() -> dict[str, object]:
    from benchmarks.limits import cpu_model
    from devices import target_for

    info: dict[str, object] = {
        "cpu": cpu_model(), "cores": os.cpu_count(), "target": str(target_for("cpu")),
        "python": platform.python_version(), "implementation": platform.python_implementation(),
        "platform": platform.platform(),
    }
    from importlib import metadata

    for pkg in ("numpy", "tinygrad", "egglog", "torch"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    return info


def target_label() -> str:
    """The cpu Target in a few words: its instruction-set level and vector kind, e.g. `x86-64-v3 (AVX2, FMA)`."""
    from benchmarks.limits import _LABELS, row_names
    from devices import target_for

    t = target_for("cpu")
    kind = row_names(t)[0].partition("_")[2]
    extra = ", ".join(x for x in (_LABELS.get(kind, kind), "FMA" if t.fma else "") if x)
    return f"{t.isa}{' native' if t.name == 'native' else ''} ({extra})"


def _threads() -> int:
    from devices.cpu_pool import threads

    return threads()


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def run_info(mode: str) -> dict[str, object]:
    """The run's description, taken at its start; `finish_run` adds the end."""
    from benchmarks.limits import cpu_model
    from benchmarks.peer_isa import limited_to

    return {"mode": mode, "date": datetime.now(UTC).isoformat(timespec="seconds"), "cpu": cpu_model(),
            "cores": os.cpu_count(), "target": target_label(), "peers_isa": limited_to() or "host",
            "threads": _threads(), "load_start": _load(), "load_end": None, "partial": False}


def finish_run(run: dict[str, object], partial: bool = False) -> None:
    run["load_end"] = _load()
    run["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    run["partial"] = partial


def caption(run: dict[str, object]) -> str:
    """One line for a plot's subtitle: CPU, Target, threads, load average (1 min) at start -> end, mode, date."""
    if run.get("load_end") is None:
        run = dict(run, load_end=_load())

    def one(v: object) -> str:
        return f"{v[0]:.2f}" if isinstance(v, list) and v else "?"

    date = str(run.get("date", ""))[:16].replace("T", " ")
    part = " | PARTIAL (interrupted)" if run.get("partial") else ""
    peers = run.get("peers_isa", "host")
    held = f" | peers held to {peers}" if peers not in ("host", None) else ""
    return (f"{run.get('cpu', '?')} | Target {run.get('target', '?')}{held} | {run.get('threads', '?')} threads | "
            f"load {one(run.get('load_start'))} -> {one(run.get('load_end'))} | mode {run.get('mode', '?')} | "
            f"{date} UTC{part}")


# ---------------------------------------------------------------------------- tables


def _console(stream: IO[str] | None) -> object:
    from rich.console import Console

    c = Console(file=stream)
    if not c.is_terminal:
        c = Console(file=stream, width=WIDE, color_system=None)
    return c


def print_suite(b: Bench, stream: IO[str] | None = None) -> None:
    """The suite's figures, its comparisons, its own tables and its notes, as rich tables on `stream`."""
    from rich import box
    from rich.table import Table

    style: dict = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "title_justify": "left"}
    console = _console(stream)
    figures = Table("figure", "median", "unit", "min..max", "IQR", "runs", "fgn", "cpu", **style)
    for col in figures.columns[1:]:
        col.justify = "right"
    for r in b.results:
        lo, hi = r.spread
        q1, q3 = r.iqr
        cm = r.cpu_median
        figures.add_row(r.name, fmt_value(r.median), r.unit, f"{fmt_value(lo)}..{fmt_value(hi)}",
                        f"{fmt_value(q1)}..{fmt_value(q3)}", str(len(r.samples)),
                        "-" if r.fgn is None else f"{r.fgn:.2f}", "-" if cm is None else fmt_value(cm))
    if b.results:
        console.print(figures)  # type: ignore[attr-defined]
    if b.comparisons:
        comp = Table("comparison", "ours", "peer", "unit", "ours vs peer", "by cpu time", **style)
        for col in comp.columns[1:]:
            col.justify = "right"
        for c in b.comparisons:
            sc = c.speedup_cpu
            comp.add_row(c.label, fmt_value(c.ours.median), f"{fmt_value(c.peer.median)} ({c.peer_name})",
                         c.ours.unit, f"{c.speedup:.2f}x {'faster' if c.speedup >= 1 else 'slower'}",
                         "-" if sc is None else f"{sc:.2f}x")
        console.print(comp)  # type: ignore[attr-defined]
    for title, header, rows in b.tables:
        t = Table(*header, title=title, **style)
        for col in t.columns[1:]:
            col.justify = "right"
        for row in rows:
            t.add_row(*row)
        console.print(t)  # type: ignore[attr-defined]
    for n in b.notes:
        console.print(f"  {n}", markup=False, highlight=False)  # type: ignore[attr-defined]


def format_table(b: Bench) -> str:
    """print_suite's output as plain text (no colours)."""
    out = io.StringIO()
    print_suite(b, out)
    return out.getvalue().rstrip("\n")


def suite_json(b: Bench, machine: dict[str, object], started: str, wall: float) -> dict[str, object]:
    return {"suite": b.suite, "mode": b.mode, "quick": b.quick, "partial": b.partial, "started": started,
            "wall_s": wall, "run": b.run, "machine": machine, "results": [r.to_json() for r in b.results],
            "comparisons": [c.to_json() for c in b.comparisons],
            "tables": [{"title": t, "header": h, "rows": r} for t, h, r in b.tables], "notes": b.notes}
