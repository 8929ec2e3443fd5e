"""The `train` suite's models, written once over a small op table and run by ours, PyTorch and tinygrad alike.

Each model is a function `forward(F, params, x)` of a list of parameters and a batch; `F` (one `Ops` per
framework) supplies what the three spell differently (x @ w.T, gelu, softmax, mean over the last axis, conv2d,
max pooling, cross entropy). The initial parameters and the batch are numpy arrays from one seeded generator,
so every framework starts from the same weights and sees the same data.

Rows (`MODELS`):
  mlp          784-512-512-10, ReLU, batch 256 (`--quick`: 784-128-10, batch 64);
  cnn          the digits CNN of tensor.train_digits (conv 1->8 3x3, batch norm, ReLU, max pool 2, conv 8->16 3x3,
               ReLU, max pool 2, linear 64->10; the ReLUs after the pooling, the same function) on 8x8 inputs,
               batch 100; the batch norm normalizes by the batch's statistics (train mode) and keeps no running
               statistics, so all three compute the same thing;
  transformer  two pre-norm transformer blocks (LayerNorm, 4-head self-attention, LayerNorm, GELU-tanh MLP 4x
               wide, residuals) over (8, 64, 128) inputs, then a linear head to 10 classes per token.
Each is trained with AdamW (lr 1e-3, weight decay 0.01) against integer class targets with cross entropy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ModelConfig:
    kind: str  # "mlp", "cnn" or "transformer"
    batch: int
    sizes: tuple[int, ...] = ()  # mlp: layer widths; transformer: (seq, dim, heads, blocks)
    classes: int = 10
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 0
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def label(self) -> str:
        if self.kind == "mlp":
            return f"mlp {'-'.join(map(str, self.sizes))} b{self.batch}"
        if self.kind == "cnn":
            return f"digits cnn b{self.batch}"
        t, d, h, n = self.sizes
        return f"transformer {n}x(d{d} h{h}) t{t} b{self.batch}"


def mlp_config(quick: bool) -> ModelConfig:
    return ModelConfig("mlp", 64, (784, 128, 10)) if quick else ModelConfig("mlp", 256, (784, 512, 512, 10))


def cnn_config(quick: bool) -> ModelConfig:
    return ModelConfig("cnn", 100)


def transformer_config(quick: bool) -> ModelConfig:
    return ModelConfig("transformer", 4 if quick else 8, (32, 64, 4, 2) if quick else (64, 128, 4, 2))


# ---------------------------------------------------------------------------- initial weights and data


def _linear(rng: np.random.Generator, fin: int, fout: int) -> list[np.ndarray]:
    bound = 1.0 / math.sqrt(fin)
    return [rng.uniform(-bound, bound, (fout, fin)).astype(np.float32),
            rng.uniform(-bound, bound, (fout,)).astype(np.float32)]


def _conv(rng: np.random.Generator, cin: int, cout: int, k: int) -> list[np.ndarray]:
    bound = 1.0 / math.sqrt(cin * k * k)
    return [rng.uniform(-bound, bound, (cout, cin, k, k)).astype(np.float32),
            rng.uniform(-bound, bound, (cout,)).astype(np.float32)]


def init(cfg: ModelConfig) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The initial parameters (in the order the forward takes them) and one batch (x, integer targets)."""
    rng = np.random.default_rng(cfg.seed)
    params: list[np.ndarray] = []
    if cfg.kind == "mlp":
        for fin, fout in zip(cfg.sizes, cfg.sizes[1:], strict=False):
            params += _linear(rng, fin, fout)
        x = rng.standard_normal((cfg.batch, cfg.sizes[0])).astype(np.float32)
        y = rng.integers(0, cfg.sizes[-1], cfg.batch).astype(np.int32)
        return params, x, y
    if cfg.kind == "cnn":
        params += _conv(rng, 1, 8, 3)
        params += [np.ones(8, np.float32), np.zeros(8, np.float32)]  # batch norm's scale and shift
        params += _conv(rng, 8, 16, 3)
        params += _linear(rng, 64, cfg.classes)
        x = rng.uniform(0, 1, (cfg.batch, 1, 8, 8)).astype(np.float32)
        y = rng.integers(0, cfg.classes, cfg.batch).astype(np.int32)
        return params, x, y
    t, d, _, n = cfg.sizes
    for _ in range(n):
        params += [np.ones(d, np.float32), np.zeros(d, np.float32)]
        params += _linear(rng, d, 3 * d) + _linear(rng, d, d)
        params += [np.ones(d, np.float32), np.zeros(d, np.float32)]
        params += _linear(rng, d, 4 * d) + _linear(rng, 4 * d, d)
    params += _linear(rng, d, cfg.classes)
    x = rng.standard_normal((cfg.batch, t, d)).astype(np.float32)
    y = rng.integers(0, cfg.classes, cfg.batch * t).astype(np.int32)
    return params, x, y


