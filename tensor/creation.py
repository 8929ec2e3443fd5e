"""Tensor creation: full zeros ones empty arange linspace eye and the *_like forms.

Constant tensors are a CONST broadcast to the shape (RESHAPE + EXPAND), so they cost no memory and fold into
whatever consumes them. `arange` is built from the spec's prefix-sum composition (see `reduce.arange_uop`);
`empty` is the one creation op that allocates a real BUFFER (zero-filled on the host).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

import tensor.tensor as tt
from devices.memory import physical_memory
from rewrite.dtype import DType, dtypes
from rewrite.errors import ArgumentError, DTypeError, OutOfMemoryError, ShapeError, VariableError
from rewrite.semantics import exec_cast
from rewrite.uop import UOp
from tensor import buffers
from tensor.elementwise import const_uop, scalar_dtype
from tensor.helpers import Device, canonical_device, check_shape, np_dtype, shape_arg, to_dtype
from tensor.symbolic import need_concrete

if TYPE_CHECKING:
    from tensor.tensor import Tensor

Scalar = int | float | bool


def _dt(dtype: object, default: DType) -> DType:
    return default if dtype is None else to_dtype(dtype)


def full(shape: tuple | int, fill_value: Scalar, dtype: object = None, device: Device | None = None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (dtype from the value when not given)."""
    if not isinstance(fill_value, (bool, int, float, np.generic)):
        raise TypeError(f"full: fill_value must be a Python number, got {type(fill_value).__name__}")
    if not isinstance(shape, (int, np.integer, tuple, list, UOp)) or isinstance(shape, bool):
        raise ShapeError(f"full: shape must be an int or a sequence of ints, got {type(shape).__name__} {shape!r}")
    one = isinstance(shape, (int, np.integer, UOp))
    sh = check_shape(shape_arg((shape,) if one else tuple(shape), "full"), "full")  # type: ignore[arg-type]
    v = fill_value.item() if isinstance(fill_value, np.generic) else fill_value
    dt = _dt(dtype, scalar_dtype(v))
    return tt.Tensor._wrap(const_uop(exec_cast(v, scalar_dtype(v), dt), dt, sh), canonical_device(device))


def zeros(*shape: int, dtype: object = None, device: Device | None = None) -> Tensor:
    return full(shape_arg(shape, "zeros"), 0, _dt(dtype, dtypes.default_float), device)


def ones(*shape: int, dtype: object = None, device: Device | None = None) -> Tensor:
    return full(shape_arg(shape, "ones"), 1, _dt(dtype, dtypes.default_float), device)


def empty(*shape: int, dtype: object = None, device: Device | None = None) -> Tensor:
    """A fresh buffer; its contents are unspecified (zeros here)."""
    sh = need_concrete(check_shape(shape_arg(shape, "empty"), "empty"), "empty (it allocates a buffer now)")
    dt = _dt(dtype, dtypes.default_float)
    dev = canonical_device(device)
    nbytes = math.prod(sh) * np_dtype(dt).itemsize
    try:
        if nbytes > physical_memory():
            raise MemoryError
        data = np.zeros(sh, dtype=np_dtype(dt))
    except MemoryError:
        raise OutOfMemoryError(f"empty: shape {sh} of {dt.name} needs {nbytes} bytes, more than the memory "
                               f"available ({physical_memory()} bytes in this machine); use a smaller shape") from None
    if isinstance(dev, tuple):
        return tt.Tensor(data, dt, dev)
    return tt.Tensor._wrap(buffers.new_buffer(data, dt, dev), dev)


def full_like(x: Tensor, fill_value: Scalar, dtype: object = None, device: Device | None = None) -> Tensor:
    return full(x.shape, fill_value, _dt(dtype, x.dtype), device or x.device)


def zeros_like(x: Tensor, dtype: object = None, device: Device | None = None) -> Tensor:
    return full(x.shape, 0, _dt(dtype, x.dtype), device or x.device)


def ones_like(x: Tensor, dtype: object = None, device: Device | None = None) -> Tensor:
    return full(x.shape, 1, _dt(dtype, x.dtype), device or x.device)


def empty_like(x: Tensor, dtype: object = None, device: Device | None = None) -> Tensor:
    return empty(*x.shape, dtype=_dt(dtype, x.dtype), device=device or x.device)


def _index_tensor(n: int, dtype: DType, device: Device) -> Tensor:
    """[0, 1, ..., n-1] in an integer dtype (floats count in int32 and cast: exact below 2**24)."""
    from tensor.reduce import arange_uop

    int_dt = dtype if dtype.is_int else dtypes.int32 if n <= 2**31 - 1 else dtypes.int64
    return tt.Tensor._wrap(arange_uop(n, int_dt).cast(dtype), device)


def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype: object = None,
           device: Device | None = None) -> Tensor:
    """[start, start+step, ...) up to stop, as numpy; ints give default_int, any float gives default_float."""
    if stop is None:
        start, stop = 0, start
    for v in (start, stop, step):
        if isinstance(v, UOp):
            raise VariableError("arange needs a concrete start, stop and step; for a symbolic length n, take "
                                "Tensor.arange(hi)[:n] with hi the variable's upper bound")
        if not isinstance(v, (int, float)):
            raise TypeError(f"arange: start, stop and step must be numbers, got {type(v).__name__} {v!r}")
    if not all(math.isfinite(v) for v in (start, stop, step)):
        raise ArgumentError(f"arange: start, stop and step must be finite, got {start!r}, {stop!r}, {step!r}")
    if step == 0:
        raise ArgumentError("arange: step must not be 0")
    all_int = all(isinstance(v, int) for v in (start, stop, step))
    dt = _dt(dtype, dtypes.default_int if all_int else dtypes.default_float)
    if dt.is_bool:
        raise DTypeError("arange: a bool arange is not meaningful; pick an integer or float dtype")
    n = max(0, math.ceil((stop - start) / step))
    dev = canonical_device(device)
    idx = _index_tensor(n, dt, dev)
    if step != 1:
        idx = idx * step
    return (idx + start if start != 0 else idx).cast(dt)


def linspace(start: Scalar, stop: Scalar, steps: int, dtype: object = None, device: Device | None = None) -> Tensor:
    """`steps` evenly spaced values from start to stop inclusive (the last one is exactly stop, as numpy)."""
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"linspace: steps must be a non-negative int, got {steps!r}")
    dt = _dt(dtype, dtypes.default_float)
    dev = canonical_device(device)
    if steps <= 1:
        return full((steps,), start, dt, dev)
    delta = (stop - start) / (steps - 1)
    idx = _index_tensor(steps, dtypes.default_float if not dt.is_float else dt, dev)
    vals = idx * delta + start
    return (idx == steps - 1).where(float(stop), vals).cast(dt)


def eye(n: int, m: int | None = None, dtype: object = None, device: Device | None = None) -> Tensor:
    """The n x m identity: ones where the row index equals the column index."""
    m = n if m is None else m
    if not isinstance(n, int) or not isinstance(m, int) or n < 0 or m < 0:
        raise ValueError(f"eye: sizes must be non-negative ints, got n={n!r}, m={m!r}")
    dev = canonical_device(device)
    rows = _index_tensor(n, dtypes.int32, dev).reshape(n, 1)
    cols = _index_tensor(m, dtypes.int32, dev).reshape(1, m)
    return (rows == cols).cast(_dt(dtype, dtypes.default_float))


__all__ = ["arange", "empty", "empty_like", "eye", "full", "full_like", "linspace", "ones", "ones_like", "zeros",
           "zeros_like"]
