"""In-place updates: `assign` (the spec's STORE then AFTER), `+=` and friends, and what keeps them safe.

`t.assign(v)` on a realized tensor makes `t` the graph AFTER(buf, STORE(buf, v)): when it is realized, a kernel
writes v into t's own buffer (lower.schedule runs it in place; a value that reads the buffer anywhere but at
the element being written is computed into a temporary first). On a tensor that is still a lazy graph there is
no buffer to write, so assign rebinds it to the value. `t += v` (and -=, *=, /=, //=, %=, **=, &=, |=, ^=, <<=,
>>=) is `t.assign(t + v)` with torch's dtype rule: the result is cast back to t's dtype, but a float result
cannot go into an integer or bool tensor.

Aliasing. A Tensor object is a value: every lazy tensor keeps the value it was made with, whatever is assigned
later (`a = t + 0; t.assign(t * 2)` leaves `a` the old `t + 0`), and so does `t.assign(t * 2)` itself (the
value reads the old data). Only Tensor objects holding the very same buffer (`u = Tensor(t)`) are aliases that
see the update, as torch's views of one storage do. To keep that true, every tensor is tracked by a weak
reference (`track`, `live`); when a realize runs stores into a buffer, the other live lazy tensors that read that
buffer's current (about to be overwritten) contents get a snapshot of it, copied in the same realize before the
store and put in their graphs; lazy tensors that read the assigned value (a graph over the AFTER) are rebound to the
buffer.

On a device tuple (tensor.multi) a realized tensor is a view of a BUFFER on the tuple (lower.multi.buffer_view):
assign stores into that BUFFER, each device into its own shard in place (lower.multi's shard-store rule; a
replicated tensor's value is laid out as its storage, one block per device), so a data-parallel optimizer step
keeps every parameter's shard buffers, as tensor.jit needs; a tensor sharded on an axis >= 1 likewise (its
storage holds device i's block first). Other views of a tuple tensor (a slice, a transpose) are rebound.

Gradients: assigning to a tensor that requires a gradient is an error outside no_grad() (torch refuses an
in-place update of a leaf for the same reason: the recorded graph would read the new data).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.errors import DTypeError, GradientError, ShapeError
from rewrite.ops import Ops
from rewrite.stores import in_place
from rewrite.uop import UOp
from tensor import autograd as _ag
from tensor import elementwise as _ew
from tensor import logic as _lg

if TYPE_CHECKING:
    from tensor.tensor import Tensor

_pending: weakref.WeakSet = weakref.WeakSet()  # AFTER nodes made by assign and not yet realized

# Every live Tensor, by a weak reference (the aliasing scan's candidates, `live`) whose callback is the set's own
# discard: a tensor's death takes its reference out of the set in C. A weak set does the same with two Python
# calls per tensor (its add, and its removal callback at the tensor's death): about half the instructions of
# making and dropping a tensor's tracking (callgrind). Each reference is the tensor's own (a reference with a
# callback is never shared), so weakref.getweakrefcount(t) is 1 when nothing else refers to t weakly.
_live: set[weakref.ref] = set()
_ref, _forget = weakref.ref, _live.discard


def track(t: Tensor) -> None:
    _live.add(_ref(t, _forget))


def live() -> list[Tensor]:
    """Every live Tensor."""
    return [t for r in list(_live) if (t := r()) is not None]


def _target(t: Tensor) -> UOp | None:
    """The node an assignment to t stores into: its BUFFER, or the last pending assignment to it."""
    u = t.uop
    if isinstance(t.device, tuple):
        return _tuple_target(u)
    if u.op is Ops.BUFFER and tt.buffers.has_data(u):
        return u
    if u.op is Ops.AFTER:
        return u
    return None


def _tuple_target(u: UOp) -> UOp | None:
    """On a device tuple a realized tensor is a view of a BUFFER on the tuple (lower.multi.buffer_view: the buffer
    itself when sharded on axis 0, one block per device replicated for NULL); an assignment stores into that
    BUFFER (or its last pending assignment), each device its own block in place. None for another layout."""
    from lower.multi import buffer_view

    base = u
    while base.op in (Ops.RESHAPE, Ops.REPLICATED, Ops.PERMUTE):
        base = base.src[0]
    at = base
    while at.op is Ops.AFTER:
        at = at.src[0]
    if at.op is not Ops.BUFFER or not isinstance(at.buf_arg.device, tuple) or not tt.buffers.has_data(at):
        return None
    if u is not buffer_view(base, u.shape, u.axis):
        return None
    return base


def _in_storage(t: Tensor, tgt: UOp, v: UOp) -> UOp:
    """The value v of t laid out as t's storage `tgt` on the device tuple (lower.multi.storage_value): for a
    replicated t, (n, *shape) with every device's block its own copy of v; for t sharded on an axis >= 1, that
    axis's blocks moved to the front."""
    from lower.multi import storage_value

    return storage_value(v, t.uop.axis, len(cast("tuple[str, ...]", t.device)))


