"""Checking a LINEAR program once, and the facts about it that every device needs.

`analyze(linear, device, supported_ops)` walks the instruction list a single time and either raises
CompileError (naming the instruction, its position and what is wrong) or returns a `Program`:

- every source of an instruction is listed before it (a BUFFER's or PARAM's shape and bound operands are
  structural and need not be listed; a VCONST in the list is such an operand and does nothing);
- a GROUP (several statements an END closes together, e.g. a register tile's stores) only orders: it does
  nothing;
- RANGE/END and IF/ENDIF nest properly and all blocks are closed; END may close several RANGEs, which must be
  the innermost open ones;
- a value made inside a block (a RANGE loop or an IF) is not used after the block is closed: in C it would be
  out of scope, and after an IF it may never have been computed. CONSTs, GLOBAL buffers, variables and
  SPECIALs are kernel-wide and exempt;
- values are scalars (shape ()) or vectors of n lanes (shape (n,), n a power of two from 2 to 64) with a scalar
  dtype; an op mixing vectors and scalars has all its vectors of one lane count (the scalars are broadcast).
  A VCONST or STACK is checked where it is read as a value: the same nodes also serve as BUFFER shapes,
  which a linearizer may list although nothing reads them;
- INDEX is (buffer, i) over a BUFFER (possibly through AFTER), i a scalar or a vector of positions, or
  (vector, CONST k) for lane k; LOAD and STORE go through a buffer INDEX and their gate is a scalar or has the
  index's lanes; a vector BITCAST keeps the itemsize; every ALU op is one the device declares in
  `supported_ops`;
- GLOBAL buffer slots, variable names and SPECIAL names are each defined once;
- a REG or LOCAL buffer has a constant size; ATOMICADD is (INDEX of a GLOBAL buffer, scalar of its dtype); a
  BARRIER is not inside an IF (every thread of a block must reach it), nor is a SHUFFLE (every lane of a warp
  takes part), which moves one scalar of SHUFFLE_DTYPES by a lane mask of SHUFFLE_MASKS; a WMMA's fragments have
  the lanes and dtypes its arg names (WMMA_FRAGMENTS).

The Program then gives positions, the matching opener/closer of each block, the innermost open block of
each instruction, use counts, and the kernel parameters (GLOBAL buffers by slot, variables by name,
SPECIALs in order of appearance).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from devices.tma import EXPECT as TMA_EXPECT
from devices.tma import INIT as TMA_INIT
from devices.tma import LOAD as TMA_LOAD
from devices.tma import WAIT as TMA_WAIT
from devices.tma import ins_kind, load_problem, value_sources
from rewrite.dtype import AddrSpace, dtypes
from rewrite.errors import CompileError, DeviceError, EvalError
from rewrite.ops import GroupOp, Ops
from rewrite.props import base_of
from rewrite.spec_args import SHUFFLE_MASKS
from rewrite.uop import BufferArg, ConstValue, ParamArg, UOp

# the ops that may appear in a LINEAR list (ALU ops, CAST and BITCAST besides)
STATEMENTS = frozenset({Ops.RANGE, Ops.END, Ops.IF, Ops.ENDIF, Ops.STORE, Ops.BARRIER, Ops.GROUP, Ops.ATOMICADD,
                        Ops.INS})
INSTRUCTIONS = STATEMENTS | frozenset(
    {Ops.BUFFER, Ops.PARAM, Ops.CONST, Ops.VCONST, Ops.STACK, Ops.SPECIAL, Ops.INDEX, Ops.LOAD, Ops.AFTER,
     Ops.CUSTOM, Ops.WMMA, Ops.SHUFFLE}
)
VALUE_OPS = GroupOp.ALU | frozenset({Ops.CAST, Ops.BITCAST})
MAX_LANES = 64
WGMMA_LANES = 128  # a wgmma m64n256k16's accumulators (its WMMA and their STACK): 128 float32 a thread
# what may be a vector (BUFFER has its own shape rule; VCONST and STACK are checked where they are read)
_MAY_BE_VECTOR = VALUE_OPS | frozenset({Ops.INDEX, Ops.LOAD, Ops.AFTER, Ops.WMMA})
# WMMA arg (M, N, K, input dtype, accumulator dtype) -> the fragment lanes of A, B and C per thread of a warp
WMMA_FRAGMENTS = {(16, 8, 16): (8, 4, 4), (16, 8, 8): (4, 2, 4)}  # m16n8k8: tf32 (float32 inputs)
_VECTOR_MAKERS = frozenset({Ops.VCONST, Ops.STACK})
# values visible everywhere in the kernel, wherever they are listed (C renders them inline or as parameters)
_KERNEL_WIDE = frozenset({Ops.CONST, Ops.VCONST, Ops.PARAM, Ops.SPECIAL})
_OPENERS = frozenset({Ops.RANGE, Ops.IF})
_LISTABLE = INSTRUCTIONS | VALUE_OPS
_STRUCTURAL = frozenset({Ops.BUFFER, Ops.PARAM, Ops.VCONST})  # listed, but their sources need not be
# sources not all read as values (an INS: its leading ones, devices.tma.value_sources)
_ORDERS_ONLY = frozenset({Ops.AFTER, Ops.END, Ops.ENDIF, Ops.BARRIER, Ops.GROUP, Ops.INS})


def _check_wgmma(prog: Program, i: int, u: UOp) -> None:
    """WMMA ("wgmma", n, input dtype, (lbo, sbo, mn_major[, swizzle]) of A, of B): (INDEX of A's first element in
    a LOCAL buffer, the same of B, the n / 2 float32 accumulators C) -> D like C (devices.python_wgmma; swizzle 0
    none, 1 the 128-byte swizzle)."""
    arg = cast(tuple, u.arg)
    ok = len(arg) == 5 and arg[1] in range(8, 257, 8) and arg[2] in (dtypes.float16, dtypes.bfloat16) and \
        all(isinstance(lay, tuple) and len(lay) in (3, 4) and lay[3:] in ((), (0,), (1,)) and
            all(isinstance(x, int) and x % 16 == 0 for x in lay[:2]) for lay in arg[3:])
    for s in u.src[:2]:
        b = base_of(s.src[0]) if s.op is Ops.INDEX else None
        ok = ok and b is not None and b.op is Ops.BUFFER and buffer_arg(b).addrspace is AddrSpace.LOCAL and \
            b.dtype is arg[2] and s.shape == ()
    if not ok or lanes(u.src[2]) != arg[1] // 2 or u.src[2].dtype is not dtypes.float32 or \
            u.dtype is not dtypes.float32:
        raise _fail(prog, i, u, "a wgmma WMMA is arg ('wgmma', n (8..256, a multiple of 8), float16 or bfloat16, "
                                "(lbo, sbo, mn_major[, swizzle 0/1]) of A, of B) with src (INDEX of A's first "
                                "element in a LOCAL buffer of that dtype, the same of B, n / 2 float32 accumulators)")


def _local_index(s: UOp, dtype: object = None) -> bool:
    """Is s a scalar INDEX of a LOCAL buffer (of `dtype` when given)?"""
    b = base_of(s.src[0]) if s.op is Ops.INDEX and s.src else None
    return b is not None and b.op is Ops.BUFFER and buffer_arg(b).addrspace is AddrSpace.LOCAL and \
        s.shape == () and (dtype is None or b.dtype is dtype)


def _check_ins(prog: Program, i: int, u: UOp) -> None:
    """INS: the TMA and mbarrier instructions of devices.tma, with the sources its docstring names."""
    kind = ins_kind(u)
    if kind is None:
        raise _fail(prog, i, u, f"INS {u.arg!r}: the known instructions are devices.tma's ({TMA_INIT!r}, "
                                f"{TMA_EXPECT!r}, {TMA_LOAD!r}, {TMA_WAIT!r})")
    arg, n = cast(tuple, u.arg), value_sources(u)
    scalar_int = [s.shape == () and s.dtype.is_int for s in u.src[:n]]
    problem = None
    if len(u.src) < n:
        problem = f"needs {n} value sources, got {len(u.src)}"
    elif kind in (TMA_INIT, TMA_EXPECT, TMA_WAIT):
        bar, second = u.src[:2]
        if not _local_index(bar, dtypes.uint64):
            problem = "source 0 is the INDEX of an mbarrier: an element of a LOCAL uint64 buffer"
        elif kind != TMA_WAIT and (second.dtype is not dtypes.bool or second.shape != ()):
            problem = "source 1 is the scalar bool 'leader' (the thread that does it)"
        elif kind == TMA_WAIT and not scalar_int[1]:
            problem = "source 1 is the scalar int parity of the phase waited for"
        elif kind != TMA_WAIT and not (len(arg) == 2 and isinstance(arg[1], int) and arg[1] > 0):
            problem = f"arg is ({kind!r}, a positive int)"
    else:
        dst, src, bar, leader = u.src[:4]
        g = base_of(src.src[0]) if src.op is Ops.INDEX and src.src else None
        if not _local_index(dst) or not _local_index(bar, dtypes.uint64):
            problem = "sources 0 and 2 are INDEXes of the LOCAL destination and of a LOCAL uint64 mbarrier"
        elif g is None or not is_global(g) or src.src[1].op is not Ops.CONST:
            problem = "source 1 is the INDEX of a GLOBAL buffer at a constant element (the tensor's first)"
        elif base_of(dst.src[0]).dtype is not g.dtype:
            problem = f"copies {g.dtype.name} into a LOCAL {base_of(dst.src[0]).dtype.name} buffer"
        elif leader.dtype is not dtypes.bool or leader.shape != () or not all(scalar_int[4:]):
            problem = "source 3 is the scalar bool leader, the rest of the value sources int coordinates"
        else:
            problem = load_problem(u, g.dtype, int(cast(int, const_value(src.src[1]))))
    if problem is not None:
        raise _fail(prog, i, u, f"{kind}: {problem} (devices.tma)")


def buffer_arg(u: UOp) -> BufferArg:
    return cast(BufferArg, u.arg)


def const_value(u: UOp) -> ConstValue:
    return cast(tuple, u.arg)[0]


def is_global(buf: UOp) -> bool:
    return buf.op is Ops.BUFFER and buffer_arg(buf).addrspace is AddrSpace.GLOBAL


def special_bound(sp: UOp, var_vals: dict[str, int], kernel: str) -> int:
    """The bound of a SPECIAL at launch: its CONST, or its expression over the kernel's variables."""
    b = sp.src[0]
    try:
        env: dict[str, ConstValue] = dict(var_vals)
        return int(const_value(b) if b.op is Ops.CONST else b.evaluate(env))
    except EvalError as e:
        raise DeviceError(f"kernel {kernel!r}: cannot compute the bound of SPECIAL {sp.arg!r}: {e}") from None


