"""scatter, scatter_reduce (sum, prod, mean, amax, amin; include_self) and `x[idx] = v` (__setitem__).

scatter, scatter_add and scatter_reduce's sum and mean write through loaded positions (rewrite.stores): one
kernel whose loop over the index runs in order, O(index size) after a copy of x, exact on duplicate indices
(they accumulate; `scatter` keeps the last write, torch leaves the winner unspecified), differentiable by the
scatter gradient rule. prod, amax and amin have no accumulating store (ATOMICADD is the only read-modify-write
op), so they are built from a hit mask: element j of the index hits output position p along `dim` when
index[j] == p, and each position reduces the values that hit it (where(hit, src, identity)): O(index size x axis
size). `x[idx] = v` is `x.assign(...)` of the updated value: in place on a realized tensor (tensor.inplace), by
pad and select for ints and step-1 slices, by a scatter over the flat positions otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import dtypes
from rewrite.errors import ShapeError
from rewrite.stores import scatter_add as _scatter_add_uop
from rewrite.stores import scatter_store
from rewrite.uop import UOp
from tensor import movement as _mv
from tensor.helpers import norm_axis

if TYPE_CHECKING:
    from tensor.tensor import Tensor

_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _hits(x: Tensor, dim: int, index: Tensor, src: Tensor, what: str) -> tuple[int, Tensor, Tensor, Tensor]:
    """(d, hit, src', valid): hit[..., j, p] along a new last axis p of size x.shape[d] (index's axis d is j,
    moved to the second last); src' is src cut to index's shape in the same layout."""
    d = norm_axis(dim, x.ndim, what, x.shape)
    if not isinstance(index, tt.Tensor) or not index.dtype.is_int:
        raise TypeError(f"{what}: index must be an integer Tensor")
    if index.ndim != x.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, x.shape, strict=True)) if i != d):
        raise ShapeError(f"{what}: index shape {fmt_shape(index.shape)} must have the rank of {fmt_shape(x.shape)} "
                         f"and be no larger outside axis {d}")
    if src.ndim != x.ndim or any(a < b for a, b in zip(src.shape, index.shape, strict=True)):
        raise ShapeError(f"{what}: src shape {fmt_shape(src.shape)} must be at least the index's "
                         f"{fmt_shape(index.shape)}")
    n = x.shape[d]
    if index.is_realized and index.numel():
        a = index.numpy()
        if a.min() < -n or a.max() >= n:
            raise IndexError(f"{what}: index values must be in {-n}..{n - 1} for axis {d}, got {a.min()}..{a.max()}")
    src = src.shrink([(0, s) for s in index.shape]) if tuple(src.shape) != tuple(index.shape) else src
    idx = (index < 0).where(index + n, index)
    idx, src = idx.transpose(d, -1).unsqueeze(-1), src.transpose(d, -1).unsqueeze(-1)  # (..., j, 1)
    pos = tt.Tensor.arange(n, dtype=idx.dtype, device=x.device)
    return d, idx == pos, src, idx


def _back(x: Tensor, d: int, out: Tensor, touched: Tensor) -> Tensor:
    """`out` (..., p) in index's layout with axis d last, put back into x's layout and shape: positions outside
    the index's extent on the other axes keep x."""
    out, touched = out.transpose(d, -1), touched.transpose(d, -1)
    if tuple(out.shape) != tuple(x.shape):
        pads = [(0, b - a) for a, b in zip(out.shape, x.shape, strict=True)]
        out, touched = out.pad(pads), touched.pad(pads, value=False)
    return touched.where(out, x)


def _stored(x: Tensor, dim: int, index: Tensor, src: Tensor, what: str) -> tuple[UOp, UOp, UOp] | None:
    """(x's flat storage, the flat positions, src's values in index's order) for a store through loaded
    positions, after the checks of _hits; None when there is nothing to write."""
    _hits(x, dim, index, src, what)  # the shape and range checks
    if index.numel() == 0:
        return None
    d = norm_axis(dim, x.ndim, what, x.shape)
    src = src.shrink([(0, s) for s in index.shape]) if tuple(src.shape) != tuple(index.shape) else src
    pos = _mv.flat_positions(tuple(x.shape), d, index)
    return x.uop.reshape((x.numel(),)), pos, src.uop.reshape((index.numel(),))


def scatter(x: Tensor, dim: int, index: Tensor, src: Tensor | float | int) -> Tensor:
    """torch.scatter: a copy of x with x[..., index[..., j, ...], ...] = src[..., j, ...] along dim."""
    s = src if isinstance(src, tt.Tensor) else tt.Tensor.full(tuple(index.shape), src, dtype=x.dtype, device=x.device)
    if (parts := _stored(x, dim, index, s.cast(x.dtype), "scatter")) is None:
        return x
    base, pos, vals = parts
    return tt.Tensor._wrap(scatter_store(base, pos, vals).reshape(tuple(x.shape)), x.device)


