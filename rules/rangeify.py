"""Rangeify's index math (row-major flatten, unflatten, reshape by groups of axes) and its realize points: the
kernel split's decisions that depend on where a node is read inside a kernel, as named rules.

Rangeify (lower.rangeify) builds a kernel by evaluating tensor-level nodes at index tuples. At each site (a node,
the index tuple it is read at, its validity gate, whether it is the kernel's own root) it applies
`realize_point_rules` with the engine's matcher for the node's op, the site as the typed context (`Site`). A rule
that fires returns a `RealizePoint`: the node to realize and the rule's name. The builder stops there; the
scheduler (lower.schedule) gives that node a buffer and its own kernel and builds this kernel again reading it.
Nothing is raised: the rule's result is the build's result.

  realize-reduce-in-reduce-loop  a REDUCE read inside another reduction's loop (its index moves with a REDUCE
                                 range), unless its sum has a closed form (lower.reduce_collapse): fused, it would
                                 be recomputed per iteration
  realize-reduce-epilogue        the source of an EXPAND read inside a reduction's loop that is a REDUCE's
                                 elementwise epilogue seen through reshapes and permutes, when the two rules
                                 around it would realize the REDUCE and then the epilogue (`(x @ W + b)` split
                                 into attention heads feeding `q @ k^T`): the epilogue with its REDUCE inline,
                                 one kernel storing into the permuted layout
  realize-expensive-broadcast    the source of an EXPAND read inside a reduction's loop that holds transcendental
                                 or division work (or cheap work over two or more loads) repeated by the broadcast
                                 (attention's softmax feeding `@ v`): computed once, read back per use; the value
                                 under its reshapes (the same memory)
  realize-broadcast-reduce       a REDUCE the kernel reads outside any reduction's loop but broadcast over output
                                 loops that enclose one it depends on (a BatchNorm's per-channel statistics in an
                                 NCHW kernel, whose batch loop is outside the channel loop): the linearizer can
                                 hoist a reduction only out of the loops inside its own, so fused it would be
                                 recomputed once per value of those outer loops
  realize-bitcast-source         the source of a BITCAST that changes the element size, when not realized already
                                 (it is read as raw memory; lower.split.realize_rules decides most of these first)

One more rule looks at the whole kernel once its build is done (`kernel_point_rules`, context `KernelSite`),
for a target whose output loops become threads (a GPU: no thread can hoist a value out of another's loop):

  realize-thread-broadcast-reduce  a REDUCE computed inline (not the kernel's root) that does not depend on
                                 output loops worth RECOMPUTE_LIMIT threads or more, in a kernel whose every
                                 output loop some reduction depends on (a pool over softmax's outputs: the
                                 window's reduction moves with every output, the softmax's statistics with
                                 none): each thread would compute the statistic again, and no block can share
                                 it (a kernel with a free output loop, softmax's own, shares its row statistics
                                 in a block per row: lower.gpu). The last such REDUCE in the kernel's order
                                 (the others it reads fuse into its own kernel)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from math import prod
from typing import ParamSpec, Protocol, TypeVar, cast

from rewrite import AxisType, GroupOp, Ops, Rule, RuleSet, UOp, dtypes, op

P = ParamSpec("P")
R = TypeVar("R")

REDUCE_IN_REDUCE_LOOP = "realize-reduce-in-reduce-loop"
REDUCE_EPILOGUE = "realize-reduce-epilogue"
EXPENSIVE_BROADCAST = "realize-expensive-broadcast"
BROADCAST_REDUCE = "realize-broadcast-reduce"
BITCAST_SOURCE = "realize-bitcast-source"
THREAD_BROADCAST_REDUCE = "realize-thread-broadcast-reduce"


class Site(Protocol):
    """The typed context of `realize_point_rules`: where the node is read in the kernel being built."""

    idx: tuple[UOp, ...]  # the index tuple the node is read at
    valid: UOp | None  # the gate its loads are under, if any
    top: bool  # whether the node is the kernel's own root
    buffers: dict[UOp, UOp]  # realized nodes (and BUFFER leaves) -> their buffers
    loops: tuple[UOp, ...]  # the kernel's output loops (LOOP RANGEs), outermost first
    work: dict[UOp, tuple[bool | None, int]]  # `source_work` of the sources met, kept for the kernel's build

    def collapsed(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp | None:
        """The closed form of the integer sum `n` at this site, or None (lower.rangeify.KernelBuilder.collapsed)."""
        ...


@dataclass(frozen=True)
class RealizePoint:
    """The result of a realize-point rule: `node` gets a buffer and a kernel of its own, by the rule `rule`."""

    node: UOp
    rule: str


_INDEX_CONSTS: dict[int, UOp] = {}  # the index constants index math made, kept: the same few at every site
_MISSING = object()


class _Kept(threading.local):
    memos: list[dict] | None = None  # while a split runs (`kept_index_math`): one memo per function


_kept = _Kept()
_KEPT_FNS: list[Callable] = []


@contextmanager
def kept_index_math() -> Iterator[None]:
    """Keep the answers of the index math below while the block runs, then drop them (a kernel split: lower.schedule).
    That math is pure (UOps in, hash-consed UOps out), and a split asks it the same questions again and again (a
    kernel's loads share their index; the kernels of a split share their shapes and their output loops, whose
    ranges every build numbers from 1). Dropped after it: an index can hold loaded positions (a gather's), whose
    BUFFERs, kept alive, would keep their data."""
    outer = _kept.memos
    if outer is None:
        _kept.memos = [{} for _ in _KEPT_FNS]
    try:
        yield
    finally:
        _kept.memos = outer


def _kept_in_split(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, its answers kept by argument while `kept_index_math` runs."""
    at = len(_KEPT_FNS)
    _KEPT_FNS.append(fn)

    @wraps(fn)
    def kept(*args: P.args, **kwargs: P.kwargs) -> R:
        if (memos := _kept.memos) is None or kwargs:
            return fn(*args, **kwargs)
        memo = memos[at]
        if (v := memo.get(args, _MISSING)) is _MISSING:
            v = memo[args] = fn(*args, **kwargs)
        return cast(R, v)

    return kept


def index_const(k: int) -> UOp:
    """`UOp.const(k)` for an int `k` (an index CONST), made once per value (up to a bound on how many are kept)."""
    if (c := _INDEX_CONSTS.get(k)) is None or type(k) is not int:
        c = UOp.const(k)
        if type(k) is int and len(_INDEX_CONSTS) < 4096:
            _INDEX_CONSTS[k] = c
    return c


ZERO = index_const(0)


@_kept_in_split
def expand_source_index(idx: tuple[UOp, ...], src_shape: tuple, shape: tuple) -> tuple[UOp, ...]:
    """The index an EXPAND from `src_shape` to `shape` reads its source at: broadcast axes at 0."""
    return tuple(ZERO if s == 1 and d != 1 else i for i, s, d in zip(idx, src_shape, shape, strict=True))


# ---------------------------------------------------------------------------- index math (row-major)

_ADD, _MUL = Ops.ADD, Ops.MUL


def _scalar_index(a: UOp) -> bool:
    return a.dtype is dtypes.index and a.shape == ()


def index_add(a: UOp, b: UOp | int) -> UOp:
    if isinstance(b, int):
        if b == 0:
            return a
        return UOp(_ADD, (a, index_const(b))) if type(b) is int and _scalar_index(a) else a + b
    if a.op is Ops.CONST and a.value == 0:
        return b
    return a + b


def _mul(a: UOp, k: int) -> UOp:
    if k == 0:
        return ZERO
    if k == 1:
        return a
    return UOp(_MUL, (a, index_const(k))) if type(k) is int and _scalar_index(a) else a * k


@_kept_in_split
def flat_index(idx: tuple[UOp, ...], shape: tuple) -> UOp:
    """Row-major linear offset of `idx` in `shape`."""
    out, stride = ZERO, 1
    for i, d in reversed(list(zip(idx, shape, strict=True))):
        if not (i.op is Ops.CONST and i.arg[0] == 0):
            out = index_add(out, _mul(i, stride))
        stride *= d
    return out


def unflatten(lin: UOp, shape: tuple) -> tuple[UOp, ...]:
    """Indices into `shape` of the row-major offset `lin` (assumed in range)."""
    out: list[UOp] = []
    stride = 1
    for k in range(len(shape) - 1, -1, -1):
        d = shape[k]
        if d == 1:
            out.append(ZERO)
        else:
            q = lin if stride == 1 else lin // stride
            out.append(q if k == 0 else q % d)
        stride *= d
    return tuple(reversed(out))


def reshape_groups(out_shape: tuple, src_shape: tuple) -> list[tuple[list[int], list[int]]] | None:
    """The axes of a reshape in groups that map onto each other: (out axes, src axes) with equal products,
    contiguous and in order, size-1 axes left out. None when a size is symbolic or zero (no grouping then)."""
    if not all(isinstance(d, int) and d > 0 for d in (*out_shape, *src_shape)):
        return None
    outs = [i for i, d in enumerate(out_shape) if d != 1]
    srcs = [j for j, d in enumerate(src_shape) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(outs):
        go, gs = [outs[i]], [srcs[j]]
        po, ps = out_shape[outs[i]], src_shape[srcs[j]]
        i, j = i + 1, j + 1
        while po != ps:
            if po < ps:
                go.append(outs[i])
                po *= out_shape[outs[i]]
                i += 1
            else:
                gs.append(srcs[j])
                ps *= src_shape[srcs[j]]
                j += 1
        groups.append((go, gs))
    return groups


@_kept_in_split
def reshape_index(idx: tuple[UOp, ...], out_shape: tuple, src_shape: tuple) -> tuple[UOp, ...]:
    """The source index of a reshape from `src_shape` to `out_shape` read at `idx`. Row-major order splits over
    groups of axes whose sizes multiply to the same number, so each group is flattened and unflattened on its
    own: an axis that keeps its size passes through, a split or merge touches only its axes. Equal to
    `unflatten(flat_index(idx, out_shape), src_shape)` for every in-range index, with much smaller terms."""
    groups = reshape_groups(out_shape, src_shape)
    if groups is None:
        return unflatten(flat_index(idx, out_shape), src_shape)
    new: list[UOp] = [ZERO] * len(src_shape)
    for go, gs in groups:
        if len(go) == 1 and len(gs) == 1:
            new[gs[0]] = idx[go[0]]
            continue
        lin = flat_index(tuple(idx[i] for i in go), tuple(out_shape[i] for i in go))
        for j, u in zip(gs, unflatten(lin, tuple(src_shape[j] for j in gs)), strict=True):
            new[j] = u
    return tuple(new)


def gate_and(a: UOp | None, b: UOp | None) -> UOp | None:
    return b if a is None else a if b is None else a & b


# ---------------------------------------------------------------------------- the realize points


EXPENSIVE = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW, Ops.SQRT, Ops.DIV, Ops.RECIP})
RECOMPUTE_LIMIT = 8
CHEAP_RECOMPUTE_LIMIT = 32


