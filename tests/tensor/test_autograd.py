"""The Tensor autograd API (tensor.autograd): backward, .grad, requires_grad, no_grad, detach, Tensor.gradient.

Oracles: gradients derived by hand in numpy (an MLP with softmax cross entropy), central finite differences of
the front end's own graphs evaluated exactly by the reference evaluator (float64, always run), and torch's
autograd where torch is installed. Gradients are realized through the normal pipeline on the cpu device, and a
few through the reference evaluator, so both paths are covered.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rewrite.errors import DTypeError, GradientError, ShapeError
from rewrite.ops import Ops
from tensor import Tensor, function
from tensor.autograd import no_grad
from tensor.tensor import reference_numpy


def rnd(*shape, lo=-1.0, hi=1.0, seed=0, dtype=np.float64) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


# ---------------------------------------------------------------- end to end: an MLP


def _mlp_numpy(x, w1, b1, w2, b2, y):
    """Forward and hand-derived backward of mean softmax cross entropy over relu(x@w1+b1)@w2+b2."""
    h_pre = x @ w1 + b1
    h = np.maximum(h_pre, 0)
    logits = h @ w2 + b2
    z = logits - logits.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    n = x.shape[0]
    onehot = np.eye(w2.shape[1])[y]
    loss = -(logp * onehot).sum() / n
    d_logits = (np.exp(logp) - onehot) / n
    d_w2, d_b2 = h.T @ d_logits, d_logits.sum(0)
    d_h = d_logits @ w2.T * (h_pre > 0)
    d_w1, d_b1 = x.T @ d_h, d_h.sum(0)
    return loss, (d_w1, d_b1, d_w2, d_b2)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 2e-5), (np.float64, 1e-12)])
def test_mlp_cross_entropy_gradients_match_numpy(dtype, tol):
    x, y = rnd(16, 10, seed=1, dtype=dtype), np.random.default_rng(2).integers(0, 4, 16)
    params = [rnd(10, 12, seed=3, dtype=dtype), rnd(12, seed=4, dtype=dtype), rnd(12, 4, seed=5, dtype=dtype),
              rnd(4, seed=6, dtype=dtype)]
    w1, b1, w2, b2 = (Tensor(p, requires_grad=True) for p in params)
    logits = (Tensor(x) @ w1 + b1).relu() @ w2 + b2
    onehot = Tensor(np.eye(4, dtype=dtype)[y])
    loss = -(logits.log_softmax(1) * onehot).sum() / 16
    loss.backward()
    want_loss, want = _mlp_numpy(*(a.astype(np.float64) for a in (x, *params)), y)
    Tensor.realize(loss, *(p.grad for p in (w1, b1, w2, b2)))
    np.testing.assert_allclose(loss.item(), want_loss, rtol=tol)
    for p, w in zip((w1, b1, w2, b2), want, strict=True):
        assert p.grad.shape == p.shape and p.grad.dtype == p.dtype
        np.testing.assert_allclose(p.grad.numpy(), w, rtol=tol, atol=tol)


def test_mlp_gradients_fuse_into_few_kernels():
    x = Tensor(rnd(8, 6, seed=1, dtype=np.float32))
    w1, w2 = Tensor(rnd(6, 5, seed=2, dtype=np.float32), requires_grad=True), \
        Tensor(rnd(5, 3, seed=3, dtype=np.float32), requires_grad=True)
    loss = ((x @ w1).relu() @ w2).softmax(1).sum()
    loss.backward()
    items = loss.schedule(w1.grad, w2.grad)
    # forward + backward of two matmuls and a softmax: a kernel per reduction, not one per op (the max that
    # softmax subtracts is detached, so its tie-splitting gradient, which is zero in total, is not computed)
    assert 0 < len(items) <= 9, len(items)  # measured: 5 forward + 4 backward


# ---------------------------------------------------------------- front-end ops: finite differences (always) and torch


def _fd(f: Callable[[Tensor], Tensor], x: np.ndarray, w: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of sum(f(x) * w), each value by the reference evaluator in float64."""
    def val(a):
        return float(np.sum(reference_numpy(f(Tensor(a))) * w))

    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        up, dn = x.copy(), x.copy()
        up[idx] += eps
        dn[idx] -= eps
        out[idx] = (val(up) - val(dn)) / (2 * eps)
    return out


