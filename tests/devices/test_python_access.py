"""The grid emulator's memory counts (devices.python_access, ACCESSSTATS): the bank and sector rules on hand-made
warp requests, hand-built kernels whose wavefronts and sectors are counted by hand, and the staged matmuls of
lower.tc_smem, lower.tc_async and lower.simt_smem, whose docstrings claim conflict-free fragment reads."""

from __future__ import annotations

import numpy as np
import pytest

from devices.python_access import KernelAccess, access_stats, bank_wavefronts, counting, sector_count
from lower import schedule
from lower.optimize import Opt, OptOps
from lower.stages import lower_kernel
from rewrite import Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from tensor import Tensor
from tests.devices.test_python_races import _after, _lid, _staged_matmul
from tests.lower.test_gpu import GPU, PY, _buf, _linear

# ------------------------------------------------------------------------------------------ the rules alone

@pytest.mark.parametrize("accesses,want", [
    ([(ln, 4 * ln, 4) for ln in range(32)], (1, 1)),  # consecutive words: every bank once
    ([(ln, 8 * ln, 4) for ln in range(32)], (2, 1)),  # stride 2 words: lanes l and l + 16 share a bank
    ([(ln, 128 * ln, 4) for ln in range(32)], (32, 1)),  # stride 32 words: all in bank 0
    ([(ln, 0, 4) for ln in range(32)], (1, 1)),  # one word: a broadcast
    ([(ln, 2 * ln, 2) for ln in range(32)], (1, 1)),  # 16-bit elements: two lanes a word
    ([(ln, 64 * (ln % 2), 4) for ln in range(32)], (1, 1)),  # two words, banks 0 and 16
    ([(ln, 16 * ln, 16) for ln in range(32)], (4, 4)),  # 16 bytes each: 4 phases of 8 lanes, 128 bytes each
    ([(ln, 32 * ln, 16) for ln in range(32)], (8, 4)),  # 16 bytes at stride 32: each phase spans 256 bytes
    ([(ln, 8 * ln, 8) for ln in range(32)], (2, 2)),  # 8 bytes each: 2 half-warps of 16 lanes
    ([(ln, 16 * ln, 8) for ln in range(16)], (2, 1)),  # 8 bytes at stride 16, one half-warp: 2-way
    ([(3, 100, 4)], (1, 1)),  # one active lane
])
def test_bank_rule(accesses: list, want: tuple[int, int]) -> None:
    assert bank_wavefronts(accesses) == want


@pytest.mark.parametrize("accesses,want", [
    ([(ln, 4 * ln, 4) for ln in range(32)], (4, 4)),  # 128 aligned bytes
    ([(ln, 4 * ln + 16, 4) for ln in range(32)], (5, 4)),  # the same, misaligned by 16 bytes
    ([(ln, 32 * ln, 4) for ln in range(32)], (32, 4)),  # a sector a lane
    ([(ln, 0, 4) for ln in range(32)], (1, 1)),  # a broadcast
    ([(ln, 16 * ln, 16) for ln in range(32)], (16, 16)),  # 16 bytes a lane, contiguous
    ([(ln, 2 * ln, 2) for ln in range(32)], (2, 2)),  # 64 bytes of halves
    ([(ln, 8 * ln, 4) for ln in range(32)], (8, 4)),  # every other float
])
def test_sector_rule(accesses: list, want: tuple[int, int]) -> None:
    assert sector_count(accesses) == want


# ------------------------------------------------------------------------------------------ hand-built kernels

def _count(root: UOp, arrays: dict[int, np.ndarray]) -> KernelAccess:
    with counting() as got:
        PY.compile(_linear(root), "k", GPU)(arrays)
    assert len(got) == 1
    return got[0]


def _through_shared(stride: int, threads: int = 32) -> KernelAccess:
    """Thread t stores in[t] at shared element stride * t, and after a BARRIER reads it back into out[t]: one store
    and one load request per warp, float32 (4 bytes) elements."""
    out, inp, sm = _buf(0, threads), _buf(1, threads), _buf(0, stride * threads, AddrSpace.LOCAL)
    t = _lid(threads)
    put = sm.index(t * stride).store(inp.index(t).load())
    x = np.arange(threads, dtype=np.float32)
    res = np.zeros(threads, np.float32)
    k = _count(out.index(t).store(_after(sm, put).index(t * stride).load()), {0: res, 1: x})
    np.testing.assert_array_equal(res, x)
    return k


