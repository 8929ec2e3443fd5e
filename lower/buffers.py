"""Host-side data of BUFFER UOps: a registry from a buffer's global slot to its device array.

Slots are global and never reused, so a BUFFER UOp names one piece of storage for the life of the process.
The front end stores input data here; realize allocates outputs here; memory planning may let several
intermediate slots share one array (their lifetimes do not overlap).

A BUFFER on an n-tuple device (the full-size buffer across the devices, sharded on axis 0) holds no array of
its own: it names n shard BUFFERs, one per device, each of the local shape (shape[0] // n, *shape[1:]), which
hold the data (`store_shards`, `shards`).
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any

from rewrite import BufferArg, DType, UOp
from rewrite.dtype import AddrSpace

_slots = itertools.count(1_000)  # small numbers are left for kernel-local slots in printed graphs
_data: dict[int, Any] = {}
_owner: dict[int, Any] = {}  # slot -> the allocator its array came from (it gets the array back)
_shards: dict[int, tuple[UOp, ...]] = {}  # slot of a BUFFER on a device tuple -> its per-device BUFFERs
# slot -> how many times its data was replaced or written in place (`wrote`): a copy derived from a buffer's data
# (tensor.packed) is current while the count it was made at still holds
_writes: dict[int, int] = {}


def new_buffer(dtype: DType, shape: tuple, device: str | tuple[str, ...]) -> UOp:
    """A fresh BUFFER UOp (unique slot) with no data yet; its data is freed when the UOp is garbage."""
    slot = next(_slots)
    buf = UOp.buffer(slot, dtype, shape, device)
    weakref.finalize(buf, _release, slot)
    return buf


def _release(slot: int) -> None:
    _shards.pop(slot, None)
    _writes.pop(slot, None)
    arr, owner = _data.pop(slot, None), _owner.pop(slot, None)
    if owner is not None and arr is not None:
        owner.free(arr)


def store(buf: UOp, array: Any, owner: Any = None) -> None:
    """Attach `array` as the storage of `buf`. With `owner` (an allocator), the array goes back to it when
    `buf` is garbage; arrays shared under several slots must name their owner under one slot only."""
    s = slot(buf)
    _data[s] = array
    _writes[s] = _writes.get(s, 0) + 1
    if owner is not None:
        _owner[s] = owner


def store_shards(buf: UOp, parts: tuple[UOp, ...]) -> None:
    """Attach the per-device BUFFERs of `buf`, a BUFFER on a device tuple (they live as long as it does)."""
    _shards[slot(buf)] = parts


def shards(buf: UOp) -> tuple[UOp, ...]:
    """The per-device BUFFERs of a BUFFER on a device tuple."""
    try:
        return _shards[slot(buf)]
    except KeyError:
        raise KeyError(f"buffer {buf.short()} on {buf.device} has no shards: it was never realized or was freed") \
            from None


def lookup(buf: UOp) -> Any:
    try:
        return _data[slot(buf)]
    except KeyError:
        raise KeyError(f"buffer {buf.short()} has no data: it was never realized or was freed") from None


def wrote(buf: UOp) -> None:
    """Note that `buf`'s data is about to change in place (a kernel or copy stores into it): every executor calls
    this before writing into a buffer; one that holds no data yet is not counted (store counts a new array)."""
    s = slot(buf)
    if s in _data or s in _shards:
        _writes[s] = _writes.get(s, 0) + 1


def version(buf: UOp) -> int:
    """How many times `buf`'s data was stored or written (`wrote`): equal counts mean unchanged data."""
    return _writes.get(slot(buf), 0)


def has_data(buf: UOp) -> bool:
    s = slot(buf)
    return s in _data or s in _shards


def slot(buf: UOp) -> int:
    """A global BUFFER's slot (TypeError for anything else)."""
    arg = buf.arg
    if not isinstance(arg, BufferArg) or arg.addrspace is not AddrSpace.GLOBAL:
        raise TypeError(f"not a global BUFFER: {buf.short()}")
    return arg.slot