# name, function, input shape, input range
OPS: list[tuple[str, Callable[[Tensor], Tensor], tuple, tuple]] = [
    ("exp", lambda t: t.exp(), (2, 3), (-1, 1)),
    ("log", lambda t: t.log(), (2, 3), (0.5, 2)),
    ("sin-cos-tan", lambda t: t.sin() + t.cos() * t.tan(), (2, 3), (-1, 1)),
    ("sqrt-rsqrt", lambda t: t.sqrt() + t.rsqrt(), (2, 3), (0.5, 2)),
    ("sigmoid-tanh", lambda t: t.sigmoid() * t.tanh(), (2, 3), (-2, 2)),
    ("erf-elu-relu", lambda t: t.erf() + t.elu(0.7) + t.relu() * 3, (2, 3), (-2, 2)),
    ("gelu-silu-softplus", lambda t: t.gelu() + t.silu() + t.softplus(), (2, 3), (-2, 2)),
    ("pow-div", lambda t: (t ** 2.5) / (t + 3) + 2.0 ** t + t ** t, (2, 3), (0.5, 2)),
    ("abs-clip", lambda t: t.abs() * 2 + t.clip(-0.5, 0.5), (2, 3), (-1, 1)),
    ("minimum-maximum", lambda t: t.maximum(t.flip(1)) + t.minimum(0.1), (2, 3), (-1, 1)),
    ("softmax", lambda t: t.softmax(1), (2, 4), (-2, 2)),
    ("log-softmax", lambda t: t.log_softmax(0), (3, 4), (-2, 2)),
    ("logsumexp", lambda t: t.logsumexp(1, keepdim=True), (3, 4), (-2, 2)),
    ("mean-var-std", lambda t: t.mean(0) + t.var(1, keepdim=True) + t.std(), (3, 4), (-2, 2)),
    ("max-min-keepdim", lambda t: t.max(axis=1, keepdim=True) * t.min(axis=0), (3, 4), (-2, 2)),
    ("prod", lambda t: t.prod(1), (3, 4), (-2, 2)),
    ("broadcast", lambda t: t.reshape(3, 1, 4) * t.reshape(1, 3, 4) + t[:, :1], (3, 4), (-1, 1)),
    ("matmul", lambda t: t @ t.T @ t, (3, 4), (-1, 1)),
    ("movement", lambda t: t.pad(((1, 0), (0, 2))).flip(0).permute(1, 0)[1:4, ::2].reshape(-1), (3, 4), (-1, 1)),
    ("cat-stack-repeat", lambda t: t.cat(t * 2, dim=1).stack(t.cat(t, dim=1)).repeat(1, 2, 1), (2, 3), (-1, 1)),
    ("cumsum", lambda t: t.cumsum(1), (2, 4), (-1, 1)),
    ("where", lambda t: (t > 0).where(t * 3, t * t), (3, 4), (-1, 1)),
    ("gather", lambda t: t.gather(1, Tensor([[0, 2, 2], [1, 0, 3], [3, 3, 1]])), (3, 4), (-1, 1)),
    ("conv2d", lambda t: t.reshape(1, 1, 4, 4).conv2d(t.reshape(1, 1, 4, 4)[:, :, :3, :3], padding=1), (4, 4),
     (-1, 1)),
    ("pools", lambda t: t.reshape(1, 1, 4, 4).max_pool2d(2) + t.reshape(1, 1, 4, 4).avg_pool2d(2), (4, 4), (-1, 1)),
]


