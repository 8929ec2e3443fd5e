"""Run a schedule whose devices belong to several MPI ranks: every rank runs the same program (SPMD).

A device named `NAME@r` is rank r's (devices.rank_of); a device without `@` is one every rank has, each rank
holding the same data there (host inputs, `Tensor(np_array)`). Every rank schedules the whole graph, so every
rank holds the same list of items, and runs its own part of it, in schedule order, on one thread:

  kernel on one of this rank's devices, or on a device every rank has      run
  kernel on another rank's device                                          skipped
  copy inside this rank, or from a device every rank has to this rank's    a local copy
  copy from rank a's device to rank b's (a != b)                           a Send on a, a Recv on b, tagged by
                                                                           the item's position; others skip it
  copy from rank a's device to a device every rank has                     a Bcast from rank a
Buffers of other ranks' devices are never allocated. Walking one global order keeps the blocking calls matched:
the earliest unfinished call always has every rank it involves waiting in it.

Recognised collectives, each run as one MPI call on this rank's piece instead of copies and a kernel:
  allreduce   the reduction (ADD, MAX or MUL) over the shard axis of a float32/float64/int32/int64 value on a
              tuple with one device on each rank of the job. lower.multi builds it as: the partial results P_j on
              d_j; for each device d_i, copies of every P_j (j != i) to d_i and a kernel (its own, CONTIGUOUS)
              that combines the n values in device order. A kernel whose AST is exactly that combination (one
              STORE of an ADD/MAX/MUL tree of n LOADs at the store's index), whose n inputs are, in device
              order, its own P_i and copies of the other P_j (one from each rank's device, read by nothing
              else), is one member; the n members (one per rank, over the same P_j) together become
              `Allreduce(P_r) -> output` on rank r, run where the first
              member ran (every P_j is computed before it, every reader of an output after its own member).
              When P_r is only a copy of another buffer (a block of one row summed), that buffer is reduced;
              when the output is only copied into another buffer (the root's), the Allreduce writes there.
              MPI picks its own summation order: with more than 2 ranks a float sum may round differently
              from the in-process device-order sum (every rank still gets the same bits from MPI's algorithms).
              tensor.multi.allreduce on such a tuple is written as this reduction.
  allgather, reduce_scatter   the spec's forms (tensor.multi) on such a tuple: one MPI Allgather /
              Reduce_scatter_block each (lower.mpi_gather says exactly which schedules).
Everything else moves point to point.

Schedules are replayed by structure (lower.mpi_cache), so a training loop schedules its step once.

Matching is checked: the first time a rank runs a schedule it allgathers a digest of it (every item's kind,
name, and its buffers' devices, shapes and dtypes); ranks whose digest differs from rank 0's raise a
CollectiveError that names them, on every rank. A rank that never arrives is the MPI watchdog's (devices.mpi).
"""

from __future__ import annotations

import hashlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np

from devices import rank_of
from devices.mpi import Comm, world
from lower import buffers
from lower.copyview import View, copy_into, window
from lower.schedule import ScheduleItem
from rewrite import Ops, UOp
from rewrite.env import getenv
from rewrite.errors import CollectiveError

_REDUCE = {Ops.ADD: "sum", Ops.MAX: "max", Ops.MUL: "prod"}
_MPI_DTYPES = ("float32", "float64", "int32", "int64")
_TAGS = 1 << 15  # MPI guarantees tags up to 32767


def on_ranks(bufs: list[UOp]) -> bool:
    """Whether any of these nodes lives on (or on a tuple with) a device of a named MPI rank."""
    for b in bufs:
        d = b.device
        for x in d if isinstance(d, tuple) else (d,):
            if isinstance(x, str) and rank_of(x) is not None:
                return True
    return False


@dataclass(frozen=True)
class Step:
    """What this rank does for one item: `kind` is kernel, copy, send, recv, bcast, or a collective (allreduce,
    allgather, reduce_scatter: COLLECTIVES); `peer` the other rank (send, recv), the root (bcast); for a
    collective, `bufs` = (output, input) and `op` the reduction (none for an allgather)."""

    kind: str
    item: int
    peer: int = -1
    bufs: tuple[UOp, ...] = ()
    op: str = ""


def _dev(b: UOp) -> str:
    d = b.buf_arg.device
    return d if isinstance(d, str) else str(getenv("DEVICE"))


