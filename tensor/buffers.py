"""Tensor data <-> the BUFFER registry of `lower.buffers`, in the front end's terms.

The registry (owned by the lowering, which reads inputs and writes results there) keys data by BUFFER slot and
keeps each buffer as device storage: a 1-D C-contiguous array in `devices.memory.np_dtype` (bfloat16 as its
uint16 bits). The front end speaks shaped host arrays instead, with bfloat16 as float32 holding exact bfloat16
values (numpy has none). This module converts between the two: `new_buffer` stores host data under a fresh
BUFFER, `host_array` reads a buffer back.
"""

from __future__ import annotations

import numpy as np

from devices.memory import from_bfloat16_bits, to_bfloat16_bits
from devices.memory import np_dtype as storage_dtype
from lower import buffers as registry
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor.helpers import np_dtype
from tensor.symbolic import concrete_shape


def round_bfloat16(a: np.ndarray) -> np.ndarray:
    """float values rounded to the nearest bfloat16 (ties to even), as float32."""
    return from_bfloat16_bits(to_bfloat16_bits(np.asarray(a, dtype=np.float32))).reshape(np.shape(a))


def to_storage(a: np.ndarray, dtype: DType) -> np.ndarray:
    """Host data as a `dtype` buffer's storage: a new read-only 1-D C-contiguous array."""
    if dtype is dtypes.bfloat16:
        out = np.ascontiguousarray(to_bfloat16_bits(np.asarray(a, dtype=np.float32)).reshape(-1))
    else:
        out = np.array(a, dtype=storage_dtype(dtype), order="C", copy=True).reshape(-1)
    out.setflags(write=False)  # inputs are never written; a kernel that tried would be caught at launch
    return out


def new_buffer(data: np.ndarray, dtype: DType, device: str) -> UOp:
    """A fresh BUFFER of data's shape holding `data` converted to `dtype`. On a device with its own memory (a GPU)
    the data is copied there now, into a buffer the device allocates."""
    from devices import get_device

    buf = registry.new_buffer(dtype, tuple(int(d) for d in np.shape(data)), device)
    host = to_storage(data, dtype)
    dev = get_device(device)
    if getattr(dev, "device_memory", False):
        storage = dev.alloc(host.size, dtype)
        storage[:] = host
        registry.store(buf, storage, owner=dev)
    else:
        registry.store(buf, host)
    return buf


def has_data(buf: UOp) -> bool:
    return buf.op is Ops.BUFFER and registry.has_data(buf)


def host_array(buf: UOp) -> np.ndarray:
    """A new host array of the buffer's shape (bfloat16 as float32)."""
    raw = np.asarray(registry.lookup(buf))
    shape = concrete_shape(buf.shape, "numpy")  # a symbolic shape at its variables' bound values
    n = int(np.prod(shape, dtype=np.int64))
    flat = raw.reshape(-1)[:n]
    if buf.dtype is dtypes.bfloat16:
        return from_bfloat16_bits(flat).reshape(shape)
    return np.array(flat, dtype=np_dtype(buf.dtype), copy=True).reshape(shape)


def inputs_of(root: UOp) -> dict[UOp, np.ndarray]:
    """Every BUFFER under `root` that has data, with its host array (the reference evaluator's inputs)."""
    return {u: host_array(u) for u in root.toposort() if u.op is Ops.BUFFER and registry.has_data(u)}


__all__ = ["has_data", "host_array", "inputs_of", "new_buffer", "round_bfloat16", "to_storage"]
