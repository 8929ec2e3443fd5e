"""Reductions against numpy: sum prod max min mean var std any all over axes with keepdim, accumulation dtypes,
argmax/argmin (first index, nan), cumsum along any axis, softmax log_softmax logsumexp."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewrite.dtype import dtypes
from rewrite.errors import ShapeError
from tensor import Tensor
from tensor.helpers import AxisError
from tests.tensor.util import arrays, close, shapes

SET = settings(max_examples=30, deadline=None)


@st.composite
def axis_case(draw: st.DrawFn, dt: str = "float32", lo: float = -100, hi: float = 100, min_side: int = 1
              ) -> tuple[np.ndarray, object, bool]:
    a = draw(arrays(dt, shapes(0, 3, min_side=min_side), lo=lo, hi=hi))
    kind = draw(st.sampled_from(["none", "int", "tuple"]))
    if kind == "none" or a.ndim == 0:
        axis: object = None
    elif kind == "int":
        axis = draw(st.integers(-a.ndim, a.ndim - 1))
    else:
        axis = tuple(draw(st.lists(st.integers(0, a.ndim - 1), unique=True)))
    return a, axis, draw(st.booleans())


@SET
@given(axis_case())
def test_float_sum_max_min_mean(case: tuple) -> None:
    a, axis, keep = case
    t = Tensor(a)
    close(t.sum(axis, keepdim=keep), a.sum(axis, keepdims=keep), rtol=1e-5, atol=1e-4)
    close(t.max(axis=axis, keepdim=keep), a.max(axis, keepdims=keep))
    close(t.min(axis=axis, keepdim=keep), a.min(axis, keepdims=keep))
    close(t.mean(axis, keepdim=keep), a.mean(axis, keepdims=keep), rtol=1e-5, atol=1e-4)


@SET
@given(axis_case(lo=-2, hi=2))
def test_prod(case: tuple) -> None:
    a, axis, keep = case
    close(Tensor(a).prod(axis, keepdim=keep), a.prod(axis, keepdims=keep), rtol=1e-5, atol=1e-5)


@SET
@given(st.sampled_from(["bool", "int8", "uint8", "int16", "int32", "uint32", "int64"]), st.data())
def test_int_reductions_accumulate_like_numpy(dt: str, data: st.DataObject) -> None:
    a, axis, keep = data.draw(axis_case(dt, lo=-2**31, hi=2**31 - 1))
    t = Tensor(a)
    s = t.sum(axis, keepdim=keep)
    expected = a.sum(axis, keepdims=keep)
    assert s.dtype.name == expected.dtype.name
    close(s, expected)
    with np.errstate(over="ignore"):
        close(t.prod(axis, keepdim=keep), a.prod(axis, keepdims=keep))
    close(t.max(axis=axis, keepdim=keep), a.max(axis, keepdims=keep))
    close(t.min(axis=axis, keepdim=keep), a.min(axis, keepdims=keep))
    m = t.mean(axis, keepdim=keep)
    assert m.dtype is dtypes.float32
    close(m, a.mean(axis, keepdims=keep).astype(np.float32), rtol=1e-5, atol=1e-5)


def test_int_mean_and_var_of_cancelling_values_keep_their_digits() -> None:
    """int32 values near +-2**31 whose sum cancels: summed in float32 (each rounded to a multiple of 128 first)
    the mean 17 came out 1.67 (hypothesis found a milder case); summed in float64 as numpy does, mean and var are
    the float64 result rounded to float32 once."""
    a = np.array([2**31 - 1, -(2**31) + 47, 5], dtype=np.int32)
    m, v = Tensor(a).mean(), Tensor(a).var()
    assert m.dtype is dtypes.float32 and v.dtype is dtypes.float32
    assert m.numpy() == np.float32(a.astype(np.float64).mean())
    np.testing.assert_allclose(v.numpy(), a.astype(np.float64).var(ddof=1), rtol=1e-6)
    big = np.array([[4_000_000_003, 5], [1, 4_000_000_000]], dtype=np.uint32)
    np.testing.assert_array_equal(Tensor(big).mean(1).numpy(), big.mean(1).astype(np.float32))


def test_min_max_extremes_and_nan() -> None:
    i = np.array([-(2**31), 0, 2**31 - 1], dtype=np.int32)
    close(Tensor(i).min(), i.min())
    close(Tensor(i).max(), i.max())
    u = np.array([0, 7, 2**32 - 1], dtype=np.uint32)
    close(Tensor(u).min(), u.min())
    f = np.array([[1.0, np.nan], [-np.inf, 2.0]], dtype=np.float32)
    close(Tensor(f).max(axis=1), f.max(1))
    close(Tensor(f).min(axis=1), f.min(1))
    b = np.array([[True, False], [True, True]])
    close(Tensor(b).min(axis=1), b.min(1))
    close(Tensor(b).max(axis=0), b.max(0))


def test_sum_dtype_argument_and_half_accumulation() -> None:
    a = np.full(300, 1.0, dtype=np.float16) * np.float16(0.1)
    s = Tensor(a).sum()
    assert s.dtype is dtypes.float16
    close(s, np.float16(a.astype(np.float32).sum()))  # float32 accumulation, one rounding at the end
    close(Tensor(np.array([200, 100], np.uint8)).sum(dtype=dtypes.uint8), np.uint8(44))
    close(Tensor([1.5, 2.5]).sum(dtype="float64"), np.float64(4.0))
    close(Tensor([[True, False], [False, False]]).sum(1, dtype=dtypes.bool), np.array([True, False]))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy warns for axis=() (one element, ddof=1): nan
@SET
@given(axis_case(min_side=2))
def test_var_std(case: tuple) -> None:
    a, axis, keep = case
    t = Tensor(a)
    close(t.var(axis, keepdim=keep), a.astype(np.float64).var(axis, keepdims=keep, ddof=1), rtol=1e-4, atol=1e-3)
    close(t.std(axis, keepdim=keep, correction=0), a.astype(np.float64).std(axis, keepdims=keep), rtol=1e-4, atol=1e-3)


def test_any_all() -> None:
    a = np.array([[0, 1, 0], [0, 0, 0]], dtype=np.int32)
    close(Tensor(a).any(), a.any())
    close(Tensor(a).any(1), a.any(1))
    close(Tensor(a).all(0, keepdim=True), a.all(0, keepdims=True))
    close(Tensor(a == 0).all(1), (a == 0).all(1))


def test_empty_reductions() -> None:
    a = np.zeros((0, 3), np.float32)
    close(Tensor(a).sum(0), a.sum(0))
    close(Tensor(a).prod(0), a.prod(0))
    close(Tensor(a).mean(0), np.full(3, np.nan, np.float32))
    with pytest.raises(ShapeError, match="max: cannot reduce over an empty axis"):
        Tensor(a).max(0)
    with pytest.raises(ShapeError, match="argmax"):
        Tensor(a).argmax()


@SET
@given(st.sampled_from(["float32", "int8", "uint8", "int32", "bool"]), st.data())
def test_argmax_argmin_first_index(dt: str, data: st.DataObject) -> None:
    a = data.draw(arrays(dt, shapes(1, 3), lo=-3, hi=3))  # a small range makes ties common
    axis = data.draw(st.none() | st.integers(-a.ndim, a.ndim - 1))
    keep = data.draw(st.booleans()) and axis is not None
    r = Tensor(a).argmax(axis, keepdim=keep)
    assert r.dtype is dtypes.int64
    kw = {"keepdims": True} if keep else {}
    close(r, np.argmax(a, axis, **kw))
    close(Tensor(a).argmin(axis, keepdim=keep), np.argmin(a, axis, **kw))


def test_argmax_nan_and_keepdim_none() -> None:
    a = np.array([[1.0, np.nan, 3.0, np.nan], [-np.inf, -np.inf, 0.0, 0.0]], dtype=np.float32)
    close(Tensor(a).argmax(1), np.argmax(a, 1))
    close(Tensor(a).argmin(1), np.argmin(a, 1))
    close(Tensor(a).argmax(), np.argmax(a))
    close(Tensor(a).argmax(keepdim=True), np.argmax(a, keepdims=True))


@SET
@given(st.sampled_from(["float32", "int32", "int8", "bool", "uint8"]), st.data())
def test_cumsum_any_axis(dt: str, data: st.DataObject) -> None:
    a = data.draw(arrays(dt, shapes(1, 3, max_side=5), lo=-50, hi=50))
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    r = Tensor(a).cumsum(axis)
    expected = np.cumsum(a, axis)
    assert r.dtype.name == expected.dtype.name
    close(r, expected, rtol=1e-5, atol=1e-4)
    close(Tensor(a).cumsum(None), np.cumsum(a), rtol=1e-5, atol=1e-4)


def test_cumsum_long_axis() -> None:
    a = np.arange(40, dtype=np.int32) % 7
    close(Tensor(a).cumsum(), np.cumsum(a))


@pytest.mark.parametrize("n", [65, 1000, 5000, 70_000])
def test_cumsum_in_blocks(n: int) -> None:
    """Past 64 elements the prefix sum runs in blocks of 16 (the blocks' own sums, their offsets stored, added):
    exact for integers over every block and level boundary (70,000 takes four levels, its last block partial),
    a float32 sum within float32's error, along an inner axis too, with the gradient (reversed cumsums of ones:
    n - i) through it."""
    from tensor.reduce import _CUM_BLOCK, _CUM_DIRECT

    assert (_CUM_DIRECT, _CUM_BLOCK) == (64, 16)
    ints = (np.arange(2 * n, dtype=np.int32) % 13 - 6).reshape(2, n)
    close(Tensor(ints).cumsum(1), np.cumsum(ints, 1))
    close(Tensor(ints.T.copy()).cumsum(0), np.cumsum(ints.T, 0))
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    want = np.cumsum(x.astype(np.float64))
    close(Tensor(x).cumsum(), want, rtol=1e-5, atol=1e-6 * np.sqrt(n) * 4)
    t = Tensor(x, requires_grad=True)
    t.cumsum().sum().backward()
    assert t.grad is not None
    close(t.grad, np.arange(n, 0, -1, dtype=np.float32))


def test_cumsum_work_grows_linearly() -> None:
    """The blocked prefix sum's work per element stays bounded (lower.estimate over its kernels: 53 ops at 4,096
    and at 65,536, where the direct form's n^2 adds were 65,536 per element)."""
    from devices import target_for
    from lower.estimate import estimate
    from lower.schedule import schedule
    from lower.stages import lower_kernel

    target = target_for("cpu")
    for n in (4096, 65536):
        items, _ = schedule([Tensor.empty(n).realize().cumsum().uop])
        flops = sum(estimate(lower_kernel(it.ast, target, name=it.name)).flops for it in items
                    if it.kind == "kernel" and it.ast is not None)
        assert flops <= 64 * n, (n, flops / n)