_combined: dict[UOp, tuple[str, list[int]] | None] = {}
_identity: dict[UOp, bool] = {}


def combined_slots(ast: UOp) -> tuple[str, list[int]] | None:
    """For a kernel that only combines its inputs elementwise with one op (out[i] = in_a[i] + in_b[i] + ...):
    the op's MPI name and the input slots in order; else None."""
    if ast not in _combined:
        if len(_combined) > 4096:
            _combined.clear()
        _combined[ast] = _combined_slots(ast)
    return _combined[ast]


def _combined_slots(ast: UOp) -> tuple[str, list[int]] | None:
    stores = [u for u in ast.toposort() if u.op is Ops.STORE]
    if len(stores) != 1 or len(stores[0].src) != 2:
        return None
    idx, val = stores[0].src
    if idx.op is not Ops.INDEX or val.op not in _REDUCE:
        return None
    op, leaves, stack = val.op, [], [val]
    while stack:
        u = stack.pop()
        if u.op is op:
            stack.extend(reversed(u.src))
        elif (u.op is Ops.LOAD and len(u.src) == 1 and u.src[0].op is Ops.INDEX and u.src[0].src[1:] == idx.src[1:]
              and u.src[0].src[0].op is Ops.BUFFER):
            leaves.append(cast(int, u.src[0].src[0].buf_arg.slot))
        else:
            return None
    return _REDUCE[op], leaves


def _size(b: UOp) -> int:
    return int(np.prod([int(d) for d in b.shape], dtype=np.int64))


def allreduces(items: list[ScheduleItem], nranks: int) -> dict[int, tuple[list[int], str]]:
    """The recognised allreduces (module docstring): for each, the position of its first member, with every
    item it replaces (members and copies) and the op."""
    copy_of: dict[int, int] = {}  # destination slot -> the copy item writing it
    readers: dict[int, int] = {}  # slot -> how many items read it
    for k, it in enumerate(items):
        if it.kind == "copy":
            copy_of[buffers.slot(it.bufs[0])] = k
        for b in it.bufs[1:]:
            readers[buffers.slot(b)] = readers.get(buffers.slot(b), 0) + 1
    groups: dict[tuple, list[tuple[int, int, list[int]]]] = {}  # key -> (position, member index, copies)
    for k, it in enumerate(items):
        if it.kind != "kernel" or it.ast is None or len(it.bufs) != nranks + 1:
            continue
        if it.bufs[0].dtype.name not in _MPI_DTYPES or rank_of(_dev(it.bufs[0])) is None:
            continue
        found = combined_slots(it.ast)
        if found is None or sorted(found[1]) != list(range(1, nranks + 1)):
            continue
        op, slots = found
        here, n = _dev(it.bufs[0]), _size(it.bufs[0])
        origins, copies, mine = [], [], -1
        for j, s in enumerate(slots):
            b = it.bufs[s]
            if _size(b) != n or b.dtype != it.bufs[0].dtype:
                break
            if _dev(b) == here and buffers.slot(b) not in copy_of:
                origins.append(b)
                mine = j
                continue
            c = copy_of.get(buffers.slot(b))
            if c is None or readers.get(buffers.slot(b)) != 1 or _dev(items[c].bufs[0]) != here:
                break
            origins.append(items[c].bufs[1])
            copies.append(c)
        else:
            ranks = [rank_of(_dev(b)) for b in origins]
            if mine >= 0 and sorted(r for r in ranks if r is not None) == list(range(nranks)):
                key = (op, tuple(buffers.slot(b) for b in origins))
                groups.setdefault(key, []).append((k, mine, copies))
    out: dict[int, tuple[list[int], str]] = {}
    for (op, _), members in groups.items():
        if sorted(m for _, m, _ in members) != list(range(nranks)):
            continue
        first = min(k for k, _, _ in members)
        out[first] = ([k for k, _, cs in members for k in (k, *cs)], op)
    return out


def _identity_input(it: ScheduleItem) -> UOp | None:
    """The input of a kernel that only copies one buffer of its output's size and dtype, else None."""
    if it.kind != "kernel" or it.ast is None or len(it.bufs) != 2:
        return None
    if it.ast not in _identity:
        if len(_identity) > 4096:
            _identity.clear()
        stores = [u for u in it.ast.toposort() if u.op is Ops.STORE]
        same = len(stores) == 1 and len(stores[0].src) == 2
        if same:
            idx, val = stores[0].src
            same = (idx.op is Ops.INDEX and val.op is Ops.LOAD and len(val.src) == 1 and val.src[0].op is Ops.INDEX
                    and val.src[0].src[1:] == idx.src[1:])
        _identity[it.ast] = same
    out, src = it.bufs
    return src if _identity[it.ast] and src.dtype == out.dtype and _size(src) == _size(out) else None


COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")  # steps whose `bufs` are (output, input)


def _reads(s: Step, items: list[ScheduleItem]) -> tuple[UOp, ...]:
    return s.bufs[1:] if s.kind in COLLECTIVES else items[s.item].bufs[1:]


def _writes(s: Step, items: list[ScheduleItem]) -> UOp | None:
    return s.bufs[0] if s.kind in COLLECTIVES else None if s.kind == "send" else items[s.item].bufs[0]


def _elide_copies(items: list[ScheduleItem], steps: list[Step]) -> list[Step]:
    """A collective whose input a kernel only copied from another buffer (the partial sum over a block of one
    row, lower.multi) reads that buffer instead, and the copy kernel is dropped, when nothing else reads its
    output; and a kernel that only copies a collective's output into another buffer (the root's own) is dropped,
    the collective writing there instead, when it is the output's only reader."""
    read: dict[int, int] = {}
    for s in steps:
        for b in _reads(s, items):
            read[buffers.slot(b)] = read.get(buffers.slot(b), 0) + 1
    producer = {buffers.slot(items[s.item].bufs[0]): i for i, s in enumerate(steps) if s.kind == "kernel"}
    drop: set[int] = set()
    out = list(steps)
    for i, s in enumerate(steps):
        if s.kind not in COLLECTIVES:
            continue
        own = buffers.slot(s.bufs[1])
        p = producer.get(own)
        if p is None or p > i or read.get(own) != 1 or p in drop:
            continue
        src = _identity_input(items[steps[p].item])
        written_between = src is not None and any(
            (w := _writes(t, items)) is not None and buffers.slot(w) == buffers.slot(src) for t in steps[p + 1:i])
        if src is not None and not written_between:
            drop.add(p)
            out[i] = replace(s, bufs=(s.bufs[0], src))
    for i, s in enumerate(out):
        if s.kind not in COLLECTIVES or i in drop:
            continue
        res = buffers.slot(s.bufs[0])
        users = [j for j, t in enumerate(out) if j != i and j not in drop and any(
            buffers.slot(b) == res for b in _reads(t, items))]
        if len(users) != 1 or users[0] < i or out[users[0]].kind != "kernel":
            continue
        cp = items[out[users[0]].item]
        src = _identity_input(cp)
        if src is not None and buffers.slot(src) == res and not buffers.has_data(cp.bufs[0]):
            drop.add(users[0])
            out[i] = replace(s, bufs=(cp.bufs[0], s.bufs[1]))
    return [s for i, s in enumerate(out) if i not in drop]


def plan_steps(items: list[ScheduleItem], rank: int, nranks: int) -> list[Step]:
    """This rank's part of `items` (module docstring), recognised collectives in place of what they replace."""
    return _elide_copies(items, _plan_steps(items, rank, nranks))


def _plan_steps(items: list[ScheduleItem], rank: int, nranks: int) -> list[Step]:
    from lower.mpi_gather import Group, allgathers, reduce_scatters

    collectives = allreduces(items, nranks) if nranks > 1 else {}
    replaced = {k for ks, _ in collectives.values() for k in ks}
    groups: dict[int, Group] = {}
    if nranks > 1:
        for found in (allgathers(items, nranks), reduce_scatters(items, nranks)):
            for at, group in found.items():
                if at not in groups and at not in collectives and not replaced.intersection(group.members):
                    groups[at] = group
                    replaced.update(group.members)
    steps: list[Step] = []
    for k, it in enumerate(items):
        if (g := groups.get(k)) is not None:
            steps.append(Step(g.kind, k, bufs=g.per_rank[rank], op=g.op))
        if k in collectives:
            ks, op = collectives[k]
            for m in ks:  # this rank's member: its output, and its own input (the one not copied in)
                mem = items[m]
                if mem.kind == "kernel" and rank_of(_dev(mem.bufs[0])) == rank:
                    copied = {buffers.slot(items[c].bufs[0]) for c in ks if items[c].kind == "copy"}
                    own = next(b for b in mem.bufs[1:] if buffers.slot(b) not in copied)
                    steps.append(Step("allreduce", m, bufs=(mem.bufs[0], own), op=op))
            continue
        if k in replaced:
            continue
        if it.kind == "kernel":
            r = rank_of(_dev(it.bufs[0]))
            if r is None or r == rank:
                steps.append(Step("kernel", k))
            continue
        dst, src = (rank_of(_dev(b)) for b in it.bufs)
        if src is None or src == dst:
            if dst is None or dst == rank:
                steps.append(Step("copy", k))
        elif dst is None:
            steps.append(Step("bcast", k, peer=src) if nranks > 1 else Step("copy", k))
        elif rank == src:
            steps.append(Step("send", k, peer=dst))
        elif rank == dst:
            steps.append(Step("recv", k, peer=src))
    return steps


