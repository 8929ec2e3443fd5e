"""Indexing by data: `x[tensor]`, `x[[1, 2]]`, `x[mask]` (numpy's advanced indexing), `one_hot`, `masked_fill`,
`tril` / `triu` and torch's `clamp(min=, max=)`.

An integer index reads through an INDEX node whose positions are loaded by the kernel (lower.rangeify), so
`x[idx]` costs the rows it reads, O(indices x row), not O(indices x size) as a one-hot mask would. Several index
tensors broadcast together (numpy's rule); the indexed axes are merged into one and read at the flat position
sum(i_k * stride_k). As in numpy, the result's indexed dimensions stand where the indexed axes were when those
are adjacent, else in front. Negative positions count from the end. Positions known on the host (lists,
arrays, realized tensors) are checked and an out-of-range one raises IndexError; a lazy index cannot be
checked without running it, and an out-of-range position there reads 0 (a kernel never reads out of bounds).
A bool mask selects the positions where it is true: its count decides the result's shape, so the mask is
realized (as torch synchronizes on it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import dtypes
from rewrite.errors import DTypeError, ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import elementwise as _ew
from tensor import movement as _mv
from tensor.helpers import broadcast_shape

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def _is_data_index(i: object) -> bool:
    return isinstance(i, (tt.Tensor, list, np.ndarray))


def getitem(x: Tensor, index: object) -> Tensor:
    """Basic indexing (tensor.movement.getitem) plus integer and bool tensors, lists and arrays as indices."""
    idx = index if isinstance(index, tuple) else (index,)
    if not any(_is_data_index(i) for i in idx):
        return _mv.getitem(x, index)
    # expand the ellipsis, then index with ':' in place of each data index and locate those axes in the result
    n_real = sum(1 if not _is_data_index(i) else _index_rank(i, x.device) for i in idx
                 if i is not None and i is not Ellipsis)
    if sum(i is Ellipsis for i in idx) > 1:
        raise IndexError("getitem: an index can only have a single ellipsis (...)")
    if n_real > x.ndim:
        raise IndexError(f"getitem: too many indices for a tensor of shape {fmt_shape(x.shape)}")
    if any(i is Ellipsis for i in idx):
        e = next(k for k, i in enumerate(idx) if i is Ellipsis)
        idx = idx[:e] + (slice(None),) * (x.ndim - n_real) + idx[e + 1:]
    basic: list = []
    data: list[tuple[int, Tensor]] = []  # (axis of the basic result, integer index tensor)
    in_axis = out_axis = 0
    for i in idx:
        if i is None:
            basic.append(None)
            out_axis += 1
        elif _is_data_index(i):
            for t in _int_indices(i, x, in_axis):
                basic.append(slice(None))
                data.append((out_axis, t))
                in_axis += 1
                out_axis += 1
        elif isinstance(i, slice):
            basic.append(i)
            in_axis += 1
            out_axis += 1
        else:
            basic.append(i)
            in_axis += 1
    y = _mv.getitem(x, tuple(basic))
    return take(y, [a for a, _ in data], [t for _, t in data])


def _index_rank(i: object, device: object) -> int:
    """How many axes an index consumes: a bool mask one per dimension, an integer index one."""
    if isinstance(i, tt.Tensor):
        return max(1, i.ndim) if i.dtype.is_bool else 1
    arr = np.asarray(i)
    return max(1, arr.ndim) if arr.dtype.kind == "b" else 1


def _int_indices(i: object, x: Tensor, axis: int) -> list[Tensor]:
    """An index as integer tensors, one per axis it indexes (a bool mask of rank k gives k, by nonzero)."""
    if isinstance(i, tt.Tensor):
        if i.dtype.is_bool:
            mask = i.numpy()
        elif i.dtype.is_int:
            return [i]
        else:
            raise IndexError(f"getitem: tensors used as indices must be integer or bool, got {i.dtype.name}")
    else:
        arr = np.asarray(i)
        if arr.dtype.kind == "b":
            mask = arr
        elif arr.dtype.kind in "iu" or arr.size == 0:
            return [tt.Tensor(arr.astype(np.int64 if arr.size and np.abs(arr).max() >= 2**31 else np.int32),
                              device=x.device)]
        else:
            raise IndexError(f"getitem: lists and arrays used as indices must hold ints or bools, got {arr.dtype}")
    want = tuple(x.shape[axis:axis + max(mask.ndim, 1)])
    if mask.shape != want:
        raise IndexError(f"getitem: a bool mask of shape {mask.shape} does not match the indexed axes "
                         f"{fmt_shape(want)}")
    return [tt.Tensor(p.astype(np.int32), device=x.device) for p in np.nonzero(mask)]


def take(x: Tensor, axes: list[int], indices: list[Tensor]) -> Tensor:
    """x indexed on `axes` by integer tensors `indices` (broadcast together), numpy's placement of the result."""
    sizes = [x.shape[a] for a in axes]
    shape = tuple(broadcast_shape([tuple(t.shape) for t in indices], "getitem"))
    dt = dtypes.int64 if any(t.dtype.itemsize == 8 for t in indices) or np.prod(sizes) >= 2**31 else dtypes.int32
    flat: Tensor | None = None
    stride = 1
    for a, t, n in reversed(list(zip(axes, indices, sizes, strict=True))):
        _check_range(t, n, a)
        t = t.cast(dt) if t.dtype is not dt else t
        t = (t < 0).where(t + n, t)  # negative positions count from the end
        term = t if stride == 1 else t * stride
        flat = term if flat is None else flat + term
        stride *= n
    assert flat is not None
    if tuple(flat.shape) != shape:
        flat = flat.reshape(*((1,) * (len(shape) - flat.ndim)), *flat.shape).expand(*shape)
    rest = [a for a in range(x.ndim) if a not in axes]
    u = x.uop.permute((*axes, *rest)) if axes != list(range(len(axes))) else x.uop
    u = u.reshape((int(np.prod(sizes)), *(x.shape[a] for a in rest)))
    k = int(np.prod(shape))
    u = UOp(Ops.INDEX, (u, flat.uop.reshape((k,))))
    u = u.reshape((*shape, *(x.shape[a] for a in rest)))
    adjacent = axes == list(range(axes[0], axes[0] + len(axes)))
    if adjacent and axes[0] > 0:  # the indexed dimensions stand where the indexed axes were
        nd, p = len(shape), axes[0]
        order = (*range(nd, nd + p), *range(nd), *range(nd + p, nd + len(rest)))
        u = u.permute(order)
    return tt.Tensor._wrap(u, x.device)


