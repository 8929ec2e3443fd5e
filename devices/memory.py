"""Host memory shared by the CPU-side devices: numpy storage per dtype, a pooled allocator, launch checks.

Buffers are 1-D numpy arrays. numpy has no bfloat16, so a bfloat16 buffer is stored as uint16 holding the
raw bits (`to_bfloat16_bits` / `from_bfloat16_bits` convert); `index` buffers are int64.
"""

from __future__ import annotations

import collections
import os
import struct

import numpy as np

from devices.linear import buffer_arg, const_value
from rewrite.dtype import DType, dtypes
from rewrite.env import getenv
from rewrite.errors import DeviceError, EvalError, OutOfMemoryError
from rewrite.ops import Ops
from rewrite.uop import ConstValue, UOp

_NP: dict[DType, np.dtype] = {
    dtypes.bool: np.dtype(np.bool_), dtypes.int8: np.dtype(np.int8), dtypes.uint8: np.dtype(np.uint8),
    dtypes.int16: np.dtype(np.int16), dtypes.uint16: np.dtype(np.uint16), dtypes.int32: np.dtype(np.int32),
    dtypes.uint32: np.dtype(np.uint32), dtypes.int64: np.dtype(np.int64), dtypes.uint64: np.dtype(np.uint64),
    dtypes.float16: np.dtype(np.float16), dtypes.bfloat16: np.dtype(np.uint16), dtypes.float32: np.dtype(np.float32),
    dtypes.float64: np.dtype(np.float64), dtypes.index: np.dtype(np.int64),
}
ALIGN = 64


