"""exp with one range reduction (tensor.transcendental.exp_parts) and the EXP2 rule for its reduced argument
(rules.transcendental.exp2_reduced).

- Structure: the front end's EXP2 is one the reduced rule takes, so the cpu decompositions leave no second
  reduction (no clamp of EXP2's own, no TRUNC); an EXP2 whose operand is not proven small, or is scaled by another
  constant, keeps the general rule.
- Accuracy on the cpu device, in ulps of the exact value (float64 numpy for float32, numpy longdouble for
  float64): float32 every 257th bit pattern of [-104, 89] and every 3rd float whose e**x is subnormal; float64
  random samples. Limits are the measured maxima (the module tables) rounded up.
- The polynomial without fused multiply-adds (a target without FMA) and with them, evaluated exactly per op
  (rewrite.evaluate) against mpmath.
- Special values: nan, +-inf, +-0, both sides of the overflow threshold, the underflow edge.
- The python device (which has its own EXP2, so computes the MUL and EXP2 as they stand) agrees with the cpu.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from rewrite import Ops, UOp, dtypes, graph_rewrite
from rewrite.uop import ParamArg
from rules.transcendental import EXP_LOG2_E, EXP_REDUCED_BOUND, transcendental, transcendental_fused
from tensor import Tensor
from tensor.transcendental import exp_uop, sigmoid_uop, silu_uop, tanh_uop

F32, F64 = dtypes.float32, dtypes.float64
REDUCED = transcendental.only(lambda r: r.name.startswith("exp2-reduced"))


def variable(dtype: object) -> UOp:
    return UOp(Ops.PARAM, (UOp.shape_operand(()),), ParamArg("x", dtype))


def ulps(got: np.ndarray, exact: np.ndarray, dt: type) -> np.ndarray:
    """|got - exact| in units of dt's spacing at the exact value (subnormal spacing below the normal range);
    equal values (inf included) count 0."""
    tiny = np.finfo(dt).tiny
    mant = np.finfo(dt).nmant
    a = np.maximum(np.abs(exact), tiny)
    spacing = np.exp2(np.floor(np.log2(a)) - mant)
    with np.errstate(all="ignore"):
        err = np.abs(got.astype(exact.dtype) - exact) / spacing
        err[got == exact.astype(dt)] = 0
    return err.astype(np.float64)


@pytest.mark.parametrize("fn", [exp_uop, sigmoid_uop, silu_uop, tanh_uop])
@pytest.mark.parametrize("dt", [F32, F64])
def test_one_reduction(fn: object, dt: object) -> None:
    g = fn(variable(dt))  # type: ignore[operator]
    exp2 = [u for u in g.toposort() if u.op is Ops.EXP2]
    assert exp2 and all(u.src[0].op is Ops.MUL for u in exp2)
    assert not any(u.op is Ops.EXP2 for u in graph_rewrite(g, REDUCED).toposort()), "the reduced rule did not fire"
    for rules in (transcendental, transcendental_fused):
        ops = {u.op for u in graph_rewrite(g, rules).toposort()}
        assert Ops.EXP2 not in ops and Ops.TRUNC not in ops


def test_other_exp2_keeps_the_general_rule() -> None:
    x = variable(F32)
    small = (x < -0.25).where(x.const_like(-0.25), x).minimum(0.25)
    for g in (x * EXP_LOG2_E[F32], small * 1.5, (small * 3.0) * EXP_LOG2_E[F32]):
        exp2 = g.exp2()
        assert graph_rewrite(exp2, REDUCED) is exp2, g
        assert Ops.EXP2 not in {u.op for u in graph_rewrite(exp2, transcendental).toposort()}


@pytest.mark.parametrize("rules", [transcendental, transcendental_fused], ids=["plain", "fused"])
@pytest.mark.parametrize("dt", [F32, F64])
def test_reduced_polynomial_exact_evaluation(rules: object, dt: object) -> None:
    """The rule's polynomial alone, op by op as the IR rounds (MULACC once): within 0.57 ulp of 2**(r*C) (the
    IR's EXP2 of the exact product) over the whole interval, ends included."""
    x = variable(dt)
    r = (x < -EXP_REDUCED_BOUND).where(x.const_like(-EXP_REDUCED_BOUND), x).minimum(EXP_REDUCED_BOUND)
    g = graph_rewrite((r * EXP_LOG2_E[dt]).exp2(), rules)  # type: ignore[arg-type]
    npdt = np.float32 if dt is F32 else np.float64
    vals = np.linspace(-EXP_REDUCED_BOUND, EXP_REDUCED_BOUND, 801).astype(npdt)
    mp.mp.prec = 128
    worst = 0.0
    for v in vals:
        got = g.evaluate({"x": float(v)})
        exact = mp.power(2, mp.mpf(float(v)) * mp.mpf(EXP_LOG2_E[dt]))  # type: ignore[index]
        spacing = math.ldexp(1.0, math.frexp(float(exact))[1] - (24 if dt is F32 else 53))
        worst = max(worst, float(abs(mp.mpf(got) - exact)) / spacing)  # type: ignore[arg-type]
    assert worst <= 0.57, worst


