"""Weight initialization as torch.nn.init defines it: kaiming (He) and xavier (Glorot), uniform and normal, drawn
from the front end's seeded random stream (`Tensor.manual_seed`, tensor.random).

Two spellings: `kaiming_uniform(*shape, ...)` makes a new tensor (tinygrad's `Tensor.kaiming_uniform`), and
`kaiming_uniform_(t, ...)` refills an existing tensor in place, as torch's trailing underscore says (the Tensor
object stays the one a module and its optimizer hold; its dtype and device are kept).

Fans follow torch: for a weight of shape (out, in, *kernel), fan_in = in * prod(kernel) and
fan_out = out * prod(kernel); a tensor needs at least two axes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.errors import ArgumentError, ShapeError
from tensor.autograd import no_grad
from tensor.helpers import Device

if TYPE_CHECKING:
    from tensor.tensor import Tensor

_LINEAR = ("linear", "identity", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
           "conv_transpose3d", "sigmoid")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The gain torch recommends for a nonlinearity (torch.nn.init.calculate_gain): 1 for linear layers and
    sigmoid, 5/3 for tanh, sqrt(2) for relu, sqrt(2 / (1 + a^2)) for leaky_relu with slope a (0.01 when None),
    3/4 for selu."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ArgumentError(f"calculate_gain: the leaky_relu slope must be a number, got {slope!r}")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ArgumentError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; use one of {', '.join(_LINEAR)}, "
                        f"tanh, relu, leaky_relu, selu")


def fans(shape: tuple[int, ...], what: str = "init") -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shaped (out, in, *kernel)."""
    if len(shape) < 2:
        raise ShapeError(f"{what}: fan in and fan out need a tensor with at least 2 axes, got shape "
                         f"{fmt_shape(shape)}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _kaiming_std(shape: tuple[int, ...], a: float, mode: str, nonlinearity: str, what: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ArgumentError(f"{what}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = fans(shape, what)
    fan = fan_in if mode == "fan_in" else fan_out
    if fan == 0:
        raise ShapeError(f"{what}: shape {fmt_shape(shape)} has a zero fan ({mode}); nothing to scale by")
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def _xavier_std(shape: tuple[int, ...], gain: float, what: str) -> float:
    fan_in, fan_out = fans(shape, what)
    if fan_in + fan_out == 0:
        raise ShapeError(f"{what}: shape {fmt_shape(shape)} has zero fans; nothing to scale by")
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def _shape(shape: tuple) -> tuple[int, ...]:
    return tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)


def _uniform(shape: tuple[int, ...], bound: float, dtype: object, device: Device | None) -> Tensor:
    return tt.Tensor.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device)


def kaiming_uniform(*shape: int, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    dtype: object = None, device: Device | None = None) -> Tensor:
    """Uniform in +-gain * sqrt(3 / fan) (He et al. 2015; torch.nn.init.kaiming_uniform_)."""
    sh = _shape(shape)
    return _uniform(sh, math.sqrt(3.0) * _kaiming_std(sh, a, mode, nonlinearity, "kaiming_uniform"), dtype, device)


def kaiming_normal(*shape: int, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                   dtype: object = None, device: Device | None = None) -> Tensor:
    """Normal with mean 0 and std gain / sqrt(fan) (torch.nn.init.kaiming_normal_)."""
    sh = _shape(shape)
    std = _kaiming_std(sh, a, mode, nonlinearity, "kaiming_normal")
    return tt.Tensor.normal(*sh, mean=0.0, std=std, dtype=dtype, device=device)


def xavier_uniform(*shape: int, gain: float = 1.0, dtype: object = None, device: Device | None = None) -> Tensor:
    """Uniform in +-gain * sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio 2010; torch's xavier_uniform_)."""
    sh = _shape(shape)
    return _uniform(sh, math.sqrt(3.0) * _xavier_std(sh, gain, "xavier_uniform"), dtype, device)


def xavier_normal(*shape: int, gain: float = 1.0, dtype: object = None, device: Device | None = None) -> Tensor:
    """Normal with mean 0 and std gain * sqrt(2 / (fan_in + fan_out)) (torch's xavier_normal_)."""
    sh = _shape(shape)
    return tt.Tensor.normal(*sh, mean=0.0, std=_xavier_std(sh, gain, "xavier_normal"), dtype=dtype, device=device)


glorot_uniform, glorot_normal = xavier_uniform, xavier_normal


def _refill(t: Tensor, new: Tensor) -> Tensor:
    """Rebind t to the new values (realized, in t's dtype); t keeps its identity and requires_grad."""
    if not isinstance(t, tt.Tensor):
        raise TypeError(f"init: expected a Tensor to fill, got {type(t).__name__}")
    if not t.dtype.is_float:
        raise ArgumentError(f"init: can only fill a floating-point tensor, got {t.dtype.name}")
    with no_grad():
        t.uop = new.cast(t.dtype).realize().uop
    return t


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    return _refill(t, kaiming_uniform(*t.shape, a=a, mode=mode, nonlinearity=nonlinearity, device=t.device))


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu") -> Tensor:
    return _refill(t, kaiming_normal(*t.shape, a=a, mode=mode, nonlinearity=nonlinearity, device=t.device))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    return _refill(t, xavier_uniform(*t.shape, gain=gain, device=t.device))


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    return _refill(t, xavier_normal(*t.shape, gain=gain, device=t.device))


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return _refill(t, tt.Tensor.uniform(*t.shape, low=a, high=b, device=t.device))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _refill(t, tt.Tensor.normal(*t.shape, mean=mean, std=std, device=t.device))


def zeros_(t: Tensor) -> Tensor:
    return _refill(t, tt.Tensor.zeros(*t.shape, device=t.device))


def ones_(t: Tensor) -> Tensor:
    return _refill(t, tt.Tensor.ones(*t.shape, device=t.device))


glorot_uniform_, glorot_normal_ = xavier_uniform_, xavier_normal_

__all__ = ["calculate_gain", "fans", "glorot_normal", "glorot_normal_", "glorot_uniform", "glorot_uniform_",
           "kaiming_normal", "kaiming_normal_", "kaiming_uniform", "kaiming_uniform_", "normal_", "ones_", "uniform_",
           "xavier_normal", "xavier_normal_", "xavier_uniform", "xavier_uniform_", "zeros_"]
