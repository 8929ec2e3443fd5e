"""Host memory shared by the CPU-side devices: numpy storage per dtype, a pooled allocator, launch checks.

Buffers are 1-D numpy arrays. numpy has no bfloat16, so a bfloat16 buffer is stored as uint16 holding the
raw bits (`to_bfloat16_bits` / `from_bfloat16_bits` convert); `index` buffers are int64.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import mmap
import os
import struct
import sys
import threading
import weakref

import numpy as np

from devices.linear import buffer_arg, const_value
from rewrite.dtype import DType, dtypes
from rewrite.env import env_keys, getenv, unset
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
    """bfloat16 bits as a Python float. A nan is built bit by bit, its sign and payload kept where the float64 keeps
    a float32's (a signaling one stays signaling: C's float -> double, which struct would use, quiets it)."""
    if bits & 0x7F80 == 0x7F80 and bits & 0x7F:
        return struct.unpack("<d", struct.pack("<Q", (bits & 0x8000) << 48 | 0x7FF << 52 | (bits & 0x7F) << 45))[0]
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def bf16_encode(v: float) -> int:
    """The bits of a value that is exactly a bfloat16 (as the reference computes them); a nan keeps its sign and
    the top of its payload, bf16_decode's inverse (a nan with none there comes out quiet, as C's cast gives)."""
    if v != v:
        b = struct.unpack("<Q", struct.pack("<d", v))[0]
        return (b >> 48 & 0x8000) | 0x7F80 | (b >> 45 & 0x7F or 0x40)
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


HUGE = 2 << 20  # a transparent huge page (x86-64 and most aarch64 kernels)
MIN_CAP, MAX_CAP = 64 << 20, 4 << 30


def default_cap() -> int:
    """Bytes of freed buffers an Allocator keeps for reuse: 1/16 of this machine's memory, clamped to 64 MiB..4 GiB
    (enough for a training step's activations to come back every step, little enough never to matter)."""
    return max(MIN_CAP, min(MAX_CAP, physical_memory() // 16))


_SANITIZE = env_keys("SANITIZE")
_MAP_FLAGS = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", getattr(mmap, "MAP_ANON", 0))
_ALLOCATORS: weakref.WeakSet[Allocator] = weakref.WeakSet()


@atexit.register
def _trim_all() -> None:  # at interpreter exit: the pools' memory goes back before module teardown starts
    for a in list(_ALLOCATORS):
        a.trim()


class _Block:
    """One allocation: `owner` is the ndarray that holds the memory (every numpy view of the block's arrays names
    it as its base, so its reference count tells whether anything outside the pool still sees the memory), `raw`
    the aligned bytes handed out (as a view of a dtype)."""

    __slots__ = ("owner", "raw")

    def __init__(self, owner: np.ndarray, raw: np.ndarray) -> None:
        self.owner, self.raw = owner, raw


# sys.getrefcount(block.owner) when only the pool sees the block: the _Block's slot, `raw`'s base (or, when `raw`
# is the owner itself, the _Block's second slot) and getrefcount's own argument
_UNSEEN = 3


class Allocator:
    """Aligned 1-D arrays with freed ones reused. `free(arr)` hands an array back: its block goes into a pool (at
    most `cap` bytes, default `default_cap()`; the least recently freed leave first) and a later `alloc` of the
    same byte size (any dtype) takes it -- but only once nothing else references the memory: a numpy view of a
    result, a tensor still holding it under another slot or the caller's own `arr` keep a block out of reuse
    (reference counts of the block's owning array), so memory someone can still read is never overwritten.
    Blocks of HUGE bytes or more are anonymous mmaps aligned to HUGE and advised MADV_HUGEPAGE where the platform
    has it (a fresh 64 MiB output then faults in 32 times instead of 16,384); smaller ones are 64-byte aligned.
    An allocation that fails (MemoryError) trims the pool and tries once more; the pool is trimmed at interpreter
    exit. Under SANITIZE an array is allocated at exactly its size (no alignment slack, no reuse), so
    AddressSanitizer catches a kernel reading or writing past its end."""

    def __init__(self, cap: int | None = None) -> None:
        self.cap = default_cap() if cap is None else cap
        self._pool: collections.OrderedDict[int, _Block] = collections.OrderedDict()  # id(block) -> block, LRU first
        self._by_size: dict[int, list[_Block]] = {}
        self._pooled = 0
        # id(array handed out) -> (a weak reference to it, its block): an array dropped without `free` leaves its
        # entry, and its id may then be another object's, which the weak reference tells apart
        self._live: dict[int, tuple[weakref.ref, _Block]] = {}
        self.fresh = 0  # allocations that took new memory (not a pooled block): the benchmarks report them
        self.reused = 0
        # the pool changes only under `_lock`. A free can arrive while it is held -- from another thread, or from a
        # finalizer (a buffer's UOp collected) run in the middle of alloc's own code -- so a free only queues its
        # block in `_returned` (list.append is atomic) and whoever holds or next takes the lock pools it
        self._lock = threading.Lock()
        self._returned: list[_Block] = []
        _ALLOCATORS.add(self)

    @property
    def limit(self) -> int:  # the earlier name of `cap`
        return self.cap

    @property
    def pooled_bytes(self) -> int:
        self._settle()
        return self._pooled

    def alloc(self, count: int, dtype: DType) -> np.ndarray:
        """An uninitialized 1-D array of `count` elements of `dtype` (its numpy storage dtype)."""
        npdt = np_dtype(dtype)
        if not isinstance(count, (int, np.integer)) or count < 0:
            raise DeviceError(f"alloc: count must be an int >= 0, got {count!r}")
        nbytes = int(count) * npdt.itemsize
        if nbytes > physical_memory():
            raise OutOfMemoryError(f"alloc: {count} elements of {dtype.name} need {nbytes} bytes, more than this "
                                   f"machine's memory ({physical_memory()} bytes); use a smaller shape")
        with self._lock:
            self._pool_returned()
            block = self._take(nbytes)
        self._settle()
        if block is None:
            try:
                block = self._new(nbytes)
            except MemoryError:
                self.trim()
                try:
                    block = self._new(nbytes)
                except MemoryError:
                    raise OutOfMemoryError(f"alloc: {count} elements of {dtype.name} ({nbytes} bytes) do not fit in "
                                           f"the memory available now; free tensors or use a smaller shape") from None
            self.fresh += 1
        else:
            self.reused += 1
        arr = block.raw.view(npdt)
        self._live[id(arr)] = (weakref.ref(arr), block)
        return arr

    def _take(self, nbytes: int) -> _Block | None:
        """A pooled block of `nbytes` that nothing outside the pool references, removed from the pool."""
        blocks = self._by_size.get(nbytes)
        if not blocks:
            return None
        for i in range(len(blocks) - 1, -1, -1):  # the most recently freed first: the likeliest still in cache
            if sys.getrefcount(blocks[i].owner) <= _UNSEEN:
                block = blocks.pop(i)
                if not blocks:
                    del self._by_size[nbytes]
                del self._pool[id(block)]
                self._pooled -= nbytes
                return block
        return None

    @staticmethod
    def _new(nbytes: int) -> _Block:
        if getenv("SANITIZE"):  # exact size: the byte after the end is the sanitizer's red zone
            raw = np.empty(nbytes, dtype=np.uint8)
            return _Block(raw, raw)
        if nbytes >= HUGE:
            # an anonymous map one huge page longer, cut at a huge-page boundary: the kernel can back it with huge
            # pages (fewer faults and TLB misses); the slack is address space only, never touched
            # (private: a shared anonymous map is shmem, which gets no transparent huge pages)
            mm = mmap.mmap(-1, nbytes + HUGE, flags=_MAP_FLAGS)
            owner = np.frombuffer(mm, dtype=np.uint8)
            off = -owner.ctypes.data % HUGE
            if hasattr(mmap, "MADV_HUGEPAGE"):
                with contextlib.suppress(OSError):
                    mm.madvise(mmap.MADV_HUGEPAGE)
            return _Block(owner, owner[off:off + nbytes])
        owner = np.empty(nbytes + ALIGN, dtype=np.uint8)
        off = -owner.ctypes.data % ALIGN
        return _Block(owner, owner[off:off + nbytes])

    def free(self, arr: np.ndarray) -> None:
        """Hand `arr` back. Its memory is reused only once nothing references it any more (the caller's `arr`
        included)."""
        ref, block = self._live.get(id(arr), (None, None))
        if block is None or ref is None or ref() is not arr:
            raise DeviceError("free: this array did not come from alloc, or was freed already")
        del self._live[id(arr)]
        if not unset(_SANITIZE) and getenv("SANITIZE"):  # a replay frees dozens: the knob's fast check first
            return
        self._returned.append(block)
        self._settle()

    def _settle(self) -> None:
        """Pool the returned blocks, unless the lock is held (its holder, or the next alloc, does it)."""
        while self._returned and self._lock.acquire(blocking=False):
            try:
                self._pool_returned()
            finally:
                self._lock.release()

    def _pool_returned(self) -> None:
        while self._returned:
            block = self._returned.pop()
            nbytes = block.raw.nbytes
            if nbytes > self.cap:
                continue
            self._pool[id(block)] = block
            self._by_size.setdefault(nbytes, []).append(block)
            self._pooled += nbytes
            while self._pooled > self.cap and self._pool:
                self._drop(next(iter(self._pool.values())))

    def _drop(self, block: _Block) -> None:
        del self._pool[id(block)]
        nbytes = block.raw.nbytes
        blocks = self._by_size[nbytes]
        blocks.remove(block)
        if not blocks:
            del self._by_size[nbytes]
        self._pooled -= nbytes

    def trim(self, keep: int = 0) -> None:
        """Let go of pooled blocks, least recently freed first, until at most `keep` bytes are pooled (memory that
        something still references is released once that lets go of it)."""
        with self._lock:
            self._pool_returned()
            while self._pooled > keep and self._pool:
                self._drop(next(iter(self._pool.values())))

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


BufferSpec = tuple[int, UOp, np.dtype, int, bool]  # slot, BUFFER, numpy dtype, constant size (-1: symbolic), stored


def buffer_specs(buffers: dict[int, UOp], stored: set[int]) -> tuple[BufferSpec, ...]:
    """What check_specs checks each GLOBAL slot against, worked out once per kernel (not at every launch)."""
    out = []
    for slot, buf in buffers.items():
        n = buf.shape[0]
        out.append((slot, buf, np_dtype(buf.dtype), n if isinstance(n, int) else -1, slot in stored))
    return tuple(out)


def check_buffers(buffers: dict[int, UOp], given: dict[int, np.ndarray], var_vals: dict[str, int],
                  stored: set[int], kernel: str) -> tuple[list[np.ndarray], list[int]]:
    """The arrays for the GLOBAL slots in slot order and their addresses, each checked: present, 1-D
    C-contiguous, the slot's numpy dtype, at least the slot's size, writable if stored to, and not starting at
    the same address as another slot (the C kernel's pointers are `restrict`)."""
    return check_specs(buffer_specs(buffers, stored), given, var_vals, kernel)


def check_specs(specs: tuple[BufferSpec, ...], given: dict[int, np.ndarray], var_vals: dict[str, int],
                kernel: str) -> tuple[list[np.ndarray], list[int]]:
    """check_buffers with the slots' facts from buffer_specs (a launch's fast path)."""
    out, ptrs = [], []
    seen: dict[int, int] = {}
    for slot, buf, want, n, is_stored in specs:
        arr = given.get(slot)
        if arr is None:
            raise DeviceError(f"kernel {kernel!r}: no array for buffer slot {slot} "
                              f"({buf.dtype.name}[{buf.shape[0]}]); got slots {sorted(given)}")
        if not isinstance(arr, np.ndarray):
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} must be a numpy array, got {type(arr).__name__}")
        if arr.dtype != want:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} has dtype {arr.dtype}, the kernel reads "
                              f"{buf.dtype.name} (numpy {want})")
        if n < 0:
            n = size_of(buf, var_vals)
        if arr.size < n:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} has {arr.size} elements, the kernel needs {n}")
        flags = arr.flags
        if arr.ndim != 1 or not flags.c_contiguous:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} must be a 1-D C-contiguous array, got shape "
                              f"{arr.shape} strides {arr.strides}")
        if is_stored and not flags.writeable:
            raise DeviceError(f"kernel {kernel!r}: buffer slot {slot} is written but the array is read-only")
        ptr = arr.ctypes.data  # costs about a microsecond: read it once
        if n and (other := seen.get(ptr)) is not None:
            raise DeviceError(f"kernel {kernel!r}: buffer slots {other} and {slot} are the same memory; a kernel's "
                              f"buffers must not alias")
        seen[ptr] = slot
        out.append(arr)
        ptrs.append(ptr)
    return out, ptrs
