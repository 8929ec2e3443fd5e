"""`python -m benchmarks gpu [--quick] [--json PATH] [--cases a,b] [--variants "K=v;K=v,K2=v"]`: our cuda kernels
against torch CUDA, in one run.

For each case of the kernel suite (benchmarks.kernel_cases, at GPU sizes, plus matmul 4096 in float16 and
bfloat16, and float32 plain and on tf32 tensor cores: dtype "tf32" runs ours under ALLOW_TF32=1 and torch with
allow_tf32, both on float32 inputs) the inputs are put on the GPU once, the graph is realized once (first call:
lowering and the compile by NVRTC or nvcc, cold when the kernel cache is empty) and checked
against torch, then each of our kernels is timed alone with CUDA events
on its buffers (mean of `reps` back-to-back launches), and the sum is compared with torch eager's time for the
same expression (also CUDA events, after a warm-up). torch runs with TF32 and reduced-precision reductions off
(`strict_torch`): cuDNN's default TF32 convolutions are off by ~1e-3 per product, which read as a 0.03 error of
our float32 conv2d (8,64,56,56), whose kernel the python grid emulator and the cpu device agree with.
Elementwise cases are also rated against the device-to-device
copy bandwidth measured here (cuMemcpyDtoD, read + write bytes). Kernels that are not GPU-shaped (fewer than a
warp of threads in all) are reported and not timed at large sizes, since one thread would take minutes.

`--variants` runs the cases once per group of knob settings (groups separated by ';', settings by ','; e.g.
"WGMMA=1;WGMMA=1,TMA=1" for Hopper's warpgroup MMA fed by cp.async, then by the TMA), each row marked with its
group, in one process: the device, the copy bandwidth and torch are set up once.

Prints a table and writes JSON (default results/bench-gpu.json). Exits 0 when no GPU is present, saying so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from benchmarks.kernel_cases import Case, tensor_graph

MIN_THREADS = 32


def gpu_cases(quick: bool) -> list[tuple[Case, str]]:
    if quick:
        return [(Case("add_1M", "add 1M", "add", (1 << 20,)), "float32"),
                (Case("sum_1M", "sum 1M", "sum", (1 << 20,)), "float32"),
                (Case("softmax_1024", "softmax 1024x1024", "softmax", (1024, 1024)), "float32"),
                (Case("matmul_512", "matmul 512", "matmul", (512,)), "float32"),
                (Case("matmul_1024_fp16", "matmul 1024 fp16", "matmul", (1024,)), "float16")]
    return [(Case("add_16M", "add 16M", "add", (1 << 24,)), "float32"),
            (Case("chain_16M", "elementwise chain 16M", "chain", (1 << 24,)), "float32"),
            (Case("sum_16M", "sum 16M", "sum", (1 << 24,)), "float32"),
            (Case("softmax_4096", "softmax 4096x4096", "softmax", (4096, 4096)), "float32"),
            (Case("layernorm", "layernorm 16384x1024", "layernorm", (16384, 1024)), "float32"),
            (Case("matmul_1024", "matmul 1024", "matmul", (1024,)), "float32"),
            (Case("matmul_4096_fp16", "matmul 4096 fp16", "matmul", (4096,)), "float16"),
            (Case("matmul_4096_bf16", "matmul 4096 bf16", "matmul", (4096,)), "bfloat16"),
            (Case("matmul_4096", "matmul 4096", "matmul", (4096,)), "float32"),
            (Case("matmul_4096_tf32", "matmul 4096 tf32", "matmul", (4096,)), "tf32"),
            (Case("conv", "conv2d (8,64,56,56)->64", "conv", (8, 64, 56, 56, 64)), "float32"),
            (Case("attention", "attention 8x8x512x64", "attention", (8, 8, 512, 64)), "float32"),
            # last (a step's time limit cuts the last cases): a half conv on the tensor cores as an implicit GEMM
            # (lower.wmma.tc_flatten; the input window gathered through div/mod, no cp.async) against cuDNN's
            (Case("conv_fp16", "conv2d (8,64,56,56)->64 fp16", "conv", (8, 64, 56, 56, 64)), "float16")]


def copy_bandwidth(dev: Any, nbytes: int = 256 << 20, reps: int = 10) -> float:
    """Device-to-device copy GB/s (bytes read + written) with cuMemcpyDtoD, timed by CUDA events."""
    from rewrite.dtype import dtypes

    a, b = dev.alloc(nbytes, dtypes.uint8), dev.alloc(nbytes, dtypes.uint8)
    drv = dev.driver
    drv.dtod(b.ptr, a.ptr, nbytes)
    s, e = drv.event(), drv.event()
    drv.record(s)
    for _ in range(reps):
        drv.dtod(b.ptr, a.ptr, nbytes)
    drv.record(e)
    ms = drv.elapsed_ms(s, e) / reps
    dev.free(a)
    dev.free(b)
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _bytes_and_flops(case: Case, itemsize: int) -> tuple[float, float]:
    ins = sum(math.prod(s) for s in case.shapes())
    mem = (ins + case.out_elems()) * itemsize
    d = case.dims
    if case.kind == "matmul":
        return mem, 2.0 * d[0] ** 3
    if case.kind == "conv":
        b, ci, h, w, co = d
        return mem, 2.0 * b * co * h * w * ci * 9
    if case.kind == "attention":
        b, hd, t, e = d
        return mem, 4.0 * b * hd * t * t * e
    return mem, 0.0


def ours(case: Case, dtype: str, xs: list[np.ndarray], reps: int) -> dict[str, Any]:
    """Compile (timed: lowering + nvcc, cold when the kernel cache is empty), refuse to run kernels that are not
    GPU-shaped on big inputs, realize once for the check, then time each kernel alone with CUDA events."""
    from devices.cuda import DEVICE
    from lower import buffers
    from lower.realize import get_kernel
    from lower.schedule import schedule
    from rewrite.env import Context
    from tensor import Tensor

    if dtype == "tf32":
        with Context(ALLOW_TF32=True):
            return ours(case, "float32", xs, reps)
    ts = [Tensor(x, device="cuda").cast(dtype) if dtype != "float32" else Tensor(x, device="cuda") for x in xs]
    for t in ts:
        t.realize()
    with Context(DEVICE="cuda"):
        items, _ = schedule([tensor_graph(case, ts).uop])
    work = [it for it in items if it.kind == "kernel" and it.ast is not None]
    t0 = time.perf_counter()
    ks = [get_kernel(it.ast, "cuda", it.name, it.bufs) for it in work]  # type: ignore[arg-type]
    compile_s = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    for it, k in zip(work, ks, strict=True):
        grid, block = k.launch_dims({})
        rows.append({"name": it.name, "grid": grid, "block": block, "threads": math.prod(grid) * math.prod(block)})
    big = math.prod(case.shapes()[0]) > (1 << 16)
    if big and any(r["threads"] < MIN_THREADS for r in rows):
        for r in rows:
            if r["threads"] < MIN_THREADS:
                r["skipped"] = f"{r['threads']} thread(s): not GPU-shaped"
        return {"out": None, "compile_s": compile_s, "ms": math.nan, "kernels": rows,
                "skipped": "a kernel is not GPU-shaped (fewer than a warp of threads); not run at this size"}
    t0 = time.perf_counter()
    out = tensor_graph(case, ts).realize()
    got = out.cast("float32").numpy() if dtype != "float32" else out.numpy()
    first = time.perf_counter() - t0
    total_ms = 0.0
    for it, k, r in zip(work, ks, rows, strict=True):
        arrays, mine = {}, []
        for i, b in enumerate(it.bufs):
            if buffers.has_data(b):
                arrays[i] = buffers.lookup(b)
            else:  # an intermediate or the output: fresh zeroed memory of its size
                arr = DEVICE.alloc(math.prod(b.shape), b.dtype)
                arr[:] = np.zeros(arr.size, arr.dtype)
                arrays[i] = arr
                mine.append(arr)
        r["ms"] = k.time(arrays, reps=reps)
        for arr in mine:
            DEVICE.free(arr)
        total_ms += r["ms"]
    return {"out": got, "compile_s": compile_s, "first_s": first, "ms": total_ms, "kernels": rows}


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference relative to the reference's magnitude plus 1 (so values near 0 are not amplified)."""
    return float(np.max(np.abs(got - want) / (np.abs(want) + 1)))