@pytest.mark.parametrize("stride,wavefronts", [(1, 2), (2, 4), (32, 64), (33, 2)])
def test_shared_conflicts(stride: int, wavefronts: int) -> None:
    """Stride 1 is conflict-free, 2 a 2-way conflict, 32 a 32-way one (every lane in bank 0), 33 (a padded row)
    conflict-free again; the two requests' ideal is one wavefront each. Global: 128 contiguous bytes each way."""
    k = _through_shared(stride)
    assert (k.shared_requests, k.wavefronts, k.ideal_wavefronts) == (2, wavefronts, 2)
    assert (k.global_requests, k.sectors, k.ideal_sectors) == (2, 8, 8)
    worst = k.worst("shared")
    assert (worst is None) == (wavefronts == 2)
    if worst is not None:
        assert (worst.requests, worst.cost, worst.ideal) == (1, wavefronts // 2, 1)


def test_a_broadcast_and_warps_apart() -> None:
    """64 threads (2 warps) all read shared element 0, which thread 0 stored: one wavefront a warp. Each warp is
    its own request, so the store (one active lane) and the loads are 1 + 2 requests."""
    out, sm = _buf(0, 64), _buf(0, 1, AddrSpace.LOCAL)
    t = _lid(64)
    put = sm.index(UOp.const(0)).store(UOp.const(5.0), t.eq(UOp.const(0)))
    res = np.zeros(64, np.float32)
    k = _count(out.index(t).store(_after(sm, put).index(UOp.const(0)).load()), {0: res})
    assert (res == 5).all()
    assert (k.shared_requests, k.wavefronts, k.ideal_wavefronts) == (3, 3, 3)
    assert (k.global_requests, k.sectors, k.ideal_sectors) == (2, 8, 8)


@pytest.mark.parametrize("stride,sectors", [(1, 4), (2, 8), (8, 32)])
def test_global_strides(stride: int, sectors: int) -> None:
    """out[t] = in[stride * t] for 32 threads: the load touches 4, 8 or 32 sectors for its 128 bytes (ideal 4);
    the store is coalesced."""
    out, inp = _buf(0, 32), _buf(1, 32 * stride)
    t = _lid(32)
    x = np.arange(32 * stride, dtype=np.float32)
    res = np.zeros(32, np.float32)
    k = _count(out.index(t).store(inp.index(t * stride).load()), {0: res, 1: x})
    np.testing.assert_array_equal(res, x[::stride])
    assert (k.global_requests, k.sectors, k.ideal_sectors) == (2, sectors + 4, 8)
    assert k.shared_requests == 0


def test_each_block_is_its_own_requests() -> None:
    """out[b * 64 + t] = in[b * 64 + t] over 4 blocks of 64 threads: 8 warps, each one load and one store request
    of 128 bytes (4 sectors)."""
    out, inp = _buf(0, 256), _buf(1, 256)
    t, b = _lid(64), UOp(Ops.SPECIAL, (UOp.const(4),), "gidx0")
    x = np.arange(256, dtype=np.float32)
    res = np.zeros(256, np.float32)
    k = _count(out.index(b * 64 + t).store(inp.index(b * 64 + t).load()), {0: res, 1: x})
    np.testing.assert_array_equal(res, x)
    assert [(i.kind, i.requests, i.cost, i.ideal) for i in k.instrs] == [("load", 8, 32, 32), ("store", 8, 32, 32)]


def test_gated_lanes_move_nothing() -> None:
    """Only the even threads load (a gate): 16 lanes' floats at stride 8 bytes, 4 sectors for 64 bytes (ideal 2)."""
    out, inp = _buf(0, 32), _buf(1, 32)
    t = _lid(32)
    even = (t % 2).eq(UOp.const(0))
    res = np.zeros(32, np.float32)
    k = _count(out.index(t).store(inp.index(t).load(UOp.const(0.0), even)), {0: res, 1: np.ones(32, np.float32)})
    load = [i for i in k.instrs if i.kind == "load"]
    assert [(i.requests, i.cost, i.ideal) for i in load] == [(1, 4, 2)]


def test_off_by_default_and_cost_free() -> None:
    """Without the knob nothing is counted and the kernel runs its plain steps."""
    from devices.python_access import reset_access_stats

    reset_access_stats()
    lin, arrays, _ = _staged_matmul()
    kern = PY.compile(lin, "staged")
    plain = list(kern.steps)
    kern(arrays)
    assert access_stats() == [] and kern.steps == plain


# ------------------------------------------------------------------------------------------ lowered kernels

def _shared(k: KernelAccess, kind: str) -> list:
    return [i for i in k.instrs if i.space == "shared" and i.kind == kind]


def test_staged_tensor_core_matmul() -> None:
    """lower.tc_smem's kernel (64 x 64 x 64 half, 2 x 2 warps of 2 x 4 mmas, k 16 a step). Its docstring claims
    the 16-byte row padding puts a fragment read's lanes on distinct banks: every fragment LOAD from shared memory
    costs its ideal. So do the tile copies' 16-byte stores: the A tile's rows are bk + 8 = 24 halves (48 bytes, 3
    16-byte units) apart and a row is 2 chunks, so a quarter-warp's 8 chunks along the rows (rows 0-3) would land on
    units 0, 1, 3, 4, 6, 7, 9, 10: bank group 1 twice (measured before: 32 wavefronts for an ideal 16 in the first
    copy, 96 for 48 in the loop's); the copies walk 8 rows a column instead (lower.tc_smem.padded_down), units 0, 3,
    6, ..., 21: 8 distinct groups. B's rows (64 + 8 halves, 144 bytes) hold a quarter-warp's 8 chunks each. The
    result stores of the mma's C layout (rows g, columns 2t + e) pair e = 0, 1 into one 8-byte store a lane: 8
    rows of 32 bytes a request, whole sectors (one float a lane was 8 sectors for 4 sectors' bytes, 32 requests)."""
    lin, arrays, want = _staged_matmul()
    with counting() as got:
        PY.compile(lin, "staged")(arrays)
    np.testing.assert_array_equal(arrays[0], want)
    k = got[0]
    frags = _shared(k, "load")
    # a k slice: 2 A fragments of 8 elements, 4 B fragments of 4, each element a 2-byte load
    assert len(frags) == 2 * 8 + 4 * 4 and all(i.cost == i.ideal for i in frags)  # the docstring's claim holds
    stores = sorted((i.requests, i.cost, i.ideal) for i in _shared(k, "store"))
    assert stores == [(4, 16, 16), (4, 16, 16), (12, 48, 48), (12, 48, 48)]
    out = [i for i in k.instrs if i.space == "global" and i.kind == "store"]
    assert len(out) == 16 and all((i.cost, i.ideal) == (32, 32) for i in out)
    assert all(i.cost == i.ideal for i in k.instrs if i.space == "global" and i.kind == "load")


def _lowered(out: Tensor, target: object, opts: list[Opt]) -> tuple[UOp, list[np.ndarray]]:
    items, _ = schedule([out.uop])
    k = [i for i in items if i.kind == "kernel"][-1]
    return lower_kernel(k.ast, target, opts=opts), [np.zeros(int(np.prod(b.shape)), np.float32) for b in k.bufs]


def test_async_tensor_core_matmul_ldmatrix() -> None:
    """lower.tc_async's kernel (cp.async copies, ldmatrix fragments), 64 x 64 x 64 half, k 32 a step: its
    ldmatrix reads are conflict-free (A's rows 80 bytes apart start on banks 0, 20, 8, 28, 16, 4, 24, 12), the
    copies' global reads whole sectors, and the cp.async copies into the A tile too: a row is 4 chunks of 16 bytes,
    so 8 chunks along the rows (rows 0 and 1) would put row 1's last chunk (bytes 128-143) on row 0's first chunk's
    banks 0-3 (measured before: 32 wavefronts for an ideal 16 in each of the 4 A copy instructions); a quarter-warp
    copies rows 0-7 at one column instead, 80 bytes apart: 8 distinct bank groups. B's rows are 8 chunks, one
    quarter-warp each."""
    rng = np.random.default_rng(5)
    av, bv = (rng.integers(-3, 4, (64, 64)).astype(np.float16) for _ in range(2))
    a, b = Tensor(av, device="python").contiguous(), Tensor(bv, device="python").contiguous()
    out = (a.reshape(64, 64, 1) * b.reshape(1, 64, 64)).cast(dtypes.float32).sum(1)
    lin, _ = _lowered(out, GPU, [Opt(OptOps.TC, None, ("16x8x16 half->float", 2, 4, 2, 2, 32, 3))])
    arrays = {0: np.zeros(64 * 64, np.float32), 1: av.reshape(-1), 2: bv.reshape(-1)}
    with counting() as got:
        PY.compile(lin, "async")(arrays)
    np.testing.assert_array_equal(arrays[0], (av.astype(np.float64) @ bv.astype(np.float64)).reshape(-1))
    k = got[0]
    ldm = _shared(k, "ldmatrix")
    # a k slice: 2 A fragments by x4, 4 B fragments by 2 x4.trans (4 x2.trans before: 12 instructions, 96 requests)
    assert len(ldm) == 2 * (2 + 2) and sum(i.requests for i in ldm) == 64 and all(i.cost == i.ideal for i in ldm)
    copies = sorted((i.requests, i.cost, i.ideal) for i in _shared(k, "store"))
    assert copies == [(4, 16, 16)] * 8
    assert all(i.cost == i.ideal for i in k.instrs if i.space == "global")  # the result stores paired too


def test_simt_staged_matmul() -> None:
    """lower.simt_smem's kernel (64 x 64 x 64 float32, 16 x 16 threads of 4 x 4, k 16 a step). Its docstring
    claims each thread's 16-byte reads of `As` and `Bs` are conflict-free or broadcasts: every shared LOAD costs
    its ideal. A thread's 4 adjacent results of a row are one 16-byte store: a warp's stores are 2 rows' 256
    consecutive bytes (ideal; 4 float stores 16 bytes apart were 4x their sectors). The copies move 16-byte pieces,
    consecutive lanes on consecutive pieces of a row: global loads at their ideal (8-float chunks were two 16-byte
    loads 32 bytes apart a lane, 2x), and so B's 16-byte shared stores. A's pieces along k, stored lane by lane into
    the k-major tile (rows 68 floats apart), go 2 of a row then the next row's 2, so a warp's lanes land on 32
    distinct banks (in row order pieces 0 and 2 of a row shared banks: 2-way). Every access at its ideal."""
    rng = np.random.default_rng(6)
    av, bv = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))
    a, b = Tensor(av, device="python").contiguous(), Tensor(bv, device="python").contiguous()
    lin, _ = _lowered(a @ b, GPU, [Opt(OptOps.SIMT, None, (4, 4, 16, 16, 16))])
    arrays = {0: np.zeros(64 * 64, np.float32), 1: av.reshape(-1), 2: bv.reshape(-1)}
    with counting() as got:
        PY.compile(lin, "simt")(arrays)
    np.testing.assert_allclose(arrays[0], (av.astype(np.float64) @ bv.astype(np.float64)).reshape(-1), rtol=1e-4,
                               atol=1e-4)
    k = got[0]
    reads = _shared(k, "load")
    assert reads and all(i.cost == i.ideal for i in reads), [i for i in reads if i.cost != i.ideal]
    outs = [i for i in k.instrs if i.space == "global" and i.kind == "store"]
    assert len(outs) == 4 and all(i.cost == i.ideal for i in outs), outs
    loads = [i for i in k.instrs if i.space == "global" and i.kind == "load"]
    assert len(loads) == 4 and all(i.cost == i.ideal for i in loads), loads
    copies = _shared(k, "store")
    assert len(copies) == 4 and all(i.cost == i.ideal for i in copies), copies
    assert (k.wavefronts, k.sectors) == (k.ideal_wavefronts, k.ideal_sectors)


