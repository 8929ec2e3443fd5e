"""Shared helpers for the Tensor tests: the reference value of a Tensor, tolerances, hypothesis strategies."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rewrite.dtype import DType, dtypes
from rewrite.spec import check
from tensor import Tensor
from tensor.tensor import reference_numpy


def val(t: Tensor) -> np.ndarray:
    """The tensor's value by the exact reference evaluator, after checking its graph against the spec's tensor
    stage (so every graph a test builds is also a spec-conformance test)."""
    check(t.uop, "tensor")
    out = reference_numpy(t)
    assert out.shape == t.shape, f"evaluated shape {out.shape} != tensor shape {t.shape}"
    return out


_TOL = {dtypes.float16: (2e-3, 2e-3), dtypes.bfloat16: (1e-2, 1e-2), dtypes.float32: (1e-5, 1e-6),
        dtypes.float64: (1e-12, 1e-12)}


def close(got: Tensor | np.ndarray, expected: np.ndarray, rtol: float | None = None, atol: float | None = None,
          dtype: DType | None = None) -> None:
    """Compare a Tensor (evaluated by `val`) or an array with numpy's answer: exact for ints and bools, with a
    dtype-sized tolerance for floats; the shape must match, and the dtype when `dtype` is given."""
    if isinstance(got, Tensor):
        if dtype is not None:
            assert got.dtype is dtype, f"dtype {got.dtype} != {dtype}"
        dt = got.dtype
        got = val(got)
    else:
        dt = dtype or dtypes.float32
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"shape {got.shape} != numpy's {expected.shape}"
    if dt.is_float:
        r, a = _TOL[dt]
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol if rtol is not None
                                   else r, atol=atol if atol is not None else a, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, expected)


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 1, max_side: int = 4) -> st.SearchStrategy:
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def elements(dt: np.dtype, lo: float = -100, hi: float = 100) -> st.SearchStrategy:
    if dt.kind == "f":
        # the bounds as values of the dtype, rounded inward
        flo, fhi = dt.type(lo), dt.type(hi)
        flo = flo if flo >= lo else np.nextafter(flo, dt.type(np.inf))
        fhi = fhi if fhi <= hi else np.nextafter(fhi, dt.type(-np.inf))
        return st.floats(float(flo), float(fhi), width=min(dt.itemsize * 8, 64), allow_nan=False,
                         allow_infinity=False)
    if dt.kind == "b":
        return st.booleans()
    info = np.iinfo(dt)
    return st.integers(max(info.min, int(lo)) if lo > info.min else info.min, min(info.max, int(hi)))


def arrays(dt: str | np.dtype, shape: st.SearchStrategy | tuple | None = None, lo: float = -100,
           hi: float = 100) -> st.SearchStrategy:
    d = np.dtype(dt)
    shape = shapes() if shape is None else shape
    return hnp.arrays(d, shape, elements=elements(d, lo, hi))


def dp_mlp_step(opt_name: str, devices: tuple[str, ...] | None, use_jit: bool) \
        -> tuple[Callable[[Tensor, Tensor], Tensor], list[Tensor], list[int]]:
    """A seeded MLP 4-16-3 with SGD (momentum) or AdamW, its parameters and optimizer state replicated on
    `devices` (None: left on one device): the training step (mean squared error, backward, optimizer step), under
    tensor.jit when `use_jit`; the parameters; and a one-element list counting how often the step's body ran."""
    from tensor import multi as M
    from tensor.jit import jit
    from tensor.modules import Linear
    from tensor.optim import SGD, AdamW

    Tensor.manual_seed(0)
    layers = [Linear(4, 16), Linear(16, 3)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = SGD(params, lr=0.05, momentum=0.9) if opt_name == "sgd" else AdamW(params, lr=0.01)
    if devices is not None:
        M.replicate_params(params + [t for st_ in opt.state for t in st_.values()], devices)
    ran = [0]

    def step(X: Tensor, Y: Tensor) -> Tensor:
        ran[0] += 1
        loss = ((layers[1](layers[0](X).relu()) - Y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step(loss)
        return loss

    return (jit(step) if use_jit else step), params, ran


def rss_mb() -> float:
    """This process's resident memory (VmRSS), MiB; 0 where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def layernorm(x: Tensor) -> Tensor:
    """LayerNorm over the last axis without weights (eps 1e-5), as the split tests stack it."""
    xc = x - x.mean(-1, keepdim=True)
    return xc * ((xc * xc).mean(-1, keepdim=True) + 1e-5).rsqrt()


def np_layernorm(x: np.ndarray) -> np.ndarray:
    """numpy's `layernorm`."""
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)