def strict_torch() -> None:
    """torch as an oracle: float32 convolutions and matmuls in float32 (no TF32), 16-bit GEMMs reduced in float32."""
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False


def torch_run(case: Case, dtype: str, xs: list[np.ndarray], reps: int) -> dict[str, Any]:
    import torch

    strict_torch()
    if dtype == "tf32":  # torch's float32 matmul on tf32 tensor cores, as ours under ALLOW_TF32=1
        torch.backends.cuda.matmul.allow_tf32 = True
    tdt = {"float32": torch.float32, "tf32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    ts = [torch.from_numpy(x).to("cuda").to(tdt) for x in xs]

    def run() -> Any:
        with torch.inference_mode():
            return tensor_graph(case, ts, conv=lambda x, w: torch.nn.functional.conv2d(x, w, padding=1))

    out = run()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        run()
    e.record()
    torch.cuda.synchronize()
    return {"out": out.float().cpu().numpy(), "ms": s.elapsed_time(e) / reps}


def torch_copy_bandwidth(nbytes: int = 256 << 20, reps: int = 10) -> float:
    import torch

    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        b.copy_(a)
    e.record()
    torch.cuda.synchronize()
    return 2 * nbytes / (s.elapsed_time(e) / reps * 1e-3) / 1e9


def parse_variants(text: str) -> list[dict[str, str]]:
    """The --variants groups: [{knob: value}, ...] ([{}]: one run as the environment sets the knobs); ValueError
    for a setting that is not KNOB=value or a knob that is not declared (rewrite/env.py)."""
    from rewrite.env import KNOBS

    groups: list[dict[str, str]] = []
    for group in filter(None, (g.strip() for g in text.split(";"))):
        settings: dict[str, str] = {}
        for item in filter(None, (x.strip() for x in group.split(","))):
            name, eq, value = item.partition("=")
            if not eq or name not in KNOBS:
                raise ValueError(f"--variants: {item!r} is not KNOB=value with a declared knob ({', '.join(KNOBS)})")
            KNOBS[name].parse(value)
            settings[name] = value
        groups.append(settings)
    return groups or [{}]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=os.path.join("results", "bench-gpu.json"))
    ap.add_argument("--cases", default="", help="comma-separated case keys (default: all)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--variants", default="", help="';'-separated groups of ','-separated KNOB=value settings: the "
                    "cases run once under each group (default: once, as the environment sets the knobs)")
    args = ap.parse_args(argv)
    try:
        variants = parse_variants(args.variants)
    except ValueError as e:
        ap.error(str(e))
    from devices.cuda import DEVICE

    ok, why = DEVICE.available()
    if not ok:
        print(f"no GPU: {why}")
        return 0
    target = DEVICE.default_target()
    try:
        import torch

        have_torch = bool(torch.cuda.is_available())
    except ImportError:
        have_torch = False
    from devices.cuda_compile import cuda_compiler

    comp = cuda_compiler()
    print(f"device: {why}; target: {target}; compiler: {comp.name} {comp.version}; torch CUDA: {have_torch}",
          flush=True)
    bw = copy_bandwidth(DEVICE)
    tbw = torch_copy_bandwidth() if have_torch else math.nan
    print(f"device-to-device copy: ours {bw:.0f} GB/s, torch {tbw:.0f} GB/s (read + write bytes)", flush=True)
    cases = gpu_cases(args.quick)
    if args.cases:
        want = set(args.cases.split(","))
        cases = [c for c in cases if c[0].key in want]
    rows: list[dict[str, Any]] = []

    def save() -> None:  # after every case too: a run cut off by its time limit keeps the figures it has
        os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
        with open(args.json, "w") as f:
            json.dump({"device": why, "target": str(target), "compiler": f"{comp.name} {comp.version}", "beam":
                       os.environ.get("BEAM", "0"), "copy_gbs": bw, "torch_copy_gbs": tbw, "rows": rows}, f,
                      indent=1, default=str)

    header = f"{'case':28s} {'ours ms':>9s} {'torch ms':>9s} {'ours/torch':>10s} {'GB/s':>7s} {'%copy':>6s} " \
             f"{'TFLOP/s':>8s} {'compile s':>9s} {'ok':>3s}"
    print(header, flush=True)
    from rewrite.env import Context

    for (case, dtype), variant in [(c, v) for v in variants for c in cases]:
        rng = np.random.default_rng(1234)
        xs = [rng.standard_normal(s).astype(np.float32) for s in case.shapes()]
        label = ",".join(f"{k}={v}" for k, v in variant.items())
        title = f"{case.title} [{label}]" if label else case.title
        row: dict[str, Any] = {"case": case.key, "title": title, "dtype": dtype, "variant": label}
        try:
            with Context(**variant):
                o = ours(case, dtype, xs, args.reps)
            row.update({k: v for k, v in o.items() if k != "out"})
            if have_torch and o["out"] is not None:
                t = torch_run(case, dtype, xs, args.reps)
                row["torch_ms"] = t["ms"]
                if dtype == "tf32":
                    # two tf32 products differ by their own roundings (torch's and ours): both are checked against
                    # the float32 product, and ours may be at most twice as far from it as torch's
                    exact = torch_run(case, "float32", xs, 1)["out"]
                    err = _rel_err(o["out"], exact)
                    row["torch_rel_err"] = _rel_err(t["out"], exact)
                    row["max_rel_err"], row["ok"] = err, err <= max(2 * row["torch_rel_err"], 1e-3)
                else:
                    err = _rel_err(o["out"], t["out"])
                    row["max_rel_err"], row["ok"] = err, err < (5e-2 if dtype != "float32" else 1e-3)
            itemsize = 4 if dtype in ("float32", "tf32") else 2
            mem, flops = _bytes_and_flops(case, itemsize)
            ms = row["ms"]
            row["gbs"] = mem / (ms * 1e-3) / 1e9 if ms == ms and ms > 0 else math.nan
            row["tflops"] = flops / (ms * 1e-3) / 1e12 if flops and ms == ms and ms > 0 else math.nan
            row["pct_copy"] = 100 * row["gbs"] / bw if case.kind in ("add", "chain") else math.nan
        except Exception as e:  # one broken case must not cost the others' figures
            row["error"] = f"{type(e).__name__}: {e}"[:400]
        rows.append(row)
        save()
        if "error" in row:
            print(f"{title:28s} ERROR {row['error'][:200]}", flush=True)
            continue
        ratio = row.get("torch_ms", math.nan) / row["ms"] if row["ms"] == row["ms"] else math.nan
        print(f"{title:28s} {row['ms']:9.3f} {row.get('torch_ms', math.nan):9.3f} {ratio:10.2f} "
              f"{row['gbs']:7.0f} {row['pct_copy']:6.1f} {row['tflops']:8.2f} {row['compile_s']:8.2f} "
              f"{'yes' if row.get('ok') else 'NO':>3s}  {row.get('skipped', '')}", flush=True)
        for k in row["kernels"]:
            timing = k.get("skipped") or "{:.3f} ms".format(k.get("ms", math.nan))
            print(f"    {k['name']:32s} grid {k['grid']} block {k['block']} {timing}", flush=True)
    print("ours/torch > 1: ours faster (GPU time from CUDA events; ours = the sum of its kernels); "
          "%copy: elementwise bytes/s against the measured device-to-device copy", flush=True)
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
