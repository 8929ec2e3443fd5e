"""The reference device: an interpreter of LINEAR programs built on rewrite.semantics. Slow and exact.

`compile` checks the program (devices.linear) and turns each instruction into a small step closure; RANGE
and IF get their jump targets then, so running is one dispatch loop over the steps with no recursion. Every
value goes through exec_alu / exec_cast / exec_bitcast, so results are exactly the op-semantics table:
wrap-around ints, floats rounded to their dtype, floor IDIV/MOD, truncating CDIV/CMOD.

Memory: GLOBAL buffers are the caller's 1-D numpy arrays (read and written in place); a REG buffer is a
Python list made fresh where its BUFFER instruction runs, and reading an element no STORE has written is an
error (in C it would be garbage). An access outside a buffer raises DeviceError naming the slot, the index
and the size; a gated access whose gate is false touches nothing, so padding may index out of bounds.
A kernel with SPECIALs runs its whole body once per combination of their values, one after another.

The GPU grid (devices/__init__.py): the "lidx*" SPECIALs are the threads of a block, the others the blocks. A
kernel with lidx SPECIALs, LOCAL buffers or BARRIERs runs block by block; within a block every thread has its
own values and REG buffers and they share the block's LOCAL buffers (fresh per block, unwritten: reading an
element no thread has stored is an error). The threads run in lockstep from BARRIER to BARRIER: each runs to
the next BARRIER in turn, and all must stop at the same one (else DeviceError), which is exactly what
`__syncthreads()` guarantees and no more. ATOMICADD reads, adds and writes in one step. A WMMA is a meeting
point like a BARRIER: when every thread has its fragments, each warp's mma runs (`wmma_m16n8k16`, or
`wmma_m16n8k8_tf32` for float32 inputs rounded to tf32; the PTX lane layouts) and each lane gets its four results.
A SHUFFLE is one too: each lane of a warp brings its value and gets that of lane (its index XOR arg). An ldmatrix
(LOAD arg ("ldmatrix", n, trans)) is one as well: each lane gives a row's element index and gets its elements of
the warp's n 8x8 matrices (devices.python_gpu.ldmatrix). A cp.async copy (STORE arg "cp.async")
reads its source when it runs but writes LOCAL memory only when a wait retires it: BARRIER "cp.async.commit"
closes the thread's group of copies, BARRIER ("cp.async.wait", n) lands every group of the thread but the
newest n (oldest first) and is then a BARRIER; so a read that runs ahead of its wait sees the old contents
(devices.python_async).
A WMMA with arg ("wgmma", ...) is a warpgroup's asynchronous wgmma from shared memory (devices.python_wgmma).
The INS of devices.tma (TMA copies, mbarriers) are emulated by devices.python_tma (a wait meets the block).
Where more than one thread runs, every element access is checked for data races (devices.python_mem,
RACECHECK): two threads touching one element, one writing, with no BARRIER between them, is a DeviceError.
With ACCESSSTATS on, each run also counts its warp requests' shared-memory wavefronts and global sectors
(devices.python_access); off, the kernel runs its plain steps. `check_index_bounds` wraps a kernel so that every
index value is checked against its interval bounds.

Vectors (shape (n,)) are tuples of n lane values, and every lane goes through the same semantics table as a
scalar would; a scalar operand of a vector op is used for every lane. A vector INDEX of a buffer holds n
positions: LOAD reads each lane's element (a gate, scalar or per lane, skips the lanes it turns off, which
take the alt value), STORE writes lanes 0..n-1 in order, so where two lanes share an address the later lane's
value stays. INDEX(vector, CONST k) is lane k; STACK makes a tuple of scalars; VCONST is its rounded values.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from math import prod

import numpy as np

from devices.base import Target, gpu_target, python_target
from devices.linear import Program, analyze, base_of, buffer_arg, const_value, is_global, lanes, special_bound
from devices.memory import Allocator, check_buffers, check_vars, np_dtype, size_of
from devices.python_access import Recorder, recorder
from devices.python_async import async_barrier, async_store
from devices.python_gpu import tf32_round, warp_ldmatrix, warp_mma, warp_shuffle, wmma_m16n8k8_tf32, wmma_m16n8k16
from devices.python_mem import (
    UNIT,
    Clock,
    Mem,
    address,
    atomic,
    bf16_read,
    bf16_write,
    np_read,
    np_write,
    raw,
    read_element,
    reg_read,
    reg_write,
    tracked,
)
from devices.python_tma import ins_step, wait_met
from devices.python_wgmma import is_wgmma, is_wgmma_barrier
from devices.python_wgmma import issue as wgmma_issue
from devices.python_wgmma import retire as wgmma_retire
from devices.tma import INIT_FENCE
from rewrite.dtype import AddrSpace, DType, dtypes
from rewrite.env import getenv, knob_bool
from rewrite.errors import CompileError, DeviceError, EvalError
from rewrite.ops import GroupOp, Ops
from rewrite.semantics import exec_alu, exec_bitcast, exec_cast, round_to
from rewrite.uop import UOp

Step = Callable[[list], "int | None"]


class PythonKernel:
    """A compiled (checked and step-translated) LINEAR program; call it with {slot: array} and variables."""

    def __init__(self, prog: Program) -> None:
        self.prog, self.name = prog, prog.name
        self.instrs = prog.instrs
        self.init: list[object] = [None] * (len(prog.instrs) + 2)  # the last two: its wgmma and cp.async state
        self.steps: list[Step] = []
        self.step_pos: list[int] = []  # instruction position of each step, for error messages
        # (opener position, "skip" | "body") -> step index; the closures read it, _build fills it at the end
        self._targets: dict[tuple[int, str], int] = {}
        self._build()

    # ------------------------------------------------------------------ translation

    def _build(self) -> None:
        prog, init = self.prog, self.init
        pos = prog.pos
        after: dict[int, int] = {}  # instruction position -> index of the first step after it
        end_step: dict[int, int] = {}  # RANGE position -> index of its END step
        patches: list[tuple[int, str]] = []  # (opener position, which target)
        for p, u in enumerate(prog.instrs):
            op = u.op
            if op is Ops.CONST:
                init[p] = round_to(u.dtype, const_value(u))
            elif op is Ops.VCONST:
                init[p] = tuple(round_to(u.dtype, x) for x in u.arg[0])  # type: ignore[index]
            elif op in (Ops.PARAM, Ops.SPECIAL, Ops.ENDIF, Ops.GROUP) or \
                    (op is Ops.BUFFER and (is_global(u) or buffer_arg(u).addrspace is AddrSpace.LOCAL)):
                pass  # set per call (buffers, variables, SPECIAL values, a block's LOCAL memory) or no work at all
            elif op is Ops.BARRIER:
                self._emit(p, _barrier if u.arg is None or u.arg == INIT_FENCE else async_barrier(u, _AT_BARRIER))
            elif op is Ops.INS:
                self._emit(p, ins_step(u, pos, prog.where(u), _AT_BARRIER))
            elif op is Ops.SHUFFLE:
                self._emit(p, _shuffle_step(p, pos[u.src[0]]))
            elif op is Ops.END:
                for r in prog.opened[p]:  # innermost first
                    end_step[r] = len(self.steps)
                    self._emit(p, self._end(r, pos[prog.instrs[r].src[0]]))
                    patches.append((r, "body"))
            elif op is Ops.RANGE or op is Ops.IF:
                self._emit(p, self._opener(p, pos[u.src[0]], op is Ops.RANGE))
                patches.append((p, "skip"))
            else:
                self._emit(p, self._value_step(p, u))
            after[p] = len(self.steps)
        targets = self._targets
        for opener, kind in patches:
            if kind == "body":
                targets[(opener, kind)] = after[opener]
            elif prog.instrs[opener].op is Ops.RANGE:
                targets[(opener, kind)] = end_step[opener] + 1
            else:
                targets[(opener, kind)] = after[prog.closer[opener]]

    def _emit(self, p: int, step: Step) -> None:
        self.steps.append(step)
        self.step_pos.append(p)

    def _opener(self, p: int, src: int, is_range: bool) -> Step:
        targets = self._targets
        if is_range:
            def step(v: list) -> int | None:
                if v[src] <= 0:
                    return targets[(p, "skip")]
                v[p] = 0
                return None
        else:
            def step(v: list) -> int | None:
                return None if v[src] else targets[(p, "skip")]
        return step

    def _end(self, r: int, bound: int) -> Step:
        targets = self._targets

        def step(v: list) -> int | None:
            i = v[r] + 1
            if i < v[bound]:
                v[r] = i
                return targets[(r, "body")]
            return None
        return step

    def _value_step(self, p: int, u: UOp) -> Step:
        pos, op = self.prog.pos, u.op
        s = [pos[x] for x in u.src] if op is not Ops.BUFFER else []
        if op is Ops.BUFFER:  # a REG buffer: fresh (unwritten) storage each time its declaration runs
            n, label = u.shape[0], f"REG buffer (slot {buffer_arg(u).slot})"

            def step(v: list) -> None:
                v[p] = Mem([None] * n, n, label, reg_read, reg_write)
            return step
        if op is Ops.ATOMICADD:
            return _atomic_add(p, u.src[1].dtype, s)
        if op is Ops.WMMA:
            a, b, c = s

            def wmma(v: list) -> int:
                v[p] = (v[a], v[b], v[c])  # this lane's fragments; the block runner does the warp's mma
                return _AT_BARRIER
            return wmma
        if op is Ops.AFTER:
            x = s[0]

            def step(v: list) -> None:
                v[p] = v[x]
            return step
        if op is Ops.INDEX and base_of(u.src[0]).op is not Ops.BUFFER:  # lane k of a vector value
            x, k = s[0], const_value(u.src[1])

            def step(v: list) -> None:
                v[p] = v[x][k]
            return step
        if op is Ops.INDEX:
            b, i = s

            def step(v: list) -> None:
                v[p] = (v[b], v[i])
            return step
        if op is Ops.STACK:
            def step(v: list) -> None:
                v[p] = tuple(v[j] for j in s)
            return step
        if op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg[0] == "ldmatrix":
            idx = s[0]

            def ldm(v: list) -> int:
                v[p] = v[idx]  # this lane's row address; the block runner does the warp's ldmatrix
                return _AT_BARRIER
            return ldm
        if op is Ops.LOAD:
            return self._load(p, s) if u.shape == () else _vector_load(p, u, s)
        if op is Ops.STORE:
            store = self._store(p, s) if base_of(u.src[0]).shape == () else _vector_store(p, u, s)
            return async_store(store, s[0]) if u.arg == "cp.async" else store  # "stream": a plain store here
        if op is Ops.CAST or op is Ops.BITCAST:
            fn, src_dt, dst_dt, x = exec_cast if op is Ops.CAST else exec_bitcast, u.src[0].dtype, u.dtype, s[0]
            if u.shape != ():
                def step(v: list) -> None:
                    v[p] = tuple(fn(a, src_dt, dst_dt) for a in v[x])
                return step

            def step(v: list) -> None:
                v[p] = fn(v[x], src_dt, dst_dt)
            return step
        if op in GroupOp.ALU:
            dt = u.src[1].dtype if op is Ops.WHERE else u.src[0].dtype
            return _alu_step(p, op, dt, s) if u.shape == () else _vector_alu_step(p, u, dt, s)
        raise CompileError(f"{self.prog.where(u)}: the python device cannot run {op.name}")

    def _load(self, p: int, s: list[int]) -> Step:
        idx = s[0]
        if len(s) == 3:
            alt, gate = s[1], s[2]

            def gated_load(v: list) -> None:
                if v[gate]:
                    mem, i = v[idx]
                    v[p] = mem.read(mem, address(mem, i))
                else:
                    v[p] = v[alt]
            return gated_load

        def load(v: list) -> None:
            mem, i = v[idx]
            v[p] = mem.read(mem, address(mem, i))
        return load

    def _store(self, p: int, s: list[int]) -> Step:
        idx, val = s[0], s[1]
        gate = s[2] if len(s) == 3 else None

        def step(v: list) -> None:
            if gate is None or v[gate]:
                mem, i = v[idx]
                mem.write(mem, address(mem, i), v[val])
        return step

    # ------------------------------------------------------------------ running

    def __call__(self, buffers: dict[int, np.ndarray], var_vals: dict[str, int] | None = None) -> None:
        prog = self.prog
        vv = dict(var_vals or {})
        vals = check_vars(prog.variables, vv, self.name)
        arrays = check_buffers(prog.buffers, buffers, vv, prog.stored, self.name)[0]
        v = list(self.init)
        for (name, param), val in zip(prog.variables.items(), vals, strict=True):
            v[prog.pos[param]] = round_to(param.dtype, val)
            vv[name] = val
        specials = list(prog.specials.values())
        bounds = [special_bound(sp, vv, self.name) for sp in specials]
        threads = [i for i, sp in enumerate(specials) if str(sp.arg).startswith("lidx")]
        blocks = [i for i in range(len(specials)) if i not in threads]
        block_threads = prod(bounds[i] for i in threads)
        # the race check (devices.python_mem) where more than one thread runs
        clock = Clock(block_threads) if knob_bool("RACECHECK") and prod(bounds) > 1 else None
        rec = recorder(prog, self.name, block_threads, self.steps, self.step_pos)  # ACCESSSTATS (python_access)
        for (slot, buf), arr in zip(prog.buffers.items(), arrays, strict=True):
            bf16 = buf.dtype is dtypes.bfloat16
            v[prog.pos[buf]] = tracked(Mem(arr, size_of(buf, vv), f"buffer slot {slot}", bf16_read if bf16 else
                                           np_read, bf16_write if bf16 else np_write), clock, self.name)
        if not threads and not prog.locals and \
                not any(u.op in (Ops.BARRIER, Ops.WMMA, Ops.SHUFFLE) for u in prog.instrs):
            for n, combo in enumerate(itertools.product(*(range(b) for b in bounds))):
                for sp, val in zip(specials, combo, strict=True):
                    v[prog.pos[sp]] = val
                if clock is not None:
                    clock.new_block()
                    clock.thread = n
                self._run_thread(v, 0, clock, n, rec)
                if rec is not None:
                    rec.flush()
            if rec is not None:
                rec.finish()
            return
        for n, combo in enumerate(itertools.product(*(range(bounds[i]) for i in blocks))):
            for i, val in zip(blocks, combo, strict=True):
                v[prog.pos[specials[i]]] = val
            for buf in prog.locals:  # the block's shared memory: fresh, unwritten
                size = buf.shape[0]
                v[prog.pos[buf]] = tracked(Mem([None] * size, size, f"LOCAL buffer (slot {buffer_arg(buf).slot})",
                                               reg_read, reg_write), clock, self.name)
            if clock is not None:
                clock.new_block()
            self._run_block(v, [specials[i] for i in threads], [bounds[i] for i in threads], clock,
                            n * block_threads, rec)
            if rec is not None:
                rec.flush()
        if rec is not None:
            rec.finish()

    def _run_block(self, v: list, lids: list[UOp], bounds: list[int], clock: Clock | None, first: int,
                   rec: Recorder | None = None) -> None:
        """Every thread of one block, in lockstep from BARRIER to BARRIER: each thread runs until it reaches a
        BARRIER (or the end), and the block goes on only when all threads wait at the same one. With the race
        check on, `clock` is told which thread (kernel-wide: `first` + its number in the block) runs, and every
        __syncthreads (devices.python_mem); `rec` (ACCESSSTATS) which thread runs and each meeting."""
        states: list[tuple[list, int | None]] = [(list(v), 0) for _ in range(prod(bounds))]
        dims = {str(sp.arg): (sp, b) for sp, b in zip(lids, bounds, strict=True)}
        for t, (tv, _) in enumerate(states):  # thread t = lidx0 + b0 * (lidx1 + b1 * lidx2): lidx0 fastest
            for name in sorted(dims):
                sp, b = dims[name]
                tv[self.prog.pos[sp]], t = t % b, t // b
        while states[0][1] is not None:
            states = [(tv, None if pc is None else self._run_thread(tv, pc, clock, first + t, rec))
                      for t, (tv, pc) in enumerate(states)]
            at = {pc for _, pc in states}
            if len(at) > 1:
                where = ", ".join("the end" if pc is None else self.prog.where(self.instrs[self.step_pos[pc - 1]])
                                  for pc in sorted(at, key=lambda x: -1 if x is None else x))
                raise DeviceError(f"kernel {self.name!r}: the threads of a block stopped at different barriers "
                                  f"({where}); every thread must reach every BARRIER and WMMA")
            pc = states[0][1]
            if pc is None:
                break
            u, tvs = self.instrs[self.step_pos[pc - 1]], [tv for tv, _ in states]
            if rec is not None:
                rec.meet(u, tvs)
            if clock is not None:
                clock.thread = UNIT
            if u.op is Ops.WMMA and is_wgmma(u):
                wgmma_issue(u, self.prog.pos[u], tvs, self.prog.where(u), lambda x: round_to(dtypes.float32, x),
                            u.arg[2].itemsize)  # type: ignore[index]
            elif u.op is Ops.WMMA:
                warp_mma(u, self.prog.pos[u], tvs, self.prog.where(u))
            elif u.op is Ops.BARRIER and is_wgmma_barrier(u.arg):
                wgmma_retire(int(u.arg[1]), tvs)  # type: ignore[index]
            elif u.op is Ops.LOAD:
                warp_ldmatrix(u, self.prog.pos[u], tvs, self.prog.where(u), read_element)
            elif u.op is Ops.INS:
                wait_met(u, self.prog.pos, tvs, self.prog.where(u))
            elif u.op is Ops.SHUFFLE:
                warp_shuffle(u, self.prog.pos[u], tvs, self.prog.where(u))
            elif clock is not None and u.op is Ops.BARRIER:  # a __syncthreads: what came before is ordered
                clock.epoch += 1

    def _run_thread(self, v: list, pc: int, clock: Clock | None, thread: int, rec: Recorder | None) -> int | None:
        if clock is not None:
            clock.thread = thread
        if rec is None:
            return self._run(v, pc, self.steps)
        rec.thread = thread
        return self._run(v, pc, rec.run)

    def _run(self, v: list, pc: int, steps: list[Step]) -> int | None:
        """Run `steps` from step `pc` to the end (None) or to just after the next BARRIER (the step to resume at)."""
        n = len(steps)
        try:
            while pc < n:
                j = steps[pc](v)
                if j is not None and j < 0:  # _AT_BARRIER
                    return pc + 1
                pc = pc + 1 if j is None else j
        except (EvalError, DeviceError, TypeError, ValueError, OverflowError) as e:
            u = self.instrs[self.step_pos[pc]]
            raise DeviceError(f"{self.prog.where(u)}: {e}") from e
        return None


_AT_BARRIER = -1  # what a BARRIER step returns: the thread waits for the rest of its block


def _barrier(v: list) -> int:
    return _AT_BARRIER


def _shuffle_step(p: int, src: int) -> Step:
    """A SHUFFLE's per-thread step: the thread brings its value and waits for its warp (_warp_shuffle)."""
    def step(v: list) -> int:
        v[p] = v[src]
        return _AT_BARRIER
    return step


