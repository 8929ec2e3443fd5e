"""The interior/border split of gated loops (lower.interior) and the unrolled short reduction loops
(devices.c_scalar.render_range): convolutions of many shapes against numpy's float64 direct loop and the python
reference device, on every cpu target level this host runs; the split's structure (the interior's reduction
reads without gates, the border copies keep them, the interval is the one the window allows); and what the C
renderer writes for a short reduction loop."""

from __future__ import annotations

import numpy as np
import pytest

from devices.base import CPU_TARGET_NAMES, cpu_target
from lower import schedule
from lower.interior import MAX_SPLITS, split_interior
from lower.pipeline import compile_kernel, lower_kernel
from rewrite import AxisType, Ops, UOp
from rewrite.env import Context
from tensor import Tensor
from tests.tensor.test_nn import conv_reference

LEVELS = [lv for lv in ("x86-64-v3", "x86-64-v4") if lv in CPU_TARGET_NAMES]


def _runs(level: str) -> bool:
    return cpu_target(level).runs_here


def _last_kernel(out: Tensor) -> UOp:
    items, _ = schedule([out.uop])
    ast = [it for it in items if it.kind == "kernel"][-1].ast
    assert ast is not None
    return ast


def _conv_kernel(x: Tensor, w: Tensor, padding: int) -> UOp:
    return _last_kernel(x.conv2d(w, padding=padding))


def _size(r: UOp) -> int:
    n = r.src[0].value
    assert isinstance(n, int)
    return n


def _source(k: UOp, level: str, opts: list | None = None) -> str:
    src = compile_kernel(k, cpu_target(level), opts=opts).src[2].arg
    assert isinstance(src, str)
    return src


def _gated(u: UOp) -> bool:
    return u.op is Ops.LOAD and len(u.src) >= 3


def _reductions(k: UOp) -> list[UOp]:
    return [u for u in k.toposort() if u.op is Ops.REDUCE]


# (x shape, w shape, stride, padding, dilation, groups): padding 0/1/2, stride 2, dilation 2, groups, 1 channel,
# odd images (7x7, 5x5), taps 5x5 and 1x3, a one-column image
CASES = [
    ((2, 8, 16, 24), (32, 8, 3, 3), 1, 1, 1, 1),
    ((2, 8, 15, 17), (16, 8, 3, 3), 2, 1, 1, 1),
    ((1, 4, 7, 7), (16, 4, 3, 3), 1, 2, 1, 1),
    ((1, 4, 7, 7), (16, 4, 3, 3), 1, 0, 1, 1),
    ((2, 1, 5, 5), (8, 1, 3, 3), 1, 1, 1, 1),
    ((1, 3, 12, 13), (16, 3, 5, 5), 1, 2, 1, 1),
    ((1, 4, 14, 14), (16, 4, 3, 3), 1, 2, 2, 1),
    ((2, 8, 10, 12), (32, 4, 3, 3), 1, 1, 1, 2),
    ((1, 2, 9, 1), (8, 2, 3, 3), 1, 1, 1, 1),
    ((1, 4, 9, 11), (16, 4, 1, 3), (1, 2), (0, 1), 1, 1),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("xs,ws,stride,pad,dil,groups", CASES)
def test_conv_matches_numpy(level: str, xs: tuple, ws: tuple, stride: int | tuple[int, int],
                            pad: int | tuple[int, int], dil: int, groups: int) -> None:
    if not _runs(level):
        pytest.skip(f"{level} does not run on this host")
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    with Context(CPU_TARGET=level):
        got = Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad, dilation=dil, groups=groups).numpy()
    def two(v: int | tuple[int, int]) -> tuple[int, int]:
        return v if isinstance(v, tuple) else (v, v)

    want = conv_reference(x, w, two(stride), two(pad), two(dil), groups)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pad,stride", [(1, 1), (2, 2)])
def test_conv_matches_python_device(pad: int, stride: int) -> None:
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 3, 9, 11)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    ref = Tensor(x, device="python").conv2d(Tensor(w, device="python"), stride=stride, padding=pad).numpy()
    for level in LEVELS:
        if _runs(level):
            with Context(CPU_TARGET=level):
                got = Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad).numpy()
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", LEVELS)
def test_conv_interior_reads_without_gates(level: str) -> None:
    """conv2d 3x3 padding 1 over 56x56: the kernel's output rows and tile columns are split; exactly one copy of
    the reduction (the interior) loads without a gate, the border copies keep theirs, and every copy's gated
    loads are those of the border's taps."""
    target = cpu_target(level)
    k = _conv_kernel(Tensor.empty(2, 16, 56, 56), Tensor.empty(32, 16, 3, 3), padding=1)
    before = lower_kernel(k, target, upto="optimize", opts=None)
    reds = _reductions(before)
    assert len(reds) > 1 and len(reds) <= 2 * MAX_SPLITS + 1, len(reds)  # border copies and one interior
    plain = [r for r in reds if not any(_gated(u) for u in r.src[0].toposort())]
    assert len(plain) == 1, [sum(_gated(u) for u in r.src[0].toposort()) for r in reds]
    # the interior's loops: the output rows [1, 55) of 56 (54 of them)
    loops = [u for u in plain[0].toposort() if u.op is Ops.RANGE and u.axis_type is AxisType.LOOP]
    assert any(_size(u) == 54 for u in loops), [_size(u) for u in loops]
    assert all(any(_gated(u) for u in r.src[0].toposort()) for r in reds if r is not plain[0])
    # in C: the interior's loads of the input are plain reads, the borders' are selects on their gates
    src = _source(k, level)
    assert "? data1[" in src
    # each copy's innermost tap loop (3 columns) is unrolled, the loop over the 3 rows around it is not
    assert src.count('_Pragma("GCC unroll 3")') == len(reds), src.count('_Pragma("GCC unroll 3")')


