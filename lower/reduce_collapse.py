"""Reduce collapse: an integer sum over one RANGE of a value that counts the range's positions has a closed form.

The spec builds `arange(n)` as a prefix sum of ones (seeds/001, "Common Ops as Compositions"): after rangeify,
output i holds `sum over r < n of where(c < r + i, 1, 0)` once the index math is simplified, which is O(n) work
per element and O(n^2) per arange. Here such a sum becomes `y * count`, with the count of positions of r in
[0, R) that satisfy the condition written as `max(min(hi, R) - max(lo, 0), 0)`; the symbolic rules drop the
clamps the bounds decide, so the arange's value is the output RANGE itself (`i`), with no reduction left.

What is collapsed: `REDUCE(ADD)` over a single range r of an integer (or index) value that is
  * free of r (the sum is value * R), or
  * `where(cond, y, 0)`, `where(cond, 0, y)` or `cond.cast(int)` with y free of r and cond an AND of
    comparisons `a < b` (or their NOT) in which r appears with coefficient +1 or -1 in a - b.
Sums of floats are left alone: `y * R` rounds differently from a sequential sum. Integer sums wrap modulo
2**bits in both forms, so the product is exact for sized ints too.
"""

from __future__ import annotations

from rewrite import Ops, UOp, dtypes


def _linear(e: UOp, r: UOp) -> tuple[int, UOp] | None:
    """(k, rest) with e == k*r + rest and rest free of r; None when e is not of that form."""
    if e is r:
        return 1, UOp.const(0)
    if r not in e.toposort():
        return 0, e
    if e.op is Ops.ADD:
        a, b = _linear(e.src[0], r), _linear(e.src[1], r)
        if a is None or b is None:
            return None
        return a[0] + b[0], a[1] + b[1]
    if e.op is Ops.MUL and e.src[1].op is Ops.CONST and (a := _linear(e.src[0], r)) is not None:
        c = int(e.src[1].value)
        return a[0] * c, a[1] * c
    return None


Bounds = tuple[UOp | None, UOp | None]  # lo <= r < hi; None is unbounded on that side


def _bounds(cond: UOp, r: UOp) -> Bounds | None:
    """The interval of r on which the bool `cond` holds, or None when it is not an interval in r."""
    if cond.op is Ops.AND and cond.dtype is dtypes.bool:
        a, b = _bounds(cond.src[0], r), _bounds(cond.src[1], r)
        if a is None or b is None:
            return None
        return _tighter(a[0], b[0], UOp.maximum), _tighter(a[1], b[1], UOp.minimum)
    negate = cond.op is Ops.NOT or (cond.op is Ops.CMPNE and cond.src[1].op is Ops.CONST and cond.src[1].value is True)
    if negate:
        cond = cond.src[0]
    if cond.op is not Ops.CMPLT or cond.src[0].dtype is not dtypes.index:
        return None
    left, right = _linear(cond.src[0], r), _linear(cond.src[1], r)
    if left is None or right is None:
        return None
    k, rest = left[0] - right[0], right[1] + left[1] * -1  # cond: k*r < rest
    if k == 1:  # r < rest
        return (rest, None) if negate else (None, rest)
    if k == -1:  # r > -rest, that is r >= 1 - rest
        lo = rest * -1 + 1
        return (None, lo) if negate else (lo, None)
    return None


def _tighter(a: UOp | None, b: UOp | None, pick: object) -> UOp | None:
    return b if a is None else a if b is None else pick(a, b)  # type: ignore[operator]  # UOp.maximum/minimum


def _counted(v: UOp, r: UOp) -> tuple[UOp, UOp | None] | None:
    """(y, cond) with v == where(cond, y, 0) and y free of r (cond None: v itself is free of r)."""
    if r not in v.toposort():
        return v, None
    if v.op is Ops.WHERE:
        c, t, f = v.src
        if f.op is Ops.CONST and f.value == 0 and r not in t.toposort():
            return t, c
        if t.op is Ops.CONST and t.value == 0 and r not in f.toposort():
            return f, ~c
    if v.op is Ops.CAST and v.src[0].dtype is dtypes.bool:
        return UOp.const(1, v.dtype), v.src[0]
    return None


def collapse_sum(v: UOp, r: UOp) -> UOp | None:
    """The closed form of `REDUCE(ADD)(v, r)` for an integer `v` (module docstring), or None."""
    if not (v.dtype.is_int or v.dtype is dtypes.index) or r.op is not Ops.RANGE:
        return None
    got = _counted(v, r)
    if got is None:
        return None
    y, cond = got
    size = r.src[0]
    if cond is None:
        count = size
    else:
        if (b := _bounds(cond, r)) is None:
            return None
        lo, hi = b
        top = size if hi is None else hi.minimum(size)
        count = (top - (UOp.const(0) if lo is None else lo.maximum(0))).maximum(0)
    return y * (count if y.dtype is dtypes.index else count.cast(y.dtype))


__all__ = ["collapse_sum"]