def _atomic_add(p: int, dt: DType, s: list[int]) -> Step:
    idx, val = s

    def step(v: list) -> None:
        mem, i = v[idx]
        at, (read, write) = address(mem, i), raw(mem)  # races only with plain accesses (devices.python_mem)
        atomic(mem, at)
        write(mem, at, exec_alu(Ops.ADD, dt, read(mem, at), v[val]))
    return step


def _alu_step(p: int, op: Ops, dt: DType, s: list[int]) -> Step:
    f = exec_alu
    if len(s) == 1:
        a = s[0]

        def step(v: list) -> None:
            v[p] = f(op, dt, v[a])
    elif len(s) == 2:
        a, b = s

        def step(v: list) -> None:
            v[p] = f(op, dt, v[a], v[b])
    else:
        a, b, c = s

        def step(v: list) -> None:
            v[p] = f(op, dt, v[a], v[b], v[c])
    return step


def _spread(u: UOp, n: int) -> Callable[[object], tuple]:
    """How to read an operand as n lanes: a vector is its tuple, a scalar repeats."""
    if u.shape != ():
        return lambda x: x  # type: ignore[return-value]
    return lambda x: (x,) * n


def _vector_alu_step(p: int, u: UOp, dt: DType, s: list[int]) -> Step:
    f, op, n = exec_alu, u.op, lanes(u)
    spread = [(j, _spread(x, n)) for j, x in zip(s, u.src, strict=True)]

    def step(v: list) -> None:
        v[p] = tuple(f(op, dt, *lane) for lane in zip(*(sp(v[j]) for j, sp in spread), strict=True))
    return step


