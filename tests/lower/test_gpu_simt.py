"""float32/float64 sums of products on CUDA cores staged through shared memory (lower.simt_smem), run by the python
device's grid emulator against numpy (float64) and against the unstaged kernel (the same sums in the same order,
bit for bit) for sizes the block tile does not divide, batches, transposed operands and conv; the structure the
GPU needs; and the heuristics' choice for the benchmark's shapes (inspected, not run)."""

from __future__ import annotations

import numpy as np
import pytest

from devices.base import gpu_target
from devices.linear import base_of
from lower import schedule
from lower.gpu import gpu_opts
from lower.optimize import Opt, OptOps, size
from lower.pipeline import lower_kernel
from lower.simt_smem import apply_simt, simt_match
from lower.tc_smem import pad_for
from rewrite import Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError
from tensor import Tensor
from tests.lower.test_gpu import GPU, run

rng = np.random.default_rng(7)
H100 = gpu_target("sm_90")


def _mm(nu: int, nk: int, nv: int, batch: tuple[int, ...] = (), transposed: str = "",
        dt: type = np.float32) -> tuple[Tensor, np.ndarray]:
    """(batch x) nu x nk @ nk x nv, and numpy's float64 product; `transposed` "b": B given as nv x nk and
    transposed in the graph (q @ k.T), "a": A given as nk x nu."""
    av = rng.standard_normal((*batch, nk, nu) if transposed == "a" else (*batch, nu, nk)).astype(dt)
    bv = rng.standard_normal((*batch, nv, nk) if transposed == "b" else (*batch, nk, nv)).astype(dt)
    a, b = Tensor(av, device="python").contiguous(), Tensor(bv, device="python").contiguous()
    if transposed == "a":
        a, av = a.transpose(-1, -2), np.swapaxes(av, -1, -2)
    if transposed == "b":
        b, bv = b.transpose(-1, -2), np.swapaxes(bv, -1, -2)
    return a @ b, av.astype(np.float64) @ bv.astype(np.float64)


def _local(u: UOp) -> bool:
    b = base_of(u.src[0].src[0]) if u.src[0].op is Ops.INDEX else None
    return b is not None and b.op is Ops.BUFFER and b.arg.addrspace is AddrSpace.LOCAL  # type: ignore[union-attr]


# (nu, nk, nv, (tm, tn, lu, lv, bk), batch, transposed B, dtype)
CASES = [
    (16, 16, 16, (4, 4, 4, 4, 8), (), "", np.float32),  # one block, k in two steps
    (19, 21, 13, (4, 4, 4, 4, 8), (), "", np.float32),  # every edge ragged, rows not 16-byte aligned
    (24, 16, 40, (4, 4, 4, 4, 8), (), "b", np.float32),  # q @ k.T: B copied along k, stored transposed
    (16, 24, 24, (4, 4, 4, 4, 8), (), "a", np.float32),  # A contiguous along its rows: copied as it is
    (20, 24, 18, (4, 4, 4, 4, 8), (2,), "b", np.float32),  # a batch, ragged
    (8, 32, 8, (8, 8, 1, 1, 8), (), "", np.float32),  # one thread of 8 x 8: two 4-wide groups a side
    (16, 24, 16, (4, 2, 4, 8, 8), (), "", np.float64),  # float64: 2-wide (16-byte) groups
]


