"""Kernel optimization: the hand-coded heuristics that choose a CPU kernel's opts (`hand_coded`).

The opts themselves (OptOps, Opt, what each does to a kernel's RANGEs, `apply_opts`, `lower_threads`) are in
lower.opt_apply and re-exported here; the register tiles the heuristics try first are lower.opt_tiles'.
"""

from __future__ import annotations

from math import prod

from devices.base import Target
from lower.opt_apply import (
    Opt,
    OptOps,
    _axes_memo,
    apply_opt,
    apply_opts,
    axes,
    lower_threads,
    native_lanes,
    next_range_id,
    replace_range,
    size,
)
from lower.strides import _contiguous_everywhere, _ranges_in, _topo
from rewrite import AxisType, GroupOp, Ops, UOp, dtypes
from rewrite.errors import KernelOptError
from rewrite.interval import float_to_int_in_range
from rules.streaming import streams_outputs

# ------------------------------------------------------------------------------------------ heuristics

# Upcasting output loops into explicit lanes measured slower than gcc's own vectorizer of the scalar loop on this
# machine (softmax 4096^2: 70 ms vs 24 ms; add 16M: equal), so it is off until the lane code generation beats it.
# Unrolling reductions into lanes stays on: a vector of partial sums is what gcc will not do by itself (sum 16M:
# 2.9 ms vs 7.3 ms).
UPCAST_OUTPUTS = False
# ...except for an output computed with a transcendental (decomposed into a polynomial by the cpu device): there the
# explicit lanes run the decomposition in fewer instructions than gcc's vectorization of the scalar loop (softmax
# 4096^2 on an AVX2 EPYC, CPU time of its one kernel: 77 ms as a scalar store loop, 70 ms in lanes; the
# elementwise chain and layernorm, without one, were equal or slower in lanes)
_LANES_FOR = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})
# ops whose lane code is per-lane today or that decompose into such: a reduction over them stays a scalar loop.
# EXP2, LOG2 and SIN decompose into lane-friendly polynomials on the cpu device (softmax 4096^2 with its sum of exp
# in lanes: 14 ms, against 19 ms as a scalar loop)
_LANE_UNFRIENDLY = frozenset({Ops.POW, Ops.IDIV, Ops.MOD})


_VECTOR_CASTS = ({dtypes.float16, dtypes.float32}, {dtypes.bfloat16, dtypes.float32})


def _lane_unfriendly(u: UOp) -> bool:
    """Would `u` run lane by lane in vector code? Besides _LANE_UNFRIENDLY: a cast between sizes, a cast from
    float to int that may leave the int's range (the wrapping helper), and a cast or bitcast to or from bool or
    bfloat16. A same-size cast or bitcast (exp's exponent bits) is one vector instruction, and so is a cast between
    float32 and float16 (F16C) or bfloat16 (a rounding in integer vector ops, devices.c_vector)."""
    if u.op in _LANE_UNFRIENDLY:
        return True
    if u.op not in (Ops.CAST, Ops.BITCAST):
        return False
    src, dst = u.src[0].dtype.scalar, u.dtype.scalar
    if u.op is Ops.CAST and {src, dst} in _VECTOR_CASTS:
        return False  # devices.c_vector: one F16C (or AVX-512) conversion a vector; bfloat16 lanes are float32 already
    if dtypes.bool in (src, dst) or dtypes.bfloat16 in (src, dst) or src.itemsize != dst.itemsize:
        return True
    return u.op is Ops.CAST and src.is_float and dst.is_int and not float_to_int_in_range(u)
# A reduction's vector of partial results is one dependency chain through the accumulator: each step waits for the
# previous add (3-4 cycles on current x86 and arm cores, with two add pipes), so a body as cheap as a load and an
# add runs at the add's latency rather than at the loads' rate. Up to ACCUMULATORS vector registers of partial
# results cover that latency; a body of more than CHEAP_BODY_OPS ALU ops per element hides the latency behind its
# own work, and copies of it would only take registers (softmax's sum of exp).
ACCUMULATORS = 4
CHEAP_BODY_OPS = 6
_EXPENSIVE = {Ops.EXP2: 16, Ops.LOG2: 16, Ops.SIN: 16, Ops.POW: 32, Ops.SQRT: 4, Ops.DIV: 4}
MIN_WORK_PER_THREAD = 1 << 17
# the outermost loop is padded to a multiple of the threads (repeating its last iteration) when it has at least
# this many iterations per thread, so the padding wastes at most 1/PAD_FOR_THREADS of a thread's work
PAD_FOR_THREADS = 8


