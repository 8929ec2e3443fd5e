"""How well the GPU benchmark's kernels use memory, measured in the python device's grid emulator (ACCESSSTATS):
`python -m benchmarks.gpu_access [--sm sm_90] [--cases matmul_4096_fp16,...]`.

Each case of benchmarks.gpu (gpu_cases) runs at a smaller size (`SMALL`: the emulator interprets every thread),
with the OptOps the heuristics choose for the full size (lowered at that size up to the symbolic stage,
lower.gpu.gpu_opts), so the tiles, block shapes and shared-memory layouts are the full-size kernel's; where a
full-size opt does not apply to the small kernel, or the two schedule to different kernels, the small kernel's
own heuristics are used (marked "own"). Per kernel it prints the shared-memory wavefronts against their ideal and
the global sectors against theirs (devices.python_access's rules), and the instruction furthest from its ideal.
A GPU's own profiler (Nsight Compute's l1tex__data_bank_conflicts / sectors per request) is the reference where a
GPU is at hand; this is the proxy CI can run."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from math import prod
from typing import Any

import numpy as np

# the cases' smaller sizes (benchmarks.gpu's dims -> these)
SMALL: dict[str, tuple[int, ...]] = {
    "add_16M": (1 << 16,),
    "chain_16M": (1 << 16,),
    "sum_16M": (1 << 16,),
    "softmax_4096": (16, 4096),
    "layernorm": (32, 1024),
    "matmul_1024": (128,),
    "matmul_4096_fp16": (128,),
    "matmul_4096_bf16": (128,),
    "matmul_4096": (128,),
    "matmul_4096_tf32": (128,),
    "conv": (1, 32, 8, 8, 64),
    "attention": (1, 1, 128, 64),
    "conv_fp16": (1, 32, 8, 8, 64),
}


def _kernels(case: Any, dt: str, sm: str) -> list[Any]:
    """The case's scheduled kernel items on the python device under PYTHON_TARGET=sm (its inputs random)."""
    from benchmarks.kernel_cases import tensor_graph
    from lower.schedule import schedule
    from rewrite.env import Context
    from tensor import Tensor

    rng = np.random.default_rng(0)
    with Context(PYTHON_TARGET=sm):
        xs = [Tensor(rng.standard_normal(s).astype(np.float32), device="python").cast(dt).realize()
              for s in case.shapes()]
        items, _ = schedule([tensor_graph(case, xs).uop])
    return items


def _full_opts(case: Any, dt: str, sm: str, target: Any) -> list[list | None]:
    """The heuristics' opts of each kernel of the full-size case (None where a kernel's sizes are symbolic)."""
    from lower.gpu import gpu_opts
    from lower.stages import lower_kernel
    from rewrite.env import Context
    from tensor import Tensor

    with Context(PYTHON_TARGET=sm):
        xs = [Tensor.empty(*s, dtype=dt, device="python").realize() for s in case.shapes()]
        from benchmarks.kernel_cases import tensor_graph
        from lower.schedule import schedule

        items, _ = schedule([tensor_graph(case, xs).uop])
    return [gpu_opts(lower_kernel(it.ast, target, upto="symbolic"), target) for it in items
            if it.kind == "kernel" and it.ast is not None]


def run_case(case: Any, dt: str, sm: str, tf32: bool) -> list[tuple[str, str, Any, float]]:
    """(kernel name, "full" or "own" opts, its KernelAccess, emulator seconds) of each kernel of the small case."""
    from dataclasses import replace

    from devices import get_device
    from devices.base import gpu_target
    from devices.memory import np_dtype
    from devices.python_access import counting
    from lower.buffers import has_data, lookup
    from lower.stages import lower_kernel
    from rewrite.env import Context
    from rewrite.errors import KernelOptError

    target = gpu_target(sm, tf32=tf32).with_(device="python")
    full = _full_opts(case, dt, sm, target)
    small = replace(case, dims=SMALL[case.key])
    items = _kernels(small, dt, sm)
    kernels = [it for it in items if it.kind == "kernel" and it.ast is not None]
    same = len(kernels) == len(full)
    py = get_device("python")
    arrays: dict[Any, np.ndarray] = {}

    def array(b: Any) -> np.ndarray:
        key = b.arg.slot
        if key not in arrays:
            arrays[key] = np.asarray(lookup(b)).reshape(-1).copy() if has_data(b) else \
                np.zeros(prod(b.shape), np_dtype(b.dtype))
        return arrays[key]

    out = []
    for it in items:
        if it.kind == "copy":
            array(it.bufs[0])[:] = array(it.bufs[1])
            continue
        i = kernels.index(it)
        how, lin = "own", None
        with Context(PYTHON_TARGET=sm):
            if same and full[i]:
                try:
                    lin, how = lower_kernel(it.ast, target, opts=full[i], name=it.name), "full"
                except KernelOptError:
                    lin = None
            if lin is None:
                lin = lower_kernel(it.ast, target, name=it.name)
        kern = py.compile(lin, it.name, target)
        t = time.perf_counter()
        with counting() as got:
            kern({j: array(b) for j, b in enumerate(it.bufs)})
        out.append((it.name, how, got[0], time.perf_counter() - t))
    return out


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ratio(cost: int, ideal: int) -> str:
    return f"{cost}/{ideal} ({ideal / cost:.0%})" if cost else "-"


def main(argv: list[str] | None = None) -> None:
    from benchmarks.gpu import gpu_cases

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--sm", default="sm_90", choices=("sm_80", "sm_86", "sm_89", "sm_90"))
    ap.add_argument("--cases", default="", help="comma-separated case keys (default: all)")
    args = ap.parse_args(argv)
    want = set(args.cases.split(",")) if args.cases else None
    print(f"# python -m benchmarks.gpu_access --sm {args.sm}: {cpu_name()}, Python {platform.python_version()}")
    print("# shared: wavefronts/ideal (efficiency); global: sectors/ideal; worst: the instruction furthest from its "
          "ideal (cost/ideal over its requests)")
    head = f"{'case (emulated size)':38} {'kernel':24} {'opts':4} {'shared req':>10} {'wavefronts/ideal':>18} " \
           f"{'global req':>10} {'sectors/ideal':>20} {'s':>5}  worst"
    print(head)
    for case, dtype in gpu_cases(False):
        if want is not None and case.key not in want:
            continue
        dt = "float32" if dtype == "tf32" else dtype
        label = f"{case.key} {'x'.join(map(str, SMALL[case.key]))} {dtype}"
        for name, how, k, secs in run_case(case, dt, args.sm, dtype == "tf32"):
            worst = [w for w in (k.worst("shared"), k.worst("global")) if w is not None]
            bad = max(worst, key=lambda w: w.excess) if worst else None
            note = "" if bad is None else \
                f"{bad.where.split(', ', 1)[1]} {bad.space} {bad.kind} {bad.cost}/{bad.ideal} ({bad.requests} req)"
            print(f"{label:38} {name[:24]:24} {how:4} {k.shared_requests:>10} "
                  f"{_ratio(k.wavefronts, k.ideal_wavefronts):>18} {k.global_requests:>10} "
                  f"{_ratio(k.sectors, k.ideal_sectors):>20} {secs:5.1f}  {note}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
