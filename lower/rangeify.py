"""Rangeify: turn the tensor-level graph of one realized node into a kernel over RANGEs.

Every value is computed at a tuple of scalar index UOps, one per axis. Walking from the kernel's output
down, each op maps its output index to its sources' indices: RESHAPE flattens and unflattens (only the
groups of axes it merges or splits, so the index terms stay small), EXPAND indexes size-1 axes at 0, PERMUTE
reorders, PAD subtracts its offset and adds a validity condition (loads under it are gated), SHRINK adds its
offset, FLIP reflects, INDEX reads its source at positions loaded from its index tensors (a gated load),
and REDUCE opens new REDUCE-type RANGEs for its axes. Buffers
(inputs, and nodes realized by earlier kernels) are read with LOAD(INDEX(buf, flat index)). The result is
`SINK(END(STORE(INDEX(out, flat(ranges)), value), ranges...))`, every value of shape ().

A REDUCE is fused into its consumer unless the consumer would evaluate it inside another reduction's loop
(its index depends on a REDUCE range): then it would be recomputed per iteration, so it is realized into
its own kernel. Likewise an EXPAND of transcendental or division work read inside a reduction (softmax feeding
a matmul) is realized rather than recomputed per broadcast value. These are named rules (rules.rangeify's
`realize_point_rules`, applied at every site with the builder as their typed context): the first that fires
stops the build, which returns the `RealizePoint` (the node and the rule's name) for the scheduler to realize
and build this kernel again (lower.schedule). Values that depend only on outer loops are hoisted by the linearizer, so
`x - x.max()` or `x.var()` stay one kernel. Identical (node, index) pairs are the same UOp (hash-consing),
so shared work is computed once per kernel.
"""

from __future__ import annotations

from collections.abc import Callable

from rewrite import AxisType, DType, Ops, UOp, dtypes
from rewrite.derive import shape_values
from rewrite.uop import ConstValue
from rewrite.viz import capture as viz_capture
from rules.rangeify import EXPENSIVE, POINT_OPS, RealizePoint, expand_source_index, realize_point


def _add(a: UOp, b: UOp | int) -> UOp:
    if isinstance(b, int):
        return a if b == 0 else a + b
    if a.op is Ops.CONST and a.value == 0:
        return b
    return a + b


def _mul(a: UOp, k: int) -> UOp:
    return UOp.const(0) if k == 0 else a if k == 1 else a * k


def flat_index(idx: tuple[UOp, ...], shape: tuple) -> UOp:
    """Row-major linear offset of `idx` in `shape`."""
    out, stride = UOp.const(0), 1
    for i, d in reversed(list(zip(idx, shape, strict=True))):
        if not (i.op is Ops.CONST and i.arg[0] == 0):
            out = _add(out, _mul(i, stride))
        stride *= d
    return out


def unflatten(lin: UOp, shape: tuple) -> tuple[UOp, ...]:
    """Indices into `shape` of the row-major offset `lin` (assumed in range)."""
    out: list[UOp] = []
    stride = 1
    for k in range(len(shape) - 1, -1, -1):
        d = shape[k]
        if d == 1:
            out.append(UOp.const(0))
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


def reshape_index(idx: tuple[UOp, ...], out_shape: tuple, src_shape: tuple) -> tuple[UOp, ...]:
    """The source index of a reshape from `src_shape` to `out_shape` read at `idx`. Row-major order splits over
    groups of axes whose sizes multiply to the same number, so each group is flattened and unflattened on its
    own: an axis that keeps its size passes through, a split or merge touches only its axes. Equal to
    `unflatten(flat_index(idx, out_shape), src_shape)` for every in-range index, with much smaller terms."""
    groups = reshape_groups(out_shape, src_shape)
    if groups is None:
        return unflatten(flat_index(idx, out_shape), src_shape)
    new: list[UOp] = [UOp.const(0)] * len(src_shape)
    for go, gs in groups:
        if len(go) == 1 and len(gs) == 1:
            new[gs[0]] = idx[go[0]]
            continue
        lin = flat_index(tuple(idx[i] for i in go), tuple(out_shape[i] for i in go))
        for j, u in zip(gs, unflatten(lin, tuple(src_shape[j] for j in gs)), strict=True):
            new[j] = u
    return tuple(new)


