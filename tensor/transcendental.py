"""The front end's transcendental functions, accurate in relative terms over their whole range.

Built from the IR's EXP2, LOG2 and SIN (each within an ulp, see rules.transcendental) and plain ALU ops, for
float32 and float64 operands (narrower floats are computed in float32 by the caller). Measured against mpmath /
float64 numpy over dense grids from 1e-40 to 1e38 of both signs (tests/tensor/test_transcendental_accuracy.py):
float32 results within 2 ulp for expm1, log1p, cos, tanh, erf, 3 ulp for sigmoid and 4 ulp for tan; the
naive forms they replace were off by millions of ulp for tiny or large inputs (tanh(1e-8) = 0, tanh(9) = 1,
sigmoid(-88.7) = 0, cos(20657.5) off in its third digit).

exp (exp_parts: one range reduction, then rules.transcendental.exp2_reduced on the cpu device), in ulps of the
exact value (float64 numpy for float32, numpy longdouble for float64), on the cpu device; subnormal results are
rounded once. tests/tensor/test_exp_reduction.py re-checks sweeps of these.

| dtype   | max ulp                                                           | before (two reductions)    |
|---------|-------------------------------------------------------------------|----------------------------|
| float32 | 0.833, every float32 in [-104, 89] (x86-64-v4, fused multiply-    | 1.45 (every 101st float32) |
|         | adds); 0.831 on every 31st without them (x86-64-v2)               |                            |
| float64 | 0.803 on 4M samples over [-746, 710] and +-1e-300..1e3; 0.826 v2  | 1.56 (the same samples)    |

tanh (1 - tanh|x| = 2e/(1 + e) with e = e**-2|x|) 1.40 ulp and sigmoid 2.71 ulp on every 31st float32 (1.62 and
2.71 before).

Polynomials were fitted for this module with mpmath.chebyfit (60 digits); each table names the function, the
interval and the fit's absolute error.
"""

from __future__ import annotations

import math

from rewrite import UOp, dtypes
from rules.transcendental import (
    _PIO2_4X64,
    _PIO2_F64,
    _ROUND_F64,
    _TWO_OVER_PI_F64,
    EXP_LOG2_E,
    EXP_REDUCED_BOUND,
    _horner,
)

_F32, _F64, _I32, _I64 = dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64


# ---------------------------------------------------------------------------------------------------- exp

# ln 2 = C1 + C2 with C1 short enough that k*C1 is exact for every k the clamp allows (Cody and Waite)
_LN2_SPLIT = {_F32: (0.693359375, -2.12194440e-4), _F64: (0.693145751953125, 1.42860682030941723212e-6)}
# (the clamp of x: below it e**x rounds to 0, above it to inf; 1.5 * 2**mantissa bits, whose sum with a small v
# rounds v to an integer held in its low bits, and its bit pattern; exponent bias, mantissa bits, the bits' int dtype)
_EXP_RANGE = {_F32: (-104.0, 89.0, 12582912.0, 0x4B400000, 127, 23, _I32),
              _F64: (-746.0, 710.0, 6755399441055744.0, 0x4338000000000000, 1023, 52, _I64)}
# the lowest x whose e**x is normal, with some slack: where a subnormal e**x makes no difference to the result
_EXP_NORMAL_FROM = {_F32: -87.0, _F64: -708.0}


def exp_uop(x: UOp) -> UOp:
    m, scale = exp_parts(x)
    return m * scale


def _clamp_below(x: UOp, lo: float) -> UOp:
    # a select on x < lo, not MAX (whose NaN-propagating form is a compare, a NaN test and a blend): NaN passes
    # through, it is one MAXPS on x86 (devices.c_vround), and interval analysis reads it as max(x, lo), as it
    # reads minimum() as min
    return (x < lo).where(x.const_like(lo), x)


