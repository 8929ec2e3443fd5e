"""The cuda device without a GPU: a stand-in driver whose "device memory" is host memory and whose kernel launch
runs the kernel's LINEAR program on the python device's grid emulator. So the whole path of `Tensor(...,
device="cuda")` (the registry, COPY between devices, realize compiling with nvcc for the GPU's target, launch
arguments and grid, `.numpy()`) is checked on every machine; the CUDA code itself runs in tests/devices/test_cuda.py
on a GPU."""

from __future__ import annotations

import ctypes
import math
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

from devices.cuda import DEVICE, CudaBuffer, CudaKernel, _Pool
from rewrite.dtype import dtypes
from rewrite.env import Context
from rewrite.errors import DeviceError
from tensor import Tensor

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")


class HostDriver:
    """The Driver calls CudaBuffer and the allocator make, on host memory (addresses are real host pointers)."""

    name = "host stand-in"

    def __init__(self) -> None:
        self.blocks: dict[int, ctypes.Array] = {}
        self.copies: list[str] = []
        self.kernels: dict[str, object] = {}  # symbol -> CudaKernel, as the device loads them
        self.var_vals: dict[str, dict[str, int]] = {}
        self.launched: list[str] = []

    def alloc(self, nbytes: int) -> int:
        b = (ctypes.c_ubyte * max(1, nbytes))()
        p = ctypes.addressof(b)
        self.blocks[p] = b
        return p

    def free(self, ptr: int) -> None:
        del self.blocks[ptr]

    def htod(self, dst: int, src: int, nbytes: int) -> None:
        self.copies.append("htod")
        ctypes.memmove(dst, src, nbytes)

    def dtoh(self, dst: int, src: int, nbytes: int) -> None:
        self.copies.append("dtoh")
        ctypes.memmove(dst, src, nbytes)

    def dtod(self, dst: int, src: int, nbytes: int) -> None:
        self.copies.append("dtod")
        ctypes.memmove(dst, src, nbytes)

    def synchronize(self) -> None:
        pass

    # a GPU of compute capability 9.0 with 132 multiprocessors
    def compute_capability(self) -> tuple[int, int]:
        return 9, 0

    def attribute(self, attr: int) -> int:
        return 132

    def load_module(self, cubin: bytes) -> bytes:
        assert cubin[:4] == b"\x7fELF"
        return cubin

    def function(self, module: bytes, symbol: str) -> str:
        return symbol

    def launch(self, fn: str, grid: tuple, block: tuple, smem: int, params: ctypes.Array) -> None:
        """Run the kernel named `fn` on the emulator, its buffers read through the pointers in `params`."""
        from devices import get_device
        from devices.memory import np_dtype
        from rewrite.ops import Ops
        from rewrite.uop import UOp

        k = self.kernels[fn]
        assert (grid, block) == k.launch_dims(self.var_vals.get(fn, {}))
        arrays = {}
        for i, (slot, b) in enumerate(k.prog.buffers.items()):
            ptr = ctypes.c_uint64.from_address(params[i]).value
            block_bytes = self.blocks[ptr]
            arrays[slot] = np.frombuffer(block_bytes, dtype=np_dtype(b.dtype))
        nb = len(k.prog.buffers)
        vv = {name: ctypes.c_longlong.from_address(params[nb + j]).value if p.dtype.itemsize == 8 else
              ctypes.c_int32.from_address(params[nb + j]).value for j, (name, p) in enumerate(k.prog.variables.items())}
        self.launched.append(fn)
        get_device("python").compile(UOp(Ops.LINEAR, k.prog.instrs), fn)(arrays, vv)


@pytest.fixture
def host_driver(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> Iterator[HostDriver]:
    drv = HostDriver()
    function = CudaKernel.function

    def loading(k: CudaKernel) -> object:
        drv.kernels[k.symbol] = k
        return function(k)

    monkeypatch.setattr(CudaKernel, "function", loading)
    monkeypatch.setattr(DEVICE, "_driver", drv)
    monkeypatch.setattr(DEVICE, "_targets", {})
    monkeypatch.setattr(DEVICE, "_modules", {})
    monkeypatch.setattr(DEVICE, "_pool", _Pool())
    import importlib

    realize = importlib.import_module("lower.realize")  # the module (lower re-exports its function by the name)

    monkeypatch.setattr(realize, "_compiled", {})  # kernels compiled for this stand-in GPU stay with it
    monkeypatch.setattr(realize, "plans", realize.PlanCache())
    with Context(CACHEDIR=str(tmp_path)):
        yield drv


def test_buffers_copy_in_out_and_view(host_driver: HostDriver) -> None:
    b = DEVICE.alloc(6, dtypes.float32)
    assert isinstance(b, CudaBuffer) and b.size == 6 and b.dtype == np.float32
    b[:] = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(b), np.arange(6, dtype=np.float32))
    assert np.asarray(b.view(np.int32))[1] == np.float32(1).view(np.int32)
    c = DEVICE.alloc(6, dtypes.float32)
    c[:] = b  # device to device
    assert host_driver.copies[-1] == "dtod" and np.asarray(c).tolist() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(DeviceError, match="written whole"):
        b[2] = 1.0
    with pytest.raises(DeviceError, match="copy of 5 elements"):
        b[:] = np.zeros(5, np.float32)
    DEVICE.free(b)
    assert DEVICE.alloc(6, dtypes.float32).ptr == b.ptr  # the pool hands the freed memory out again
    with pytest.raises(DeviceError, match="not a buffer from alloc"):
        DEVICE.free(c.view(np.int32))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "bool", "int64"])
