"""lower.tc_wgmma's `tma` form (lower.tc_tma): the swizzled tiles copied by the tensor memory accelerator, one
leader thread issuing the boxes, an mbarrier per stage, run by the python device's emulator (devices.python_tma:
a box lands only when a wait completes its barrier's phase, its elements marked in flight until then). Checked:
numpy's products (ragged edges, both dtypes, several warpgroups, 128-wide k steps, m64n256, batches, a B stored
in column panels), the instruction sequence and byte counts, the tensor maps, the hazards (no wait, the wrong
parity, the wrong byte count, every thread issuing) failing, and lowering's refusals."""

from __future__ import annotations

import numpy as np
import pytest

from devices.linear import analyze
from devices.tma import TensorMap, box_place, tensor_maps
from lower import schedule
from lower.gpu import gpu_opts
from lower.optimize import Opt, OptOps
from lower.stages import lower_kernel
from lower.tc_tma import tma_fits
from rewrite import Ops, UOp, dtypes
from rewrite.env import Context
from rewrite.errors import CompileError, DeviceError, KernelOptError
from tensor import Tensor
from tests.lower.test_gpu import GPU, PY, run
from tests.lower.test_gpu_smem import HALF, _mm
from tests.lower.test_gpu_wgmma import BF16, _wgmmas

# (nu, nk, nv, (n, tm, tn, wgu, wgv, bk, stages, swizzle, overlap), dtype, batch)
CASES = [
    (64, 192, 64, (64, 1, 1, 1, 1, 64, 3, 1, 1), "float16", 0),  # overlapped: 3 k steps, 1 copied ahead
    (100, 136, 136, (128, 1, 1, 2, 1, 64, 3, 1, 1), "bfloat16", 0),  # two warpgroups on m; every edge ragged
    (64, 64, 256, (64, 1, 1, 1, 2, 64, 3, 1, 1), "float16", 0),  # two warpgroups on n
    (70, 136, 72, (64, 1, 2, 1, 1, 64, 2, 1, 0), "float16", 0),  # no group in flight; k ragged past a box
    (64, 256, 64, (64, 1, 1, 1, 1, 128, 2, 1, 0), "float16", 0),  # k steps of two boxes of A
    (64, 64, 264, (256, 1, 1, 1, 1, 64, 2, 1, 0), "float16", 0),  # m64n256k16: four boxes of B, columns ragged
    (64, 136, 128, (128, 1, 1, 1, 1, 64, 3, 1, 1), "float16", 2),  # a batch: rank-3 tensor maps
]