def exp_parts(x: UOp, nonpositive: bool = False, normal: bool = False, clamped: bool = False) -> tuple[UOp, UOp]:
    """(m, scale): e**x = m * scale with m normal (or NaN) and scale a power of two, so that m times other
    factors, then times scale, rounds once even where e**x is subnormal.

    One range reduction: x is clamped to where e**x neither rounds to 0 nor to inf (NaN passes), k = round(x *
    log2 e) by the 1.5 * 2**23 trick (which leaves k in the low bits of the sum), r = x - k*ln 2 in two parts
    (Cody-Waite: |r| <= ln 2 / 2, with no rounding but the last), then e**r as EXP2(r * log2 e) with r clamped so
    interval analysis proves |r| small: the cpu device's decomposition (rules.transcendental.exp2_reduced) then
    evaluates e**r as one polynomial in r, with no reduction of its own. 2**k = 2**lo * 2**hi (k = lo + hi) from
    exponent bits: m = e**r * 2**lo and both factors stay normal.

    `nonpositive`: x is known to be <= 0 or NaN (e.g. -|y|), so the upper clamp is left out. `normal`: the caller
    does not need e**x below the normal range (1 + e**x, say): x is clamped at _EXP_NORMAL_FROM and 2**k is
    applied in one step, scale is 1. `clamped`: the caller has clamped x below itself (NaN passing), lower than
    where e**x rounds to 0 (it multiplies e**x by a large factor) but where 2**(k/2) is still normal."""
    assert nonpositive or not normal, "2**128 has no exponent bits: the one-step scale needs k <= 127"
    dt = x.dtype.scalar
    c1, c2 = _LN2_SPLIT[dt]
    lo_x, hi_x, rnd, rnd_bits, bias, mant, idt = _EXP_RANGE[dt]
    log2e = EXP_LOG2_E[dt]
    xc = x if clamped else _clamp_below(x, _EXP_NORMAL_FROM[dt] if normal else lo_x)
    if not nonpositive:
        xc = xc.minimum(hi_x)
    t = xc * log2e + rnd
    k = t - rnd
    r = (xc - k * c1) - k * c2
    r = _clamp_below(r, -EXP_REDUCED_BOUND).minimum(EXP_REDUCED_BOUND)
    p = (r * log2e).exp2()
    n = t.bitcast(idt) - rnd_bits  # k, from the low bits of t
    if normal:
        return p * ((n + bias) << mant).bitcast(dt), x.const_like(1.0)
    lo = n >> 1
    return p * ((lo + bias) << mant).bitcast(dt), (((n - lo) + bias) << mant).bitcast(dt)


def expm1_uop(x: UOp) -> UOp:
    """e**x - 1 without the cancellation near 0: (u - 1) * x / ln(u) with u = e**x (Kahan), which cancels the
    rounding of u; x where u rounds to 1, -1 where u - 1 does."""
    u = exp_uop(x)
    um1 = u - 1.0
    ln_u = u.log2() * math.log(2.0)
    body = (um1 * x) / ln_u
    big = (x > x.const_like(_EXP_RANGE[x.dtype.scalar][1] * 0.5))  # u overflows to inf: inf - 1 is right
    return u.eq(1.0).where(x, um1.eq(-1.0).where(x.const_like(-1.0), big.where(um1, body)))


def log1p_uop(x: UOp) -> UOp:
    """ln(1 + x) = ln(u) * x / (u - 1) with u = 1 + x (Goldberg), which cancels the rounding of u; x where u
    rounds to 1."""
    u = x + 1.0
    ln_u = u.log2() * math.log(2.0)
    body = ln_u * (x / (u - 1.0))
    return u.eq(1.0).where(x, (u < float("inf")).where(body, ln_u))


# ---------------------------------------------------------------------------------------------------- cos, tan


def _reduce_pio2(x: UOp) -> tuple[UOp, UOp, UOp]:
    """(n mod 4 as an int64, rh, rl): x = n*pi/2 + rh + rl, |rh| <= pi/4, in float64, as rules.transcendental's
    sin reduction does (exact products of n with the parts of pi/2)."""
    x64 = x.cast(_F64)
    x64 = (x64 * x64 < 2.0 ** 100).where(x64, x64 * 0.0)  # huge -> +-0.0; inf, nan -> nan
    t = x64 * _TWO_OVER_PI_F64 + _ROUND_F64
    n = t - _ROUND_F64
    if x.dtype.scalar is _F32:  # a float32 x: three parts are exact enough (see sin_f32)
        r = ((x64 - n * _PIO2_F64[0]) - n * _PIO2_F64[1]) - n * _PIO2_F64[2]
        return t.bitcast(_I64), r, r.const_like(0.0)
    a = (x64 - n * _PIO2_4X64[0]) - n * _PIO2_4X64[1]
    p = n * _PIO2_4X64[2]
    rh = a - p
    rl = ((a - rh) - p) - n * _PIO2_4X64[3]
    return t.bitcast(_I64), rh, rl


