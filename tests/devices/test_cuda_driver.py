"""devices.cuda_driver.Driver without a GPU: a stand-in libcuda that keeps the driver's rule that the current
context belongs to a thread. Realize runs each device's steps on threads of its own (lower.parallel.run_steps), so
the Driver must make its context current on every thread that calls it; the H100 run of the gpu tests failed with
CUDA_ERROR_INVALID_CONTEXT at a kernel load on such a thread before it did."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

import pytest

import devices.cuda_driver as cd
from rewrite.errors import CudaError

_INVALID_CONTEXT = 201
# calls the real driver answers without a current context
_NO_CONTEXT_NEEDED = {"cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
                      "cuDeviceGetName", "cuDeviceGetAttribute", "cuDriverGetVersion"}


class ThreadedLib:
    """libcuda's per-thread current context: a call that needs one fails on a thread that never set it."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.set_on: list[str] = []  # the threads that made a context current, in order

    def _out(self, ref: object, value: object) -> None:
        ref._obj.value = value  # type: ignore[attr-defined]  # ctypes.byref(x)._obj is x

    def __getattr__(self, name: str) -> Callable[..., int]:
        if not name.startswith("cu"):
            raise AttributeError(name)

        def fn(*args: object) -> int:
            if name == "cuDeviceGetCount":
                self._out(args[0], 1)
            elif name in ("cuDeviceGet", "cuDeviceGetAttribute"):
                self._out(args[0], 0)
            elif name == "cuDevicePrimaryCtxRetain":
                self._out(args[0], 0x1234)
            elif name == "cuCtxSetCurrent":
                self.local.ctx = args[0]
                self.set_on.append(threading.current_thread().name)
            elif name == "cuDeviceGetName":
                ctypes.memmove(args[0], b"stand-in\0", 9)  # type: ignore[call-overload]
            elif name not in _NO_CONTEXT_NEEDED and getattr(self.local, "ctx", None) is None:
                return _INVALID_CONTEXT
            return 0

        return fn


@pytest.fixture
def lib(monkeypatch: pytest.MonkeyPatch) -> ThreadedLib:
    stand_in = ThreadedLib()
    monkeypatch.setattr(cd, "_load_library", lambda: stand_in)
    return stand_in


def test_every_thread_that_calls_the_driver_gets_its_context(lib: ThreadedLib) -> None:
    drv = cd.Driver()
    assert drv.name == "stand-in"
    errors: list[BaseException] = []

    def work() -> None:
        try:
            drv.load_module(b"\x7fELF")
            drv.launch(ctypes.c_void_p(1), (1, 1, 1), (32, 1, 1), 0, (ctypes.c_void_p * 1)())
            drv.synchronize()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, name=f"device-{i}") for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # once per thread: the main thread at start-up, then each worker at its first call
    assert sorted(lib.set_on) == sorted(["MainThread", "device-0", "device-1", "device-2"])


def test_a_failing_call_names_the_call_and_the_error(lib: ThreadedLib) -> None:
    drv = cd.Driver()
    drv.ctx = None  # as if the context were gone: the stand-in refuses context calls on a new thread
    caught: list[CudaError] = []

    def work() -> None:
        try:
            drv.synchronize()
        except CudaError as e:
            caught.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert len(caught) == 1
    assert "cuStreamSynchronize" in str(caught[0]) and "201" in str(caught[0])


def test_tensor_maps_are_encoded_into_an_aligned_window(lib: ThreadedLib, monkeypatch: pytest.MonkeyPatch) -> None:
    """Driver.tensor_map hands cuTensorMapEncodeTiled a 64-byte aligned 128-byte CUtensorMap and its arrays (dims
    and strides as uint64, box and element strides as uint32), and returns that window (what the launch passes)."""
    from devices.tma import TensorMap
    from rewrite.dtype import dtypes

    seen: list[tuple] = []

    def encode(*args: object) -> int:
        seen.append(args)
        ctypes.memset(args[0], 0xAB, 128)  # type: ignore[call-overload]  # the driver writes the 128 bytes
        return 0

    drv = cd.Driver()
    real_fn = drv.fn
    monkeypatch.setattr(drv, "fn", lambda name: encode if name == "cuTensorMapEncodeTiled" else real_fn(name))
    tm = TensorMap(1, 8, dtypes.bfloat16, (520, 1000, 3), (520, 520 * 1000), (64, 128, 1), 1)
    window = drv.tensor_map(tm.encode_args(1 << 30))
    (args,) = seen
    assert args[0] == ctypes.addressof(window) and ctypes.addressof(window) % 64 == 0 and ctypes.sizeof(window) == 128
    assert args[1:3] == (9, 3) and args[3] == (1 << 30) + 16  # bfloat16, rank 3, the tensor's first element
    assert list(args[4]) == [520, 1000, 3] and list(args[5]) == [1040, 1040 * 1000]  # type: ignore[call-overload]
    assert list(args[6]) == [64, 128, 1] and list(args[7]) == [1, 1, 1]  # type: ignore[call-overload]
    assert args[8:] == (0, 3, 3, 0)  # no interleave, 128B swizzle, 256B L2 promotion, zero fill
    assert bytes(window) == b"\xab" * 128
