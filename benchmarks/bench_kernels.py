"""Suite `kernels`: what our generated CPU kernels achieve on common ops, against this machine's limits and peers.

Cases (`--full`): add 16M, a fused elementwise chain 16M, sum 16M, softmax 4096x4096, layernorm 16384x1024,
matmul 512/1024/2048, conv2d 3x3 (8,64,56,56) -> 64 channels (pad 1), attention (batch 8, 8 heads, 512 tokens,
head dim 64). The default run: add 16M, sum 16M, softmax 4096x4096, matmul 1024, conv2d (kernel_cases.DEFAULT).
`--quick`: add 1M, softmax 512x512, matmul 256 (kernel_cases.QUICK; sum 1M and conv2d (1,32,28,28) -> 32 are
keys KERNEL_CASES can name).
All float32, inputs standard normal from a fixed seed, built with `tensor.Tensor` on the default device (cpu).

For each case:
  cold    the first realize (graph, schedule, lowering, C compile, run) in a fresh subprocess with CACHE=0, so
          no kernel or e-graph comes from disk (the generated rule matchers' bytecode does, as Python's own .pyc
          files do: rewrite.codecache); `compile` is that minus the same process's next realize;
          `lower/k` is the Python lowering per kernel within it (graph in, C source out, the compiler excluded:
          benchmarks.kernel_worker.split_ours), and the summary gives its median over the cases;
          `+import` adds the engine's own import in that process (`import tensor` / `import tinygrad`): the time
          to a first result. The first call alone favours an engine that imports its compiler eagerly (tinygrad
          does; we import lowering modules on first use), so both figures are shown for both engines, see
          benchmarks.kernel_worker;
  steady  wall time of a whole realize in this process after two warm-up calls (building the graph again,
          scheduling it, kernel-cache hits, running): median, min..max and IQR over >= 5 runs;
  exec    the same kernels re-run from an already built schedule (lower.realize.run_schedule): the kernels'
          own cost without the per-call Python of scheduling;
  rate    from the steady median: GFLOP/s for matmul, conv and attention, else GB/s of compulsory traffic
          (every input read once, the output written once: the floor a fused kernel needs);
  % limit the rate as a share of this machine's limit for the threads our kernels used (benchmarks.limits):
          the vector FMA peak of the cpu target (printed at the top) for GFLOP/s cases, the DRAM STREAM triad
          for GB/s cases (the 12 MiB cache-level triad is in the JSON too: working sets of tens of MiB stay in
          the LLC, see machine-limits.md);
  alloc/flt  fresh buffer allocations (ones the cpu device's pool could not serve) and minor page faults
          (getrusage) per steady call: an output page-faulted in at every call costs as much as the kernel;
  check   our result against numpy in float64 (np.allclose); a wrong result marks the row FAIL;
  peers   numpy (in process; OpenBLAS threads as it defaults), PyTorch eager with all threads (in process, when
          importable), tinygrad (a subprocess with DEV=CPU CACHELEVEL=0, when installed): steady medians the
          same way, and tinygrad's cold first call too. Ratios are ours over peer in throughput (>1: we are
          faster). With CPU_TARGET below the host's level every peer is held to that level too
          (benchmarks.peer_isa: OpenBLAS, numpy's ufuncs, MKL/oneDNN/ATen, tinygrad's -march). tinygrad's
          CPU backend compiles with clang (`--target=`, which gcc rejects): no clang, no
          tinygrad column. Ours, numpy and PyTorch are timed in blocks of back-to-back runs, in the order
          ours numpy torch, then torch numpy ours (half the runs each: a load that drifts falls on all alike),
          each block once this process's threads are idle (_quiet): on this 2-vCPU machine OpenBLAS's and
          OpenMP's workers keep spinning for a while after a call (machine-limits.md notes 2-3) and would take
          a core from whoever ran next;
  load/fgn the 1-minute load average when the row's blocks started / the other processes' load during ours'
          runs (vCPUs): a row timed on a loaded machine shows as such.

FLOP counts: add 1 and the chain 7 per element; sum 1; softmax 5 (max, subtract, exp, sum, divide); layernorm 7
(mean, subtract, square, mean, scale, weight, bias); matmul 2n^3; conv 2*B*Co*H*W*Ci*9; attention the QK^T and
PV products, 2*B*H*T*T*D each, plus 6 per score for the 1/sqrt(D) scale and the softmax.

Run as `python -m benchmarks kernels [--quick | --full]`; `KERNEL_CASES=sum_16M,add_16M python -m benchmarks
kernels` runs only the named cases (keys as in benchmarks.kernel_cases). `python -m benchmarks.bench_kernels
--worker ...` is the subprocess side (one case, one engine; prints one JSON line).
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass

from benchmarks import limits as machine_limits
from benchmarks.kernel_cases import Case, all_cases, cases_for, check, reference
from benchmarks.kernel_peers import Engine, NumpyPeer, Ours, TorchPeer, have, our_threads
from benchmarks.kernel_worker import result_from_json, run_worker
from benchmarks.peer_isa import tinygrad_dev
from benchmarks.report import caption
from benchmarks.runner import Bench, LoadMeter, Result, Timed, fmt_value, suite
from devices import target_for

# ---------------------------------------------------------------------------- the suite


@dataclass
class Row:
    """Everything the summary table and the plot need about one case."""

    case: Case
    ok: bool = False
    err: float = float("nan")
    threads: int = 1
    kernels: int = 0
    cold: float | None = None
    cold_import: float | None = None
    compile: float | None = None
    lower: float | None = None  # Python lowering per kernel in the cold call (ms): graph in, C source out
    lower_cpu: float | None = None  # the same in the main thread's CPU time (ms)
    steady: Result | None = None
    exec_: Result | None = None
    rate: float | None = None
    pct: float | None = None
    limit_name: str = ""
    pct_cache: float | None = None
    triad_beside: tuple[float, float] | None = None  # GB/s cases: the DRAM triad measured just before and after
    pct_cached: float | None = None  # GB/s cases: the share of the triad the limits cache holds
    # GB/s cases on x86: the share of the streaming-store triad measured beside it (no write-allocate reads)
    pct_nt: float | None = None
    peers: dict[str, Result] | None = None
    peer_ok: dict[str, bool] | None = None
    tg_cold: float | None = None
    tg_cold_import: float | None = None
    allocs: float | None = None  # fresh (not pooled) buffer allocations per steady call
    faults: float | None = None  # minor page faults per steady call
    error: str = ""
    load: float | None = None  # the 1-minute load average when the steady blocks started


def _n_runs(one_call_s: float, quick: bool) -> int:
    """Enough runs for a stable median within about a second (a third in --quick), at least 5."""
    budget = 0.3 if quick else 1.0
    return int(max(5, min(30 if not quick else 15, budget / max(one_call_s, 1e-6))))


def _disagree(colds: list[dict], by: float = 0.1) -> bool:
    a, b = (float(c["first_s"]) for c in colds[:2])
    return abs(a - b) > by * min(a, b)


def memory_per_call(fn: Callable[[object], object], calls: int = 3) -> tuple[float, float]:
    """Fresh buffer allocations (ones the cpu device's pool could not serve: devices.memory.Allocator.fresh) and
    minor page faults (getrusage ru_minflt: memory touched for the first time, which the kernel zeroes and maps)
    per call of `fn`, over `calls` calls with each result dropped before the next, as the steady runs do.
    Faults are 0 where getrusage is missing."""
    from devices.cpu import DEVICE

    def minflt() -> int:
        try:
            import resource
        except ImportError:  # not a POSIX system
            return 0
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)

    gc.collect()
    a0, f0 = DEVICE.fresh, minflt()
    for _ in range(calls):
        out = fn(None)
        del out
    return (DEVICE.fresh - a0) / calls, (minflt() - f0) / calls


def _time_one(fn: Callable[[object], object]) -> float:
    t0 = time.perf_counter()
    fn(None)
    return time.perf_counter() - t0


# Before each engine's block of timed runs, _quiet waits (at most QUIET_MAX_S) until this process's own threads are
# idle: numpy's OpenBLAS workers keep spinning ~0.1 s after a call, PyTorch's OpenMP ones and our pool's briefly
# (devices.cpu_pool), and on a 2-vCPU machine a spinning worker takes a core from whoever runs next (an earlier
# table had matmul 1024 at 0.50x numpy on a loaded machine; at high priority, with or without these pauses, it
# measured 0.99-1.05x).
QUIET_MAX_S = 0.5
QUIET_SLICE_S = 0.02
QUIET_BUSY = 0.05  # process CPU time per wall second under which its threads count as idle


def _quiet() -> float:
    """Wait until this process uses under QUIET_BUSY of a CPU over a QUIET_SLICE_S slice (its threads have
    stopped spinning), at most QUIET_MAX_S; returns the seconds waited."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < QUIET_MAX_S:
        c0, w0 = time.process_time(), time.perf_counter()
        time.sleep(QUIET_SLICE_S)
        if time.process_time() - c0 < QUIET_BUSY * (time.perf_counter() - w0):
            break
    return time.perf_counter() - t0


def _timed_in_turns(b: Bench, jobs: list[Timed]) -> list[Result]:
    """Steady figures of engines that will be compared: each job's runs in two blocks (half its runs each, back
    to back within a block: an engine's steady state is its own calls one after another), in the order A B C ..
    then .. C B A, so a load that drifts during the case falls on every engine alike; each block starts once the
    previous engine's threads are idle (_quiet). Each Result is recorded, its `fgn` the mean of its blocks' (a
    block's is its runs' median, or over the whole block where the runs are too short to tell) and its info
    carries the waits."""
    done: dict[int, tuple[list[float], list[float], list[float], list[float]]] = {i: ([], [], [], []) for i in
                                                                                   range(len(jobs))}
    order = list(range(len(jobs)))
    for half, ids in enumerate((order, order[::-1])):
        for i in ids:
            job = jobs[i]
            most = job.runs or b.runs
            n = -(-most // 2) if half == 0 else max(1, most // 2)
            waited = _quiet()
            meter = LoadMeter()  # over the block: a run shorter than the meter's resolution has no load of its own
            ((wall, cpu, fgn),) = b.time_runs([Timed(job.name, job.fn, job.work, job.unit, job.setup, n,
                                                     job.per_item, job.teardown, job.info)])
            fgn = fgn if fgn is not None else meter.foreign()
            w, c, f, q = done[i]
            w += wall
            c += cpu
            q.append(waited)
            if fgn is not None:
                f.append(fgn)
    out = []
    for i, job in enumerate(jobs):
        wall, cpu, fgns, waits = done[i]
        scale = (job.per_item or 1.0) / job.work
        info = dict(job.info or {}, seconds=wall, cpu_seconds=cpu, work=job.work, blocks="ABBA",
                    quiet_wait_s=waits)
        out.append(b.record(Result(job.name, job.unit, [s * scale for s in wall], False,
                                   statistics.fmean(fgns) if fgns else None, info, [s * scale for s in cpu])))
    return out


@suite("kernels")
def kernels(b: Bench) -> None:
    cases = selected_cases(b.mode, os.environ.get("KERNEL_CASES", ""))
    target = target_for("cpu")  # what our kernels are compiled for: the host's, or the level CPU_TARGET names
    b.note(f"target: {target}")
    lim = machine_limits.load(quick=b.quick, say=b.say, target=target)
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
    peer_names = [p.name for p in peers] + (["tinygrad"] if tg else [])

    def summarize() -> None:  # at the end of the suite, or with the rows so far when the run is interrupted
        head, table = summary_table(rows, peer_names)
        b.table("per case" + (" (interrupted: the cases so far)" if b.partial else ""), head, table)
        b.note("ratios: ours/peer throughput from steady medians (>1 = ours faster); cold: first call in a fresh "
               "process, no kernel cache (+import: with the engine's import before it); % of the FMA peak "
               "(GFLOP/s cases) or DRAM triad (GB/s cases) for the threads our kernels used")
        b.note("alloc/flt: fresh buffer allocations (not served by the cpu device's pool) / minor page faults per "
               "steady call, the results dropped between calls")
        mem = [f"{r.case.title} {r.pct:.0f}%" for r in rows if r.case.kind in ("add", "sum", "chain")
               and r.pct is not None]
        if mem:
            b.note(f"% of DRAM triad (targets: elementwise >= 80%, sum >= 70%): {', '.join(mem)}")
        beside = [f"{r.case.title} {lo:.1f}/{hi:.1f} GB/s (cached {r.pct_cached:.0f}%)" for r in rows
                  if r.triad_beside is not None and r.pct_cached is not None for lo, hi in [r.triad_beside]]
        nts = [f"{r.case.title} {r.pct_nt:.0f}%" for r in rows if r.pct_nt is not None]
        if nts:
            b.note("  % of the streaming-store triad beside it (no line read before it is written: 12 bytes an "
                   "element really moved; our map kernels stream an output past the last-level cache): "
                   + ", ".join(nts))
        if beside:
            b.note("  the triad of a GB/s case is measured just before and after its timed runs (DRAM now; this "
                   "machine's bandwidth moves with its neighbours), their mean the limit: " + ", ".join(beside))
        lows = sorted((r.lower, r.lower_cpu or 0.0) for r in rows if r.lower is not None)
        if lows:
            b.note(f"lower/k: Python lowering per kernel in the cold call (kernel stages + rendering to C, the C "
                   f"compiler excluded), ms: median over {len(lows)} cases {statistics.median(w for w, _ in lows):.1f}"
                   f" (main thread CPU {statistics.median(c for _, c in lows):.1f}); the first kernels of a process "
                   f"also pay for the lowering modules' imports and for finding the rule sets' matchers (their "
                   f"bytecode from the disk cache, rewrite.codecache; generated and compiled when it has none)")
        png = plot(rows, os.path.join("results", "bench-kernels.png"), str(target), caption(b.run), b.partial)
        if png:
            b.note(f"plot: {png}" + (" (partial)" if b.partial else ""))
        elif not have("matplotlib"):
            b.note("matplotlib is not installed: no plot")

    b.at_end(summarize)
    for case in b.cases(cases, lambda c: c.title):
        row = Row(case)
        rows.append(row)
        try:
            _run_case(b, case, row, lim, peers, tg)
        except Exception as e:  # one broken case must not cost the others' figures
            row.error = f"{type(e).__name__}: {e}"[:300]


def selected_cases(mode: str, names: str) -> list[Case]:
    """The cases of `mode` (benchmarks.kernel_cases.cases_for), or only those named (comma-separated keys, any
    of benchmarks.kernel_cases)."""
    if not names.strip():
        return cases_for(mode)
    known = all_cases()
    keys = [k.strip() for k in names.split(",") if k.strip()]
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise ValueError(f"KERNEL_CASES: unknown case(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [known[k] for k in keys]


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
    # the peers warmed up and checked here, timed with ours below (_timed_in_turns)
    row.peers, row.peer_ok = {}, {}
    engines: list[Engine] = []
    for cls in peers:
        b.say(f"{cls.name} warm-up")
        p = cls(case, xs)
        out = p.run()
        row.peer_ok[cls.name] = check(case, p.result(out), xs, ref)[0]
        del out
        p.run()
        engines.append(p)
    jobs = [Timed(f"{case.key}/ours", ours.run, 1, "ms", runs=runs, per_item=1e3,
                  info={"kernels": kinfo, "threads": row.threads, "check_ok": row.ok, "rel_err": row.err,
                        "flops": case.flops(), "bytes": case.bytes()})]
    jobs += [Timed(f"{case.key}/{p.name}", p.run, 1, "ms", runs=_n_runs(_time_one(p.run), q), per_item=1e3)
             for p in engines]
    row.load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    before = {} if case.compute_bound else _triad_beside(b, row.threads, q)
    steady, *peer_results = _timed_in_turns(b, jobs)
    after = {} if case.compute_bound else _triad_beside(b, row.threads, q)
    del engines
    row.steady = steady
    row.allocs, row.faults = memory_per_call(ours.run)
    steady.info.update({"fresh_allocs_per_call": row.allocs, "page_faults_per_call": row.faults})
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
        row.pct_cached = 100 * row.rate / limit if limit else None
        if "triad" in before and "triad" in after:  # the triad of this moment, not the cached one
            row.triad_beside = (before["triad"], after["triad"])
            row.limit_name, limit = "triad beside", (before["triad"] + after["triad"]) / 2
        if "triad_nt" in before and "triad_nt" in after:
            row.pct_nt = 200 * row.rate / (before["triad_nt"] + after["triad_nt"])
    row.pct = 100 * row.rate / limit if limit else None
    del ours, rerun

    # cold: a fresh interpreter with the disk caches off, so every kernel is really compiled
    colds: list[dict] = []
    # each repeat costs a process start and three calls: one in --quick, all three in --full; by default two,
    # and a third only when the two disagree by more than 10% (a slow case is known well enough from one)
    repeats = 1 if q or one > 0.5 else 3 if b.full else 2
    while len(colds) < repeats or (repeats == 2 and len(colds) == 2 and _disagree(colds)):
        extra = " (the first two disagree by > 10%)" if len(colds) >= repeats else f"/{repeats}"
        b.say(f"ours cold, fresh process {len(colds) + 1}{extra}")
        res, _, err = run_worker("ours", case, 0, {"CACHE": "0"})
        if res is None:
            raise RuntimeError(f"cold subprocess failed: {err}")
        colds.append(res)
    cold = b.record(Result(f"{case.key}/ours cold first call", "ms", [1e3 * float(c["first_s"]) for c in colds],
                           False, None, {"compile_ms": [1e3 * float(c["compile_s"]) for c in colds],
                                         "setup_ms": [1e3 * float(c["setup_s"]) for c in colds],
                                         "import_ms": [1e3 * float(c["import_s"]) for c in colds]}))
    cold_imp = b.record(Result(f"{case.key}/ours cold import + first call", "ms",
                               [1e3 * (float(c["import_s"]) + float(c["first_s"])) for c in colds], False, None))
    row.cold, row.cold_import = cold.median, cold_imp.median
    row.compile = statistics.median(1e3 * float(c["compile_s"]) for c in colds)
    if all("lower_per_kernel_s" in c for c in colds):
        row.lower = statistics.median(1e3 * float(c["lower_per_kernel_s"]) for c in colds)
        row.lower_cpu = statistics.median(1e3 * float(c["lower_per_kernel_cpu_s"]) for c in colds)
        b.record(Result(f"{case.key}/ours cold lowering per kernel", "ms",
                        [1e3 * float(c["lower_per_kernel_s"]) for c in colds], False, None,
                        {"cpu_ms": [1e3 * float(c["lower_per_kernel_cpu_s"]) for c in colds],
                         "kernels": [c["lowered"] for c in colds],
                         **{f"{k}_ms": [1e3 * float(c.get(f"{k}_s", 0.0)) for c in colds]
                            for k in ("schedule", "lower", "render", "compile")}}))
    steady.info.update({"rate": row.rate, "rate_unit": unit, "limit": row.limit_name, "limit_value": limit,
                        "pct_of_limit": row.pct, "pct_of_cache_triad": row.pct_cache,
                        "triad_beside": row.triad_beside, "pct_of_cached_triad": row.pct_cached,
                        "pct_of_streaming_triad": row.pct_nt, "cold_ms": row.cold,
                        "compile_ms": row.compile, "lower_ms_per_kernel": row.lower})

    # peers: the same case, the same inputs, steady medians the same way (timed above, in turns with ours)
    for cls, pr in zip(peers, peer_results, strict=True):
        row.peers[cls.name] = pr
        b.compare(f"{case.title} vs {cls.name}", steady, pr, cls.name)
    if tg:
        b.say("tinygrad (subprocess: cold first call, then steady runs)")
        res, arr, err = run_worker("tinygrad", case, runs, {"DEV": tinygrad_dev(), "CACHELEVEL": "0", "CC": "clang"})
        if res is None:
            b.note(f"{case.title}: tinygrad failed: {err}")
        else:
            tr = b.record(result_from_json(res["steady"]))
            row.peers["tinygrad"] = tr
            row.peer_ok["tinygrad"] = arr is not None and check(case, arr, xs, ref)[0]
            b.compare(f"{case.title} vs tinygrad", steady, tr, "tinygrad")
            tcold = b.record(Result(f"{case.key}/tinygrad cold first call", "ms", [1e3 * float(res["first_s"])],
                                    False, None, {"compile_ms": 1e3 * float(res["compile_s"]),
                                                  "import_ms": 1e3 * float(res["import_s"])}))
            tcold_imp = b.record(Result(f"{case.key}/tinygrad cold import + first call", "ms",
                                        [1e3 * (float(res["import_s"]) + float(res["first_s"]))], False, None))
            row.tg_cold, row.tg_cold_import = tcold.median, tcold_imp.median
            b.compare(f"{case.title} cold first call vs tinygrad", cold, tcold, "tinygrad")
            b.compare(f"{case.title} cold import + first call vs tinygrad", cold_imp, tcold_imp, "tinygrad")


# ---------------------------------------------------------------------------- output


def _triad_beside(b: Bench, threads: int, quick: bool) -> dict[str, float]:
    """The DRAM triads at `threads` measured now (benchmarks.limits.triads_now: plain and streaming stores), for a
    GB/s case's share: taken just before and just after its timed runs, and the two averaged."""
    b.say("DRAM triad beside the case")
    return machine_limits.triads_now(threads, gb=0.5 if quick else 1.0)


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
    now = " now" if r.triad_beside is not None else ""
    return f"{r.pct:.1f}% DRAM{now} {r.threads}T{cache}"


def _load(r: Row) -> str:
    """The 1-minute load average when the row's steady blocks started / the foreign load (vCPUs other processes
    used) during ours' runs."""
    fgn = r.steady.fgn if r.steady is not None else None
    return f"{'-' if r.load is None else f'{r.load:.1f}'}/{'-' if fgn is None else f'{fgn:.1f}'}"


def summary_table(rows: list[Row], peer_names: list[str]) -> tuple[list[str], list[list[str]]]:
    """The per-case table's header and rows (a case cut short by an interrupt shows as `interrupted`)."""
    head = ["case", "check", "kern/thr", "load/fgn", "cold ms", "+import", "compile", "lower/k", "steady ms", "IQR",
            "exec ms", "rate", "% limit", "alloc/flt"]
    head += [f"vs {p}" for p in peer_names] + (["tg cold ms", "+import"] if "tinygrad" in peer_names else [])
    table = [head]
    for r in rows:
        if r.error or r.steady is None:
            table.append([r.case.title, "ERROR" if r.error else "interrupted", r.error[:60]] + [""] * (len(head) - 3))
            continue
        unit = "GFLOP/s" if r.case.compute_bound else "GB/s"
        q1, q3 = r.steady.iqr
        line = [r.case.title, "ok" if r.ok else f"FAIL {r.err:.1e}", f"{r.kernels}/{r.threads}", _load(r),
                fmt_value(r.cold or 0), fmt_value(r.cold_import or 0), fmt_value(r.compile or 0),
                "-" if r.lower is None else fmt_value(r.lower), fmt_value(r.steady.median),
                f"{fmt_value(q1)}..{fmt_value(q3)}", fmt_value(r.exec_.median) if r.exec_ else "-",
                f"{fmt_value(r.rate or 0)} {unit}", _pct(r),
                "-" if r.allocs is None else f"{r.allocs:.3g}/{r.faults or 0:.3g}"]
        for p in peer_names:
            x = _ratio(r, p)
            bad = "" if (r.peer_ok or {}).get(p, True) else " (peer wrong)"
            line.append("-" if x is None else f"{x:.2f}x{bad}")
        if "tinygrad" in peer_names:
            line.append("-" if r.tg_cold is None else fmt_value(r.tg_cold))
            line.append("-" if r.tg_cold_import is None else fmt_value(r.tg_cold_import))
        table.append(line)
    return head, table[1:]


def plot(rows: list[Row], path: str, target: str = "", caption: str = "", partial: bool = False) -> str | None:
    """A bar chart of throughput ratios against numpy (ours and each other peer), log scale; its title says what
    ran where (`caption`: CPU, Target, threads, load, mode, date; benchmarks.report.caption) and whether the run
    was interrupted (`partial`), and the PNG's metadata holds the full target; None without matplotlib."""
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
    title = "kernels: steady-state throughput relative to numpy" + (" (PARTIAL: run interrupted)" if partial else "")
    sub = textwrap.fill(caption or target, width=int(fig.get_figwidth() * 15))
    ax.set_title(title + (f"\n{sub}" if sub else ""), fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    meta = {"Description": f"target: {target}" if target else "", "Comment": caption}
    fig.savefig(path, dpi=110, metadata={k: v for k, v in meta.items() if v} or None)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    """The worker's entry, kept here for `python -m benchmarks.bench_kernels --worker ...` (see kernel_worker)."""
    from benchmarks.kernel_worker import main as worker_main

    return worker_main(argv)


if __name__ == "__main__":
    sys.exit(main())