def _sin_cos_reduced(x: UOp, quadrant_shift: int) -> UOp:
    """sin(x + quadrant_shift * pi/2) from the reduced argument: +-sin(r) or +-cos(r) by the quadrant, each as
    one SIN of an argument in [-pi/2, pi/2] where it is well conditioned (cos r = sin(pi/2 - |r|))."""
    dt = x.dtype.scalar
    q, rh, rl = _reduce_pio2(x)
    q = q + quadrant_shift
    arh = (rh < 0.0).where(-rh, rh)
    arl = (rh < 0.0).where(-rl, rl)
    co = ((rh.const_like(math.pi / 2) - arh) - arl + rh.const_like(6.123233995736766e-17))  # pi/2 - |r|
    use_cos = (q & 1).ne(0)
    arg = use_cos.where(co, rh)
    s = arg.cast(dt).sin() if dt is _F32 else arg.sin()
    if dt is _F64:
        s = use_cos.where(s, s + rl)  # sin(rh + rl) ~ sin(rh) + rl: rl is below an ulp of rh
    return (q & 2).ne(0).where(-s, s)


def cos_uop(x: UOp) -> UOp:
    """cos x = sin(x + pi/2), with the pi/2 added to the quadrant of the reduced argument: adding it to x first
    rounds, which is an error of up to half an ulp of x in the argument (millions of ulps of cos near its zeros,
    and no correct digit at |x| ~ 1e7)."""
    return _sin_cos_reduced(x, 1)


def sin_uop(x: UOp) -> UOp:
    return x.sin()


def tan_uop(x: UOp) -> UOp:
    return x.sin() / cos_uop(x)


# ---------------------------------------------------------------------------------------------------- tanh, sigmoid

# (tanh(x)/x - 1)/x**2 in t = x**2, for |x| < 0.55: degree 5 on [0, 0.3025], abs error 3.8e-10
_TANH_F32 = (-0.3333333329502591, 0.13333324200007313, -0.0539647004451583, 0.021818449128639904,
             -0.00852633305780133, 0.0025263907105745136)
# the same for float64: degree 10, abs error 7.7e-18
_TANH_F64 = (-0.3333333333333333, 0.13333333333332714, -0.053968253967434016, 0.021869488493666944,
             -0.008863234397814355, 0.003592110378689024, -0.001455661830100716, 0.0005889360520074057,
             -0.0002346347410887237, 8.511313685577672e-05, -2.0602765376366344e-05)


def tanh_gap(ax: UOp) -> UOp:
    """1 - tanh(a) for a = |x| (not NaN-free: NaN gives NaN) as 2e/(1 + e) with e = e**-2a <= 1, which keeps its
    relative accuracy where tanh rounds to 1; e below the normal range is not needed (1 + e = 1 there)."""
    e, _ = exp_parts(ax * -2.0, nonpositive=True, normal=True)
    return (e + e) / (e + 1.0)


def tanh_uop(x: UOp) -> UOp:
    """x + x*t*P(t) (t = x**2) for |x| < 0.55, where 1 - (1 - tanh|x|) would cancel; beyond, that form with the
    sign of x. Keeps -0.0, gives +-1 for huge |x| and nan for nan."""
    coeffs = _TANH_F32 if x.dtype.scalar is _F32 else _TANH_F64
    t = x * x
    small = x.ne(0.0).where(x + x * (t * _horner(t, coeffs)), x)  # -0.0 + x*(+0 * P) would be +0.0
    ax = (x < 0.0).where(-x, x)
    big = x.const_like(1.0) - tanh_gap(ax)
    return (ax < 0.55).where(small, (x < 0.0).where(-big, big))


def sigmoid_parts(x: UOp) -> tuple[UOp, UOp, UOp]:
    """(sigmoid x, e, r) with e = e**-|x| and r = 1/(1 + e): sigmoid is r for x >= 0 and e*r below. e**-|x| never
    overflows, so a very negative x gives its tiny (subnormal) value rather than 1/inf = 0; its argument is never
    positive, so the exp needs no upper clamp. sigmoid x * sigmoid -x = e * r * r (the derivative)."""
    ax = (x < 0.0).where(-x, x)
    m, scale = exp_parts(-ax, nonpositive=True)
    e = m * scale
    r = (e + 1.0).recip()
    return (x < 0.0).where(e * r, r), e, r