def _value(t: Tensor, value: object, what: str) -> Tensor:
    """`value` as a Tensor of t's shape, dtype and device (broadcast and cast by torch's copy_ rules)."""
    if not isinstance(value, tt.Tensor):
        if isinstance(value, (bool, int, float, np.generic, np.ndarray, list, tuple)):
            arr = np.asarray(value)
            if arr.dtype.kind == "f" and not t.dtype.is_float:
                raise DTypeError(f"{what}: cannot store float data into a {t.dtype.name} tensor; cast it first")
            value = tt.Tensor(value, dtype=t.dtype, device=t.device)
        else:
            raise TypeError(f"{what}: cannot assign a {type(value).__name__}; use a Tensor, an ndarray, a list or a "
                            f"number")
    if value.device != t.device:
        raise ShapeError(f"{what}: the value is on {value.device} but the tensor is on {t.device}; move it with "
                         f".to({t.device!r})")
    if value.dtype is not t.dtype:
        if value.dtype.is_float and not t.dtype.is_float:
            raise DTypeError(f"{what}: a {value.dtype.name} result cannot be stored into a {t.dtype.name} tensor "
                             f"(torch refuses the same); cast the value explicitly")
        value = value.cast(t.dtype)
    if tuple(value.shape) != tuple(t.shape):
        vs, ts = tuple(value.shape), tuple(t.shape)
        if len(vs) > len(ts) or any(a != 1 and a != b for a, b in zip(vs[::-1], ts[::-1], strict=False)):
            raise ShapeError(f"{what}: a value of shape {fmt_shape(vs)} cannot be broadcast to the tensor's shape "
                             f"{fmt_shape(ts)}")
        value = value.reshape(*((1,) * (len(ts) - len(vs)) + vs)).expand(*ts)
    return value


def assign(t: Tensor, value: object) -> Tensor:
    """Write `value` into t (see the module docstring); returns t."""
    if not isinstance(t, tt.Tensor):
        raise TypeError(f"assign: the target must be a Tensor, got {type(t).__name__}")
    if t.requires_grad and _ag.grad_enabled():
        raise GradientError("assign: the tensor requires a gradient, so an in-place update would change what its "
                            "graph read; do it under no_grad() (as an optimizer does) or assign to a detached copy")
    v = _value(t, value, "assign")
    tgt = _target(t)
    if tgt is None:  # a lazy graph has no storage of its own: it simply becomes the value
        t.uop = v.uop
        return t
    if isinstance(t.device, tuple):
        from lower.multi import buffer_view
        from tensor.multi import shard_like

        if v.uop.axis is not None and v.uop.axis != t.uop.axis:  # laid out as t first (a replicated one is cut)
            v = shard_like(v, t)
        after = UOp(Ops.AFTER, (tgt, UOp(Ops.STORE, (tgt, _in_storage(t, tgt, v.uop)))))
        _pending.add(after)
        t.uop = buffer_view(after, t.uop.shape, t.uop.axis)
        return t
    after = UOp(Ops.AFTER, (tgt, UOp(Ops.STORE, (tgt, v.uop))))
    _pending.add(after)
    t.uop = after
    return t


InPlace = Callable[["Tensor", object], "Tensor"]


def _inplace(fn: Callable[..., Tensor], what: str) -> InPlace:
    def op(t: Tensor, y: object) -> Tensor:
        r = fn(t, y)
        if r.dtype is not t.dtype and r.dtype.is_float and not t.dtype.is_float:
            raise DTypeError(f"{what}: the result is {r.dtype.name} and cannot be stored into the {t.dtype.name} "
                             f"tensor (torch refuses the same); write t = t {what[:-1]} y for a new tensor")
        return assign(t, r)

    op.__name__ = f"inplace_{fn.__name__}"
    op.__doc__ = f"t {what} y: t is updated in place (its buffer, when realized) with torch's dtype rule."
    return op


iadd: InPlace = _inplace(_ew.add, "+=")
isub: InPlace = _inplace(_ew.sub, "-=")
imul: InPlace = _inplace(_ew.mul, "*=")
itruediv: InPlace = _inplace(_ew.div, "/=")
ifloordiv: InPlace = _inplace(_ew.floordiv, "//=")
imod: InPlace = _inplace(_ew.mod, "%=")
ipow: InPlace = _inplace(_ew.pow_, "**=")
iand: InPlace = _inplace(_lg.bitwise_and, "&=")
ior: InPlace = _inplace(_lg.bitwise_or, "|=")
ixor: InPlace = _inplace(_lg.bitwise_xor, "^=")
ilshift: InPlace = _inplace(_lg.lshift, "<<=")
irshift: InPlace = _inplace(_lg.rshift, ">>=")


