"""Elementwise Tensor ops: broadcasting, dtype promotion, arithmetic, where/maximum/minimum/clip, casts, math
functions and rounding (comparisons, logic and bitwise ops are in `tensor.logic`, on the same operand rules).

Every op builds the IR's own elementwise ops on operands that have been cast to one dtype and expanded to one
shape (an explicit RESHAPE + EXPAND per operand), so the IR never sees implicit broadcasting.

Promotion: tensor dtypes meet in `rewrite.dtype.promote`. Python scalars are weak (as in JAX, tinygrad and
numpy's NEP 50): they take the tensor's dtype, except that a float scalar with an integer or bool tensor gives
`dtypes.default_float` and an int scalar with a bool tensor gives `dtypes.default_int`. An int scalar that the
tensor's integer dtype cannot hold is an error (numpy 2 and JAX agree), not a silent wrap.

Functions that only make sense on floats (true division, exp, sin, sqrt, ...) turn integer and bool inputs into
`default_float` first; float16 and bfloat16 transcendentals are computed in float32 and rounded back, as numpy
does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeGuard, Union
from typing import cast as type_cast

import numpy as np

import tensor.tensor as tt
import tensor.units as _un
from rewrite.dtype import DType, dtypes, promote
from rewrite.errors import DeviceError, DTypeError, ShardingError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor.helpers import Device, broadcast_shape, to_dtype

if TYPE_CHECKING:
    from tensor.tensor import Tensor

Scalar = int | float | bool
Operand = Union["Tensor", Scalar, np.ndarray, list, tuple]


# ---------------------------------------------------------------- operands


def scalar_dtype(v: Scalar) -> DType:
    """The dtype a Python scalar gets on its own: bool, default_int or default_float."""
    return dtypes.bool if isinstance(v, bool) else dtypes.default_int if isinstance(v, int) else dtypes.default_float


def _is_scalar(x: object) -> TypeGuard[Scalar]:
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def as_tensor(x: object, device: Device, what: str) -> Tensor | Scalar:
    """A Tensor, or a Python scalar kept weak; numpy arrays, numpy scalars and lists become Tensors."""
    if isinstance(x, tt.Tensor) or _is_scalar(x):
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple)):
        return tt.Tensor(x, device=device)
    raise TypeError(f"{what}: cannot combine a Tensor with {type(x).__name__}; use a Tensor, an ndarray, a list or "
                    f"a Python scalar")


def result_dtype(strong: list[DType], weak: list[Scalar]) -> DType:
    """Promotion with weak Python scalars (see the module docstring)."""
    if not strong:
        return promote(*(scalar_dtype(v) for v in weak))
    dt = promote(*strong)
    if any(isinstance(v, float) for v in weak) and not dt.is_float:
        return dtypes.default_float
    if dt.is_bool and any(isinstance(v, int) and not isinstance(v, bool) for v in weak):
        return dtypes.default_int
    return dt


def const_uop(value: Scalar, dtype: DType, shape: tuple) -> UOp:
    """A CONST broadcast to `shape` (reshape to all-ones, then expand)."""
    return UOp.const_broadcast(value, dtype, shape)


def expand_uop(u: UOp, shape: tuple) -> UOp:
    """Broadcast `u` to `shape`: prepend size-1 axes, then expand the size-1 ones."""
    if u.shape == shape:
        return u
    return u.reshape((1,) * (len(shape) - len(u.shape)) + u.shape).expand(shape)


def common_device(what: str, tensors: list[Tensor]) -> Device:
    d0 = tensors[0].device
    if all(t.device == d0 for t in tensors):  # the usual case: one device
        return d0
    devs = {t.device for t in tensors}
    if len(devs) > 1:
        if any(isinstance(d, tuple) for d in devs):
            raise ShardingError(f"{what}: operands live on different devices or device tuples "
                                f"({', '.join(sorted(map(str, devs)))}); put them on one tuple first: "
                                f"x.to(devices) replicates x, x.shard(devices, axis) splits it, x.shard_like(y) lays "
                                f"it out as y")
        raise DeviceError(f"{what}: operands live on different devices ({', '.join(sorted(map(str, devs)))}); move "
                          f"them to one device with .to(device) first")
    return tensors[0].device


def operands(what: str, xs: tuple, dtype: DType | None = None, device: Device | None = None
             ) -> tuple[list[UOp], DType, tuple, Device]:
    """Cast every operand to the promoted (or given) dtype and broadcast all to one shape."""
    if len(xs) == 2 and device is None and (fast := _pair(what, xs[0], xs[1], dtype)) is not None:
        return fast
    dev = device or next(x.device for x in xs if isinstance(x, tt.Tensor))
    conv = [as_tensor(x, dev, what) for x in xs]
    tensors = [x for x in conv if isinstance(x, tt.Tensor)]
    dt = dtype or result_dtype([t.dtype for t in tensors], [x for x in conv if not isinstance(x, tt.Tensor)])
    shape = broadcast_shape([t.shape for t in tensors], what)
    dev = common_device(what, tensors) if tensors else dev
    uops = [expand_uop(x.uop.cast(dt), shape) if isinstance(x, tt.Tensor) else weak_const(what, x, dt, shape)
            for x in conv]
    return uops, dt, shape, dev


def _pair(what: str, x: object, y: object, dtype: DType | None) -> tuple[list[UOp], DType, tuple, Device] | None:
    """operands' common case, without its lists: two Tensors on one device, or a Tensor and a Python float or int
    (not bool). None for anything else (the general path then decides, errors included)."""
    T = tt.Tensor
    if isinstance(x, T):
        t, other, t_first = x, y, True
    elif isinstance(y, T):
        t, other, t_first = y, x, False
    else:
        return None
    tu, dev = t.uop, t._device
    if isinstance(other, T):
        ou = other.uop
        if other._device != dev:
            return None
        dt = dtype or (tu.dtype if tu.dtype is ou.dtype else promote(tu.dtype, ou.dtype))
        shape = tu.shape if tu.shape == ou.shape else broadcast_shape([tu.shape, ou.shape], what)
        a, b = expand_uop(tu.cast(dt), shape), expand_uop(ou.cast(dt), shape)
        return ([a, b] if t_first else [b, a]), dt, shape, dev
    if type(other) is not float and type(other) is not int:
        return None
    dt = dtype or result_dtype([tu.dtype], [other])
    shape = tu.shape
    a, b = expand_uop(tu.cast(dt), shape), weak_const(what, other, dt, shape)
    return ([a, b] if t_first else [b, a]), dt, shape, dev


def weak_const(what: str, v: Scalar, dt: DType, shape: tuple) -> UOp:
    """A weak scalar in the operation's dtype. An int that the dtype cannot hold is refused rather than wrapped
    (numpy 2 and JAX do the same), so `int8_tensor < 1000` cannot silently compare against -24."""
    if dt.is_int and isinstance(v, int) and not isinstance(v, bool) and not dt.min <= v <= dt.max:
        raise DTypeError(f"{what}: the Python int {v} does not fit {dt.name}, the tensor's dtype (range {dt.min}.."
                         f"{dt.max}); cast the tensor to a wider dtype first")
    return const_uop(v, dt, shape)


def wrap(u: UOp, device: Device) -> Tensor:
    """A Tensor on `device` (a canonical device: an operand's) holding `u`."""
    return tt.Tensor._wrap(u, device)


def binary(op: Ops, what: str, x: Operand, y: Operand, dtype: DType | None = None) -> Tensor:
    (a, b), _, _, dev = operands(what, (x, y), dtype)
    return wrap(UOp(op, (a, b)), dev)


def need_kind(what: str, dt: DType, ok: str, words: str) -> None:
    if dt.kind not in ok:
        raise DTypeError(f"{what}: needs {words} tensors, got {dt.name}; cast with .cast(...) first")


def promoted_dtype(x: Operand, y: Operand, what: str) -> DType:
    T = tt.Tensor
    if isinstance(x, T):  # the common cases first: no lists, no conversions
        if isinstance(y, T):
            return promote(x.uop.dtype, y.uop.dtype)
        if type(y) is float or type(y) is int:
            return result_dtype([x.uop.dtype], [y])
    elif isinstance(y, T) and (type(x) is float or type(x) is int):
        return result_dtype([y.uop.dtype], [x])
    dev = x.device if isinstance(x, tt.Tensor) else type_cast("Tensor", y).device  # callers pass at least one Tensor
    conv = [as_tensor(v, dev, what) for v in (x, y)]
    return result_dtype([t.dtype for t in conv if isinstance(t, tt.Tensor)],
                        [v for v in conv if not isinstance(v, tt.Tensor)])


# ---------------------------------------------------------------- arithmetic


def add(x: Operand, y: Operand) -> Tensor:
    dt = promoted_dtype(x, y, "add")  # given to binary: the operands' promotion is not worked out twice
    return binary(Ops.OR if dt.is_bool else Ops.ADD, "add", x, y, dt)  # bool + bool is logical or, as in numpy


def sub(x: Operand, y: Operand) -> Tensor:
    dt = promoted_dtype(x, y, "sub")
    if dt.is_bool:
        raise DTypeError("sub: subtracting bool tensors is not defined (as in numpy); use logical_xor, or cast to int")
    return binary(Ops.SUB, "sub", x, y, dt)


def mul(x: Operand, y: Operand) -> Tensor:
    dt = promoted_dtype(x, y, "mul")
    return binary(Ops.AND if dt.is_bool else Ops.MUL, "mul", x, y, dt)


def div(x: Operand, y: Operand) -> Tensor:
    """True division: integer and bool operands give default_float."""
    dt = promoted_dtype(x, y, "div")
    return binary(Ops.DIV, "div", x, y, dt if dt.is_float else dtypes.default_float)


def floordiv(x: Operand, y: Operand) -> Tensor:
    """Floor division (Python's `//`): IDIV for integers, floor(a / b) for floats."""
    dt = promoted_dtype(x, y, "floordiv")
    if dt.is_float:
        return floor(binary(Ops.DIV, "floordiv", x, y))
    return binary(Ops.IDIV, "floordiv", x, y, dtypes.default_int if dt.is_bool else dt)


def mod(x: Operand, y: Operand) -> Tensor:
    """Floor modulo (Python's `%`, result takes the divisor's sign): MOD for integers, a - floor(a/b)*b for floats."""
    dt = promoted_dtype(x, y, "mod")
    if dt.is_float:
        (a, b), dt, _, dev = operands("mod", (x, y))
        return wrap(a - floor_uop(a / b) * b, dev)
    return binary(Ops.MOD, "mod", x, y, dtypes.default_int if dt.is_bool else dt)


def _int_pow_const(base: UOp, n: int) -> UOp:
    """base ** n for an int n >= 0 by repeated squaring (exact, wrapping like the dtype)."""
    result: UOp | None = None
    sq = base
    while n:
        if n & 1:
            result = sq if result is None else result * sq
        n >>= 1
        if n:
            sq = sq * sq
    return base.const_like(1) if result is None else result


def _int_pow_tensor(base: UOp, e: UOp) -> UOp:
    """Integer power with a tensor exponent: binary exponentiation over the exponent's bits. A negative exponent
    gives 0, except that 1 stays 1 and -1 alternates (torch's rule; numpy refuses)."""
    one, zero = base.const_like(1), base.const_like(0)
    ep = (e < zero).where(zero, e)
    result, sq = one, base
    for _ in range(e.dtype.bits - (0 if e.dtype.is_unsigned else 1)):
        result = (ep & one).ne(zero).where(result * sq, result)
        sq, ep = sq * sq, ep >> one
    if e.dtype.is_unsigned:
        return result
    odd = (e & one).ne(zero)
    neg_result = base.eq(one).where(one, base.eq(-one).where(odd.where(-one, one), zero))
    return (e < zero).where(neg_result, result)


def pow_(x: Operand, y: Operand) -> Tensor:
    """x ** y. Small integral Python exponents become multiplications (exact for ints, one rounding per step for
    floats), 0.5 is sqrt, base 2 is exp2; otherwise the IR's POW (floats) or binary exponentiation (ints)."""
    dt = promoted_dtype(x, y, "pow")
    if dt.is_bool:
        dt = dtypes.default_int
    ys = y if isinstance(y, (int, float)) and not isinstance(y, bool) else None
    if isinstance(x, tt.Tensor) and ys is not None and float(ys).is_integer() and (not dt.is_float or abs(ys) <= 8):
        base = x.cast(dt).uop
        n = int(ys)
        if n >= 0:
            return wrap(_int_pow_const(base, n), x.device)
        if dt.is_float:
            return wrap(_int_pow_const(base, -n).recip(), x.device)
        one, zero = base.const_like(1), base.const_like(0)
        r = base.eq(one).where(one, base.eq(-one).where(-one if n & 1 else one, zero))
        return wrap(r, x.device)
    if isinstance(x, tt.Tensor) and dt.is_float and ys == 0.5:
        return sqrt(x.cast(dt))
    if isinstance(y, tt.Tensor) and _is_scalar(x) and x == 2 and dt.is_float:
        return exp2(y.cast(dt))
    (a, b), dt2, _, dev = operands("pow", (x, y), dt)
    if dt2.is_float:
        return _float_math(wrap(a, dev), lambda u: UOp(Ops.POW, (u, b.cast(u.dtype))))
    return wrap(_int_pow_tensor(a, b), dev)


def neg(x: Tensor) -> Tensor:
    """-x; on bool tensors it is logical not (as tinygrad)."""
    return wrap(UOp(Ops.NOT if x.dtype.is_bool else Ops.NEG, (x.uop,)), x.device)


def maximum(x: Operand, y: Operand) -> Tensor:
    return binary(Ops.MAX, "maximum", x, y)


def minimum(x: Operand, y: Operand) -> Tensor:
    """Elementwise min; for floats -max(-a, -b) so nan propagates, for ints a comparison (negation would wrap)."""
    (a, b), dt, _, dev = operands("minimum", (x, y))
    if dt.is_float:
        return wrap(-((-a).maximum(-b)), dev)
    return wrap((a < b).where(a, b), dev)


def where(cond: Tensor, x: Operand, y: Operand) -> Tensor:
    """x where cond is true (non-zero), else y; x and y are promoted together, all three broadcast."""
    conv = [as_tensor(v, cond.device, "where") for v in (x, y)]
    tens = [v for v in conv if isinstance(v, tt.Tensor)]
    dt = result_dtype([t.dtype for t in tens], [v for v in conv if not isinstance(v, tt.Tensor)])
    c = cond if cond.dtype.is_bool else binary(Ops.CMPNE, "where", cond, 0)
    shape = broadcast_shape([c.shape] + [t.shape for t in tens], "where")
    dev = common_device("where", [c, *tens])
    a, b = (expand_uop(v.uop.cast(dt), shape) if isinstance(v, tt.Tensor) else weak_const("where", v, dt, shape)
            for v in conv)
    return wrap(UOp(Ops.WHERE, (expand_uop(c.uop, shape), a, b)), dev)


def clip(x: Tensor, min_: Scalar | Tensor | None = None, max_: Scalar | Tensor | None = None) -> Tensor:
    """Clamp to [min_, max_] (either may be None), applied as numpy does: minimum(maximum(x, min_), max_)."""
    if min_ is None and max_ is None:
        raise ValueError("clip: give at least one of min_ and max_")
    out = x if min_ is None else maximum(x, min_)
    return out if max_ is None else minimum(out, max_)


# ---------------------------------------------------------------- casts


def cast(x: Tensor, dtype: object) -> Tensor:
    return wrap(x.uop.cast(to_dtype(dtype, "cast")), x.device)


def bitcast(x: Tensor, dtype: object) -> Tensor:
    """Reinterpret the bytes. Equal itemsizes keep the shape; otherwise the last axis is rescaled."""
    dt = to_dtype(dtype, "bitcast")
    if dt.itemsize != x.dtype.itemsize and (not x.shape or (x.shape[-1] * x.dtype.itemsize) % dt.itemsize):
        raise DTypeError(f"bitcast: cannot view {x.dtype.name}{list(x.shape)} as {dt.name}: the last axis holds "
                         f"{(x.shape[-1] if x.shape else 1) * x.dtype.itemsize} bytes, not a multiple of "
                         f"{dt.itemsize}")
    return wrap(x.uop if dt is x.dtype else x.uop.bitcast(dt), x.device)


# ---------------------------------------------------------------- math functions


def floatify(x: Tensor) -> Tensor:
    return x if x.dtype.is_float else x.cast(dtypes.default_float)


def _float_math(x: Tensor, fn: Callable[[UOp], UOp]) -> Tensor:
    """Apply `fn` on a float view of x; half types are computed in float32 and rounded back."""
    x = floatify(x)
    if x.dtype in (dtypes.float16, dtypes.bfloat16):
        return wrap(fn(x.uop.cast(dtypes.float32)).cast(x.dtype), x.device)
    return wrap(fn(x.uop), x.device)


def _unit_math(x: Tensor, fn: _un.Unary) -> Tensor:
    """`_float_math` of an accurate function that differentiates as a unit (tensor.units)."""
    return _float_math(x, lambda u: fn(u, x.device))


_LN_2 = math.log(2.0)


def exp(x: Tensor) -> Tensor:
    return _unit_math(x, _un.exp)


def exp2(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.exp2())


def log(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.log2() * _LN_2)


def log2(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.log2())


def sin(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.sin())


def cos(x: Tensor) -> Tensor:
    return _unit_math(x, _un.cos)


def tan(x: Tensor) -> Tensor:
    return _unit_math(x, _un.tan)


def sqrt(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.sqrt())


def rsqrt(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.sqrt().recip())


def reciprocal(x: Tensor) -> Tensor:
    return _float_math(x, lambda u: u.recip())


def square(x: Tensor) -> Tensor:
    return mul(x, x)


def abs_(x: Tensor) -> Tensor:
    """|x|. Floats clear the sign bit (exact for -0.0 and nan); signed ints negate the negatives (wrapping at the
    minimum, as numpy); unsigned and bool are unchanged."""
    dt, u = x.dtype, x.uop
    if dt.is_float:
        bits = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dt.itemsize]
        mask = (1 << (dt.bits - 1)) - 1
        return wrap((u.bitcast(bits) & u.bitcast(bits).const_like(mask)).bitcast(dt), x.device)
    if dt.kind == "i":
        return wrap((u < u.const_like(0)).where(-u, u), x.device)
    return x