@dataclass
class Program:
    """A checked LINEAR program."""

    name: str
    instrs: tuple[UOp, ...]
    pos: dict[UOp, int] = field(default_factory=dict)
    # for RANGE/IF: the position of its END/ENDIF; for END/ENDIF: the positions of what it closes
    closer: dict[int, int] = field(default_factory=dict)
    opened: dict[int, tuple[int, ...]] = field(default_factory=dict)
    block: list[int] = field(default_factory=list)  # innermost open RANGE/IF position per instruction, -1 at top
    uses: dict[UOp, int] = field(default_factory=dict)
    users: dict[UOp, list[UOp]] = field(default_factory=dict)
    buffers: dict[int, UOp] = field(default_factory=dict)  # GLOBAL slot -> BUFFER, sorted by slot
    variables: dict[str, UOp] = field(default_factory=dict)  # name -> PARAM, sorted by name
    specials: dict[str, UOp] = field(default_factory=dict)  # name -> SPECIAL, in order of appearance
    stored: set[int] = field(default_factory=set)  # GLOBAL slots written by a STORE or ATOMICADD
    locals: list[UOp] = field(default_factory=list)  # LOCAL (shared memory) BUFFERs, in order

    def where(self, u: UOp) -> str:
        return f"kernel {self.name!r}, instruction {self.pos.get(u, '?')} ({u.short()})"


