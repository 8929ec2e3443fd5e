"""Register tiles for a sum of products on a CPU target (matmul, and conv's shape of it): the tile shapes that
fit a target's vector registers and the opts that make one (lower.optimize.hand_coded tries them first)."""

from __future__ import annotations

import math

from devices.base import Target
from lower.opt_apply import Opt, OptOps, apply_opt, axes, native_lanes, size
from lower.optimize import _lane_unfriendly, _split_pair
from lower.strides import _steady, _stride, _topo
from rewrite import AxisType, Ops, UOp, dtypes

# register tile of a sum of products (matmul, and conv's shape of it): `vecs` vectors of one register's lanes along
# the output axis that is contiguous, times `rows` along an output axis the vector operand does not move with; each
# step is one vector load per column vector, one broadcast per row, and rows x vecs fused multiply-adds (lower.expand
# makes the copies, lower.linearize the MULACC accumulators). The accumulators must stay in registers with room for
# the column loads and a broadcast: TILE_SPARE registers are kept free.
TILE_SPARE = 4
TILE_VECTORS = 2  # column vectors per tile: also the width of matmul's packed panels (matmul_panel_bytes)


# At most TILE_ACCUMULATORS accumulators: a 12x2 tile where 32 registers hold it (AVX-512), 6x2 in AVX2's 16.
# Each step of k loads the tile's column vectors once for all its rows, so more rows read fewer bytes of the
# panel per FMA: 12 rows 64 bytes per FMA-vector against 8 rows' 96 (AVX-512, 2 vectors of 16 lanes). Measured on
# an Intel Xeon AVX-512 host, one core (taskset), CPU time of the kernels (thread_time: time other processes take
# is left out), min of 10 runs, 3 runs each way taken in turns, load average 3-6 (8x2 -> 12x2): matmul 512
# 2.00/1.96/2.24 -> 2.10/1.93/1.88 ms, 1024 13.9/14.2/14.7 -> 13.9/13.5/13.9 ms, 2048 104.9/105.6/104.1 ->
# 102.5/101.8/97.0 ms, attention 8x8x512x64 unchanged (61.7-62.9 -> 61.7-64.5 ms), the BERT forward 180/190/188
# -> 180/176/180 ms; in a standalone C loop of the same tiles, panels packed, matmul 512 191 -> 199 GF/s. conv
# (8,64,56,56) keeps its 8x2, the same kernel (its 56 gated rows are not padded). More than 24 would leave too
# few registers for the column vectors and the broadcast in 32, and the loop body outgrows the loop-stream and
# decoded-instruction caches for no more reuse.
TILE_ACCUMULATORS = 24


def tile_shapes(target: Target) -> list[tuple[int, int]]:
    """(rows, vecs) register tiles that fit the target's vector registers, best first: the most accumulators,
    TILE_VECTORS columns wide where the axis allows, at most TILE_ACCUMULATORS accumulators and TILE_SPARE
    registers left for the column loads and the broadcast."""
    budget = min(TILE_ACCUMULATORS, target.vector_registers - TILE_SPARE)
    # on aarch64 gcc loads each row's value into a register of its own and multiplies by that lane (FMLA by
    # element), all of the tile's rows at once: those registers count too (a 12x2 NEON tile, 24 + 12 + 2, spilled
    # accumulators to the stack in its k loop; 8x2 fits). x86 broadcasts one row at a time into one register
    rows_held = target.arch == "aarch64"
    # a one-vector tile spends a broadcast per FMA, more rows save it no loads: it keeps at most 8
    shapes = [(r, v) for r in (12, 8, 6, 4, 2) for v in (TILE_VECTORS, 1)
              if r * v <= budget and r * v + r * rows_held <= target.vector_registers - TILE_SPARE
              and (v > 1 or r <= 8)]
    return sorted(shapes, key=lambda rv: (-rv[0] * rv[1], rv[1] != TILE_VECTORS))


def matmul_panel_bytes(target: Target) -> int:
    """The width in bytes of the column panels matmul packs its right operand into (tensor.nn): the columns of the
    register tile, TILE_VECTORS registers; 0 where the target has no vector registers, and on GPU targets, whose
    matmul blocks copy their tiles of the right operand into shared memory as it is (no packing)."""
    return 0 if target.warp_size else TILE_VECTORS * target.vector_bytes


