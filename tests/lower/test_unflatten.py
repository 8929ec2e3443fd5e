"""lower.unflatten: a reduction kernel whose one output loop a reshape merged (a flat chunk of a matmul's output,
as an allreduce's reduce-scatter copies it) gets its loop split back where the index math divides it, so the
optimizer register-tiles it; results unchanged (numpy, and the python device running the same kernels)."""

from __future__ import annotations

import numpy as np
import pytest

from lower.optimize import OptOps, hand_coded
from lower.pipeline import lower_kernel
from lower.schedule import schedule
from lower.unflatten import unflatten
from rewrite import Ops
from rewrite.env import Context
from rewrite.ops import AxisType
from tensor import Tensor


def _chunk(a: np.ndarray, b: np.ndarray, n: int) -> Tensor:
    return ((Tensor(a) @ Tensor(b)).reshape(-1)[:n] + 1).contiguous()


def _product(t: Tensor):
    (it,) = [i for i in schedule([t.uop])[0] if i.kind == "kernel" and i.name.startswith("r_")]
    return it


def _loops(ast) -> int:
    return sum(1 for u in ast.toposort() if u.op is Ops.RANGE and u.axis_type is AxisType.LOOP)


def test_a_flat_chunk_of_a_matmul_is_tiled_on_two_loops():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32), dtype=np.float32), rng.standard_normal((32, 48), dtype=np.float32)
    it = _product(_chunk(a, b, 64 * 24))
    assert it.name == "r_1536_32"  # the split made one flat output loop of the half the chunk holds
    ast = lower_kernel(it.ast, "cpu", upto="symbolic")
    assert _loops(it.ast) == 1 and _loops(ast) == 2  # rows and columns again
    opts = hand_coded(ast, _target())
    tiled = {o.axis for o in opts if o.op is OptOps.SPLIT and o.split_arg[1] is AxisType.UPCAST}
    assert len(tiled) == 2, opts  # a register tile: rows and columns both upcast


def _target():
    from devices import get_device

    return get_device("cpu").default_target()


@pytest.mark.parametrize("device", ["cpu", "python"])
@pytest.mark.parametrize("shape", [(64, 32, 48, 64 * 24), (12, 5, 20, 120), (6, 7, 10, 60)])
def test_results_unchanged(device: str, shape: tuple[int, int, int, int]):
    m, k, n, take = shape
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    with Context(DEVICE=device):
        got = _chunk(a, b, take).numpy()
    want = (a.astype(np.float64) @ b.astype(np.float64)).reshape(-1)[:take] + 1
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_kernels_with_two_output_loops_are_left_alone():
    """A matmul's own kernel (rows, columns) has nothing to split back: unflatten leaves it."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 8), dtype=np.float32), rng.standard_normal((8, 24), dtype=np.float32)
    it = _product((Tensor(a) @ Tensor(b)).contiguous())
    ast = lower_kernel(it.ast, "cpu", upto="symbolic")
    assert unflatten(ast, lambda x: x) is None


def test_row_parallel_matmul_product_is_tiled():
    """The case that showed it: A split by columns and B by rows over two cpu devices; each device's partial
    product is computed straight into the chunks the allreduce copies (no full product stored) and must still
    be register-tiled, and equal the one-device product."""
    D = ("cpu:0", "cpu:1")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((256, 256), dtype=np.float32), rng.standard_normal((256, 256), dtype=np.float32)
    out = Tensor(a).shard(D, 1) @ Tensor(b).shard(D, 0)
    products = [i for i in schedule([out.uop])[0] if i.kind == "kernel" and any(
        u.op is Ops.REDUCE for u in i.ast.toposort())]
    assert products
    for it in products:
        ast = lower_kernel(it.ast, "cpu", upto="symbolic")
        opts = hand_coded(ast, _target())
        assert len({o.axis for o in opts if o.op is OptOps.SPLIT and o.split_arg[1] is AxisType.UPCAST}) == 2, \
            (it.name, opts)
    np.testing.assert_allclose(out.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
