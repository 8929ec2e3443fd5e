"""index_select (the embedding lookup): rows read at positions held in data, against numpy's take, on the cpu
device and the python reference device, and against the reference evaluator of the same graph; positions out
of range read zeros; bad input raises typed errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lower import schedule
from rewrite.errors import ShapeError
from rewrite.ops import Ops
from tensor import Tensor
from tensor.helpers import AxisError
from tensor.tensor import reference_numpy
from tests.tensor.util import arrays, close, shapes


@settings(max_examples=30, deadline=None)
@given(arrays("float32", shapes(1, 3, max_side=5)), st.data(), st.sampled_from(["int32", "int64"]),
       st.sampled_from(["cpu", "python"]))
def test_index_select_matches_take(a: np.ndarray, data: st.DataObject, idt: str, device: str) -> None:
    dim = data.draw(st.integers(0, a.ndim - 1))
    n = data.draw(st.integers(1, 6))
    idx = np.array(data.draw(st.lists(st.integers(0, a.shape[dim] - 1), min_size=n, max_size=n)), dtype=idt)
    t = Tensor(a, device=device).index_select(dim, Tensor(idx, device=device))
    close(t, np.take(a, idx, axis=dim))
    np.testing.assert_array_equal(reference_numpy(t).astype(np.float32), np.take(a, idx, axis=dim))


def test_rows_of_a_computed_source_and_fused_consumers() -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((50, 8), dtype=np.float32)
    ids = rng.integers(0, 50, 12).astype(np.int32)
    t = (Tensor(w) * 2 + 1).index_select(0, Tensor(ids)).reshape(3, 4, 8) + Tensor(w[:4])
    close(t, (w * 2 + 1)[ids].reshape(3, 4, 8) + w[:4])


def test_positions_out_of_range_read_zeros() -> None:
    w = np.arange(12, dtype=np.float32).reshape(4, 3) + 1
    ids = np.array([3, -1, 4, 0, 1 << 20], np.int32)
    got = Tensor(w).index_select(0, Tensor(ids)).numpy()
    exp = np.stack([w[3], np.zeros(3), np.zeros(3), w[0], np.zeros(3)]).astype(np.float32)
    np.testing.assert_array_equal(got, exp)


def test_lookup_reads_rows_not_the_whole_table() -> None:
    """The kernel loads one row per id (an address from a loaded value), no loop over the table's rows."""
    w, ids = Tensor(np.zeros((1000, 16), np.float32)), Tensor(np.zeros(7, np.int32))
    items, _ = schedule([w.index_select(0, ids).uop])
    ks = [it for it in items if it.kind == "kernel"]
    assert len(ks) == 1
    topo = ks[0].ast.toposort()
    assert not any(u.op is Ops.REDUCE for u in topo)
    assert not any(u.op is Ops.RANGE and u.src[0].arg[0] == 1000 for u in topo)


def test_bad_index_raises() -> None:
    w = Tensor(np.zeros((4, 3), np.float32))
    with pytest.raises(TypeError, match="index_select: index must be an integer Tensor"):
        w.index_select(0, Tensor(np.zeros(2, np.float32)))
    with pytest.raises(ShapeError, match="index_select: index must be 1-D"):
        w.index_select(0, Tensor(np.zeros((2, 2), np.int32)))
    with pytest.raises(AxisError, match="index_select"):
        w.index_select(2, Tensor(np.zeros(2, np.int32)))
