"""Movement ops against numpy: reshape permute expand pad shrink flip transpose squeeze unsqueeze flatten, basic
indexing (ints, slices with any step, None, Ellipsis), cat stack repeat split chunk gather."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewrite.dtype import dtypes
from rewrite.errors import ShapeError
from tensor import Tensor
from tests.tensor.util import arrays, close, shapes, val

SET = settings(max_examples=30, deadline=None)


def arange_array(*shape: int, dtype: str = "int32") -> np.ndarray:
    return np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)


# ---------------------------------------------------------------- primitives


@SET
@given(arrays("int32", shapes(0, 4)), st.data())
def test_reshape_roundtrips_and_infers(a: np.ndarray, data: st.DataObject) -> None:
    t = Tensor(a)
    close(t.reshape(-1), a.reshape(-1))
    close(t.reshape(a.size), a.reshape(a.size))
    if a.ndim:
        close(t.reshape(a.shape[0], -1), a.reshape(a.shape[0], -1))
        close(t.reshape((1, *a.shape, 1)), a.reshape((1, *a.shape, 1)))
        close(t.view(*reversed(a.shape)), a.reshape(tuple(reversed(a.shape))))


@SET
@given(arrays("float32", shapes(1, 4)), st.data())
def test_permute_transpose_T(a: np.ndarray, data: st.DataObject) -> None:
    order = data.draw(st.permutations(range(a.ndim)))
    close(Tensor(a).permute(*order), a.transpose(order))
    close(Tensor(a).permute(tuple(o - a.ndim for o in order)), a.transpose(order))
    close(Tensor(a).T, a.T)
    if a.ndim >= 2:
        close(Tensor(a).transpose(), np.swapaxes(a, 0, 1))
        close(Tensor(a).transpose(-1, 0), np.swapaxes(a, -1, 0))


def test_expand() -> None:
    a = arange_array(3, 1)
    close(Tensor(a).expand(3, 4), np.broadcast_to(a, (3, 4)))
    close(Tensor(a).expand(2, -1, 5), np.broadcast_to(a, (2, 3, 5)))
    close(Tensor(a).expand((3, 1)), a)
    with pytest.raises(ShapeError, match=r"expand: cannot expand \(3, 1\) to \(4, 4\): axis 0 has size 3"):
        Tensor(a).expand(4, 4)


@SET
@given(arrays("float32", shapes(1, 3)), st.data())
def test_pad_pairs_and_torch_order(a: np.ndarray, data: st.DataObject) -> None:
    pairs = [data.draw(st.tuples(st.integers(0, 2), st.integers(0, 2))) for _ in range(a.ndim)]
    close(Tensor(a).pad(pairs), np.pad(a, pairs))
    close(Tensor(a).pad(pairs, value=-1.5), np.pad(a, pairs, constant_values=-1.5))
    flat = [v for p in reversed(pairs) for v in p]  # torch's order: last axis first
    close(Tensor(a).pad(flat), np.pad(a, pairs))
    close(Tensor(a).pad([None] * a.ndim), a)


def test_pad_negative_crops_and_bool_value() -> None:
    a = arange_array(4, 5)
    close(Tensor(a).pad(((1, -2), (-1, 1))), np.pad(a[:-2, 1:], ((1, 0), (0, 1))))
    b = np.array([True, False])
    close(Tensor(b).pad(((1, 1),), value=True), np.array([True, True, False, True]))
    with pytest.raises(ShapeError, match="pad: cropping"):
        Tensor(a).pad(((0, -5), None))
    with pytest.raises(ShapeError, match=r"pad: 1 .* pairs for a tensor of shape"):
        Tensor(a).pad(((1, 1),))


@SET
@given(arrays("int16", shapes(1, 3, max_side=5)), st.data())
def test_shrink_and_shrink_to(a: np.ndarray, data: st.DataObject) -> None:
    rng = []
    for d in a.shape:
        b = data.draw(st.integers(0, d))
        rng.append((b, data.draw(st.integers(b, d))))
    close(Tensor(a).shrink(rng), a[tuple(slice(b, e) for b, e in rng)])
    close(Tensor(a).shrink_to(*(e for _, e in rng)), a[tuple(slice(0, e) for _, e in rng)])
    close(Tensor(a).shrink([None] * a.ndim), a)


@SET
@given(arrays("float32", shapes(1, 3)), st.data())
def test_flip(a: np.ndarray, data: st.DataObject) -> None:
    axes = data.draw(st.lists(st.integers(0, a.ndim - 1), unique=True))
    close(Tensor(a).flip(tuple(axes)), np.flip(a, tuple(axes)))
    close(Tensor(a).flip(-1), np.flip(a, -1))
    close(Tensor(a).flip(), np.flip(a))


def test_squeeze_unsqueeze_flatten_unflatten() -> None:
    a = arange_array(1, 3, 1, 2)
    close(Tensor(a).squeeze(), a.squeeze())
    close(Tensor(a).squeeze(0), a.squeeze(0))
    close(Tensor(a).squeeze((0, 2)), a.squeeze((0, 2)))
    close(Tensor(a).squeeze(1), a)  # not size 1: unchanged, as torch
    close(Tensor(a).unsqueeze(0), a[None])
    close(Tensor(a).unsqueeze(-1), a[..., None])
    close(Tensor(a).unsqueeze(2), np.expand_dims(a, 2))
    close(Tensor(a).flatten(), a.reshape(-1))
    close(Tensor(a).flatten(1), a.reshape(1, -1))
    close(Tensor(a).flatten(1, 2), a.reshape(1, 3, 2))
    close(Tensor(a).unflatten(1, (3, 1)), a.reshape(1, 3, 1, 1, 2))
    close(Tensor(3.0).flatten(), np.array([3.0]))


# ---------------------------------------------------------------- getitem


@st.composite
def index_case(draw: st.DrawFn) -> tuple[np.ndarray, tuple]:
    shape = draw(shapes(1, 4, max_side=5))
    a = arange_array(*shape)
    idx: list = []
    for d in shape:
        kind = draw(st.sampled_from(["int", "slice", "slice", "none_then_slice"]))
        if kind == "int":
            idx.append(draw(st.integers(-d, d - 1)))
            continue
        if kind == "none_then_slice":
            idx.append(None)
        start = draw(st.none() | st.integers(-d - 2, d + 2))
        stop = draw(st.none() | st.integers(-d - 2, d + 2))
        step = draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]))
        idx.append(slice(start, stop, step))
    cut = draw(st.integers(0, len(idx)))
    idx = idx[:cut]  # leave trailing axes implicit
    if draw(st.booleans()):  # an ellipsis anywhere stands for the axes the other entries leave out
        idx.insert(draw(st.integers(0, len(idx))), Ellipsis)
    return a, tuple(idx)


@settings(max_examples=150, deadline=None)
@given(index_case())
def test_getitem_matches_numpy(case: tuple) -> None:
    a, idx = case
    try:
        expected = a[idx]
    except IndexError:  # an ellipsis moved an int onto a shorter axis: both must refuse
        with pytest.raises(IndexError, match="out of range for axis"):
            Tensor(a)[idx]
        return
    close(Tensor(a)[idx], expected)


@pytest.mark.parametrize("idx", [
    0, -1, (1, 2), (slice(None), 1), (Ellipsis, 0), (None, Ellipsis, None), (0, None, slice(None, None, -1)),
    (slice(4, 0, -2),), (slice(None, None, -3), slice(1, None, 2)), (slice(10, 20),), (slice(-100, 100, 7),),
    (Ellipsis,), (), (1, Ellipsis, 2),
])
def test_getitem_table(idx: object) -> None:
    a = arange_array(5, 6)
    close(Tensor(a)[idx], a[idx])


def test_getitem_numpy_ints_and_iteration() -> None:
    a = arange_array(3, 2)
    close(Tensor(a)[np.int64(2)], a[2])
    rows = list(Tensor(a))
    assert len(rows) == 3
    close(rows[1], a[1])


@pytest.mark.parametrize("idx,msg", [
    (3, r"index 3 is out of range for axis 0 with size 3"),
    ((0, -5), r"index -5 is out of range for axis 1 with size 4"),
    ((0, 0, 0), r"too many indices for a tensor of shape \(3, 4\)"),
    ((Ellipsis, Ellipsis), r"single ellipsis"),
])
def test_getitem_errors(idx: object, msg: str) -> None:
    with pytest.raises(IndexError, match=msg):
        Tensor.zeros(3, 4)[idx]


def test_getitem_rejects_float_indices() -> None:
    """Integer and bool tensors index (tests/tensor/test_indexing.py); float ones and float scalars do not."""
    with pytest.raises(IndexError, match="integer or bool"):
        Tensor.zeros(3)[Tensor([0.0, 1.0])]
    with pytest.raises(TypeError, match="float"):
        Tensor.zeros(3)[1.5]


# ---------------------------------------------------------------- joining and splitting


@SET
@given(shapes(1, 3), st.data())
def test_cat_and_stack(shape: tuple, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = []
    for i in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        parts.append(data.draw(arrays(["int32", "float32", "int8"][i % 3], tuple(s))))
    got = Tensor.cat(*[Tensor(p) for p in parts], dim=axis)
    close(got, np.concatenate(parts, axis=axis))
    same = [data.draw(arrays("float32", shape)) for _ in range(2)]
    sd = data.draw(st.integers(-len(shape) - 1, len(shape)))
    close(Tensor(same[0]).stack(Tensor(same[1]), dim=sd), np.stack(same, axis=sd))
    close(Tensor.stack([Tensor(s) for s in same]), np.stack(same))


def test_cat_bool_and_errors() -> None:
    a, b = np.array([True, False]), np.array([False, True, True])
    close(Tensor.cat([Tensor(a), Tensor(b)]), np.concatenate([a, b]))
    assert Tensor.cat(Tensor([1]), Tensor([1.0])).dtype is dtypes.float32
    with pytest.raises(ShapeError, match=r"cat: shapes \(2, 3\), \(2, 4\) differ outside axis 0"):
        Tensor.zeros(2, 3).cat(Tensor.zeros(2, 4))
    with pytest.raises(ShapeError, match="stack: all shapes must be equal"):
        Tensor.zeros(2).stack(Tensor.zeros(3))


@SET
@given(arrays("float32", shapes(1, 3, max_side=3)), st.data())
def test_repeat_matches_tile(a: np.ndarray, data: st.DataObject) -> None:
    reps = data.draw(st.lists(st.integers(0, 3), min_size=a.ndim, max_size=a.ndim + 1))
    close(Tensor(a).repeat(*reps), np.tile(a, reps))


def test_split_and_chunk() -> None:
    a = arange_array(7, 2)
    parts = Tensor(a).split(3)
    for got, exp in zip(parts, np.split(a, [3, 6]), strict=True):
        close(got, exp)
    parts = Tensor(a).split([2, 0, 5])
    for got, exp in zip(parts, np.split(a, [2, 2]), strict=True):
        close(got, exp)
    parts = Tensor(a).split(1, dim=1)
    assert len(parts) == 2
    close(parts[1], a[:, 1:])
    chunks = Tensor(a).chunk(3)
    assert [c.shape for c in chunks] == [(3, 2), (3, 2), (1, 2)]
    close(chunks[2], a[6:])
    assert len(Tensor(a).chunk(10)) == 7
    with pytest.raises(ShapeError, match="split: sizes"):
        Tensor(a).split([3, 3])


@SET
@given(arrays("float32", shapes(1, 3, max_side=4)), st.data())
def test_gather_matches_take_along_axis(a: np.ndarray, data: st.DataObject) -> None:
    dim = data.draw(st.integers(0, a.ndim - 1))
    ishape = tuple(data.draw(st.integers(1, 4)) if i == dim else data.draw(st.integers(1, d))
                   for i, d in enumerate(a.shape))
    idx = data.draw(arrays("int32", ishape, lo=0, hi=a.shape[dim] - 1))
    sub = a[tuple(slice(0, s) if i != dim else slice(None) for i, s in enumerate(ishape))]
    close(Tensor(a).gather(dim, Tensor(idx)), np.take_along_axis(sub, idx, axis=dim))


def test_movement_keeps_device_and_laziness() -> None:
    t = Tensor([[1, 2], [3, 4]], device="python")
    r = t.T.reshape(4)[1:].flip(0)
    assert r.device == "python"
    assert not r.is_realized
    assert val(r).tolist() == [4, 2, 3]
