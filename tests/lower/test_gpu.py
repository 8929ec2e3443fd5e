"""GPU-shaped kernels (lower.gpu) run in the python device's grid emulator: every kernel of a program lowered
for gpu_target() passes devices.linear.analyze and computes what numpy and the plain python device compute."""

from __future__ import annotations

from collections.abc import Callable
from math import prod

import numpy as np
import pytest

from devices import get_device
from devices.base import Target, gpu_target
from devices.memory import np_dtype
from devices.python import check_index_bounds
from lower import schedule
from lower.buffers import has_data, lookup
from lower.gpu import gpu_opts, lower_grid
from lower.optimize import Opt, OptOps, apply_opts, axes
from lower.stages import lower_kernel
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.env import Context
from rewrite.errors import KernelOptError
from tensor import Tensor

PY = get_device("python")
GPU = gpu_target().with_(device="python")  # the sm_90 target's facts, run by the python device's emulator


def run(out: Tensor, target: Target, last_opts: list[Opt] | None = None) -> tuple[np.ndarray, list[UOp]]:
    """`out` computed kernel by kernel, each lowered for `target` (the last one with `last_opts`, when given, in
    place of the heuristics') and run on the python device; also returns the LINEAR programs."""
    items, outs = schedule([out.uop])
    arrays: dict[int, np.ndarray] = {}  # by slot: a kernel's BUFFER is the 1-D view of the tensor's

    def array(b: UOp) -> np.ndarray:
        slot = b.arg.slot  # type: ignore[union-attr]
        if slot not in arrays:
            arrays[slot] = np.asarray(lookup(b)).reshape(-1).copy() if has_data(b) else \
                np.zeros(prod(b.shape), np_dtype(b.dtype))
        return arrays[slot]

    linears = []
    for it in items:
        if it.kind == "copy":
            array(it.bufs[0])[:] = array(it.bufs[1])
            continue
        lin = lower_kernel(it.ast, target, opts=last_opts if it is items[-1] else None)
        linears.append(lin)
        # every index value checked against its interval bounds: what the cuda renderer's int32 index relies on
        check_index_bounds(PY.compile(lin, it.name, target))({i: array(b) for i, b in enumerate(it.bufs)})
    return array(outs[out.uop]).reshape(out.shape), linears


def _specials(lins: list[UOp]) -> set[str]:
    return {u.arg for lin in lins for u in lin.src if u.op is Ops.SPECIAL}  # type: ignore[misc]


rng = np.random.default_rng(0)


def _t(*shape: int) -> tuple[Tensor, np.ndarray]:
    v = rng.standard_normal(shape).astype(np.float32)
    return Tensor(v, device="python"), v


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    n, _, h, wd = x.shape
    o, _c, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1), np.float64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + h - kh + 1, j:j + wd - kw + 1], w[:, :, i, j])
    return out


def _cases() -> dict[str, Callable[[], tuple[Tensor, np.ndarray]]]:
    def elementwise():
        (a, av), (b, bv) = _t(4, 300), _t(4, 300)
        return (a * b + 1.0).relu(), np.maximum(av * bv + 1.0, 0)

    def full_sum():
        a, av = _t(1000)
        return a.sum(), av.sum()

    def row_max():
        a, av = _t(3, 500)
        return a.max(axis=1), av.max(1)

    def matmul():
        (a, av), (b, bv) = _t(12, 40), _t(40, 20)
        return a @ b, av @ bv

    def softmax():
        a, av = _t(3, 72)  # the fused kernel recomputes its row's max and sum per output: kept small
        return a.softmax(-1), _softmax(av)

    def layernorm():
        a, av = _t(5, 64)
        m = a.mean(-1, keepdim=True)
        d = a - m
        return d * ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt(), \
            (av - av.mean(-1, keepdims=True)) / np.sqrt(av.var(-1, keepdims=True) + 1e-5)

    def conv2d():
        (x, xv), (w, wv) = _t(2, 3, 6, 6), _t(4, 3, 3, 3)
        return x.conv2d(w), _conv(xv, wv)

    def conv2d_padded():  # the block of conv2d (8,64,56,56) on the GPU: 56 x 2 threads, gates on both edges
        (x, xv), (w, wv) = _t(1, 1, 56, 56), _t(1, 1, 3, 3)
        return x.conv2d(w, padding=1), _conv(np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1))), wv)

    def gather():
        a, av = _t(5, 7)
        iv = rng.integers(0, 7, (5, 3)).astype(np.int32)
        return a.gather(1, Tensor(iv, device="python")), np.take_along_axis(av, iv, 1)

    def nondividing():  # 131 columns: no block size divides it, so the threads past the end are gated off
        a, av = _t(3, 131)
        return a.exp2() - 1.0, np.exp2(av) - 1.0

    return {f.__name__: f for f in (elementwise, full_sum, row_max, matmul, softmax, layernorm,
                                    conv2d, conv2d_padded, gather, nondividing)}


