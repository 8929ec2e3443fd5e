"""The one table of op semantics: the exact Python meaning of every elementwise op, per dtype.

This is the contract that constant folding, the reference evaluators and the C and CUDA devices must match.
Values are Python objects: `bool` for bool, `int` for integer dtypes, `float` for float dtypes (a float16,
bfloat16 or float32 value is a Python float that is exactly representable in that format).

Integers
  * Sized ints (int8..int64, uint8..uint64) wrap around (two's complement) after every op.
  * `index` is an unbounded mathematical integer: nothing wraps.
  * IDIV and MOD are floor division and modulo, exactly Python's `//` and `%` (the result takes the sign of
    the divisor), then wrapped: int8 -128 // -1 is -128.
  * CDIV and CMOD are C's truncating `/` and `%` (the remainder takes the sign of the numerator), wrapped.
  * Division or modulo by zero (IDIV, MOD, CDIV, CMOD) is 0 on sized ints, on every device (C leaves it
    undefined and x86 traps; a 0 is cheap to select and keeps a // b and a % b consistent with each other and with
    the floor-from-truncating decomposition). On index it raises EvalError: index math never divides by zero.
  * SHL/SHR on sized ints use the shift amount modulo the bit width, b & (bits - 1) (as x86 and Java do for
    32 and 64 bits; C leaves other amounts undefined), so 1 << 40 on int32 is 1 << 8 and a negative amount
    counts from the top. On index the amount must be >= 0 (EvalError otherwise). SHR is arithmetic on signed
    ints and index, logical on unsigned. SHL wraps.
  * XOR/OR/AND are bitwise in two's complement; on bool they are logical.

Floats (IEEE 754 binary16/bfloat16/binary32/binary64, round-to-nearest-even)
  * Each op is computed exactly or in float64 and then rounded once to the dtype. For + - * / sqrt this
    equals the correctly rounded IEEE result, since float64 has more than 2p+2 bits for every narrower format.
    EXP2, LOG2, SIN and POW are float64 libm results rounded to the dtype; devices may differ by an ulp there.
  * bfloat16 rounding goes through float32: round to float32 first, then keep the top 16 bits with
    round-to-nearest-even, which is what devices that compute bfloat16 in float32 registers do.
  * No Python exception leaks: x/0.0 is +-inf (nan for 0/0), RECIP(+-0.0) is +-inf, SQRT(x<0) and LOG2(x<0)
    are nan, LOG2(0) is -inf, SIN(inf) is nan, EXP2 and POW overflow to inf. POW follows C99 pow (as numpy):
    pow(x, 0) = 1 and pow(1, y) = 1 even for nan. MAX is numpy.maximum: nan if either operand is nan, else
    `a if a > b else b` (so MAX(0.0, -0.0) is -0.0).
  * MULACC(a, b, c) is a fused multiply-add: a*b + c computed exactly and rounded once (IEEE fusedMultiplyAdd,
    C's fma/fmaf) on float32 and float64. On float16 and bfloat16 it is the float32 fused result rounded to the
    dtype, which is what a device computing them in float32 registers gives. On ints it is a*b + c, wrapped.
  * TRUNC rounds toward zero and keeps the sign of zero; on ints it is the identity.
  * NaN payloads and signs are not preserved through arithmetic (any nan is "the" nan).

Comparisons return Python bool; nan compares unequal to everything, so only CMPNE is true with a nan operand.
WHERE(c, a, b) is `a if c else b`; its `dtype` argument is the branches' dtype.

THREEFRY(x, key) on uint64: Threefry-2x32 with 20 rounds (Random123); x and key each pack two 32-bit words,
low word first, and the result packs (word1 << 32) | word0.

Casts (exec_cast): to bool is `!= 0` (nan is true); int to int wraps; int or float to float rounds to the
target (an int directly, not through float64); float to int truncates toward zero and wraps the truncated
integer. Devices differ for nan, inf and out-of-range float to int casts (C leaves them undefined, x86 gives
INT_MIN, CUDA saturates); here nan and +-inf become 0, and a cast of them to index raises EvalError.
Bitcasts (exec_bitcast) reinterpret little-endian bytes between dtypes of the same itemsize.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from fractions import Fraction
from typing import cast

from rewrite.dtype import DType, dtypes
from rewrite.errors import EvalError
from rewrite.ops import GroupOp, Ops

Value = int | float | bool

# ---------------------------------------------------------------- rounding and wrapping

# (precision in bits including the implicit one, exponent of the smallest normal, largest finite value)
_FLOAT_FORMATS: dict[DType, tuple[int, int, float]] = {
    dtypes.float16: (11, -14, 65504.0),
    dtypes.bfloat16: (8, -126, float.fromhex("0x1.fep127")),
    dtypes.float32: (24, -126, float.fromhex("0x1.fffffep127")),
}


def _round_float(x: float, prec: int, emin: int, fmax: float) -> float:
    """Round a float64 to a narrower IEEE format with round-to-nearest-even, subnormals included."""
    if x != x or x in (math.inf, -math.inf) or not x:  # nan, inf and +-0.0 are exact everywhere
        return x
    _, e = math.frexp(x)  # |x| in [2**(e-1), 2**e)
    q = max(e - prec, emin - prec + 1)  # exponent of one ulp at x (fixed below the normal range)
    n = round(math.ldexp(x, -q))  # x * 2**-q is exact, and round() of a float is exact half-to-even
    if abs(n) > math.ldexp(fmax, -q):  # compared before scaling back, which could overflow float64
        return math.copysign(math.inf, x)
    return math.ldexp(float(n), q) if n else math.copysign(0.0, x)


def _round_int(v: int, prec: int) -> int:
    """Round an integer to `prec` significant bits, half to even, staying an exact integer."""
    drop = abs(v).bit_length() - prec
    if drop <= 0:
        return v
    mag, rem = divmod(abs(v), 1 << drop)
    half = 1 << (drop - 1)
    if rem > half or (rem == half and mag & 1):
        mag += 1
    return (mag << drop) if v >= 0 else -(mag << drop)


def _int_to_float64(v: int, prec: int) -> float:
    try:
        return float(_round_int(v, prec))
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def fma(dtype: DType, a: float, b: float, c: float) -> float:
    """a*b + c rounded once to `dtype` (float16 and bfloat16: rounded to float32 first, see the module)."""
    dt = dtype.scalar
    if dt is dtypes.float16 or dt is dtypes.bfloat16:
        return round_to(dt, fma(dtypes.float32, a, b, c))
    if not (math.isfinite(a) and math.isfinite(b)):
        return round_to(dt, a * b + c)  # an inf or nan factor: the unfused result is the fused one
    if not math.isfinite(c):
        return c  # the exact product is finite (even where a float64 product would overflow)
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if not exact:  # +0 unless both addends are zeros of the same sign (their float sum has the IEEE sign)
        return a * b + c if not (a * b) and not c else 0.0
    try:
        d = float(exact)  # correctly rounded to float64
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    if dt is dtypes.float64:
        return d
    # float32: round to odd in float64 (53 >= 24 + 2 bits), then to nearest in float32, is the single rounding
    if Fraction(d) != exact and not struct.unpack("<q", struct.pack("<d", d))[0] & 1:
        d = math.nextafter(d, math.inf if exact > d else -math.inf)
    return round_to(dt, d)


def wrap(dtype: DType, v: int) -> int:
    """Two's-complement wrap of an integer to a sized int dtype; index is returned unchanged."""
    dt = dtype.scalar
    if dt.kind == "x":
        return v
    bits = dt.bits
    v &= (1 << bits) - 1
    return v - (1 << bits) if dt.kind == "i" and v >> (bits - 1) else v