@pytest.mark.parametrize("nu,nk,nv,cfg,batch,transposed,dt", CASES)
def test_staged_simt_matches_numpy_and_the_plain_loop(nu: int, nk: int, nv: int, cfg: tuple[int, ...],
                                                      batch: tuple[int, ...], transposed: str, dt: type) -> None:
    out, ref = _mm(nu, nk, nv, batch, transposed, dt)
    got, lins = run(out, GPU, [Opt(OptOps.SIMT, None, cfg)])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    plain, _ = run(out, GPU, [])  # one thread an output, the k loop in order, MULACC: the same roundings
    np.testing.assert_array_equal(got, plain)
    lin = lins[-1]
    tm, tn, lu, lv, bk = cfg
    itemsize = np.dtype(dt).itemsize
    locals_ = [u for u in lin.src if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL]  # type: ignore[union-attr]
    pad = pad_for(dtypes.float32 if dt is np.float32 else dtypes.float64)
    assert sorted(u.shape[0] for u in locals_) == sorted([bk * (tm * lu + pad), bk * (tn * lv + pad)])
    assert sum(u.op is Ops.MULACC for u in lin.src) == tm * tn * bk  # a step: bk rounds of the register tile
    steps = -(-nk // bk)
    assert sum(u.op is Ops.BARRIER for u in lin.src) == (2 if steps == 1 else 3)
    # the thread's values at one k are read 16 bytes at a time from the LOCAL tiles
    reads = [u for u in lin.src if u.op is Ops.LOAD and _local(u)]
    w = 16 // itemsize
    assert sorted({u.shape for u in reads}) == [(w,)]
    assert len(reads) == bk * (tm + tn) // w
    specials = {u.arg: u.src[0].arg[0] for u in lin.src if u.op is Ops.SPECIAL}  # type: ignore[index]
    assert specials.get("lidx0", 1) == lv and specials.get("lidx1", 1) == lu
    # A 16-byte piece along k (A contiguous along k, B of q @ k.T) is stored a tile row apart lane by lane, one
    # along the tile's rows as it is: A^T's and B's copies are all contiguous
    strides = {_lane_stride(st, w) for st in lin.src if st.op is Ops.STORE and _local(st) and st.src[1].shape == (w,)}
    a_stride = 1 if transposed == "a" else 16 // itemsize + tm * lu
    b_stride = 16 // itemsize + tn * lv if transposed == "b" else 1
    assert strides == ({a_stride, b_stride} if nu % 8 == nk % 8 == nv % 8 == 0 and not batch else strides)
    assert strides <= {a_stride, b_stride}  # ragged rows (and size-2 batch axes) copy element by element


def _lane_stride(st: UOp, w: int) -> int:
    """How far apart the lanes of a w-lane vector STORE's LOCAL index are."""
    lanes = [u for u in st.src[0].src[1].toposort() if u.op is Ops.VCONST and u.shape == (w,)]
    return int(lanes[0].arg[0][1] - lanes[0].arg[0][0])  # type: ignore[index]


def test_aligned_operands_copy_in_16_byte_chunks() -> None:
    """Rows of a multiple of 8 float32: every copy piece is one 4-lane (16-byte) global load; A (contiguous along
    k) is stored lane by lane into the k-major tile, B (contiguous along its columns) as one 4-lane store."""
    out, ref = _mm(16, 16, 32)
    got, lins = run(out, GPU, [Opt(OptOps.SIMT, None, (4, 4, 4, 8, 16))])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    lin = lins[-1]
    loads = [u for u in lin.src if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and not _local(u) and
             base_of(u.src[0].src[0]).op is Ops.BUFFER and
             base_of(u.src[0].src[0]).arg.addrspace is AddrSpace.GLOBAL]  # type: ignore[union-attr]
    assert loads and all(ld.shape == (4,) for ld in loads)
    stores = [u for u in lin.src if u.op is Ops.STORE and _local(u)]
    strides = sorted({int(np.diff(s.src[0].src[1].src[1].arg[0])[0]) for s in stores  # type: ignore[index]
                      if s.src[0].src[1].op is Ops.ADD and s.src[0].src[1].src[1].op is Ops.VCONST})
    assert strides == [1, 16 + pad_for(dtypes.float32)], strides  # B's chunks whole, A's a k row apart


def test_conv_runs_staged_like_a_matmul() -> None:
    """conv2d (padded 3x3): k is (ci, kh, kw) flattened, the output pixels (n, oh, ow) one axis; the stores are
    contiguous along the pixels, so the input is B (the threads of a warp store along it) and the weights A."""
    xv = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    wv = rng.standard_normal((9, 3, 3, 3)).astype(np.float32)
    out = Tensor(xv, device="python").contiguous().conv2d(Tensor(wv, device="python").contiguous(), padding=1)
    got, _ = run(out, GPU, [Opt(OptOps.SIMT, None, (4, 4, 4, 2, 8))])
    plain, _ = run(out, GPU, [])
    np.testing.assert_array_equal(got, plain)
    xp = np.pad(xv.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 9, 6, 5))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 6, j:j + 5], wv[:, :, i, j].astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    items, _ = schedule([out.uop])
    m = simt_match(items[-1].ast)
    assert [size(r) for r in m.u] == [9] and [size(r) for r in m.v] == [2, 6, 5]
    assert sorted(size(r) for r in m.k) == [3, 3, 3]


