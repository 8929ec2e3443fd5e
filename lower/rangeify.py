"""Rangeify: turn the tensor-level graph of one realized node into a kernel over RANGEs.

Every value is computed at a tuple of scalar index UOps, one per axis. Walking from the kernel's output down,
the builder expands each site (a node, the index tuple it is read at, its validity gate) with the first rule of
`rangeify_rules` that fires on the node, the builder as the rules' typed context (`idx`, `valid`, `top` are the
site). One rule per op family, each mapping the output index to its sources' indices:

  rangeify-load                a realized node (not the kernel's root) or a BUFFER: LOAD(INDEX(buf, flat index)),
                               gated by the site's gate
  rangeify-leaf                a CONST or a symbolic variable: itself
  realize-*                    the realize points (rules.rangeify.realize_point_rules; see below)
  rangeify-same-index          DETACH, CONTIGUOUSBACKWARD, AFTER, CONTIGUOUS: the source at the same index
  rangeify-reshape             flattens and unflattens only the groups of axes it merges or splits
  rangeify-expand              size-1 axes at 0
  rangeify-permute             reorders
  rangeify-shrink              adds its offset
  rangeify-flip                reflects
  rangeify-pad                 subtracts its offset and adds a validity condition (loads under it are gated)
  rangeify-index               reads its source at positions loaded from its index tensors (a gated load)
  rangeify-reduce-empty        a reduction over a zero-size axis is its identity (no loop, nothing loaded)
  rangeify-reduce              opens new REDUCE-type RANGEs for its axes (or a closed form, lower.reduce_collapse)
  rangeify-stack, -vconst      pick a source or a value by comparisons on the first index
  rangeify-resizing-bitcast    reads the realized source's memory as the new dtype
  rangeify-elementwise         ALU ops, CAST, same-size BITCAST: the sources at the (broadcast) same index

The result is `SINK(END(STORE(INDEX(out, flat(ranges)), value), ranges...))`, every value of shape (). The
builder walks the sites itself (an explicit stack, a memo keyed by (node, index tuple, gate)): the terms are
sites, not UOps, so this is not a `graph_rewrite`; identical (node, index) pairs are the same UOp
(hash-consing), so shared work is computed once per kernel.

A REDUCE is fused into its consumer unless the consumer would evaluate it inside another reduction's loop
(its index depends on a REDUCE range): then it would be recomputed per iteration, so it is realized into
its own kernel. Likewise an EXPAND of transcendental or division work read inside a reduction (softmax feeding
a matmul) is realized rather than recomputed per broadcast value. These are the realize-point rules, tried
before an op's own rule: the first that fires stops the build, which returns the `RealizePoint` (the node and
the rule's name) for the scheduler to realize and build this kernel again (lower.schedule). Values that depend
only on outer loops are hoisted by the linearizer, so `x - x.max()` or `x.var()` stay one kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from rewrite import AxisType, DType, Ops, Rule, RuleSet, UOp, dtypes, op, var
from rewrite.derive import shape_values
from rewrite.uop import ConstValue
from rewrite.viz import capture as viz_capture
from rules.rangeify import (
    EXPENSIVE,
    ZERO,
    RealizePoint,
    expand_source_index,
    flat_index,
    gate_and,
    index_add,
    index_const,
    kernel_point,
    realize_point_rules,
    reshape_groups,
    reshape_index,
    unflatten,
)

_IDENTITY: dict[Ops, ConstValue] = {Ops.ADD: 0, Ops.MUL: 1}


def reduce_identity(op: Ops, dtype: DType) -> ConstValue:
    """The value a reduction by `op` starts from: 0 for ADD, 1 for MUL, the dtype's least value for MAX."""
    if op is Ops.MAX:
        return dtype.min
    return _IDENTITY[op]


Key = tuple  # (node, idx tuple, valid | None)


def _stopped(_v: list[UOp]) -> UOp:
    raise AssertionError("rangeify: a stopped build combined a value")  # never called: the walk stops first


