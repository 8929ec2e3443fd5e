"""A reduction read only through a cast to a narrower dtype is stored narrow (lower.split.narrowing_casts):
a half matmul's float32 sum, cast to half by the graph, crosses to the next kernel as half, not as float32. The
results are the same (every reader cast it on load before), the buffer half the bytes."""

from __future__ import annotations

import numpy as np
import pytest

from lower.schedule import schedule
from rewrite.env import Context
from tensor import Tensor
from tests.devices.builder import gpu_graphs
from tests.tensor.fuzz_tc import _env, kernel_forms


def _between(items: list) -> list[str]:
    """The dtypes of the buffers that reduction kernels write and a later kernel reads (on the cpu a 16-bit matmul
    then copies its operands to float32: tensor.nn._widened)."""
    from rewrite import Ops

    kernels = [it for it in items if it.kind == "kernel"]
    written = [it.bufs[0] for it in kernels if any(u.op is Ops.REDUCE for u in it.ast.toposort())]
    read = {id(b) for it in kernels for b in it.bufs[1:]}
    return [b.dtype.name for b in written if id(b) in read]


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("where", ["cpu", "gpu"])
def test_a_half_matmul_crosses_kernels_in_half(dt: str, where: str) -> None:
    """On the cpu and in a GPU's graphs; a chained matmul on the cpu reads a float32 copy of its operand, which the
    first matmul's kernel writes directly (its sum rounded to half on the way), so the chains are the GPU's."""
    with Context() if where == "cpu" else gpu_graphs():
        rng = np.random.default_rng(0)
        a, b = (Tensor((rng.integers(-8, 9, (2, 32, 32)) / 4).astype(np.float32)).cast(dt).contiguous()
                for _ in range(2))
        graphs = {"softmax": ((a @ b) * 0.125).softmax(-1)}
        if where == "gpu":
            graphs.update({"chain": (a @ b) @ b, "relu chain": (a @ b).relu() @ b})
        for name, g in graphs.items():
            items, _ = schedule([g.uop])
            assert _between(items) and set(_between(items)) == {dt}, (name, _between(items))
        # a sum kept in float32 by the graph is not narrowed
        items, _ = schedule([((a.float() @ b.float()) * 0.125).softmax(-1).uop])
        assert "float32" in _between(items)


def test_the_chain_is_exact_and_its_second_matmul_takes_cp_async() -> None:
    """(a @ b) @ c in half on sm_90: the second matmul reads a plain half buffer, which the cp.async pipeline
    copies (before, a float32 one cast on load, which it cannot); bit for bit against the oracle rounding each
    product once (quarters: every sum is exact)."""
    rng = np.random.default_rng(1)
    vals = [(rng.integers(-8, 9, s) / 4).astype(np.float32) for s in ((128, 64), (64, 128), (128, 64))]
    r = _env("float16")["R"]
    want = r(r(vals[0].astype(np.float64) @ vals[1]) @ vals[2]).astype(np.float32)
    with Context(DEVICE="python", PYTHON_TARGET="sm_90"):
        a, b, c = (Tensor(v).cast("float16").realize() for v in vals)
        out = ((a @ b) @ c).cast("float32")
        items = out.schedule()
        got = out.numpy()
        forms = kernel_forms(items)
    assert np.array_equal(got, want)
    assert forms["mma"] == 2 and forms["cp.async"] == 2, forms