@pytest.mark.parametrize("name,f,shape,rng", OPS, ids=[o[0] for o in OPS])
def test_op_gradient_matches_finite_differences(name, f, shape, rng):
    x = rnd(*shape, lo=rng[0], hi=rng[1], seed=7)
    w = rnd(*f(Tensor(x)).shape, seed=8)
    t = Tensor(x, requires_grad=True)
    out = f(t)
    (g,) = out.gradient(t, gradient=Tensor(w))
    got = reference_numpy(g)
    np.testing.assert_allclose(got, _fd(f, x, w), rtol=1e-6, atol=1e-6)
    # and through the compiled pipeline
    np.testing.assert_allclose(g.numpy(), got, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name,f,shape,rng", OPS, ids=[o[0] for o in OPS])
def test_op_gradient_matches_torch(name, f, shape, rng):
    torch = pytest.importorskip("torch")
    torch_f = _TORCH[name]
    x = rnd(*shape, lo=rng[0], hi=rng[1], seed=7)
    w = rnd(*f(Tensor(x)).shape, seed=8)
    t = Tensor(x, requires_grad=True)
    (f(t) * Tensor(w)).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    (torch_f(tx, torch) * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-10)


_TORCH: dict[str, Callable] = {
    "exp": lambda t, T: t.exp(),
    "log": lambda t, T: t.log(),
    "sin-cos-tan": lambda t, T: t.sin() + t.cos() * t.tan(),
    "sqrt-rsqrt": lambda t, T: t.sqrt() + t.rsqrt(),
    "sigmoid-tanh": lambda t, T: t.sigmoid() * t.tanh(),
    "erf-elu-relu": lambda t, T: T.erf(t) + T.nn.functional.elu(t, 0.7) + t.relu() * 3,
    "gelu-silu-softplus": lambda t, T: (T.nn.functional.gelu(t, approximate="tanh") + T.nn.functional.silu(t)
                                        + T.nn.functional.softplus(t)),
    "pow-div": lambda t, T: (t ** 2.5) / (t + 3) + 2.0 ** t + t ** t,
    "abs-clip": lambda t, T: t.abs() * 2 + t.clip(-0.5, 0.5),
    "minimum-maximum": lambda t, T: T.maximum(t, t.flip(1)) + T.minimum(t, T.tensor(0.1, dtype=t.dtype)),
    "softmax": lambda t, T: t.softmax(1),
    "log-softmax": lambda t, T: t.log_softmax(0),
    "logsumexp": lambda t, T: t.logsumexp(1, keepdim=True),
    "mean-var-std": lambda t, T: t.mean(0) + t.var(1, keepdim=True) + t.std(),
    "max-min-keepdim": lambda t, T: t.amax(1, keepdim=True) * t.amin(0),
    "prod": lambda t, T: t.prod(1),
    "broadcast": lambda t, T: t.reshape(3, 1, 4) * t.reshape(1, 3, 4) + t[:, :1],
    "matmul": lambda t, T: t @ t.T @ t,
    "movement": lambda t, T: T.nn.functional.pad(t, (0, 2, 1, 0)).flip(0).permute(1, 0)[1:4, ::2].reshape(-1),
    "cat-stack-repeat": lambda t, T: T.stack([T.cat([t, t * 2], 1), T.cat([t, t], 1)]).repeat(1, 2, 1),
    "cumsum": lambda t, T: t.cumsum(1),
    "where": lambda t, T: T.where(t > 0, t * 3, t * t),
    "gather": lambda t, T: t.gather(1, T.tensor([[0, 2, 2], [1, 0, 3], [3, 3, 1]])),
    "conv2d": lambda t, T: T.nn.functional.conv2d(t.reshape(1, 1, 4, 4), t.reshape(1, 1, 4, 4)[:, :, :3, :3],
                                                  padding=1),
    "pools": lambda t, T: (T.nn.functional.max_pool2d(t.reshape(1, 1, 4, 4), 2)
                           + T.nn.functional.avg_pool2d(t.reshape(1, 1, 4, 4), 2)),
}


def test_every_op_has_a_torch_counterpart():
    assert {o[0] for o in OPS} == set(_TORCH)


# ---------------------------------------------------------------- the accurate functions differentiate as the math

# name, function, its derivative in float64 numpy, the points (the extremes where a naive derivative breaks)
_WIDE = np.array([-100.0, -30.0, -5.0, -1.0, -1e-3, -1e-30, 0.0, 1e-30, 1e-3, 0.5, 1.0, 5.0, 30.0, 80.0])
_SP = lambda x: 1 / (1 + np.exp(-x))
_DSP = lambda x: np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))) ** 2  # s(x) s(-x), no cancellation
UNITS: list[tuple[str, Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray], np.ndarray]] = [
    ("exp", lambda t: t.exp(), np.exp, _WIDE[_WIDE < 80]),
    ("sigmoid", lambda t: t.sigmoid(), _DSP, _WIDE),
    ("tanh", lambda t: t.tanh(), lambda x: 1 / np.cosh(x) ** 2, _WIDE),
    ("silu", lambda t: t.silu(), lambda x: _SP(x) + x * _DSP(x), _WIDE),
    ("softplus", lambda t: t.softplus(), _SP, _WIDE),
    ("elu", lambda t: t.elu(), lambda x: np.where(x > 0, 1.0, np.exp(np.minimum(x, 0))), _WIDE),
    ("erf", lambda t: t.erf(), lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x), _WIDE),
    ("cos", lambda t: t.cos(), lambda x: -np.sin(x), _WIDE),
    ("tan", lambda t: t.tan(), lambda x: 1 / np.cos(x) ** 2, np.array([-1.5, -0.7, 0.0, 1e-20, 0.3, 1.2, 4.0])),
    ("log", lambda t: t.log(), lambda x: 1 / x, np.array([1e-30, 1e-3, 0.5, 1.0, 7.0, 1e30])),
]


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-13), (np.float32, 4e-7)])
@pytest.mark.parametrize("name,f,df,xs", UNITS, ids=[u[0] for u in UNITS])
def test_accurate_function_gradient_is_the_derivative(name, f, df, xs, dtype, tol):
    """The gradient of each accurate function (a unit with its own derivative) is the mathematical derivative,
    finite and accurate also where the function saturates or underflows."""
    t = Tensor(xs.astype(dtype), requires_grad=True)
    f(t).sum().backward()
    got = t.grad.numpy().astype(np.float64)
    want = df(xs.astype(dtype).astype(np.float64))
    assert np.all(np.isfinite(got)), (name, got)
    np.testing.assert_allclose(got, want, rtol=tol, atol=1e-300 if dtype == np.float64 else 1e-37)