# ---------------------------------------------------------------------------- the forwards


def _layernorm(F: Any, x: Any, w: Any, b: Any) -> Any:
    mu = F.mean_last(x)
    d = x - mu
    return d * (F.mean_last(d * d) + 1e-5).rsqrt() * w + b


def forward(cfg: ModelConfig, F: Any, p: list[Any], x: Any) -> Any:
    """The logits, (N, classes)."""
    if cfg.kind == "mlp":
        n = len(p) // 2
        for i in range(n):
            x = F.linear(x, p[2 * i], p[2 * i + 1])
            if i < n - 1:
                x = x.relu()
        return x
    if cfg.kind == "cnn":
        h = F.conv2d(x, p[0], p[1])
        mean = h.mean(F.axes((0, 2, 3)), keepdim=True)
        c = h - mean
        var = (c * c).mean(F.axes((0, 2, 3)), keepdim=True)
        h = c * (var + 1e-5).rsqrt() * p[2].reshape(1, -1, 1, 1) + p[3].reshape(1, -1, 1, 1)
        h = F.maxpool2(h).relu()  # = pool(relu(h)), without the ties of pooling zeros (whose gradient differs)
        h = F.maxpool2(F.conv2d(h, p[4], p[5])).relu()
        return F.linear(h.reshape(h.shape[0], -1), p[6], p[7])
    t, d, heads, n = cfg.sizes
    bsz, hd = x.shape[0], d // heads
    for i in range(n):
        ln1w, ln1b, qkvw, qkvb, ow, ob, ln2w, ln2b, f1w, f1b, f2w, f2b = p[12 * i:12 * i + 12]
        h = F.linear(_layernorm(F, x, ln1w, ln1b), qkvw, qkvb)  # (B, T, 3D)
        qkv = h.reshape(bsz, t, 3, heads, hd).permute(2, 0, 3, 1, 4)  # (3, B, H, T, hd)
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = F.softmax_last((q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)))
        o = (att @ v).permute(0, 2, 1, 3).reshape(bsz, t, d)
        x = x + F.linear(o, ow, ob)
        x = x + F.linear(F.gelu(F.linear(_layernorm(F, x, ln2w, ln2b), f1w, f1b)), f2w, f2b)
    return F.linear(x.reshape(bsz * t, d), p[-2], p[-1])


# ---------------------------------------------------------------------------- the frameworks


class OursOps:
    @staticmethod
    def linear(x: Any, w: Any, b: Any) -> Any: return x @ w.T + b
    @staticmethod
    def gelu(x: Any) -> Any: return x.gelu()
    @staticmethod
    def softmax_last(x: Any) -> Any: return x.softmax(-1)
    @staticmethod
    def mean_last(x: Any) -> Any: return x.mean(-1, keepdim=True)
    @staticmethod
    def axes(a: tuple[int, ...]) -> Any: return a
    @staticmethod
    def conv2d(x: Any, w: Any, b: Any) -> Any: return x.conv2d(w, b, padding=1)
    @staticmethod
    def maxpool2(x: Any) -> Any: return x.max_pool2d(2)


class TorchOps(OursOps):
    @staticmethod
    def gelu(x: Any) -> Any:
        import torch

        return torch.nn.functional.gelu(x, approximate="tanh")

    @staticmethod
    def conv2d(x: Any, w: Any, b: Any) -> Any:
        import torch

        return torch.nn.functional.conv2d(x, w, b, padding=1)

    @staticmethod
    def maxpool2(x: Any) -> Any:
        import torch

        return torch.nn.functional.max_pool2d(x, 2)


class Trainer:
    """One framework's model, AdamW and batch: `step()` is one training step (forward, backward, update; returns the
    loss as a float), `grads()` the gradients of the parameters at the current weights (no update), `kernels` the
    kernels the last step ran (None where the framework cannot tell)."""

    name = ""
    kernels: int | None = None

    def step(self, _: object = None) -> float:
        raise NotImplementedError

    def grads(self) -> list[np.ndarray]:
        raise NotImplementedError