def round_to(dtype: DType, x: Value) -> Value:
    """`x` as a value of `dtype`: floats rounded to its precision (RNE), ints wrapped, bools made bool.

    An int given for a float dtype is rounded directly (not through float64), so int64 -> float32 is exact RNE.
    A float given for an integer dtype must be integral (use exec_cast to truncate)."""
    dt = dtype.scalar
    k = dt.kind
    if k == "f":
        if dt is dtypes.float64:
            return _int_to_float64(x, 53) if isinstance(x, int) else float(x)
        if dt is dtypes.bfloat16:
            return _round_float(float(round_to(dtypes.float32, x)), *_FLOAT_FORMATS[dt])
        prec, emin, fmax = _FLOAT_FORMATS[dt]
        return _round_float(_int_to_float64(x, prec) if isinstance(x, int) else float(x), prec, emin, fmax)
    if k in "iux":
        if isinstance(x, float):
            if not x.is_integer():
                raise EvalError(f"round_to: {x!r} is not an integer, so it is not a {dt.name} value; use exec_cast")
            x = int(x)
        return wrap(dt, int(x))
    if k == "b":
        return bool(x)
    raise EvalError(f"round_to: {dt.name} has no values")


def python_value_ok(dtype: DType, v: object) -> bool:
    """Is `v` a value of `dtype` as this module represents it (right Python type, in range, exactly representable)?"""
    dt = dtype.scalar
    k = dt.kind
    if k == "b":
        return isinstance(v, bool)
    if k in "iux":
        return isinstance(v, int) and not isinstance(v, bool) and (k == "x" or dt.min <= v <= dt.max)
    if k == "f":
        return isinstance(v, float) and (v != v or round_to(dt, v) == v)
    return False