@SET
@given(arrays("float32", shapes(1, 3), lo=-20, hi=20), st.data())
def test_softmax_family(a: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(-a.ndim, a.ndim - 1))
    x = a.astype(np.float64)
    e = np.exp(x - x.max(axis, keepdims=True))
    sm = e / e.sum(axis, keepdims=True)
    close(Tensor(a).softmax(axis), sm, rtol=1e-5, atol=1e-6)
    close(Tensor(a).log_softmax(axis), np.log(sm), rtol=1e-5, atol=1e-5)
    keep = data.draw(st.booleans())
    lse = np.log(np.exp(x - x.max(axis, keepdims=True)).sum(axis, keepdims=True)) + x.max(axis, keepdims=True)
    close(Tensor(a).logsumexp(axis, keepdim=keep), lse if keep else lse.squeeze(axis), rtol=1e-5, atol=1e-5)


def test_logsumexp_infinities_and_int_softmax() -> None:
    a = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [1000.0, 1000.0]], dtype=np.float32)
    close(Tensor(a).logsumexp(1), np.array([-np.inf, np.inf, 1000.0 + np.log(2)]))
    s = Tensor([1, 2, 3]).softmax()
    assert s.dtype is dtypes.float32
    e = np.exp(np.array([1.0, 2.0, 3.0]))
    close(s, e / e.sum())


