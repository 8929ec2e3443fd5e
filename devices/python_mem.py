"""The python device's memory as its steps see it (`Mem`), and its data-race check for the grid emulator.

A `Mem` is a buffer's container, its size, a label for messages, and the read and write functions every LOAD,
STORE, vector lane, ldmatrix, wgmma operand and landed cp.async copy goes through.

The race check. The emulator runs a block's threads one after another from BARRIER to BARRIER, so a kernel that
lacks a barrier can still compute the right answer in it: whichever thread runs first wins, every time. On a GPU
the threads of a block run at once and the blocks in any order. So, with the check on (`RACECHECK`, on unless
set to 0), every element access of a GPU-shaped kernel is recorded (`Tracked`), and a DeviceError is raised
where two threads touch one element, at least one of them writing, with nothing ordering them:

- two threads of one block are ordered only by a `__syncthreads` between them: a BARRIER (None,
  ("cp.async.wait", n) or "mbarrier.init.fence"), counted by `Clock.epoch`;
- threads of different blocks are never ordered (there is no grid barrier), so a GLOBAL element one thread
  writes may be neither read nor written by a thread of another block; a kernel without lidx is blocks of one
  thread each, one per combination of its SPECIALs;
- a warp instruction that meets the block in the emulator (ldmatrix, wgmma's operand reads) reads as the
  warp's hardware, `UNIT`: it must not read an element a thread wrote since the last BARRIER;
- a cp.async copy is in flight from its issue to the wait that lands it: an access of its element by any
  thread after the issue's BARRIER epoch, or by another thread in that epoch, is a race (`land`);
- two stores of one same value are not reported (every GPU keeps the value).

- an ATOMICADD is no race with another ATOMICADD, but it is one with a plain read or write of its element by
  a thread it is not ordered with (`atomic`): the plain access may see the element before or after the add.

A read is kept per element for the last epoch that read it, plus one read by an earlier block (`far`) once the
current block reads it too: a later write by this block then races with that other block's read.

What it leaves out: the TMA's copies (devices.python_tma marks their elements in flight itself), and the memory
ordering of a warp's own lanes (only block barriers count: a warp-level exchange through shared memory needs
__syncwarp, which no lowering emits).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from devices.memory import bf16_decode, bf16_encode
from rewrite.errors import DeviceError


class Mem:
    """A buffer's storage as the steps see it: the container, its size, and element access."""

    __slots__ = ("data", "label", "read", "size", "write")

    def __init__(self, data: object, size: int, label: str, read: Callable, write: Callable) -> None:
        self.data, self.size, self.label, self.read, self.write = data, size, label, read, write


def reg_read(mem: Mem, i: int) -> object:
    v = mem.data[i]  # type: ignore[index]
    if v is None:
        raise DeviceError(f"{mem.label}: element {i} is read before any STORE wrote it")
    return v


def reg_write(mem: Mem, i: int, v: object) -> None:
    mem.data[i] = v  # type: ignore[index]


def np_read(mem: Mem, i: int) -> object:
    return mem.data.item(i)  # type: ignore[attr-defined]


def np_write(mem: Mem, i: int, v: object) -> None:
    mem.data[i] = v  # type: ignore[index]


def bf16_read(mem: Mem, i: int) -> object:
    return bf16_decode(mem.data.item(i))  # type: ignore[attr-defined]


def bf16_write(mem: Mem, i: int, v: object) -> None:
    mem.data[i] = bf16_encode(v)  # type: ignore[index, arg-type]


def address(mem: Mem, i: int) -> int:
    if not 0 <= i < mem.size:
        raise DeviceError(f"{mem.label}: index {i} is out of bounds for size {mem.size}")
    return i


def read_element(mem: Mem, i: int) -> object:
    """Element i of `mem`, bounds-checked (a warp instruction's read, devices.python_gpu)."""
    return mem.read(mem, address(mem, i))


# ---------------------------------------------------------------------------------------------- the race check

UNIT = -1  # the thread id of a warp instruction's own reads (ldmatrix, wgmma operands)
MANY = -2  # the reader of an element read by more than one thread in one epoch


class Clock:
    """Who runs now: `thread` (a kernel-wide id: block number * threads a block + thread number, or UNIT) in
    `epoch` (counts every BARRIER and every new block, kernel-wide); `first` is the epoch the current block
    began in, so an access recorded in an epoch before it was made by another block."""

    __slots__ = ("epoch", "first", "thread", "threads")

    def __init__(self, threads: int) -> None:
        self.threads, self.thread, self.epoch, self.first = max(threads, 1), 0, 0, 0

    def new_block(self) -> None:
        self.epoch += 1
        self.first = self.epoch

    def who(self, t: int) -> str:
        if t == UNIT:
            return "a warp instruction (ldmatrix or wgmma) of this block"
        if t == MANY:
            return "several threads"
        b, x = divmod(t, self.threads)
        return f"thread {x} of block {b}" if self.threads > 1 else f"block {b} (SPECIAL combination {b})"

    def unordered(self, t: int, epoch: int) -> bool:
        """Whether an access by thread `t` in `epoch` may run at the same time as one by the current thread."""
        return t != self.thread and (epoch == self.epoch or epoch < self.first)