@_kept_in_split
def uses_reduce_range(idx: tuple[UOp, ...], valid: UOp | None) -> bool:
    """Whether an index tuple (or its gate) moves with a REDUCE range: the site is inside a reduction's loop."""
    for u in (*idx, *(() if valid is None else (valid,))):
        if u.op is Ops.CONST:
            continue
        if any(x.op is Ops.RANGE and x.arg[1] is AxisType.REDUCE for x in u.toposort()):
            return True
    return False


def source_work(src: UOp, buffers: dict[UOp, UOp]) -> tuple[bool | None, int]:
    """What `recomputed_expensive` finds in the work of an EXPAND's source (stopping at realized nodes and
    buffers): True at transcendental or division work, False at a REDUCE, whichever its walk meets first, else
    None; and the loads it counted up to there."""
    seen: set[UOp] = set()
    stack = [src]
    loads = 0
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u in buffers:
            loads += 1
            continue
        if u.op in EXPENSIVE:
            return True, loads
        if u.op is Ops.REDUCE:  # realized by its own rule first; the rebuilt kernel then sees it as a load
            return False, loads
        stack.extend(u.src)
    return None, loads


def broadcast_factor(n: UOp) -> int:
    """How many times an EXPAND repeats each element of its source (a symbolic size counts as RECOMPUTE_LIMIT)."""
    factor = 1
    for s, d in zip(n.src[0].shape, n.shape, strict=True):
        if s == 1 and d != 1:
            factor *= d if isinstance(d, int) else RECOMPUTE_LIMIT
    return factor