class KernelBuilder:
    """Builds the scalar value of tensor-level nodes at given indices, for one kernel. It is also the typed
    context of rules.rangeify's realize-point rules (`Site`): `idx`, `valid` and `top` describe the site being
    expanded; `point` is the first realize point a rule decided (the build stops there). When `points` is a
    list, every realize point the build meets is recorded there instead and the build goes on past it (the
    point's value a placeholder: such a build is not a kernel), so one build finds them all."""

    def __init__(self, buffers: dict[UOp, UOp], range_ids: list[int]) -> None:
        self.buffers = buffers  # realized node (or BUFFER leaf) -> the 1-D BUFFER holding it
        self.range_ids = range_ids  # a shared counter, so range ids are unique within the kernel
        self.memo: dict[Key, UOp] = {}
        self.point: RealizePoint | None = None
        self.points: list[RealizePoint] | None = None
        self.idx: tuple[UOp, ...] = ()
        self.valid: UOp | None = None
        self.top = False
        self.loops: tuple[UOp, ...] = ()  # the kernel's output loops, outermost first (rules.rangeify.Site)
        self._closed: dict[Key, UOp | None] = {}
        self.fired: list[tuple[UOp, str]] | None = None  # when a list: each site's node and the rule that fired
        self.fused: dict[UOp, None] = {}  # the REDUCEs computed inline (not the kernel's own root), in order
        self.shared: frozenset[UOp] = frozenset()  # REDUCEs realized because several kernels read them
        self._reads: dict[UOp, bool] = {}
        self.work: dict[UOp, tuple[bool | None, int]] = {}  # rules.rangeify.source_work, by source

    def reads_shared(self, u: UOp | None) -> bool:
        """Whether `u` is computed from one of `shared` (stopping at other realized nodes)."""
        if u is None:
            return False
        memo = self._reads
        stack = [u]
        while stack:
            x = stack[-1]
            if x in memo:
                stack.pop()
                continue
            if x in self.shared or (x in self.buffers and x.op is not Ops.BUFFER):
                memo[x] = x in self.shared
                stack.pop()
                continue
            todo = [s for s in x.src if s not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[x] = any(memo[s] for s in x.src)
            stack.pop()
        return memo[u]

    def new_range(self, size: int, axis_type: AxisType) -> UOp:
        self.range_ids[0] += 1
        return UOp.range(size, self.range_ids[0], axis_type)

    def value(self, root: UOp, idx: tuple[UOp, ...], valid: UOp | None = None) -> UOp | None:
        """The value of `root` at `idx` under `valid`, or None when a realize-point rule stopped the build."""
        memo, expand = self.memo, self.expand
        first = (root, idx, valid)
        stack: list = [first]
        push, pop = stack.append, stack.pop
        while stack:
            task = pop()
            if len(task) == 3:  # a site: expand it, then its sources not known yet (the last one first)
                if task in memo:
                    continue
                node = task[0]
                kids, combine = expand(node, task[1], task[2], node is root)
                if self.point is not None:
                    return None
                push((task, kids, combine, None))
                for k in kids:
                    if k not in memo:
                        push(k)
            else:  # its sources are known: combine them
                key, kids, combine, _ = task
                if key not in memo:
                    memo[key] = combine([memo[k] for k in kids])
        return memo[first]

    def load(self, buf: UOp, node_shape: tuple, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
        at = buf.index(flat_index(idx, node_shape))
        if valid is None:
            return at.load()
        return UOp(Ops.LOAD, (at, UOp.const(0, buf.dtype), valid))

    def expand(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None, top: bool) -> tuple[list[Key], Callable]:
        """The sources `n` needs at this site and how its value combines theirs: the first rule of
        `rangeify_rules` that fires on `n` with this builder (at site idx, valid, top) as its context. A
        realize-point rule's result (or one an inner build met) stops the build."""
        self.idx, self.valid, self.top = idx, valid, top
        m = rangeify_rules.matcher(n.op)
        res = None if m is None else m(n, self)
        if self.point is not None:  # the REDUCE rule's closed form or an INDEX's positions met a realize point
            return [], _stopped
        if res is None:
            raise NotImplementedError(f"rangeify: no lowering for {n.op.name} (node {n.short()})")
        out = res[0]
        if self.fired is not None:
            self.fired.append((n, rangeify_rules.rules[res[1]].name))
        if type(out) is RealizePoint:
            if self.points is not None:  # recorded; the build goes on with a placeholder for its value
                self.points.append(out)
                placeholder = UOp.const(0, n.dtype)
                return [], lambda _v: placeholder
            self.point = out
            return [], _stopped
        return cast(Expansion, out)

    def collapsed(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp | None:
        """An integer sum over one axis of a value computed from constants alone (the spec's arange, a prefix sum
        of ones) in closed form (lower.reduce_collapse): no REDUCE, no loop, and nothing to realize when it is
        read inside another reduction. None for every other reduction (and when the build stopped). Computed once
        per site (the realize-point rule asks first)."""
        key = (n, idx, valid)
        if key in self._closed:
            return self._closed[key]
        out = self._closed[key] = self._collapsed(n, idx, valid)
        return out

    def _collapsed(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp | None:
        src = n.src[0]
        axes = [a for a in n.reduce_axes if src.shape[a] != 1]
        if n.reduce_op is not Ops.ADD or len(axes) != 1 or not n.dtype.is_int or not _constant_only(src, self.buffers):
            return None
        from lower.reduce_collapse import collapse_sum
        from rules import simplify_fast

        new = list(idx)
        for a in n.reduce_axes:
            new[a] = ZERO
        r = self.new_range(src.shape[axes[0]], AxisType.REDUCE)
        new[axes[0]] = r
        inner = KernelBuilder(self.buffers, self.range_ids)
        inner.points, inner.work = self.points, self.work
        if (v := inner.value(src, tuple(new), valid)) is None:
            self.point = inner.point
            return None
        out = collapse_sum(simplify_fast(v), r)
        return None if out is None else simplify_fast(out)


def _constant_only(u: UOp, buffers: dict[UOp, UOp]) -> bool:
    """Whether the tensor graph `u` reads no memory: CONST/VCONST leaves under movement and ALU ops only."""
    seen: set[UOp] = set()
    stack = [u]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x in buffers or x.op in (Ops.BUFFER, Ops.PARAM, Ops.INDEX, Ops.REDUCE, Ops.COPY, Ops.LOAD):
            return False
        stack.extend(x.src)
    return True


_ELEMENTWISE = frozenset(o for o in Ops if o.name in {
    "ADD", "MUL", "MAX", "MOD", "IDIV", "CMPLT", "CMPNE", "XOR", "OR", "AND", "SHR", "SHL", "WHERE", "RECIP",
    "TRUNC", "NEG", "SUB", "DIV", "CMPGT", "CMPGE", "CMPLE", "CMPEQ", "NOT", "EXP2", "LOG2", "SIN", "SQRT", "POW",
    "MULACC", "THREEFRY", "CDIV", "CMOD"})


_MOVES = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.PAD, Ops.FLIP})


def _broadcast_of(u: UOp) -> UOp | None:
    """The node a chain of movement ops with an EXPAND in it reads (None without an EXPAND)."""
    expanded = False
    while u.op in _MOVES:
        expanded |= u.op is Ops.EXPAND
        u = u.src[0]
    return u if expanded else None


def _broadcast_idx(idx: tuple[UOp, ...], out_shape: tuple, src_shape: tuple) -> tuple[UOp, ...]:
    if src_shape == out_shape:
        return idx
    off = len(out_shape) - len(src_shape)
    return tuple(ZERO if s == 1 and out_shape[off + k] != 1 else idx[off + k] for k, s in enumerate(src_shape))


# ---------------------------------------------------------------------------- rangeify's rules, one per op family
# Each callback reads the site (ctx.idx, ctx.valid, ctx.top) before anything else: an INDEX's positions are built
# by a nested walk that moves the site.

Expansion = tuple[list[Key], Callable[[list[UOp]], UOp]]


def _first(v: list[UOp]) -> UOp:
    return v[0]


def _load(ctx: KernelBuilder, n: UOp) -> Expansion | None:
    """rangeify-load: a realized node (not the kernel's own root) or a BUFFER is a LOAD, gated by the site's gate."""
    if n not in ctx.buffers or (ctx.top and n.op is not Ops.BUFFER):
        return None
    ld = ctx.load(ctx.buffers[n], n.shape, ctx.idx, ctx.valid)
    return [], lambda _v: ld


def _leaf(ctx: KernelBuilder, n: UOp) -> Expansion | None:
    """rangeify-leaf: a scalar constant or a symbolic variable is itself at every index."""
    if n.op is Ops.PARAM and not n.is_variable:
        return None
    return [], lambda _v: n


def _same_index(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-same-index: DETACH, CONTIGUOUSBACKWARD, AFTER and CONTIGUOUS read their source where they are read."""
    return [(n.src[0], ctx.idx, ctx.valid)], _first


def _reshape(ctx: KernelBuilder, n: UOp) -> Expansion:
    return [(n.src[0], reshape_index(ctx.idx, n.shape, n.src[0].shape), ctx.valid)], _first


def _expand(ctx: KernelBuilder, n: UOp) -> Expansion:
    return [(n.src[0], expand_source_index(ctx.idx, n.src[0].shape, n.shape), ctx.valid)], _first


def _permute(ctx: KernelBuilder, n: UOp) -> Expansion:
    order, idx = n.int_tuple_arg, ctx.idx
    return [(n.src[0], tuple(idx[order.index(k)] for k in range(len(order))), ctx.valid)], _first


def _shrink(ctx: KernelBuilder, n: UOp) -> Expansion:
    begin = shape_values(n.src[1])
    return [(n.src[0], tuple(index_add(i, b) for i, b in zip(ctx.idx, begin, strict=True)), ctx.valid)], _first


def _flip(ctx: KernelBuilder, n: UOp) -> Expansion:
    dims = zip(ctx.idx, n.src[0].shape, n.flip_flags, strict=True)
    return [(n.src[0], tuple(index_add(index_const(d - 1), i * -1) if f else i for i, d, f in dims), ctx.valid)], _first


def _pad(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-pad: the source at the index less the padding, under a gate that is false in the padding (where
    the value is 0 and no load happens)."""
    idx, valid = ctx.idx, ctx.valid
    begin, end = shape_values(n.src[1]), shape_values(n.src[2])
    cond: UOp | None = None
    new = []
    for i, b, e, d in zip(idx, begin, end, n.src[0].shape, strict=True):
        new.append(index_add(i, -b))
        if b > 0:
            cond = gate_and(cond, index_const(b - 1) < i)
        if e > 0:
            cond = gate_and(cond, i < b + d)
    if cond is None:
        return [(n.src[0], tuple(new), valid)], _first
    zero = UOp.const(0, n.dtype)
    return [(n.src[0], tuple(new), gate_and(valid, cond))], lambda v: cond.where(v[0], zero)


def _index(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-index: INDEX(x, i1, ..., im), a read of x at positions held in data (an embedding's rows). Each
    index tensor is evaluated at its own output axis (a ()-shaped one at none) and becomes x's index on its axis,
    so the load's address holds a loaded value. A position outside x's axis reads 0: the read is gated, never out
    of bounds (a kernel cannot raise; the reference evaluator does)."""
    idx, valid = ctx.idx, ctx.valid
    x, idxs = n.src[0], n.src[1:]
    pos, new, cond = 0, [], valid
    for axis, i in enumerate(idxs):
        at = (idx[pos],) if i.shape else ()
        pos += len(i.shape)
        v = ctx.value(i, at, valid)
        if v is None:
            return [], _stopped
        v = v if v.dtype is dtypes.index else v.cast(dtypes.index)
        new.append(v)
        cond = gate_and(cond, (UOp.const(-1) < v) & (v < x.shape[axis]))
    zero = UOp.const(0, n.dtype)
    return [(x, (*new, *idx[pos:]), cond)], lambda v: cond.where(v[0], zero)  # type: ignore[union-attr]  # an INDEX has an index: cond is set


def _reduce_empty(ctx: KernelBuilder, n: UOp) -> Expansion | None:
    """rangeify-reduce-empty: a reduction over an axis of size 0 is the reduction's identity: nothing is read (a
    load in an empty loop would otherwise be hoisted out of it by the symbolic stage, which takes the empty
    range's index for 0, and read past a zero-size buffer)."""
    if not any(isinstance(d := n.src[0].shape[a], int) and d == 0 for a in n.reduce_axes):
        return None
    value = UOp.const(reduce_identity(n.reduce_op, n.dtype), n.dtype)
    return [], lambda _v: value


def _reduce(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-reduce: the closed form of a constant integer sum, else the source at new REDUCE ranges on the
    reduced axes (size-1 axes at 0), summed by a REDUCE over them. A REDUCE computed inline is recorded in
    `fused` (lower.schedule realizes it when several kernels compute it)."""
    idx, valid, top = ctx.idx, ctx.valid, ctx.top
    if (closed := ctx.collapsed(n, idx, valid)) is not None:
        return [], lambda _v: closed
    src, ranges, new = n.src[0], [], list(idx)
    for a in n.reduce_axes:
        d = src.shape[a]
        if d == 1:
            new[a] = ZERO
        else:
            r = ctx.new_range(d, AxisType.REDUCE)
            ranges.append(r)
            new[a] = r
    k = (src, tuple(new), valid)
    if not ranges:
        return [k], _first
    if not top:
        ctx.fused[n] = None
    arg = (n.reduce_op, ())
    return [k], lambda v: UOp(Ops.REDUCE, (v[0], *ranges), arg)


def _stack(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-stack: STACK(a, b, ...) at (i, rest): the i-th source at rest, chosen by comparisons on i."""
    idx = ctx.idx

    def pick(v: list[UOp]) -> UOp:
        out = v[-1]
        for i in range(len(v) - 2, -1, -1):
            out = idx[0].eq(i).where(v[i], out)
        return out

    return [(s, idx[1:], ctx.valid) for s in n.src], pick


def _vconst(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-vconst: a vector constant at i: its i-th value, chosen by comparisons on i."""
    vals, i0 = n.vconst_values, ctx.idx[0]

    def select(_v: list[UOp]) -> UOp:
        out = UOp.const(vals[-1], n.dtype)
        for i in range(len(vals) - 2, -1, -1):
            out = i0.eq(i).where(UOp.const(vals[i], n.dtype), out)
        return out

    return [], select


def _resizing_bitcast(ctx: KernelBuilder, n: UOp) -> Expansion | None:
    """rangeify-resizing-bitcast: a bitcast that changes the element size reads the source's memory as the new
    dtype: the source is realized (rule realize-bitcast-source) and read through a BUFFER of the same slot with
    the new dtype and element count."""
    if n.dtype.itemsize == n.src[0].dtype.itemsize:
        return None
    b = ctx.buffers[n.src[0]]
    count = b.shape[0] * b.dtype.itemsize // n.dtype.itemsize
    alias = UOp(Ops.BUFFER, (UOp.shape_operand((count,)),), b.buf_arg._replace(dtype=n.dtype))
    ld = ctx.load(alias, n.shape, ctx.idx, ctx.valid)
    return [], lambda _v: ld


def _elementwise(ctx: KernelBuilder, n: UOp) -> Expansion:
    """rangeify-elementwise: an ALU op, CAST or same-size BITCAST reads its sources at the same index (a source of
    fewer dimensions or size-1 axes broadcast at 0). One that combines a broadcast shared statistic with other
    values is recorded in `fused`: it may be shared by several kernels too (lower.schedule)."""
    idx, valid = ctx.idx, ctx.valid
    if not ctx.top and ctx.shared and any(ctx.reads_shared(_broadcast_of(s)) for s in n.src):
        ctx.fused[n] = None
    op, arg = n.op, n.arg
    return [(s, _broadcast_idx(idx, n.shape, s.shape), valid) for s in n.src], lambda v: UOp(op, tuple(v), arg)


# fmt: off
rangeify_rules = RuleSet("rangeify", [
    Rule("rangeify-load", var("n"), _load),
    Rule("rangeify-leaf", op[Ops.CONST, Ops.PARAM](name="n"), _leaf),
    *realize_point_rules,
    Rule("rangeify-same-index", op[Ops.DETACH, Ops.CONTIGUOUSBACKWARD, Ops.AFTER, Ops.CONTIGUOUS](name="n"),
         _same_index),
    Rule("rangeify-reshape", op.RESHAPE(name="n"), _reshape),
    Rule("rangeify-expand", op.EXPAND(name="n"), _expand),
    Rule("rangeify-permute", op.PERMUTE(name="n"), _permute),
    Rule("rangeify-shrink", op.SHRINK(name="n"), _shrink),
    Rule("rangeify-flip", op.FLIP(name="n"), _flip),
    Rule("rangeify-pad", op.PAD(name="n"), _pad),
    Rule("rangeify-index", op.INDEX(name="n"), _index),
    Rule("rangeify-reduce-empty", op.REDUCE(name="n"), _reduce_empty),
    Rule("rangeify-reduce", op.REDUCE(name="n"), _reduce),
    Rule("rangeify-stack", op.STACK(name="n"), _stack),
    Rule("rangeify-vconst", op.VCONST(name="n"), _vconst),
    Rule("rangeify-resizing-bitcast", op.BITCAST(name="n"), _resizing_bitcast),
    Rule("rangeify-elementwise", op[_ELEMENTWISE | {Ops.CAST, Ops.BITCAST}](name="n"), _elementwise),
])
# fmt: on


def build_kernel(node: UOp, out_buf: UOp, buffers: dict[UOp, UOp], fused: dict[UOp, None] | None = None,
                 shared: frozenset[UOp] = frozenset(), points: list[RealizePoint] | None = None,
                 threads: bool = False) -> UOp | RealizePoint:
    """The kernel that computes `node` into `out_buf` (a 1-D BUFFER), reading `buffers` for realized nodes.
    `fused`, if given, receives the nodes the scheduler may want realized when more than one kernel computes
    them inline: the tensor-level REDUCEs computed inline, and the elementwise nodes that combine one of
    `shared` (REDUCEs realized for that reason) with other values (a LayerNorm's centred input: left inline,
    every later LayerNorm's kernels would recompute the whole chain of earlier ones from its buffers). When a
    realize-point rule fires (rules.rangeify), the result is that `RealizePoint` instead of a kernel; `points`, if
    given, receives every realize point the build meets (the result is then the first of them). The finished
    kernel then meets rules.rangeify's `kernel_point_rules` (`threads`: the target runs the output loops as
    threads, a GPU's), whose realize point is returned (and recorded) the same way."""
    counter = [0]
    kb = KernelBuilder(buffers, counter)
    kb.shared = shared
    kb.points = points
    shape = node.shape
    ranges = []
    idx = []
    for d in shape:
        if d == 1:
            idx.append(ZERO)
        else:
            counter[0] += 1
            r = UOp.range(d, counter[0], AxisType.LOOP)
            ranges.append(r)
            idx.append(r)
    kb.loops = tuple(ranges)
    val = kb.value(node, tuple(idx))
    if points:
        return points[0]
    if val is None:
        assert kb.point is not None
        return kb.point
    if (rec := viz_capture.ACTIVE) is not None:  # VIZ: each kernel node from the tensor node it computes
        for (tensor_node, _, _), kernel_node in kb.memo.items():
            rec.derive(kernel_node, tensor_node, "rangeify: the kernel's value of a tensor node")
    st = out_buf.index(flat_index(tuple(idx), shape)).store(val)
    sink = UOp.sink(UOp(Ops.END, (st, *ranges)) if ranges else st)
    if threads and kb.fused and (point := kernel_point(_KernelSite(kb, threads), sink)) is not None:
        if points is not None:
            points.append(point)
        return point
    if fused is not None:
        fused.update(kb.fused)
    return sink


class _KernelSite:
    """rules.rangeify.KernelSite of a finished build: its loops, and each inline REDUCE's tensor node."""

    def __init__(self, kb: KernelBuilder, threads: bool) -> None:
        self.loops, self.threads = kb.loops, threads
        self.inline = {v: k[0] for k, v in kb.memo.items() if v.op is Ops.REDUCE and k[0] in kb.fused}


def build_store_kernel(view: UOp, value: UOp, out_buf: UOp, buffers: dict[UOp, UOp],
                       points: list[RealizePoint] | None = None) -> UOp | RealizePoint:
    """The kernel of STORE(view, value) with view = INDEX(t, i) (rewrite.stores): for each j of i's axis, in
    order, and each position r of the rest, out_buf[i[j], r] = value[j, r] when i[j] is inside t's first axis.
    The j axis is a serial loop (a REDUCE-type RANGE closed by the END: never split across threads or lanes,
    lower.optimize), so a value that reads the element it writes (a scatter-add) sees every earlier j's update
    and duplicate positions accumulate without a race; the rest axes are ordinary output loops (different r
    never touch the same element). The work is O(len(i) x row): no range spans t's first axis. A realize point
    (rules.rangeify) is returned as in `build_kernel` (all of them into `points`, if given)."""
    counter = [0]
    kb = KernelBuilder(buffers, counter)
    kb.points = points
    t, index = view.src
    ranges: list[UOp] = []
    idx: list[UOp] = []
    for axis, d in enumerate(view.shape):
        if d == 1:
            idx.append(ZERO)
            continue
        counter[0] += 1
        r = UOp.range(d, counter[0], AxisType.REDUCE if axis == 0 else AxisType.LOOP)
        ranges.append(r)
        idx.append(r)
    kb.loops = tuple(ranges)
    pos = kb.value(index, (idx[0],))
    if pos is None:
        assert kb.point is not None
        return kb.point
    pos = pos if pos.dtype is dtypes.index else pos.cast(dtypes.index)
    inside = (UOp.const(-1) < pos) & (pos < t.shape[0])
    at = out_buf.index(flat_index((pos, *idx[1:]), t.shape))
    val = kb.value(value, tuple(idx))
    if points:
        return points[0]
    if val is None:
        assert kb.point is not None
        return kb.point
    st = UOp(Ops.STORE, (at, val, inside))
    return UOp.sink(UOp(Ops.END, (st, *ranges)) if ranges else st)


__all__ = ["EXPENSIVE", "KernelBuilder", "RealizePoint", "build_kernel", "build_store_kernel", "flat_index",
           "rangeify_rules", "reshape_groups", "reshape_index", "unflatten"]