def _ast(out: Tensor, last: bool = True) -> list[UOp]:
    items, _ = schedule([out.uop])
    asts = [it.ast for it in items if it.kind == "kernel" and it.ast is not None and
            any(u.op is Ops.REDUCE for u in it.ast.toposort())]
    return asts[-1:] if last else asts


def _zeros(*shape: int, dt: type = np.float32) -> Tensor:
    return Tensor(np.zeros(shape, dt), device="python").contiguous()


def test_heuristics_stage_large_sums_of_products() -> None:
    """matmul 4096 (float32 and float64) and attention's QK^T: 128 x 128 tiles of 16 x 16 threads, 8 x 8 each,
    k 16 a step; attention's PV (64 columns) and conv (64 output channels): 64 x 64 tiles, 4 x 4 each, k 32 a
    step. Under 64 outputs a side or a reduction under 32: lower.gpu's register tile or other heuristics."""
    big, small = (8, 8, 16, 16, 16), (4, 4, 16, 16, 32)
    assert gpu_opts(_ast(_zeros(4096, 4096) @ _zeros(4096, 4096))[0], H100) == [Opt(OptOps.SIMT, None, big)]
    f64 = _ast(_zeros(4096, 4096, dt=np.float64) @ _zeros(4096, 4096, dt=np.float64))[0]
    assert gpu_opts(f64, H100) == [Opt(OptOps.SIMT, None, big)]
    assert gpu_opts(_ast(_zeros(256, 256) @ _zeros(256, 256))[0], H100) == [Opt(OptOps.SIMT, None, small)]
    q, k, v = _zeros(8, 8, 512, 64), _zeros(8, 8, 512, 64), _zeros(8, 8, 512, 64)
    qk, _, pv = _ast((q @ k.transpose(-1, -2) * 0.125).softmax(-1) @ v, last=False)
    assert gpu_opts(qk, H100) == [Opt(OptOps.SIMT, None, big)]
    assert gpu_opts(pv, H100) == [Opt(OptOps.SIMT, None, small)]
    conv = _ast(_zeros(8, 64, 56, 56).conv2d(_zeros(64, 64, 3, 3), padding=1))[0]
    assert gpu_opts(conv, H100) == [Opt(OptOps.SIMT, None, small)]
    # a reduction under 32, 48 rows, and 64 x 64 outputs of a 4096-long reduction (GROUP_REDUCE: a block each)
    for a, b in ((_zeros(64, 12), _zeros(12, 64)), (_zeros(48, 64), _zeros(64, 64)),
                 (_zeros(64, 4096), _zeros(4096, 64))):
        assert all(o.op is not OptOps.SIMT for o in gpu_opts(_ast(a @ b)[0], H100))
    assert gpu_opts(_ast(_zeros(64, 64) @ _zeros(64, 64))[0], H100) == [Opt(OptOps.SIMT, None, small)]


def test_matmul_4096_lowers_to_the_documented_grid() -> None:
    """The heuristics' matmul 4096 LINEAR (lowered, not run): 32 x 32 blocks of 16 x 16 threads, two k-major
    tiles of 16 x (128 + 4) floats (16.5 KiB), 64 accumulators a thread, 16 x 64 fused multiply-adds a k step."""
    lin = lower_kernel(_ast(_zeros(4096, 4096) @ _zeros(4096, 4096))[0], H100)
    specials = {u.arg: u.src[0].arg[0] for u in lin.src if u.op is Ops.SPECIAL}  # type: ignore[index]
    assert specials == {"gidx0": 32, "gidx1": 32, "lidx0": 16, "lidx1": 16}
    bufs = {(u.arg.addrspace, u.shape[0]) for u in lin.src if u.op is Ops.BUFFER}  # type: ignore[union-attr]
    assert (AddrSpace.LOCAL, 16 * 132) in bufs and (AddrSpace.REG, 64) in bufs
    assert sum(u.op is Ops.MULACC for u in lin.src) == 16 * 64


def test_shapes_that_cannot_be_built_say_why() -> None:
    ast = _ast(_mm(16, 16, 16)[0])[0]
    with pytest.raises(KernelOptError, match="multiples of 8"):
        apply_simt(ast, 4, 4, 4, 4, 12)
    with pytest.raises(KernelOptError, match="at most 1024"):
        apply_simt(ast, 8, 8, 64, 32, 8)
    a = Tensor(rng.standard_normal((16, 16)).astype(np.float32), device="python").contiguous()
    with pytest.raises(KernelOptError, match="products"):
        simt_match(_ast((a + 1.0).sum(1))[0])
