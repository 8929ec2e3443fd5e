"""Elementwise ops against numpy: broadcasting, promotion (weak scalars included), arithmetic, comparisons,
bitwise and logical ops, casts, math functions and rounding."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rewrite.dtype import dtypes, promote
from rewrite.errors import DTypeError, ShapeError
from tensor import Tensor
from tests.tensor.util import arrays, close, elements, shapes, val

SET = settings(max_examples=25, deadline=None)
DTYPES = ["bool", "int8", "uint8", "int16", "int32", "int64", "uint32", "float16", "float32", "float64"]


def npdt(name: str) -> np.dtype:
    return np.dtype(name)


@st.composite
def binary_case(draw: st.DrawFn, dts: list[str] = DTYPES, lo: float = -100, hi: float = 100
                ) -> tuple[np.ndarray, np.ndarray]:
    a_dt, b_dt = draw(st.sampled_from(dts)), draw(st.sampled_from(dts))
    sa, sb = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3)).input_shapes
    a = draw(hnp.arrays(npdt(a_dt), sa, elements=elements(npdt(a_dt), lo, hi)))
    b = draw(hnp.arrays(npdt(b_dt), sb, elements=elements(npdt(b_dt), lo, hi)))
    return a, b


def _promoted(a: np.ndarray, b: np.ndarray):
    dt = promote(getattr(dtypes, a.dtype.name), getattr(dtypes, b.dtype.name))
    return dt, np.dtype(dt.name)


# ---------------------------------------------------------------- arithmetic


@SET
@given(binary_case(), st.sampled_from(["add", "sub", "mul"]))
def test_add_sub_mul_promote_and_broadcast(case: tuple, name: str) -> None:
    a, b = case
    dt, nd = _promoted(a, b)
    if dt.is_bool and name == "sub":
        with pytest.raises(DTypeError, match="sub"):
            Tensor(a) - Tensor(b)
        return
    fn = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}[name]
    npfn = {"add": np.add, "sub": np.subtract, "mul": np.multiply}[name]
    if dt.is_bool:
        npfn = {"add": np.logical_or, "mul": np.logical_and}[name]
    with np.errstate(over="ignore"):
        expected = npfn(a.astype(nd), b.astype(nd))
    close(fn(Tensor(a), Tensor(b)), expected, dtype=dt)


@SET
@given(binary_case(["int8", "int16", "int32", "uint8", "float32", "float64"]))
def test_true_division(case: tuple) -> None:
    a, b = case
    b = np.where(b == 0, 1, b).astype(b.dtype)
    dt, _nd = _promoted(a, b)
    out_dt = dt if dt.is_float else dtypes.float32
    expected = np.true_divide(a.astype(np.float64), b.astype(np.float64)).astype(out_dt.name)
    close(Tensor(a) / Tensor(b), expected, dtype=out_dt)


@SET
@given(binary_case(["int8", "int16", "int32", "int64", "uint8", "uint32"]))
def test_int_floordiv_and_mod_are_floor(case: tuple) -> None:
    a, b = case
    b = np.where(b == 0, 3, b).astype(b.dtype)
    dt, nd = _promoted(a, b)
    close(Tensor(a) // Tensor(b), np.floor_divide(a.astype(nd), b.astype(nd)), dtype=dt)
    close(Tensor(a) % Tensor(b), np.remainder(a.astype(nd), b.astype(nd)), dtype=dt)


@SET
@given(hnp.arrays(np.float32, shapes(1, 2), elements=st.integers(-32, 32).map(lambda v: v / 4)),
       hnp.arrays(np.float32, (1,), elements=st.sampled_from([-1.5, -0.5, 0.5, 1.0, 2.5, 3.0])))
def test_float_floordiv_and_mod_match_numpy(a: np.ndarray, b: np.ndarray) -> None:
    close(Tensor(a) // Tensor(b), np.floor_divide(a, b), dtype=dtypes.float32)
    close(Tensor(a) % Tensor(b), np.remainder(a, b), dtype=dtypes.float32)
    close(Tensor(a) % 1.5, np.remainder(a, np.float32(1.5)))


def test_mod_sign_follows_divisor() -> None:
    a = np.array([-7, -1, 0, 1, 7], dtype=np.int32)
    close(Tensor(a) % 3, a % 3)
    close(Tensor(a) % -3, a % -3)
    close(Tensor(a) // -2, a // -2)
    close(7 // Tensor(np.array([2, -2], dtype=np.int32)), np.array([3, -4]))
    close(7 % Tensor(np.array([2, -2], dtype=np.int32)), np.array([1, -1]))


@SET
@given(arrays("float32", lo=0.1, hi=10), st.sampled_from([-3.5, -2, -1, 0, 0.5, 1, 2, 3, 2.5, 9]))
def test_float_pow_scalar_exponent(a: np.ndarray, e: float) -> None:
    close(Tensor(a) ** e, np.power(a, np.float32(e)), rtol=1e-5)


@SET
@given(arrays("float32", shapes(1, 2), lo=0.1, hi=4), arrays("float32", (1,), lo=-3, hi=3))
def test_float_pow_tensor_exponent(a: np.ndarray, e: np.ndarray) -> None:
    close(Tensor(a) ** Tensor(e), np.power(a, e), rtol=1e-5)
    close(2 ** Tensor(e), np.power(np.float32(2), e), rtol=1e-6)
    close(3.0 ** Tensor(e), np.power(np.float32(3), e), rtol=1e-5)


@SET
@given(arrays("int32", lo=-5, hi=5), st.integers(0, 7))
def test_int_pow_is_exact(a: np.ndarray, e: int) -> None:
    close(Tensor(a) ** e, np.power(a, e), dtype=dtypes.int32)
    ex = np.full(a.shape, e, dtype=np.int32)
    close(Tensor(a) ** Tensor(ex), np.power(a, ex), dtype=dtypes.int32)


def test_int_pow_wraps_and_negative_exponents() -> None:
    a = np.array([3, -3, 7], dtype=np.int8)
    with np.errstate(over="ignore"):
        close(Tensor(a) ** 5, np.power(a, 5))
    b = Tensor(np.array([1, -1, 2, 0, -2], dtype=np.int32))
    close(b ** -1, np.array([1, -1, 0, 0, 0]))
    close(b ** -2, np.array([1, 1, 0, 0, 0]))
    close(b ** Tensor(np.array([-3, -3, -1, 2, 3], dtype=np.int32)), np.array([1, -1, 0, 0, -8]))


def test_neg_and_bool_neg() -> None:
    a = np.array([[1.5, -2.0], [0.0, 3.0]], dtype=np.float32)
    close(-Tensor(a), -a)
    close(-Tensor(np.array([1, -128], dtype=np.int8)), np.array([-1, -128], dtype=np.int8))
    close(-Tensor([True, False]), np.array([False, True]))


# ---------------------------------------------------------------- promotion with weak scalars


@pytest.mark.parametrize("tdt,scalar,expected", [
    ("int32", 1, dtypes.int32), ("int32", 1.5, dtypes.float32), ("int8", 3, dtypes.int8), ("uint8", 2, dtypes.uint8),
    ("bool", 1, dtypes.int32), ("bool", True, dtypes.bool), ("bool", 0.5, dtypes.float32),
    ("float16", 1.0, dtypes.float16), ("float16", 2, dtypes.float16), ("float64", 1, dtypes.float64),
    ("int64", 2.0, dtypes.float32),
])
def test_weak_scalars(tdt: str, scalar: object, expected: object) -> None:
    a = np.array([1, 0, 1], dtype=tdt)
    r = Tensor(a) + scalar
    assert r.dtype is expected
    assert (scalar + Tensor(a)).dtype is expected
    want = np.logical_or(a, scalar) if expected is dtypes.bool else a.astype(expected.name) + np.array(scalar).astype(
        expected.name)
    close(r, want)


@pytest.mark.parametrize("a,b,expected", [
    ("int8", "uint8", dtypes.int16), ("int32", "float16", dtypes.float16), ("float16", "bfloat16", dtypes.float32),
    ("uint32", "int32", dtypes.int64), ("bool", "int8", dtypes.int8), ("int64", "uint64", dtypes.float32),
    ("float32", "float64", dtypes.float64),
])
def test_tensor_promotion_lattice(a: str, b: str, expected: object) -> None:
    x = Tensor([1, 2], dtype=a)
    y = Tensor([3, 4], dtype=b)
    assert (x + y).dtype is expected
    assert (x * y).dtype is expected
    assert (x < y).dtype is dtypes.bool
    xa, ya = (np.array(v).astype(d.replace("bfloat16", "float32")) for v, d in (([1, 2], a), ([3, 4], b)))
    close(x + y, (xa.astype(expected.name) + ya.astype(expected.name)))


def test_out_of_range_int_scalar_is_refused_not_wrapped() -> None:
    with pytest.raises(DTypeError, match=r"lt: the Python int 1000 does not fit int8"):
        _ = Tensor(np.array([1, 2], dtype=np.int8)) < 1000
    with pytest.raises(DTypeError, match="add: the Python int -1 does not fit uint8"):
        Tensor(np.array([1, 2], dtype=np.uint8)) + -1
    close(Tensor(np.array([1, 2], dtype=np.uint8)) + 255, np.array([0, 1], dtype=np.uint8))  # in range: wraps as numpy
    close(Tensor(np.array([1, 2], dtype=np.int8)) < 1000.0, np.array([True, True]))  # a float promotes instead


def test_operands_from_numpy_and_lists() -> None:
    t = Tensor([1.0, 2.0, 3.0])
    close(t + np.array([1.0, 1.0, 1.0], dtype=np.float32), np.array([2.0, 3.0, 4.0]))
    close(t * [2, 2, 2], np.array([2.0, 4.0, 6.0]))
    close(np.float32(2) * t, np.array([2.0, 4.0, 6.0]))
    with pytest.raises(TypeError, match="cannot combine"):
        t + "x"


def test_broadcast_mismatch_is_a_shape_error_naming_the_shapes() -> None:
    with pytest.raises(ShapeError, match=r"add: cannot broadcast shapes \(2, 3\), \(4,\)"):
        Tensor.ones(2, 3) + Tensor.ones(4)


# ---------------------------------------------------------------- comparisons, logic, bitwise


@SET
@given(binary_case(["bool", "int8", "uint8", "int32", "float16", "float32"]),
       st.sampled_from(["lt", "gt", "le", "ge", "eq", "ne"]))
def test_comparisons(case: tuple, name: str) -> None:
    a, b = case
    _dt, nd = _promoted(a, b)
    op = getattr(operator, name)
    r = op(Tensor(a), Tensor(b))
    assert r.dtype is dtypes.bool
    close(r, op(a.astype(nd), b.astype(nd)))
    close(getattr(Tensor(a), name)(2), op(a, np.array(2).astype(a.dtype) if a.dtype.kind != "b" else 2))


def test_comparisons_with_nan() -> None:
    a = np.array([np.nan, 1.0, np.nan], dtype=np.float32)
    b = np.array([np.nan, np.nan, 2.0], dtype=np.float32)
    for name in ["lt", "gt", "le", "ge", "eq", "ne"]:
        close(getattr(operator, name)(Tensor(a), Tensor(b)), getattr(operator, name)(a, b))


@SET
@given(binary_case(["bool", "int8", "uint8", "int16", "int32", "uint32", "int64"], lo=-10**6, hi=10**6),
       st.sampled_from(["and_", "or_", "xor"]))
def test_bitwise(case: tuple, name: str) -> None:
    a, b = case
    dt, nd = _promoted(a, b)
    op = getattr(operator, name)
    close(op(Tensor(a), Tensor(b)), op(a.astype(nd), b.astype(nd)), dtype=dt)


@SET
@given(arrays("int8", lo=-128, hi=127), st.integers(0, 7))
def test_shifts_and_invert(a: np.ndarray, k: int) -> None:
    close(Tensor(a) << k, np.left_shift(a, np.int8(k)))
    close(Tensor(a) >> k, np.right_shift(a, np.int8(k)))
    close(~Tensor(a), ~a)
    u = a.view(np.uint8)
    close(Tensor(u) >> k, np.right_shift(u, np.uint8(k)))
    close(~Tensor(u), ~u)


@SET
@given(binary_case(["bool", "int32", "float32"]))
def test_logical_ops(case: tuple) -> None:
    a, b = case
    for name in ["logical_and", "logical_or", "logical_xor"]:
        r = getattr(Tensor(a), name)(Tensor(b))
        assert r.dtype is dtypes.bool
        close(r, getattr(np, name)(a, b))
    close(Tensor(a).logical_not(), np.logical_not(a))
    close(~Tensor(a.astype(bool)), ~a.astype(bool))


def test_bitwise_on_floats_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="bitwise_and: needs integer or bool tensors, got float32"):
        Tensor([1.0]) & Tensor([2.0])
    with pytest.raises(DTypeError, match="lshift"):
        Tensor([1.0]) << 1
    with pytest.raises(DTypeError, match="bitwise_not"):
        ~Tensor([1.5])


# ---------------------------------------------------------------- where, maximum, minimum, clip


@SET
@given(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3), st.data())
def test_where_broadcasts_and_promotes(sh: object, data: st.DataObject) -> None:
    s0, s1, s2 = sh.input_shapes  # type: ignore[attr-defined]
    c = data.draw(arrays("int8", s0, lo=-1, hi=1))
    x = data.draw(arrays("int16", s1))
    y = data.draw(arrays("float32", s2))
    close(Tensor(c).where(Tensor(x), Tensor(y)), np.where(c != 0, x.astype(np.float32), y), dtype=dtypes.float32)
    close(Tensor(c).where(Tensor(x), 7), np.where(c != 0, x, np.int16(7)), dtype=dtypes.int16)
    close(Tensor(c).where(1.5, Tensor(x)), np.where(c != 0, np.float32(1.5), x.astype(np.float32)),
          dtype=dtypes.float32)
    close(Tensor(c).where(1, 0), np.broadcast_to(np.where(c != 0, 1, 0), c.shape).astype(np.int32),
          dtype=dtypes.int32)


@SET
@given(binary_case(["int8", "uint8", "int32", "float32"], lo=-128, hi=127))
def test_maximum_minimum(case: tuple) -> None:
    a, b = case
    dt, nd = _promoted(a, b)
    close(Tensor(a).maximum(Tensor(b)), np.maximum(a.astype(nd), b.astype(nd)), dtype=dt)
    close(Tensor(a).minimum(Tensor(b)), np.minimum(a.astype(nd), b.astype(nd)), dtype=dt)


def test_minimum_edge_values() -> None:
    i = np.array([-(2**31), 5, 2**31 - 1], dtype=np.int32)
    close(Tensor(i).minimum(0), np.minimum(i, 0))
    f = np.array([np.nan, 1.0, -np.inf], dtype=np.float32)
    close(Tensor(f).minimum(0.0), np.minimum(f, np.float32(0)))
    close(Tensor(f).maximum(0.0), np.maximum(f, np.float32(0)))
    close(Tensor([True, False]).minimum(Tensor([True, True])), np.array([True, False]))


@SET
@given(arrays("float32"), st.floats(-50, 0, width=32), st.floats(0, 50, width=32))
def test_clip(a: np.ndarray, lo: float, hi: float) -> None:
    close(Tensor(a).clip(lo, hi), np.clip(a, np.float32(lo), np.float32(hi)))
    close(Tensor(a).clamp(min=lo), np.maximum(a, np.float32(lo)))
    close(Tensor(a).clip(None, hi), np.minimum(a, np.float32(hi)))
    ai = a.astype(np.int32)
    close(Tensor(ai).clip(-3, 3), np.clip(ai, -3, 3), dtype=dtypes.int32)
    with pytest.raises(ValueError, match="clip"):
        Tensor(a).clip()


# ---------------------------------------------------------------- casts


@SET
@given(arrays("float32", lo=-120, hi=120), st.sampled_from(["int8", "int32", "int64", "uint8", "float16", "float64",
                                                            "bool"]))
def test_cast(a: np.ndarray, dt: str) -> None:
    src = np.abs(a) if dt == "uint8" else a
    close(Tensor(src).cast(dt), src.astype(dt), dtype=getattr(dtypes, dt))


def test_cast_int_to_float_and_bool() -> None:
    a = np.array([0, 1, -7, 2**24 + 1], dtype=np.int64)
    close(Tensor(a).cast(dtypes.float32), a.astype(np.float32))
    close(Tensor(a).bool(), a.astype(bool))
    close(Tensor(a).float().int(), a.astype(np.float32).astype(np.int32))
    close(Tensor(np.array([1.0, 65520.0], np.float32)).half(), np.array([1.0, np.inf], np.float16))


def test_cast_accepts_names_numpy_and_python_types() -> None:
    t = Tensor([1, 2])
    assert t.cast("float16").dtype is dtypes.float16
    assert t.cast(np.float64).dtype is dtypes.float64
    assert t.cast(float).dtype is dtypes.float32
    assert t.cast(bool).dtype is dtypes.bool
    with pytest.raises(DTypeError, match="unknown dtype 'floaty'"):
        t.cast("floaty")


def test_bfloat16_rounds_to_nearest_even() -> None:
    a = np.array([1.0, 1.00390625, 1.01171875, 3.14159], dtype=np.float32)
    t = Tensor(a, dtype=dtypes.bfloat16)
    assert t.dtype is dtypes.bfloat16
    close(t, np.array([1.0, 1.0, 1.015625, 3.140625], dtype=np.float32), rtol=0, atol=0)
    close((t + t).cast(dtypes.float32), np.array([2.0, 2.0, 2.03125, 6.28125]), rtol=0, atol=0)


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float32", "uint32"), ("int32", "float32"),
                                     ("float16", "int16"), ("float64", "uint64"), ("uint8", "int8")])
def test_bitcast_same_size(src: str, dst: str) -> None:
    a = np.array([[1.5, -2.25, 0.0], [3.0, 100.0, -0.5]]).astype(src)
    close(Tensor(a).bitcast(dst), a.view(dst), dtype=getattr(dtypes, dst))


@pytest.mark.parametrize("src,dst", [("float32", "uint16"), ("uint8", "float32"), ("int16", "int64"),
                                     ("float64", "uint8")])
def test_bitcast_resizes_the_last_axis(src: str, dst: str) -> None:
    a = np.arange(16).astype(src).reshape(2, 8)
    close(Tensor(a).bitcast(dst), a.view(dst))


def test_bitcast_bad_size_is_a_dtype_error() -> None:
    with pytest.raises(DTypeError, match="bitcast: cannot view uint8"):
        Tensor(np.zeros((2, 3), np.uint8)).bitcast(dtypes.float32)


# ---------------------------------------------------------------- math functions


MATH = {
    "exp": (np.exp, -10, 10), "exp2": (np.exp2, -10, 10), "log": (np.log, 0.01, 100), "log2": (np.log2, 0.01, 100),
    "sin": (np.sin, -10, 10), "cos": (np.cos, -10, 10), "tan": (np.tan, -1.4, 1.4), "sqrt": (np.sqrt, 0, 100),
    "rsqrt": (lambda v: 1 / np.sqrt(v), 0.01, 100), "reciprocal": (np.reciprocal, 0.1, 10),
    "square": (np.square, -10, 10),
}


@SET
@given(st.sampled_from(sorted(MATH)), st.data())
def test_math_float32(name: str, data: st.DataObject) -> None:
    fn, lo, hi = MATH[name]
    a = data.draw(arrays("float32", lo=lo, hi=hi))
    r = getattr(Tensor(a), name)()
    assert r.dtype is dtypes.float32
    close(r, fn(a.astype(np.float64)).astype(np.float32), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos", "sqrt"])
def test_math_half_and_int_inputs(name: str) -> None:
    fn, lo, hi = MATH[name]
    a = np.linspace(max(lo, 0.5), min(hi, 8), 7)
    r16 = getattr(Tensor(a.astype(np.float16)), name)()
    assert r16.dtype is dtypes.float16
    close(r16, fn(a.astype(np.float16).astype(np.float64)).astype(np.float16))
    ri = getattr(Tensor(np.array([1, 2, 3], dtype=np.int32)), name)()
    assert ri.dtype is dtypes.float32
    close(ri, fn(np.array([1.0, 2.0, 3.0])))
    rb = getattr(Tensor(a.astype(np.float64)), name)()
    assert rb.dtype is dtypes.float64
    close(rb, fn(a), rtol=1e-6)


def test_math_special_values() -> None:
    a = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0], dtype=np.float32)
    with np.errstate(all="ignore"):
        close(Tensor(a).exp(), np.exp(a))
        close(Tensor(a).log(), np.log(a))
        close(Tensor(a).sqrt(), np.sqrt(a))
        close(Tensor(a).log2(), np.log2(a))


def test_erf() -> None:
    a = np.linspace(-4, 4, 33).astype(np.float32)
    close(Tensor(a).erf(), np.array([math.erf(v) for v in a.astype(np.float64)]), atol=3e-7)


ROUNDING_VALUES = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -2.7, 2.7, 0.49999997, -0.49999997, 1e8 + 1, 3.0, -0.0,
                            0.0, np.inf, -np.inf, np.nan, 8388609.0, -8388607.5], dtype=np.float32)


@pytest.mark.parametrize("name,fn", [("trunc", np.trunc), ("floor", np.floor), ("ceil", np.ceil), ("round", np.round),
                                     ("abs", np.abs), ("sign", np.sign), ("neg", np.negative)])
def test_rounding_abs_sign_exact(name: str, fn: object) -> None:
    got = val(getattr(Tensor(ROUNDING_VALUES), name)())
    np.testing.assert_array_equal(got, fn(ROUNDING_VALUES))  # type: ignore[operator]
    if name == "abs":  # the sign bit is cleared, -0.0 included
        assert not np.signbit(got[~np.isnan(got)]).any()


@SET
@given(hnp.arrays(np.float32, shapes(1, 2), elements=st.integers(-40, 40).map(lambda v: v / 4)))
def test_round_half_to_even(a: np.ndarray) -> None:
    close(Tensor(a).round(), np.round(a), rtol=0, atol=0)
    close(Tensor(a.astype(np.float64)).round(), np.round(a.astype(np.float64)), rtol=0, atol=0)


@SET
@given(arrays("int32", lo=-2**31, hi=2**31 - 1))
def test_int_abs_sign_and_rounding_identity(a: np.ndarray) -> None:
    close(Tensor(a).abs(), np.abs(a))
    close(Tensor(a).sign(), np.sign(a))
    for name in ["trunc", "floor", "ceil", "round"]:
        close(getattr(Tensor(a), name)(), a, dtype=dtypes.int32)
    u = a.view(np.uint32)
    close(Tensor(u).abs(), u)
    close(Tensor(u).sign(), np.sign(u))


def test_isnan_isinf_isfinite() -> None:
    a = np.array([0.0, np.nan, np.inf, -np.inf, -3.5], dtype=np.float32)
    close(Tensor(a).isnan(), np.isnan(a))
    close(Tensor(a).isinf(), np.isinf(a))
    close(Tensor(a).isfinite(), np.isfinite(a))
    i = np.array([[1, 2]], dtype=np.int32)
    close(Tensor(i).isnan(), np.isnan(i))
    close(Tensor(i).isinf(), np.isinf(i))
    close(Tensor(i).isfinite(), np.isfinite(i))


def test_promote_of_one_dtype_is_the_lattice_join():
    """promote's shortcut for operands of one dtype gives what the lattice gives: the least of its upper set (and
    a dtype outside the lattice is still refused)."""
    from rewrite.dtype import _UPPER

    for d, upper in _UPPER.items():
        least = [x for x in upper if not any(o is not x and x in _UPPER[o] for o in upper)]
        assert least == [d] and promote(d) is d and promote(d, d, d) is d
    with pytest.raises(TypeError):
        promote(dtypes.void, dtypes.void)