CASES = _cases()


@pytest.mark.parametrize("name", list(CASES))
def test_gpu_kernels_match_numpy_and_the_plain_device(name: str) -> None:
    out, expected = CASES[name]()
    got, lins = run(out, GPU)
    plain, _ = run(out, PY.default_target())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
    names = _specials(lins)
    assert "lidx0" in names, names  # threads of a block on the output (or sharing a reduction)
    if name in ("elementwise", "row_max", "softmax", "nondividing", "matmul"):
        assert "gidx0" in names, names  # more outputs (or rows) than one block takes: several blocks


def test_per_thread_upcast_runs() -> None:
    """An elementwise kernel with blocks to spare (a one-multiprocessor target) gives each thread 4 elements a
    block apart: 4 scalar copies of the body, each a coalesced access."""
    one = GPU.with_(cores=1)
    a, av = _t(8, 512)
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST for o in gpu_opts(_kernel(a * 2.0), one))  # type: ignore[index]
    got, lins = run(a * 2.0 + 1.0, one)
    np.testing.assert_array_equal(got, av * 2.0 + 1.0)
    (lin,) = lins
    assert sum(u.op is Ops.STORE for u in lin.src) == 4 and all(u.shape == () for u in lin.src if u.op is Ops.LOAD)


def test_nolocals_gives_blocks_only() -> None:
    out, expected = CASES["matmul"]()
    with Context(NOLOCALS=1):
        got, lins = run(out, GPU)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert {"gidx0", "gidx1"} <= _specials(lins) and not any(s.startswith("lidx") for s in _specials(lins))


def _kernel(out: Tensor) -> UOp:
    items, _ = schedule([out.uop])
    (it,) = [i for i in items if i.kind == "kernel"]
    assert it.ast is not None
    return it.ast


def test_heuristics_shape() -> None:
    """Elementwise: 128 threads on the contiguous axis (lidx0), padded (least) when nothing divides; big elementwise
    kernels upcast per thread; a reduction with few outputs is shared by the threads of a block."""
    a = Tensor(np.zeros((1024, 1024), np.float32), device="python")
    opts = gpu_opts(_kernel(a * 2.0), GPU)
    assert Opt(OptOps.SPLIT, 1, (128, AxisType.LOCAL, False)) in opts
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST for o in opts)  # type: ignore[index]
    b = Tensor(np.zeros((3, 131), np.float32), device="python")
    assert gpu_opts(_kernel(b * 2.0), GPU)[:2] == [Opt(OptOps.PADTO, 1, 32),  # 160 wastes least
                                                    Opt(OptOps.SPLIT, 1, (32, AxisType.LOCAL, False))]
    big = Tensor(np.zeros((3, 1000), np.float32), device="python")
    assert gpu_opts(_kernel(big * 2.0), GPU)[:2] == [Opt(OptOps.PADTO, 1, 128),
                                                      Opt(OptOps.SPLIT, 1, (128, AxisType.LOCAL, False))]
    c = Tensor(np.zeros((1000,), np.float32), device="python")
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.GROUP_REDUCE  # type: ignore[index]
               for o in gpu_opts(_kernel(c.sum()), GPU))
    rows = Tensor(np.zeros((200, 4096), np.float32), device="python")  # 200 long rows: a block per row
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.GROUP_REDUCE  # type: ignore[index]
               for o in gpu_opts(_kernel(rows.sum(1)), GPU))
    many = Tensor(np.zeros((65536, 256), np.float32), device="python")  # enough rows for a thread each
    assert not any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.GROUP_REDUCE  # type: ignore[index]
                   for o in gpu_opts(_kernel(many.sum(1)), GPU))
    assert gpu_opts(_kernel(a * 2.0), GPU, nolocals=True) == []


