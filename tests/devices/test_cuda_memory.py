"""The cuda device's data movement without a GPU: a stand-in driver whose "device memory" is host memory, so the
path from `Tensor(..., device="cuda")` through the registry, COPY between devices and `.numpy()` is checked on
every machine (kernels need the real GPU: tests/devices/test_cuda.py)."""

from __future__ import annotations

import ctypes
import shutil
from collections.abc import Iterator

import numpy as np
import pytest

from devices.cuda import DEVICE, CudaBuffer
from rewrite.dtype import dtypes
from rewrite.errors import DeviceError
from tensor import Tensor


class HostDriver:
    """The Driver calls CudaBuffer and the allocator make, on host memory (addresses are real host pointers)."""

    name = "host stand-in"

    def __init__(self) -> None:
        self.blocks: dict[int, ctypes.Array] = {}
        self.copies: list[str] = []

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


@pytest.fixture
def host_driver() -> Iterator[HostDriver]:
    old = DEVICE._driver
    drv = HostDriver()
    DEVICE._driver = drv  # type: ignore[assignment]
    try:
        yield drv
    finally:
        DEVICE._pool.free.clear()
        DEVICE._pool.held = 0
        DEVICE._driver = old


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


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")
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
