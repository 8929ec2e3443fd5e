"""tensor.losses: each loss and reduction against its numpy formula with central-difference gradients (CI, no
torch), and against torch.nn.functional (values and gradients) where torch is installed."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import ArgumentError, DTypeError, ShapeError
from tensor import Tensor
from tensor import losses as L
from tests.tensor import nn_reference as ref
from tests.tensor.test_modules import rnd

REDUCTIONS = ["mean", "sum", "none"]


def _reduce(v: np.ndarray, reduction: str) -> np.ndarray:
    return v.mean() if reduction == "mean" else v.sum() if reduction == "sum" else v


def _ours(fn, x: np.ndarray, *args, **kw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Value and the gradient of sum(loss * w) with respect to the input (w random, matching the loss's shape)."""
    xt = Tensor(x, requires_grad=True)
    out = fn(xt, *args, **kw)
    w = rnd(*out.shape, seed=21)
    (out * Tensor(w)).sum().backward()
    return out.numpy(), xt.grad.numpy(), w


def _torch_same(tfn, x: np.ndarray, args: tuple, kw: dict, out: np.ndarray, grad: np.ndarray, w: np.ndarray,
                torch) -> None:
    xt = torch.tensor(x, requires_grad=True)
    targs = tuple(torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args)
    tkw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    tout = tfn(xt, *targs, **tkw)
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad, xt.grad.numpy(), rtol=1e-9, atol=1e-12)


POINTWISE = {
    "mse_loss": (lambda d, **kw: d * d, {}),
    "l1_loss": (lambda d, **kw: np.abs(d), {}),
    "smooth_l1_loss": (lambda d, beta: np.where(np.abs(d) < beta, 0.5 * d * d / beta, np.abs(d) - 0.5 * beta),
                       {"beta": 0.5}),
    "huber_loss": (lambda d, delta: np.where(np.abs(d) <= delta, 0.5 * d * d, delta * (np.abs(d) - 0.5 * delta)),
                   {"delta": 0.7}),
}


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise_losses(name: str, reduction: str) -> None:
    formula, kw = POINTWISE[name]
    x, t = rnd(4, 5, seed=1) * 2, rnd(4, 5, seed=2)
    out, g, w = _ours(getattr(L, name), x, Tensor(t), reduction=reduction, **kw)

    def f(a: np.ndarray) -> np.ndarray:
        return _reduce(formula(a - t, **kw), reduction)

    np.testing.assert_allclose(out, f(x), rtol=1e-12)
    np.testing.assert_allclose(g, ref.fd_grad(lambda a: (f(a) * w).sum(), x), rtol=1e-6, atol=1e-8)
    torch = pytest.importorskip("torch")
    _torch_same(getattr(torch.nn.functional, name), x, (t,), {"reduction": reduction, **kw}, out, g, w, torch)


def _bce_np(p: np.ndarray, t: np.ndarray, weight: np.ndarray | None) -> np.ndarray:
    v = -(t * np.maximum(np.log(p), -100) + (1 - t) * np.maximum(np.log1p(-p), -100))
    return v if weight is None else v * weight


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction: str, weighted: bool) -> None:
    p = 1 / (1 + np.exp(-rnd(3, 4, seed=3) * 3))
    t = (rnd(3, 4, seed=4) > 0).astype(np.float64)
    t[0, 0] = 0.3  # soft targets are allowed
    weight = np.abs(rnd(4, seed=5)) if weighted else None
    out, g, w = _ours(L.binary_cross_entropy, p, Tensor(t), None if weight is None else Tensor(weight),
                      reduction=reduction)

    def f(a: np.ndarray) -> np.ndarray:
        return _reduce(_bce_np(a, t, weight), reduction)

    np.testing.assert_allclose(out, f(p), rtol=1e-12)
    np.testing.assert_allclose(g, ref.fd_grad(lambda a: (f(a) * w).sum(), p), rtol=1e-6, atol=1e-8)
    torch = pytest.importorskip("torch")
    _torch_same(torch.nn.functional.binary_cross_entropy, p, (t, weight), {"reduction": reduction}, out, g, w, torch)


_OUTSIDE = np.array([0.2, 1.5, -0.25, np.nan, 0.0, 1.0], np.float32)  # three offend: above, below, NaN


