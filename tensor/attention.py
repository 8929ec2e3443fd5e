"""Attention: `scaled_dot_product_attention` as torch.nn.functional defines it (also `Tensor.
scaled_dot_product_attention`), built from matmul, softmax and where; the gradients come from the op rules.

    scores = q @ k^T * scale (+ attn_mask, or -inf where a boolean attn_mask is False; causal: where j > i)
    out    = dropout(softmax(scores, -1), dropout_p) @ v

A row whose every key is masked out is nan, as in torch's math backend.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.errors import ArgumentError, DTypeError, ShapeError
from tensor.helpers import Device

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def causal_mask(rows: int, cols: int, device: Device | None = None) -> Tensor:
    """(rows, cols) bool, True where query i may attend to key j (j <= i, aligned at the top left as torch)."""
    i = tt.Tensor.arange(rows, device=device).reshape(rows, 1)
    j = tt.Tensor.arange(cols, device=device).reshape(1, cols)
    return j <= i


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """q (..., L, E), k (..., S, E), v (..., S, Ev) -> (..., L, Ev); leading axes broadcast. attn_mask broadcasts
    to (..., L, S): a bool mask says which keys may be attended (True = attend), a float mask is added to the
    scores. scale defaults to 1 / sqrt(E). dropout_p > 0 drops attention weights (always, as torch's functional
    form does: pass 0 in eval)."""
    what = "scaled_dot_product_attention"
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, tt.Tensor):
            raise TypeError(f"{what}: {name} must be a Tensor, got {type(t).__name__}")
        if t.ndim < 2 or not t.dtype.is_float:
            raise DTypeError(f"{what}: {name} must be a floating-point tensor with at least 2 axes (..., len, dim), "
                             f"got {t.dtype.name} {fmt_shape(t.shape)}")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"{what}: query {fmt_shape(q.shape)}, key {fmt_shape(k.shape)}, value "
                         f"{fmt_shape(v.shape)}: need query (..., L, E), key (..., S, E), value (..., S, Ev)")
    if not 0.0 <= dropout_p <= 1.0:
        raise ArgumentError(f"{what}: dropout_p={dropout_p} must be in [0, 1]")
    if is_causal and attn_mask is not None:
        raise ArgumentError(f"{what}: pass either attn_mask or is_causal=True, not both (as torch)")
    L, S = q.shape[-2], k.shape[-2]
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * s
    if is_causal:
        attn_mask = causal_mask(L, S, q.device)
    if attn_mask is not None:
        if not isinstance(attn_mask, tt.Tensor):
            raise TypeError(f"{what}: attn_mask must be a Tensor, got {type(attn_mask).__name__}")
        if attn_mask.ndim < 2 or any(m not in (1, want) for m, want in zip(attn_mask.shape[-2:], (L, S), strict=True)):
            raise ShapeError(f"{what}: attn_mask {fmt_shape(attn_mask.shape)} must broadcast to (..., {L}, {S})")
        if attn_mask.dtype.is_bool:
            scores = attn_mask.where(scores, -math.inf)
        else:
            scores = scores + attn_mask
    w = scores.softmax(-1)
    if dropout_p > 0.0:
        keep = tt.Tensor.rand(*w.shape, dtype=w.dtype, device=w.device) >= dropout_p
        w = keep.where(w * (1.0 / (1.0 - dropout_p)), 0.0) if dropout_p < 1.0 else w * 0.0
    return w @ v


__all__ = ["causal_mask", "scaled_dot_product_attention"]
