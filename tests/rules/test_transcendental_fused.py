"""rules.transcendental's fused variant (transcendental_fused: the polynomials evaluated with MULACC, for a
target with fused multiply-add instructions): the same structure and special values as the plain rules, and
the same accuracy bounds (float32 faithful; float64 within 2 ulp of libm; the plain set's worst regions stay
within its measured maxima), checked with the exact evaluator, whose MULACC rounds once as the FMA does."""

from __future__ import annotations

import functools
import random

import pytest

from rewrite import Ops, UOp, dtypes, graph_rewrite
from rewrite.dtype import DType
from rewrite.semantics import exec_alu
from rules.decompositions import decompositions_for
from rules.transcendental import transcendental_fused
from tests.rules.test_transcendental import (
    ALLOWED,
    EXACT,
    NARROW,
    WORST,
    round_to,
    same,
    special_inputs,
    swept,
    ulp,
    ulps,
    variable,
)

F32, F64 = dtypes.float32, dtypes.float64
UNARY = (Ops.EXP2, Ops.LOG2, Ops.SIN)


@functools.cache
def decomposed(o: Ops, dtype: DType) -> UOp:
    return graph_rewrite(UOp(o, (variable("x", dtype),)), transcendental_fused)


def run(o: Ops, dtype: DType, v: float) -> float:
    return decomposed(o, dtype).evaluate({"x": v})  # type: ignore[return-value]


@pytest.mark.parametrize("dtype", [dtypes.float16, F32, F64], ids=str)
@pytest.mark.parametrize("o", UNARY, ids=str)
def test_polynomials_are_fused_and_plain(o: Ops, dtype: DType) -> None:
    ops = {u.op for u in decomposed(o, dtype).toposort()}
    assert Ops.MULACC in ops and ops <= ALLOWED | {Ops.MULACC}, ops - ALLOWED


def test_fused_set_only_for_a_device_with_mulacc() -> None:
    base = frozenset({Ops.ADD, Ops.MUL, Ops.SUB, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.CAST, Ops.BITCAST})
    with_fma = decompositions_for(base | {Ops.MULACC}, True)
    assert any(r.name == "exp2-to-poly-fused" for r in with_fma)
    without = decompositions_for(base, True)  # no MULACC on the device: the plain polynomials
    assert any(r.name == "exp2-to-poly" for r in without) and not any("fused" in r.name for r in without)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16, F32, F64], ids=str)
@pytest.mark.parametrize("o", UNARY, ids=str)
def test_special_values(o: Ops, dtype: DType) -> None:
    exact, near = special_inputs(o, dtype)
    for v in exact:
        want, got = exec_alu(o, dtype, v), run(o, dtype, v)
        assert same(got, want), f"{o.name}({v!r}) on {dtype.name}: got {got!r}, want {want!r}"
    for v in near:
        want, got = exec_alu(o, dtype, v), run(o, dtype, v)
        assert abs(got - want) <= ulp(dtype, want), f"{o.name}({v!r}) on {dtype.name}: got {got!r}, want {want!r}"


@pytest.mark.parametrize("dtype", NARROW, ids=str)
@pytest.mark.parametrize("o", UNARY, ids=str)
def test_sweep_faithful(o: Ops, dtype: DType) -> None:
    worst = (0.0, 0.0)
    for v in swept(o, dtype, 1000):
        worst = max(worst, (ulps(dtype, run(o, dtype, v), EXACT[o](v)), v))
    assert worst[0] < 1.0, f"{o.name} on {dtype.name}: {worst[0]:.3f} ulp at {worst[1]!r}"


@pytest.mark.parametrize("o", UNARY, ids=str)
def test_sweep_float64(o: Ops) -> None:
    worst = (0.0, 0.0)
    for v in swept(o, F64, 300):
        want = exec_alu(o, F64, v)
        err = abs(run(o, F64, v) - want) / ulp(F64, want) if want and want - want == 0 else 0.0
        worst = max(worst, (err, v))
    assert worst[0] <= 2.0, f"{o.name} on float64: {worst[0]:.3f} ulp from libm at {worst[1]!r}"


@pytest.mark.parametrize(("o", "lo", "hi", "bound"), WORST, ids=lambda v: str(v))
def test_float32_worst_regions(o: Ops, lo: float, hi: float, bound: float) -> None:
    rng = random.Random(f"fused{o}{lo}")
    for _ in range(1500):
        v = round_to(F32, rng.uniform(lo, hi))
        err = ulps(F32, run(o, F32, v), EXACT[o](v))
        assert err <= bound, f"{o.name}({v!r}): {err:.3f} ulp"
