"""Kernels within the device's limits: the scheduler realizes intermediates so no kernel has more buffer
arguments than `max_args` (ctypes calls at most 1024) or more fused ops than `max_kernel_ops` (gcc's time grows
faster than linearly in a kernel's size and it crashes on a 100,000-op chain)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from devices import target_for
from lower.schedule import schedule
from lower.split_build import _COUNTED
from rewrite import Ops
from tensor import Tensor


@pytest.fixture
def limits(monkeypatch):
    """Lower the targets' limits for a test (kernels cut small, so the test runs fast); no cached plans."""
    importlib.import_module("lower.realize").plans.clear()

    def set_limits(max_args: int, max_ops: int) -> None:
        # where the rule realize-over-limits reads them
        monkeypatch.setattr(importlib.import_module("lower.split_build"), "kernel_limits",
                            lambda device: (max_args, max_ops))

    yield set_limits
    importlib.import_module("lower.realize").plans.clear()


def _kernels(t: Tensor) -> list:
    return [it for it in schedule([t.uop])[0] if it.kind == "kernel"]


def test_the_targets_state_their_limits():
    for name in ("cpu", "python"):
        t = target_for(name)
        assert isinstance(t.max_args, int) and 16 <= t.max_args <= 1000
        assert isinstance(t.max_kernel_ops, int) and t.max_kernel_ops >= 256


def test_sum_of_2000_tensors():
    rng = np.random.default_rng(1)
    arrs = [rng.standard_normal(4).astype(np.float32) for _ in range(2000)]
    out = Tensor(arrs[0])
    for a in arrs[1:]:
        out = out + Tensor(a)
    want = np.zeros(4, np.float32)
    for a in arrs:
        want = want + a  # the same order of additions, so the same roundings
    ks = _kernels(out)
    assert len(ks) >= 4 and all(len(k.bufs) <= target_for("cpu").max_args for k in ks)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("device", ["cpu", "python"])
def test_many_inputs_with_broadcasts_and_reductions(limits, device):
    limits(8, 1 << 20)
    rng = np.random.default_rng(2)
    rows = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(20)]
    cols = [rng.standard_normal((5,)).astype(np.float32) for _ in range(20)]
    acc = Tensor(np.zeros((3,), np.float32), device=device)
    want = np.zeros((3,), np.float64)
    for r, c in zip(rows, cols, strict=True):
        acc = acc + (Tensor(r, device=device) * Tensor(c, device=device)).sum(axis=1)
        want = want + (r.astype(np.float64) * c).sum(axis=1)
    ks = _kernels(acc)
    assert len(ks) > 1 and all(len(k.bufs) <= 8 for k in ks)
    np.testing.assert_allclose(acc.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "python"])
def test_long_elementwise_chain_is_cut(limits, device):
    limits(512, 64)
    x0 = np.linspace(-2, 2, 8, dtype=np.float32)
    x = Tensor(x0, device=device)
    want = x0.copy()
    for i in range(300):  # 600 ops
        if i % 3 == 2:
            x = (x * 0.5).exp2() * 0.25 + 1  # an expensive op weighs 16
            want = np.exp2(want * np.float32(0.5)) * np.float32(0.25) + np.float32(1)
        else:
            x = x * 0.999 + 0.001
            want = want * np.float32(0.999) + np.float32(0.001)
    ks = _kernels(x)
    for k in ks:
        ops = [u for u in k.ast.toposort() if u.op in _COUNTED]
        assert len(ops) <= 64
    assert len(ks) >= 600 // 64
    np.testing.assert_allclose(x.numpy(), want, rtol=1e-5)


def test_cut_realizes_the_small_side_of_an_expand(limits):
    limits(512, 16)
    a = np.arange(4, dtype=np.float32)
    x = Tensor(a)
    want = a.copy()
    for _ in range(10):
        x = x * 1.5 + 1
        want = want * np.float32(1.5) + np.float32(1)
    y = x.reshape(4, 1).expand(4, 64) + Tensor(np.ones((4, 64), np.float32))
    for _ in range(10):
        y = y * 0.5 + 0.25
    ks = _kernels(y)
    assert all(not any(u.op is Ops.EXPAND for u in k.ast.toposort()) for k in ks)
    assert max(int(np.prod(b.shape)) for k in ks for b in k.bufs[:1]) == 256
    wy = want.reshape(4, 1) + np.ones((4, 64), np.float32)
    for _ in range(10):
        wy = wy * np.float32(0.5) + np.float32(0.25)
    np.testing.assert_allclose(y.numpy(), wy, rtol=1e-6)
