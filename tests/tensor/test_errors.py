"""Bad input gives a typed error whose message names the op and the problem (one table for the whole front end)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rewrite.dtype import dtypes
from rewrite.errors import CompilerError, DeviceError, DTypeError, ShapeError
from tensor import Tensor
from tensor.helpers import AxisError


def m23() -> Tensor:
    return Tensor.ones(2, 3)


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    ("broadcast", lambda: m23() * Tensor.ones(2), ShapeError, r"mul: cannot broadcast shapes \(2, 3\), \(2,\)"),
    ("where", lambda: (m23() > 0).where(Tensor.ones(4), 0.0), ShapeError, r"where: cannot broadcast"),
    ("reshape", lambda: m23().reshape(4, 2), ShapeError,
     r"reshape: cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\) \(8 elements\)"),
    ("reshape -1", lambda: m23().reshape(4, -1), ShapeError, r"6 is not a multiple of 4"),
    ("reshape two -1", lambda: m23().reshape(-1, -1), ShapeError, r"only one dimension can be -1"),
    ("permute", lambda: m23().permute(0, 0), ShapeError, r"permute: \(0, 0\) is not a permutation"),
    ("expand", lambda: m23().expand(4, 3), ShapeError, r"expand: cannot expand \(2, 3\) to \(4, 3\)"),
    ("shrink", lambda: m23().shrink(((0, 3), None)), ShapeError, r"shrink: range \(0, 3\) on axis 0"),
    ("pad", lambda: m23().pad((1, 2, 3)), ShapeError, r"pad: a flat padding needs an even number"),
    ("sum axis", lambda: m23().sum(2), AxisError, r"sum: axis 2 is out of range for a tensor with 2 dimensions"),
    ("repeated axis", lambda: m23().sum((0, -2)), AxisError, r"sum: repeated axis"),
    ("flip axis", lambda: m23().flip(5), AxisError, r"flip: axis 5 is out of range"),
    ("unsqueeze", lambda: m23().unsqueeze(4), AxisError, r"unsqueeze: axis 4 is out of range"),
    ("transpose", lambda: m23().transpose(0, 2), AxisError, r"transpose: axis 2"),
    ("0-d axis", lambda: Tensor(1.0).sum(0), AxisError, r"a 0-d tensor has no axes"),
    ("cat", lambda: m23().cat(Tensor.ones(3, 3), dim=1), ShapeError, r"cat: shapes \(2, 3\), \(3, 3\) differ"),
    ("matmul", lambda: m23() @ m23(), ShapeError, r"matmul: \(2, 3\) @ \(2, 3\): the inner dimensions differ"),
    ("item", lambda: m23().item(), ShapeError, r"item: the tensor has 6 elements"),
    ("dtype name", lambda: Tensor([1], dtype="float8"), DTypeError, r"Tensor: unknown dtype 'float8'"),
    ("dtype index", lambda: m23().cast(dtypes.index), DTypeError, r"cast: dtypes.index is not a tensor dtype"),
    ("bitwise float", lambda: m23() ^ 1, DTypeError, r"bitwise_xor: needs integer or bool tensors, got float32"),
    ("shift float", lambda: m23() >> 1, DTypeError, r"rshift: needs integer tensors"),
    ("rand int", lambda: Tensor.rand(2, dtype="int8"), DTypeError, r"rand: needs a float dtype, got int8"),
    ("bitcast", lambda: Tensor.ones(3, dtype=dtypes.uint8).bitcast(dtypes.int16), DTypeError, r"bitcast: cannot view"),
    ("getitem int", lambda: m23()[2], IndexError, r"index 2 is out of range for axis 0 with size 2"),
    ("getitem neg", lambda: m23()[:, -4], IndexError, r"index -4 is out of range for axis 1 with size 3"),
    ("getitem many", lambda: m23()[0, 0, 0], IndexError, r"too many indices"),
    ("device", lambda: Tensor.ones(2, device="gpu"), DeviceError,
     r"unknown device 'gpu'; known devices: cpu, cuda, python"),
    ("device to", lambda: m23().to("npu"), DeviceError, r"unknown device 'npu'"),
    ("mixed devices", lambda: m23() + m23().to("python"), DeviceError, r"operands live on different devices"),
    ("conv channels", lambda: Tensor.ones(1, 3, 4, 4).conv2d(Tensor.ones(1, 2, 2, 2)), ShapeError,
     r"conv2d: input has 3 channels"),
    ("pool kernel", lambda: Tensor.ones(1, 1, 2, 2).max_pool2d(3), ShapeError, r"max_pool2d: the kernel spans 3"),
]


@pytest.mark.parametrize("fn,exc,msg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_typed_errors(fn: Callable[[], object], exc: type[Exception], msg: str) -> None:
    with pytest.raises(exc, match=msg) as info:
        fn()
    # everything but Python's own IndexError/TypeError comes from the project's error hierarchy
    assert isinstance(info.value, CompilerError) or exc in (IndexError, TypeError)


def test_axis_error_is_both_a_shape_error_and_an_index_error() -> None:
    assert issubclass(AxisError, ShapeError) and issubclass(AxisError, IndexError)
