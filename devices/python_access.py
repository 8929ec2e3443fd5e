"""How well a GPU-shaped kernel uses memory, measured by the python device's grid emulator (`ACCESSSTATS=1`).

With the knob on, every run of a kernel counts, per warp request, the shared-memory wavefronts and the global
32-byte sectors the hardware would need, and keeps one `KernelAccess` per run (`access_stats()`). The emulator
runs a block's threads one after another up to each meeting point (a BARRIER, a WMMA, a SHUFFLE, an ldmatrix),
not in lockstep, so a warp request is matched as the k-th execution, within one such segment, of one LINEAR
instruction by each of a warp's 32 lanes (warp w = threads 32 w .. 32 w + 31 of the block, lidx0 fastest). A lane
that executes the instruction with its gate off takes part in no access (it still counts as an execution, as a
predicated-off lane on the GPU); a lane that never reaches it (another branch) is simply absent. A kernel without
lidx is blocks of one thread: each access is a request of one lane.

What one thread moves per request is what devices.cuda_render emits: a scalar LOAD or STORE is one element; a
vector one that the renderer moves 16 bytes at a time (devices.cuda_memory.wide_run: consecutive, 16-byte
aligned elements, an ungated or scalar-gated load, a scalar-gated store of such a load or, into elements that are
not bfloat16, of any lanes) is one request per 16 bytes, a store of 2 lanes to 2 aligned float32 or 16-bit GLOBAL
elements (devices.cuda_memory.packed_store) one request of 8 or 4 bytes, any other vector access one request per
lane. A cp.async copy is 16-byte requests on both sides: the global read (its LOAD) and the shared write (its
STORE, counted at issue). Element sizes are the CUDA code's (bfloat16: 2 bytes in global memory, 4 in shared memory
unless only cp.async, ldmatrix and wgmma touch it). nvcc may merge neighbouring scalar accesses of one thread into a
wider one; the counts are of the rendered instructions.

Shared memory (LOCAL buffers), the rule implemented: 32 banks of 4 bytes, byte address a in bank (a // 4) % 32;
each buffer is taken to start at address 0 (a real base aligned to the access size permutes the banks and keeps
every count). The shared memory returns 128 bytes a cycle, so a warp request of w bytes per thread is served in
phases of 128 / w threads where w > 4 (8 bytes: two half-warps of 16 lanes; 16 bytes: four quarter-warps of 8
lanes) and in one phase of 32 lanes where w <= 4 (CUDA C Programming Guide, "Shared Memory" of compute capability
5.x and later; NVIDIA's developer forum on LDS.64 / LDS.128: a 128-bit load needs at least 4 wavefronts). Within
a phase, lanes that touch one same 4-byte word share it (a broadcast, or for a store one write that wins), and
distinct words of one bank are served one per wavefront: the phase costs max over banks of the distinct words
it touches there. A request's `wavefronts` is the sum over its phases that have an active lane, its `ideal` the
number of such phases (each phase moves at most 128 bytes: one wavefront when conflict-free). Left out: the
pairing of uniform addresses sm_70-sm_75 use to halve some 128-bit requests.

ldmatrix.x{n} is n phases, one per 8x8 matrix (lanes 8 j .. 8 j + 7 give its 8 row addresses of 16 bytes): a
request of 16 bytes by lanes 0 .. 8 n - 1. A wgmma reads each operand from its descriptors; how the hardware
schedules those reads is not documented, so each core matrix (the ISA's unit: 8 lines of 16 contiguous bytes)
is counted as one phase, and one request per operand per warpgroup. The TMA's copies and ATOMICADD are not
counted.

Global memory, the rule implemented: each GLOBAL buffer starts 256-byte aligned (cudaMalloc); a request touches
the 32-byte sectors (byte address // 32) that its active lanes' bytes fall in (`sectors`), against the fewest
that could hold the distinct bytes they move, ceil(bytes / 32) (`ideal`): a broadcast costs one sector, a
strided or misaligned access more than its ideal.

Off (the default) the emulator's steps are the plain ones: devices.python asks `recorder` once per kernel run.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from devices.cuda_memory import element_bytes, is_async_copy, is_ldmatrix, packed_store, raw_locals, wide_run
from devices.linear import base_of, buffer_arg, const_value, is_global
from devices.python_gpu import wgmma_descriptor, wgmma_element
from devices.python_wgmma import is_wgmma, swizzle_of
from rewrite.dtype import AddrSpace, dtypes
from rewrite.env import knob_bool
from rewrite.ops import Ops
from rewrite.uop import UOp

if TYPE_CHECKING:
    from devices.linear import Program

WARP, BANKS, WORD, SECTOR, PHASE_BYTES = 32, 32, 4, 32, 128

Access = tuple[int, int, int]  # (lane, byte address, bytes) of one lane in one warp request


# --------------------------------------------------------------------------------------- the hardware rules

def phase_wavefronts(phase: list[tuple[int, int]]) -> int:
    """Wavefronts of one phase of (byte address, bytes) accesses: max over banks of the distinct words there."""
    banks: dict[int, set[int]] = defaultdict(set)
    for a, w in phase:
        for word in range(a // WORD, (a + w - 1) // WORD + 1):
            banks[word % BANKS].add(word)
    return max((len(s) for s in banks.values()), default=0)


def bank_wavefronts(accesses: list[Access]) -> tuple[int, int]:
    """(wavefronts, ideal) of one warp request to shared memory (module docstring): phases of 128 / w lanes for
    w > 4 bytes a lane, else one of 32."""
    if not accesses:
        return 0, 0
    per = WARP if max(w for _, _, w in accesses) <= WORD else max(PHASE_BYTES // max(w for _, _, w in accesses), 1)
    phases: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for lane, a, w in accesses:
        phases[lane // per].append((a, w))
    return sum(phase_wavefronts(p) for p in phases.values()), len(phases)


def sector_count(accesses: list[Access]) -> tuple[int, int]:
    """(sectors, ideal) of one warp request to global memory (module docstring)."""
    if not accesses:
        return 0, 0
    spans = sorted((a, a + w) for _, a, w in accesses)
    sectors: set[int] = set()
    moved, end = 0, spans[0][0]
    for lo, hi in spans:
        sectors.update(range(lo // SECTOR, (hi - 1) // SECTOR + 1))
        if hi > end:
            moved += hi - max(lo, end)
            end = hi
    return len(sectors), -(-moved // SECTOR)


# --------------------------------------------------------------------------------------- the counts

@dataclass(frozen=True)
class InstrAccess:
    """One instruction's requests over a run: `kind` "load", "store", "ldmatrix" or "wgmma", `space` "shared" or
    "global", `cost` its wavefronts or sectors, `ideal` the fewest for what it moved."""

    where: str
    kind: str
    space: str
    requests: int
    cost: int
    ideal: int

    @property
    def excess(self) -> int:
        return self.cost - self.ideal


@dataclass(frozen=True)
class KernelAccess:
    """One kernel run's memory requests: shared wavefronts against their ideal, global sectors against theirs,
    and each instruction's counts (`instrs`)."""

    name: str
    shared_requests: int
    wavefronts: int
    ideal_wavefronts: int
    global_requests: int
    sectors: int
    ideal_sectors: int
    instrs: tuple[InstrAccess, ...]

    def worst(self, space: str) -> InstrAccess | None:
        """The instruction of `space` with the most wavefronts (sectors) over its ideal, None where none has any."""
        bad = [i for i in self.instrs if i.space == space and i.excess > 0]
        return max(bad, key=lambda i: i.excess) if bad else None

    @property
    def sector_efficiency(self) -> float:
        return self.ideal_sectors / self.sectors if self.sectors else 1.0

    @property
    def bank_efficiency(self) -> float:
        return self.ideal_wavefronts / self.wavefronts if self.wavefronts else 1.0


