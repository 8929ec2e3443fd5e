"""Suite `train`: training steps end to end (forward, backward, AdamW update), ours against PyTorch eager,
torch.compile (where it works on this machine; not in `--quick`) and tinygrad (TinyJit) in the same run.

Rows (the models in benchmarks.train_models, the same initial weights and batch in every framework):
  mlp          784-512-512-10, ReLU, batch 256 (`--quick`: 784-128-10, batch 64);
  cnn          the digits CNN (tensor.train_digits --cnn's layers), batch 100 (not in `--quick`);
  transformer  two transformer blocks (d 128, 4 heads, GELU MLP) over 8 x 64 tokens (not in `--quick`: its cold
               rows alone, tinygrad's especially, take longer than the quick run's minute);
each with:
    cold     the first step in a fresh process whose kernel cache is an empty temporary CACHEDIR (graph,
             scheduling, lowering, the C compiler and the run), and the second step of that process (ours: with
             the first step's parts, the C compiler's CPU time over all its processes, its runs and the bytes of
             C it read per kernel; both engines: the step's CPU time in the worker process itself and the load
             average, since on a host busy with other work the wall time follows the CPU time). The generated
             rule matchers' bytecode is NOT in that CACHEDIR: like the
             package's own .pyc files it is kept apart (rewrite.codecache: beside the package or in MATCHERDIR,
             by default ~/.cache/uopc-matchers), as an installed package that has run once has it, so the
             suite warms it once per model with an untimed cold run before the timed one, and the JSON says how
             many matchers the timed step still generated (`matchers_generated`, 0 when warm); tinygrad's
             the same (its first TinyJit call, CACHELEVEL=0); torch.compile's: its first step in this process
             (dynamo's trace, inductor's C++ compile; torch already imported, inductor's cache an empty temporary
             directory), or a note saying why torch.compile failed (no C++ compiler or headers, ...);
    steady   one whole step after the check's steps, under tensor.jit (the kernels captured at the second step
             replayed, as tinygrad's TinyJit does): median of N runs, timed in turns with torch eager and tinygrad
             doing the identical step (all threads; torch.compile's the loss's forward and backward
             compiled, the AdamW update eager), and with ours without jit ("ours eager": the graph built,
             hashed and its cached plan replayed at every step; its losses must equal the jit's bit for bit);
    kernels  the kernels one steady step launches, ours and tinygrad's;
    check    the loss of each of the first K steps, ours against torch: max relative difference <= 1e-4; and
             the gradients of every parameter at the initial weights, ours against torch (benchmarks.train_models
             .grad_error) <= 1e-4.
  conv_transpose2d  ConvTranspose2d (N16, 32->16 channels, 16x16 -> 32x32, kernel 4, stride 2, padding 1) forward
           and backward under tensor.jit against torch eager, its output and gradients checked against torch's
           (not in `--quick`);
  conv2d   the same for Conv2d: N32, 32->64 channels, 32x32, 3x3, padding 1; N16, 64->128, 28x28, 3x3,
           stride 2, padding 1; and N16 64 channels 28x28 3x3 depthwise (groups 64) (not in `--quick`);
  digits   `python -m tensor.train_digits`'s MLP (64-64-10, Adam, sklearn digits) trained for its default 12
           epochs (`--quick`: 3): wall time to its held-out accuracy, and that accuracy (needs scikit-learn).

`python -m benchmarks.bench_train --worker ENGINE --config JSON` is the cold row's subprocess side (one JSON line);
`python -m benchmarks.bench_train --steady [MODEL ...]` runs the models' steady rows alone (ours under jit, ours
eager, torch eager, with their checks) and prints their medians: a minute where the suite takes many.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

from benchmarks.kernel_peers import have
from benchmarks.kernel_worker import run_module, split_ours
from benchmarks.runner import Bench, Result, Timed, suite
from benchmarks.train_models import (
    ModelConfig,
    OursTrainer,
    TinygradTrainer,
    TorchTrainer,
    Trainer,
    cnn_config,
    grad_error,
    mlp_config,
    transformer_config,
)

CHECK_RTOL = 1e-4
GRAD_RTOL = 1e-4

FULL = mlp_config(quick=False)
QUICK = mlp_config(quick=True)
TINY = ModelConfig("mlp", 16, (64, 32, 10))  # the test's row


def loss_check(ours: list[float], peer: list[float]) -> tuple[bool, float]:
    rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, peer, strict=True))
    return rel <= CHECK_RTOL, rel


# ---------------------------------------------------------------------------- subprocess side (cold)


def worker(engine: str, cfg: ModelConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    if engine == "ours":
        import tensor  # noqa: F401 -- the user's first line
    else:
        import tinygrad  # noqa: F401
    import_s = time.perf_counter() - t0
    parts: dict[str, float] = {}
    count: dict[str, int] = {}
    sources: list[tuple[str, int]] = []  # (what, C bytes) of each compiler run
    generated = [0]
    if engine == "ours":  # the first step's parts: schedule, lower, render, compile (benchmarks.kernel_worker)
        split_ours(parts, count)
        _count_sources(sources)
        _count_generated(generated)
    m: Trainer = OursTrainer(cfg) if engine == "ours" else TinygradTrainer(cfg)
    parts.clear()
    count.clear()
    sources.clear()
    generated[0] = 0
    cc0, cpu0, load = _children_cpu(), _own_cpu(), os.getloadavg()[0]
    t0 = time.perf_counter()
    loss = m.step()
    first = time.perf_counter() - t0
    made = generated[0]
    step_cpu = _own_cpu() - cpu0  # this process's threads: Python, and the compile threads' waits
    cc_cpu = _children_cpu() - cc0  # the C compiler processes (ours; tinygrad's clang too), every core
    parts = {f"{k}_s": v for k, v in parts.items()}
    t0 = time.perf_counter()
    m.step()
    again = time.perf_counter() - t0
    kernel_files = [n for what, n in sources if what not in ("thread pool", "background")]
    return {"import_s": import_s, "first_s": first, "again_s": again, "loss": loss, "parts": parts,
            "lowered": count.get("lower", 0), "cc_cpu_s": cc_cpu, "step_cpu_s": step_cpu, "load": load,
            "cc_runs": sum(what != "background" for what, _ in sources),
            "cc_background_runs": sum(what == "background" for what, _ in sources),
            "c_bytes": sum(kernel_files), "c_files": len(kernel_files), "matchers_generated": made}


def _own_cpu() -> float:
    """User + system CPU time of this process so far, all its threads."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _children_cpu() -> float:
    """User + system CPU time of this process's finished child processes (the C compiler runs)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _count_sources(out: list[tuple[str, int]]) -> None:
    """Record (what, bytes of C) for each compiler run of the cpu device from now on."""
    from devices.cpu_compiler import Compiler

    run = Compiler._run

    def counted(self: Compiler, src: str, path: str, what: str, *a: Any, **k: Any) -> None:
        # a background -O2 build of a file that ran its -Og build first (CPU_TIERS) is counted apart
        out.append((what if k.get("live") is None else "background", len(src)))
        run(self, src, path, what, *a, **k)

    Compiler._run = counted  # type: ignore[method-assign,assignment]  # the worker process's own instrumentation


def _count_generated(out: list[int]) -> None:
    """Count the rule matchers generated and compiled from now on (none when they come from rewrite.codecache's
    files, as the library's .pyc files do)."""
    from rewrite import match

    make = match._function_code

    def counted(src: str) -> Any:
        out[0] += 1
        return make(src)

    match._function_code = counted  # the worker process's own instrumentation


_WARMED: set[str] = set()  # the configs whose rule matchers an untimed cold run has generated (this process)


def run_worker(cfg: ModelConfig, engine: str = "ours", timeout: float = 900, warm: bool = True
               ) -> tuple[dict[str, Any] | None, str]:
    """The cold worker's JSON for `cfg` in a fresh process with an empty kernel cache; ours: after one untimed
    such run per config (`warm`), so the generated rule matchers are on disk as an installed package that has run
    once has them (they live apart from CACHEDIR: rewrite.codecache)."""
    if engine == "ours" and warm and (label := json.dumps(asdict(cfg))) not in _WARMED:
        _WARMED.add(label)
        run_worker(cfg, engine, timeout, warm=False)
    with tempfile.TemporaryDirectory() as d:
        env = {"CACHEDIR": os.path.join(d, "cache")} if engine == "ours" else {"CACHELEVEL": "0"}
        res, _, err = run_module(["benchmarks.bench_train", "--worker", engine, "--config", json.dumps(asdict(cfg))],
                                 env, timeout, os.path.join(d, "none.npy"))
        return res, err


# ---------------------------------------------------------------------------- the rows


def _cold(b: Bench, cfg: ModelConfig, engine: str) -> dict[str, Any] | None:
    name = cfg.label
    b.say(f"{name}: {engine} cold first step (fresh process, empty kernel cache)")
    res, err = run_worker(cfg, engine)
    if res is None:
        b.note(f"{name}: {engine} cold run failed: {err}")
        return None
    sfx = "" if engine == "ours" else f"/{engine}"
    b.record(Result(f"{name}: cold first step{sfx}", "s", [res["first_s"]], False, None, res))
    b.record(Result(f"{name}: cold second step{sfx}", "ms", [1e3 * res["again_s"]], False, None))
    p = res.get("parts") or {}
    split = "" if not p else (f" (schedule {p.get('schedule_s', 0):.2f} s, lower {p.get('lower_s', 0):.2f} s and "
                              f"render {p.get('render_s', 0):.2f} s for {res.get('lowered', 0)} kernels, compile "
                              f"{p.get('compile_s', 0):.2f} s waited for at the end)")
    if res.get("cc_runs"):
        n = max(1, res.get("lowered", 0))
        split += (f"; C compiler {res['cc_cpu_s']:.2f} s CPU over {res['cc_runs']} runs, {res['c_bytes'] / 1e3:.0f} KB "
                  f"of C in {res['c_files']} kernel files ({res['c_bytes'] / n / 1e3:.1f} KB and "
                  f"{1e3 * res['cc_cpu_s'] / n:.0f} ms of compiler CPU per kernel)")
    if "step_cpu_s" in res:  # on a host busy with other work the wall time tracks the CPU time, not the cores
        split += (f"; CPU {res['step_cpu_s']:.2f} s in this process and {res['cc_cpu_s']:.2f} s in the compiler "
                  f"(load average {res['load']:.1f} on {os.cpu_count()} cores)")
    b.note(f"{name}: {engine} cold first step {res['first_s']:.2f} s (+{res['import_s']:.2f} s import){split}, "
           f"second step {1e3 * res['again_s']:.1f} ms")
    return res


@contextlib.contextmanager
def _env(**kv: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in kv}
    os.environ.update(kv)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _torch_compiled(b: Bench, cfg: ModelConfig, check_steps: int) -> tuple[Trainer, list[float]] | None:
    """torch.compile's trainer after its first check_steps steps (their losses), its first step recorded as its cold
    row (dynamo's trace and inductor's C++ compile, in this process with torch imported, inductor's kernel cache an
    empty temporary directory), or None with a note where torch.compile fails on this machine."""
    name = cfg.label
    b.say(f"{name}: torch.compile, first {check_steps} steps (the first compiles)")
    t = TorchTrainer(cfg, compiled=True)
    with tempfile.TemporaryDirectory() as d, _env(TORCHINDUCTOR_CACHE_DIR=d):
        try:
            t0 = time.perf_counter()
            losses = [t.step()]
            first = time.perf_counter() - t0
            t0 = time.perf_counter()
            losses.append(t.step())
            again = time.perf_counter() - t0
        except Exception as e:  # any compile failure (no C++ compiler or headers, ...) is reported
            msg = (str(e).strip().splitlines() or [""])[0][:200]
            b.note(f"{name}: torch.compile fails on this machine ({type(e).__name__}: {msg}): no torch.compile "
                   "column")
            return None
    losses += [t.step() for _ in range(check_steps - 2)]
    b.record(Result(f"{name}: cold first step/torch.compile", "s", [first], False, None))
    b.record(Result(f"{name}: cold second step/torch.compile", "ms", [1e3 * again], False, None))
    b.note(f"{name}: torch.compile cold first step {first:.2f} s (in this process, torch imported, empty inductor "
           f"cache), second step {1e3 * again:.1f} ms")
    return t, losses


def model_row(b: Bench, cfg: ModelConfig, *, cold: bool = True, check_steps: int = 3, runs: int = 5,
              peers: tuple[str, ...] = ("torch", "tinygrad"), eager: bool = True,
              compiled: bool = True) -> dict[str, Any]:
    """Record one model's figures into b; returns the checks' outcome (what the test asserts on). `compiled`: a
    torch.compile column beside torch eager (where torch is installed and torch.compile works here)."""
    name = cfg.label
    out: dict[str, Any] = {"config": asdict(cfg), "load": os.getloadavg()}
    peers = tuple(p for p in peers if have(p))
    if cold:
        for engine in ("ours", *(p for p in peers if p == "tinygrad")):
            res = _cold(b, cfg, engine)
            if res is not None:
                out[f"cold_{engine}_s"] = res["first_s"]
    b.say(f"{name}: ours, gradients and first {check_steps} steps")
    ours = OursTrainer(cfg)
    grads = ours.grads()
    out["ours_losses"] = [ours.step() for _ in range(check_steps)]
    jobs = [Timed(f"{name}: step/ours", ours.step, 1, "ms", per_item=1e3, runs=runs)]
    engines: list[Trainer] = [ours]
    if eager:  # the same step without tensor.jit: the graph built and hashed again at every step
        again = OursTrainer(cfg, jit=False)
        out["eager_same"] = [again.step() for _ in range(check_steps)] == out["ours_losses"]
        b.note(f"{name}: ours without jit (graph rebuilt each step): the same losses bit for bit: "
               f"{'yes' if out['eager_same'] else 'NO'}")
        eager_job = Timed(f"{name}: step/ours eager", again.step, 1, "ms", per_item=1e3, runs=runs)
    out.update(check_ok=None, rel_err=None, grad_ok=None, grad_err=None)
    for peer in peers:
        b.say(f"{name}: {peer}, first {check_steps} steps")
        t: Trainer = TorchTrainer(cfg) if peer == "torch" else TinygradTrainer(cfg)
        if peer == "torch":
            gerr = grad_error(grads, t.grads())
            out.update(grad_ok=gerr <= GRAD_RTOL, grad_err=gerr)
        losses = [t.step() for _ in range(check_steps)]
        out[f"{peer}_losses"] = losses
        if peer == "torch":
            ok, rel = loss_check(out["ours_losses"], losses)
            out.update(check_ok=ok, rel_err=rel)
            b.note(f"{name}: loss of steps 1..{check_steps} ours vs torch: max rel diff {rel:.1e} -> "
                   f"{'ok' if ok else 'FAIL'} (<= {CHECK_RTOL:g}); gradients at the initial weights: max rel diff "
                   f"{gerr:.1e} -> {'ok' if gerr <= GRAD_RTOL else 'FAIL'} (<= {GRAD_RTOL:g})")
        jobs.append(Timed(f"{name}: step/{peer}", t.step, 1, "ms", per_item=1e3, runs=runs))
        engines.append(t)
    if "torch" not in peers:
        b.note(f"{name}: torch not installed: no torch column, no loss or gradient check")
    elif compiled and check_steps >= 2 and (tc := _torch_compiled(b, cfg, check_steps)) is not None:
        tcomp, out["torch.compile_losses"] = tc
        ok, rel = loss_check(out["ours_losses"], out["torch.compile_losses"])
        out["compile_check_ok"] = ok
        b.note(f"{name}: loss of steps 1..{check_steps} ours vs torch.compile: max rel diff {rel:.1e} -> "
               f"{'ok' if ok else 'FAIL'}")
        jobs.append(Timed(f"{name}: step/torch.compile", tcomp.step, 1, "ms", per_item=1e3, runs=runs))
        engines.append(tcomp)
    if eager:
        jobs.append(eager_job)
    results = b.measure_together(jobs)
    if eager:
        out["eager_ms"] = results.pop().median
    results[0].info.update(out)
    out["steady_ms"] = results[0].median
    for e, r in zip(engines[1:], results[1:], strict=True):
        b.compare(f"{name}: AdamW step vs {e.name}", results[0], r, e.name)
        out[f"{e.name}_ms"] = r.median
    kern = {e.name: e.kernels for e in engines if e.kernels is not None}
    out["kernels"] = kern
    b.note(f"{name}: kernels per steady step: " + ", ".join(f"{k} {v}" for k, v in kern.items()) +
           f" (load average {out['load'][0]:.1f})")
    return out


def mlp_row(b: Bench, cfg: ModelConfig, *, cold: bool = True, check_steps: int = 3, runs: int = 5) -> dict[str, Any]:
    """The MLP row against torch eager alone (the test's)."""
    return model_row(b, cfg, cold=cold, check_steps=check_steps, runs=runs, peers=("torch",), compiled=False)


def digits_row(b: Bench, epochs: int) -> None:
    if not have("sklearn"):
        b.note("digits: scikit-learn not installed: no digits row")
        return
    from tensor import train_digits

    b.say(f"digits MLP: {epochs} epochs")
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stderr(io.StringIO()):
        t0 = time.perf_counter()
        acc = train_digits.main(["--epochs", str(epochs), "--save", os.path.join(d, "digits.safetensors")])
        wall = time.perf_counter() - t0
    b.record(Result(f"digits mlp 64-64-10: {epochs} epochs", "s", [wall], False, None, {"accuracy": acc}))
    b.record(Result("digits mlp 64-64-10: test accuracy", "%", [100 * acc], True, None))
    b.note(f"digits: {epochs} epochs of tensor.train_digits (Adam lr 0.01, batch 100, incl. save+reload check) "
           f"in {wall:.1f} s to test accuracy {acc:.4f} (kernel cache as this process finds it)")


CONVT = (16, 32, 16, 16, 4, 2, 1)  # N, Cin, Cout, H=W, kernel, stride, padding: a DCGAN generator's upsampling layer
# the same for conv2d (an 8th field: groups): a ResNet-style 3x3 layer, a strided one that halves the image, and a
# MobileNet-style depthwise one
CONVS = ((32, 32, 64, 32, 3, 1, 1), (16, 64, 128, 28, 3, 2, 1), (16, 64, 64, 28, 3, 1, 1, 64))


def conv_row(b: Bench, runs: int = 7, shape: tuple[int, ...] = CONVT, transposed: bool = True) -> dict[str, Any]:
    """ConvTranspose2d (or, not `transposed`, Conv2d) forward and backward (output, input and weight gradients of
    sum(y * g)), ours under tensor.jit against torch eager; the three results checked against torch's."""
    import numpy as np

    from tensor.jit import jit
    from tensor.nn import conv2d, conv_transpose2d
    from tensor.tensor import Tensor

    n, cin, cout, hw, k, st, pd = shape[:7]
    grp = shape[7] if len(shape) > 7 else 1
    what = "conv_transpose2d" if transposed else "conv2d"
    label = f"{what} N{n} {cin}->{cout} {hw}x{hw} k{k} s{st} p{pd}" + (f" groups {grp}" if grp > 1 else "")
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((n, cin, hw, hw)).astype(np.float32)
    wshape = (cin, cout // grp, k, k) if transposed else (cout, cin // grp, k, k)
    wn = (0.1 * rng.standard_normal(wshape)).astype(np.float32)
    o = (hw - 1) * st - 2 * pd + k if transposed else (hw + 2 * pd - k) // st + 1
    gn = rng.standard_normal((n, cout, o, o)).astype(np.float32)
    x, w, g = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True), Tensor(gn)
    fn = conv_transpose2d if transposed else conv2d

    def ours(xt: Tensor, wt: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        xt.grad = wt.grad = None
        y = fn(xt, wt, stride=st, padding=pd, groups=grp)
        (y * g).sum().backward()
        assert xt.grad is not None and wt.grad is not None
        Tensor.realize(y, xt.grad, wt.grad)
        return y, xt.grad, wt.grad

    b.say(f"{label}: ours")
    step = jit(ours)
    got = [[v.numpy() for v in step(x, w)] for _ in range(3)][-1]  # the third call replays
    jobs = [Timed(f"{label}: fwd+bwd/ours", lambda _: step(x, w), 1, "ms", per_item=1e3, runs=runs)]
    out: dict[str, Any] = {}
    if have("torch"):
        import torch

        tx, tw, tg = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True), torch.tensor(gn)
        tfn = torch.nn.functional.conv_transpose2d if transposed else torch.nn.functional.conv2d

        def theirs(_: object = None) -> list[Any]:
            tx.grad = tw.grad = None
            ty = tfn(tx, tw, stride=st, padding=pd, groups=grp)
            (ty * tg).sum().backward()
            return [ty, tx.grad, tw.grad]

        ref = [v.detach().numpy() for v in theirs()]
        err = max(float(np.abs(a - r).max() / np.abs(r).max()) for a, r in zip(got, ref, strict=True))
        out.update(err=err, ok=err <= GRAD_RTOL)
        b.note(f"{label}: output and gradients ours vs torch: max rel diff {err:.1e} -> "
               f"{'ok' if err <= GRAD_RTOL else 'FAIL'} (<= {GRAD_RTOL:g})")
        jobs.append(Timed(f"{label}: fwd+bwd/torch", theirs, 1, "ms", per_item=1e3, runs=runs))
    else:
        b.note(f"{label}: torch not installed: no torch column, no check")
    res = b.measure_together(jobs)
    if len(res) == 2:
        b.compare(f"{label}: fwd+bwd vs torch", res[0], res[1], "torch")
    out["ours_ms"] = res[0].median
    return out


@suite("train")
def train(b: Bench) -> None:
    cfgs = [mlp_config(True)] if b.quick else [mlp_config(False), cnn_config(False), transformer_config(False)]
    b.note("AdamW lr 1e-3 wd 0.01, float32, the same initial weights and batch in ours, torch eager and tinygrad "
           "(TinyJit, its CPU device)")
    if b.quick:
        b.note("torch.compile: not in --quick (its first compile alone takes ~20 s here)")
    for i, cfg in enumerate(cfgs):
        b.case(cfg.label, of=len(cfgs) + (1 if b.quick else 2 + len(CONVS)) if i == 0 else None)
        model_row(b, cfg, runs=5 if b.quick else 7, compiled=not b.quick)
    if not b.quick:
        b.case("conv_transpose2d")
        conv_row(b)
        for shape in CONVS:
            b.case(f"conv2d s{shape[5]}" + (f" g{shape[7]}" if len(shape) > 7 else ""))
            conv_row(b, shape=shape, transposed=False)
    b.case("digits")
    digits_row(b, 3 if b.quick else 12)


STEADY = {"mlp": FULL, "cnn": cnn_config(False), "transformer": transformer_config(False)}


def steady(models: list[str], runs: int) -> list[Result]:
    """The suite's steady rows alone (no cold runs, torch eager the only peer): per model, ours under jit, ours
    eager and torch eager timed in turns, after the checks (the eager losses bit for bit the jit's, the losses and
    gradients against torch's). Prints a table: each figure's median wall and CPU time per step."""
    b = Bench("train")
    for name in models:
        out = model_row(b, STEADY[name], cold=False, runs=runs, peers=("torch",), compiled=False)
        if not out.get("eager_same") or out.get("check_ok") is False or out.get("grad_ok") is False:
            print(f"{name}: CHECK FAILED: {out}", file=sys.stderr)
    rows = [r for r in b.results if "step/" in r.name]
    width = max(len(r.name) for r in rows)
    print(f"{'':{width}s}  {'wall ms':>8s}  {'cpu ms':>8s}  runs")
    for r in rows:
        print(f"{r.name:{width}s}  {r.median:8.2f}  {r.cpu_median or 0:8.2f}  {len(r.samples)}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_train",
                                 description="subprocess side of the train suite (run the suite with "
                                             "`python -m benchmarks train`); --steady: its steady rows alone")
    ap.add_argument("--steady", nargs="*", choices=sorted(STEADY), metavar="MODEL",
                    help=f"time the steady steps of these models (default all: {', '.join(STEADY)})")
    ap.add_argument("--runs", type=int, default=7, help="--steady: the most timed runs per figure")
    ap.add_argument("--worker", choices=("ours", "tinygrad"))
    ap.add_argument("--config", help="ModelConfig fields as JSON")
    args = ap.parse_args(argv)
    if args.steady is not None:
        steady(args.steady or list(STEADY), args.runs)
        return 0
    if args.worker is None or args.config is None:
        ap.error("--worker and --config are required (or --steady)")
    fields = json.loads(args.config)
    fields["sizes"] = tuple(fields["sizes"])
    print(json.dumps(worker(args.worker, ModelConfig(**fields))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
