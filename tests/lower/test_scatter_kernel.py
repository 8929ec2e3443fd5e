"""Stores through loaded positions (rewrite.stores, lower.rangeify.build_store_kernel): a scatter-add is one kernel
of O(indices x row) work whose index loop runs in order, exact with duplicate and out-of-range positions on the
cpu and python devices and in the python device's GPU emulator, and never split into lanes or threads."""

from __future__ import annotations

import numpy as np
import pytest

from devices.base import gpu_target
from lower import schedule
from lower.optimize import Opt, OptOps, apply_opt, axes
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.errors import CompilerError, KernelOptError
from rewrite.evaluate import evaluate_graph
from rewrite.stores import indexed_store, scatter_add, scatter_store
from tensor import Tensor
from tests.lower.test_gpu import run

rng = np.random.default_rng(0)


def _zeros(shape: tuple[int, ...]) -> UOp:
    return UOp.const(0.0, dtypes.float32).reshape((1,) * len(shape)).expand(shape)


def _numpy(v: int, src: np.ndarray, idx: np.ndarray, add: bool) -> np.ndarray:
    out = np.zeros((v, *src.shape[1:]), np.float32)
    for j, p in enumerate(idx):  # in order: duplicates accumulate (add) or the last one wins
        if 0 <= p < v:
            out[p] = out[p] + src[j] if add else src[j]
    return out


@pytest.mark.parametrize("device", ["cpu", "python"])
@pytest.mark.parametrize("add", [True, False])
def test_scatter_matches_numpy_and_the_evaluator(device: str, add: bool):
    v, k, row = 7, 12, 5
    src = rng.standard_normal((k, row)).astype(np.float32)
    idx = np.array([3, 0, 3, -1, 6, 3, 7, 0, 2, 2, 6, 3], np.int32)  # duplicates, and two positions outside 0..6
    s, i = Tensor(src, device=device), Tensor(idx, device=device)
    u = (scatter_add if add else scatter_store)(_zeros((v, row)), i.uop, s.uop)
    want = _numpy(v, src, idx, add)
    np.testing.assert_allclose(Tensor._wrap(u, device).numpy(), want, rtol=1e-6, atol=1e-6)
    ev = evaluate_graph(u, {s.uop: src, i.uop: idx}).astype(np.float32)
    np.testing.assert_allclose(ev, want, rtol=1e-6, atol=1e-6)


def test_scatter_add_of_a_vector_and_in_place():
    idx = np.array([1, 1, 4, 1], np.int32)
    src = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    t = Tensor(np.arange(5, dtype=np.float32)).realize()
    t.uop = scatter_add(t.uop, Tensor(idx).uop, Tensor(src).uop)  # into t's own buffer
    np.testing.assert_allclose(t.numpy(), [0.0, 8.0, 2.0, 3.0, 7.0])


def test_scatter_kernel_work_is_indices_times_row():
    vocab, k, row = 30000, 64, 16
    i = Tensor(rng.integers(0, vocab, k).astype(np.int32))
    s = Tensor(rng.standard_normal((k, row)).astype(np.float32))
    items, _ = schedule([scatter_add(_zeros((vocab, row)), i.uop, s.uop)])
    stores = [it for it in items if it.ast is not None and any(
        u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].arg.slot == 0 for u in it.ast.toposort())]
    assert len(stores) == 1  # the zero fill, then one kernel that reads and writes the output
    rs = axes(stores[0].ast)
    assert sorted(int(r.src[0].value) for r in rs) == [row, k]  # no range spans the vocabulary
    serial = [r for r in rs if r.axis_type is AxisType.REDUCE]
    assert [int(r.src[0].value) for r in serial] == [k]
    with pytest.raises(KernelOptError, match="serial loop"):  # never lanes: two lanes could hit one element
        apply_opt(stores[0].ast, Opt(OptOps.SPLIT, rs.index(serial[0]), (4, AxisType.UNROLL, False)))


def test_scatter_add_in_the_gpu_emulator():
    v, k, row = 9, 40, 130  # a row wider than a block: padded LOCAL threads with gated stores
    idx = rng.integers(0, v, k).astype(np.int32)
    src = rng.standard_normal((k, row)).astype(np.float32)
    i, s = Tensor(idx, device="python"), Tensor(src, device="python")
    out = Tensor._wrap(scatter_add(_zeros((v, row)), i.uop, s.uop), "python")
    got, lins = run(out, gpu_target().with_(device="python"))
    np.testing.assert_allclose(got, _numpy(v, src, idx, True), rtol=1e-5, atol=1e-5)
    assert any(u.op is Ops.SPECIAL for lin in lins for u in lin.src)


