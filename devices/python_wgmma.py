"""The python device's emulation of Hopper's warpgroup MMA (PTX wgmma, lower.tc_wgmma), asynchronous as on the GPU.

A WMMA with arg ("wgmma", n, dtype, (lbo, sbo, mn_major[, swizzle]) of A, the same of B) takes the INDEXes of
A's and B's first elements in LOCAL memory and a thread's n / 2 float32 accumulators; every thread of the block
meets there (devices.python runs it when all have arrived) and each warpgroup (128 consecutive threads, whose
lanes must agree on the operands) issues one `wgmma.mma_async.m64nNk16`:

- the descriptors are made from the byte addresses (element index x element size) with
  devices.python_gpu.wgmma_descriptor, and the operands are read back through wgmma_decode / wgmma_element:
  what the CUDA renderer encodes is what is read;
- a thread must have run BARRIER "wgmma.fence" since its last wait (PTX: wgmma.fence before the first
  wgmma.mma_async and after other accesses of its registers), else DeviceError;
- the results are `Pending` placeholders (any arithmetic on one, or a store of one to GLOBAL memory, fails)
  until BARRIER ("wgmma.wait", n) retires the op's group: BARRIER "wgmma.commit" closes the thread's ops so far
  into a group (as cp.async's commit_group); a wait is a meeting of the block, then every group of each thread
  but the newest n runs, oldest first, reading shared memory only then (so a tile overwritten before the wait is
  read overwritten), and every placeholder of a retired op in the thread's values and REG buffers becomes its
  value. A chained op (one whose C is an earlier op's D) reads that op's results when it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from devices.python_gpu import wgmma_descriptor, wgmma_element, wgmma_m64nnk16
from rewrite.errors import DeviceError
from rewrite.uop import UOp

FENCE, COMMIT, WAIT = "wgmma.fence", "wgmma.commit", "wgmma.wait"


def is_wgmma(u: UOp) -> bool:
    return isinstance(u.arg, tuple) and len(u.arg) == 5 and u.arg[0] == "wgmma"


def swizzle_of(layout: tuple) -> int:
    """The swizzle mode of an operand's layout (lbo, sbo, mn_major[, swizzle]): 0 none, 1 the 128-byte swizzle."""
    return int(layout[3]) if len(layout) > 3 else 0


def is_wgmma_barrier(arg: object) -> bool:
    return arg in (FENCE, COMMIT) or (isinstance(arg, tuple) and len(arg) == 2 and arg[0] == WAIT)


class Pending:
    """Accumulator i of warpgroup thread t of an op that no wait has retired yet."""

    __slots__ = ("i", "op", "t")

    def __init__(self, op: WgOp, t: int, i: int) -> None:
        self.op, self.t, self.i = op, t, i

    def __repr__(self) -> str:
        return f"<wgmma result {self.i} of thread {self.t}, read before its wgmma.wait_group>"

    def _used(self, *_: object) -> float:
        raise DeviceError(f"{self!r}")

    __float__ = __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __neg__ = _used

    def value(self) -> object:
        if self.op.result is None:
            raise DeviceError(f"{self!r}")
        return self.op.result[self.t][self.i]


