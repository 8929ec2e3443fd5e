"""Allgather and reduce_scatter across MPI ranks, recognised in a schedule and run as one MPI call each
(lower.mpi_exec runs the steps; its docstring says how a schedule is split among the ranks).

Both are recognised on a device tuple with one device on each rank of the job (n ranks), for float32, float64,
int32 and int64 values, in the form the spec's collectives (tensor.multi) take after lower.multi:

  allgather       T (n*s,) sharded on axis 0, `T.reshape(1, n*s).expand(n, n*s).copy(D).replicated(0)`: for each
                  rank r a buffer O_r (n*s elements) on r's device written only by n copies, the one into
                  elements [q*s, (q+1)*s) reading all of P_q (s elements, rank q's shard), in order. The n
                  groups (the same P_0..P_{n-1}) become `Allgather(P_r) -> O_r` on rank r.
  reduce_scatter  `T.reshape(n, n, c).permute(1, 0, 2).copy(D).sum(1)`: lower.multi (`_sum_of_parts`) makes it,
                  on each rank r, a kernel that only adds n buffers (lower.mpi_exec.combined_slots), each a copy
                  (read by nothing else) of elements [r*c, (r+1)*c) of P_q (n*c elements) from rank q, one per
                  rank. The n kernels (the same P_q) become `Reduce_scatter_block(P_r) -> O_r` on rank r (MPI's
                  summation order: with more than 2 ranks a float sum may round differently from the
                  in-process one, as for the allreduce).

A group runs at its first member, or just after the last write of a P_q when that comes later (the schedule may
interleave the shards' own copies with the members); it is taken only when that is no later than its last
member, nothing else before where it runs reads or writes an O_r, and nothing between where it runs and its
last member writes a P_q (O_r's readers come after O_r's own members, which the group replaces).
"""

from __future__ import annotations

from dataclasses import dataclass

from devices import rank_of
from lower import buffers
from lower.copyview import View
from lower.mpi_exec import _MPI_DTYPES, _dev, _size, combined_slots
from lower.schedule import ScheduleItem
from rewrite import UOp


@dataclass(frozen=True)
class Group:
    """A recognised collective: `kind` (allgather, reduce_scatter), `op` (reduce_scatter's reduction), the items it
    replaces, and per rank (output, input)."""

    kind: str
    op: str
    members: tuple[int, ...]
    per_rank: dict[int, tuple[UOp, UOp]]


def _span(view: View | None, total: int) -> tuple[int, int] | None:
    """(offset, count) of a window that is one run of consecutive elements in order; None when it is not."""
    if view is None:
        return 0, total
    return (view.offset, view.size) if view.contiguous else None


def _rank(b: UOp) -> int | None:
    return rank_of(_dev(b))


def _writers(items: list[ScheduleItem]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for k, it in enumerate(items):
        out.setdefault(buffers.slot(it.bufs[0]), []).append(k)
    return out


def _position(items: list[ScheduleItem], writers: dict[int, list[int]], members: list[int], ins: set[int],
              outs: set[int]) -> int | None:
    """Where the group can run (module docstring), or None."""
    first, last, mine = members[0], members[-1], set(members)
    at = max([first, *(k + 1 for s in ins for k in writers.get(s, []) if k not in mine)])
    if at > last:
        return None
    for k in range(first, last + 1):
        if k in mine:
            continue
        slots = [buffers.slot(b) for b in items[k].bufs]
        if (k >= at and slots[0] in ins) or (k < at and any(s in outs for s in slots)):
            return None
    return at


def _finish(items: list[ScheduleItem], writers: dict[int, list[int]], kind: str,
            groups: dict[tuple, dict[int, tuple[UOp, UOp, list[int]]]], nranks: int) -> dict[int, Group]:
    found: dict[int, Group] = {}
    for key, by_rank in groups.items():
        if sorted(by_rank) != list(range(nranks)):
            continue
        members = sorted(k for _, _, ks in by_rank.values() for k in ks)
        ins = {buffers.slot(i) for _, i, _ in by_rank.values()}
        outs = {buffers.slot(o) for o, _, _ in by_rank.values()}
        at = _position(items, writers, members, ins, outs) if len(set(members)) == len(members) else None
        if at is not None and at not in found:
            found[at] = Group(kind, key[0], tuple(members), {r: (o, i) for r, (o, i, _) in by_rank.items()})
    return found


def allgathers(items: list[ScheduleItem], nranks: int) -> dict[int, Group]:
    """The recognised allgathers (module docstring), by the position they run at."""
    writers = _writers(items)
    groups: dict[tuple, dict[int, tuple[UOp, UOp, list[int]]]] = {}
    for ks in writers.values():
        if len(ks) != nranks or any(items[k].kind != "copy" for k in ks):
            continue
        out = items[ks[0]].bufs[0]
        r, total = _rank(out), _size(out)
        if r is None or out.dtype.name not in _MPI_DTYPES or total % nranks:
            continue
        c, parts = total // nranks, {}
        for k in ks:
            it = items[k]
            src = it.bufs[1]
            dst, read = _span(it.dst_view, total), _span(it.view, _size(src))
            if dst is None or read != (0, c) or _size(src) != c or dst[1] != c or dst[0] % c or src.dtype != out.dtype:
                break
            q = dst[0] // c
            if _rank(src) != q or q in parts:
                break
            parts[q] = src
        else:
            if len(parts) == nranks:
                key = ("", tuple(buffers.slot(parts[q]) for q in range(nranks)))
                groups.setdefault(key, {})[r] = (out, parts[r], list(ks))
    return _finish(items, writers, "allgather", groups, nranks)


def reduce_scatters(items: list[ScheduleItem], nranks: int) -> dict[int, Group]:
    """The recognised reduce_scatters (module docstring), by the position they run at."""
    writers = _writers(items)
    copy_of = {buffers.slot(it.bufs[0]): k for k, it in enumerate(items) if it.kind == "copy"}
    readers: dict[int, int] = {}
    for it in items:
        for b in it.bufs[1:]:
            readers[buffers.slot(b)] = readers.get(buffers.slot(b), 0) + 1
    groups: dict[tuple, dict[int, tuple[UOp, UOp, list[int]]]] = {}
    for k, it in enumerate(items):
        if it.kind != "kernel" or it.ast is None or len(it.bufs) != nranks + 1:
            continue
        out = it.bufs[0]
        r = _rank(out)
        if r is None or out.dtype.name not in _MPI_DTYPES:
            continue
        found = combined_slots(it.ast)
        if found is None or sorted(found[1]) != list(range(1, nranks + 1)):
            continue
        c, parts, copies = _size(out), {}, []
        for b in it.bufs[1:]:
            ck = copy_of.get(buffers.slot(b))
            if ck is None or readers.get(buffers.slot(b)) != 1 or len(writers[buffers.slot(b)]) != 1:
                break
            cp = items[ck]
            src = cp.bufs[1]
            q = _rank(src)
            if (q is None or q in parts or _size(b) != c or _size(src) != nranks * c or src.dtype != out.dtype
                    or _span(cp.view, _size(src)) != (r * c, c) or _span(cp.dst_view, c) != (0, c)):
                break
            parts[q] = src
            copies.append(ck)
        else:
            if sorted(parts) == list(range(nranks)):
                key = (found[0], tuple(buffers.slot(parts[q]) for q in range(nranks)))
                groups.setdefault(key, {})[r] = (out, parts[r], [k, *copies])
    return _finish(items, writers, "reduce_scatter", groups, nranks)


__all__ = ["Group", "allgathers", "reduce_scatters"]
