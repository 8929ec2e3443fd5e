"""Tensor cores fed by a multi-stage cp.async pipeline through shared memory, fragments read with ldmatrix.

`apply_tc_async(ast, shape, tm, tn, wu, wv, bk, stages)` (OptOps.TC with arg (shape, tm, tn, wu, wv, bk,
stages), stages >= 2) builds the block and warp tiles of lower.tc_smem (same LOCAL layouts, padded rows, same
mma order, so the same sums), with `stages` copies of each tile in LOCAL memory (`As`, `Bs`: stage s at
s * tile elements) and the global -> shared copies as asynchronous copies (sm_80's cp.async):

  prologue  stage s = 0 .. stages-2: the copies of k step s into stage s (none past the last step), then
            BARRIER "cp.async.commit" (the group closes; always one per stage, empty or not)
  step ko   BARRIER ("cp.async.wait", stages-2): every group but the newest stages-2 has landed, i.e. step ko's
            (the committed groups are stages-1+ko), and every thread is past step ko-1's reads; then the
            copies of step ko+stages-1 into stage (ko-1) % stages (the one step ko-1 read; gated off past the last
            step) and a commit, issued before this step's fragment reads (they wait on it in the graph); then the
            fragment reads from stage ko % stages and the mmas.

A copy is STORE(LOCAL index, LOAD(GLOBAL index, 0, in-matrix), [in-tile]) with arg "cp.async": 8 consecutive
elements (16 bytes of half; float32 chunks are two 16-byte copies), the in-matrix gate making it cp.async's
zero fill (src-size 0) and the in-tile gate skipping it. The python device reads the source at the copy and
writes LOCAL memory when a wait retires the group (devices/python.py), so a read that ran ahead of its wait
reads the old tile (or an unwritten element, an error) and fails the numpy check.

With 16-bit operands the fragments are ldmatrix loads (LOAD arg ("ldmatrix", n, trans) of a 2n-lane INDEX of
a LOCAL buffer whose lanes all hold the element index of the row this lane points at; devices.python_gpu.ldmatrix
gives the lane layout): A (16 x 16 of row-major `As`) is x4, lane l giving
row l % 16 at column 8 (l // 16): matrices (rows 0-7, k 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15), which is
the m16n8k16 A layout element for element; B (16 x 8 of `Bs`, k rows) is x2.trans, lane l (< 16) giving k row
l % 16: each lane gets rows 2t, 2t + 1 of column g of each 8 x 8 half, B's layout. Two neighbouring B tiles (j, j +
1) are one x4.trans, lanes 16-31 giving the rows of tile j + 1 (8 columns on): elements 0-3 are tile j's fragment,
4-7 tile j + 1's (a STACK of INDEXes of the LOAD each, which devices.cuda_render passes as the registers 0-1 and
2-3); a warp tile of 4 n8 tiles reads B with 2 ldmatrix a k slice instead of 4. tf32 fragments are read
element by element as in lower.tc_smem.

Needs both operands to be plain loads that copy in aligned 8-element chunks (lower.tc_smem._vectorizable, no
fused CAST: cp.async copies bytes) with k and the columns of B multiples of 8; `async_fits` says so, and the
TC opt falls back to lower.tc_smem's register pipeline where it does not.
"""

from __future__ import annotations

from collections.abc import Callable

from lower.opt_apply import next_range_id, size
from lower.tc_smem import VEC, WarpTile, _copy_tile, _vectorizable, mma_grid, pad_for, padded_down, write_back
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError

COMMIT = "cp.async.commit"


def async_fits(ast: UOp) -> bool:
    """Whether the kernel's operands can be copied by cp.async (module docstring)."""
    from lower.wmma import _match

    x, y, _, _, v, k = _match(ast)
    return x.op is Ops.LOAD and y.op is Ops.LOAD and _vectorizable(x, k) and _vectorizable(y, v) and \
        size(k) % VEC == 0 and size(v) % VEC == 0