class WgOp:
    """One issued wgmma of a warpgroup: its operands (memory, descriptor, MN-major), accumulators, and results
    once run."""

    def __init__(self, where: str, n: int, ops: list[tuple], c: list[tuple], round_acc: Callable) -> None:
        self.where, self.n, self.ops, self.c, self.round_acc = where, n, ops, c, round_acc
        self.result: list[tuple] | None = None

    def run(self) -> None:
        if self.result is not None:
            return
        c = [tuple(x.value() if isinstance(x, Pending) else x for x in cs) for cs in self.c]

        def read(which: int, row: int, col: int) -> object:
            mem, desc, mn, size = self.ops[which]
            r, k = (row, col) if which == 0 else (col, row)  # A (m, k); B (k, n): its M/N index is n
            at = wgmma_element(desc, r, k, mn, size)
            if at % size or not 0 <= at // size < mem.size:
                raise DeviceError(f"{self.where}: wgmma reads byte {at} of {mem.label} ({mem.size} elements of "
                                  f"{size} bytes)")
            return mem.read(mem, at // size)

        try:
            self.result = wgmma_m64nnk16(read, self.n, c, self.round_acc)
        except DeviceError as e:
            raise DeviceError(f"{self.where}: {e}") from e


def _state(v: list) -> dict:
    if v[-2] is None:
        v[-2] = {"fenced": False, "issued": [], "groups": []}
    return cast(dict, v[-2])


def barrier_step(arg: object, at_barrier: int) -> Callable[[list], int | None]:
    """The per-thread step of a wgmma BARRIER: fence and commit run at once; a wait meets the block (the block
    runner then calls `retire`)."""
    if arg == FENCE:
        def fence(v: list) -> None:
            _state(v)["fenced"] = True
        return fence
    if arg == COMMIT:
        def commit(v: list) -> None:
            st = _state(v)
            st["groups"].append(st["issued"])
            st["issued"] = []
        return commit

    def wait(v: list) -> int:
        return at_barrier
    return wait


def issue(u: UOp, p: int, threads: list[list], where: str, round_acc: Callable, itemsize: int) -> None:
    """Every warpgroup's wgmma of `u` (at value slot p) from its threads' operands (module docstring)."""
    if len(threads) % 128:
        raise DeviceError(f"{where}: wgmma needs whole warpgroups (128 threads); the block has {len(threads)}")
    _, n, _, lay_a, lay_b = cast(tuple, u.arg)
    for w in range(0, len(threads), 128):
        group = threads[w:w + 128]
        if not all(_state(tv)["fenced"] for tv in group):
            raise DeviceError(f"{where}: wgmma.mma_async without a wgmma.fence since the last wait")
        first = group[0][p]
        for tv in group:
            if tv[p][0][0] is not first[0][0] or tv[p][0][1] != first[0][1] or tv[p][1][0] is not first[1][0] or \
                    tv[p][1][1] != first[1][1]:
                raise DeviceError(f"{where}: the threads of a warpgroup give different wgmma operands")
        ops = [(mem, wgmma_descriptor(i * itemsize, lay[0], lay[1], swizzle_of(lay)), bool(lay[2]), itemsize)
               for (mem, i), lay in ((first[0], lay_a), (first[1], lay_b))]
        op = WgOp(where, int(n), ops, [tuple(tv[p][2]) for tv in group], round_acc)
        for t, tv in enumerate(group):
            tv[p] = tuple(Pending(op, t, i) for i in range(int(n) // 2))
            _state(tv)["issued"].append(op)


def retire(keep: int, threads: list[list]) -> None:
    """BARRIER ("wgmma.wait", keep) met by the block: each thread's groups but the newest `keep` run (oldest
    first) and the placeholders of run ops in its values and REG buffers become their values."""
    for tv in threads:
        st = _state(tv)
        while len(st["groups"]) > keep:
            for op in st["groups"].pop(0):
                op.run()
        st["fenced"] = False
        for j, x in enumerate(tv):
            if isinstance(x, Pending) and x.op.result is not None:
                tv[j] = x.value()
            elif isinstance(x, tuple) and any(isinstance(y, Pending) for y in x):
                tv[j] = tuple(y.value() if isinstance(y, Pending) and y.op.result is not None else y for y in x)
            elif getattr(x, "label", "").startswith("REG") and isinstance(x.data, list):  # a REG buffer's _Mem
                x.data[:] = [y.value() if isinstance(y, Pending) and y.op.result is not None else y for y in x.data]


__all__ = ["COMMIT", "FENCE", "WAIT", "Pending", "WgOp", "barrier_step", "is_wgmma", "is_wgmma_barrier", "issue",
           "retire", "swizzle_of"]