def test_binary_cross_entropy_input_outside_unit_interval_raises() -> None:
    """torch raises at run time for an input outside [0, 1] or NaN; ours: at the call for realized data, at the
    realize for a lazy input (the loss's or only its gradient's), and at every jit replay."""
    t = Tensor(np.ones(6, np.float32))
    with pytest.raises(ArgumentError, match=r"binary_cross_entropy: 3 of the 6 input elements lie outside \[0, 1\]"):
        L.binary_cross_entropy(Tensor(_OUTSIDE), t)
    x = Tensor(_OUTSIDE, requires_grad=True)
    loss = L.binary_cross_entropy(x * 1.0, t)  # lazy: nothing is computed yet
    with pytest.raises(ArgumentError, match="3 of the 6"):
        loss.item()
    L.binary_cross_entropy(x * 1.0, t, reduction="none").sum().backward()
    with pytest.raises(ArgumentError, match="3 of the 6"):
        x.grad.realize()  # the gradient alone carries the check
    ok = np.array([0.2, 0.0, 1.0, 0.5, 0.75, 1e-8], np.float32)
    np.testing.assert_allclose(L.binary_cross_entropy(Tensor(ok) * 1.0, t).item(),
                               _bce_np(ok.astype(np.float64), np.ones(6), None).mean(), rtol=1e-5)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match="between 0 and 1"):  # the oracle: torch raises for the same input
        torch.nn.functional.binary_cross_entropy(torch.tensor(_OUTSIDE), torch.ones(6))


def test_binary_cross_entropy_range_check_under_jit() -> None:
    from tensor.jit import jit

    t = Tensor(np.ones(6, np.float32))
    step = jit(lambda x: L.binary_cross_entropy(x * 1.0, t))
    ok = np.array([0.2, 0.0, 1.0, 0.5, 0.75, 0.1], np.float32)
    for k in range(3):  # two captured calls, then a replay
        want = _bce_np((ok * (k + 1) / 3).astype(np.float64), np.ones(6), None).mean()
        np.testing.assert_allclose(step(Tensor(ok * (k + 1) / 3)).item(), want, rtol=1e-5)
    with pytest.raises(ArgumentError, match="3 of the 6"):
        step(Tensor(_OUTSIDE))


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pos", [False, True])
def test_binary_cross_entropy_with_logits(reduction: str, pos: bool) -> None:
    x = rnd(3, 4, seed=6) * 5
    t = (rnd(3, 4, seed=7) > 0).astype(np.float64)
    weight, pos_weight = np.abs(rnd(3, 1, seed=8)), (np.abs(rnd(4, seed=9)) * 3 if pos else None)
    out, g, w = _ours(L.binary_cross_entropy_with_logits, x, Tensor(t), Tensor(weight), reduction=reduction,
                      pos_weight=None if pos_weight is None else Tensor(pos_weight))

    def f(a: np.ndarray) -> np.ndarray:
        p = 1 / (1 + np.exp(-a))
        pw = 1.0 if pos_weight is None else pos_weight
        return _reduce(-(pw * t * np.log(p) + (1 - t) * np.log1p(-p)) * weight, reduction)

    np.testing.assert_allclose(out, f(x), rtol=1e-10)
    np.testing.assert_allclose(g, ref.fd_grad(lambda a: (f(a) * w).sum(), x), rtol=1e-6, atol=1e-8)
    torch = pytest.importorskip("torch")
    _torch_same(torch.nn.functional.binary_cross_entropy_with_logits, x, (t, weight),
                {"reduction": reduction, "pos_weight": pos_weight}, out, g, w, torch)


def test_binary_cross_entropy_with_logits_is_stable_for_large_logits() -> None:
    x = np.array([-200.0, -30.0, 0.0, 30.0, 200.0], np.float32)
    t = np.array([1.0, 0.0, 1.0, 1.0, 0.0], np.float32)
    xt = Tensor(x, requires_grad=True)
    loss = L.binary_cross_entropy_with_logits(xt, Tensor(t), reduction="none")
    loss.sum().backward()
    want = np.maximum(x, 0) - x * t + np.log1p(np.exp(-np.abs(x.astype(np.float64))))
    np.testing.assert_allclose(loss.numpy(), want, rtol=1e-6)
    np.testing.assert_allclose(xt.grad.numpy(), 1 / (1 + np.exp(-x.astype(np.float64))) - t, atol=1e-6)


