"""Argument parsing shared by the Tensor front end: dtypes, devices, shapes and axes, with typed errors.

Checks live here, before any UOp is built, so that a user's mistake is reported in the Tensor's terms (the
method they called, the shapes they passed) rather than as a complaint about an inner IR node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes
from rewrite.env import knob_str
from rewrite.errors import DeviceError, DTypeError, ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp

Shape = tuple[int, ...]
Device = str | tuple[str, ...]  # one device, or an n-tuple of devices holding a sharded or replicated tensor
T = TypeVar("T")


class AxisError(ShapeError, IndexError):
    """An axis out of range for a tensor's rank. A ShapeError, and an IndexError as numpy's and torch's are."""


# numpy has no bfloat16 (its data is kept as float32 holding bfloat16 values) and index is not a storage dtype
_NP_NAMES = {d.name for d in dtypes.all} - {"bfloat16", "index"}


def to_dtype(dt: object, what: str = "dtype") -> DType:
    """A DType from a DType, a name ("float32", "half"), a numpy dtype or a Python type (bool, int, float)."""
    if isinstance(dt, DType):
        if dt.count != 1 or dt is dtypes.index or dt is dtypes.void or dt.kind == "p":
            raise DTypeError(f"{what}: {dt!r} is not a tensor dtype; use a scalar value dtype such as dtypes.float32")
        return dt
    if dt is bool:
        return dtypes.bool
    if dt is int:
        return dtypes.default_int
    if dt is float:
        return dtypes.default_float
    if isinstance(dt, str):
        d = getattr(dtypes, dt, None)
        if isinstance(d, DType):
            return to_dtype(d, what)
    elif dt is not None:  # numpy reads None as float64; here it is a mistake
        try:
            name = np.dtype(dt).name  # type: ignore[call-overload]  # any dtype-like: TypeError below
        except TypeError:
            name = None
        if name in _NP_NAMES:
            return getattr(dtypes, name)
    known = ", ".join(sorted(d.name for d in dtypes.all if d is not dtypes.index))
    raise DTypeError(f"{what}: unknown dtype {dt!r}; known dtypes: {known}")


def np_dtype(dt: DType) -> np.dtype:
    """The numpy dtype that holds a tensor's data on the host (bfloat16 values live in float32)."""
    return np.dtype("float32" if dt is dtypes.bfloat16 else dt.name)


def default_device() -> str:
    return one_device(knob_str("DEVICE"))


def canonical_device(device: Device | None) -> Device:
    """A known device name in lower case ("cpu", "python", "cuda", "cuda:1"), or a tuple of distinct ones (a
    multi-device tensor: `("cpu:0", "cpu:1")`); DeviceError lists the known ones."""
    if isinstance(device, (tuple, list)):
        devs = tuple(one_device(d) for d in device)
        if not devs:
            raise DeviceError("device: an empty device tuple; give one device or a tuple such as ('cpu:0', 'cpu:1')")
        if len(set(devs)) != len(devs):
            raise DeviceError(f"device: {devs} names a device twice; a device tuple holds one piece per device, so "
                              f"use distinct devices such as ('cpu:0', 'cpu:1')")
        return devs
    return one_device(device)


def one_device(device: object) -> str:
    """A single known device name in lower case (see canonical_device)."""
    from devices import known_devices

    if device is None:
        return str(default_device())
    if not isinstance(device, str):
        raise DeviceError(f"device must be a str such as 'cpu' or a tuple of them such as ('cpu:0', 'cpu:1'), got "
                          f"{type(device).__name__} {device!r}")
    d = device.strip().lower()
    name, at, rank = d.partition("@")
    base, _, num = name.partition(":")
    if base not in known_devices() or (num and not num.isdigit()) or (at and not rank.isdigit()):
        raise DeviceError(f"unknown device {device!r}; known devices: {', '.join(known_devices())} (optionally "
                          f"':n' for the n-th, '@r' for MPI rank r's: 'cpu:1', 'cpu@1')")
    if at:
        from devices.mpi import rank_and_size

        _, size = rank_and_size()
        if int(rank) >= size:
            raise DeviceError(f"device {device!r} names MPI rank {rank}, but this job has {size} rank"
                              f"{'s' if size > 1 else ''} (0..{size - 1}); start it with `mpirun -n {int(rank) + 1}` "
                              f"or more, or use tensor.multi.ranks() for one device per rank")
    return d