def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool = True) -> Tensor:
    """torch.scatter_reduce: each position along dim combines the src values whose index names it (and x's
    own value with include_self) by sum, prod, mean, amax or amin; positions nobody names keep x."""
    if reduce not in _REDUCES:
        raise ValueError(f"scatter_reduce: reduce must be one of {', '.join(_REDUCES)}, got {reduce!r}")
    if reduce in ("sum", "mean") and not x.dtype.is_bool:
        return _scatter_sum(x, dim, index, src.cast(x.dtype), reduce, include_self)
    d, hit, sv, _ = _hits(x, dim, index, src.cast(x.dtype), "scatter_reduce")
    touched = hit.any(-2)
    xs = x.transpose(d, -1)
    if tuple(xs.shape[:-1]) != tuple(touched.shape[:-1]):
        xs = xs.shrink([(0, s) for s in touched.shape])
    dt = x.dtype
    if reduce in ("sum", "mean"):
        red = hit.where(sv, tt.Tensor(0, dtype=dt, device=x.device)).sum(-2).cast(dt)
        if reduce == "sum":
            out = red + xs if include_self else red
        else:
            cnt = hit.cast(dtypes.int32).sum(-2).cast(dt) + (1 if include_self else 0)
            tot = red + xs if include_self else red
            out = tot / cnt if dt.is_float else tot // cnt
    elif reduce == "prod":
        red = hit.where(sv, tt.Tensor(1, dtype=dt, device=x.device)).prod(-2).cast(dt)
        out = red * xs if include_self else red
    else:
        big = float("inf") if dt.is_float else dt.max
        ident = -big if reduce == "amax" else big
        if dt.is_float:
            ident_t = tt.Tensor(ident, dtype=dt, device=x.device)
        else:
            ident_t = tt.Tensor(dt.min if reduce == "amax" else dt.max, dtype=dt, device=x.device)
        filled = hit.where(sv, ident_t)
        red = filled.max(axis=-2) if reduce == "amax" else filled.min(axis=-2)
        if include_self:
            red = red.maximum(xs) if reduce == "amax" else red.minimum(xs)
        out = red
    return _back(x, d, out, touched)


def _scatter_sum(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str, include_self: bool) -> Tensor:
    """scatter_reduce's sum and mean by scatter-adds: of src, and for the mean of ones (the counts)."""
    if (parts := _stored(x, dim, index, src, "scatter_reduce")) is None:
        return x
    base, pos, vals = parts
    zero = vals.const_like(0)
    start = base if include_self else scatter_store(base, pos, zero)
    out = _scatter_add_uop(start, pos, vals)
    if reduce == "mean":
        dt = x.dtype
        init = UOp.const(1 if include_self else 0, dt).reshape((1,)).expand(base.shape)
        cnt = _scatter_add_uop(init, pos, vals.const_like(1))
        touched = scatter_store(UOp.const(False, dtypes.bool).reshape((1,)).expand(base.shape), pos,
                                UOp.const(True, dtypes.bool).reshape((1,)).expand(vals.shape))
        safe = touched.where(cnt, cnt.const_like(1))
        mean = out / safe if dt.is_float else out // safe
        out = touched.where(mean, base)
    return tt.Tensor._wrap(out.reshape(tuple(x.shape)), x.device)


def scatter_add(x: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:
    return scatter_reduce(x, dim, index, src, "sum")


# ---------------------------------------------------------------- __setitem__


def setitem(x: Tensor, index: object, value: object) -> None:
    """x[index] = value, in place (see the module docstring)."""
    v = value if isinstance(value, tt.Tensor) else tt.Tensor(value, dtype=x.dtype, device=x.device)
    n = x.numel()
    pos = tt.Tensor.arange(n, dtype=dtypes.int32 if n < 2**31 else dtypes.int64, device=x.device).reshape(*x.shape)
    sel = pos[index]  # the flat positions written, in the shape of x[index]
    if tuple(v.shape) != tuple(sel.shape):
        vs, ss = tuple(v.shape), tuple(sel.shape)
        if len(vs) > len(ss) or any(a != 1 and a != b for a, b in zip(vs[::-1], ss[::-1], strict=False)):
            raise ShapeError(f"setitem: a value of shape {fmt_shape(vs)} cannot be broadcast to the indexed shape "
                             f"{fmt_shape(ss)}")
        v = v.reshape(*((1,) * (len(ss) - len(vs)) + vs)).expand(*ss)
    if v.dtype is not x.dtype:
        if v.dtype.is_float and not x.dtype.is_float:
            from rewrite.errors import DTypeError

            raise DTypeError(f"setitem: a {v.dtype.name} value cannot be stored into a {x.dtype.name} tensor")
        v = v.cast(x.dtype)
    k = int(np.prod(sel.shape))
    if k == 0:
        return
    flat = scatter(x.reshape(n), 0, sel.reshape(k), v.reshape(k))
    x.assign(flat.reshape(*x.shape))


__all__ = ["scatter", "scatter_add", "scatter_reduce", "setitem"]
