"""optimize's reduction and output heuristics, read from the Target: a reduction whose body is a load or two
gets several vector registers of partial results (an UNROLL split twice: expand makes the outer one separate
accumulators, the inner one lanes); a costly body keeps one; an output computed with a transcendental is
upcast into explicit lanes. Every program gives the python reference's result bit for bit (same opts, same
program) and numpy's up to rounding."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from devices import get_device
from devices.base import cpu_target
from devices.cpu import build_object
from lower import schedule
from lower.buffers import new_buffer
from lower.optimize import ACCUMULATORS, OptOps, hand_coded
from lower.stages import lower_kernel
from rewrite import AxisType, UOp, dtypes
from tensor import Tensor

LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64"]


def _kernel(out: UOp):
    items, _ = schedule([out])
    (it,) = [i for i in items if i.kind == "kernel"]
    return it


def _splits(opts, kind: AxisType) -> list[int]:
    return [o.arg[0] for o in opts if o.op is OptOps.SPLIT and o.arg[1] is kind]


def _run(it, opts, arrays, device: str, target) -> np.ndarray:
    dev = get_device(device)
    k = dev.compile(lower_kernel(it.ast, target, opts=opts), it.name, target if device == "cpu" else
                    dev.default_target())
    out = np.zeros(int(np.prod(it.bufs[0].shape)), dtype=np.float32)
    k({0: out, **{i: a.copy() for i, a in arrays.items()}})
    return out


def _inputs(it) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(1)
    return {i: rng.standard_normal(int(np.prod(b.shape))).astype(np.float32) for i, b in enumerate(it.bufs) if i}


@pytest.mark.parametrize("level", LEVELS)
def test_cheap_reduction_gets_separate_accumulators(level: str) -> None:
    target = cpu_target(level)
    lanes = target.lanes(4)
    a = new_buffer(dtypes.float32, (4, 1024), "cpu")
    it = _kernel(a.sum((1,)))
    opts = hand_coded(it.ast, target, threads=1)
    assert _splits(opts, AxisType.UNROLL) == [lanes, ACCUMULATORS], opts
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "rowsum", target)
    assert f"acc{ACCUMULATORS - 1}" in src and f"f32x{lanes * ACCUMULATORS}" not in src  # registers, not one wide
    if not target.runs_here:
        return
    arrays = _inputs(it)
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    np.testing.assert_allclose(got, arrays[1].astype(np.float64).reshape(4, 1024).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_short_or_costly_reduction_keeps_one_accumulator(level: str) -> None:
    target = cpu_target(level)
    lanes = target.lanes(4)
    a = new_buffer(dtypes.float32, (4, 1024), "cpu")
    costly = _kernel(a.exp2().sum((1,)))
    assert _splits(hand_coded(costly.ast, target, threads=1), AxisType.UNROLL) == [lanes]
    short = _kernel(new_buffer(dtypes.float32, (4, lanes * 4), "cpu").sum((1,)))
    assert _splits(hand_coded(short.ast, target, threads=1), AxisType.UNROLL) == [lanes]


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_output_with_transcendental_upcast_into_lanes(level: str) -> None:
    target = cpu_target(level)
    lanes = target.lanes(4)
    a = new_buffer(dtypes.float32, (8, 256), "cpu")
    e = (a - a.max((1,)).reshape((8, 1)).expand((8, 256))).exp2()
    it = _kernel(e / e.sum((1,)).reshape((8, 1)).expand((8, 256)))
    opts = hand_coded(it.ast, target, threads=1)
    assert _splits(opts, AxisType.UPCAST) == [lanes], opts
    plain = _kernel(a * 2.0 + 1.0)
    assert _splits(hand_coded(plain.ast, target, threads=1), AxisType.UPCAST) == []
    if not target.runs_here:
        return
    arrays = _inputs(it)
    arrays[1][:4] = [np.inf, -np.inf, 100.0, -100.0]  # row 0: inf - inf = nan in every lane
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    x = arrays[1].astype(np.float64).reshape(8, 256)[1:]
    want = np.exp2(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got.reshape(8, 256)[1:], want / want.sum(1, keepdims=True), rtol=1e-5, atol=1e-9)
    assert np.isnan(got[:256]).all()


def _unrolls(opts) -> list[tuple[int, bool]]:
    return [(o.arg[0], o.arg[2]) for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.UNROLL]


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_long_reduction_reads_one_stream_per_accumulator(level: str) -> None:
    """A row of at least a page per accumulator: each accumulator sums its own slice (a top split, separate
    address streams); a shorter row keeps the accumulators on adjacent vectors (one sequential stream)."""
    target = cpu_target(level)
    lanes = target.lanes(4)
    n = ACCUMULATORS * target.page_bytes // 4  # each slice exactly one page of float32
    it = _kernel(new_buffer(dtypes.float32, (2, n), "cpu").sum((1,)))
    opts = hand_coded(it.ast, target, threads=1)
    assert _unrolls(opts) == [(lanes, False), (ACCUMULATORS, True)], opts
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "rowsum", target)
    for k in range(1, ACCUMULATORS):  # every accumulator loads from its slice, a page of floats after the last
        assert f"+{k * n // ACCUMULATORS})" in src, src
    short = _kernel(new_buffer(dtypes.float32, (2, n // 2), "cpu").sum((1,)))
    assert _unrolls(hand_coded(short.ast, target, threads=1)) == [(lanes, False), (ACCUMULATORS, False)]
    if not target.runs_here:  # AVX-512 on a host without it: gcc must still accept the source
        with tempfile.TemporaryDirectory() as d:
            build_object(src, os.path.join(d, "k.so"), target)
        return
    arrays = _inputs(it)
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    np.testing.assert_allclose(got, arrays[1].astype(np.float64).reshape(2, n).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("n", [256 * 4128, 256 * 4128 + 1, 16 * 40961, 3 << 17, 1000003])
def test_large_sum_is_right_for_ragged_sizes(n: int) -> None:
    """Sums that split across partial results and threads, with streams of a length that is not a power of two
    (256 * 4128), one element more, a per-part length the lanes do not divide (16 * 40961), and a prime: numpy's
    float64 sum up to float32 rounding of the magnitudes summed."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    got = float(Tensor(x).sum().numpy())
    want = x.astype(np.float64).sum()
    assert abs(got - want) <= 1e-6 * float(np.abs(x).astype(np.float64).sum()), (got, want)