_RUNS: list[KernelAccess] = []


def access_stats() -> list[KernelAccess]:
    """The counts of every kernel run with ACCESSSTATS on since the last `reset_access_stats`, in run order."""
    return list(_RUNS)


def reset_access_stats() -> None:
    _RUNS.clear()


@contextlib.contextmanager
def counting() -> Iterator[list[KernelAccess]]:
    """Within the block, kernel runs are counted (ACCESSSTATS on) and their counts land in the list it gives."""
    from rewrite.env import Context

    reset_access_stats()
    got: list[KernelAccess] = []
    try:
        with Context(ACCESSSTATS=1):
            yield got
    finally:
        got.extend(_RUNS)
        reset_access_stats()


# --------------------------------------------------------------------------------------- what each instruction moves

@dataclass(frozen=True)
class Plan:
    """How a LOAD or STORE moves memory: `shared` or not, element bytes, the lanes of each request (consecutive
    elements moved together; one tuple of lane 0 for a scalar access), the value slots of its INDEX and gate."""

    shared: bool
    size: int
    chunks: tuple[tuple[int, ...], ...]
    vector: bool
    idx: int
    gate: int | None


def _wide(u: UOp, prog: Program) -> bool:
    """Does devices.cuda_memory render this vector access 16 bytes at a time (its docstring's conditions)?"""
    if u.op is Ops.LOAD:
        if any(is_async_copy(y) for y in prog.users.get(u, [])):
            return True
        return len(u.src) == 1 or (u.src[2].shape == () and u.src[1].op is Ops.CONST and const_value(u.src[1]) == 0)
    if is_async_copy(u):
        return True
    val = u.src[1]  # a store is wide where it stores a wide load's lanes into elements held as the same C type,
    if len(u.src) == 3 and u.src[2].shape != ():  # or other lanes into elements that are not bfloat16
        return False
    if val.op is Ops.LOAD and not is_ldmatrix(val) and val.shape != () and _wide(val, prog) and \
            wide_run(base_of(val.src[0]), element_bytes(_buffer(val.src[0]), set())) is not None:
        return _held(val.src[0]) == _held(u.src[0])
    return _buffer(u.src[0]).dtype.scalar is not dtypes.bfloat16