# ---------------------------------------------------------------- realize-time bookkeeping


class Assignments:
    """The stores a realize runs and what the other live tensors need around them (see the module docstring)."""

    def __init__(self, roots: list[Tensor]) -> None:
        self.snapshots: dict[UOp, Tensor] = {}  # overwritten version -> a tensor realized with its old contents
        self.finals: dict[UOp, UOp] = {}  # AFTER whose stores run now and are not overwritten -> its BUFFER
        self.readers: list[Tensor] = []  # live lazy tensors outside the realize that read a version
        versions: dict[UOp, UOp] = {}  # every version node (target BUFFER or AFTER) -> its BUFFER
        overwritten: set[UOp] = set()
        # the roots walked and their nodes: a realize of exactly these roots reuses the walk (`order_of`)
        self.walked = [t.uop for t in roots]
        self.order = _topo(self.walked)
        for u in self.order:
            if u.op is Ops.AFTER and in_place(u):  # a scatter into a lazy value writes a fresh buffer
                buf = versions.get(u.src[0], u.src[0])
                versions[u.src[0]] = versions[u] = buf
                overwritten.add(u.src[0])
                _pending.discard(u)
        if not versions:
            return
        for t in roots:  # a root that is an overwritten version keeps that version's value in its own buffer
            if t.uop in overwritten:
                t.uop = UOp(Ops.CONTIGUOUS, (t.uop,))
        self.finals = {v: b for v, b in versions.items() if v not in overwritten and v.op is Ops.AFTER}
        in_batch = {id(t) for t in roots}
        read = _reads([t for t in live() if id(t) not in in_batch and t.uop.op is not Ops.BUFFER],
                      set(versions))
        for t, vs in read:
            self.readers.append(t)
            for v in vs:
                if v in overwritten and v not in self.snapshots:
                    self.snapshots[v] = tt.Tensor._wrap(UOp(Ops.CONTIGUOUS, (v,)), t.device)

    def order_of(self, roots: list[UOp]) -> list[UOp] | None:
        """UOp.toposort_of(roots) when `roots` are the nodes walked here, in their order (duplicates dropped:
        the walk skips a root it has placed); None otherwise."""
        walked = list(dict.fromkeys(self.walked))
        if len(walked) != len(roots) or any(a is not b for a, b in zip(walked, roots, strict=True)):
            return None
        return self.order

    def extra(self) -> list[Tensor]:
        return list(self.snapshots.values())

    def finish(self) -> None:
        """After the realize: readers of an overwritten version read its snapshot, readers of a final one the
        buffer."""
        if not self.readers:
            return
        mapping = {**{v: s.uop for v, s in self.snapshots.items()}, **self.finals}
        for t in self.readers:
            t.uop = t.uop.substitute(mapping)


def _topo(roots: list[UOp]) -> list[UOp]:
    return UOp.toposort_of(roots)


def _reads(tensors: list[Tensor], versions: set[UOp]) -> list[tuple[Tensor, set[UOp]]]:
    """For each tensor whose graph reads one of `versions`, the versions it reads (a version is a leaf here: the
    versions inside an AFTER are what the AFTER is made of, not what its readers read)."""
    memo: dict[UOp, frozenset[UOp]] = {}
    empty: frozenset[UOp] = frozenset()
    out = []
    for t in tensors:
        stack = [t.uop]
        while stack:
            u = stack[-1]
            if u in memo:
                stack.pop()
                continue
            if u in versions:
                memo[u] = frozenset((u,))
                stack.pop()
                continue
            if u.op is Ops.BUFFER:
                memo[u] = empty
                stack.pop()
                continue
            todo = [s for s in u.src if s not in memo]
            if todo:
                stack.extend(todo)
                continue
            acc: frozenset[UOp] = empty
            for s in u.src:
                if memo[s]:
                    acc = acc | memo[s]
            memo[u] = acc
            stack.pop()
        if memo[t.uop]:
            out.append((t, set(memo[t.uop])))
    return out


def assignments(roots: list[Tensor]) -> Assignments | None:
    """The bookkeeping for a realize of `roots`, or None when no assignment is pending (the fast path)."""
    if not _pending:
        return None
    return Assignments(roots)


__all__ = ["Assignments", "assign", "assignments", "iadd", "iand", "ifloordiv", "ilshift", "imod", "imul", "ior",
           "ipow", "irshift", "isub", "itruediv", "ixor", "live", "track"]