def tile_shape(rows_n: int, cols_n: int, width: int, target: Target, pad: bool = True,
               vecs: int = TILE_VECTORS) -> tuple[int, int] | None:
    """The (rows, vecs) register tile for an output of rows_n x cols_n (cols in lanes of `width`): the shape with
    the most useful accumulators, rows x vecs scaled by the share of rows and of columns that are real when rows_n
    is padded to a multiple of rows (the padding repeats the last row: PADTO "repeat") and cols_n to whole tiles
    of vecs x width columns (the extra lanes masked: PADTO, see ragged_columns); then the least padding, then
    tile_shapes' order. A 6x2 tile padded from 1024 to 1026 rows beats an exact 4x2 (11.98 useful accumulators
    against 8); 2 rows get a 2x2 tile, not a 6x2 two thirds wasted. Without `pad` only shapes whose rows divide
    rows_n; with `vecs`, only shapes at most that many vectors wide. None when no shape fits."""
    best: tuple[tuple[float, int, int], tuple[int, int]] | None = None
    for i, (r, k) in enumerate(tile_shapes(target)):
        cols = ragged_columns(cols_n, width, k)
        if cols is None or (not pad and rows_n % r) or k > vecs:
            continue
        padded = -(-rows_n // r) * r
        key = (-(r * k * rows_n / padded * cols_n / cols), padded - rows_n + cols - cols_n, i)
        if best is None or key < best[0]:
            best = (key, (r, k))
    return None if best is None else best[1]


# A column count that is no multiple of a tile's columns is padded to whole tiles, the extra lanes masked (PADTO:
# the loads that move with the columns and the stores are gated by column < n; devices.c_masked renders the
# gated vector as a masked move, and the vectors before the edge, whose gate the symbolic stage proves true in
# every lane, as plain ones). An axis of whole vectors is padded to whole tiles only where the padding is at most
# 1/RAGGED_WASTE of the padded count (1000 columns in 6x2 tiles of 16: 1008, rather than an 8x1 tile of 8).
RAGGED_WASTE = 8


MIN_TILE_REDUCTION = 8  # products per output below which no register tile is made

# A tile of at most SLACK_ACCUMULATORS accumulators has no slack over the FMA pipeline (2 FMA ports x 4 cycles of
# latency on x86 cores: 8 chains in flight), so a gated row axis is padded (repeating its last row) for a wider
# tile; above it the exact tile is kept, the padded rows' and the border copies' cost outweighing the gain. conv2d
# (8,64,56,56) -> 64 3x3 pad 1, 2 threads, this Intel AVX-512 host, min of 20, runs alternated: on x86-64-v3 the
# exact 4x2 ran 10.45-10.51 ms, a 6x2 over 56 rows padded to 60 12.0 ms with GCC merging the taps' broadcasts
# (spilling accumulators), ~9.5-10.2 ms with devices.c_bcast's broadcasts; on x86-64-v4 the exact 8x2 (16 > 8)
# ran 5.5-5.7 ms, a 12x2 padded to 60 5.9 ms.
SLACK_ACCUMULATORS = 8

# The product tile (product_tile): where no output axis gives full vector lanes (a conv's weight gradient: its
# columns are the 3 kernel taps, 3 of 8 AVX2 lanes once padded, and the input's loads along them are gated), two
# output axes that no load moves along both (the gradient's output and input channels) are upcast into a tile of
# scalar accumulators, each loaded value reused across the other axis (the C compiler packs the tile's rows into
# vectors). Made only with at least MIN_PRODUCT_TILE accumulators; at most half of what the target's vector
# registers hold. Digits CNN conv2 weight gradient (16x8x3x3 over 100x4x4) on a 2-vCPU AVX2 EPYC: the padded
# 8x8 vector tile ran 1.0 ms, the 8x8 product tile 0.21-0.36 ms (BEAM=2 found a similar tile at 0.22 ms).
MIN_PRODUCT_TILE = 16
# Where a short vector axis exists, only for a reduction of at least MIN_PRODUCT_REDUCTION products per output:
# over a short one (the same CNN's input gradient, 16 output channels per tap) the scalar tile's per-output work,
# its stores one lane at a time, outweighs the reuse: 2.05 ms against the padded vector tile's 0.96-1.63 ms (min
# of 100, same period). Where no axis gives lanes at all (a transposed conv's input gradient, stride-2 reads), the
# product tile beats the scalar loop whatever the reduction's length.
MIN_PRODUCT_REDUCTION = 256


def ragged_columns(n: int, width: int, vecs: int) -> int | None:
    """The column count a tile of `vecs` vectors of `width` lanes computes for an output axis of n: n where the
    tile divides it; else n padded to whole tiles, where n is no multiple of the width (the ragged vector needs
    the mask anyway) or the padding is at most 1/RAGGED_WASTE of the padded count; None otherwise."""
    cols = vecs * width
    padded = -(-n // cols) * cols
    if padded == n:
        return n
    return padded if n % width or (padded - n) * RAGGED_WASTE <= padded else None


def _lanes_along(r: UOp, loads: list[UOp]) -> bool:
    """Whether range r can be vector lanes for `loads`: each moves by 0 or 1 element along it, some by 1."""
    return all(_stride(i, r) in (0, 1) for i in loads) and any(_stride(i, r) == 1 for i in loads)


def product_tile(ast: UOp, opts: list[Opt], loads: list[UOp], target: Target) -> UOp | None:
    """Opts upcasting two output axes a, b of a sum of products into a tile of scalar accumulators (see
    MIN_PRODUCT_TILE): some load moves along each, none along both, each split by the largest power of two up to
    16 that divides it (no padding), the pair with the most accumulators up to half what the vector registers
    hold. None when no pair gives MIN_PRODUCT_TILE."""
    cap = min(128, target.vector_registers * native_lanes(ast, target) // 2)
    loops = [r for r in axes(ast) if r.axis_type is AxisType.LOOP and size(r) > 1]
    moves = {r: [_stride(x, r) != 0 for x in loads] for r in loops}
    best: tuple[int, int, UOp, UOp] | None = None
    for i, a in enumerate(loops):
        for b in loops[i + 1:]:
            if not any(moves[a]) or not any(moves[b]) or any(p and q for p, q in zip(moves[a], moves[b], strict=True)):
                continue
            fa, fb = (max(k for k in (1, 2, 4, 8, 16) if size(r) % k == 0) for r in (a, b))
            while fa * fb > cap:
                fa, fb = (fa // 2, fb) if fa >= fb else (fa, fb // 2)
            if fa * fb >= MIN_PRODUCT_TILE and (best is None or fa * fb > best[0] * best[1]):
                best = (fa, fb, a, b)
    if best is None:
        return None
    fa, fb, a, b = best
    for r, k in ((a, fa), (b, fb)):
        if k > 1:
            ast, _, _ = _split_pair(ast, opts, r, k, AxisType.UPCAST)
    return ast


def register_tile(ast: UOp, opts: list[Opt], target: Target) -> UOp | None:
    """Opts for a kernel whose one reduction sums products of loads, with an output axis v along which every
    load is contiguous or constant (the vector lanes) and another output axis u that an operand moving along v
    does not move with (so one vector load serves every row of the tile): v upcast to vectors, u to rows, and
    the loop over column blocks moved outside the loop over row blocks (a column panel stays in cache while the
    rows stream past). None if the kernel is not of that shape."""
    reds = [u for u in _topo(ast) if u.op is Ops.REDUCE]
    if len(reds) != 1 or reds[0].reduce_op is not Ops.ADD:
        return None
    body = _topo(reds[0].src[0])
    if any(_lane_unfriendly(u) and u.dtype is not dtypes.index for u in body):  # index math folds after splits
        return None
    loads = [u.src[1] for u in body if u.op is Ops.INDEX and u.src[0].op is Ops.BUFFER and len(u.src) == 2]
    stores = [u.src[0].src[1] for u in _topo(ast) if u.op is Ops.STORE and u.src[0].op is Ops.INDEX]
    width = native_lanes(ast, target)
    if math.prod(size(r) for r in reds[0].src[1:]) < MIN_TILE_REDUCTION:  # a few products per output: a tile of
        return None  # accumulators saves nothing (each reuses a load only across the reduction), its padding all cost
    loops = [r for r in axes(ast) if r.axis_type is AxisType.LOOP]
    # the vector axis: every load in the reduction moves by 0 or 1 element along it, some by 1. Preferred: an axis
    # no load's gate depends on (a gate that differs per lane makes a lane-by-lane load: conv's padded input
    # columns as lanes ran at 0.7 GFLOP/s where its output channels run at full width), then one the output is
    # contiguous along too (else the tile's final stores scatter, once per output), then an axis of whole vectors
    # (a ragged one is padded to whole tiles, its last vector masked: ragged_columns)
    gates = [_topo(g) for g in (u.src[2] for u in body if u.op is Ops.LOAD and len(u.src) >= 3)]

    # the vectors of columns over which every access keeps its step (_steady): a grouped conv's merged output
    # channels (groups x 16) read the input's channel block by channel // 16, a step of 0 that jumps at lane 16; its
    # 2-vector tile had every lane's input read and 48 accumulators spilled (N16 64 channels in 4 groups, 28x28,
    # 3x3: 47 ms, 4.5 ms with one vector of a group's channels; 2-core AVX-512 Xeon)
    def vecs_along(v: UOp) -> int:
        return next((k for k in (TILE_VECTORS, 1) if all(_steady(i, v, min(size(v), k * width))
                                                          for i in (*loads, *stores))), 0)

    cands = [v for v in reversed(loops) if size(v) > 1 and _lanes_along(v, loads) and vecs_along(v)]
    cands.sort(key=lambda v: (any(v in g for g in gates), not all(_stride(i, v) == 1 for i in stores),
                              size(v) % width != 0))
    # no output axis fills half the lanes: where a reduction axis fills whole vectors, no tile (hand_coded's lanes
    # of partial sums along it: a dot product along a contiguous k, 10 classes x 256 rows of a classifier's logits;
    # the digits CNN's first conv weight gradient, 8 x 3 x 3 over 100 x 8 x 8 with the 8 image columns contiguous,
    # whose 3 taps padded to 8 lanes ran 2.22 ms of one core's CPU time per step against 0.25 ms as partial sums,
    # 2-vCPU AVX2 EPYC under load, processes alternated, medians); else the product tile
    short = not cands or (size(cands[0]) * 2 < width and size(cands[0]) % width)
    if short and any(size(r) % width == 0 and _lanes_along(r, loads) for r in reds[0].src[1:]):
        if not any(_lane_unfriendly(u) for u in body):  # (hand_coded unrolls only such a body into lanes)
            return None
    elif short:
        long = math.prod(size(r) for r in reds[0].src[1:]) >= MIN_PRODUCT_REDUCTION
        if (long or not cands) and (tiled := product_tile(ast, opts, loads, target)) is not None:
            return tiled
    if not cands:
        return None
    v = cands[0]
    moving = [x for x in loads if _stride(x, v) == 1]
    rows_of = [u for u in reversed(loops) if u is not v and all(_stride(x, u) == 0 for x in moving) and
               any(_stride(x, u) not in (0, None) for x in loads)]
    # padding the rows where a load's gate moves with them (conv's rows are output columns whose input reads are
    # gated at the image border) only where the exact tile has at most SLACK_ACCUMULATORS (see there). The
    # innermost such axis first; where its shape gives no tile (17 gated rows: prime, no padding), the next one (a
    # conv transpose's batch axis, ungated)
    most = vecs_along(v)
    for u in rows_of:
        gated = any(u in g for g in gates)
        if (shape := tile_shape(size(u), size(v), width, target, pad=not gated, vecs=most)) is not None:
            if gated and shape[0] * shape[1] <= SLACK_ACCUMULATORS:
                shape = tile_shape(size(u), size(v), width, target, vecs=most) or shape
            break
    else:
        return None
    rows, vecs = shape
    cols = ragged_columns(size(v), width, vecs)
    if cols != size(v):  # the columns padded to whole tiles, the extra lanes masked (see RAGGED_WASTE)
        at_u, at = axes(ast).index(u), axes(ast).index(v)
        o = Opt(OptOps.PADTO, at, vecs * width)
        ast = apply_opt(ast, o)
        opts.append(o)
        u, v = axes(ast)[at_u], axes(ast)[at]
    if size(u) % rows:  # the rows' last block repeats the last row (its stores gated): no gate in the k loop
        at = axes(ast).index(u)
        o = Opt(OptOps.PADTO, at, (rows, "repeat"))
        ast = apply_opt(ast, o)
        opts.append(o)
        u = axes(ast)[at]
    ast, v_out, lanes = _split_pair(ast, opts, v, width, AxisType.UPCAST)
    if vecs > 1:
        ast, v_out, _ = _split_pair(ast, opts, v_out, vecs, AxisType.UPCAST)
    ast, u_out, row_copies = _split_pair(ast, opts, u, rows, AxisType.UPCAST)
    # the column-block loop outside the row-block loop; the column vectors' copies before the rows' (lower.expand
    # then emits the FMAs row by row: both column vectors stay in registers and each row's broadcast dies after
    # its vecs FMAs; column by column kept every row's broadcast live, rows + rows x vecs registers, and the 6x2
    # tile spilled accumulators); the vector lanes the innermost UPCAST axis (the lanes lower.expand vectorizes;
    # the other UPCAST axes become copies)
    col_copies = next(r for r in axes(ast) if r.axis_type is AxisType.UPCAST and r is not row_copies) \
        if vecs > 1 else row_copies
    last_upcast = [r for r in axes(ast) if r.axis_type is AxisType.UPCAST][-1]
    for outer, inner in ((u_out, v_out), (row_copies, col_copies), (lanes, last_upcast)):
        cur = axes(ast)
        if cur.index(outer) < cur.index(inner):
            o = Opt(OptOps.SWAP, cur.index(outer), cur.index(inner))
            ast = apply_opt(ast, o)
            opts.append(o)
    return ast
