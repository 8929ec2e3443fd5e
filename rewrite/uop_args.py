"""The args UOps carry (the PARAM and BUFFER records, a CONST's normalized value) and the intern key.

A UOp is interned by `(op, src, arg, tag)`, but Python's equality is too coarse for two kinds of arg: 1, 1.0 and
True compare equal (as do 0.0 and -0.0), and two NamedTuples with equal fields compare equal whatever their type.
`intern_key` spells those differences out, so a node is handed back only for a structurally identical request.
"""

from __future__ import annotations

import math
from typing import NamedTuple, cast

from rewrite.dtype import AddrSpace, DType, dtypes
from rewrite.errors import DTypeError
from rewrite.ops import Ops

ConstValue = int | float | bool


class ParamArg(NamedTuple):
    """PARAM's arg: `slot` is a position (FUNCTION parameter) or a name (a symbolic variable)."""

    slot: int | str
    dtype: DType
    device: str | tuple[str, ...] | None = None
    addrspace: AddrSpace = AddrSpace.GLOBAL


class BufferArg(NamedTuple):
    slot: int
    dtype: DType
    device: str | tuple[str, ...] | None = None
    addrspace: AddrSpace = AddrSpace.GLOBAL




def _value_sig(v: object) -> object:
    t = type(v)
    return (t, math.copysign(1.0, cast(float, v)) < 0) if t is float and v == 0.0 else t


_CONST, _VCONST, _PARAM, _BUFFER = Ops.CONST, Ops.VCONST, Ops.PARAM, Ops.BUFFER  # module globals: cheaper lookups
_INDEX = dtypes.index


def intern_key(op: Ops, src: tuple, arg: object, tag: object) -> tuple:
    # UOp.__new__ calls this only for CONST, VCONST, PARAM and BUFFER and writes the plain key itself: an op
    # given an extended key here must be added to that test too
    # 1 == 1.0 == True and 0.0 == -0.0 compare and hash alike, so a constant's key also spells out each value's
    # type and the sign of a float zero; otherwise a raw CONST(True, int32) would be handed back for const(1, int32)
    if (op is _CONST or op is _VCONST) and type(arg) is tuple and len(arg) == 2:
        v = arg[0]
        if type(v) is tuple:
            sig = tuple(map(type, v))  # _value_sig of each value, at C speed where no float zero needs its sign
            return (op, src, arg, tag, tuple(map(_value_sig, v)) if float in sig else sig)
        t = type(v)
        return (op, src, arg, tag, _value_sig(v) if t is float else t)
    if op is _PARAM or op is _BUFFER:  # ParamArg and BufferArg are NamedTuples: equal when their fields are
        return (op, src, arg, tag, type(arg))
    return (op, src, arg, tag)


def normalize_const(value: ConstValue, dtype: DType) -> ConstValue:
    """The Python value a CONST of `dtype` holds: bool, wrapped int, or float (NaN is the one math.nan)."""
    if dtype is _INDEX and type(value) is int:  # the common case in index math: nothing to wrap or round
        return value
    k = dtype.scalar.kind
    if k == "b":
        return bool(value)
    if k in ("i", "u", "x"):
        if isinstance(value, float):
            if not value.is_integer():
                raise DTypeError(f"CONST: {value!r} is not an integer, so it cannot be a {dtype.name} constant")
            value = int(value)
        v = int(value)
        if k == "x":
            return v
        bits = dtype.scalar.bits
        v &= (1 << bits) - 1
        return v - (1 << bits) if k == "i" and v >= 1 << (bits - 1) else v
    if k == "f":
        from rewrite.semantics import round_to

        f = round_to(dtype.scalar, float(value))
        return math.nan if f != f else f
    raise DTypeError(f"CONST: {dtype.name} cannot hold a constant")
