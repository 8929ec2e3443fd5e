"""Programs that tests/devices/test_mpi.py runs under `mpirun`: `python -m tests.devices.mpi_cases CASE`.

Each case checks its own results against numpy on every rank and exits non-zero on a mismatch."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

import numpy as np

from devices.mpi import world


def _data(rank: int, shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    return (np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * (rank + 1) - rank).astype(dtype)


def collectives() -> None:
    c = world()
    assert c is not None
    n, r = c.size, c.rank
    every = [_data(k, (n, 6)) for k in range(n)]
    x = every[r]
    np.testing.assert_array_equal(c.allreduce(x), sum(every))
    np.testing.assert_array_equal(c.allreduce(x, "max"), np.maximum.reduce(every))
    np.testing.assert_array_equal(c.allreduce(x, "min"), np.minimum.reduce(every))
    np.testing.assert_array_equal(c.allgather(x), np.stack(every))
    np.testing.assert_array_equal(c.reduce_scatter(x), sum(every)[r])
    np.testing.assert_array_equal(c.bcast(x, root=n - 1), every[n - 1])
    g = c.gather(x, root=0)
    if r == 0:
        assert g is not None
        np.testing.assert_array_equal(g, np.stack(every))
    else:
        assert g is None
    red = c.reduce(x.astype(np.int64), "prod", root=0)
    if r == 0:
        assert red is not None
        np.testing.assert_array_equal(red, np.prod(np.stack(every).astype(np.int64), axis=0))
    peer = r ^ 1
    if peer < n:
        np.testing.assert_array_equal(c.sendrecv(x, peer), every[peer])
    if r == 0:
        c.send(x[::-1], dest=n - 1, tag=7)   # a non-contiguous view goes out contiguous
    if r == n - 1:
        np.testing.assert_array_equal(c.recv(x.shape, x.dtype, source=0, tag=7), every[0][::-1])
    c.barrier()
    print(f"rank {r}/{n}: collectives ok", flush=True)


def _last_rank_skips_the_allreduce(leave: Callable[[], None]) -> None:
    c = world()
    assert c is not None
    if c.rank == c.size - 1:
        leave()
    c.allreduce(np.ones(4, np.float32))
    print("unreachable: the allreduce finished without the last rank", flush=True)


def rank_dies() -> None:
    """The last rank leaves without joining the allreduce: the others must abort, not hang."""
    _last_rank_skips_the_allreduce(lambda: os._exit(0))


def rank_stalls() -> None:
    """The last rank is stuck elsewhere and never joins the allreduce: the watchdog must abort the job."""
    def stall() -> None:
        time.sleep(120)
        os._exit(0)

    _last_rank_skips_the_allreduce(stall)


def rank_raises() -> None:
    """The last rank raises before the allreduce: its uncaught error must take the job down."""
    c = world()
    assert c is not None
    if c.rank == c.size - 1:
        raise ValueError("deliberate failure on the last rank")
    c.allreduce(np.ones(4, np.float32))
    print("unreachable: the allreduce finished without the last rank", flush=True)


if __name__ == "__main__":
    cases = {f.__name__: f for f in (collectives, rank_dies, rank_stalls, rank_raises)}
    cases[sys.argv[1]]()
