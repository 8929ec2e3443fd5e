"""numpy references for the layer, attention and loss tests: direct loop definitions (no shared code with the
implementation) and a central-difference gradient of any numpy function."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def fd_grad(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """d f / d x by central differences in float64."""
    x = np.array(x, np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = f(x)
        x[i] = old - h
        down = f(x)
        x[i] = old
        g[i] = (up - down) / (2 * h)
    return g


def conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: tuple, p: tuple, d: tuple, g: int) -> np.ndarray:
    """torch's conv over the trailing axes by its definition:
    y[n, o, i] = sum over c, k of x[n, c, i*s - p + k*d] * w[o, c, k]."""
    n = x.shape[0]
    cout, cin_g, *ks = w.shape
    sp = x.shape[2:]
    outs = [(sp[a] + 2 * p[a] - d[a] * (ks[a] - 1) - 1) // s[a] + 1 for a in range(len(sp))]
    y = np.zeros((n, cout, *outs))
    for o in range(cout):
        grp = o // (cout // g)
        for c in range(cin_g):
            for k in np.ndindex(*ks):
                for i in np.ndindex(*outs):
                    src = tuple(i[a] * s[a] - p[a] + k[a] * d[a] for a in range(len(sp)))
                    if all(0 <= src[a] < sp[a] for a in range(len(sp))):
                        y[(slice(None), o, *i)] += x[(slice(None), grp * cin_g + c, *src)] * w[(o, c, *k)]
    return y if b is None else y + b.reshape(1, -1, *([1] * len(sp)))


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, s: tuple, p: tuple, op: tuple, d: tuple,
                      g: int) -> np.ndarray:
    """The transposed convolution by its definition: x[n, c, i] * w[c, o, k] lands at y[n, o, i*s + k*d - p]."""
    n, cin = x.shape[:2]
    _, cout_g, *ks = w.shape
    sp = x.shape[2:]
    outs = [(sp[a] - 1) * s[a] - 2 * p[a] + d[a] * (ks[a] - 1) + op[a] + 1 for a in range(len(sp))]
    y = np.zeros((n, cout_g * g, *outs))
    cin_g = cin // g
    for c in range(cin):
        grp = c // cin_g
        for o in range(cout_g):
            for k in np.ndindex(*ks):
                for i in np.ndindex(*sp):
                    dst = tuple(i[a] * s[a] + k[a] * d[a] - p[a] for a in range(len(sp)))
                    if all(0 <= dst[a] < outs[a] for a in range(len(sp))):
                        y[(slice(None), grp * cout_g + o, *dst)] += x[(slice(None), c, *i)] * w[(c, o, *k)]
    return y if b is None else y + b.reshape(1, -1, *([1] * len(sp)))


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def sdpa(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None, causal: bool = False,
         scale: float | None = None) -> np.ndarray:
    """softmax(q k^T * scale + mask) v, a bool mask True where attention is allowed."""
    sc = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
    z = q @ np.swapaxes(k, -1, -2) * sc
    if causal:
        mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), bool))
    if mask is not None:
        z = np.where(mask, z, -np.inf) if mask.dtype == bool else z + mask
    return softmax(z) @ v


def mha(q: np.ndarray, k: np.ndarray, v: np.ndarray, w_in: np.ndarray, b_in: np.ndarray, w_out: np.ndarray,
        b_out: np.ndarray, heads: int, mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Batch-first multi-head attention (N, L, E) with packed input projection; mask (L, S) bool True = blocked.
    Returns the output and the head-averaged weights."""
    e = q.shape[-1]
    hd = e // heads
    qs, ks, vs = (a @ w_in[i * e:(i + 1) * e].T + b_in[i * e:(i + 1) * e] for i, a in enumerate((q, k, v)))

    def split(a: np.ndarray) -> np.ndarray:
        return a.reshape(a.shape[0], a.shape[1], heads, hd).transpose(0, 2, 1, 3)

    z = split(qs) @ np.swapaxes(split(ks), -1, -2) / np.sqrt(hd)
    if mask is not None:
        z = np.where(mask, -np.inf, z)
    w = softmax(z)
    o = (w @ split(vs)).transpose(0, 2, 1, 3).reshape(q.shape[0], q.shape[1], e)
    return o @ w_out.T + b_out, w.mean(1)
