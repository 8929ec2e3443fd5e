"""`python -m benchmarks.gpu_compile [--sm sm_90] [--json PATH] [--no-tinygrad] [--tinygrad-dev DEV]`: cold compile
time per CUDA kernel, NVRTC against nvcc, and against tinygrad's CUDA backend. Neither needs a GPU: without one,
tinygrad runs on its null device with its CUDA renderer and NVRTC for the arch (`tinygrad_dev`).

The GPU benchmark's kernels (benchmarks.gpu.gpu_cases: its matmuls, softmax, layernorm, conv, attention, ...)
are scheduled, then each is lowered for the target (timed per kernel: `lower_ms`) and rendered (`render_ms`);
then each kernel's source is compiled alone, cold (CACHE=0: no disk cache), by every compiler that is
installed, and the wall time of each compile is recorded. A kernel's "full" time is lower + render + compile,
the span tinygrad's to_program covers (its optimizations, linearize, render, NVRTC), which
benchmarks.gpu_compile_tinygrad measures in a subprocess (DEV=CUDA CACHELEVEL=0 PARALLEL=0) for the same cases;
its error is recorded where tinygrad or a GPU is missing. Prints one line per compiler (kernels, mean and median
ms, the slowest kernel), the full-time comparison, and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any


def lowered_kernels(sm: str, tf32: bool | None = True, lower_ms: list[float] | None = None,
                    cases: list[str] | None = None, only: list[str] | None = None) -> list[tuple[str, Any]]:
    """(name, LINEAR) of every kernel of the GPU benchmark's cases (those whose key `only` lists, when given),
    lowered for `sm` (float32 matmuls on tf32 tensor cores with `tf32`; None: as benchmarks.gpu runs them, only the
    "tf32" cases, which it runs under ALLOW_TF32=1); each lowering's wall time (ms) appended to
    `lower_ms` when given, each kernel's case to `cases`. The graphs are
    built on the python device with PYTHON_TARGET=sm, whose Target is the GPU's, so they schedule as on the cuda
    device (on the cpu device a matmul's right operand got the cpu's packing copy, a kernel more)."""
    from benchmarks.gpu import gpu_cases
    from benchmarks.kernel_cases import tensor_graph
    from devices.base import gpu_target
    from lower.schedule import schedule
    from lower.stages import lower_kernel
    from rewrite.env import Context
    from tensor import Tensor

    targets = {t: gpu_target(sm, tf32=t) for t in (False, True)}
    out: list[tuple[str, Any]] = []
    known = [c.key for c, _ in gpu_cases(False)]
    if only is not None and (unknown := [c for c in only if c not in known]):
        raise ValueError(f"unknown GPU benchmark case(s) {', '.join(unknown)}; the cases are {', '.join(known)}")
    for case, dtype in gpu_cases(False):
        if only is not None and case.key not in only:
            continue
        dt = "float32" if dtype == "tf32" else dtype
        with Context(PYTHON_TARGET=sm):
            xs = [Tensor.empty(*s, dtype=dt, device="python").realize() for s in case.shapes()]
            items, _ = schedule([tensor_graph(case, xs).uop])
        for it in items:
            if it.kind == "kernel" and it.ast is not None:
                t = time.perf_counter()
                target = targets[dtype == "tf32" if tf32 is None else tf32]
                out.append((f"{case.key}_{it.name}", lower_kernel(it.ast, target, name=it.name)))
                if lower_ms is not None:
                    lower_ms.append((time.perf_counter() - t) * 1e3)
                if cases is not None:
                    cases.append(case.key)
    return out


def tinygrad_dev(sm: str) -> str:
    """tinygrad's device for its cold compile: CUDA where the CUDA driver loads (a GPU machine), else
    NULL:CUDA:<sm>, tinygrad's null device with its CUDA renderer, tensor cores and NVRTC for that arch: the same
    optimizations, rendering and NVRTC compile, with no GPU to run on. There NVRTC gives a cubin (SASS), as ours
    does; on a GPU tinygrad's CUDA device asks NVRTC for PTX and leaves PTX to SASS to the driver's first load,
    outside the span timed."""
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
        return "CUDA"
    except OSError:
        return f"NULL:CUDA:{sm}"


def tinygrad_compile(path: str, dev: str, timeout: float = 45.0, tiny: bool = False,
                     extra: list[str] | None = None) -> dict[str, Any]:
    """benchmarks.gpu_compile_tinygrad's result on tinygrad device `dev`, run in a subprocess with `extra`
    arguments (its error where it could not run). On the null device tinygrad is pointed at the NVRTC library ours
    loads (NVRTC_PATH)."""
    import subprocess

    env = {**os.environ, "DEV": dev, "CACHELEVEL": "0", "PARALLEL": "0"}
    if dev.startswith("NULL") and "NVRTC_PATH" not in env:
        from devices.cuda_compile import _find_nvrtc
        from rewrite.errors import CompileError

        try:
            env["NVRTC_PATH"] = _find_nvrtc()[1]
        except CompileError as e:
            return {"kernels": [], "ms": [], "error": str(e)[:300], "dev": dev}
    try:
        subprocess.run([sys.executable, "-m", "benchmarks.gpu_compile_tinygrad", "--json", path,
                        *(["--tiny"] if tiny else []), *(extra or [])], env=env, timeout=timeout, check=False)
        with open(path) as f:
            return {**json.load(f), "dev": dev}
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return {"kernels": [], "ms": [], "error": f"{type(e).__name__}: {e}", "dev": dev}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_compile", description=__doc__.split("\n")[0])
    ap.add_argument("--sm", default="sm_90")
    ap.add_argument("--json", default=os.path.join("results", "bench-gpu-compile.json"))
    ap.add_argument("--no-tinygrad", action="store_true", help="skip tinygrad's CUDA backend")
    ap.add_argument("--tinygrad-dev", default="", help="tinygrad's device (default: CUDA on a GPU machine, else "
                    "NULL:CUDA:<sm>, its CUDA renderer and NVRTC with no GPU)")
    ap.add_argument("--compilers", default="nvrtc,nvcc", help="ours to time, in order (nvrtc, nvcc)")
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
    lower_ms: list[float] = []
    cases: list[str] = []
    kernels = lowered_kernels(args.sm, lower_ms=lower_ms, cases=cases)
    print(f"{len(kernels)} kernels lowered for {args.sm} in {time.perf_counter() - t0:.1f} s", flush=True)
    sources, render_ms = [], []
    for name, lin in kernels:
        t = time.perf_counter()
        prog = analyze(lin, "cuda", DEVICE.supported_ops, kernel_symbol(name))
        helpers: dict[str, str] = {}
        sources.append((name, render_cuda_source([render_kernel(prog, prog.name, helpers)], helpers)))
        render_ms.append((time.perf_counter() - t) * 1e3)
    result: dict[str, Any] = {"sm": args.sm, "kernels": [n for n, _ in sources], "cases": cases, "lower_ms": lower_ms,
                              "render_ms": render_ms, "compilers": {}}

    def save() -> None:  # after each part too: a run cut off by its time limit keeps what it measured
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)

    wanted = [c.strip() for c in args.compilers.split(",") if c.strip()]
    comps = {"nvrtc": NVRTC, "nvcc": NVCC}
    order: list[Any] = [comps[c]() for c in wanted if c in comps]
    if not args.no_tinygrad:  # tinygrad right after the first of ours (NVRTC, the compiler in use on a GPU)
        order.insert(1, None)
    for comp in order:
        if comp is None:
            tinygrad_part(result, args.tinygrad_dev or tinygrad_dev(args.sm))
            save()
            continue
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
        full = [a + b + c for a, b, c in zip(lower_ms, render_ms, times, strict=True)]
        result["compilers"][comp.name] = {"version": version, "ms": times, "full_ms": full}
        save()
        print(f"{comp.name} {version}: {len(times)} kernels, compile mean {statistics.mean(times):.0f} ms, median "
              f"{statistics.median(times):.0f} ms, slowest {sources[slow][0]} {times[slow]:.0f} ms; full (lower + "
              f"render + compile) mean {statistics.mean(full):.0f} ms, median {statistics.median(full):.0f} ms",
              flush=True)
    save()
    return 0


def tinygrad_part(result: dict[str, Any], dev: str) -> None:
    """tinygrad's cold compile per kernel (on tinygrad device `dev`) into result["tinygrad"], compared with ours
    (NVRTC, full) if measured."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tg = tinygrad_compile(os.path.join(tmp, "tinygrad.json"), dev)
    result["tinygrad"] = tg
    ours = result["compilers"].get("nvrtc", {}).get("full_ms")
    if tg["ms"] and ours:
        r = statistics.median(tg["ms"]) / statistics.median(ours)
        print(f"cold compile per kernel, median: ours (nvrtc, full) {statistics.median(ours):.0f} ms over "
              f"{len(ours)} kernels, tinygrad {dev} {statistics.median(tg['ms']):.0f} ms over {len(tg['ms'])} "
              f"kernels: tinygrad/ours {r:.2f} (> 1: ours faster)", flush=True)
        by_case(result["cases"], ours, tg.get("cases") or [], tg["ms"])
    else:
        print(f"tinygrad comparison: none ({tg.get('error') or 'no nvrtc figures of ours'})", flush=True)


def by_case(ours_cases: list[str], ours: list[float], tg_cases: list[str], tg: list[float]) -> None:
    """Each case's cold compile, all its kernels together (what a user waits for before its first run), ours
    (NVRTC, full) against tinygrad's, and the geometric mean of tinygrad/ours over the cases both compiled."""
    ratios = []
    for case in dict.fromkeys(ours_cases):
        a = sum(t for c, t in zip(ours_cases, ours, strict=True) if c == case)
        b = sum(t for c, t in zip(tg_cases, tg, strict=True) if c == case)
        na, nb = ours_cases.count(case), tg_cases.count(case)
        if nb:
            ratios.append(b / a)
        print(f"  {case:18s} ours {a:7.0f} ms ({na} kernels)  tinygrad {b:7.0f} ms ({nb} kernels)"
              + (f"  tinygrad/ours {b / a:5.2f}" if nb else ""), flush=True)
    if ratios:
        print(f"per case, tinygrad/ours geometric mean {statistics.geometric_mean(ratios):.2f} over {len(ratios)} "
              f"cases (> 1: ours faster)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
