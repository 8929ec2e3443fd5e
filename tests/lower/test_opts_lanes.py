"""optimize's output-lane heuristics for the backward's kernels: a reduction over a strided axis whose output loop
is the contiguous one (a bias gradient: a sum over a matrix's rows) puts that output loop into lanes (a vector of
accumulators, one per column); an output that selects on a bool loaded from memory (a ReLU's saved mask) is
upcast into lanes (a blend instead of a branch per element). Both read the lanes from the Target. Every program
gives the python reference's result bit for bit (same opts, same program) and numpy's."""

from __future__ import annotations

import numpy as np
import pytest

from devices import get_device
from devices.base import cpu_target
from lower.buffers import new_buffer
from lower.optimize import hand_coded
from lower.stages import lower_kernel
from rewrite import AxisType, UOp, dtypes
from tests.lower.test_opts_accumulators import LEVELS, _kernel, _run, _splits

ROWS, COLS = 64, 96


def _arrays(it) -> dict[int, np.ndarray]:
    """Random inputs of each buffer's dtype: a bool buffer half true."""
    rng = np.random.default_rng(2)
    out = {}
    for i, b in enumerate(it.bufs):
        if i:
            n = int(np.prod(b.shape))
            out[i] = rng.random(n) < 0.5 if b.dtype is dtypes.bool else rng.standard_normal(n).astype(np.float32)
    return out


def _mask_and_values() -> tuple[UOp, UOp]:
    return new_buffer(dtypes.bool, (ROWS, COLS), "cpu"), new_buffer(dtypes.float32, (ROWS, COLS), "cpu")


@pytest.mark.parametrize("level", LEVELS)
def test_column_reduction_puts_the_output_loop_into_lanes(level: str) -> None:
    target = cpu_target(level)
    lanes = min(16, target.lanes(4))
    mask, g = _mask_and_values()
    it = _kernel(mask.where(g.const_like(0.0), g).sum((0,)))
    opts = hand_coded(it.ast, target, threads=1)
    assert _splits(opts, AxisType.UPCAST) == [lanes] and _splits(opts, AxisType.UNROLL) == [], opts
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "colsum", target)
    assert f"f32x{lanes} acc0" in src, src
    # a row sum (its reduction contiguous) keeps its lanes in the reduction, as before
    rows = _kernel(g.sum((1,)))
    ropts = hand_coded(rows.ast, target, threads=1)
    assert _splits(ropts, AxisType.UPCAST) == [] and _splits(ropts, AxisType.UNROLL), ropts
    if not target.runs_here:
        return
    arrays = _arrays(it)
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    m, v = arrays[1].reshape(ROWS, COLS), arrays[2].reshape(ROWS, COLS)
    np.testing.assert_allclose(got, np.where(m, 0.0, v.astype(np.float64)).sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_column_reduction_of_a_lane_unfriendly_body_stays_scalar(level: str) -> None:
    target = cpu_target(level)
    g = new_buffer(dtypes.float32, (ROWS, COLS), "cpu")
    it = _kernel(g.cast(dtypes.float64).sum((0,)))  # a cast between sizes runs lane by lane
    assert _splits(hand_coded(it.ast, target, threads=1), AxisType.UPCAST) == []


@pytest.mark.parametrize("level", LEVELS)
def test_select_on_a_loaded_mask_is_upcast(level: str) -> None:
    target = cpu_target(level)
    lanes = min(16, target.lanes(4))
    mask, g = _mask_and_values()
    it = _kernel(mask.where(g.const_like(0.0), g))
    opts = hand_coded(it.ast, target, threads=1)
    assert _splits(opts, AxisType.UPCAST) == [lanes], opts
    # a select on a condition computed in the kernel is left to the C compiler's own vectorizer, as before
    computed = _kernel((g > 0.0).where(g, g.const_like(0.0)))
    assert _splits(hand_coded(computed.ast, target, threads=1), AxisType.UPCAST) == []
    if not target.runs_here:
        return
    arrays = _arrays(it)
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    np.testing.assert_array_equal(got, np.where(arrays[1], np.float32(0.0), arrays[2]))
