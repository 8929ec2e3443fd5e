"""Kernel optimization's opts: OptOps as rewrites of a kernel's RANGEs (the heuristics that choose them are
lower.optimize's, which re-exports these names).

A kernel's axes are its RANGEs in order: the output loops (in the order their END lists them), then each
reduction's ranges. An Opt is (op, axis, arg) and opts compose left to right (seed 001):

  SPLIT  (k, target, top)  axis n becomes (n/k, k), the new size-k axis of AxisType `target` inner (or outer
                           when `top`); the other part keeps the old type. Index uses of r become
                           r_outer*k + r_inner (top: r_top*(n/k) + r_rest).
  PADTO  m                 axis n becomes ceil(n/m)*m iterations; the extra ones are masked: loads and stores
                           that move with it are gated by r < n, and a reduction over it adds its identity there
  PADTO  (m, "repeat")     the same count, but the extra iterations of an output (LOOP/GLOBAL) axis repeat the
                           last one: every use of r reads min(r, n-1), so loads need no gate (an inner loop's
                           loads stay plain), and only the stores that depend on r are gated by r < n
  PARTIALS k               reduction axis n becomes n/k, and each REDUCE over it k REDUCEs, the j-th over the
                           steps j, j+k, j+2k, ... (k scalar accumulators in one loop, combined after it by a tree
                           of the reduction's op): lower.expand.replicate of an inner UNROLL split, applied now
  SWAP   j                 exchange the loop order of two output axes (both LOOP-like, same END)
  NOLOCALS                 no LOCAL axes (CPU: always)
  TC       shape           tensor cores ("16x8x16 half->float", one of Target.tensor_cores, or (shape, tm, tn):
                           tm x tn mma tiles a warp): on a GPU target the optimize stage applies it first
                           (lower.wmma.apply_tc); apply_opt alone raises

Which targets a split may produce follows the spec's AxisType table: LOCAL from GLOBAL/LOOP, THREAD from
GLOBAL/LOOP (outer), UPCAST from GLOBAL/LOCAL/LOOP (inner), GROUP_REDUCE from REDUCE, UNROLL from
REDUCE/GROUP_REDUCE (inner). An illegal opt raises KernelOptError saying why.

After the opts, `lower_threads` turns THREAD ranges into SPECIAL("core_id", n): the device runs the kernel
once per value, in parallel.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from enum import Enum

from devices.base import Target
from lower.strides import _Memo, _topo
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.errors import KernelOptError
from rewrite.ops import FastEnumType


class OptOps(Enum, metaclass=FastEnumType):
    SPLIT = "SPLIT"
    PADTO = "PADTO"
    SWAP = "SWAP"
    NOLOCALS = "NOLOCALS"
    TC = "TC"
    SIMT = "SIMT"
    PARTIALS = "PARTIALS"


class Opt:
    """One opt (op, axis, arg): immutable, equal and hashed by its fields, as a frozen dataclass would be. A plain
    class: Python compiles a dataclass's methods when its module is imported, and this module is first imported
    inside a cold process's first kernel lowering (~3 M instructions, callgrind)."""

    __slots__ = ("arg", "axis", "op")
    __match_args__ = ("op", "axis", "arg")
    op: OptOps
    axis: int | None
    arg: object

    def __init__(self, op: OptOps, axis: int | None = None, arg: object = None) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "axis", axis)
        object.__setattr__(self, "arg", arg)

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Opt) or other.__class__ is not self.__class__:
            return NotImplemented
        return (self.op, self.axis, self.arg) == (other.op, other.axis, other.arg)

    def __hash__(self) -> int:
        return hash((self.op, self.axis, self.arg))

    def __reduce__(self) -> tuple:
        return (self.__class__, (self.op, self.axis, self.arg))

    def __repr__(self) -> str:
        return f"Opt({self.op.name}, {self.axis}, {self.arg!r})"

    @property
    def split_arg(self) -> tuple[object, AxisType, bool]:
        """A SPLIT's (k, the new axis's type, top); KernelOptError when the arg is not of that form (k itself is
        checked where the axis's size is known)."""
        a = self.arg
        if self.op is not OptOps.SPLIT or not (isinstance(a, tuple) and len(a) == 3 and isinstance(a[1], AxisType)):
            raise KernelOptError(f"{self}: a SPLIT's arg is (k, AxisType, top)")
        return a[0], a[1], bool(a[2])