def _fail(prog: Program, i: int, u: UOp, msg: str) -> CompileError:
    return CompileError(f"kernel {prog.name!r}, instruction {i} ({u.short()[:120]}): {msg}")


def _value_srcs(u: UOp) -> tuple[UOp, ...]:
    """The sources an instruction reads as values (deps of AFTER, END's body and ENDIF's IF only order)."""
    op = u.op
    if op in _STRUCTURAL:
        return ()
    if op is Ops.AFTER:
        return u.src[:1]
    if op is Ops.INS:
        return u.src[:value_sources(u)]
    if op in _ORDERS_ONLY:
        return ()
    return u.src


def analyze(linear: UOp, device: str, supported_ops: frozenset[Ops], name: str = "kernel") -> Program:
    """Check `linear` (see the module docstring) and return its Program; CompileError on the first problem."""
    if not isinstance(linear, UOp) or linear.op is not Ops.LINEAR:
        got = linear.op.name if isinstance(linear, UOp) else type(linear).__name__
        raise CompileError(f"{device}: compile takes a LINEAR UOp (the linearized kernel), got {got}")
    prog = Program(name, linear.src)
    pos, block, users = prog.pos, prog.block, prog.users
    stack: list[int] = []  # positions of the open RANGE/IF blocks
    open_set: set[int] = set()
    checked = _CHECKED
    for i, u in enumerate(prog.instrs):
        op = u.op
        if u in pos:
            raise _fail(prog, i, u, f"listed twice (first at {pos[u]}); each instruction appears once")
        if op not in _LISTABLE:
            raise _fail(prog, i, u, f"{op.name} is not a LINEAR instruction; lowering must remove it before {device}")
        value = op in VALUE_OPS
        if value and op not in supported_ops:
            raise _fail(prog, i, u, f"the {device} device does not support {op.name}; lowering must decompose it "
                                    f"(see the device's supported_ops)")
        if u.dtype.count != 1:
            raise _fail(prog, i, u, f"{u.dtype.name} is a vector dtype; a LINEAR vector has a scalar dtype and shape "
                                    f"(n,), e.g. VCONST or STACK")
        shape = u.shape
        if shape != () and op not in _VECTOR_MAKERS and base_of(u).op is not Ops.BUFFER:
            if op not in _MAY_BE_VECTOR:
                raise _fail(prog, i, u, f"{op.name} must be a scalar (shape ()), got shape {shape}")
            _check_lanes(prog, i, u, u)
        if op in _STRUCTURAL:
            deps: tuple[UOp, ...] = ()
        elif op in _ORDERS_ONLY:
            deps = u.src
            _check_listed(prog, i, u, deps)
            for s in _value_srcs(u):
                _check_source(prog, i, u, s, open_set)
        else:  # every source is read as a value: one pass (a source not listed is a KeyError of pos)
            deps = u.src
            try:
                for s in deps:
                    b = block[pos[s]]
                    if (b != -1 and b not in open_set) or s.op in _VECTOR_MAKERS:
                        _check_source(prog, i, u, s, open_set)
            except KeyError:
                _check_listed(prog, i, u, deps)
                raise
        if value:  # elementwise: the operands' shapes (a scalar op of scalars, the common case, needs no look)
            if shape != ():
                _check_operands(prog, i, u)
            else:
                for s in deps:
                    if s.shape != ():
                        _check_operands(prog, i, u)
                        break
        elif op in checked:
            _check_instruction(prog, i, u)
        if (op is Ops.BARRIER or op is Ops.SHUFFLE or (op is Ops.INS and ins_kind(u) == TMA_WAIT)) and \
                any(prog.instrs[p].op is Ops.IF for p in stack):
            what = {Ops.BARRIER: "BARRIER", Ops.SHUFFLE: "SHUFFLE"}.get(op, "mbarrier wait")
            raise _fail(prog, i, u, f"a {what} inside an IF: every thread of the block must reach it")
        pos[u] = i
        for s in deps:
            if (us := users.get(s)) is None:
                users[s] = [u]
            else:
                us.append(u)
        if op is Ops.END or op is Ops.ENDIF:
            targets = u.src[1:] if op is Ops.END else u.src[:1]
            want = Ops.RANGE if op is Ops.END else Ops.IF
            if not targets or any(t.op is not want for t in targets):
                raise _fail(prog, i, u, f"{op.name} must name the {want.name}(s) it closes")
            tpos = [pos[t] for t in targets]
            top = stack[len(stack) - len(tpos):]
            if len(set(tpos)) != len(tpos) or set(tpos) != set(top):
                inner = ", ".join(prog.instrs[p].short()[:60] for p in top) or "none"
                raise _fail(prog, i, u, f"closes a block that is not the innermost open one (innermost: {inner})")
            tpos = top
            prog.opened[i] = tuple(reversed(tpos))  # innermost first
            for p in tpos:
                prog.closer[p] = i
                stack.remove(p)
                open_set.discard(p)
        if op in _OPENERS:
            block.append(i)  # a RANGE's own value lives inside the loop it opens
            stack.append(i)
            open_set.add(i)
        else:
            block.append(stack[-1] if stack else -1)
    if stack:
        u = prog.instrs[stack[-1]]
        raise _fail(prog, stack[-1], u, f"is never closed (no {'END' if u.op is Ops.RANGE else 'ENDIF'} for it)")
    prog.uses = {s: len(us) for s, us in users.items()}
    prog.buffers = dict(sorted(prog.buffers.items()))
    prog.variables = dict(sorted(prog.variables.items()))
    return prog


