"""Reductions: sum prod max min mean var std any all, argmax argmin, cumsum, softmax log_softmax logsumexp.

Everything is the IR's REDUCE (ADD, MAX or MUL; reduced axes stay as size 1, and are reshaped away here unless
keepdim) plus elementwise ops and views:

* min is max on an order-reversed value: -x for floats (nan still wins), ~x for integers (bitwise not reverses
  both signed and unsigned order and, unlike negation, cannot overflow), not-x for bool.
* argmax is max plus positions: among the positions where x equals its max (or is nan, which numpy's argmax
  returns first), take the max of n - position, so the smallest position wins. No special op.
* cumsum is the spec's prefix_sum (pad, tile, reshape, shrink, sum) along the last axis, with a permute around it.

Axis arguments take both spellings: numpy's `axis=` / `keepdims=` and torch's `dim=` / `keepdim=` (both of one
pair given is a TypeError naming both). max and min follow torch when given one int dimension, positionally or as
`dim=`: `t.max(1)` is a `ValuesIndices(values, indices)` named tuple (torch.return_types.max; the index of the
first maximum, or of the first nan); `t.max(axis=1)` is numpy's, the values only, as is `t.max()` and a tuple of
axes; `t.max(other)` with a Tensor is `maximum`, as torch.max(a, b).

Accumulation dtypes follow numpy: sum, prod and cumsum of bool and signed ints give int64, of unsigned ints
uint64; float16 and bfloat16 accumulate in float32 and round back; mean of ints is default_float.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Literal, NamedTuple, overload

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes
from rewrite.errors import ShapeError, VariableError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import elementwise as ew
from tensor.helpers import alias_arg, norm_axes, norm_axis, to_dtype
from tensor.logic import to_bool

if TYPE_CHECKING:
    from tensor.tensor import Tensor

Axis = int | Sequence[int] | None
_HALF = (dtypes.float16, dtypes.bfloat16)


class ValuesIndices(NamedTuple):
    """What `t.max(dim)` and `t.min(dim)` return, as torch.return_types.max: the values and their (first) index."""

    values: Tensor
    indices: Tensor


def _axis_keep(what: str, axis: Axis, dim: Axis, keepdim: bool | None, keepdims: bool | None) -> tuple[Axis, bool]:
    """The axes and keepdim, whichever spelling (numpy's or torch's) was used."""
    return alias_arg(what, "axis", axis, "dim", dim), bool(alias_arg(what, "keepdim", keepdim, "keepdims", keepdims))


def _wrap(x: Tensor, u: UOp) -> Tensor:
    return tt.Tensor._wrap(u, x.device)


def sum_acc_dtype(dt: DType) -> DType:
    """Where a sum of `dt` accumulates (numpy's rule, halves in float32)."""
    if dt.is_bool or dt.kind == "i":
        return dtypes.int64
    if dt.kind == "u":
        return dtypes.uint64
    return dtypes.float32 if dt in _HALF else dt


def _drop(u: UOp, axes: tuple[int, ...], keepdim: bool) -> UOp:
    return u if keepdim else u.reshape(tuple(d for i, d in enumerate(u.shape) if i not in axes))


def reduce_uop(u: UOp, op: Ops, axes: tuple[int, ...], keepdim: bool) -> UOp:
    """REDUCE over `axes` (none: unchanged), then drop them unless keepdim."""
    return _drop(u.reduce(op, axes) if axes else u, axes, keepdim)


def _reduce(x: Tensor, op: Ops, axis: Axis, keepdim: bool, what: str, acc: DType, out: DType) -> Tensor:
    axes = norm_axes(axis, x.ndim, what, x.shape)
    return _wrap(x, reduce_uop(x.uop.cast(acc), op, axes, keepdim).cast(out))


def sum_(x: Tensor, axis: Axis = None, keepdim: bool | None = None, dtype: object = None, *, dim: Axis = None,
         keepdims: bool | None = None) -> Tensor:
    """Sum over `axis` (all axes when None); `dtype` sets the accumulation and result dtype."""
    axis, keepdim = _axis_keep("sum", axis, dim, keepdim, keepdims)
    if dtype is not None:
        dt = to_dtype(dtype, "sum")
        return _reduce(x, Ops.MAX if dt.is_bool else Ops.ADD, axis, keepdim, "sum", dt, dt)  # a bool sum is any()
    acc = sum_acc_dtype(x.dtype)
    return _reduce(x, Ops.ADD, axis, keepdim, "sum", acc, x.dtype if x.dtype in _HALF else acc)


def prod(x: Tensor, axis: Axis = None, keepdim: bool | None = None, *, dim: Axis = None,
         keepdims: bool | None = None) -> Tensor:
    axis, keepdim = _axis_keep("prod", axis, dim, keepdim, keepdims)
    acc = sum_acc_dtype(x.dtype)
    return _reduce(x, Ops.MUL, axis, keepdim, "prod", acc, x.dtype if x.dtype in _HALF else acc)


def _check_nonempty(x: Tensor, axes: tuple[int, ...], what: str) -> None:
    if any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"{what}: cannot reduce over an empty axis of shape {fmt_shape(x.shape)} (axes {axes}): the "
                         f"result of {what} over no elements is undefined")