# ---------------------------------------------------------------- integer ops


def _div0(op: Ops, dt: DType, a: int, b: int) -> bool:
    """True when b is 0 on a sized int (the result is 0); raises for index."""
    if b != 0:
        return False
    if dt.kind == "x":
        raise EvalError(f"{op.name}({a}, {b}): index division by zero; guard the divisor (WHERE(b != 0, ...))")
    return True


def _floordiv(dt: DType, a: int, b: int) -> int:
    return 0 if _div0(Ops.IDIV, dt, a, b) else a // b


def _floormod(dt: DType, a: int, b: int) -> int:
    return 0 if _div0(Ops.MOD, dt, a, b) else a % b


def _cdiv(dt: DType, a: int, b: int) -> int:
    if _div0(Ops.CDIV, dt, a, b):
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _cmod(dt: DType, a: int, b: int) -> int:
    if _div0(Ops.CMOD, dt, a, b):
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _shift_amount(op: Ops, dt: DType, a: int, b: int) -> int:
    if dt.kind != "x":
        return b & (dt.bits - 1)
    if b < 0:
        raise EvalError(f"{op.name}({a}, {b}): negative shift amount {b} on index; need b >= 0")
    return b


def _shl(dt: DType, a: int, b: int) -> int:
    return a << _shift_amount(Ops.SHL, dt, a, b)


def _shr(dt: DType, a: int, b: int) -> int:
    return a >> _shift_amount(Ops.SHR, dt, a, b)  # Python's >> is arithmetic; unsigned values are >= 0


_DT_INT_OPS: dict[Ops, Callable[[DType, int, int], int]] = {
    Ops.SHL: _shl, Ops.SHR: _shr, Ops.IDIV: _floordiv, Ops.MOD: _floormod, Ops.CDIV: _cdiv, Ops.CMOD: _cmod}

# fmt: off
_INT_OPS: dict[Ops, Callable[..., int]] = {
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.NEG: lambda a: -a,
    Ops.MAX: max,
    Ops.XOR: lambda a, b: a ^ b, Ops.OR: lambda a, b: a | b, Ops.AND: lambda a, b: a & b, Ops.TRUNC: lambda a: a,
}

_BOOL_OPS: dict[Ops, Callable[..., bool]] = {
    Ops.XOR: lambda a, b: bool(a) != bool(b), Ops.OR: lambda a, b: bool(a or b), Ops.AND: lambda a, b: bool(a and b),
    Ops.MAX: lambda a, b: bool(a or b), Ops.NOT: lambda a: not a,
}
# fmt: on

# ---------------------------------------------------------------- float ops (float64, exception-free)

_INF = math.inf


def _fdiv(a: float, b: float) -> float:
    if not b:  # +-0.0
        if not a or a != a:
            return math.nan
        return math.copysign(_INF, a) * math.copysign(1.0, b)
    return a / b