def test_store_forms_are_checked():
    t, i = _zeros((4, 3)), Tensor(np.array([1, 2], np.int32)).uop
    with pytest.raises(CompilerError, match="value"):
        scatter_add(t, i, _zeros((3, 3)))
    with pytest.raises(CompilerError, match=r"\(k,\)"):
        scatter_add(t, Tensor(np.array([[1]], np.int32)).uop, _zeros((1, 1, 3)))
    view = UOp(Ops.INDEX, (t, i))
    with pytest.raises(CompilerError, match="one ADD"):
        indexed_store(UOp(Ops.STORE, (view, view * 2.0)))


def test_index_select_backward_is_a_scatter_add_like_torch():
    torch = pytest.importorskip("torch")
    vocab, row = 50, 8
    w = rng.standard_normal((vocab, row)).astype(np.float32)
    ids = np.array([3, 7, 3, 49, 0, 3, 7], np.int64)  # duplicates accumulate
    g = rng.standard_normal((len(ids), row)).astype(np.float32)
    W = Tensor(w).requires_grad_()
    (W.index_select(0, Tensor(ids.astype(np.int32))) * Tensor(g)).sum().backward()
    wt = torch.tensor(w, requires_grad=True)
    (wt.index_select(0, torch.tensor(ids)) * torch.tensor(g)).sum().backward()
    assert W.grad is not None
    np.testing.assert_allclose(W.grad.numpy(), wt.grad.numpy(), rtol=1e-6, atol=1e-6)
    # no kernel does vocabulary x indices work (a one-hot contraction): each is at most the zero fill or a copy
    W.grad = None
    (W.index_select(0, Tensor(ids.astype(np.int32))) * Tensor(g)).sum().backward()
    assert W.grad is not None
    items, _ = schedule([W.grad.uop])
    for it in items:
        if it.ast is not None:
            assert int(np.prod([int(r.src[0].value) for r in axes(it.ast)])) <= vocab * row, it.name


def _scatter_add_tensor(v: int, src: np.ndarray, idx: np.ndarray, device: str) -> Tensor:
    i, s = Tensor(idx, device=device), Tensor(src, device=device)
    z = UOp.const(0, s.dtype).reshape((1,) * src.ndim).expand((v, *src.shape[1:]))
    return Tensor._wrap(scatter_add(z, i.uop, s.uop), device)


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64, np.float64])
def test_gpu_scatter_add_is_atomic_and_parallel_in_the_emulator(dtype: type):
    """On a GPU target the index loop is threads and the accumulation ATOMICADD (lower.atomics): heavy duplicates
    and positions outside the buffer, against numpy's in-order accumulation."""
    v, k, row = 5, 300, 3
    idx = rng.integers(-1, v + 1, k).astype(np.int32)  # every row hit ~50 times; -1 and v are skipped
    src = (rng.standard_normal((k, row)) * 8).astype(dtype)
    out = _scatter_add_tensor(v, src, idx, "python")
    got, lins = run(out, gpu_target().with_(device="python"))
    want = _numpy(v, src.astype(np.float64), idx, True)
    if np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(got, want.astype(dtype))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    (lin,) = [lin for lin in lins if any(u.op is Ops.ATOMICADD for u in lin.src)]
    assert not any(u.op is Ops.RANGE for u in lin.src)  # j and the row are both grid axes: no loop over positions
    assert not any(u.op is Ops.STORE for u in lin.src)


def test_gpu_scatter_add_skips_outside_positions_without_touching_negative_zero():
    """An outside position adds -0.0 to element 0: -0.0 stays -0.0 (adding +0.0 would make it +0.0)."""
    idx = np.array([-1, 2, 2, 7], np.int32)
    src = np.array([[5.0], [1.0], [2.0], [9.0]], np.float32)
    base = np.array([[-0.0], [1.0], [0.0]], np.float32)
    t = Tensor(base, device="python")
    out = Tensor._wrap(scatter_add(t.uop, Tensor(idx, device="python").uop, Tensor(src, device="python").uop),
                       "python")
    got, _ = run(out, gpu_target().with_(device="python"))
    np.testing.assert_array_equal(got, [[-0.0], [1.0], [3.0]])
    assert np.signbit(got[0, 0])


def test_narrow_floats_and_the_cpu_keep_the_serial_loop():
    idx = np.array([1, 1, 0, 1], np.int32)
    src = np.ones((4, 2), np.float32)
    half = _scatter_add_tensor(3, src.astype(np.float16), idx, "python")
    got, lins = run(half, gpu_target().with_(device="python"))
    np.testing.assert_array_equal(got, [[1, 1], [3, 3], [0, 0]])
    assert not any(u.op is Ops.ATOMICADD for lin in lins for u in lin.src)
    items, _ = schedule([_scatter_add_tensor(3, src, idx, "cpu").uop])
    for it in items:
        if it.ast is not None:
            lin = lower_kernel(it.ast, "cpu")
            assert not any(u.op is Ops.ATOMICADD for u in lin.src)
