"""Memory plan: intermediate buffers whose lifetimes do not overlap share storage.

A buffer is intermediate when the schedule itself creates it and nobody outside the schedule holds it
(it is not a root's result). Its lifetime runs from the item that first uses it to the item that last
does. Walking the items in order, a buffer takes storage freed by an earlier buffer of the same byte size
on the same device whose lifetime has ended (best fit by size would fragment less; same-size reuse is what
kernels' repeated shapes give in practice and is exact). Another device's storage is not that device's memory,
and in a multi-device schedule, whose devices run at once (lower.parallel), one array shared by two devices would
make one wait for the other. For the same reason the two ends of a copy keep their own storage: a copy runs on
its destination's thread, so a source array reused by its own device's next kernel would make that kernel wait
for the other device.
"""

from __future__ import annotations

from collections import defaultdict

from lower.buffers import has_data, slot
from lower.schedule import ScheduleItem
from rewrite import UOp


def _nbytes(buf: UOp) -> int:
    n = 1
    for d in buf.shape:
        n *= d
    return n * buf.dtype.itemsize


def _kind(buf: UOp) -> tuple:
    """What storage a buffer can share: same device, same byte size."""
    return (buf.buf_arg.device, _nbytes(buf))


def plan(items: list[ScheduleItem], keep: set[UOp]) -> dict[int, UOp]:
    """For each intermediate buffer's slot, the buffer whose storage it uses (itself for fresh storage).
    Buffers are identified by slot: a kernel reads a 1-D alias of a BUFFER, a bitcast reads it as another
    dtype, and all of them are the same storage."""
    kept = {slot(b) for b in keep}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    rep: dict[int, UOp] = {}
    produced: set[int] = set()
    for i, it in enumerate(items):
        produced.update(slot(b) for b in it.bufs[:it.outs])
        for b in it.bufs:
            s = slot(b)
            first.setdefault(s, i)
            last[s] = i
            rep.setdefault(s, b)
    # a buffer that already holds data is an assignment's target, written in place: never shared
    copied = {slot(b) for it in items if it.kind == "copy" for b in it.bufs}
    inter = {s for s in first if s in produced and s not in kept and s not in copied and not has_data(rep[s])}
    ends: dict[int, list[int]] = defaultdict(list)
    for s in inter:
        ends[last[s]].append(s)
    free: dict[tuple, list[UOp]] = defaultdict(list)
    assign: dict[int, UOp] = {}
    for i in range(len(items)):
        for s in sorted(x for x in inter if first[x] == i):
            k = _kind(rep[s])
            assign[s] = free[k].pop() if free[k] else rep[s]
        for s in ends.get(i, ()):
            free[_kind(rep[s])].append(assign[s])
    return assign
