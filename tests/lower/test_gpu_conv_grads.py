"""A convolution's gradients (tensor.nn._conv_vjp: a transposed convolution and a matmul) as GPU-shaped kernels:
lowered for the sm_90 target and run in the python device's grid emulator, against numpy's definition."""

from __future__ import annotations

import numpy as np

from tensor import Tensor
from tensor.nn import conv2d
from tests.lower.test_gpu import GPU, _specials, run
from tests.tensor import nn_reference as ref


def test_conv_gradients_run_as_gpu_kernels() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32)
    c = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    xt = Tensor(x, device="python", requires_grad=True)
    wt = Tensor(w, device="python", requires_grad=True)
    (conv2d(xt, wt, stride=2, padding=1) * Tensor(c, device="python")).sum().backward()
    assert xt.grad is not None and wt.grad is not None
    gx, lx = run(xt.grad, GPU)
    gw, lw = run(wt.grad, GPU)
    assert {"gidx0", "lidx0"} <= _specials(lx) and {"gidx0", "lidx0"} <= _specials(lw)  # grids, not serial loops
    x64, w64, c64 = x.astype(np.float64), w.astype(np.float64), c.astype(np.float64)
    loss = lambda a, b: (ref.conv_nd(a, b, None, (2, 2), (1, 1), (1, 1), 1) * c64).sum()
    np.testing.assert_allclose(gx, ref.fd_grad(lambda a: loss(a, w64), x64), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, ref.fd_grad(lambda b: loss(x64, b), w64), rtol=1e-4, atol=1e-4)
