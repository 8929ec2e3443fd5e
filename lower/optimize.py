"""Kernel optimization: OptOps as rewrites of a kernel's RANGEs, and the hand-coded heuristics.

A kernel's axes are its RANGEs in order: the output loops (in the order their END lists them), then each
reduction's ranges. An Opt is (op, axis, arg) and opts compose left to right (seed 001):

  SPLIT  (k, target, top)  axis n becomes (n/k, k), the new size-k axis of AxisType `target` inner (or outer
                           when `top`); the other part keeps the old type. Index uses of r become
                           r_outer*k + r_inner (top: r_top*(n/k) + r_rest).
  PADTO  m                 axis n becomes ceil(n/m)*m iterations; the extra ones are masked: loads and stores
                           that move with it are gated by r < n, and a reduction over it adds its identity there
  PADTO  (m, "repeat")     the same count, but the extra iterations of an output (LOOP/GLOBAL) axis repeat the
                           last one: every use of r reads min(r, n-1), so loads need no gate (an inner loop's
                           loads stay plain), and only the stores that depend on r are gated by r < n
  SWAP   j                 exchange the loop order of two output axes (both LOOP-like, same END)
  NOLOCALS                 no LOCAL axes (CPU: always)
  TC       shape           tensor cores ("16x8x16 half->float", one of Target.tensor_cores, or (shape, tm, tn):
                           tm x tn mma tiles a warp): on a GPU target the optimize stage applies it first
                           (lower.wmma.apply_tc); apply_opt alone raises

Which targets a split may produce follows the spec's AxisType table: LOCAL from GLOBAL/LOOP, THREAD from
GLOBAL/LOOP (outer), UPCAST from GLOBAL/LOCAL/LOOP (inner), GROUP_REDUCE from REDUCE, UNROLL from
REDUCE/GROUP_REDUCE (inner). An illegal opt raises KernelOptError saying why.

After the opts, `lower_threads` turns THREAD ranges into SPECIAL("core_id", n): the device runs the kernel
once per value, in parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from devices.base import Target
from lower.strides import _contiguous_everywhere, _Memo, _topo
from rewrite import AxisType, GroupOp, Ops, UOp, dtypes
from rewrite.errors import KernelOptError
from rewrite.interval import float_to_int_in_range
from rules.streaming import streams_outputs


class OptOps(Enum):
    SPLIT = "SPLIT"
    PADTO = "PADTO"
    SWAP = "SWAP"
    NOLOCALS = "NOLOCALS"
    TC = "TC"
    SIMT = "SIMT"


@dataclass(frozen=True)
class Opt:
    op: OptOps
    axis: int | None = None
    arg: object = None

    def __repr__(self) -> str:
        return f"Opt({self.op.name}, {self.axis}, {self.arg!r})"

    @property
    def split_arg(self) -> tuple[object, AxisType, bool]:
        """A SPLIT's (k, the new axis's type, top); KernelOptError when the arg is not of that form (k itself is
        checked where the axis's size is known)."""
        a = self.arg
        if self.op is not OptOps.SPLIT or not (isinstance(a, tuple) and len(a) == 3 and isinstance(a[1], AxisType)):
            raise KernelOptError(f"{self}: a SPLIT's arg is (k, AxisType, top)")
        return a[0], a[1], bool(a[2])


_SPLIT_FROM = {
    AxisType.LOCAL: {AxisType.GLOBAL, AxisType.LOOP},
    AxisType.THREAD: {AxisType.GLOBAL, AxisType.LOOP},
    AxisType.UPCAST: {AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP},
    AxisType.GROUP_REDUCE: {AxisType.REDUCE},
    AxisType.UNROLL: {AxisType.REDUCE, AxisType.GROUP_REDUCE},
    AxisType.LOOP: {AxisType.LOOP, AxisType.GLOBAL},
    AxisType.REDUCE: {AxisType.REDUCE},
}


def _axes(ast: UOp) -> tuple[UOp, ...]:
    topo = _topo(ast)
    out: dict[UOp, None] = {}
    for u in reversed(topo):
        if u.op is Ops.END:
            out.update(dict.fromkeys(r for r in u.src[1:] if r not in out))
    for u in topo:
        if u.op is Ops.REDUCE:
            out.update(dict.fromkeys(r for r in u.src[1:] if r not in out))
    return tuple(out)


_axes_memo = _Memo(_axes)


def axes(ast: UOp) -> list[UOp]:
    """The kernel's RANGEs: output loops in END order, then reduction ranges in REDUCE order."""
    return list(_axes_memo(ast))


def size(r: UOp) -> int:
    b = r.src[0]
    if b.op is not Ops.CONST:
        raise KernelOptError(f"axis {r.render()} has a symbolic size; only constant sizes can be split")
    return int(b.value)


def native_lanes(ast: UOp, target: Target) -> int:
    """Lanes of one of the target's vector registers for the kernel's widest memory element (float32: 16 with
    AVX-512, 8 with AVX2, 4 with SSE or NEON)."""
    sizes = [u.dtype.itemsize for u in _topo(ast) if u.op is Ops.BUFFER] or [4]
    return target.lanes(max(sizes))


def next_range_id(ast: UOp) -> int:
    ids = [i for u in _topo(ast) if u.op is Ops.RANGE and isinstance(i := u.range_id, int)]
    return max(ids, default=0) + 1


def replace_range(ast: UOp, r: UOp, parts: tuple[UOp, ...], expr: UOp | None) -> UOp:
    """`ast` with range `r` replaced: END/REDUCE that list it list `parts` instead (in order), and every other
    use of r becomes `expr` (None: r must have no other uses)."""
    done: dict[UOp, UOp] = {}
    for u in _topo(ast):
        if u is r:
            continue
        src: list[UOp] = []
        for s in u.src:
            if s is r:
                if u.op in (Ops.END, Ops.REDUCE) and s in u.src[1:]:
                    src.extend(parts)
                    continue
                if expr is None:
                    raise KernelOptError(f"range {r.render()} is still used by {u.op.name}")
                src.append(expr)
            else:
                src.append(done.get(s, s))
        new_src = tuple(src)
        if u.op is Ops.END and len(new_src) == 1:  # an END that closes no range any more is its body
            done[u] = new_src[0]
        elif u.op is Ops.REDUCE and len(new_src) == 1:
            raise KernelOptError("a REDUCE lost all its ranges")
        else:
            done[u] = u if new_src == u.src else UOp(u.op, new_src, u.arg, u.tag)
    return done[ast]


def _serial_store_loop(ast: UOp, r: UOp) -> bool:
    """A REDUCE-type range that an END closes rather than a REDUCE: the ordered loop of a store through loaded
    positions (lower.rangeify.build_store_kernel), which may write one element at several iterations."""
    return r.axis_type is AxisType.REDUCE and any(u.op is Ops.END and r in u.src[1:] for u in _topo(ast))


def apply_opt(ast: UOp, opt: Opt) -> UOp:
    rs = axes(ast)
    if opt.op is OptOps.NOLOCALS:
        return ast
    if opt.op is OptOps.TC:
        raise KernelOptError("TC: tensor cores are applied by the optimize stage for a GPU target (lower.wmma), "
                             "not by apply_opt")
    if opt.op is OptOps.SIMT:
        raise KernelOptError("SIMT: shared-memory staging is applied by the optimize stage for a GPU target "
                             "(lower.simt_smem), not by apply_opt")
    if opt.axis is None or not 0 <= opt.axis < len(rs):
        raise KernelOptError(f"{opt}: axis out of range; the kernel has {len(rs)} axes")
    r = rs[opt.axis]
    rtype = r.axis_type
    if opt.op is OptOps.SPLIT:
        k, target, top = opt.split_arg
        n = size(r)
        if not isinstance(k, int) or k < 1 or n % k:
            raise KernelOptError(f"{opt}: {k} does not divide the axis size {n}")
        if rtype not in _SPLIT_FROM.get(target, set()):
            raise KernelOptError(f"{opt}: a {target.name} axis cannot be split from a {rtype.name} axis")
        if target is not AxisType.REDUCE and _serial_store_loop(ast, r):
            raise KernelOptError(f"{opt}: axis {opt.axis} is the serial loop of a store through loaded positions "
                                 f"(a scatter): its iterations must run in order, not as lanes or threads")
        nid = next_range_id(ast)
        if top:
            a, b = UOp.range(k, nid, target), UOp.range(n // k, nid + 1, rtype)
            return replace_range(ast, r, (a, b), a * (n // k) + b)
        a, b = UOp.range(n // k, nid, rtype), UOp.range(k, nid + 1, target)
        return replace_range(ast, r, (a, b), a * k + b)
    if opt.op is OptOps.PADTO:
        return _padto(ast, r, opt)
    if opt.op is OptOps.SWAP:
        if not isinstance(opt.arg, int) or not 0 <= opt.arg < len(rs):
            raise KernelOptError(f"{opt}: the other axis is out of range")
        o = rs[opt.arg]
        for u in _topo(ast):
            if u.op is Ops.END and r in u.src[1:] and o in u.src[1:]:
                src = list(u.src)
                i, j = src.index(r), src.index(o)
                src[i], src[j] = src[j], src[i]
                return ast.substitute({u: UOp(Ops.END, tuple(src), u.arg, u.tag)})
        raise KernelOptError(f"{opt}: axes {opt.axis} and {opt.arg} are not loops closed by the same END")
    raise KernelOptError(f"unknown opt {opt}")


def _padto(ast: UOp, r: UOp, opt: Opt) -> UOp:
    from lower.rangeify import reduce_identity

    m, n = opt.arg, size(r)
    if isinstance(m, tuple) and len(m) == 2 and m[1] == "repeat":
        return _padto_repeat(ast, r, opt, m[0], n)
    if not isinstance(m, int) or m < 1:
        raise KernelOptError(f"{opt}: the multiple must be a positive int")
    if r.axis_type not in (AxisType.LOOP, AxisType.GLOBAL, AxisType.REDUCE):
        raise KernelOptError(f"{opt}: only LOOP and REDUCE axes can be padded, not {r.axis_type.name}")
    padded = -(-n // m) * m
    if padded == n:
        return ast
    p = UOp.range(padded, r.range_id, r.axis_type)
    ast = replace_range(ast, r, (p,), p)
    valid = p < n
    done: dict[UOp, UOp] = {}
    dep: dict[UOp, bool] = {}
    for u in ast.toposort():
        dep[u] = u is p or any(dep[s] for s in u.src)
        src = tuple(done.get(s, s) for s in u.src)
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and dep[u.src[0]] and len(src) < 3 and _inside(src[0]):
            new = UOp(Ops.LOAD, src, u.arg, u.tag)  # see _inside
        elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and dep[u.src[0]]:
            gate = valid if len(src) < 3 else (src[2] & valid)
            alt = src[1] if len(src) >= 2 else UOp.const(0, u.dtype)
            new = UOp(Ops.LOAD, (src[0], alt, gate), u.arg, u.tag)
        elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and dep[u.src[0]]:
            gate = valid if len(src) < 3 else (src[2] & valid)
            new = UOp(Ops.STORE, (src[0], src[1], gate), u.arg, u.tag)
        elif u.op is Ops.ATOMICADD and dep[u]:  # no gate: the padded threads add the identity (lower.atomics)
            from lower.atomics import gated_atomic_add

            new = gated_atomic_add(src[0], src[1], valid)
        elif u.op is Ops.REDUCE and p in u.src[1:]:
            ident = UOp.const(reduce_identity(u.reduce_op, u.dtype), u.dtype)
            new = UOp(Ops.REDUCE, (valid.where(src[0], ident), *src[1:]), u.arg, u.tag)
        else:
            new = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
        done[u] = new
    return done[ast]


def _inside(at: UOp) -> bool:
    """A buffer access whose every position over the padded range lies inside its buffer (a copy padded to whole
    panels, tensor.nn._panels): PADTO reads it ungated, since what the extra iterations read is never used (their
    stores are gated, a reduction adds its identity there). Gated, the load was a masked move in every step of
    matmul 1021's inner loop (27 -> 35 ms on an AVX2 EPYC)."""
    buf, i = at.src[0], at.src[1]
    return buf.op is Ops.BUFFER and len(buf.shape) == 1 and isinstance(n := buf.shape[0], int) and \
        i.dtype is dtypes.index and i.vmin >= 0 and i.vmax < n


def _padto_repeat(ast: UOp, r: UOp, opt: Opt, m: object, n: int) -> UOp:
    """PADTO (m, "repeat"): r padded to a multiple of m, the extra iterations computing what the last one does
    (every use reads min(r, n-1)) with the stores that depend on r gated by r < n. The extra work is never
    stored, so it needs no identity and its loads no gate: they read rows that exist."""
    if not isinstance(m, int) or m < 1:
        raise KernelOptError(f"{opt}: the multiple must be a positive int")
    if r.axis_type not in (AxisType.LOOP, AxisType.GLOBAL):
        raise KernelOptError(f"{opt}: only output (LOOP or GLOBAL) axes can repeat their last iteration, not "
                             f"{r.axis_type.name}; pad a reduction with PADTO m (its identity)")
    padded = -(-n // m) * m
    if padded == n:
        return ast
    p = UOp.range(padded, r.range_id, r.axis_type)
    valid = p < n
    ast = replace_range(ast, r, (p,), valid.where(p, UOp.const(n - 1, dtypes.index)))
    done: dict[UOp, UOp] = {}
    dep: dict[UOp, bool] = {}
    for u in ast.toposort():
        dep[u] = u is p or any(dep[s] for s in u.src)
        src = tuple(done.get(s, s) for s in u.src)
        if u.op is Ops.STORE and dep[u]:
            new = UOp(Ops.STORE, (src[0], src[1], valid if len(src) < 3 else (src[2] & valid)), u.arg, u.tag)
        elif u.op is Ops.ATOMICADD and dep[u]:
            from lower.atomics import gated_atomic_add

            new = gated_atomic_add(src[0], src[1], valid)
        else:
            new = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
        done[u] = new
    return done[ast]


def apply_opts(ast: UOp, opts: list[Opt]) -> UOp:
    for o in opts:
        ast = apply_opt(ast, o)
    return ast


def lower_threads(ast: UOp) -> UOp:
    """THREAD ranges become SPECIAL("core_id", n): the device runs the kernel once per thread index."""
    threads = [u for u in _topo(ast) if u.op is Ops.RANGE and u.axis_type is AxisType.THREAD]
    for i, r in enumerate(threads):
        ast = replace_range(ast, r, (), UOp(Ops.SPECIAL, (r.src[0],), "core_id" if i == 0 else f"core_id{i}"))
    return ast


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


def _lane_unfriendly(u: UOp) -> bool:
    """Would `u` run lane by lane in vector code? Besides _LANE_UNFRIENDLY: a cast between sizes, a cast from
    float to int that may leave the int's range (the wrapping helper), and a cast or bitcast to or from bool or
    bfloat16. A same-size cast or bitcast (exp's exponent bits) is one vector instruction."""
    if u.op in _LANE_UNFRIENDLY:
        return True
    if u.op not in (Ops.CAST, Ops.BITCAST):
        return False
    src, dst = u.src[0].dtype.scalar, u.dtype.scalar
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
    """Lanes that fill one of the target's vector registers for the kernel's widest stored dtype (at most 16)."""
    sizes = [u.src[1].dtype.itemsize for u in _topo(ast) if u.op is Ops.STORE] or [4]
    return max(2, min(16, target.lanes(max(sizes))))


def _upcast_outputs(ast: UOp) -> bool:
    """UPCAST_OUTPUTS, or a stored value that computes one of _LANES_FOR outside any reduction."""
    if UPCAST_OUTPUTS:
        return True
    stack = [u.src[1] for u in _topo(ast) if u.op is Ops.STORE]
    seen: set[UOp] = set()
    while stack:
        u = stack.pop()
        if u in seen or u.op is Ops.REDUCE:
            continue
        if u.op in _LANES_FOR:
            return True
        seen.add(u)
        stack.extend(u.src)
    return False


def _accumulators(body: tuple[UOp, ...], reduce_size: int, lanes: int, target: Target) -> int:
    """Vector registers of partial results for a reduction over `body` (see ACCUMULATORS): 1 for a costly body;
    else as many as fit a quarter of the target's vector registers, at most ACCUMULATORS, and leave the loop at
    least ACCUMULATORS steps."""
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


def hand_coded(ast: UOp, target: Target, threads: int | None = None, vectors: bool = True) -> list[Opt]:
    """Opts for a CPU target, in order: split the outermost output loop across the target's cores (`threads`
    overrides their count) when each thread gets enough work to pay for waking it; a register tile for a sum of
    products, and for a long one balancing ids (balance_ids: up to BALANCE_IDS ids per core); else upcast the
    innermost output loop into vector lanes (its stores and the loads that follow it become contiguous vectors);
    unroll into lanes each reduction whose body does not depend on those lanes (a
    vector of partial results instead of one serial accumulator). An interpreted target gets no opts (its cost
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
        if loops and (_upcast_outputs(ast) or streams_outputs(ast, target.stream_bytes)):
            ast, up = _split_first(ast, opts, loops[::-1][:1], AxisType.UPCAST, factors, pad=True)
        for red in [u for u in _topo(ast) if u.op is Ops.REDUCE]:
            body = _topo(red.src[0])
            if (up is not None and up in body) or any(_lane_unfriendly(u) for u in body):
                continue
            cur = axes(ast)
            pick = [cur.index(r) for r in red.src[1:] if r in cur and r.axis_type is AxisType.REDUCE
                    and _contiguous_everywhere(ast, r)][-1:]
            n = size(cur[pick[0]]) if pick else 0
            acc = _accumulators(body, n, lanes, target) if pick else 1
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
