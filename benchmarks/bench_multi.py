"""Suite `multi`: multi-device tensors on one host (tensor.multi): tensor-parallel matmul and allreduce.

Rows:
  matmul N            C = A @ B, float32 N x N (`--quick`: 1024; full: 4096), inputs realized beforehand:
    1 device            on `cpu` with every core
    column-parallel     A replicated and B split by columns over (cpu:0, cpu:1): each device computes its block of
                        C's columns (no communication; C stays sharded)
    row-parallel        A split by columns and B by rows: each device a partial product, then the allreduce
                        (reduce_scatter + allgather, lower.multi.allreduce) leaves C replicated
    compared 2 devices against 1: the devices share the host's cores (each cpu device of a schedule is compiled
    for its share, lower.parallel), so on one host this measures the overhead of splitting, not a speedup from
    more hardware. The check: max |C - C_1device| / max |C_1device|, in the row's info.
  allreduce n x S     float32, S bytes per device from 1 MiB to 256 MiB (`--quick`: 1 and 4 MiB; default: 1, 4, 16,
                      64, 256 MiB), two forms on each device tuple of `ALLREDUCE_TRANSPORTS` (in-process cpu devices
                      here; a transport across processes (MPI) adds its entry, a name and a function giving the tuple,
                      and gets the same rows):
    spec                the spec's allreduce (reduce_scatter + allgather written literally with COPY, tensor.multi)
    sum over shards     the implicit one: T (n*s,) sharded on axis 0, T.reshape(n, s).sum(0), which the lowering
                        turns into an allreduce (lower.multi)
    numpy               the in-process ideal, measured in the same run: the n shards added with numpy into one
                        result, which is then copied n - 1 times (every device holds the sum), into arrays allocated
                        once (our allocator pools memory too; fresh arrays would time the kernel's page faults)
                      Bus bandwidth as NCCL counts it: 2 (n - 1) / n * S bytes per second; each form is compared with
                      numpy. The check: max |result - numpy sum| over every device's copy.
  MPI rows            across processes (benchmarks/mpi_rows.py, timed by every rank at once with a fixed run count,
                      which the adaptive runner cannot give an MPI job): launched as `mpirun -n 2` (and `-n 1` for
                      the 1-rank step) unless this process already runs under mpirun; skipped, with a line saying
                      why, when mpirun or mpi4py is missing.
    allreduce S MiB 2 ranks   bus bandwidth of tensor.multi.allreduce on ranks() (one MPI Allreduce) vs mpi4py's
                              Allreduce on numpy arrays of the same size, in turns in the same job (`--quick`: 1, 4,
                              16 MiB, 7 turns; full: 1 to 256 MiB, 11 turns), two rows of ours: per call
                              (`M.allreduce(T).realize()` on a realized T: the Allreduce runs at once,
                              lower.mpi_cache.allreduce_now) and under jit (a `tensor.jit` step of it, replayed);
                              the target (ours >= 90% of mpi4py's) is the per-call row's. A sample is a run of
                              back-to-back calls (about 20 ms of mpi4py's, the same count for every form), the
                              first form of a turn rotating. The note gives median and quartiles, the ratio ours /
                              mpi4py of each turn (median, min-max), the load average before and after, and the
                              Python per call around the MPI call, in a warm loop and as the rows run it (cold).
    dp step n ranks           a data-parallel AdamW step of an MLP 784-512-512-10, global batch 256 split over n
                              ranks (1 and 2): steps per second, and the scaling 2 ranks vs 1; the same step
                              under `tensor.jit` ("under jit" rows, compared with the eager step and 1 rank vs 2)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable

import numpy as np

from benchmarks.runner import Bench, Result, Timed, suite

# name -> the device tuple an allreduce row runs on
ALLREDUCE_TRANSPORTS: dict[str, Callable[[], tuple[str, ...]]] = {
    "in-process cpu": lambda: ("cpu:0", "cpu:1"),
}


def _matmul_rows(b: Bench, n: int) -> None:
    from tensor import Tensor

    D = ("cpu:0", "cpu:1")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    w = rng.standard_normal((n, n), dtype=np.float32)
    A1, B1 = Tensor(a).realize(), Tensor(w).realize()
    Arep, Bcol = A1.to(D).realize(), B1.shard(D, 1).realize()
    Acol, Brow = A1.shard(D, 1).realize(), B1.shard(D, 0).realize()
    ref = (A1 @ B1).numpy()
    scale = float(np.abs(ref).max())

    def err(t: Tensor) -> float:
        return float(np.abs(t.numpy() - ref).max()) / scale

    checks = {"1 device": 0.0, "column-parallel": err(Arep @ Bcol), "row-parallel": err(Acol @ Brow)}
    flops = 2.0 * n**3
    jobs = [
        Timed(f"matmul {n} 1 device", lambda _: (A1 @ B1).realize(), flops / 1e9, "GFLOP/s"),
        Timed(f"matmul {n} column-parallel 2 devices", lambda _: (Arep @ Bcol).realize(), flops / 1e9, "GFLOP/s"),
        Timed(f"matmul {n} row-parallel 2 devices", lambda _: (Acol @ Brow).realize(), flops / 1e9, "GFLOP/s"),
    ]
    for j, (k, v) in zip(jobs, checks.items(), strict=True):
        j.info = {"rel_err_vs_1_device": v, "layout": k}
        j.runs = 3 if n >= 4096 else None
    for j in jobs:  # compile and warm each before timing
        j.fn(None)
    one, col, row = b.measure_together(jobs)
    b.compare(f"matmul {n} column-parallel", col, one, "1 device")
    b.compare(f"matmul {n} row-parallel", row, one, "1 device")
    b.note(f"matmul {n}: max relative error vs 1 device: " + ", ".join(f"{k} {v:.1e}" for k, v in checks.items()))


MIB = 1 << 20
SIZES = {"quick": (1, 4), "default": (1, 4, 16, 64, 256), "full": (1, 4, 16, 64, 256)}  # MiB per device


def _numpy_allreduce(shards: list[np.ndarray], outs: list[np.ndarray]) -> list[np.ndarray]:
    np.add(shards[0], shards[1], out=outs[0])
    for s in shards[2:]:
        outs[0] += s
    for o in outs[1:]:
        np.copyto(o, outs[0])
    return outs


def _allreduce_rows(b: Bench, mib: int) -> None:
    from tensor import Tensor
    from tensor.multi import allreduce

    size = mib * MIB // 4
    for name, devices in ALLREDUCE_TRANSPORTS.items():
        D = devices()
        n = len(D)
        data = np.random.default_rng(1).standard_normal(n * size, dtype=np.float32)
        T = Tensor(data).shard(D, 0).realize()
        shards = [np.ascontiguousarray(x) for x in data.reshape(n, size)]
        outs = [np.empty_like(s) for s in shards]  # allocated once, as our pooled allocator gives memory back
        want = _numpy_allreduce(shards, outs)[0].copy()

        def implicit(_: object, T: Tensor = T) -> Tensor:
            return T.reshape(n, size).sum(0).realize()

        def spec(_: object, T: Tensor = T) -> Tensor:
            return allreduce(T).realize()

        errs = {}
        for form, fn in (("spec", spec), ("sum over shards", implicit)):
            got = fn(None)  # compiles, and checks every device's copy
            errs[form] = max(float(np.abs(_shard_values(got, i) - want).max()) for i in range(n))
        busbw = 2 * (n - 1) / n * size * 4 / 1e9
        tag = f"allreduce {n}x{mib}MiB {name}"
        jobs = [Timed(f"{tag} spec", spec, busbw, "GB/s", info={"max_abs_err": errs["spec"], "devices": list(D)}),
                Timed(f"{tag} sum over shards", implicit, busbw, "GB/s",
                      info={"max_abs_err": errs["sum over shards"], "devices": list(D)}),
                Timed(f"{tag} numpy", lambda _, s=shards, o=outs: _numpy_allreduce(s, o), busbw, "GB/s")]
        spec_r, impl_r, np_r = b.measure_together(jobs)
        b.compare(f"{tag} spec", spec_r, np_r, "numpy")
        b.compare(f"{tag} sum over shards", impl_r, np_r, "numpy")
        b.note(f"{tag}: bus bandwidth spec {spec_r.median:.2f}, sum over shards {impl_r.median:.2f}, numpy "
               f"{np_r.median:.2f} GB/s; max |err| {max(errs.values()):.1e}")


def _shard_values(t: object, i: int) -> np.ndarray:
    """Device i's copy of a replicated tensor on a device tuple, as it is stored (no gather)."""
    from lower import buffers
    from lower.multi import view_base

    base = view_base(t.uop)  # type: ignore[attr-defined]
    assert base is not None, "a realized tensor on a device tuple is a view of a BUFFER there"
    return np.asarray(buffers.lookup(buffers.shards(base)[i])).reshape(-1)


