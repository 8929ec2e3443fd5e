"""sort, argsort and topk along one axis, stable as torch's stable sort (equal values keep their order), by
ranks: element i goes to position rank_i = #{j: x_j before x_i} + #{j < i: x_j == x_i}, so no data-dependent
control flow is needed. The cost is O(n^2) per sorted row (n comparisons per element), fine for the rows of
attention scores or logits it is used on, not for sorting millions of elements. The values are read with
gather, so they carry gradients as torch's do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewrite.dtype import dtypes
from rewrite.errors import ShapeError
from tensor.helpers import norm_axis

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def _ranks(x: Tensor, descending: bool) -> Tensor:
    """Each element's position in the stable sort along the last axis."""
    import tensor.tensor as tt

    n = x.shape[-1]
    xi, xj = x.unsqueeze(-1), x.unsqueeze(-2)  # (..., i, 1) against (..., 1, j)
    before = (xj > xi) if descending else (xj < xi)
    pos = tt.Tensor.arange(n, device=x.device)
    earlier = pos.reshape(1, n) < pos.reshape(n, 1)  # j < i
    return (before | ((xj == xi) & earlier)).cast(dtypes.int32).sum(-1).cast(dtypes.int32)


def argsort(x: Tensor, dim: int = -1, descending: bool = False) -> Tensor:
    """The positions that sort x along dim (int64, as torch), stable."""
    import tensor.tensor as tt

    if x.ndim == 0:
        return tt.Tensor(0, dtype=dtypes.int64, device=x.device)
    d = norm_axis(dim, x.ndim, "sort", x.shape)
    xs = x.transpose(d, -1) if d != x.ndim - 1 else x
    n = xs.shape[-1]
    r = _ranks(xs, descending)  # (..., i): where element i goes
    pos = tt.Tensor.arange(n, device=x.device)
    # the element that lands on position p: the i with rank_i == p
    hit = r.unsqueeze(-2) == pos.reshape(n, 1)  # (..., p, i)
    idx = hit.where(pos.reshape(1, n), 0).sum(-1).cast(dtypes.int64)
    return idx.transpose(d, -1) if d != x.ndim - 1 else idx


def sort(x: Tensor, dim: int = -1, descending: bool = False) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along dim, stable; the values have gradients (through gather)."""
    if x.ndim == 0:
        return x, argsort(x)
    idx = argsort(x, dim, descending)
    return x.gather(dim, idx), idx


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Tensor, Tensor]:
    """The k largest (or smallest) elements along dim and their positions, in sorted order."""
    d = norm_axis(dim, x.ndim, "topk", x.shape)
    if not 0 <= k <= x.shape[d]:
        raise ShapeError(f"topk: k={k} is out of range for an axis of size {x.shape[d]}")
    values, idx = sort(x, d, descending=largest)
    ranges = [(0, k) if a == d else None for a in range(x.ndim)]
    return values.shrink(ranges), idx.shrink(ranges)


__all__ = ["argsort", "sort", "topk"]
