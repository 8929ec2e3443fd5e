"""Register tiles for the kernels of a convolution's gradients (lower.opt_tiles), where the plain vector tile
fits badly: a weight gradient written as its reduction over windows (what a conv's backward was before conv2d
became a VJP unit, whose weight gradient is a matmul; a hand-written weight update makes it still) whose only
vector axis is the 3 kernel taps (3 of 8 AVX2 lanes once padded) gets a
product tile over its output and input channels instead (product_tile), or, where the image columns fill whole
vectors, no tile (the lanes partial sums along the columns), and a transposed convolution's phase
kernel whose innermost row axis is 17 gated columns (prime: no tile without padding, and gated rows are not
padded) takes its rows from the next axis (the batch). Checked: the opts each target gets, and the results
against numpy, on every cpu target level this host runs."""

from __future__ import annotations

import numpy as np
import pytest

from devices.base import CPU_TARGET_NAMES, cpu_target
from lower import schedule
from lower.opt_tiles import MIN_PRODUCT_TILE
from lower.optimize import OptOps, hand_coded
from lower.pipeline import lower_kernel
from rewrite import AxisType
from rewrite.env import Context
from tensor import Tensor
from tensor.nn import conv_transpose2d, windows


def _kernels(*outs: Tensor) -> dict[str, object]:
    items, _ = schedule([o.uop for o in outs])
    return {it.name: it for it in items if it.kind == "kernel"}


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _conv_weight_grad(x: np.ndarray, g: np.ndarray) -> np.ndarray:
    """dW[o, c, i, j] = sum over n, h, w of g[n, o, h, w] * xpad[n, c, h + i, w + j] (3x3, padding 1)."""
    _, c, h, w = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((g.shape[1], c, 3, 3))
    for i in range(3):
        for j in range(3):
            out[:, :, i, j] = np.einsum("nohw,nchw->oc", g, xp[:, :, i:i + h, j:j + w])
    return out


def _weight_grad_reduction(x: np.ndarray, g: np.ndarray) -> Tensor:
    """_conv_weight_grad as one reduction: g times x's 3x3 windows (padding 1), summed over the batch and the
    positions (the kernel the windows' own gradient gave a conv's weight)."""
    n, c, h, w = x.shape
    o = g.shape[1]
    win = windows(Tensor(x).pad(((0, 0), (0, 0), (1, 1), (1, 1))).uop, (3, 3), (1, 1), (1, 1), (h, w))
    xs = Tensor._wrap(win, "cpu").reshape(n, 1, c, h, w, 3, 3)
    return (xs * Tensor(g).reshape(n, o, 1, h, w, 1, 1)).sum((0, 3, 4))


def _conv_transpose(x: np.ndarray, w: np.ndarray, s: int, p: int) -> np.ndarray:
    """y[n, o, h*s - p + i, w*s - p + j] += x[n, c, h, w] * w[c, o, i, j]."""
    n, _, hi, wi = x.shape
    k = w.shape[2]
    full = np.zeros((n, w.shape[1], (hi - 1) * s + k, (wi - 1) * s + k))
    for i in range(k):
        for j in range(k):
            full[:, :, i:i + (hi - 1) * s + 1:s, j:j + (wi - 1) * s + 1:s] += np.einsum(
                "nchw,co->nohw", x.astype(np.float64), w[:, :, i, j])
    return full[:, :, p:full.shape[2] - p, p:full.shape[3] - p]


