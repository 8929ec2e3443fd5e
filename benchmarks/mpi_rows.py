"""The MPI rows of `python -m benchmarks multi` (bench_multi.py): timed by every rank of an `mpirun` job at once.

The runner's adaptive timing (a job leaves the rotation once its figure converges) would let ranks run different
numbers of collectives, so these rows use a fixed number of runs, the same on every rank, and count each run as
the slowest rank's time (an allreduce of the times with max). `python -m benchmarks.mpi_rows quick|full` under
`mpirun` prints one line `MPIROWS <json>` on rank 0 for bench_multi.py to record.

  allreduce S MiB     tensor.multi.allreduce of a float32 vector of S MiB per rank (made with from_local: each
                      rank's own data), ours: the shard-axis reduction that lower.mpi_exec runs as one MPI
                      Allreduce, plus the schedule and the Python around it; peer: mpi4py's `Allreduce` on numpy
                      arrays of the same size (preallocated output), timed in turns with ours, each turn
                      starting with the next of the three forms (3 times the runs up to 16 MiB, where a run takes
                      milliseconds and the machine's noise is larger than the difference). Bus
                      bandwidth as NCCL counts it: 2 (n - 1) / n * bytes / second.
                      jit: the same allreduce as a `tensor.jit` step (`jit(M.allreduce)(T)`), replayed: what a
                      jitted training step pays per collective.
  python us per call  the Python around the MPI call per allreduce (Comm.allreduce made a no-op so no rank waits),
                      per call and under jit: the part of a small allreduce's time that is ours alone.
  dp step             one data-parallel training step (forward, backward, AdamW) of an MLP 784-512-512-10 on a
                      global batch of 256 split over the ranks (each rank's rows from from_local), seconds per step
                      (wall, slowest rank) and the CPU seconds of the busiest rank (on a shared machine the ranks
                      may not get a core each; CPU time shows the work each rank does); and the same step
                      under `tensor.jit` (replayed: no graph built, no plan looked up), checked against the eager
                      step's parameters.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from devices.mpi import Comm, world


def _timed(c: Comm, fn: Callable[[], object]) -> float:
    return _timed_cpu(c, fn)[0]


def _timed_cpu(c: Comm, fn: Callable[[], object]) -> tuple[float, float]:
    """Wall seconds of fn on the slowest rank, and the most CPU seconds (this process's threads) a rank used."""
    c.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    w, cpu = c.allreduce(np.array([dt, dc]), "max")
    return float(w), float(cpu)


SAMPLE_SECONDS = 0.02  # a sample of the allreduce rows times this long a run of back-to-back calls (at least one)


def _calls_per_sample(c: Comm, fn: Callable[[], object]) -> int:
    """How many back-to-back calls of fn make a sample of about SAMPLE_SECONDS, the same on every rank (from the
    slowest rank's best of 3 single calls)."""
    best = min(_timed(c, fn) for _ in range(3))
    return max(1, min(64, round(SAMPLE_SECONDS / max(best, 1e-6))))


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def allreduce_rows(c: Comm, sizes_mib: list[int], samples: int) -> list[dict]:
    """Per size: `samples` turns; in each, every form (ours per call, ours under jit, mpi4py) times one sample of
    `calls` back-to-back calls (the same count for all three, about SAMPLE_SECONDS of mpi4py's), the turn's first
    form rotating. A sample's figure is the slowest rank's. Also per turn the ratio ours / mpi4py of that turn
    (paired: a change of the machine's load between turns falls on both), the load average before and after,
    and the results checked against mpi4py's sum before and after the timing."""
    from tensor import multi as M
    from tensor.jit import jit

    D, n = M.ranks(), c.size
    out = []
    for mib in sizes_mib:
        s = mib * (1 << 20) // 4
        local = np.random.default_rng(c.rank).standard_normal(s, dtype=np.float32)
        T = M.from_local(local, D)
        peer_out = np.empty_like(local)
        step = jit(M.allreduce)

        def ours() -> None:
            M.allreduce(T).realize()

        def jitted() -> None:
            step(T)

        def peer() -> None:
            c._comm.Allreduce(local, peer_out)

        peer()
        want = peer_out.copy()
        err = float(np.abs(M.allreduce(T).numpy() - want).max())
        for _ in range(3):  # the jit's two captured calls, then a replay
            err = max(err, float(np.abs(step(T).numpy() - want).max()))
        ours()
        calls = _calls_per_sample(c, peer)
        forms: list[tuple[str, Callable[[], object]]] = [("ours", ours), ("jit", jitted), ("peer", peer)]

        def sample(fn: Callable[[], object]) -> float:
            def run() -> None:
                for _ in range(calls):
                    fn()
            return _timed(c, run) / calls

        load = [_load()]
        times: dict[str, list[float]] = {"ours": [], "jit": [], "peer": []}
        for k in range(samples):  # in turns, each turn starting with the next form
            for name, fn in forms[k % 3:] + forms[:k % 3]:
                times[name].append(sample(fn))
        load.append(_load())
        err = max(err, float(np.abs(M.allreduce(T).numpy() - want).max()),
                  float(np.abs(step(T).numpy() - want).max()))
        busbw = 2 * (n - 1) / n * s * 4 / 1e9
        out.append({"mib": mib, "ranks": n, "max_abs_err": err, "calls_per_sample": calls, "load": load,
                    **{k: [busbw / t for t in v] for k, v in times.items()},
                    "paired": {k: [p / o for o, p in zip(times[k], times["peer"], strict=True)]
                               for k in ("ours", "jit")}})
    return out


def python_in_situ(c: Comm, mib: int = 1, calls: int = 200) -> dict:
    """Microseconds of Python around the MPI call per allreduce as the timed rows run it: each call timed whole
    and the time inside MPI's Allreduce (the communicator wrapped to time it) taken off; median over `calls`
    calls, alternating with a call of mpi4py's Allreduce as the rows' turns do (what the MPI call leaves in the
    CPU caches is what our Python then meets); the slowest rank's figure. Per call and under jit."""
    from tensor import multi as M
    from tensor.jit import jit

    local = np.ones(mib * (1 << 20) // 4, np.float32)
    T = M.from_local(local, M.ranks())
    peer_out = np.empty_like(local)
    step = jit(M.allreduce)
    for _ in range(3):
        M.allreduce(T).realize()
        step(T)
    real = c._comm
    timer = _TimedComm(real)
    res = {}
    try:
        c._comm = timer
        for name, fn in (("per call", lambda: M.allreduce(T).realize()), ("jit", lambda: step(T))):
            got = []
            for _ in range(calls):
                real.Allreduce(local, peer_out)
                timer.inside = 0.0
                t0 = time.perf_counter()
                fn()
                got.append(time.perf_counter() - t0 - timer.inside)
            res[name] = float(np.median(got)) * 1e6
    finally:
        c._comm = real
    worst = c.allreduce(np.array([res["per call"], res["jit"]]), "max")
    return {"per call": float(worst[0]), "jit": float(worst[1])}


class _TimedComm:
    """An mpi4py communicator whose Allreduce adds the seconds it took to `inside`."""

    def __init__(self, comm: Any) -> None:
        self._real, self.inside = comm, 0.0

    def Allreduce(self, *a: Any, **k: Any) -> None:
        t0 = time.perf_counter()
        self._real.Allreduce(*a, **k)
        self.inside += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def python_per_call(c: Comm, runs: int = 2000) -> dict:
    """Microseconds of Python per allreduce call around the MPI call, on this rank (the slowest rank's figure):
    the call timed with Comm.allreduce and Comm.allreduce_checked replaced by no-ops (so no rank waits for
    another), in CPU time of this thread (on a loaded host a rank may wait for its core; that is not Python's
    cost), best of 5 rounds of `runs` calls, for the per-call form (`M.allreduce(T).realize()`) and a jitted step
    replaying it. A 1 MiB float32 vector per rank; the real call's results are not used."""
    from devices.mpi import Comm as C
    from lower.mpi_cache import _directs
    from tensor import multi as M
    from tensor.jit import jit

    T = M.from_local(np.ones((1 << 20) // 4, np.float32), M.ranks())
    step = jit(M.allreduce)
    for _ in range(3):
        M.allreduce(T).realize()
        step(T)
    c.barrier()
    real, real_checked = C.allreduce, C.allreduce_checked
    C.allreduce = lambda self, x, op="sum", out=None: out  # type: ignore[method-assign,assignment,misc]  # no-op
    C.allreduce_checked = lambda self, x, out, mop, message: None  # type: ignore[method-assign]  # no-op too
    _directs.clear()  # a jit replay's remembered MPI calls are bound methods: remade with the no-op
    try:
        res = {}
        for name, fn in (("per call", lambda: M.allreduce(T).realize()), ("jit", lambda: step(T))):
            best = float("inf")
            for _ in range(5):
                t0 = time.thread_time()
                for _ in range(runs):
                    fn()
                best = min(best, (time.thread_time() - t0) / runs * 1e6)
            res[name] = best
    finally:
        C.allreduce, C.allreduce_checked = real, real_checked  # type: ignore[method-assign]
        _directs.clear()
    worst = c.allreduce(np.array([res["per call"], res["jit"]]), "max")
    return {"per call": float(worst[0]), "jit": float(worst[1])}


def _dp_step(c: Comm, batch: int) -> tuple[Callable[[object, object], object], object, object, list]:
    """A fresh data-parallel AdamW step of the MLP (seed 0) on M.ranks(): (step, X, Y, params)."""
    from tensor import Tensor
    from tensor import multi as M
    from tensor.modules import Linear
    from tensor.optim import AdamW

    D, n = M.ranks(), c.size
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    k = batch // n
    X, Y = M.from_local(x[c.rank * k:(c.rank + 1) * k], D), M.from_local(y[c.rank * k:(c.rank + 1) * k], D)
    Tensor.manual_seed(0)
    layers = [Linear(784, 512), Linear(512, 512), Linear(512, 10)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = AdamW(params, lr=1e-3)
    M.replicate_params(params + [t for st in opt.state for t in st.values()], D)

    def step(X: Tensor, Y: Tensor) -> Tensor:
        loss = ((layers[2](layers[1](layers[0](X).relu()).relu()) - Y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step(loss)
        return loss

    return step, X, Y, params


def dp_step_row(c: Comm, runs: int, batch: int = 256) -> dict:
    """The step eager (its graph built and its plans looked up at every call) and as a `tensor.jit` step (replayed
    from the third call), each on its own model from the same seed for the same number of steps; the final
    parameters of the two must agree (max |jit - eager| is reported)."""
    from tensor import Tensor
    from tensor.jit import jit

    out: dict[str, object] = {"ranks": c.size, "batch": batch}
    final = []
    for name in ("eager", "jit"):
        step, X, Y, params = _dp_step(c, batch)
        f = jit(step) if name == "jit" else step

        def run(f: Callable[[object, object], object] = f, X: object = X, Y: object = Y,
                params: list = params) -> None:
            Tensor.realize(f(X, Y), *params)

        for _ in range(2):  # compile and warm (the jit's two captured calls)
            run()
        times = [_timed_cpu(c, run) for _ in range(runs)]
        key = "" if name == "eager" else "jit_"
        out[f"{key}seconds"], out[f"{key}cpu_seconds"] = [w for w, _ in times], [cpu for _, cpu in times]
        final.append([p.numpy() for p in params])
    out["max_abs_err_jit_vs_eager"] = max(float(np.max(np.abs(a - b))) for a, b in zip(*final, strict=True))
    return out


def main(mode: str) -> None:
    c = world()
    if c is None:
        raise SystemExit("benchmarks.mpi_rows runs under mpirun: mpirun -n 2 python -m benchmarks.mpi_rows quick")
    quick = mode == "quick"
    rows: dict[str, object] = {"dp": dp_step_row(c, 3 if quick else 10)}
    if c.size > 1:
        rows["allreduce"] = allreduce_rows(c, [1, 4, 16] if quick else [1, 4, 16, 64, 256], 7 if quick else 11)
        rows["python_us"] = python_per_call(c)
        rows["python_in_situ_us"] = python_in_situ(c)
    if c.rank == 0:
        print("MPIROWS " + json.dumps(rows), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quick")
