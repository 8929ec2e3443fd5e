"""Tensor cores fed from shared memory: a block stages its A and B tiles through LOCAL buffers.

`apply_tc_staged(ast, shape, tm, tn, wu, wv, bk)` (OptOps.TC with arg (shape, tm, tn, wu, wv, bk)) rewrites the
kernel lower.wmma matches (a float32 sum of products x * y of half, bfloat16, or float32 for tf32, over output
axes u, v and reduce axis k) into one block per BM x BN output tile, BM = 16 tm wu, BN = 8 tn wv: wu x wv
warps (LOCAL axes), each a (16 tm) x (8 tn) warp tile of mmas (m16n8k16, or m16n8k8 for tf32; lower.wmma's
lane layouts), 32 wu wv threads. The k loop steps bk (a multiple of 16) at a time:

1. every thread of the block copies its share of the A tile (BM x bk, x at rows u, columns k) and of the B tile
   (bk x BN, y at rows k, columns v) from global memory into LOCAL buffers `As` (row-major, rows padded to
   bk + pad_for(dtype) elements) and `Bs` (rows padded to BN + pad): chunks of VEC = 8 consecutive elements
   along the tile's inner axis, consecutive threads on consecutive chunks (coalesced), or where 8 chunks
   would not be 128 bytes of one row, lane l of a warp on row l % 8 of an 8-row group, chunk l // 8
   (padded_down: a quarter-warp's 16-byte stores on 8 distinct bank groups, a warp's loads whole sectors of 8
   rows). Where the operand is a
   plain load (or a CAST of one) that moves by 1 along the chunk's axis and every other step and its offset are
   multiples of VEC, a chunk is one vector LOAD of 8 lanes (16 bytes of half: devices.cuda_render makes it
   128-bit accesses) and one vector STORE; otherwise 8 scalar copies. Elements past the matrix's end (sizes the
   tile does not divide) are gated loads that read 0, so they add nothing;
2. a BARRIER; then each warp reads its fragments from `As` / `Bs` (per k slice of the mma: tm A fragments, tn
   B fragments, in the PTX layout of lower.wmma.LAYOUTS) and issues tm tn mmas per slice, the accumulators in
   registers as in lower.wmma;
3. a BARRIER, so no thread overwrites the tiles while another still reads them.

With more than one k step the copies are pipelined through registers: the first step's tiles are copied
before the loop; each step issues the global loads of the next step's tiles first (gated off at the last
step; the fragment reads wait for them in the graph, so the linearizer puts them first), then its mmas from
shared memory, a BARRIER, the stores of the loaded tiles, and a BARRIER: the global latency hides behind the
mmas with one shared buffer per operand (three BARRIERs in all).

The output stores are lower.wmma's (columns 2t, 2t + 1 of the C layout paired into one 2-lane store where the
output allows: store_results), gated to the matrix where the tile does not divide it. The padding of
16 bytes per row puts the lanes of a fragment read on distinct shared-memory banks (A in half: row stride
bk + 8 halves is 20 words for bk = 32, so rows g = 0..7 start on banks 0, 20, 8, 28, 16, 4, 24, 12 and t adds
0..3). B's fragment pairs are a row apart (no ldmatrix.trans yet), so they are read one 16-bit element at a time.

On sm_80+ targets the heuristics prefer lower.tc_async's cp.async pipeline with ldmatrix fragments (a 7-element TC
arg); this register-pipelined form is its fallback where cp.async cannot copy the operands.

Sums are the same as lower.wmma's (the mma's float32 additions, k in order within a slice), so the emulator
(devices/python.py) checks this kernel exactly as it checks the direct one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from lower.opt_apply import next_range_id, size
from lower.strides import _stride
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace, DType
from rewrite.errors import EvalError, KernelOptError

VEC = 8  # elements of one cooperative copy chunk (16 bytes of half / bfloat16)


def pad_for(dt: DType) -> int:
    """Elements added to every shared-memory row: 16 bytes (8 halves, 4 floats), which keeps rows 16-byte
    aligned and puts the rows a fragment read touches on different banks."""
    return 16 // dt.itemsize


def padded_down(rows: int, cols: int, dt: DType) -> int:
    """`down` for _copy_tile's 16-byte copies into a rows x cols tile of padded rows (pad_for): 1 where a
    quarter-warp's 8 chunks are 128 contiguous bytes of one row (16-bit elements, rows of 64 or more), else 8
    where the rows are an odd number of 16-byte units apart (cols * itemsize a multiple of 32: the 16-byte pad makes
    it odd), since then rows 0-7 at one column start on 8 distinct groups of 4 banks: half at bk = 32 (80-byte rows,
    units 0, 5, 10, ...: groups 0, 5, 2, 7, 4, 1, 6, 3) where 8 chunks along the rows (rows 0-1, chunks 0-3: units
    0-3 and 5-8) meet twice on group 0; float32 at any width (a chunk is 2 units, so 8 along one row hit only the even
    groups). Otherwise (a row an odd number of 16-byte chunks) 1."""
    row_bytes = cols * dt.itemsize
    if dt.itemsize <= 2 and row_bytes >= 128:
        return 1
    return 8 if rows % 8 == 0 and row_bytes % 32 == 0 else 1


def _gated(e: UOp, valid: UOp, keep: frozenset[UOp] = frozenset()) -> UOp:
    """`e` with every LOAD and STORE of a GLOBAL buffer gated by `valid` (a gated-off load reads 0), except in
    the nodes of `keep` (the k loop an output store reads its result from)."""
    done: dict[UOp, UOp] = {}
    for u in e.toposort():
        if u in keep:
            done[u] = u
            continue
        src = tuple(done.get(s, s) for s in u.src)
        glob = u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and _is_global(u.src[0].src[0])
        if glob and u.op is Ops.LOAD:
            gate = valid if len(src) < 3 else src[2] & valid
            new = UOp(Ops.LOAD, (src[0], src[1] if len(src) >= 2 else UOp.const(0, u.dtype), gate), u.arg, u.tag)
        elif glob:
            new = UOp(Ops.STORE, (src[0], src[1], valid if len(src) < 3 else src[2] & valid), u.arg, u.tag)
        else:
            new = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
        done[u] = new
    return done[e]


def _is_global(b: UOp) -> bool:
    while b.op is Ops.AFTER:
        b = b.src[0]
    return b.op is Ops.BUFFER and isinstance(b.arg, BufferArg) and b.arg.addrspace is AddrSpace.GLOBAL


def _vectorizable(x: UOp, inner: UOp) -> bool:
    """Whether operand x is a plain load of a GLOBAL buffer (or a CAST of one) whose index moves by 1 along
    `inner` and whose offset and every other range's step are multiples of VEC (so each chunk is VEC aligned
    consecutive elements)."""
    if x.op is Ops.CAST:
        x = x.src[0]
    if x.op is not Ops.LOAD or len(x.src) != 1 or x.src[0].op is not Ops.INDEX or not _is_global(x.src[0].src[0]):
        return False
    return _runs(x.src[0].src[1], inner, VEC)


def _runs(idx: UOp, inner: UOp, n: int) -> bool:
    """Whether index `idx` moves by 1 along `inner` and its offset and every other range's step are multiples of
    n: n consecutive values of `inner` from a multiple of n are n aligned consecutive elements."""
    rs = [u for u in idx.toposort() if u.op is Ops.RANGE]
    if inner not in rs or _stride(idx, inner) != 1:
        return False
    if any((s := _stride(idx, r)) is None or (r is not inner and s % n) for r in rs):
        return False
    from rewrite.render import render

    try:
        off = idx.evaluate({render(r): 0 for r in rs})
    except EvalError:
        return False
    return isinstance(off, int) and off % n == 0


Axis = UOp | tuple[UOp, ...]  # a matrix axis: one range, or several flattened (outermost first, lower.simt_smem)


def spread(axis: Axis, at: UOp) -> dict[UOp, UOp]:
    """The values of an axis's ranges at flat position `at` (one range: `at` itself; several: div/mod of it)."""
    rs = axis if isinstance(axis, tuple) else (axis,)
    out, inner = {}, 1
    for j, r in enumerate(reversed(rs)):
        e = at if inner == 1 else at // inner
        out[r] = e if j == len(rs) - 1 else e % size(r)
        inner *= size(r)
    return out