def work(ast: UOp) -> int:
    n = 1
    for r in axes(ast):
        try:
            n *= size(r)
        except KernelOptError:
            return 0
    return n


def _vector_lanes(ast: UOp, target: Target) -> int:
    """Lanes that fill one of the target's vector registers for the kernel's widest stored dtype in a register (at
    most 16). float16 and bfloat16 lanes are float32 registers (devices.c_vtypes): 16 of them on AVX2 were two ymm
    registers whose comparisons and selects gcc split lane by lane (exp of 16M bfloat16 values, x86-64-v3: ~200 ms
    in 16 lanes, 32-54 ms in 8, 16-27 ms in float32)."""
    sizes = [4 if u.src[1].dtype.scalar in _FLOAT32_LANES else u.src[1].dtype.itemsize
             for u in _topo(ast) if u.op is Ops.STORE] or [4]
    return max(2, min(16, target.lanes(max(sizes))))


_FLOAT32_LANES = frozenset({dtypes.float16, dtypes.bfloat16})


# ...and for an output computed in 16-bit floats: gcc vectorizes no scalar loop that converts a float16 on x86 short
# of AVX512-FP16 ("unsupported data-type"), nor bfloat16's rounding, so such a loop runs one element at a time, where
# lanes are float32 registers and a conversion per op (devices.c_half, devices.c_vector). (x * y + z).relu() over 16M
# elements on a 2-core AVX-512 Xeon under load ~3.5 (benchmarks.half_cpu): float16 234-361 ms as the scalar loop,
# ~22 ms in lanes (x86-64-v3: ~355 -> 12-31 ms); bfloat16 200-320 -> 26-33 ms; float32 ~35 ms.
def _sixteen_bit_math(u: UOp, target: Target) -> bool:
    """An ALU op on float16 values where the target converts float16 vectors in an instruction (F16C, or not x86),
    or on bfloat16 values."""
    if u.op not in GroupOp.ALU or not u.src:
        return False
    dt = u.src[-1].dtype.scalar
    if dt is dtypes.float16:
        return target.arch != "x86_64" or "f16c" in target.features
    return dt is dtypes.bfloat16


def _upcast_outputs(ast: UOp, loop: UOp, target: Target) -> bool:
    """UPCAST_OUTPUTS, or a stored value that computes, outside any reduction, one of _LANES_FOR, 16-bit float math
    (_sixteen_bit_math), a select on a condition loaded from memory (_loaded_select) or a load behind a gate that
    does not move with the output loop `loop` to be upcast (_invariant_gate)."""
    if UPCAST_OUTPUTS:
        return True
    stack = [u.src[1] for u in _topo(ast) if u.op is Ops.STORE]
    seen: set[UOp] = set()
    while stack:
        u = stack.pop()
        if u in seen or u.op is Ops.REDUCE:
            continue
        if u.op in _LANES_FOR or _sixteen_bit_math(u, target) or _loaded_select(u) or _invariant_gate(u, loop):
            return True
        seen.add(u)
        stack.extend(u.src)
    return False


# A reduction over a strided axis whose output loop is the contiguous one (a sum over the rows of a row-major
# matrix: a bias's or a norm weight's gradient, a batch norm's mean) runs as one scalar accumulator per output,
# each walking its column at a row's stride (2 KiB for 512 floats: every step another cache line, and at such a
# power of two the lines of one column share a few cache sets). With the output loop in lanes, each step of the
# reduction loads a whole vector of adjacent columns into a vector of accumulators, and a column block's lines are
# read once. The MLP's bias gradient (a sum of 256 x 512 masked rows) on a 2-vCPU AVX2 EPYC under load, the kernel
# alone called in turns: 1120 -> 46 us; in the training step (DEBUG=2 medians): 0.84 -> 0.19 ms.
def _column_reduction(ast: UOp, loop: int, lanes: int) -> bool:
    """Whether `ast` reduces only over axes that are not contiguous or shorter than a vector of `lanes` (no lanes to
    unroll them into: a depthwise conv's 3 taps along the image row) while its output loop `loop` (contiguous
    everywhere) spans at least a vector, and every reduction's body is lane friendly: that loop then goes into
    lanes. The depthwise conv N16 64 channels 28x28 3x3 on a 2-core AVX-512 Xeon: 10.6 ms one output at a time,
    5.5 ms with the 28 columns in vectors of 4."""
    cur = axes(ast)
    if size(cur[loop]) < lanes:
        return False
    reds = [u for u in _topo(ast) if u.op is Ops.REDUCE]
    if not reds:
        return False
    for red in reds:
        if any(r in cur and r.axis_type is AxisType.REDUCE and _contiguous_everywhere(ast, r) and size(r) >= lanes
               for r in red.src[1:]):
            return False
        if any(_lane_unfriendly(u) for u in _topo(red.src[0])):
            return False
    return True