_SPLIT_FROM = {
    AxisType.LOCAL: {AxisType.GLOBAL, AxisType.LOOP},
    AxisType.THREAD: {AxisType.GLOBAL, AxisType.LOOP},
    AxisType.UPCAST: {AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP},
    AxisType.GROUP_REDUCE: {AxisType.REDUCE},
    AxisType.UNROLL: {AxisType.REDUCE, AxisType.GROUP_REDUCE},
    AxisType.LOOP: {AxisType.LOOP, AxisType.GLOBAL},
    AxisType.REDUCE: {AxisType.REDUCE},
}


def _axes(ast: UOp) -> tuple[UOp, ...]:
    topo = _topo(ast)
    out: dict[UOp, None] = {}
    for u in reversed(topo):
        if u.op is Ops.END:
            out.update(dict.fromkeys(r for r in u.src[1:] if r not in out))
    for u in topo:
        if u.op is Ops.REDUCE:
            out.update(dict.fromkeys(r for r in u.src[1:] if r not in out))
    return tuple(out)


_axes_memo = _Memo(_axes)


def axes(ast: UOp) -> list[UOp]:
    """The kernel's RANGEs: output loops in END order, then reduction ranges in REDUCE order."""
    return list(_axes_memo(ast))


def size(r: UOp) -> int:
    b = r.src[0]
    if b.op is not Ops.CONST:
        raise KernelOptError(f"axis {r.render()} has a symbolic size; only constant sizes can be split")
    return int(b.value)


def native_lanes(ast: UOp, target: Target) -> int:
    """Lanes of one of the target's vector registers for the kernel's widest memory element (float32: 16 with
    AVX-512, 8 with AVX2, 4 with SSE or NEON)."""
    sizes = [u.dtype.itemsize for u in _topo(ast) if u.op is Ops.BUFFER] or [4]
    return target.lanes(max(sizes))


def _next_range_id(ast: UOp) -> int:
    ids = [i for u in _topo(ast) if u.op is Ops.RANGE and isinstance(i := u.range_id, int)]
    return max(ids, default=0) + 1


_next_id = _Memo(_next_range_id)


def next_range_id(ast: UOp) -> int:
    """One more than the largest int id of the kernel's RANGEs (once per AST)."""
    return _next_id(ast)


def replace_range(ast: UOp, r: UOp, parts: tuple[UOp, ...], expr: UOp | None) -> UOp:
    """`ast` with range `r` replaced: END/REDUCE that list it list `parts` instead (in order), and every other
    use of r becomes `expr` (None: r must have no other uses)."""
    return replace_ranges(ast, {r: (parts, expr)})


def replace_ranges(ast: UOp, subs: dict[UOp, tuple[tuple[UOp, ...], UOp | None]]) -> UOp:
    """`ast` with every range of `subs` replaced as replace_range does, in one walk: the same graph as replacing
    them one after another where no replacement reads another replaced range (the grid's SPECIALs, lower.gpu)."""
    done: dict[UOp, UOp] = {}  # the nodes that change: those that read a replaced range, and their users
    for u in _topo(ast):
        if u in subs:
            continue
        for s in u.src:
            if s in subs or s in done:
                break
        else:  # reads no replaced range nor a node that changes: it stays (an END of no ranges: its body, below)
            if u.op is not Ops.END or len(u.src) != 1:
                continue
        src: list[UOp] = []
        for i, s in enumerate(u.src):
            sub = subs.get(s)
            if sub is not None:
                if i and u.op in (Ops.END, Ops.REDUCE):
                    src.extend(sub[0])
                    continue
                if sub[1] is None:
                    raise KernelOptError(f"range {s.render()} is still used by {u.op.name}")
                src.append(sub[1])
            else:
                src.append(done.get(s, s))
        new_src = tuple(src)
        if u.op is Ops.END and len(new_src) == 1:  # an END that closes no range any more is its body
            done[u] = new_src[0]
        elif u.op is Ops.REDUCE and len(new_src) == 1:
            raise KernelOptError("a REDUCE lost all its ranges")
        elif new_src != u.src:
            done[u] = UOp(u.op, new_src, u.arg, u.tag)
    return done.get(ast, ast)


def _serial_store_loop(ast: UOp, r: UOp) -> bool:
    """A REDUCE-type range that an END closes rather than a REDUCE: the ordered loop of a store through loaded
    positions (lower.rangeify.build_store_kernel), which may write one element at several iterations."""
    return r.axis_type is AxisType.REDUCE and any(u.op is Ops.END and r in u.src[1:] for u in _topo(ast))


def apply_opt(ast: UOp, opt: Opt) -> UOp:
    """`ast` with `opt` applied (KernelOptError where it does not apply). A function of the two alone, so it is
    memoized: the heuristics apply each opt as they choose it (lower.optimize.hand_coded), and the optimize stage
    then applies the chosen list to the same AST again."""
    try:
        return _applied(ast, opt)
    except TypeError:  # an Opt whose arg is unhashable (a list): not memoized
        return _apply_opt(ast, opt)


