"""16-bit floats on the cpu device next to torch's CPU kernels in the same run: matmul 1024, conv2d
(8,64,56,56)->64 (3x3, padding 1) and attention 8x8x512x64 (the kernels suite's shapes) in float16 and bfloat16,
inputs realized in the dtype, products and sums in float32 on both sides (torch's CPU GEMMs accumulate 16-bit
inputs in float32). Ours and torch alternate call by call; each figure is the median wall time of the calls after
two warm-up calls (ours: the first compiles, and the cpu device's first build of a kernel is its quick -Og tier
until the -O2 one is ready, which the warm-up waits for). The output is checked against torch's (16-bit rounding
of sums in another order: within a few ulps of the result's scale).

    python -m benchmarks.half_cpu [--calls N] [--cases matmul,conv,attention]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.kernel_cases import all_cases, tensor_graph
from benchmarks.limits import cpu_model

CASES = {"matmul": "matmul_1024", "conv": "conv", "attention": "attention"}


def _pair(case_key: str, dt: str) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], float]]:
    """(ours, torch, the check's error relative to the output's scale) for one case in dtype `dt`."""
    import torch

    from tensor import Tensor

    case = all_cases()[case_key]
    xs = case.inputs()
    ours_in = [Tensor(x).cast(dt).realize() for x in xs]
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dt]
    torch_in = [torch.from_numpy(x).to(tdt) for x in xs]

    def ours() -> Any:
        return tensor_graph(case, ours_in).realize()

    def theirs() -> Any:
        with torch.inference_mode():
            return tensor_graph(case, torch_in, conv=lambda x, w: torch.nn.functional.conv2d(x, w, padding=1))

    def error() -> float:
        got = ours().cast("float32").numpy().astype(np.float64)
        want = theirs().float().numpy().astype(np.float64)
        return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))

    return ours, theirs, error


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.half_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=7)
    p.add_argument("--cases", default=",".join(CASES))
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed: this comparison needs it (pip install torch)")
        return 1
    print(f"cpu: {cpu_model()}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    for name in args.cases.split(","):
        for dt in ("float16", "bfloat16"):
            ours, theirs, error = _pair(CASES[name], dt)
            for f in (ours, theirs, ours, theirs):
                f()
            time.sleep(0.5)  # the cpu device's -O2 builds start once nothing compiles
            ours()
            t_ours, t_torch = [], []
            for _ in range(args.calls):
                for f, into in ((ours, t_ours), (theirs, t_torch)):
                    t0 = time.perf_counter()
                    f()
                    into.append(time.perf_counter() - t0)
            mo, mt = statistics.median(t_ours) * 1e3, statistics.median(t_torch) * 1e3
            print(f"{name:10s} {dt:9s} ours {mo:9.2f} ms  torch {mt:9.2f} ms  ours/torch speed {mt / mo:7.2f}x  "
                  f"max error / scale {error():.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
