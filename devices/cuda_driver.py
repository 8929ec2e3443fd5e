"""The CUDA driver API through ctypes on libcuda.so.1: just the calls the cuda device makes.

`Driver()` loads the library, calls cuInit and makes device `ordinal`'s primary context current. Every call goes
through `check`, which turns a CUresult other than CUDA_SUCCESS into a CudaError naming the driver function and
cuGetErrorName's name for the code (CUDA_ERROR_OUT_OF_MEMORY becomes an OutOfMemoryError too). No driver
library, a failing cuInit (no GPU, or a driver that is too old) or no device at `ordinal` is a DeviceError that
says so; nothing here crashes the process on a machine without a GPU.

Work goes to one stream per device, created at start: copies and launches on it run in order; `synchronize`
waits for it. Host-to-device copies from pageable numpy memory return once the source has been read (the driver
stages it), so the caller may reuse the array; device-to-host copies wait for earlier work on the stream.
"""

from __future__ import annotations

import ctypes
import threading

from rewrite.errors import CudaError, DeviceError, OutOfMemoryError

# CUdevice_attribute values (cuda.h)
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
ATTR_L2_CACHE_SIZE = 38
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_OUT_OF_MEMORY = 2
_NO_DEVICE = 100

_ptr = ctypes.c_void_p
_dptr = ctypes.c_uint64
_size = ctypes.c_size_t
_int = ctypes.c_int
_uint = ctypes.c_uint
_u64s, _u32s = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)

# name -> argument types (every function returns a CUresult, an int)
_SIGNATURES: dict[str, tuple] = {
    "cuInit": (_uint,),
    "cuDriverGetVersion": (ctypes.POINTER(_int),),
    "cuDeviceGetCount": (ctypes.POINTER(_int),),
    "cuDeviceGet": (ctypes.POINTER(_int), _int),
    "cuDeviceGetName": (ctypes.c_char_p, _int, _int),
    "cuDeviceGetAttribute": (ctypes.POINTER(_int), _int, _int),
    "cuDeviceTotalMem_v2": (ctypes.POINTER(_size), _int),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(_ptr), _int),
    "cuCtxSetCurrent": (_ptr,),
    "cuCtxSynchronize": (),
    "cuStreamCreate": (ctypes.POINTER(_ptr), _uint),
    "cuStreamSynchronize": (_ptr,),
    "cuMemAlloc_v2": (ctypes.POINTER(_dptr), _size),
    "cuMemFree_v2": (_dptr,),
    "cuMemGetInfo_v2": (ctypes.POINTER(_size), ctypes.POINTER(_size)),
    "cuMemcpyHtoDAsync_v2": (_dptr, _ptr, _size, _ptr),
    "cuMemcpyDtoHAsync_v2": (_ptr, _dptr, _size, _ptr),
    "cuMemcpyDtoDAsync_v2": (_dptr, _dptr, _size, _ptr),
    "cuMemsetD8Async": (_dptr, ctypes.c_ubyte, _size, _ptr),
    "cuModuleLoadData": (ctypes.POINTER(_ptr), ctypes.c_char_p),
    "cuModuleUnload": (_ptr,),
    "cuModuleGetFunction": (ctypes.POINTER(_ptr), _ptr, ctypes.c_char_p),
    "cuFuncSetAttribute": (_ptr, _int, _int),
    "cuLaunchKernel": (_ptr, _uint, _uint, _uint, _uint, _uint, _uint, _uint, _ptr, ctypes.POINTER(_ptr), _ptr),
    "cuEventCreate": (ctypes.POINTER(_ptr), _uint),
    "cuEventRecord": (_ptr, _ptr),
    "cuEventSynchronize": (_ptr,),
    "cuEventElapsedTime": (ctypes.POINTER(ctypes.c_float), _ptr, _ptr),
    "cuEventDestroy_v2": (_ptr,),
    "cuTensorMapEncodeTiled": (_ptr, _int, _uint, _ptr, _u64s, _u64s, _u32s, _u32s, _int, _int, _int, _int),
}


def _load_library() -> ctypes.CDLL:
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise DeviceError(f"cuda: the CUDA driver library libcuda.so.1 cannot be loaded ({e}); this machine has no "
                          f"NVIDIA driver. Use the cpu device, or install the driver") from None


