"""Derived properties read less often than dtype and shape: device, addrspace and the sharding axis."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rewrite.dtype import AddrSpace
from rewrite.ops import GroupOp, Ops

if TYPE_CHECKING:
    from rewrite.uop import UOp

_NO_DEVICE = frozenset({Ops.CONST, Ops.VCONST, Ops.RANGE, Ops.SPECIAL, Ops.BINARY})


def _nodes_needing(root: UOp, name: str) -> list[UOp]:
    """The nodes under root without the property, children first. A node that has it is not walked into: the
    property is set for every node below one before that one (the loops below go children first)."""
    return root.toposort_of((root,), lambda u: u._props is not None and name in u._props)


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
    """The multi-device sharding axis (seed 001): BUFFER on an n-tuple device has axis 0; RESHAPE remaps it to
    the axis that keeps the shard boundary; PERMUTE follows the permutation; REDUCE or REPLICATED on it drop it;
    ALU ops inherit from their sources; everything else keeps its source's.

    COPY: to an n-tuple device it reshards with axis 0, to a single device the axis is NULL. (The spec's axis
    paragraph says COPY gives NULL; its collectives section says COPY to an n-tuple device reshards with axis 0
    and every collective relies on that, so the collectives' reading wins for tuple targets.)

    A RESHAPE of a sharded value whose new shape has no axis at the shard boundary (the devices' pieces would not
    be contiguous blocks of one axis) raises ShardingError: NULL would claim the data is replicated."""
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
    if op is Ops.COPY:
        return 0 if isinstance(u.arg, tuple) else None
    if not u.src:
        return None
    a = u.src[0]._props["axis"] if u.src[0]._props else None
    if op is Ops.PERMUTE:
        return None if a is None else u.int_tuple_arg.index(a)
    if op in (Ops.REDUCE, Ops.REPLICATED):
        axes = u.reduce_axes if op is Ops.REDUCE else u.int_tuple_arg
        return None if a in axes else a
    if op is Ops.RESHAPE:
        if a is None:
            return None
        dev = u.device
        n = len(dev) if isinstance(dev, tuple) else 1
        b = reshape_axis(u.src[0].shape, u.shape, a, n)
        if b is None:
            from rewrite.derive import fmt_shape
            from rewrite.errors import ShardingError

            raise ShardingError(
                f"RESHAPE: {fmt_shape(u.src[0].shape)} sharded on axis {a} over {n} devices cannot become "
                f"{fmt_shape(u.shape)}: no axis of the new shape keeps the shard boundary (each device's piece "
                f"must stay one block of one axis); replicate first (.to(devices)) or reshape so that the shard "
                f"axis and everything after it stay together")
        return b
    if op in GroupOp.ALU:
        return next((s._props["axis"] for s in u.src if s._props and s._props.get("axis") is not None), None)
    return a


def reshape_axis(old: tuple, new: tuple, axis: int, n: int) -> int | None:
    """The axis of `new` at the shard boundary of `axis` of `old` (sharded n ways), or None when none is: device
    k holds the flat elements whose offset within each block of prod(old[axis:]) lies in the k-th n-th of it, so
    the new axis b must span the same block (prod(new[b:]) == prod(old[axis:])) and split n ways
    (new[b] % n == 0)."""
    if not all(isinstance(d, int) for d in (*old, *new)):
        return None
    block = 1
    for d in old[axis:]:
        block *= d
    acc = 1
    for b in range(len(new) - 1, -1, -1):
        acc *= new[b]
        if acc == block and new[b] % n == 0:
            return b
        if acc > block:
            return None
    return None


def contiguous_start(i: UOp) -> tuple[UOp | None, int] | None:
    """(s, k) when the lanes of the index vector `i` are s + k + (0, 1, ..., n-1), s a scalar (None: 0): a vector
    access of consecutive elements, one move (devices.c_vector) or one stream (rules.streaming)."""
    def first(v: UOp) -> int | None:
        if v.op is not Ops.VCONST:
            return None
        vals = cast(tuple, v.arg)[0]
        return vals[0] if all(x == vals[0] + j for j, x in enumerate(vals)) else None

    if (k := first(i)) is not None:
        return None, k
    if i.op is Ops.ADD:
        for s, v in (i.src, i.src[::-1]):
            if s.shape == () and (k := first(v)) is not None:
                return s, k
    return None


def base_of(u: UOp) -> UOp:
    """The node under any AFTERs (AFTER(x, deps) is the value x)."""
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u


def nbytes(u: UOp) -> int | None:
    """The bytes of `u`'s value, None when a dimension is symbolic."""
    n = u.dtype.itemsize
    for d in u.shape:
        if not isinstance(d, int):
            return None
        n *= d
    return n
