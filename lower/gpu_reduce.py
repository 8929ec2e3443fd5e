"""A GPU kernel's GROUP_REDUCE axes lowered (lower.gpu.lower_grid's step): the block's threads each reduce their
part, then the partials meet. Where the threads are whole warps and a shuffle moves the dtype (WARP_REDUCE, on by
default), each warp folds its lanes' partials by five butterfly SHUFFLEs, lane 0 stores the warp's total to one
LOCAL slot, one BARRIER, and every thread folds the slots itself; otherwise the partials go to a LOCAL buffer and a
tree of log2(threads) rounds folds them, a BARRIER each (lower.gpu's module docstring has the figures).
"""

from __future__ import annotations

from math import prod
from typing import cast

from devices.linear import SHUFFLE_DTYPES
from lower.opt_apply import next_range_id, replace_range, size
from rewrite import AxisType, BufferArg, Ops, UOp
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError

MAX_THREADS = 1024  # CUDA's limit of threads per block


def lower_group_reduces(ast: UOp, groups: list[UOp], local: UOp | None = None, warp: int = 0) -> UOp:
    """REDUCE(body, ..., g) over a GROUP_REDUCE axis g (one per reduction, all of one size n: the block's threads)
    becomes each thread's partial REDUCE over the other ranges, then:
    - where `warp` (the warp size, 0 for none) divides n and a SHUFFLE moves the dtype: the partials folded within
      each warp by log2(warp) butterfly SHUFFLEs (every lane then holds its warp's total), and, with more than one
      warp, lane 0 of each stores that total to a LOCAL buffer at its warp's index, a BARRIER, and every thread
      folds the n / warp totals itself: one BARRIER, none for one warp;
    - else the partials stored to a LOCAL buffer at the thread index, a BARRIER, and a tree reduction of the buffer
      (`_tree`; by every thread where n is not a power of two).
    The kernel's stores are gated to thread 0, unless a LOCAL output axis `local` spreads them over the same threads
    (every thread holds the reductions' results)."""
    n = size(groups[0])
    if any(size(g) != n for g in groups):
        raise KernelOptError("GROUP_REDUCE axes of one kernel must have one size (the threads of the block)")
    if n > MAX_THREADS:
        raise KernelOptError(f"GROUP_REDUCE of {n} threads; at most {MAX_THREADS} per block")
    lid = UOp(Ops.SPECIAL, (UOp.const(n),), "lidx0")
    slot = sum(1 for u in ast.toposort() if u.op is Ops.BUFFER and isinstance(u.arg, BufferArg)
               and u.arg.addrspace is AddrSpace.LOCAL)
    for g in groups:
        red = next(u for u in ast.toposort() if u.op is Ops.REDUCE and g in u.src[1:])
        rest = tuple(r for r in red.src[1:] if r is not g)
        body = red.src[0].substitute({g: lid})
        partial = UOp(Ops.REDUCE, (body, *rest), red.arg, red.tag) if rest else body
        rop = cast(Ops, cast(tuple, red.arg)[0])
        shuffled = bool(warp) and n % warp == 0 and red.dtype in SHUFFLE_DTYPES
        if shuffled:
            partial = _warp_fold(partial, rop, warp, lid)
            if n == warp:  # one warp: every lane holds the total, no shared memory
                ast = ast.substitute({red: partial})
                continue
        slots = n // warp if shuffled else n  # the LOCAL slots one lane's reduction takes
        # a thread holds one partial per lane of the UPCAST axes it depends on (BEAM's UPCAST of a softmax's rows):
        # each lane gets its own slots, or the lanes' stores would land on one another
        ups = [r for r in partial.toposort() if r.op is Ops.RANGE and r.axis_type is AxisType.UPCAST]
        base = None  # the lane's first slot (None: one lane, from slot 0)
        for r in ups:
            base = r * slots if base is None else base * size(r) + r * slots
        lanes = prod(size(r) for r in ups)
        buf = UOp(Ops.BUFFER, (UOp.shape_operand((slots * lanes,)),),
                  BufferArg(slot, red.dtype, None, AddrSpace.LOCAL))
        slot += 1
        if shuffled:  # lane 0 of each warp stores the warp's total
            bar = UOp(Ops.BARRIER, (buf.index(_at(base, lid // warp)).store(partial, (lid % warp).eq(0)),))
        else:
            bar = UOp(Ops.BARRIER, (buf.index(_at(base, lid)).store(partial),))
        if shuffled or n & (n - 1):  # every thread folds the slots itself (not a power of two: no tree)
            j = UOp.range(slots, next_range_id(ast), AxisType.REDUCE)
            total = UOp(Ops.REDUCE, (UOp(Ops.AFTER, (buf, bar)).index(_at(base, j)).load(), j), red.arg, red.tag)
        else:
            total = _tree(buf, bar, lid, n, rop, red.dtype, base)
        ast = ast.substitute({red: total})
    if local is not None:
        return replace_range(ast, local, (), lid)
    first = lid.eq(0)
    gated = {u: UOp(Ops.STORE, (u.src[0], u.src[1], first if len(u.src) < 3 else u.src[2] & first), u.arg, u.tag)
             for u in ast.toposort() if u.op is Ops.STORE and is_global_store(u)}
    return ast.substitute(gated)


def _warp_fold(v: UOp, rop: Ops, warp: int, lid: UOp) -> UOp:
    """v folded across the lanes of each warp by butterfly SHUFFLEs (masks warp/2 .. 1): afterwards every lane holds
    its warp's total. In the round of mask k, lane l combines its value with lane l ^ k's; both lanes of a pair
    must get the same result, so each puts the value of the lane whose bit k is clear first. ADD and MUL commute
    exactly; a float MAX does not for zeros of two signs (rewrite.semantics: max(-0.0, 0.0) is 0.0, max(0.0, -0.0)
    is -0.0), so there the order is chosen by the lane's bit k."""
    k = warp // 2
    while k >= 1:
        other = UOp(Ops.SHUFFLE, (v,), k)
        if rop is Ops.MAX and v.dtype.is_float:
            v = (lid & k).eq(0).where(UOp(rop, (v, other)), UOp(rop, (other, v)))
        else:
            v = UOp(rop, (v, other))
        k //= 2
    return v


def _at(base: UOp | None, i: UOp) -> UOp:
    """Element i of a lane's slots that start at `base` (None: the buffer's start)."""
    return i if base is None else base + i


def _tree(buf: UOp, bar: UOp, lid: UOp, n: int, rop: Ops, dtype: object, base: UOp | None = None) -> UOp:
    """The n partials in LOCAL `buf` from element `base` (stored before BARRIER `bar`) folded in log2(n) rounds:
    in the round of stride s, thread t < s combines elements t and t + s into t, then the block meets at a
    BARRIER. A thread only writes its own element and reads one no thread writes that round, so one BARRIER per
    round suffices."""
    from lower.rangeify import reduce_identity

    ident = UOp.const(reduce_identity(rop, dtype), dtype)  # type: ignore[arg-type]
    s = n // 2
    while s >= 1:
        cur, active = UOp(Ops.AFTER, (buf, bar)), lid < s
        mine, other = cur.index(_at(base, lid)).load(), cur.index(_at(base, lid + s)).load(ident, active)
        bar = UOp(Ops.BARRIER, (cur.index(_at(base, lid)).store(UOp(rop, (mine, other)), active),))
        s //= 2
    return UOp(Ops.AFTER, (buf, bar)).index(_at(base, UOp.const(0))).load()


def is_global_store(st: UOp) -> bool:
    b = st.src[0].src[0] if st.src[0].op is Ops.INDEX else None
    while b is not None and b.op is Ops.AFTER:
        b = b.src[0]
    return b is not None and b.op is Ops.BUFFER and isinstance(b.arg, BufferArg) and \
        b.arg.addrspace is AddrSpace.GLOBAL


__all__ = ["MAX_THREADS", "is_global_store", "lower_group_reduces"]
