"""Per-call overhead of a realize on the cpu device, next to numpy doing the same.

Each case builds its graph again and realizes it, as a user's call does (graph, plan-cache hit, buffers, launch):
`realize a+b` on 16 floats (almost all Python), `add 1M`, `softmax 512x512`, `matmul 256`. Times are the median
of many calls after warm-up (CPU time of the process next to wall time, since shared machines are loaded);
`--fresh` keeps every result alive until the end, so no output comes from the allocator's pool (each call maps
new memory), which shows what the pool saves.

    python -m benchmarks.call_overhead [--fresh] [--calls N]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

CASES = ("a+b 16", "add 1M", "softmax 512", "matmul 256")


def _inputs(case: str) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    shapes: dict[str, list[tuple[int, ...]]] = {
        "a+b 16": [(16,), (16,)], "add 1M": [(1 << 20,), (1 << 20,)], "softmax 512": [(512, 512)],
        "matmul 256": [(256, 256), (256, 256)]}
    shape = shapes[case]
    return [rng.standard_normal(s).astype(np.float32) for s in shape]


def _ours(case: str, xs: list[np.ndarray]) -> Callable[[], Any]:
    from tensor import Tensor

    ts = [Tensor(x).realize() for x in xs]
    if case == "softmax 512":
        return lambda: ts[0].softmax(-1).realize()
    if case == "matmul 256":
        return lambda: (ts[0] @ ts[1]).realize()
    return lambda: (ts[0] + ts[1]).realize()


def _numpy(case: str, xs: list[np.ndarray]) -> Callable[[], Any]:
    if case == "softmax 512":
        def softmax() -> np.ndarray:
            e = np.exp(xs[0] - xs[0].max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        return softmax
    if case == "matmul 256":
        return lambda: xs[0] @ xs[1]
    return lambda: xs[0] + xs[1]


def time_calls(fn: Callable[[], Any], calls: int, keep: bool = False) -> tuple[float, float]:
    """Median wall and CPU seconds per call of `fn` over `calls` calls (after 3 warm-up calls); with `keep`, every
    result is held until the end."""
    for _ in range(3):
        fn()
    held: list[Any] = []
    wall, cpu = [], []
    gc.collect()
    gc.disable()
    try:
        for _ in range(calls):
            c0, t0 = time.process_time(), time.perf_counter()
            r = fn()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            if keep:
                held.append(r)
            del r
    finally:
        gc.enable()
    del held
    return statistics.median(wall), statistics.median(cpu)


def measure(cases: tuple[str, ...] = CASES, calls: int = 200, fresh: bool = False) -> list[dict[str, Any]]:
    """One row per case: ours and numpy, wall and CPU seconds per call."""
    rows = []
    for case in cases:
        xs = _inputs(case)
        n = max(5, calls if case == "a+b 16" else calls // 4)
        ow, oc = time_calls(_ours(case, xs), n, keep=fresh)
        nw, nc = time_calls(_numpy(case, xs), n, keep=fresh)
        rows.append({"case": case, "ours_s": ow, "ours_cpu_s": oc, "numpy_s": nw, "numpy_cpu_s": nc, "calls": n})
    return rows


def _fmt(s: float) -> str:
    return f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.call_overhead", description=__doc__.split("\n\n")[0])
    ap.add_argument("--fresh", action="store_true", help="hold every result: each call's output is new memory")
    ap.add_argument("--calls", type=int, default=200, help="calls of the smallest case (the others a quarter)")
    args = ap.parse_args(argv)
    try:
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
    except OSError:
        load = "?"
    print(f"per-call time, median{' (results held: fresh outputs)' if args.fresh else ''}; load average {load}")
    print(f"{'case':14s} {'ours':>10s} {'ours cpu':>10s} {'numpy':>10s} {'numpy cpu':>10s}  ours/numpy")
    for r in measure(calls=args.calls, fresh=args.fresh):
        print(f"{r['case']:14s} {_fmt(r['ours_s']):>10s} {_fmt(r['ours_cpu_s']):>10s} {_fmt(r['numpy_s']):>10s} "
              f"{_fmt(r['numpy_cpu_s']):>10s}  {r['ours_s'] / max(r['numpy_s'], 1e-12):9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
