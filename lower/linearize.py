"""Linearize a kernel: REDUCE to accumulators, then a toposort into loop blocks (the LINEAR program).

After `rangeify` a kernel is a SINK of END(STORE(...), ranges) whose values may contain REDUCE(body, ranges).
1. `reduce_to_acc` rewrites each REDUCE into a REG accumulator: an init STORE before the loop, an update
   STORE inside (its read made loop-dependent with AFTER(index, init, ranges)), END over the ranges, and the
   result read after the loop as LOAD(AFTER(index, END)). Multi-range ENDs become nested single-range ENDs.
2. `linearize` places every node in the innermost loop among the RANGEs it depends on (so loop-invariant work
   is hoisted), nests each END's range under the deepest range its own dependencies use, and emits
   RANGE ... END blocks in dependency order: the LINEAR program of devices/__init__.py.
"""

from __future__ import annotations

from lower.rangeify import reduce_identity
from rewrite import BufferArg, Ops, Rule, RuleSet, UOp, const, dtypes, graph_rewrite, op, var
from rewrite.dtype import AddrSpace
from rewrite.errors import CompilerError
from rewrite.uop import ConstValue


class _AccCtx:
    def __init__(self, fuse: bool = False) -> None:
        self.next_slot = 0
        self.fuse = fuse  # the device has MULACC: a float sum of products accumulates with one fused op
        # per node met so far: the RANGEs it reaches in its toposort's order, and those no END below it closes
        # (open_ranges of every reduction's body from one walk of the kernel, not one walk of each body)
        self.reached: dict[UOp, tuple[UOp, ...]] = {}
        self.open: dict[UOp, frozenset[UOp]] = {}
        # (lanes, vector?, reduce op, dtype) -> the accumulator's lane index and initial value: a register tile's
        # accumulators share them, built once a kernel
        self.consts: dict[tuple, tuple[UOp, UOp]] = {}

    def open_ranges(self, u: UOp) -> list[UOp]:
        """open_ranges(u), from the nodes' entries (computed for the nodes not met before)."""
        reached, open_ = self.reached, self.open
        for n in UOp.toposort_of((u,), reached.__contains__):
            src = n.src
            if src:
                r, o = reached[src[0]], open_[src[0]]
                for s in src[1:]:
                    if (t := reached[s]) is not r and t:
                        r = r + tuple([x for x in t if x not in r])
                    if (e := open_[s]) is not o and not e <= o:
                        o = o | e
            else:
                r, o = (), _NONE
            if n.op is Ops.RANGE:
                r, o = (*r, n), o | {n}
            elif n.op is Ops.END:
                o = o - set(src[1:])
            reached[n], open_[n] = r, o
        o = open_[u]
        return [x for x in reached[u] if x in o]


_FUSABLE = (dtypes.float32, dtypes.float64)


def _acc_for_reduce(ctx: _AccCtx, red: UOp) -> UOp:
    body, ranges = red.src[0], red.src[1:]
    rop = red.reduce_op
    ctx.next_slot += 1
    lanes = red.shape[0] if red.shape else 1  # after Expand a reduction may carry a vector of lanes
    acc = UOp(Ops.BUFFER, (UOp.shape_operand((lanes,)),), BufferArg(ctx.next_slot, red.dtype, None, AddrSpace.REG))
    if (c := ctx.consts.get(key := (lanes, bool(red.shape), rop, red.dtype))) is None:
        ident = reduce_identity(rop, red.dtype)
        c = ctx.consts[key] = (UOp.vconst(range(lanes)), UOp.vconst([ident] * lanes, red.dtype)) if red.shape \
            else (UOp.const(0), UOp.const(ident, red.dtype))
    lane, init_val = c
    at = acc.index(lane)
    # the accumulator restarts on every iteration of the loops the reduction sits in
    outer = [r for r in ctx.open_ranges(body) if r not in ranges]
    init = (UOp(Ops.AFTER, (at, *outer)) if outer else at).store(init_val)
    cur = UOp(Ops.LOAD, (UOp(Ops.AFTER, (at, init, *ranges)),))
    if ctx.fuse and rop is Ops.ADD and body.op is Ops.MUL and red.dtype.scalar in _FUSABLE:
        upd = at.store(UOp(Ops.MULACC, (body.src[0], body.src[1], cur)))  # acc = a*b + acc, rounded once
    else:
        upd = at.store(UOp(rop, (cur, body)))
    end = upd
    for r in reversed(ranges):
        end = UOp(Ops.END, (end, r))
    return UOp(Ops.LOAD, (UOp(Ops.AFTER, (at, end)),))


