"""Reduce collapse (lower.reduce_collapse, used by lower.rangeify): an integer sum over one range of a value that
counts positions has a closed form. Oracles: brute-force summation of the same expression at every point, and
numpy's arange. Also what it buys: `Tensor.arange` is one elementwise kernel storing its RANGE (no REDUCE, for
any n up to 2**24 and beyond), and an arange read inside another reduction is not realized on its own."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from lower import schedule
from lower.reduce_collapse import collapse_sum
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes
from tensor import Tensor

R = 7
r = UOp.range(R, 99, AxisType.REDUCE)
x = UOp.variable("x", -4, 12)
y = UOp.variable("y", -3, 9)
one = UOp.const(1, dtypes.int32)
zero = UOp.const(0, dtypes.int32)

# fmt: off
COLLAPSIBLE = [
    ("r < x",               (r < x).where(one, zero)),
    ("x < r",               (x < r).where(one, zero)),
    ("c < r + x",           (UOp.const(5) < r + x).where(one, zero)),
    ("r + x < c",           (r + x < 6).where(UOp.const(3, dtypes.int32), zero)),
    ("-r < x",              (r * -1 < x).where(one, zero)),
    ("not(r < x)",          (~(r < x)).where(one, zero)),
    ("x <= r < y",          ((~(r < x)) & (r < y)).where(one, zero)),
    ("else branch",         (r < x).where(zero, UOp.const(2, dtypes.int32))),
    ("bool cast",           (y < r).cast(dtypes.int32)),
    ("free of r",           x.cast(dtypes.int32) * 2),
    ("index dtype",         (r < x + y).where(UOp.const(1), UOp.const(0))),
    ("y times a gate",      (r < x).where(y.cast(dtypes.int32), zero)),
]
NOT_COLLAPSIBLE = [
    ("float value",         (r < x).where(UOp.const(1.0), UOp.const(0.0))),
    ("coefficient 2",       (r * 2 < x).where(one, zero)),
    ("value reads r",       (r < x).where(r.cast(dtypes.int32), zero)),
    ("r in a product",      (r * x < y).where(one, zero)),
    ("an OR of bounds",     ((r < x) | (y < r)).where(one, zero)),
]
# fmt: on


def _brute(v: UOp, env: dict[str, int]) -> int:
    return sum(int(v.substitute({r: UOp.const(k)}).evaluate(env)) for k in range(R))


@pytest.mark.parametrize("name,v", COLLAPSIBLE, ids=[c[0] for c in COLLAPSIBLE])
def test_collapsed_sum_equals_the_loop(name: str, v: UOp):
    out = collapse_sum(v, r)
    assert out is not None and r not in out.toposort()
    for xv, yv in itertools.product(range(-4, 13), range(-3, 10)):
        env = {"x": xv, "y": yv}
        assert int(out.evaluate(env)) == _brute(v, env), (name, env)


@pytest.mark.parametrize("name,v", NOT_COLLAPSIBLE, ids=[c[0] for c in NOT_COLLAPSIBLE])
def test_other_sums_are_left_alone(name: str, v: UOp):
    assert collapse_sum(v, r) is None


def _kernel(t: Tensor) -> UOp:
    items, _ = schedule([t.uop])
    kernels = [it for it in items if it.kind == "kernel" and it.ast is not None]
    assert len(kernels) == 1, [it.name for it in kernels]
    return lower_kernel(kernels[0].ast, "cpu", upto="symbolic")


@pytest.mark.parametrize("n", [1, 2, 16, 17, 1000, 30000, 1000003, 2**24, 2**24 + 1])
def test_arange_kernel_stores_its_range(n: int):
    k = _kernel(Tensor.arange(n))
    assert not any(u.op is Ops.REDUCE for u in k.toposort())
    (st,) = [u for u in k.toposort() if u.op is Ops.STORE]
    val = st.src[1]
    assert val.op is Ops.CAST and val.src[0].op is (Ops.RANGE if n > 1 else Ops.CONST), val


def test_arange_with_start_and_step_is_elementwise():
    k = _kernel(Tensor.arange(5, 200, 3))
    assert not any(u.op is Ops.REDUCE for u in k.toposort())


@pytest.mark.parametrize("dtype,np_dtype", [("int32", np.int32), ("float32", np.float32)])
def test_arange_2_24_is_exact(dtype: str, np_dtype: type):
    got = Tensor.arange(2**24, dtype=dtype).numpy()
    assert got.dtype == np_dtype
    np.testing.assert_array_equal(got, np.arange(2**24, dtype=np_dtype))


# fmt: off
ARANGE_CASES = [(0, 10, 1), (3, 40, 7), (10, -5, -3), (0.5, 7.25, 0.75), (-2.0, 2.0, 0.1), (5, 5, 1), (1, 0, 1)]
# fmt: on


@pytest.mark.parametrize("start,stop,step", ARANGE_CASES)
def test_arange_matches_numpy(start: float, stop: float, step: float):
    want = np.arange(start, stop, step, dtype=np.int32 if isinstance(start + stop + step, int) else np.float32)
    np.testing.assert_allclose(Tensor.arange(start, stop, step).numpy(), want, rtol=1e-6, atol=1e-6)


def test_arange_read_inside_a_reduction_is_not_realized():
    c = 300
    idx = Tensor(np.array([4, 299, 0, 17], np.int32)).realize()
    picked = ((idx.reshape(4, 1) == Tensor.arange(c, dtype="int32").reshape(1, c)).cast("int32") *
              Tensor.arange(c, dtype="int32").reshape(1, c)).sum(1)
    items, _ = schedule([picked.uop])
    assert len([it for it in items if it.kind == "kernel"]) == 1
    np.testing.assert_array_equal(picked.numpy(), [4, 299, 0, 17])


def test_arange_gradient_is_unchanged():
    w = Tensor(np.ones(6, np.float32), requires_grad=True)
    (w * Tensor.arange(6, dtype="float32")).sum().backward()
    assert w.grad is not None
    np.testing.assert_array_equal(w.grad.numpy(), np.arange(6, dtype=np.float32))
