"""A convolution's gradients (tensor.conv._conv_vjp: a transposed convolution and a matmul) as GPU-shaped kernels:
lowered for the sm_90 target and run in the python device's grid emulator, against numpy's definition; and
lowered for sm_80 and sm_90 and compiled by nvcc and NVRTC (each skips where its compiler is missing)."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from devices.base import gpu_target
from devices.cuda import DEVICE
from lower.schedule import schedule
from rewrite.env import Context
from rewrite.uop import UOp
from tensor import Tensor
from tensor.nn import conv2d
from tests.devices.builder import gpu_graphs
from tests.devices.test_cuda_compile import COMPILERS, SMS, lowered
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

def conv_grad_kernels(dtype: str) -> list[tuple[str, UOp]]:
    """(name, AST) of the kernels of a conv's input and weight gradients (tensor.conv._conv_vjp): a plain conv (its
    weight gradient a matmul: tensor cores in 16-bit floats), a strided grouped one (subpixel phases) and a
    depthwise one (the windowed reduction)."""
    rng = np.random.default_rng(1)
    out: list[tuple[str, UOp]] = []
    for key, xs, ws, s, g in (("plain", (2, 32, 8, 8), (32, 32, 3, 3), 1, 1),
                              ("grouped", (2, 32, 8, 8), (32, 8, 3, 3), 2, 4),
                              ("depthwise", (2, 32, 8, 8), (32, 1, 3, 3), 1, 32)):
        with gpu_graphs():  # the graphs a GPU device builds (tests.devices.builder.gpu_graphs)
            x = Tensor(rng.standard_normal(xs).astype(np.float32)).cast(dtype).realize()
            w = Tensor(rng.standard_normal(ws).astype(np.float32)).cast(dtype).realize()
            x.requires_grad, w.requires_grad = True, True
            conv2d(x, w, stride=s, padding=1, groups=g).float().sum().backward()
            assert x.grad is not None and w.grad is not None
            items, _ = schedule([x.grad.uop, w.grad.uop])
        out += [(f"{key}_{dtype}_{it.name}", it.ast) for it in items if it.kind == "kernel" and it.ast is not None]
    return out


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_gradient_kernels_compile_for_the_gpu(compiler: str, tmp_path: os.PathLike, sm: str, dtype: str) -> None:
    progs = lowered(conv_grad_kernels(dtype), sm, "gpu")
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert len(ks) == len(progs) >= 6 and all(k.cubin[:4] == b"\x7fELF" for k in ks)
    # every kernel a grid of threads, not one serial thread (a small block where its output axes are small: the
    # depthwise weight gradient's 3 x 3 taps, one block per channel, each thread a serial sum over N H W)
    assert min(math.prod(k.launch_dims({})[0]) * math.prod(k.launch_dims({})[1]) for k in ks) >= 32
    if dtype == "float16":  # the plain conv's weight gradient (a matmul) on the tensor cores
        assert any("mma.sync" in k.src or "wgmma" in k.src for k in ks if k.name.startswith("plain_")), \
            [k.name for k in ks]
