"""Hopper warpgroup tensor cores (PTX wgmma.mma_async, sm_90a) fed by lower.tc_async's cp.async pipeline.

`apply_tc_wgmma(ast, shape, n, tm, tn, wgu, wgv, bk, stages, swizzle, overlap, tma)` (OptOps.TC with arg (shape,
"wgmma", n, tm, tn, wgu, wgv, bk, stages[, swizzle, overlap[, tma]]), 0 where left out; chosen by the heuristics
only with the WGMMA knob on an sm_90 target, since no GPU has run it yet) rewrites the kernel lower.wmma matches
(a float32 sum of products of half or bfloat16 x and y) into one block per BM x BN output tile, BM = 64 tm wgu,
BN = n tn wgv: wgu x wgv warpgroups of 4 warps (128 threads, LOCAL axes beside the WARP lanes, so a warpgroup is 4
consecutive warps), each a (64 tm) x (n tn) tile of `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{f16|bf16}.{f16|bf16}`
(n a multiple of 8, at most 256: a thread holds n / 2 accumulators of each). A and B come from shared memory
through matrix descriptors (swizzle 0: the PTX ISA's "interleave" canonical layouts of core matrices of 8 rows x
16 bytes, 128 contiguous bytes each):

  A (BM x bk, K-major): element (m, k) at (m // 8) 8 bk + (k // 8) 64 + (m % 8) 8 + k % 8, so the leading byte
      offset (LBO, between K-neighbouring core matrices) is 128 and the stride byte offset (SBO, between 8-row
      groups) 16 bk;
  B (bk x BN, MN-major, the descriptor's transpose bit set): element (k, j) at (j // 8) 8 bk + (k // 8) 64 +
      (k % 8) 8 + j % 8: LBO 128 (between 8-row groups of k), SBO 16 bk (between groups of 8 columns).

Either way a 16-byte chunk of 8 consecutive elements of a global row (A along k, B along n) is one core-matrix
row, so the copies are lower.tc_async's cp.async chunks (lower.tc_smem._copy_tile with `place`), `stages` deep
(prologue, wait, copies of step ko + stages - 1, commit, as there). A core matrix is 128 contiguous bytes, its 8
rows on the 8 groups of 4 banks, while a row's K-neighbouring chunks are 128 bytes apart (one bank group), so the
chunks go to threads down the rows (`down` 8): lane l of a warp copies row l % 8 of the tile's 8-row group, chunk
l // 8 along it, a quarter-warp's 8 stores one core matrix (conflict-free), a warp's 32 loads 8 rows' 64 contiguous
bytes each (whole 32-byte sectors). Each k step:

  BARRIER ("cp.async.wait", stages - 2, "proxy"): the step's tiles have landed; each thread's writes are made
      visible to the async proxy (fence.proxy.async.shared::cta), then __syncthreads;
  the next copies and their commit; BARRIER "wgmma.fence" (PTX: before the first wgmma.mma_async and after any
      other access of the accumulator registers);
  per k slice of 16, per (i, j) of the warpgroup tile: one WMMA ("wgmma", n, dtype, (128, 16 bk, 0), (128, 16 bk,
      1)) of the INDEXes of A's and B's first elements and the n / 2 accumulators, chained in k;
  the accumulator stores, BARRIER "wgmma.commit" (commit_group), BARRIER ("wgmma.wait", 0) (wait_group 0: this
      step's reads of the stage are done before any thread's cp.async overwrites it, after the next step's
      __syncthreads).

With swizzle 1 (bk and n multiples of 64) both tiles are in the 128-byte swizzle instead (descriptor mode 1): rows
of 64 elements (128 bytes) in atoms of 8 rows (1024 bytes, 1024-aligned: devices.cuda_render aligns the buffers),
the 16-byte chunk c of row r stored at chunk c ^ (r % 8) (Swizzle<3,4,3> on the byte address), so the 8 chunks a
quarter-warp copies into a row (`down` 1, lane l at chunk l % 8) land in 8 different bank groups. A is K-major in
64-wide k atoms (element (m, k) of atom k // 64 at row m, SBO 1024, LBO unused), a k slice's descriptor starting
kk % 64 elements into its rows; B is MN-major in 64-column atoms of bk rows (element (k, j) at row k of atom j // 64,
LBO 128 bk bytes between atoms, SBO 1024 between 8-row groups of k).

With overlap 1 (3 stages or more) a step's wgmma group is left in flight: ("wgmma.wait", 1) retires the previous
step's group instead of its own, and the copies run one step less ahead (the prologue fills stages - 2 stages,
the wait lets stages - 3 groups of copies pend, step ko's copies go to the stage step ko - 2 read, which every
warpgroup's wait has retired before the step's __syncthreads); ("wgmma.wait", 0) after the loop lands the last.

With tma 1 (and swizzle 1) the tiles are copied by the tensor memory accelerator instead, one thread issuing the
boxes and every thread waiting on the stage's mbarrier (lower.tc_tma's pipeline), into the same swizzled atoms.

The output stores follow the m64nN f32 accumulator layout (devices.python_gpu.wgmma_place: thread 32 w + l holds
element 4 j + e at row 16 w + l // 4 + 8 ((e // 2) % 2), column 8 j + 2 (l % 4) + e % 2), gated where the block
tile does not divide the output (the copies zero-fill past the matrix, as in lower.tc_async). Sums: each output is
C + the products of a k slice in k order, slice after slice, as the emulator (devices.python_wgmma) adds them.
"""

