"""Copies of strided windows (lower.copyview): the window found under a COPY's movement ops against numpy doing
the same moves, copies into windows of a concatenation, and what the multi-device collectives schedule: no
kernel that only makes a slice contiguous, reduce_scatter + allgather for the allreduce over the shard axis with
each chunk combined once, so every device's copy is bitwise the same."""

from __future__ import annotations

import numpy as np
import pytest

from lower import buffers, multi
from lower.copyview import View, copy_into, source_view
from lower.multi import view_base
from rewrite import Ops, UOp, dtypes
from tensor import Tensor
from tensor import multi as M

CPU2 = ("cpu:0", "cpu:1")
CPU4 = ("cpu:0", "cpu:1", "cpu:2", "cpu:3")

# (name, base shape, moves as (op, arg)..., a slice of the buffer?): each applied to the buffer and numpy alike
# fmt: off
WINDOWS = [
    ("slice of rows",       (8, 6),    [("shrink", ((2, 0), (5, 6)))],                                   True),
    ("slice of columns",    (8, 6),    [("shrink", ((0, 1), (8, 4)))],                                   False),
    ("transpose",           (8, 6),    [("permute", (1, 0))],                                            False),
    ("split then merge",    (24,),     [("reshape", (4, 6)), ("permute", (1, 0)),
                                        ("shrink", ((0, 0), (3, 4)))],                                   False),
    ("reshape of a slice",  (4, 6),    [("shrink", ((1, 0), (3, 6))), ("reshape", (3, 4))],              True),
    ("merge of a slice",    (4, 6, 2), [("shrink", ((0, 2, 0), (4, 4, 2))), ("reshape", (4, 4))],        False),
    ("broadcast",           (1, 6),    [("expand", (3, 6))],                                             False),
    ("spec reduce_scatter", (8,),      [("reshape", (1, 2, 4)), ("permute", (1, 0, 2)),
                                        ("shrink", ((1, 0, 0), (2, 1, 4)))],                             True),
    ("spec allgather",      (4,),      [("reshape", (1, 4)), ("expand", (2, 4)), ("shrink", ((1, 0), (2, 4)))], True),
]
# fmt: on


def _move(x, op: str, arg):  # type: ignore[no-untyped-def]
    if op == "shrink":
        lo, hi = arg
        return x.shrink(lo, hi) if isinstance(x, UOp) else x[tuple(slice(a, b) for a, b in zip(lo, hi, strict=True))]
    if op == "permute":
        return x.permute(arg) if isinstance(x, UOp) else x.transpose(arg)
    if op == "reshape":
        return x.reshape(arg)
    return x.expand(arg) if isinstance(x, UOp) else np.broadcast_to(x, arg)


@pytest.mark.parametrize(("name", "shape", "moves", "contiguous"), WINDOWS, ids=[w[0] for w in WINDOWS])
def test_window_matches_numpy(name, shape, moves, contiguous) -> None:
    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    u, want = UOp.buffer(1, dtypes.float32, shape, "cpu"), a
    for op, arg in moves:
        u, want = _move(u, op, arg), _move(want, op, arg)
    found = source_view(u)
    assert found is not None and found[0].op is Ops.BUFFER
    dst = np.zeros(want.size, np.float32)
    copy_into(dst, a.reshape(-1), found[1])
    np.testing.assert_array_equal(dst.reshape(want.shape), want)
    assert found[1].contiguous == contiguous


def test_no_window_through_pad_flip_or_a_copying_reshape() -> None:
    b = UOp.buffer(1, dtypes.float32, (4, 6), "cpu")
    for x in (b.pad((1, 0), (0, 0)), b.flip([0]), b.shrink((0, 0), (2, 6)).pad((0, 0), (2, 0))):
        found = source_view(x)
        assert found is not None and found[0] is x and found[1] == View.of(x.shape)  # realized as it is
    assert source_view(b.permute((1, 0)).reshape((24,))) is None  # numpy would copy too
    # a computed value is realized as the copy reads it when the window leaves some of it out
    assert source_view((b + 1).shrink((0, 0), (2, 6))) is None
    found = source_view((b + 1).permute((1, 0)))
    assert found is not None and found[0] is b + 1


def test_copy_into_a_window() -> None:
    dst = np.zeros(12, np.float32)
    copy_into(dst, np.arange(6, dtype=np.float32), None, View((2, 3), (6, 1), 3))
    np.testing.assert_array_equal(dst.reshape(2, 6), [[0, 0, 0, 0, 1, 2], [0, 0, 0, 3, 4, 5]])


def _items(t: Tensor) -> list:
    return t.schedule()


def test_allreduce_schedules_no_contiguity_kernels_and_assembles_with_copies() -> None:
    s = 2 * multi.ALLREDUCE_CHUNK_MIN  # big enough for reduce_scatter + allgather
    T = Tensor(np.ones(2 * s, np.float32)).shard(CPU2, 0).realize()
    for r in (M.allreduce(T), T.reshape(2, s).sum(0)):
        items = _items(r)
        kernels = [it for it in items if it.kind == "kernel"]
        copies = [it for it in items if it.kind == "copy"]
        assert len(kernels) == 2, items  # one reduction of a chunk per device, nothing else
        # a chunk out to each device, then each device's two chunks into place in its result
        assert len(copies) == 6 and sum(it.dst_view is not None for it in copies) == 4


def test_resharding_copies_pieces_into_place() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = Tensor(a).shard(CPU2, 1).realize()
    g = x.to("cpu:0")  # gather: both column blocks into one (4, 6) buffer
    assert all(it.kind == "copy" for it in _items(g))
    np.testing.assert_array_equal(g.numpy(), a)
    np.testing.assert_array_equal(x.shard(CPU2, 0).numpy(), a)


@pytest.mark.parametrize("D", [CPU2, CPU4], ids=["cpu2", "cpu4"])
def test_reduce_scatter_allgather_over_the_shard_axis(monkeypatch: pytest.MonkeyPatch, D) -> None:
    monkeypatch.setattr(multi, "ALLREDUCE_CHUNK_MIN", 4)
    n = len(D)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((n * 4, 8)).astype(np.float32)
    x = Tensor(a).shard(D, 0).realize()
    r = x.reshape(n, 4, 8).sum(0)
    items = _items(r)
    remote = [it for it in items if it.kind == "copy" and it.bufs[0].device != it.bufs[1].device]
    # each device sends its n - 1 chunks of 32 / n elements out, then its combined chunk to the n - 1 others
    assert len(remote) == 2 * n * (n - 1)
    assert all(int(np.prod(it.view.shape if it.view else it.bufs[1].shape)) == 32 // n for it in remote)
    r = r.realize()
    base = view_base(r.uop)
    assert base is not None
    copies = [np.asarray(buffers.lookup(s)) for s in buffers.shards(base)]
    for c in copies[1:]:
        np.testing.assert_array_equal(c, copies[0])  # bitwise the same on every device
    np.testing.assert_allclose(copies[0].reshape(4, 8), a.reshape(n, 4, 8).sum(0), rtol=1e-6, atol=1e-6)
    mx = x.reshape(n, 4, 8).max(0).values
    np.testing.assert_array_equal(mx.numpy(), a.reshape(n, 4, 8).max(0))


def test_small_allreduce_is_direct() -> None:
    T = Tensor(np.ones(2 * 8, np.float32)).shard(CPU2, 0).realize()
    remote = [it for it in _items(T.reshape(2, 8).sum(0)) if it.kind == "copy"]
    assert len(remote) == 2 and all(it.dst_view is None and it.view is None for it in remote)  # each partial, whole