def _check_listed(prog: Program, i: int, u: UOp, deps: tuple[UOp, ...]) -> None:
    """Every source of `u` is listed before it."""
    for j, s in enumerate(deps):
        if s not in prog.pos:
            raise _fail(prog, i, u, f"source {j} ({s.short()[:80]}) is not listed before it")


def _check_source(prog: Program, i: int, u: UOp, s: UOp, open_set: set[int]) -> None:
    """A source `u` reads as a value: a vector operand's lanes, and not made in a block closed since."""
    if s.op in _VECTOR_MAKERS:
        _check_lanes(prog, i, u, s)
    b = prog.block[prog.pos[s]]
    if b != -1 and b not in open_set and s.op not in _KERNEL_WIDE and not is_global(s):
        _check_listed(prog, i, u, u.src)  # that error first, as the sources are checked in that order
        raise _fail(prog, i, u, f"uses {s.short()[:80]} (instruction {prog.pos[s]}) after the block it was made in "
                                f"(instruction {b}) was closed; compute it outside the block")


def strided_start(i: UOp) -> tuple[UOp | None, int, int] | None:
    """(s, k, d) when the lanes of the index vector `i` are s + k + d * (0, 1, ..., n-1), s a scalar (None: 0) and
    d > 1: a column of a row-major array (a register tile's lanes stored across channels)."""
    def steps(v: UOp) -> tuple[int, int] | None:
        vals: tuple = cast(tuple, v.arg)[0] if v.op is Ops.VCONST else ()
        d = vals[1] - vals[0] if len(vals) > 1 and all(isinstance(x, int) for x in vals) else 0
        return (vals[0], d) if d > 1 and all(x == vals[0] + d * j for j, x in enumerate(vals)) else None

    if (kd := steps(i)) is not None:
        return None, *kd
    if i.op is Ops.ADD:
        for s, v in (i.src, i.src[::-1]):
            if s.shape == () and (kd := steps(v)) is not None:
                return s, *kd
    return None


