"""conv2d's gradients as an operation (tensor.conv._conv_vjp, a rules.gradients.VjpUnit): the input's gradient a
transposed convolution, the weight's one matmul per group of the incoming gradient against the input's windows.
Checked against numpy's loop definition with central differences (float64), over strides, dilations, groups,
paddings that differ per side, windows that leave an input tail unread, and one to three spatial axes; a second
derivative through the VJP; 16-bit floats; and that the forward still fuses into one kernel."""

from __future__ import annotations

import numpy as np
import pytest

from lower import schedule
from rules.gradients import VjpUnit
from tensor import Tensor
from tensor.autograd import gradient
from tensor.nn import conv2d
from tests.tensor import nn_reference as ref
from tests.tensor.test_modules import rnd

CASES = [  # cin, cout, kernel, stride, padding (per axis: int or (before, after)), dilation, groups, spatial
    (3, 4, (3, 3), (1, 1), (1, 1), (1, 1), 1, (5, 6)),
    (4, 6, (3, 2), (2, 1), (0, 1), (1, 2), 2, (7, 6)),  # stride 2 over 7: the last input row is read by no window
    (2, 4, (3, 3), (2, 3), ((2, 0), (1, 3)), (1, 1), 1, (6, 7)),  # paddings that differ per side
    (6, 6, (2, 2), (1, 1), (0, 0), (2, 1), 3, (5, 4)),  # groups 3, dilation 2
    (3, 2, (5,), (3,), (2,), (1,), 1, (11,)),  # one spatial axis
    (2, 2, (2, 2, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), 2, (3, 4, 4)),  # three
    # 4+ output channels per group: the weight's gradient a matmul per group (fewer: the windowed reduction)
    (4, 8, (3, 3), (1, 2), ((1, 2), (1, 1)), (1, 1), 2, (5, 6)),
    (2, 5, (3,), (1,), (1,), (2,), 1, (7,)),
]


def _reference(x: np.ndarray, w: np.ndarray, s: tuple, pads: list, d: tuple, g: int) -> np.ndarray:
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    return ref.conv_nd(xp, w, None, s, (0,) * len(s), d, g)


def _pairs(p: tuple) -> list:
    return [v if isinstance(v, tuple) else (v, v) for v in p]


