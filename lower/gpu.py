"""GPU-shaped kernels: the hand-coded heuristics for a target with warps, and the grid they become.

`gpu_opts(ast, target)` chooses OptOps for a GPU target (Target.warp_size > 0):

- kernels with output axes: the fastest-varying output axis (the one the stored address moves by 1 along) is
  split into LOCAL threads of a block (lidx0: consecutive threads touch consecutive elements, so the warp's
  accesses coalesce), padded (PADTO, a gate) when no block size divides it; a narrow first LOCAL axis takes a
  second one from the next output axis. Elementwise kernels with enough blocks give each thread UPCAST_ELEMENTS
  elements a block apart (still coalesced with scalar code). A sum of products too small for the staged forms
  below gets a per-thread register tile (UPCAST on two output axes) and its reduce loop UNROLLed.
- reductions that leave an output axis free (softmax's, layernorm's columns: the row statistics are used by
  every column): a block per row. The block's threads share each reduction (GROUP_REDUCE, padded), then take
  the contiguous free axis in strides of the block (a LOCAL split by the same thread count; the rest of the axis
  is a loop inside the thread), so the reductions run once per row, not once per output. Where a thread's share
  of the row is ROW_UNROLL elements or fewer, every such loop (each reduction's and the columns') is unrolled:
  the passes over the row then load the same elements and compute the same values (softmax's exp), which are
  one node each, so each element is read from memory once and held in a register (softmax 4096: 16 bytes of
  memory traffic and 37 ops per element -> 8 and 21, lower.estimate).
- long reductions (GROUP_MIN_REDUCE) with few outputs (GROUP_MAX_OUTPUTS_PER_CORE per multiprocessor: a full
  sum, row statistics) split the reduce across the threads of a block (GROUP_REDUCE); a block per output. Where
  no axis is that long but all together are (a batch norm's statistics over N x H x W), the longest axis of at
  least 32, by the most of 256, 128, 64, 32 threads its size fills.
- a half/bfloat16 matmul-like reduction with float accumulation, on a target with tensor cores: TC. From 64 x 64
  outputs on, staged through shared memory (lower.tc_smem: 128 x 128 block tiles of 8 warps, or 64 x 64 of 4,
  any sizes); smaller ones direct from global memory (lower.wmma), up to 4 x 4 mma tiles a warp
  (TC_WARP_TILES) and 2 x 2 warps a block.
- any other float32/float64 sum of products with both output extents from 64 and a reduction of 32 or more
  (matmul, attention's batched products, conv; checked after the GROUP_REDUCE case, so 64 x 64 outputs of a
  long reduction still share each reduction among a block's threads): SIMT, staged through shared memory for
  CUDA-core FMAs (lower.simt_smem: 128 x 128 block tiles of 16 x 16 threads with 8 x 8 accumulators each
  where they fill the multiprocessors, else 64 x 64 of 4 x 4; any sizes, batch axes, transposed operands,
  conv's flattened axes). Smaller ones: the register tile above.
- `nolocals` (the NOLOCALS knob): no LOCAL or GROUP_REDUCE axis; every output axis is GLOBAL, one thread per
  block.

`lower_grid(ast, target)` then lowers the kernel's axes to the GPU's indices (devices/__init__.py, the LINEAR
contract): a GROUP_REDUCE becomes (lower.gpu_reduce) per-thread partials folded within each warp by five butterfly
SHUFFLEs (the warp's lanes exchange registers, no shared memory), lane 0 of each warp storing its warp's total to
one LOCAL slot, one BARRIER, and every thread folding those slots (threads / 32 of them) itself: one BARRIER per
reduction where the shared-memory tree took log2(threads) + 1 (softmax's row of 4096: 2 against 18), none where the
block is one warp. Where the threads are not whole warps, a shuffle cannot move the dtype (bool, 8-bit) or
WARP_REDUCE=0: the partials stored to a LOCAL buffer, a BARRIER, and a tree reduction of that buffer in
log2(threads) rounds, a BARRIER each. The output store is gated to thread 0, unless a LOCAL output axis spreads the
stores over the same threads: then every thread holds the result and the output axes the reductions do not depend on
stay loops inside the thread. The other output LOOP axes are GLOBAL; GLOBAL axes become SPECIAL("gidx0".."gidx2")
and LOCAL/GROUP_REDUCE axes SPECIAL("lidx0".."lidx2"), innermost first (the fastest-varying axis is x); more axes
than three merge into the last dimension (div/mod of one index), or all into x where y or z would pass their limit.

These are global steps over a kernel's ranges (like lower.opt_apply.lower_threads): each replaces ranges
everywhere they are used, which a local rule cannot see.
"""