class Driver:
    """The driver of one GPU: its primary context, one stream, and checked calls."""

    def __init__(self, ordinal: int = 0) -> None:
        self.lib = _load_library()
        self._fns: dict[str, ctypes._CFuncPtr] = {}  # type: ignore[name-defined]
        self._lock = threading.Lock()
        self._local = threading.local()  # .current: this thread has made the context current
        self.ctx: ctypes.c_void_p | None = None
        try:
            self.call("cuInit", 0)
        except CudaError as e:
            raise DeviceError(f"cuda: the driver does not start (cuInit: {e.name}); no usable GPU here") from None
        n = _int()
        self.call("cuDeviceGetCount", ctypes.byref(n))
        if not 0 <= ordinal < n.value:
            raise DeviceError(f"cuda: no GPU {ordinal} (the driver sees {n.value}); use cuda:0..{n.value - 1}"
                              if n.value else "cuda: the driver sees no GPU on this machine")
        dev = _int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        self.device = dev.value
        ctx = _ptr()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), self.device)
        self.ctx = ctx
        self.stream = _ptr()
        self.call("cuStreamCreate", ctypes.byref(self.stream), 0)
        name = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", name, 256, self.device)
        self.name = name.value.decode(errors="replace")

    def fn(self, name: str) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
        f = self._fns.get(name)
        if f is None:
            try:
                f = getattr(self.lib, name)
            except AttributeError:
                raise DeviceError(f"cuda: the driver has no {name}; it is too old for this device module") from None
            f.argtypes, f.restype = list(_SIGNATURES[name]), _int
            self._fns[name] = f
        return f

    def error_name(self, code: int) -> str:
        s = ctypes.c_char_p()
        try:
            f = self.lib.cuGetErrorName
            f.argtypes, f.restype = [_int, ctypes.POINTER(ctypes.c_char_p)], _int
            if f(code, ctypes.byref(s)) == 0 and s.value:
                return s.value.decode()
        except AttributeError:
            pass
        return f"CUresult {code}"

    def call(self, name: str, *args: object) -> None:
        """Call driver function `name`; CudaError (OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY) when it fails.

        The CUDA driver's current context is per thread: realize runs each device's steps on a thread of its own
        (lower.parallel.run_steps), so the first call a thread makes once the context exists makes it current
        there (without it the driver answers CUDA_ERROR_INVALID_CONTEXT)."""
        if self.ctx is not None and not getattr(self._local, "current", False):
            self._local.current = True
            self._check("cuCtxSetCurrent", self.fn("cuCtxSetCurrent")(self.ctx))
        self._check(name, self.fn(name)(*args))

    def _check(self, name: str, code: int) -> None:
        if code != 0:
            err = self.error_name(code)
            msg = f"cuda: {name} failed: {err} ({code})"
            if code == _OUT_OF_MEMORY:
                raise _CudaOutOfMemory(msg + "; free tensors or use smaller shapes", name, code, err)
            raise CudaError(msg, name, code, err)

    def attribute(self, attr: int) -> int:
        v = _int()
        self.call("cuDeviceGetAttribute", ctypes.byref(v), attr, self.device)
        return v.value

    def compute_capability(self) -> tuple[int, int]:
        return self.attribute(ATTR_COMPUTE_CAPABILITY_MAJOR), self.attribute(ATTR_COMPUTE_CAPABILITY_MINOR)

    def version(self) -> int:
        v = _int()
        self.call("cuDriverGetVersion", ctypes.byref(v))
        return v.value

    # memory
    def alloc(self, nbytes: int) -> int:
        p = _dptr()
        self.call("cuMemAlloc_v2", ctypes.byref(p), max(1, nbytes))
        return int(p.value or 0)

    def free(self, ptr: int) -> None:
        self.call("cuMemFree_v2", ptr)

    def htod(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.call("cuMemcpyHtoDAsync_v2", dst, src, nbytes, self.stream)

    def dtoh(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.call("cuMemcpyDtoHAsync_v2", dst, src, nbytes, self.stream)
            self.synchronize()

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes:
            self.call("cuMemcpyDtoDAsync_v2", dst, src, nbytes, self.stream)

    def memset(self, dst: int, byte: int, nbytes: int) -> None:
        if nbytes:
            self.call("cuMemsetD8Async", dst, byte, nbytes, self.stream)

    def synchronize(self) -> None:
        self.call("cuStreamSynchronize", self.stream)

    # code
    def load_module(self, image: bytes) -> ctypes.c_void_p:
        m = _ptr()
        self.call("cuModuleLoadData", ctypes.byref(m), image)
        return m

    def function(self, module: ctypes.c_void_p, name: str) -> ctypes.c_void_p:
        f = _ptr()
        self.call("cuModuleGetFunction", ctypes.byref(f), module, name.encode())
        return f

    def launch(self, fn: ctypes.c_void_p, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int,
               params: ctypes.Array) -> None:
        self.call("cuLaunchKernel", fn, *grid, *block, smem, self.stream, params, None)

    def tensor_map(self, args: tuple) -> ctypes.Array:
        """A 128-byte CUtensorMap (64-byte aligned) made by cuTensorMapEncodeTiled from its other arguments
        (devices.tma.TensorMap.encode_args): what a kernel's `const __grid_constant__` tensor-map parameter gets."""
        dtype, rank, addr, dims, strides, box, steps, interleave, swizzle, l2, oob = args
        raw = (ctypes.c_uint64 * 24)()  # 192 bytes: a 64-aligned 128-byte window inside
        off = (-ctypes.addressof(raw)) % 64 // 8
        window = (ctypes.c_uint64 * 16).from_buffer(raw, off * 8)
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        self.call("cuTensorMapEncodeTiled", ctypes.addressof(window), dtype, rank, addr, (u64 * rank)(*dims),
                  (u64 * max(1, rank - 1))(*strides), (u32 * rank)(*box), (u32 * rank)(*steps), interleave, swizzle,
                  l2, oob)
        window._owner = raw  # type: ignore[attr-defined]  # keeps the storage alive with the window
        return window

    # timing
    def event(self) -> ctypes.c_void_p:
        e = _ptr()
        self.call("cuEventCreate", ctypes.byref(e), 0)
        return e

    def record(self, e: ctypes.c_void_p) -> None:
        self.call("cuEventRecord", e, self.stream)

    def elapsed_ms(self, start: ctypes.c_void_p, end: ctypes.c_void_p) -> float:
        self.call("cuEventSynchronize", end)
        ms = ctypes.c_float()
        self.call("cuEventElapsedTime", ctypes.byref(ms), start, end)
        return float(ms.value)

    def destroy_event(self, e: ctypes.c_void_p) -> None:
        self.call("cuEventDestroy_v2", e)


class _CudaOutOfMemory(CudaError, OutOfMemoryError):
    """CUDA_ERROR_OUT_OF_MEMORY: both a failed driver call and an out-of-memory error."""


__all__ = ["ATTR_L2_CACHE_SIZE", "ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "ATTR_MULTIPROCESSOR_COUNT",
           "FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", "Driver"]