def indexes_of(buf: UOp, prog: Program) -> list[UOp]:
    """The INDEXes of `prog` whose buffer is `buf` (directly or through AFTERs), from the users of each."""
    out: list[UOp] = []
    todo = [buf]
    while todo:
        b = todo.pop()
        for u in prog.users.get(b, ()):
            if u.src[0] is b and u.op in (Ops.INDEX, Ops.AFTER):
                (out if u.op is Ops.INDEX else todo).append(u)
    return out


def lanes(u: UOp) -> int:
    """The lane count of a checked LINEAR value: 1 for a scalar, n for shape (n,)."""
    return cast(int, u.shape[0]) if u.shape else 1


def _check_lanes(prog: Program, i: int, u: UOp, v: UOp) -> None:
    n = v.shape[0] if len(v.shape) == 1 else None
    most = WGMMA_LANES if u.op is Ops.WMMA and isinstance(u.arg, tuple) and u.arg[:1] == ("wgmma",) else MAX_LANES
    if not isinstance(n, int) or n < 2 or n > most or n & (n - 1):
        what = "its value" if v is u else f"operand {v.short()[:60]}"
        raise _fail(prog, i, u, f"{what} has shape {v.shape}; a vector has shape (n,) with n a power of two from 2 "
                                f"to {most}")