@pytest.mark.parametrize("swizzle", [0, 1])
def test_wgmma_matmul(swizzle: int) -> None:
    """lower.tc_wgmma's kernel with the heuristics' big config (m64n128k16, 2 warpgroups, 64-wide k steps), 128 x 64
    x 256 half, in the interleaved core-matrix layout (swizzle 0) and the 128-byte swizzle (1): each wgmma's core
    matrices are read at their ideal (one wavefront each), and so are the cp.async copies. Swizzle 0 used to hand a
    quarter-warp the 8 chunks of one row, which are K-neighbouring core matrices 128 bytes apart (one bank group):
    an 8-way conflict (measured: 3072 wavefronts for 384); the copies now walk 8 rows a column, one core matrix a
    quarter-warp. In the swizzle the 8 chunks of a row sit on 8 distinct 16-byte columns either way."""
    from tests.lower.test_gpu import run
    from tests.lower.test_gpu_smem import HALF, _mm

    out, ref = _mm(128, 64, 256, "float16")
    with counting() as got:
        res, _ = run(out, GPU, [Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 2, 2, 1, 64, 4, swizzle, 0))])
    np.testing.assert_allclose(res, ref, rtol=1e-5, atol=1e-5)
    k = got[-1]
    reads = _shared(k, "wgmma")
    assert reads and all(i.cost == i.ideal for i in reads)
    copies = _shared(k, "store")
    assert sum(i.ideal for i in copies) == 384 and all(i.cost == i.ideal for i in copies)
    assert all(i.cost == i.ideal for i in k.instrs if i.space == "global")  # the result stores paired (8 bytes)
