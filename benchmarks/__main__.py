"""`python -m benchmarks [suite ...] [--quick | --full] [--json PATH]`: run benchmark suites, print tables, write JSON.

With no suite named, every registered suite runs. Modes: the default runs each suite's representative cases
(the whole run takes about 5 minutes on a quiet 2-core machine); `--quick` small sizes (under a minute);
`--full` every case at the largest sizes (the exhaustive list; far longer). `python -m benchmarks gpu [...]` runs
the cuda kernels against torch CUDA instead (benchmarks/gpu.py: its own table and options; it says so and exits
0 without a GPU).

Results go to `results/bench-<suite>.json` (one file per suite) unless `--json PATH` names one file for the
whole run; each carries the run's description (CPU, Target, threads, load average, mode, date). Progress goes
to stderr (a progress bar on a terminal, plain lines otherwise), tables to stdout. Ctrl-C stops the run
cleanly: the results so far are written, marked `"partial": true` (the plots too), and the exit code is 130.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import signal
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from benchmarks.runner import SUITES, TYPICAL_S, Bench

if TYPE_CHECKING:
    from benchmarks.progress import Progress

INTERRUPTED = 130  # what a shell reports for a command stopped by SIGINT


def load_suites() -> None:
    """Import every `benchmarks/bench_*.py`: each registers its suites with `@suite`, so adding a file is enough."""
    pkg = os.path.dirname(os.path.abspath(__file__))
    for m in sorted(pkgutil.iter_modules([pkg]), key=lambda m: m.name):
        if m.name.startswith("bench_"):
            importlib.import_module(f"benchmarks.{m.name}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu"]:
        from benchmarks import gpu

        return gpu.main(argv[1:])
    from benchmarks.peer_isa import limit_peers

    limit_peers(argv)  # CPU_TARGET below the host's level: start again with the peers held to it too
    try:
        load_suites()
        return run(argv)
    except KeyboardInterrupt:  # before the first suite started (run handles it from there on)
        print("\ninterrupted before any suite ran: nothing written", file=sys.stderr)
        return INTERRUPTED


def run(argv: list[str]) -> int:
    from benchmarks.limits import machine_key
    from benchmarks.progress import History, Progress
    from benchmarks.report import caption, machine_info, run_info
    from benchmarks.runner import watch_ctrl_c

    ap = argparse.ArgumentParser(prog="python -m benchmarks", description="Run benchmark suites.")
    ap.add_argument("suites", nargs="*", metavar="suite", help=f"suites to run (default: all of {', '.join(SUITES)})")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes: the whole run takes under a minute")
    size.add_argument("--full", action="store_true", help="every case at the largest sizes (the exhaustive list)")
    ap.add_argument("--json", metavar="PATH", help="write all results to this one file instead of results/bench-*.json")
    args = ap.parse_args(argv)
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {', '.join(unknown)}; registered: {', '.join(SUITES)}")
    names = args.suites or list(SUITES)
    mode = "full" if args.full else "quick" if args.quick else "default"

    machine = machine_info()
    info = run_info(mode)
    print("machine: " + ", ".join(f"{k}={v}" for k, v in machine.items() if v is not None))
    print(f"run: {caption(info)}")
    sys.stdout.flush()
    typical = {n: TYPICAL_S[n][mode] for n in names if mode in TYPICAL_S.get(n, {})}
    progress = Progress(sys.stderr, names, mode, History(machine_key()), typical)
    before = watch_ctrl_c()
    try:
        return _run_suites(names, mode, args.json, machine, info, progress)
    finally:
        signal.signal(signal.SIGINT, before)  # type: ignore[arg-type]  # what getsignal returned


def _run_suites(names: list[str], mode: str, json_path: str | None, machine: dict[str, object],
                info: dict[str, object], progress: Progress) -> int:
    from benchmarks.report import finish_run

    everything: list[dict[str, object]] = []
    written: list[str] = []
    b: Bench | None = None
    started, t0 = "", 0.0
    try:
        for name in names:
            started, t0 = datetime.now(UTC).isoformat(timespec="seconds"), time.perf_counter()
            b = Bench(name, mode=mode, progress=progress, run=info)
            progress.begin_suite(name)
            SUITES[name](b)
            b.finish()
            progress.end_suite()
            progress.done()
            _emit(b, machine, started, time.perf_counter() - t0, json_path, everything, written)
            b = None
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the writing short
        progress.done()
        finish_run(info, partial=True)
        if b is not None:
            try:
                b.finish(partial=True)
            except Exception as e:  # the results so far matter more than a plot of them
                b.note(f"output at the end of the suite failed after the interrupt: {type(e).__name__}: {e}")
            progress.end_suite(record=False)
            _emit(b, machine, started, time.perf_counter() - t0, json_path, everything, written, partial=True)
        if json_path:
            _write(json_path, {"run": info, "machine": machine, "suites": everything}, written)
        where = ", ".join(written) if written else "nothing (no suite had started)"
        print(f"\ninterrupted (Ctrl-C): results so far written, marked partial: {where}", file=sys.stderr)
        return INTERRUPTED
    finish_run(info)
    if json_path:
        _write(json_path, {"run": info, "machine": machine, "suites": everything}, written)
    return 0


def _emit(b: Bench, machine: dict[str, object], started: str, wall: float, json_path: str | None,
          everything: list[dict[str, object]], written: list[str], partial: bool = False) -> None:
    from benchmarks.report import print_suite, suite_json

    b.partial = partial
    status = " INTERRUPTED: partial results" if partial else ""
    print(f"\n== suite {b.suite} ({b.mode}): {wall:.1f} s{status} ==")
    print_suite(b, sys.stdout)
    sys.stdout.flush()
    run = dict(b.run)
    if run.get("load_end") is None:
        run["load_end"] = [round(x, 2) for x in os.getloadavg()]
    data = suite_json(b, machine, started, wall)
    data["run"] = run
    everything.append(data)
    if not json_path:
        _write(os.path.join("results", f"bench-{b.suite}.json"), data, written)


def _write(path: str, data: object, written: list[str]) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, default=str)
    os.replace(tmp, path)
    written.append(path)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
