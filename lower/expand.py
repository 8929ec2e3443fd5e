"""Expand: upcast ranges into lanes (the spec's "expand the parallel ranges into shape").

Every UPCAST range (an output loop unrolled into lanes) and UNROLL range (a reduction loop unrolled into
lanes) of a kernel becomes a coordinate of one flattened lane space of L = product of their sizes lanes:
the range is replaced by the VCONST of its coordinate in each lane, and every value that depends on it
becomes a vector of shape (L,) by ordinary shape broadcasting. A REDUCE over UNROLL ranges reduces its
remaining ranges lane-wise, then folds the lanes that differ only in its UNROLL coordinates (a horizontal
reduction: a vector's high half onto its low half while more than two lanes are left, when every lane folds
into one value; else a tree of lane extractions), and the result is broadcast back to all L lanes. A STORE keeps the
lanes whose UNROLL coordinates are all 0, so each element is written once. Nothing else changes: a scalar
stays a scalar.
"""

from __future__ import annotations

import itertools
from math import prod

from devices.base import Target
from lower.opt_apply import axes, native_lanes, next_range_id, replace_range, size
from lower.strides import _topo
from rewrite import AxisType, Ops, Rule, RuleSet, UOp, op
from rewrite.errors import KernelOptError
from rules.rangeify import live_ranges

EXPANDED = (AxisType.UPCAST, AxisType.UNROLL)


def _coords(lanes: list[UOp]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(size(r)) for r in lanes)))


def _lane(v: UOp, i: int) -> UOp:
    return v if v.shape == () else UOp(Ops.INDEX, (v, UOp.const(i)))


def _local_unrolls(ast: UOp) -> UOp:
    """A REDUCE whose UNROLL lanes meet no UPCAST lane gets a lane space of its own: its body is expanded over
    just those lanes and folded to a scalar, so several unrolled reductions in one kernel do not multiply.

    One walk, children first: each node is rebuilt from its children's results, and a REDUCE that qualifies after
    that is expanded there, so an inner one is expanded before the REDUCE around it is looked at (what expanding
    them one at a time, innermost first, with a substitution of the whole kernel after each, gave)."""
    topo = _topo(ast)  # the walk axes() makes of the same kernel
    if not any(u.op is Ops.REDUCE and any(r.axis_type is AxisType.UNROLL for r in u.src[1:]) for u in topo):
        return ast
    ups = {r for r in axes(ast) if r.axis_type is AxisType.UPCAST}
    # per node of the kernel: whether it reaches an UPCAST range (expanding a REDUCE below leaves that as it was:
    # only one that reaches none is expanded, and that replaces UNROLL ranges alone)
    up: dict[UOp, bool] = {}
    done: dict[UOp, UOp] = {}
    folds: Folds = {}
    for u in topo:
        up[u] = u in ups or any(up[s] for s in u.src) if ups else False
        src = tuple([done[s] for s in u.src])
        n = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
        if n.op is Ops.REDUCE and any(r.axis_type is AxisType.UNROLL for r in n.src[1:]) and not up[u.src[0]]:
            unrolled = [r for r in n.src[1:] if r.axis_type is AxisType.UNROLL]
            n = expand(UOp.sink(n), None, only=unrolled, folds=folds).src[0]
        elif len(src) == 2 and (a := folds.get(src[0])) and (b := folds.get(src[1])) and a[0] is b[0] is n.op \
                and a[1].shape == b[1].shape:
            # two folds of one op combined by it (a reduction's accumulators, expand.replicate): the vectors are
            # combined lane-wise first and folded once
            n = _fold_vector(n.op, UOp(n.op, (a[1], b[1])), folds)
        done[u] = n
    return done[ast]


# the scalar results of _fold_vector: (op, the vector folded), so a later op of two of them can fold their sum
Folds = dict[UOp, tuple[Ops, UOp]]

MAX_COPIES = 64  # lanes beyond one vector register (optimize.native_lanes) become copies of the code