# A select whose condition is a bool loaded from memory (a ReLU's or a max pool's saved mask in the backward):
# gcc compiles the scalar loop's `c ? a : b` into a compare and a branch on each loaded byte, which a random mask
# mispredicts about half the time, and does not vectorize it; in lanes it is a blend of whole vectors
# (devices.c_vector's where). The MLP's ReLU gradient (256 x 512) on a 2-vCPU AVX2 EPYC under load, the kernel
# alone called in turns: 1195 -> 39 us; in the training step (DEBUG=2 medians): 0.68 -> 0.16 ms.
def _loaded_select(u: UOp) -> bool:
    return u.op is Ops.WHERE and u.src[0].op is Ops.LOAD and u.src[0].dtype.scalar is dtypes.bool


def _varying(topo: tuple[UOp, ...], r: UOp) -> tuple[UOp, ...]:
    """The nodes of `topo` (sources before users) whose value depends on range `r`: the ones that become lanes when
    r does. The rest (a gathered row's index, a cast of an id loaded outside r's loop) stay one scalar each."""
    dep = {r}
    for u in topo:
        if u not in dep and any(s in dep for s in u.src):
            dep.add(u)
    return tuple(u for u in topo if u in dep)


# A load behind a gate (an embedding row whose id may be out of range: `ok ? row[i] : 0`) is one gcc does not
# vectorize at -O2: it may not read memory the gate guards, and its cheap cost model does not use masked loads, so
# the whole output loop stays scalar. Where the gate does not move with the output loop, its lanes load one vector
# under one branch. The BERT embedding LayerNorm (1024 gathered rows of 384; its statistics already in lanes) on
# this Intel AVX-512 host, called directly, 2 threads, under foreign load: 0.43-0.45 -> 0.16-0.18 ms (min/median
# of 300 calls).
def _invariant_gate(u: UOp, loop: UOp) -> bool:
    return u.op is Ops.LOAD and len(u.src) >= 3 and loop in _ranges_in(u.src[0]) and loop not in _ranges_in(u.src[2])


# A kernel that only moves data: every stored value a load, or one add or multiply of loads and constants (a copy,
# a weight packed into matmul's column panels, a bias added on the way into a permuted layout). gcc vectorizes its
# scalar loop at -O2 only as its tuning likes (x86-64-v3 with an AMD tuning: a packed row of 32 floats as eight
# 16-byte moves) and at -Og, the fast tier's level, not at all (one float at a time); in lanes it is a vector load
# and store of the Target's width at both levels.
_MOVE_OPS = frozenset({Ops.ADD, Ops.MUL})


def _moves_data(ast: UOp) -> bool:
    stores = [u.src[1] for u in _topo(ast) if u.op is Ops.STORE]
    for v in stores:
        ops = [u for u in _topo(v) if u.op in GroupOp.ALU and u.dtype is not dtypes.index]
        if len(ops) > 1 or any(u.op not in _MOVE_OPS for u in ops) or any(u.op is Ops.REDUCE for u in _topo(v)):
            return False
    return bool(stores)


