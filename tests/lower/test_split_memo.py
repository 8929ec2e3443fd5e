"""The kernel split's build memo (lower.split_build.region_shape): a node whose region has the shape of one built
before in the same split (a second layer, another parameter's update) takes that build with its buffers swapped
and its realize points at the same places. The split must be exactly the one that building every kernel gives,
and its results numpy's."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

from lower.schedule import schedule
from rewrite import Ops, UOp
from tensor import Tensor

split_build = importlib.import_module("lower.split_build")


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _split(roots: list[UOp], memo: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple], int]:
    """The schedule of `roots` (each item's kind, name, buffers and AST; a buffer the split made, named by its
    first use, since each split makes its own) and how many kernels were built."""
    builds = itertools.count()
    for name in ("build_kernel", "build_store_kernel"):
        real = getattr(split_build, name)
        monkeypatch.setattr(split_build, name, (lambda f: lambda *a, **k: (next(builds), f(*a, **k))[1])(real))
    if not memo:  # every region a shape of its own: each kernel built
        monkeypatch.setattr(split_build, "region_shape", lambda node, order, realized, flat: ((object(),), [], {}))
    leaves = {u for u in UOp.sink(*roots).toposort() if u.op is Ops.BUFFER}
    items, _ = schedule(roots)
    monkeypatch.undo()
    made: dict[UOp, int] = {}
    names = [tuple(b if b in leaves else made.setdefault(b, len(made)) for b in it.bufs) for it in items]
    return [(it.kind, it.name, bs, it.ast) for it, bs in zip(items, names, strict=True)], next(builds)


def _block(x: Tensor, v: Tensor) -> Tensor:
    """exp broadcast inside a matmul's loop (realize-expensive-broadcast) and a row sum read inside a reduction's
    loop (realize-reduce-in-reduce-loop): realize points the memo must place again."""
    p = (x - x.max(axis=1, keepdim=True)).exp()
    return (p @ v) * p.sum(1, keepdim=True).sum(0)


def test_two_blocks_of_one_shape_split_as_built(monkeypatch: pytest.MonkeyPatch) -> None:
    xs = [_arr(4, 16, seed=i) for i in range(2)]
    vs = [_arr(16, 8, seed=10 + i) for i in range(2)]
    outs = [_block(Tensor(x).realize(), Tensor(v).realize()) for x, v in zip(xs, vs, strict=True)]
    outs.append(_block(outs[0][:, :4].reshape(4, 4).pad(((0, 0), (0, 12))), Tensor(vs[1]).realize()))
    roots = [o.uop for o in outs]
    built, n_built = _split(roots, False, monkeypatch)
    memo, n_memo = _split(roots, True, monkeypatch)
    assert memo == built  # the same items, buffers and ASTs (hash-consed: identical objects)
    assert n_memo < n_built  # the second block's kernels were taken from the first's
    Tensor.realize(*outs)

    def block(x: np.ndarray, v: np.ndarray) -> np.ndarray:
        p = np.exp(x - x.max(1, keepdims=True))
        return (p @ v) * p.sum(1, keepdims=True).sum(0)

    want = [block(x, v) for x, v in zip(xs, vs, strict=True)]
    want.append(block(np.pad(want[0][:, :4], ((0, 0), (0, 12))), vs[1]))
    for o, w in zip(outs, want, strict=True):
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-4, atol=1e-4)


def test_updates_in_place_of_one_shape_split_as_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Assignments (an optimizer's updates): the STORE kernels of parameters of one shape share a build; one
    that reads its target elsewhere (a flip: realize-store-value) and one that reads another parameter do not."""
    olds = [_arr(6, 5, seed=i) for i in range(4)]
    grads = [_arr(6, 5, seed=20 + i) for i in range(4)]
    ps = [Tensor(x.copy()).realize() for x in olds]
    gs = [Tensor(g).realize() for g in grads]
    ps[0].assign(ps[0] - gs[0] * 0.5)
    ps[1].assign(ps[1] - gs[1] * 0.5)
    ps[2].assign(ps[2].flip(0) - gs[2] * 0.5)
    ps[3].assign(ps[3] - gs[3] * -0.0 + Tensor(ps[0].uop))
    roots = [p.uop for p in ps]
    built, n_built = _split(roots, False, monkeypatch)
    memo, n_memo = _split(roots, True, monkeypatch)
    assert memo == built
    assert n_memo < n_built
    Tensor.realize(*ps)
    want = [olds[0] - grads[0] * 0.5, olds[1] - grads[1] * 0.5, olds[2][::-1] - grads[2] * 0.5,
            olds[3] - grads[3] * -0.0 + (olds[0] - grads[0] * 0.5)]  # p0 read after its update
    for p, w in zip(ps, want, strict=True):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-6, atol=1e-6)


def test_region_shape_tells_apart_what_a_build_reads() -> None:
    """Shapes differ when a region reads one buffer twice instead of two, when a constant is -0.0 instead of 0.0,
    and when a buffer's size differs; they agree for the same ops over other buffers of the same sizes."""
    from lower.split_build import flat_buffer, region, region_shape
    from rewrite import dtypes

    def shape_of(root: UOp, leaves: list[UOp]) -> tuple:
        out = UOp.buffer(99, root.dtype, root.shape, "cpu")
        realized = {**{b: b for b in leaves}, root: out}
        flat = {n: flat_buffer(b) for n, b in realized.items()}
        return region_shape(root, region(root, realized), realized, flat)[0]

    a, b, c = (UOp.buffer(i, dtypes.float32, (8,), "cpu") for i in (1, 2, 3))
    big = UOp.buffer(4, dtypes.float32, (16,), "cpu")
    first = big.shrink((0,), (8,))
    same = shape_of(a + b, [a, b])
    assert shape_of(a + c, [a, c]) == same
    assert shape_of(a + a, [a]) != same
    assert shape_of(a * 0.0, [a]) != shape_of(a * -0.0, [a])
    assert shape_of(first + b, [big, b]) != shape_of(c + b, [c, b])