def _and(a: UOp | None, b: UOp | None) -> UOp | None:
    return b if a is None else a if b is None else a & b


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
    expanded; `point` is the first realize point a rule decided (the build stops there)."""

    def __init__(self, buffers: dict[UOp, UOp], range_ids: list[int]) -> None:
        self.buffers = buffers  # realized node (or BUFFER leaf) -> the 1-D BUFFER holding it
        self.range_ids = range_ids  # a shared counter, so range ids are unique within the kernel
        self.memo: dict[Key, UOp] = {}
        self.point: RealizePoint | None = None
        self.idx: tuple[UOp, ...] = ()
        self.valid: UOp | None = None
        self.top = False
        self._closed: dict[Key, UOp | None] = {}
        self.fused: dict[UOp, None] = {}  # the REDUCEs computed inline (not the kernel's own root), in order
        self.shared: frozenset[UOp] = frozenset()  # REDUCEs realized because several kernels read them
        self._reads: dict[UOp, bool] = {}

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
        memo = self.memo
        stack: list = [(root, idx, valid)]
        while stack:
            task = stack.pop()
            if len(task) == 3:
                if task in memo:
                    continue
                node, at, gate = task
                kids, combine = self.expand(node, at, gate, top=node is root)
                if self.point is not None:
                    return None
                stack.append((task, kids, combine, None))
                stack.extend(k for k in kids if k not in memo)
            else:
                key, kids, combine, _ = task
                if key not in memo:
                    memo[key] = combine([memo[k] for k in kids])
        return memo[(root, idx, valid)]

    def load(self, buf: UOp, node_shape: tuple, idx: tuple[UOp, ...], valid: UOp | None) -> UOp:
        at = buf.index(flat_index(idx, node_shape))
        if valid is None:
            return at.load()
        return UOp(Ops.LOAD, (at, UOp.const(0, buf.dtype), valid))

    def expand(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None, top: bool) -> tuple[list[Key], Callable]:
        op = n.op
        if n in self.buffers and (not top or op is Ops.BUFFER):
            ld = self.load(self.buffers[n], n.shape, idx, valid)
            return [], lambda _v: ld
        if op is Ops.CONST or n.is_variable:  # a scalar, or a variable
            return [], lambda _v: n
        if op in POINT_OPS:
            self.idx, self.valid, self.top = idx, valid, top
            point = realize_point(self, n)
            if self.point is None:  # else a rule's closed-form check stopped in an inner build: that one is first
                self.point = point
            if self.point is not None:
                return [], _stopped
        if op in (Ops.DETACH, Ops.CONTIGUOUSBACKWARD, Ops.AFTER, Ops.CONTIGUOUS):
            k = (n.src[0], idx, valid)
            return [k], lambda v: v[0]
        if op is Ops.RESHAPE:
            k = (n.src[0], reshape_index(idx, n.shape, n.src[0].shape), valid)
            return [k], lambda v: v[0]
        if op is Ops.EXPAND:
            new = expand_source_index(idx, n.src[0].shape, n.shape)
            return [(n.src[0], new, valid)], lambda v: v[0]
        if op is Ops.PERMUTE:
            order = n.int_tuple_arg
            new = tuple(idx[order.index(k)] for k in range(len(order)))
            return [(n.src[0], new, valid)], lambda v: v[0]
        if op is Ops.SHRINK:
            begin = shape_values(n.src[1])
            return [(n.src[0], tuple(_add(i, b) for i, b in zip(idx, begin, strict=True)), valid)], lambda v: v[0]
        if op is Ops.FLIP:
            dims = zip(idx, n.src[0].shape, n.flip_flags, strict=True)
            new = tuple(_add(UOp.const(d - 1), i * -1) if f else i for i, d, f in dims)
            return [(n.src[0], new, valid)], lambda v: v[0]
        if op is Ops.PAD:
            return self.expand_pad(n, idx, valid)
        if op is Ops.INDEX:
            return self.expand_index(n, idx, valid)
        if op is Ops.REDUCE:
            return self.expand_reduce(n, idx, valid, top)
        if op is Ops.STACK:
            kids = [(s, idx[1:], valid) for s in n.src]

            def pick(v: list[UOp]) -> UOp:
                out = v[-1]
                for i in range(len(v) - 2, -1, -1):
                    out = idx[0].eq(i).where(v[i], out)
                return out

            return kids, pick
        if op is Ops.VCONST:
            vals = n.vconst_values

            def select(_v: list[UOp]) -> UOp:
                out = UOp.const(vals[-1], n.dtype)
                for i in range(len(vals) - 2, -1, -1):
                    out = idx[0].eq(i).where(UOp.const(vals[i], n.dtype), out)
                return out

            return [], select
        if op is Ops.BITCAST and n.dtype.itemsize != n.src[0].dtype.itemsize:
            return self.expand_resizing_bitcast(n, idx, valid)
        if op in (Ops.CAST, Ops.BITCAST) or op in _ELEMENTWISE:
            if not top and self.shared and any(self.reads_shared(_broadcast_of(s)) for s in n.src):
                self.fused[n] = None  # combines a broadcast shared statistic with other values: may be shared too
            kids = [(s, _broadcast_idx(idx, n.shape, s.shape), valid) for s in n.src]
            return kids, lambda v: UOp(op, tuple(v), n.arg)
        raise NotImplementedError(f"rangeify: no lowering for {op.name} (node {n.short()})")

    def expand_resizing_bitcast(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[list[Key], Callable]:
        """A bitcast that changes the element size reads the source's memory as the new dtype: the source is
        realized (rule realize-bitcast-source) and read through a BUFFER of the same slot with the new dtype and
        element count."""
        b = self.buffers[n.src[0]]
        count = b.shape[0] * b.dtype.itemsize // n.dtype.itemsize
        alias = UOp(Ops.BUFFER, (UOp.shape_operand((count,)),), b.buf_arg._replace(dtype=n.dtype))
        ld = self.load(alias, n.shape, idx, valid)
        return [], lambda _v: ld

    def expand_index(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[list[Key], Callable]:
        """INDEX(x, i1, ..., im): a read of x at positions held in data (an embedding's rows). Each index tensor
        is evaluated at its own output axis (a ()-shaped one at none) and becomes x's index on its axis, so the
        load's address holds a loaded value. A position outside x's axis reads 0: the read is gated, never out of
        bounds (a kernel cannot raise; the reference evaluator does)."""
        x, idxs = n.src[0], n.src[1:]
        pos, new, cond = 0, [], valid
        for axis, i in enumerate(idxs):
            at = (idx[pos],) if i.shape else ()
            pos += len(i.shape)
            v = self.value(i, at, valid)
            if v is None:
                return [], _stopped
            v = v if v.dtype is dtypes.index else v.cast(dtypes.index)
            d = x.shape[axis]
            new.append(v)
            inside = (UOp.const(-1) < v) & (v < d)
            cond = _and(cond, inside)
        k = (x, (*new, *idx[pos:]), cond)
        zero = UOp.const(0, n.dtype)
        return [k], lambda v: cond.where(v[0], zero)  # type: ignore[union-attr]  # an INDEX has an index: cond is set

    def expand_pad(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> tuple[list[Key], Callable]:
        begin, end = shape_values(n.src[1]), shape_values(n.src[2])
        src_shape = n.src[0].shape
        cond: UOp | None = None
        new = []
        for i, b, e, d in zip(idx, begin, end, src_shape, strict=True):
            new.append(_add(i, -b))
            if b > 0:
                cond = _and(cond, UOp.const(b - 1) < i)
            if e > 0:
                cond = _and(cond, i < b + d)
        if cond is None:
            return [(n.src[0], tuple(new), valid)], lambda v: v[0]
        k = (n.src[0], tuple(new), _and(valid, cond))
        zero = UOp.const(0, n.dtype)
        return [k], lambda v: cond.where(v[0], zero)

    def expand_reduce(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None, top: bool) -> tuple[list[Key], Callable]:
        if (closed := self.collapsed(n, idx, valid)) is not None:
            return [], lambda _v: closed
        rop, axes = n.reduce_op, n.reduce_axes
        src = n.src[0]
        ranges = []
        new = list(idx)
        for a in axes:
            d = src.shape[a]
            if d == 1:
                new[a] = UOp.const(0)
            else:
                r = self.new_range(d, AxisType.REDUCE)
                ranges.append(r)
                new[a] = r
        k = (src, tuple(new), valid)
        if not ranges:
            return [k], lambda v: v[0]
        if not top:
            self.fused[n] = None
        return [k], lambda v: UOp(Ops.REDUCE, (v[0], *ranges), (rop, ()))

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
            new[a] = UOp.const(0)
        r = self.new_range(src.shape[axes[0]], AxisType.REDUCE)
        new[axes[0]] = r
        inner = KernelBuilder(self.buffers, self.range_ids)
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
    return tuple(UOp.const(0) if s == 1 and out_shape[off + k] != 1 else idx[off + k] for k, s in enumerate(src_shape))


def build_kernel(node: UOp, out_buf: UOp, buffers: dict[UOp, UOp], fused: dict[UOp, None] | None = None,
                 shared: frozenset[UOp] = frozenset()) -> UOp | RealizePoint:
    """The kernel that computes `node` into `out_buf` (a 1-D BUFFER), reading `buffers` for realized nodes.
    `fused`, if given, receives the nodes the scheduler may want realized when more than one kernel computes
    them inline: the tensor-level REDUCEs computed inline, and the elementwise nodes that combine one of
    `shared` (REDUCEs realized for that reason) with other values (a LayerNorm's centred input: left inline,
    every later LayerNorm's kernels would recompute the whole chain of earlier ones from its buffers). When a
    realize-point rule fires (rules.rangeify), the result is that `RealizePoint` instead of a kernel."""
    counter = [0]
    kb = KernelBuilder(buffers, counter)
    kb.shared = shared
    shape = node.shape
    ranges = []
    idx = []
    for d in shape:
        if d == 1:
            idx.append(UOp.const(0))
        else:
            counter[0] += 1
            r = UOp.range(d, counter[0], AxisType.LOOP)
            ranges.append(r)
            idx.append(r)
    val = kb.value(node, tuple(idx))
    if val is None:
        assert kb.point is not None
        return kb.point
    if (rec := viz_capture.ACTIVE) is not None:  # VIZ: each kernel node from the tensor node it computes
        for (tensor_node, _, _), kernel_node in kb.memo.items():
            rec.derive(kernel_node, tensor_node, "rangeify: the kernel's value of a tensor node")
    if fused is not None:
        fused.update(kb.fused)
    st = out_buf.index(flat_index(tuple(idx), shape)).store(val)
    return UOp.sink(UOp(Ops.END, (st, *ranges)) if ranges else st)


def build_store_kernel(view: UOp, value: UOp, out_buf: UOp, buffers: dict[UOp, UOp]) -> UOp | RealizePoint:
    """The kernel of STORE(view, value) with view = INDEX(t, i) (rewrite.stores): for each j of i's axis, in
    order, and each position r of the rest, out_buf[i[j], r] = value[j, r] when i[j] is inside t's first axis.
    The j axis is a serial loop (a REDUCE-type RANGE closed by the END: never split across threads or lanes,
    lower.optimize), so a value that reads the element it writes (a scatter-add) sees every earlier j's update
    and duplicate positions accumulate without a race; the rest axes are ordinary output loops (different r
    never touch the same element). The work is O(len(i) x row): no range spans t's first axis. A realize point
    (rules.rangeify) is returned as in `build_kernel`."""
    counter = [0]
    kb = KernelBuilder(buffers, counter)
    t, index = view.src
    ranges: list[UOp] = []
    idx: list[UOp] = []
    for axis, d in enumerate(view.shape):
        if d == 1:
            idx.append(UOp.const(0))
            continue
        counter[0] += 1
        r = UOp.range(d, counter[0], AxisType.REDUCE if axis == 0 else AxisType.LOOP)
        ranges.append(r)
        idx.append(r)
    pos = kb.value(index, (idx[0],))
    if pos is None:
        assert kb.point is not None
        return kb.point
    pos = pos if pos.dtype is dtypes.index else pos.cast(dtypes.index)
    inside = (UOp.const(-1) < pos) & (pos < t.shape[0])
    at = out_buf.index(flat_index((pos, *idx[1:]), t.shape))
    val = kb.value(value, tuple(idx))
    if val is None:
        assert kb.point is not None
        return kb.point
    st = UOp(Ops.STORE, (at, val, inside))
    return UOp.sink(UOp(Ops.END, (st, *ranges)) if ranges else st)


__all__ = ["EXPENSIVE", "KernelBuilder", "RealizePoint", "build_kernel", "build_store_kernel", "flat_index",
           "reshape_groups", "reshape_index", "unflatten"]