def test_accurate_function_forward_kernels_are_unchanged():
    """A unit is inlined: the forward alone is one kernel and never computes the derivative output."""
    x = Tensor(rnd(64, seed=1))
    items = (x.tanh() + x.exp()).schedule()
    assert len(items) == 1
    loss_items = (x.tanh() + x.exp()).sum().schedule()
    assert len(loss_items) == 1


def test_relu_gradient_at_zero_is_zero_like_torch():
    xs = np.array([-2.0, -0.0, 0.0, 1e-300, 3.0, np.nan])
    t = Tensor(xs, requires_grad=True)
    out = t.relu()
    out.sum().backward()
    got = t.grad.numpy()
    np.testing.assert_array_equal(got[:5], [0.0, 0.0, 0.0, 1.0, 1.0])
    np.testing.assert_array_equal(out.numpy()[:5], [0.0, 0.0, 0.0, 1e-300, 3.0])
    assert np.isnan(out.numpy()[5])
    torch = pytest.importorskip("torch")
    tx = torch.tensor(xs[:5], requires_grad=True)
    tx.relu().sum().backward()
    np.testing.assert_array_equal(got[:5], tx.grad.numpy())


# ---------------------------------------------------------------- API behaviour


def test_backward_accumulates_and_grad_is_detached():
    w = Tensor(rnd(3, seed=1), requires_grad=True)
    (w * w).sum().backward()
    (w * 3.0).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy() + 3.0, rtol=1e-12)
    assert w.grad.requires_grad is False


