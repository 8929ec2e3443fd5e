"""More layers as torch.nn defines them (parameter names and shapes as torch's, so a torch state dict loads):
Conv1d, ConvTranspose1d, ConvTranspose2d, BatchNorm1d, RMSNorm, GroupNorm and MultiheadAttention. The first
layers (Linear, Conv2d, BatchNorm2d, LayerNorm, Embedding, Dropout, Sequential) are in tensor.modules, which
re-exports these.

Initialization follows torch's defaults: convolution weights and biases uniform in +-1/sqrt(fan_in) (for a
transposed convolution fan_in is weight.shape[1] * kernel, as torch computes it), ones and zeros for the norms,
MultiheadAttention's input projection xavier-uniform with zero biases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.errors import ArgumentError, DTypeError, ShapeError
from tensor.attention import causal_mask
from tensor.init import xavier_uniform
from tensor.modules import BatchNorm2d, Linear, Module
from tensor.nn import conv2d, conv_transpose2d

Tensor = tt.Tensor
IntOrSeq = int | Sequence[int]


def _need_float(what: str, x: object) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what}: the input must be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"{what}: the input is {x.dtype.name}; it must be floating-point (x.float())")


def _param(shape: Sequence[int], bound: float) -> Tensor:
    return Tensor.uniform(*shape, low=-bound, high=bound).realize().requires_grad_()


def _ntuple(v: IntOrSeq, n: int, what: str, name: str) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or not all(isinstance(e, int) for e in t):
        raise ArgumentError(f"{what}: {name} must be an int or {n} ints, got {v!r}")
    return t


def _check_groups(what: str, cin: int, cout: int, groups: int) -> None:
    if groups < 1 or cin % groups or cout % groups:
        raise ArgumentError(f"{what}: in_channels={cin} and out_channels={cout} must both be divisible by "
                            f"groups={groups}")


class Conv1d(Module):
    """torch.nn.Conv1d over (N, C, L): weight (out_channels, in_channels/groups, k)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrSeq, stride: IntOrSeq = 1,
                 padding: IntOrSeq = 0, dilation: IntOrSeq = 1, groups: int = 1, bias: bool = True) -> None:
        _check_groups("Conv1d", in_channels, out_channels, groups)
        (k,) = _ntuple(kernel_size, 1, "Conv1d", "kernel_size")
        bound = 1.0 / math.sqrt(in_channels // groups * k)
        self.weight = _param((out_channels, in_channels // groups, k), bound)
        self.bias = _param((out_channels,), bound) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def forward(self, x: Tensor) -> Tensor:
        _need_float("Conv1d", x)
        cin = self.weight.shape[1] * self.groups
        if x.ndim != 3 or x.shape[1] != cin:
            raise ShapeError(f"Conv1d: the input is {fmt_shape(x.shape)}; it must be (N, {cin}, L)")
        return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class _ConvTranspose(Module):
    """torch.nn.ConvTranspose{n}d: weight (in_channels, out_channels/groups, *kernel)."""

    nd = 2

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrSeq, stride: IntOrSeq = 1,
                 padding: IntOrSeq = 0, output_padding: IntOrSeq = 0, groups: int = 1, bias: bool = True,
                 dilation: IntOrSeq = 1) -> None:
        what = type(self).__name__
        _check_groups(what, in_channels, out_channels, groups)
        ks = _ntuple(kernel_size, self.nd, what, "kernel_size")
        bound = 1.0 / math.sqrt(out_channels // groups * math.prod(ks))  # torch's fan_in: weight.shape[1] * kernel
        self.weight = _param((in_channels, out_channels // groups, *ks), bound)
        self.bias = _param((out_channels,), bound) if bias else None
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.dilation, self.groups = dilation, groups

    def forward(self, x: Tensor) -> Tensor:
        what = type(self).__name__
        _need_float(what, x)
        cin = self.weight.shape[0]
        if x.ndim != self.nd + 2 or x.shape[1] != cin:
            raise ShapeError(f"{what}: the input is {fmt_shape(x.shape)}; it must be (N, {cin}, "
                             f"{', '.join('LHW'[3 - self.nd:] if self.nd <= 2 else 'DHW')})")
        return conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding, self.output_padding,
                                self.groups, self.dilation)


class ConvTranspose1d(_ConvTranspose):
    nd = 1


class ConvTranspose2d(_ConvTranspose):
    nd = 2


class BatchNorm1d(BatchNorm2d):
    """torch.nn.BatchNorm1d over (N, C) or (N, C, L): BatchNorm2d's statistics over the batch (and length) axes."""

    def forward(self, x: Tensor) -> Tensor:
        _need_float("BatchNorm1d", x)
        if x.ndim not in (2, 3) or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm1d: the input is {fmt_shape(x.shape)}; it must be (N, {self.num_features}) "
                             f"or (N, {self.num_features}, L)")
        n, c, length = x.shape[0], x.shape[1], (x.shape[2] if x.ndim == 3 else 1)
        y = super().forward(x.reshape(n, c, length, 1))
        return y.reshape(*x.shape)


def _norm_shape(v: int | Sequence[int]) -> tuple[int, ...]:
    return (v,) if isinstance(v, int) else tuple(v)


class RMSNorm(Module):
    """torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) * weight over the last len(normalized_shape) axes; eps None is
    the machine epsilon of the input's dtype (as torch)."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None,
                 elementwise_affine: bool = True) -> None:
        self.normalized_shape, self.eps = _norm_shape(normalized_shape), eps
        self.weight = Tensor.ones(*self.normalized_shape).realize().requires_grad_() if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        _need_float("RMSNorm", x)
        k = len(self.normalized_shape)
        if tuple(x.shape[x.ndim - k:]) != self.normalized_shape:
            raise ShapeError(f"RMSNorm: the input is {fmt_shape(x.shape)}; its last axes must be "
                             f"{fmt_shape(self.normalized_shape)}")
        eps = self.eps if self.eps is not None else _finfo_eps(x)
        axes = tuple(range(x.ndim - k, x.ndim))
        y = x * ((x * x).mean(axes, keepdim=True) + eps).rsqrt()
        return y * self.weight if self.weight is not None else y


def _finfo_eps(x: Tensor) -> float:
    if x.dtype.name == "bfloat16":
        return 2.0**-7
    return float(np.finfo(np.dtype(x.dtype.name)).eps)


class GroupNorm(Module):
    """torch.nn.GroupNorm over (N, C, *): each sample's channels split into num_groups groups, each normalized
    over its channels and positions (biased variance), then a per-channel affine."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        if num_groups < 1 or num_channels % num_groups:
            raise ArgumentError(f"GroupNorm: num_channels={num_channels} must be divisible by "
                                f"num_groups={num_groups}")
        self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
        self.weight = Tensor.ones(num_channels).realize().requires_grad_() if affine else None
        self.bias = Tensor.zeros(num_channels).realize().requires_grad_() if affine else None

    def forward(self, x: Tensor) -> Tensor:
        _need_float("GroupNorm", x)
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(f"GroupNorm: the input is {fmt_shape(x.shape)}; it must be (N, {self.num_channels}, "
                             f"...)")
        g = x.reshape(x.shape[0], self.num_groups, -1)
        d = g - g.mean(2, keepdim=True)
        y = (d * ((d * d).mean(2, keepdim=True) + self.eps).rsqrt()).reshape(*x.shape)
        if self.weight is not None and self.bias is not None:
            shape = (1, self.num_channels, *([1] * (x.ndim - 2)))
            y = y * self.weight.reshape(*shape) + self.bias.reshape(*shape)
        return y


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention: `attn(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)` -> (output, weights or None).

    Parameters as torch names them: in_proj_weight (3E, E) and in_proj_bias (3E,) (q_proj_weight, k_proj_weight,
    v_proj_weight when kdim or vdim differ from embed_dim), and out_proj (a Linear). Inputs are (L, N, E), or
    (N, L, E) with batch_first, or unbatched (L, E). Masks as torch's module takes them: a bool attn_mask (L, S) or
    (N*num_heads, L, S) and a bool key_padding_mask (N, S) are True where attention is NOT allowed; float masks
    are added to the scores. is_causal without an attn_mask applies the causal mask (torch requires the mask
    itself and treats the flag as a hint). add_bias_kv and add_zero_attn are not supported."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False) -> None:
        if num_heads < 1 or embed_dim % num_heads:
            raise ArgumentError(f"MultiheadAttention: embed_dim={embed_dim} must be divisible by "
                                f"num_heads={num_heads}")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported")
        if not 0.0 <= dropout <= 1.0:
            raise ArgumentError(f"MultiheadAttention: dropout={dropout} must be in [0, 1]")
        e = embed_dim
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = e, num_heads, dropout, batch_first
        self.kdim, self.vdim = kdim or e, vdim or e
        self.head_dim = e // num_heads
        if self.kdim == e and self.vdim == e:
            self.in_proj_weight: Tensor | None = xavier_uniform(3 * e, e).realize().requires_grad_()
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.in_proj_weight = None
            self.q_proj_weight = xavier_uniform(e, e).realize().requires_grad_()
            self.k_proj_weight = xavier_uniform(e, self.kdim).realize().requires_grad_()
            self.v_proj_weight = xavier_uniform(e, self.vdim).realize().requires_grad_()
        self.in_proj_bias = Tensor.zeros(3 * e).realize().requires_grad_() if bias else None
        self.out_proj = Linear(e, e, bias=bias)
        if self.out_proj.bias is not None:
            self.out_proj.bias = Tensor.zeros(e).realize().requires_grad_()

    def _weights(self) -> tuple[Tensor, Tensor, Tensor]:
        if self.in_proj_weight is not None:
            e = self.embed_dim
            w = self.in_proj_weight
            return w[:e], w[e:2 * e], w[2 * e:]
        assert self.q_proj_weight is not None and self.k_proj_weight is not None and self.v_proj_weight is not None
        return self.q_proj_weight, self.k_proj_weight, self.v_proj_weight

    def _project(self, x: Tensor, w: Tensor, i: int) -> Tensor:
        y = x @ w.T
        if self.in_proj_bias is not None:
            e = self.embed_dim
            y = y + self.in_proj_bias[i * e:(i + 1) * e]
        return y

    def __call__(self, query: Tensor, key: Tensor | None = None,  # type: ignore[override]  # torch's signature, (out, w)
                 value: Tensor | None = None, key_padding_mask: Tensor | None = None, need_weights: bool = True,
                 attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                 is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        return self.attend(query, query if key is None else key, query if value is None else value,
                           key_padding_mask, need_weights, attn_mask, average_attn_weights, is_causal)

    def forward(self, x: Tensor) -> Tensor:
        """Self-attention of x (the output only)."""
        return self.attend(x, x, x, need_weights=False)[0]

    def attend(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
               need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
               is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
        what = "MultiheadAttention"
        for t in (query, key, value):
            _need_float(what, t)
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        # now (L, N, E) / (S, N, kdim) / (S, N, vdim)
        e, h, hd = self.embed_dim, self.num_heads, self.head_dim
        if (query.ndim != 3 or key.ndim != 3 or value.ndim != 3 or query.shape[2] != e or key.shape[2] != self.kdim
                or value.shape[2] != self.vdim or key.shape[:2] != value.shape[:2] or key.shape[1] != query.shape[1]):
            order = "(N, L, E)" if self.batch_first else "(L, N, E)"
            raise ShapeError(f"{what}: query {fmt_shape(query.shape)}, key {fmt_shape(key.shape)}, value "
                             f"{fmt_shape(value.shape)} (as (L, N, E) after batch_first/unbatched handling); need "
                             f"{order} with E = {e}, key's E = {self.kdim}, value's E = {self.vdim}, and key and value "
                             f"of one length")
        L, n = query.shape[0], query.shape[1]
        S = key.shape[0]
        wq, wk, wv = self._weights()
        q = self._project(query, wq, 0).reshape(L, n, h, hd).permute(1, 2, 0, 3)  # (N, H, L, hd)
        k = self._project(key, wk, 1).reshape(S, n, h, hd).permute(1, 2, 0, 3)
        v = self._project(value, wv, 2).reshape(S, n, h, hd).permute(1, 2, 0, 3)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))  # (N, H, L, S)
        if attn_mask is None and is_causal:
            attn_mask = causal_mask(L, S, query.device).logical_not()
        if attn_mask is not None:
            if tuple(attn_mask.shape) == (L, S):
                m = attn_mask.reshape(1, 1, L, S)
            elif tuple(attn_mask.shape) == (n * h, L, S):
                m = attn_mask.reshape(n, h, L, S)
            else:
                raise ShapeError(f"{what}: attn_mask {fmt_shape(attn_mask.shape)} must be ({L}, {S}) or "
                                 f"({n * h}, {L}, {S})")
            scores = m.where(-math.inf, scores) if m.dtype.is_bool else scores + m
        if key_padding_mask is not None:
            if tuple(key_padding_mask.shape) != (n, S):
                raise ShapeError(f"{what}: key_padding_mask {fmt_shape(key_padding_mask.shape)} must be ({n}, {S})")
            kp = key_padding_mask.reshape(n, 1, 1, S)
            scores = kp.where(-math.inf, scores) if kp.dtype.is_bool else scores + kp
        w = scores.softmax(-1)
        wd = w
        if self.training and self.dropout > 0.0:
            p = self.dropout
            keep = Tensor.rand(*w.shape, dtype=w.dtype, device=w.device) >= p
            wd = keep.where(w * (1.0 / (1.0 - p)), 0.0) if p < 1.0 else w * 0.0
        out = (wd @ v).permute(2, 0, 1, 3).reshape(L, n, e)  # (L, N, E)
        out = self.out_proj(out)
        if unbatched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        weights = None
        if need_weights:
            weights = wd.mean(1) if average_attn_weights else wd  # after dropout, as torch returns them
            if unbatched:
                weights = weights.squeeze(0)
        return out, weights


__all__ = ["BatchNorm1d", "Conv1d", "ConvTranspose1d", "ConvTranspose2d", "GroupNorm", "MultiheadAttention",
           "RMSNorm"]
