"""The oracle of the program fuzzer's float16 and bfloat16 programs (fuzz_programs.py): a float64 value and a
rigorous bound on the error of the computed value, per element, carried op by op.

Why a bound and not a simulation: uopc rounds an elementwise op on a 16-bit dtype to that dtype, but computes
transcendentals, softmax and log_softmax in float32 and rounds once, and sums, means, cumsums and matmuls
accumulate in float32 in an order that depends on the kernel (a tensor-core tile, a block's shared reduction, a
vector's lanes); numpy's float16 sums accumulate in float16 and it has no bfloat16. A simulation would have to
copy each of those choices, and a rounding boundary crossed differently makes the comparison flaky. A scaled
tolerance (epsilon times op depth) is either loose or wrong where an op amplifies an error (x * y, cancellation,
a softmax of large values). So each value carries `err`, an upper bound on |computed - exact| element by element,
propagated through each op from the derivative of its math (an op `rule`) plus the roundings the op may do:

* a correctly rounded op (+ - * and casts) adds one unit of roundoff u of its result's dtype (2^-11 float16,
  2^-8 bfloat16, 2^-24 float32) times the value's magnitude, and nothing where its exact inputs give a value
  that dtype holds exactly: such values are "exact" (err 0) and compared bit for bit;
* a transcendental adds a few float32 ulps (its float32 form, tensor.transcendental) then u of its dtype;
* a sum of n terms adds gamma(n) = n u32 / (1 - n u32) times the sum of magnitudes (float32 accumulation in any
  order), and is exact where every partial sum is a float32 integer multiple of the terms' granule;
* division, mean, softmax and log_softmax never count as exact (a reciprocal or a float32 step may round).

Input errors propagate by the op's Lipschitz bound on the interval around the value (tanh and sigmoid by their
derivative at the point nearest 0; x * y and matmul as f(|x| + ex, |y| + ey) - f(|x|, |y|), exact for their
non-negative bilinear forms; max/min/movement carry the errors they read). Discontinuous ops (casts to int,
comparisons, where, floor, ceil) only read exact values, so the oracle and uopc take the same branch.

The check is `|got - exact| <= err`: tight (about one unit of roundoff of the result's magnitude in the median
case, 0 for exact values), never flaky (a bound, not an estimate), and sound for any accumulation order. A program
whose bound grows past CAP of its values' magnitude is not generated (it would test little).

A bound cannot tell an op rounded to its dtype from one left in float32 (both are within it). So each value also
carries `sim`, what rounding every op to its dtype gives, where that is determined whatever the kernel does
(`simulate`: correctly rounded ops, moves, accumulations that are exact in float32), and those elements must match
it bit for bit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from tests.tensor.fuzz_conv import ORACLES

HALVES = ("float16", "bfloat16")
U32 = 2.0 ** -24
UNIT = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8, "float32": U32}  # unit roundoff (half an ulp, relative)
# the absolute error of one rounding near zero: float16 subnormals are 2^-24 apart; float32 and bfloat16 (float32's
# exponent range) may flush results below 2^-126 to zero
TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -125, "float32": 2.0 ** -125}
TRANS_ULPS = 8  # float32 ulps a transcendental may be off (tensor.transcendental measures at most 4)
LIMIT = 1e4  # |value| + err of every float value: float16 holds up to 65504, squares of more than 100 are rejected
CAP = 1 / 16  # the largest err accepted, relative to max(1, the value's largest magnitude)
ELEMENTS = 1 << 14  # the most elements of a value (an outer product of the matmul-shaped inputs would be 2M)


class Bounded(NamedTuple):
    """A value of a 16-bit program: exact (float64 for floats), its error bound (zeros for ints), its dtype, and
    what rounding each op to its dtype gives, NaN where that is not determined (`simulate`)."""

    ref: np.ndarray
    err: np.ndarray
    dt: str  # float16, bfloat16, float32 or int32
    sim: np.ndarray

    @property
    def exact(self) -> bool:
        return not self.err.any()


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def np_log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    s = x - x.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


def eval_ncode(ncode: str, args: Sequence[int], arrays: dict[int, np.ndarray]) -> np.ndarray:
    """One op's numpy line on `arrays` (by value index), in float64."""
    env = {"np": np, "FDT": np.float64, "np_softmax": np_softmax, "np_log_softmax": np_log_softmax, **ORACLES}
    env.update({f"v{a}": arr for a, arr in arrays.items()})
    with np.errstate(all="ignore"):
        return np.asarray(eval(ncode.format(*[f"v{a}" for a in args]), env))


