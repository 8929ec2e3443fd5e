"""Loss functions with torch.nn.functional's signatures and reductions ('mean' | 'sum' | 'none'):
nll_loss and cross_entropy (class indices with ignore_index and class weights, or class probabilities; label
smoothing), binary_cross_entropy, binary_cross_entropy_with_logits (pos_weight), mse_loss, l1_loss,
smooth_l1_loss and huber_loss.

Class-index losses read each target's log-probability with a gather (one read per element), so only the
log_softmax is O(elements x classes). Inputs are (N, C), (N, C, d1, ...) or unbatched (C,), targets (N,),
(N, d1, ...) or (); with reduction='mean' the sum is divided by the summed weight of the targets not ignored (the
count when there are no weights), as torch does, so an all-ignored batch is nan.

binary_cross_entropy_with_logits is computed as (1 - t) * x + (1 + (pos_weight - 1) * t) * softplus(-x), with
softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)), never exponentiating a large positive number;
binary_cross_entropy clamps each log at -100 as torch does, and raises ArgumentError when an input element lies
outside [0, 1] (or is NaN), as torch raises from its kernel: a realized input is checked at the call, a lazy one
by a check that the realize computing the loss or its gradients runs (tensor.checks: one small counting reduction
in the same realize, the count read back after it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import dtypes
from rewrite.errors import ArgumentError, DTypeError, ShapeError
from tensor import checks as _chk
from tensor.nn import softplus

if TYPE_CHECKING:
    from tensor.tensor import Tensor

_REDUCTIONS = ("mean", "sum", "none")


def _check(what: str, x: object, reduction: str) -> None:
    if not isinstance(x, tt.Tensor):
        raise TypeError(f"{what}: the input must be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"{what}: the input is {x.dtype.name}; it must be floating-point (x.float())")
    if reduction not in _REDUCTIONS:
        raise ArgumentError(f"{what}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _as_tensor(what: str, name: str, v: object, like: Tensor) -> Tensor:
    if isinstance(v, tt.Tensor):
        return v
    try:
        return tt.Tensor(v, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: {name} must be a Tensor or array-like, got {type(v).__name__}") from e


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()


def _pointwise(what: str, x: Tensor, target: object, reduction: str) -> tuple[Tensor, Tensor]:
    _check(what, x, reduction)
    t = _as_tensor(what, "target", target, x)
    if not t.dtype.is_float:
        t = t.cast(x.dtype)
    try:
        (x + t).shape  # noqa: B018  # broadcastable?
    except ShapeError as e:
        raise ShapeError(f"{what}: input {fmt_shape(x.shape)} and target {fmt_shape(t.shape)} do not broadcast; "
                         f"give the target the input's shape") from e
    return x, t


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(input - target)^2."""
    x, t = _pointwise("mse_loss", input, target, reduction)
    d = x - t
    return _reduce(d * d, reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|."""
    x, t = _pointwise("l1_loss", input, target, reduction)
    return _reduce((x - t).abs(), reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target); beta = 0 is l1_loss."""
    x, t = _pointwise("smooth_l1_loss", input, target, reduction)
    if beta < 0:
        raise ArgumentError(f"smooth_l1_loss: beta={beta} must be >= 0")
    a = (x - t).abs()
    if beta == 0:
        return _reduce(a, reduction)
    return _reduce((a < beta).where(a * a * (0.5 / beta), a - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d^2 where |d| <= delta, else delta * (|d| - 0.5 delta): smooth_l1_loss times delta."""
    x, t = _pointwise("huber_loss", input, target, reduction)
    if delta <= 0:
        raise ArgumentError(f"huber_loss: delta={delta} must be > 0")
    a = (x - t).abs()
    return _reduce((a <= delta).where(a * a * 0.5, (a - 0.5 * delta) * delta), reduction)


def _weighted(what: str, loss: Tensor, weight: object, x: Tensor) -> Tensor:
    if weight is None:
        return loss
    w = _as_tensor(what, "weight", weight, x)
    try:
        return loss * w
    except ShapeError as e:
        raise ShapeError(f"{what}: weight {fmt_shape(w.shape)} does not broadcast to the input "
                         f"{fmt_shape(x.shape)}") from e


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,
                         reduction: str = "mean") -> Tensor:
    """-(t log(p) + (1 - t) log(1 - p)) for probabilities p in [0, 1], each log clamped at -100 (torch)."""
    what = "binary_cross_entropy"
    x, t = _pointwise(what, input, target, reduction)
    loss = -(t * x.log().maximum(-100.0) + (1.0 - t) * (1.0 - x).log().maximum(-100.0))
    return _in_unit_interval(what, x, _reduce(_weighted(what, loss, weight, x), reduction))


def _in_unit_interval(what: str, x: Tensor, out: Tensor) -> Tensor:
    """torch's run-time rule: every input element in [0, 1] (NaN fails it). Realized input: checked now on the
    host; a lazy one: a check (tensor.checks) that counts the offending elements in the realize that computes `out`
    (or a gradient of it) and raises there."""
    def error(n: int) -> ArgumentError:
        return ArgumentError(f"{what}: {n} of the {x.numel()} input elements lie outside [0, 1] (or are NaN); the "
                             f"input must be probabilities: apply sigmoid first, or use "
                             f"binary_cross_entropy_with_logits on the logits")

    if x.is_realized:
        a = x.numpy()
        if n := int(a.size - np.count_nonzero((a >= 0) & (a <= 1))):
            raise error(n)
        return out
    bad = ((x >= 0.0) & (x <= 1.0)).logical_not().detach().cast(dtypes.int32).sum()
    return _chk.guard(out, bad, error)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """binary_cross_entropy(sigmoid(x), t) without the sigmoid's overflow: (1 - t) x + lw * softplus(-x), where
    lw = 1 + (pos_weight - 1) t weights the positive term (pos_weight broadcasts over the last axis, a weight
    per class as torch)."""
    what = "binary_cross_entropy_with_logits"
    x, t = _pointwise(what, input, target, reduction)
    m, tail = (-x).maximum(0.0), softplus(-x.abs())  # softplus(-x) = m + tail, tail = log(1 + e^-|x|) <= log 2
    if pos_weight is None:
        loss = ((1.0 - t) * x + m) + tail  # the large terms cancel first, so a tiny loss keeps its digits (torch)
    else:
        pw = _as_tensor(what, "pos_weight", pos_weight, x)
        try:
            loss = (1.0 - t) * x + (1.0 + (pw - 1.0) * t) * (m + tail)
        except ShapeError as e:
            raise ShapeError(f"{what}: pos_weight {fmt_shape(pw.shape)} does not broadcast to the input "
                             f"{fmt_shape(x.shape)} (give one weight per class, the last axis)") from e
    return _reduce(_weighted(what, loss, weight, x), reduction)


def _class_input(what: str, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor, bool]:
    """(N, C, ...) input and (N, ...) target; unbatched (C,) and () become a batch of one (the flag says so)."""
    if not isinstance(target, tt.Tensor):
        raise TypeError(f"{what}: target must be a Tensor, got {type(target).__name__}")
    unbatched = x.ndim == 1
    if unbatched:
        x, target = x.reshape(1, x.shape[0]), target.reshape(1, *target.shape)
    if x.ndim < 2:
        raise ShapeError(f"{what}: input {fmt_shape(x.shape)} must be (C,), (N, C) or (N, C, d1, ...)")
    return x, target, unbatched


def _index_loss(what: str, logp: Tensor, target: Tensor, weight: object, ignore_index: int, reduction: str,
                smoothing: float) -> Tensor:
    """The class-index path shared by nll_loss and cross_entropy (logp: log-probabilities (N, C, ...))."""
    if target.dtype.is_float or target.dtype.is_bool:
        raise DTypeError(f"{what}: target must hold integer class indices, got {target.dtype.name}")
    want = (logp.shape[0], *logp.shape[2:])
    if tuple(target.shape) != want:
        raise ShapeError(f"{what}: input {fmt_shape(logp.shape)} and target {fmt_shape(target.shape)}: the target "
                         f"must be {fmt_shape(want)} (the input without its class axis 1)")
    c = logp.shape[1]
    keep = target != ignore_index
    t = keep.where(target, 0)
    picked = logp.gather(1, t.unsqueeze(1)).squeeze(1)
    w = wt = None
    if weight is not None:
        w = _as_tensor(what, "weight", weight, logp)
        if tuple(w.shape) != (c,):
            raise ShapeError(f"{what}: weight must have one entry per class, shape ({c},), got {fmt_shape(w.shape)}")
        wt = w.index_select(0, t.reshape(-1)).reshape(*t.shape)
        picked = picked * wt
    loss = -picked
    if smoothing:
        per_class = logp if w is None else logp * w.reshape(1, c, *([1] * (logp.ndim - 2)))
        loss = loss * (1.0 - smoothing) - per_class.sum(1) * (smoothing / c)
    loss = keep.where(loss, 0.0)
    if reduction != "mean":
        return _reduce(loss, reduction)
    denom = keep.sum().cast(logp.dtype) if wt is None else keep.where(wt, 0.0).sum()
    return loss.sum() / denom


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """-weight[t] * input[n, t, ...] for log-probabilities input (N, C, ...) and class indices t (N, ...)."""
    _check("nll_loss", input, reduction)
    x, t, unbatched = _class_input("nll_loss", input, target)
    out = _index_loss("nll_loss", x, t, weight, ignore_index, reduction, 0.0)
    return out.reshape() if unbatched and reduction == "none" else out


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """nll_loss of log_softmax over the class axis 1. target: class indices (N, ...), or class probabilities of
    the input's shape (float). label_smoothing e mixes the target with the uniform distribution: (1 - e) * target
    + e / C (tensor.modules.cross_entropy is the (N, C), mean-only form)."""
    what = "cross_entropy"
    _check(what, input, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ArgumentError(f"{what}: label_smoothing={label_smoothing} must be in [0, 1]")
    x, t, unbatched = _class_input(what, input, target)
    logp = x.log_softmax(1)
    if not t.dtype.is_float:
        out = _index_loss(what, logp, t, weight, ignore_index, reduction, label_smoothing)
        return out.reshape() if unbatched and reduction == "none" else out
    if tuple(t.shape) != tuple(x.shape):
        raise ShapeError(f"{what}: class-probability target {fmt_shape(target.shape)} must have the input's shape "
                         f"{fmt_shape(input.shape)}")
    c = x.shape[1]
    if label_smoothing:
        t = t * (1.0 - label_smoothing) + label_smoothing / c
    terms = logp * t
    if weight is not None:
        w = _as_tensor(what, "weight", weight, x)
        if tuple(w.shape) != (c,):
            raise ShapeError(f"{what}: weight must have one entry per class, shape ({c},), got {fmt_shape(w.shape)}")
        terms = terms * w.reshape(1, c, *([1] * (x.ndim - 2)))
    loss = -terms.sum(1)
    if unbatched:
        loss = loss.reshape()
    return _reduce(loss, reduction)


__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "huber_loss", "l1_loss",
           "mse_loss", "nll_loss", "smooth_l1_loss"]