@pytest.mark.parametrize("fn", ["sum", "max", "min", "mean", "argmax", "cumsum", "softmax", "var"])
def test_bad_axis_is_an_axis_error(fn: str) -> None:
    with pytest.raises(AxisError, match=rf"{fn}: axis 2 is out of range for a tensor with 2 dimensions"):
        getattr(Tensor.ones(2, 3), fn)(2)
    with pytest.raises(IndexError):  # AxisError is also an IndexError, as numpy's
        getattr(Tensor.ones(2, 3), fn)(-3)


@pytest.mark.parametrize("shape", [(3, 2), (5, 2), (7, 4), (9, 3), (33, 2)])
def test_sum_of_flipped_rows(shape: tuple[int, int]) -> None:
    """GCC 12.2's loop vectorizer sums d[2i + 1 - j] over i < n, j < 2 wrongly (GCC bug 110381); kernels whose
    reductions step backwards are compiled without it (devices.c_render._reversed_reduction)."""
    from devices import get_device
    from lower import schedule
    from lower.stages import lower_kernel

    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    t = (Tensor(a) + Tensor(a)).flip(1)
    close(t.sum(), (a + a).sum())
    close(t.sum(0), (a + a)[:, ::-1].sum(0))
    (it,) = [i for i in schedule([t.sum().uop])[0] if i.kind == "kernel"]
    cpu = get_device("cpu")
    assert "NO_LOOP_VECTORIZE void" in cpu.render(lower_kernel(it.ast, cpu), "k")