def _buffer(idx: UOp) -> UOp:
    return base_of(base_of(idx).src[0])


def _held(idx: UOp) -> str:
    """How the elements of the buffer an INDEX names are held (devices.cuda_memory._wide_access's C types)."""
    buf = _buffer(idx)
    return "uint16" if buf.dtype.scalar is dtypes.bfloat16 and is_global(buf) else buf.dtype.scalar.name


def plan_of(u: UOp, prog: Program, raw: set[UOp]) -> Plan | None:
    """The Plan of a LOAD or STORE of a GLOBAL or LOCAL buffer (None for anything else: REG buffers, ldmatrix)."""
    if u.op not in (Ops.LOAD, Ops.STORE) or is_ldmatrix(u):
        return None
    index = base_of(u.src[0])
    if index.op is not Ops.INDEX:
        return None
    buf = base_of(index.src[0])
    if buf.op is not Ops.BUFFER or buffer_arg(buf).addrspace not in (AddrSpace.GLOBAL, AddrSpace.LOCAL):
        return None
    size = element_bytes(buf, raw)
    pos = prog.pos
    gate = pos[u.src[2]] if len(u.src) == 3 else None
    n = int(index.src[1].shape[0]) if index.src[1].shape else 1
    if n == 1:
        chunks: tuple[tuple[int, ...], ...] = ((0,),)
    elif _wide(u, prog) and wide_run(index, size) is not None:
        per = 16 // size
        chunks = tuple(tuple(range(j, j + per)) for j in range(0, n, per))
    elif packed_store(u) is not None and not (u.src[1].op is Ops.LOAD and _wide(u.src[1], prog) and
                                              wide_run(base_of(u.src[1].src[0]), size) is not None):
        chunks = ((0, 1),)
    else:
        chunks = tuple((j,) for j in range(n))
    return Plan(not is_global(buf), size, chunks, n > 1, pos[u.src[0]], gate)


# --------------------------------------------------------------------------------------- the recorder

