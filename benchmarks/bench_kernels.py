"""Suite `kernels`: what our generated CPU kernels achieve on common ops, against this machine's limits and peers.

Cases (full run): add 16M, a fused elementwise chain 16M, sum 16M, softmax 4096x4096, layernorm 16384x1024,
matmul 512/1024/2048, conv2d 3x3 (8,64,56,56) -> 64 channels (pad 1), attention (batch 8, 8 heads, 512 tokens,
head dim 64). `--quick`: add 1M, sum 1M, softmax 512x512, matmul 256, conv2d (1,32,28,28) -> 32.
All float32, inputs standard normal from a fixed seed, built with `tensor.Tensor` on the default device (cpu).

For each case:
  cold    the first realize (graph, schedule, lowering, C compile, run) in a fresh subprocess with CACHE=0, so
          no kernel or e-graph comes from disk; `compile` is that minus the same process's next realize;
  steady  wall time of a whole realize in this process after two warm-up calls (building the graph again,
          scheduling it, kernel-cache hits, running): median, min..max and IQR over >= 5 runs;
  exec    the same kernels re-run from an already built schedule (lower.realize.run_schedule): the kernels'
          own cost without the per-call Python of scheduling;
  rate    from the steady median: GFLOP/s for matmul, conv and attention, else GB/s of compulsory traffic
          (every input read once, the output written once: the floor a fused kernel needs);
  % limit the rate as a share of this machine's limit for the threads our kernels used (benchmarks.limits):
          the widest FMA peak for GFLOP/s cases, the DRAM STREAM triad for GB/s cases (the 12 MiB cache-level
          triad is in the JSON too: working sets of tens of MiB stay in the LLC, see machine-limits.md);
  check   our result against numpy in float64 (np.allclose); a wrong result marks the row FAIL;
  peers   numpy (in process; OpenBLAS threads as it defaults), PyTorch eager with all threads (in process, when
          importable), tinygrad (a subprocess with DEV=CPU CACHELEVEL=0, when installed): steady medians the
          same way, and tinygrad's cold first call too. Ratios are ours over peer in throughput (>1: we are
          faster). tinygrad's CPU backend compiles with clang (`--target=`, which gcc rejects): no clang, no
          tinygrad column. Each engine's runs form one block rather than taking turns with another's
          (Bench.measure_together): on this 2-vCPU machine OpenBLAS's and OpenMP's workers keep spinning for
          a while after a call (machine-limits.md notes 2-3) and would take a core from whoever ran next.

FLOP counts: add 1 and the chain 7 per element; sum 1; softmax 5 (max, subtract, exp, sum, divide); layernorm 7
(mean, subtract, square, mean, scale, weight, bias); matmul 2n^3; conv 2*B*Co*H*W*Ci*9; attention the QK^T and
PV products, 2*B*H*T*T*D each, plus 6 per score for the 1/sqrt(D) scale and the softmax.

Run as `python -m benchmarks kernels [--quick]`; `python -m benchmarks.bench_kernels --worker ...` is the
subprocess side (one case, one engine; prints one JSON line).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks import limits as machine_limits
from benchmarks.runner import Bench, Progress, Result, fmt_value, suite

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 1234
EPS = 1e-5  # layernorm


# ---------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    kind: str
    dims: tuple[int, ...]

    @property
    def compute_bound(self) -> bool:
        """Rated in GFLOP/s (against the FMA peak) rather than GB/s (against stream bandwidth)."""
        return self.kind in ("matmul", "conv", "attention")

    def shapes(self) -> list[tuple[int, ...]]:
        d = self.dims
        if self.kind in ("add",):
            return [d, d]
        if self.kind == "chain":
            return [d, d, d]
        if self.kind in ("sum", "softmax"):
            return [d]
        if self.kind == "layernorm":
            return [d, d[-1:], d[-1:]]
        if self.kind == "matmul":
            return [(d[0], d[0]), (d[0], d[0])]
        if self.kind == "conv":
            b, ci, h, w, co = d
            return [(b, ci, h, w), (co, ci, 3, 3)]
        if self.kind == "attention":
            b, hd, t, e = d
            return [(b, hd, t, e)] * 3
        raise ValueError(self.kind)

    def out_elems(self) -> int:
        d = self.dims
        if self.kind == "sum":
            return 1
        if self.kind == "matmul":
            return d[0] * d[0]
        if self.kind == "conv":
            return d[0] * d[4] * d[2] * d[3]
        return math.prod(self.shapes()[0])

    def flops(self) -> float:
        d = self.dims
        n = math.prod(self.shapes()[0])
        per_elem = {"add": 1, "chain": 7, "sum": 1, "softmax": 5, "layernorm": 7}
        if self.kind in per_elem:
            return float(per_elem[self.kind] * n)
        if self.kind == "matmul":
            return 2.0 * d[0] ** 3
        if self.kind == "conv":
            b, ci, h, w, co = d
            return 2.0 * b * co * h * w * ci * 9
        b, hd, t, e = d
        return 4.0 * b * hd * t * t * e + 6.0 * b * hd * t * t

    def bytes(self) -> float:
        """Compulsory traffic: each input read once, the output written once (float32)."""
        return 4.0 * (sum(math.prod(s) for s in self.shapes()) + self.out_elems())

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(SEED)
        return [rng.standard_normal(s, dtype=np.float32) for s in self.shapes()]


def _cases(quick: bool) -> list[Case]:
    if quick:
        return [Case("add_1M", "add 1M", "add", (1 << 20,)), Case("sum_1M", "sum 1M", "sum", (1 << 20,)),
                Case("softmax_512", "softmax 512x512", "softmax", (512, 512)),
                Case("matmul_256", "matmul 256", "matmul", (256,)),
                Case("conv_small", "conv2d (1,32,28,28)->32", "conv", (1, 32, 28, 28, 32))]
    return [Case("add_16M", "add 16M", "add", (1 << 24,)),
            Case("chain_16M", "elementwise chain 16M", "chain", (1 << 24,)),
            Case("sum_16M", "sum 16M", "sum", (1 << 24,)),
            Case("softmax_4096", "softmax 4096x4096", "softmax", (4096, 4096)),
            Case("layernorm", "layernorm 16384x1024", "layernorm", (16384, 1024)),
            Case("matmul_512", "matmul 512", "matmul", (512,)), Case("matmul_1024", "matmul 1024", "matmul", (1024,)),
            Case("matmul_2048", "matmul 2048", "matmul", (2048,)),
            Case("conv", "conv2d (8,64,56,56)->64", "conv", (8, 64, 56, 56, 64)),
            Case("attention", "attention 8x8x512x64", "attention", (8, 8, 512, 64))]


def all_cases() -> dict[str, Case]:
    return {c.key: c for c in _cases(False) + _cases(True)}


# ---------------------------------------------------------------------------- the computations


def tensor_graph(case: Case, xs: list[Any], conv: Callable[[Any, Any], Any] | None = None) -> Any:
    """The case as Tensor methods. Our Tensor, tinygrad's and torch's all accept these spellings, so every
    engine that has a Tensor runs literally the same expression (`conv` overrides conv2d where it differs)."""
    k = case.kind
    if k == "add":
        return xs[0] + xs[1]
    if k == "chain":
        a, b, c = xs
        return ((a * b + c) * 0.5 - a).relu() * b + c
    if k == "sum":
        return xs[0].sum()
    if k == "softmax":
        return xs[0].softmax(-1)
    if k == "layernorm":
        x, w, b = xs
        xc = x - x.mean(-1, keepdim=True)
        return xc * ((xc * xc).mean(-1, keepdim=True) + EPS).rsqrt() * w + b
    if k == "matmul":
        return xs[0] @ xs[1]
    if k == "conv":
        return conv(xs[0], xs[1]) if conv is not None else xs[0].conv2d(xs[1], padding=1)
    q, kk, v = xs
    return (q @ kk.transpose(-1, -2) * (1.0 / math.sqrt(case.dims[3]))).softmax(-1) @ v


def numpy_graph(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    """The case in plain numpy (float32 in, float32 out; float64 in gives the reference)."""
    k = case.kind
    if k == "add":
        return xs[0] + xs[1]
    if k == "chain":
        a, b, c = xs
        return np.maximum((a * b + c) * 0.5 - a, 0) * b + c
    if k == "sum":
        return np.asarray(xs[0].sum())
    if k == "softmax":
        return _np_softmax(xs[0])
    if k == "layernorm":
        x, w, b = xs
        xc = x - x.mean(-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + EPS) * w + b
    if k == "matmul":
        return xs[0] @ xs[1]
    if k == "conv":
        x, w = xs
        # im2col: a strided window view, which tensordot copies into one matrix for a single BLAS gemm
        win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
        return np.ascontiguousarray(np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2))
    q, kk, v = xs
    return _np_softmax(q @ kk.swapaxes(-1, -2) * (1.0 / math.sqrt(case.dims[3]))) @ v


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check(case: Case, got: np.ndarray, xs: list[np.ndarray], ref: np.ndarray) -> tuple[bool, float]:
    """Whether `got` matches the float64 reference, and the error relative to the result's scale. The scale of a
    sum is the sum of magnitudes (its rounding error grows with that, not with the result)."""
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    if not np.all(np.isfinite(got)):
        return False, float("inf")
    scale = float(np.abs(xs[0]).astype(np.float64).sum()) if case.kind == "sum" else float(np.abs(ref).max())
    scale = max(scale, 1e-30)
    tol = {"add": 1e-6, "chain": 1e-6, "sum": 1e-6, "softmax": 1e-5, "layernorm": 1e-5}.get(case.kind, 1e-4)
    err = float(np.abs(got - ref).max()) / scale
    return bool(np.allclose(got, ref, rtol=tol, atol=tol * scale)), err


def reference(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    return numpy_graph(case, [x.astype(np.float64) for x in xs])


# ---------------------------------------------------------------------------- engines


class Engine:
    """One way to compute a case: `run` is the timed call (the argument is the runner's unused setup state),
    `result` turns its output into an ndarray for the check."""

    name = ""

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        self.case = case

    def run(self, _: object = None) -> Any:
        raise NotImplementedError

    def result(self, out: Any) -> np.ndarray:
        return np.asarray(out.numpy())


class Ours(Engine):
    """Our Tensor: inputs realized once; `run` builds the graph again and realizes it (the whole user call)."""

    name = "ours"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        from tensor import Tensor

        self.case, self.T = case, Tensor
        self.xs = [Tensor(x) for x in xs]
        for t in self.xs:
            t.realize()

    def run(self, _: object = None) -> Any:
        return tensor_graph(self.case, self.xs).realize()

    def kernels(self) -> tuple[Callable[[object], None], list[dict[str, object]]]:
        """A function that re-runs the case's kernels from one prebuilt schedule, and what each kernel is
        (name, thread slices) -- read from the compiled kernels, so the count follows the lead's optimizer."""
        from lower.realize import get_kernel, run_schedule
        from lower.schedule import schedule
        from rewrite.env import getenv

        items, outs = schedule([tensor_graph(self.case, self.xs).uop])
        keep = set(outs.values())
        info = []
        for it in items:
            if it.kind != "kernel" or it.ast is None:
                continue
            dev = getattr(it.bufs[0].arg, "device", None)
            k = get_kernel(it.ast, dev if isinstance(dev, str) else str(getenv("DEVICE")), it.name)
            info.append({"name": it.name, "slices": _slices(k)})

        def rerun(_: object = None) -> None:
            run_schedule(items, keep=keep)

        return rerun, info


def _slices(kernel: Any) -> int:
    """How many core_id slices a compiled kernel runs (1: single-threaded); 1 when it cannot be told."""
    try:
        from devices.linear import special_bound

        prog = kernel.prog
        if not prog.specials or getattr(kernel, "entry", None) is None:
            return 1
        return math.prod(special_bound(sp, {}, kernel.name) for sp in prog.specials.values())
    except Exception:  # the device's internals are the lead's to change: then count it as one thread
        return 1


def our_threads(kinfo: list[dict[str, object]]) -> int:
    """Threads our kernels can keep busy: the largest slice count, capped by the thread pool's size."""
    from devices import cpu_pool

    most = max((int(k["slices"]) for k in kinfo), default=1)  # type: ignore[call-overload]
    return max(1, min(most, cpu_pool.threads()))


class NumpyPeer(Engine):
    name = "numpy"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        self.case, self.xs = case, xs

    def run(self, _: object = None) -> np.ndarray:
        return numpy_graph(self.case, self.xs)

    def result(self, out: Any) -> np.ndarray:
        return np.asarray(out)


class TorchPeer(Engine):
    """PyTorch eager on all threads; gradients off (inference), as our Tensor computes none."""

    name = "torch"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        self.torch, self.case = torch, case
        self.xs = [torch.from_numpy(x) for x in xs]

    def run(self, _: object = None) -> Any:
        t = self.torch
        with t.inference_mode():
            return tensor_graph(self.case, self.xs, conv=lambda x, w: t.nn.functional.conv2d(x, w, padding=1))


class TinygradPeer(Engine):
    """tinygrad's Tensor; realize, then wait for the device (its CPU queue may run asynchronously)."""

    name = "tinygrad"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        from tinygrad import Device, Tensor

        self.case, self.dev = case, Device[Device.DEFAULT]
        self.xs = [Tensor(x).realize() for x in xs]
        self.dev.synchronize()

    def run(self, _: object = None) -> Any:
        out = tensor_graph(self.case, self.xs).realize()
        self.dev.synchronize()
        return out


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------- subprocess side


def worker(engine: str, key: str, runs: int, out_path: str | None) -> dict[str, Any]:
    """One case on one engine in this (fresh) process: the first call cold, then one or two more to separate
    compile from run, then `runs` steady runs (0: none). Writes the first result to `out_path` (.npy) for
    checking."""
    case = all_cases()[key]
    xs = case.inputs()
    t0 = time.perf_counter()
    eng: Engine = Ours(case, xs) if engine == "ours" else TinygradPeer(case, xs)
    setup_s = time.perf_counter() - t0  # imports and input upload: a per-process cost, not the kernel's
    t0 = time.perf_counter()
    out = eng.run()
    first = time.perf_counter() - t0
    if out_path:
        np.save(out_path, eng.result(out))
    del out
    again = []
    for _ in range(2 if first < 1.0 else 1):  # a slow case's run time is known well enough from one call
        t0 = time.perf_counter()
        eng.run()
        again.append(time.perf_counter() - t0)
    res: dict[str, Any] = {"engine": engine, "case": key, "setup_s": setup_s, "first_s": first,
                              "again_s": again, "compile_s": max(0.0, first - min(again))}
    if runs:
        b = Bench("kernels-worker", False, Progress(open(os.devnull, "w")))  # noqa: SIM115 -- lives as long as b
        res["steady"] = b.measure(f"{case.key}/{engine}", eng.run, work=1, unit="ms", per_item=1e3,
                                  runs=runs).to_json()
    return res


def run_worker(engine: str, case: Case, runs: int, env: dict[str, str], timeout: float = 900
               ) -> tuple[dict[str, Any] | None, np.ndarray | None, str]:
    """Run `worker` in a fresh interpreter; returns (its JSON, its first result, error text)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.npy")
        cmd = [sys.executable, "-m", "benchmarks.bench_kernels", "--worker", engine, "--case", case.key,
               "--runs", str(runs), "--out", out]
        full_env = dict(os.environ, **env)
        full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
        try:
            r = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, None, f"timed out after {timeout:.0f} s"
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return None, None, f"exit {r.returncode}: " + " | ".join(tail)
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
        if line is None:
            return None, None, "no result line"
        arr = np.load(out) if os.path.exists(out) else None
        return json.loads(line), arr, ""


def result_from_json(d: dict[str, Any]) -> Result:
    return Result(d["name"], d["unit"], list(d["samples"]), bool(d["higher_is_better"]), d.get("fgn"),
                  dict(d.get("info") or {}), d.get("cpu_samples"))


# ---------------------------------------------------------------------------- the suite


class _Bar:
    """Wraps the runner's status line with a progress bar over the cases (the runner's own line says which
    run of which figure is going on; this adds how far the whole suite is)."""

    def __init__(self, inner: Progress, total: int) -> None:
        self.inner, self.total, self.done_n, self.case = inner, total, 0, ""

    def update(self, msg: str) -> None:
        filled = round(20 * self.done_n / max(self.total, 1))
        self.inner.update(f"[{'#' * filled}{'.' * (20 - filled)}] {self.done_n}/{self.total} {self.case} | {msg}")

    def done(self) -> None:
        self.inner.done()


@contextlib.contextmanager
def _progress_bar(b: Bench, total: int) -> Iterator[_Bar]:
    bar = _Bar(b.progress, total)
    b.progress = bar  # type: ignore[assignment]
    try:
        yield bar
    finally:
        b.progress = bar.inner


@dataclass
class Row:
    """Everything the summary table and the plot need about one case."""

    case: Case
    ok: bool = False
    err: float = float("nan")
    threads: int = 1
    kernels: int = 0
    cold: float | None = None
    compile: float | None = None
    steady: Result | None = None
    exec_: Result | None = None
    rate: float | None = None
    pct: float | None = None
    limit_name: str = ""
    pct_cache: float | None = None
    peers: dict[str, Result] | None = None
    peer_ok: dict[str, bool] | None = None
    tg_cold: float | None = None
    error: str = ""


def _n_runs(one_call_s: float, quick: bool) -> int:
    """Enough runs for a stable median within about a second (a third in --quick), at least 5."""
    budget = 0.3 if quick else 1.0
    return int(max(5, min(30 if not quick else 15, budget / max(one_call_s, 1e-6))))


def _time_one(fn: Callable[[object], object]) -> float:
    t0 = time.perf_counter()
    fn(None)
    return time.perf_counter() - t0


@suite("kernels")
def kernels(b: Bench) -> None:
    cases = _cases(b.quick)
    lim = machine_limits.load(quick=b.quick, say=b.say)
    b.note(lim.summary())
    if lim.fgn is not None and lim.fgn > 0.5:
        b.note(f"  the limits were measured under foreign load {lim.fgn:.2f} (too low); re-measure on a quiet "
               f"machine: python -m benchmarks.limits --remeasure")
    for r in lim.rows:
        b.record(Result(f"limit/{r.name} {r.threads}T", r.unit, r.samples, True, lim.fgn,
                        {"best": r.best, "cached": lim.cached, "measured": lim.measured}))
    peers: list[type[Engine]] = [NumpyPeer]
    if have("torch"):
        peers.append(TorchPeer)
    else:
        b.note("PyTorch is not importable: no torch column")
    tg = have("tinygrad")
    if not tg:
        b.note("tinygrad is not installed: no tinygrad column (pip install tinygrad==0.14.0)")
    elif shutil.which("clang") is None:
        # tinygrad's CPU backend runs `clang --target=...`, which gcc does not accept
        tg = False
        b.note("tinygrad's CPU backend needs clang, which is not installed: no tinygrad column "
               "(apt-get install -y clang)")
    rows: list[Row] = []
    with _progress_bar(b, len(cases)) as bar:
        for case in cases:
            bar.case = case.title
            row = Row(case)
            try:
                _run_case(b, case, row, lim, peers, tg)
            except Exception as e:  # one broken case must not cost the others' figures
                row.error = f"{type(e).__name__}: {e}"[:300]
            rows.append(row)
            bar.done_n += 1
    for line in summary_table(rows, [p.name for p in peers] + (["tinygrad"] if tg else [])):
        b.note(line)
    b.note("ratios: ours/peer throughput from steady medians (>1 = ours faster); cold: fresh process, CACHE=0; "
           "% of the FMA peak (GFLOP/s cases) or DRAM triad (GB/s cases) for the threads our kernels used")
    png = plot(rows, os.path.join("results", "bench-kernels.png"))
    if png:
        b.note(f"plot: {png}")
    elif not have("matplotlib"):
        b.note("matplotlib is not installed: no plot")


def _run_case(b: Bench, case: Case, row: Row, lim: machine_limits.Limits, peers: list[type[Engine]],
              tg: bool) -> None:
    q = b.quick
    b.say("inputs and reference")
    xs = case.inputs()
    ref = reference(case, xs)
    unit = "GFLOP/s" if case.compute_bound else "GB/s"
    work = (case.flops() if case.compute_bound else case.bytes()) / 1e9

    # steady state in this process
    b.say("ours warm-up")
    ours = Ours(case, xs)
    out = ours.run()
    row.ok, row.err = check(case, ours.result(out), xs, ref)
    del out
    one = _time_one(ours.run)
    runs = _n_runs(one, q)
    rerun, kinfo = ours.kernels()
    row.kernels, row.threads = len(kinfo), our_threads(kinfo)
    steady = b.measure(f"{case.key}/ours", ours.run, work=1, unit="ms", per_item=1e3, runs=runs,
                       info={"kernels": kinfo, "threads": row.threads, "check_ok": row.ok, "rel_err": row.err,
                             "flops": case.flops(), "bytes": case.bytes()})
    row.steady = steady
    rate = b.rate_from(steady, f"{case.key}/ours {unit}", unit, work)
    row.rate = rate.median
    rerun(None)
    row.exec_ = b.measure(f"{case.key}/ours exec only", rerun, work=1, unit="ms", per_item=1e3,
                          runs=runs if one < 1.0 else 3)  # for a slow case, scheduling is a rounding error
    if case.compute_bound:
        row.limit_name, limit = lim.peak(row.threads)
    else:
        row.limit_name, limit = "triad", lim.triad(row.threads)
        cache_bw = lim.get("triad_cache", row.threads)
        row.pct_cache = 100 * row.rate / cache_bw if cache_bw else None
    row.pct = 100 * row.rate / limit if limit else None
    del ours, rerun

    # cold: a fresh interpreter with the disk caches off, so every kernel is really compiled
    colds = []
    repeats = 1 if q or one > 0.5 else 3  # each repeat costs a process start and three calls
    for i in range(repeats):
        b.say(f"ours cold, fresh process {i + 1}/{repeats}")
        res, _, err = run_worker("ours", case, 0, {"CACHE": "0"})
        if res is None:
            raise RuntimeError(f"cold subprocess failed: {err}")
        colds.append(res)
    cold = b.record(Result(f"{case.key}/ours cold first call", "ms", [1e3 * float(c["first_s"]) for c in colds],
                           False, None, {"compile_ms": [1e3 * float(c["compile_s"]) for c in colds],
                                         "setup_ms": [1e3 * float(c["setup_s"]) for c in colds]}))
    row.cold = cold.median
    row.compile = statistics.median(1e3 * float(c["compile_s"]) for c in colds)
    steady.info.update({"rate": row.rate, "rate_unit": unit, "limit": row.limit_name, "limit_value": limit,
                        "pct_of_limit": row.pct, "pct_of_cache_triad": row.pct_cache, "cold_ms": row.cold,
                        "compile_ms": row.compile})

    # peers: the same case, the same inputs, steady medians the same way
    row.peers, row.peer_ok = {}, {}
    for cls in peers:
        b.say(f"{cls.name} warm-up")
        p = cls(case, xs)
        out = p.run()
        row.peer_ok[cls.name] = check(case, p.result(out), xs, ref)[0]
        del out
        p.run()
        pr = b.measure(f"{case.key}/{cls.name}", p.run, work=1, unit="ms", per_item=1e3,
                       runs=_n_runs(_time_one(p.run), q))
        row.peers[cls.name] = pr
        b.compare(f"{case.title} vs {cls.name}", steady, pr, cls.name)
        del p
    if tg:
        b.say("tinygrad (subprocess: cold first call, then steady runs)")
        res, arr, err = run_worker("tinygrad", case, runs, {"DEV": "CPU", "CACHELEVEL": "0", "CC": "clang"})
        if res is None:
            b.note(f"{case.title}: tinygrad failed: {err}")
        else:
            tr = b.record(result_from_json(res["steady"]))
            row.peers["tinygrad"] = tr
            row.peer_ok["tinygrad"] = arr is not None and check(case, arr, xs, ref)[0]
            b.compare(f"{case.title} vs tinygrad", steady, tr, "tinygrad")
            tcold = b.record(Result(f"{case.key}/tinygrad cold first call", "ms", [1e3 * float(res["first_s"])],
                                    False, None, {"compile_ms": 1e3 * float(res["compile_s"])}))
            row.tg_cold = tcold.median
            b.compare(f"{case.title} cold first call vs tinygrad", cold, tcold, "tinygrad")


# ---------------------------------------------------------------------------- output


def _ratio(row: Row, peer: str) -> float | None:
    p = (row.peers or {}).get(peer)
    if p is None or row.steady is None:
        return None
    return p.median / row.steady.median  # times in ms: peer time over ours is ours/peer in throughput


def _pct(r: Row) -> str:
    if r.pct is None:
        return "-"
    if r.case.compute_bound:
        return f"{r.pct:.1f}% {r.limit_name.removeprefix('fma_')} {r.threads}T"
    cache = "" if r.pct_cache is None else f" ({r.pct_cache:.0f}% LLC)"
    return f"{r.pct:.1f}% DRAM {r.threads}T{cache}"


def summary_table(rows: list[Row], peer_names: list[str]) -> list[str]:
    head = ["case", "check", "kern/thr", "cold ms", "compile", "steady ms", "IQR", "exec ms", "rate", "% limit"]
    head += [f"vs {p}" for p in peer_names] + (["tg cold ms"] if "tinygrad" in peer_names else [])
    table = [head]
    for r in rows:
        if r.error or r.steady is None:
            table.append([r.case.title, "ERROR", r.error[:60]] + [""] * (len(head) - 3))
            continue
        unit = "GFLOP/s" if r.case.compute_bound else "GB/s"
        q1, q3 = r.steady.iqr
        line = [r.case.title, "ok" if r.ok else f"FAIL {r.err:.1e}", f"{r.kernels}/{r.threads}",
                fmt_value(r.cold or 0), fmt_value(r.compile or 0), fmt_value(r.steady.median),
                f"{fmt_value(q1)}..{fmt_value(q3)}", fmt_value(r.exec_.median) if r.exec_ else "-",
                f"{fmt_value(r.rate or 0)} {unit}", _pct(r)]
        for p in peer_names:
            x = _ratio(r, p)
            bad = "" if (r.peer_ok or {}).get(p, True) else " (peer wrong)"
            line.append("-" if x is None else f"{x:.2f}x{bad}")
        if "tinygrad" in peer_names:
            line.append("-" if r.tg_cold is None else fmt_value(r.tg_cold))
        table.append(line)
    widths = [max(len(t[i]) for t in table) for i in range(len(head))]
    out = []
    for k, t in enumerate(table):
        out.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(t, widths,
                                                                                                   strict=True))))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return ["", *out]


def plot(rows: list[Row], path: str) -> str | None:
    """A bar chart of throughput ratios against numpy (ours and each other peer), log scale; None without
    matplotlib."""
    if not have("matplotlib"):
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display here; and a plot must not open a window in a benchmark run
    import matplotlib.pyplot as plt

    good = [r for r in rows if r.steady is not None and (r.peers or {}).get("numpy") is not None]
    if not good:
        return None
    series = ["ours"] + [p for p in ("torch", "tinygrad") if any(p in (r.peers or {}) for r in good)]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(good) + 2), 4.5))
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        vals = []
        for r in good:
            npm = r.peers["numpy"].median  # type: ignore[index]
            t = r.steady.median if s == "ours" else (r.peers[s].median if s in r.peers else None)  # type: ignore
            vals.append(npm / t if t else 0.0)
        xs = [k + (i - (len(series) - 1) / 2) * width for k in range(len(good))]
        ax.bar(xs, vals, width, label=s)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(range(len(good)))
    ax.set_xticklabels([r.case.title for r in good], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("throughput / numpy's (log)")
    ax.set_title("kernels: steady-state throughput relative to numpy")
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_kernels",
                                 description="subprocess side of the kernels suite (run the suite with "
                                             "`python -m benchmarks kernels`)")
    ap.add_argument("--worker", choices=("ours", "tinygrad"), required=True)
    ap.add_argument("--case", required=True, choices=sorted(all_cases()))
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    print(json.dumps(worker(args.worker, args.case, args.runs, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