def test_softmax_takes_one_reciprocal_per_row() -> None:
    """softmax multiplies by the reciprocal of each row's sum (tensor.reduce.softmax) instead of dividing every
    element: its graph has no division and one RECIP, of the (rows, 1) sums; the values stay within 5 float32
    epsilons of the float64 softmax of the float32 shifted input (x - max rounds first: up to 1e-6 of exp's value
    at these magnitudes, the same before and after the change)."""
    from rewrite.ops import Ops

    a = (np.random.default_rng(4).standard_normal((4, 16, 128)) * 3).astype(np.float32)
    s = Tensor(a).softmax(-1)
    nodes = s.uop.toposort()
    assert not any(u.op is Ops.DIV for u in nodes)
    assert [u.shape for u in nodes if u.op is Ops.RECIP] == [(4, 16, 1)]
    e = np.exp((a - a.max(-1, keepdims=True)).astype(np.float64))
    np.testing.assert_allclose(s.numpy(), e / e.sum(-1, keepdims=True), rtol=6e-7, atol=0)


@pytest.mark.parametrize("n", [0, 1, 16, 17, 300])
def test_arange_graph_is_kept_and_exact(n: int) -> None:
    """arange_uop keeps its graph of constants for the next call of the same size and dtype (a loss's gather makes
    the same ones at every step): the same node, [0, n) exactly (the reference evaluator and the cpu device)."""
    from tensor.reduce import arange_uop
    from tensor.tensor import reference_numpy

    u = arange_uop(n, dtypes.int32)
    assert arange_uop(n, dtypes.int32) is u and arange_uop(n, dtypes.int64) is not u
    t = Tensor._wrap(u, "cpu")
    np.testing.assert_array_equal(reference_numpy(t), np.arange(n, dtype=np.int32))
    np.testing.assert_array_equal(t.numpy(), np.arange(n, dtype=np.int32))
