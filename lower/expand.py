"""Expand: upcast ranges into lanes (the spec's "expand the parallel ranges into shape").

Every UPCAST range (an output loop unrolled into lanes) and UNROLL range (a reduction loop unrolled into
lanes) of a kernel becomes a coordinate of one flattened lane space of L = product of their sizes lanes:
the range is replaced by the VCONST of its coordinate in each lane, and every value that depends on it
becomes a vector of shape (L,) by ordinary shape broadcasting. A REDUCE over UNROLL ranges reduces its
remaining ranges lane-wise, then folds the lanes that differ only in its UNROLL coordinates (a horizontal
reduction written as lane extractions), and the result is broadcast back to all L lanes. A STORE keeps the
lanes whose UNROLL coordinates are all 0, so each element is written once. Nothing else changes: a scalar
stays a scalar.
"""

from __future__ import annotations

import itertools
from functools import reduce as _fold

from rewrite import AxisType, Ops, UOp

from lower.optimize import axes, replace_range, size

EXPANDED = (AxisType.UPCAST, AxisType.UNROLL)


def _coords(lanes: list[UOp]) -> list[tuple[int, ...]]:
    return list(itertools.product(*(range(size(r)) for r in lanes)))


def _lane(v: UOp, i: int) -> UOp:
    return v if v.shape == () else UOp(Ops.INDEX, (v, UOp.const(i)))


def expand(ast: UOp) -> UOp:
    lanes = [r for r in axes(ast) if r.arg[1] in EXPANDED]  # type: ignore[index]
    if not lanes:
        return ast
    coords = _coords(lanes)
    n = len(coords)
    if n > 64 or n & (n - 1):
        from rewrite.errors import KernelOptError

        raise KernelOptError(f"expand: {n} lanes; lane counts must be powers of two up to 64")
    vec = {r: UOp.vconst([c[k] for c in coords]) for k, r in enumerate(lanes)}
    # REDUCEs first: fold their unrolled lanes, so the loop part keeps only its sequential ranges
    for red in [u for u in ast.toposort() if u.op is Ops.REDUCE]:
        red = next(u for u in ast.toposort() if u.op is Ops.REDUCE and u.arg == red.arg and _same(u, red))
        unrolled = [r for r in red.src[1:] if r in vec]
        if not unrolled:
            continue
        keep = tuple(r for r in red.src[1:] if r not in vec)
        body = red.src[0]
        inner = UOp(Ops.REDUCE, (body, *keep), red.arg) if keep else body
        ast = ast.substitute({red: _fold_lanes(inner, red.arg[0], [lanes.index(r) for r in unrolled], coords)})
    # the remaining uses of the lane ranges become lane coordinates; END lists drop them
    for r in lanes:
        ast = replace_range(ast, r, (), vec[r])
    unroll_idx = [k for k, r in enumerate(lanes) if r.arg[1] is AxisType.UNROLL]  # type: ignore[index]
    return _narrow_stores(ast, unroll_idx, coords)


def _same(a: UOp, b: UOp) -> bool:
    return a is b or (a.src[1:] == b.src[1:])


def _fold_lanes(v: UOp, op: Ops, axes_k: list[int], coords: list[tuple[int, ...]]) -> UOp:
    """Lane l of the result = op over the lanes that agree with l everywhere except the axes in `axes_k`."""
    def key(c: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(x for k, x in enumerate(c) if k not in axes_k)

    groups: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(coords):
        groups.setdefault(key(c), []).append(i)
    if v.shape == ():  # the body did not depend on its unrolled lanes after all: fold n copies
        vals = {k: v for k in groups}
    else:
        vals = {k: _fold(lambda a, b: UOp(op, (a, b)), [_lane(v, i) for i in idx]) for k, idx in groups.items()}
    if len(vals) == 1:
        return next(iter(vals.values()))
    return UOp(Ops.STACK, tuple(vals[key(c)] for c in coords))


def _narrow_stores(ast: UOp, unroll_idx: list[int], coords: list[tuple[int, ...]]) -> UOp:
    """Stores write only the lanes whose UNROLL coordinates are 0 (the others hold the same values)."""
    if not unroll_idx:
        return ast
    keep = [i for i, c in enumerate(coords) if all(c[k] == 0 for k in unroll_idx)]
    mapping = {}
    for st in [u for u in ast.toposort() if u.op is Ops.STORE and u.src[1].shape != ()]:
        at, val = st.src[0], st.src[1]
        if at.op is not Ops.INDEX:
            continue
        idx = at.src[1]

        def pick(x: UOp) -> UOp:
            if x.shape == ():
                return x
            return _lane(x, keep[0]) if len(keep) == 1 else UOp(Ops.STACK, tuple(_lane(x, i) for i in keep))

        mapping[st] = UOp(Ops.STORE, (UOp(Ops.INDEX, (at.src[0], pick(idx))), pick(val), *st.src[2:]))
    return ast.substitute(mapping) if mapping else ast