def async_stages(ast: UOp, cfg: tuple[int, int, int, int, int], smem_bytes: int, want: int) -> int:
    """The most stages, at most `want`, whose tiles fit in `smem_bytes` of shared memory (0: not even 2)."""
    from lower.wmma import M, N, _match

    tm, tn, wu, wv, bk = cfg
    dt = _match(ast)[0].dtype
    per_stage = (M * tm * wu * (bk + pad_for(dt)) + bk * (N * tn * wv + pad_for(dt))) * dt.itemsize
    return next((s for s in range(want, 1, -1) if s * per_stage <= smem_bytes), 0)


def prologue(copies: Callable[[UOp, UOp, UOp, UOp | int, UOp | None], list[UOp]], sa: UOp, sb: UOp, stages: int,
             steps: int, bk: int) -> UOp:
    """The pipeline's prologue: the copies of k steps 0 .. stages-2 into their stages, one committed group per stage
    in stage order (empty past the last step); returns the last commit, which the loop's first wait follows."""
    commit: UOp | None = None
    for s in range(stages - 1):
        after = (commit,) if commit is not None else ()
        group = copies(UOp(Ops.AFTER, (sa, *after)), UOp(Ops.AFTER, (sb, *after)), UOp.const(s * bk), s, None) \
            if s < steps else []
        commit = UOp(Ops.BARRIER, (*group, *after), COMMIT)
    assert commit is not None
    return commit


def _ldmatrix(buf: UOp, row: UOp, n: int, trans: bool) -> UOp:
    """ldmatrix of n 8 x 8 matrices: the 2n elements this lane gets, given the element index of the row this lane
    points at (every lane of the INDEX holds it: the instruction gathers the rows from the warp's lanes)."""
    return UOp(Ops.LOAD, (buf.index(UOp(Ops.STACK, (row,) * (2 * n))),), ("ldmatrix", n, trans))