def unreshaped(x: UOp, buffers: dict[UOp, UOp]) -> UOp:
    """`x` under its RESHAPEs (down to a realized node): a reshape keeps the row-major order of the elements, so
    the value below it stored is the same memory, and realizing the reshape instead would only copy that value
    when another rule realizes it too (a LayerNorm's output, realized as a matmul operand and for its other
    readers)."""
    while x.op is Ops.RESHAPE and x.src[0] not in buffers:
        x = x.src[0]
    return x


_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE})


def reduce_epilogue(src: UOp, buffers: dict[UOp, UOp]) -> tuple[UOp, bool, int] | None:
    """When `src` is elementwise work over exactly one REDUCE read through RESHAPEs and PERMUTEs only (a view of
    the reduction's output: every element of `src` is one element of the REDUCE), with at least one elementwise
    op and no other reduction among its inputs (down to realized nodes): that REDUCE, whether the work holds
    transcendental or division ops, and the loads it reads counting the REDUCE as one (realized, it would be);
    else None."""
    found: UOp | None = None
    expensive, ops, loads = False, 0, 1
    seen: set[tuple[UOp, bool]] = set()
    stack = [(src, True)]
    while stack:
        u, direct = stack.pop()
        if (u, direct) in seen:
            continue
        seen.add((u, direct))
        if u in buffers:
            loads += 1
            continue
        if u.op is Ops.REDUCE:
            if not direct or (found is not None and found is not u):
                return None  # a broadcast or windowed reduction, or a second one: not one reduction's epilogue
            found = u
            continue
        if u.op in GroupOp.Elementwise or (u.op is Ops.BITCAST and u.dtype.itemsize == u.src[0].dtype.itemsize):
            ops += 1
            expensive |= u.op in EXPENSIVE
        elif u.op not in _VIEWS:
            direct = False  # an EXPAND, SHRINK, PAD, ... : the sources below are not the output's elements
        stack.extend((s, direct) for s in u.src)
    return None if found is None or not ops else (found, expensive, loads)


