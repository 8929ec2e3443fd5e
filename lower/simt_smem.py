"""Sums of products on CUDA cores (SIMT FMAs) with the operands staged through shared memory: the classic SGEMM.

`apply_simt(ast, tm, tn, lu, lv, bk)` (OptOps.SIMT with arg (tm, tn, lu, lv, bk)) rewrites a kernel that sums
products x * y (`simt_match`: one REDUCE ADD of float32 or float64, its body a product, or a CAST of one, of
operands that may be cast; any float operand dtype) into one block per BM x BN output tile, BM = tm lu,
BN = tn lv, of lu x lv threads (LOCAL axes; lidx0 the lv threads along the output's contiguous axis), each
thread a tm x tn register tile of accumulators. The output axes are u (the axes only x moves with) and v (only
y), each a range or several flattened (conv's batch and output pixels; lower.tc_smem.spread); the other output
axes (attention's batch and heads) stay grid axes; every reduce range makes up k (flattened likewise). Where the
stores are contiguous along u's innermost range and not v's, x and y swap roles (the product commutes exactly),
so the threads of a warp store along the contiguous axis.

Per k step of bk:

1. the block copies the A tile (bk x BM: x at k, u) and the B tile (bk x BN) into LOCAL buffers `As`, `Bs`,
   both k-major (element (k, m) at k (BM + pad) + m, rows padded by lower.tc_smem.pad_for: 16 bytes) with
   `_copy`: pieces of 16 bytes along the operand's contiguous axis in global memory (one 16-byte load where the
   operand is an aligned plain load, else one element a piece), consecutive lanes on consecutive pieces (each
   warp request whole sectors), pieces along k stored transposed (lane by lane; a sector's pieces of a row, then
   the next row's, so a warp's stores hit 32 distinct banks). Elements past the matrix (ragged M, N, K) are
   gated loads that read 0;
2. a BARRIER; then for each of the bk values of k every thread reads its tm A values and tn B values from the
   tiles and does tm tn fused multiply-adds (MULACC, as lower.linearize fuses the plain loop's on a target with
   FMA). Thread (r, c) owns rows W r + W lu i + l (l < W, i < tm / W; W = 16 bytes of elements where tm is a
   multiple of it, else 1) and columns alike with c: its W values at one k are one 16-byte shared-memory read,
   the threads of a warp (lv = 16 along c, two values of r) read 16 consecutive 16-byte groups of `Bs` (no bank
   conflict) and two of `As` (broadcasts);
3. lower.tc_smem's register pipeline (pipelined_tiles / pipelined_step): the first step's tiles before the loop,
   each step loading the next step's tiles into registers before its FMAs and storing them after a BARRIER.

Each output's sum runs over k in order with one rounding per step, as the unstaged kernel's (lower.gpu's
register tile, its reduce accumulated by MULACC), so the results match it bit for bit where the zero padding
adds nothing (x * 0 + acc = acc for finite x). A thread's W results of one row (columns W c + W lv i + l, l < W)
are one vector STORE where they land on W consecutive elements (`_whole_groups`): the renderer makes it one 16-byte
store where the start is provably aligned (a warp's 16 lanes of a row then write 256 consecutive bytes, 8 sectors;
4 float stores 16 bytes apart touched 4 times the sectors, and nvcc does not merge them); otherwise the outputs are
stored one by one by lower.tc_smem.store_results. Either is gated at ragged edges.
"""

from __future__ import annotations

from math import gcd, prod
from typing import NamedTuple

from lower.opt_apply import axes, next_range_id, size
from lower.strides import _steady, _stride
from lower.tc_smem import (
    VEC,
    Axis,
    _gated,
    _is_global,
    _vectorizable,
    pad_for,
    piece_stores,
    pipelined_step,
    pipelined_tiles,
    spread,
    store_results,
)
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError

ACC_DTYPES = (dtypes.float32, dtypes.float64)
SIMT_MIN_OUTPUTS = 64  # both output extents at least this: smaller ones keep lower.gpu's register tile
SIMT_MIN_REDUCE = 32  # a reduction this long at least (shorter: the copies would cost more than they save)
WIDE = 16  # bytes of one shared-memory read of a thread's W values


