"""The `kernels` suite's cases: what each computes (shapes, FLOP and byte counts, seeded inputs), the same
computation as Tensor methods and in plain numpy, and the check against numpy's float64 reference."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

SEED = 1234
EPS = 1e-5  # layernorm


# ---------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    key: str
    title: str
    kind: str
    dims: tuple[int, ...]

    @property
    def compute_bound(self) -> bool:
        """Rated in GFLOP/s (against the FMA peak) rather than GB/s (against stream bandwidth)."""
        return self.kind in ("matmul", "conv", "attention")

    def shapes(self) -> list[tuple[int, ...]]:
        d = self.dims
        if self.kind in ("add",):
            return [d, d]
        if self.kind == "chain":
            return [d, d, d]
        if self.kind in ("sum", "softmax"):
            return [d]
        if self.kind == "layernorm":
            return [d, d[-1:], d[-1:]]
        if self.kind == "matmul":
            return [(d[0], d[0]), (d[0], d[0])]
        if self.kind == "conv":
            b, ci, h, w, co = d
            return [(b, ci, h, w), (co, ci, 3, 3)]
        if self.kind == "attention":
            b, hd, t, e = d
            return [(b, hd, t, e)] * 3
        raise ValueError(self.kind)

    def out_elems(self) -> int:
        d = self.dims
        if self.kind == "sum":
            return 1
        if self.kind == "matmul":
            return d[0] * d[0]
        if self.kind == "conv":
            return d[0] * d[4] * d[2] * d[3]
        return math.prod(self.shapes()[0])

    def flops(self) -> float:
        d = self.dims
        n = math.prod(self.shapes()[0])
        per_elem = {"add": 1, "chain": 7, "sum": 1, "softmax": 5, "layernorm": 7}
        if self.kind in per_elem:
            return float(per_elem[self.kind] * n)
        if self.kind == "matmul":
            return 2.0 * d[0] ** 3
        if self.kind == "conv":
            b, ci, h, w, co = d
            return 2.0 * b * co * h * w * ci * 9
        b, hd, t, e = d
        return 4.0 * b * hd * t * t * e + 6.0 * b * hd * t * t

    def bytes(self) -> float:
        """Compulsory traffic: each input read once, the output written once (float32)."""
        return 4.0 * (sum(math.prod(s) for s in self.shapes()) + self.out_elems())

    def inputs(self) -> list[np.ndarray]:
        rng = np.random.default_rng(SEED)
        return [rng.standard_normal(s, dtype=np.float32) for s in self.shapes()]


def _cases(quick: bool) -> list[Case]:
    if quick:
        return [Case("add_1M", "add 1M", "add", (1 << 20,)), Case("sum_1M", "sum 1M", "sum", (1 << 20,)),
                Case("softmax_512", "softmax 512x512", "softmax", (512, 512)),
                Case("matmul_256", "matmul 256", "matmul", (256,)),
                Case("conv_small", "conv2d (1,32,28,28)->32", "conv", (1, 32, 28, 28, 32))]
    return [Case("add_16M", "add 16M", "add", (1 << 24,)),
            Case("chain_16M", "elementwise chain 16M", "chain", (1 << 24,)),
            Case("sum_16M", "sum 16M", "sum", (1 << 24,)),
            Case("softmax_4096", "softmax 4096x4096", "softmax", (4096, 4096)),
            Case("layernorm", "layernorm 16384x1024", "layernorm", (16384, 1024)),
            Case("matmul_512", "matmul 512", "matmul", (512,)), Case("matmul_1024", "matmul 1024", "matmul", (1024,)),
            Case("matmul_2048", "matmul 2048", "matmul", (2048,)),
            Case("conv", "conv2d (8,64,56,56)->64", "conv", (8, 64, 56, 56, 64)),
            Case("attention", "attention 8x8x512x64", "attention", (8, 8, 512, 64))]


# the default run's cases: one of each kind of kernel at the full list's sizes (so its figures compare with a full
# run's): memory-bound elementwise and reduction, a row-wise fused reduction, a compute-bound matmul and conv.
# The rest (the elementwise chain, layernorm, matmul 512 and 2048, attention) are in `--full`.
DEFAULT = ("add_16M", "sum_16M", "softmax_4096", "matmul_1024", "conv")


QUICK = ("add_1M", "softmax_512", "matmul_256")


def cases_for(mode: str) -> list[Case]:
    """The cases a run in `mode` (quick, default, full) times."""
    if mode == "quick":  # one memory-bound, one fused reduction, one compute-bound (conv and sum 1M: --full)
        return [c for c in _cases(True) if c.key in QUICK]
    full = _cases(False)
    return full if mode == "full" else [c for c in full if c.key in DEFAULT]


def all_cases() -> dict[str, Case]:
    return {c.key: c for c in _cases(False) + _cases(True)}


# ---------------------------------------------------------------------------- the computations


def tensor_graph(case: Case, xs: list[Any], conv: Callable[[Any, Any], Any] | None = None) -> Any:
    """The case as Tensor methods. Our Tensor, tinygrad's and torch's all accept these spellings, so every
    engine that has a Tensor runs literally the same expression (`conv` overrides conv2d where it differs)."""
    k = case.kind
    if k == "add":
        return xs[0] + xs[1]
    if k == "chain":
        a, b, c = xs
        return ((a * b + c) * 0.5 - a).relu() * b + c
    if k == "sum":
        return xs[0].sum()
    if k == "softmax":
        return xs[0].softmax(-1)
    if k == "layernorm":
        x, w, b = xs
        xc = x - x.mean(-1, keepdim=True)
        return xc * ((xc * xc).mean(-1, keepdim=True) + EPS).rsqrt() * w + b
    if k == "matmul":
        return xs[0] @ xs[1]
    if k == "conv":
        return conv(xs[0], xs[1]) if conv is not None else xs[0].conv2d(xs[1], padding=1)
    q, kk, v = xs
    return (q @ kk.transpose(-1, -2) * (1.0 / math.sqrt(case.dims[3]))).softmax(-1) @ v


def numpy_graph(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    """The case in plain numpy (float32 in, float32 out; float64 in gives the reference)."""
    k = case.kind
    if k == "add":
        return xs[0] + xs[1]
    if k == "chain":
        a, b, c = xs
        return np.maximum((a * b + c) * 0.5 - a, 0) * b + c
    if k == "sum":
        return np.asarray(xs[0].sum())
    if k == "softmax":
        return _np_softmax(xs[0])
    if k == "layernorm":
        x, w, b = xs
        xc = x - x.mean(-1, keepdims=True)
        return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + EPS) * w + b
    if k == "matmul":
        return xs[0] @ xs[1]
    if k == "conv":
        x, w = xs
        # im2col: a strided window view, which tensordot copies into one matrix for a single BLAS gemm
        win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), (2, 3))
        return np.ascontiguousarray(np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2))
    q, kk, v = xs
    return _np_softmax(q @ kk.swapaxes(-1, -2) * (1.0 / math.sqrt(case.dims[3]))) @ v


def _np_softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check(case: Case, got: np.ndarray, xs: list[np.ndarray], ref: np.ndarray) -> tuple[bool, float]:
    """Whether `got` matches the float64 reference, and the error relative to the result's scale. The scale of a
    sum is the sum of magnitudes (its rounding error grows with that, not with the result)."""
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    if not np.all(np.isfinite(got)):
        return False, float("inf")
    scale = float(np.abs(xs[0]).astype(np.float64).sum()) if case.kind == "sum" else float(np.abs(ref).max())
    scale = max(scale, 1e-30)
    tol = {"add": 1e-6, "chain": 1e-6, "sum": 1e-6, "softmax": 1e-5, "layernorm": 1e-5}.get(case.kind, 1e-4)
    err = float(np.abs(got - ref).max()) / scale
    return bool(np.allclose(got, ref, rtol=tol, atol=tol * scale)), err


def reference(case: Case, xs: list[np.ndarray]) -> np.ndarray:
    return numpy_graph(case, [x.astype(np.float64) for x in xs])
