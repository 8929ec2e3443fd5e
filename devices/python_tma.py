"""The python device's emulation of the TMA copies and mbarriers of devices.tma, asynchronous as on the GPU.

- An mbarrier is an `MBarrier` object in its LOCAL uint64 element (written by "mbarrier.init"; any other use of
  an element that holds none is a DeviceError): arrivals still expected this phase, the phase number, the bytes
  its copies are expected to bring and those issued, and the copies' pending writes.
- "tma.load" (the leader only) reads the box from GLOBAL memory when issued, zeros outside the tensor, and at
  once fills every destination element with an `InFlight` placeholder; its values are written when a wait
  completes the phase. So a read of the tile before the wait fails (any arithmetic on a placeholder, or
  storing one to GLOBAL memory), and so does a wgmma still in flight over a stage that a new copy overwrites.
- "mbarrier.wait" is a meeting of the block (the threads must agree on the barrier and the parity). When the
  current phase has that parity it must be complete: every arrival made and the issued copies exactly the bytes
  expected (else the GPU would wait forever: DeviceError); the copies land and the phase advances. A wait for
  the other parity (a phase already completed) does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from devices.tma import EXPECT, INIT, LOAD, box_bytes, box_coords, box_place, ins_kind
from rewrite.errors import DeviceError
from rewrite.uop import UOp


class InFlight:
    """An element of shared memory a TMA copy is writing: read before its mbarrier phase completes."""

    __slots__ = ("where",)

    def __init__(self, where: str) -> None:
        self.where = where

    def __repr__(self) -> str:
        return f"<element of a TMA copy in flight ({self.where}), read before its mbarrier wait>"

    def _used(self, *_: object) -> float:
        raise DeviceError(f"{self!r}")

    __float__ = __int__ = __index__ = __bool__ = _used  # type: ignore[assignment]
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __neg__ = _used


class MBarrier:
    """One mbarrier's state (module docstring)."""

    def __init__(self, count: int) -> None:
        self.count, self.left, self.phase = count, count, 0
        self.expected = self.issued = 0
        self.writes: list[tuple[object, int, object]] = []

    def complete(self, where: str) -> None:
        if self.left or self.expected != self.issued:
            raise DeviceError(f"{where}: the wait for phase {self.phase} of an mbarrier never returns: "
                              f"{self.left} of its {self.count} arrivals missing, copies of {self.issued} bytes "
                              f"issued against {self.expected} expected")
        for mem, at, x in self.writes:
            mem.data[at] = x  # type: ignore[attr-defined]
        self.writes = []
        self.phase += 1
        self.left, self.expected, self.issued = self.count, 0, 0


def _element(v: list, idx: int, where: str) -> tuple:
    """(memory, position) of the mbarrier INDEX at value slot idx, inside its buffer."""
    mem, i = v[idx]
    if not 0 <= i < mem.size:
        raise DeviceError(f"{where}: mbarrier {i} is out of bounds for size {mem.size}")
    return mem, i


def _barrier(v: list, idx: int, where: str) -> MBarrier:
    mem, i = _element(v, idx, where)
    bar = mem.data[i]
    if not isinstance(bar, MBarrier):
        raise DeviceError(f"{where}: element {i} of {mem.label} is not an initialized mbarrier")
    return bar


def ins_step(u: UOp, pos: dict[UOp, int], where: str, at_barrier: int) -> Callable[[list], int | None]:
    """The per-thread step of a TMA / mbarrier INS (a wait only meets the block: `wait_met` does the rest)."""
    kind, arg = ins_kind(u), cast(tuple, u.arg)
    s = [pos[x] for x in u.src]
    if kind == INIT:
        bar_i, leader = s[0], s[1]

        def init(v: list) -> None:
            if v[leader]:
                mem, i = _element(v, bar_i, where)
                mem.data[i] = MBarrier(int(arg[1]))
        return init
    if kind == EXPECT:
        bar_i, leader = s[0], s[1]

        def expect(v: list) -> None:
            if v[leader]:
                bar = _barrier(v, bar_i, where)
                if bar.left == 0:
                    raise DeviceError(f"{where}: an arrival past the {bar.count} of phase {bar.phase}")
                bar.left -= 1
                bar.expected += int(arg[1])
        return expect
    if kind == LOAD:
        dims, strides, box, swizzle = arg[1:]
        dst_i, src_i, bar_i, leader, coords = s[0], s[1], s[2], s[3], s[4:4 + len(dims)]
        rows = box_coords(box)
        itemsize = u.src[1].dtype.itemsize
        nbytes = box_bytes(u)

        def load(v: list) -> None:
            if not v[leader]:
                return
            (dst, d0), (src, s0) = v[dst_i], v[src_i]
            bar = _barrier(v, bar_i, where)
            if (d0 * itemsize) % (1024 if swizzle else 128):
                raise DeviceError(f"{where}: a TMA box lands at byte {d0 * itemsize} of {dst.label}, not "
                                  f"{1024 if swizzle else 128}-byte aligned")
            c = [int(v[x]) for x in coords]
            span = 1 + (dims[0] - 1) + sum((d - 1) * st for d, st in zip(dims[1:], strides, strict=True))
            if s0 + span > src.size:
                raise DeviceError(f"{where}: the tensor of dims {dims} at element {s0} runs past {src.label} "
                                  f"({src.size} elements)")
            mark = InFlight(where)
            for r, off in enumerate(rows):
                outer = [c[j + 1] + off[j] for j in range(len(off))]
                base = s0 + sum(o * st for o, st in zip(outer, strides, strict=True))
                row_in = all(0 <= o < d for o, d in zip(outer, dims[1:], strict=True))
                for e in range(box[0]):
                    x = c[0] + e
                    val = src.read(src, base + x) if row_in and 0 <= x < dims[0] else 0.0
                    at = d0 + box_place(r, e, box[0], itemsize, swizzle)
                    if not 0 <= at < dst.size:
                        raise DeviceError(f"{where}: the box writes element {at} of {dst.label} ({dst.size})")
                    dst.data[at] = mark
                    bar.writes.append((dst, at, val))
            bar.issued += nbytes
        return load

    def wait(v: list) -> int:
        return at_barrier
    return wait


def wait_met(u: UOp, pos: dict[UOp, int], threads: list[list], where: str) -> None:
    """Every thread of the block has met an "mbarrier.wait": complete the phase if it has the parity waited for
    (module docstring)."""
    bar_i, par_i = pos[u.src[0]], pos[u.src[1]]
    first = threads[0][bar_i]
    parity = int(threads[0][par_i]) & 1
    for tv in threads:
        if tv[bar_i][0] is not first[0] or tv[bar_i][1] != first[1] or int(tv[par_i]) & 1 != parity:
            raise DeviceError(f"{where}: the threads of a block wait on different mbarriers or parities")
    bar = _barrier(threads[0], bar_i, where)
    if bar.phase % 2 == parity:
        bar.complete(where)


__all__ = ["InFlight", "MBarrier", "ins_step", "wait_met"]