@pytest.mark.parametrize("level", CPU_TARGET_NAMES)
def test_weight_gradient_gets_a_product_tile(level: str) -> None:
    target = cpu_target(level)
    x = _rng().standard_normal((20, 8, 4, 4)).astype(np.float32)
    g = _rng(1).standard_normal((20, 16, 4, 4)).astype(np.float32)
    dw = _weight_grad_reduction(x, g)
    (k,) = [k for name, k in _kernels(dw).items() if name.startswith("r_")]
    opts = hand_coded(k.ast, target)
    ups = [o for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST]
    if target.lanes(4) > 3 * 2:  # the 3 taps fill less than half the lanes: the product tile, nothing padded
        assert len(ups) == 2 and not any(o.op is OptOps.PADTO for o in opts), (level, opts)
        assert ups[0].arg[0] * ups[1].arg[0] >= MIN_PRODUCT_TILE
    else:  # 4 lanes (SSE, NEON): 3 of 4 real, the vector tile over the taps padded to a whole vector
        assert any(o.op is OptOps.PADTO for o in opts) and len(ups) >= 2, (level, opts)
    if target.runs_here:
        with Context(CPU_TARGET=level):
            got = _weight_grad_reduction(x, g).numpy()
        np.testing.assert_allclose(got, _conv_weight_grad(x, g), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", CPU_TARGET_NAMES)
def test_weight_gradient_over_whole_vector_columns_sums_in_lanes(level: str) -> None:
    """One input channel on 8x8 images (the digits CNN's first conv): the taps fill less than half the lanes, and
    the image columns (the reduction's contiguous axis) fill whole vectors where the target has 8 lanes: no tile,
    the lanes partial sums along the columns (UNROLL). Where the columns are no whole vector (16 lanes), the
    product tile; where the taps fill half the lanes (4), the vector tile as before."""
    target = cpu_target(level)
    lanes = target.lanes(4)
    x = _rng().standard_normal((100, 1, 8, 8)).astype(np.float32)
    g = _rng(1).standard_normal((100, 8, 8, 8)).astype(np.float32)
    dw = _weight_grad_reduction(x, g)
    (k,) = [k for name, k in _kernels(dw).items() if name.startswith("r_")]
    opts = hand_coded(lower_kernel(k.ast, target, upto="symbolic"), target)  # the AST the optimize stage gets
    ups = [o for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST]
    unrolls = [o for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.UNROLL]
    if lanes > 3 * 2 and 8 % lanes == 0:
        assert not ups and unrolls and unrolls[0].arg[0] == lanes, (level, opts)
    else:
        assert len(ups) >= 2, (level, opts)
    if target.runs_here:
        with Context(CPU_TARGET=level):
            got = _weight_grad_reduction(x, g).numpy()
        np.testing.assert_allclose(got, _conv_weight_grad(x, g), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", CPU_TARGET_NAMES)
def test_transposed_conv_rows_from_the_batch_axis(level: str) -> None:
    target = cpu_target(level)
    x = _rng().standard_normal((8, 32, 16, 16)).astype(np.float32)
    wn = (0.1 * _rng(1).standard_normal((32, 16, 4, 4))).astype(np.float32)
    y = conv_transpose2d(Tensor(x), Tensor(wn), stride=2, padding=1)
    ks = _kernels(y)
    phase = [k for name, k in ks.items() if name.startswith("r_17_17_")]
    assert phase, sorted(ks)
    opts = hand_coded(phase[0].ast, target)
    assert sum(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST for o in opts) >= 2, (level, opts)
    if target.runs_here:
        with Context(CPU_TARGET=level):
            got = conv_transpose2d(Tensor(x), Tensor(wn), stride=2, padding=1).numpy()
        np.testing.assert_allclose(got, _conv_transpose(x, wn, 2, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", CPU_TARGET_NAMES)
def test_dot_products_along_a_contiguous_k_keep_their_lanes(level: str) -> None:
    """A classifier's logits, x (256, 512) @ W.T with W (10, 512): no output axis fills half the lanes, but k is
    contiguous in both loads, so the lanes stay partial sums along k (UNROLL), not a product tile."""
    target = cpu_target(level)
    x = _rng().standard_normal((256, 512)).astype(np.float32)
    w = _rng(1).standard_normal((10, 512)).astype(np.float32)
    out = Tensor(x) @ Tensor(w).T
    (k,) = [k for name, k in _kernels(out).items() if name.startswith("r_")]
    opts = hand_coded(k.ast, target)
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UNROLL for o in opts), (level, opts)
    assert not any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST for o in opts), (level, opts)
    if target.runs_here:
        with Context(CPU_TARGET=level):
            got = (Tensor(x) @ Tensor(w).T).numpy()
        np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)


def test_transposed_conv_gradients_are_a_convolution_and_a_matmul() -> None:
    """A strided transposed convolution is a VJP unit (tensor.conv._strided_transposed): its input gradient is one
    strided conv2d kernel over g and w (x's size, no per-phase partial sums to add up) and its weight gradient a
    matmul over the batch and positions (a reduction of N H W); both against numpy's definitions."""
    rng = _rng(3)
    xn = rng.standard_normal((4, 8, 6, 6)).astype(np.float32)
    wn = (0.1 * rng.standard_normal((8, 4, 4, 4))).astype(np.float32)
    gn = rng.standard_normal((4, 4, 12, 12)).astype(np.float32)
    x, w = Tensor(xn, requires_grad=True), Tensor(wn, requires_grad=True)
    (conv_transpose2d(x, w, stride=2, padding=1) * Tensor(gn)).sum().backward()
    assert x.grad is not None and w.grad is not None
    ks = _kernels(x.grad, w.grad)
    sizes = {name: int(np.prod(it.bufs[0].shape)) for name, it in ks.items()}  # type: ignore[attr-defined]
    assert max(sizes.values()) <= gn.size * 16, sizes  # at most g's windows (the weight gradient's operand)
    reduces = [name for name in ks if name.startswith("r_")]
    assert any(name.endswith(f"_{4 * 6 * 6}") for name in reduces), reduces  # dw: one reduction of N H W
    gp = np.pad(gn.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want_x = np.zeros(xn.shape)
    want_w = np.zeros(wn.shape)
    for i in range(4):
        for j in range(4):
            win = gp[:, :, i:i + 12:2, j:j + 12:2]  # g at 2 h + i - 1, 2 w + j - 1
            want_x += np.einsum("nohw,co->nchw", win, wn[:, :, i, j].astype(np.float64))
            want_w[:, :, i, j] = np.einsum("nchw,nohw->co", xn.astype(np.float64), win)
    np.testing.assert_allclose(x.grad.numpy(), want_x, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(w.grad.numpy(), want_w, rtol=1e-4, atol=1e-4)


def test_conv_gradients_are_a_transposed_convolution_and_a_matmul() -> None:
    """conv2d is a VJP unit (tensor.conv._conv_vjp): its weight gradient is a matmul whose reduction is the batch
    and positions (N H W) and which gets a register tile on a vector target; its input gradient one convolution
    kernel over g; both against numpy's definition."""
    x = _rng(4).standard_normal((20, 8, 6, 6)).astype(np.float32)
    g = _rng(5).standard_normal((20, 16, 6, 6)).astype(np.float32)
    xt, w = Tensor(x, requires_grad=True), Tensor(np.zeros((16, 8, 3, 3), np.float32), requires_grad=True)
    (xt.conv2d(w, padding=1) * Tensor(g)).sum().backward()
    assert xt.grad is not None and w.grad is not None
    (dw,) = [k for name, k in _kernels(w.grad).items() if name.startswith("r_")]
    assert dw.name.endswith(f"_{20 * 6 * 6}"), dw.name  # type: ignore[attr-defined]
    target = cpu_target("native")
    if target.vector_bytes:
        opts = hand_coded(lower_kernel(dw.ast, target, upto="symbolic"), target)  # type: ignore[attr-defined]
        assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST for o in opts), opts
    np.testing.assert_allclose(w.grad.numpy(), _conv_weight_grad(x, g), rtol=1e-4, atol=1e-4)
    assert xt.grad.numpy().shape == x.shape  # zero weights: the input's gradient is zero
    np.testing.assert_array_equal(xt.grad.numpy(), np.zeros(x.shape, np.float32))