@pytest.mark.parametrize("nu,nk,nv,cfg,dt,batch", CASES)
def test_tma_pipelines_match_numpy(nu: int, nk: int, nv: int, cfg: tuple, dt: str, batch: int) -> None:
    out, ref = _mm(nu, nk, nv, dt, batch=batch)
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF if dt == "float16" else BF16, "wgmma", *cfg, 1))])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)  # exact products, float32 sums
    lin = lins[-1]
    n, tm, tn, wgu, wgv, bk, stages, _, overlap = cfg
    assert len(_wgmmas(lin)) == tm * tn * bk // 16
    ins = [u for u in lin.src if u.op is Ops.INS]
    kinds = [u.arg[0] for u in ins]  # type: ignore[index]
    lead = stages - 1 - overlap
    boxes = bk // 64 * -(-64 * tm * wgu // 256) + n * tn * wgv // 64 * -(-bk // 256)
    steps = -(-nk // bk)
    assert kinds == ["mbarrier.init"] * stages + \
        (["mbarrier.expect_tx"] + ["tma.load"] * boxes) * (min(lead, steps) + 1) + ["mbarrier.wait"]
    assert "cp.async" not in str([u.arg for u in lin.src if u.op in (Ops.STORE, Ops.BARRIER)])
    tile_bytes = (64 * tm * wgu + n * tn * wgv) * bk * 2
    assert {u.arg[1] for u in ins if u.arg[0] == "mbarrier.expect_tx"} == {tile_bytes}  # type: ignore[index]
    maps, _ = tensor_maps(lin.src)
    assert len(maps) == 2 and all(m.swizzle == 1 and m.box[0] == 64 for m in maps)
    assert [len(m.dims) for m in maps] == [3 if batch else 2] * 2


def test_the_tensor_maps_describe_the_operands() -> None:
    """A's map: dims (k, m) with rows nk elements apart, boxes of 64 k x BM rows; B's: (n, k), rows nv apart,
    boxes of 64 columns x bk rows; a batch adds a dim at the batch's stride (rank 3, box 1 there)."""
    out, _ = _mm(64, 136, 128, "float16", batch=2)
    items, _ = schedule([out.uop])
    ast = [i for i in items if i.kind == "kernel"][-1].ast
    lin = lower_kernel(ast, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 1, 1, 1, 64, 3, 1, 1, 1))])
    (a, b), _ = tensor_maps(lin.src)
    assert (a.dims, a.strides, a.box) == ((136, 64, 2), (136, 64 * 136), (64, 64, 1))
    assert (b.dims, b.strides, b.box) == ((128, 136, 2), (128, 136 * 128), (64, 64, 1))
    assert a.dtype is dtypes.float16 and a.offset == 0 and b.offset == 0
    args = a.encode_args(1 << 20)
    # CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank 3, strides in bytes, element strides 1, no interleave, 128B swizzle,
    # L2 promotion 256B, zeros out of bounds
    assert args == (6, 3, 1 << 20, (136, 64, 2), (272, 272 * 64), (64, 64, 1), (1, 1, 1), 0, 3, 3, 0)


def test_the_swizzled_box_is_the_wgmma_atom() -> None:
    """A box lands as the Swizzle<3,4,3> atoms wgmma's mode 1 reads: row r's chunk c at c ^ (r % 8)."""
    for r in range(16):
        for i in range(64):
            assert box_place(r, i, 64, 2, 1) == r * 64 + (((i // 8) ^ (r % 8)) * 8) + i % 8
            assert box_place(r, i, 64, 2, 0) == r * 64 + i


def test_a_b_in_column_panels() -> None:
    """B read through 64-column panels (the layout the cpu device packs a matmul's right operand in: element (k, j)
    at (j // 64) nk 64 + k 64 + j % 64) is a rank-3 tensor (64, nk, panels); the product is numpy's."""
    rng = np.random.default_rng(3)
    nu, nk, nv = 64, 128, 128
    av, bv = rng.standard_normal((nu, nk)).astype(np.float16), rng.standard_normal((nk, nv)).astype(np.float16)
    a = Tensor(av, device="python")
    bp = Tensor(np.ascontiguousarray(bv.reshape(nk, nv // 64, 64).transpose(1, 0, 2)), device="python")
    b = bp.permute(1, 0, 2).reshape(nk, nv)
    out = (a.reshape(nu, nk, 1) * b.reshape(1, nk, nv)).cast(dtypes.float32).sum(1)
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 1, 1, 1, 64, 2, 1, 0, 1))])
    np.testing.assert_allclose(got, av.astype(np.float64) @ bv.astype(np.float64), rtol=1e-4, atol=1e-4)
    _, bmap = tensor_maps(lins[-1].src)[0]
    assert (bmap.dims, bmap.strides, bmap.box) == ((64, nk, 2), (64, nk * 64), (64, 64, 1))


def _lowered() -> tuple[UOp, np.ndarray, np.ndarray]:
    out, _ = _mm(64, 256, 64, "float16")
    items, _ = schedule([out.uop])
    lin = lower_kernel([i for i in items if i.kind == "kernel"][-1].ast, GPU,  # type: ignore[arg-type]
                       opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 64, 1, 1, 1, 1, 64, 3, 1, 1, 1))])
    rng = np.random.default_rng(2)
    return lin, rng.standard_normal(64 * 256).astype(np.float16), rng.standard_normal(256 * 64).astype(np.float16)


