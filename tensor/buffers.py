"""Host data of input BUFFERs: the registry the lowering reads when it runs a graph.

Every BUFFER a Tensor creates gets a fresh slot (`new_slot`), so a slot names one piece of data for the life
of the process. The data is held in a weak-keyed table: it lives exactly as long as some graph still holds
its BUFFER UOp (UOps are interned and leave the intern table when garbage), so dropping a Tensor frees it.

Arrays are kept C-contiguous, read-only and in the numpy dtype of `helpers.np_dtype` (bfloat16 data as
float32 holding exact bfloat16 values), with the BUFFER's shape.
"""

from __future__ import annotations

import itertools
import weakref

import numpy as np

from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes
from rewrite.errors import DTypeError, ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor.helpers import np_dtype

_data: weakref.WeakKeyDictionary[UOp, np.ndarray] = weakref.WeakKeyDictionary()
_slots = itertools.count(1 << 20)  # far from small hand-picked slots in tests and kernels


def new_slot() -> int:
    return next(_slots)


def round_bfloat16(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), still as float32."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    nan = np.isnan(a)
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(nan, np.float32(np.nan), out).astype(np.float32)


def as_storage(a: np.ndarray, dtype: DType) -> np.ndarray:
    """`a` converted to how a `dtype` buffer keeps it on the host (a new, read-only, C-contiguous array)."""
    if dtype is dtypes.bfloat16:
        out = round_bfloat16(np.asarray(a, dtype=np.float32))
    else:
        out = np.array(a, dtype=np_dtype(dtype), order="C", copy=True)
    out.setflags(write=False)
    return out


def store(buf: UOp, data: np.ndarray) -> None:
    """Attach host data to a BUFFER node (shape and dtype must match)."""
    if buf.op is not Ops.BUFFER:
        raise TypeError(f"store: expected a BUFFER UOp, got {buf.op.name}")
    if tuple(data.shape) != tuple(buf.shape):
        raise ShapeError(f"store: data of shape {fmt_shape(tuple(data.shape))} for a BUFFER of shape "
                         f"{fmt_shape(buf.shape)}")
    if data.dtype != np_dtype(buf.dtype):
        raise DTypeError(f"store: numpy {data.dtype} data for a {buf.dtype.name} BUFFER; need {np_dtype(buf.dtype)}")
    if data.flags.writeable or not data.flags.c_contiguous:
        data = np.array(data, order="C", copy=True)
        data.setflags(write=False)
    _data[buf] = data


def lookup(buf: UOp) -> np.ndarray:
    """The host data of a BUFFER; KeyError when it has none (a buffer that only a device holds)."""
    try:
        return _data[buf]
    except KeyError:
        raise KeyError(f"lookup: BUFFER slot {buf.arg.slot} {fmt_shape(buf.shape)}:{buf.dtype.name} has no host "  # type: ignore[union-attr]
                       f"data") from None


def has_data(buf: UOp) -> bool:
    return buf in _data


def new_buffer(data: np.ndarray, dtype: DType, device: str) -> UOp:
    """A fresh BUFFER holding `data` (converted to `dtype`)."""
    arr = as_storage(data, dtype)
    buf = UOp.buffer(new_slot(), dtype, tuple(arr.shape), device)
    _data[buf] = arr
    return buf


def inputs_of(root: UOp) -> dict[UOp, np.ndarray]:
    """Every BUFFER under `root` that has host data, with its data."""
    return {u: _data[u] for u in root.toposort() if u.op is Ops.BUFFER and u in _data}


__all__ = ["as_storage", "has_data", "inputs_of", "lookup", "new_buffer", "new_slot", "round_bfloat16", "store"]
