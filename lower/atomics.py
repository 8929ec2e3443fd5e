"""Scatter-adds as ATOMICADD on GPU targets: the index loop of a scatter-add kernel runs in parallel.

A scatter-add kernel (lower.rangeify.build_store_kernel) is `END(STORE(at, LOAD(at) + v, inside), j, rows...)`
with j, the loop over the positions, a serial (REDUCE-type) range: later j read the element earlier j wrote, so
duplicate positions accumulate. On a GPU target that serial loop is one thread walking every position. With
ATOMICADD (the spec's `buf[idx] += val` in one step) the read-modify-write is indivisible, so j becomes an
ordinary output axis and every (j, row) pair is a thread: `ATOMICADD(at', inside.where(v, -0.0))`, with `at'` the
element at a position clamped into the buffer. A position outside the buffer adds -0.0 (0 for ints) to element 0,
the one value whose addition changes no float, -0.0 and NaN included, so it is still skipped.

Only dtypes CUDA adds atomically in hardware take this form: float32, float64 and the 32- and 64-bit ints. Other
dtypes (float16, bfloat16, narrower ints) keep the serial loop. Integer sums are exact in any order; a float sum
adds in the order the threads arrive, so it may differ from the serial form in the last bits (as torch's CUDA
index_add_). The cpu device never gets here: its scatter-add stays serial in j, with no atomics.
"""

from __future__ import annotations

from rewrite import AxisType, Ops, UOp, dtypes

ATOMIC_DTYPES = frozenset({dtypes.float32, dtypes.float64, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64})


def _reads(x: UOp, at: UOp) -> bool:
    """Whether x is the element at `at` as loaded: LOAD(at), gated or not, or a WHERE that picks it."""
    if x.op is Ops.WHERE:
        x = x.src[1]
    return x.op is Ops.LOAD and x.src[0] is at


def _accumulated(st: UOp) -> UOp | None:
    """v when `st` is STORE(at, LOAD(at) + v, gate) (either operand order, the load gated or not), else None."""
    if st.op is not Ops.STORE or len(st.src) != 3 or st.src[1].op is not Ops.ADD:
        return None
    at = st.src[0]
    for own, v in (st.src[1].src, st.src[1].src[::-1]):
        if _reads(own, at) and at not in v.toposort():
            return v
    return None


def gated_atomic_add(at: UOp, v: UOp, gate: UOp) -> UOp:
    """ATOMICADD of v at `at` (INDEX(buf, i)) where `gate` holds; elsewhere an addition of the dtype's exact
    identity (-0.0, or 0) to element 0, since ATOMICADD takes no gate (module docstring)."""
    buf, i = at.src
    skip = UOp.const(-0.0 if buf.dtype.is_float else 0, buf.dtype)
    return UOp(Ops.ATOMICADD, (buf.index(gate.where(i, UOp.const(0))), gate.where(v, skip)))


def atomic_scatter(ast: UOp) -> UOp:
    """The kernel with each accumulating store of an ATOMIC_DTYPES element made an ATOMICADD and its serial ranges
    made output loops (module docstring); unchanged when it has none."""
    swap: dict[UOp, UOp] = {}
    serial: set[UOp] = set()
    for end in ast.toposort():
        if end.op is not Ops.END or (v := _accumulated(end.src[0])) is None:
            continue
        at, _, inside = end.src[0].src
        if len(at.src) != 2 or at.src[0].dtype not in ATOMIC_DTYPES:
            continue
        swap[end.src[0]] = gated_atomic_add(at, v, inside)
        serial.update(r for r in end.src[1:] if r.op is Ops.RANGE and r.axis_type is AxisType.REDUCE)
    if not swap:
        return ast
    return ast.substitute(swap).substitute({r: r.replace(arg=(r.range_id, AxisType.LOOP)) for r in serial})


__all__ = ["ATOMIC_DTYPES", "atomic_scatter", "gated_atomic_add"]
