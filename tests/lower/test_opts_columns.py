"""Matmuls whose column count is no multiple of the vector lanes (issue 9's cliff: 1021 or 1023 ran as a scalar
loop at 1.1 GFLOP/s): tensor.nn pads the right operand to whole panels (lower.opt_tiles.matmul_columns) so the
register tile applies, and drops the extra columns. Results checked against numpy and the python device."""

from __future__ import annotations

import numpy as np
import pytest

from devices import target_for
from devices.base import CPU_TARGET_NAMES, cpu_target
from lower import schedule
from lower.opt_tiles import matmul_columns, matmul_panel_bytes
from lower.optimize import OptOps, hand_coded
from rewrite import AxisType
from rewrite.env import Context
from tensor import Tensor


@pytest.mark.parametrize("level", CPU_TARGET_NAMES)
def test_matmul_columns_whole_panels(level: str) -> None:
    """Every padded count is the next multiple of the target's panel (its vector registers' width, read from the
    Target); counts that are whole panels already, at most one panel, or products too small are left alone."""
    target = cpu_target(level)
    for itemsize in (2, 4, 8):
        panel = matmul_panel_bytes(target) // itemsize
        for m, k in ((16, 64), (1021, 1021), (15, 500), (500, 63)):
            for n in range(1, 5 * panel + 2):
                got = matmul_columns(m, k, n, itemsize, target)
                if m < 16 or k < 64 or n <= panel or n % panel == 0:
                    assert got == n, (level, itemsize, m, k, n, got)
                else:
                    assert got % panel == 0 and n < got < n + panel, (level, itemsize, m, k, n, got)


def test_matmul_columns_interpreted_target_unpadded() -> None:
    target = target_for("python")
    assert target.interpreted
    assert all(matmul_columns(100, 100, n, 4, target) == n for n in range(1, 100))


def _product_kernel(out: Tensor):
    items, _ = schedule([out.uop])
    (it,) = [i for i in items if i.kind == "kernel" and i.name.startswith("r_")]
    return it


@pytest.mark.parametrize("level", ["native", "x86-64-v2"])
@pytest.mark.parametrize("shape", [(16, 64, 17), (37, 70, 101), (64, 96, 300), (2, 19, 80, 45), (33, 65, 1021),
                                   (20, 64, 3, 33)])
def test_ragged_columns_register_tile_and_numpy(level: str, shape: tuple[int, ...]) -> None:
    """The product of a ragged column count gets a register tile (UPCAST splits) on every target the host runs,
    and the result equals numpy's."""
    target = cpu_target(level)
    if not target.runs_here:
        pytest.skip(f"{level} code does not run on this host")
    if len(shape) == 4 and shape[2] == 3:  # (m, k, 3, n): a broadcast batch on b's side
        m, k, nb, n = shape
        a_shape, b_shape = (m, k), (nb, k, n)
    else:
        *batch, m, k, n = shape
        a_shape, b_shape = (*batch, m, k), (*batch, k, n)
    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    with Context(CPU_TARGET=level):
        out = Tensor(a) @ Tensor(b)
        if matmul_columns(m, k, n, 4, target) != n:
            opts = hand_coded(_product_kernel(out).ast, target)
            assert any(o.op is OptOps.SPLIT and o.split_arg[1] is AxisType.UPCAST for o in opts), opts
        got = out.numpy()
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(16, 64, 17), (17, 65, 19)])
def test_ragged_columns_match_python_device(shape: tuple[int, int, int]) -> None:
    """The padded cpu product equals the python reference device's unpadded one, for integers exactly."""
    m, k, n = shape
    rng = np.random.default_rng(m * k * n)
    a = rng.integers(-4, 5, (m, k)).astype(np.int32)
    b = rng.integers(-4, 5, (k, n)).astype(np.int32)
    got = (Tensor(a) @ Tensor(b)).numpy()
    ref = (Tensor(a, device="python") @ Tensor(b, device="python")).numpy()
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    af = rng.standard_normal((m, k)).astype(np.float32)
    bf = rng.standard_normal((k, n)).astype(np.float32)
    ref_f = (Tensor(af, device="python") @ Tensor(bf, device="python")).numpy()
    np.testing.assert_allclose((Tensor(af) @ Tensor(bf)).numpy(), ref_f, rtol=1e-5, atol=1e-5)


def test_ragged_columns_gradient() -> None:
    """The pad and the dropped columns are differentiable: the gradients are numpy's."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((20, 64)).astype(np.float32)
    b = rng.standard_normal((64, 21)).astype(np.float32)
    g = rng.standard_normal((20, 21)).astype(np.float32)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    ((ta @ tb) * Tensor(g)).sum().backward()
    assert ta.grad is not None and tb.grad is not None
    np.testing.assert_allclose(ta.grad.numpy(), g @ b.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tb.grad.numpy(), a.T @ g, rtol=1e-4, atol=1e-4)
