"""rand / randn / randint through THREEFRY: the bits-to-float recipe (known answers), determinism under
manual_seed, independence of calls, ranges per dtype, and statistics (moments and a chi-square test)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from rewrite.dtype import dtypes
from rewrite.errors import DTypeError
from rewrite.ops import Ops
from rewrite.semantics import threefry2x32
from tensor import Tensor
from tests.tensor.util import val


def test_rand_known_answer() -> None:
    Tensor.manual_seed(1234)
    got = val(Tensor.rand(5))
    key = 1234  # seed in the low word, call number 0 in the high word
    expected = []
    for i in range(5):
        word = threefry2x32(i, key) & 0xFFFFFFFF
        expected.append(struct.unpack("<f", struct.pack("<I", (word >> 9) | 0x3F800000))[0] - 1.0)
    np.testing.assert_array_equal(got, np.array(expected, np.float32))


def test_rand_uses_threefry_and_is_lazy() -> None:
    t = Tensor.rand(3, 2)
    assert any(u.op is Ops.THREEFRY for u in t.uop.toposort())
    assert not t.is_realized and t.shape == (3, 2) and t.dtype is dtypes.float32


def test_manual_seed_determinism_and_fresh_streams() -> None:
    Tensor.manual_seed(7)
    a, b = val(Tensor.rand(16)), val(Tensor.rand(16))
    Tensor.manual_seed(7)
    a2, b2 = val(Tensor.rand(16)), val(Tensor.rand(16))
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(b, b2)
    assert not np.array_equal(a, b)
    Tensor.manual_seed(8)
    assert not np.array_equal(val(Tensor.rand(16)), a)


@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64])
def test_rand_range_per_dtype(dt: object) -> None:
    Tensor.manual_seed(3)
    r = Tensor.rand(500, dtype=dt)
    assert r.dtype is dt
    v = val(r).astype(np.float64)
    assert (v >= 0).all() and (v < 1).all()
    assert len(np.unique(v)) > 100


def test_rand_statistics() -> None:
    Tensor.manual_seed(0)
    v = val(Tensor.rand(64, 64)).astype(np.float64).reshape(-1)
    assert abs(v.mean() - 0.5) < 0.02
    assert abs(v.var() - 1 / 12) < 0.01
    counts = np.histogram(v, bins=16, range=(0, 1))[0]
    chi2 = ((counts - len(v) / 16) ** 2 / (len(v) / 16)).sum()
    assert chi2 < 40  # 15 degrees of freedom: p < 0.001 beyond ~37.7


def test_randn_statistics() -> None:
    Tensor.manual_seed(0)
    r = Tensor.randn(50, 80)
    assert r.shape == (50, 80) and r.dtype is dtypes.float32
    v = val(r).astype(np.float64).reshape(-1)
    assert abs(v.mean()) < 0.06
    assert abs(v.var() - 1) < 0.08
    assert abs((v < 0).mean() - 0.5) < 0.03
    assert abs((np.abs(v) < 1).mean() - 0.6827) < 0.03
    n = Tensor.normal(1000, mean=3.0, std=0.5)
    w = val(n).astype(np.float64)
    assert abs(w.mean() - 3) < 0.06 and abs(w.std() - 0.5) < 0.05


def test_randint_and_uniform() -> None:
    Tensor.manual_seed(5)
    r = Tensor.randint(2000, low=-3, high=4)
    assert r.dtype is dtypes.int32
    v = val(r)
    assert v.min() == -3 and v.max() == 3
    assert (np.bincount(v + 3) > 200).all()
    u = val(Tensor.uniform(1000, low=-2.0, high=5.0))
    assert u.min() >= -2 and u.max() < 5 and abs(u.mean() - 1.5) < 0.25
    assert Tensor.randint(3, high=5, dtype=dtypes.int64).dtype is dtypes.int64


def test_like_and_errors() -> None:
    t = Tensor.zeros(2, 3, dtype=dtypes.float16, device="python")
    r = t.rand_like()
    assert r.shape == (2, 3) and r.dtype is dtypes.float16 and r.device == "python"
    assert Tensor.zeros(4, dtype=dtypes.int32).randn_like().dtype is dtypes.float32
    with pytest.raises(DTypeError, match="rand: needs a float dtype, got int32"):
        Tensor.rand(3, dtype=dtypes.int32)
    with pytest.raises(DTypeError, match="randint: needs an integer dtype"):
        Tensor.randint(3, dtype=dtypes.float32)
    with pytest.raises(ValueError, match="low < high"):
        Tensor.randint(3, low=5, high=5)
