"""Interior/border split of a kernel's output loops (after optimize, before expand).

A load inside a reduction whose gate says "this element is inside the buffer" (a padded input read through a
window: conv2d's taps at the image border, a pooling window) is checked on every step of the reduction, for every
output, although the check fails only for the outputs near the border. Where a gate's comparisons hold for every
value of everything else (the reduction's ranges, the register tile's UPCAST lanes, the other loops) once an
output loop r is inside an interval [lo, hi), the loop over r becomes three loops over [0, lo), [lo, hi) and
[hi, n), each with its own copy of the body; in the interior copy those comparisons are true, and the symbolic
stage drops them (a gated load becomes a plain one, its WHERE the value). The copies get fresh RANGEs for the
loops nested inside r and for their reductions (each loop is closed once). Only the interior copy is split again
along the next such loop (the border copies keep every check), so a kernel gated along k loops has at most
2k + 1 copies of its body.

The interior is found from the lower bound of b - a of each comparison a < b (rewrite's interval analysis over the
other ranges) at r = 0 and r = 1, as if it moved linearly with r, and then proved over the whole interval at once
(r replaced by a range over it): sound whatever made the gate, and exact for the sums of ranges with constant
factors that index math is.

conv2d (8,64,56,56) -> 64, 3x3, padding 1 on x86-64-v4: rows [1, 55) of 56 and tile columns [1, 6) of 7 (tiles of
8 output columns) run without checks: 69% of the work.
"""

from __future__ import annotations

from lower.opt_apply import next_range_id, size
from lower.strides import _topo
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.errors import KernelOptError

MAX_SPLITS = 3  # loops split per END (the interior of the interior ...): at most 2 * MAX_SPLITS + 1 body copies
# a loop is split only where its interior is at least 1/MIN_INTERIOR_SHARE of it (else the copies cost compile
# time and code for few unchecked iterations: a 4-wide output under a 3-tap window)
MIN_INTERIOR_SHARE = 2


def _atoms(g: UOp) -> list[UOp]:
    """The comparisons a gate is the AND of."""
    if g.op is Ops.AND and g.dtype is dtypes.bool:
        return _atoms(g.src[0]) + _atoms(g.src[1])
    return [g]


def _is_true(u: UOp) -> bool:
    return u.op is Ops.CONST and u.value is True


def _gates(body: UOp) -> list[UOp]:
    """The comparisons (index a < index b) of the gates of the loads inside a reduction of `body` that change with
    the reduction's own ranges (a window's taps): checked on every step. One that does not (a ragged column's
    lane mask in matmul's tile) is computed once outside the reduction's loop, and stays."""
    out: dict[UOp, None] = {}
    for red in (u for u in _topo(body) if u.op is Ops.REDUCE):
        own = set(red.src[1:])
        for u in _topo(red.src[0]):
            if u.op is Ops.LOAD and len(u.src) >= 3 and u.src[2].dtype is dtypes.bool:
                for a in _atoms(u.src[2]):
                    if a.op is Ops.CMPLT and a.src[0].dtype is dtypes.index and any(q in own for q in a.toposort()):
                        out[a] = None
    return list(out)


class _Ids:
    def __init__(self, start: int) -> None:
        self.next = start

    def fresh(self, n: int, kind: AxisType) -> UOp:
        r = UOp.range(n, self.next, kind)
        self.next += 1
        return r


def _bound(atom: UOp, r: UOp, at: UOp) -> int | None:
    """The lower bound of b - a for atom (a < b) with r replaced by `at`, over every value of the other ranges
    (rewrite's interval analysis); None where it has none."""
    a, b = (s.substitute({r: at}) for s in atom.src)
    lo = (b - a).vmin
    return lo if type(lo) is int else None