def _nll_np(logp: np.ndarray, target: np.ndarray, weight: np.ndarray | None, ignore: int, reduction: str,
            smoothing: float = 0.0) -> np.ndarray:
    """(N, C, ...) log-probabilities, (N, ...) targets, torch's weighting and mean."""
    c = logp.shape[1]
    lp = np.moveaxis(logp, 1, -1)  # (N, ..., C)
    wc = np.ones(c) if weight is None else weight
    keep = target != ignore
    tt = np.where(keep, target, 0)
    picked = np.take_along_axis(lp, tt[..., None], -1)[..., 0]
    loss = -(1 - smoothing) * picked * wc[tt] - smoothing / c * (lp * wc).sum(-1)
    loss = np.where(keep, loss, 0.0)
    if reduction == "mean":
        return loss.sum() / np.where(keep, wc[tt], 0.0).sum()
    return loss.sum() if reduction == "sum" else loss


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 2, 2)])
def test_nll_loss_and_cross_entropy(reduction: str, weighted: bool, shape: tuple) -> None:
    x = rnd(*shape, seed=10) * 2
    tshape = (shape[0], *shape[2:])
    target = np.random.default_rng(11).integers(0, 4, tshape)
    target.reshape(-1)[::3] = 2  # class 2 is ignored below
    weight = np.abs(rnd(4, seed=12)) + 0.1 if weighted else None
    wt = None if weight is None else Tensor(weight)

    def logp(a: np.ndarray) -> np.ndarray:
        z = a - a.max(1, keepdims=True)
        return z - np.log(np.exp(z).sum(1, keepdims=True))

    out, g, w = _ours(L.nll_loss, x, Tensor(target), wt, ignore_index=2, reduction=reduction)
    np.testing.assert_allclose(out, _nll_np(x, target, weight, 2, reduction), rtol=1e-12)
    np.testing.assert_allclose(g, ref.fd_grad(lambda a: (_nll_np(a, target, weight, 2, reduction) * w).sum(), x),
                               rtol=1e-6, atol=1e-8)
    ce, gce, wce = _ours(L.cross_entropy, x, Tensor(target), wt, ignore_index=2, reduction=reduction,
                         label_smoothing=0.1)

    def f(a: np.ndarray) -> np.ndarray:
        return _nll_np(logp(a), target, weight, 2, reduction, 0.1)

    np.testing.assert_allclose(ce, f(x), rtol=1e-12)
    np.testing.assert_allclose(gce, ref.fd_grad(lambda a: (f(a) * wce).sum(), x), rtol=1e-6, atol=1e-8)
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    _torch_same(F.nll_loss, x, (target, weight), {"ignore_index": 2, "reduction": reduction}, out, g, w, torch)
    _torch_same(F.cross_entropy, x, (target, weight),
                {"ignore_index": 2, "reduction": reduction, "label_smoothing": 0.1}, ce, gce, wce, torch)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_with_probabilities_and_unbatched(reduction: str) -> None:
    x = rnd(5, 3, seed=13) * 2
    probs = np.abs(rnd(5, 3, seed=14))
    probs /= probs.sum(1, keepdims=True)
    weight = np.array([0.5, 1.0, 2.0])
    out, g, w = _ours(L.cross_entropy, x, Tensor(probs), Tensor(weight), reduction=reduction, label_smoothing=0.2)

    def f(a: np.ndarray) -> np.ndarray:
        lp = a - np.log(np.exp(a).sum(1, keepdims=True))
        q = probs * 0.8 + 0.2 / 3
        return _reduce(-(lp * q * weight).sum(1), reduction)

    np.testing.assert_allclose(out, f(x), rtol=1e-12)
    np.testing.assert_allclose(g, ref.fd_grad(lambda a: (f(a) * w).sum(), x), rtol=1e-6, atol=1e-8)
    one = L.cross_entropy(Tensor(x[0]), Tensor(np.array(2)), reduction=reduction)
    lp0 = x[0] - np.log(np.exp(x[0]).sum())
    assert one.shape == ()
    np.testing.assert_allclose(one.numpy(), -lp0[2], rtol=1e-12)
    torch = pytest.importorskip("torch")
    _torch_same(torch.nn.functional.cross_entropy, x, (probs, weight),
                {"reduction": reduction, "label_smoothing": 0.2}, out, g, w, torch)


def test_all_ignored_mean_is_nan_as_torch() -> None:
    out = L.nll_loss(Tensor(rnd(3, 4)), Tensor(np.full(3, -100)))
    assert np.isnan(out.item())


def test_loss_errors() -> None:
    x = Tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(ArgumentError, match="reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        L.mse_loss(x, x, reduction="avg")
    with pytest.raises(ShapeError, match=r"mse_loss: input \(3, 4\) and target \(2, 4\) do not broadcast"):
        L.mse_loss(x, Tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(DTypeError, match="nll_loss: target must hold integer class indices"):
        L.nll_loss(x, Tensor(np.zeros(3, np.float32)))
    with pytest.raises(ShapeError, match=r"nll_loss: input \(3, 4\) and target \(4,\).*must be \(3,\)"):
        L.nll_loss(x, Tensor(np.zeros(4, np.int32)))
    with pytest.raises(ShapeError, match=r"weight must have one entry per class, shape \(4,\)"):
        L.cross_entropy(x, Tensor(np.zeros(3, np.int32)), weight=Tensor(np.ones(3, np.float32)))
    with pytest.raises(DTypeError, match="must be floating-point"):
        L.l1_loss(Tensor(np.zeros(3, np.int32)), Tensor(np.zeros(3, np.int32)))
    with pytest.raises(ShapeError, match="pos_weight"):
        L.binary_cross_entropy_with_logits(x, x, pos_weight=Tensor(np.ones(3, np.float32)))