def open_ranges(u: UOp) -> list[UOp]:
    """RANGEs that `u` depends on and that no END inside `u` closes, in toposort order."""
    topo = u.toposort()
    if not any(n.op is Ops.END for n in topo):  # nothing closes a range: every range it reaches is open
        return [n for n in topo if n.op is Ops.RANGE]
    deps: dict[UOp, frozenset[UOp]] = {}
    for n in topo:
        d = _union(n.src, deps)
        if n.op is Ops.RANGE:
            d = d | {n}
        elif n.op is Ops.END:
            d = d - set(n.src[1:])
        deps[n] = d
    return [n for n in topo if n in deps[u]]


_NONE: frozenset[UOp] = frozenset()


def _union(srcs: tuple[UOp, ...], deps: dict[UOp, frozenset[UOp]]) -> frozenset[UOp]:
    """The union of the sources' range sets; most nodes add nothing to their first source's, which is kept
    as it is (no new set)."""
    if not srcs:
        return _NONE
    d = deps[srcs[0]]
    for s in srcs[1:]:
        if (e := deps[s]) is not d and not e <= d:
            d = d | e
    return d


def _split_end(e: UOp) -> UOp | None:
    if len(e.src) <= 2:
        return None
    out = e.src[0]
    for r in reversed(e.src[1:]):
        out = UOp(Ops.END, (out, r))
    return out


def _splat(c: ConstValue, e: UOp) -> UOp | None:
    """A constant broadcast to a kernel's 1-D lane shape is a VCONST (templates build the broadcast form)."""
    if len(e.shape) != 1 or not isinstance(e.shape[0], int):
        return None
    return UOp.vconst([c] * e.shape[0], e.dtype)


def _fold_vconst(v: UOp, c: ConstValue, a: UOp) -> UOp:
    from rewrite.semantics import exec_alu

    return UOp.vconst([exec_alu(a.op, v.dtype, x, c) for x in v.vconst_values], v.dtype)


def _vconst_outward(y: UOp, v: UOp, z: UOp) -> UOp | None:
    return (y + z) + v if z.shape == () and y.shape == () else None


def _uniform_outward(y: UOp, v: UOp, w: UOp) -> UOp | None:
    vals = w.vconst_values
    if y.shape != () or len(set(vals)) != 1:
        return None
    return (y + UOp.const(vals[0], y.dtype)) + v


reduce_to_acc = RuleSet("reduce-to-acc", [
    Rule("splat-const-to-vconst", op.EXPAND(op.RESHAPE(const("c"), rest=True), rest=True, name="e"), _splat),
    Rule("fold-vconst-alu", op[Ops.ADD, Ops.MUL](op.VCONST(name="v"), const("c"), name="a"), _fold_vconst),
    # a vector constant moves to the outside of a sum, so an address reads base + lanes (a contiguous access)
    Rule("vconst-outward", op.ADD(op.ADD(var("y"), op.VCONST(name="v")), var("z", None)), _vconst_outward),
    # (base + lanes) + a constant splat: the constant joins the base
    Rule("uniform-vconst-outward", op.ADD(op.ADD(var("y"), op.VCONST(name="v")), op.VCONST(name="w")),
         _uniform_outward),
    Rule("reduce-to-accumulator", op.REDUCE(name="red"), _acc_for_reduce),
    Rule("split-multi-range-end", op.END(name="e"), _split_end),
])


