"""Making tensors: from numpy arrays, lists and scalars (dtype inference, dtype=, device=), properties, the
creation ops (zeros ones full empty arange linspace eye, *_like), devices and .to()."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.dtype import dtypes
from rewrite.errors import DeviceError, DTypeError, ShapeError
from rewrite.ops import Ops
from tensor import Tensor
from tensor.buffers import host_array
from tests.tensor.util import close, val


@pytest.mark.parametrize("data,dtype", [
    ([1, 2, 3], dtypes.int32), ([1.0, 2.0], dtypes.float32), ([True, False], dtypes.bool), ([[1, 2.5]], dtypes.float32),
    ([2**40], dtypes.int64), ([], dtypes.float32), (np.array([1, 2], np.int64), dtypes.int64),
    (np.array([1.0], np.float64), dtypes.float64), (np.array([1], np.uint16), dtypes.uint16),
    (np.zeros((2, 0, 3), np.float16), dtypes.float16),
])
def test_dtype_inference(data: object, dtype: object) -> None:
    t = Tensor(data)
    assert t.dtype is dtype
    assert t.shape == np.asarray(data).shape
    assert t.uop.op is Ops.BUFFER and t.is_realized
    close(t, np.asarray(data).astype(np.float32 if dtype is dtypes.bfloat16 else dtype.name))


@pytest.mark.parametrize("value,dtype", [(3, dtypes.int32), (2.5, dtypes.float32), (True, dtypes.bool),
                                         (np.float16(1.5), dtypes.float16), (np.int64(7), dtypes.int64)])
def test_scalars_are_consts(value: object, dtype: object) -> None:
    t = Tensor(value)
    assert t.dtype is dtype and t.shape == () and t.uop.op is Ops.CONST
    close(t, np.array(value))


def test_explicit_dtype_converts() -> None:
    close(Tensor([1.7, -2.7], dtype=dtypes.int32), np.array([1, -2], np.int32))
    close(Tensor(3.9, dtype="int8"), np.int8(3))
    assert Tensor([1, 2], dtype=np.float16).dtype is dtypes.float16
    assert Tensor(1, dtype=float).dtype is dtypes.float32
    t = Tensor([1, 2], dtype=dtypes.float64)
    assert Tensor(t, dtype=dtypes.int16).dtype is dtypes.int16


def test_input_data_is_copied() -> None:
    a = np.array([1.0, 2.0], np.float32)
    t = Tensor(a)
    a[0] = 99.0
    close(t, np.array([1.0, 2.0]))
    assert host_array(t.uop).base is not a


def test_properties() -> None:
    t = Tensor.zeros(2, 3, 4, dtype=dtypes.float16)
    assert t.shape == (2, 3, 4) and t.ndim == 3 and t.numel() == 24 and len(t) == 2
    assert t.size() == (2, 3, 4) and t.size(-1) == 4
    assert t.element_size() == 2 and t.nbytes() == 48
    assert "float16" in repr(t) and "unrealized" in repr(t)
    with pytest.raises(TypeError, match="0-d"):
        len(Tensor(1.0))


def test_full_zeros_ones_empty() -> None:
    close(Tensor.zeros(2, 3), np.zeros((2, 3), np.float32), dtype=dtypes.float32)
    close(Tensor.ones((2,), dtype=dtypes.int8), np.ones(2, np.int8), dtype=dtypes.int8)
    close(Tensor.full((2, 2), 7), np.full((2, 2), 7, np.int32), dtype=dtypes.int32)
    close(Tensor.full(3, 1.5), np.full(3, 1.5, np.float32))
    close(Tensor.full((2,), True), np.array([True, True]))
    close(Tensor.full((), -1, dtype=dtypes.uint8), np.uint8(255))
    e = Tensor.empty(3, 2, dtype=dtypes.int16)
    assert e.shape == (3, 2) and e.dtype is dtypes.int16 and e.uop.op is Ops.BUFFER
    assert Tensor.zeros(4).uop.op is not Ops.BUFFER  # constants cost no memory
    with pytest.raises(ShapeError, match="negative dimension"):
        Tensor.zeros(2, -1)
    with pytest.raises(ShapeError, match="shape entries must be ints"):
        Tensor.ones(2.5)


def test_like() -> None:
    t = Tensor([[1, 2, 3]], dtype=dtypes.int16, device="python")
    for fn, v in [("zeros_like", 0), ("ones_like", 1)]:
        r = getattr(t, fn)()
        assert r.dtype is dtypes.int16 and r.device == "python"
        close(r, np.full((1, 3), v, np.int16))
    close(t.full_like(4.5, dtype=dtypes.float32), np.full((1, 3), 4.5, np.float32))
    assert Tensor.zeros_like(t, dtype=dtypes.float64).dtype is dtypes.float64
    assert t.empty_like().shape == (1, 3)


@pytest.mark.parametrize("args,kw", [((5,), {}), ((2, 9), {}), ((10, 0, -3), {}), ((0, 1, 0.1), {}), ((3, 3), {}),
                                     ((-2.5, 2.5, 0.5), {}), ((100,), {}), ((1000,), {}), ((5,), {"dtype": "float16"}),
                                     ((2, 50, 7), {"dtype": "int64"})])
def test_arange(args: tuple, kw: dict) -> None:
    t = Tensor.arange(*args, **kw)
    expected = np.arange(*args, dtype=kw.get("dtype"))
    if "dtype" not in kw:
        expected = expected.astype(np.int32 if expected.dtype.kind == "i" else np.float32)
    assert t.dtype.name == expected.dtype.name
    close(t, expected, rtol=1e-6, atol=1e-6)


def test_arange_errors() -> None:
    with pytest.raises(ValueError, match="step must not be 0"):
        Tensor.arange(0, 5, 0)
    with pytest.raises(DTypeError, match="bool"):
        Tensor.arange(3, dtype=dtypes.bool)


@pytest.mark.parametrize("start,stop,steps", [(0, 1, 5), (-3, 7, 11), (2, 2, 3), (0, 1, 1), (0, 1, 0), (1.5, -2, 4)])
def test_linspace(start: float, stop: float, steps: int) -> None:
    close(Tensor.linspace(start, stop, steps), np.linspace(start, stop, steps, dtype=np.float32), atol=1e-6)
    if steps > 1:
        assert val(Tensor.linspace(start, stop, steps))[-1] == np.float32(stop)


@pytest.mark.parametrize("n,m", [(3, None), (2, 4), (4, 1), (0, None), (20, 20)])
def test_eye(n: int, m: int | None) -> None:
    close(Tensor.eye(n, m), np.eye(n, m, dtype=np.float32))
    close(Tensor.eye(n, m, dtype=dtypes.int8), np.eye(n, m, dtype=np.int8))


# ---------------------------------------------------------------- devices


def test_devices_and_to() -> None:
    t = Tensor([1.0, 2.0], device="PYTHON")
    assert t.device == "python" and t.uop.device == "python"
    c = t.to("cpu")
    assert c.device == "cpu" and c.uop.op is Ops.COPY and c.uop.device == "cpu"
    assert t.to("python") is t
    close(c * 2, np.array([2.0, 4.0]))
    z = Tensor.zeros(3, device="python")
    assert z.device == "python" and z.uop.device is None  # constants only: the Tensor keeps the device


def test_default_device_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVICE", "python")
    assert Tensor([1]).device == "python"
    assert Tensor.ones(2).device == "python"


def test_unknown_device_lists_known_ones() -> None:
    with pytest.raises(DeviceError, match=r"unknown device 'tpu'; known devices: cpu, cuda, python"):
        Tensor([1], device="tpu")
    with pytest.raises(DeviceError, match="unknown device"):
        Tensor.zeros(2).to("metal")


def test_mixing_devices_is_a_device_error() -> None:
    with pytest.raises(DeviceError, match=r"add: operands live on different devices \(cpu, python\)"):
        Tensor([1.0], device="cpu") + Tensor([1.0], device="python")


def test_bad_data() -> None:
    with pytest.raises(DTypeError, match="cannot make a tensor from numpy <U1"):
        Tensor(np.array(["a"]))
    with pytest.raises(ShapeError, match="rectangular"):
        Tensor([[1, 2], [3]])
    with pytest.raises(TypeError, match="cannot make a tensor from dict"):
        Tensor({"a": 1})