def sign(x: Tensor) -> Tensor:
    """-1, 0 or 1 in x's dtype (nan stays nan, a zero keeps its sign); bool is unchanged."""
    if x.dtype.is_bool:
        return x
    u = x.uop
    zero, one = u.const_like(0), u.const_like(1)
    neg = (u < zero).where(u.const_like(-1), u) if x.dtype.kind != "u" else u
    return wrap((u > zero).where(one, neg), x.device)


def trunc(x: Tensor) -> Tensor:
    return wrap(UOp(Ops.TRUNC, (x.uop,)), x.device) if x.dtype.is_float else x


def floor_uop(u: UOp) -> UOp:
    t = UOp(Ops.TRUNC, (u,))
    return (u < t).where(t - t.const_like(1), t)


def floor(x: Tensor) -> Tensor:
    return wrap(floor_uop(x.uop), x.device) if x.dtype.is_float else x


def ceil(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return x
    t = UOp(Ops.TRUNC, (x.uop,))
    return wrap((x.uop > t).where(t + t.const_like(1), t), x.device)


def round_(x: Tensor) -> Tensor:
    """Round half to even (numpy's and torch's rule). The fraction x - trunc(x) is exact, so no step rounds."""
    if not x.dtype.is_float:
        return x
    u = x.uop
    t = UOp(Ops.TRUNC, (u,))
    frac = u - t
    half = u.const_like(0.5)
    afrac = (frac < u.const_like(0)).where(-frac, frac)
    step = (u < u.const_like(0)).where(u.const_like(-1), u.const_like(1))
    t_even = UOp(Ops.TRUNC, (t * half,)) * u.const_like(2.0)
    t_is_even = t_even.eq(t)
    up = (afrac > half) | (afrac.eq(half) & t_is_even.alu(Ops.NOT))
    return wrap(up.where(t + step, t), x.device)


def erf(x: Tensor) -> Tensor:
    return _unit_math(x, _un.erf)


__all__ = [
    "abs_", "add", "as_tensor", "binary", "bitcast", "cast", "ceil", "clip", "common_device", "const_uop", "cos", "div",
    "erf", "exp", "exp2", "expand_uop", "floor", "floor_uop", "floordiv", "log", "log2", "maximum", "minimum", "mod",
    "mul", "need_kind", "neg", "operands", "pow_", "promoted_dtype", "reciprocal", "result_dtype", "round_", "rsqrt",
    "scalar_dtype", "sign", "sin", "sqrt", "square", "sub", "tan", "trunc", "weak_const", "where", "wrap",
]
