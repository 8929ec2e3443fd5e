"""What a condition tells about the terms it guards: the callables behind closure folding of WHERE
(`where-closure` in rules.symbolic) and `where(x < y, y, x) -> max(x, y)`.

Closure folding: in `c.where(t, f)` the value of `c` is known inside each branch (True in `t`, False in `f`),
so any bool node of a branch that the known facts decide is replaced by that constant, at any depth. The facts
are `c` itself and what it implies: `~c` flips them, an AND known True and an OR known False give both
operands, and a comparison of an index term `x` with a constant (`x < k`, `k < x`, `x != k`) bounds `x`. A
branch node is decided when it is one of the facts (or its negation), or a comparison of the same `x` with a
constant whose outcome the bounds fix (x's own interval included).

It runs on index and bool wheres (index math and gates), not on float ones: it walks both branches each time it
is tried, and a float where's branches can be most of a kernel.

Soundness: WHERE selects one branch and drops the other (rewrite.semantics: even a poison value in the dropped
branch does not reach the result), and inside the selected branch every replaced node has the constant's
value for every point where `c` has the branch's value. A replaced node is a constant, so the branch is
defined wherever it was before. Index terms only read intervals, which are bounds; no dtype wraps here since
only bool nodes are replaced and only index comparisons are read.

Memory accesses are opaque: nothing inside an INDEX, LOAD or STORE is rewritten. The kernel evaluates both
branches of a WHERE (it is a select, not a jump), so a gated load in the branch that is not selected still
runs, and its gate is what keeps that access in bounds: `(i < 3).where(a[i] if i < 3, b[i-3] if 3 <= i)` must
keep the second gate although `3 <= i` holds wherever that branch is selected.
"""

from __future__ import annotations

from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

_MEMORY = frozenset({Ops.INDEX, Ops.LOAD, Ops.STORE})
Facts = tuple[dict[UOp, bool], dict[UOp, tuple[int | None, int | None]], dict[UOp, set[int]]]


def _const_of(u: UOp) -> int | None:
    if u.op is Ops.CONST and u.dtype is dtypes.index:
        return int(u.arg[0])  # type: ignore[index]  # a CONST arg is (value, dtype)
    return None


def _facts(cond: UOp, value: bool) -> Facts:
    """Known bool nodes, bounds of index terms and excluded points, from `cond` having `value`."""
    known: dict[UOp, bool] = {}
    bounds: dict[UOp, tuple[int | None, int | None]] = {}
    holes: dict[UOp, set[int]] = {}
    stack = [(cond, value)]
    while stack:
        c, v = stack.pop()
        known[c] = v
        if c.op is Ops.NOT:
            stack.append((c.src[0], not v))
        elif (c.op is Ops.AND and v) or (c.op is Ops.OR and not v):
            stack.extend((s, v) for s in c.src)
        elif c.op is Ops.CMPLT and c.src[0].dtype is dtypes.index:
            a, b = c.src
            if (k := _const_of(b)) is not None:  # a < k
                _narrow(bounds, a, None if v else k, k - 1 if v else None)
            elif (k := _const_of(a)) is not None:  # k < b
                _narrow(bounds, b, k + 1 if v else None, None if v else k)
        elif c.op is Ops.CMPNE and c.src[0].dtype is dtypes.index:
            a, b = c.src
            if (k := _const_of(b)) is not None:
                if v:
                    holes.setdefault(a, set()).add(k)
                else:
                    _narrow(bounds, a, k, k)
    return known, bounds, holes


def _narrow(bounds: dict[UOp, tuple[int | None, int | None]], x: UOp, lo: int | None, hi: int | None) -> None:
    olo, ohi = bounds.get(x, (None, None))
    nlo = lo if olo is None else olo if lo is None else max(lo, olo)
    nhi = hi if ohi is None else ohi if hi is None else min(hi, ohi)
    bounds[x] = (nlo, nhi)


def _box(facts: Facts, x: UOp) -> tuple[int, int] | None:
    if x not in facts[1]:
        return None
    lo, hi = facts[1][x]
    return max(int(x.vmin), lo) if lo is not None else int(x.vmin), min(int(x.vmax), hi) if hi is not None \
        else int(x.vmax)


def _decide(n: UOp, facts: Facts) -> bool | None:
    known, _, holes = facts
    if (v := known.get(n)) is not None:
        return v
    if n.op is Ops.NOT and (v := known.get(n.src[0])) is not None:
        return not v
    if n.op not in (Ops.CMPLT, Ops.CMPNE) or n.src[0].dtype is not dtypes.index:
        return None
    a, b = n.src
    if n.op is Ops.CMPLT:
        if (k := _const_of(b)) is not None and (box := _box(facts, a)) is not None:
            return True if box[1] < k else False if box[0] >= k else None
        if (k := _const_of(a)) is not None and (box := _box(facts, b)) is not None:
            return True if box[0] > k else False if box[1] <= k else None
        return None
    if (k := _const_of(b)) is None:
        return None
    if k in holes.get(a, ()):
        return True
    if (box := _box(facts, a)) is None:
        return None
    return True if (k < box[0] or k > box[1]) else False if box[0] == box[1] == k else None


def assume(u: UOp, facts: Facts) -> UOp:
    """`u` with every bool node the facts decide replaced by its constant (children first, one pass)."""
    new: dict[UOp, UOp] = {}
    for n in u.toposort():
        if n.op in _MEMORY:
            new[n] = n  # its address and gate guard an access that runs whichever branch is selected
            continue
        if n.dtype is dtypes.bool and n.op is not Ops.CONST and (v := _decide(n, facts)) is not None:
            new[n] = UOp.const(v, dtypes.bool)
            continue
        src = tuple(new.get(s, s) for s in n.src)
        new[n] = n if all(a is b for a, b in zip(src, n.src, strict=True)) else UOp(n.op, src, n.arg, n.tag)
    return new[u]


def fold_closure(c: UOp, x: UOp, y: UOp) -> UOp | None:
    """c.where(x, y) with x simplified knowing c, and y knowing ~c; None when neither branch changes."""
    x2, y2 = assume(x, _facts(c, True)), assume(y, _facts(c, False))
    if x2 is x and y2 is y:
        return None
    return UOp(Ops.WHERE, (c, x2, y2))


def where_to_max(x: UOp, y: UOp) -> UOp:
    """(x < y).where(y, x) is max(x, y): the larger of the two either way (the pattern, with its captures
    renamed, is also (y < x).where(x, y))."""
    return UOp(Ops.MAX, (x, y))


__all__ = ["assume", "fold_closure", "where_to_max"]
