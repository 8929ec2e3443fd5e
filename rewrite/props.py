"""Derived properties read less often than dtype and shape: device, addrspace and the sharding axis."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rewrite.dtype import AddrSpace
from rewrite.ops import GroupOp, Ops

if TYPE_CHECKING:
    from rewrite.uop import UOp

_NO_DEVICE = frozenset({Ops.CONST, Ops.VCONST, Ops.RANGE, Ops.SPECIAL, Ops.BINARY})


def _nodes_needing(root: UOp, name: str) -> list[UOp]:
    return [u for u in root.toposort() if u._props is None or name not in u._props]


def device_of(root: UOp) -> str | tuple[str, ...] | None:
    """BUFFER/PARAM: from arg; COPY: its target; CONST, RANGE: none; anything else: the first source that has one."""
    for u in _nodes_needing(root, "device"):
        if u.op in (Ops.BUFFER, Ops.PARAM):
            d = u.buf_arg.device
        elif u.op is Ops.COPY or (u.op is Ops.LOAD and u.arg is not None):
            arg = u.arg  # COPY: the target device; LOAD: a device, or a tuple whose first item is one
            d = cast("str | tuple[str, ...]", arg if not isinstance(arg, tuple) or all(isinstance(a, str) for a in arg)
                     else arg[0])
        elif u.op in _NO_DEVICE:
            d = None
        elif u.op in (Ops.FUNCTION, Ops.CALL):
            d = u.src[1].device if len(u.src) > 1 else None
        else:
            d = next((s.device for s in u.src if s.device is not None), None)
        if u._props is None:
            u._props = {}
        u._props["device"] = d
    return cast(dict, root._props)["device"]  # the loop above filled it


def addrspace_of(u: UOp) -> AddrSpace | None:
    if u.op in (Ops.BUFFER, Ops.PARAM):
        return u.buf_arg.addrspace
    if u.op in GroupOp.Movement or u.op in (Ops.AFTER, Ops.LOAD, Ops.STORE):
        return u.src[0].addrspace if u.src else None
    return None


def axis_of(root: UOp) -> int | None:
    """The multi-device sharding axis (seed 001): BUFFER on an n-tuple device has axis 0; RESHAPE keeps the
    shard boundary; PERMUTE follows the permutation; REDUCE or REPLICATED on it, and COPY, drop it; ALU ops
    inherit from their sources."""
    for u in _nodes_needing(root, "axis"):
        a = _axis_step(u)
        if u._props is None:
            u._props = {}
        u._props["axis"] = a
    return cast(dict, root._props)["axis"]  # the loop above filled it


def _axis_step(u: UOp) -> int | None:
    op = u.op
    if op in (Ops.BUFFER, Ops.PARAM):
        return 0 if isinstance(u.buf_arg.device, tuple) else None
    if op is Ops.COPY or not u.src:
        return None
    a = u.src[0]._props["axis"] if u.src[0]._props else None
    if op is Ops.PERMUTE:
        return None if a is None else u.int_tuple_arg.index(a)
    if op in (Ops.REDUCE, Ops.REPLICATED):
        axes = u.reduce_axes if op is Ops.REDUCE else u.int_tuple_arg
        return None if a in axes else a
    if op is Ops.RESHAPE:
        return None if a is None else _reshape_axis(u.src[0].shape, u.shape, a)
    if op in GroupOp.ALU:
        return next((s._props["axis"] for s in u.src if s._props and s._props.get("axis") is not None), None)
    return a


def _reshape_axis(old: tuple, new: tuple, axis: int) -> int | None:
    """The axis of `new` that starts at the same flat offset as `axis` of `old`, keeping the shard boundary."""
    if not all(isinstance(d, int) for d in (*old, *new)):
        return None
    stride_before = 1
    for d in old[:axis]:
        stride_before *= d
    acc = 1
    for i, d in enumerate(new):
        if (acc == stride_before and d % old[axis] == 0) or (acc == stride_before and d == old[axis]):
            return i
        acc *= d
    return None