def test_broadcast_and_keepdim_reductions():
    a = Tensor(rnd(3, 1, seed=1), requires_grad=True)
    b = Tensor(rnd(4, seed=2), requires_grad=True)
    out = ((a + b) * (a - b)).sum(0, keepdim=True).mean()  # (a^2 - b^2): sums over the broadcast axes
    out.backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * a.numpy() * 4 / 4, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), -2 * b.numpy() * 3 / 4, rtol=1e-12)


def test_detach_stops_gradient():
    w = Tensor(rnd(3, seed=1), requires_grad=True)
    (w * w.detach()).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), w.numpy(), rtol=1e-12)


def test_no_grad_cuts_and_restores():
    w = Tensor(rnd(3, seed=1), requires_grad=True)
    with no_grad():
        c = w * 2.0
    assert c.uop.op is Ops.DETACH
    d = w * 2.0
    assert d.uop.op is not Ops.DETACH
    (w * c + d).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy() + 2.0, rtol=1e-12)

    @no_grad()
    def step(t):
        return t - 1.0

    assert step(w).uop.op is Ops.DETACH


def test_unused_parameter_gets_no_grad_and_gradient_gives_zeros():
    w, v = Tensor(rnd(3, seed=1), requires_grad=True), Tensor(rnd(2, seed=2), requires_grad=True)
    loss = (w * w).sum()
    loss.backward()
    assert v.grad is None
    gw, gv = loss.gradient(w, v)
    np.testing.assert_allclose(gw.numpy(), 2 * w.numpy(), rtol=1e-12)
    np.testing.assert_array_equal(gv.numpy(), np.zeros(2))


def test_requires_grad_flag_and_errors():
    t = Tensor([1.0, 2.0])
    assert t.requires_grad is False and t.grad is None
    assert t.requires_grad_() is t and t.requires_grad
    t.requires_grad = False
    with pytest.raises(GradientError, match="requires"):
        (t * 2).sum().backward()
    with pytest.raises(DTypeError, match="floating-point"):
        Tensor([1, 2], requires_grad=True)
    w = Tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ShapeError, match="scalar"):
        (w * 2).backward()
    with pytest.raises(DTypeError, match="floating-point"):
        (w > 1).backward()
    (w * 2).backward(gradient=Tensor([1.0, 10.0]))
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 20.0])


def test_function_gradient_through_tensor_api():
    @function
    def f(a, b):
        return (a * b).exp(), a - b

    x, y = Tensor(rnd(2, 3, seed=1), requires_grad=True), Tensor(rnd(2, 3, seed=2), requires_grad=True)
    p, q = f(x, y)
    (p.sum() + (q * q).sum()).backward()
    assert x.grad.uop.toposort()[-1].op is Ops.DETACH
    assert any(u.op is Ops.FUNCTION and u is not p.uop.src[0] for u in x.grad.uop.toposort())
    xn, yn = x.numpy(), y.numpy()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xn * yn) * yn + 2 * (xn - yn), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), np.exp(xn * yn) * xn - 2 * (xn - yn), rtol=1e-12)


def test_function_with_a_unit_inside_differentiates_its_own_params():
    """The unit's body has its own PARAM 0 (here of shape ()): the traced function's PARAM 0 is a's, not that one."""
    @function
    def f(a, b):
        return a * b.sum().exp()

    x, y = Tensor(rnd(3, seed=1), requires_grad=True), Tensor(rnd(2, seed=2), requires_grad=True)
    f(x, y).sum().backward()
    xn, yn = x.numpy(), y.numpy()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, np.exp(yn.sum())), rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), np.full(2, xn.sum() * np.exp(yn.sum())), rtol=1e-12)