def recomputed_expensive(n: UOp, idx: tuple[UOp, ...], valid: UOp | None, buffers: dict[UOp, UOp],
                         work: dict[UOp, tuple[bool | None, int]] | None = None) -> bool:
    """An EXPAND read at `idx` inside a reduction's loop (its source index moves with a REDUCE range) evaluates its
    source once per value of the broadcast axes, which are output loops outside that reduction, so the linearizer cannot
    hoist it. If the source holds transcendental or division work (attention's softmax feeding `@ v`) and the
    broadcast repeats it at least RECOMPUTE_LIMIT times, the source is realized instead: computed once, read
    back per use. So is cheap work that combines two or more loads (a matmul's bias and ReLU feeding the next
    matmul) repeated at least CHEAP_RECOMPUTE_LIMIT times: its loads and ops inside the loop cost more than one
    elementwise pass. `work`, when given, keeps `source_work` by source (a kernel reads a source at many sites)."""
    src = n.src[0]
    if not (factor := repeated_in_loop(n, idx, valid, buffers)):
        return False
    if work is None:
        found, loads = source_work(src, buffers)
    elif (known := work.get(src)) is None:
        found, loads = work[src] = source_work(src, buffers)
    else:
        found, loads = known
    if found is not None:
        return found
    return _cheap_but_repeated(loads, factor)


