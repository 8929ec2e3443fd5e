"""Host-side data of BUFFER UOps: a registry from a buffer's global slot to its device array.

Slots are global and never reused, so a BUFFER UOp names one piece of storage for the life of the process.
The front end stores input data here; realize allocates outputs here; memory planning may let several
intermediate slots share one array (their lifetimes do not overlap).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from rewrite import BufferArg, DType, UOp
from rewrite.dtype import AddrSpace

_slots = itertools.count(1_000)  # small numbers are left for kernel-local slots in printed graphs
_data: dict[int, Any] = {}


def new_buffer(dtype: DType, shape: tuple, device: str) -> UOp:
    """A fresh BUFFER UOp (unique slot) with no data yet; its data is freed when the UOp is garbage."""
    slot = next(_slots)
    buf = UOp.buffer(slot, dtype, shape, device)
    weakref.finalize(buf, _data.pop, slot, None)
    return buf


def store(buf: UOp, array: Any) -> None:
    _data[_slot(buf)] = array


def lookup(buf: UOp) -> Any:
    try:
        return _data[_slot(buf)]
    except KeyError:
        raise KeyError(f"buffer {buf.short()} has no data: it was never realized or was freed") from None


def has_data(buf: UOp) -> bool:
    return _slot(buf) in _data


def _slot(buf: UOp) -> int:
    arg = buf.arg
    if not isinstance(arg, BufferArg) or arg.addrspace is not AddrSpace.GLOBAL:
        raise TypeError(f"not a global BUFFER: {buf.short()}")
    return arg.slot