def apply_tc_async(ast: UOp, shape: str, tm: int, tn: int, wu: int, wv: int, bk: int, stages: int) -> UOp:
    """The kernel on tensor cores fed by a `stages`-deep cp.async pipeline (module docstring)."""
    from lower.wmma import LAYOUTS, TC_SHAPES, M, N, _match

    x, y, red, u, v, k = _match(ast)
    if TC_SHAPES.get(shape) is not x.dtype:
        raise KernelOptError(f"TC {shape!r} does not fit products of {x.dtype.name}; known: {', '.join(TC_SHAPES)}")
    if bk < 16 or bk % 16 or min(tm, tn, wu, wv) < 1 or 32 * wu * wv > 1024 or stages < 2:
        raise KernelOptError(f"TC async: bk must be a multiple of 16, 32 wu wv threads at most 1024 and stages at "
                             f"least 2 (got tm={tm} tn={tn} wu={wu} wv={wv} bk={bk} stages={stages})")
    if not async_fits(ast):
        raise KernelOptError("TC async: the operands are not plain loads of aligned 8-element chunks (k and B's "
                             "columns multiples of 8); use the register-pipelined form (6-element TC arg)")
    lay = LAYOUTS[shape]
    (end,) = [e for e in ast.toposort() if e.op is Ops.END]
    bm, bn = M * tm * wu, N * tn * wv
    nu, nv, nk = size(u), size(v), size(k)
    nid = next_range_id(ast)
    bu, bv = UOp.range(-(-nu // bm), nid, AxisType.LOOP), UOp.range(-(-nv // bn), nid + 1, AxisType.LOOP)
    steps = -(-nk // bk)
    ko = UOp.range(steps, nid + 2, AxisType.REDUCE)
    ru, rv = UOp.range(wu, nid + 3, AxisType.LOCAL), UOp.range(wv, nid + 4, AxisType.LOCAL)
    lane = UOp.range(32, nid + 5, AxisType.WARP)
    threads = 32 * wu * wv
    tid = lane + (rv + ru * wv) * 32
    g, t = lane // 4, lane % 4
    dt = x.dtype
    pad = pad_for(dt)
    asz, bsz = bm * (bk + pad), bk * (bn + pad)
    sa = UOp(Ops.BUFFER, (UOp.shape_operand((stages * asz,)),), BufferArg(0, dt, None, AddrSpace.LOCAL))
    sb = UOp(Ops.BUFFER, (UOp.shape_operand((stages * bsz,)),), BufferArg(1, dt, None, AddrSpace.LOCAL))
    u0, v0 = bu * bm, bv * bn

    down_a, down_b = padded_down(bm, bk, dt), padded_down(bk, bn, dt)

    def copies(a_to: UOp, b_to: UOp, k0: UOp, stage: UOp | int, only: UOp | None) -> list[UOp]:
        return _copy_tile(a_to, x, (u, u0, bm, nu), (k, k0, bk, nk), tid, threads, True, only, stage * asz, True,
                          down=down_a) + \
            _copy_tile(b_to, y, (k, k0, bk, nk), (v, v0, bn, nv), tid, threads, True, only, stage * bsz, True,
                       down=down_b)

    commit = prologue(copies, sa, sb, stages, steps, bk)
    wait = UOp(Ops.BARRIER, (commit, ko), ("cp.async.wait", stages - 2))
    sa_w, sb_w = UOp(Ops.AFTER, (sa, wait)), UOp(Ops.AFTER, (sb, wait))
    ahead = ko + (stages - 1)
    nxt = copies(sa_w, sb_w, ahead * bk, ahead % stages, ahead < steps)
    issued = UOp(Ops.BARRIER, (wait, *nxt), COMMIT)
    ar, br = UOp(Ops.AFTER, (sa, wait, issued)), UOp(Ops.AFTER, (sb, wait, issued))
    cur_a, cur_b = (ko % stages) * asz, (ko % stages) * bsz
    nacc = 4 * tm * tn
    acc = UOp(Ops.BUFFER, (UOp.shape_operand((nacc,)),), BufferArg(0, dtypes.float32, None, AddrSpace.REG))
    outer = [r for r in end.src[1:] if r is not u and r is not v]
    at = [acc.index(UOp.const(i)) for i in range(nacc)]
    inits = [UOp(Ops.AFTER, (p, *outer, bu, bv, ru, rv, lane)).store(UOp.const(0.0, dtypes.float32)) for p in at]
    cur = [UOp(Ops.AFTER, (p, init, ko)).load() for p, init in zip(at, inits, strict=True)]
    wr, wc = ru * (M * tm), rv * (N * tn)  # the warp tile's first row and column in the block tile
    ldm = dt.itemsize == 2
    for kk in range(0, bk, lay.k):
        if ldm:
            a = [_ldmatrix(ar, cur_a + (wr + (i * M) + lane % 16) * (bk + pad) + (kk + (lane // 16) * 8), 4, False)
                 for i in range(tm)]
            b = []
            for j in range(0, tn, 2):  # two n8 tiles an x4.trans (lanes 16-31 point 8 columns on), a last one x2
                pair = j + 1 < tn
                ld = _ldmatrix(br, cur_b + (kk + lane % 16) * (bn + pad) + (wc + j * N + (lane // 16) * N * pair),
                               4 if pair else 2, True)
                b += [UOp(Ops.STACK, tuple(UOp(Ops.INDEX, (ld, UOp.const(e))) for e in range(h, h + 4)))
                      for h in (0, 4)] if pair else [ld]
        else:
            a = [UOp(Ops.STACK, tuple(ar.index(cur_a + (wr + (i * M + row)) * (bk + pad) + (kk + col)).load()
                                      for row, col in (lay.a(e, g, t) for e in range(lay.na)))) for i in range(tm)]
            b = [UOp(Ops.STACK, tuple(br.index(cur_b + (kk + row) * (bn + pad) + (wc + (j * N + col))).load()
                                      for row, col in (lay.b(e, g, t) for e in range(lay.nb)))) for j in range(tn)]
        cur = mma_grid(a, b, cur, (M, N, lay.k, dt, dtypes.float32))
    upd = [p.store(val) for p, val in zip(at, cur, strict=True)]
    step = UOp(Ops.END, (UOp(Ops.GROUP, (*upd, issued)), ko))
    tile = WarpTile(red, u, v, u0 + wr, v0 + wc, g, t, tm, tn, nu, nv, bm, bn)
    return write_back(ast, end, step, at, tile, (*outer, bu, bv, ru, rv, lane))


__all__ = ["COMMIT", "apply_tc_async", "async_fits", "async_stages", "prologue"]
