"""A BERT encoder forward (the all-MiniLM-L6-v2 shapes) in three spellings: our Tensor API, numpy and PyTorch.

The model: token + position + token-type embeddings and a LayerNorm, then `layers` encoder layers, each
self-attention (Q, K, V projections, scaled dot-product softmax over all tokens, no mask, output projection)
with a residual and a LayerNorm, then a feed-forward block (dense to `inter`, GELU, dense back) with a residual
and a LayerNorm. Weights are random (normal, scaled like an initialized model) from a fixed seed: only the
shapes and the work matter here. GELU is the tanh approximation in all three (torch: approximate="tanh"), so
the three compute the same function.

`python -m benchmarks model` times it (benchmarks.bench_model); tests/benchmarks/test_bert_model.py checks a
small configuration against the numpy float64 forward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

SEED = 4321
LN_EPS = 1e-12  # BERT's LayerNorm epsilon


@dataclass(frozen=True)
class BertConfig:
    layers: int = 6
    hidden: int = 384
    heads: int = 12
    inter: int = 1536
    vocab: int = 30522
    max_pos: int = 512
    batch: int = 8
    seq: int = 128

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def flops(self) -> float:
        """Multiply-adds of the matmuls, twice (the elementwise work is a rounding error next to them)."""
        n, h, i, t = self.batch * self.seq, self.hidden, self.inter, self.seq
        per_layer = 2 * n * h * (4 * h + 2 * i) + 2 * 2 * self.batch * t * t * h
        return float(self.layers * per_layer)


MINILM = BertConfig()


def weights(cfg: BertConfig, seed: int = SEED) -> dict[str, np.ndarray]:
    """Random float32 weights by name (linear weights stored (in, out): y = x @ w + b), plus `ids`, the
    (batch, seq) int32 token ids."""
    rng = np.random.default_rng(seed)

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * np.float32(std)).astype(np.float32)

    def ln(prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.w": (1 + normal(cfg.hidden, std=0.1)).astype(np.float32),
                f"{prefix}.b": normal(cfg.hidden, std=0.1)}

    h, i = cfg.hidden, cfg.inter
    w: dict[str, np.ndarray] = {"word": normal(cfg.vocab, h), "pos": normal(cfg.max_pos, h), "type": normal(2, h),
                                **ln("emb_ln")}
    for k in range(cfg.layers):
        p = f"l{k}."
        for name, (a, b) in {"q": (h, h), "k": (h, h), "v": (h, h), "o": (h, h), "up": (h, i), "down": (i, h)}.items():
            w[p + name + ".w"] = normal(a, b, std=1 / math.sqrt(a))
            w[p + name + ".b"] = normal(b)
        w.update(ln(p + "ln1"))
        w.update(ln(p + "ln2"))
    w["ids"] = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq), dtype=np.int32)
    return w


# ---------------------------------------------------------------------------- ours


def forward_ours(cfg: BertConfig, w: dict[str, Any]) -> Any:
    """The forward with our Tensor (`w` holds Tensors): the last hidden state, (batch, seq, hidden)."""
    b, t, h, nh, hd = cfg.batch, cfg.seq, cfg.hidden, cfg.heads, cfg.head_dim
    x = w["word"].index_select(0, w["ids"].reshape(b * t)).reshape(b, t, h)  # the embedding's rows, by id
    x = x + w["pos"][:t].reshape(1, t, h) + w["type"][0].reshape(1, 1, h)
    x = _layernorm(x, w["emb_ln.w"], w["emb_ln.b"])
    scale = 1.0 / math.sqrt(hd)
    for k in range(cfg.layers):
        p = f"l{k}."

        def heads(y: Any) -> Any:
            return y.reshape(b, t, nh, hd).permute(0, 2, 1, 3)

        q = heads(x @ w[p + "q.w"] + w[p + "q.b"])
        kk = heads(x @ w[p + "k.w"] + w[p + "k.b"])
        v = heads(x @ w[p + "v.w"] + w[p + "v.b"])
        att = ((q @ kk.transpose(-1, -2)) * scale).softmax(-1) @ v
        att = att.permute(0, 2, 1, 3).reshape(b, t, h)
        x = _layernorm(x + att @ w[p + "o.w"] + w[p + "o.b"], w[p + "ln1.w"], w[p + "ln1.b"])
        ff = (x @ w[p + "up.w"] + w[p + "up.b"]).gelu() @ w[p + "down.w"] + w[p + "down.b"]
        x = _layernorm(x + ff, w[p + "ln2.w"], w[p + "ln2.b"])
    return x


def _layernorm(x: Any, g: Any, b: Any) -> Any:
    xc = x - x.mean(-1, keepdim=True)
    return xc * ((xc * xc).mean(-1, keepdim=True) + LN_EPS).rsqrt() * g + b


# ---------------------------------------------------------------------------- numpy (reference and peer)


def forward_numpy(cfg: BertConfig, w: dict[str, np.ndarray], dtype: type = np.float32) -> np.ndarray:
    """The same forward in numpy, in `dtype` (float64: the reference)."""
    b, t, h, nh, hd = cfg.batch, cfg.seq, cfg.hidden, cfg.heads, cfg.head_dim
    f = {k: (v if k == "ids" else v.astype(dtype, copy=False)) for k, v in w.items()}
    x = f["word"][f["ids"]] + f["pos"][:t][None] + f["type"][0][None, None]
    x = _np_layernorm(x, f["emb_ln.w"], f["emb_ln.b"])
    scale = dtype(1.0 / math.sqrt(hd))
    for k in range(cfg.layers):
        p = f"l{k}."

        def heads(y: np.ndarray) -> np.ndarray:
            return y.reshape(b, t, nh, hd).transpose(0, 2, 1, 3)

        q, kk, v = (heads(x @ f[p + n + ".w"] + f[p + n + ".b"]) for n in ("q", "k", "v"))
        s = (q @ kk.swapaxes(-1, -2)) * scale
        e = np.exp(s - s.max(-1, keepdims=True))
        att = ((e / e.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, t, h)
        x = _np_layernorm(x + att @ f[p + "o.w"] + f[p + "o.b"], f[p + "ln1.w"], f[p + "ln1.b"])
        u = x @ f[p + "up.w"] + f[p + "up.b"]
        g = dtype(0.5) * u * (1 + np.tanh(dtype(math.sqrt(2 / math.pi)) * (u + dtype(0.044715) * u * u * u)))
        x = _np_layernorm(x + g @ f[p + "down.w"] + f[p + "down.b"], f[p + "ln2.w"], f[p + "ln2.b"])
    return x


def _np_layernorm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + x.dtype.type(LN_EPS)) * g + b


# ---------------------------------------------------------------------------- torch


def forward_torch(cfg: BertConfig, w: dict[str, Any]) -> Any:
    """The same forward in PyTorch eager (`w` holds torch tensors; call under torch.inference_mode())."""
    import torch
    import torch.nn.functional as F

    b, t, h, nh, hd = cfg.batch, cfg.seq, cfg.hidden, cfg.heads, cfg.head_dim
    x = F.embedding(w["ids"].long(), w["word"]) + w["pos"][:t][None] + w["type"][0][None, None]
    x = F.layer_norm(x, (h,), w["emb_ln.w"], w["emb_ln.b"], LN_EPS)
    scale = 1.0 / math.sqrt(hd)
    for k in range(cfg.layers):
        p = f"l{k}."
        q, kk, v = (torch.addmm(w[p + n + ".b"], x.reshape(b * t, h), w[p + n + ".w"])
                    .reshape(b, t, nh, hd).transpose(1, 2) for n in ("q", "k", "v"))
        att = torch.softmax((q @ kk.transpose(-1, -2)) * scale, -1) @ v
        att = att.transpose(1, 2).reshape(b, t, h)
        x = F.layer_norm(x + att @ w[p + "o.w"] + w[p + "o.b"], (h,), w[p + "ln1.w"], w[p + "ln1.b"], LN_EPS)
        ff = F.gelu(x @ w[p + "up.w"] + w[p + "up.b"], approximate="tanh") @ w[p + "down.w"] + w[p + "down.b"]
        x = F.layer_norm(x + ff, (h,), w[p + "ln2.w"], w[p + "ln2.b"], LN_EPS)
    return x


def check(got: np.ndarray, ref: np.ndarray, rtol: float = 1e-4) -> tuple[bool, float]:
    """Whether `got` matches the float64 reference to `rtol` of the result's scale, and the relative error."""
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    if not np.all(np.isfinite(got)):
        return False, float("inf")
    scale = max(float(np.abs(ref).max()), 1e-30)
    err = float(np.abs(got - ref).max()) / scale
    return err <= rtol, err