def test_no_split_where_nothing_is_gated_or_the_interior_is_small() -> None:
    target = cpu_target("x86-64-v4")
    unpadded = _conv_kernel(Tensor.empty(1, 4, 12, 12), Tensor.empty(16, 4, 3, 3), padding=0)
    opt = lower_kernel(unpadded, target, upto="optimize")
    assert split_interior(opt) is opt and len(_reductions(opt)) == 1
    # 4 output columns under a 5-tap window padded by 2: no column is an interior one (each reads a border)
    narrow = _conv_kernel(Tensor.empty(1, 1, 4, 4), Tensor.empty(1, 1, 5, 5), padding=2)
    opt = lower_kernel(narrow, target, upto="optimize", opts=[])
    assert len(_reductions(opt)) == 1


def test_noopt_kernel_is_not_split() -> None:
    k = _conv_kernel(Tensor.empty(1, 4, 12, 12), Tensor.empty(16, 4, 3, 3), padding=1)
    with Context(NOOPT=1):
        opt = lower_kernel(k, cpu_target("x86-64-v4"), upto="optimize")
    assert len(_reductions(opt)) == 1


def test_window_sum_interval() -> None:
    """A 1-D sum over 3 taps of a padded vector: the output loop of 20 splits into [0, 1), [1, 19), [19, 20),
    and the result is the padded window sum on every level."""
    x = np.arange(20, dtype=np.float32)
    xs = Tensor(x).reshape(1, 1, 20)
    w = Tensor(np.ones((1, 1, 3), np.float32))
    k = _conv_kernel(xs, w, 1)
    opt = lower_kernel(k, cpu_target("x86-64-v4"), upto="optimize", opts=[])
    sizes = sorted(_size(u) for u in opt.toposort() if u.op is Ops.RANGE and u.axis_type is AxisType.LOOP)
    assert 18 in sizes and 20 not in sizes, sizes  # the interior [1, 19); the two border columns are constants
    want = np.convolve(np.pad(x, 1), np.ones(3), "valid")
    for level in LEVELS:
        if _runs(level):
            with Context(CPU_TARGET=level):
                np.testing.assert_allclose(xs.conv2d(w, padding=1).numpy().ravel(), want, rtol=1e-6)


def test_short_reduction_loops_are_unrolled_in_c_only() -> None:
    """An innermost reduction loop of 2..4 iterations gets gcc's unroll pragma in C; longer ones and the CUDA
    dialect none."""
    from devices.c_scalar import C_DIALECT, SHORT_REDUCE
    from devices.cuda_render import CUDA_DIALECT

    assert C_DIALECT.unroll and not CUDA_DIALECT.unroll
    short = _last_kernel(Tensor(np.ones((64, SHORT_REDUCE), np.float32)).sum(1))
    assert f'_Pragma("GCC unroll {SHORT_REDUCE}") for' in _source(short, "x86-64-v3", opts=[])
    longer = _last_kernel(Tensor(np.ones((64, SHORT_REDUCE + 1), np.float32)).sum(1))
    assert "GCC unroll" not in _source(longer, "x86-64-v3", opts=[])


def test_strided_start() -> None:
    from devices.linear import strided_start

    s = UOp.range(4, 90)
    assert strided_start(UOp.vconst([0, 5, 10, 15])) == (None, 0, 5)
    assert strided_start(s + UOp.vconst([2, 6, 10])) == (s, 2, 4)
    assert strided_start(UOp.vconst([0, 1, 2, 3])) is None  # consecutive: one vector move, not a lane loop
    assert strided_start(UOp.vconst([0, 5, 11])) is None
    assert strided_start(UOp.vconst([3, 3])) is None


@pytest.mark.parametrize("level", LEVELS)
def test_conv_tile_stores_lanes_at_a_stride(level: str) -> None:
    """The register tile's lanes are output channels, H*W elements apart in the output: each accumulator is
    stored lane by lane at lane_s + lane_l * H*W (not through a vector of 64-bit lane addresses)."""
    k = _conv_kernel(Tensor.empty(2, 16, 20, 24), Tensor.empty(32, 16, 3, 3), 1)
    src = _source(k, level)
    assert "data0[lane_s+lane_l*480] = lane_v[lane_l]" in src and "data0[lane_i[lane_l]]" not in src
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal((2, 16, 20, 24)).astype(np.float32), rng.standard_normal((32, 16, 3, 3))
    if _runs(level):
        with Context(CPU_TARGET=level):
            got = Tensor(x).conv2d(Tensor(w.astype(np.float32)), padding=1).numpy()
        np.testing.assert_allclose(got, conv_reference(x, w.astype(np.float32), (1, 1), (1, 1), (1, 1), 1),
                                   rtol=1e-4, atol=1e-4)
