"""`python -m benchmarks.gpu_compile [--sm sm_90] [--json PATH]`: cold compile time per CUDA kernel, NVRTC against
nvcc. Needs no GPU.

The GPU benchmark's kernels (benchmarks.gpu.gpu_cases: its matmuls, softmax, layernorm, conv, attention, ...)
are scheduled and lowered for the target once; then each kernel's source is compiled alone, cold (CACHE=0:
no disk cache), by every compiler that is installed, and the wall time of each compile is recorded (the
render is outside the timing, done once). Prints one line per compiler (kernels, mean and median ms, the
slowest kernel) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np


def lowered_kernels(sm: str, tf32: bool = True) -> list[tuple[str, Any]]:
    """(name, LINEAR) of every kernel of the GPU benchmark's cases, lowered for `sm` (float32 matmuls on tf32
    tensor cores with `tf32`)."""
    from benchmarks.gpu import gpu_cases
    from benchmarks.kernel_cases import tensor_graph
    from devices.base import gpu_target
    from lower.schedule import schedule
    from lower.stages import lower_kernel
    from tensor import Tensor

    target = gpu_target(sm, tf32=tf32)
    out: list[tuple[str, Any]] = []
    for case, dtype in gpu_cases(False):
        dt = "float32" if dtype == "tf32" else dtype
        xs = [Tensor(np.zeros(s, np.float32)).cast(dt).realize() for s in case.shapes()]
        items, _ = schedule([tensor_graph(case, xs).uop])
        out += [(f"{case.key}_{it.name}", lower_kernel(it.ast, target, name=it.name)) for it in items
                if it.kind == "kernel" and it.ast is not None]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_compile", description=__doc__.split("\n")[0])
    ap.add_argument("--sm", default="sm_90")
    ap.add_argument("--json", default=os.path.join("results", "bench-gpu-compile.json"))
    args = ap.parse_args(argv)
    from devices.base import gpu_target
    from devices.cuda import DEVICE
    from devices.cuda_compile import NVCC, NVRTC
    from devices.cuda_render import kernel_symbol, render_cuda_source, render_kernel
    from devices.linear import analyze
    from rewrite.env import Context
    from rewrite.errors import CompileError

    target = gpu_target(args.sm, tf32=True)
    t0 = time.perf_counter()
    kernels = lowered_kernels(args.sm)
    print(f"{len(kernels)} kernels lowered for {args.sm} in {time.perf_counter() - t0:.1f} s", flush=True)
    sources = []
    for name, lin in kernels:
        prog = analyze(lin, "cuda", DEVICE.supported_ops, kernel_symbol(name))
        helpers: dict[str, str] = {}
        sources.append((name, render_cuda_source([render_kernel(prog, prog.name, helpers)], helpers)))
    result: dict[str, Any] = {"sm": args.sm, "kernels": [n for n, _ in sources], "compilers": {}}
    for comp in (NVRTC(), NVCC()):
        try:
            version = comp.version
        except CompileError as e:
            print(f"{comp.name}: not installed ({str(e)[:120]})", flush=True)
            continue
        times = []
        with Context(CACHE=0):
            comp.cubin(sources[0][1], target, "warm-up")  # the library load / first process start aside
            for _, src in sources:
                t = time.perf_counter()
                comp.cubin(src, target)
                times.append((time.perf_counter() - t) * 1e3)
        slow = max(range(len(times)), key=lambda i: times[i])
        result["compilers"][comp.name] = {"version": version, "ms": times}
        print(f"{comp.name} {version}: {len(times)} kernels, mean {statistics.mean(times):.0f} ms, median "
              f"{statistics.median(times):.0f} ms, slowest {sources[slow][0]} {times[slow]:.0f} ms", flush=True)
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
