"""`python -m benchmarks.gpu_compile_tinygrad --json PATH`: tinygrad's CUDA backend's cold compile time per kernel,
for the GPU benchmark's cases (benchmarks.gpu.gpu_cases, the same shapes and dtypes). Needs tinygrad, and a GPU
for DEV=CUDA; without one, DEV=NULL:CUDA:sm_90 (tinygrad's null device with its CUDA renderer and NVRTC, given by
NVRTC_PATH) compiles the same kernels and runs nothing. benchmarks.gpu_compile runs it in a subprocess with DEV
(benchmarks.gpu_compile.tinygrad_dev), CACHELEVEL=0 (no compile cache: every kernel cold) and PARALLEL=0
(kernels compiled one by one in this process, so each is timed alone).

Per kernel it times tinygrad.engine.realize.to_program, which takes a kernel's AST to a compiled PROGRAM: its
optimizations, linearize, render, and NVRTC -- the same span as ours in benchmarks.gpu_compile's "full" column
(lower_kernel, render, compile). Writes {"kernels": [names], "ms": [times], "cases": [the case of each kernel],
"error": null or why} and prints a
summary line; exits 0 with the error recorded when tinygrad or its CUDA device is missing. `--cases a,b` keeps those
cases only; `--cubins DIR` writes each kernel's binary there (a cubin where NVRTC made one: the null device), named
in the JSON's "cubins" (benchmarks.gpu_sass reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any


def measure(tiny: bool = False, only: list[str] | None = None, cubins: str | None = None) -> dict[str, Any]:
    import re

    import tinygrad.engine.realize as tg_realize
    from tinygrad import Tensor, dtypes

    from benchmarks.gpu import gpu_cases
    from benchmarks.kernel_cases import Case, tensor_graph

    names: list[str] = []
    times: list[float] = []
    of_case: list[str] = []
    files: list[str] = []
    now = [""]  # the case being realized
    inner = tg_realize.to_program

    def timed(ast: Any, renderer: Any) -> Any:
        t = time.perf_counter()
        out = inner(ast, renderer)
        times.append((time.perf_counter() - t) * 1e3)
        names.append(str(getattr(out, "name", None) or getattr(getattr(ast, "arg", None), "name", "?")))
        of_case.append(now[0])
        binary = out.src[-1].arg if getattr(out, "src", None) else None
        if cubins is not None and isinstance(binary, bytes):
            files.append(f"{len(files)}_{re.sub(r'[^A-Za-z0-9_]', '', now[0])}.cubin")
            with open(os.path.join(cubins, files[-1]), "wb") as f:
                f.write(binary)
        return out

    tg_realize.to_program = timed  # type: ignore[assignment]  # wrapped for timing; restored below
    try:
        dts = {"float32": dtypes.float32, "tf32": dtypes.float32, "float16": dtypes.half, "bfloat16": dtypes.bfloat16}
        device = os.environ.get("DEV", "CUDA").split(":")[0]
        cases = [(Case("add_tiny", "add", "add", (64,)), "float32"), (Case("mm_tiny", "matmul", "matmul", (16,)),
                                                                    "float16")] if tiny else gpu_cases(False)
        for case, dtype in cases:
            if only is not None and case.key not in only:
                continue
            now[0] = case.key
            xs = [Tensor.empty(*s, dtype=dts[dtype], device=device) for s in case.shapes()]
            tensor_graph(case, xs).realize()
    finally:
        tg_realize.to_program = inner  # type: ignore[assignment]
    return {"kernels": names, "ms": times, "cases": of_case, "cubins": files, "error": None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_compile_tinygrad", description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=os.path.join("results", "bench-gpu-compile-tinygrad.json"))
    ap.add_argument("--tiny", action="store_true", help="two tiny cases (a smoke test, e.g. with DEV=PYTHON)")
    ap.add_argument("--cases", default="", help="the cases to compile (comma-separated keys; default: all)")
    ap.add_argument("--cubins", default=None, help="a folder for each kernel's binary")
    args = ap.parse_args(argv)
    try:
        from importlib.metadata import version

        result = measure(args.tiny, [c for c in args.cases.split(",") if c] or None, args.cubins)
        result["version"] = version("tinygrad")
    except Exception as e:  # any failure (not installed, no CUDA device) is the recorded answer
        result = {"kernels": [], "ms": [], "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if result["ms"]:
        ms = result["ms"]
        dev = os.environ.get("DEV", "CUDA")
        print(f"tinygrad {result.get('version')} {dev}: {len(ms)} kernels, mean {statistics.mean(ms):.0f} ms, "
              f"median {statistics.median(ms):.0f} ms (to_program: optimize, linearize, render, NVRTC)", flush=True)
    else:
        print(f"tinygrad: no figures ({result['error']})", flush=True)
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