def _ftrunc(a: float) -> float:
    if a != a or a in (_INF, -_INF):
        return a
    return math.copysign(float(math.trunc(a)), a)


def _fmax(a: float, b: float) -> float:
    return a if a > b or a != a else b


def _fsqrt(a: float) -> float:
    return math.nan if a < 0.0 else math.sqrt(a)


def _fexp2(a: float) -> float:
    try:
        return math.exp2(a)
    except OverflowError:
        return _INF


def _flog2(a: float) -> float:
    if a < 0.0:
        return math.nan
    return math.log2(a) if a else -_INF


def _fsin(a: float) -> float:
    return math.nan if a in (_INF, -_INF) else math.sin(a)


def _is_odd_int(b: float) -> bool:
    return math.isfinite(b) and b.is_integer() and int(b) % 2 == 1


def _fpow(a: float, b: float) -> float:
    try:
        return math.pow(a, b)
    except OverflowError:
        return -_INF if a < 0.0 and _is_odd_int(b) else _INF
    except ValueError:  # 0 ** negative is a pole; a negative base with a non-integer exponent has no real value
        if not a:
            return math.copysign(_INF, a) if _is_odd_int(b) else _INF
        return math.nan


# fmt: off
_FLOAT_OPS: dict[Ops, Callable[..., float]] = {
    Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.NEG: lambda a: -a,
    Ops.DIV: _fdiv, Ops.RECIP: lambda a: _fdiv(1.0, a), Ops.MAX: _fmax, Ops.TRUNC: _ftrunc, Ops.SQRT: _fsqrt,
    Ops.EXP2: _fexp2, Ops.LOG2: _flog2, Ops.SIN: _fsin, Ops.POW: _fpow,
}

_COMPARE: dict[Ops, Callable[[Value, Value], bool]] = {
    Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b, Ops.CMPGT: lambda a, b: a > b,
    Ops.CMPGE: lambda a, b: a >= b, Ops.CMPLE: lambda a, b: a <= b, Ops.CMPEQ: lambda a, b: a == b,
}
# fmt: on

# ---------------------------------------------------------------- threefry

_M32 = 0xFFFFFFFF
_ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)


def threefry2x32(x: int, key: int) -> int:
    """Threefry-2x32, 20 rounds (Random123). Both operands and the result pack two words, low word first."""
    k0, k1 = key & _M32, key >> 32 & _M32
    ks = (k0, k1, 0x1BD11BDA ^ k0 ^ k1)
    x0, x1 = (x & _M32) + k0 & _M32, (x >> 32 & _M32) + k1 & _M32
    for r in range(20):
        rot = _ROTATIONS[r % 8]
        x0 = x0 + x1 & _M32
        x1 = ((x1 << rot | x1 >> (32 - rot)) & _M32) ^ x0
        if r % 4 == 3:  # key injection s after every 4 rounds; the schedule rotates through the 3 key words
            s = r // 4 + 1
            x0 = x0 + ks[s % 3] & _M32
            x1 = x1 + ks[(s + 1) % 3] + s & _M32
    return x1 << 32 | x0


# ---------------------------------------------------------------- the entry points

_ARITY = {
    **{o: 1 for o in GroupOp.UnaryALU},
    **{o: 2 for o in GroupOp.BinaryALU},
    **{o: 3 for o in GroupOp.TernaryALU},
    Ops.THREEFRY: 2,
}