from __future__ import annotations

from collections.abc import Callable

from lower.opt_apply import next_range_id, size
from lower.tc_async import COMMIT, async_fits, prologue
from lower.tc_smem import _copy_tile, store_results
from lower.tc_tma import tma_pipeline
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError

WGMMA_SHAPES = ("16x8x16 half->float", "16x8x16 bfloat16->float")  # the 16-bit mma.sync shapes it replaces
CORE = 64  # elements of a core matrix (8 rows x 16 bytes of a 16-bit type)
ATOM = 64  # 16-bit elements of a 128-byte row of the 128-byte swizzle's 8-row atoms


def wgmma_arg(arg: object) -> tuple[str, int, int, int, int, int, int, int, int, int, int] | None:
    """(shape, n, tm, tn, wgu, wgv, bk, stages, swizzle, overlap, tma) of a TC arg (shape, "wgmma", n, tm, tn, wgu,
    wgv, bk, stages[, swizzle, overlap[, tma]]) (the fields left out are 0), None for any other TC arg."""
    if isinstance(arg, tuple) and len(arg) in (9, 11, 12) and arg[1] == "wgmma" and isinstance(arg[0], str) and \
            all(isinstance(x, int) for x in arg[2:]):
        return (arg[0], *arg[2:], *(0,) * (12 - len(arg)))
    return None


def wgmma_stages(cfg: tuple[int, int, int, int, int, int], smem_bytes: int, want: int) -> int:
    """The most stages, at most `want`, whose tiles (n, tm, tn, wgu, wgv, bk of 16-bit elements) fit in
    `smem_bytes` (0: not even 2)."""
    n, tm, tn, wgu, wgv, bk = cfg
    per_stage = (64 * tm * wgu + n * tn * wgv) * bk * 2
    return next((s for s in range(want, 1, -1) if s * per_stage <= smem_bytes), 0)


def wgmma_config(nu: int, nv: int, nk: int, smem_bytes: int) -> tuple | None:
    """The heuristics' wgmma config (n, tm, tn, wgu, wgv, bk, stages, swizzle, overlap) for nu x nv outputs of a
    reduction nk long: 128 x 256 block tiles of 2 warpgroups (64 x 256 each: one m64n256k16 a k slice) over 64-wide k
    steps, 4 stages where they fit, for outputs that fill such tiles; 64 x 128 tiles of one warpgroup otherwise;
    the 128-byte swizzle where the k step is 64 wide, one wgmma group in flight from 3 stages. None under 64 x 64
    outputs or a reduction under 16."""
    if nu < 64 or nv < 64 or nk < 16:
        return None
    bk = 64 if nk >= 256 else 32 if nk >= 32 else 16
    cfg = (256, 1, 1, 2, 1, bk) if nu >= 128 and nv >= 256 else (128, 1, 1, 1, 1, bk)
    stages = wgmma_stages(cfg, smem_bytes, 4)
    return (*cfg, stages, int(bk % 64 == 0), int(stages >= 3)) if stages else None