def _replaced(lin: UOp, old: UOp, new: UOp, listed: list[UOp]) -> UOp:
    """`lin` with `old` replaced by `new`, which reads `listed` (listed just before it where not yet listed)."""
    src = list(lin.substitute({old: new}).src)
    for u in listed:  # moved up where listed later (a CONST is kernel-wide)
        at = src.index(new)
        if u in src[at:]:
            src.remove(u)
        if u not in src:
            src.insert(at, u)
    return UOp(Ops.LINEAR, tuple(src), lin.arg)


def test_hazards_of_the_tma_pipeline() -> None:
    """The same kernel without its wait reads tiles still in flight; waiting for the other parity does too; an
    expect_tx of the wrong byte count never completes its phase; every thread issuing (no leader) arrives more
    often than the barrier's count. Each is a DeviceError naming it."""
    lin, av, bv = _lowered()

    def go(prog: UOp, name: str) -> np.ndarray:
        bufs = {0: np.zeros(64 * 64, np.float32), 1: av.copy(), 2: bv.copy()}
        PY.compile(prog, name)(bufs)
        return bufs[0]

    ref = av.astype(np.float64).reshape(64, 256) @ bv.astype(np.float64).reshape(256, 64)
    np.testing.assert_allclose(go(lin, "good").reshape(64, 64), ref, rtol=1e-4, atol=1e-4)
    wait = next(u for u in lin.src if u.op is Ops.INS and u.arg == ("mbarrier.wait",))
    with pytest.raises(DeviceError, match="TMA copy in flight"):
        go(lin.substitute({wait: UOp(Ops.BARRIER, wait.src[2:])}), "no_wait")
    parity = wait.src[1]
    one = UOp.const(1, parity.dtype)
    with pytest.raises(DeviceError, match="TMA copy in flight"):
        go(_replaced(lin, parity, parity + one, [parity, one]), "other_parity")
    expects = [i for i, u in enumerate(lin.src) if u.op is Ops.INS and u.arg[0] == "mbarrier.expect_tx"]  # type: ignore[index]
    short = lin
    for i in expects:  # one at a time: each rebuilds the instructions after it
        e = short.src[i]
        short = short.substitute({e: UOp(Ops.INS, e.src, (e.arg[0], e.arg[1] - 2048))})  # type: ignore[index]
    with pytest.raises(DeviceError, match="never returns"):
        go(short, "short")
    leader = lin.src[expects[0]].src[1]  # thread 0 (the loop's copies gate it further)
    with pytest.raises(DeviceError, match="an arrival past the 1"):
        go(lin.substitute({leader: UOp.const(True)}), "everyone")


def test_the_heuristics_take_tma_with_the_knob() -> None:
    """WGMMA=1 TMA=1: the heuristics' swizzled wgmma config gets tma 1; without TMA it does not; a kernel whose
    operand is not an affine tensor (a gathered row) keeps cp.async."""
    out, _ = _mm(256, 512, 512, "float16")
    items, _ = schedule([out.uop])
    ast = [i for i in items if i.kind == "kernel"][-1].ast
    assert ast is not None and tma_fits(ast)
    with Context(WGMMA=True, TMA=True):
        assert gpu_opts(ast, GPU)[0].arg == (HALF, "wgmma", 256, 1, 1, 2, 1, 64, 4, 1, 1, 1)
    with Context(WGMMA=True):
        assert gpu_opts(ast, GPU)[0].arg == (HALF, "wgmma", 256, 1, 1, 2, 1, 64, 4, 1, 1)