class Tracked(Mem):
    """A Mem whose element accesses are checked for races: per element, the last write (its epoch, thread and
    value), the last epoch's reads (epoch, thread or MANY), a read by an earlier block (`far`) and the last
    epoch's atomic adds (`atomics`, epoch and thread or MANY)."""

    __slots__ = ("atomics", "base_read", "base_write", "clock", "far", "kernel", "reads", "writes")

    def __init__(self, mem: Mem, clock: Clock, kernel: str) -> None:
        super().__init__(mem.data, mem.size, mem.label, _tracked_read, _tracked_write)
        self.base_read, self.base_write, self.clock, self.kernel = mem.read, mem.write, clock, kernel
        self.writes: dict[int, tuple[int, int, object]] = {}
        self.reads: dict[int, tuple[int, int]] = {}
        self.far: dict[int, tuple[int, int]] = {}
        self.atomics: dict[int, tuple[int, int]] = {}

    def race(self, i: int, what: str, other: int, did: str) -> DeviceError:
        c = self.clock
        return DeviceError(
            f"data race in kernel {self.kernel!r}: {c.who(c.thread)} {what} element {i} of {self.label}, which "
            f"{c.who(other)} {did} with no BARRIER between them (on a GPU the two run in either order; a "
            f"lowering must put a BARRIER between a LOCAL buffer's writes and other threads' reads, and a "
            f"GLOBAL element may be written by one thread of a kernel only, and then read by no other)")


def _record(seen: dict[int, tuple[int, int]], i: int, c: Clock) -> tuple[int, int] | None:
    """Note the current thread's access of element i in `seen` (epoch, thread, or MANY for several threads of one
    epoch); the record it replaces, if from an earlier epoch."""
    r = seen.get(i)
    if r is None or r[0] != c.epoch:
        seen[i] = (c.epoch, c.thread)
        return r
    if r[1] != c.thread and r[1] != MANY:
        seen[i] = (c.epoch, MANY)
    return None


def _tracked_read(mem: Tracked, i: int) -> object:
    c = mem.clock
    w = mem.writes.get(i)
    if w is not None and c.unordered(w[1], w[0]):
        raise mem.race(i, "reads", w[1], "wrote")
    a = mem.atomics.get(i)
    if a is not None and c.unordered(a[1], a[0]):
        raise mem.race(i, "reads", a[1], "added to atomically")
    old = _record(mem.reads, i, c)
    if old is not None and old[0] < c.first and i not in mem.far:  # another block read it: kept
        mem.far[i] = old
    return mem.base_read(mem, i)


def _tracked_write(mem: Tracked, i: int, v: object) -> None:
    c = mem.clock
    w = mem.writes.get(i)
    if w is not None and c.unordered(w[1], w[0]) and not _same(w[2], v):
        raise mem.race(i, "writes", w[1], "wrote")
    for seen, did in ((mem.reads, "read"), (mem.far, "read"), (mem.atomics, "added to atomically")):
        r = seen.get(i)
        if r is not None and c.unordered(r[1], r[0]):
            raise mem.race(i, "writes", r[1], did)
    mem.writes[i] = (c.epoch, c.thread, v)
    mem.base_write(mem, i, v)


def atomic(mem: Mem, i: int) -> None:
    """The current thread adds to element i of `mem` atomically: a race with a plain read or write of it by a
    thread it is not ordered with (module docstring); recorded for the plain accesses that come after."""
    if not isinstance(mem, Tracked):
        return
    c = mem.clock
    for seen, did in ((mem.writes, "wrote"), (mem.reads, "read"), (mem.far, "read")):
        r = seen.get(i)
        if r is not None and c.unordered(r[1], r[0]):
            raise mem.race(i, "adds atomically to", r[1], did)
    _record(mem.atomics, i, c)


def _same(a: object, b: object) -> bool:
    """Whether two stores write one same value (two nans count as the same)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def tracked(mem: Mem, clock: Clock | None, kernel: str) -> Mem:
    """`mem` with its accesses checked (module docstring), or itself when the check is off (`clock` None)."""
    return mem if clock is None else Tracked(mem, clock, kernel)


def raw(mem: Mem) -> tuple[Callable, Callable]:
    """`mem`'s unchecked read and write (ATOMICADD's)."""
    return (mem.base_read, mem.base_write) if isinstance(mem, Tracked) else (mem.read, mem.write)


def issue_epoch(mem: Mem) -> int | None:
    """The epoch a cp.async copy into `mem` is issued in (None when `mem` is not checked)."""
    return mem.clock.epoch if isinstance(mem, Tracked) else None


def land(mem: Mem, i: int, issued: int | None) -> None:
    """A cp.async copy into element i of `mem`, issued in epoch `issued` by the current thread, lands now (its
    wait): an access of the element since then by anyone, or in that epoch by another thread, raced with it."""
    if not isinstance(mem, Tracked) or issued is None:
        return
    c = mem.clock
    for rec, what in ((mem.writes.get(i), "was written"), (mem.reads.get(i), "was read")):
        if rec is not None and (rec[0] > issued or (rec[0] == issued and rec[1] != c.thread)):
            raise DeviceError(
                f"data race in kernel {mem.kernel!r}: element {i} of {mem.label} {what} by {c.who(rec[1])} while "
                f"{c.who(c.thread)}'s cp.async copy into it was in flight (issued before that, landed by a later "
                f"wait): nothing may touch a copy's destination between its issue and the wait that lands it")


__all__ = ["MANY", "UNIT", "Clock", "Mem", "Tracked", "address", "atomic", "bf16_read", "bf16_write", "issue_epoch",
           "land", "np_read", "np_write", "raw", "read_element", "reg_read", "reg_write", "tracked"]