def test_tensor_data_round_trips_through_the_device(host_driver: HostDriver, dtype: str) -> None:
    x = np.arange(-5, 7, dtype=np.float32).reshape(3, 4) / 2
    want = Tensor(x, device="cpu").cast(dtype).numpy()
    t = Tensor(want, dtype=dtype, device="cuda")  # copied to the device now
    assert host_driver.copies == ["htod"]
    np.testing.assert_array_equal(t.numpy(), want)
    assert host_driver.copies == ["htod", "dtoh"]
    back = Tensor(want, dtype=dtype, device="cuda").to("cpu")  # COPY from cuda to cpu
    assert back.device == "cpu"
    np.testing.assert_array_equal(back.numpy(), want)
    there = Tensor(want, dtype=dtype, device="cpu").to("cuda").to("cpu")  # cpu -> cuda -> cpu
    np.testing.assert_array_equal(there.numpy(), want)


@needs_nvcc
def test_launch_arguments_point_at_pointers_and_values(host_driver: HostDriver) -> None:
    """cuLaunchKernel reads each argument through a pointer: the buffers' device addresses, then the variables."""
    from devices.base import gpu_target
    from rewrite.ops import Ops
    from rewrite.uop import UOp
    from tests.devices.builder import buf, linear

    n = UOp.variable("n", 1, 64)
    out = buf(0, dtypes.int32, 64)
    src = buf(1, dtypes.int32, 64)
    r = UOp.range(n, 0)
    st = out.index(r).store(src.index(r).load() + n.cast(dtypes.int32))
    k = DEVICE.compile(linear(out, src, r, st, UOp(Ops.END, (st, r))), "args", gpu_target("sm_90"))
    a, b = DEVICE.alloc(64, dtypes.int32), DEVICE.alloc(64, dtypes.int32)
    params, _holders, back = k._args({0: a, 1: b}, {"n": 40})  # _holders keeps the values params point at
    assert [ctypes.c_uint64.from_address(params[i]).value for i in range(2)] == [a.ptr, b.ptr]
    assert ctypes.c_longlong.from_address(params[2]).value == 40 and back == []
    assert k.launch_dims({"n": 40}) == ((1, 1, 1), (1, 1, 1))
    with pytest.raises(DeviceError, match="variable 'n' = 99 is outside its range"):
        k._args({0: a, 1: b}, {"n": 99})
    with pytest.raises(DeviceError, match="buffer slots 0 and 1 are the same memory"):
        k._args({0: a, 1: a}, {"n": 4})
    host = np.zeros(64, np.int32)  # a host array is copied in for the launch, and back since slot 0 is written
    _, _temps, back = k._args({0: host, 1: b}, {"n": 4})
    assert len(back) == 1 and back[0][0] is host and host_driver.copies[-1] == "htod"


@needs_nvcc
def test_tensor_graphs_realize_on_the_cuda_device(host_driver: HostDriver) -> None:
    """realize on "cuda": lowered for the driver's target (sm_90, GPU heuristics), compiled by nvcc, launched with
    the grid and block of the SPECIAL bounds; the stand-in runs the LINEAR program, so results are exact."""
    assert str(DEVICE.default_target()).startswith("cuda sm_90: 132 multiprocessors")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((33, 70)).astype(np.float32)
    w = rng.standard_normal((70, 12)).astype(np.float32)
    v = rng.standard_normal(4096).astype(np.float32)
    t, tw, tv = Tensor(x, device="cuda"), Tensor(w, device="cuda"), Tensor(v, device="cuda")
    cases = [(lambda: tv.sum(), lambda: Tensor(v).sum()),  # shared by the threads of a block: LOCAL + BARRIER
             (lambda: t * 2 + 1, lambda: Tensor(x) * 2 + 1),
             (lambda: t.sum(axis=1), lambda: Tensor(x).sum(axis=1)),
             (lambda: t.sum(), lambda: Tensor(x).sum()),
             (lambda: t.softmax(-1), lambda: Tensor(x).softmax(-1)),
             (lambda: t @ tw, lambda: Tensor(x) @ Tensor(w))]
    for ours, cpu in cases:
        np.testing.assert_allclose(ours().numpy(), cpu().numpy(), rtol=1e-5, atol=1e-5)
    assert len(host_driver.launched) >= len(cases)
    ks = list(host_driver.kernels.values())
    assert any(math.prod(k.launch_dims({})[1]) >= 32 for k in ks)  # type: ignore[attr-defined]
    assert any("__syncthreads();" in k.src for k in ks)  # type: ignore[attr-defined]
    moved = (Tensor(x).to("cuda") * 3).to("cpu")
    assert moved.device == "cpu"
    np.testing.assert_allclose(moved.numpy(), x * 3, rtol=1e-6)


def test_cuda_matmul_reads_its_right_operand_unpacked(host_driver: HostDriver) -> None:
    """The cpu target packs a large matmul's right operand into column panels (a copy kernel before the product);
    a GPU block copies its tiles of B into shared memory as they are, so the cuda schedule has the product alone
    (the H100 run timed the pointless copy at 11% of matmul 4096 fp16)."""
    from lower.opt_tiles import matmul_panel_bytes
    from lower.schedule import schedule

    assert matmul_panel_bytes(DEVICE.default_target()) == 0
    # rows of 2048 halves (4 KiB) are packed on any cpu; narrower ones only past the host's L2 (nn._panels)
    a, b = np.zeros((256, 512), np.float32), np.zeros((512, 2048), np.float32)

    def kernels(dev: str) -> list[str]:
        x, w = Tensor(a, device=dev).cast("float16"), Tensor(b, device=dev).cast("float16")
        x.realize(), w.realize()
        items, _ = schedule([(x @ w).uop])
        return [it.name for it in items if it.kind == "kernel"]

    assert len(kernels("cpu")) == 3  # float32 copies of x and of w (w's as panels: tensor.nn._widened), the product
    assert len(kernels("cuda")) == 1