def test_lazy_parameter():
    w = Tensor.rand(4, 3).requires_grad_()
    loss = (w * w).sum()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-6)


def test_contiguous_backward_marks_the_gradient():
    w = Tensor(rnd(3, 4, seed=1), requires_grad=True)
    y = w.contiguous_backward().permute(1, 0)
    (y * Tensor(rnd(4, 3, seed=2))).sum().backward()
    np.testing.assert_array_equal(y.numpy(), w.numpy().T)
    assert any(u.op is Ops.CONTIGUOUS for u in w.grad.uop.toposort())
    np.testing.assert_allclose(w.grad.numpy(), rnd(4, 3, seed=2).T, rtol=1e-12)


def test_half_precision_broadcast_gradient_sums_in_float32():
    b = Tensor(np.zeros(1, np.float16), requires_grad=True)
    x = Tensor(np.full(4096, 0.1, np.float16))
    (x + b).sum().backward()  # the bias gradient: 4096 ones, exact in float32 (float16 would stop at 2048)
    assert b.grad.dtype == b.dtype
    assert b.grad.numpy()[0] == 4096


def test_constructors_take_requires_grad():
    w = Tensor.randn(3, 2, requires_grad=True)
    z = Tensor.zeros(2, requires_grad=True)
    o = Tensor.ones_like(z, requires_grad=True)
    assert w.requires_grad and z.requires_grad and o.requires_grad and not Tensor.ones(2).requires_grad
    ((Tensor([[1.0, 2.0, 3.0]]) @ w) * z + o).sum().backward()
    # float32 sums of three products a few units large: their rounding is absolute (~1e-6), so a sum that nearly
    # cancels (randn drew 0.008 once) is off by more than rtol 1e-6 of itself
    np.testing.assert_allclose(z.grad.numpy(), (np.array([[1.0, 2.0, 3.0]]) @ w.numpy())[0], rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(o.grad.numpy(), np.ones(2))
    np.testing.assert_allclose(w.grad.numpy(), np.zeros((3, 2)))  # z is zero


def test_sgd_steps_follow_numpy():
    """Five plain SGD steps on the MLP (parameters rebound to the realized update: there is no in-place assign
    yet) land on the same weights as the same steps with the hand-derived numpy gradients, and the loss falls."""
    x, y = rnd(32, 10, seed=1), np.random.default_rng(2).integers(0, 4, 32)
    params = [rnd(10, 12, seed=3), rnd(12, seed=4), rnd(12, 4, seed=5), rnd(4, seed=6)]
    ref = [p.copy() for p in params]
    ts = [Tensor(p, requires_grad=True) for p in params]
    onehot, xt = Tensor(np.eye(4)[y]), Tensor(x)
    losses = []
    for _ in range(5):
        w1, b1, w2, b2 = ts
        loss = -((((xt @ w1 + b1).relu() @ w2 + b2).log_softmax(1)) * onehot).sum() / 32
        loss.backward()
        with no_grad():
            new = [p - 0.5 * p.grad for p in ts]
        Tensor.realize(loss, *new)
        losses.append(loss.item())
        ts = [Tensor(n.numpy(), requires_grad=True) for n in new]
        want_loss, grads = _mlp_numpy(x, *ref, y)
        np.testing.assert_allclose(losses[-1], want_loss, rtol=1e-12)
        ref = [p - 0.5 * g for p, g in zip(ref, grads, strict=True)]
    for t, r in zip(ts, ref, strict=True):
        np.testing.assert_allclose(t.numpy(), r, rtol=1e-10, atol=1e-12)
    assert losses[-1] < 0.8 * losses[0], losses
