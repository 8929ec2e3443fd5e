"""End to end: .numpy() / .tolist() / .item() / .realize() run the graph through the lowering on a real device,
and must agree with the reference evaluator; .schedule() lists the kernels and copies without running them."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rewrite.dtype import dtypes
from rewrite.ops import Ops
from tensor import Tensor, function
from tensor.tensor import reference_numpy

RNG = np.random.default_rng(0)
A = RNG.standard_normal((3, 4)).astype(np.float32)
B = RNG.standard_normal((4, 5)).astype(np.float32)
I = RNG.integers(-50, 50, (3, 4)).astype(np.int32)  # noqa: E741
X = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
W = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)

Case = Callable[[Callable[[np.ndarray], Tensor], str], Tensor]
CASES: dict[str, Case] = {
    "add_broadcast": lambda T, d: T(A) + T(A[0]) * 2,
    "int_floordiv_mod": lambda T, d: (T(I) // 7) * 10 + T(I) % 7,
    "float_mod_pow": lambda T, d: (T(A) % 0.5) + T(np.abs(A)) ** 1.7,
    "int_pow": lambda T, d: T(I) ** 3,
    "where_cmp": lambda T, d: (T(A) > 0).where(T(A), -1.0),
    "transcendental": lambda T, d: T(A).exp() + T(np.abs(A) + 0.1).log() + T(A).sin() + T(A).cos(),
    "rounding": lambda T, d: T(A * 3).floor() + T(A * 3).ceil() * 10 + T(A * 3).round() * 100 + T(A).abs().sign(),
    "bitwise": lambda T, d: ((T(I) & 5) | (T(I) ^ 3)) << 2,
    "casts": lambda T, d: T(A * 10).cast(dtypes.int8).cast(dtypes.float16) + T(A).bitcast(dtypes.uint32).cast(
        dtypes.float32) * 0,
    "bfloat16": lambda T, d: T(A).cast(dtypes.bfloat16) * 3,
    "activations": lambda T, d: T(A).sigmoid() + T(A).gelu() + T(A).softplus() + T(A).relu() + T(A).tanh(),
    "views": lambda T, d: T(A).reshape(2, 6).T.pad(((1, 0), (0, 2)), value=-1.0)[::-2, 1::3].flip(0),
    "getitem": lambda T, d: T(A)[None, 1, ..., None] + T(A)[-1:, ::2].sum(),
    "cat_stack_repeat": lambda T, d: T(A).cat(T(A) * 2, dim=1).stack(T(A).repeat(1, 2)),
    "gather": lambda T, d: T(A).gather(1, T(np.array([[0, 3], [1, 1], [2, 0]], np.int32))),
    "reductions": lambda T, d: (T(A).sum(1) + T(A).max(axis=1) + T(A).min(axis=1) + T(A).prod(1) + T(A).mean(1)
                                + T(A).std(1)),
    "int_sum": lambda T, d: T(I).sum(0),
    "argmax_argmin": lambda T, d: T(A).argmax(1) * 10 + T(A).argmin(1),
    "cumsum": lambda T, d: T(A).cumsum(1) + T(I).cumsum(1),
    "softmax": lambda T, d: T(A).softmax() + T(A).log_softmax(0) + T(A).logsumexp(1, keepdim=True),
    "matmul": lambda T, d: T(np.stack([A, A])) @ T(B) + (T(A) @ T(B[:, 0])).reshape(3, 1),
    "conv2d": lambda T, d: T(X).conv2d(T(W), padding=1, stride=(2, 1), dilation=(1, 2)),
    "pools": lambda T, d: T(X).max_pool2d() + T(X).avg_pool2d(3, 2, 1)[..., :2, :3],
    "creation": lambda T, d: (Tensor.arange(12, device=d).reshape(3, 4) + Tensor.eye(3, 4, device=d)
                              + Tensor.linspace(0, 1, 4, device=d) + Tensor.full((3, 1), 2.5, device=d)),
    "arange_large": lambda T, d: Tensor.arange(300, device=d),
    "random": lambda T, d: Tensor.rand(3, 4, device=d) + Tensor.randn(4, device=d) + Tensor.randint(
        3, 1, high=7, device=d),
    "function": lambda T, d: function(lambda a, b: (a * b + 1, a.sum()))(T(A), T(B[:3, :4]))[0],
    "contiguous": lambda T, d: (T(A) + 1).contiguous() * 2,
    "bitcast_resize": lambda T, d: T(A).bitcast(dtypes.uint16),
    "copy_then_compute": lambda T, d: T(A).to("python" if d == "cpu" else "cpu") + 1,
}


def _check(make: Case, device: str) -> None:
    def T(a: np.ndarray) -> Tensor:
        return Tensor(a, device=device)

    Tensor.manual_seed(1)
    expected = reference_numpy(make(T, device))
    Tensor.manual_seed(1)
    t = make(T, device)
    got = t.numpy()
    assert t.is_realized and t.uop.op is Ops.BUFFER
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=1e-4, atol=1e-5,
                               equal_nan=True)


@pytest.mark.parametrize("device", ["python", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_pipeline_matches_reference(name: str, device: str) -> None:
    _check(CASES[name], device)


def test_numpy_tolist_item() -> None:
    t = Tensor([[1, 2], [3, 4]], device="python") * 2
    assert t.tolist() == [[2, 4], [6, 8]]
    assert t.sum().item() == 20 and isinstance(t.sum().item(), int)
    assert Tensor(2.5, device="python").item() == 2.5
    assert isinstance(t.numpy(), np.ndarray)
    out = t.numpy()
    out[0, 0] = 100  # a copy: the tensor's data is not changed
    assert t.tolist()[0][0] == 2
    assert float(Tensor([1.5], device="python")) == 1.5 and int(Tensor([7], device="python")) == 7
    assert bool(Tensor([True], device="python")) is True
    with pytest.raises(ValueError, match="ambiguous"):
        bool(Tensor([1, 2], device="python"))
    assert Tensor.ones(2, 3, dtype=dtypes.bfloat16, device="python").numpy().dtype == np.float32


def test_realize_replaces_the_graph_and_is_lazy_before() -> None:
    a = Tensor([1.0, 2.0], device="python")
    b = (a + 1).exp2()
    c = b * 2
    assert not b.is_realized and b.uop.op is not Ops.BUFFER
    assert b.realize() is b
    assert b.is_realized and b.uop.op is Ops.BUFFER and b.uop.device == "python"
    before = b.uop
    b.realize()
    assert b.uop is before  # realizing twice does nothing
    np.testing.assert_allclose(c.numpy(), [8.0, 16.0])
    x, y = a * 3, a - 1
    x.realize(y)
    assert x.is_realized and y.is_realized
    assert x.tolist() == [3.0, 6.0] and y.tolist() == [0.0, 1.0]


@pytest.mark.parametrize("device", ["cpu", "python"])
def test_realize_with_a_tensor_listed_twice(device: str) -> None:
    # the same tensor among the arguments more than once used to raise KeyError once its first copy was realized
    a = Tensor(np.arange(4, dtype=np.float32), device=device)
    t, u = a + 1, a * 2
    Tensor.realize(t, t, u, t)
    assert t.is_realized and u.is_realized
    np.testing.assert_array_equal(t.numpy(), np.arange(4) + 1)
    np.testing.assert_array_equal(u.numpy(), np.arange(4) * 2)


def test_constant_graphs_run_on_the_tensors_device() -> None:
    z = Tensor.arange(4, device="python") * 2
    items = z.schedule()
    assert items and all(b.arg.device == "python" for it in items for b in it.bufs)
    assert z.tolist() == [0, 2, 4, 6]
    assert z.uop.device == "python"


def test_schedule_lists_kernels_without_running() -> None:
    a = Tensor(A, device="python")
    out = ((a + 1).contiguous() * 2).sum()
    items = out.schedule()
    assert [it.kind for it in items] == ["kernel", "kernel"]
    assert not out.is_realized
    np.testing.assert_allclose(out.item(), ((A + 1) * 2).sum(), rtol=1e-5)
    assert out.schedule() == []  # realized: nothing left to run