def _mpi_job(n: int, mode: str) -> dict:
    """benchmarks/mpi_rows.py's figures from `mpirun -n n`, or from this job when it already runs under mpirun."""
    from devices.mpi import launched_by_mpi, world

    if launched_by_mpi():
        from benchmarks import mpi_rows

        c = world()
        assert c is not None
        two = c.size > 1
        return {"dp": mpi_rows.dp_step_row(c, 3 if mode == "quick" else 10),
                "allreduce": mpi_rows.allreduce_rows(c, [1, 4, 16] if mode == "quick" else [1, 4, 16, 64, 256],
                                                     7 if mode == "quick" else 11) if two else [],
                **({"python_us": mpi_rows.python_per_call(c), "python_in_situ_us": mpi_rows.python_in_situ(c)}
                   if two else {})}
    env = dict(os.environ)
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # OpenMPI refuses root unless told
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", sys.executable, "-m", "benchmarks.mpi_rows", mode]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("MPIROWS ")), None)
    if p.returncode != 0 or line is None:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {p.returncode}):\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return dict(json.loads(line[len("MPIROWS "):]))


def _record(b: Bench, name: str, unit: str, samples: list[float], info: dict) -> Result:
    r = Result(name, unit, samples, True, None, info)
    b.results.append(r)
    return r


