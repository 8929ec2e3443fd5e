"""`python -m benchmarks [suite ...] [--quick] [--json PATH]`: run benchmark suites, print tables, write JSON.

With no suite named, every registered suite runs. `python -m benchmarks gpu [...]` runs the cuda kernels against
torch CUDA instead (benchmarks/gpu.py: its own table and options; it says so and exits 0 without a GPU).
Results go to `results/bench-<suite>.json` (one file per
suite) unless `--json PATH` names one file for the whole run. Progress goes to stderr, tables to stdout.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time
from datetime import UTC, datetime

from benchmarks.runner import SUITES, Bench, Progress, format_table, machine_info, suite_json


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
    load_suites()
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description="Run benchmark suites.")
    ap.add_argument("suites", nargs="*", metavar="suite", help=f"suites to run (default: all of {', '.join(SUITES)})")
    ap.add_argument("--quick", action="store_true", help="small sizes: the whole run takes under a minute")
    ap.add_argument("--json", metavar="PATH", help="write all results to this one file instead of results/bench-*.json")
    args = ap.parse_args(argv)
    unknown = [s for s in args.suites if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s) {', '.join(unknown)}; registered: {', '.join(SUITES)}")
    names = args.suites or list(SUITES)

    machine = machine_info()
    print("machine: " + ", ".join(f"{k}={v}" for k, v in machine.items() if v is not None))
    progress = Progress()
    everything = []
    for name in names:
        started = datetime.now(UTC).isoformat(timespec="seconds")
        t0 = time.perf_counter()
        b = Bench(name, args.quick, progress)
        SUITES[name](b)
        progress.done()
        wall = time.perf_counter() - t0
        print(f"\n== suite {name}{' (quick)' if args.quick else ''}: {wall:.1f} s ==")
        print(format_table(b))
        sys.stdout.flush()
        data = suite_json(b, machine, started, wall)
        everything.append(data)
        if not args.json:
            _write(os.path.join("results", f"bench-{name}.json"), data)
    if args.json:
        _write(args.json, {"machine": machine, "suites": everything})
    return 0


def _write(path: str, data: object) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, default=str)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
