"""The benchmark runner: a registry of named suites, timing with medians and spread, tables and JSON.

A suite is a function registered with `@suite("name")` that takes a `Bench` and records results through it:

    @suite("engine")
    def engine(b: Bench) -> None:
        r = b.measure("dag/ours", run_once, setup=build_graph, work=100_000, unit="nodes/s")
        ...
        b.compare("dag rewrite", ours=r, peer=peer_result, peer_name="tinygrad")

Every figure is the median of several runs, with min/max and the interquartile range, plus `fgn`: the CPU
load of *other* processes while it ran (this machine is shared; see anchors/machine-limits.md), so a noisy
row can be recognized instead of believed. Each figure is also computed from the process's CPU time
(`cpu` column): for single-threaded Python work that figure barely moves when another process takes a core,
so it is the one to compare when fgn is high.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")
SuiteFn = Callable[["Bench"], None]

SUITES: dict[str, SuiteFn] = {}


def suite(name: str) -> Callable[[SuiteFn], SuiteFn]:
    """Register a suite under `name` (what `python -m benchmarks NAME` runs)."""

    def register(fn: SuiteFn) -> SuiteFn:
        if name in SUITES and SUITES[name] is not fn:
            raise ValueError(f"benchmark suite {name!r} is registered twice: {SUITES[name].__module__} and "
                             f"{fn.__module__}; pick another name")
        SUITES[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------------- results


@dataclass
class Result:
    """One measured figure: `samples` holds one value per run, in `unit`."""

    name: str
    unit: str
    samples: list[float]
    higher_is_better: bool = True
    fgn: float | None = None
    info: dict[str, object] = field(default_factory=dict)
    cpu_samples: list[float] | None = None  # the same figure from process CPU time instead of wall time

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_samples) if self.cpu_samples else None

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.samples), max(self.samples)

    @property
    def iqr(self) -> tuple[float, float]:
        if len(self.samples) < 4:
            return self.spread
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q[0], q[2]

    def to_json(self) -> dict[str, object]:
        lo, hi = self.spread
        q1, q3 = self.iqr
        return {"name": self.name, "unit": self.unit, "median": self.median, "min": lo, "max": hi, "q1": q1, "q3": q3,
                "runs": len(self.samples), "samples": self.samples, "higher_is_better": self.higher_is_better,
                "fgn": self.fgn, "cpu_median": self.cpu_median, "cpu_samples": self.cpu_samples, "info": self.info}


@dataclass
class Comparison:
    label: str
    ours: Result
    peer: Result
    peer_name: str

    @property
    def speedup(self) -> float:
        """How many times better ours is (throughput ratio, or inverse time ratio), by wall time."""
        return _ratio(self.ours.median, self.peer.median, self.ours.higher_is_better)

    @property
    def speedup_cpu(self) -> float | None:
        o, p = self.ours.cpu_median, self.peer.cpu_median
        return None if o is None or p is None else _ratio(o, p, self.ours.higher_is_better)

    def to_json(self) -> dict[str, object]:
        return {"label": self.label, "ours": self.ours.name, "peer": self.peer.name, "peer_name": self.peer_name,
                "ours_median": self.ours.median, "peer_median": self.peer.median, "unit": self.ours.unit,
                "speedup": self.speedup, "ours_cpu_median": self.ours.cpu_median,
                "peer_cpu_median": self.peer.cpu_median, "speedup_cpu": self.speedup_cpu}


def _ratio(ours: float, peer: float, higher_is_better: bool) -> float:
    if higher_is_better:
        return ours / peer if peer else float("inf")
    return peer / ours if ours else float("inf")


# ---------------------------------------------------------------------------- foreign load


def _busy_seconds() -> float | None:
    """CPU-seconds spent by the whole machine (all processes), from /proc/stat; None where unavailable."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