def _float32_range(lo: float, hi: float, stride: int) -> np.ndarray:
    """Every stride-th float32 of [lo, hi] (lo <= 0 <= hi), by bit pattern, both signs."""
    pos = np.arange(0, int(np.float32(hi).view(np.int32)) + 1, stride, dtype=np.int64).astype(np.int32)
    neg = np.arange(0, int(np.float32(-lo).view(np.int32)) + 1, stride, dtype=np.int64).astype(np.int32)
    return np.concatenate([pos.view(np.float32), -neg.view(np.float32)])


def test_float32_sweep() -> None:
    x = _float32_range(-104.0, 89.0, 257)
    got = Tensor(x).exp().numpy()
    with np.errstate(over="ignore"):
        err = ulps(got, np.exp(x.astype(np.float64)), np.float32)
    assert err.max() <= 0.84, (err.max(), x[err.argmax()])


def test_float32_subnormal_results() -> None:
    """e**x for x in [-104, -87.3], where it is subnormal or nearly so: p * 2**lo * 2**hi rounds once."""
    bits = np.arange(np.float32(87.3).view(np.int32), np.float32(104.0).view(np.int32) + 1, 3, dtype=np.int32)
    x = -bits.view(np.float32)
    got = Tensor(x).exp().numpy()
    exact = np.exp(x.astype(np.float64))
    err = ulps(got, exact, np.float32)
    assert err.max() <= 0.84, (err.max(), x[err.argmax()])
    deep = exact < 2.0 ** -140  # 9 bits or fewer: rounded once, the result is within half a spacing (plus a hair)
    assert deep.sum() > 100_000 and err[deep].max() <= 0.501, err[deep].max()


def test_float64_samples() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-746, 710, 100_000), rng.uniform(-0.5, 0.5, 100_000),
                        np.sign(rng.standard_normal(50_000)) * 10.0 ** rng.uniform(-300, 2.8, 50_000)])
    got = Tensor(x).exp().numpy()
    with np.errstate(over="ignore", under="ignore"):
        exact = np.exp(x.astype(np.longdouble))
    err = ulps(got, exact, np.float64)
    assert err.max() <= 0.84, (err.max(), x[err.argmax()])


@pytest.mark.parametrize("npdt", [np.float32, np.float64])
def test_special_values(npdt: type) -> None:
    fi = np.finfo(npdt)
    over = math.log(float(fi.max))  # below: finite; a hair above: inf
    under = math.log(float(fi.smallest_subnormal)) - math.log(2.0)  # below: rounds to 0
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, float(fi.max), -float(fi.max), 1e-30, -1e-30],
                 npdt)
    edges = np.array([np.nextafter(npdt(over), npdt(0)), np.nextafter(npdt(over), npdt(np.inf)),
                      np.nextafter(npdt(under), npdt(0)), np.nextafter(npdt(under), npdt(-np.inf))], npdt)
    got = Tensor(np.concatenate([x, edges])).exp().numpy()
    assert np.isnan(got[0]) and got[1] == np.inf and got[2] == 0.0
    assert got[3] == 1.0 and got[4] == 1.0 and got[7] == np.inf and got[8] == 0.0 and got[9] == 1.0 and got[10] == 1.0
    assert got[5] == npdt(math.e) and got[6] == npdt(1 / math.e)
    assert np.isfinite(got[11]) and got[12] == np.inf and got[13] > 0 and got[14] == 0.0


def test_python_device_agrees() -> None:
    """The python device computes EXP2(r * log2 e) itself (exactly rounded): within an ulp of the cpu's polynomial."""
    x = np.concatenate([np.linspace(-104, 89, 1500), np.linspace(-2, 2, 500)]).astype(np.float32)
    cpu = Tensor(x).exp().numpy()
    py = Tensor(x, device="python").exp().numpy()
    err = ulps(cpu, py.astype(np.float64), np.float32)
    assert err.max() <= 1.0, (err.max(), x[err.argmax()])
    exact = np.exp(x.astype(np.float64))
    assert ulps(py, exact, np.float32).max() <= 1.0
