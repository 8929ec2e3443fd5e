"""Suite `multi`: multi-device tensors on one host (tensor.multi): tensor-parallel matmul and allreduce.

Rows:
  matmul N            C = A @ B, float32 N x N (`--quick`: 1024; full: 4096), inputs realized beforehand:
    1 device            on `cpu` with every core
    column-parallel     A replicated and B split by columns over (cpu:0, cpu:1): each device computes its block of
                        C's columns (no communication; C stays sharded)
    row-parallel        A split by columns and B by rows: each device a partial product, then the allreduce
                        (each device sums both partials) leaves C replicated
    compared 2 devices against 1: the devices share the host's cores (each cpu device of a schedule is compiled
    for its share, lower.parallel), so on one host this measures the overhead of splitting, not a speedup from
    more hardware. The check: max |C - C_1device| / max |C_1device|, in the row's info.
  allreduce n x S     the spec's allreduce (reduce_scatter + allgather, written literally) of a float32 vector of
                      S elements per device (`--quick`: 2^18; full: 2^22), `ALLREDUCE_TRANSPORTS` lists the
                      device tuples it runs on: in-process cpu devices here; a transport across processes
                      (MPI) adds its entry (a name and a function giving the tuple) and gets the same row.
                      Bus bandwidth as NCCL counts it: 2 (n - 1) / n * S * 4 bytes per second.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from benchmarks.runner import Bench, Timed, suite

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


def _allreduce_rows(b: Bench, size: int) -> None:
    from tensor import Tensor
    from tensor.multi import allreduce

    for name, devices in ALLREDUCE_TRANSPORTS.items():
        D = devices()
        n = len(D)
        data = np.random.default_rng(1).standard_normal(n * size, dtype=np.float32)
        T = Tensor(data).shard(D, 0).realize()
        want = data.reshape(n, size).sum(0)
        got = allreduce(T).numpy()
        ok = float(np.abs(got - want).max())
        busbw = 2 * (n - 1) / n * size * 4 / 1e9
        r = b.measure(f"allreduce {n}x{size} {name}", lambda _, T=T: allreduce(T).realize(), work=busbw, unit="GB/s",
                      info={"max_abs_err": ok, "devices": list(D)})
        b.note(f"allreduce {name}: {n} devices x {size} float32, bus bandwidth {r.median:.2f} GB/s, max |err| {ok:.1e}")


@suite("multi")
def multi(b: Bench) -> None:
    _matmul_rows(b, 1024 if b.quick else 4096)
    _allreduce_rows(b, 1 << 18 if b.quick else 1 << 22)