class SimtMatch(NamedTuple):
    """A sum of products: operands x and y (before any widening CAST), the REDUCE, the output axes u (x moves
    with them, y not) and v, the reduce ranges k, and the other output axes (batch), each outermost first."""

    x: UOp
    y: UOp
    red: UOp
    u: tuple[UOp, ...]
    v: tuple[UOp, ...]
    k: tuple[UOp, ...]
    batch: tuple[UOp, ...]


def _first_load(e: UOp) -> UOp | None:
    return next((u for u in e.toposort() if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and
                 u.src[0].src[0].op is Ops.BUFFER), None)


def _unit_stride(e: UOp, r: UOp) -> bool:
    """Whether operand e's (first) load moves by one element when r steps."""
    ld = _first_load(e)
    return ld is not None and _stride(ld.src[0].src[1], r) == 1


def simt_match(ast: UOp) -> SimtMatch:
    """The kernel's sum of products (module docstring), else KernelOptError saying what does not fit."""
    reds = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    ends = [u for u in ast.toposort() if u.op is Ops.END]
    if len(reds) != 1 or len(ends) != 1:
        raise KernelOptError("SIMT: the kernel must have one reduction and one output store")
    red = reds[0]
    if red.reduce_op is not Ops.ADD or red.dtype not in ACC_DTYPES:
        raise KernelOptError("SIMT: the reduction must be a float32 or float64 sum")
    body = red.src[0].src[0] if red.src[0].op is Ops.CAST else red.src[0]
    if body.op is not Ops.MUL:
        raise KernelOptError("SIMT: the reduction must sum products x * y")
    x, y = body.src
    if x.op is Ops.CAST and y.op is Ops.CAST:
        x, y = x.src[0], y.src[0]  # widened operands: the tiles hold them narrow
    if not (x.dtype.is_float and y.dtype.is_float):
        raise KernelOptError("SIMT: the products must be of float operands")
    ks = tuple(red.src[1:])
    if any(r.axis_type is not AxisType.REDUCE for r in ks):
        raise KernelOptError("SIMT: the reduction's ranges must all be REDUCE axes")
    loops = [r for r in axes(ast) if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]
    if set(ends[0].src[1:]) != set(loops):
        raise KernelOptError("SIMT: the output store must close every output loop")
    xs, ys = set(x.toposort()), set(y.toposort())
    us = tuple(r for r in loops if r in xs and r not in ys)
    vs = tuple(r for r in loops if r in ys and r not in xs)
    if not us or not vs:
        raise KernelOptError("SIMT: needs an output axis only x moves with and one only y moves with")
    batch = tuple(r for r in loops if r not in us and r not in vs)
    st = ends[0].src[0]
    if st.op is Ops.STORE and st.src[0].op is Ops.INDEX:  # the threads of a warp along the contiguous output axis
        idx = st.src[0].src[1]
        if _stride(idx, us[-1]) == 1 and _stride(idx, vs[-1]) != 1:
            x, y, us, vs = y, x, vs, us
    return SimtMatch(x, y, red, us, vs, ks, batch)


def simt_shapes(ast: UOp) -> tuple[int, int, int, int]:
    """(rows of u, columns of v, the reduction's length, batch) of the kernel's sum of products."""
    m = simt_match(ast)
    nu, nv, nk, nb = (prod(size(r) for r in g) for g in (m.u, m.v, m.k, m.batch))
    return nu, nv, nk, nb