def exec_alu(op: Ops, dtype: DType, *vals: Value) -> Value:
    """The exact result of elementwise `op` on values of `dtype` (the operands' dtype; for WHERE the branches')."""
    if _ARITY.get(op) != len(vals):
        if op not in _ARITY:
            raise EvalError(
                f"exec_alu: {op.name} is not an elementwise ALU op (CAST and BITCAST have exec_cast, exec_bitcast)"
            )
        raise EvalError(f"exec_alu: {op.name} takes {_ARITY[op]} operands, got {len(vals)}")
    if op is Ops.WHERE:
        return vals[1] if vals[0] else vals[2]
    if (cmp := _COMPARE.get(op)) is not None:
        return cmp(vals[0], vals[1])
    dt = dtype.scalar
    if op is Ops.MULACC:
        if dt.kind == "f":
            return fma(dt, *cast("tuple[float, float, float]", vals))  # a float op's operands are floats
        return exec_alu(Ops.ADD, dt, exec_alu(Ops.MUL, dt, vals[0], vals[1]), vals[2])
    k = dt.kind
    if op is Ops.THREEFRY and dt is dtypes.uint64:
        return threefry2x32(*cast("tuple[int, int]", vals))  # uint64 operands are ints
    if k in "iux":
        if (dfn := _DT_INT_OPS.get(op)) is not None:
            return wrap(dt, dfn(dt, *cast("tuple[int, int]", vals[:2])))  # an int op's operands are ints
        if (fn := _INT_OPS.get(op)) is not None:
            return wrap(dt, fn(*vals))
    elif k == "f":
        if (ffn := _FLOAT_OPS.get(op)) is not None:
            return round_to(dt, ffn(*vals))
    elif k == "b" and (bfn := _BOOL_OPS.get(op)) is not None:
        return bfn(*vals)
    raise EvalError(f"exec_alu: {op.name} is not defined on {dt.name} (operands {vals!r})")


def exec_cast(value: Value, from_dtype: DType, to_dtype: DType) -> Value:
    """CAST of one value (see the module docstring for nan, inf and out-of-range float -> int)."""
    src, dst = from_dtype.scalar, to_dtype.scalar
    if dst.kind == "b":
        return value != 0
    if dst.kind == "f":
        return round_to(dst, int(value) if isinstance(value, bool) else value)
    if dst.kind in "iux":
        if src.kind == "f" or isinstance(value, float):
            if value != value or value in (_INF, -_INF):
                if dst.kind == "x":
                    raise EvalError(f"CAST: {value!r} ({src.name}) has no index value")
                return 0
            return wrap(dst, math.trunc(value))
        return wrap(dst, int(value))
    raise EvalError(f"CAST: cannot cast {src.name} to {dst.name}")


def to_bytes(dtype: DType, value: Value) -> bytes:
    """The little-endian memory image of one value."""
    dt = dtype.scalar
    if dt.fmt is None and dt is not dtypes.bfloat16:
        raise EvalError(f"BITCAST: {dt.name} has no memory layout")
    value = round_to(dt, value)  # struct refuses out-of-range ints and floats that overflow the format
    if dt is dtypes.bfloat16:
        return (struct.unpack("<I", struct.pack("<f", value))[0] >> 16).to_bytes(2, "little")
    return struct.pack("<" + cast(str, dt.fmt), value)  # only bfloat16 lacks a fmt, and it returned above


def from_bytes(dtype: DType, data: bytes) -> Value:
    """The value whose little-endian memory image is `data` (len(data) == itemsize)."""
    dt = dtype.scalar
    if dt is dtypes.bfloat16:
        return struct.unpack("<f", (int.from_bytes(data, "little") << 16).to_bytes(4, "little"))[0]
    if dt.fmt is None:
        raise EvalError(f"BITCAST: {dt.name} has no memory layout")
    v = struct.unpack("<" + dt.fmt, data)[0]
    return math.nan if isinstance(v, float) and v != v else v


def exec_bitcast(value: Value, from_dtype: DType, to_dtype: DType) -> Value:
    """Reinterpret the bytes of one value as another dtype of the same itemsize (nan payloads are not kept)."""
    src, dst = from_dtype.scalar, to_dtype.scalar
    if src.itemsize != dst.itemsize:
        raise EvalError(
            f"BITCAST: {src.name} ({src.itemsize} bytes) and {dst.name} ({dst.itemsize} bytes) differ in "
            f"size; a scalar bitcast needs equal itemsizes"
        )
    return from_bytes(dst, to_bytes(src, value))


__all__ = [
    "exec_alu",
    "exec_bitcast",
    "exec_cast",
    "from_bytes",
    "python_value_ok",
    "round_to",
    "threefry2x32",
    "to_bytes",
    "wrap",
]