def _copy_tile(buf: UOp, x: UOp, rows: tuple[Axis, UOp, int, int], cols: tuple[Axis, UOp, int, int],
               tid: UOp, threads: int, vector: bool, only: UOp | None = None, base: UOp | int = 0,
               asynch: bool = False, transposed: bool = False,
               place: Callable[[UOp, UOp], UOp] | None = None, down: int = 1) -> list[UOp]:
    """The stores that copy a rows x cols tile of operand x into LOCAL `buf` (row-major, rows padded by pad_for,
    from element `base`): rows = (the axis of x, the tile's first row, tile rows, the matrix's row count), cols
    likewise; chunks of VEC consecutive columns, chunk c = tid + threads * i (the chunks past the tile's last are
    gated off). An element outside the matrix is stored as 0. With `only`, nothing is loaded or stored where it
    is false. `asynch` (vector chunks only): the stores are cp.async copies (STORE arg "cp.async"). `transposed`:
    `buf` holds the tile column-major (element (row, col) at col * (rows + pad) + row; a chunk's lanes are
    stored one by one). `place(row, col)`: where a chunk starts in `buf` instead (from `base`; its VEC elements
    consecutive: lower.tc_wgmma's core-matrix layouts). `down` (dividing the tile's rows): consecutive chunks walk
    `down` rows at one column before the next column, chunk c at row down (c // down // (nc / VEC)) + c % down,
    column chunk (c // down) % (nc / VEC); with down = 8 a quarter-warp's 8 16-byte copies are one column of 8
    rows (a core matrix, or rows an odd number of 16-byte units apart: 8 distinct bank groups) while a warp's 32
    still read each row's chunks whole (4 of them, or all where a row has fewer)."""
    (_, r0, nr, rn), (cr, _, nc, cn) = rows, cols
    per_row = nc // VEC
    chunks = nr * per_row
    vector = vector and cn % VEC == 0  # then a chunk is in or out of the matrix as a whole
    if isinstance(cr, tuple) and len(cr) > 1:  # a chunk must stay inside the innermost range
        vector = vector and size(cr[-1]) % VEC == 0

    def both(p: UOp | None, q: UOp | None) -> UOp | None:
        return q if p is None else p if q is None else p & q

    stores: list[UOp] = []
    if nr % down:
        raise KernelOptError(f"a copy walking {down} rows a column needs a multiple of {down} rows (got {nr})")
    for i in range(-(-chunks // threads)):
        c = tid + threads * i
        if down > 1:
            row, col = (c // down // per_row) * down + c % down, ((c // down) % per_row) * VEC
        else:
            row, col = c // per_row, (c % per_row) * VEC
        in_tile = both(only, c < chunks if chunks % threads else None)
        in_rows = both(in_tile, r0 + row < rn if rn % nr else None)
        at = base + (place(row, col) if place is not None else
                     col * (nr + pad_for(x.dtype)) + row if transposed else row * (nc + pad_for(x.dtype)) + col)
        step = nr + pad_for(x.dtype) if transposed else 1
        stores += piece_stores(buf, x, rows, cols, (row, col), (at, step), VEC, vector, in_tile, in_rows,
                               "cp.async" if asynch and vector else None)
    return stores


def piece_stores(buf: UOp, x: UOp, rows: tuple[Axis, UOp, int, int], cols: tuple[Axis, UOp, int, int],
                 where: tuple[UOp, UOp], to: tuple[UOp, int], n: int, vector: bool, in_tile: UOp | None,
                 in_rows: UOp | None, arg: str | None = None) -> list[UOp]:
    """The stores of one piece of a tile copy (`_copy_tile`, lower.simt_smem's `_copy`): the n elements of x at
    tile row and column `where` = (row, col), col .. col + n - 1, into `buf` from `to` = (at, step) (element e at
    at + e * step); one vector load and store of n lanes where `vector`, else n scalar ones. An element past the
    matrix's last column (or row: `in_rows`) is 0; `in_tile` gates the stores (STORE arg `arg`)."""
    (rr, r0, _, _), (cr, c0, nc, cn) = rows, cols
    (row, col), (at, step) = where, to
    out = []
    for e in range(1 if vector else n):
        inside = c0 + col + e < cn if cn % nc else None
        valid = inside if in_rows is None else in_rows if inside is None else in_rows & inside
        src = x.substitute({**spread(rr, r0 + row), **spread(cr, c0 + col + e)})
        if vector:
            lanes = UOp.vconst(range(n))
            ld = src.src[0] if src.op is Ops.CAST else src
            idx = ld.src[0]
            vidx = UOp(Ops.INDEX, (idx.src[0], idx.src[1] + lanes), idx.arg, idx.tag)
            val = UOp(Ops.LOAD, (vidx,)) if valid is None else UOp(Ops.LOAD, (vidx, UOp.const(0, ld.dtype), valid))
            if src.op is Ops.CAST:
                val = val.cast(x.dtype)
            dst = buf.index(at + (lanes if step == 1 else UOp.vconst(range(0, n * step, step))))
        else:
            val = src if valid is None else valid.where(_gated(src, valid), UOp.const(0, x.dtype))
            dst = buf.index(at + e * step)
        out.append(UOp(Ops.STORE, (dst, val) if in_tile is None else (dst, val, in_tile), arg))
    return out


def staged_shapes(ast: UOp) -> tuple[int, int, int]:
    """(rows of u, columns of v, the reduction's length) of a kernel lower.wmma matches, sizes not divisible."""
    from lower.wmma import _match

    _, _, _, u, v, k = _match(ast)
    return size(u), size(v), size(k)


def apply_tc_staged(ast: UOp, shape: str, tm: int, tn: int, wu: int, wv: int, bk: int) -> UOp:
    """The kernel on tensor cores with A and B tiles staged through shared memory (module docstring)."""
    from lower.wmma import LAYOUTS, TC_SHAPES, M, N, _match

    x, y, red, u, v, k = _match(ast)
    if TC_SHAPES.get(shape) is not x.dtype:
        raise KernelOptError(f"TC {shape!r} does not fit products of {x.dtype.name}; known: {', '.join(TC_SHAPES)}")
    lay = LAYOUTS[shape]
    if bk < 16 or bk % 16 or min(tm, tn, wu, wv) < 1 or 32 * wu * wv > 1024:
        raise KernelOptError(f"TC staged: bk must be a multiple of 16 and 32 wu wv threads at most 1024 "
                             f"(got tm={tm} tn={tn} wu={wu} wv={wv} bk={bk})")
    (end,) = [e for e in ast.toposort() if e.op is Ops.END]
    bm, bn = M * tm * wu, N * tn * wv
    nu, nv, nk = size(u), size(v), size(k)
    nid = next_range_id(ast)
    bu, bv = UOp.range(-(-nu // bm), nid, AxisType.LOOP), UOp.range(-(-nv // bn), nid + 1, AxisType.LOOP)
    ko = UOp.range(-(-nk // bk), nid + 2, AxisType.REDUCE)
    ru, rv = UOp.range(wu, nid + 3, AxisType.LOCAL), UOp.range(wv, nid + 4, AxisType.LOCAL)
    lane = UOp.range(32, nid + 5, AxisType.WARP)
    threads = 32 * wu * wv
    tid = lane + (rv + ru * wv) * 32
    g, t = lane // 4, lane % 4
    dt = x.dtype
    pad = pad_for(dt)
    sa = UOp(Ops.BUFFER, (UOp.shape_operand((bm * (bk + pad),)),), BufferArg(0, dt, None, AddrSpace.LOCAL))
    sb = UOp(Ops.BUFFER, (UOp.shape_operand((bk * (bn + pad),)),), BufferArg(1, dt, None, AddrSpace.LOCAL))
    u0, v0 = bu * bm, bv * bn
    vec_x, vec_y = _vectorizable(x, k), _vectorizable(y, v)

    down_a = padded_down(bm, bk, dt) if vec_x else 1  # scalar copies keep their order (module docstring)
    down_b = padded_down(bk, bn, dt) if vec_y else 1

    def copies(a_to: UOp, b_to: UOp, k0: UOp, only: UOp | None) -> list[UOp]:
        return _copy_tile(a_to, x, (u, u0, bm, nu), (k, k0, bk, nk), tid, threads, vec_x, only, down=down_a) + \
            _copy_tile(b_to, y, (k, k0, bk, nk), (v, v0, bn, nv), tid, threads, vec_y, only, down=down_b)

    ar, br, ahead = pipelined_tiles(sa, sb, copies, -(-nk // bk), bk, ko)
    nacc = 4 * tm * tn
    acc = UOp(Ops.BUFFER, (UOp.shape_operand((nacc,)),), BufferArg(0, dtypes.float32, None, AddrSpace.REG))
    outer = [r for r in end.src[1:] if r is not u and r is not v]
    at = [acc.index(UOp.const(i)) for i in range(nacc)]
    inits = [UOp(Ops.AFTER, (p, *outer, bu, bv, ru, rv, lane)).store(UOp.const(0.0, dtypes.float32)) for p in at]
    cur = [UOp(Ops.AFTER, (p, init, ko)).load() for p, init in zip(at, inits, strict=True)]
    wr, wc = ru * (M * tm), rv * (N * tn)  # the warp tile's first row and column in the block tile
    for kk in range(0, bk, lay.k):
        a = [UOp(Ops.STACK, tuple(ar.index((wr + (i * M + row)) * (bk + pad) + (kk + col)).load()
                                  for row, col in (lay.a(e, g, t) for e in range(lay.na))))
             for i in range(tm)]
        b = [UOp(Ops.STACK, tuple(br.index((kk + row) * (bn + pad) + (wc + (j * N + col))).load()
                                  for row, col in (lay.b(e, g, t) for e in range(lay.nb))))
             for j in range(tn)]
        cur = mma_grid(a, b, cur, (M, N, lay.k, dt, dtypes.float32))
    step = pipelined_step(sa, sb, [p.store(val) for p, val in zip(at, cur, strict=True)], ahead, ko)
    tile = WarpTile(red, u, v, u0 + wr, v0 + wc, g, t, tm, tn, nu, nv, bm, bn)
    return write_back(ast, end, step, at, tile, (*outer, bu, bv, ru, rv, lane))


Copies = Callable[[UOp, UOp, UOp, UOp | None], list[UOp]]


def pipelined_tiles(sa: UOp, sb: UOp, copies: Copies, steps: int, bk: int, ko: UOp) -> tuple[UOp, UOp, list[UOp]]:
    """The register pipeline of a k loop `ko` of `steps` steps over LOCAL tiles `sa`, `sb` (module docstring):
    (the tiles as step ko reads them, the next step's copies, which `pipelined_step` stores after the step).
    `copies(a_to, b_to, k0, only)` are the stores that fill both tiles with the step starting at k0. With more
    than one step the first tiles are copied before the loop and each step loads the next ones before its reads
    (they wait for those loads in the graph, so the linearizer issues the loads first)."""
    if steps > 1:
        loaded = UOp(Ops.BARRIER, tuple(copies(sa, sb, UOp.const(0), None)))
        ahead = copies(sa, sb, (ko + 1) * bk, ko < steps - 1)
        early = tuple(st.src[1] for st in ahead)
        return UOp(Ops.AFTER, (sa, loaded, ko, *early)), UOp(Ops.AFTER, (sb, loaded, ko, *early)), ahead
    loaded = UOp(Ops.BARRIER, tuple(copies(sa, sb, ko * bk, None)))
    return UOp(Ops.AFTER, (sa, loaded)), UOp(Ops.AFTER, (sb, loaded)), []


def pipelined_step(sa: UOp, sb: UOp, upd: list[UOp], ahead: list[UOp], ko: UOp) -> UOp:
    """The END of k step ko: its accumulator stores `upd`, a BARRIER (every thread has read the tiles before
    they are overwritten), then the next step's tiles `ahead` stored and a BARRIER (none after the last step)."""
    done = UOp(Ops.BARRIER, tuple(upd))
    if ahead:
        later = {sa: UOp(Ops.AFTER, (sa, done)), sb: UOp(Ops.AFTER, (sb, done))}
        done = UOp(Ops.BARRIER, tuple(UOp(Ops.STORE, (later[st.src[0].src[0]].index(st.src[0].src[1]), *st.src[1:]))
                                      for st in ahead))
    return UOp(Ops.END, (UOp(Ops.GROUP, (*upd, done)), ko))


def mma_grid(a: list[UOp], b: list[UOp], acc: list[UOp], arg: tuple) -> list[UOp]:
    """One k step of a warp tile: the product of every row fragment in `a` with every column fragment in `b` added
    to its 4 accumulator lanes in `acc` (row-major over the tile, 4 per fragment pair) by one WMMA with `arg`."""
    tn, out = len(b), list(acc)
    for i, fa in enumerate(a):
        for j, fb in enumerate(b):
            o = 4 * (i * tn + j)
            mma = UOp(Ops.WMMA, (fa, fb, UOp(Ops.STACK, tuple(out[o:o + 4]))), arg)
            out[o:o + 4] = [UOp(Ops.INDEX, (mma, UOp.const(e))) for e in range(4)]
    return out


class WarpTile(NamedTuple):
    """Where a warp's tm x tn mma tiles land in the output: the matched reduce `red` over output axes u, v; the
    warp tile's first row and column (row0, col0); the lane's group and thread in its quad (g, t); the output's
    extent (nu, nv) and the block tile's (bm, bn), which say whether an edge is ragged."""

    red: UOp
    u: UOp
    v: UOp
    row0: UOp
    col0: UOp
    g: UOp
    t: UOp
    tm: int
    tn: int
    nu: int
    nv: int
    bm: int
    bn: int


def write_back(ast: UOp, end: UOp, step: UOp, at: list[UOp], w: WarpTile, ranges: tuple[UOp, ...]) -> UOp:
    """The kernel with its output stores fed by the accumulators `at` after the k loop `step`: each lane writes
    the 4 values of each of its mma tiles (the m16n8 accumulator layout), gated where the output's extent is no
    multiple of the block tile; the stores end over `ranges` (the kernel's other axes, block, warp and lane)."""
    from lower.wmma import M, N

    places = [(w.row0 + (i * M + w.g + 8 * (e // 2)), w.col0 + (j * N + w.t * 2 + e % 2))
              for i in range(w.tm) for j in range(w.tn) for e in range(4)]
    return store_results(ast, end, step, at, places, w.red, (w.u, w.v), (w.nu, w.nv, w.bm, w.bn), ranges, True)


def store_results(ast: UOp, end: UOp, step: UOp, at: list[UOp], places: list[tuple[UOp, UOp]], red: UOp,
                  uv: tuple[Axis, Axis], extents: tuple[int, int, int, int], ranges: tuple[UOp, ...],
                  pairs: bool = False) -> UOp:
    """The kernel with its output stores fed by the accumulators `at` after the k loop `step`, accumulator i
    landing at output (row, col) = places[i] of the output axes uv (each a range, or ranges flattened), gated
    where the output's extents (nu, nv) are no multiples of the block tile's (bm, bn) (extents = (nu, nv, bm,
    bn)); the stores end over `ranges`. `pairs`: accumulators 2 q and 2 q + 1 land at (row, col) and (row, col +
    1), col even (the mma C layouts: columns 2 t + e); where the output is a plain GLOBAL store whose index moves
    by 1 along the columns' innermost range (of even size) from an even element (`_pairable`), each pair is one
    store of 2 lanes, which devices.cuda_render emits as one 8-byte (float32) or 4-byte (16-bit) store."""
    nu, nv, bm, bn = extents
    res = [UOp(Ops.AFTER, (p, step)).load() for p in at]
    loop = frozenset(step.toposort())
    inner = uv[1][-1] if isinstance(uv[1], tuple) else uv[1]
    two = pairs and _pairable(end.src[0], inner)
    lanes = UOp.vconst((0, 1))
    stores = []
    for i in range(0, len(res), 2 if two else 1):
        row, col = places[i]
        # one walk of the store's own graph: `val` reads the k loop (thousands of nodes), which holds no range of
        # the output axes (they are the block's, warp's and lane's ids there), so it is not walked again
        cols = spread(uv[1], col)
        if two:  # accumulators i, i + 1 at columns col, col + 1 (even, so both in or both out of the matrix)
            val, cols[inner] = UOp(Ops.STACK, (res[i], res[i + 1])), cols[inner] + lanes
        else:
            val = res[i]
        st = end.src[0].substitute({red: val, **spread(uv[0], row), **cols})
        checks = [c for c, n, blk in ((row < nu, nu, bm), (col < nv, nv, bn)) if n % blk]
        if checks:
            st = _gated(st, checks[0] if len(checks) == 1 else checks[0] & checks[1], loop)
        stores.append(st)
    return ast.substitute({end: UOp(Ops.END, (UOp(Ops.GROUP, tuple(stores)), *ranges))})


def _pairable(store: UOp, inner: UOp) -> bool:
    """Whether an output STORE can take columns 2 c and 2 c + 1 of the innermost column range `inner` as one
    2-lane store (store_results' pairs): an ungated store to a GLOBAL buffer, `inner` of even size, the index
    moving by 1 along it and even elsewhere."""
    return store.op is Ops.STORE and len(store.src) == 2 and store.src[0].op is Ops.INDEX and \
        _is_global(store.src[0].src[0]) and size(inner) % 2 == 0 and _runs(store.src[0].src[1], inner, 2)


def staged_config(nu: int, nv: int, nk: int, batch: int, cores: int) -> tuple[int, int, int, int, int] | None:
    """(tm, tn, wu, wv, bk) for a staged tensor-core matmul of nu x nv outputs (times `batch`), nk long: 128 x 128
    block tiles of 2 x 4 warps (64 x 32 outputs each) where that gives each of the `cores` multiprocessors a
    block, else 64 x 64 tiles of 2 x 2 warps (32 x 32 each); k 32 a step (16 for a reduction that short). None
    under 64 x 64 outputs (the direct form, lower.wmma, keeps more warps busy there)."""
    bk = 32 if nk > 16 else 16
    if nu >= 128 and nv >= 128 and -(-nu // 128) * -(-nv // 128) * batch >= cores:
        return 4, 4, 2, 4, bk
    if nu >= 64 and nv >= 64:
        return 2, 4, 2, 2, bk
    return None


__all__ = ["VEC", "apply_tc_staged", "padded_down", "staged_config", "staged_shapes"]