def sigmoid_uop(x: UOp) -> UOp:
    return sigmoid_parts(x)[0]


# the x below which x * e**x rounds to -0.0, with some slack
_SILU_LOWEST = {_F32: -112.0, _F64: -760.0}


def silu_uop(x: UOp) -> UOp:
    """x * sigmoid(x); below 0 as y * e**y * s (y = x clamped at _SILU_LOWEST, below which the result is -0.0)
    with e**y kept scaled into the normal range until the end, so a result near the subnormal range is rounded
    once rather than from a subnormal e**y."""
    ax = (x < 0.0).where(-x, x)
    y = _clamp_below(-ax, _SILU_LOWEST[x.dtype.scalar])
    m, scale = exp_parts(y, nonpositive=True, clamped=True)
    s = (m * scale + 1.0).recip()
    return (x < 0.0).where((y * m * s) * scale, x * s)


# ---------------------------------------------------------------------------------------------------- erf

# erf(x)/x in t = x**2, |x| < 1: degree 13 on [0, 1], abs error 2.2e-21
_ERF_SMALL = (1.1283791670955126, -0.37612638903183754, 0.1128379167095512, -0.02686617064512984,
              0.0052239776254232985, -0.000854832702193483, 0.00012055332902888736, -1.4925647567519332e-05,
              1.6462045441468418e-06, -1.6364642158167616e-07, 1.4792401209404813e-08, -1.216456005728345e-09,
              8.709045129053106e-11, -4.230945824295338e-12)
# x * erfc(x) * e**(x**2) in s = 1/x**2 - 0.625, 1 <= x <= 2: degree 22, abs error 2.1e-17
_ERFC_MID = (0.46135447772515253, -0.10582571127425705, 0.051841467235464095, -0.0332006629745614,
             0.024623800461704228, -0.020088535121958295, 0.017541309614470348, -0.01612647463483203,
             0.015441337857975548, -0.015283973021877962, 0.015552266322897877, -0.01619256649631131,
             0.017213527412944383, -0.01880068513014572, 0.020688504771308895, -0.020966109426857147,
             0.0234841146515665, -0.043462500603863065, 0.051168911690106955, 0.02335240114115614,
             -0.030615519511567837, -0.19937055597185138, 0.24217457718471527)
# the same in s = 1/x**2 - 5/36, 2 <= x <= 6: degree 18, abs error 1.4e-16
_ERFC_BIG = (0.5312118330102713, -0.20279601097376934, 0.19713134739050384, -0.2789756302206612,
             0.49248338710194417, -1.0105968393213416, 2.3173212195532176, -5.792434876620791, 15.521589515458155,
             -44.07773347346535, 131.374889848228, -404.0635981894451, 1299.2741223150817, -4843.627916776088,
             16851.42787890686, -20922.810593985923, 63229.86961203881, -1777821.4138092783, 6887926.587403909)


def erf_uop(x: UOp) -> UOp:
    """erf in float64 (a float32 x is widened, and the result rounded once): x*P(x**2) below 1, 1 - erfc above,
    with erfc(x) = e**-x**2 * Q(1/x**2) / x on [1, 2] and [2, 6]; +-1 beyond 6, where erfc < 2**-53."""
    dt = x.dtype.scalar
    x64 = x.cast(_F64)
    ax = (x64 < 0.0).where(-x64, x64)
    t = x64 * x64
    small = x64 * _horner(t, _ERF_SMALL)
    axc = (ax < 1.0).where(ax.const_like(1.0), (ax < 6.0).where(ax, 6.0))  # keeps the unused lanes finite
    u = (axc * axc).recip()
    q = (axc < 2.0).where(_horner(u - 0.625, _ERFC_MID), _horner(u - 5.0 / 36.0, _ERFC_BIG))
    erfc = exp_parts(-(axc * axc), nonpositive=True, normal=True)[0] * q / axc  # e**-36 is normal
    big = (ax < 6.0).where(x64.const_like(1.0) - erfc, 1.0)
    out = (ax < 1.0).where(small, (x64 < 0.0).where(-big, big))
    return out.cast(dt) if dt is not _F64 else out


__all__ = ["cos_uop", "erf_uop", "exp_parts", "exp_uop", "expm1_uop", "log1p_uop", "sigmoid_parts", "sigmoid_uop",
           "silu_uop", "sin_uop", "tan_uop", "tanh_gap", "tanh_uop"]
