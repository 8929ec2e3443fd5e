"""16-bit floats on the cpu device next to torch's CPU kernels in the same run: matmul 1024, conv2d
(8,64,56,56)->64 (3x3, padding 1) and attention 8x8x512x64 (the kernels suite's shapes) in float16 and bfloat16,
inputs realized in the dtype, products and sums in float32 on both sides (torch's CPU GEMMs accumulate 16-bit
inputs in float32); and elementwise kernels over 16M elements (4096 x 4096): `(x * y + z).relu()`, `x.exp()` and
`x.gelu()` (the tanh form on both sides) in float16, bfloat16 and float32, each op rounded to the dtype on both
sides. Ours and torch alternate call by call; each figure is the median wall time of the calls after two warm-up
calls (ours: the first compiles, and the cpu device's first build of a kernel is its quick -Og tier until the -O2
one is ready, which the warm-up waits for). The output is checked against torch's (16-bit rounding of sums in
another order, or of exp's polynomial against torch's: within a few ulps of the result's scale).

    python -m benchmarks.half_cpu [--calls N] [--cases matmul,conv,attention,fma_relu,exp,gelu]
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
# elementwise cases over (4096, 4096): name -> (inputs, the expression as Tensor methods, torch's spelling of it)
ELEMENTWISE: dict[str, tuple[int, Callable[..., Any], Callable[..., Any]]] = {
    "fma_relu": (3, lambda x, y, z: (x * y + z).relu(), lambda x, y, z: (x * y + z).relu()),
    "exp": (1, lambda x: x.exp(), lambda x: x.exp()),
    "gelu": (1, lambda x: x.gelu(), lambda x: _torch_gelu(x)),
}
ELEMENTWISE_SHAPE = (4096, 4096)


def _torch_gelu(x: Any) -> Any:
    import torch

    return torch.nn.functional.gelu(x, approximate="tanh")


def _pair(case_key: str, dt: str, shape: tuple[int, ...] = ELEMENTWISE_SHAPE
          ) -> tuple[Callable[[], Any], Callable[[], Any], Callable[[], float]]:
    """(ours, torch, the check's error relative to the output's scale) for one case in dtype `dt` (an elementwise
    case's inputs of `shape`)."""
    import torch

    from tensor import Tensor

    if case_key in ELEMENTWISE:
        count, ours_f, torch_f = ELEMENTWISE[case_key]
        rng = np.random.default_rng(1234)
        xs = [rng.standard_normal(shape, dtype=np.float32) for _ in range(count)]
    else:
        case = all_cases()[case_key]
        xs = case.inputs()

        def ours_f(*t: Any) -> Any:
            return tensor_graph(case, list(t))

        def torch_f(*t: Any) -> Any:
            return tensor_graph(case, list(t), conv=lambda x, w: torch.nn.functional.conv2d(x, w, padding=1))

    ours_in = [Tensor(x).cast(dt).realize() for x in xs]
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}[dt]
    torch_in = [torch.from_numpy(x).to(tdt) for x in xs]

    def ours() -> Any:
        return ours_f(*ours_in).realize()

    def theirs() -> Any:
        with torch.inference_mode():
            return torch_f(*torch_in)

    def error() -> float:
        got = ours().cast("float32").numpy().astype(np.float64)
        want = theirs().float().numpy().astype(np.float64)
        return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))

    return ours, theirs, error


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.half_cpu", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=7)
    p.add_argument("--cases", default=",".join([*CASES, *ELEMENTWISE]))
    args = p.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("torch is not installed: this comparison needs it (pip install torch)")
        return 1
    print(f"cpu: {cpu_model()}, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    for name in args.cases.split(","):
        if name not in CASES and name not in ELEMENTWISE:
            p.error(f"no case {name!r}: pick from {', '.join([*CASES, *ELEMENTWISE])}")
        for dt in ("float16", "bfloat16", "float32") if name in ELEMENTWISE else ("float16", "bfloat16"):
            ours, theirs, error = _pair(CASES.get(name, name), dt)
            for f in (ours, theirs, ours, theirs):
                f()
            time.sleep(0.5)  # the cpu device's -O2 builds start once nothing compiles
            ours()
            t_ours: list[float] = []
            t_torch: list[float] = []
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