@pytest.mark.parametrize("case", CASES)
def test_conv_gradients_match_the_definition(case) -> None:
    cin, cout, ks, s, p, d, g, sp = case
    pads = _pairs(p)
    x, w = rnd(2, cin, *sp, seed=1), rnd(cout, cin // g, *ks, seed=2)
    xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    out = conv2d(xt, wt, None, s, pads, d, g)
    want = _reference(x, w, s, pads, d, g)
    assert out.shape == want.shape
    weights = rnd(*want.shape, seed=3)
    (out * Tensor(weights)).sum().backward()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    loss = lambda a, b: (_reference(a, b, s, pads, d, g) * weights).sum()
    np.testing.assert_allclose(xt.grad.numpy(), ref.fd_grad(lambda a: loss(a, w), x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(wt.grad.numpy(), ref.fd_grad(lambda b: loss(x, b), w), rtol=1e-6, atol=1e-7)
    assert xt.grad.dtype == xt.dtype and wt.grad.dtype == wt.dtype


def test_conv_is_a_vjp_unit_whose_forward_stays_one_kernel() -> None:
    x, w = Tensor(rnd(2, 8, 6, 6, seed=1).astype(np.float32)), Tensor(rnd(8, 8, 3, 3, seed=2).astype(np.float32))
    out = conv2d(x, w, padding=1).relu()
    units = [u for u in out.uop.toposort() if isinstance(u.arg, VjpUnit)]
    assert [u.arg.name for u in units] == ["conv"]
    kernels = [it for it in schedule([out.uop])[0] if it.kind == "kernel"]
    assert len(kernels) <= 2  # the product with its ReLU (and, where it pays, the weight's channels-last copy)
    ints = conv2d(Tensor(np.ones((1, 1, 3, 3), np.int32)), Tensor(np.ones((1, 1, 2, 2), np.int32)))
    assert not any(isinstance(u.arg, VjpUnit) for u in ints.uop.toposort())  # no gradient: the plain product
    np.testing.assert_array_equal(ints.numpy(), np.full((1, 1, 2, 2), 4))


def test_conv_backward_from_a_plain_sum_and_of_the_weight_only() -> None:
    """The loss's own gradient (a constant, no device of its own) flows into the VJP; an input that needs no
    gradient gets none."""
    x = Tensor(np.ones((1, 2, 4, 4), np.float32))
    w = Tensor(np.ones((3, 2, 3, 3), np.float32), requires_grad=True)
    conv2d(x, w, padding=1).sum().backward()
    assert x.grad is None and w.grad is not None
    # tap (i, j) of a 3x3 kernel over a 4x4 input padded by 1 meets 3 or 4 positions per axis: 9, 12 or 16 ones
    per_axis = np.array([3, 4, 3])
    np.testing.assert_array_equal(w.grad.numpy(), np.broadcast_to(np.outer(per_axis, per_axis), (3, 2, 3, 3)))


def test_second_derivative_through_the_vjp() -> None:
    """d/dw of |dL/dx|^2 for L = sum(conv(x, w) * c): dL/dx (the transposed conv of c by w) is itself
    differentiated, against central differences of numpy's transposed convolution."""
    s, p, d, g = (2, 1), (1, 0), (1, 1), 1
    x, w = rnd(2, 2, 5, 4, seed=4), rnd(3, 2, 3, 2, seed=5)
    xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    out = conv2d(xt, wt, None, s, p, d, g)
    c = rnd(*out.shape, seed=6)
    (gx,) = gradient((out * Tensor(c)).sum(), xt)
    (gw,) = gradient((gx * gx).sum(), wt)
    tails = tuple((n + 2 * pp - dd * (k - 1) - 1) % ss
                  for n, pp, dd, k, ss in zip((5, 4), p, d, (3, 2), s, strict=True))

    def dx(b: np.ndarray) -> np.ndarray:
        return ref.conv_transpose_nd(c, b, None, s, p, tails, d, g)

    np.testing.assert_allclose(gx.numpy(), dx(w), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw.numpy(), ref.fd_grad(lambda b: (dx(b) ** 2).sum(), w), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_conv_gradients_of_16_bit_floats(dt: str) -> None:
    """Gradients in the 16-bit dtype, against the float32 gradients of the same (rounded) inputs, which the tests
    above check against the definition."""
    x, w = rnd(2, 4, 6, 6, seed=7), rnd(8, 4, 3, 3, seed=8)
    xh, wh = Tensor(x.astype(np.float32)).cast(dt).realize(), Tensor(w.astype(np.float32)).cast(dt).realize()
    xh.requires_grad, wh.requires_grad = True, True
    conv2d(xh, wh, padding=1, stride=2).sum().backward()
    assert xh.grad.dtype.name == dt and wh.grad.dtype.name == dt
    x32, w32 = Tensor(xh.cast("float32").numpy(), requires_grad=True), Tensor(wh.cast("float32").numpy(),
                                                                            requires_grad=True)
    conv2d(x32, w32, padding=1, stride=2).sum().backward()
    np.testing.assert_allclose(xh.grad.cast("float32").numpy(), x32.grad.numpy(), rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(wh.grad.cast("float32").numpy(), w32.grad.numpy(), rtol=2e-2, atol=5e-2)


def test_conv_inside_a_function_differentiates_the_same() -> None:
    """A conv's VJP unit inside a @function body (PARAMs of both scopes): the same value and gradients."""
    from tensor import function

    x, w = rnd(2, 3, 6, 6, seed=9), rnd(4, 3, 3, 3, seed=10)

    @function
    def f(a: Tensor, b: Tensor) -> Tensor:
        return conv2d(a, b, padding=1).relu()

    got = []
    for fn in (f, lambda a, b: conv2d(a, b, padding=1).relu()):
        xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
        y = fn(xt, wt)
        (y * y).sum().backward()
        got.append((y.numpy(), xt.grad.numpy(), wt.grad.numpy()))
    for a, b in zip(*got, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    loss = lambda b: (np.maximum(_reference(x, b, (1, 1), [(1, 1), (1, 1)], (1, 1), 1), 0) ** 2).sum()
    np.testing.assert_allclose(got[0][2], ref.fd_grad(loss, w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[6]])
def test_conv_weight_gradient_summed_over_batch_chunks(case, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU target the weight gradient is a product per chunk of the batch, summed after (tensor.nn.
    _batch_chunks); forced here on the cpu, a chunk per sample: the same gradients as the definition's, for a
    grouped reduction, a matmul and a grouped matmul."""
    import tensor.conv as conv_mod

    monkeypatch.setattr(conv_mod, "_batch_chunks", lambda dev, n, positions: n)
    cin, cout, ks, s, p, d, g, sp = case
    pads = _pairs(p)
    x, w = rnd(4, cin, *sp, seed=12), rnd(cout, cin // g, *ks, seed=13)
    wt = Tensor(w, requires_grad=True)
    out = conv2d(Tensor(x), wt, None, s, pads, d, g)
    weights = rnd(*out.shape, seed=14)
    (out * Tensor(weights)).sum().backward()
    loss = lambda b: (_reference(x, b, s, pads, d, g) * weights).sum()
    np.testing.assert_allclose(wt.grad.numpy(), ref.fd_grad(loss, w), rtol=1e-6, atol=1e-7)


def test_conv_weight_gradient_of_a_large_padded_input() -> None:
    """A window copy of over 1M elements reads x padded once and contiguous (no gate in the copy): the weight
    gradient against numpy's einsum of g and the padded input's windows."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    c = rng.standard_normal((8, 16, 32, 32)).astype(np.float32)
    wt = Tensor(w, requires_grad=True)
    (conv2d(Tensor(x), wt, padding=1) * Tensor(c)).sum().backward()
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.stack([np.stack([np.einsum("nohw,nchw->oc", c.astype(np.float64), xp[:, :, i:i + 32, j:j + 32])
                               for j in range(3)], -1) for i in range(3)], -2)
    np.testing.assert_allclose(wt.grad.numpy(), want, rtol=1e-4, atol=1e-3)


def test_input_gradient_of_a_conv_with_few_input_channels_reduces_in_lanes() -> None:
    """A stem-like conv (3 input channels, 7x7, stride 2): x's gradient is the transposed conv of g (stored
    channels-last) by w, reducing over g's 32 channels. Its 3 output channels fill no vector, so w is copied with
    those channels innermost too (tensor.conv._conv_vjp), and each phase kernel's reduction goes into lanes rather
    than scalar partial sums gathering w 147 floats apart. The gradient against the definition's."""
    from devices import get_device
    from lower.optimize import OptOps, hand_coded
    from lower.stages import _symbolic
    from rewrite import AxisType
    from rewrite.ops import Ops

    x, w, c = rnd(2, 3, 16, 16, seed=16), rnd(32, 3, 7, 7, seed=17), rnd(2, 32, 8, 8, seed=18)
    xt = Tensor(x, requires_grad=True)
    (conv2d(xt, Tensor(w), None, 2, 3) * Tensor(c)).sum().backward()
    target = get_device("cpu").default_target()
    if target.vector_bytes:
        reducing = [it for it in schedule([xt.grad.uop])[0] if it.kind == "kernel"
                    and any(u.op is Ops.REDUCE for u in it.ast.toposort())]
        assert len(reducing) == 4  # the 2 x 2 stride phases
        for it in reducing:
            opts = hand_coded(_symbolic(it.ast, target), target, threads=1)
            assert not any(o.op is OptOps.PARTIALS for o in opts), (it.name, opts)
            assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UNROLL and o.arg[0] >= 4  # type: ignore[index]
                       for o in opts), (it.name, opts)
    want = np.zeros((2, 3, 22, 22))  # dx_padded[n, i, 2 h + a, 2 v + b] += sum over o of c[n, o, h, v] w[o, i, a, b]
    for a in range(7):
        for b in range(7):
            want[:, :, a:a + 16:2, b:b + 16:2] += np.einsum("nohv,oi->nihv", c, w[:, :, a, b])
    np.testing.assert_allclose(xt.grad.numpy(), want[:, :, 3:19, 3:19], rtol=1e-5, atol=1e-5)
