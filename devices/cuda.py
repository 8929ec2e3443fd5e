"""The CUDA device: LINEAR programs rendered to CUDA C (devices.cuda_render), compiled to a cubin by NVRTC or nvcc
(devices.cuda_compile: NVRTC where its library loads, else nvcc; the CUDA_COMPILER knob picks one), loaded and
launched through the driver API (devices.cuda_driver).

Compiling needs no GPU: CI compiles every GPU-shaped kernel. The cubin is kept on disk, keyed by the source, the
Target, the compiler's name, version and flags (devices.cuda_compile). `compile_batch` puts several kernels in
one .cu file (one compile) and one module.

Memory: a buffer is a `CudaBuffer` (a device pointer, its size in bytes, and the numpy dtype its elements have),
from a pool of freed allocations by byte size. It reads like the host arrays the rest of the system passes around
where that is needed: `buf[:] = x` copies a host array (or another CudaBuffer) in, `numpy.asarray(buf)` copies it
out, `buf.view(dtype)` reinterprets the elements. So realize, COPY and `Tensor.numpy()` move data with no cuda
special case.

Launch: `kernel({slot: buffer}, {name: int})`: CudaBuffers are passed as they are; a host numpy array is copied
in for the launch (and back when the kernel writes it), so every device takes the same arguments. The grid is the
bounds of the gidx SPECIALs, the block those of lidx (1 where absent). `kernel.time(...)` measures launches with
CUDA events.

No driver or no GPU: compiling still works; allocating, launching and `default_target()` raise DeviceError saying
so. `available()` tells (with the reason) without raising.
"""

from __future__ import annotations

import collections
import ctypes
import sys
import threading
from collections.abc import Sequence

import numpy as np

from devices.base import GPU_TARGET_NAMES, Target, gpu_target
from devices.c_scalar import unique_symbol
from devices.cuda_compile import NVCC, NVRTC, CudaCompiler, cuda_compiler
from devices.cuda_driver import (
    ATTR_MULTIPROCESSOR_COUNT,
    FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    Driver,
)
from devices.cuda_render import (
    CUDA_ALU_OPS,
    dynamic_shared,
    kernel_symbol,
    render_cuda_source,
    render_kernel,
    special_dim,
)
from devices.linear import Program, analyze, special_bound
from devices.memory import check_vars, np_dtype, size_of
from devices.tma import tensor_maps
from devices.toolrun import balanced_groups, host_cores
from rewrite.dtype import DType, dtypes
from rewrite.env import getenv, knob_bool
from rewrite.errors import CudaError, DeviceError, OutOfMemoryError
from rewrite.ops import Ops
from rewrite.uop import UOp

_CT = {
    dtypes.bool: ctypes.c_bool, dtypes.int8: ctypes.c_int8, dtypes.uint8: ctypes.c_uint8,
    dtypes.int16: ctypes.c_int16, dtypes.uint16: ctypes.c_uint16, dtypes.int32: ctypes.c_int32,
    dtypes.uint32: ctypes.c_uint32, dtypes.int64: ctypes.c_int64, dtypes.uint64: ctypes.c_uint64,
    dtypes.index: ctypes.c_longlong,
}


# ---------------------------------------------------------------- memory