def repeated_in_loop(n: UOp, idx: tuple[UOp, ...], valid: UOp | None, buffers: dict[UOp, UOp]) -> int:
    """How many times the EXPAND `n`, read at `idx` inside a reduction's loop (its source index moves with a REDUCE
    range), repeats its unrealized source's work: its broadcast factor when that is at least RECOMPUTE_LIMIT, else
    0 (a realized source, a smaller factor, or an index that does not move with the reduction)."""
    src = n.src[0]
    factor = broadcast_factor(n)
    if factor < RECOMPUTE_LIMIT or src in buffers:
        return 0
    return factor if uses_reduce_range(expand_source_index(idx, src.shape, n.shape), valid) else 0


def _cheap_but_repeated(loads: int, factor: int) -> bool:
    """Cheap work that combines two or more loaded values (a bias and ReLU on a matmul's output, ReLU's gradient
    mask), repeated CHEAP_RECOMPUTE_LIMIT times or more: worth storing once."""
    return loads >= 2 and factor >= CHEAP_RECOMPUTE_LIMIT


def _reduce_in_reduce_loop(ctx: Site, n: UOp) -> RealizePoint | None:
    if ctx.top or ctx.collapsed(n, ctx.idx, ctx.valid) is not None:  # a closed form has no loop to recompute
        return None
    return RealizePoint(n, REDUCE_IN_REDUCE_LOOP) if uses_reduce_range(ctx.idx, ctx.valid) else None


@_kept_in_split
def broadcast_repeats(idx: tuple[UOp, ...], valid: UOp | None, loops: tuple[UOp, ...]) -> int:
    """How many times a value read at `idx` (under `valid`) inside a kernel whose output loops are `loops`
    (outermost first) is computed again for the same index: the loops it does not depend on that enclose the
    innermost loop it does depend on (a value depends on the loops in its index, and the linearizer hoists it
    out of every loop inside the innermost of those)."""
    used: set[UOp] = set()
    for u in (*idx, *(() if valid is None else (valid,))):
        if u.op is not Ops.CONST:
            used.update(x for x in u.toposort() if x.op is Ops.RANGE)
    depth = max((i for i, r in enumerate(loops) if r in used), default=-1)
    repeats = 1
    for r in loops[:max(depth, 0)]:
        if r not in used:  # a symbolic bound counts as RECOMPUTE_LIMIT
            repeats *= extent(r, RECOMPUTE_LIMIT)
    return repeats


def _broadcast_reduce(ctx: Site, n: UOp) -> RealizePoint | None:
    if ctx.top or broadcast_repeats(ctx.idx, ctx.valid, ctx.loops) < RECOMPUTE_LIMIT:
        return None
    if ctx.collapsed(n, ctx.idx, ctx.valid) is not None:  # a closed form has no loop to recompute
        return None
    return RealizePoint(n, BROADCAST_REDUCE)


def heavy_reduction(n: UOp, loop_bytes: int | None) -> bool:
    """Whether `n` is a REDUCE whose loop does RECOMPUTE_LIMIT times more work (its source's elements, each of
    them computed once) than the bytes it reads in elements (`loop_bytes`, lower.split_bytes.recompute_bytes): a
    contraction such as a matmul's, whose operands are broadcast against each other inside the loop. Two kernels
    computing it inline each repeat that work, which counting bytes does not see (a row sum reads each element
    it adds: not heavy; a reduction over constants alone reads nothing: not heavy either)."""
    if n.op is not Ops.REDUCE or not loop_bytes:
        return False
    work = 1
    for d in n.src[0].shape:
        if not isinstance(d, int):
            return False
        work *= d
    return work * n.src[0].dtype.itemsize >= RECOMPUTE_LIMIT * loop_bytes