def _vector_load(p: int, u: UOp, s: list[int]) -> Step:
    idx, n = s[0], lanes(u)
    if len(s) == 1:
        def load(v: list) -> None:
            mem, ii = v[idx]
            v[p] = tuple(mem.read(mem, address(mem, i)) for i in ii)
        return load
    alt, gate = s[1], s[2]
    alts, gates = _spread(u.src[1], n), _spread(u.src[2], n)

    def gated_load(v: list) -> None:
        mem, ii = v[idx]
        v[p] = tuple(mem.read(mem, address(mem, i)) if g else a
                     for i, g, a in zip(ii, gates(v[gate]), alts(v[alt]), strict=True))
    return gated_load


def _vector_store(p: int, u: UOp, s: list[int]) -> Step:
    idx, val, n = s[0], s[1], lanes(u.src[1])
    # without a gate, read a constant true from a slot that always exists (the value's own)
    gate, gates = (s[2], _spread(u.src[2], n)) if len(s) == 3 else (val, lambda _: (True,) * n)

    def step(v: list) -> None:
        mem, ii = v[idx]
        on = gates(v[gate])
        for i, x, g in zip(ii, v[val], on, strict=True):  # in lane order: a later lane wins a shared address
            if g:
                mem.write(mem, address(mem, i), x)
    return step