def _mpi_rows(b: Bench) -> None:
    from devices.mpi import launched_by_mpi, world

    if not launched_by_mpi() and (shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None):
        b.note("MPI rows skipped: needs OpenMPI's mpirun and mpi4py (apt-get install openmpi-bin libopenmpi-dev; "
               "pip install mpi4py)")
        return
    mode = "quick" if b.quick else "full"
    under = world() if launched_by_mpi() else None
    two = _mpi_job(2, mode)
    one = _mpi_job(1, mode) if under is None else None
    if under is not None and under.rank != 0:
        return
    for row in two["allreduce"]:
        n, mib = row["ranks"], row["mib"]
        info = {"max_abs_err_vs_mpi4py": row["max_abs_err"], "ranks": n, "calls_per_sample": row["calls_per_sample"],
                "load_before_after": row["load"]}
        ours = _record(b, f"allreduce {mib} MiB {n} ranks MPI per call", "GB/s", row["ours"], info)
        jitted = _record(b, f"allreduce {mib} MiB {n} ranks MPI under jit", "GB/s", row["jit"], info)
        peer = _record(b, f"allreduce {mib} MiB {n} ranks mpi4py Allreduce", "GB/s", row["peer"], info)
        b.compare(f"allreduce {mib} MiB {n} ranks per call", ours, peer, "mpi4py Allreduce")
        b.compare(f"allreduce {mib} MiB {n} ranks under jit", jitted, peer, "mpi4py Allreduce")

        def spread(r: Result) -> str:
            lo, hi = r.iqr
            return f"{r.median:.2f} [{lo:.2f}-{hi:.2f}]"

        def paired(k: str) -> str:
            q = sorted(row["paired"][k])
            return f"{statistics.median(q):.0%} [{q[0]:.0%}-{q[-1]:.0%}]"

        b.note(f"allreduce {mib} MiB over {n} ranks ({len(row['ours'])} samples of {row['calls_per_sample']} calls "
               f"each, turns rotated; median [quartiles] GB/s): ours per call {spread(ours)}, under jit "
               f"{spread(jitted)}, mpi4py {spread(peer)}; ours / mpi4py per turn, median [min-max]: per call "
               f"{paired('ours')}, under jit {paired('jit')}; load average {row['load'][0]} -> {row['load'][1]}; "
               f"max |err| {row['max_abs_err']:.1e}")
    if "python_us" in two:
        py = two["python_us"]
        b.note(f"Python around one allreduce's MPI call (the call a no-op, slowest rank, warm loop): per call "
               f"{py['per call']:.1f} us, under jit {py['jit']:.1f} us")
    if "python_in_situ_us" in two:
        py = two["python_in_situ_us"]
        b.note(f"Python around one 1 MiB allreduce's MPI call as the rows run it (after an MPI call, caches cold; "
               f"the call's time less the time inside MPI Allreduce, median, slowest rank): per call "
               f"{py['per call']:.1f} us, under jit {py['jit']:.1f} us")
    steps = {}
    for res in (one, two):
        if res is None:
            continue
        dp = res["dp"]
        r = _record(b, f"dp step MLP 784-512-512-10 batch {dp['batch']} {dp['ranks']} ranks", "steps/s",
                    [1 / s for s in dp["seconds"]], {"ranks": dp["ranks"], "cpu_seconds": dp["cpu_seconds"]})
        r.cpu_samples = [1 / s for s in dp["cpu_seconds"]]
        steps[dp["ranks"]] = r
        if "jit_seconds" in dp:
            info = {"ranks": dp["ranks"], "max_abs_err_jit_vs_eager": dp["max_abs_err_jit_vs_eager"]}
            j = _record(b, f"dp step MLP 784-512-512-10 batch {dp['batch']} {dp['ranks']} ranks under jit", "steps/s",
                        [1 / s for s in dp["jit_seconds"]], info)
            j.cpu_samples = [1 / s for s in dp["jit_cpu_seconds"]]
            b.compare(f"dp step {dp['ranks']} ranks under jit", j, r, "eager")
            steps[(dp["ranks"], "jit")] = j
    if 1 in steps and 2 in steps:
        b.compare("dp step 2 ranks", steps[2], steps[1], "1 rank")
        t1, t2 = 1 / steps[1].median * 1e3, 1 / steps[2].median * 1e3
        c1, c2 = (1 / (steps[k].cpu_median or 1) * 1e3 for k in (1, 2))
        b.note(f"data-parallel step: 1 rank {t1:.0f} ms, 2 ranks {t2:.0f} ms: {t1 / t2:.2f}x (each rank bound to a "
               f"core by mpirun); CPU per rank {c1:.0f} ms vs {c2:.0f} ms: {c1 / c2:.2f}x")
    if (1, "jit") in steps and (2, "jit") in steps:
        b.compare("dp step 2 ranks under jit", steps[(2, "jit")], steps[(1, "jit")], "1 rank under jit")
        j1, j2 = (1 / steps[(k, "jit")].median * 1e3 for k in (1, 2))
        b.note(f"data-parallel step under jit: 1 rank {j1:.0f} ms, 2 ranks {j2:.0f} ms: {j1 / j2:.2f}x")


@suite("multi")
def multi(b: Bench) -> None:
    _matmul_rows(b, 1024 if b.quick else 4096)
    for mib in SIZES[b.mode]:
        _allreduce_rows(b, mib)
    _mpi_rows(b)