def _reduce_epilogue(ctx: Site, n: UOp) -> RealizePoint | None:
    """An EXPAND read inside a reduction's loop whose source is a REDUCE's elementwise epilogue seen through
    reshapes and permutes (a matmul's bias, the attention heads' `(x @ W + b).reshape(...).permute(...)`): the
    REDUCE would be realized by its own rule (it is read inside this loop), and then its epilogue by
    realize-expensive-broadcast (transcendental work, or cheap work over two or more loads repeated
    CHEAP_RECOMPUTE_LIMIT times): two kernels, the bare reduction's output stored and read back once more. The
    epilogue is realized instead, with its REDUCE computed inline: one kernel whose loops are the epilogue's (the
    permuted layout), the reduction inside them, the epilogue applied once per element and stored straight into
    the layout its reader wants. That layout can make the stores strided (attention's k, stored (.., d, t) for
    `q @ k^T`): measured on BERT's projections (AVX-512 host), that kernel took 1.17 ms against 1.05 ms for q's
    contiguous stores, still less than the bare product and the permuting kernel (1.08 + 0.23 ms); storing k's
    natural layout instead made the score matmul read its columns strided, several times slower. So the
    epilogue always takes its reader's layout."""
    src = n.src[0]
    if not (factor := repeated_in_loop(n, ctx.idx, ctx.valid, ctx.buffers)):
        return None
    if (epi := reduce_epilogue(src, ctx.buffers)) is None:
        return None
    _, expensive, loads = epi
    if expensive or _cheap_but_repeated(loads, factor):
        return RealizePoint(unreshaped(src, ctx.buffers), REDUCE_EPILOGUE)
    return None


def _expensive_broadcast(ctx: Site, n: UOp) -> RealizePoint | None:
    if recomputed_expensive(n, ctx.idx, ctx.valid, ctx.buffers, ctx.work):
        return RealizePoint(unreshaped(n.src[0], ctx.buffers), EXPENSIVE_BROADCAST)
    return None


def _bitcast_source(ctx: Site, n: UOp) -> RealizePoint | None:
    if n.dtype.itemsize == n.src[0].dtype.itemsize or n.src[0] in ctx.buffers:
        return None
    return RealizePoint(n.src[0], BITCAST_SOURCE)


# fmt: off
realize_point_rules = RuleSet("realize-point", [
    Rule(REDUCE_IN_REDUCE_LOOP, op.REDUCE(name="n"), _reduce_in_reduce_loop),
    Rule(BROADCAST_REDUCE, op.REDUCE(name="n"), _broadcast_reduce),
    Rule(REDUCE_EPILOGUE, op.EXPAND(name="n"), _reduce_epilogue),
    Rule(EXPENSIVE_BROADCAST, op.EXPAND(name="n"), _expensive_broadcast),
    Rule(BITCAST_SOURCE, op.BITCAST(name="n"), _bitcast_source),
])
# fmt: on


def realize_point(site: Site, n: UOp) -> RealizePoint | None:
    """The realize point `realize_point_rules` decide for `n` read at `site`, if any (the first rule that fires)."""
    m = realize_point_rules.matcher(n.op)
    res = None if m is None else m(n, site)
    return None if res is None else cast(RealizePoint, res[0])  # what every rule here returns


class KernelSite(Protocol):
    """The typed context of `kernel_point_rules`: a kernel whose build is done."""

    loops: tuple[UOp, ...]  # the kernel's output loops (LOOP RANGEs), outermost first
    threads: bool  # whether the target runs the output loops as threads (a GPU target: Target.warp_size > 0)
    inline: dict[UOp, UOp]  # each kernel REDUCE computed inline (not the root) -> the tensor REDUCE it computes


