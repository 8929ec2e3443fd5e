"""Transcendental decompositions: EXP2, LOG2 and SIN as plain ALU ops, SQRT and POW through EXP2 and LOG2.

After this set has run (for a device that lacks the op), no EXP2, LOG2, SIN, SQRT or POW is left; in their
place are ADD, SUB, MUL, NEG, CMPLT, CMPNE, WHERE, CAST, BITCAST, TRUNC, integer AND/OR/SHL/SHR on bit patterns
and one DIV (float64 LOG2), so a C compiler can vectorize a loop that uses them (a libm call blocks gcc's
vectorizer). The rules run in instruction selection as part of rules.decompositions (`decompositions_for`
keeps each only for a device without its op); they assume nothing about the operand's range, and no later
rule may reassociate float arithmetic (rules.symbolic does not), since the graphs round on purpose.

Each rule is a callable that builds the graph for the operand's dtype: float32 directly; float16 and bfloat16
in float32, rounded back once; float64 with its own constants and higher degrees. SIN for float32 reduces its
argument in float64 (exact products with a float32 x), SQRT and POW for the narrower floats work in float64.

Measured against the exact value (mpmath or float64 libm), in ulps of the result; "every" means every float of
the range was evaluated (numpy replica of these graphs, checked against rewrite.evaluate), "sampled" means
random samples. tests/rules/test_transcendental.py re-checks sparse sweeps and the worst regions.

| op   | float32 (max ulp)                          | float64 (max ulp, sampled) | specials                        |
|------|--------------------------------------------|----------------------------|---------------------------------|
| EXP2 | 0.655, every x in [-160, 160]; 0.778 where | 0.61; 0.75 subnormal       | nan; inf; -inf -> 0; overflow   |
|      | the result is subnormal (rounded once)     |                            | inf, underflow 0; 2**k exact    |
| LOG2 | 0.862, every positive float (subnormals)   | 0.76                       | +-0 -> -inf; x<0, nan -> nan;   |
|      |                                            |                            | inf; log2(2**k) = k exactly     |
| SIN  | 0.905, every |x| <= 1.35e10; beyond,       | 0.87 for |x| < 2.1e8;      | +-inf, nan -> nan; +-0 kept;    |
|      | abs error <= |x| * 2**-52                  | beyond, abs err |x|*2**-53 | |x| >= 2**51 (2**50) -> +-0.0   |
| SQRT | 0.5 + 2**-20 (float64 inside)              | 0.75 (one Newton step)     | +-0 kept; x<0 -> nan; inf       |
| POW  | 0.5 + 2**-20 (float64 inside)              | 1 + 0.7 * |b * log2(a)|    | C99 Annex F (rewrite.semantics) |
| EXP2 | 0.546, fused 0.562, 801 points of r, to    | 0.539, fused 0.546 (same)  | only for |r| <= 0.34668, which  |
| (r*C)| 2**(r*C) unrounded (exp's reduced form)   |                            | interval analysis must prove    |

float16 was checked on every value: LOG2 and SQRT are correctly rounded, EXP2 and SIN on all but 1 and 4
inputs (off by a hair over half an ulp). bfloat16 is faithful on the swept values.

Vectorization (gcc 12, -O2 -march=native, the cpu device's flags): EXP2, LOG2 and SIN loops vectorize for
float32 and float64, SQRT for float64. The float32 SQRT/POW and float64 POW loops vectorize only with
-fno-trapping-math: under the default, gcc sinks float64 work that a select uses on one side into that side
and then will not if-convert it. float16 loops do not vectorize in gcc 12 without AVX512-FP16 at all.

`transcendental_fused` is the same set with every polynomial step one MULACC (fused multiply-add): the
instruction selection stage uses it for a target with FMA instructions (lower.pipeline.fuses_mulacc), where it
saves about 8 instructions per EXP2; tests/rules/test_transcendental_fused.py holds it to the same bounds.

Coefficients were fitted for this module: discrete minimax of the relative error (a linear program over 600
to 3000 Chebyshev points, targets from mpmath at 120-160 bits), then rounded to the dtype one coefficient at a
time, refitting the rest; the comment on each table names the function, interval, degree and resulting error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rewrite import DType, Ops, Rule, RuleSet, UOp, dtypes, op, var

_h = float.fromhex
_F32, _I32, _F64, _I64 = dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64
_NARROW = frozenset({dtypes.float16, dtypes.bfloat16})
_F64_MAX = float.fromhex("0x1.fffffffffffffp+1023")
_ROUND_F32 = 12582912.0  # 1.5 * 2**23: adding and subtracting it rounds |v| < 2**22 to an integer (nearest even)
_ROUND_F64 = 6755399441055744.0  # 1.5 * 2**52: adding and subtracting it rounds |v| < 2**51 to an integer


def _horner(x: UOp, coeffs: Sequence[float], fused: bool = False) -> UOp:
    """coeffs[0] + x*(coeffs[1] + x*(coeffs[2] + ...)), each step rounded (no fused multiply-add assumed); with
    `fused`, each step one MULACC (one rounding: for a target with fused multiply-add instructions)."""
    if fused:
        acc = x.const_like(coeffs[-1])
        for c in reversed(coeffs[:-1]):
            acc = UOp(Ops.MULACC, (acc, x, x.const_like(c)))
        return acc
    acc = x * coeffs[-1]
    for c in reversed(coeffs[1:-1]):
        acc = (acc + c) * x
    return acc + coeffs[0]


def _in_float32(fn: Callable[[UOp], UOp], x: UOp) -> UOp:
    """fn on float32; a float16/bfloat16 operand is widened (exactly) and the result rounded back once."""
    return fn(x.cast(_F32)).cast(x.dtype) if x.dtype.scalar in _NARROW else fn(x)


def _int_to_float(n: UOp, dtype: DType) -> UOp:
    """A small integer (|n| < 2**22) as a float of `dtype`, through the bits of 1.5 * 2**23 + n (or 2**52).

    Not a CAST: gcc treats an int-to-float conversion as a trapping operation (it may be inexact) and will not
    if-convert a loop body that uses it under a select, which keeps the loop from being vectorized (AVX2 has
    no int64-to-double conversion at all)."""
    if dtype is _F64:
        return (n + 0x4338000000000000).bitcast(_F64) - _ROUND_F64
    return (n + 0x4B400000).bitcast(_F32) - _ROUND_F32


def _pow2i(n: UOp) -> UOp:
    """2**n as float32 for an int32 n in [-126, 127], built from its exponent bits."""
    return ((n + 127) << 23).bitcast(_F32)


# ---------------------------------------------------------------------------------------------------- EXP2

# 2**f = 1 + f*ln2 + f^2 * Q(f) on [-1/2, 1/2]: Q of degree 4 (total degree 6), relative error 2^-28.3
_EXP2_F32 = (_h("0x1.ebfbdcp-3"), _h("0x1.c6af8ap-5"), _h("0x1.3b2deap-7"), _h("0x1.5f02fep-10"), _h("0x1.416024p-13"))
# ln 2 as a 12-bit head (its product with a 10-bit number is exact) and a float32 tail
_LN2_HI, _LN2_LO = _h("0x1.62ep-1"), _h("0x1.0bfbe8p-15")
_SPLIT_F = 12288.0  # 1.5 * 2**13: adding and subtracting it rounds |f| < 1 to a multiple of 2**-10


def exp2_f32(x: UOp, fused: bool = False) -> UOp:
    """2**x for float32: x = n + f with n = round(x), |f| <= 1/2; 2**f by a polynomial, 2**n from exponent bits.

    2**f = (1 + fh*ln2_hi) + small: fh is f rounded to 10 bits, so the head is exact and the one rounding
    that matters is the last addition. The clamp to [-160, 160] keeps n within int32; the scale is applied
    in two exact halves (2**(n - n//2) * 2**(n//2)), so overflow rounds to inf and results in the subnormal
    range are rounded once, like the exact value. 2**n is exact for integer n."""
    xc = (x < 160.0).where(x, 160.0)  # nan goes to 160 here and is put back at the end
    xc = (xc < -160.0).where(-160.0, xc)
    t = xc + _ROUND_F32
    f = xc - (t - _ROUND_F32)  # exact: t - 1.5 * 2**23 is the integer nearest xc
    fh = (f + _SPLIT_F) - _SPLIT_F
    small = (f - fh) * _LN2_HI + f * (f * _horner(f, _EXP2_F32, fused) + _LN2_LO)
    p = (fh * _LN2_HI + 1.0) + small
    n = t.bitcast(_I32) - 0x4B400000  # the low mantissa bits of t are n (offset by the bits of 1.5 * 2**23)
    lo = n >> 1
    r = p * _pow2i(lo) * _pow2i(n - lo)
    return (x.ne(x)).where(x, r)


# -------------------------------------------------------------------------------------- EXP2 of a reduced argument
# exp's reduced argument: tensor.transcendental builds e**x as 2**k * EXP2(r * C), with C = log2(e) rounded to the
# dtype and r = x - k*ln 2 clamped to |r| <= EXP_REDUCED_BOUND (a bound interval analysis sees). There EXP2 needs
# no reduction, clamp or scaling of its own: 2**(r*C) = 1 + r + r*Q(r) directly in r, with the product r*C never
# rounded (one rounding fewer than the IR's MUL then EXP2, so within an ulp of what they would give). A device with
# its own EXP2 (python, cuda) computes the MUL and EXP2 as they stand.
# 0.34668 (exact in every float): ln 2 / 2 = 0.34657, plus the slack of a k rounded from x*C
EXP_REDUCED_BOUND = _h("0x1.63p-2")
EXP_LOG2_E = {_F32: _h("0x1.715476p+0"), _F64: _h("0x1.71547652b82fep+0")}  # log2(e) rounded to the dtype
# 2**(r*C) = 1 + r + r*Q(r) on |r| <= 0.3467: Q of degree 5 (total degree 6), relative error 2^-28.85
_EXPR_F32 = (_h("0x1.446a9ep-26"), _h("0x1.fffffcp-2"), _h("0x1.55541ap-3"), _h("0x1.5557a8p-5"), _h("0x1.1266a4p-7"),
             _h("0x1.6b2f9ep-10"))
# the same for float64: Q of degree 11 (total degree 12), relative error 2^-58.3 (a Chebyshev fit, mpmath.chebyfit
# at 256 bits, rounded)
_EXPR_F64 = (_h("-0x1.08a2ccf552b8ap-56"), _h("0x1.0000000000000p-1"), _h("0x1.555555555555ap-3"),
             _h("0x1.5555555555556p-5"), _h("0x1.111111110f211p-7"), _h("0x1.6c16c16c15a60p-10"),
             _h("0x1.a01a01b14b8d8p-13"), _h("0x1.a01a01a9ecad9p-16"), _h("0x1.71ddf55eff169p-19"),
             _h("0x1.27e4d41115e5ep-22"), _h("0x1.af6344fbd5739p-26"), _h("0x1.1f7f36d83c5dbp-29"))


def exp2_reduced(r: UOp, fused: bool = False) -> UOp:
    """2**(r*C) for |r| <= EXP_REDUCED_BOUND (C = EXP_LOG2_E[dtype]), as the polynomial 1 + r + r*Q(r): the
    linear term's coefficient 1 is exact; h = 1 + r is rounded, its error (1 - h) + r is exact (Fast2Sum, as
    |r| < 1) and goes in with r*Q(r), so the last addition h + (...) is the one rounding that matters (0.83
    against 1.06 ulp for 1 + (r + r*Q(r)), at 3 more ops)."""
    coeffs = _EXPR_F64 if r.dtype.scalar is _F64 else _EXPR_F32
    q = _horner(r, coeffs, fused)
    h = r + 1.0
    lo = (r.const_like(1.0) - h) + r
    s = UOp(Ops.MULACC, (r, q, lo)) if fused else r * q + lo
    return h + s


def _reduced_operand(y: UOp, c: UOp) -> bool:
    """Is EXP2(y * c) exp's reduced form: c the dtype's log2(e) and y within EXP_REDUCED_BOUND by its interval?"""
    dt = y.dtype.scalar
    if dt not in EXP_LOG2_E:
        return False
    vals = (c.value,) if c.op is Ops.CONST else c.vconst_values if c.op is Ops.VCONST else ()
    if not vals or any(v != EXP_LOG2_E[dt] for v in vals):
        return False
    lo, hi = y.vmin, y.vmax
    return isinstance(lo, float) and isinstance(hi, float) and lo >= -EXP_REDUCED_BOUND and hi <= EXP_REDUCED_BOUND


# ---------------------------------------------------------------------------------------------------- LOG2

# ln(1 + r) = r - r^2/2 + r^3 * R(r) for r = m - 1, m in [0x3F3504F3, 0x3FB504F2] ~ [sqrt(1/2), sqrt(2)):
# R of degree 7 (total degree 10), relative error 2^-27.3
_LOG_F32 = (_h("0x1.555554p-2"), _h("-0x1.000226p-2"), _h("0x1.99a01cp-3"), _h("-0x1.54728cp-3"),
            _h("0x1.22d936p-3"), _h("-0x1.0d8232p-3"), _h("0x1.055e62p-3"), _h("-0x1.38c910p-4"))
# 1/ln 2: as a float32, and as a 12-bit head (its product with a 12-bit number is exact) plus a float32 tail
_INV_LN2 = _h("0x1.715476p+0")
_INV_LN2_HI, _INV_LN2_LO = _h("0x1.716p+0"), _h("-0x1.7135a8p-13")
_SPLIT_R = 3072.0  # 1.5 * 2**11: adding and subtracting it rounds |r| < 1 to a multiple of 2**-12


def _head12(v: UOp) -> UOp:
    """v with all but its 12 leading significant bits cleared (v - head is exact)."""
    return (v.bitcast(_I32) & -4096).bitcast(_F32)


def log2_f32(x: UOp, fused: bool = False) -> UOp:
    """log2(x) for float32: x = 2**e * m with m in [sqrt(1/2), sqrt(2)) from the bit pattern, e + log2(m).

    Subnormals are scaled by 2**23 first. With r = m - 1 (exact) and rh = r rounded to 12 bits,
    ln(m) = (r - rh^2/2) + small, where the head is exact; its leading 12 bits times a 12-bit 1/ln 2 are exact
    too, so log2(m) is one exact product plus a correction under 1/10 of it, and the result is rounded
    essentially once."""
    tiny = x < _h("0x1p-126")
    xs = tiny.where(x * 8388608.0, x)
    bits = xs.bitcast(_I32) & 0x7FFFFFFF  # sign dropped: keeps the integer math below free of overflow
    k = bits - 0x3F3504F3
    m = ((k & 0x007FFFFF) + 0x3F3504F3).bitcast(_F32)
    e = _int_to_float(k >> 23, _F32) + tiny.where(x.const_like(-23.0), 0.0)
    r = m - 1.0
    rh = (r + _SPLIT_R) - _SPLIT_R
    ln_hi = r - (rh * 0.5) * rh  # exact: a multiple of 2**-25 below 1/2 in magnitude
    ln_lo = (r * r) * (r * _horner(r, _LOG_F32, fused)) - ((r - rh) * 0.5) * (r + rh)
    head = _head12(ln_hi)
    tail = ((ln_hi - head) * _INV_LN2_HI + ln_hi * _INV_LN2_LO) + ln_lo * _INV_LN2
    y = e + (head * _INV_LN2_HI + tail)
    bad = x.ne(0.0).where(x.const_like(float("nan")), float("-inf"))
    return (x.const_like(0.0) < x).where((x < float("inf")).where(y, x), bad)


# ---------------------------------------------------------------------------------------------------- SIN

# pi/2 = P1 + P2 + P3 in float64: P1 and P2 have 19 and 20 significant bits (n*P1 and n*P2 are exact for
# |n| < 2**33), P3 is the float64 nearest the rest (the sum is within 2**-96 of pi/2)
_PIO2_F64 = (_h("0x1.921fcp+0"), _h("-0x1.5777ap-21"), _h("-0x1.73dcb3b399d74p-43"))
_TWO_OVER_PI_F64 = _h("0x1.45f306dc9c883p-1")
# sin(r) = r + r^3 S(r^2) on [-pi/4, pi/4], S of degree 2 (total degree 7): relative error 2^-27.9
_SIN_F32 = (_h("-0x1.555546p-3"), _h("0x1.110778p-7"), _h("-0x1.995408p-13"))
# cos(r) = 1 - r^2/2 + r^4 C(r^2) on [-pi/4, pi/4], C of degree 2 (total degree 8): error 2^-33
_COS_F32 = (_h("0x1.55554ap-5"), _h("-0x1.6c0c28p-10"), _h("0x1.99e80cp-16"))


def sin_f32(x: UOp, fused: bool = False) -> UOp:
    """sin(x) for float32: x = n*pi/2 + r with |r| <= pi/4, then sin or cos of r by the quadrant n mod 4.

    The reduction runs in float64 (a float32 x is exact there): x - n*P1 - n*P2 is exact for |n| < 2**33, so
    r is accurate to 2**-53 relative even where x is within 2**-30 of a multiple of pi/2; it comes back as
    float32 rh + rl, and the polynomials run in float32 with rl as a first-order correction.

    Beyond |x| = 2**33 * pi/2 (1.35e10, where float32 values are 1024 apart) n*P1 rounds and r is off by up to
    |x| * 2**-52, still within the polynomials' reach; at |x| >= 2**51 nothing of the phase is left in float64
    and the result is +-0.0."""
    x64 = x.cast(_F64)
    x64 = (x64 * x64 < 2.0**102).where(x64, x64 * 0.0)  # huge -> +-0.0; inf, nan -> nan
    t = x64 * _TWO_OVER_PI_F64 + _ROUND_F64
    n = t - _ROUND_F64
    q = t.bitcast(_I64)  # its low bits are n mod 4
    r = ((x64 - n * _PIO2_F64[0]) - n * _PIO2_F64[1]) - n * _PIO2_F64[2]
    rh = r.cast(_F32)
    rl = (r - rh.cast(_F64)).cast(_F32)
    # a zero (or the zero a huge x became) comes out with its sign, which the polynomial's sum drops
    return x64.ne(0.0).where(_sin_quadrant(q, rh, rl, _SIN_F32, _COS_F32, fused), x * 0.0)


def _sin_quadrant(q: UOp, rh: UOp, rl: UOp, sin_coeffs: Sequence[float], cos_coeffs: Sequence[float],
                  fused: bool = False) -> UOp:
    """sin(n*pi/2 + rh + rl) from the integer q = n (mod 4): +-sin(r) or +-cos(r), with rl as a first-order
    correction (sin(rh + rl) ~ sin(rh) + rl, cos(rh + rl) ~ cos(rh) - rh*rl).

    cos(r) = (1 - rc^2/2) + small, where rc is rh rounded to half the precision (a multiple of 2**-11 or
    2**-26): then rc^2/2 and 1 - rc^2/2 are exact, and the one rounding that matters is the last addition."""
    split = 6144.0 if rh.dtype.scalar is _F32 else 100663296.0  # 1.5 * 2**12, 1.5 * 2**26
    z = rh * rh
    s = rh + (rh * z * _horner(z, sin_coeffs, fused) + rl)
    rc = (rh + split) - split
    head = 1.0 - (rc * 0.5) * rc
    c = head + (z * z * _horner(z, cos_coeffs, fused) - ((rh - rc) * 0.5 * (rh + rc) + rh * rl))
    res = (q & 1).ne(0).where(c, s)
    return (q & 2).ne(0).where(-res, res)


# ---------------------------------------------------------------------------------------------------- float64

# 2**f = 1 + f*ln2 + f^2 * Q(f) on [-1/2, 1/2]: Q of degree 9 (total degree 11), relative error 2^-57.9
_EXP2_F64 = (_h("0x1.ebfbdff82c5a1p-3"), _h("0x1.c6b08d704a046p-5"), _h("0x1.3b2ab6fba07a5p-7"),
             _h("0x1.5d87fe78c3682p-10"), _h("0x1.4309130dc2042p-13"), _h("0x1.ffcbfbc7f0b34p-17"),
             _h("0x1.62bfc9fd3636cp-20"), _h("0x1.b52652a603769p-24"), _h("0x1.e617a86e400bcp-28"),
             _h("0x1.e7c705870c3b7p-32"))
_LN2_HI64, _LN2_LO64 = _h("0x1.62e43p-1"), _h("-0x1.05c610ca86c39p-29")  # head of 21 bits
_SPLIT_F64 = 201326592.0  # 1.5 * 2**27: adding and subtracting it rounds |f| < 1 to a multiple of 2**-25


def _pow2i_f64(n: UOp) -> UOp:
    """2**n as float64 for an int64 n in [-1022, 1023]."""
    return ((n + 1023) << 52).bitcast(_F64)


def exp2_f64(x: UOp, fused: bool = False) -> UOp:
    """2**x for float64, the float32 algorithm with float64 constants: clamp to [-1100, 1100], x = n + f,
    2**f = (1 + fh*ln2_hi) + small with an exact head, scale in two exact halves."""
    xc = (x < 1100.0).where(x, 1100.0)
    xc = (xc < -1100.0).where(-1100.0, xc)
    t = xc + _ROUND_F64
    f = xc - (t - _ROUND_F64)
    fh = (f + _SPLIT_F64) - _SPLIT_F64
    small = (f - fh) * _LN2_HI64 + f * (f * _horner(f, _EXP2_F64, fused) + _LN2_LO64)
    p = (fh * _LN2_HI64 + 1.0) + small
    n = t.bitcast(_I64) - 0x4338000000000000  # the bits of 1.5 * 2**52
    lo = n >> 1
    r = p * _pow2i_f64(lo) * _pow2i_f64(n - lo)
    return (x.ne(x)).where(x, r)


# ln(1 + r) = 2s + s*z*U(z) with s = r/(2 + r), z = s^2 <= 0.0295 (r as for float32): U of degree 6, relative
# error of the sum 2^-59.5
_LOG_F64 = (_h("0x1.5555555555592p-1"), _h("0x1.999999997ff62p-2"), _h("0x1.24924941db5c8p-2"),
            _h("0x1.c71c521a07878p-3"), _h("0x1.74663ba71adb6p-3"), _h("0x1.39a20b4211119p-3"),
            _h("0x1.2f025558ceb55p-3"))
_INV_LN2_F64 = _h("0x1.71547652b82fep+0")
_INV_LN2_HI64, _INV_LN2_LO64 = _h("0x1.7154768p+0"), _h("-0x1.6a3e80f444178p-27")  # head of 26 bits
_SPLIT_R64 = 100663296.0  # 1.5 * 2**26: adding and subtracting it rounds |r| < 1 to a multiple of 2**-26


def log2_f64(x: UOp, fused: bool = False) -> UOp:
    """log2(x) for float64: as log2_f32 (exact head r - rh^2/2, exact product of its 26 leading bits with a
    26-bit 1/ln 2), except that the small remainder ln(1+r) - r + r^2/2 = s*(r^2/2 + z*U(z)) comes from the
    series in s = r/(2 + r), which needs a far lower degree than a polynomial in r."""
    tiny = x < _h("0x1p-1022")
    xs = tiny.where(x * 4503599627370496.0, x)  # 2**52
    bits = xs.bitcast(_I64) & 0x7FFFFFFFFFFFFFFF
    k = bits - 0x3FE6A09E667F3BCD  # the bits of sqrt(1/2)
    m = ((k & 0x000FFFFFFFFFFFFF) + 0x3FE6A09E667F3BCD).bitcast(_F64)
    e = _int_to_float(k >> 52, _F64) + tiny.where(x.const_like(-52.0), 0.0)
    r = m - 1.0
    rh = (r + _SPLIT_R64) - _SPLIT_R64
    s = r / (r + 2.0)
    z = s * s
    ln_hi = r - (rh * 0.5) * rh  # exact: a multiple of 2**-53 below 1/2 in magnitude
    ln_lo = s * ((r * 0.5) * r + z * _horner(z, _LOG_F64, fused)) - ((r - rh) * 0.5) * (r + rh)
    head = (ln_hi.bitcast(_I64) & -134217728).bitcast(_F64)  # its 26 leading bits
    tail = ((ln_hi - head) * _INV_LN2_HI64 + ln_hi * _INV_LN2_LO64) + ln_lo * _INV_LN2_F64
    y = e + (head * _INV_LN2_HI64 + tail)
    bad = x.ne(0.0).where(x.const_like(float("nan")), float("-inf"))
    return (x.const_like(0.0) < x).where((x < float("inf")).where(y, x), bad)


# pi/2 = C1 + C2 + C3 + C4: C1..C3 have 26 significant bits (n*Ci is exact for |n| < 2**27), C4 is the float64
# nearest the rest (the sum is within 2**-135 of pi/2)
_PIO2_4X64 = (_h("0x1.921fb58p+0"), _h("-0x1.dde974p-27"), _h("0x1.1a6263p-54"), _h("0x1.8a2e03707344ap-81"))
# sin(r) = r + r^3 S(r^2) on [-pi/4, pi/4]: S of degree 5 (total degree 13), relative error 2^-57.9
_SIN_F64 = (_h("-0x1.5555555555548p-3"), _h("0x1.111111110f730p-7"), _h("-0x1.a01a019be9210p-13"),
            _h("0x1.71de35552a6a5p-19"), _h("-0x1.ae5e4b82bead8p-26"), _h("0x1.5d8b55201be04p-33"))
# cos(r) = 1 - r^2/2 + r^4 C(r^2) on [-pi/4, pi/4]: C of degree 5 (total degree 14), error 2^-63.9
_COS_F64 = (_h("0x1.555555555554bp-5"), _h("-0x1.6c16c16c15015p-10"), _h("0x1.a01a019c8f253p-16"),
            _h("-0x1.27e4f7f191267p-22"), _h("0x1.1ee9dbced0403p-29"), _h("-0x1.8fa68464b457cp-37"))


def sin_f64(x: UOp, fused: bool = False) -> UOp:
    """sin(x) for float64: Cody-Waite in four parts. x - n*C1 - n*C2 is exact; subtracting n*C3 rounds, and
    that rounding error is recovered exactly (Fast2Sum) into rl along with n*C4, so r = rh + rl is within
    |n| * 2**-130 of x - n*pi/2. That needs n*Ci exact: |n| < 2**27, |x| < 2.1e8. Beyond, n*C1 rounds and
    r is off by up to |x| * 2**-53; at |x| >= 2**50 the result is +-0.0."""
    xr = (x * x < 2.0**100).where(x, x * 0.0)  # huge -> +-0.0; inf, nan -> nan
    t = xr * _TWO_OVER_PI_F64 + _ROUND_F64
    n = t - _ROUND_F64
    a = (xr - n * _PIO2_4X64[0]) - n * _PIO2_4X64[1]
    p = n * _PIO2_4X64[2]
    rh = a - p
    rl = ((a - rh) - p) - n * _PIO2_4X64[3]
    return xr.ne(0.0).where(_sin_quadrant(t.bitcast(_I64), rh, rl, _SIN_F64, _COS_F64, fused), x * 0.0)


# ---------------------------------------------------------------------------------------------------- SQRT, POW
# Last resort (for a device that has no SQRT or POW), through EXP2 and LOG2 as the spec defines them. Those
# are built as EXP2/LOG2 nodes, so the device's own run when it has them and the rules above when it does not.


def sqrt_via_exp2(x: UOp) -> UOp:
    """sqrt(x) = exp2(log2(x)/2). A narrower float is computed in float64 and rounded once (at most 2**-20 ulp
    from correct rounding); float64 gets one Newton step (s + x/s)/2 after the estimate."""
    wide = x.cast(_F64)
    s = (wide.log2() * 0.5).exp2()
    if x.dtype.scalar is _F64:
        s = (x < float("inf")).where((s + x / s) * 0.5, x)  # inf/inf in the Newton step
    return wide.ne(0.0).where(s, wide).cast(x.dtype)  # sqrt(-0.0) is -0.0, and log2(0) would give +0.0


def pow_via_exp2(a: UOp, b: UOp) -> UOp:
    """pow(a, b) = exp2(b * log2|a|) with C99's special cases (rewrite.semantics): pow(a, 0) = pow(1, b) = 1,
    pow(-1, +-inf) = 1, a negative base gives a sign for odd integer b and nan for non-integer finite b.

    A narrower float is computed in float64 and rounded once: b*log2|a| is then off by far less than a
    float32 ulp of the result. float64 has no wider type, so its relative error grows with the product:
    about (1 + 0.7 * |b * log2|a||) ulp (up to ~700 ulp near overflow)."""
    a64, b64 = a.cast(_F64), b.cast(_F64)
    mag = (b64 * (a64 < 0.0).where(-a64, a64).log2()).exp2()
    b_frac = b64.trunc().ne(b64)  # true for nan, false for +-inf
    half = b64 * 0.5
    b_odd = b_frac.ne(True) & half.trunc().ne(half)
    r = ((a64.bitcast(_I64) < 0) & b_odd).where(-mag, mag)  # the sign bit, so -0.0 counts as negative
    finite_neg = (a64 < 0.0) & (a64.const_like(float("-inf")) < a64)
    r = (finite_neg & b_frac).where(a64.const_like(float("nan")), r)
    b_inf = (b64 < -_F64_MAX) | (b64.const_like(_F64_MAX) < b64)
    r = b_inf.where(a64.ne(-1.0).where(r, 1.0), r)  # pow(-1, +-inf) = 1; the product above is inf*0 = nan
    r = (a64.ne(1.0) & b64.ne(0.0)).where(r, 1.0)
    return r.cast(a.dtype)


# ---------------------------------------------------------------------------------------------------- rules


def _exp2_reduced(y: UOp, c: UOp) -> UOp:
    return exp2_reduced(y, False)


def _exp2_reduced_fused(y: UOp, c: UOp) -> UOp:
    return exp2_reduced(y, True)


def _exp2_any(x: UOp, fused: bool) -> UOp:
    return exp2_f64(x, fused) if x.dtype.scalar is _F64 else _in_float32(lambda v: exp2_f32(v, fused), x)


def _log2_any(x: UOp, fused: bool) -> UOp:
    return log2_f64(x, fused) if x.dtype.scalar is _F64 else _in_float32(lambda v: log2_f32(v, fused), x)


def _sin_any(x: UOp, fused: bool) -> UOp:
    return sin_f64(x, fused) if x.dtype.scalar is _F64 else _in_float32(lambda v: sin_f32(v, fused), x)


_ALL_FLOATS = frozenset(dtypes.floats)
fx, fa, fb = var("x", _ALL_FLOATS), var("a", _ALL_FLOATS), var("b", _ALL_FLOATS)
fy, fc = var("y", _ALL_FLOATS), var("c", _ALL_FLOATS)


def _exp2(x: UOp) -> UOp:
    return _exp2_any(x, False)


def _exp2_fused(x: UOp) -> UOp:
    return _exp2_any(x, True)


def _log2(x: UOp) -> UOp:
    return _log2_any(x, False)


def _log2_fused(x: UOp) -> UOp:
    return _log2_any(x, True)


def _sin(x: UOp) -> UOp:
    return _sin_any(x, False)


def _sin_fused(x: UOp) -> UOp:
    return _sin_any(x, True)


def _rules(fused: bool) -> RuleSet:
    """The rule set; with `fused` the polynomials are evaluated with MULACC (for a target whose reductions fuse
    multiply-adds, lower.pipeline.fuses_mulacc): one instruction and one rounding per step instead of two."""
    tag = "-fused" if fused else ""
    exp2, log2, sin = (_exp2_fused, _log2_fused, _sin_fused) if fused else (_exp2, _log2, _sin)
    exp2_reduced = _exp2_reduced_fused if fused else _exp2_reduced
    # fmt: off
    return RuleSet(f"transcendental{tag}", [
        Rule(f"exp2-reduced-to-poly{tag}", op.EXP2(op.MUL(fy, fc)), exp2_reduced, removes=Ops.EXP2,
             when=_reduced_operand),
        Rule(f"exp2-to-poly{tag}",      op.EXP2(fx),    exp2,          removes=Ops.EXP2),
        Rule(f"log2-to-poly{tag}",      op.LOG2(fx),    log2,          removes=Ops.LOG2),
        Rule(f"sin-to-poly{tag}",       op.SIN(fx),     sin,           removes=Ops.SIN),
        Rule(f"sqrt-to-exp2-log2{tag}", op.SQRT(fx),    sqrt_via_exp2, removes=Ops.SQRT),
        Rule(f"pow-to-exp2-log2{tag}",  op.POW(fa, fb), pow_via_exp2,  removes=Ops.POW),
    ])
    # fmt: on


transcendental = _rules(False)
transcendental_fused = _rules(True)

__all__ = ["exp2_f32", "exp2_f64", "log2_f32", "log2_f64", "pow_via_exp2", "sin_f32", "sin_f64", "sqrt_via_exp2",
           "transcendental", "transcendental_fused"]
