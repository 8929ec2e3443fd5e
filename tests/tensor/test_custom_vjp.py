"""@custom_vjp (tensor.function): a function whose gradient is a given backward instead of its traced body's.
Checked: a straight-through estimator and a clipped gradient (values the body's own gradient would not give),
static keyword arguments, several inputs with a None gradient, a captured global tensor, second derivatives
through the backward's graph, torch.autograd.Function's result for the same definition, tensor.jit replay, and
the errors (wrong count, wrong shape, a non-Tensor positional argument, unhashable statics)."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import GradientError
from tensor import Tensor, custom_vjp
from tensor.jit import jit


def _ste_bwd(g: Tensor, x: Tensor) -> Tensor:
    return g


@custom_vjp(_ste_bwd)
def straight_through_round(x: Tensor) -> Tensor:
    return x.round()


def _clip_bwd(g: Tensor, x: Tensor, *, bound: float) -> Tensor:
    return g.clip(-bound, bound)


@custom_vjp(_clip_bwd)
def clip_grad(x: Tensor, *, bound: float) -> Tensor:
    return x * 1.0


def test_straight_through_estimator_passes_the_gradient_round_drops() -> None:
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((3, 4)) * 3, rng.standard_normal((3, 4))
    x = Tensor(xv, requires_grad=True)
    y = straight_through_round(x)
    (y * Tensor(wv)).sum().backward()
    np.testing.assert_array_equal(y.numpy(), np.round(xv))
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), wv)  # round's own gradient would be 0


def test_static_keywords_reach_the_backward() -> None:
    gv = np.array([[-3.0, -0.5, 0.25, 2.0]])
    x = Tensor(np.ones((1, 4)), requires_grad=True)
    clip_grad(x, bound=1.0).backward(gradient=Tensor(gv))
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), np.clip(gv, -1.0, 1.0))
    x.grad = None
    clip_grad(x, bound=0.3).backward(gradient=Tensor(gv))
    np.testing.assert_allclose(x.grad.numpy(), np.clip(gv, -0.3, 0.3))


def _scaled_bwd(g: Tensor, a: Tensor, b: Tensor) -> tuple[Tensor, None]:
    return g * b * 10.0, None  # deliberately not the body's a * b derivative, and none for b


@custom_vjp(_scaled_bwd)
def product(a: Tensor, b: Tensor) -> Tensor:
    return a * b


def test_several_inputs_and_a_none_gradient() -> None:
    rng = np.random.default_rng(1)
    av, bv = rng.standard_normal(5), rng.standard_normal(5)
    a, b = Tensor(av, requires_grad=True), Tensor(bv, requires_grad=True)
    out = product(a, b) + b  # b's gradient comes only from the + b
    out.sum().backward()
    np.testing.assert_allclose(out.numpy(), av * bv + bv)
    assert a.grad is not None and b.grad is not None
    np.testing.assert_allclose(a.grad.numpy(), 10.0 * bv)
    np.testing.assert_allclose(b.grad.numpy(), np.ones(5))


SCALE = Tensor(np.array([1.0, 2.0, 3.0]))


def _captured_bwd(g: Tensor, x: Tensor) -> Tensor:
    return g * SCALE


@custom_vjp(_captured_bwd)
def times_scale(x: Tensor) -> Tensor:
    return x * SCALE  # SCALE is a global: one more argument of the FUNCTION, with no gradient


def test_a_captured_global_is_an_argument() -> None:
    x = Tensor(np.array([1.0, 1.0, 1.0]), requires_grad=True)
    y = times_scale(x)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [1.0, 2.0, 3.0])
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 2.0, 3.0])


def _cube_bwd(g: Tensor, x: Tensor) -> Tensor:
    return g * x * x * 3.0


@custom_vjp(_cube_bwd)
def cube(x: Tensor) -> Tensor:
    return x * x * x


def test_second_derivatives_go_through_the_backward() -> None:
    x = Tensor(np.array([0.5, -2.0, 3.0]), requires_grad=True)
    (d1,) = cube(x).sum().gradient(x)
    (d2,) = d1.sum().gradient(x)
    np.testing.assert_allclose(d1.numpy(), 3 * np.array([0.5, -2.0, 3.0]) ** 2)
    np.testing.assert_allclose(d2.numpy(), 6 * np.array([0.5, -2.0, 3.0]))


def _softplus_bwd(g: Tensor, x: Tensor) -> Tensor:
    return g * x.sigmoid()


@custom_vjp(_softplus_bwd)
def softplus(x: Tensor) -> Tensor:
    return (x.exp() + 1.0).log()


def test_matches_torch_autograd_function() -> None:
    torch = pytest.importorskip("torch")

    class TorchSoftplus(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # type: ignore[no-untyped-def, override]
            ctx.save_for_backward(x)
            return torch.log(torch.exp(x) + 1.0)

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def, override]
            (x,) = ctx.saved_tensors
            return g * torch.sigmoid(x)

    rng = np.random.default_rng(2)
    xv, wv = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    x = Tensor(xv, requires_grad=True)
    (softplus(x) * Tensor(wv)).sum().backward()
    tx = torch.tensor(xv, requires_grad=True)
    (TorchSoftplus.apply(tx) * torch.tensor(wv)).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_a_jit_step_replays_it() -> None:
    w = Tensor(np.array([0.2, -1.7, 2.6]), requires_grad=True)

    def step() -> Tensor:
        w.grad = None
        loss = (straight_through_round(w) * Tensor(np.array([1.0, 2.0, 3.0]))).sum()
        loss.backward()
        assert w.grad is not None
        return w.grad.realize()

    run = jit(step)
    got = [run().numpy() for _ in range(4)]
    for g in got:
        np.testing.assert_allclose(g, [1.0, 2.0, 3.0])


def _wrong_count(g: Tensor, a: Tensor, b: Tensor) -> Tensor:
    return g


def _wrong_shape(g: Tensor, x: Tensor) -> Tensor:
    return g.sum()


def test_errors_name_the_function_and_the_fix() -> None:
    bad_count = custom_vjp(_wrong_count)(lambda a, b: a + b)
    a, b = Tensor(np.ones(3), requires_grad=True), Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(GradientError, match="gave 1 gradient\\(s\\) for 2 Tensor argument"):
        bad_count(a, b).sum().backward()
    bad_shape = custom_vjp(_wrong_shape)(lambda x: x * 2.0)
    with pytest.raises(GradientError, match="must be a Tensor of its argument's shape"):
        bad_shape(a).sum().backward()
    with pytest.raises(TypeError, match="positional argument 1 is a float"):
        product(a, 2.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be hashable"):
        clip_grad(a, bound=[1.0])  # type: ignore[arg-type]