def test_grid_merges_more_than_three_block_axes() -> None:
    a, av = _t(2, 3, 4, 5)
    ast = _kernel(a + 1.0)
    assert len(axes(ast)) == 4
    lowered = lower_grid(ast, GPU)
    specials = {u.arg: u.src[0].arg[0] for u in lowered.toposort() if u.op is Ops.SPECIAL}  # type: ignore[index]
    assert specials == {"gidx0": 5, "gidx1": 4, "gidx2": 6}
    with Context(NOLOCALS=1):
        got, lins = run(a + 1.0, GPU)
    np.testing.assert_allclose(got, av + 1.0, rtol=0, atol=1e-6)
    assert _specials(lins) == {"gidx0", "gidx1", "gidx2"}


def test_illegal_gpu_shapes_say_why() -> None:
    a = Tensor(np.zeros((8, 2048), np.float32), device="python")
    ast = _kernel(a * 2.0)
    with pytest.raises(KernelOptError, match="threads per block"):
        lower_grid(apply_opts(ast, [Opt(OptOps.SPLIT, 1, (2048, AxisType.LOCAL, False))]), GPU)
    with pytest.raises(KernelOptError, match="cpu targets"):
        lower_grid(apply_opts(ast, [Opt(OptOps.SPLIT, 0, (2, AxisType.THREAD, True))]), GPU)
    sm = _kernel(Tensor(np.zeros((4, 256), np.float32), device="python").softmax(-1))
    opts = gpu_opts(sm, GPU)
    assert opts[-1].op is OptOps.SPLIT and opts[-1].arg == (64, AxisType.LOCAL, False)  # 4 elements a thread
    other = [*opts[:-1], Opt(OptOps.SPLIT, opts[-1].axis, (128, AxisType.LOCAL, False))]  # not the block's threads
    with pytest.raises(KernelOptError, match="of the GROUP_REDUCE axes' size"):
        lower_kernel(sm, GPU, opts=other)


# ------------------------------------------------------------------------------------------ the emulator


def _buf(slot: int, n: int, space: AddrSpace = AddrSpace.GLOBAL, dt=dtypes.float32) -> UOp:
    return UOp(Ops.BUFFER, (UOp.shape_operand((n,)),), BufferArg(slot, dt, None, space))


def _linear(*roots: UOp) -> UOp:
    from lower.linearize import linearize

    return linearize(UOp.sink(*roots))


def test_group_reduce_tree_and_any_thread_count() -> None:
    """Without warp shuffles (WARP_REDUCE=0; tests/lower/test_gpu_warp.py has them), a full sum shared by 256
    threads folds its partials in a tree: one BARRIER after the partials and one per round (8); a thread count that
    is not a power of two nor whole warps (explicit opts) has every thread fold all partials."""
    a, av = _t(1000)
    with Context(WARP_REDUCE=0):
        (tree,) = run(a.sum(), GPU)[1]
    assert sum(u.op is Ops.BARRIER for u in tree.src) == 9
    assert [u.shape for u in tree.src if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL] == [(256,)]  # type: ignore[union-attr]
    items, _ = schedule([a.sum().uop])
    (it,) = items
    assert it.ast is not None
    lin = lower_kernel(it.ast, GPU, opts=[Opt(OptOps.SPLIT, 0, (10, AxisType.GROUP_REDUCE, False))])
    assert sum(u.op is Ops.BARRIER for u in lin.src) == 1
    res = np.zeros(1, np.float32)
    PY.compile(lin, it.name, GPU)({0: res, 1: av.copy()})
    np.testing.assert_allclose(res[0], av.sum(), rtol=1e-5)


def test_matmul_register_tile() -> None:
    """A matmul with room for it: 16 x 16 threads a block, each a 4 x 4 register tile (16 stores, scalar), the
    reduce loop unrolled by 4; the result is numpy's and the plain device's."""
    (a, av), (b, bv) = _t(64, 12), _t(12, 64)
    opts = gpu_opts(_kernel(a @ b), GPU)
    kinds = [o.arg[1] for o in opts if o.op is OptOps.SPLIT]  # type: ignore[index]
    assert kinds == [AxisType.LOCAL, AxisType.UPCAST, AxisType.LOCAL, AxisType.UPCAST, AxisType.UNROLL], opts
    got, (lin,) = run(a @ b, GPU)
    np.testing.assert_allclose(got, av @ bv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, run(a @ b, PY.default_target())[0], rtol=1e-5, atol=1e-5)
    assert sum(u.op is Ops.STORE and u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL  # type: ignore[union-attr]
               for u in lin.src) == 16
    assert {u.arg: u.src[0].arg[0] for u in lin.src if u.op is Ops.SPECIAL} == \
        {"lidx0": 16, "lidx1": 16}  # type: ignore[index]


