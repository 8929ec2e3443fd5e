"""Interval analysis: the [vmin, vmax] that bounds every value a UOp can take (the spec's min_max column).

Sound above all: over every assignment of the variables within their bounds (and every RANGE index), each
value the node takes lies in [vmin, vmax]. Within that, bounds are as tight as reasoning about one node from
its operands' intervals allows; relations between operands are not tracked, so x - x gives [lo - hi, hi - lo].

The meaning of each op is the one in rewrite.semantics:
  * Sized ints wrap. An op whose exact interval leaves the dtype's range may wrap, so it gets the full range.
    `index` is unbounded and never wraps, so its intervals are never clamped (they may leave 64 bits); the
    one exception is a shift by more than 4096 bits, whose exact bound would be an absurdly large int.
  * IDIV and MOD are floor division and modulo; CDIV and CMOD truncate toward zero. A divisor interval that
    holds 0 gives the dtype range (a device may compute anything there, so nothing is claimed).
  * Float bounds are never NaN: they bound the non-NaN values, and a float node may still be NaN. That is
    why a comparison of floats that may be NaN claims less (NaN makes every comparison False but CMPNE).
    A float op is rounded to its dtype after computing in float64, and that rounding is monotone, so a
    bound computed at a corner is exactly the value the op takes there.

Bounds are Python values of the node's kind: bool for bool, int for integer dtypes, float for floats.
The walk is iterative, so chains of a million nodes need no recursion, and each node's interval is cached
in its `_mm` slot.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from rewrite.dtype import DType, PtrDType, dtypes
from rewrite.ops import GroupOp, Ops
from rewrite.semantics import round_to

if TYPE_CHECKING:
    from rewrite.uop import ConstValue, UOp

Interval = tuple  # (lo, hi), both of the node's value kind
_INF = math.inf
_ANY_FLOAT: Interval = (-_INF, _INF)


def dtype_range(dt: DType) -> tuple[ConstValue, ConstValue]:
    """Every value of `dt`: its min and max (floats: -inf and inf). A pointer gives its element's range, since
    the nodes whose dtype is a pointer (buffers, INDEX into them) stand for the elements; void has no values,
    so it gets the widest interval."""
    if isinstance(dt, PtrDType):
        dt = dt.base
    s = dt.scalar
    if s.kind in ("b", "i", "u", "x", "f"):
        return s.min, s.max
    return _ANY_FLOAT


def compute_min_max(root: UOp) -> tuple[ConstValue, ConstValue]:
    """The interval of `root`, filling the `_mm` cache of every node below it that has none yet."""
    if (mm := root._mm) is not None:
        return mm
    # post-order on an explicit stack that stops at cached nodes, so asking again after growing a graph
    # costs only the new nodes
    stack = [root]
    while stack:
        u = stack[-1]
        if u._mm is not None:
            stack.pop()
            continue
        missing = [s for s in u.src if s._mm is None]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        u._mm = _RULES.get(u.op, _dtype_rule)(u)
    return cast(Interval, root._mm)  # the walk ends with root's


# ---------------------------------------------------------------- result helpers


def _dtype_rule(u: UOp) -> Interval:
    return dtype_range(u.dtype)


def _fit(dt: DType, lo: int, hi: int) -> Interval:
    """A sized int result: exact if the exact interval fits, else the value may have wrapped anywhere."""
    s = dt.scalar
    if s.kind == "x" or (s.min <= lo and hi <= s.max):
        return lo, hi
    return s.min, s.max


def _result(dt: DType, lo: ConstValue, hi: ConstValue) -> Interval:
    """Bounds computed exactly (ints) or in float64 (floats), made into bounds of a `dt` result."""
    k = dt.scalar.kind
    if k == "f":
        if lo != lo or hi != hi:  # inf - inf or 0 * inf at a corner: no cheap bound left
            return _ANY_FLOAT
        return round_to(dt, lo), round_to(dt, hi)
    if k in ("i", "u"):
        return _fit(dt, cast(int, lo), cast(int, hi))  # an int dtype's bounds are ints
    return lo, hi


def _corners(dt: DType, vals: list) -> Interval:
    if dt.scalar.is_float and any(v != v for v in vals):
        return _ANY_FLOAT
    return _result(dt, min(vals), max(vals))


def _may_be_nan(u: UOp) -> bool:
    """Could this float node be NaN? Only the cheap, certain cases say no."""
    if not u.dtype.scalar.is_float:
        return False
    if u.op is Ops.CONST:
        return u.value != u.value
    if u.op is Ops.VCONST:
        return any(v != v for v in u.vconst_values)
    if u.op is Ops.CAST:
        return u.src[0].dtype.scalar.is_float
    # a symbolic variable takes values in its bounds, and NaN is in none
    return not (u.op is Ops.PARAM and len(u.src) == 3)


def _point(v: ConstValue, dt: DType) -> Interval:
    """A constant's interval. A float constant that its dtype cannot hold exactly is read either as written
    or rounded, depending on the consumer, so both readings are kept."""
    k = dt.scalar.kind
    if k == "f":
        v = float(v)
        if v != v:
            return _ANY_FLOAT
        r = round_to(dt, v)
        return (r, v) if r < v else (v, r)
    if k == "b":
        return bool(v), bool(v)
    if k in ("i", "u", "x"):
        return int(v), int(v)
    return v, v


def _union(a: Interval, b: Interval) -> Interval:
    return min(a[0], b[0]), max(a[1], b[1])


def _iv(u: UOp) -> Interval:
    """A source's interval; the walk computes every source before its users."""
    return u._mm  # type: ignore[return-value]  # hot path: the walk set _mm before any user reads it