from __future__ import annotations

from math import prod

from devices.base import Target
from lower.gpu_reduce import MAX_THREADS, lower_group_reduces
from lower.opt_apply import Opt, OptOps, apply_opt, axes, next_range_id, replace_ranges, size
from lower.optimize import _split_pair
from lower.strides import _ranges_in, _stride, _topo
from rewrite import AxisType, Ops, UOp
from rewrite.env import knob_bool
from rewrite.errors import KernelOptError

BLOCK_THREADS = 128  # threads of a block for elementwise and per-output kernels (4 warps)
GROUP_THREADS = 256  # threads of a block that share one reduction (GROUP_REDUCE)
UPCAST_ELEMENTS = 4  # elements per thread of a large elementwise kernel
MIN_BLOCKS_PER_CORE = 4  # an elementwise kernel upcasts only while every multiprocessor keeps this many blocks
GROUP_MIN_REDUCE = 256  # a reduction this long with few outputs is shared by the threads of a block
# "few outputs": at most this many per multiprocessor (one block each). With more, one thread per output already
# fills the GPU; with fewer, a thread per output would leave most multiprocessors idle for a long serial loop
GROUP_MAX_OUTPUTS_PER_CORE = 64
# a kernel whose reductions (this long at least) leave an output axis free (softmax's columns) shares them in a
# block per row, of GROUP_THREADS threads or the most of 128, 64, 32 that still give each thread ROW_MIN_ELEMENTS
# elements of the row (32 at least): attention's 512-wide rows take 128 threads, not 256 with 2 elements each and
# a tree of 8 barriers per reduction
SHARED_MIN_REDUCE = 32
ROW_MIN_ELEMENTS = 4
ROW_UNROLL = 16  # a thread's share of a row held in registers: at most this many elements
TILE = 4  # a sum of products' per-thread register tile is TILE x TILE outputs, its reduce loop unrolled by TILE
# grid size limits per dimension (x, y, z) for blocks and for the threads of a block
GRID_LIMITS = (2**31 - 1, 65535, 65535)
BLOCK_LIMITS = (1024, 1024, 64)


def _loop_axes(ast: UOp) -> list[int]:
    return [i for i, r in enumerate(axes(ast)) if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]


def _store_strides(ast: UOp, r: UOp) -> list[int | None]:
    return [_stride(u.src[0].src[1], r) for u in ast.toposort()
            if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and len(u.src[0].src) == 2]


def _fastest(ast: UOp, loops: list[int]) -> list[int]:
    """The output axes, the one the stores move along by 1 first (then innermost first)."""
    rs = axes(ast)
    return sorted(loops[::-1], key=lambda i: not all(s == 1 for s in _store_strides(ast, rs[i])))