def test_lowering_refuses_what_tma_cannot_copy() -> None:
    """tma needs the 128-byte swizzle; an operand index that is not affine (a flip) is refused with a
    KernelOptError that says to use the cp.async form."""
    out, _ = _mm(64, 128, 64, "float16")
    items, _ = schedule([out.uop])
    ast = [i for i in items if i.kind == "kernel"][-1].ast
    with pytest.raises(KernelOptError, match="needs swizzle 1"):
        lower_kernel(ast, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 64, 1, 1, 1, 1, 64, 2, 0, 0, 1))])
    rng = np.random.default_rng(4)
    a = Tensor(rng.standard_normal((64, 128)).astype(np.float16), device="python")
    b = Tensor(rng.standard_normal((128, 64)).astype(np.float16), device="python").flip(0)
    flipped = (a.reshape(64, 128, 1) * b.reshape(1, 128, 64)).cast(dtypes.float32).sum(1)
    items, _ = schedule([flipped.uop])
    ast = [i for i in items if i.kind == "kernel"][-1].ast
    assert ast is not None and not tma_fits(ast)
    with pytest.raises(KernelOptError, match="tma"):
        lower_kernel(ast, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 64, 1, 1, 1, 1, 64, 2, 1, 0, 1))])


def test_malformed_tma_instructions_are_compile_errors() -> None:
    """The LINEAR check names what is wrong with a TMA instruction: a box wider than 256, a stride of no whole
    16 bytes, an unknown INS."""
    lin, _, _ = _lowered()
    load = next(u for u in lin.src if u.op is Ops.INS and u.arg[0] == "tma.load")  # type: ignore[index]
    dims, strides, box, sw = load.arg[1:]  # type: ignore[index]
    for arg, msg in [(("tma.load", dims, strides, (64, 512), sw), "at most 256"),
                     (("tma.load", dims, (strides[0] + 1,), box, sw), "multiples of 16 bytes"),
                     (("tma.load", dims, strides, (32, 64), sw), "rows of 128 bytes")]:
        with pytest.raises(CompileError, match=msg):
            analyze(lin.substitute({load: UOp(Ops.INS, load.src, arg)}), "python", PY.supported_ops)
    with pytest.raises(CompileError, match="known instructions"):
        analyze(lin.substitute({load: UOp(Ops.INS, load.src, ("tma.store", *load.arg[1:]))}),  # type: ignore[index]
                "python", PY.supported_ops)
    assert isinstance(TensorMap(1, 0, dtypes.float16, (8,), (), (8,), 0).encode_args(0), tuple)


def test_a_tile_taller_than_a_box_takes_several_boxes() -> None:
    """A block tile of 512 rows (4 warpgroups of 2 m64 tiles) is copied as boxes of at most 256 rows: two per
    64-wide k atom of A, the second 256 rows further in the matrix and 256 swizzled rows (32 KiB) further in
    shared memory; a ragged 300-row matrix (the second box mostly past it, zero-filled) gives numpy's product."""
    out, _ = _mm(512, 64, 64, "float16")
    items, _ = schedule([out.uop])
    ast = [i for i in items if i.kind == "kernel"][-1].ast
    lin = lower_kernel(ast, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 64, 2, 1, 4, 1, 64, 2, 1, 0, 1))])
    (a, b), of = tensor_maps(lin.src)
    assert a.box == (64, 256) and b.box == (64, 64)
    a_loads = [u for u in lin.src if u.op is Ops.INS and u.arg[0] == "tma.load" and of[u] == 0]  # type: ignore[index]
    # one block of rows: the prologue's copies of step 0 and the loop's of step ko + 1, two boxes of A each
    rows = sorted(int(u.src[5].arg[0]) for u in a_loads if u.src[5].op is Ops.CONST)  # type: ignore[index]
    assert rows == [0, 0, 256, 256], rows
    dsts = sorted(int(u.src[0].src[1].arg[0]) for u in a_loads if u.src[0].src[1].op is Ops.CONST)  # type: ignore[index]
    assert dsts == [0, 256 * 64, 512 * 64, 768 * 64], dsts  # stages 0 and 1 (512 x 64 elements apart)
    ragged, ref = _mm(300, 64, 64, "float16")
    got, _ = run(ragged, GPU, [Opt(OptOps.TC, None, (HALF, "wgmma", 64, 2, 1, 4, 1, 64, 2, 1, 0, 1))])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
