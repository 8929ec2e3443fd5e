"""tensor.init: kaiming and xavier (glorot), uniform and normal, checked by their statistics over large tensors
(mean, variance, bounds), seeding through Tensor.manual_seed, in-place refills, and gains and fans against
torch.nn.init where torch is installed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewrite.dtype import dtypes
from rewrite.errors import ArgumentError, ShapeError
from tensor import Tensor, init

SHAPE = (256, 128, 3, 3)  # fan_in 1152, fan_out 2304; 294,912 draws
FAN_IN, FAN_OUT = 128 * 9, 256 * 9


def _uniform_stats(a: np.ndarray, bound: float) -> None:
    n = a.size
    assert np.abs(a).max() <= bound * (1 + 1e-6)
    assert np.abs(a).max() > 0.999 * bound  # it reaches the bound, not a smaller one
    var = bound**2 / 3
    assert abs(a.mean()) < 5 * math.sqrt(var / n)
    assert abs(a.var() / var - 1) < 0.02
    hist = np.histogram(a, bins=8, range=(-bound, bound))[0] / n  # flat
    assert np.all(np.abs(hist - 1 / 8) < 0.01)


def _normal_stats(a: np.ndarray, std: float) -> None:
    n = a.size
    assert abs(a.mean()) < 5 * std / math.sqrt(n)
    assert abs(a.std() / std - 1) < 0.01
    assert abs(np.mean(np.abs(a) < std) - 0.6827) < 0.01  # a normal's one-sigma mass
    assert abs(np.mean(((a - a.mean()) / a.std()) ** 4) - 3) < 0.1  # kurtosis 3


@pytest.mark.parametrize(("kw", "gain", "fan"), [
    ({}, math.sqrt(2), FAN_IN),  # torch's default: leaky_relu with a=0, i.e. relu
    ({"a": math.sqrt(5)}, math.sqrt(2 / 6), FAN_IN),  # what torch's Linear and Conv use
    ({"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(2), FAN_OUT),
    ({"nonlinearity": "tanh"}, 5 / 3, FAN_IN),
])
def test_kaiming_statistics(kw: dict, gain: float, fan: int) -> None:
    Tensor.manual_seed(0)
    std = gain / math.sqrt(fan)
    _uniform_stats(init.kaiming_uniform(*SHAPE, **kw).numpy(), math.sqrt(3) * std)
    _normal_stats(init.kaiming_normal(*SHAPE, **kw).numpy(), std)


@pytest.mark.parametrize("gain", [1.0, 0.5])
def test_xavier_statistics(gain: float) -> None:
    Tensor.manual_seed(1)
    std = gain * math.sqrt(2 / (FAN_IN + FAN_OUT))
    _uniform_stats(init.xavier_uniform(SHAPE, gain=gain).numpy(), math.sqrt(3) * std)
    _normal_stats(init.glorot_normal(*SHAPE, gain=gain).numpy(), std)
    _uniform_stats(Tensor.glorot_uniform(*SHAPE, gain=gain).numpy(), math.sqrt(3) * std)


def test_seeded_reproducible_and_in_place() -> None:
    Tensor.manual_seed(7)
    a, b = init.kaiming_uniform(64, 32).numpy(), init.kaiming_uniform(64, 32).numpy()
    Tensor.manual_seed(7)
    np.testing.assert_array_equal(init.kaiming_uniform(64, 32).numpy(), a)
    assert not np.array_equal(a, b)  # two calls, two streams
    w = Tensor(np.zeros((400, 300)), requires_grad=True)  # float64
    same = init.xavier_normal_(w, gain=2.0)
    assert same is w and w.requires_grad and w.dtype is dtypes.float64 and w.is_realized
    _normal_stats(w.numpy(), 2.0 * math.sqrt(2 / 700))
    init.kaiming_uniform_(w, a=0.1, mode="fan_out")
    _uniform_stats(w.numpy(), math.sqrt(3) * math.sqrt(2 / 1.01) / math.sqrt(400))
    init.zeros_(w)
    assert not w.numpy().any()
    t = Tensor.kaiming_normal(10, 20, requires_grad=True)
    assert t.requires_grad and t.shape == (10, 20)


def test_gains_fans_and_errors() -> None:
    assert init.calculate_gain("leaky_relu") == math.sqrt(2 / (1 + 0.01**2))
    assert init.fans((5, 3, 2, 2)) == (12, 20)
    with pytest.raises(ShapeError, match=r"at least 2 axes, got shape \(5,\)"):
        init.kaiming_uniform(5)
    with pytest.raises(ArgumentError, match="mode must be 'fan_in' or 'fan_out'"):
        init.kaiming_normal(3, 4, mode="fan")
    with pytest.raises(ArgumentError, match="unknown nonlinearity 'swish'"):
        init.kaiming_uniform(3, 4, nonlinearity="swish")
    with pytest.raises(ArgumentError, match="floating-point"):
        init.ones_(Tensor(np.zeros((2, 2), np.int32)))
    torch = pytest.importorskip("torch")
    for nl in ("linear", "conv2d", "sigmoid", "tanh", "relu", "selu"):
        assert init.calculate_gain(nl) == pytest.approx(torch.nn.init.calculate_gain(nl), rel=1e-15)
    for a in (None, 0.0, 0.2, math.sqrt(5)):
        assert init.calculate_gain("leaky_relu", a) == pytest.approx(torch.nn.init.calculate_gain("leaky_relu", a))
    for shape in ((5, 3), (5, 3, 2), (6, 4, 3, 2)):
        assert init.fans(shape) == torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))
