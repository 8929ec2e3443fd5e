"""Suite `model`: a 6-layer BERT encoder forward (all-MiniLM-L6-v2 shapes, batch 8 x 128 tokens, random weights;
benchmarks.bert_model) end to end, against numpy and PyTorch eager.

Figures:
  cold     the first call in a fresh process whose kernel cache is an empty temporary CACHEDIR: graph,
           scheduling, lowering, the C compiler and one run. The worker splits it by wrapping the pipeline's
           entry points: `schedule` (kernel split), `lower` (graph to LINEAR, Python), `compile` (rendering and
           the C compiler, wall time: a batch's chunks compile in parallel; the compiler runs' own times, summed,
           are in the note), the rest is the run and the plan's bookkeeping. `lower/kernel` is the Python
           lowering per distinct kernel;
  steady   a whole forward in this process after a warm-up (graph built again, the plan replayed, kernels
           run): median over >= 3 runs; `kernels` is the schedule's kernel count;
  peers    the same forward in numpy (float32) and PyTorch eager (all threads, inference mode) when importable;
  check    every engine's result against the numpy float64 forward, to 1e-4 of the result's scale.

`--quick`: 2 layers, batch 2 x 64 tokens (the other shapes as the model). `python -m benchmarks.bench_model
--worker` is the subprocess side (prints one JSON line).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from benchmarks.bert_model import MINILM, BertConfig, check, forward_numpy, forward_ours, forward_torch, weights
from benchmarks.kernel_peers import have
from benchmarks.kernel_worker import run_module, timed
from benchmarks.runner import Bench, Result, suite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUICK = BertConfig(layers=2, batch=2, seq=64)


def config(quick: bool) -> BertConfig:
    return QUICK if quick else MINILM


class OursModel:
    """Weights uploaded and realized once; `run` builds the forward's graph and realizes it (the user's call)."""

    def __init__(self, cfg: BertConfig, w: dict[str, np.ndarray]) -> None:
        from tensor import Tensor

        self.cfg = cfg
        self.w = {k: Tensor(v) for k, v in w.items()}
        for t in self.w.values():
            t.realize()

    def run(self, _: object = None) -> Any:
        return forward_ours(self.cfg, self.w).realize()

    def kernels(self) -> int:
        from lower.schedule import schedule

        items, _ = schedule([forward_ours(self.cfg, self.w).uop])
        return sum(it.kind == "kernel" for it in items)


# ---------------------------------------------------------------------------- subprocess side (cold)


def worker(cfg: BertConfig, out_path: str | None) -> dict[str, Any]:
    """The cold first call in this fresh process, split into its parts, then one more call."""
    w = weights(cfg)
    t0 = time.perf_counter()
    import tensor  # noqa: F401 -- the user's first line

    import_s = time.perf_counter() - t0
    from devices.cpu import Compiler, CPUDevice

    realize_mod = importlib.import_module("lower.realize")  # `lower.realize` the attribute is the function
    acc: dict[str, float] = {}
    count: dict[str, int] = {}
    timed(realize_mod, "schedule", acc, "schedule")
    timed(realize_mod, "lower_kernel", acc, "lower", count)
    timed(CPUDevice, "compile_batch", acc, "compile", count)
    timed(Compiler, "_run", acc, "compiler processes", count)  # summed over the runs a batch makes in parallel
    m = OursModel(cfg, w)
    setup = dict(acc)  # uploading the weights: not the forward's
    acc.clear()
    count.clear()
    t0 = time.perf_counter()
    out = m.run()
    first = time.perf_counter() - t0
    parts = dict(acc)
    lowered = count.get("lower", 0)
    if out_path:
        np.save(out_path, out.numpy())
    t0 = time.perf_counter()
    m.run()
    again = time.perf_counter() - t0
    return {"import_s": import_s, "first_s": first, "again_s": again, "setup": setup, "parts": parts,
            "lowered": lowered, "compiler_runs": count.get("compiler processes", 0), "kernels": m.kernels()}


def run_worker(cfg: BertConfig, timeout: float = 1800) -> tuple[dict[str, Any] | None, np.ndarray | None, str]:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.npy")
        cache = os.path.join(d, "cache")  # an empty kernel cache: every kernel is compiled
        return run_module(["benchmarks.bench_model", "--worker", "--out", out, "--config", json.dumps(asdict(cfg))],
                          {"CACHEDIR": cache}, timeout, out)


# ---------------------------------------------------------------------------- the suite


@suite("model")
def model(b: Bench) -> None:
    cfg = config(b.quick)
    b.note(f"BERT encoder: {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} heads, inter {cfg.inter}, vocab "
           f"{cfg.vocab}, batch {cfg.batch} x {cfg.seq} tokens, float32, random weights (seed)")
    w = weights(cfg)
    b.say("numpy float64 reference")
    ref = forward_numpy(cfg, w, np.float64)

    b.case("ours cold", of=4 if have("torch") else 3)
    b.say("ours cold (fresh process, empty kernel cache)")
    res, arr, err = run_worker(cfg)
    if res is None:
        b.note(f"cold run failed: {err}")
    else:
        ok, rel = check(arr, ref) if arr is not None else (False, float("nan"))
        parts = res["parts"]
        info = {k: res[k] for k in ("import_s", "again_s", "lowered", "compiler_runs", "kernels")}
        info.update({f"{k}_s": v for k, v in parts.items()})
        b.record(Result("cold first call", "s", [res["first_s"]], False, None, info))
        for k in ("schedule", "lower", "compile"):
            if k in parts:
                b.record(Result(f"cold: {k}", "s", [parts[k]], False, None))
        if res["lowered"]:
            b.record(Result("cold: lower/kernel", "ms", [1e3 * parts.get("lower", 0.0) / res["lowered"]], False,
                            None, {"kernels_lowered": res["lowered"]}))
        b.note(f"cold: {res['first_s']:.2f} s (+{res['import_s']:.2f} s import); schedule "
               f"{parts.get('schedule', 0):.2f} s, lower {parts.get('lower', 0):.2f} s for {res['lowered']} kernels, "
               f"compile {parts.get('compile', 0):.2f} s wall ({res['compiler_runs']} compiler runs, "
               f"{parts.get('compiler processes', 0):.2f} s summed); second call "
               f"{res['again_s']:.3f} s; check {'ok' if ok else 'FAIL'} (rel err {rel:.1e})")

    b.case("ours steady")
    b.say("ours warm-up")
    ours = OursModel(cfg, w)
    out = ours.run()
    ok, rel = check(out.numpy(), ref)
    del out
    nk = ours.kernels()
    runs = 5 if b.quick else 3
    steady = b.measure("steady forward/ours", ours.run, work=1, unit="ms", per_item=1e3, runs=runs,
                       info={"kernels": nk, "check_ok": ok, "rel_err": rel})
    b.note(f"ours: {nk} kernels; check {'ok' if ok else 'FAIL'} (rel err {rel:.1e}); "
           f"{cfg.flops() / 1e9 / (steady.median / 1e3):.1f} GFLOP/s of matmul work")
    del ours

    b.case("numpy")
    npo = forward_numpy(cfg, w)
    b.note(f"numpy float32: check {'ok' if check(npo, ref)[0] else 'FAIL'} (rel err {check(npo, ref)[1]:.1e})")
    pr = b.measure("steady forward/numpy", lambda _: forward_numpy(cfg, w), work=1, unit="ms", per_item=1e3,
                   runs=runs)
    b.compare("forward vs numpy", steady, pr, "numpy")
    if have("torch"):
        import torch

        b.case("torch eager")
        torch.set_num_threads(os.cpu_count() or 1)
        tw = {k: torch.from_numpy(v) for k, v in w.items()}

        def run_torch(_: object = None) -> Any:
            with torch.inference_mode():
                return forward_torch(cfg, tw)

        tok, trel = check(run_torch().numpy(), ref)
        b.note(f"torch eager: check {'ok' if tok else 'FAIL'} (rel err {trel:.1e})")
        tr = b.measure("steady forward/torch", run_torch, work=1, unit="ms", per_item=1e3, runs=runs)
        b.compare("forward vs torch eager", steady, tr, "torch")
    else:
        b.note("PyTorch is not importable: no torch column")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_model",
                                 description="subprocess side of the model suite (run the suite with "
                                             "`python -m benchmarks model`)")
    ap.add_argument("--worker", action="store_true", required=True)
    ap.add_argument("--config", required=True, help="BertConfig fields as JSON")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    print(json.dumps(worker(BertConfig(**json.loads(args.config)), args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
