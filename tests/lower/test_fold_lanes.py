"""expand folds a reduction's vector lanes in halves (16 -> 8 -> 4 -> 2 lanes, then one scalar operation): the
fold is log2(lanes) operations deep, not a chain of lanes - 1, and a reduction's separate accumulators are
combined lane-wise before it, so there is one fold. Results: a max is exact in any order, NaN in any
lane gives NaN; sums match the python reference bit for bit (same program) and numpy up to rounding."""

from __future__ import annotations

import math

import numpy as np
import pytest

from devices import get_device
from devices.base import cpu_target
from lower import schedule
from lower.buffers import new_buffer
from lower.optimize import hand_coded
from lower.stages import lower_kernel
from rewrite import Ops, UOp, dtypes

LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64"]


def _kernel(out: UOp):
    items, _ = schedule([out])
    (it,) = [i for i in items if i.kind == "kernel"]
    return it


def _fold_depth(ast: UOp, op: Ops) -> int:
    """The longest chain of `op` nodes outside any REDUCE body: the fold after the loop."""
    depth: dict[UOp, int] = {}
    for u in ast.toposort():
        below = max((depth[s] for s in u.src), default=0)
        depth[u] = 0 if u.op is Ops.REDUCE else below + (u.op is op)
    return max(depth.values())


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("op", [Ops.MAX, Ops.ADD])
def test_lane_fold_is_log_deep(level: str, op: Ops) -> None:
    target = cpu_target(level)
    lanes = target.lanes(4)
    a = new_buffer(dtypes.float32, (4, 1024), "cpu")
    it = _kernel(a.max((1,)) if op is Ops.MAX else a.sum((1,)))
    opts = hand_coded(it.ast, target, threads=1)
    ast = lower_kernel(it.ast, target, upto="expand", opts=opts)
    # lanes from each accumulator, then the accumulators in a tree (expand.replicate): at most a few of those
    assert _fold_depth(ast, op) <= int(math.log2(lanes)) + 3, (lanes, _fold_depth(ast, op))
    halves = {u.shape for u in ast.toposort() if u.op is op and u.dtype == dtypes.float32 and u.shape != ()
              and u.shape[0] < lanes}  # (full-width ADDs: the loop's own, and the index math's)
    assert halves == {(lanes >> k,) for k in range(1, int(math.log2(lanes)))}, halves
    # the accumulators (expand.replicate's copies) are combined as vectors, then folded once: one scalar op
    scalar = [u for u in ast.toposort() if u.op is op and u.dtype == dtypes.float32 and u.shape == ()]
    assert len(scalar) == 1, scalar


def _run(it, opts, x: np.ndarray, device: str, target) -> np.ndarray:
    dev = get_device(device)
    k = dev.compile(lower_kernel(it.ast, target, opts=opts), it.name, target if device == "cpu" else
                    dev.default_target())
    out = np.zeros(int(np.prod(it.bufs[0].shape)), dtype=np.float32)
    k({0: out, 1: x.reshape(-1).copy()})
    return out


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_row_max_and_sum_with_a_nan_in_every_lane_position(level: str) -> None:
    target = cpu_target(level)
    if not target.runs_here:
        pytest.skip(f"{level} does not run on this host")
    rows, n = 64, 256
    x = np.random.default_rng(3).standard_normal((rows, n)).astype(np.float32)
    for r in range(0, rows, 2):  # odd rows: no NaN; even rows: one NaN, its column moving through every lane
        x[r, (r * 37) % n] = np.nan
    x[1, 5], x[3, 200] = np.inf, -np.inf
    a = new_buffer(dtypes.float32, (rows, n), "cpu")
    for out, want in ((a.max((1,)), x.max(1)), (a.sum((1,)), x.astype(np.float64).sum(1))):
        it = _kernel(out)
        opts = hand_coded(it.ast, target, threads=1)
        got = _run(it, opts, x, "cpu", target)
        np.testing.assert_array_equal(got, _run(it, opts, x, "python", target))
        assert np.isnan(got[::2]).all()
        np.testing.assert_allclose(got[1::2], want[1::2], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows", [4, 8, 32])
def test_an_address_the_simplifier_makes_uniform_keeps_its_lanes(rows: int) -> None:
    """exp(x - rowmax) of rows of 32, two rows side by side, concatenated with itself: the second half's max reads
    row (16 r + lane) // 32 = r // 2 under the gate 63 < 16 r + lane. The simplifier proves the address the same
    in all 16 lanes and makes it a scalar, but not the gate; the load then had a scalar address under a vector
    gate, which the cpu device rejected (CompileError). lower.expand.lane_addresses gives
    the address its lanes back (found by the 16-bit program fuzzer, seed 14000081)."""
    from tensor import Tensor

    x = (np.arange(rows * 32) % 17 / 4 - 2).astype(np.float32).reshape(rows, 32)
    t = Tensor(x)
    v = (t - t.max(axis=1, keepdim=True)).exp().reshape(rows // 2, 64)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True)).reshape(rows // 2, 64)
    np.testing.assert_allclose(v.cat(v, dim=1).numpy(), np.concatenate([e, e], 1), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_a_gated_read_of_a_widened_matmul_keeps_its_lanes_on_x86_64_v2(dt: str) -> None:
    """The same CompileError on 4-lane x86-64-v2 for a 16-bit matmul (read through its float32 copies) flipped
    and concatenated beside its input (the 16-bit program fuzzer, seed 34000287): float16 holds every value here,
    so it must be exact; bfloat16 within its rounding of each input and result."""
    from rewrite.env import Context
    from tensor import Tensor

    x = (np.arange(32 * 48) % 17 / 4 - 2).astype(np.float32).reshape(32, 48)
    xx = x.astype(np.float64)
    want = np.concatenate([xx, np.flip(xx @ xx.T, (0, 1))], 1).reshape(4, 32, 20, 1)
    with Context(CPU_TARGET="x86-64-v2"):
        t = Tensor(x, dtype=dt)
        got = t.cat((t @ t.transpose(-1, -2)).flip((0, 1)), dim=1).reshape(4, 32, 20, 1).numpy()
    if dt == "float16":
        assert np.array_equal(got.astype(np.float64), want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2**-7, atol=0)