def shape_arg(args: tuple, what: str) -> tuple:
    """Shapes given either as varargs `f(2, 3)` or as one sequence `f((2, 3))`."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    for d in args:
        if isinstance(d, UOp) and d.shape == () and (d.dtype.is_int or d.dtype is dtypes.index):
            continue  # a symbolic dimension (a bound variable, or an expression of some)
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise ShapeError(f"{what}: shape entries must be ints, got {type(d).__name__} {d!r} in {args!r}")
    return tuple(d if isinstance(d, UOp) else int(d) for d in args)


MAX_NUMEL = 1 << 62  # element counts and offsets are 64-bit integers in kernels


def check_shape(shape: tuple, what: str) -> Shape:
    n = 1
    for d in shape:
        if isinstance(d, UOp):  # symbolic: its variables' ranges keep it >= 0 (tensor.symbolic)
            continue
        if d < 0:
            raise ShapeError(f"{what}: negative dimension {d} in shape {fmt_shape(shape)}")
        if isinstance(d, int):
            n *= d
    if n > MAX_NUMEL:
        raise ShapeError(f"{what}: shape {fmt_shape(shape)} has {n} elements, more than 2**62 (kernel indices are "
                         f"64-bit)")
    return shape


def norm_axis(axis: int, ndim: int, what: str, shape: tuple | None = None) -> int:
    """A possibly negative axis as 0..ndim-1; AxisError names the axis, the rank and the valid range."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise AxisError(f"{what}: axis must be an int, got {type(axis).__name__} {axis!r}")
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= axis <= hi or ndim == 0:
        sh = f" (shape {fmt_shape(shape)})" if shape is not None else ""
        rng = "a 0-d tensor has no axes" if ndim == 0 else f"valid axes are {lo}..{hi}"
        raise AxisError(f"{what}: axis {axis} is out of range for a tensor with {ndim} dimensions{sh}; {rng}")
    return int(axis) % ndim