def simt_config(nu: int, nv: int, nk: int, batch: int, cores: int) -> tuple[int, int, int, int, int] | None:
    """(tm, tn, lu, lv, bk) for nu x nv outputs (times `batch`), nk long: 128 x 128 block tiles of 16 x 16
    threads with 8 x 8 outputs each, k 16 a step, where that gives each of the `cores` multiprocessors a
    block; else 64 x 64 tiles of 16 x 16 threads with 4 x 4 each, k 32 a step. None under SIMT_MIN_OUTPUTS
    outputs along either axis or a reduction shorter than SIMT_MIN_REDUCE."""
    if min(nu, nv) < SIMT_MIN_OUTPUTS or nk < SIMT_MIN_REDUCE:
        return None
    if nu >= 128 and nv >= 128 and -(-nu // 128) * -(-nv // 128) * batch >= cores:
        return 8, 8, 16, 16, 16
    return 4, 4, 16, 16, 32


def _lanes(tile: int, itemsize: int) -> int:
    """W: a thread's values at one k read WIDE bytes at a time where the tile holds whole groups of them."""
    w = WIDE // itemsize
    return w if w > 1 and tile % w == 0 else 1


def _offsets(r: UOp, threads: int, tile: int, w: int) -> list[UOp]:
    """The tile positions of thread r's `tile` values along one axis: W r + W threads i + l."""
    return [r * w + (w * threads * (i // w) + i % w) for i in range(tile)]


def _copy(buf: UOp, x: UOp, rows: tuple[Axis, UOp, int, int], cols: tuple[Axis, UOp, int, int], tid: UOp,
          threads: int, vector: bool, only: UOp | None, transposed: bool) -> list[UOp]:
    """The stores that copy a rows x cols tile of operand x (cols along its contiguous axis in global memory) into
    LOCAL `buf`: rows = (the axis of x, the tile's first row, tile rows, the matrix's row count), cols likewise.
    `buf` holds it row-major (element (row, col) at row (nc + pad) + col), or column-major where `transposed` (at
    col (nr + pad) + row: a piece along k into the k-major tile). Pieces of CH elements, CH = 16 bytes of them
    where x is a `vector` load (one 16-byte load a piece), else 1; piece q = tid + threads i (those past the tile
    gated off; with `only`, nothing is loaded or stored where it is false; elements outside the matrix stored as
    0). Which piece a lane takes keeps each warp request at its fewest sectors and wavefronts (float32, 128
    threads or more, BM and BN multiples of 32, so the k-major tiles' rows are 132 or 68 floats apart: 4 banks):

    - row-major: pieces in row order, so a warp reads 32 consecutive pieces of a row (512 bytes, 16 sectors; or
      two rows' 256) and a quarter-warp's 16-byte stores are 128 consecutive bytes;
    - transposed: G pieces of a row (one sector: G = 2 pieces of 4 floats, or 8 single floats), then the same G
      of the next row, ..., then the next G pieces of the first row: q -> (row, col) = ((q // G) % nr,
      (q // (G nr) G + q % G) CH). A warp reads 16 rows' 32 bytes (16 sectors; 4 rows' for single floats); each
      of its element stores (col + e at (col + e) (nr + pad) + row) puts lane (row, q % G) on bank
      4 (col + e) + row = 16 (q % G) + 4 e + row (single floats: 4 (q % G) + row) mod 32, 32 distinct banks. In
      row order the 4 (or 8) pieces of a row took 8 (4) rows a warp: pieces c and c + 2 shared banks, 2-way (in
      a 32-wide k step, 8 pieces of 4 rows, 4-way)."""
    (_, r0, nr, rn), (cr, _, nc, cn) = rows, cols
    ch = WIDE // x.dtype.itemsize if vector else 1
    if vector and (nc % ch or cn % ch or (isinstance(cr, tuple) and len(cr) > 1 and size(cr[-1]) % ch)):
        vector, ch = False, 1  # a piece must be in or out of the matrix and its innermost range as a whole
    per_row = nc // ch
    g = gcd(per_row, 2 * WIDE // (ch * x.dtype.itemsize)) if transposed else per_row
    pieces, pad = nr * per_row, pad_for(x.dtype)

    def both(p: UOp | None, q: UOp | None) -> UOp | None:
        return q if p is None else p if q is None else p & q

    stores: list[UOp] = []
    for i in range(-(-pieces // threads)):
        q = tid + threads * i
        row, col = ((q // g) % nr, (q // (g * nr) * g + q % g) * ch) if transposed else (q // per_row,
                                                                                          q % per_row * ch)
        in_tile = both(only, q < pieces if pieces % threads else None)
        in_rows = both(in_tile, r0 + row < rn if rn % nr else None)
        at, step = (col * (nr + pad) + row, nr + pad) if transposed else (row * (nc + pad) + col, 1)
        stores += piece_stores(buf, x, rows, cols, (row, col), (at, step), ch, vector, in_tile, in_rows)
    return stores


def _whole_groups(st: UOp, v: tuple[UOp, ...], nv: int, w: int) -> bool:
    """Whether a thread's W results at columns W c + W lv i + l (l < W) of one row land on W consecutive elements of
    the output: a plain ungated STORE of a GLOBAL buffer moving by 1 along v's innermost range all over it, whose
    extent (and v's, for the gate col < nv) W divides, so a group never straddles a row of v or the matrix's
    edge. Then they are one vector STORE (devices.cuda_memory: a 16-byte store where its start is provably
    aligned, else lane by lane)."""
    if w == 1 or st.op is not Ops.STORE or len(st.src) != 2 or st.src[0].op is not Ops.INDEX or \
            not _is_global(st.src[0].src[0]) or nv % w or size(v[-1]) % w:
        return False
    idx = st.src[0].src[1]
    return _stride(idx, v[-1]) == 1 and _steady(idx, v[-1], size(v[-1]))


def _fragment(buf: UOp, base: UOp | int, r: UOp, threads: int, tile: int, w: int) -> list[UOp]:
    """Thread r's `tile` values of one k row of a LOCAL tile (its row starting at `base`), W at a time."""
    out: list[UOp] = []
    for g in range(tile // w):
        at = base + r * w + w * threads * g
        if w == 1:
            out.append(buf.index(at).load())
        else:
            vec = UOp(Ops.LOAD, (buf.index(at + UOp.vconst(range(w))),))
            out += [UOp(Ops.INDEX, (vec, UOp.const(e))) for e in range(w)]
    return out


def apply_simt(ast: UOp, tm: int, tn: int, lu: int, lv: int, bk: int, fuse: bool = True) -> UOp:
    """The kernel's sum of products staged through shared memory for CUDA-core FMAs (module docstring);
    `fuse`: accumulate with MULACC (the target has fused multiply-add), else a multiply and an add."""
    m = simt_match(ast)
    x, y, red = m.x, m.y, m.red
    bm, bn = tm * lu, tn * lv
    if min(tm, tn, lu, lv, bk) < 1 or lu * lv > 1024 or bk % VEC or bm % VEC or bn % VEC:
        raise KernelOptError(f"SIMT: bk and the block tile's sides tm lu, tn lv must be multiples of {VEC}, and "
                             f"lu lv threads at most 1024 (got tm={tm} tn={tn} lu={lu} lv={lv} bk={bk})")
    (end,) = [e for e in ast.toposort() if e.op is Ops.END]
    nu, nv, nk = (prod(size(r) for r in g) for g in (m.u, m.v, m.k))
    steps = -(-nk // bk)
    nid = next_range_id(ast)
    bu, bv = UOp.range(-(-nu // bm), nid, AxisType.LOOP), UOp.range(-(-nv // bn), nid + 1, AxisType.LOOP)
    ko = UOp.range(steps, nid + 2, AxisType.REDUCE)
    ru, rv = UOp.range(lu, nid + 3, AxisType.LOCAL), UOp.range(lv, nid + 4, AxisType.LOCAL)
    tid, threads = rv + ru * lv, lu * lv
    pa, pb = pad_for(x.dtype), pad_for(y.dtype)
    sa = UOp(Ops.BUFFER, (UOp.shape_operand((bk * (bm + pa),)),), BufferArg(0, x.dtype, None, AddrSpace.LOCAL))
    sb = UOp(Ops.BUFFER, (UOp.shape_operand((bk * (bn + pb),)),), BufferArg(1, y.dtype, None, AddrSpace.LOCAL))
    u0, v0 = bu * bm, bv * bn
    # each operand copied in chunks along its contiguous axis: k (stored transposed) where that is the one
    a_by_k = _unit_stride(x, m.k[-1]) and not _unit_stride(x, m.u[-1])
    b_by_k = _unit_stride(y, m.k[-1]) and not _unit_stride(y, m.v[-1])
    vec_a = _vectorizable(x, m.k[-1] if a_by_k else m.u[-1])
    vec_b = _vectorizable(y, m.k[-1] if b_by_k else m.v[-1])

    def copies(a_to: UOp, b_to: UOp, k0: UOp, only: UOp | None) -> list[UOp]:
        kk = (m.k, k0, bk, nk)
        a = _copy(a_to, x, (m.u, u0, bm, nu), kk, tid, threads, vec_a, only, True) if a_by_k else \
            _copy(a_to, x, kk, (m.u, u0, bm, nu), tid, threads, vec_a, only, False)
        b = _copy(b_to, y, (m.v, v0, bn, nv), kk, tid, threads, vec_b, only, True) if b_by_k else \
            _copy(b_to, y, kk, (m.v, v0, bn, nv), tid, threads, vec_b, only, False)
        return a + b

    ar, br, ahead = pipelined_tiles(sa, sb, copies, steps, bk, ko)
    acc = UOp(Ops.BUFFER, (UOp.shape_operand((tm * tn,)),), BufferArg(0, red.dtype, None, AddrSpace.REG))
    at = [acc.index(UOp.const(i)) for i in range(tm * tn)]
    inits = [UOp(Ops.AFTER, (p, *m.batch, bu, bv, ru, rv)).store(UOp.const(0.0, red.dtype)) for p in at]
    cur = [UOp(Ops.AFTER, (p, init, ko)).load() for p, init in zip(at, inits, strict=True)]
    wa, wb = _lanes(tm, x.dtype.itemsize), _lanes(tn, y.dtype.itemsize)
    body = red.src[0]
    fused = fuse and (body.op is Ops.MUL and red.dtype in ACC_DTYPES)
    for kk in range(bk):
        a = _fragment(ar, kk * (bm + pa), ru, lu, tm, wa)
        b = _fragment(br, kk * (bn + pb), rv, lv, tn, wb)
        for i in range(tm):
            for j in range(tn):
                p = body.substitute({x: a[i], y: b[j]})
                c = cur[i * tn + j]
                cur[i * tn + j] = UOp(Ops.MULACC, (p.src[0], p.src[1], c)) if fused else UOp(Ops.ADD, (c, p))
        upd = [p.store(val) for p, val in zip(at, cur, strict=True)]
        if kk < bk - 1:  # k by k: the registers hold the accumulators and one k's values, not a step's values
            done = UOp(Ops.GROUP, tuple(upd))
            cur = [UOp(Ops.AFTER, (p, done)).load() for p in at]
    step = pipelined_step(sa, sb, upd, ahead, ko)
    rows, cols = _offsets(ru, lu, tm, wa), _offsets(rv, lv, tn, wb)
    ranges = (*m.batch, bu, bv, ru, rv)
    if not _whole_groups(end.src[0], m.v, nv, wb):
        places = [(u0 + rows[i], v0 + cols[j]) for i in range(tm) for j in range(tn)]
        return store_results(ast, end, step, at, places, red, (m.u, m.v), (nu, nv, bm, bn), ranges)
    res = [UOp(Ops.AFTER, (p, step)).load() for p in at]
    loop = frozenset(step.toposort())
    stores = []
    for i in range(tm):
        for g in range(0, tn, wb):
            row, col = u0 + rows[i], v0 + cols[g]
            lanes = [end.src[0].substitute({red: res[i * tn + g + e], **spread(m.u, row), **spread(m.v, col + e)})
                     for e in range(wb)]
            idx = lanes[0].src[0]
            vidx = UOp(Ops.INDEX, (idx.src[0], idx.src[1] + UOp.vconst(range(wb))), idx.arg, idx.tag)
            st = UOp(Ops.STORE, (vidx, UOp(Ops.STACK, tuple(st.src[1] for st in lanes))), lanes[0].arg, lanes[0].tag)
            checks = [c for c, n, blk in ((row < nu, nu, bm), (col < nv, nv, bn)) if n % blk]
            stores.append(_gated(st, checks[0] if len(checks) == 1 else checks[0] & checks[1], loop) if checks else st)
    return ast.substitute({end: UOp(Ops.END, (UOp(Ops.GROUP, tuple(stores)), *ranges))})


__all__ = ["SimtMatch", "apply_simt", "simt_config", "simt_match", "simt_shapes"]