def digest(items: list[ScheduleItem]) -> bytes:
    """What every rank must agree on about a schedule (slots are per process, so they are left out)."""
    h = hashlib.sha256()
    for it in items:
        h.update(repr((it.kind, it.name, [(b.buf_arg.device, b.shape, b.dtype.name) for b in it.bufs])).encode())
    return h.digest()


_agreed: set[bytes] = set()


def check_matching(comm: Comm, items: list[ScheduleItem]) -> None:
    """Raise CollectiveError on every rank when the ranks are not running the same schedule."""
    agree(comm, digest(items), f"{len(items)} items here")


def agree(comm: Comm, d: bytes, here: str) -> None:
    """Check once per digest `d` (a sha256 of what this rank is about to run) that every rank runs the same:
    CollectiveError on every rank, naming the ranks that differ from rank 0 (`here` says what this rank runs)."""
    if d in _agreed:
        return
    every = comm.allgather(np.frombuffer(d, np.uint8), what="schedule check (allgather)")
    bad = [r for r in range(comm.size) if not np.array_equal(every[r], every[0])]
    if bad:
        raise CollectiveError(f"MPI ranks run different programs: the schedule of rank(s) {bad} differs from rank "
                              f"0's ({here}, on rank {comm.rank}); every rank must build the same "
                              f"graphs on the same device tuples in the same order (SPMD)")
    _agreed.add(d)


def run_ranks(items: Sequence[ScheduleItem],
              var_vals: dict[str, int] | None = None) -> tuple[list[Step], dict[int, Any]]:
    """Schedule and run this rank's part of `items` (module docstring), checking first that every rank runs the
    same schedule; DEBUG=2 prints each step's time. Returns the steps and kernels it ran, for a replay
    (lower.mpi_cache, which runs them again with `run_steps`)."""
    from lower.realize import compile_kernels

    comm = world()
    rank, nranks = (0, 1) if comm is None else (comm.rank, comm.size)
    for it in items:
        for b in it.bufs:
            r = rank_of(_dev(b))
            if r is not None and r >= nranks:
                raise CollectiveError(f"{it.name}: buffer on {_dev(b)}, but this job has {nranks} rank(s); "
                                      f"start it with `mpirun -n {r + 1}` or more")
    if comm is not None and nranks > 1:
        check_matching(comm, list(items))
    steps = plan_steps(list(items), rank, nranks)
    kern = [s.item for s in steps if s.kind == "kernel"]
    wanted = [(items[k].ast, _dev(items[k].bufs[0]), items[k].name, items[k].bufs) for k in kern]
    kernels = dict(zip(kern, compile_kernels(wanted), strict=True))  # type: ignore[arg-type]  # kernels have ASTs
    run_steps(steps, items, kernels, var_vals, len(items))
    return steps, kernels


