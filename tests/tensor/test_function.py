"""@function: one FUNCTION(TUPLE(body...), args...) node with PARAM placeholders, GETTUPLE results, captured
buffers turned into parameters, nesting, and the values after inlining."""

from __future__ import annotations

import numpy as np
import pytest

from lower.callify import callify
from rewrite.ops import Ops
from rewrite.spec import check
from tensor import Tensor, function
from tests.tensor.util import close


@function
def axpy(a: Tensor, x: Tensor, y: Tensor) -> Tensor:
    return a * x + y


def test_structure_of_a_single_result() -> None:
    a, x, y = Tensor([2.0]), Tensor([1.0, 2.0]), Tensor([10.0, 20.0])
    r = axpy(a, x, y)
    g = r.uop
    assert g.op is Ops.GETTUPLE and g.arg == 0
    f = g.src[0]
    assert f.op is Ops.FUNCTION and f.src[0].op is Ops.TUPLE
    assert f.src[1:] == (a.uop, x.uop, y.uop)
    body = f.src[0].toposort()
    assert not any(u.op is Ops.BUFFER for u in body)  # only PARAM references
    assert sorted(u.arg.slot for u in body if u.op is Ops.PARAM) == [0, 1, 2]
    assert r.shape == (2,) and r.dtype is x.dtype and r.device == x.device
    check(g, "tensor")
    close(r, np.array([12.0, 24.0]))


def test_tuple_results_and_nested_arguments() -> None:
    @function
    def stats(xs: list[Tensor], scale: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        s = xs[0] + xs[1]
        return s.sum() * scale["k"], s.max()

    a, b, k = Tensor([1.0, 5.0]), Tensor([2.0, -1.0]), Tensor(3.0)
    total, mx = stats([a, b], {"k": k})
    assert total.uop.src[0] is mx.uop.src[0]  # one FUNCTION, two GETTUPLEs
    assert (total.uop.arg, mx.uop.arg) == (0, 1)
    close(total, np.float32(21.0))
    close(mx, np.float32(4.0))


def test_same_tensor_twice_is_one_parameter() -> None:
    @function
    def f(p: Tensor, q: Tensor) -> Tensor:
        return p * q

    x = Tensor([3.0, 4.0])
    r = f(x, x)
    assert len(r.uop.src[0].src) == 2  # body + one argument
    close(r, np.array([9.0, 16.0]))


def test_retracing_shares_the_body() -> None:
    r1 = axpy(Tensor([1.0]), Tensor([1.0, 2.0]), Tensor([0.0, 0.0]))
    r2 = axpy(Tensor([5.0]), Tensor([7.0, 8.0]), Tensor([1.0, 1.0]))
    assert r1.uop.src[0].src[0] is r2.uop.src[0].src[0]


def test_captured_tensors_become_parameters() -> None:
    w = Tensor([[1.0, 2.0], [3.0, 4.0]])

    @function
    def layer(x: Tensor) -> Tensor:
        return (x @ w).relu()

    x = Tensor([[1.0, -1.0]])
    r = layer(x)
    f = r.uop.src[0]
    assert not any(u.op is Ops.BUFFER for u in f.src[0].toposort())
    assert f.src[1:] == (x.uop, w.uop)
    check(r.uop, "tensor")
    close(r, np.maximum(np.array([[1.0, -1.0]]) @ np.array([[1.0, 2.0], [3.0, 4.0]]), 0))


def test_nested_functions_inline_correctly() -> None:
    @function
    def inner(p: Tensor, q: Tensor) -> Tensor:
        return p - q

    @function
    def outer(p: Tensor, q: Tensor) -> Tensor:
        return inner(q, p) * 10 + p  # swapped: PARAM 0 of inner is PARAM 1 of outer

    a, b = Tensor([1.0, 2.0]), Tensor([5.0, 7.0])
    r = outer(a, b)
    flat = callify([r.uop])[0]
    assert not any(u.op in (Ops.FUNCTION, Ops.PARAM, Ops.GETTUPLE) for u in flat.toposort())
    close(r, (np.array([5.0, 7.0]) - np.array([1.0, 2.0])) * 10 + np.array([1.0, 2.0]))


def test_results_compose_with_more_ops() -> None:
    r = axpy(Tensor([2.0]), Tensor([1.0, 2.0]), Tensor([0.0, 1.0]))
    close((r * r).sum(), np.float32(4.0 + 25.0))


def test_must_return_tensors() -> None:
    @function
    def bad(x: Tensor) -> int:
        return 3

    with pytest.raises(TypeError, match="must return a Tensor or a tuple of Tensors"):
        bad(Tensor([1.0]))