THREAD_MIN_REDUCE = 32  # a shorter reduction recomputed per thread costs less than a kernel of its own


def extent(r: UOp, symbolic: int) -> int:
    """The iterations of RANGE r: its constant bound, or `symbolic` where the bound is not a constant."""
    b = r.src[0]
    return b.value if b.op is Ops.CONST and isinstance(b.value, int) else symbolic


def live_ranges(root: UOp, ranges: frozenset[UOp] | set[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For each node below `root`, the RANGEs of `ranges` its value moves with: those below it, less the ones a
    REDUCE or END closes (a reduction's value does not move with its own loop). Shared by the realize rule below
    and lower.expand's bound on the copies unrolling makes."""
    deps: dict[UOp, frozenset[UOp]] = {}
    none: frozenset[UOp] = frozenset()
    for u in root.toposort():
        if u in ranges:
            deps[u] = frozenset((u,))
        elif not u.src:
            deps[u] = none
        else:
            d = deps[u.src[0]]
            for s in u.src[1:]:
                if deps[s] is not d:
                    d = d | deps[s]
            if u.op in (Ops.REDUCE, Ops.END) and d:
                d = d - set(u.src[1:])
            deps[u] = d
    return deps


def _thread_broadcast_reduce(ctx: KernelSite, k: UOp) -> RealizePoint | None:
    if not ctx.threads or not ctx.inline or not ctx.loops:
        return None
    loops = frozenset(ctx.loops)
    deps = live_ranges(k, loops)
    reds = [u for u in k.toposort() if u.op is Ops.REDUCE]
    if set().union(*(deps[r] for r in reds)) != loops:  # a free output loop: a block per row shares them
        return None
    found = None
    for r in reds:
        if r not in ctx.inline or prod(extent(x, THREAD_MIN_REDUCE) for x in r.src[1:]) < THREAD_MIN_REDUCE:
            continue
        if prod(extent(x, RECOMPUTE_LIMIT) for x in loops - deps[r]) >= RECOMPUTE_LIMIT:
            found = r  # the last in the kernel's order: the ones it reads fuse into its kernel
    return None if found is None else RealizePoint(ctx.inline[found], THREAD_BROADCAST_REDUCE)


# fmt: off
kernel_point_rules = RuleSet("kernel-point", [
    Rule(THREAD_BROADCAST_REDUCE, op.SINK(name="k"), _thread_broadcast_reduce),
])
# fmt: on


def kernel_point(site: KernelSite, k: UOp) -> RealizePoint | None:
    """The realize point `kernel_point_rules` decide for the kernel `k` (its SINK) at `site`, if any."""
    m = kernel_point_rules.matcher(k.op)
    res = None if m is None else m(k, site)
    return None if res is None else cast(RealizePoint, res[0])


__all__ = [
    "BITCAST_SOURCE",
    "BROADCAST_REDUCE",
    "EXPENSIVE",
    "EXPENSIVE_BROADCAST",
    "REDUCE_EPILOGUE",
    "REDUCE_IN_REDUCE_LOOP",
    "THREAD_BROADCAST_REDUCE",
    "ZERO",
    "KernelSite",
    "RealizePoint",
    "Site",
    "broadcast_factor",
    "expand_source_index",
    "extent",
    "flat_index",
    "gate_and",
    "heavy_reduction",
    "index_add",
    "index_const",
    "kept_index_math",
    "kernel_point",
    "kernel_point_rules",
    "live_ranges",
    "realize_point",
    "realize_point_rules",
    "recomputed_expensive",
    "reduce_epilogue",
    "repeated_in_loop",
    "reshape_groups",
    "reshape_index",
    "source_work",
    "unflatten",
    "unreshaped",
    "uses_reduce_range",
]