def run_steps(steps: Sequence[Step], items: Sequence[ScheduleItem] | Mapping[int, ScheduleItem],
              kernels: dict[int, Any], var_vals: dict[str, int] | None = None, total: int = 0) -> None:
    """Run `steps` (plan_steps) in order; `items` holds the item of every step but an allreduce (which needs none)
    by position. Nothing is checked here: the caller has (run_ranks, or a replay of what it ran)."""
    from lower.realize import _array as array

    comm = world()
    rank = 0 if comm is None else comm.rank
    vv = dict(var_vals) if var_vals else {}
    debug = int(getenv("DEBUG"))
    if debug < 2:  # the fast path: no timing
        for s in steps:
            _run_step(s, None if s.kind in COLLECTIVES else items[s.item], kernels, comm, rank, vv, array)
    else:
        for s in steps:
            it = None if s.kind in COLLECTIVES else items[s.item]
            st = time.perf_counter()
            _run_step(s, it, kernels, comm, rank, vv, array)
            what = it.name if it is not None and s.kind == "kernel" else \
                f"{s.kind} {s.op or ''}{'' if s.peer < 0 else f' rank {s.peer}'}"
            print(f"rank {rank}: {what:28s} {(time.perf_counter() - st) * 1e3:9.3f} ms", file=sys.stderr)
    if debug >= 1:
        counts: dict[str, int] = {}
        for s in steps:
            counts[s.kind] = counts.get(s.kind, 0) + 1
        print(f"rank {rank}/{1 if comm is None else comm.size}: ran " +
              ", ".join(f"{v} {k}" for k, v in counts.items()) + f" of {total or len(items)} items", file=sys.stderr)


def _run_step(s: Step, it: ScheduleItem | None, kernels: dict[int, Any], comm: Comm | None, rank: int,
              vv: dict[str, int], _array: Callable[[UOp, dict[str, int]], Any]) -> None:
    if s.kind in COLLECTIVES:
        out, own = s.bufs
        buffers.wrote(out)
        run_collective(cast(Comm, comm), s.kind, s.op, _flat(_array(own, vv), own), _flat(_array(out, vv), out))
        return
    assert it is not None
    if s.kind == "kernel":
        from lower.schedule_cache import writable

        for b in it.bufs[:it.outs]:
            if buffers.has_data(b):  # an assignment's target, written in place
                writable(b)
        kernels[s.item]({i: _array(b, vv) for i, b in enumerate(it.bufs)}, vv)
        return
    assert comm is not None or s.kind == "copy"
    c = cast(Comm, comm)
    if s.kind in ("copy", "recv", "bcast"):  # an assignment's target is written in place
        buffers.wrote(it.bufs[0])
    # a copy item may read a window of its source (`view`) and fill a window of its destination (`dst_view`):
    # what travels between ranks is exactly the source window, received into the destination window
    if s.kind == "copy":
        copy_into(_array(it.bufs[0], vv), _array(it.bufs[1], vv), it.view, it.dst_view)
    elif s.kind == "send":
        c.send(_sent(_array(it.bufs[1], vv), it.view), s.peer, tag=s.item % _TAGS)
    elif s.kind == "recv":
        dst = _array(it.bufs[0], vv)
        n = it.dst_view.size if it.dst_view is not None else int(np.prod(dst.shape))
        copy_into(dst, c.recv((n,), dst.dtype, s.peer, tag=s.item % _TAGS), None, it.dst_view)
    elif s.kind == "bcast":
        dst = _array(it.bufs[0], vv)
        n = it.dst_view.size if it.dst_view is not None else int(np.prod(dst.shape))
        got = c.bcast(_sent(_array(it.bufs[1], vv), it.view) if rank == s.peer else np.empty(n, dst.dtype),
                      root=s.peer)
        copy_into(dst, got, None, it.dst_view)


def run_collective(comm: Comm, kind: str, op: str, x: np.ndarray, y: np.ndarray) -> None:
    """One collective step (COLLECTIVES) from this rank's flat input `x` into its flat output `y`."""
    if kind == "allreduce":
        comm.allreduce(x, op, out=y)
    elif kind == "allgather":
        comm.allgather(x, out=y)
    else:
        comm.reduce_scatter(x, op, out=y)


def _sent(src: Any, view: View | None) -> np.ndarray:
    """The flat, contiguous elements a copy reads from its source (its window, or all of it)."""
    return np.ascontiguousarray(src if view is None else window(src, view)).reshape(-1)


def _flat(a: Any, b: UOp) -> np.ndarray:
    """The first elements of `b`'s storage array `a`, as many as `b` has, flat."""
    n = _counts.get(b.shape)
    if n is None:
        n = _counts[b.shape] = _size(b)
    flat = cast(np.ndarray, a).reshape(-1)
    return flat if flat.size == n else flat[:n]


_counts: dict[tuple, int] = {}  # shape -> element count (a replay's allreduce asks for the same shapes again)


__all__ = ["Step", "agree", "allreduces", "check_matching", "combined_slots", "digest", "on_ranks", "plan_steps",
           "run_collective", "run_ranks", "run_steps"]