def _apply_opt(ast: UOp, opt: Opt) -> UOp:
    rs = axes(ast)
    if opt.op is OptOps.NOLOCALS:
        return ast
    if opt.op is OptOps.TC:
        raise KernelOptError("TC: tensor cores are applied by the optimize stage for a GPU target (lower.wmma), "
                             "not by apply_opt")
    if opt.op is OptOps.SIMT:
        raise KernelOptError("SIMT: shared-memory staging is applied by the optimize stage for a GPU target "
                             "(lower.simt_smem), not by apply_opt")
    if opt.axis is None or not 0 <= opt.axis < len(rs):
        raise KernelOptError(f"{opt}: axis out of range; the kernel has {len(rs)} axes")
    r = rs[opt.axis]
    rtype = r.axis_type
    if opt.op is OptOps.SPLIT:
        k, target, top = opt.split_arg
        n = size(r)
        if not isinstance(k, int) or k < 1 or n % k:
            raise KernelOptError(f"{opt}: {k} does not divide the axis size {n}")
        if rtype not in _SPLIT_FROM.get(target, set()):
            raise KernelOptError(f"{opt}: a {target.name} axis cannot be split from a {rtype.name} axis")
        if target is not AxisType.REDUCE and _serial_store_loop(ast, r):
            raise KernelOptError(f"{opt}: axis {opt.axis} is the serial loop of a store through loaded positions "
                                 f"(a scatter): its iterations must run in order, not as lanes or threads")
        nid = next_range_id(ast)
        if top:
            a, b = UOp.range(k, nid, target), UOp.range(n // k, nid + 1, rtype)
            return replace_range(ast, r, (a, b), a * (n // k) + b)
        a, b = UOp.range(n // k, nid, rtype), UOp.range(k, nid + 1, target)
        return replace_range(ast, r, (a, b), a * k + b)
    if opt.op is OptOps.PADTO:
        return _padto(ast, r, opt)
    if opt.op is OptOps.PARTIALS:
        return _partials(ast, r, opt)
    if opt.op is OptOps.SWAP:
        if not isinstance(opt.arg, int) or not 0 <= opt.arg < len(rs):
            raise KernelOptError(f"{opt}: the other axis is out of range")
        o = rs[opt.arg]
        for u in _topo(ast):
            if u.op is Ops.END and r in u.src[1:] and o in u.src[1:]:
                src = list(u.src)
                i, j = src.index(r), src.index(o)
                src[i], src[j] = src[j], src[i]
                return ast.substitute({u: UOp(Ops.END, tuple(src), u.arg, u.tag)})
        raise KernelOptError(f"{opt}: axes {opt.axis} and {opt.arg} are not loops closed by the same END")
    raise KernelOptError(f"unknown opt {opt}")


_applied = _Memo(_apply_opt, 256)


def _partials(ast: UOp, r: UOp, opt: Opt) -> UOp:
    from lower.expand import replicate  # expand builds on this module's ranges

    k = opt.arg
    if not isinstance(k, int) or isinstance(k, bool) or k < 2 or size(r) % k:
        raise KernelOptError(f"{opt}: the count of partial accumulators must be an int >= 2 that divides the axis "
                             f"size {size(r)}")
    if r.axis_type is not AxisType.REDUCE or sum(u.op is Ops.REDUCE and r in u.src[1:] for u in _topo(ast)) != 1:
        raise KernelOptError(f"{opt}: only the reduction axis of one REDUCE gets partial accumulators, not a "
                             f"{r.axis_type.name} axis or one that several REDUCEs share")
    at = axes(ast).index(r)
    split = _apply_opt(ast, Opt(OptOps.SPLIT, at, (k, AxisType.UNROLL, False)))
    return replicate(split, axes(split)[at + 1])


def _padto(ast: UOp, r: UOp, opt: Opt) -> UOp:
    from lower.rangeify import reduce_identity

    m, n = opt.arg, size(r)
    if isinstance(m, tuple) and len(m) == 2 and m[1] == "repeat":
        return _padto_repeat(ast, r, opt, m[0], n)
    if not isinstance(m, int) or m < 1:
        raise KernelOptError(f"{opt}: the multiple must be a positive int")
    if r.axis_type not in (AxisType.LOOP, AxisType.GLOBAL, AxisType.REDUCE):
        raise KernelOptError(f"{opt}: only LOOP and REDUCE axes can be padded, not {r.axis_type.name}")
    padded = -(-n // m) * m
    if padded == n:
        return ast
    p = UOp.range(padded, r.range_id, r.axis_type)
    ast = replace_range(ast, r, (p,), p)
    valid = p < n
    done: dict[UOp, UOp] = {}
    dep: dict[UOp, bool] = {}
    for u in ast.toposort():
        dep[u] = u is p or any(dep[s] for s in u.src)
        src = tuple([done.get(s, s) for s in u.src])
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and dep[u.src[0]] and len(src) < 3 and _inside(src[0]):
            new = UOp(Ops.LOAD, src, u.arg, u.tag)  # see _inside
        elif u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and dep[u.src[0]]:
            gate = valid if len(src) < 3 else (src[2] & valid)
            alt = src[1] if len(src) >= 2 else UOp.const(0, u.dtype)
            new = UOp(Ops.LOAD, (src[0], alt, gate), u.arg, u.tag)
        elif u.op is Ops.STORE and u.src[0].op is Ops.INDEX and dep[u.src[0]]:
            gate = valid if len(src) < 3 else (src[2] & valid)
            new = UOp(Ops.STORE, (src[0], src[1], gate), u.arg, u.tag)
        elif u.op is Ops.ATOMICADD and dep[u]:  # no gate: the padded threads add the identity (lower.atomics)
            from lower.atomics import gated_atomic_add

            new = gated_atomic_add(src[0], src[1], valid)
        elif u.op is Ops.REDUCE and p in u.src[1:]:
            ident = UOp.const(reduce_identity(u.reduce_op, u.dtype), u.dtype)
            new = UOp(Ops.REDUCE, (valid.where(src[0], ident), *src[1:]), u.arg, u.tag)
        else:
            new = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
        done[u] = new
    return done[ast]


def _inside(at: UOp) -> bool:
    """A buffer access whose every position over the padded range lies inside its buffer (a copy padded to whole
    panels, tensor.nn._panels): PADTO reads it ungated, since what the extra iterations read is never used (their
    stores are gated, a reduction adds its identity there). Gated, the load was a masked move in every step of
    matmul 1021's inner loop (27 -> 35 ms on an AVX2 EPYC)."""
    buf, i = at.src[0], at.src[1]
    return buf.op is Ops.BUFFER and len(buf.shape) == 1 and isinstance(n := buf.shape[0], int) and \
        i.dtype is dtypes.index and i.vmin >= 0 and i.vmax < n


def _padto_repeat(ast: UOp, r: UOp, opt: Opt, m: object, n: int) -> UOp:
    """PADTO (m, "repeat"): r padded to a multiple of m, the extra iterations computing what the last one does
    (every use reads min(r, n-1)) with the stores that depend on r gated by r < n. The extra work is never
    stored, so it needs no identity and its loads no gate: they read rows that exist."""
    if not isinstance(m, int) or m < 1:
        raise KernelOptError(f"{opt}: the multiple must be a positive int")
    if r.axis_type not in (AxisType.LOOP, AxisType.GLOBAL):
        raise KernelOptError(f"{opt}: only output (LOOP or GLOBAL) axes can repeat their last iteration, not "
                             f"{r.axis_type.name}; pad a reduction with PADTO m (its identity)")
    padded = -(-n // m) * m
    if padded == n:
        return ast
    p = UOp.range(padded, r.range_id, r.axis_type)
    valid = p < n
    ast = replace_range(ast, r, (p,), valid.where(p, UOp.const(n - 1, dtypes.index)))
    done: dict[UOp, UOp] = {}
    dep: dict[UOp, bool] = {}
    for u in ast.toposort():
        dep[u] = u is p or any(dep[s] for s in u.src)
        src = tuple([done.get(s, s) for s in u.src])
        if u.op is Ops.STORE and dep[u]:
            new = UOp(Ops.STORE, (src[0], src[1], valid if len(src) < 3 else (src[2] & valid)), u.arg, u.tag)
        elif u.op is Ops.ATOMICADD and dep[u]:
            from lower.atomics import gated_atomic_add

            new = gated_atomic_add(src[0], src[1], valid)
        else:
            new = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
        done[u] = new
    return done[ast]


def apply_opts(ast: UOp, opts: list[Opt]) -> UOp:
    for o in opts:
        ast = apply_opt(ast, o)
    return ast


def lower_threads(ast: UOp) -> UOp:
    """THREAD ranges become SPECIAL("core_id", n): the device runs the kernel once per thread index."""
    threads = [u for u in _topo(ast) if u.op is Ops.RANGE and u.axis_type is AxisType.THREAD]
    for i, r in enumerate(threads):
        ast = replace_range(ast, r, (), UOp(Ops.SPECIAL, (r.src[0],), "core_id" if i == 0 else f"core_id{i}"))
    return ast
