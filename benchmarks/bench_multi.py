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


@suite("multi")
def multi(b: Bench) -> None:
    _matmul_rows(b, 1024 if b.quick else 4096)
    for mib in SIZES[b.mode]:
        _allreduce_rows(b, mib)