def linearize(sink: UOp, fuse_mulacc: bool = False) -> UOp:
    """The LINEAR program of a kernel SINK (see module docstring). With `fuse_mulacc` (the device has MULACC) a
    float32/float64 sum of products accumulates as acc = MULACC(a, b, acc), one rounding per step."""
    topo = _merge_ends(graph_rewrite(sink, reduce_to_acc, _AccCtx(fuse_mulacc), name="reduce-to-acc"))
    deps: dict[UOp, frozenset[UOp]] = {}
    for u in topo:
        d = _union(u.src, deps)
        if u.op is Ops.RANGE:
            d = d | {u}
        elif u.op is Ops.END:
            d = d - {u.src[1]}
        deps[u] = d
    # nest each END's range under the deepest range its END still depends on (consumers first)
    parent: dict[UOp, UOp | None] = {}
    depth: dict[UOp | None, int] = {None: 0}
    for u in reversed(topo):
        if u.op is not Ops.END:
            continue
        r = u.src[1]
        if r.op is not Ops.RANGE:
            raise CompilerError(f"linearize: END must close a RANGE, got {r.short()}")
        if r in parent:
            raise CompilerError(f"linearize: range {r.render()} is closed twice")
        p = _deepest(deps[u], depth)
        parent[r], depth[r] = p, depth[p] + 1
    # an accumulator restarts where its loop opens: its init STORE goes into the scope its reduction's outermost
    # loop is nested in, even where the init's own dependencies would hoist it further out. The reduction's body
    # may not depend on a loop that encloses that loop (a row of a register tile whose operand is all padding,
    # so its product is the same for every batch) while a tile-mate's loop of the same range does, and the two
    # loops are one (_merge_ends): hoisted, that init ran once and the row summed every batch's products
    restart: dict[UOp, UOp] = {}
    for u in topo:
        if u.op is Ops.AFTER and len(u.src) > 2 and u.src[1].op is Ops.STORE and u.src[2].op is Ops.RANGE:
            restart[u.src[1]] = u.src[2]
    placed: dict[UOp | None, list[UOp]] = {None: []}
    for r in parent:
        placed[r] = []
    # most nodes share their range set with a source (`_union` keeps the first source's set), so each distinct
    # set's deepest range is found once (a frozenset keeps its hash; the lookup is mostly an identity test)
    scope_of: dict[frozenset[UOp], list[UOp]] = {}
    for u in topo:
        if u.op is Ops.RANGE:
            if u not in parent:
                raise CompilerError(f"linearize: range {u.render()} is never closed by an END")
            continue
        if u.op is Ops.SINK:
            continue
        if (loop := restart.get(u)) is not None and (p := parent.get(loop)) is not None:
            placed[_deepest(deps[u] | {p}, depth)].append(u)
            continue
        if (into := scope_of.get(d := deps[u])) is None:
            into = scope_of[d] = placed[_deepest(d, depth)]
        into.append(u)
    out: list[UOp] = []
    _emit(None, placed, out)
    return UOp(Ops.LINEAR, tuple(out))


def _merge_ends(g: UOp) -> list[UOp]:
    """One loop per RANGE: ENDs that close the same range (the accumulators of a register tile's copies) become
    one END over the GROUP of their bodies, innermost ranges first: each walk merges every such set none of whose
    ENDs holds an END of another set (the sets it merges are disjoint, so merging them together is merging them one
    by one; one walk per level of nesting, not one per range: an interior split's copies of a register tile, 5
    copies of 3 loops of 16 accumulators, took 15 walks of the whole kernel). Returns the merged graph's toposort
    (the walk that found nothing more to merge)."""
    while True:
        by_range: dict[UOp, list[UOp]] = {}
        topo = g.toposort()
        for u in topo:
            if u.op is Ops.END and len(u.src) == 2:
                by_range.setdefault(u.src[1], []).append(u)
        dups = [es for es in by_range.values() if len(es) > 1]
        if not dups:
            return topo
        dup_ends = {e for es in dups for e in es}
        holds: dict[UOp, bool] = {}  # the node has an END of a set below it
        for u in topo:
            holds[u] = any(holds[s] or s in dup_ends for s in u.src)
        merge: dict[UOp, UOp] = {}
        for dup in dups:
            if any(holds[e] for e in dup):
                continue
            bodies = tuple(dict.fromkeys(b for e in dup for b in (e.src[0].src if e.src[0].op is Ops.GROUP
                                                                     else (e.src[0],))))
            merged = UOp(Ops.END, (bodies[0] if len(bodies) == 1 else UOp(Ops.GROUP, bodies), dup[0].src[1]))
            merge.update({e: merged for e in dup})
        g = g.substitute(merge)


def _deepest(ranges: frozenset[UOp], depth: dict[UOp | None, int]) -> UOp | None:
    best, bd = None, 0
    for r in ranges:
        if r not in depth:
            raise CompilerError(f"linearize: value depends on range {r.render()} outside its loop")
        if depth[r] > bd:
            best, bd = r, depth[r]
    return best


def _emit(scope: UOp | None, placed: dict[UOp | None, list[UOp]], out: list[UOp]) -> None:
    for u in placed[scope]:
        if u.op is Ops.END:
            r = u.src[1]
            out.append(r)
            _emit(r, placed, out)
        out.append(u)


__all__ = ["linearize", "reduce_to_acc"]


def listing(linear: UOp) -> str:
    """The LINEAR program one instruction a line, in program order, indented by loop depth:
    `  %7 = LOAD:float32(%5) arg`; a source that is not an instruction prints as its short form."""
    pos = {u: i for i, u in enumerate(linear.src)}
    lines, depth = [], 0
    for i, u in enumerate(linear.src):
        if u.op is Ops.END:
            depth = max(depth - 1, 0)
        srcs = ", ".join(f"%{pos[s]}" if s in pos else s.short() for s in u.src)
        arg = "" if u.arg is None else f" {u.arg!r}"
        sh = "" if u.shape == () else str(u.shape)
        lines.append(f"{'  ' * depth}%{i} = {u.op.name}:{u.dtype.name}{sh}({srcs}){arg}")
        if u.op is Ops.RANGE:
            depth += 1
    return "\n".join(lines)