# (LINEAR, name) -> the analyzed program render made, taken by compile (bounded, oldest dropped first)
_analyzed: dict[tuple[UOp, str], Program] = {}


class PythonDevice(Allocator):
    """The `python` device: compile checks and translates a LINEAR program; kernels run in the interpreter."""

    name = "python"
    supported_ops: frozenset[Ops] = GroupOp.ALU | frozenset({Ops.CAST, Ops.BITCAST})
    decompose: frozenset[Ops] = frozenset()

    def default_target(self) -> Target:
        """The interpreter's Target, or with PYTHON_TARGET=sm_XX that GPU's (its grid, shared memory, warps and
        tensor cores), whose kernels this device runs in its grid emulator: a GPU's lowering checked without one."""
        sm = getenv("PYTHON_TARGET")
        return python_target() if not sm else gpu_target(sm).with_(device="python")

    def render(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> str:
        """The interpreter's "source": the checked instruction listing it runs."""
        prog = self._analyze(linear, name)
        if len(_analyzed) >= 1024:
            del _analyzed[next(iter(_analyzed))]
        _analyzed[(linear, name)] = prog  # the pipeline's compile row comes next: it analyzes once
        return f"python kernel {name}:\n" + "\n".join(f"  {i:4d} {u.short()}" for i, u in enumerate(prog.instrs))

    def _analyze(self, linear: UOp, name: str) -> Program:
        made = _analyzed.pop((linear, name), None)
        return made if made is not None else analyze(linear, self.name, self.supported_ops, name)

    def compile(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> PythonKernel:
        prog = self._analyze(linear, name)
        for u in prog.instrs:
            if u.op is Ops.CUSTOM:
                raise CompileError(f"{prog.where(u)}: the python device cannot run CUSTOM code {u.arg!r}")
        if int(getenv("DEBUG")) >= 4:
            print(self.render(linear, name), file=sys.stderr)
        return PythonKernel(prog)

    @staticmethod
    def np_dtype(dtype: DType) -> np.dtype:
        return np_dtype(dtype)

    def synchronize(self) -> None:
        pass


def check_index_bounds(kernel: PythonKernel) -> PythonKernel:
    """The kernel with every index value checked, as it is made, against the bounds rewrite.interval claims for
    it (DeviceError where one is out): the run-time witness for what the bounds prove, e.g. the cuda renderer's
    32-bit index arithmetic (devices.cuda_render `index`). Wraps the kernel's steps in place and returns it."""
    for j, p in enumerate(kernel.step_pos):
        u = kernel.instrs[p]
        if u.dtype.scalar is not dtypes.index or u.op in (Ops.BUFFER, Ops.END, Ops.RANGE, Ops.IF):
            continue
        lo, hi = u.min_max

        def checked(v: list, step: Step = kernel.steps[j], p: int = p, u: UOp = u, lo: object = lo,
                    hi: object = hi) -> int | None:
            r = step(v)
            for x in v[p] if isinstance(v[p], tuple) else (v[p],):
                if not lo <= x <= hi:  # type: ignore[operator]  # index bounds are ints
                    raise DeviceError(f"{u.op.name} took {x}, outside its bounds [{lo}, {hi}]")
            return r
        kernel.steps[j] = checked
    return kernel


DEVICE = PythonDevice()

# the warp instructions live in devices.python_gpu; named here too, where tests and older imports find them
__all__ = [
    "DEVICE",
    "PythonDevice",
    "PythonKernel",
    "check_index_bounds",
    "tf32_round",
    "wmma_m16n8k8_tf32",
    "wmma_m16n8k16",
]