def apply_tc_wgmma(ast: UOp, shape: str, n: int, tm: int, tn: int, wgu: int, wgv: int, bk: int, stages: int,
                   swizzle: int = 0, overlap: int = 0, tma: int = 0) -> UOp:
    """The kernel on warpgroup tensor cores fed by a `stages`-deep cp.async pipeline (module docstring)."""
    from lower.wmma import TC_SHAPES, _match

    x, y, red, u, v, k = _match(ast)
    if shape not in WGMMA_SHAPES or TC_SHAPES[shape] is not x.dtype:
        raise KernelOptError(f"TC wgmma: {shape!r} does not fit products of {x.dtype.name}; wgmma takes "
                             f"{', '.join(WGMMA_SHAPES)}")
    if n % 8 or not 8 <= n <= 256 or bk < 16 or bk % 16 or min(tm, tn, wgu, wgv) < 1 or 128 * wgu * wgv > 1024 \
            or not 2 <= stages <= 8:
        raise KernelOptError(f"TC wgmma: n must be a multiple of 8 in 8..256, bk a multiple of 16, 128 wgu wgv "
                             f"threads at most 1024 and stages 2..8 (got n={n} tm={tm} tn={tn} wgu={wgu} wgv={wgv} "
                             f"bk={bk} stages={stages})")
    if swizzle not in (0, 1) or overlap not in (0, 1) or (swizzle and (bk % 64 or n % 64)) or \
            (overlap and stages < 3):
        raise KernelOptError(f"TC wgmma: swizzle (0/1, the 128-byte swizzle) needs bk and n multiples of 64 and "
                             f"overlap (0/1, a wgmma group in flight) 3 stages or more (got swizzle={swizzle} "
                             f"overlap={overlap} n={n} bk={bk} stages={stages})")
    if not async_fits(ast):
        raise KernelOptError("TC wgmma: the operands are not plain loads of aligned 8-element chunks (k and B's "
                             "columns multiples of 8), which cp.async copies; use the mma.sync forms")
    if tma not in (0, 1) or (tma and not swizzle):
        raise KernelOptError(f"TC wgmma: tma (0/1, the tiles copied by the tensor memory accelerator) lands them in "
                             f"the 128-byte swizzle: it needs swizzle 1 (got tma={tma} swizzle={swizzle})")
    (end,) = [e for e in ast.toposort() if e.op is Ops.END]
    bm, bn = 64 * tm * wgu, n * tn * wgv
    nu, nv, nk = size(u), size(v), size(k)
    nid = next_range_id(ast)
    bu, bv = UOp.range(-(-nu // bm), nid, AxisType.LOOP), UOp.range(-(-nv // bn), nid + 1, AxisType.LOOP)
    steps = -(-nk // bk)
    ko = UOp.range(steps, nid + 2, AxisType.REDUCE)
    ru, rv = UOp.range(wgu, nid + 3, AxisType.LOCAL), UOp.range(wgv, nid + 4, AxisType.LOCAL)
    wq, lane = UOp.range(4, nid + 5, AxisType.LOCAL), UOp.range(32, nid + 6, AxisType.WARP)
    threads = 128 * wgu * wgv
    tid = lane + (wq + (rv + ru * wgv) * 4) * 32
    dt = x.dtype
    asz, bsz = bm * bk, bk * bn
    sa = UOp(Ops.BUFFER, (UOp.shape_operand((stages * asz,)),), BufferArg(0, dt, None, AddrSpace.LOCAL))
    sb = UOp(Ops.BUFFER, (UOp.shape_operand((stages * bsz,)),), BufferArg(1, dt, None, AddrSpace.LOCAL))
    u0, v0 = bu * bm, bv * bn
    outer = [r for r in end.src[1:] if r is not u and r is not v]

    def swizzled(rows: int) -> Callable[[UOp, UOp], UOp]:  # 64-column atoms, chunk c of row r at c ^ (r % 8)
        return lambda row, col: (col // ATOM) * (rows * ATOM) + row * ATOM + (((col // 8) % 8) ^ (row % 8)) * 8

    def plain_a(row: UOp, col: UOp) -> UOp:  # K-major core matrices (module docstring)
        return (row // 8) * (8 * bk) + (col // 8) * CORE + (row % 8) * 8

    def plain_b(row: UOp, col: UOp) -> UOp:  # MN-major: row is k, col is n
        return (col // 8) * (8 * bk) + (row // 8) * CORE + (row % 8) * 8

    place_a, place_b = (swizzled(bm), swizzled(bk)) if swizzle else (plain_a, plain_b)
    down = 1 if swizzle else 8  # a quarter-warp's copies: one swizzled row, or one core matrix (module docstring)

    def copies(a_to: UOp, b_to: UOp, k0: UOp, stage: UOp | int, only: UOp | None) -> list[UOp]:
        return _copy_tile(a_to, x, (u, u0, bm, nu), (k, k0, bk, nk), tid, threads, True, only, stage * asz, True,
                          place=place_a, down=down) + \
            _copy_tile(b_to, y, (k, k0, bk, nk), (v, v0, bn, nv), tid, threads, True, only, stage * bsz, True,
                       place=place_b, down=down)

    lead = stages - 1 - overlap  # k steps copied ahead: one stage fewer while a wgmma group may still read one
    ahead = ko + lead
    if tma:
        tiles = (x, y, u, v, k, outer, bm, bn, bk)
        wait, issued = tma_pipeline(tiles, sa, sb, (u0, v0), (ko, steps, stages, lead), tid < 1)
    else:
        commit = prologue(copies, sa, sb, lead + 1, steps, bk)
        wait = UOp(Ops.BARRIER, (commit, ko), ("cp.async.wait", lead - 1, "proxy"))
        sa_w, sb_w = UOp(Ops.AFTER, (sa, wait)), UOp(Ops.AFTER, (sb, wait))
        issued = UOp(Ops.BARRIER, (wait, *copies(sa_w, sb_w, ahead * bk, ahead % stages, ahead < steps)), COMMIT)
    fence = UOp(Ops.BARRIER, (wait, issued), "wgmma.fence")
    ar, br = UOp(Ops.AFTER, (sa, wait, issued, fence)), UOp(Ops.AFTER, (sb, wait, issued, fence))
    cur_a, cur_b = (ko % stages) * asz, (ko % stages) * bsz
    half = n // 2
    nacc = tm * tn * half
    acc = UOp(Ops.BUFFER, (UOp.shape_operand((nacc,)),), BufferArg(0, dtypes.float32, None, AddrSpace.REG))
    at = [acc.index(UOp.const(i)) for i in range(nacc)]
    inits = [UOp(Ops.AFTER, (p, *outer, bu, bv, ru, rv, wq, lane)).store(UOp.const(0.0, dtypes.float32)) for p in at]
    cur = [UOp(Ops.AFTER, (p, init, ko)).load() for p, init in zip(at, inits, strict=True)]
    wr, wc = ru * (64 * tm), rv * (n * tn)  # the warpgroup tile's first row and column in the block tile
    if swizzle:  # LBO of A unused (1 by the ISA), SBO 8 rows of 128 bytes; B's LBO between 64-column atoms
        arg: tuple = ("wgmma", n, dt, (16, 1024, 0, 1), (2 * ATOM * bk, 1024, 1, 1))
    else:
        arg = ("wgmma", n, dt, (2 * CORE, 16 * bk, 0), (2 * CORE, 16 * bk, 1))
    for kk in range(0, bk, 16):
        for i in range(tm):
            for j in range(tn):
                o = (i * tn + j) * half
                if swizzle:  # the k slice's first element: its row's chunk kk // 8 sits at kk % 64 (row % 8 == 0)
                    a0 = ar.index(cur_a + (kk // ATOM) * (bm * ATOM) + (wr + 64 * i) * ATOM + kk % ATOM)
                    b0 = br.index(cur_b + (rv * (n * tn // ATOM) + n * j // ATOM) * (bk * ATOM) + kk * ATOM)
                else:
                    a0 = ar.index(cur_a + (wr + 64 * i) * bk + (kk // 8) * CORE)  # rows a multiple of 8: place_a
                    b0 = br.index(cur_b + (wc + n * j) * bk + (kk // 8) * CORE)
                mma = UOp(Ops.WMMA, (a0, b0, UOp(Ops.STACK, tuple(cur[o:o + half]))), arg)
                cur[o:o + half] = [UOp(Ops.INDEX, (mma, UOp.const(e))) for e in range(half)]
    upd = [p.store(val) for p, val in zip(at, cur, strict=True)]
    done = UOp(Ops.BARRIER, (UOp(Ops.BARRIER, tuple(upd), "wgmma.commit"),), ("wgmma.wait", overlap))
    step = UOp(Ops.END, (UOp(Ops.GROUP, (*upd, done, issued)), ko))
    if overlap:  # the last step's group retires after the loop
        step = UOp(Ops.BARRIER, (step,), ("wgmma.wait", 0))
    g, q = lane // 4, lane % 4
    places = [(u0 + wr + (64 * i + 8 * ((e % 4) // 2)) + wq * 16 + g,
               v0 + wc + (n * j + 8 * (e // 4) + e % 2) + q * 2)
              for i in range(tm) for j in range(tn) for e in range(half)]
    return store_results(ast, end, step, at, places, red, (u, v), (nu, nv, bm, bn),
                         (*outer, bu, bv, ru, rv, wq, lane), True)


__all__ = ["WGMMA_SHAPES", "apply_tc_wgmma", "wgmma_arg", "wgmma_config", "wgmma_stages"]
