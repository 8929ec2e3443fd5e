"""float16 and bfloat16 reductions accumulate in float32 and round once at the end, as torch does: sum, mean, var,
softmax's sums, matmul and conv2d, on every device, against a float64 numpy oracle of the 16-bit inputs.

The oracles are chosen so that 16-bit accumulation, or 16-bit products summed in float32, fail: 4096 values in
[0, 1) summed in bfloat16 stall near 512 (the spacing there is 4), and a product rounded to 16 bits is off by up
to 2^-11 (bfloat16: 2^-8) of itself, which over thousands of terms is far more than the one rounding of the result
allows for outputs near zero."""

from __future__ import annotations

import numpy as np
import pytest

from devices.memory import from_bfloat16_bits, to_bfloat16_bits
from tensor import Tensor

# the python device interprets each kernel (slow), so it gets the smaller sizes
DEVICES = [("cpu", 4096), ("python", 1024)]
EPS = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}  # unit roundoff of the result's dtype (half an ulp, relative)


def _rounded(a: np.ndarray, dt: str) -> np.ndarray:
    """a's values as the 16-bit dtype holds them, in float64, rounded the way the tests' tensors are made: to float32
    first (`_input`), then to the 16-bit dtype. Rounding float64 straight to float16 differs in the rare double-rounding
    ties (15 of the 262,144 inputs of the K=4096 case), which moved a product by half an ulp of its input."""
    if dt == "float16":
        return a.astype(np.float32).astype(np.float16).astype(np.float64)
    return from_bfloat16_bits(to_bfloat16_bits(a.astype(np.float32))).astype(np.float64)


def _16(a: np.ndarray, dt: str, device: str) -> Tensor:
    return Tensor(a.astype(np.float32), device=device).cast(dt)


def _got(t: Tensor, dt: str) -> np.ndarray:
    assert t.dtype.name == dt, t.dtype
    return t.cast("float32").numpy().astype(np.float64)


def _check(got: np.ndarray, want: np.ndarray, dt: str, atol: float) -> None:
    """Within one rounding of the result (2 units of roundoff) plus `atol` for the float32 accumulation."""
    err = np.abs(got - want)
    bound = 2 * EPS[dt] * np.abs(want) + atol
    assert err.shape == want.shape and np.all(err <= bound), \
        f"max error {err.max():.3g}, worst excess {(err - bound).max():.3g} ({dt})"


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("device,n", DEVICES)
def test_sum_and_mean_of_16_bit_floats(device: str, n: int, dt: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.random((4, n))
    want = _rounded(a, dt)
    s = _got(_16(a, dt, device).sum(), dt)
    assert abs(s - want.sum()) <= 1e-2 * want.sum()  # the brief's bound; 16-bit accumulation is off by ~75%
    _check(np.asarray(s), np.asarray(want.sum()), dt, 1e-3)
    _check(_got(_16(a, dt, device).sum(1), dt), want.sum(1), dt, 1e-3)
    _check(_got(_16(a, dt, device).mean(1), dt), want.mean(1), dt, 1e-6)
    c = a - 0.5
    _check(_got(_16(c, dt, device).var(1), dt), _rounded(c, dt).var(1, ddof=1), dt, 1e-6)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("device,n", DEVICES)
def test_softmax_of_16_bit_floats(device: str, n: int, dt: str) -> None:
    a = np.random.default_rng(1).standard_normal((3, n))
    x = _rounded(a, dt)
    e = np.exp(x - x.max(1, keepdims=True))
    # exp is taken in the 16-bit dtype (as torch's half softmax stores it), so allow a few roundings per element
    got = _got(_16(a, dt, device).softmax(-1), dt)
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=8 * EPS[dt], atol=1e-7)  # float16 subnormals


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("device,n", DEVICES)
def test_matmul_of_16_bit_floats_takes_products_and_sums_in_float32(device: str, n: int, dt: str) -> None:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((16, n)), rng.standard_normal((n, 16))
    want = _rounded(a, dt) @ _rounded(b, dt)
    _check(_got(_16(a, dt, device) @ _16(b, dt, device), dt), want, dt, 1e-3)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("device,n", DEVICES)
def test_conv2d_of_16_bit_floats_takes_products_and_sums_in_float32(device: str, n: int, dt: str) -> None:
    rng = np.random.default_rng(3)
    cin = n // 16  # cin * 9 terms per output
    x, w = rng.standard_normal((1, cin, 4, 4)), rng.standard_normal((8, cin, 3, 3))
    xr, wr = _rounded(x, dt), _rounded(w, dt)
    xp = np.pad(xr, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 4, j:j + 4], wr[:, :, i, j])
               for i in range(3) for j in range(3))
    _check(_got(_16(x, dt, device).conv2d(_16(w, dt, device), padding=1), dt), np.asarray(want), dt, 1e-3)
