"""The front end's accurate elementwise functions as differentiable units.

tensor.transcendental builds exp, tanh, sigmoid, erf, ... from bitcasts, integer shifts and polynomials: their
graphs hold ops with no gradient (BITCAST, SHL) or with the wrong one (a polynomial's derivative is not the
function's). Each function here wraps its graph in a FUNCTION marked `ElementwiseUnit(name)` whose body also
holds the mathematical derivative (rules.gradients' `grad-elementwise-unit`), so the gradient of exp is
g * exp(x), of tanh g * (1 - tanh(x)**2), and so on. The derivative output is only computed when a gradient
reads it; the forward kernels are those of the bare graph (the Callify stage inlines the unit).

Each derivative is written from the value where that is exact (exp' = exp) and otherwise from accurate
functions of x (cos' = -sin x, erf' = 2/sqrt(pi) e**-x**2), never by differentiating the polynomial.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from rewrite import DType, Ops, UOp
from rules.gradients import ElementwiseUnit, unit
from tensor import transcendental as tr

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


class Unary:
    """The unit `name`: `value(p)` and `derivative(p, value)` built over a PARAM p standing for the argument.

    The body depends only on the argument's dtype, shape and device, so it is built once for each (a few hundred
    nodes for erf) and each call adds one FUNCTION node."""

    def __init__(self, name: str, value: Callable[[UOp], UOp], derivative: Callable[[UOp, UOp], UOp]) -> None:
        self.name, self.value, self.derivative = name, value, derivative
        self.body = functools.lru_cache(maxsize=256)(self._body)

    def _body(self, dtype: DType, shape: tuple, device: str | tuple[str, ...] | None) -> UOp:
        p = UOp.param(0, dtype, shape, device)
        v = self.value(p)
        return unit(self.name, v, [self.derivative(p, v)], [p]).src[0].src[0]

    def __call__(self, x: UOp, device: str | tuple[str, ...] | None) -> UOp:
        """The unit applied to x, which lives on `device` (the Tensor's)."""
        fn = UOp(Ops.FUNCTION, (self.body(x.dtype, x.shape, device), x), ElementwiseUnit(self.name))
        return UOp(Ops.GETTUPLE, (fn,), 0)


def _sigmoid_derivative(x: UOp, v: UOp) -> UOp:
    _, e, r = tr.sigmoid_parts(x)
    return e * r * r


def _silu_derivative(x: UOp, v: UOp) -> UOp:
    """(x * s)' = s + x * s * (1 - s)."""
    s, e, r = tr.sigmoid_parts(x)
    return s + x * (e * r * r)


def _tanh_derivative(x: UOp, t: UOp) -> UOp:
    """1 - t**2; for |x| >= 0.55 as (1 - |t|)(1 + |t|) with 1 - |t| from tr.tanh_gap (as tanh_uop computes it, so
    shared), which keeps its relative accuracy where t rounds to 1."""
    ax = (x < 0.0).where(-x, x)
    gap = tr.tanh_gap(ax)
    return (ax < 0.55).where(t.const_like(1.0) - t * t, gap * (gap.const_like(2.0) - gap))


exp = Unary("exp", tr.exp_uop, lambda x, v: v)
expm1 = Unary("expm1", tr.expm1_uop, lambda x, v: tr.exp_uop(x))
log1p = Unary("log1p", tr.log1p_uop, lambda x, v: (x + 1.0).recip())
cos = Unary("cos", tr.cos_uop, lambda x, v: -x.sin())
tan = Unary("tan", tr.tan_uop, lambda x, v: v * v + 1.0)
tanh = Unary("tanh", tr.tanh_uop, _tanh_derivative)
sigmoid = Unary("sigmoid", tr.sigmoid_uop, _sigmoid_derivative)
silu = Unary("silu", tr.silu_uop, _silu_derivative)
erf = Unary("erf", tr.erf_uop, lambda x, v: tr.exp_uop(-(x * x)) * _TWO_OVER_SQRT_PI)
# log(1 + e**x) for x <= 0 (softplus's tail): its derivative is sigmoid(x)
log1p_exp = Unary("log1p-exp", lambda x: tr.log1p_uop(tr.exp_uop(x)), lambda x, v: tr.sigmoid_uop(x))

__all__ = ["Unary", "cos", "erf", "exp", "expm1", "log1p", "log1p_exp", "sigmoid", "silu", "tan", "tanh"]