class OursTrainer(Trainer):
    """Ours; `jit=True` (the default, as tinygrad's TinyJit): the step under tensor.jit, which replays the captured
    kernels from the third step on; `jit=False`: every step builds the graph again and replays the cached plan."""

    name = "ours"

    def __init__(self, cfg: ModelConfig, jit: bool = True) -> None:
        from tensor.jit import jit as capture
        from tensor.optim import AdamW
        from tensor.tensor import Tensor

        params, x, y = init(cfg)
        self.cfg = cfg
        if not jit:
            self.name = "ours eager"
        self.params = [Tensor(v, requires_grad=True).realize() for v in params]
        self.opt = AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.x, self.y = Tensor(x).realize(), Tensor(y).realize()
        self._step = capture(self._train_step) if jit else self._train_step

    def _loss(self) -> Any:
        from tensor.modules import cross_entropy

        return cross_entropy(forward(self.cfg, OursOps, self.params, self.x), self.y)

    def step(self, _: object = None) -> float:
        from lower.realize import plans

        before = plans.kernels_run
        out = self._step().item()
        self.kernels = plans.kernels_run - before
        return out

    def _train_step(self) -> Any:
        self.opt.zero_grad()
        loss = self._loss()
        loss.backward()
        self.opt.step(loss)
        return loss

    def grads(self) -> list[np.ndarray]:
        from tensor.tensor import Tensor

        self.opt.zero_grad()
        loss = self._loss()
        loss.backward()
        gs = [p.grad for p in self.params]
        Tensor.realize(*[g for g in gs if g is not None])
        out = [g.numpy() if g is not None else np.zeros(p.shape, np.float32) for g, p in zip(gs, self.params,
                                                                                            strict=True)]
        self.opt.zero_grad()
        return out


class TorchTrainer(Trainer):
    """PyTorch eager (all threads); `compiled=True`: the loss's forward and backward under torch.compile."""

    def __init__(self, cfg: ModelConfig, compiled: bool = False) -> None:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        params, x, y = init(cfg)
        self.torch, self.cfg = torch, cfg
        self.name = "torch.compile" if compiled else "torch"
        self.params = [torch.tensor(v, requires_grad=True) for v in params]
        self.opt = torch.optim.AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
        fn: Callable[[], Any] = self._loss
        self.loss_fn = torch.compile(fn) if compiled else fn

    def _loss(self) -> Any:
        return self.torch.nn.functional.cross_entropy(forward(self.cfg, TorchOps, self.params, self.x), self.y)

    def step(self, _: object = None) -> float:
        self.opt.zero_grad()
        loss = self.loss_fn()
        loss.backward()
        self.opt.step()
        return float(loss.item())

    def grads(self) -> list[np.ndarray]:
        self.opt.zero_grad()
        self.loss_fn().backward()
        out = [p.grad.detach().numpy().copy() for p in self.params]
        self.opt.zero_grad()
        return out


class TinygradTrainer(Trainer):
    """tinygrad's Tensor and AdamW, the step under TinyJit (how tinygrad trains: after two calls a step replays
    the captured kernels)."""

    name = "tinygrad"

    def __init__(self, cfg: ModelConfig) -> None:
        from tinygrad import Context, Device, Tensor, TinyJit
        from tinygrad.nn.optim import AdamW

        params, x, y = init(cfg)
        self.cfg, self.T, self.dev = cfg, Tensor, Device[Device.DEFAULT]
        self.params = [Tensor(v).realize() for v in params]  # every float tensor gets a .grad in tinygrad 0.14
        self.opt = AdamW(self.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.x, self.y = Tensor(x).realize().is_param_(False), Tensor(y.astype(np.int32)).realize()

        def train_step() -> Any:
            with Context(TRAINING=1):
                self.opt.zero_grad()
                loss = self._loss()
                loss.backward()
                Tensor.realize(loss, *self.opt.schedule_step())  # the loss of the weights before the update
                return loss

        self.jit = TinyJit(train_step)

    def _loss(self) -> Any:
        return forward(self.cfg, OursOps, self.params, self.x).sparse_categorical_crossentropy(self.y)

    def step(self, _: object = None) -> float:
        from tinygrad.helpers import GlobalCounters

        before = GlobalCounters.kernel_count
        loss = self.jit()
        out = float(loss.item())
        self.kernels = GlobalCounters.kernel_count - before
        return out

    def grads(self) -> list[np.ndarray]:
        for p in self.params:
            p.grad = None
        self._loss().backward()
        out = [p.grad.numpy() for p in self.params]
        for p in self.params:
            p.grad = None
        return out


def grad_error(ours: list[np.ndarray], ref: list[np.ndarray]) -> float:
    """The largest difference over all parameters, each relative to the larger of the largest magnitude of that
    parameter's reference gradient and 1% of the model's largest: float32 rounding of the sums gives ~1e-6. (The
    floor: a gradient that is zero in exact arithmetic, the CNN's first conv bias before its batch norm, is a
    cancellation whose rounding follows the size of the terms that cancel, not of the result.)"""
    worst = 0.0
    top = max((float(np.max(np.abs(b))) for b in ref if b.size), default=0.0)
    for a, b in zip(ours, ref, strict=True):
        scale = max(float(np.max(np.abs(b))) if b.size else 0.0, 0.01 * top) or 1.0
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b))) / scale)
    return worst


__all__ = ["ModelConfig", "OursTrainer", "TinygradTrainer", "TorchTrainer", "cnn_config", "forward", "grad_error",
           "init", "mlp_config", "transformer_config"]
