"""Memory plan: intermediate buffers whose lifetimes do not overlap share storage.

A buffer is intermediate when the schedule itself creates it and nobody outside the schedule holds it
(it is not a root's result). Its lifetime runs from the item that first uses it to the item that last
does. Walking the items in order, a buffer takes storage freed by an earlier buffer of the same byte size
whose lifetime has ended (best fit by size would fragment less; same-size reuse is what kernels' repeated
shapes give in practice and is exact).
"""

from __future__ import annotations

from collections import defaultdict

from rewrite import UOp

from lower.schedule import ScheduleItem


def _nbytes(buf: UOp) -> int:
    n = 1
    for d in buf.shape:
        n *= d
    return n * buf.dtype.itemsize


def plan(items: list[ScheduleItem], keep: set[UOp]) -> dict[UOp, UOp]:
    """For each intermediate buffer, the buffer whose storage it uses (itself when it gets fresh storage)."""
    first: dict[UOp, int] = {}
    last: dict[UOp, int] = {}
    produced: set[UOp] = set()
    for i, it in enumerate(items):
        produced.add(it.bufs[0])
        for b in it.bufs:
            first.setdefault(b, i)
            last[b] = i
    inter = [b for b in first if b in produced and b not in keep]
    ends: dict[int, list[UOp]] = defaultdict(list)
    for b in inter:
        ends[last[b]].append(b)
    free: dict[tuple[int, str], list[UOp]] = defaultdict(list)
    assign: dict[UOp, UOp] = {}
    for i, it in enumerate(items):
        for b in dict.fromkeys(it.bufs):
            if b in assign or b not in last or b not in inter or first[b] != i:
                continue
            key = (_nbytes(b), b.dtype.name)
            assign[b] = free[key].pop() if free[key] else b
        for b in ends.get(i, ()):
            free[(_nbytes(b), b.dtype.name)].append(assign[b])
    return assign