def np_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype that stores elements of `dtype` (bfloat16: uint16 bits; index: int64)."""
    try:
        return _NP[dtype.scalar]
    except KeyError:
        raise DeviceError(f"{dtype.name} has no buffer storage") from None


def to_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """float values -> uint16 bfloat16 bits, rounded as rewrite.semantics does (to float32, then RNE)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def from_bfloat16_bits(a: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bits -> float32 values (exact)."""
    return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def bf16_decode(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def bf16_encode(v: float) -> int:
    """The bits of a value that is exactly a bfloat16 (as the reference computes them)."""
    return struct.unpack("<I", struct.pack("<f", v))[0] >> 16


def physical_memory() -> int:
    """This machine's memory in bytes (no allocation can be larger); a huge number where it cannot be read."""
    if not _PHYS:
        try:
            _PHYS.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        except (AttributeError, OSError, ValueError):
            _PHYS.append(1 << 62)
    return _PHYS[0]


_PHYS: list[int] = []


class Allocator:
    """64-byte aligned 1-D arrays from a pool: `free` returns an array for reuse by a later `alloc` of the same
    byte size (any dtype). The caller must drop its references to a freed array; the pool keeps at most
    `limit` bytes, the oldest freed first out. Under SANITIZE an array is allocated at exactly its size (no
    alignment slack), so AddressSanitizer catches a kernel reading or writing past its end."""

    def __init__(self, limit: int = 1 << 30) -> None:
        self.limit = limit
        self._pool: collections.OrderedDict[int, list[np.ndarray]] = collections.OrderedDict()
        self._pooled = 0
        self._live: dict[int, np.ndarray] = {}  # id(array handed out) -> its raw aligned bytes

    def alloc(self, count: int, dtype: DType) -> np.ndarray:
        """An uninitialized 1-D array of `count` elements of `dtype` (its numpy storage dtype)."""
        npdt = np_dtype(dtype)
        if not isinstance(count, (int, np.integer)) or count < 0:
            raise DeviceError(f"alloc: count must be an int >= 0, got {count!r}")
        nbytes = int(count) * npdt.itemsize
        if nbytes > physical_memory():
            raise OutOfMemoryError(f"alloc: {count} elements of {dtype.name} need {nbytes} bytes, more than this "
                                   f"machine's memory ({physical_memory()} bytes); use a smaller shape")
        raws = self._pool.get(nbytes)
        if raws:
            raw = raws.pop()
            self._pooled -= nbytes
            if not raws:
                del self._pool[nbytes]
        else:
            try:
                if getenv("SANITIZE"):  # exact size: the byte after the end is the sanitizer's red zone
                    raw = np.empty(nbytes, dtype=np.uint8)
                else:
                    backing = np.empty(nbytes + ALIGN, dtype=np.uint8)
                    off = -backing.ctypes.data % ALIGN
                    raw = backing[off:off + nbytes]
            except MemoryError:
                raise OutOfMemoryError(f"alloc: {count} elements of {dtype.name} ({nbytes} bytes) do not fit in the "
                                       f"memory available now; free tensors or use a smaller shape") from None
        arr = raw.view(npdt)
        self._live[id(arr)] = raw
        return arr

    def free(self, arr: np.ndarray) -> None:
        raw = self._live.pop(id(arr), None)
        if raw is None:
            raise DeviceError("free: this array did not come from alloc, or was freed already")
        self._pool.setdefault(raw.nbytes, []).append(raw)
        self._pool.move_to_end(raw.nbytes)
        self._pooled += raw.nbytes
        while self._pooled > self.limit and self._pool:
            nbytes, raws = next(iter(self._pool.items()))
            raws.pop(0)
            self._pooled -= nbytes
            if not raws:
                del self._pool[nbytes]

    @staticmethod
    def copyin(dst: np.ndarray, src: np.ndarray) -> None:
        """Copy `src` (any shape, same numpy dtype and element count) into the 1-D buffer `dst`."""
        s = np.asarray(src)
        if s.dtype != dst.dtype or s.size != dst.size:
            raise DeviceError(f"copyin: source {s.dtype}[{s.size}] does not fit buffer {dst.dtype}[{dst.size}]; "
                              f"convert first (bfloat16 buffers hold uint16 bits: to_bfloat16_bits)")
        np.copyto(dst, s.reshape(-1))

    @staticmethod
    def copyout(arr: np.ndarray) -> np.ndarray:
        return np.array(arr, copy=True)


def size_of(buf: UOp, var_vals: dict[str, int]) -> int:
    """The element count of a BUFFER, evaluating a symbolic size with the launch's variables."""
    n = buf.shape[0]
    if isinstance(n, int):
        return n
    try:
        env: dict[str, ConstValue] = dict(var_vals)
        return int(n.evaluate(env))
    except EvalError as e:
        raise DeviceError(f"buffer slot {buffer_arg(buf).slot}: cannot size it: {e}") from None


def check_vars(variables: dict[str, UOp], var_vals: dict[str, int] | None, kernel: str) -> list[int]:
    """The variables' values in name order, checked for presence and against their bounds."""
    vv = var_vals or {}
    out = []
    for name, p in variables.items():
        if name not in vv:
            raise DeviceError(f"kernel {kernel!r}: variable {name!r} has no value; pass var_vals={{{name!r}: ...}}")
        v = vv[name]
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise DeviceError(f"kernel {kernel!r}: variable {name!r} must be an int, got {v!r}")
        bounds = [const_value(s) if s.op is Ops.CONST else None for s in p.src[1:3]] + [None, None]
        lo, hi = bounds[0], bounds[1]
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise DeviceError(f"kernel {kernel!r}: variable {name!r} = {v} is outside its range [{lo}, {hi}]")
        out.append(int(v))
    return out


def check_buffers(buffers: dict[int, UOp], given: dict[int, np.ndarray], var_vals: dict[str, int],
                  stored: set[int], kernel: str) -> tuple[list[np.ndarray], list[int]]:
    """The arrays for the GLOBAL slots in slot order and their addresses, each checked: present, 1-D
    C-contiguous, the slot's numpy dtype, at least the slot's size, writable if stored to, and not starting at
    the same address as another slot (the C kernel's pointers are `restrict`)."""
    out, ptrs = [], []
    seen: dict[int, int] = {}
    for slot, buf in buffers.items():
        arr = given.get(slot)
        if arr is None:
            raise DeviceError(f"kernel {kernel!r}: no array for buffer slot {slot} "
                              f"({buf.dtype.name}[{buf.shape[0]}]); got slots {sorted(given)}")
        if not isinstance(arr, np.ndarray):
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} must be a numpy array, got {type(arr).__name__}")
        want = np_dtype(buf.dtype)
        if arr.dtype != want:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} has dtype {arr.dtype}, the kernel reads "
                              f"{buf.dtype.name} (numpy {want})")
        n = size_of(buf, var_vals)
        if arr.size < n:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} has {arr.size} elements, the kernel needs {n}")
        if arr.ndim != 1 or not arr.flags.c_contiguous:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} must be a 1-D C-contiguous array, got shape "
                              f"{arr.shape} strides {arr.strides}")
        if slot in stored and not arr.flags.writeable:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} is written but the array is read-only")
        ptr = arr.ctypes.data  # costs about a microsecond: read it once
        if n and (other := seen.get(ptr)) is not None:
            raise DeviceError(f"kernel {kernel!r}: buffer slots {other} and {slot} are the same memory; a kernel's "
                              f"buffers must not alias")
        seen[ptr] = slot
        out.append(arr)
        ptrs.append(ptr)
    return out, ptrs