def _check_operands(prog: Program, i: int, u: UOp) -> None:
    """Operands of an elementwise op are scalars or vectors of the result's lanes (a scalar is broadcast)."""
    if u.op is Ops.BITCAST and u.shape != () and u.src[0].dtype.itemsize != u.dtype.itemsize:
        raise _fail(prog, i, u, f"a vector BITCAST must keep the element size ({u.src[0].dtype.name} to "
                                f"{u.dtype.name} does not); bitcast lane by lane")
    for s in u.src:
        if s.shape != () and s.shape != u.shape:
            raise _fail(prog, i, u, f"operand {s.short()[:60]} has shape {s.shape} but the result has {u.shape}; "
                                    f"only a scalar broadcasts to the lanes")


def _check_access(prog: Program, i: int, u: UOp) -> None:
    """LOAD and STORE: through a buffer INDEX; gate (and a LOAD's alt) a scalar or of the index's lanes."""
    op, idx = u.op, base_of(u.src[0])
    if idx.op is not Ops.INDEX or base_of(idx.src[0]).op is not Ops.BUFFER:
        raise _fail(prog, i, u, f"{op.name} must go through an INDEX of a buffer")
    gate = u.src[2] if len(u.src) == 3 else None
    if gate is not None and gate.dtype is not dtypes.bool:
        raise _fail(prog, i, u, f"the {op.name} gate must be bool")
    for what, s in (("gate", gate), ("alt value", u.src[1] if op is Ops.LOAD and gate is not None else None)):
        if s is not None and s.shape != () and s.shape != idx.shape:
            raise _fail(prog, i, u, f"the {op.name} {what} has shape {s.shape}, the index {idx.shape}; it must be "
                                    f"a scalar or have the index's lanes")
    if op is Ops.STORE and is_global(buf := base_of(idx.src[0])):
        prog.stored.add(buffer_arg(buf).slot)


# the instructions _check_instruction has more to check of (elementwise ops are checked by analyze itself)
_CHECKED = frozenset({Ops.BUFFER, Ops.PARAM, Ops.SPECIAL, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.WMMA, Ops.ATOMICADD,
                      Ops.IF, Ops.INS, Ops.SHUFFLE})
# what a SHUFFLE exchanges: the 16-, 32- and 64-bit scalars a warp shuffle moves in one instruction (CUDA's
# __shfl_xor_sync overloads; a bfloat16 value is a float register there)
SHUFFLE_DTYPES = frozenset({dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.int32,
                            dtypes.uint32, dtypes.int64, dtypes.uint64})