class Recorder:
    """Counts one kernel run of blocks of `block` threads: `run` is the kernel's steps with its memory steps
    recording, `thread` the kernel-wide id of the thread running (block number * block + its number), and at each
    meeting of a block (`meet`) the segment's requests are closed and the warp instruction met there counted."""

    def __init__(self, prog: Program, name: str, block: int, steps: list[Callable], step_pos: list[int]) -> None:
        self.prog, self.name, self.block = prog, name, max(block, 1)
        self.raw = raw_locals(prog)
        self.thread = 0
        self._counts: dict[tuple[int, int], int] = defaultdict(int)  # (thread, position) -> executions this segment
        # (position, chunk, k-th execution, warp) -> the lanes' accesses
        self._open: dict[tuple[int, int, int, int], list[Access]] = defaultdict(list)
        self._shared: dict[int, bool] = {}
        self._totals: dict[int, list[int]] = {}  # position -> [requests, cost, ideal]
        self.run: list[Callable] = []  # the steps, each GLOBAL or LOCAL LOAD and STORE recording its accesses first
        for step, p in zip(steps, step_pos, strict=True):
            plan = plan_of(self.prog.instrs[p], self.prog, self.raw)
            if plan is not None:
                self._shared[p] = plan.shared
                step = self._recording(step, p, plan)
            self.run.append(step)

    def _recording(self, step: Callable, p: int, plan: Plan) -> Callable:
        counts, opened, chunks, size, idx, gate, vector = self._counts, self._open, plan.chunks, plan.size, \
            plan.idx, plan.gate, plan.vector

        def recorded(v: list) -> object:
            t = self.thread
            k = counts[(t, p)]
            counts[(t, p)] = k + 1
            g = True if gate is None else v[gate]
            if not isinstance(g, tuple) and not g:
                return step(v)
            _, ii = v[idx]
            lane, warp = t % WARP, t % self.block // WARP
            for c, lanes in enumerate(chunks):
                if isinstance(g, tuple) and not g[lanes[0]]:
                    continue
                at = (ii[lanes[0]] if vector else ii) * size
                opened[(p, c, k, warp)].append((lane, at, size * len(lanes)))
            return step(v)
        return recorded

    def _add(self, p: int, shared: bool, accesses: list[Access]) -> None:
        cost, ideal = bank_wavefronts(accesses) if shared else sector_count(accesses)
        tot = self._totals.setdefault(p, [0, 0, 0])
        tot[0] += 1
        tot[1] += cost
        tot[2] += ideal
        self._shared.setdefault(p, shared)

    def flush(self) -> None:
        """Count the requests of the segment that just ended."""
        for (p, _, _, _), accesses in self._open.items():
            self._add(p, self._shared[p], accesses)
        self._open.clear()
        self._counts.clear()

    def meet(self, u: UOp, threads: list[list]) -> None:
        """The block met at `u`: count the segment's requests, then an ldmatrix's or wgmma's shared reads."""
        self.flush()
        p = self.prog.pos[u]
        if is_ldmatrix(u):
            n = int(cast(tuple, u.arg)[1])
            size = element_bytes(base_of(base_of(u.src[0]).src[0]), self.raw)
            for w in range(0, len(threads), WARP):
                warp = threads[w:w + WARP]
                self._add(p, True, [(ln, warp[ln][p][1][0] * size, 16) for ln in range(min(8 * n, len(warp)))])
        elif u.op is Ops.WMMA and is_wgmma(u):
            _, n, dt, lay_a, lay_b = cast(tuple, u.arg)
            for w in range(0, len(threads), 128):
                first = threads[w][p]
                for (_, i), lay, rows in ((first[0], lay_a, 64), (first[1], lay_b, int(n))):
                    self._wgmma_operand(p, i * dt.itemsize, lay, rows, dt.itemsize)

    def _wgmma_operand(self, p: int, byte_addr: int, lay: tuple, rows: int, size: int) -> None:
        """One wgmma operand of `rows` M (or N) rows by 16 k: each core matrix (8 lines of 16 bytes) a phase."""
        desc, mn, t = wgmma_descriptor(byte_addr, lay[0], lay[1], swizzle_of(lay)), bool(lay[2]), 16 // size
        phases = []
        for g in range(rows // 8 if not mn else rows // t):
            for kg in range(16 // t if not mn else 2):
                if mn:  # a line: t consecutive M/N elements at one k; a core matrix: 8 consecutive k
                    lines = [wgmma_element(desc, g * t, 8 * kg + r, True, size) for r in range(8)]
                else:  # a line: t consecutive k of one row; a core matrix: 8 consecutive rows
                    lines = [wgmma_element(desc, 8 * g + r, kg * t, False, size) for r in range(8)]
                phases.append([(a, 16) for a in lines])
        tot = self._totals.setdefault(p, [0, 0, 0])
        tot[0] += 1
        tot[1] += sum(phase_wavefronts(ph) for ph in phases)
        tot[2] += len(phases)
        self._shared[p] = True

    def finish(self) -> KernelAccess:
        """The run's counts, kept for `access_stats`."""
        self.flush()
        instrs = tuple(InstrAccess(self.prog.where(u := self.prog.instrs[p]), _kind(u),
                                   "shared" if self._shared[p] else "global", *tot)
                       for p, tot in sorted(self._totals.items()))

        def total(space: str, field: str) -> int:
            return sum(getattr(i, field) for i in instrs if i.space == space)

        run = KernelAccess(self.name, total("shared", "requests"), total("shared", "cost"), total("shared", "ideal"),
                           total("global", "requests"), total("global", "cost"), total("global", "ideal"), instrs)
        _RUNS.append(run)
        return run


def _kind(u: UOp) -> str:
    return "ldmatrix" if is_ldmatrix(u) else "wgmma" if u.op is Ops.WMMA else u.op.name.lower()


def recorder(prog: Program, name: str, block: int, steps: list[Callable], step_pos: list[int]) -> Recorder | None:
    """A Recorder for one run of `prog` (blocks of `block` threads; its steps and their instruction positions)
    where ACCESSSTATS is on, else None: with it off the kernel runs its plain steps."""
    return Recorder(prog, name, block, steps, step_pos) if knob_bool("ACCESSSTATS") else None


__all__ = ["InstrAccess", "KernelAccess", "Plan", "Recorder", "access_stats", "bank_wavefronts", "counting",
           "phase_wavefronts", "plan_of", "recorder", "reset_access_stats", "sector_count"]