def _mm2(u: UOp) -> tuple[Interval, Interval]:
    return _iv(u.src[0]), _iv(u.src[1])


# ---------------------------------------------------------------- leaves and structure


def _const(u: UOp) -> Interval:
    return _point(u.value, u.dtype)


def _vconst(u: UOp) -> Interval:
    vals = u.vconst_values
    if not vals:
        return dtype_range(u.dtype)
    pts = [_point(v, u.dtype) for v in vals]
    return min(p[0] for p in pts), max(p[1] for p in pts)


def _param(u: UOp) -> Interval:
    if len(u.src) == 3:  # a symbolic variable: (shape, lo, hi)
        return _iv(u.src[1])[0], _iv(u.src[2])[1]
    return dtype_range(u.dtype)


def _range(u: UOp) -> Interval:
    # an empty loop has no values at all; [0, 0] keeps lo <= hi
    return 0, max(_iv(u.src[0])[1] - 1, 0)


def _elements_of(dt: DType) -> DType:
    return (dt.base if isinstance(dt, PtrDType) else dt).scalar


def _pass(u: UOp) -> Interval:
    s = u.src[0]
    if _elements_of(s.dtype) is not _elements_of(u.dtype):
        return dtype_range(u.dtype)
    return _iv(s)


def _pad(u: UOp) -> Interval:
    lo, hi = _pass(u)
    zero = _point(0, u.dtype)
    return min(lo, zero[0]), max(hi, zero[1])


def _stack(u: UOp) -> Interval:
    lo, hi = _iv(u.src[0])
    for s in u.src[1:]:
        lo, hi = _union((lo, hi), _iv(s))
    return lo, hi


def _where(u: UOp) -> Interval:
    c, a, b = (_iv(s) for s in u.src)
    if c == (True, True):
        return a
    if c == (False, False):
        return b
    cond = u.src[0]
    if cond.op is Ops.CMPLT:  # p < q ? p : q is min(p, q), and p < q ? q : p is max(p, q): exact, not the union
        p, q = cond.src
        if p is u.src[1] and q is u.src[2]:
            return (min(a[0], b[0]), min(a[1], b[1]))
        if p is u.src[2] and q is u.src[1]:
            return (max(a[0], b[0]), max(a[1], b[1]))
    return _union(a, b)


# ---------------------------------------------------------------- arithmetic