def _accumulators(body: tuple[UOp, ...], reduce_size: int, lanes: int, target: Target) -> int:
    """Vector registers of partial results for a reduction over `body`, the ops that move with the unrolled range
    (see ACCUMULATORS; what does not move, a LayerNorm's mean inside its variance, runs once per output): 1 for a
    costly body; else as many as fit a quarter of the target's vector registers, at most ACCUMULATORS, and leave
    the loop at least ACCUMULATORS steps."""
    ops = sum(_EXPENSIVE.get(u.op, 1) for u in body if u.op in GroupOp.ALU and u.dtype is not dtypes.index)
    if ops > CHEAP_BODY_OPS:
        return 1
    n = min(ACCUMULATORS, max(1, target.vector_registers // 4))
    while n > 1 and reduce_size < lanes * n * ACCUMULATORS:
        n //= 2
    return n


# Where the accumulators read. Adjacent vectors (acc k reads the k-th vector of each step) make one sequential
# stream of addresses; `top` accumulators (acc k reads the k-th of ACCUMULATORS equal slices of the reduction) make
# that many streams. A hardware prefetcher follows a stream only within one memory page and starts over at the
# next, so a reduction read from memory keeps more lines in flight with several streams, as soon as each one spans
# at least a page; a slice shorter than a page puts several streams into one page, which confuses the prefetcher
# and breaks the sequential run from one row to the next. Measured on a 2-core AVX2 EPYC (shared, 64 MiB of float32,
# 4 accumulators, both layouts alternating in one process, medians): a sum of rows of 65536: 9.5 -> 7.1 ms, of
# 16384: 10.6 -> 9.3 ms, of 4096 (one page per slice): 8.9 -> 5.5 ms; of 2048: 6.1 -> 12.8 ms and of 1024:
# 6.7 -> 13.7 ms, which is why the page bounds it.
def _streams(body: tuple[UOp, ...], reduce_size: int, acc: int, target: Target) -> bool:
    """Whether `acc` accumulators over a reduction of `reduce_size` elements of `body` read that many separate
    streams (see above): when each slice spans at least a page of every buffer the body loads."""
    itemsize = min((u.dtype.itemsize for u in body if u.op is Ops.LOAD), default=4)
    return reduce_size // acc * itemsize >= target.page_bytes


def _split_first(ast: UOp, opts: list[Opt], pick: list[int], target: AxisType, factors: list[int],
                 top: bool = False, pad: bool = False) -> tuple[UOp, UOp | None]:
    """Split the first axis in `pick` that one of `factors` divides; returns the new AST and the new range. With
    `pad`, an axis of `pick` that none divides but that is longer than factors[0] is padded to a multiple of it
    first (PADTO: its last lanes masked, devices.c_masked) when no axis in `pick` divides."""
    if pad and factors and pick and not any(size(axes(ast)[i]) % k == 0 for i in pick for k in factors) and \
            size(axes(ast)[pick[0]]) > factors[0]:
        o = Opt(OptOps.PADTO, pick[0], factors[0])
        ast = apply_opt(ast, o)
        opts.append(o)
    for i in pick:
        n = size(axes(ast)[i])
        for k in factors:
            if n % k == 0 and n >= k:
                o = Opt(OptOps.SPLIT, i, (k, target, top))
                new = apply_opt(ast, o)
                opts.append(o)
                before = set(_axes_memo(ast))
                added = [r for r in axes(new) if r not in before and r.axis_type is target]
                return new, (added[0] if added else None)
    return ast, None


def _split_pair(ast: UOp, opts: list[Opt], r: UOp, k: int, target: AxisType, top: bool = False
                ) -> tuple[UOp, UOp, UOp]:
    """Split range r by k into `target`; returns (new ast, the part that keeps r's type, the new part)."""
    before = axes(ast)
    o = Opt(OptOps.SPLIT, before.index(r), (k, target, top))
    ast = apply_opt(ast, o)
    opts.append(o)
    had = set(before)
    new = [q for q in axes(ast) if q not in had]
    part = next(q for q in new if q.axis_type is target)
    return ast, next(q for q in new if q is not part), part


# Balancing ids. The thread pool hands out a kernel's ids one at a time to whichever thread is free (devices.cpu_pool),
# but with one id per core a core that is slow (another process holds it for a scheduler slice, or its cache is
# shared with a noisy neighbour) holds the whole kernel back while the others idle. A register-tiled kernel of at
# least BALANCE_WORK iterations per core therefore splits its outermost whole-tile loop into up to BALANCE_IDS ids
# per core (a second THREAD axis: core_id1), so the free cores take over the slow one's share. Below that a kernel
# is short enough that its ids' start-up (each re-reads its tile's panel into cache) would outweigh the balance.
# Measured on a 2-vCPU AVX2 EPYC shared with other processes (about 1.7 vCPUs of foreign load), matmul 1024 on 2
# threads, 3 runs each way taken in turns: 144 -> 110 ms (medians 154/135/143 -> 133/95/103); on the same machine
# at high priority (foreign load ~0), 1024, 2048, conv and attention were unchanged within the noise (+-10%).
BALANCE_WORK = 1 << 24
BALANCE_IDS = 4


def balance_ids(ast: UOp, opts: list[Opt], threads: int) -> UOp:
    """Split the outermost whole-tile loop of a register-tiled kernel `ast` (the opts so far in `opts`, appended
    to) into up to BALANCE_IDS ids per core (see BALANCE_WORK): only when it is already split across `threads` > 1
    cores (a THREAD axis) and each core has at least BALANCE_WORK iterations. The loop split is the outermost LOOP
    axis (after the register tile, every LOOP axis steps over whole tiles) that some id count from BALANCE_IDS
    down to 2 divides, by the largest such count; none where no count divides any loop. Returns the new AST (the
    same where nothing was split)."""
    cur = axes(ast)
    if threads < 2 or not any(r.axis_type is AxisType.THREAD for r in cur) or work(ast) < threads * BALANCE_WORK:
        return ast
    loops = [i for i, r in enumerate(cur) if r.axis_type is AxisType.LOOP]
    if not loops:
        return ast
    new, _ = _split_first(ast, opts, loops, AxisType.THREAD, list(range(BALANCE_IDS, 1, -1)), top=True)
    return new


# A reduction that gets no lanes (its body varies with every contiguous reduction axis through ops that would run
# lane by lane, or no reduction axis is contiguous: a max pool's backward through its saved bool mask and the
# window's %2 and //2 index math) was one serial accumulator over its whole length: each step waits for the
# previous add, and the rounding error of a sum grows with the length of its chain (the digits CNN's conv1 bias
# gradient, an exactly cancelling sum of 6400 terms, came out 2.4e-7 where torch's is 8e-8, outside the train
# suite's gradient check). A long float sum (at least LONG_REDUCTION steps) is split into SCALAR_ACCUMULATORS
# interleaved scalar accumulators (OptOps.PARTIALS: acc0..acc3 in one loop, added after it), so each chain is a
# quarter as long and four adds are in flight at once.
SCALAR_ACCUMULATORS = 4
LONG_REDUCTION = 256


def _scalar_accumulators(ast: UOp, opts: list[Opt], red: UOp) -> UOp:
    """`ast` with a float sum `red` of at least LONG_REDUCTION steps given SCALAR_ACCUMULATORS (else 2) partial
    accumulators (OptOps.PARTIALS, appended to `opts`) over its innermost reduction axis that the count divides;
    `ast` as it was where the reduction is shorter or no axis divides, and for an int sum (exact, and one the C
    compiler reassociates and vectorizes by itself), a MAX or a product."""
    cur = axes(ast)
    rs = [r for r in red.src[1:] if r in cur and r.axis_type is AxisType.REDUCE]
    if red.reduce_op is not Ops.ADD or not red.dtype.is_float or not rs or prod(size(r) for r in rs) < LONG_REDUCTION:
        return ast
    for k in (SCALAR_ACCUMULATORS, 2):
        for r in reversed(rs):
            if size(r) % k == 0:
                o = Opt(OptOps.PARTIALS, cur.index(r), k)
                new = apply_opt(ast, o)
                opts.append(o)
                return new
    return ast


def hand_coded(ast: UOp, target: Target, threads: int | None = None, vectors: bool = True) -> list[Opt]:
    """Opts for a CPU target, in order: split the outermost output loop across the target's cores (`threads`
    overrides their count) when each thread gets enough work to pay for waking it; a register tile for a sum of
    products, and for a long one balancing ids (balance_ids: up to BALANCE_IDS ids per core); else upcast the
    innermost output loop into vector lanes (its stores and the loads that follow it become contiguous vectors)
    where that pays (_upcast_outputs, a streamed output, a reduction over strided axes: _column_reduction; a
    kernel that only moves data, _moves_data, by whole vectors only);
    unroll into lanes each reduction whose body does not depend on those lanes (a
    vector of partial results instead of one serial accumulator), and give a long float sum that gets no lanes
    (no contiguous reduction axis, or a body that would run lane by lane there) scalar partial accumulators
    (_scalar_accumulators). An interpreted target gets no opts (its cost
    is per instruction, which opts do not lower), and a target without vector registers no lanes."""
    opts: list[Opt] = []
    if target.interpreted:
        return opts
    threads = min(64, target.cores) if threads is None else threads
    vectors = vectors and target.vector_bytes > 0
    try:
        total = work(ast)
        loops = [i for i, r in enumerate(axes(ast)) if r.axis_type is AxisType.LOOP]
        if threads > 1 and total >= threads * MIN_WORK_PER_THREAD and loops:
            first = size(axes(ast)[loops[0]])
            if first % threads and first >= PAD_FOR_THREADS * threads:
                # the outermost loop split even so (its last block repeats its last iteration, stores gated)
                # rather than an inner one that threads divide: a matmul of 1031 rows split its 24 columns and
                # left each thread 12, too few for a register tile's vectors
                o = Opt(OptOps.PADTO, loops[0], (threads, "repeat"))
                ast = apply_opt(ast, o)
                opts.append(o)
            ast, _ = _split_first(ast, opts, loops, AxisType.THREAD, [threads], top=True)
        if not vectors:
            return opts
        from lower.opt_tiles import register_tile  # it builds on this module's opts

        if (tiled := register_tile(ast, opts, target)) is not None:
            balance_ids(tiled, opts, threads)
            return opts
        lanes = _vector_lanes(ast, target)
        factors = [k for k in (16, 8, 4) if k <= lanes]
        cur = axes(ast)
        loops = [i for i, r in enumerate(cur) if r.axis_type is AxisType.LOOP and _contiguous_everywhere(ast, r)]
        up = None
        if loops and (_upcast_outputs(ast, cur[loops[-1]], target) or streams_outputs(ast, target.stream_bytes)
                      or _column_reduction(ast, loops[-1], lanes)):
            ast, up = _split_first(ast, opts, loops[::-1][:1], AxisType.UPCAST, factors, pad=True)
        elif loops and _moves_data(ast):  # whole vectors only: a ragged row's masks would cost more than they move
            ast, up = _split_first(ast, opts, loops[::-1][:1], AxisType.UPCAST, factors)
        for red in [u for u in _topo(ast) if u.op is Ops.REDUCE]:
            body = _topo(red.src[0])
            cur = axes(ast)
            pick = [cur.index(r) for r in red.src[1:] if r in cur and r.axis_type is AxisType.REDUCE
                    and _contiguous_everywhere(ast, r)][-1:]
            if up is not None and up in body:
                continue
            if not pick or any(_lane_unfriendly(u) for u in _varying(body, cur[pick[0]])):
                ast = _scalar_accumulators(ast, opts, red)  # no lanes for it: scalar partial accumulators
                continue
            n = size(cur[pick[0]])
            acc = _accumulators(_varying(body, cur[pick[0]]), n, lanes, target)
            ast, new = _split_first(ast, opts, pick, AxisType.UNROLL, [k for k in factors if k <= 16], pad=True)
            if new is not None and acc > 1:  # the rest of the reduction split again: separate accumulators
                cur = axes(ast)
                owner = next(u for u in _topo(ast) if u.op is Ops.REDUCE and new in u.src[1:])
                rest = [cur.index(r) for r in owner.src[1:] if r in cur and r.axis_type is AxisType.REDUCE]
                ast, _ = _split_first(ast, opts, rest[-1:], AxisType.UNROLL, [acc],
                                      top=_streams(body, n, acc, target))
    except KernelOptError:
        return opts
    return opts


__all__ = ["ACCUMULATORS", "BALANCE_IDS", "BALANCE_WORK", "CHEAP_BODY_OPS", "LONG_REDUCTION", "MIN_WORK_PER_THREAD",
           "PAD_FOR_THREADS", "SCALAR_ACCUMULATORS", "UPCAST_OUTPUTS", "Opt", "OptOps", "apply_opt", "apply_opts",
           "axes", "balance_ids", "hand_coded", "lower_threads", "native_lanes", "next_range_id", "replace_range",
           "size", "work"]
