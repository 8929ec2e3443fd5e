"""optimize's heuristics for memory-bound kernels, read from the Target. A reduction over gathered rows (an
embedding's rows picked by loaded ids, then a LayerNorm's statistics) is unrolled into lanes like any contiguous
reduction: the loaded id moves the row's address by the same amount at every step of the reduction, so each
step still reads one contiguous vector (lower.strides), and the id's cast, which runs lane by lane, is computed
once per row outside the lanes. The output loop of such a kernel, whose gathered load sits behind a gate (the id
in range) that does not move with it, is upcast into lanes (one vector load per branch; gcc leaves the scalar
loop of a gated load unvectorized). A reduction's accumulators are counted from the ops that move with its
lanes (the variance's body holds the mean's whole reduction, computed once per row). Every program gives the
python reference's result bit for bit (same opts, same program) and numpy's up to rounding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from devices import get_device
from devices.base import Target, cpu_target
from lower.buffers import new_buffer
from lower.optimize import ACCUMULATORS, hand_coded
from lower.stages import lower_kernel
from lower.strides import _stride_of
from rewrite import AxisType, UOp, dtypes
from tensor import Tensor
from tests.lower.test_opts_accumulators import LEVELS, _kernel, _run, _splits


def test_stride_of_a_gathered_row() -> None:
    """An address that adds a loaded, cast offset to a range's terms steps by that range's stride; along the range
    the id is loaded at, or through a quotient of the offset, it has no known stride."""
    ids, rows = new_buffer(dtypes.int32, (8,), "cpu"), UOp.range(8, 1)
    col = UOp.range(96, 2)
    row_off = ids.index(rows).load().cast(dtypes.index) * 96
    assert _stride_of(row_off + col, col) == 1
    assert _stride_of(row_off + col * 3 + 5, col) == 3
    assert _stride_of(row_off + col, rows) is None
    assert _stride_of((row_off + col) // 4, col) is None
    assert _stride_of(row_off * col, col) is None


def _gathered(n_ids: int, width: int, vocab: int = 50) -> tuple[Tensor, Tensor, Tensor]:
    table = Tensor.empty(vocab, width)
    ids = Tensor.empty(n_ids, dtype=dtypes.int32)
    return table, ids, table.index_select(0, ids)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("width", [384, 100])
def test_reduction_over_gathered_rows_is_unrolled_into_lanes(level: str, width: int) -> None:
    target = cpu_target(level)
    lanes = min(16, target.lanes(4))
    _, _, rows = _gathered(12, width)
    pos = Tensor(np.zeros((12, width), np.float32))
    x = rows + pos
    xc = x - x.mean(-1, keepdim=True)
    it = _kernel((xc * (xc * xc).mean(-1, keepdim=True).add(1e-5).rsqrt()).uop)
    opts = hand_coded(it.ast, target, threads=1)
    want = next(k for k in (16, 8, 4) if k <= lanes and width % k == 0)  # the widest vector that divides a row
    unroll = _splits(opts, AxisType.UNROLL)
    assert unroll and unroll[0] == want, opts
    assert _splits(opts, AxisType.UPCAST) == [want], opts  # the output loop, behind the id's gate
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "gathered_ln", target)
    assert f"f32x{want} acc0" in src, src
    assert f"? vload_f32x{want}(" in src or f"? vloadr_f32x{want}(" in src, src  # a vector load under one branch
    if not target.runs_here:
        return
    rng = np.random.default_rng(3)
    arrays: dict[int, np.ndarray] = {}
    for i, b in enumerate(it.bufs):
        if not i:
            continue
        n = int(np.prod(b.shape))
        arrays[i] = rng.integers(0, 50, n).astype(np.int32) if b.dtype is dtypes.int32 else \
            rng.standard_normal(n).astype(np.float32)
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    tab = next(a for a in arrays.values() if a.size == 50 * width).reshape(50, width).astype(np.float64)
    idx = next(a for a in arrays.values() if a.dtype == np.int32)
    p = next(a for i, a in arrays.items() if a.size == 12 * width and a.dtype == np.float32)
    xv = tab[idx] + p.reshape(12, width)
    xcv = xv - xv.mean(-1, keepdims=True)
    want = xcv / np.sqrt((xcv * xcv).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got.reshape(12, width), want, rtol=1e-4, atol=1e-4)


def test_gathered_layernorm_matches_numpy_through_tensor() -> None:
    """The whole path (split, heuristics, cpu kernel) on an embedding LayerNorm with ragged rows and an id at the
    table's last row."""
    rng = np.random.default_rng(4)
    tab = rng.standard_normal((30, 33)).astype(np.float32)
    ids = np.array([0, 29, 5, 5, 17], np.int32)
    x = Tensor(tab).index_select(0, Tensor(ids))
    xc = x - x.mean(-1, keepdim=True)
    got = (xc * ((xc * xc).mean(-1, keepdim=True) + 1e-5).rsqrt()).numpy()
    xv = tab[ids].astype(np.float64)
    xcv = xv - xv.mean(-1, keepdims=True)
    np.testing.assert_allclose(got, xcv / np.sqrt((xcv * xcv).mean(-1, keepdims=True) + 1e-5), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", LEVELS)
def test_variance_gets_separate_accumulators(level: str) -> None:
    """A LayerNorm's variance after a residual add, rows of 384: its body reads the mean (a reduction of its own
    over a + b + c, and a division, once per row); only the adds, the subtract and the square move with its
    lanes, a cheap body, so it gets ACCUMULATORS vector registers like the mean's sum."""
    target = cpu_target(level)
    lanes = min(16, target.lanes(4))
    a, b, c = Tensor.empty(64, 384), Tensor.empty(64, 384), Tensor.empty(384)
    x = a + b + c
    xc = x - x.mean(-1, keepdim=True)
    it = _kernel((xc * xc).mean(-1).uop)
    opts = hand_coded(it.ast, target, threads=1)
    assert _splits(opts, AxisType.UNROLL) == [lanes, ACCUMULATORS] * 2, opts
    if not target.runs_here:
        return
    arrays, got = _run_like_python(it, opts, target, 5)
    big = [v.astype(np.float64).reshape(64, 384) for v in arrays.values() if v.size == 64 * 384]
    row = next(v for v in arrays.values() if v.size == 384)
    assert len(big) == 2 and len(arrays) == 3
    xv = big[0] + big[1] + row
    np.testing.assert_allclose(got[:64], xv.var(-1), rtol=1e-4, atol=1e-5)


def _run_like_python(it: Any, opts: list, target: Target, seed: int) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """The kernel with `opts` on random float32 inputs on the cpu device, checked equal, bit for bit, to the
    python reference device: (the inputs by slot, the cpu result)."""
    rng = np.random.default_rng(seed)
    arrays = {i: rng.standard_normal(int(np.prod(b.shape))).astype(np.float32) for i, b in enumerate(it.bufs) if i}
    got = _run(it, opts, arrays, "cpu", target)
    np.testing.assert_array_equal(got, _run(it, opts, arrays, "python", target))
    return arrays, got


def _pack(rows: int, cols: int, panel: int) -> Tensor:
    """matmul's packing copy (tensor.nn._panels): (rows, cols) into (cols / panel, rows, panel) column panels."""
    return Tensor.empty(rows, cols).reshape(rows, cols // panel, panel).permute(1, 0, 2).contiguous()


def _bias_heads(rows: int, heads: int, width: int) -> Tensor:
    """A projection's bias added on the way into attention's (batch, heads, rows, width) layout."""
    x, bias = Tensor.empty(2, rows, heads * width), Tensor.empty(heads * width)
    return (x + bias).reshape(2, rows, heads, width).permute(0, 2, 1, 3).contiguous()


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", ["pack", "pack_one_row", "bias_heads", "scale"])
def test_data_movement_is_upcast_to_the_targets_width(level: str, case: str) -> None:
    """A kernel that only moves data (a packing copy, a bias add into a permuted layout, a scale) stores whole
    vectors of the Target's width along its contiguous output loop, loaded as whole vectors too; results equal the
    python reference's bit for bit and numpy's."""
    target = cpu_target(level)
    lanes = min(16, target.lanes(4))
    t = {"pack": lambda: _pack(96, 96, 32), "pack_one_row": lambda: _pack(1, 64, 32),
         "bias_heads": lambda: _bias_heads(8, 3, 32), "scale": lambda: Tensor.empty(40, 48) * 3.0}[case]()
    it = _kernel(t.uop)
    opts = hand_coded(it.ast, target, threads=1)
    assert _splits(opts, AxisType.UPCAST) == [lanes], opts
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), case, target)
    body = src[src.index(f"void {case}("):]
    assert f"vstore_f32x{lanes}(" in body and (f"vload_f32x{lanes}(" in body or f"vloadr_f32x{lanes}(" in body), body
    if not target.runs_here:
        return
    arrays, got = _run_like_python(it, opts, target, 6)
    np.testing.assert_array_equal(got, _run(it, [], arrays, "cpu", target))  # the scalar kernel: the same values


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_ragged_data_movement_stays_scalar(level: str) -> None:
    """A packed row of 33 (no whole vectors) is left to the C compiler: masked lanes would cost more than they move."""
    target = cpu_target(level)
    it = _kernel(_pack(20, 99, 33).uop)
    assert _splits(hand_coded(it.ast, target, threads=1), AxisType.UPCAST) == []


@pytest.mark.parametrize("shape", [(1, 64, 32), (33, 96, 32), (7, 99, 33), (384, 384, 32)])
def test_packing_copies_match_numpy(shape: tuple[int, int, int]) -> None:
    """The packing copy through Tensor (split, heuristics, threads, cpu kernel) against numpy, odd row counts and a
    ragged panel included."""
    rows, cols, panel = shape
    a = np.random.default_rng(7).standard_normal((rows, cols)).astype(np.float32)
    got = Tensor(a).reshape(rows, cols // panel, panel).permute(1, 0, 2).contiguous().numpy()
    np.testing.assert_array_equal(got, a.reshape(rows, cols // panel, panel).transpose(1, 0, 2))
    b = np.random.default_rng(8).standard_normal(cols).astype(np.float32)
    got = (Tensor(a) + Tensor(b)).reshape(rows, cols // panel, panel).permute(1, 0, 2).contiguous().numpy()
    np.testing.assert_array_equal(got, (a + b).reshape(rows, cols // panel, panel).transpose(1, 0, 2))