def norm_axes(axis: int | Sequence[int] | None, ndim: int, what: str, shape: tuple | None = None) -> tuple[int, ...]:
    """None means every axis; duplicates are an error, as in numpy."""
    if axis is None:
        return tuple(range(ndim))
    axes = [norm_axis(a, ndim, what, shape) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    if len(set(axes)) != len(axes):
        raise AxisError(f"{what}: repeated axis in {axis!r}")
    return tuple(sorted(axes))


def alias_arg(what: str, name: str, value: T, alias: str, alias_value: T) -> T:
    """One argument that numpy and torch spell differently (axis / dim, keepdims / keepdim): whichever was given,
    None when neither was. Both given is a TypeError naming both, as Python's own for a repeated argument."""
    if value is not None and alias_value is not None:
        raise TypeError(f"{what}() got both {name}= and {alias}=, two spellings of one argument; give one of them")
    return alias_value if value is None else value


def resolve_reshape(shape: tuple, numel: int, old: tuple, what: str = "reshape") -> Shape:
    """Fill in one -1 entry and check that the element count is kept."""
    if isinstance(numel, UOp) or any(isinstance(d, UOp) for d in shape):
        return _resolve_symbolic(shape, numel, old, what)
    if sum(d == -1 for d in shape) > 1:
        raise ShapeError(f"{what}: only one dimension can be -1 (inferred), got {fmt_shape(shape)}")
    for d in shape:
        if d < -1:
            raise ShapeError(f"{what}: negative dimension {d} in {fmt_shape(shape)}")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or numel % known:
            raise ShapeError(f"{what}: cannot reshape {fmt_shape(old)} ({numel} elements) to {fmt_shape(shape)}: "
                             f"{numel} is not a multiple of {known}")
        shape = tuple(numel // known if d == -1 else d for d in shape)
    if math.prod(shape) != numel:
        raise ShapeError(f"{what}: cannot reshape {fmt_shape(old)} ({numel} elements) to {fmt_shape(shape)} "
                         f"({math.prod(shape)} elements); the element count must stay the same")
    return shape


def same_size(a: int | UOp, b: int | UOp) -> bool:
    """Whether two sizes, either symbolic, are equal for every value of their variables."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    z = (a - b).simplify() if isinstance(a, UOp) else (b - a).simplify() if isinstance(b, UOp) else None
    return z is not None and z.op is Ops.CONST and z.value == 0


def _mul(a: int | UOp, b: int | UOp) -> int | UOp:
    """A product of sizes, either symbolic, with no factor of 1 (so messages read `n`, not `(n*1)`)."""
    if isinstance(a, int) and a == 1:
        return b
    if isinstance(b, int) and b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    return a * b if isinstance(a, UOp) else b * a


def _resolve_symbolic(shape: tuple, numel: int | UOp, old: tuple, what: str) -> Shape:
    if sum(isinstance(d, int) and d == -1 for d in shape) > 1:
        raise ShapeError(f"{what}: only one dimension can be -1 (inferred), got {fmt_shape(shape)}")
    known: int | UOp = 1
    for d in shape:
        if isinstance(d, int) and d < -1:
            raise ShapeError(f"{what}: negative dimension {d} in {fmt_shape(shape)}")
        if not (isinstance(d, int) and d == -1):
            known = _mul(known, d)
    if any(isinstance(d, int) and d == -1 for d in shape):
        if isinstance(known, int) and known == 0:
            raise ShapeError(f"{what}: cannot infer -1 in {fmt_shape(shape)} next to a 0")
        fill = (numel // known).simplify() if isinstance(numel, UOp) else numel // known
        if isinstance(fill, UOp) and fill.op is Ops.CONST:
            fill = int(fill.value)
        shape = tuple(fill if isinstance(d, int) and d == -1 else d for d in shape)
        known = math.prod(shape)
    if not same_size(known, numel):
        raise ShapeError(f"{what}: cannot reshape {fmt_shape(old)} to {fmt_shape(shape)}: the element counts "
                         f"{fmt_shape((numel,))[1:-2]} and {fmt_shape((known,))[1:-2]} are not provably equal")
    return shape


def broadcast_shape(shapes: Sequence[tuple], what: str) -> Shape:
    """numpy broadcasting: right-align, each axis equal or 1."""
    if len(shapes) == 2:  # the common case, in one pass (a mismatch is reported below)
        a, b = shapes
        if a == b:
            return tuple(a)
        la, lb = len(a), len(b)
        out2 = []
        for x, y in zip((1,) * (lb - la) + tuple(a), (1,) * (la - lb) + tuple(b), strict=True):
            if x == y or y == 1:
                out2.append(x)
            elif x == 1:
                out2.append(y)
            else:
                break
        else:
            return tuple(out2)
    n = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(n):
        dim = 1
        for s in shapes:
            d = s[i - n + len(s)] if i - n + len(s) >= 0 else 1
            if d == 1 or d == dim:
                continue
            if dim != 1:
                raise ShapeError(f"{what}: cannot broadcast shapes {', '.join(fmt_shape(s) for s in shapes)}: "
                                 f"axis {i - n} has sizes {dim} and {d}; each axis must be equal or 1 after "
                                 f"right-aligning (reshape one operand)")
            dim = d
        out.append(dim)
    return tuple(out)


__all__ = ["AxisError", "alias_arg", "broadcast_shape", "canonical_device", "check_shape", "default_device",
           "norm_axes", "norm_axis", "np_dtype", "resolve_reshape", "shape_arg", "to_dtype"]