class CudaBuffer:
    """`nbytes` of device memory at `ptr`, seen as elements of numpy dtype `dtype` (a view shares its base's
    memory). Copies: `buf[:] = host_array_or_buffer` in, `numpy.asarray(buf)` out."""

    __slots__ = ("__weakref__", "base", "device", "dtype", "nbytes", "ptr")

    def __init__(self, device: CudaDevice, ptr: int, nbytes: int, dtype: np.dtype,
                 base: CudaBuffer | None = None) -> None:
        self.device, self.ptr, self.nbytes, self.dtype, self.base = device, ptr, nbytes, np.dtype(dtype), base

    @property
    def size(self) -> int:
        return self.nbytes // self.dtype.itemsize

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    ndim = 1

    def view(self, dtype: object) -> CudaBuffer:
        dt = np.dtype(dtype)  # type: ignore[call-overload]
        if self.nbytes % dt.itemsize:
            raise DeviceError(f"cuda: a buffer of {self.nbytes} bytes cannot be viewed as {dt}")
        return CudaBuffer(self.device, self.ptr, self.nbytes, dt, self.base or self)

    def __len__(self) -> int:
        return self.size

    def __setitem__(self, key: object, value: object) -> None:
        if key != slice(None):
            raise DeviceError("cuda: a device buffer is written whole (buf[:] = data), not by element")
        drv = self.device.driver
        if isinstance(value, CudaBuffer):
            if value.nbytes < self.nbytes:
                raise DeviceError(f"cuda: copy of {value.nbytes} bytes into a buffer of {self.nbytes}")
            drv.dtod(self.ptr, value.ptr, self.nbytes)
            return
        src = np.ascontiguousarray(np.asarray(value), dtype=self.dtype).reshape(-1)
        if src.size != self.size:
            src = np.broadcast_to(src, (self.size,)).copy() if src.size == 1 else src
        if src.nbytes != self.nbytes:
            raise DeviceError(f"cuda: copy of {src.size} elements of {src.dtype} into a buffer of {self.size}")
        drv.htod(self.ptr, src.ctypes.data, self.nbytes)
        drv.synchronize()  # the host array may be freed as soon as this returns

    def numpy(self) -> np.ndarray:
        out = np.empty(self.size, dtype=self.dtype)
        self.device.driver.dtoh(out.ctypes.data, self.ptr, self.nbytes)
        return out

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        a = self.numpy()
        return a if dtype is None else a.astype(dtype)  # type: ignore[call-overload]

    def __repr__(self) -> str:
        return f"CudaBuffer({self.size} x {self.dtype} at 0x{self.ptr:x})"


class _Pool:
    """Freed device allocations by byte size, reused by later allocations; at most `limit` bytes kept."""

    def __init__(self, limit: int = 2 << 30) -> None:
        self.limit = limit
        self.free: collections.OrderedDict[int, list[int]] = collections.OrderedDict()
        self.held = 0


# ---------------------------------------------------------------- kernels


