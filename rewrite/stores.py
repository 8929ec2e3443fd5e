"""Writes at loaded positions in a tensor graph: the stores through an INDEX (scatter and scatter-add).

The spec's assign is AFTER(t, STORE(t, v)): t holds v afterwards. A store through an INDEX,
AFTER(t, STORE(INDEX(t, i), v)) with i a (k,)-shaped integer tensor, writes v[j, ...] to t[i[j], ...] for
j = 0, 1, ..., k-1 in order, so of duplicate positions the last one wins. Its accumulating form
AFTER(t, STORE(INDEX(t, i), INDEX(t, i) + v)) adds v[j, ...] to t[i[j], ...] one j at a time, so duplicate
positions accumulate: a scatter-add, the read-modify-write of ATOMICADD. The order over j is what makes both
exact: a kernel runs the j axis serially (lower.rangeify.build_store_kernel), and a float sum adds in that
order. A position outside t's first axis is skipped. The INDEX may appear in the value only as that ADD's
operand (the element's value before this j's update).

t is a BUFFER or an AFTER on one, and then the write is in place (tensor.inplace), or any lazy value, and then
the AFTER is a new value: lower.schedule gives it a fresh buffer holding a copy of t before the writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewrite.errors import CompilerError
from rewrite.ops import Ops
from rewrite.props import base_of
from rewrite.uop import UOp


@dataclass(frozen=True)
class IndexedStore:
    """A STORE(INDEX(target, index), ...) taken apart: `value` is what is written, or added when `accumulate`."""

    view: UOp  # INDEX(target, index)
    target: UOp
    index: UOp
    value: UOp
    accumulate: bool


def _view(base: UOp, index: UOp, value: UOp, what: str) -> UOp:
    if len(index.shape) != 1 or not index.dtype.is_int:
        raise CompilerError(f"{what}: the positions must be a (k,)-shaped integer tensor, got "
                            f"{index.shape} {index.dtype.name}")
    if not base.shape:
        raise CompilerError(f"{what}: the target must have at least one axis to index")
    view = UOp(Ops.INDEX, (base, index))
    if value.shape != view.shape or value.dtype is not base.dtype:
        raise CompilerError(f"{what}: the value is {value.shape} {value.dtype.name}, the indexed target "
                            f"{view.shape} {base.dtype.name}")
    return view


def scatter_add(base: UOp, index: UOp, value: UOp) -> UOp:
    """base with value[j, ...] added at base[index[j], ...] for every j (duplicates accumulate)."""
    view = _view(base, index, value, "scatter_add")
    return UOp(Ops.AFTER, (base, UOp(Ops.STORE, (view, view + value))))


def scatter_store(base: UOp, index: UOp, value: UOp) -> UOp:
    """base with value[j, ...] written at base[index[j], ...] (of duplicates the last j wins)."""
    view = _view(base, index, value, "scatter_store")
    return UOp(Ops.AFTER, (base, UOp(Ops.STORE, (view, value))))


def indexed_store(store: UOp) -> IndexedStore | None:
    """The parts of a STORE through an INDEX (module docstring); None for a STORE of a whole buffer. A STORE
    through an INDEX that is not of the two forms raises CompilerError."""
    if store.op is not Ops.STORE or store.src[0].op is not Ops.INDEX:
        return None
    view, val = store.src[0], store.src[1]
    if len(view.src) != 2 or len(view.src[1].shape) != 1 or len(store.src) != 2:
        raise CompilerError(f"STORE through INDEX: one (k,)-shaped index and no gate, got {view.short()} with "
                            f"{len(store.src)} sources")
    acc = val.op is Ops.ADD and view in val.src
    v = (val.src[1] if val.src[0] is view else val.src[0]) if acc else val
    if view in v.toposort():
        raise CompilerError("STORE through INDEX: its value may read the written elements only as the operand "
                            "of one ADD (INDEX(t, i) + v, a scatter-add)")
    return IndexedStore(view, view.src[0], view.src[1], v, acc)


def in_place(after: UOp) -> bool:
    """Whether an AFTER writes into existing storage: its chain of targets ends at a BUFFER (not a lazy value)."""
    return base_of(after).op is Ops.BUFFER


__all__ = ["IndexedStore", "in_place", "indexed_store", "scatter_add", "scatter_store"]