def _candidate(atom: UOp, r: UOp, n: int) -> tuple[int, int] | None:
    """[lo, hi) of r's values where atom would hold for all other values if its bound moved linearly with r (from
    the bounds at r = 0 and 1); None where it would hold nowhere. Only a candidate: _interior checks it."""
    m0, m1 = _bound(atom, r, UOp.const(0)), _bound(atom, r, UOp.const(1))
    if m0 is None or m1 is None:
        return None
    c = m1 - m0  # the bound is m0 + c * v; the comparison holds where that is >= 1
    if c == 0:
        lo, hi = (0, n) if m0 >= 1 else (0, 0)
    elif c > 0:
        lo, hi = max(0, -((m0 - 1) // c)), n
    else:
        lo, hi = 0, min(n, (m0 - 1) // -c + 1)
    return (lo, hi) if lo < hi else None


def _interior(atoms: list[UOp], r: UOp, ids: _Ids) -> tuple[int, int, list[UOp]] | None:
    """[lo, hi) of r where every comparison over r that holds anywhere holds for all other values, and those
    comparisons; None when there is nothing to split (no comparison depends on r, they hold everywhere, the
    interior is under 1/MIN_INTERIOR_SHARE of the loop, or the interval analysis cannot prove it). The interval is
    the intersection of each comparison's linear candidate, proved by the bounds over all of it at once (r replaced
    by a range over [lo, hi)): sound whatever the index math, and one evaluation per comparison, not per value."""
    n = size(r)
    if n < 2:
        return None
    found = [(a, c) for a in atoms if r in a.toposort() and (c := _candidate(a, r, n)) is not None]
    if not found:
        return None
    lo, hi = max(c[0] for _, c in found), min(c[1] for _, c in found)
    if lo >= hi or (lo == 0 and hi == n) or (hi - lo) * MIN_INTERIOR_SHARE < n:
        return None
    over = UOp.const(lo) if hi - lo == 1 else ids.fresh(hi - lo, AxisType.LOOP) + lo
    good = [a for a, _ in found]
    if not all((b := _bound(a, r, over)) is not None and b >= 1 for a in good):
        return None
    return lo, hi, good


def _closed_inside(body: UOp) -> list[UOp] | None:
    """The loops closed inside `body` (its reductions' ranges, the ranges of ENDs within it); None when one is an
    UPCAST or UNROLL range (lower.expand makes the copies of such a range where it is closed, once: the body is
    not copied then)."""
    out: dict[UOp, None] = {}
    for u in _topo(body):
        if u.op in (Ops.REDUCE, Ops.END):
            for q in u.src[1:]:
                if q.op is Ops.RANGE:
                    if q.axis_type not in (AxisType.LOOP, AxisType.REDUCE):
                        return None
                    out[q] = None
    return list(out)


def _copy(body: UOp, inner: list[UOp], closed: list[UOp], r: UOp, part: UOp | int, offset: int, true: list[UOp],
          ids: _Ids) -> tuple[UOp, list[UOp]]:
    """The body over one part of r: r -> part + offset (a constant when the part has one value), the comparisons
    in `true` replaced by True, every range in `inner` and every range closed inside the body fresh. Returns the
    new body and the fresh loops for `inner`."""
    if true:  # a load whose gate is all such comparisons becomes a plain load; the others' gates get True
        known = set(true)
        plain: dict[UOp, UOp] = {}
        for u in _topo(body):
            if u.op is Ops.LOAD and len(u.src) >= 3 and all(a in known or _is_true(a) for a in _atoms(u.src[2])):
                plain[u] = UOp(Ops.LOAD, (u.src[0],), u.arg, u.tag)
        body = body.substitute({**{a: UOp.const(True) for a in true}, **plain})
    mapping: dict[UOp, UOp] = {}
    fresh_inner = [ids.fresh(size(q), q.axis_type) for q in inner]
    mapping.update(zip(inner, fresh_inner, strict=True))
    for q in closed:
        mapping[q] = ids.fresh(size(q), q.axis_type)
    body = body.substitute(mapping)
    at = UOp.const(offset) if isinstance(part, int) else part + offset if offset else part
    return body.substitute({r: at}), fresh_inner


def _end(body: UOp, ranges: list[UOp]) -> UOp:
    return UOp(Ops.END, (body, *ranges)) if ranges else body


def _split_end(end: UOp, ids: _Ids, depth: int = 0) -> UOp:
    """END(body, ranges) with its first gated loop split into border and interior parts (the interior split
    again along the next one, up to MAX_SPLITS loops)."""
    body, ranges = end.src[0], list(end.src[1:])
    atoms = _gates(body) if depth < MAX_SPLITS else []
    closed = _closed_inside(body) if atoms else None
    if closed is None:
        return end
    for i, r in enumerate(ranges):
        if r.op is not Ops.RANGE or r.axis_type is not AxisType.LOOP:
            continue
        try:
            found = _interior(atoms, r, ids)
        except KernelOptError:
            continue
        if found is None:
            continue
        lo, hi, good = found
        inner = [q for q in ranges[i + 1:] if q.op is Ops.RANGE and q.axis_type is AxisType.LOOP]
        outer = [q for q in ranges if q is not r and q not in inner]
        parts: list[UOp] = []
        for start, stop, interior in ((0, lo, False), (lo, hi, True), (hi, size(r), False)):
            if stop <= start:
                continue
            part: UOp | int = 0 if stop - start == 1 else ids.fresh(stop - start, AxisType.LOOP)
            new_body, new_inner = _copy(body, inner, closed, r, part, start, good if interior else [], ids)
            loops = ([] if isinstance(part, int) else [part]) + new_inner
            copy = _end(new_body, loops)
            if interior and copy.op is Ops.END:
                copy = _split_end(copy, ids, depth + 1)
            parts.append(copy)
        return _end(parts[0] if len(parts) == 1 else UOp(Ops.GROUP, tuple(parts)), outer)
    return end


def _split_or_keep(end: UOp, ids: _Ids) -> UOp:
    try:
        return _split_end(end, ids)
    except KernelOptError:  # a loop of symbolic size in the body: it is not copied
        return end


def split_interior(ast: UOp) -> UOp:
    """`ast` (a kernel SINK after its opts) with each top-level END split at the borders of its gated loops
    (see the module docstring); the same `ast` where no loop's gates have an interior."""
    if ast.op is not Ops.SINK or not any(u.op is Ops.END for u in ast.src):
        return ast
    ids = _Ids(next_range_id(ast))
    new = tuple(_split_or_keep(e, ids) if e.op is Ops.END else e for e in ast.src)
    return ast if new == ast.src else UOp(Ops.SINK, new, ast.arg, ast.tag)


__all__ = ["MAX_SPLITS", "MIN_INTERIOR_SHARE", "split_interior"]