class LoadMeter:
    """Foreign CPU load over an interval: machine busy time minus ours, in vCPUs (0 = quiet, 1 = one taken)."""

    def __init__(self) -> None:
        self.wall, self.busy, self.own = time.perf_counter(), _busy_seconds(), _own_seconds()

    def foreign(self) -> float | None:
        wall = time.perf_counter() - self.wall
        busy = _busy_seconds()
        if busy is None or self.busy is None or wall < 0.05:  # /proc/stat ticks are 4-10 ms: too coarse below
            return None
        return max(0.0, (busy - self.busy) - (_own_seconds() - self.own)) / wall


# ---------------------------------------------------------------------------- the handle a suite gets


@dataclass
class Timed:
    """One figure to time: fn(setup()) per run; see Bench.measure for work, unit and per_item."""

    name: str
    fn: Callable[[object], object]
    work: float
    unit: str
    setup: Callable[[], object] | None = None
    runs: int | None = None
    per_item: float | None = None
    teardown: Callable[[object, object], None] | None = None
    info: dict[str, object] | None = None


class Progress:
    """One status line on stderr, rewritten in place on a terminal, one line per update otherwise."""

    def __init__(self, stream: object = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.width = 0

    def update(self, msg: str) -> None:
        if self.tty:
            pad = max(0, self.width - len(msg))
            self.stream.write("\r" + msg + " " * pad)  # type: ignore[attr-defined]
            self.width = len(msg)
        else:
            self.stream.write(msg + "\n")  # type: ignore[attr-defined]
        self.stream.flush()  # type: ignore[attr-defined]

    def done(self) -> None:
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")  # type: ignore[attr-defined]
            self.stream.flush()  # type: ignore[attr-defined]
            self.width = 0


class Bench:
    """What a suite records into. `quick` asks for small sizes; `runs` is the number of timed runs per figure."""

    def __init__(self, suite_name: str, quick: bool, progress: Progress | None = None) -> None:
        self.suite, self.quick = suite_name, quick
        self.runs = 5
        self.results: list[Result] = []
        self.comparisons: list[Comparison] = []
        self.notes: list[str] = []
        self.progress = progress or Progress()

    def say(self, msg: str) -> None:
        self.progress.update(f"[{self.suite}] {msg}")

    def note(self, msg: str) -> None:
        """A line printed under the suite's table (what was compared, caveats)."""
        self.notes.append(msg)

    def time_runs(self, jobs: list[Timed]) -> list[tuple[list[float], list[float], float | None]]:
        """Wall and CPU seconds of each run of each job, and each job's median foreign load. The jobs take
        turns run by run (A B A B ...), so a change in the machine's load falls on all of them alike. Setup
        and teardown are not timed; garbage of the previous run is collected first."""
        n = max(j.runs or self.runs for j in jobs)
        out: list[tuple[list[float], list[float], list[float]]] = [([], [], []) for _ in jobs]
        for i in range(n):
            for job, (wall, cpu, loads) in zip(jobs, out, strict=True):
                if i >= (job.runs or self.runs):
                    continue
                self.say(f"{job.name}: run {i + 1}/{n}" + (f" (last {wall[-1]:.3f} s)" if wall else ""))
                state = job.setup() if job.setup is not None else None
                gc.collect()
                meter = LoadMeter()
                c0, t0 = time.process_time(), time.perf_counter()
                res = job.fn(state)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                if (f := meter.foreign()) is not None:
                    loads.append(f)
                wall.append(dt)
                cpu.append(dc)
                if job.teardown is not None:
                    job.teardown(state, res)
                del state, res
        return [(w, c, statistics.median(ld) if ld else None) for w, c, ld in out]

    def measure(self, name: str, fn: Callable[[T], object], *, work: float, unit: str,
                setup: Callable[[], T] | None = None, runs: int | None = None, per_item: float | None = None,
                teardown: Callable[[T, object], None] | None = None, info: dict[str, object] | None = None) -> Result:
        """Time fn and record a figure. Without `per_item`: a rate, `work` units per second (higher is better).
        With `per_item=s`: seconds per unit of work times s (e.g. 1e9 for ns per node; lower is better)."""
        return self.measure_together([Timed(name, fn, work, unit, setup, runs, per_item, teardown, info)])[0]

    def measure_together(self, jobs: list[Timed]) -> list[Result]:
        """Several figures timed in turns (see time_runs): what to use for figures that will be compared."""
        out = []
        for job, (wall, cpu, fgn) in zip(jobs, self.time_runs(jobs), strict=True):

            def figure(secs: list[float], job: Timed = job) -> list[float]:
                if job.per_item is None:
                    return [job.work / max(s, 1e-9) for s in secs]
                return [s / job.work * job.per_item for s in secs]

            info = dict(job.info or {}, seconds=wall, cpu_seconds=cpu, work=job.work)
            r = Result(job.name, job.unit, figure(wall), job.per_item is None, fgn, info, figure(cpu))
            self.results.append(r)
            out.append(r)
        return out

    def rate_from(self, timed: Result, name: str, unit: str, work: float) -> Result:
        """Another rate from the same timed runs (e.g. rule firings per second next to nodes per second)."""
        wall, cpu = timed.info["seconds"], timed.info["cpu_seconds"]
        r = Result(name, unit, [work / s for s in wall], True, timed.fgn, {"work": work},  # type: ignore[attr-defined]
                   [work / s for s in cpu])  # type: ignore[attr-defined]
        self.results.append(r)
        return r

    def record(self, result: Result) -> Result:
        self.results.append(result)
        return result

    def compare(self, label: str, ours: Result, peer: Result, peer_name: str) -> Comparison:
        c = Comparison(label, ours, peer, peer_name)
        self.comparisons.append(c)
        return c


# ---------------------------------------------------------------------------- machine info and output


def machine_info() -> dict[str, object]:
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    from devices import target_for

    info: dict[str, object] = {
        "cpu": cpu, "cores": os.cpu_count(), "target": str(target_for("cpu")), "python": platform.python_version(),
        "implementation": platform.python_implementation(), "platform": platform.platform(),
    }
    from importlib import metadata

    for pkg in ("numpy", "tinygrad", "egglog"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    return info


def fmt_value(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.4g}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def format_table(b: Bench) -> str:
    rows = [("figure", "median", "unit", "min..max", "IQR", "runs", "fgn", "cpu")]
    for r in b.results:
        lo, hi = r.spread
        q1, q3 = r.iqr
        cm = r.cpu_median
        rows.append((r.name, fmt_value(r.median), r.unit, f"{fmt_value(lo)}..{fmt_value(hi)}",
                     f"{fmt_value(q1)}..{fmt_value(q3)}", str(len(r.samples)),
                     "-" if r.fgn is None else f"{r.fgn:.2f}", "-" if cm is None else fmt_value(cm)))
    out = [_grid(rows)]
    if b.comparisons:
        crow = [("comparison", "ours", "peer", "unit", "ours vs peer", "by cpu time")]
        for c in b.comparisons:
            sc = c.speedup_cpu
            crow.append((c.label, fmt_value(c.ours.median), f"{fmt_value(c.peer.median)} ({c.peer_name})", c.ours.unit,
                         f"{c.speedup:.2f}x {'faster' if c.speedup >= 1 else 'slower'}",
                         "-" if sc is None else f"{sc:.2f}x"))
        out.append(_grid(crow))
    out.extend(f"  {n}" for n in b.notes)
    return "\n".join(out)


def _grid(rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for k, r in enumerate(rows):
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append("  ".join(cells))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def suite_json(b: Bench, machine: dict[str, object], started: str, wall: float) -> dict[str, object]:
    return {"suite": b.suite, "quick": b.quick, "started": started, "wall_s": wall, "machine": machine,
            "results": [r.to_json() for r in b.results], "comparisons": [c.to_json() for c in b.comparisons],
            "notes": b.notes}
