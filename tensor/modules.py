"""Layers as torch users know them: Linear, Conv2d, BatchNorm2d, LayerNorm, Embedding, Dropout, Sequential, and
the cross_entropy loss.

A `Module` holds its parameters as Tensor attributes (requires_grad=True) and its buffers as Tensors that do
not require a gradient; `parameters()`, `state_dict()` and `load_state_dict()` walk the attributes
(tensor.state). `train()` / `eval()` set `training` on the module and every module inside it: Dropout and
BatchNorm2d behave differently in the two modes.

Initialization follows torch's defaults (uniform in +-1/sqrt(fan_in) for Linear and Conv2d weights and biases,
N(0, 1) for Embedding, ones and zeros for the norms), drawn from the front end's seeded random stream
(Tensor.manual_seed).

BatchNorm2d's running statistics are updated lazily in training mode: the new values are graphs over the batch,
realized with the next optimizer step (Optimizer.step realizes `pending_buffers()`) or by
`realize_pending()`, so a training step stays one realize and the statistics never grow a chain of graphs.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.errors import DTypeError, ShapeError
from tensor import state as st
from tensor.autograd import no_grad

Tensor = tt.Tensor
IntOrPair = int | tuple[int, int]

_pending: dict[int, weakref.ref] = {}  # id -> buffer whose new value is a graph (Tensor's == is elementwise)


def pending_buffers(clear: bool = False) -> list[Tensor]:
    """Buffers whose new values are still graphs (BatchNorm's running statistics after a training forward);
    `clear`: forget them (the caller realizes them)."""
    out = [t for r in list(_pending.values()) if (t := r()) is not None and not t.is_realized]
    if clear:
        _pending.clear()
    return out


def realize_pending() -> None:
    """Realize the pending buffer updates (an optimizer step does this as part of its realize)."""
    ts = pending_buffers(clear=True)
    if ts:
        Tensor.realize(*ts)


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    return Tensor.uniform(*shape, low=-bound, high=bound).realize().requires_grad_()


class Module:
    """The base: `__call__` runs `forward`; parameters, state dict and train/eval walk the attributes."""

    training: bool = True

    def forward(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def __call__(self, x: Tensor) -> Tensor:
        return self.forward(x)

    def modules(self) -> Iterator[Module]:
        """This module and every module reachable from its attributes (lists and dicts too), each once."""
        seen: set[int] = set()
        todo: list[object] = [self]
        while todo:
            o = todo.pop()
            if id(o) in seen:
                continue
            seen.add(id(o))
            if isinstance(o, Module):
                yield o
                todo.extend(reversed(list(vars(o).values())))
            elif isinstance(o, (list, tuple)):
                todo.extend(reversed(o))
            elif isinstance(o, dict):
                todo.extend(reversed(list(o.values())))

    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            m.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def parameters(self) -> list[Tensor]:
        return st.get_parameters(self)

    def state_dict(self) -> dict[str, Tensor]:
        return st.get_state_dict(self)

    def load_state_dict(self, state: Mapping[str, Tensor | np.ndarray], strict: bool = True) -> None:
        st.load_state_dict(self, state, strict)


def _need_float(what: str, x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{what}: the input must be a Tensor, got {type(x).__name__}")
    if not x.dtype.is_float:
        raise DTypeError(f"{what}: the input is {x.dtype.name}; it must be floating-point (x.float())")


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        bound = 1.0 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        _need_float("Linear", x)
        if not x.shape or x.shape[-1] != self.weight.shape[1]:
            raise ShapeError(f"Linear: the input is {fmt_shape(x.shape)} but the layer takes "
                             f"{self.weight.shape[1]} features on the last axis (weight "
                             f"{fmt_shape(self.weight.shape)})")
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


class Conv2d(Module):
    """torch.nn.Conv2d: weight (out_channels, in_channels/groups, kh, kw)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: IntOrPair, stride: IntOrPair = 1,
                 padding: IntOrPair = 0, dilation: IntOrPair = 1, groups: int = 1, bias: bool = True) -> None:
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels={in_channels} and out_channels={out_channels} must both be "
                             f"divisible by groups={groups}")
        ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        bound = 1.0 / math.sqrt(in_channels // groups * ks[0] * ks[1])
        self.weight = _uniform((out_channels, in_channels // groups, *ks), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

    def forward(self, x: Tensor) -> Tensor:
        _need_float("Conv2d", x)
        if x.ndim != 4 or x.shape[1] != self.weight.shape[1] * self.groups:
            raise ShapeError(f"Conv2d: the input is {fmt_shape(x.shape)}; it must be (N, "
                             f"{self.weight.shape[1] * self.groups}, H, W)")
        return x.conv2d(self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class BatchNorm2d(Module):
    """torch.nn.BatchNorm2d over (N, C, H, W): batch statistics in training (the running ones updated with
    `momentum`, the variance unbiased there), running statistics in eval."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = True,
                 track_running_stats: bool = True) -> None:
        self.eps, self.momentum, self.num_features = eps, momentum, num_features
        # realized buffers from the start, as every parameter and state is: the step's graph is then the same at
        # every call (tensor.jit captures it), and the running statistics are updated in place (assign)
        self.weight = Tensor.ones(num_features).realize().requires_grad_() if affine else None
        self.bias = Tensor.zeros(num_features).realize().requires_grad_() if affine else None
        self.running_mean = Tensor.zeros(num_features).realize() if track_running_stats else None
        self.running_var = Tensor.ones(num_features).realize() if track_running_stats else None
        self.num_batches_tracked = Tensor(np.zeros((), np.int64)).realize() if track_running_stats else None

    def forward(self, x: Tensor) -> Tensor:
        _need_float("BatchNorm2d", x)
        if x.ndim != 4 or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm2d: the input is {fmt_shape(x.shape)}; it must be (N, {self.num_features}, "
                             f"H, W)")
        if self.training or self.running_mean is None or self.running_var is None:
            axes = (0, 2, 3)
            mean = x.mean(axes)
            var = ((x - mean.reshape(1, -1, 1, 1)) ** 2).mean(axes)
            if self.training and self.running_mean is not None and self.running_var is not None:
                n = x.numel() // x.shape[1]
                with no_grad():
                    m = self.momentum
                    self._set(self.running_mean, self.running_mean * (1 - m) + mean.detach() * m)
                    self._set(self.running_var, self.running_var * (1 - m) + var.detach() * (m * n / max(n - 1, 1)))
                    if self.num_batches_tracked is not None:
                        self._set(self.num_batches_tracked, self.num_batches_tracked + 1)
        else:
            mean, var = self.running_mean, self.running_var
        shape = (1, -1, 1, 1)
        y = (x - mean.reshape(*shape)) * (var + self.eps).rsqrt().reshape(*shape)
        if self.weight is not None and self.bias is not None:
            y = y * self.weight.reshape(*shape) + self.bias.reshape(*shape)
        return y

    @staticmethod
    def _set(buf: Tensor, value: Tensor) -> None:
        buf.assign(value.cast(buf.dtype) if value.dtype is not buf.dtype else value)
        _pending[id(buf)] = weakref.ref(buf)


class LayerNorm(Module):
    """torch.nn.LayerNorm over the last len(normalized_shape) axes (biased variance)."""

    def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True
                 ) -> None:
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps = eps
        self.weight = Tensor.ones(*self.normalized_shape).realize().requires_grad_() if elementwise_affine else None
        self.bias = Tensor.zeros(*self.normalized_shape).realize().requires_grad_() if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        _need_float("LayerNorm", x)
        k = len(self.normalized_shape)
        if tuple(x.shape[x.ndim - k:]) != self.normalized_shape:
            raise ShapeError(f"LayerNorm: the input is {fmt_shape(x.shape)}; its last axes must be "
                             f"{fmt_shape(self.normalized_shape)}")
        axes = tuple(range(x.ndim - k, x.ndim))
        mean = x.mean(axes, keepdim=True)
        d = x - mean
        y = d * ((d * d).mean(axes, keepdim=True) + self.eps).rsqrt()
        if self.weight is not None and self.bias is not None:
            y = y * self.weight + self.bias
        return y


class Embedding(Module):
    """Rows of weight (num_embeddings, embedding_dim) picked by integer indices of any shape."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        self.weight = Tensor.randn(num_embeddings, embedding_dim).realize().requires_grad_()

    def forward(self, idx: Tensor) -> Tensor:
        if not isinstance(idx, Tensor) or idx.dtype.is_float or idx.dtype.is_bool:
            got = idx.dtype.name if isinstance(idx, Tensor) else type(idx).__name__
            raise DTypeError(f"Embedding: indices must be an integer Tensor, got {got}")
        d = self.weight.shape[1]
        # rows read at loaded positions (an INDEX): O(indices x dim), not a one-hot contraction over the vocabulary
        return self.weight.index_select(0, idx.reshape(-1)).reshape(*idx.shape, d)


class Dropout(Module):
    """Zero each element with probability p in training (scaling the rest by 1/(1-p)); identity in eval."""

    def __init__(self, p: float = 0.5) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p={p} must be in [0, 1]")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        _need_float("Dropout", x)
        if not self.training or self.p == 0.0:
            return x
        if self.p == 1.0:
            return x * 0.0
        keep = Tensor.rand(*x.shape, dtype=x.dtype, device=x.device) >= self.p
        return keep.where(x * (1.0 / (1.0 - self.p)), 0.0)


class Sequential(Module):
    """Apply the layers (modules or functions of a Tensor) in order; state names are `<i>.<name>`, as torch's
    Sequential names them, so its state dicts load as they are."""

    state_inline = ("layers",)

    def __init__(self, *layers: object) -> None:
        self.layers = list(layers)

    def forward(self, x: Tensor) -> Tensor:
        for f in self.layers:
            x = f(x)  # type: ignore[operator]
        return x


def cross_entropy(logits: Tensor, target: Tensor, label_smoothing: float = 0.0, ignore_index: int = -100) -> Tensor:
    """Mean cross entropy of (N, C) logits against (N,) integer class indices (torch.nn.functional.cross_entropy
    with reduction='mean'): rows whose target is `ignore_index` add nothing and are not counted (all ignored: nan,
    as torch). The target's log-probability is a gather (one read per row), so only log_softmax is O(N x C); with
    label_smoothing e, a row's loss is (1 - e) * -logp[target] + e * mean over classes of -logp."""
    if logits.ndim != 2 or target.shape != (logits.shape[0],):
        raise ShapeError(f"cross_entropy: logits {fmt_shape(logits.shape)} and target {fmt_shape(target.shape)}; "
                         f"they must be (N, C) and (N,)")
    if target.dtype.is_float or target.dtype.is_bool:
        raise DTypeError(f"cross_entropy: target must hold integer class indices, got {target.dtype.name}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing={label_smoothing} must be in [0, 1]")
    n, c = logits.shape
    logp = logits.log_softmax(1)
    keep = target != ignore_index
    picked = logp.gather(1, keep.where(target, 0).reshape(n, 1)).reshape(n)
    loss = -picked
    if label_smoothing:
        loss = loss * (1.0 - label_smoothing) - logp.sum(1) * (label_smoothing / c)
    return keep.where(loss, 0.0).sum() / keep.sum().cast(logp.dtype)


__all__ = ["BatchNorm2d", "Conv2d", "Dropout", "Embedding", "LayerNorm", "Linear", "Module", "Sequential",
           "cross_entropy", "pending_buffers", "realize_pending"]

from tensor.layers import *  # noqa: E402, F403  # the further layers (tensor.layers), found here with the first ones