def representable(r: np.ndarray, dt: str) -> np.ndarray:
    """Where `dt` holds r exactly."""
    with np.errstate(all="ignore"):
        if dt == "bfloat16":
            f = r.astype(np.float32)
            return (f.astype(np.float64) == r) & ((f.view(np.uint32) & 0xFFFF) == 0)
        return r.astype(dt).astype(np.float64) == r


def round_to(x: np.ndarray, dt: str) -> np.ndarray:
    """x (float64) rounded to nearest even in dt, as float64; NaN stays NaN. bfloat16 through float32: the two
    roundings give the one rounding wherever x is an op's result on bfloat16 (or float32) values (24 >= 2 * 8 + 2
    bits), which is what uopc computes too (a float32 op, then bfloat16's rounding)."""
    with np.errstate(all="ignore"):
        if dt != "bfloat16":
            return x.astype(dt).astype(np.float64)
        u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return np.where(np.isnan(x), np.nan, bits.view(np.float32).astype(np.float64))


def _round(r: np.ndarray, prop: np.ndarray, dt: str, k: int = 1, exact: bool = True) -> np.ndarray:
    """The bound after k roundings to `dt` of a value within `prop` of r; none where exact inputs (prop 0) give a
    value `dt` holds (an op that rounds correctly, `exact`)."""
    e = prop + k * 1.01 * UNIT[dt] * (np.abs(r) + prop) + k * TINY[dt]
    return np.where((prop == 0) & representable(r, dt), 0.0, e) if exact else e


def _trans(r: np.ndarray, prop: np.ndarray, dt: str, absolute: float = 0.0) -> np.ndarray:
    """A function computed in float32 (TRANS_ULPS, plus `absolute` where its relative accuracy fails near a zero),
    rounded once to dt."""
    inner = TRANS_ULPS * U32 * (np.abs(r) + prop) + absolute + TINY["float32"]
    return prop + inner if dt == "float32" else _round(r, prop + inner, dt, exact=False)


def _gamma(n: np.ndarray | int) -> np.ndarray:
    """The relative error bound of n float32 roundings in a row."""
    return np.asarray(n * U32 / (1 - n * U32))


def _granule(x: np.ndarray) -> int | None:
    """The least m with every x * 2^m an integer (None past 2^-40)."""
    for m in range(41):
        s = x * 2.0 ** m
        if np.all(s == np.floor(s)):
            return m
    return None


def _f32_exact(lo: np.ndarray, *parts: np.ndarray) -> np.ndarray:
    """Where a float32 sum of terms each a multiple of 2^-m (m the granules of `parts` added: products of their
    elements) is exact in any order: `lo` (the sum of the terms' magnitudes) times 2^m below 2^24."""
    ms = [_granule(p) for p in parts]
    if any(m is None for m in ms):
        return np.zeros(lo.shape, bool)
    return lo * 2.0 ** sum(m for m in ms if m is not None) < 2.0 ** 24


# ---------------------------------------------------------------- rules: (op, args, exact value, dtype, param) -> err


class OpText(NamedTuple):
    ncode: str
    args: tuple[int, ...]


Rule = Callable[[OpText, list[Bounded], np.ndarray, str, str], "np.ndarray | None"]


