"""The host allocator (devices.memory.Allocator): freed buffers are reused, but never while anything still sees
their memory (numpy views, held results); the pool is capped with least-recently-freed eviction; a failed
allocation trims the pool and retries; big buffers are huge-page aligned; a training loop's memory stays flat."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from devices import memory
from devices.cpu import DEVICE
from devices.memory import HUGE, Allocator, default_cap
from rewrite.dtype import dtypes
from rewrite.errors import OutOfMemoryError
from tensor import Tensor
from tests.tensor.util import rss_mb as _rss_mb

F32 = dtypes.float32


def _addr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


@pytest.mark.parametrize("n", [16, 1000, HUGE // 4 + 7, 4 << 20])
def test_a_freed_buffer_is_reused(n: int) -> None:
    a = Allocator()
    x = a.alloc(n, F32)
    p = _addr(x)
    a.free(x)
    del x
    y = a.alloc(n, dtypes.int32)  # same byte size, another dtype
    assert _addr(y) == p and a.reused == 1 and a.fresh == 1
    assert y.dtype == np.int32 and y.size == n


@pytest.mark.parametrize("n", [16, 4 << 20])
def test_memory_a_view_still_sees_is_never_handed_out(n: int) -> None:
    a = Allocator()
    x = a.alloc(n, F32)
    x[:] = np.arange(n, dtype=np.float32)
    view = x[1:].reshape(-1)  # what a user could hold, e.g. a zero-copy numpy view of a result
    a.free(x)
    del x
    ys = [a.alloc(n, F32) for _ in range(3)]
    for y in ys:
        y[:] = -1.0
    np.testing.assert_array_equal(view, np.arange(1, n, dtype=np.float32))
    for y in ys:
        a.free(y)
    del ys, y
    del view  # now the first block is free too: the next allocations take pooled blocks, none fresh
    fresh = a.fresh
    zs = [a.alloc(n, F32) for _ in range(4)]
    assert a.fresh == fresh and len({_addr(z) for z in zs}) == 4


def test_the_callers_own_reference_keeps_a_block_out_of_reuse() -> None:
    a = Allocator()
    x = a.alloc(64, F32)
    x[:] = 7.0
    a.free(x)  # still bound to `x` here
    y = a.alloc(64, F32)
    y[:] = 0.0
    np.testing.assert_array_equal(x, np.full(64, 7.0, np.float32))
    assert _addr(y) != _addr(x)


@pytest.mark.usefixtures("young_gc")
def test_held_results_are_never_overwritten() -> None:
    """Through the whole stack: results held as tensors and as numpy views of their storage keep their values while
    many more realizes (whose intermediates and outputs are freed and reused) run."""
    from lower import buffers as registry

    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(1 << 20).astype(np.float32) for _ in range(2)]
    a, b = (Tensor(x).realize() for x in xs)
    held = [(a * float(k) + b).realize() for k in range(3)]
    views = [registry.lookup(h.uop)[:100] for h in held[:2]]
    expect = [xs[0] * np.float32(k) + xs[1] for k in range(3)]
    for _ in range(20):
        out = ((a - b) * 3.0).exp()
        out.realize()
        del out
        gc.collect()
    for k, h in enumerate(held):
        np.testing.assert_allclose(h.numpy(), expect[k], rtol=1e-6)
    for k, v in enumerate(views):
        np.testing.assert_allclose(v, expect[k][:100], rtol=1e-6)
    del held
    gc.collect()
    for _ in range(5):
        (a * 9.0).realize()
    for k, v in enumerate(views):  # their tensors are gone, but the views still read the old values
        np.testing.assert_allclose(v, expect[k][:100], rtol=1e-6)


def test_cap_and_least_recently_freed_eviction() -> None:
    a = Allocator(cap=3 * 4096)
    xs = [a.alloc(1024, F32) for _ in range(4)]
    addrs = [_addr(x) for x in xs]
    for x in xs:
        a.free(x)
    del xs, x
    assert a.pooled_bytes == 3 * 4096  # the first freed was evicted
    got = {_addr(a.alloc(1024, F32)) for _ in range(3)}
    assert got == set(addrs[1:])
    big = a.alloc(8192, F32)  # bigger than the cap: never pooled
    a.free(big)
    assert a.pooled_bytes == 0
    a.trim()
    assert a.pooled_bytes == 0


def test_trim_keeps_the_most_recently_freed() -> None:
    a = Allocator()
    xs = [a.alloc(256 * (i + 1), F32) for i in range(4)]
    for x in xs:
        a.free(x)
    del xs, x
    a.trim(keep=1024 * 4 + 1024 * 3)
    assert a.pooled_bytes == 1024 * 3 + 1024 * 4
    a.trim()
    assert a.pooled_bytes == 0


def test_default_cap_is_a_sixteenth_of_memory_clamped(monkeypatch: pytest.MonkeyPatch) -> None:
    for phys, want in [(1 << 30, 64 << 20), (16 << 30, 1 << 30), (1 << 40, 4 << 30)]:
        monkeypatch.setattr(memory, "_PHYS", [phys])
        assert default_cap() == want
    monkeypatch.setattr(memory, "_PHYS", [])
    assert 64 << 20 <= DEVICE.cap <= 4 << 30


def test_allocation_failure_trims_the_pool_and_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    a = Allocator()
    x = a.alloc(4096, F32)
    a.free(x)
    del x
    assert a.pooled_bytes > 0
    real = Allocator._new
    calls: list[int] = []

    def fails_while_pooled(nbytes: int) -> memory._Block:
        calls.append(a.pooled_bytes)
        if a.pooled_bytes:
            raise MemoryError
        return real(nbytes)

    monkeypatch.setattr(Allocator, "_new", staticmethod(fails_while_pooled))
    y = a.alloc(100, F32)  # another size: the pooled block does not fit, so a new one is made
    assert y.size == 100 and calls == [4096 * 4, 0] and a.pooled_bytes == 0


def test_allocation_failure_after_trimming_is_out_of_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    a = Allocator()

    def fails(nbytes: int) -> memory._Block:
        raise MemoryError

    monkeypatch.setattr(Allocator, "_new", staticmethod(fails))
    with pytest.raises(OutOfMemoryError, match="do not fit"):
        a.alloc(100, F32)


def test_big_buffers_are_huge_page_aligned_and_small_ones_64_bytes() -> None:
    a = Allocator()
    assert _addr(a.alloc(HUGE // 4, F32)) % HUGE == 0
    assert _addr(a.alloc(HUGE // 4 + 1, F32)) % HUGE == 0
    for n in (1, 3, 1000):
        assert _addr(a.alloc(n, F32)) % 64 == 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="RSS is read from /proc")
def test_training_loop_memory_is_flat_and_buffers_come_from_the_pool() -> None:
    """An MLP whose activations are MiBs (huge-page blocks): after warm-up, every step's buffers are pooled ones
    (no fresh allocation) and the resident memory does not grow."""
    from tensor.modules import Linear, Sequential, cross_entropy
    from tensor.optim import SGD

    Tensor.manual_seed(0)
    model = Sequential(Linear(256, 1024), Tensor.relu, Linear(1024, 8))
    opt = SGD(model.parameters(), lr=1e-3, momentum=0.9)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((1024, 256)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 8, 1024).astype(np.int32)).realize()
    fresh: dict[int, int] = {}
    rss: dict[int, float] = {}
    for i in range(60):
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)
        loss.item()
        del loss
        if i + 1 in (20, 60):
            gc.collect()
            fresh[i + 1], rss[i + 1] = DEVICE.fresh, _rss_mb()
    assert fresh[60] == fresh[20], f"steps after warm-up took fresh memory: {fresh}"
    assert rss[60] - rss[20] < 8.0, f"RSS grew by {rss[60] - rss[20]:.1f} MB over 40 steps: {rss}"


def test_a_free_during_an_alloc_is_queued_and_pooled_after() -> None:
    """A finalizer (a buffer's UOp collected) may free in the middle of alloc, or another thread may: the pool is
    changed by one at a time, and the queued block is pooled once the lock is free."""
    a = Allocator()
    x = a.alloc(256, F32)
    with a._lock:  # as if an alloc were in progress
        a.free(x)
        assert a._returned and not a._pool
    del x
    assert a.pooled_bytes == 1024 and not a._returned
    assert a.alloc(256, F32) is not None and a.reused == 1


def test_threads_allocating_and_freeing_never_share_a_live_block() -> None:
    import threading

    a = Allocator()
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(300):
            x = a.alloc(64 + (i % 3), F32)
            x[:] = k
            if not (x == k).all():
                errors.append(f"thread {k}: block overwritten")
            a.free(x)
            del x

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert a.pooled_bytes <= a.cap and a.reused > 0


@pytest.mark.parametrize("how", ["env", "context"])
def test_sanitize_never_reuses_a_block(how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under SANITIZE (set in the environment or by a Context) a freed array is not pooled: free's fast check of the
    knob (rewrite.env.unset) still sees it."""
    from rewrite.env import Context

    a = Allocator()
    if how == "env":
        monkeypatch.setenv("SANITIZE", "address")
    with Context(SANITIZE="address") if how == "context" else Context():
        x = a.alloc(100, F32)
        assert x.nbytes == 400 and x.base is not None and x.base.nbytes == 400  # exact size: no alignment slack
        a.free(x)
        del x
        assert a.pooled_bytes == 0
    monkeypatch.delenv("SANITIZE", raising=False)
    y = a.alloc(100, F32)
    a.free(y)
    del y
    assert a.pooled_bytes == 400  # without it, pooled
