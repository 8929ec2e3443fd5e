"""Accuracy of the front end's transcendental functions in ulps of the result, over dense grids of both signs
from 1e-40 to 3e38 (tiny, subnormal, huge), against float64 numpy/math for float32 and mpmath for float64.

Limits are the measured maxima rounded up (tensor/transcendental.py has the table); the naive forms these
replaced were off by up to 2e7 ulp (tanh(1e-8) = 0, tanh(9) = 1.0, sigmoid(-88.7) = 0, cos(2e4) off in the
third digit, erf(1e-14) = 0, softplus(-18) = 0, elu(-1e-8) = 0)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

from rewrite.env import Context
from tensor import Tensor

_pos = np.concatenate([np.logspace(-40, 38.5, 3000), np.linspace(0, 20, 2001), np.linspace(80, 90, 301),
                       np.linspace(700, 720, 101), [1e-8, 1e-7, 1e-6, 9.0, 0.55, 1.0, 2.0, 6.0]])
GRID32 = np.unique(np.concatenate([_pos, -_pos]).astype(np.float32))


def _sig(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _gelu(x: np.ndarray) -> np.ndarray:
    return x * _sig(2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))


# name: (tensor fn, float64 reference, float32 ulp limit, float64 ulp limit, the grid's part to use)
CASES = {
    "exp": (Tensor.exp, np.exp, 1, 1, lambda x: np.abs(x) < 1e3),
    "log": (Tensor.log, np.log, 2, 2, lambda x: x > 0),
    "sin": (Tensor.sin, np.sin, 1, 2, lambda x: np.abs(x) < 1e6),
    "cos": (Tensor.cos, np.cos, 2, 2, lambda x: np.abs(x) < 1e6),
    "tan": (Tensor.tan, np.tan, 4, 3, lambda x: np.abs(x) < 1e6),
    "tanh": (Tensor.tanh, np.tanh, 2, 2, None),
    "sigmoid": (Tensor.sigmoid, _sig, 3, 3, None),
    "erf": (Tensor.erf, np.vectorize(math.erf), 2, 2, None),
    "softplus": (Tensor.softplus, lambda x: np.logaddexp(0, x), 3, 3, None),
    "elu": (Tensor.elu, lambda x: np.where(x > 0, x, np.expm1(x)), 3, 3, None),
    "silu": (Tensor.silu, lambda x: x * _sig(x), 3, 3, None),
    # x * sigmoid(2z) with z = c*(x + 0.044715 x**3) rounded in the input's dtype: e**2z magnifies that rounding
    # by |2z|, so far from 0 the limit is 4 ulp plus twice the condition number |2z|*(1 - sigmoid(2z))
    "gelu": (Tensor.gelu, _gelu, 4, 4, lambda x: np.abs(x) < 1e12),
}
MP = {"exp": mp.exp, "log": mp.log, "sin": mp.sin, "cos": mp.cos, "tan": mp.tan, "tanh": mp.tanh, "erf": mp.erf,
      "sigmoid": lambda x: 1 / (1 + mp.exp(-x)), "softplus": lambda x: mp.log(1 + mp.exp(x)),
      "elu": lambda x: x if x > 0 else mp.expm1(x), "silu": lambda x: x / (1 + mp.exp(-x)),
      "gelu": lambda x: x / (1 + mp.exp(-2 * mp.sqrt(2 / mp.pi) * (x + mp.mpf(0.044715) * x ** 3)))}


def ulp_error(got: np.ndarray, exact: np.ndarray, dt: type) -> np.ndarray:
    """|got - exact| in units of the spacing of `dt` at the exact value; equal values (incl. infs, nans) are 0."""
    with np.errstate(all="ignore"):
        ulp = np.spacing(np.abs(exact).astype(dt)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - exact) / ulp
    err[(got == exact) | (got == exact.astype(dt)) | (np.isnan(got) & np.isnan(exact))] = 0
    return np.where(np.isnan(err), np.inf, err)


def check(name: str, x: np.ndarray, got: np.ndarray, exact: np.ndarray, err: np.ndarray, limit: float) -> None:
    allowed = np.full(x.shape, float(limit))
    if name == "gelu":
        a = 2 * math.sqrt(2 / math.pi) * (x.astype(np.float64) + 0.044715 * x.astype(np.float64) ** 3)
        allowed += 2 * np.abs(a) * (1 - _sig(a))  # the argument is good to ~2 ulp (four roundings)
    i = int(np.argmax(err - allowed))
    assert err[i] <= allowed[i], f"{name}({x[i]!r}) = {got[i]!r}, exact {exact[i]!r}: {err[i]:.3g} ulp > {allowed[i]}"


@pytest.mark.parametrize("name", list(CASES))
def test_float32_dense_grid(name: str) -> None:
    fn, ref, limit, _, part = CASES[name]
    x = GRID32 if part is None else GRID32[part(GRID32.astype(np.float64))]
    with np.errstate(all="ignore"):
        exact = ref(x.astype(np.float64))
    got = fn(Tensor(x)).numpy()
    err = ulp_error(got, exact, np.float32)
    check(name, x, got, exact, err, limit)


@pytest.mark.parametrize("name", list(CASES))
def test_float64_against_mpmath(name: str) -> None:
    fn, _, _, limit, part = CASES[name]
    rng = np.random.default_rng(1)
    pos = np.concatenate([10.0 ** rng.uniform(-300, 2.9, 150), rng.uniform(0, 8, 150), [1e-8, 0.55, 1, 2, 6, 9]])
    x = np.concatenate([pos, -pos])
    x = x if part is None else x[part(x)]
    with mp.workdps(40):
        exact = np.array([float(MP[name](mp.mpf(float(v)))) for v in x])
    got = fn(Tensor(x)).numpy()
    err = ulp_error(got, exact, np.float64)
    check(name, x, got, exact, err, limit)


@pytest.mark.parametrize("knobs", [{}, {"NOOPT": 1}, {"DEVICE": "python"}], ids=["cpu", "noopt", "python"])
def test_tanh_edges(knobs: dict) -> None:
    """The issue's cases: tanh(x) ~ x for tiny x, tanh(9) is the float32 below 1, -0.0 keeps its sign."""
    x = np.array([1e-8, 1e-7, -1e-6, 9.0, -9.0, 0.0, -0.0, 100.0, -np.inf, np.nan], np.float32)
    with Context(**knobs):
        got = Tensor(x).tanh().numpy()
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert np.signbit(got[6]) and got[3] == np.float32(0.99999994)
