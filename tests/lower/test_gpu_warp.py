"""Warp shuffles (Ops.SHUFFLE) and the block reductions built on them (lower.gpu, the WARP_REDUCE knob): the
python device's emulation of a butterfly exchange, what devices.linear refuses, and GROUP_REDUCEs that fold each
warp by shuffles and the warps' totals through one LOCAL slot per warp, checked against numpy, the plain python
device and the shared-memory tree they replace."""

from __future__ import annotations

import numpy as np
import pytest

from devices import get_device
from lower import schedule
from lower.optimize import Opt, OptOps
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.env import Context
from rewrite.errors import CompileError, DeviceError
from tensor import Tensor
from tests.lower.test_gpu import GPU, PY, _buf, _linear, _t, run


def _count(lin: UOp, op: Ops) -> int:
    return sum(u.op is op for u in lin.src)


def _locals(lin: UOp) -> list[tuple]:
    return [u.shape for u in lin.src if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL]  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------ the emulator


@pytest.mark.parametrize("k", [1, 2, 4, 8, 16])
def test_emulator_shuffle_exchanges_lanes_within_each_warp(k: int) -> None:
    """Two blocks of two warps: thread t of block g gets the value thread t ^ k of its own block brought, which
    stays inside t's warp for every mask."""
    out, inp = _buf(0, 128), _buf(1, 128)
    g, t = UOp(Ops.SPECIAL, (UOp.const(2),), "gidx0"), UOp(Ops.SPECIAL, (UOp.const(64),), "lidx0")
    st = out.index(g * 64 + t).store(UOp(Ops.SHUFFLE, (inp.index(g * 64 + t).load(),), k))
    x = np.random.default_rng(k).standard_normal(128).astype(np.float32)
    res = np.zeros(128, np.float32)
    PY.compile(_linear(st), "shuffle", GPU)({0: res, 1: x})
    lanes = np.arange(128)
    np.testing.assert_array_equal(res, x[(lanes // 64) * 64 + ((lanes % 64) ^ k)])


def test_emulator_shuffle_needs_whole_warps() -> None:
    out = _buf(0, 16)
    t = UOp(Ops.SPECIAL, (UOp.const(16),), "lidx0")
    st = out.index(t).store(UOp(Ops.SHUFFLE, (t.cast(dtypes.float32),), 1))
    with pytest.raises(DeviceError, match="whole warps"):
        PY.compile(_linear(st), "half_warp", GPU)({0: np.zeros(16, np.float32)})


def test_analyze_refuses_shuffles_no_gpu_could_run() -> None:
    """A lane mask outside the warp, a dtype no shuffle moves, a SHUFFLE only some lanes reach (inside an IF), and
    the cpu device, which has no warps: each a CompileError that says what is wrong."""
    out = _buf(0, 32)
    t = UOp(Ops.SPECIAL, (UOp.const(32),), "lidx0")
    v = t.cast(dtypes.float32)
    with pytest.raises(CompileError, match="SHUFFLE is arg k"):
        PY.compile(_linear(out.index(t).store(UOp(Ops.SHUFFLE, (v,), 3))), "bad_mask", GPU)
    flag = _buf(0, 32, dt=dtypes.bool)
    with pytest.raises(CompileError, match="SHUFFLE is arg k"):
        PY.compile(_linear(flag.index(t).store(UOp(Ops.SHUFFLE, (t < 3,), 1))), "bad_dtype", GPU)
    inside = out.index(t).store(UOp(Ops.SHUFFLE, (v,), 1))
    lin = _linear(inside)
    at = next(i for i, u in enumerate(lin.src) if u.op is Ops.SHUFFLE)
    cond = t < 16
    gated = UOp(Ops.LINEAR, (*lin.src[:at], cond.src[1], cond, UOp(Ops.IF, (cond,)), *lin.src[at:],
                             UOp(Ops.ENDIF, (UOp(Ops.IF, (cond,)),))))
    with pytest.raises(CompileError, match="SHUFFLE inside an IF"):
        PY.compile(gated, "diverged", GPU)
    with pytest.raises(CompileError, match="no rule for SHUFFLE"):
        get_device("cpu").render(_linear(inside), "on_cpu")


# ------------------------------------------------------------------------------------------ the lowering


def _sum_kernel(n: int) -> tuple[UOp, np.ndarray]:
    a, av = _t(n)
    (it,) = schedule([a.sum().uop])[0]
    assert it.ast is not None
    return it.ast, av


@pytest.mark.parametrize("threads,barriers,slots", [(256, 1, 8), (96, 1, 3), (32, 0, None)])
def test_group_reduce_folds_each_warp_by_shuffles(threads: int, barriers: int, slots: int | None) -> None:
    """A sum shared by a block: five butterfly SHUFFLEs per warp, then lane 0 of each warp stores its warp's total
    to one LOCAL slot (n / 32 of them) before the one BARRIER, and every thread folds the slots itself; one warp
    needs no shared memory and no BARRIER at all. 96 threads (no power of two) works the same way."""
    ast, av = _sum_kernel(3072)
    lin = lower_kernel(ast, GPU, opts=[Opt(OptOps.SPLIT, 0, (threads, AxisType.GROUP_REDUCE, False))])
    assert _count(lin, Ops.SHUFFLE) == 5 and _count(lin, Ops.BARRIER) == barriers
    assert _locals(lin) == ([] if slots is None else [(slots,)])
    res = np.zeros(1, np.float32)
    PY.compile(lin, "warp_sum", GPU)({0: res, 1: av.copy()})
    np.testing.assert_allclose(res[0], av.sum(dtype=np.float64), rtol=1e-5)


def test_warp_reduce_knob_off_keeps_the_shared_memory_tree() -> None:
    """WARP_REDUCE=0: the partials of 256 threads go to 256 LOCAL slots and fold in a tree, one BARRIER after the
    partials and one per round (8); the same sum either way."""
    ast, av = _sum_kernel(1000)
    with Context(WARP_REDUCE=0):
        tree = lower_kernel(ast, GPU)
    warp = lower_kernel(ast, GPU)
    assert (_count(tree, Ops.BARRIER), _count(tree, Ops.SHUFFLE), _locals(tree)) == (9, 0, [(256,)])
    assert (_count(warp, Ops.BARRIER), _count(warp, Ops.SHUFFLE), _locals(warp)) == (1, 5, [(8,)])
    got = []
    for lin in (tree, warp):
        res = np.zeros(1, np.float32)
        PY.compile(lin, "sum", GPU)({0: res, 1: av.copy()})
        got.append(res[0])
    np.testing.assert_allclose(got, [av.sum(dtype=np.float64)] * 2, rtol=1e-5)


def test_reductions_of_every_kind_on_warps() -> None:
    """An int32 sum (exact), a float max, and bool any (no shuffle moves a bool: its block keeps the tree), each
    as numpy computes it."""
    rng = np.random.default_rng(1)
    iv = rng.integers(-1000, 1000, 3000).astype(np.int32)
    got, (lin,) = run(Tensor(iv, device="python").sum(), GPU)
    assert int(got) == int(iv.sum()) and _count(lin, Ops.SHUFFLE) == 5
    fv = rng.standard_normal((3, 700)).astype(np.float32)
    got, (lin,) = run(Tensor(fv, device="python").max(axis=1), GPU)
    np.testing.assert_array_equal(got, fv.max(1))
    assert _count(lin, Ops.SHUFFLE) > 0
    got, (lin,) = run(Tensor(fv, device="python").__gt__(2.5).any(1), GPU)
    np.testing.assert_array_equal(got, (fv > 2.5).any(1))
    assert _count(lin, Ops.SHUFFLE) == 0 and _count(lin, Ops.BARRIER) > 1


def test_one_warp_rows_agree_on_a_max_of_signed_zeros() -> None:
    """Rows of 128 zeros of both signs: each row is one warp of 32 threads (4 columns each), whose lanes use their
    own copy of the row's max. max(-0.0, 0.0) and max(0.0, -0.0) differ, so both lanes of a butterfly pair must
    combine in one order: then x - max(x) has one sign wherever x is -0.0 in a row, as the tree (every thread
    reading one slot) gives."""
    rng = np.random.default_rng(2)
    x = np.where(rng.random((6, 128)) < 0.5, -0.0, 0.0).astype(np.float32)
    xt = Tensor(x, device="python")
    got, (lin,) = run(xt - xt.max(axis=-1, keepdims=True), GPU)
    assert _count(lin, Ops.SHUFFLE) == 5 and _count(lin, Ops.BARRIER) == 0  # one warp a row
    with Context(WARP_REDUCE=0):
        tree, _ = run(xt - xt.max(axis=-1, keepdims=True), GPU)
    for row, xr in zip(got, x, strict=True):
        signs = np.signbit(row[np.signbit(xr)])
        assert signs.all() or not signs.any(), row
    np.testing.assert_array_equal(np.abs(got), np.abs(tree))


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_row_statistics_on_warps_match_the_tree(name: str) -> None:
    """softmax and layernorm of the benchmark's kind (a block of 256 threads per row): the same values with the
    warp shuffles as with the shared-memory tree, numpy's within float32 rounding."""
    a, av = _t(2, 4096)
    if name == "softmax":
        f, e = (lambda t: t.softmax(-1)), np.exp(av - av.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
    else:
        def f(t: Tensor) -> Tensor:
            d = t - t.mean(-1, keepdim=True)
            return d * ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt()
        want = (av - av.mean(-1, keepdims=True)) / np.sqrt(av.var(-1, keepdims=True) + 1e-5)
    got, (lin,) = run(f(a), GPU)
    with Context(WARP_REDUCE=0):
        tree, (tlin,) = run(f(a), GPU)
    assert _count(lin, Ops.BARRIER) == 2 and _count(tlin, Ops.BARRIER) == 18
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, tree, rtol=1e-5, atol=1e-7)