@pytest.mark.parametrize("dt,tc", [("float16", "half"), ("bfloat16", "bfloat16")])
def test_tensor_cores_run_the_mma_lane_layout(dt: str, tc: str) -> None:
    """A half (bfloat16) matmul with float accumulation becomes m16n8k16 WMMA, one warp per 16x8 tile, 4 warps a
    block: numpy's product of the same (rounded) inputs, summed in float32."""
    dtype = getattr(dtypes, dt)
    av = rng.standard_normal((64, 48)).astype(np.float32)
    bv = rng.standard_normal((48, 32)).astype(np.float32)
    a, b = Tensor(av, device="python").cast(dtype), Tensor(bv, device="python").cast(dtype)
    for prog in ((a @ b), (a.reshape((64, 48, 1)) * b.reshape((1, 48, 32))).cast(dtypes.float32).sum(1)):
        items, _ = schedule([prog.uop])
        ast = [it.ast for it in items if it.kind == "kernel"][-1]
        assert gpu_opts(ast, GPU)[0] == Opt(OptOps.TC, None, (f"16x8x16 {tc}->float", 1, 1))
    out = prog  # float32 out: no rounding to the inputs' dtype at the end
    got, lins = run(out, GPU)
    lin = lins[-1]
    wmma = [u for u in lin.src if u.op is Ops.WMMA]
    assert len(wmma) == 1 and wmma[0].arg[:3] == (16, 8, 16)  # type: ignore[index]
    # 4 x 4 tiles of 16x8 outputs, one warp each: 2 x 2 blocks of 2 x 2 warps
    assert {u.arg: u.src[0].arg[0] for u in lin.src if u.op is Ops.SPECIAL} == \
        {"gidx0": 2, "gidx1": 2, "lidx0": 32, "lidx1": 2, "lidx2": 2}  # type: ignore[index]
    rounded = run(a.cast(dtypes.float32), PY.default_target())[0], run(b.cast(dtypes.float32), PY.default_target())[0]
    ref = (rounded[0].astype(np.float64) @ rounded[1].astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # the mma's products are exact, its sums float32
    # the plain kernel rounds each product to the inputs' dtype first (the graph says so): close, not equal
    tol = 1e-2 if dt == "float16" else 1e-1
    np.testing.assert_allclose(got, run(out, PY.default_target())[0], rtol=tol, atol=tol)


@pytest.mark.parametrize("tiles", [None, "16x8x16 half->float", ("16x8x16 half->float", 2, 4)])
def test_tensor_core_warp_tiles(tiles: object) -> None:
    """A batched half matmul (2 x 128x32 @ 32xV), direct from global memory (under 64 x 64 outputs; larger ones
    stage through shared memory, tests/lower/test_gpu_smem.py): V = 48 on one multiprocessor, the heuristics give
    each warp 4 x 1 mma tiles (a 64x8 output tile: 4 A fragments and 1 B fragment a k step feed 4 mmas; on sm_90's
    132 the blocks would be too few, so one tile a warp); V = 64 with the bare shape one tile a warp, (shape, 2, 4)
    2 x 4; all of them numpy's float32 sums of the rounded inputs."""
    nv = 48 if tiles is None else 64
    a32, b32 = rng.standard_normal((2, 128, 32)).astype(np.float32), rng.standard_normal((2, 32, nv)).astype(np.float32)
    a = Tensor(a32, device="python").cast(dtypes.float16)
    b = Tensor(b32, device="python").cast(dtypes.float16)
    out = (a.reshape((2, 128, 32, 1)) * b.reshape((2, 1, 32, nv))).cast(dtypes.float32).sum(2)
    tm, tn = {None: (4, 1), "16x8x16 half->float": (1, 1)}.get(tiles, (2, 4))  # type: ignore[call-overload]
    if tiles is None:
        items, _ = schedule([out.uop])
        assert gpu_opts(items[-1].ast, GPU.with_(cores=1))[0] == Opt(OptOps.TC, None, ("16x8x16 half->float", 4, 1))
        assert gpu_opts(items[-1].ast, GPU)[0] == Opt(OptOps.TC, None, ("16x8x16 half->float", 1, 1))
    got, lins = run(out, GPU.with_(cores=1), None if tiles is None else [Opt(OptOps.TC, None, tiles)])
    wmma = [u for u in lins[-1].src if u.op is Ops.WMMA]
    assert len(wmma) == tm * tn and len({w.src[0] for w in wmma}) == tm and len({w.src[1] for w in wmma}) == tn
    # a lane's global loads a k step: 8 for each A fragment, 4 for each B fragment (not 12 for each mma)
    assert sum(u.op is Ops.LOAD and u.src[0].src[0].op is Ops.BUFFER and  # type: ignore[union-attr]
               u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL for u in lins[-1].src) == 8 * tm + 4 * tn  # type: ignore[union-attr]
    ra, rb = (a32.astype(np.float16).astype(np.float64), b32.astype(np.float16).astype(np.float64))
    np.testing.assert_allclose(got, ra @ rb, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tiles", ["16x8x16 half->float", ("16x8x16 half->float", 2, 1), None])
def test_tensor_core_tiles_pad_sizes_they_do_not_divide(tiles: object) -> None:
    """A half matmul of 28 x 27 @ 27 x 13 (k and both axes no multiple of the mma's 16, 8, 16; 28 rows no
    multiple of a 2 x 1 warp tile's 32 either): the tiles pad up to whole mmas, the loads past an axis's end
    gated to read 0 and the stores past it skipped, so the sums are numpy's float32 sums of the rounded inputs
    exactly (quarter values), and no access leaves its buffer (the emulator raises on one that does). The
    heuristics (None) take this form too (60% of the padded work is real); a 2 x 2 output over 3 products would
    be under 1% real work, so it stays on CUDA cores."""
    a32, b32 = (rng.integers(-8, 9, s) / 4 for s in ((28, 27), (27, 13)))
    a, b = (Tensor(v.astype(np.float32), device="python").cast(dtypes.float16) for v in (a32, b32))
    out = (a.reshape((28, 27, 1)) * b.reshape((1, 27, 13))).cast(dtypes.float32).sum(1)
    if tiles is None:
        assert gpu_opts(_kernel(out), GPU)[0].op is OptOps.TC
        tiny = (a[:2, :3].reshape((2, 3, 1)) * b[:3, :2].reshape((1, 3, 2))).cast(dtypes.float32).sum(1)
        assert not any(o.op is OptOps.TC for o in gpu_opts(_kernel(tiny), GPU))
    got, lins = run(out, GPU, None if tiles is None else [Opt(OptOps.TC, None, tiles)])
    assert any(u.op is Ops.WMMA for u in lins[-1].src)
    assert got.shape == (28, 13) and np.array_equal(got, a32 @ b32)
    with pytest.raises(KernelOptError, match="must be a shape, "):
        lower_kernel(_kernel(out), GPU, opts=[Opt(OptOps.TC, None, ("16x8x16 half->float", 0, 1))])


def test_tensor_core_emulation_is_the_ptx_layout() -> None:
    """The emulator's mma reads and writes lane l's fragment element e where PTX puts it (g = l // 4, t = l % 4):
    one nonzero A element times one nonzero B element lands in the one D element of the lane the table names."""
    from devices.python import wmma_m16n8k16

    # (A lane, A e, its row, col) x (B lane, B e, its row, col) -> (D lane, D e); A[row][k] * B[k][col] = D[row][col]
    table = [
        ((0, 0, 0, 0), (0, 0, 0, 0), (0, 0)),  # A[0][0] * B[0][0] -> D[0][0]: lane 0, e 0
        ((5, 6, 9, 10), (5, 2, 10, 1), (4, 3)),  # A[9][10] (l5: g1 t1, e6) * B[10][1] (l5, e2) -> D[9][1]: l4 e3
        ((31, 7, 15, 15), (31, 3, 15, 7), (31, 3)),  # A[15][15] (l31, e7) * B[15][7] (l31, e3) -> D[15][7]: l31 e3
        ((2, 1, 0, 5), (10, 1, 5, 2), (1, 0)),  # A[0][5] (l2: t2, e1) * B[5][2] (l10: g2 t2, e1) -> D[0][2]: l1 e0
    ]
    for (al, ae, _, _), (bl, be, _, _), (dl, de) in table:
        a = [[0.0] * 8 for _ in range(32)]
        b = [[0.0] * 4 for _ in range(32)]
        c = [[0.0] * 4 for _ in range(32)]
        a[al][ae], b[bl][be], c[3][1] = 3.0, 5.0, 0.5  # C: lane 3 (g0 t3), e1 = D[0][7]
        d = wmma_m16n8k16(a, b, c, float)
        want = {(ln, e): 0.0 for ln in range(32) for e in range(4)}
        want[(3, 1)] += 0.5
        want[(dl, de)] += 15.0
        assert {(ln, e): d[ln][e] for ln in range(32) for e in range(4)} == want


def test_truly_nested_reductions_are_not_shared_by_a_block() -> None:
    """sum over i of (max over j of a[i, j] * i-dependent b[i]) in one kernel: the inner max depends on the outer
    loop, so a block's threads may not share either (their partials would belong to different i)."""
    from lower.gpu import _nested

    i, j = UOp.range(300, 1, AxisType.REDUCE), UOp.range(300, 2, AxisType.REDUCE)
    a = _buf(1, 90000)
    inner = UOp(Ops.REDUCE, (a.index(i * 300 + j).load(), j), (Ops.MAX, ()))
    outer = UOp(Ops.REDUCE, (inner, i), (Ops.ADD, ()))
    ast = UOp.sink(_buf(0, 1).index(UOp.const(0)).store(outer))
    assert _nested(ast, inner) and _nested(ast, outer)
    assert gpu_opts(ast, GPU) == []
    k = UOp.range(300, 3, AxisType.REDUCE)
    peak = UOp(Ops.REDUCE, (a.index(k).load(), k), (Ops.MAX, ()))  # does not depend on i or j: may be shared
    flat = UOp(Ops.REDUCE, (a.index(i * 300 + j).load() - peak, i, j), (Ops.ADD, ()))
    ast2 = UOp.sink(_buf(0, 1).index(UOp.const(0)).store(flat))
    assert not _nested(ast2, flat) and not _nested(ast2, peak)
    assert sum(o.op is OptOps.SPLIT and o.arg[1] is AxisType.GROUP_REDUCE for o in gpu_opts(ast2, GPU)) == 2  # type: ignore[index]
    x = rng.standard_normal(90000).astype(np.float32)
    res = np.zeros(1, np.float32)
    PY.compile(lower_kernel(ast2, GPU), "flat", GPU)({0: res, 1: x})
    np.testing.assert_allclose(res[0], (x.astype(np.float64) - x[:300].max()).sum(), rtol=1e-4)


def test_tensor_core_opt_needs_the_targets_tensor_cores() -> None:
    a = Tensor(np.zeros((32, 32), np.float32), device="python").cast(dtypes.float16)
    ast = _kernel(a @ a)
    with pytest.raises(KernelOptError, match="tensor cores are none"):
        lower_kernel(ast, GPU.with_(tensor_cores=()), opts=[Opt(OptOps.TC, None, "16x8x16 half->float")])
    with pytest.raises(KernelOptError, match="does not fit products of float16"):
        lower_kernel(ast, GPU, opts=[Opt(OptOps.TC, None, "16x8x16 bfloat16->float")])


def _layernorm(a: Tensor) -> Tensor:
    d = a - a.mean(-1, keepdim=True)
    return d * ((d * d).mean(-1, keepdim=True) + 1e-5).rsqrt()


def _layernorm_np(v: np.ndarray) -> np.ndarray:
    return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-5)


@pytest.mark.parametrize("name,shape,threads", [("softmax", (4, 300), 64), ("layernorm", (3, 1000), 128),
                                                ("softmax", (2, 4096), 256)])
def test_row_reductions_are_shared_by_a_block_per_row(name: str, shape: tuple[int, int], threads: int) -> None:
    """softmax and layernorm fuse their row statistics into the elementwise kernel. On the GPU each row is one
    block of 256 threads, or fewer where a thread would get under 4 elements of the row: the threads share the
    row's reductions (LOCAL buffers, BARRIERs, outside any loop), then each takes the columns lidx0 + threads k,
    k < 16 unrolled (the same loads and the same exps in every pass over the row: each element is loaded once and
    held in a register); the result is numpy's and the plain device's."""
    from lower.gpu_reduce import is_global_store

    f, ref = (lambda a: a.softmax(-1), _softmax) if name == "softmax" else (_layernorm, _layernorm_np)
    a, av = _t(*shape)
    got, lins = run(f(a), GPU)
    np.testing.assert_allclose(got, ref(av), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, run(f(a), PY.default_target())[0], rtol=1e-5, atol=1e-5)
    (lin,) = lins
    assert {u.arg: u.src[0].arg[0] for u in lin.src if u.op is Ops.SPECIAL} == \
        {"gidx0": shape[0], "lidx0": threads}  # type: ignore[index]
    depth, barrier_depths, stores, loads = 0, set(), [], 0
    for u in lin.src:
        depth += (u.op is Ops.RANGE) - (u.op is Ops.END)
        if u.op is Ops.BARRIER:
            barrier_depths.add(depth)
        if u.op is Ops.STORE and is_global_store(u):
            stores.append(depth)
        loads += u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.BUFFER and \
            u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL
    per_thread = -(-shape[1] // threads)
    assert barrier_depths == {0}  # the reductions once per block
    assert stores == [0] * per_thread and loads == per_thread  # the columns unrolled, each element loaded once


@pytest.mark.parametrize("threads,loads,loops", [(32, 8, 0), (128, 2, 0), (256, 1, 0), (8, 0, 3)])
def test_row_unroll_follows_the_block_size(threads: int, loads: int, loops: int) -> None:
    """lower_grid unrolls a block-per-row kernel's loops over the row whatever block BEAM gives it (its GROUP_REDUCE
    and LOCAL splits resized together): 256 columns on 32 threads are 8 loads a thread, one per element, no loop;
    on 8 threads, 32 a thread is more than ROW_UNROLL: the three passes stay loops, a load each."""
    a, av = _t(4, 256)
    ast = _kernel(a.softmax(-1))
    opts = [Opt(o.op, o.axis, (threads, *o.arg[1:])) if o.op is OptOps.SPLIT else o  # type: ignore[misc]
            for o in gpu_opts(ast, GPU)]
    lin = lower_kernel(ast, GPU, opts=opts)
    depth, depths = 0, []  # the loop depth of each global load
    for u in lin.src:
        depth += (u.op is Ops.RANGE) - (u.op is Ops.END)
        if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.BUFFER and \
                u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL:
            depths.append(depth)
    assert depths == ([0] * loads if loops == 0 else [1] * loops)
    out = np.zeros((4, 256), np.float32)
    PY.compile(lin, "softmax", GPU)({0: out.reshape(-1), 1: av.reshape(-1)})
    np.testing.assert_allclose(out, _softmax(av), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,shape", [("softmax", (4096, 4096)), ("layernorm", (16384, 1024))])
def test_row_reductions_cost_per_element_not_per_row(name: str, shape: tuple[int, int]) -> None:
    """The benchmark shapes, lowered (not run): the estimated work of the GPU kernel is a few dozen ALU ops and
    two passes over memory per element (each element read once, held in a register through the max/mean, the
    sum/variance and the output, which is written once; four before the rows' loops were unrolled); a thread
    per output that recomputes its row's reductions would be O(cols) per element."""
    from lower.estimate import estimate

    f = (lambda a: a.softmax(-1)) if name == "softmax" else _layernorm
    a = Tensor(np.zeros(shape, np.float32), device="python")
    (lin,) = [lower_kernel(it.ast, GPU) for it in schedule([f(a).uop])[0] if it.kind == "kernel"]
    e, n = estimate(lin), prod(shape)
    assert e.flops <= 32 * n, e.flops / n  # softmax's exp once per element: 21 (37 when it was computed twice)
    assert e.mem_bytes <= 2 * 4 * n, e.mem_bytes / n


def _cross_entropy(logits: Tensor, target: np.ndarray) -> Tensor:
    """Mean cross entropy against class indices `target` (its one-hot built on the host)."""
    onehot = np.eye(logits.shape[1], dtype=np.float32)[target]
    return -(logits.log_softmax(1) * Tensor(onehot, device="python")).sum() / logits.shape[0]


def _programs() -> dict[str, Callable[[], Tensor]]:
    def f(*shape: int) -> Tensor:
        return Tensor(rng.standard_normal(shape).astype(np.float32), device="python")

    def i(*shape: int) -> Tensor:
        return Tensor(rng.integers(-9, 9, shape).astype(np.int32), device="python")

    return {
        "argmax": lambda: f(6, 40).argmax(1),
        "cumsum": lambda: f(5, 33).cumsum(1),
        "max_pool": lambda: f(1, 2, 8, 8).max_pool2d((2, 2)),
        "avg_pool": lambda: f(1, 2, 9, 9).avg_pool2d((3, 3)),
        "pad_flip": lambda: f(4, 6).pad(((1, 2), (0, 3))).flip(0),
        "cat_where": lambda: (f(3, 5).cat(f(2, 5)) > 0).where(1.0, -1.0),
        "int_ops": lambda: (i(7, 9) // 4 + i(7, 9) % 3) * 2,
        "bool_any": lambda: (f(4, 300) > 2.5).any(1),
        "log_softmax": lambda: f(4, 20).log_softmax(1),
        "log_softmax_wide": lambda: f(4, 300).log_softmax(1),  # a block per row (shared row reductions)
        "argmax_wide": lambda: f(3, 500).argmax(1),
        "cross_entropy": lambda: _cross_entropy(f(4, 300), np.array([0, 299, 7, 150])),
        "batched_matmul": lambda: f(2, 5, 7) @ f(2, 7, 3),
        "transpose_sum": lambda: f(6, 8).permute(1, 0).sum(0),
    }


PROGRAMS = _programs()


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_more_programs_on_the_emulated_grid(name: str) -> None:
    """More of the suite's kinds of kernel: every one lowers for the GPU target, passes analyze (in compile),
    uses the grid, and computes what the plain python device and the reference evaluator compute."""
    from tensor.tensor import reference_numpy

    out = PROGRAMS[name]()
    got, lins = run(out, GPU)
    plain, _ = run(out, PY.default_target())
    ref = reference_numpy(out)  # the exact evaluator of the tensor graph (numpy)
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, plain, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, plain)
        np.testing.assert_array_equal(got, ref)
    assert _specials(lins) & {"gidx0", "lidx0"}, _specials(lins)


@pytest.mark.parametrize("up", [2, 4])
def test_group_reduce_keeps_a_partial_per_upcast_lane(up: int) -> None:
    """BEAM on the H100 tried the softmax heuristics plus an UPCAST of the rows: each thread then holds one partial
    per row, and they shared the block's n LOCAL slots (the last row's stores won: errors of 400). Each lane now
    has its own slots."""
    x = np.random.default_rng(0).standard_normal((4, 512)).astype(np.float32)
    (item,) = [it for it in schedule([Tensor(x).softmax(-1).uop])[0] if it.kind == "kernel"]
    opts = [*gpu_opts(item.ast, GPU), Opt(OptOps.SPLIT, 0, (up, AxisType.UPCAST, False))]
    got, _ = run(Tensor(x).softmax(-1), GPU, opts)
    want = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(got, want / want.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_statistics_over_several_short_axes_are_shared_by_a_block() -> None:
    """A batch norm's statistics: a sum over (N, H, W) per channel, no axis 256 long. The longest axis (the inner
    of equal ones) is split across the block's threads (32 here: 40 padded to 64), a block per channel, rather than
    one thread walking all of N H W; mean and variance against numpy in the grid emulator."""
    x = rng.standard_normal((40, 3, 3, 4)).astype(np.float32)
    t = Tensor(x, device="python")
    opts = gpu_opts(_kernel(t.sum((0, 2, 3))), GPU)
    groups = [o for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.GROUP_REDUCE]  # type: ignore[index]
    assert [o.arg[0] for o in groups] == [32], opts  # type: ignore[index]
    mean, lins = run(t.mean((0, 2, 3)), GPU)
    assert "lidx0" in _specials(lins)
    np.testing.assert_allclose(mean, x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)
    var, _ = run(t.var((0, 2, 3)), GPU)
    np.testing.assert_allclose(var, x.var((0, 2, 3), ddof=1), rtol=1e-4, atol=1e-5)


def test_mean_loss_over_a_ragged_batch() -> None:
    """cross_entropy's mean over 100 rows beside its backward: the kernel sums the rows in a loop no store moves
    with; sharing that loop among a block's threads padded it to 128 and failed to linearize (the digits CNN's
    training step did not compile for a GPU). Unpadded it takes other opts; against numpy in the grid emulator."""
    from tensor.modules import cross_entropy

    xv = rng.standard_normal((100, 10)).astype(np.float32)
    yv = rng.integers(0, 10, 100).astype(np.int32)
    w = Tensor(np.eye(10, dtype=np.float32), device="python", requires_grad=True)
    loss = cross_entropy(Tensor(xv, device="python") @ w, Tensor(yv, device="python"))
    loss.backward()
    assert w.grad is not None
    items, _ = schedule([w.grad.uop, loss.uop])  # with the gradient, the loss kernel reads the rows' statistics
    for it in items:
        if it.kind == "kernel":
            lower_kernel(it.ast, GPU, name=it.name)  # the failing shape: raised CompilerError
    got, _ = run(loss, GPU)
    e = xv.astype(np.float64) - xv.max(1, keepdims=True)
    want = (np.log(np.exp(e).sum(1)) - e[np.arange(100), yv]).mean()
    np.testing.assert_allclose(got, want, rtol=1e-5)