def _block_size(n: int) -> tuple[int, bool]:
    """(threads along an output axis of n, whether the axis must be padded to a multiple of them)."""
    for k in (BLOCK_THREADS, 2 * BLOCK_THREADS, BLOCK_THREADS // 2, BLOCK_THREADS // 4):
        if n % k == 0:
            return k, False
    if n <= BLOCK_THREADS:
        return n, False
    # the least padding, then the most threads: 1000 -> 128 (1024), 130 -> 32 (160, not 256)
    k = min((BLOCK_THREADS, BLOCK_THREADS // 2, BLOCK_THREADS // 4), key=lambda k: (-(-n // k) * k, -k))
    return k, True


def _reduces(ast: UOp) -> list[UOp]:
    return [u for u in ast.toposort() if u.op is Ops.REDUCE]


def gpu_opts(ast: UOp, target: Target, nolocals: bool = False) -> list[Opt]:
    """The hand-coded opts for a GPU target (see the module docstring); [] where a kernel's sizes are symbolic."""
    opts: list[Opt] = []
    if nolocals:
        return opts
    try:
        loops = _loop_axes(ast)
        for i in loops:
            size(axes(ast)[i])
        reds = _reduces(ast)
        outputs = prod(size(axes(ast)[i]) for i in loops)
        from lower.wmma import tc_shape_for

        if (tc := tc_shape_for(ast, target)) is not None and (tco := _tc_opts(ast, tc, outputs, target)):
            return tco
        if reds and _shared_row_opts(ast, opts):
            return opts
        if reds and outputs <= target.cores * GROUP_MAX_OUTPUTS_PER_CORE and _group_opts(ast, opts):
            return opts
        if reds and (simt := _simt_opts(ast, target)):  # after GROUP_REDUCE: few outputs, long k share blocks
            return simt
        if not loops:
            return opts
        if (tiled := _register_tile(ast, opts)) is not None:
            return tiled
        order = _fastest(ast, loops)
        rs = axes(ast)
        r = rs[order[0]]
        n = size(r)
        k, pad = _block_size(n)
        if pad:
            o = Opt(OptOps.PADTO, order[0], k)
            ast = apply_opt(ast, o)
            opts.append(o)
            r = axes(ast)[order[0]]
        if k == 1:
            return opts
        r2 = axes(ast)[order[1]] if len(order) > 1 else None  # a RANGE is unchanged by splitting another
        ast, outer, _ = _split_pair(ast, opts, r, k, AxisType.LOCAL)
        threads = k
        if threads < BLOCK_THREADS // 2 and r2 is not None:
            m = size(r2)
            k2 = max((d for d in range(2, BLOCK_THREADS // threads + 1) if m % d == 0), default=1)
            if k2 > 1:
                ast, _, _ = _split_pair(ast, opts, r2, k2, AxisType.LOCAL)
                threads *= k2
        if not reds and size(outer) % UPCAST_ELEMENTS == 0 and \
                prod(size(q) for q in axes(ast) if q.axis_type is AxisType.LOOP) >= \
                UPCAST_ELEMENTS * MIN_BLOCKS_PER_CORE * target.cores:
            ast, _, _ = _split_pair(ast, opts, outer, UPCAST_ELEMENTS, AxisType.UPCAST)
    except KernelOptError:
        return opts
    return opts


ASYNC_STAGES = 3  # the cp.async pipeline's depth for staged tensor-core matmuls (lower.tc_async)
# the k step of that pipeline for reductions of 256 or more: half the barriers and waits per k of 32-wide steps.
# BEAM on an H100 (matmul 4096 fp16, 128 x 128 tiles, 3 stages) chose it: 0.469 ms against 0.514-0.517 at k 32
ASYNC_WIDE_BK = 64
# measured for 16-bit operands (not tf32) in 128 x 128 block tiles (not the 64 x 64 ones) only
WIDE_K_SHAPES = ("16x8x16 half->float", "16x8x16 bfloat16->float")
TC_WARPS = 2  # warps of a tensor-core block along each of the tile's axes (2 x 2 warps, 128 threads)
TC_WARP_TILES = (4, 2, 1)  # mma tiles per warp along each axis, the largest that fits first
TC_MIN_FILL = 0.5  # the direct form pads u, v and k up to whole mma tiles while this much of the work stays real


def _up(n: int, m: int) -> int:
    return -(-n // m) * m


def _warp_tiles(tiles: int) -> int:
    """How many of an axis's `tiles` mma tiles one warp takes: the largest of TC_WARP_TILES that leaves a count
    the block's TC_WARPS divide, else the largest that divides."""
    fits = [n for n in TC_WARP_TILES if tiles % n == 0]
    return next((n for n in fits if tiles // n % TC_WARPS == 0), fits[0])


def _tc_opts(ast: UOp, shape: str, outputs: int, target: Target) -> list[Opt]:
    """A matmul of at least 64 x 64 outputs: its A and B tiles staged through shared memory (lower.tc_smem) in
    128 x 128 block tiles of 2 x 4 warps where that gives every one of the target's multiprocessors a block, else
    64 x 64 of 2 x 2 warps (any sizes: the edges are gated); through a cp.async pipeline of ASYNC_STAGES stages
    (lower.tc_async, fewer where the target's shared memory per block is short) where the operands allow it,
    in 64-wide k steps (ASYNC_WIDE_BK) for a long half/bfloat16 reduction in 128 x 128 tiles where 3 stages of
    those fit. With the WGMMA knob on an sm_90 target, a 16-bit one that cp.async can copy runs on warpgroup MMA
    instead (lower.tc_wgmma.wgmma_config), its swizzled tiles copied by the TMA with the TMA knob where its
    operands are tensors the TMA can address (lower.tc_tma.tma_fits).
    Smaller ones: TC with
    a warp tile of tm x tn mma tiles (each A fragment used tn times, each B fragment tm times: the global loads
    per mma fall from 12 to (8 tm + 4 tn) / (tm tn) a lane), then the block's warps: TC_WARPS x TC_WARPS
    neighbouring warp tiles (LOCAL splits of the tile axes, lidx1 and lidx2 beside the warp's lanes on lidx0),
    where the tile counts divide. The warp tile halves (the larger side first) while the blocks would not fill
    the multiprocessors: a small matmul keeps its parallelism. Sizes the mma's 16 x 8 x k do not divide pad up to
    whole mma tiles, their loads and stores gated (lower.wmma.apply_tc: a convolution of 3 x 3 x 3 products or 40
    channels), where at least TC_MIN_FILL of the padded multiply-adds are the kernel's; [] where less is (a 2 x 2
    output or 3 products a sum: CUDA cores, and the reductions the heuristics below share among a block)."""
    from lower.tc_async import async_fits
    from lower.tc_smem import staged_config, staged_shapes
    from lower.tc_wgmma import WGMMA_SHAPES, wgmma_config
    from lower.wmma import LAYOUTS, M, N, apply_tc, tc_flatten, tc_tile_axes

    ast = tc_flatten(ast)  # a convolution's reduce ranges (and rows) as one (apply_tc_arg does the same)
    cores = target.cores
    nu, nv, nk = staged_shapes(ast)
    if knob_bool("WGMMA") and target.isa == "sm_90" and shape in WGMMA_SHAPES and async_fits(ast) and \
            (wg := wgmma_config(nu, nv, nk, target.local_memory_bytes)) is not None:
        from lower.tc_tma import tma_fits

        tma = (1,) if knob_bool("TMA") and wg[7] and tma_fits(ast) else ()
        return [Opt(OptOps.TC, None, (shape, "wgmma", *wg, *tma))]  # opt-in: lower.tc_wgmma (not yet run on a GPU)
    if (cfg := staged_config(nu, nv, nk, outputs // (nu * nv), cores)) is not None:
        from lower.tc_async import async_stages

        stages = async_stages(ast, cfg, target.local_memory_bytes, ASYNC_STAGES) if async_fits(ast) else 0
        wide = (*cfg[:4], ASYNC_WIDE_BK)
        if stages and nk >= 4 * ASYNC_WIDE_BK and shape in WIDE_K_SHAPES and cfg[:4] == (4, 4, 2, 4) and \
                async_stages(ast, wide, target.local_memory_bytes, ASYNC_STAGES) == ASYNC_STAGES:
            cfg = wide  # a long reduction takes 64-wide k steps where the full pipeline still fits
        return [Opt(OptOps.TC, None, (shape, *cfg, stages) if stages else (shape, *cfg))]
    kk = LAYOUTS[shape].k
    if nu * nv * nk < TC_MIN_FILL * _up(nu, M) * _up(nv, N) * _up(nk, kk):
        return []
    u, v = tc_tile_axes(ast)
    tm, tn = _warp_tiles(-(-size(u) // M)), _warp_tiles(-(-size(v) // N))  # edge tiles gated (lower.wmma)
    while (tm > 1 or tn > 1) and outputs // (M * tm * N * tn * TC_WARPS * TC_WARPS) < cores:
        tm, tn = (tm // 2, tn) if tm >= tn else (tm, tn // 2)
    opts = [Opt(OptOps.TC, None, (shape, tm, tn))]
    ast = apply_tc(ast, shape, tm, tn)
    for r in [r for r in axes(ast) if r.axis_type is AxisType.LOOP][-2:][::-1]:
        if size(r) % TC_WARPS == 0:
            ast, _, _ = _split_pair(ast, opts, r, TC_WARPS, AxisType.LOCAL)
    return opts


def _simt_opts(ast: UOp, target: Target) -> list[Opt]:
    """A large sum of products (lower.simt_smem.simt_config: both output extents at least 64, a reduction of 32
    or more) staged through shared memory for CUDA-core FMAs: [Opt(SIMT, None, (tm, tn, lu, lv, bk))]; []
    where the kernel is not one or is too small."""
    from lower.simt_smem import simt_config, simt_shapes

    try:
        nu, nv, nk, batch = simt_shapes(ast)
    except KernelOptError:
        return []
    cfg = simt_config(nu, nv, nk, batch, target.cores)
    return [Opt(OptOps.SIMT, None, cfg)] if cfg is not None else []


def _register_tile(ast: UOp, opts: list[Opt]) -> list[Opt] | None:
    """A sum of products with two output axes v (the stores' contiguous one) and u: threads of a block on both
    (LOCAL, lidx0 on v), each thread a TILE x TILE register tile of outputs a block-width apart on each axis
    (UPCAST outside the LOCAL part, so the threads of a warp still read consecutive elements), and the reduce loop
    unrolled by TILE. None (and `opts` unchanged) where the kernel is not of that shape or the sizes do not divide."""
    reds = _reduces(ast)
    if len(reds) != 1 or reds[0].reduce_op is not Ops.ADD or reds[0].src[0].op is not Ops.MUL:
        return None
    loops = _loop_axes(ast)
    if len(loops) < 2:
        return None
    order = _fastest(ast, loops)
    rs = axes(ast)
    v, u = rs[order[0]], rs[order[1]]
    shape = next(((lv, lu) for lv, lu in ((16, 16), (16, 8), (8, 8))
                  if size(v) % (lv * TILE) == 0 and size(u) % (lu * TILE) == 0), None)
    ks = [r for r in reds[0].src[1:] if r.axis_type is AxisType.REDUCE]
    if shape is None or not ks:
        return None
    mine: list[Opt] = []
    for r, lanes in ((v, shape[0]), (u, shape[1])):
        ast, outer, _ = _split_pair(ast, mine, r, lanes, AxisType.LOCAL)
        ast, _, _ = _split_pair(ast, mine, outer, TILE, AxisType.UPCAST)
    if size(ks[-1]) % TILE == 0:
        ast, _, _ = _split_pair(ast, mine, ks[-1], TILE, AxisType.UNROLL)
    opts += mine
    return opts


def _nested(ast: UOp, red: UOp) -> bool:
    """Whether `red` is truly nested with another reduction (one runs inside the other's loop and depends on its
    range): the threads sharing one would hold partials of different iterations of the other."""
    for other in _reduces(ast):
        if other is red:
            continue
        inner, outer = (other, red) if other in red.src[0].toposort() else (red, other)
        if inner in outer.src[0].toposort() and any(r in inner.toposort() for r in outer.src[1:]):
            return True
    return False


def _free_loops(ast: UOp) -> list[UOp]:
    """The output LOOP axes no reduction depends on (softmax's column): a thread per index of one would redo
    the reductions."""
    used = {u for red in _reduces(ast) for u in red.toposort() if u.op is Ops.RANGE}
    return [r for r in axes(ast) if r.axis_type is AxisType.LOOP and r not in used]


def _shared_row_opts(ast: UOp, opts: list[Opt]) -> bool:
    """A kernel whose reductions do not depend on some output axes (softmax, layernorm: row statistics used by every
    column of the row): the block's threads share each reduction (GROUP_REDUCE, GROUP_THREADS threads or fewer
    for a short row: ROW_MIN_ELEMENTS; a block per row) and then take the contiguous free axis in strides of the
    block (LOCAL, the same threads; the rest of it a loop inside the thread, which `lower_grid` unrolls where it is
    ROW_UNROLL or shorter: `_unroll_rows`). False (and `opts` unchanged) where
    a reduction cannot be shared (nested, or no REDUCE axis of at least SHARED_MIN_REDUCE), there is no free
    output axis, or the stores close different output loops (no one grid serves them)."""
    free = _free_loops(ast)
    reds = _reduces(ast)
    if not free or not _uniform_loops(ast) or any(_nested(ast, red) for red in reds):
        return False
    if any(not [r for r in red.src[1:] if r.axis_type is AxisType.REDUCE] for red in reds):
        return False
    shortest = min(size([r for r in red.src[1:] if r.axis_type is AxisType.REDUCE][-1]) for red in reds)
    if shortest < SHARED_MIN_REDUCE:
        return False
    threads = next((t for t in (GROUP_THREADS, 128, 64) if t * ROW_MIN_ELEMENTS <= shortest), 32)
    mine: list[Opt] = []
    ids = list(dict.fromkeys([r for r in red.src[1:] if r.axis_type is AxisType.REDUCE][-1].range_id
                             for red in reds))
    col_id = _fastest(ast, [axes(ast).index(r) for r in free])[0]
    col = axes(ast)[col_id].range_id
    stores = [u for u in _topo(ast) if u.op is Ops.STORE]
    if size(axes(ast)[col_id]) % threads and not any(axes(ast)[col_id] in _ranges_in(st.src[0]) for st in stores):
        # a loop no store moves with (a mean loss over 100 rows, summed into one output): padded to a multiple of
        # the block it failed to linearize (a value used outside the padded loop); unpadded it takes other opts
        return False
    for rid, kind in [(i, AxisType.GROUP_REDUCE) for i in ids] + [(col, AxisType.LOCAL)]:
        r = next(q for q in axes(ast) if q.range_id == rid)
        if size(r) % threads:
            o = Opt(OptOps.PADTO, axes(ast).index(r), threads)
            ast = apply_opt(ast, o)
            mine.append(o)
            r = next(q for q in axes(ast) if q.range_id == rid)
        ast, _, _ = _split_pair(ast, mine, r, threads, kind)
    opts += mine
    return True


def _group_opts(ast: UOp, opts: list[Opt]) -> list[Opt]:
    """Each reduction (not nested in or around another that depends on its loop) whose innermost range has at
    least GROUP_MIN_REDUCE iterations has it split across GROUP_THREADS threads (the thread index inner:
    consecutive threads read consecutive elements), padded if needed."""
    for red in _reduces(ast):
        rs = axes(ast)
        mine = [r for r in red.src[1:] if r.axis_type is AxisType.REDUCE]
        if _nested(ast, red):
            continue
        if not mine or any(r.axis_type is AxisType.GROUP_REDUCE for r in red.src[1:]):
            continue
        r = mine[-1]  # the innermost: consecutive threads read consecutive elements
        n, threads = size(r), GROUP_THREADS
        if n < GROUP_MIN_REDUCE:
            # a long reduction over several short axes (a batch norm's statistics over N x 14 x 14: one thread per
            # channel walked all 12544, one block of the whole GPU busy): the longest axis, by as many threads as
            # its size fills (32 at least)
            r = max(reversed(mine), key=size)  # of equal sizes the inner one (consecutive threads, nearer reads)
            n = size(r)
            if prod(size(q) for q in mine) < GROUP_MIN_REDUCE or n < SHARED_MIN_REDUCE:
                continue
            threads = next(t for t in (GROUP_THREADS, 128, 64, 32) if t <= n)
        if n % threads:
            o = Opt(OptOps.PADTO, rs.index(r), threads)
            ast = apply_opt(ast, o)
            opts.append(o)
            r = next(q for q in axes(ast) if q.range_id == r.range_id)
        ast, _, _ = _split_pair(ast, opts, r, threads, AxisType.GROUP_REDUCE)
    return opts


# ------------------------------------------------------------------------------------------ the grid


def _dims(ranges: list[UOp], limits: tuple[int, int, int]) -> list[list[UOp]]:
    """Ranges (innermost first) grouped into at most 3 dimensions within `limits`: one range each for x and y,
    the rest merged into z; everything merged into x when y or z would be too big."""
    groups = [ranges[:1], ranges[1:2], ranges[2:]]
    groups = [g for g in groups if g]
    if any(prod(size(r) for r in g) > lim for g, lim in zip(groups, limits, strict=False)):
        groups = [ranges]
        if prod(size(r) for r in ranges) > limits[0]:
            raise KernelOptError(f"grid: {prod(size(r) for r in ranges)} exceeds the limit {limits[0]} of one "
                                 "dimension")
    return groups


def _to_specials(ast: UOp, ranges: list[UOp], prefix: str, limits: tuple[int, int, int]) -> UOp:
    """`ast` with the grid `ranges` (innermost first) replaced by SPECIALs `prefix`0..2 (lower.opt_apply.
    replace_ranges: one walk for them all): a range of one index by 0, the others merged into dimensions."""
    subs: dict[UOp, tuple[tuple[UOp, ...], UOp | None]] = {r: ((), UOp.const(0)) for r in ranges if size(r) == 1}
    ranges = [r for r in ranges if size(r) != 1]
    for d, group in enumerate(_dims(ranges, limits) if ranges else []):
        sp = UOp(Ops.SPECIAL, (UOp.const(prod(size(r) for r in group)),), f"{prefix}{d}")
        stride = 1
        for j, r in enumerate(group):  # innermost first: the merged index is sum(r_j * prod(inner sizes))
            n = size(r)
            e = sp if stride == 1 else sp // stride
            subs[r] = ((), e if j == len(group) - 1 else e % n)
            stride *= n
    return replace_ranges(ast, subs) if subs else ast


_GRID = (AxisType.LOOP, AxisType.GLOBAL, AxisType.LOCAL, AxisType.WARP)


def _uniform_loops(ast: UOp) -> bool:
    """Whether every END that closes an output loop closes all of them (one grid serves every store)."""
    loops = {r for r in axes(ast) if r.axis_type in _GRID}
    ends = [u for u in ast.toposort() if u.op is Ops.END]
    return all(set(e.src[1:]) & loops in (loops, set()) for e in ends) and \
        all(not (set(red.src[1:]) & loops) for red in _reduces(ast))


def apply_gpu_opts(ast: UOp, opts: list[Opt], target: Target, warp_reduce: bool = True) -> UOp:
    """`opts` applied for a GPU target, then the grid lowered: a TC opt (lower.wmma) or SIMT opt (lower.simt_smem)
    first (the other opts split what the tile leaves), then the rest in order, then `lower_grid` (`warp_reduce`:
    the WARP_REDUCE knob)."""
    from lower.opt_apply import apply_opts
    from lower.wmma import apply_tc_arg, tc_arg

    for o in opts:
        if o.op is OptOps.TC:
            shape = tc_arg(o.arg)[0]
            if shape not in target.tensor_cores:
                raise KernelOptError(f"{o}: the target's tensor cores are {', '.join(target.tensor_cores) or 'none'}")
            if (tc_arg(o.arg)[3] or ())[:1] == ("wgmma",) and target.isa != "sm_90":
                raise KernelOptError(f"{o}: wgmma runs on sm_90 (Hopper) targets, not {target.isa}")
            ast = apply_tc_arg(ast, o.arg)
        elif o.op is OptOps.SIMT:
            from lower.simt_smem import apply_simt

            if not (isinstance(o.arg, tuple) and len(o.arg) == 5 and all(isinstance(n, int) for n in o.arg)):
                raise KernelOptError(f"{o}: a SIMT opt's arg is (tm, tn, lu, lv, bk)")
            ast = apply_simt(ast, *o.arg, fuse=target.fma)
    return lower_grid(apply_opts(ast, [o for o in opts if o.op not in (OptOps.TC, OptOps.SIMT)]), target,
                      warp_reduce=warp_reduce)


def lower_grid(ast: UOp, target: Target, warp_reduce: bool = True) -> UOp:
    """A kernel's GROUP_REDUCE, GLOBAL, LOCAL and output LOOP axes lowered to the GPU grid (module docstring);
    `warp_reduce`: a GROUP_REDUCE of whole warps folds each warp's partials by SHUFFLEs first."""
    rs = axes(ast)
    kinds = {r.axis_type for r in rs}
    if AxisType.THREAD in kinds:
        raise KernelOptError("THREAD axes are for cpu targets; a GPU kernel uses GLOBAL and LOCAL axes")
    groups = [r for r in rs if r.axis_type is AxisType.GROUP_REDUCE]
    locals_ = [r for r in rs if r.axis_type is AxisType.LOCAL]
    if groups and locals_ and (len(locals_) > 1 or size(locals_[0]) != size(groups[0])):
        raise KernelOptError("a kernel with GROUP_REDUCE axes takes one LOCAL output axis, of the GROUP_REDUCE "
                             "axes' size (the same threads)")
    if not _uniform_loops(ast):
        if groups or locals_ or AxisType.GLOBAL in kinds:
            raise KernelOptError("GLOBAL/LOCAL axes need every store of the kernel to close the same output loops")
        return ast  # several stores over different loops: one thread runs them all
    serial: set[UOp] = set()
    if groups:
        if locals_:  # the output axes the reductions do not depend on are loops inside each thread
            serial = set(_free_loops(ast))
            ast = _unroll_rows(ast, serial)
        warp = target.warp_size if warp_reduce else 0
        ast = lower_group_reduces(ast, groups, locals_[0] if locals_ else None, warp)
    rs = axes(ast)
    glob = [r for r in rs if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL) and r not in serial][::-1]
    # the lanes of a warp (tensor cores) are the fastest threads: lidx0
    loc = [r for r in rs if r.axis_type is AxisType.WARP] + [r for r in rs if r.axis_type is AxisType.LOCAL][::-1]
    if prod(size(r) for r in loc) > MAX_THREADS:
        raise KernelOptError(f"{prod(size(r) for r in loc)} threads per block; at most {MAX_THREADS}")
    ast = _to_specials(ast, glob, "gidx", GRID_LIMITS)
    return _to_specials(ast, loc, "lidx", BLOCK_LIMITS)


def _unroll_rows(ast: UOp, serial: set[UOp]) -> UOp:
    """A block-per-row kernel (GROUP_REDUCE and LOCAL axes, the same threads) with its thread's loops over the row
    unrolled: the free output loops in `serial` (UPCAST) and the REDUCE loops of the shared reductions (UNROLL) of
    ROW_UNROLL iterations or fewer, unless that would make more than expand's MAX_COPIES copies of one node. The
    passes then load the same elements and compute the same values, one node each (module docstring)."""
    from lower.expand import MAX_COPIES, most_copies

    shared = {r for red in _reduces(ast) if any(q.axis_type is AxisType.GROUP_REDUCE for q in red.src[1:])
              for r in red.src[1:] if r.axis_type is AxisType.REDUCE}
    subs: dict[UOp, tuple[tuple[UOp, ...], UOp | None]] = {}
    nid = next_range_id(ast)
    for r in axes(ast):
        if (r in serial or r in shared) and 1 < size(r) <= ROW_UNROLL:
            new = UOp.range(size(r), nid, AxisType.UPCAST if r in serial else AxisType.UNROLL)
            subs[r], nid = ((new,), new), nid + 1
    if not subs:
        return ast
    out = replace_ranges(ast, subs)
    lanes = [r for r in axes(out) if r.axis_type in (AxisType.UPCAST, AxisType.UNROLL)]
    return out if most_copies(out, lanes) <= MAX_COPIES else ast


__all__ = ["apply_gpu_opts", "gpu_opts", "lower_grid"]