def _add(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    return _result(u.dtype, xl + yl, xh + yh)


def _sub(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    return _result(u.dtype, xl - yh, xh - yl)


def _neg(u: UOp) -> Interval:
    xl, xh = _iv(u.src[0])
    return _result(u.dtype, -xh, -xl)


def _mul(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    return _corners(u.dtype, [xl * yl, xl * yh, xh * yl, xh * yh])


def _mulacc(u: UOp) -> Interval:
    (xl, xh), (yl, yh), (zl, zh) = (_iv(s) for s in u.src)
    if u.dtype.scalar.is_float:  # the product is rounded before the add, as the op is
        plo, phi = _corners(u.dtype, [xl * yl, xl * yh, xh * yl, xh * yh])
    else:  # wrapping commutes with + and *, so only the exact end result has to fit
        plo, phi = _minmax([xl * yl, xl * yh, xh * yl, xh * yh])
    return _result(u.dtype, plo + zl, phi + zh)


def _max(u: UOp) -> Interval:
    # MAX of floats propagates NaN (numpy.maximum), so a NaN operand never lets the other one through
    (xl, xh), (yl, yh) = _mm2(u)
    return max(xl, yl), max(xh, yh)


def _trunc(u: UOp) -> Interval:
    lo, hi = _iv(u.src[0])
    if not u.dtype.scalar.is_float:
        return lo, hi
    # truncation is monotone and keeps infinities
    return (lo if math.isinf(lo) else float(math.trunc(lo))), (hi if math.isinf(hi) else float(math.trunc(hi)))


def _sqrt(u: UOp) -> Interval:
    lo, hi = _iv(u.src[0])
    if hi < 0:  # every value is NaN
        return dtype_range(u.dtype)
    return round_to(u.dtype, math.sqrt(max(lo, 0.0))), round_to(u.dtype, math.sqrt(hi))


def _nonneg_float(u: UOp) -> Interval:
    # EXP2's libm or device result may differ by an ulp, so only its sign is claimed
    return 0.0, _INF


# ---------------------------------------------------------------- integer division


def _floordiv(x: int, y: int) -> int:
    return x // y


def _truncdiv(x: int, y: int) -> int:
    q = abs(x) // abs(y)
    return q if (x < 0) == (y < 0) else -q


def _truncmod(x: int, y: int) -> int:
    r = abs(x) % abs(y)
    return -r if x < 0 else r


def _div(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    if yl <= 0 <= yh:
        return dtype_range(u.dtype)
    # with the divisor's sign fixed, x / y is monotone in each operand, so its extremes (and those of its
    # floor or truncation, both monotone) are at the corners
    f = _floordiv if u.op is Ops.IDIV else _truncdiv
    return _result(u.dtype, *_minmax([f(xl, yl), f(xl, yh), f(xh, yl), f(xh, yh)]))


def _minmax(vals: list[int]) -> tuple[int, int]:
    return min(vals), max(vals)


def _mod(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    if yl <= 0 <= yh:
        return dtype_range(u.dtype)
    if yl == yh and xl // yl == xh // yl:  # one quotient for the whole dividend range: x % c = x - c*q is monotone
        return _result(u.dtype, xl % yl, xh % yl)
    if yl > 0:  # result in [0, y): below x too when x >= 0, and x itself when 0 <= x < y
        if xl >= 0:
            return (xl, xh) if xh < yl else (0, min(xh, yh - 1))
        return 0, yh - 1
    # y < 0: result in (y, 0], mirrored
    if xh <= 0:
        return (xl, xh) if xl > yh else (max(xl, yl + 1), 0)
    return yl + 1, 0


def _cmod(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    if yl <= 0 <= yh:
        return dtype_range(u.dtype)
    if yl == yh and _truncdiv(xl, yl) == _truncdiv(xh, yl):
        return _result(u.dtype, _truncmod(xl, yl), _truncmod(xh, yl))
    # the remainder takes the dividend's sign and is smaller than |y| in magnitude
    small, big = min(abs(yl), abs(yh)), max(abs(yl), abs(yh))
    if -small < xl and xh < small:
        return xl, xh
    lo = 0 if xl >= 0 else max(xl, 1 - big)
    hi = 0 if xh <= 0 else min(xh, big - 1)
    return lo, hi


# ---------------------------------------------------------------- bitwise and shifts


def _width(*vals: int) -> int:
    """The smallest k with every value in [-2**k, 2**k - 1]: two's complement on k+1 bits holds them all."""
    return max((v if v >= 0 else ~v).bit_length() for v in vals)


def _bitwise(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    op = u.op
    if u.dtype.scalar.is_bool:
        if op is Ops.AND:
            return xl and yl, xh and yh
        if op is Ops.OR:
            return xl or yl, xh or yh
        return (xl ^ yl, xl ^ yl) if xl == xh and yl == yh else (False, True)
    # values on k+1 bits stay on k+1 bits through any bitwise op
    k = _width(xl, xh, yl, yh)
    top = (1 << k) - 1
    if op is Ops.AND:
        # x & y only clears bits of a non-negative x, so 0 <= x & y <= x; it is at most max(x, y) in general
        if xl >= 0 and yl >= 0:
            return 0, min(xh, yh)
        if xl >= 0 or yl >= 0:
            return 0, xh if xl >= 0 else yh
        # both may be negative: where both are, they share every bit from the wider one's sign up, so does x & y
        return -(1 << _width(xl, yl)), max(xh, yh)
    if op is Ops.OR:
        # setting bits never lowers a non-negative value, nor a negative one (its high bits are all ones), so
        # x | y is at least each operand of a sign it shares with the result
        if xl >= 0 and yl >= 0:
            return max(xl, yl), top
        if xh < 0 and yh < 0:
            return max(xl, yl), -1
        if xh < 0 or yh < 0:  # one operand is negative throughout, so the result is, and it is at least that operand
            return (xl if xh < 0 else yl), -1
        return -(1 << k), top
    # XOR: the sign bit of the result is the XOR of the operands' signs
    if (xl >= 0 and yl >= 0) or (xh < 0 and yh < 0):
        return 0, top
    if (xl >= 0 and yh < 0) or (xh < 0 and yl >= 0):
        return -(1 << k), -1
    return -(1 << k), top


_MAX_INDEX_SHIFT = 1 << 12


def _shift(u: UOp) -> Interval:
    (xl, xh), (sl, sh) = _mm2(u)
    dt = u.dtype.scalar
    # semantics: an amount outside [0, bits) (index: below 0) is undefined, and devices disagree there
    if sl < 0 or (dt.kind != "x" and sh >= dt.bits):
        return dtype_range(u.dtype)
    if u.op is Ops.SHL and dt.kind == "x" and sh > _MAX_INDEX_SHIFT and (xl or xh):
        # the exact bound would be an int of sh bits; no device holds such an index, so claim only its range
        return dtype_range(u.dtype)
    if u.op is Ops.SHL:  # x * 2**s: linear in x, monotone in s for a fixed sign of x, so corners
        return _result(u.dtype, *_minmax([xl << sl, xl << sh, xh << sl, xh << sh]))
    # x >> s is monotone in x, and in s it heads toward 0 (x >= 0) or -1 (x < 0)
    return (xl >> sh if xl >= 0 else xl >> sl), (xh >> sl if xh >= 0 else xh >> sh)


# ---------------------------------------------------------------- bools and comparisons


def _not(u: UOp) -> Interval:
    xl, xh = _iv(u.src[0])
    return not xh, not xl


def _compare(u: UOp) -> Interval:
    (xl, xh), (yl, yh) = _mm2(u)
    op = u.op
    if op is Ops.CMPGT or op is Ops.CMPLE:  # x > y is y < x, x <= y is y >= x
        (xl, xh), (yl, yh) = (yl, yh), (xl, xh)
        op = Ops.CMPLT if op is Ops.CMPGT else Ops.CMPGE
    if op is Ops.CMPLT:
        true, false = xh < yl, xl >= yh
    elif op is Ops.CMPGE:
        true, false = xl >= yh, xh < yl
    else:
        differ, same = xh < yl or yh < xl, xl == xh == yl == yh
        true, false = (differ, same) if op is Ops.CMPNE else (same, differ)
    # NaN makes every comparison False except CMPNE (True), so only the certainty NaN agrees with survives
    nan_breaks = false if op is Ops.CMPNE else true
    if nan_breaks and any(_may_be_nan(s) for s in u.src):
        true = false = False
    return (True, True) if true else (False, False) if false else (False, True)


# ---------------------------------------------------------------- casts

# fmt: off
_FLOAT_MAX = {
    dtypes.float16: 65504.0, dtypes.bfloat16: float.fromhex("0x1.fep127"),
    dtypes.float32: float.fromhex("0x1.fffffep127"), dtypes.float64: float.fromhex("0x1.fffffffffffffp1023"),
}
# fmt: on


def _cast(u: UOp) -> Interval:
    s = u.src[0]
    to, frm = u.dtype.scalar, s.dtype.scalar
    lo, hi = _iv(s)
    if frm.kind not in ("b", "i", "u", "x", "f") or to.kind not in ("b", "i", "u", "x", "f"):
        return dtype_range(u.dtype)
    nan = _may_be_nan(s)
    if to.kind == "b":  # x != 0, and NaN != 0
        can_false = lo <= 0 <= hi
        can_true = nan or not (lo == 0 and hi == 0)
        return not can_false, can_true
    if to.kind == "f":  # rounding to the target is monotone
        if frm.kind == "b":
            return float(lo), float(hi)
        return round_to(to, lo), round_to(to, hi)
    if frm.kind == "f":  # truncation toward zero, then wrap; NaN and inf become 0 for sized ints
        fmax = _FLOAT_MAX[frm]
        ilo, ihi = math.trunc(max(lo, -fmax)), math.trunc(min(hi, fmax))
        if to.kind == "x":
            return ilo, ihi
        if nan or math.isinf(lo) or math.isinf(hi):
            ilo, ihi = min(ilo, 0), max(ihi, 0)
        return _fit(to, ilo, ihi)
    if to.kind == "x":
        return int(lo), int(hi)
    return _fit(to, int(lo), int(hi))


def float_to_int_in_range(u: UOp) -> bool:
    """Is `u` a CAST from float to a sized int whose source, where it is not NaN, is finite and truncates into
    the int's range? Then a plain conversion instruction (C's cast, x86 cvttps2dq) is exact there, and only a
    NaN source (which gives 0) needs care: no wrapping helper, and the conversion vectorizes."""
    if u.op is not Ops.CAST or not u.src[0].dtype.scalar.is_float:
        return False
    to = u.dtype.scalar
    if to.kind not in ("i", "u"):
        return False
    lo, hi = compute_min_max(u.src[0])
    if math.isinf(lo) or math.isinf(hi) or lo != lo or hi != hi:
        return False
    return bool(to.min <= math.trunc(lo) and math.trunc(hi) <= to.max)


# ---------------------------------------------------------------- the table

# fmt: off
_RULES: dict[Ops, Callable[[UOp], Interval]] = {
    Ops.CONST: _const, Ops.VCONST: _vconst, Ops.PARAM: _param, Ops.RANGE: _range, Ops.SPECIAL: _range,
    **{o: _pass for o in GroupOp.Movement - {Ops.BITCAST, Ops.STACK, Ops.PAD}},
    Ops.PAD: _pad, Ops.STACK: _stack,
    Ops.AFTER: _pass, Ops.COPY: _pass, **{o: _pass for o in GroupOp.Marker},
    Ops.WHERE: _where,
    Ops.ADD: _add, Ops.SUB: _sub, Ops.NEG: _neg, Ops.MUL: _mul, Ops.MULACC: _mulacc, Ops.MAX: _max,
    Ops.TRUNC: _trunc, Ops.SQRT: _sqrt, Ops.EXP2: _nonneg_float,
    Ops.IDIV: _div, Ops.CDIV: _div, Ops.MOD: _mod, Ops.CMOD: _cmod,
    Ops.AND: _bitwise, Ops.OR: _bitwise, Ops.XOR: _bitwise, Ops.SHL: _shift, Ops.SHR: _shift,
    Ops.NOT: _not, **{o: _compare for o in GroupOp.Comparison},
    Ops.CAST: _cast,
}
# fmt: on

__all__ = ["compute_min_max", "dtype_range"]