def _check_instruction(prog: Program, i: int, u: UOp) -> None:
    op = u.op
    if op in VALUE_OPS:
        _check_operands(prog, i, u)
        return
    if op is Ops.BUFFER:
        a = buffer_arg(u)
        if len(u.shape) != 1:
            raise _fail(prog, i, u, f"a BUFFER must be 1-D (n,), got shape {u.shape}")
        if a.dtype.kind not in "biuxf":
            raise _fail(prog, i, u, f"a BUFFER of {a.dtype.name} cannot hold values")
        if a.addrspace is AddrSpace.GLOBAL:
            if not isinstance(a.slot, int) or a.slot < 0 or a.slot in prog.buffers:
                raise _fail(prog, i, u, f"GLOBAL buffer slot {a.slot!r} must be a new int >= 0")
            prog.buffers[a.slot] = u
        elif a.addrspace in (AddrSpace.REG, AddrSpace.LOCAL):
            if not isinstance(u.shape[0], int):
                raise _fail(prog, i, u, f"a {a.addrspace.name} buffer needs a constant size")
            if a.addrspace is AddrSpace.LOCAL:
                prog.locals.append(u)
        else:
            raise _fail(prog, i, u, f"{a.addrspace.name} buffers are not supported on this device")
    elif op is Ops.PARAM:
        name = cast(ParamArg, u.arg).slot
        if not isinstance(name, str) or not u.dtype.is_int:
            raise _fail(prog, i, u, "a PARAM in a kernel must be a named int variable (UOp.variable)")
        if name in prog.variables:
            raise _fail(prog, i, u, f"variable {name!r} is defined twice")
        prog.variables[name] = u
    elif op is Ops.SPECIAL:
        if not isinstance(u.arg, str) or not u.arg or u.arg in prog.specials:
            raise _fail(prog, i, u, f"SPECIAL needs a new non-empty name, got {u.arg!r}")
        prog.specials[u.arg] = u
    elif op is Ops.INDEX:
        if len(u.src) != 2:
            raise _fail(prog, i, u, "INDEX must be (buffer, i) or (vector, CONST k)")
        if base_of(u.src[0]).op is Ops.BUFFER:
            if not u.src[1].dtype.is_int:
                raise _fail(prog, i, u, "the INDEX position must be an integer")
        elif u.src[0].shape != ():
            k = u.src[1]
            if k.op is not Ops.CONST or not 0 <= cast(int, const_value(k)) < lanes(u.src[0]):
                raise _fail(prog, i, u, f"a lane of a vector of {lanes(u.src[0])} is INDEX(vector, CONST k) with "
                                        f"0 <= k < {lanes(u.src[0])}")
        else:
            raise _fail(prog, i, u, "INDEX must be (buffer, i) over a BUFFER, or (vector, CONST k) for a lane")
    elif op is Ops.LOAD or op is Ops.STORE:
        _check_access(prog, i, u)
    elif op is Ops.WMMA and isinstance(u.arg, tuple) and u.arg[:1] == ("wgmma",):
        _check_wgmma(prog, i, u)
    elif op is Ops.WMMA:
        arg = u.arg if isinstance(u.arg, tuple) and len(u.arg) == 5 else None
        frags = WMMA_FRAGMENTS.get(cast(tuple, arg)[:3]) if arg is not None else None
        if arg is None or frags is None or tuple(lanes(x) for x in u.src) != frags or u.src[0].dtype is not arg[3] \
                or u.src[1].dtype is not arg[3] or u.src[2].dtype is not arg[4] or u.dtype is not arg[4]:
            raise _fail(prog, i, u, f"WMMA is arg (M, N, K, input dtype, accumulator dtype) with M, N, K one of "
                                    f"{sorted(WMMA_FRAGMENTS)} and src (A, B, C) fragments of the lanes it names")
    elif op is Ops.ATOMICADD:
        idx = base_of(u.src[0]) if len(u.src) == 2 else u
        if len(u.src) != 2 or idx.op is not Ops.INDEX or not is_global(base_of(idx.src[0])) or idx.shape != () \
                or u.src[1].shape != () or u.src[1].dtype is not base_of(idx.src[0]).dtype:
            raise _fail(prog, i, u, "ATOMICADD is (INDEX of a GLOBAL buffer, scalar value of its dtype)")
        prog.stored.add(buffer_arg(base_of(idx.src[0])).slot)
    elif op is Ops.INS:
        _check_ins(prog, i, u)
    elif op is Ops.SHUFFLE and (len(u.src) != 1 or u.src[0].shape != () or u.src[0].dtype is not u.dtype
                                or u.dtype not in SHUFFLE_DTYPES or type(u.arg) is not int
                                or u.arg not in SHUFFLE_MASKS):
        raise _fail(prog, i, u, f"SHUFFLE is arg k (one of {SHUFFLE_MASKS}: each lane gets the value of lane XOR k) "
                                f"with src (one scalar of its dtype, one of "
                                f"{sorted(d.name for d in SHUFFLE_DTYPES)})")
    elif op is Ops.IF and (len(u.src) != 1 or u.src[0].dtype is not dtypes.bool or u.src[0].shape != ()):
        raise _fail(prog, i, u, "IF takes one scalar bool gate")