def _register_lanes(ast: UOp, target: Target) -> tuple[UOp, list[UOp]]:
    """(ast, replicated) for the kernel's UPCAST axes. The vector lanes are the innermost UPCAST axes whose sizes
    multiply to at most one register; an axis too big to fit whole is first split so its inner part fills the
    register exactly (64 float32 lanes: 4 copies of 16). Every other UPCAST axis is replicated, its values becoming
    separate copies of the code (a register tile), not lanes. UNROLL axes stay lanes (see expand and
    _unroll_copies)."""
    ups = [r for r in axes(ast) if r.axis_type is AxisType.UPCAST]
    width, room = native_lanes(ast, target), 1
    for i in range(len(ups) - 1, -1, -1):
        r, n = ups[i], size(ups[i])
        if room * n > width:
            k = width // room
            if k > 1 and n % k == 0:
                nid = next_range_id(ast)
                a, b = UOp.range(n // k, nid, AxisType.UPCAST), UOp.range(k, nid + 1, AxisType.UPCAST)
                return replace_range(ast, r, (a, b), a * k + b), [*ups[:i], a]
            return ast, ups[:i + 1]
        room *= n
    return ast, []


def _unroll_copies(ast: UOp) -> list[UOp]:
    """Of a REDUCE's UNROLL axes, every one but the innermost (the last in `axes` order): its values become
    separate accumulators (copies), the innermost stays lanes. The same on every target, so the order of the
    final additions does not depend on the vector width."""
    order = {r: i for i, r in enumerate(axes(ast))}
    out: list[UOp] = []
    for u in _topo(ast):
        if u.op is Ops.REDUCE:
            unrolled = sorted((r for r in u.src[1:] if r.axis_type is AxisType.UNROLL), key=lambda r: order[r])
            out += [r for r in unrolled[:-1] if r not in out]
    return out


def most_copies(ast: UOp, copies: list[UOp]) -> int:
    """The most copies of any one node that replicating `copies` makes: the product of the sizes of the copied
    ranges its value moves with (rules.rangeify.live_ranges: a REDUCE or END no longer moves with the ranges it
    closes), so a GPU softmax's three unrolled row loops, one after another, make 16 copies of each loop's body,
    not 16 x 16 x 16."""
    every = prod(size(r) for r in copies)
    if every <= MAX_COPIES:
        return every
    return max((prod(size(r) for r in d) for d in live_ranges(ast, set(copies)).values() if d), default=1)


def _fold_tree(op: Ops, parts: list[UOp]) -> UOp:
    while len(parts) > 1:
        parts = [UOp(op, (parts[i], parts[i + 1])) if i + 1 < len(parts) else parts[i] for i in range(0, len(parts), 2)]
    return parts[0]


def _copies(body: UOp, r: UOp, n: int) -> list[UOp]:
    """`[body.substitute({r: UOp.const(c)}) for c in range(n)]` in one walk of `body`: a node that does not depend
    on r is itself in every copy and is visited once, not once per copy."""
    copied: dict[UOp, list[UOp]] = {r: [UOp.const(c) for c in range(n)]}  # the nodes that depend on r
    for u in body.toposort():
        if u in copied or not any(s in copied for s in u.src):
            continue
        parts = [copied.get(s) for s in u.src]
        copied[u] = [UOp(u.op, tuple(s if p is None else p[c] for s, p in zip(u.src, parts, strict=True)), u.arg,
                         u.tag) for c in range(n)]
    return copied.get(body, [body] * n)


def replicate(ast: UOp, r: UOp) -> UOp:
    """Range r (an UPCAST or UNROLL axis) becomes size(r) copies of the code that depends on it: the body of the
    END that closes it becomes a GROUP of the copies (r = 0, 1, ...), and a REDUCE over it becomes the fold of one
    REDUCE per copy over its other ranges (separate accumulators, combined after the loop)."""
    n = size(r)
    for u in _topo(ast):
        if u.op in (Ops.END, Ops.REDUCE) and r in u.src[1:]:
            rest = tuple(q for q in u.src[1:] if q is not r)
            copies = _copies(u.src[0], r, n)
            if u.op is Ops.END:
                body = copies[0] if n == 1 else UOp(Ops.GROUP, tuple(copies))
                new = UOp(Ops.END, (body, *rest), u.arg, u.tag) if rest else body
            else:
                parts = [UOp(Ops.REDUCE, (c, *rest), u.arg, u.tag) for c in copies] if rest else copies
                new = _fold_tree(u.reduce_op, parts)
            return ast.substitute({u: new})
    raise KernelOptError(f"expand: no END or REDUCE closes range {r.render()}")


def expand(ast: UOp, target: Target | None, only: list[UOp] | None = None, folds: Folds | None = None) -> UOp:
    """Every UPCAST/UNROLL range of `ast` becomes lanes (UPCAST beyond one of `target`'s vector registers becomes
    copies); with `only`, just those ranges become lanes (no copies, and `target` is not read)."""
    if only is None:
        assert target is not None, "expand needs the target to size its vector registers"
        if target.warp_size:  # a GPU kernel is scalar code (devices/__init__.py): every such axis is copies
            ast, copies = ast, [r for r in axes(ast) if r.arg[1] in EXPANDED]  # type: ignore[index]
        else:
            ast, copies = _register_lanes(ast, target)
            copies += _unroll_copies(ast)
        most = most_copies(ast, copies) if target.warp_size else prod(size(r) for r in copies)
        if most > MAX_COPIES:
            raise KernelOptError(f"expand: {most} copies of the kernel body; at most "
                                 f"{MAX_COPIES} (the lanes beyond one vector register are copies)")
        for r in copies:
            ast = replicate(ast, r)
        ast = _local_unrolls(ast)
    lanes = [r for r in axes(ast) if r.axis_type in EXPANDED] if only is None else only
    if not lanes:
        return ast
    coords = _coords(lanes)
    n = len(coords)
    if n > 64 or n & (n - 1):
        raise KernelOptError(f"expand: {n} lanes; lane counts must be powers of two up to 64")
    vec = {r: UOp.vconst([c[k] for c in coords]) for k, r in enumerate(lanes)}
    unroll_idx = [k for k, r in enumerate(lanes) if r.axis_type is AxisType.UNROLL]
    keep = [i for i, c in enumerate(coords) if all(c[k] == 0 for k in unroll_idx)]
    done: dict[UOp, UOp] = {}
    for u in _topo(ast):
        if u in vec:
            done[u] = vec[u]
            continue
        src = tuple([done.get(s, s) for s in u.src])
        if u.op in (Ops.END, Ops.REDUCE):
            kept = tuple(r for r in u.src[1:] if r not in vec)
            if u.op is Ops.REDUCE and len(kept) != len(u.src) - 1:
                unrolled = [lanes.index(r) for r in u.src[1:] if r in vec]
                inner = UOp(Ops.REDUCE, (src[0], *kept), u.arg) if kept else src[0]
                done[u] = _fold_lanes(inner, u.reduce_op, unrolled, coords, folds)
                continue
            src = (src[0], *kept)
            if u.op is Ops.END and not kept:
                done[u] = src[0]
                continue
        if u.op is Ops.LOAD and src[0].op is Ops.INDEX:
            src = _widen_address(src)
        if u.op is Ops.STORE and src[0].op is Ops.INDEX and any(s.shape != () for s in (src[0], *src[1:])):
            src = _store_lanes(src, keep)
        done[u] = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
    return done[ast]


def _fold_lanes(v: UOp, op: Ops, axes_k: list[int], coords: list[tuple[int, ...]], folds: Folds | None) -> UOp:
    """Lane l of the result = op over the lanes that agree with l everywhere except the axes in `axes_k`."""
    def key(c: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(x for k, x in enumerate(c) if k not in axes_k)

    groups: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(coords):
        groups.setdefault(key(c), []).append(i)
    if len(groups) == 1 and v.shape != ():  # every lane folds into one value: halve the vector
        return _fold_vector(op, v, folds)
    # a body that does not depend on its unrolled lanes after all (a constant) folds n copies of itself
    vals = {k: _fold_halves(op, [_lane(v, i) for i in idx]) for k, idx in groups.items()}
    if len(vals) == 1:
        return next(iter(vals.values()))
    return UOp(Ops.STACK, tuple(vals[key(c)] for c in coords))


def _fold_halves(op: Ops, parts: list[UOp]) -> UOp:
    """op over `parts` as a tree of depth log2(n), each part of the first half meeting its partner in the second
    half, then the same on what is left: the order _fold_vector's vector operations take. A left fold would be a
    chain of n - 1 dependent operations after the loop (31 for a 32-lane max)."""
    while len(parts) > 1:
        h = len(parts) // 2
        parts = [UOp(op, (parts[j], parts[j + h])) for j in range(h)] + parts[2 * h:]
    return parts[0]


def _fold_vector(op: Ops, v: UOp, folds: Folds | None = None) -> UOp:
    """op over the lanes of vector `v`: its low half meets its high half in one vector operation (16 lanes -> 8 ->
    4 -> 2), and the last two lanes in a scalar one. log2(n) operations, n - 1 of them lane-wise in all, as
    _fold_halves; a fold of scalar lanes is a chain of extractions and dependent scalar operations (gcc 12 made
    each scalar MAX a compare and a branch: on a softmax row of 128 floats, 31 of them a row)."""
    n, whole = v.shape[0], v
    while n > 2:
        h = n // 2
        lo, hi = (UOp(Ops.STACK, tuple(_lane(v, i) for i in range(a, a + h))) for a in (0, h))
        v, n = UOp(op, (lo, hi)), h
    out = UOp(op, (_lane(v, 0), _lane(v, 1))) if n == 2 else _lane(v, 0)
    if folds is not None:
        folds[out] = (op, whole)
    return out


def _widen_address(src: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """A LOAD whose address is the same in every lane but whose gate (or alt) differs per lane,
    e.g. a padded axis upcast while the address ignores it, reads that one address once per lane (a STORE of a
    vector value likewise writes it once per lane)."""
    at = src[0]
    lanes = next((s.shape for s in src[1:] if s.shape != ()), ())
    if at.shape != () or not lanes or len(at.src) != 2:
        return src
    return (UOp(Ops.INDEX, (at.src[0], UOp(Ops.STACK, (at.src[1],) * lanes[0])), at.arg, at.tag), *src[1:])


def _address_lanes(m: UOp) -> UOp | None:
    src = _widen_address(m.src)
    return None if src is m.src else UOp(m.op, src, m.arg, m.tag)


def lost_lanes(ast: UOp) -> bool:
    """Whether a memory op of `ast` has a scalar address beside a vector gate or value (what lane_addresses mends):
    one scan of the kernel's memoized walk, where the rewrite would rebuild it."""
    return any(u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and u.src[0].shape == () and
               any(s.shape != () for s in u.src[1:]) for u in _topo(ast))


# The simplifier may prove a vector address the same in every lane and make it a scalar ((16 r + (0, 1, ..., 15))
# // 32 is r // 2) while the access's gate or value stays a vector (63 < 16 r + (0, ..., 15) is as uniform, but no
# rule folds a comparison's lanes): the memory op then names one address for n lanes, which no device reads. This
# gives the address its lanes back, as expand made it; run after each simplification of expanded kernels.
lane_addresses = RuleSet("lane-addresses", [
    Rule("memory-address-lanes", op[Ops.LOAD, Ops.STORE](op.INDEX(), rest=True, name="m"), _address_lanes),
])


def _store_lanes(src: tuple[UOp, ...], keep: list[int]) -> tuple[UOp, ...]:
    """A STORE writes only the lanes whose UNROLL coordinates are 0 (the others hold the same values), and
    its address, value and gate get the same lanes."""
    at, rest = src[0], src[1:]

    def pick(x: UOp) -> UOp:
        if x.shape == () or list(keep) == list(range(x.shape[0])):  # no UNROLL lanes: every lane is stored
            return x
        return _lane(x, keep[0]) if len(keep) == 1 else UOp(Ops.STACK, tuple(_lane(x, i) for i in keep))

    idx = pick(at.src[1])
    vals = [pick(x) for x in rest]
    if idx.shape != () and vals[0].shape == ():  # a value the same in every lane, stored to several addresses
        vals[0] = UOp(Ops.STACK, (vals[0],) * idx.shape[0])
    return (UOp(Ops.INDEX, (at.src[0], idx)), *vals)