@overload
def max_(x: Tensor, dim: int, keepdim: bool | None = None, *, keepdims: bool | None = None) -> ValuesIndices: ...
@overload
def max_(x: Tensor, dim: Tensor) -> Tensor: ...
@overload
def max_(x: Tensor, dim: Sequence[int] | None = None, keepdim: bool | None = None, *, axis: Axis = None,
         keepdims: bool | None = None) -> Tensor: ...
def max_(x: Tensor, dim: Axis | Tensor = None, keepdim: bool | None = None, *, axis: Axis = None,
         keepdims: bool | None = None) -> Tensor | ValuesIndices:
    """The maximum: torch's (values, indices) for one int `dim`, else the values over `axis` (module docstring)."""
    return _extreme(x, dim, keepdim, axis, keepdims, "max")


def _max_values(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    return _wrap(x, reduce_uop(x.uop, Ops.MAX, axes, keepdim))


def _min_values(x: Tensor, axes: tuple[int, ...], keepdim: bool) -> Tensor:
    return _wrap(x, _order_reversed(reduce_uop(_order_reversed(x.uop), Ops.MAX, axes, keepdim)))


def _extreme(x: Tensor, dim: Axis | Tensor, keepdim: bool | None, axis: Axis, keepdims: bool | None,
             what: Literal["max", "min"]) -> Tensor | ValuesIndices:
    if isinstance(dim, tt.Tensor):  # torch.max(a, b)
        if keepdim is not None or axis is not None or keepdims is not None:
            raise TypeError(f"{what}(other): an elementwise {what} takes no axis or keepdim")
        return ew.maximum(x, dim) if what == "max" else ew.minimum(x, dim)
    keep = bool(alias_arg(what, "keepdim", keepdim, "keepdims", keepdims))
    if dim is not None and axis is not None:
        raise TypeError(f"{what}() got both dim= and axis=, two spellings of one argument; give one of them")
    values = _max_values if what == "max" else _min_values
    if dim is not None and not isinstance(dim, (tuple, list)):  # one int dim: torch's (values, indices)
        a = norm_axis(dim, x.ndim, what, x.shape)  # type: ignore[arg-type]  # norm_axis rejects a non-int
        _check_nonempty(x, (a,), what)
        return ValuesIndices(values(x, (a,), keep), _arg(x, a, keep, f"{what}(dim)", what == "min"))
    axes = norm_axes(dim if dim is not None else axis, x.ndim, what, x.shape)
    _check_nonempty(x, axes, what)
    return values(x, axes, keep)


def _order_reversed(u: UOp) -> UOp:
    """A value whose order is the reverse of u's, and which is its own inverse."""
    if u.dtype.is_float:
        return -u
    if u.dtype.is_bool:
        return UOp(Ops.NOT, (u,))
    return u ^ u.const_like(-1)


@overload
def min_(x: Tensor, dim: int, keepdim: bool | None = None, *, keepdims: bool | None = None) -> ValuesIndices: ...
@overload
def min_(x: Tensor, dim: Tensor) -> Tensor: ...
@overload
def min_(x: Tensor, dim: Sequence[int] | None = None, keepdim: bool | None = None, *, axis: Axis = None,
         keepdims: bool | None = None) -> Tensor: ...
def min_(x: Tensor, dim: Axis | Tensor = None, keepdim: bool | None = None, *, axis: Axis = None,
         keepdims: bool | None = None) -> Tensor | ValuesIndices:
    """The minimum: torch's (values, indices) for one int `dim`, else the values over `axis` (module docstring)."""
    return _extreme(x, dim, keepdim, axis, keepdims, "min")


def any_(x: Tensor, axis: Axis = None, keepdim: bool | None = None, *, dim: Axis = None,
         keepdims: bool | None = None) -> Tensor:
    axis, keepdim = _axis_keep("any", axis, dim, keepdim, keepdims)
    axes = norm_axes(axis, x.ndim, "any", x.shape)
    return _wrap(x, reduce_uop(to_bool(x).uop, Ops.MAX, axes, keepdim))


def all_(x: Tensor, axis: Axis = None, keepdim: bool | None = None, *, dim: Axis = None,
         keepdims: bool | None = None) -> Tensor:
    axis, keepdim = _axis_keep("all", axis, dim, keepdim, keepdims)
    axes = norm_axes(axis, x.ndim, "all", x.shape)
    return _wrap(x, UOp(Ops.NOT, (reduce_uop(UOp(Ops.NOT, (to_bool(x).uop,)), Ops.MAX, axes, keepdim),)))


def _count(x: Tensor, axes: tuple[int, ...]) -> int | UOp:
    """The number of elements reduced: an int, or an index expression when an axis is symbolic."""
    return math.prod(x.shape[a] for a in axes)


def _float_dtype(x: Tensor) -> DType:
    return x.dtype if x.dtype.is_float else dtypes.default_float


def _float_acc(x: Tensor, out: DType) -> DType:
    """What mean and var sum in: float32 for 16-bit floats, float64 for integers and bool (numpy's choice: a
    float32 sum of int32 values near +-2**31 that cancel loses the result's every digit; float64 holds any sum of
    fewer than 2**21 of them exactly, and the result is rounded to `out` once), else the dtype itself."""
    if not x.dtype.is_float:
        return dtypes.float64
    return dtypes.float32 if out in _HALF else out


def mean(x: Tensor, axis: Axis = None, keepdim: bool | None = None, *, dim: Axis = None,
         keepdims: bool | None = None) -> Tensor:
    """Sum / count; integer and bool inputs give default_float. Over no elements it is nan."""
    axis, keepdim = _axis_keep("mean", axis, dim, keepdim, keepdims)
    axes = norm_axes(axis, x.ndim, "mean", x.shape)
    out = _float_dtype(x)
    acc = _float_acc(x, out)
    s = reduce_uop(x.uop.cast(acc), Ops.ADD, axes, keepdim)
    n = _count(x, axes)
    if isinstance(n, UOp):  # a symbolic count: 0 elements give 0/0 = nan, as below
        return _wrap(x, (s / _sym_scalar(n, s)).cast(out))
    return _wrap(x, (s / s.const_like(n) if n else s * s.const_like(math.nan)).cast(out))


def _sym_scalar(n: UOp, like: UOp) -> UOp:
    """A symbolic count as a value of `like`'s dtype, broadcast to its shape."""
    return ew.expand_uop(n.cast(like.dtype), like.shape)


def var(x: Tensor, axis: Axis = None, keepdim: bool | None = None, correction: int = 1, *, dim: Axis = None,
        keepdims: bool | None = None) -> Tensor:
    """Variance with Bessel's correction by default (torch and tinygrad; numpy's ddof=0 is correction=0)."""
    axis, keepdim = _axis_keep("var", axis, dim, keepdim, keepdims)
    axes = norm_axes(axis, x.ndim, "var", x.shape)
    out = _float_dtype(x)
    acc = _float_acc(x, out)
    xf = x.uop.cast(acc)
    n = _count(x, axes)
    total = reduce_uop(xf, Ops.ADD, axes, True)
    m = total / (_sym_scalar(n, total) if isinstance(n, UOp) else UOp.const(max(n, 1), acc))
    d = xf - ew.expand_uop(m, xf.shape)
    s = reduce_uop(d * d, Ops.ADD, axes, keepdim)
    if isinstance(n, UOp):
        return _wrap(x, (s / _sym_scalar(n - correction, s)).cast(out))
    return _wrap(x, (s / s.const_like(max(n - correction, 0))).cast(out))


def std(x: Tensor, axis: Axis = None, keepdim: bool | None = None, correction: int = 1, *, dim: Axis = None,
        keepdims: bool | None = None) -> Tensor:
    axis, keepdim = _axis_keep("std", axis, dim, keepdim, keepdims)
    return ew.sqrt(var(x, axis, keepdim, correction))


def _first_max_index(u: UOp, axis: int, keepdim: bool) -> UOp:
    """Index of the first maximum of u along `axis` (the first nan if there is one), as int64."""
    n = u.shape[axis]
    m = ew.expand_uop(u.reduce(Ops.MAX, (axis,)), u.shape)
    hit = u.eq(m) | u.ne(u) if u.dtype.is_float else u.eq(m)
    idt = dtypes.int32 if n < 2**31 - 1 else dtypes.int64
    pos = arange_uop(n, idt).reshape(tuple(n if i == axis else 1 for i in range(len(u.shape)))).expand(u.shape)
    score = UOp(Ops.WHERE, (hit, pos.const_like(n) - pos, pos.const_like(0)))
    best = reduce_uop(score, Ops.MAX, (axis,), keepdim)
    return (best.const_like(n) - best).cast(dtypes.int64)


def _arg(x: Tensor, axis: int | None, keepdim: bool, what: str, reverse: bool) -> Tensor:
    u = _order_reversed(x.uop) if reverse else x.uop
    sizes = x.shape if axis is None else (x.shape[norm_axis(axis, x.ndim, what, x.shape)],)
    if any(isinstance(d, UOp) for d in sizes):
        raise VariableError(f"{what}: positions along a symbolic axis are not supported (shape "
                            f"{fmt_shape(x.shape)}, axis {axis}); max(axis=...) and min(axis=...) give the values")
    if axis is None:
        if x.numel() == 0:
            raise ShapeError(f"{what}: cannot take the {what} of an empty tensor of shape {fmt_shape(x.shape)}")
        r = _first_max_index(u.reshape((x.numel(),)), 0, False)
        return _wrap(x, r.reshape((1,) * x.ndim) if keepdim else r)
    a = norm_axis(axis, x.ndim, what, x.shape)
    _check_nonempty(x, (a,), what)
    return _wrap(x, _first_max_index(u, a, keepdim))


def argmax(x: Tensor, axis: int | None = None, keepdim: bool | None = None, *, dim: int | None = None,
           keepdims: bool | None = None) -> Tensor:
    """Index of the first maximum (over the flattened tensor when axis is None), int64 as numpy and torch."""
    a, keep = _axis_keep("argmax", axis, dim, keepdim, keepdims)
    return _arg(x, a, keep, "argmax", False)  # type: ignore[arg-type]  # one int: norm_axis checks


def argmin(x: Tensor, axis: int | None = None, keepdim: bool | None = None, *, dim: int | None = None,
           keepdims: bool | None = None) -> Tensor:
    a, keep = _axis_keep("argmin", axis, dim, keepdim, keepdims)
    return _arg(x, a, keep, "argmin", True)  # type: ignore[arg-type]  # one int: norm_axis checks


# ---------------------------------------------------------------- prefix sums and arange


# a prefix sum longer than _CUM_DIRECT is taken in blocks of _CUM_BLOCK: the sums within each block, then the
# blocks' totals' prefix sums (the same way, recursively) added to the blocks after them. The direct form's work
# is n^2 adds, the blocked one's about 53 ops per element (cumsum of 65,536 on the cpu: 15.8 s -> 3.7 ms)
_CUM_DIRECT = 64
_CUM_BLOCK = 16


def prefix_sum_last(u: UOp) -> UOp:
    """Inclusive prefix sum along the last axis: the spec's prefix_sum with leading axes carried along.

    Pad n-1 zeros in front (length 2n-1), tile n+1 times and flatten, keep 2n*n elements and view them as n rows
    of 2n: row i starts i elements further into a tile than row i-1, so its first n entries are n-1-i zeros then
    x[0..i]. Summing each row's first n entries gives the prefix sums. Beyond _CUM_DIRECT elements the axis is
    first cut into blocks (`_blocked_prefix_sum`)."""
    *lead, n = u.shape
    if n <= 1:
        return u
    if isinstance(n, int) and n > _CUM_DIRECT:
        return _blocked_prefix_sum(u)
    k, z = len(lead), [0] * len(lead)
    x = u.pad([*z, n - 1], [*z, 0])
    x = x.reshape((*lead, 1, 2 * n - 1)).expand((*lead, n + 1, 2 * n - 1))
    x = x.reshape((*lead, (n + 1) * (2 * n - 1))).shrink([*z, 0], [*lead, 2 * n * n])
    x = x.reshape((*lead, n, 2 * n)).shrink([*z, 0, 0], [*lead, n, n])
    return x.reduce(Ops.ADD, (k + 1,)).reshape((*lead, n))


def _blocked_prefix_sum(u: UOp) -> UOp:
    """The prefix sum of the last axis (n of it) in m blocks of b = _CUM_BLOCK (zeros padded at the end): each
    block's own prefix sums, plus the sum of all the blocks before it (the blocks' totals' prefix sums, shifted
    by one block)."""
    *lead, n = u.shape
    b = _CUM_BLOCK
    m = -(-n // b)
    k, z = len(lead), [0] * len(lead)
    x = u.pad([*z, 0], [*z, m * b - n]).reshape((*lead, m, b))
    ar = _arange_index(b)  # each block's own prefix sums: a sum of x[k] over k <= j for each j, a (b, b) mask
    upto = ar.reshape((1, b)).expand((b, b)) < (ar + 1).reshape((b, 1)).expand((b, b))  # [j, k]: k <= j
    mask = upto.reshape((*[1] * k, 1, b, b)).expand((*lead, m, b, b))
    xs = x.reshape((*lead, m, 1, b)).expand((*lead, m, b, b))
    inner = mask.where(xs, UOp.const(0, u.dtype)).reduce(Ops.ADD, (k + 2,)).reshape((*lead, m, b))
    totals = x.reduce(Ops.ADD, (k + 1,)).reshape((*lead, m))  # not inner's last column: inner stays one kernel
    # the blocks' offsets are stored (m values): fused, every element would sum its block's prefix again
    offsets = UOp(Ops.CONTIGUOUS, (prefix_sum_last(totals),))
    before = offsets.pad([*z, 1], [*z, 0]).shrink([*z, 0], [*lead, m])  # exclusive: 0 first
    out = inner + before.reshape((*lead, m, 1)).expand((*lead, m, b))
    return out.reshape((*lead, m * b)).shrink([*z, 0], [*lead, n])


# below this size arange is the spec's prefix sum of ones; above it, two smaller aranges are combined as
# row * width + column, so that evaluating the graph as written (rewrite.evaluate) stays linear in n
_ARANGE_DIRECT = 16


def _arange_index(n: int) -> UOp:
    if n <= _ARANGE_DIRECT:
        ones = UOp.const(1, dtypes.index).reshape((1,)).expand((n,))
        return prefix_sum_last(ones) - 1 if n else ones
    b = math.isqrt(n - 1) + 1
    a = -(-n // b)
    hi = (_arange_index(a) * b).reshape((a, 1)).expand((a, b))
    lo = _arange_index(b).reshape((1, b)).expand((a, b))
    return (hi + lo).reshape((a * b,)).shrink((0,), (n,))


@functools.lru_cache(maxsize=256)
def arange_uop(n: int, dtype: DType) -> UOp:
    """[0, 1, ..., n-1] in an integer dtype, from CONST, views, ADD/MUL and REDUCE only.

    Counted in `dtypes.index` and cast once: rangeify collapses each prefix sum of ones to its output index
    (lower.reduce_collapse) and the exact index math then folds row * width + column back to the kernel's
    RANGE, so the kernel stores `cast(i)` with no reduction. The graph (constants only) is kept for the next
    call: a loss's gather builds the same aranges at every training step."""
    return _arange_index(n).cast(dtype)


class _Default(Enum):
    AXIS = "axis 0"  # cumsum's default, apart from None (the flattened tensor), so that dim= can be told apart


def cumsum(x: Tensor, axis: int | Literal[_Default.AXIS] | None = _Default.AXIS, *,
           dim: int | Literal[_Default.AXIS] | None = _Default.AXIS) -> Tensor:
    """Inclusive cumulative sum along `axis` or `dim` (default 0; the flattened tensor when None), accumulating as
    sum does."""
    if axis is not _Default.AXIS and dim is not _Default.AXIS:
        raise TypeError("cumsum() got both axis= and dim=, two spellings of one argument; give one of them")
    axis = axis if axis is not _Default.AXIS else dim if dim is not _Default.AXIS else 0
    if axis is None:
        x = tt.Tensor._wrap(x.uop.reshape((x.numel(),)), x.device)
        axis = 0
    if x.ndim == 0:
        return sum_(x)
    a = norm_axis(axis, x.ndim, "cumsum", x.shape)
    acc = sum_acc_dtype(x.dtype)
    order = [i for i in range(x.ndim) if i != a] + [a]
    inverse = [order.index(i) for i in range(x.ndim)]
    u = prefix_sum_last(x.uop.cast(acc).permute(order)).permute(inverse)
    return _wrap(x, u.cast(x.dtype if x.dtype in _HALF else acc))


# ---------------------------------------------------------------- softmax family


def _shifted(x: Tensor, axis: int) -> tuple[Tensor, Tensor]:
    """x - max(x) along axis (in a float dtype), and the max itself with keepdim. The max is detached: the results
    do not depend on the shift, so its gradient is zero and the backward pass need not compute it."""
    xf = x if x.dtype.is_float else x.cast(dtypes.default_float)
    m = max_(xf, axis=axis, keepdim=True).detach()
    return xf - m, m


def softmax(x: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis` or `dim` (default: the last axis), as exp(x) * (1 / sum) (torch's CPU
    softmax too): one reciprocal per row instead of a division per element, the slowest vector op on x86
    (softmax 4096x4096 9.81 -> 9.42 ms on an Intel AVX-512 host, quiet). The product rounds twice: within 1.5 ulp
    instead of 0.5."""
    a = norm_axis(_last(alias_arg("softmax", "axis", axis, "dim", dim)), x.ndim, "softmax", x.shape)
    if x.dtype in _HALF:  # in float32, rounded once (torch's softmax of 16-bit floats: float math, one rounding)
        return softmax(x.cast(dtypes.float32), a).cast(x.dtype)
    s, _ = _shifted(x, a)
    e = s.exp()
    return e * sum_(e, a, keepdim=True).reciprocal()


def _last(axis: int | None) -> int:
    return -1 if axis is None else axis


def log_softmax(x: Tensor, axis: int | None = None, *, dim: int | None = None) -> Tensor:
    """log(softmax(x)) along `axis` or `dim` (default: the last axis), without forming softmax."""
    a = norm_axis(_last(alias_arg("log_softmax", "axis", axis, "dim", dim)), x.ndim, "log_softmax", x.shape)
    if x.dtype in _HALF:  # as softmax: in float32, rounded once
        return log_softmax(x.cast(dtypes.float32), a).cast(x.dtype)
    s, _ = _shifted(x, a)
    return s - sum_(s.exp(), a, keepdim=True).log()


def logsumexp(x: Tensor, axis: Axis = None, keepdim: bool | None = None, *, dim: Axis = None,
              keepdims: bool | None = None) -> Tensor:
    """log(sum(exp(x))) without overflow: the max is taken out first (an infinite max is taken out as 0)."""
    axis, keepdim = _axis_keep("logsumexp", axis, dim, keepdim, keepdims)
    axes = norm_axes(axis, x.ndim, "logsumexp", x.shape)
    xf = x if x.dtype.is_float else x.cast(dtypes.default_float)
    m = tt.Tensor._wrap(reduce_uop(xf.uop, Ops.MAX, axes, True).detach(), x.device)  # shift: no gradient
    m = m.isinf().where(0.0, m)
    lse = sum_((xf - m).exp(), axes, keepdim=True).log() + m
    return lse if keepdim else tt.Tensor._wrap(_drop(lse.uop, axes, False), x.device)


__all__ = ["ValuesIndices", "all_", "any_", "arange_uop", "argmax", "argmin", "cumsum", "log_softmax", "logsumexp",
           "max_", "mean", "min_", "prefix_sum_last", "prod", "reduce_uop", "softmax", "std", "sum_",
           "sum_acc_dtype", "var"]