def _same(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """neg, abs, relu: the error passes through."""
    return np.broadcast_to(a[0].err, r.shape).copy()


def _discrete(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    """floor, ceil, comparisons and where: only of exact values, exact."""
    return np.zeros(r.shape) if all(v.exact for v in a) else None


def _scale(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    return _round(r, 0.5 * a[0].err, dt)


def _add(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    return _round(r, np.broadcast_to(a[0].err + a[-1].err, r.shape), dt)


def _max2(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    return np.broadcast_to(np.maximum(a[0].err, a[-1].err), r.shape).copy()


def _bilinear(op: OpText, a: list[Bounded]) -> tuple[np.ndarray, np.ndarray]:
    """(the op's bound on |f(x') - f(x)|, f(|x| + ex)): f has non-negative coefficients (products, matmul)."""
    hi = eval_ncode(op.ncode, op.args, {i: np.abs(v.ref) + v.err for i, v in zip(op.args, a, strict=True)})
    lo = eval_ncode(op.ncode, op.args, {i: np.abs(v.ref) for i, v in zip(op.args, a, strict=True)})
    return np.where(hi > lo, hi - lo + 1e-13 * hi, 0.0), hi


def _mul(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    return _round(r, _bilinear(op, a)[0], dt)


def _denominator(b: Bounded, shift: float) -> tuple[np.ndarray, np.ndarray] | None:
    """(|b| + shift, its bound) as the Tensor code computes it in b's dtype; None where it may reach 0."""
    d = np.abs(b.ref) + shift
    ed = _round(d, b.err, b.dt)
    return None if np.any(ed >= d) else (d, ed)


def _div(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    """a / (|b| + 1): |a'/d' - a/d| <= (ea d + |a| ed) / (d (d - ed)); two roundings (a reciprocal may be taken)."""
    den = _denominator(a[-1], 1.0)
    if den is None:
        return None
    d, ed = den
    prop = (a[0].err * d + np.abs(a[0].ref) * ed) / (d * (d - ed))
    return _round(r, np.broadcast_to(prop, r.shape), dt, k=2, exact=False)


def _exp(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    return _trans(r, r * np.expm1(a[0].err), dt)  # of the clipped x (clip is exact and 1-Lipschitz)


def _log1(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    """log(|x| + 1): within -log(1 - ed/d)."""
    den = _denominator(a[0], 1.0)
    return None if den is None else _trans(r, -np.log1p(-den[1] / den[0]), dt)


def _sqrt(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    """sqrt(|x| + 0.5): within sqrt(d) - sqrt(d - ed) (concave)."""
    den = _denominator(a[0], 0.5)
    return None if den is None else _trans(r, np.sqrt(den[0]) - np.sqrt(den[0] - den[1]), dt)


def _recip(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    """1 / (|x| + 1): within ed / (d (d - ed))."""
    den = _denominator(a[0], 1.0)
    return None if den is None else _trans(r, den[1] / (den[0] * (den[0] - den[1])), dt)


def _sin(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    if np.abs(a[0].ref).max() > 64:  # the fuzzer's rule for every dtype: float32 rounding of x moves sin(x)
        return None
    return _trans(r, np.minimum(a[0].err, 2.0), dt, absolute=TRANS_ULPS * U32)


def _nearest_zero(v: Bounded) -> np.ndarray:
    return np.maximum(np.abs(v.ref) - v.err, 0.0)


def _tanh(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """The derivative 1 - tanh^2 = 4 e^-2|x| / (1 + e^-2|x|)^2 falls with |x|: its value nearest 0 bounds it on the
    interval (in a form that neither rounds to 0 nor overflows for large |x|)."""
    e = np.exp(-2 * _nearest_zero(a[0]))
    return _trans(r, a[0].err * 4 * e / (1 + e) ** 2, dt)


def _sigmoid(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """As tanh: s (1 - s) = e^-|x| / (1 + e^-|x|)^2 at the point nearest 0 (s(-38) is 3e-17, 1 - s(38) rounds to 0)."""
    e = np.exp(-_nearest_zero(a[0]))
    return _trans(r, a[0].err * e / (1 + e) ** 2, dt)


def _cast(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    return _round(r, a[0].err if a[0].dt != "int32" else np.zeros(r.shape), dt)


def _move(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray | None:
    """Movement, pad and cat: the same code on element positions (from 10 on; pad values 0, 1 and -2 are below)
    says which input element each output element is, and it carries that one's error (pads are exact)."""
    if len({v.dt for v in a}) > 1:  # cat of two dtypes: not generated
        return None
    pos, errs, at = {}, [], 10
    for i, v in zip(op.args, a, strict=True):
        if i not in pos:
            pos[i] = at + np.arange(v.ref.size, dtype=np.float64).reshape(v.ref.shape)
            errs.append(v.err.ravel())
            at += v.ref.size
    idx = eval_ncode(op.ncode, op.args, pos).astype(np.int64)
    return np.where(idx >= 10, np.concatenate(errs)[np.maximum(idx - 10, 0)], 0.0)


def _exact_sums(op: OpText, a: list[Bounded], products: bool = False) -> np.ndarray:
    """Where a sum (cumsum) of exact values, or of their `products` (matmul: of a[0] and a[-1], which may be one
    value), accumulates exactly in float32, in any order."""
    if not all(v.exact for v in a):
        return np.zeros((), bool)
    lo = eval_ncode(op.ncode, op.args, {i: np.abs(v.ref) for i, v in zip(op.args, a, strict=True)})
    return _f32_exact(lo, a[0].ref, a[-1].ref) if products else _f32_exact(lo, a[0].ref)


def _sum(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """sum and cumsum: float32 accumulation of n terms (any order), then one rounding to dt."""
    x = a[0]
    f = functools.partial(eval_ncode, op.ncode, op.args)
    n = f({op.args[0]: np.ones(x.ref.shape)})  # terms of each output
    prop = f({op.args[0]: x.err}) + _gamma(n - 1) * f({op.args[0]: np.abs(x.ref) + x.err})
    return _round(r, np.where(_exact_sums(op, a), 0.0, prop), dt)


def _mean(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    x = a[0]
    f = functools.partial(eval_ncode, op.ncode, op.args)
    n = x.ref.size // r.size
    prop = f({op.args[0]: x.err}) + _gamma(n) * f({op.args[0]: np.abs(x.ref) + x.err})  # n - 1 adds, a division
    return _round(r, prop, dt, exact=False)


def _extreme(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """max and min reductions carry the largest error they read (a min of -err is minus that)."""
    sign = -1.0 if param == "min" else 1.0
    return sign * eval_ncode(op.ncode, op.args, {op.args[0]: sign * a[0].err})


def _matmul(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """Products and k - 1 sums in float32 (16-bit products are exact there), then one rounding to dt."""
    prop, hi = _bilinear(op, a)
    return _round(r, np.where(_exact_sums(op, a, True), 0.0, prop + _gamma(a[0].ref.shape[-1]) * hi), dt)


def _softmax(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """Inputs off by at most D along the axis move each output by a factor within exp(+-2D). In float32: the shift
    x - max rounds (u32 |t|, relative in e^t), n exps and adds, a reciprocal and a product."""
    x, d = a[0], int(param)
    n = x.ref.shape[d]
    t = x.ref - x.ref.max(axis=d, keepdims=True)
    prop = r * np.expm1(2 * x.err.max(axis=d, keepdims=True))
    inner = r * U32 * (np.abs(t) + 2 * n + TRANS_ULPS + 6) + n * TINY["float32"]
    return _trans(r, prop + inner, dt)


def _log_softmax(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """x - logsumexp(x): the logsumexp moves by at most the largest input error along the axis. In float32: the
    shift, the sum of exps (relative error within u32 (2n + 2)), its log and the difference."""
    x, d = a[0], int(param)
    n = x.ref.shape[d]
    t = x.ref - x.ref.max(axis=d, keepdims=True)
    prop = x.err + x.err.max(axis=d, keepdims=True)
    inner = U32 * (np.abs(t) + np.abs(r) + 2 * n + math.log(n) + TRANS_ULPS + 4)
    return _trans(r, prop + inner, dt)


def _conv_parts(op: OpText, a: list[Bounded], dt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A convolution's (conv2d, conv1d, conv_transpose2d: x, w and maybe a bias): its exact value without the
    bias, that value's bound after its rounding to dt, where it is exact in float32 whatever the order, and the
    bias broadcast to the output (zeros without one). The products and sums are a matmul's (float32, 16-bit
    products exact there, gamma(n) for the n taps an output reads that are not padding), rounded once to dt; a
    bias is added after, in dt (tensor.conv)."""
    x, w = a[0], a[1]
    biased = len(a) > 2

    def f(xv: np.ndarray, wv: np.ndarray, bv: np.ndarray | None = None) -> np.ndarray:
        arrays = {op.args[0]: xv, op.args[1]: wv}
        if biased:
            arrays[op.args[2]] = np.zeros(a[2].ref.shape) if bv is None else bv
        return eval_ncode(op.ncode, op.args, arrays)

    r0 = f(x.ref, w.ref)
    hi, lo = f(np.abs(x.ref) + x.err, np.abs(w.ref) + w.err), f(np.abs(x.ref), np.abs(w.ref))
    taps = f(np.ones(x.ref.shape), np.ones(w.ref.shape))
    exact = _f32_exact(lo, x.ref, w.ref) if x.exact and w.exact else np.zeros(r0.shape, bool)
    prop = np.where(exact, 0.0, np.where(hi > lo, hi - lo + 1e-13 * hi, 0.0) + _gamma(taps) * hi)
    bias = f(np.zeros(x.ref.shape), np.zeros(w.ref.shape), a[2].sim) if biased else np.zeros(r0.shape)
    return r0, _round(r0, prop, dt), exact, bias


def _conv(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """As _conv_parts says; with a bias, its sum with the bias's error rounds once more."""
    _, err, _, _ = _conv_parts(op, a, dt)
    if len(a) < 3:
        return err
    zeros = {op.args[0]: np.zeros(a[0].ref.shape), op.args[1]: np.zeros(a[1].ref.shape)}
    return _round(r, err + eval_ncode(op.ncode, op.args, {**zeros, op.args[2]: a[2].err}), dt)


def _avg_pool(op: OpText, a: list[Bounded], r: np.ndarray, dt: str, param: str) -> np.ndarray:
    """avg_pool2d of a window of `param` taps: a float32 sum of at most that many terms (the padding adds zeros),
    divided by the count (exact), maybe as a reciprocal and a product, then rounded once to dt."""
    x = a[0]
    f = functools.partial(eval_ncode, op.ncode, op.args)
    prop = f({op.args[0]: x.err}) + _gamma(int(param) + 2) * f({op.args[0]: np.abs(x.ref) + x.err})
    return _round(r, prop, dt, exact=False)


RULES: dict[str, Rule] = {
    "same": _same, "discrete": _discrete, "scale": _scale, "add": _add, "max2": _max2, "mul": _mul, "div": _div,
    "exp": _exp, "log1": _log1, "sqrt": _sqrt, "recip": _recip, "sin": _sin, "tanh": _tanh, "sigmoid": _sigmoid,
    "cast": _cast, "move": _move, "sum": _sum, "mean": _mean, "extreme": _extreme, "matmul": _matmul,
    "softmax": _softmax, "log_softmax": _log_softmax, "conv": _conv, "avg_pool": _avg_pool}


def simulate(name: str, op: OpText, a: list[Bounded], r: np.ndarray, dt: str) -> np.ndarray:
    """The value uopc's semantics give, where it is determined: an op that rounds correctly (+ - * and casts) is
    its exact result on the simulated inputs rounded once to dt (in float64 the result of such an op on float32 or
    16-bit values is exact or rounds harmlessly: 53 >= 2 * 24 + 2 bits); one that only selects or moves values is
    the same op on them; a sum or matmul that accumulates exactly in float32 is its exact value rounded once.
    Transcendentals, divisions, means, softmaxes and inexact accumulations are NaN (their last bits depend on the
    float32 code and the summation order), and so is every op that reads a NaN."""
    sims = {i: v.sim for i, v in zip(op.args, a, strict=True)}
    if name in ("same", "max2", "move", "extreme"):
        return eval_ncode(op.ncode, op.args, sims)
    if name in ("add", "mul", "scale", "cast"):
        return round_to(eval_ncode(op.ncode, op.args, sims), dt)
    if name == "discrete":
        return r
    if name in ("sum", "matmul"):
        return np.where(_exact_sums(op, a, name == "matmul"), round_to(r, dt), np.nan)
    if name == "conv":
        r0, _, exact, bias = _conv_parts(op, a, dt)
        sim = np.where(exact, round_to(r0, dt), np.nan)
        return round_to(sim + bias, dt) if len(a) > 2 else sim
    return np.full(r.shape, np.nan)


def _promote(dts: Sequence[str]) -> str:
    """torch's and uopc's promotion of these: one dtype is itself; float32 wins; float16 with bfloat16 is float32."""
    return dts[0] if len(set(dts)) == 1 else "float32"


def step(fdt: str, vals: Sequence[Bounded], ncode: str, args: tuple[int, ...], rule: str) -> Bounded | None:
    """The value of one op (`ncode` over `vals[args]`, error bound by `rule`, "name" or "name:param"), or None where
    the op does not apply: numpy refuses it, its value is out of range or not finite, its bound is too loose, or a
    discontinuous op would read an inexact value."""
    a = [vals[i] for i in args]
    try:
        r = eval_ncode(ncode, args, {i: v.ref for i, v in zip(args, a, strict=True)})
    except (ValueError, IndexError, TypeError):
        return None
    if r.ndim == 0 or r.size == 0 or r.size > ELEMENTS or r.ndim > 4 or r.dtype.kind == "b":
        return None
    name, _, param = rule.partition(":")
    if r.dtype.kind in "iu":  # ints: exact; from floats only by a discontinuous op of exact values
        if np.abs(r).max() > 1e5 or not all(v.exact for v in a):
            return None
        return Bounded(r, np.zeros(r.shape), "int32", r)
    floats = [v.dt for v in a if v.dt != "int32"]
    dt = (fdt if param == "TDT" else param) if name == "cast" else _promote(floats) if floats else ""
    if r.dtype != np.float64 or not dt or not np.all(np.isfinite(r)):
        return None
    err = RULES[name](OpText(ncode, args), a, r, dt, param)
    if err is None or not np.all(np.isfinite(err)):
        return None
    if (np.abs(r) + err).max() > LIMIT or err.max() > CAP * max(1.0, float(np.abs(r).max())):
        return None
    return Bounded(r, err, dt, np.broadcast_to(simulate(name, OpText(ncode, args), a, r, dt), r.shape).copy())


def mismatch_16(want: Bounded, got: np.ndarray) -> str | None:
    """Why `got` is not a 16-bit program's result `want` (None when it is): each element within its error bound
    (bit for bit where the bound is 0), and equal to each op rounded to its dtype where that is determined."""
    if got.shape != want.ref.shape:
        return f"shape {got.shape} != {want.ref.shape}"
    if want.dt == "int32":
        if got.dtype.kind not in "iub" or not np.array_equal(got, want.ref):
            return f"int result differs:\n got {got.ravel()[:16]}\nwant {want.ref.ravel()[:16]}"
        return None
    if got.dtype != np.dtype("float16" if want.dt == "float16" else "float32"):  # bfloat16 comes back as float32
        return f"dtype {got.dtype} for a {want.dt} result"
    g = got.astype(np.float64)
    if not np.all(representable(g, want.dt)):
        return f"values that {want.dt} does not hold: {g[~representable(g, want.dt)][:4]}"
    over = np.abs(g - want.ref) - want.err
    if not np.all(over <= 1e-9 * want.err):  # nan fails too
        i = int(np.nanargmax(np.where(np.isnan(over), np.inf, over)))
        return (f"{want.dt} result differs at flat {i}: got {g.ravel()[i]!r} want {want.ref.ravel()[i]!r}, "
                f"error bound {want.err.ravel()[i]:.3g}")
    known = ~np.isnan(want.sim)
    if not np.array_equal(g[known], want.sim[known]):
        i = int(np.flatnonzero(known & (g != want.sim))[0])
        return (f"{want.dt} result at flat {i} is not each op rounded to its dtype: got {g.ravel()[i]!r}, rounding "
                f"each op gives {want.sim.ravel()[i]!r} (exact {want.ref.ravel()[i]!r})")
    return None