def _check_range(t: Tensor, n: int, axis: int) -> None:
    if not t.is_realized:
        return
    a = t.numpy()
    if a.size and (a.min() < -n or a.max() >= n):
        bad = a[(a < -n) | (a >= n)].reshape(-1)[0]
        raise IndexError(f"getitem: index {bad} is out of range for axis {axis} with size {n} (valid: {-n}..{n - 1})")


# ---------------------------------------------------------------- masks and one-hot


def one_hot(x: Tensor, num_classes: int = -1) -> Tensor:
    """torch.nn.functional.one_hot: an int tensor of x's shape + (num_classes,), 1 at each x's class (int32)."""
    if not x.dtype.is_int:
        raise DTypeError(f"one_hot: the classes must be an integer tensor, got {x.dtype.name}")
    if num_classes == -1:
        num_classes = int(x.max().item()) + 1 if x.numel() else 0
    if num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be positive or -1, got {num_classes}")
    if x.is_realized and x.numel():
        a = x.numpy()
        if a.min() < 0 or a.max() >= num_classes:
            raise IndexError(f"one_hot: class values must be in 0..{num_classes - 1}, got {a.min()}..{a.max()}")
    pos = tt.Tensor.arange(num_classes, dtype=x.dtype, device=x.device)
    return (x.unsqueeze(-1) == pos).cast(dtypes.default_int)


def masked_fill(x: Tensor, mask: Tensor, value: object) -> Tensor:
    """value where mask is true, else x (mask broadcast to x's shape; x's dtype kept)."""
    if not isinstance(mask, tt.Tensor) or not mask.dtype.is_bool:
        raise DTypeError(f"masked_fill: the mask must be a bool tensor, got "
                         f"{mask.dtype.name if isinstance(mask, tt.Tensor) else type(mask).__name__}")
    if tuple(broadcast_shape([tuple(x.shape), tuple(mask.shape)], "masked_fill")) != tuple(x.shape):
        raise ShapeError(f"masked_fill: a mask of shape {fmt_shape(mask.shape)} does not broadcast to "
                         f"{fmt_shape(x.shape)}")
    if isinstance(value, tt.Tensor):
        if value.numel() != 1:
            raise ShapeError(f"masked_fill: value must be a number or a one-element tensor, got shape "
                             f"{fmt_shape(value.shape)}")
        v: object = value.reshape(*((1,) * x.ndim)).cast(x.dtype)
    elif isinstance(value, float) and not x.dtype.is_float:
        raise DTypeError(f"masked_fill: a float value cannot fill a {x.dtype.name} tensor")
    else:
        v = tt.Tensor(value, dtype=x.dtype, device=x.device)
    return _ew.where(mask, v, x)  # type: ignore[arg-type]


def _tri(x: Tensor, diagonal: int, upper: bool, what: str) -> Tensor:
    if x.ndim < 2:
        raise ShapeError(f"{what}: needs at least 2 dimensions, got shape {fmt_shape(x.shape)}")
    r, c = x.shape[-2], x.shape[-1]
    rows = tt.Tensor.arange(r, device=x.device).reshape(r, 1)
    cols = tt.Tensor.arange(c, device=x.device).reshape(1, c)
    keep = (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)
    return _ew.where(keep, x, tt.Tensor(0, dtype=x.dtype, device=x.device))


def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """The lower triangle (elements with column - row <= diagonal), zeros elsewhere; on the last two axes."""
    return _tri(x, diagonal, False, "tril")


def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """The upper triangle (elements with column - row >= diagonal), zeros elsewhere; on the last two axes."""
    return _tri(x, diagonal, True, "triu")


def clamp(x: Tensor, min: object = None, max: object = None) -> Tensor:  # torch's keyword names
    """torch.clamp: min=, max= (either may be omitted; numbers or tensors)."""
    if min is None and max is None:
        raise ValueError("clamp (clip): give at least one of min= and max=")
    return _ew.clip(x, min, max)  # type: ignore[arg-type]


__all__ = ["clamp", "getitem", "masked_fill", "one_hot", "take", "tril", "triu"]
