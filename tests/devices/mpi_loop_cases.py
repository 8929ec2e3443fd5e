"""Repeated allreduces across ranks, as a training loop makes them: `python -m tests.devices.mpi_loop_cases CASE`
under `mpirun` (tests/devices/test_mpi_loop.py). They run the per-call paths that remember their last call
(lower.mpi_cache: allreduce_now on the same input, a jit replay on the same buffers) with the inputs' data
changed in place, in a new storage, and on other inputs, and check every result against numpy on every rank,
results held from earlier calls included."""

from __future__ import annotations

import sys
import time
from typing import cast

import numpy as np

from devices import get_device
from devices.mpi import world
from lower import buffers, mpi_cache
from lower.multi import view_base
from rewrite import UOp
from tensor import Tensor
from tensor import multi as M


def _rank() -> tuple[int, int]:
    c = world()
    assert c is not None, "run me under mpirun"
    return c.rank, c.size


def _shard(t: Tensor) -> UOp:
    """This rank's shard (a BUFFER) of a realized tensor on ranks()."""
    base = view_base(t.uop)
    assert base is not None
    r, _ = _rank()
    return buffers.shards(base)[r]


def _local(t: Tensor) -> np.ndarray:
    """This rank's piece of a realized tensor on ranks(), a view of the stored array (nothing gathered)."""
    return np.asarray(buffers.lookup(_shard(t))).reshape(-1)


def _set(T: Tensor, values: np.ndarray) -> None:
    """New values for T (`values` twice: see _own), written in place (assign: the same storage array, as a
    training loop's updates are)."""
    storage = buffers.lookup(_shard(T))
    T.assign(M.from_local(values, M.ranks()) * 2).realize()
    assert buffers.lookup(_shard(T)) is storage


def _own(values: np.ndarray) -> Tensor:
    """A realized tensor on ranks() with this rank's `values`, in storage of its own (computed, so that assign writes
    into it in place; from_local's storage may be the caller's array, read-only)."""
    return (M.from_local(values, M.ranks()) * 2).realize()


def _blocks(n: int, size: int, k: int) -> np.ndarray:
    """Every rank's block at step k (row q is rank q's): distinct per rank and per step, exact in float32."""
    rows = np.arange(n * size, dtype=np.float32).reshape(n, size) % 97 + 1
    return rows * (k + 1) - np.arange(n, dtype=np.float32)[:, None]


def _calls() -> int:
    c = world()
    assert c is not None
    return c.calls["Allreduce"]


def allreduce_loop() -> None:
    """M.allreduce in a loop on one realized input whose data changes in place each step (the path that reuses the
    last call's arrays must read the new data), with some results held (never written again) and some dropped
    (their storage reused), other inputs and sizes in between; one Allreduce per call; all numpy-checked."""
    r, n = _rank()
    D = M.ranks()
    size = 1000
    T = _own(_blocks(n, size, 0)[r])
    held: list[tuple[Tensor, np.ndarray, np.ndarray]] = []  # (result, a numpy view of its storage, the sum)
    other = M.from_local(np.full(6 * n, r + 1, np.float32), D)
    for k in range(40):
        b = _blocks(n, size, k)
        _set(T, b[r])  # the same storage, new values
        before = _calls()
        got = M.allreduce(T)
        assert _calls() - before == 1 and got.is_realized
        assert mpi_cache._last is not None and mpi_cache._last.x is T.uop  # the next call on T takes the fast path
        want = 2 * b.sum(0)
        np.testing.assert_array_equal(_local(got), want)
        if k % 5 == 0:
            held.append((got, _local(got), want))
        if k % 7 == 3:  # another input in between (replaces the remembered one), then back
            np.testing.assert_array_equal(_local(M.allreduce(other)), np.full(6 * n, n * (n + 1) / 2, np.float32))
        if k % 11 == 4:  # a new storage array for T's shard (the remembered array is not T's any more)
            sh = _shard(T)
            dev = get_device(cast(str, sh.buf_arg.device))
            fresh = dev.alloc(size, sh.dtype)
            fresh[...] = 1
            buffers.store(sh, fresh, owner=dev)
            np.testing.assert_array_equal(_local(M.allreduce(T)), np.full(size, n, np.float32))
        del got
    for t, view, want in held:  # nothing wrote into a held result, nor into its numpy view
        np.testing.assert_array_equal(_local(t), want)
        np.testing.assert_array_equal(view, want)
        np.testing.assert_array_equal(t.numpy(), want)
    print(f"rank {r}/{n}: allreduce_loop ok", flush=True)


def jit_allreduce_loop() -> None:
    """A jitted allreduce step (all collectives: its replay reads the arrays directly and remembers them) in a loop:
    on one argument whose data changes in place, then on new arguments each step; a result of the per-call
    allreduce held across the replays keeps its values; one Allreduce per replay; all numpy-checked."""
    from tensor.jit import jit

    r, n = _rank()
    size = 1000
    step = jit(M.allreduce)
    T = _own(_blocks(n, size, 0)[r])
    kept = M.allreduce(T)  # at once, held throughout
    kept_want = 2 * _blocks(n, size, 0).sum(0)
    np.testing.assert_array_equal(_local(kept), kept_want)
    for k in range(30):
        b = _blocks(n, size, k)
        if k < 15:
            _set(T, b[r])  # the same argument, new values
            arg = T
        else:
            arg = _own(b[r])  # a new argument each step
        before = _calls()
        got = step(arg)
        if k >= 2:  # a replay: the Allreduce alone, on the arrays the replay remembers (lower.mpi_cache._Direct)
            assert _calls() - before == 1, (k, _calls() - before)
            assert len(mpi_cache._directs) == 1
        np.testing.assert_array_equal(_local(got), 2 * b.sum(0))
        np.testing.assert_array_equal(got.numpy(), 2 * b.sum(0))
    np.testing.assert_array_equal(_local(kept), kept_want)
    assert step.calls == 30
    print(f"rank {r}/{n}: jit_allreduce_loop ok", flush=True)


def fast_path_stalls() -> None:
    """The last rank never joins the second allreduce on the same input (the remembered path, whose watchdog is
    the one-call slot): the other ranks must abort with the call named, not hang."""
    r, n = _rank()
    T = M.from_local(np.ones(8, np.float32), M.ranks())
    M.allreduce(T)
    if r == n - 1:
        time.sleep(120)
    M.allreduce(T)
    print("unreachable: the allreduce finished without the last rank", flush=True)


if __name__ == "__main__":
    cases = {f.__name__: f for f in (allreduce_loop, jit_allreduce_loop, fast_path_stalls)}
    cases[sys.argv[1]]()
