"""optimize's partial accumulators for a long reduction that gets no lanes (OptOps.PARTIALS): a sum through a
bool mask's cast and a window's //2 and %2 index math (a max pool's backward, the digits CNN's conv1 bias
gradient) runs as several scalar accumulators, not one chain over its whole length, so its rounding error is
bounded by the length of one accumulator's chain. Every program gives the python reference's result bit for bit
(same opts, same program); the sums are checked against a float64 numpy oracle under the worst-case bound of
recursive summation for that chain length."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from devices import get_device
from devices.base import cpu_target
from lower.buffers import new_buffer
from lower.opt_apply import Opt, OptOps, apply_opt, axes
from lower.optimize import LONG_REDUCTION, SCALAR_ACCUMULATORS, hand_coded
from lower.stages import lower_kernel
from rewrite import UOp, dtypes
from rewrite.errors import KernelOptError
from tests.lower.test_opts_accumulators import LEVELS, _kernel, _run

U = 2.0**-24  # float32's unit roundoff


def _partials(opts: list[Opt]) -> list[int]:
    return [int(o.arg) for o in opts if o.op is OptOps.PARTIALS]  # type: ignore[call-overload]


def _pool_backward(batch: int) -> UOp:
    """sum over (batch, 8, 8) of mask * g[i // 2, j // 2]: a 2x2 max pool's gradient through its saved mask."""
    mask = new_buffer(dtypes.bool, (batch, 8, 8), "cpu")
    g = new_buffer(dtypes.float32, (batch, 4, 4), "cpu")
    up = g.reshape((batch, 4, 1, 4, 1)).expand((batch, 4, 2, 4, 2)).reshape((batch, 8, 8))
    return (mask.cast(dtypes.float32) * up).sum((0, 1, 2))


@pytest.mark.parametrize("level", LEVELS)
def test_long_reduction_through_a_mask_and_window_math_gets_several_accumulators(level: str) -> None:
    target = cpu_target(level)
    it = _kernel(_pool_backward(100))
    opts = hand_coded(it.ast, target, threads=1)
    assert _partials(opts) == [SCALAR_ACCUMULATORS], opts
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "poolgrad", target)
    assert all(f"acc{j}" in src for j in range(SCALAR_ACCUMULATORS)), src
    assert not re.search(r"\b[a-z]+\d+x\d+\b", src), src  # scalar accumulators: no vector type (f32x8, i8x16)
    # a short one (fewer than LONG_REDUCTION steps) keeps its one accumulator
    short = _kernel(_pool_backward(max(1, LONG_REDUCTION // 64 - 1)))
    assert _partials(hand_coded(short.ast, target, threads=1)) == []
    if not target.runs_here:
        return
    rng = np.random.default_rng(3)
    arrays = {1: rng.random(100 * 64) < 0.25, 2: rng.standard_normal(100 * 16).astype(np.float32)}
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    m = arrays[1].reshape(100, 8, 8).astype(np.float64)
    up = np.repeat(np.repeat(arrays[2].reshape(100, 4, 4).astype(np.float64), 2, axis=1), 2, axis=2)
    np.testing.assert_allclose(got, [(m * up).sum()], rtol=1e-5, atol=1e-5)


def _gamma(n: int) -> float:
    return n * U / (1 - n * U)


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_long_cancelling_sum_error_is_bounded_by_one_accumulator_chain(level: str) -> None:
    """Row 0 sums 1, n - 2 halves of float32's spacing above 1 (2**-24, each rounded away when added to 1: ties go
    to even) and -1, its exact sum (n - 2) * 2**-24; one accumulator over all n terms returns 0. Row 1 is a random
    sum that cancels to a small rest. Every term is exact in float32 (a 0/1 mask times a float), so the only error
    is the additions': with k accumulators each term goes through at most n/k - 1 additions in its chain and
    log2(k) in the combining tree, so |error| <= gamma(n/k - 1 + log2 k) * sum |terms| (recursive summation's
    worst case, Higham 4.3)."""
    target = cpu_target(level)
    rows, n = 2, 4096
    mask = new_buffer(dtypes.bool, (rows, n), "cpu")
    x = new_buffer(dtypes.float32, (rows, n), "cpu")
    it = _kernel((mask.cast(dtypes.float32) * x).sum((1,)))
    opts = hand_coded(it.ast, target, threads=1)
    (k,) = _partials(opts)
    assert k > 1
    depth = n // k - 1 + math.ceil(math.log2(k))
    rng = np.random.default_rng(4)
    m = np.ones((rows, n), dtype=bool)
    v = np.full((rows, n), U, dtype=np.float32)
    v[0, 0], v[0, -1] = 1.0, -1.0
    half = rng.standard_normal(n // 2).astype(np.float32)
    v[1] = rng.permutation(np.concatenate([half, -half * np.float32(1 + 2**-10)]))
    m[1] = rng.random(n) < 0.9
    v[1, ~m[1]] = 1e30  # masked out: contributes 0 * 1e30 = 0
    terms = np.where(m, v.astype(np.float64), 0.0)
    exact = terms.sum(axis=1)
    bound = _gamma(depth) * np.abs(terms).sum(axis=1)
    assert (n - 2) * U > bound[0]  # one accumulator's error on row 0 would break the bound: the data tell them apart
    if not target.runs_here:
        return
    arrays = {1: m.reshape(-1), 2: v.reshape(-1)}
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= bound), (err, bound, k)


def test_partials_opt_is_checked() -> None:
    """OptOps.PARTIALS takes an int >= 2 that divides a REDUCE's reduction axis; anything else is a KernelOptError
    naming the opt."""
    it = _kernel(new_buffer(dtypes.float32, (4, 96), "cpu").sum((1,)))
    red = len(axes(it.ast)) - 1
    for bad in (Opt(OptOps.PARTIALS, red, 5), Opt(OptOps.PARTIALS, red, 1), Opt(OptOps.PARTIALS, red, "4"),
                Opt(OptOps.PARTIALS, 0, 2)):
        with pytest.raises(KernelOptError, match="PARTIALS"):
            apply_opt(it.ast, bad)
    assert len(axes(apply_opt(it.ast, Opt(OptOps.PARTIALS, red, 4)))) == len(axes(it.ast))