class CudaKernel:
    """A compiled kernel: `kernel({slot: buffer}, {name: value})`. `src` is its .cu file, `cubin` the binary
    (shared with the other kernels of its batch); the module is loaded on the GPU at the first launch."""

    def __init__(self, device: CudaDevice, prog: Program, symbol: str, src: str, cubin: bytes, target: Target
                 ) -> None:
        self.device, self.prog, self.name, self.symbol = device, prog, prog.name, symbol
        self.src, self.cubin, self.target = src, cubin, target
        self.dynamic_shared = dynamic_shared(prog)
        self.tmaps = tensor_maps(prog.instrs)[0]  # passed after the variables (devices.tma)
        self._fn: ctypes.c_void_p | None = None
        dims = {special_dim(n): sp for n, sp in prog.specials.items()}
        self._dims = [[dims.get((kind, a)) for a in range(3)] for kind in ("gidx", "lidx")]

    def binary(self) -> bytes:
        return self.cubin

    def function(self) -> ctypes.c_void_p:
        if self._fn is None:
            drv = self.device.driver
            module = self.device.module(self.cubin)
            fn = drv.function(module, self.symbol)
            if self.dynamic_shared:
                drv.call("cuFuncSetAttribute", fn, FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.dynamic_shared)
            self._fn = fn
        return self._fn

    def launch_dims(self, var_vals: dict[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid, block) for the launch: the SPECIAL bounds per axis, 1 where a kernel has no such SPECIAL."""
        grid, block = ([1 if sp is None else special_bound(sp, var_vals, self.name) for sp in row]
                       for row in self._dims)
        return (grid[0], grid[1], grid[2]), (block[0], block[1], block[2])

    def _args(self, buffers: dict[int, object], var_vals: dict[str, int]
              ) -> tuple[ctypes.Array, list[object], list[tuple[np.ndarray, CudaBuffer]]]:
        prog, dev = self.prog, self.device
        holders: list[object] = []
        back: list[tuple[np.ndarray, CudaBuffer]] = []
        temps: list[CudaBuffer] = []
        seen: dict[int, int] = {}
        ptrs: dict[int, int] = {}  # slot -> device address, for the tensor maps
        for slot, buf in prog.buffers.items():
            arr = buffers.get(slot)
            if arr is None:
                raise DeviceError(f"kernel {self.name!r}: no buffer for slot {slot} ({buf.dtype.name}"
                                  f"[{buf.shape[0]}]); got slots {sorted(buffers)}")
            want = np_dtype(buf.dtype)
            n = size_of(buf, var_vals)
            if isinstance(arr, np.ndarray):  # a host array: copied in for this launch (and out if written)
                if arr.dtype != want:
                    raise DeviceError(f"kernel {self.name!r}: buffer slot {slot} has dtype {arr.dtype}, the kernel "
                                      f"reads {buf.dtype.name} (numpy {want})")
                tmp = dev.alloc(arr.size, buf.dtype)
                temps.append(tmp)
                tmp[:] = arr
                if slot in prog.stored:
                    back.append((arr, tmp))
                arr = tmp
            if not isinstance(arr, CudaBuffer):
                raise DeviceError(f"kernel {self.name!r}: buffer slot {slot} must be a CudaBuffer or a numpy "
                                  f"array, got {type(arr).__name__}")
            if arr.dtype != want:
                raise DeviceError(f"kernel {self.name!r}: buffer slot {slot} holds {arr.dtype}, the kernel reads "
                                  f"{buf.dtype.name} (numpy {want})")
            if arr.size < n:
                raise DeviceError(f"kernel {self.name!r}: buffer slot {slot} has {arr.size} elements, the kernel "
                                  f"needs {n}")
            if n and (other := seen.get(arr.ptr)) is not None:
                raise DeviceError(f"kernel {self.name!r}: buffer slots {other} and {slot} are the same memory; a "
                                  f"kernel's buffers must not alias")
            seen[arr.ptr] = slot
            ptrs[slot] = arr.ptr
            holders.append(ctypes.c_uint64(arr.ptr))
        for p, v in zip(prog.variables.values(), check_vars(prog.variables, var_vals, self.name), strict=True):
            holders.append(_CT[p.dtype](v))
        for tm in self.tmaps:
            try:
                holders.append(dev.driver.tensor_map(tm.encode_args(ptrs[tm.slot])))
            except CudaError as e:
                raise DeviceError(f"kernel {self.name!r}: the tensor map of buffer slot {tm.slot} (dims {tm.dims}, "
                                  f"strides {tm.strides}, box {tm.box}) was refused: {e}") from e
        params = (ctypes.c_void_p * max(1, len(holders)))(*[ctypes.addressof(h) for h in holders])  # type: ignore[arg-type]
        return params, holders + temps, back

    def __call__(self, buffers: dict[int, object], var_vals: dict[str, int] | None = None) -> None:
        vv = var_vals or {}
        params, keep, back = self._args(buffers, vv)
        grid, block = self.launch_dims(vv)
        if 0 in grid or 0 in block:
            return
        fn = self.function()
        self.device.driver.launch(fn, grid, block, self.dynamic_shared, params)
        for arr, tmp in back:
            arr[:] = tmp.numpy()
        for t in keep:
            if isinstance(t, CudaBuffer):
                self.device.free(t)

    def time(self, buffers: dict[int, object], var_vals: dict[str, int] | None = None, reps: int = 10) -> float:
        """Milliseconds per launch, the mean over `reps` launches between two CUDA events (after one warm-up)."""
        vv = var_vals or {}
        params, keep, _ = self._args(buffers, vv)
        grid, block = self.launch_dims(vv)
        drv, fn = self.device.driver, self.function()
        drv.launch(fn, grid, block, self.dynamic_shared, params)
        start, end = drv.event(), drv.event()
        try:
            drv.record(start)
            for _ in range(reps):
                drv.launch(fn, grid, block, self.dynamic_shared, params)
            drv.record(end)
            ms = drv.elapsed_ms(start, end) / reps
        finally:
            drv.destroy_event(start)
            drv.destroy_event(end)
        del keep
        return ms


# ---------------------------------------------------------------- the device


# (LINEAR, symbol) -> (Program, kernel text, helpers) that render made, taken by the compile of the same kernel
_rendered: dict[tuple[UOp, str], tuple[Program, str, dict[str, str]]] = {}


class CudaDevice:
    """The `cuda` device: CUDA C compiled by nvcc, run through the driver API on GPU 0."""

    name = "cuda"
    supported_ops: frozenset[Ops] = CUDA_ALU_OPS | frozenset({Ops.CAST, Ops.BITCAST})
    decompose: frozenset[Ops] = frozenset()  # CUDA's math library has exp2f, log2f, sinf within a few ulp
    device_memory = True  # buffers live on the GPU (CudaBuffer), not in host arrays

    def __init__(self) -> None:
        self._driver: Driver | None = None
        self._driver_error: DeviceError | None = None
        self._targets: dict[bool, Target] = {}  # by ALLOW_TF32
        self._modules: dict[bytes, ctypes.c_void_p] = {}
        self._pool = _Pool()
        self._lock = threading.Lock()

    @property
    def compiler(self) -> CudaCompiler:
        """NVRTC or nvcc (devices.cuda_compile.cuda_compiler: the CUDA_COMPILER knob, else NVRTC where it loads)."""
        return cuda_compiler()

    # the GPU
    @property
    def driver(self) -> Driver:
        if self._driver is None:
            if self._driver_error is not None:
                raise self._driver_error
            try:
                self._driver = Driver(0)
            except DeviceError as e:
                self._driver_error = e
                raise
        return self._driver

    def available(self) -> tuple[bool, str]:
        """(True, the GPU's name) when a GPU can be used, else (False, why not)."""
        try:
            drv = self.driver
        except DeviceError as e:
            return False, str(e)
        return True, drv.name

    def default_target(self) -> Target:
        """The GPU's target: its compute capability and multiprocessor count, from the driver (the tf32 tensor
        cores only under ALLOW_TF32=1, devices.base.gpu_target)."""
        tf32 = knob_bool("ALLOW_TF32")
        if tf32 not in self._targets:
            drv = self.driver
            major, minor = drv.compute_capability()
            sm = f"sm_{major}{minor}"
            if sm not in GPU_TARGET_NAMES:
                raise DeviceError(f"cuda: the GPU {drv.name!r} is compute capability {major}.{minor}; lowering knows "
                                  f"{', '.join(GPU_TARGET_NAMES)}")
            self._targets[tf32] = gpu_target(sm, drv.attribute(ATTR_MULTIPROCESSOR_COUNT), tf32)
        return self._targets[tf32]

    def module(self, cubin: bytes) -> ctypes.c_void_p:
        with self._lock:
            m = self._modules.get(cubin)
            if m is None:
                m = self._modules[cubin] = self.driver.load_module(cubin)
            return m

    def synchronize(self) -> None:
        if self._driver is not None:
            self._driver.synchronize()

    # memory
    def alloc(self, count: int, dtype: DType) -> CudaBuffer:
        """An uninitialized device buffer of `count` elements of `dtype` (its numpy storage dtype)."""
        npdt = np_dtype(dtype)
        if not isinstance(count, (int, np.integer)) or count < 0:
            raise DeviceError(f"cuda alloc: count must be an int >= 0, got {count!r}")
        nbytes = int(count) * npdt.itemsize
        drv = self.driver
        with self._lock:
            ptrs = self._pool.free.get(nbytes)
            if ptrs:
                ptr = ptrs.pop()
                self._pool.held -= nbytes
                if not ptrs:
                    del self._pool.free[nbytes]
                return CudaBuffer(self, ptr, nbytes, npdt)
        try:
            ptr = drv.alloc(nbytes)
        except OutOfMemoryError:
            self.release_pool()
            ptr = drv.alloc(nbytes)
        return CudaBuffer(self, ptr, nbytes, npdt)

    def free(self, buf: CudaBuffer) -> None:
        """Give `buf` back (its memory goes to the pool for reuse); views cannot be freed, only their base."""
        if not isinstance(buf, CudaBuffer) or buf.base is not None:
            raise DeviceError("cuda free: this is not a buffer from alloc (or it is a view of one)")
        with self._lock:
            self._pool.free.setdefault(buf.nbytes, []).append(buf.ptr)
            self._pool.free.move_to_end(buf.nbytes)
            self._pool.held += buf.nbytes
            over = []
            while self._pool.held > self._pool.limit and self._pool.free:
                nbytes, ptrs = next(iter(self._pool.free.items()))
                over.append(ptrs.pop(0))
                self._pool.held -= nbytes
                if not ptrs:
                    del self._pool.free[nbytes]
        if over:
            self.synchronize()  # a queued kernel may still use the memory
        for p in over:
            self.driver.free(p)

    def release_pool(self) -> None:
        """Free every pooled allocation (after an out-of-memory error, or to hand memory back)."""
        with self._lock:
            ptrs = [p for ps in self._pool.free.values() for p in ps]
            self._pool.free.clear()
            self._pool.held = 0
        self.synchronize()
        for p in ptrs:
            self.driver.free(p)

    @staticmethod
    def copyin(dst: CudaBuffer, src: np.ndarray) -> None:
        dst[:] = src

    @staticmethod
    def copyout(buf: CudaBuffer) -> np.ndarray:
        return buf.numpy()

    @staticmethod
    def np_dtype(dtype: DType) -> np.dtype:
        return np_dtype(dtype)

    # code
    def render(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> str:
        """The .cu source of one kernel (the text is the same for every GPU; the architecture is a flag)."""
        sym = kernel_symbol(name)
        prog, func, helpers = self._function(linear, sym)
        if len(_rendered) >= 1024:
            del _rendered[next(iter(_rendered))]
        _rendered[(linear, sym)] = (prog, func, helpers)  # the pipeline's compile row comes next: rendered once
        return render_cuda_source([func], helpers)

    def _function(self, linear: UOp, sym: str) -> tuple[Program, str, dict[str, str]]:
        """The analyzed program, kernel text and helpers of one kernel under `sym`: the ones render made
        (taken), else made now."""
        if (made := _rendered.pop((linear, sym), None)) is not None:
            return made
        prog = analyze(linear, self.name, self.supported_ops, sym)
        helpers: dict[str, str] = {}
        return prog, render_kernel(prog, sym, helpers), helpers

    def compile(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> CudaKernel:
        return self.compile_batch([(linear, name)], target)[0]

    def compile_batch(self, kernels: Sequence[tuple[UOp, str]], target: Target | None = None) -> list[CudaKernel]:
        """Compile several kernels for `target` (default: this GPU's); needs NVRTC or nvcc, not a GPU, when a
        target is given. The kernels go into one .cu file (one compile, one module) per group (`compile_groups`:
        one group per core this process may use, balanced by source size), and the groups compile at once, each
        on a thread of its own (NVRTC and nvcc let go of the GIL while they work)."""
        target = target or self.default_target()
        syms: list[str] = []
        made: list[tuple[Program, str, dict[str, str]]] = []
        for linear, name in kernels:
            sym = unique_symbol(kernel_symbol(name), syms)
            syms.append(sym)
            prog, func, used = self._function(linear, sym)
            prog.name = name
            made.append((prog, func, used))
        compiler = self.compiler
        _ = compiler.version  # the compiler found (and NVRTC loaded) once, before any thread needs it
        groups = compile_groups([len(f) for _, f, _ in made], _workers())
        srcs, cubins = [""] * len(groups), [b""] * len(groups)
        errors: list[BaseException] = []

        def build(g: int) -> None:
            helpers: dict[str, str] = {}
            for i in groups[g]:
                helpers.update(made[i][2])
            srcs[g] = src = render_cuda_source([made[i][1] for i in groups[g]], helpers)
            if int(getenv("DEBUG")) >= 4:
                print(src, file=sys.stderr)
            what = f"kernel {kernels[groups[g][0]][1]!r}" if len(groups[g]) == 1 else f"{len(groups[g])} kernels"
            try:
                cubins[g] = compiler.cubin(src, target, what)
            except BaseException as e:  # raised again below, in the caller's thread
                errors.append(e)

        threads = [threading.Thread(target=build, args=(g,), name="cuda-compile", daemon=True)
                   for g in range(1, len(groups))]
        for t in threads:
            t.start()
        build(0)
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        out: list[CudaKernel | None] = [None] * len(made)
        for g, members in enumerate(groups):
            for i in members:
                out[i] = CudaKernel(self, made[i][0], syms[i], srcs[g], cubins[g], target)
        return [k for k in out if k is not None]


_workers = host_cores  # the compiles of a batch that run at once


# a group's least source (characters): below it, NVRTC's fixed cost per compile (~40 ms) outweighs the parallelism
GROUP_MIN_SOURCE = 4000


def compile_groups(sizes: list[int], workers: int) -> list[list[int]]:
    """The kernels (by index, each group in their order) of each .cu file of a batch: at most `workers` groups of
    about equal source, each at least GROUP_MIN_SOURCE characters where there are several (devices.toolrun.
    balanced_groups). One kernel or one worker: one group, the batch's order."""
    return balanced_groups(sizes, workers, GROUP_MIN_SOURCE)


DEVICE = CudaDevice()

__all__ = ["DEVICE", "NVCC", "NVRTC", "CudaBuffer", "CudaDevice", "CudaKernel"]
