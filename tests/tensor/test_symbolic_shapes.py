"""Symbolic shapes at the Tensor level: dimensions that are bound variables (`Variable("n", lo, hi).bind(v)`).
Checked against numpy on the cpu and python devices: creation (ones, zeros, full), x[:n] and shrink of a concrete
tensor then elementwise, sum, mean, var, reshape (n, 4) -> (n*4,), softmax over a symbolic length; one compile
serving three values (kernels and plans keyed on the unbound variable, values passed at launch); and the typed
errors: unbound variable, value out of range, two values in one realize, ops that need a concrete shape."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable

import numpy as np
import pytest

from rewrite.env import Context
from rewrite.errors import ShapeError, VariableError
from rewrite.uop import UOp
from tensor import Tensor, Variable

DEVICES = ["cpu", "python"]
RNG = np.random.default_rng(13)
A = RNG.standard_normal((50, 4)).astype(np.float32)
_names = itertools.count()


def fresh(lo: int = 1, hi: int = 50) -> UOp:
    """A variable with a name no other test uses, so its kernels are compiled here first."""
    return Variable(f"n{next(_names)}", lo, hi)


def compiled() -> int:
    """How many kernels this process has compiled."""
    return len(sys.modules["lower.realize"]._compiled)


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param


def run(device: str, f: Callable[[], Tensor]) -> np.ndarray:
    with Context(DEVICE=device):
        return f().numpy()


def softmax_np(a: np.ndarray) -> np.ndarray:
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


CASES: list[tuple[str, Callable[[UOp, Tensor], Tensor], Callable[[int], np.ndarray]]] = [
    ("ones", lambda n, x: Tensor.ones(n), lambda v: np.ones(v, np.float32)),
    ("zeros", lambda n, x: Tensor.zeros(n, 4), lambda v: np.zeros((v, 4), np.float32)),
    ("full", lambda n, x: Tensor.full((2, n), 2.5), lambda v: np.full((2, v), 2.5, np.float32)),
    ("ones-plus-x", lambda n, x: Tensor.ones(n, 4) + x[:n], lambda v: A[:v] + 1),
    ("slice-elementwise", lambda n, x: (x[:n] * 2 - 1).exp(), lambda v: np.exp(A[:v] * 2 - 1)),
    ("shrink-middle", lambda n, x: x.shrink(((1, n), None)) + 1, lambda v: A[1:v] + 1),
    ("sum", lambda n, x: x[:n].sum(), lambda v: A[:v].sum()),
    ("sum-axis0", lambda n, x: x[:n].sum(0), lambda v: A[:v].sum(0)),
    ("sum-axis1", lambda n, x: x[:n].sum(1), lambda v: A[:v].sum(1)),
    ("mean", lambda n, x: x[:n].mean(), lambda v: A[:v].mean()),
    ("mean-axis0", lambda n, x: x[:n].mean(0), lambda v: A[:v].mean(0)),
    ("var-axis0", lambda n, x: x[:n].var(0), lambda v: A[:v].var(0, ddof=1)),
    ("max", lambda n, x: x[:n].max(axis=0), lambda v: A[:v].max(0)),
    ("reshape-flat", lambda n, x: x[:n].reshape(n * 4), lambda v: A[:v].reshape(-1)),
    ("reshape-infer", lambda n, x: (x[:n] + 0).reshape(-1).sum(), lambda v: A[:v].sum()),
    ("softmax", lambda n, x: x[:n, 0].softmax(), lambda v: softmax_np(A[:v, 0])),
    ("softmax-axis0", lambda n, x: x[:n].softmax(0), lambda v: softmax_np(A[:v].T).T),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_against_numpy(device: str, case: tuple) -> None:
    _, build, ref = case
    n = fresh(2)
    for v in (3, 50):
        out = run(device, lambda v=v: build(n.bind(v), Tensor(A, device=device)))
        np.testing.assert_allclose(out, ref(v), rtol=1e-5, atol=1e-5)
        assert out.shape == np.shape(ref(v))


def test_one_compile_serves_every_value(device: str) -> None:
    plans = sys.modules["lower.realize"].plans
    n = fresh()
    x = Tensor(A, device=device)
    grew = []
    for v in (7, 29, 50):
        before, misses = compiled(), plans.misses
        nv = n.bind(v)
        out = run(device, lambda nv=nv: ((x[:nv] * 3 + Tensor.ones(nv, 4)).sum(1)).softmax())
        np.testing.assert_allclose(out, softmax_np((A[:v] * 3 + 1).sum(1)), rtol=1e-5, atol=1e-6)
        grew.append((compiled() - before, plans.misses - misses))
    assert grew[0][0] >= 1 and grew[0][1] == 1  # the first value compiles (one new plan)
    assert grew[1:] == [(0, 0), (0, 0)]  # the others reuse the plan and the kernels


def test_result_shape_is_bound_and_reusable(device: str) -> None:
    n = fresh()
    with Context(DEVICE=device):
        y = (Tensor(A, device=device)[:n.bind(9)] + 1).realize()
        assert y.is_realized and y.shape[0].unbind() == (n, 9)
        np.testing.assert_allclose((y * 2).sum(0).numpy(), ((A[:9] + 1) * 2).sum(0), rtol=1e-5)


def test_unbound_variable_at_realize() -> None:
    n = Variable("unbound_n", 1, 10)
    t = Tensor.ones(n) + 1  # building a graph needs no value ...
    with pytest.raises(VariableError, match=r"variable 'unbound_n' is unbound; bind it.*\.bind\(value\)"):
        t.realize()  # ... running it does


def test_value_outside_range() -> None:
    with pytest.raises(VariableError, match=r"variable 'r' = 11 is outside its range \[1, 10\]"):
        Variable("r", 1, 10).bind(11)
    with pytest.raises(VariableError, match=r"variable 'r' takes an int"):
        Variable("r", 1, 10).bind(2.5)  # type: ignore[arg-type]  # checked at run time


def test_shrink_past_the_tensor_at_the_bound_value() -> None:
    n = Variable("big", 1, 100).bind(60)
    with pytest.raises(ShapeError, match=r"shrink: range \(0, big\) = \(0, 60\) on axis 0 is not inside \[0, 50\]"):
        Tensor(A)[:n]


def test_two_values_in_one_realize() -> None:
    n = Variable("two", 1, 10)
    a, b = Tensor.ones(n.bind(3)), Tensor.ones(n.bind(4))
    with pytest.raises(VariableError, match=r"variable 'two' is bound to two values, 3 and 4"):
        a.realize(b)
    with pytest.raises(VariableError, match=r"bound to two values"):
        (a.sum() + b.sum()).realize()


@pytest.mark.parametrize(("what", "op"), [
    ("empty", lambda n: Tensor.empty(n)),
    ("rand", lambda n: Tensor.rand(n)),
    ("repeat", lambda n: Tensor.ones(2).repeat(n)),
    ("arange", lambda n: Tensor.arange(n)),
    ("item", lambda n: Tensor.ones(n).item()),
    ("len", lambda n: len(Tensor.ones(n))),
])
def test_ops_that_need_a_concrete_shape(what: str, op: Callable[[UOp], object]) -> None:
    with pytest.raises(VariableError, match=rf"{what}.* needs? a concrete"):
        op(Variable("c", 1, 10).bind(4))


def test_traced_realize_binds_results_too() -> None:
    """TRACE=1 schedules afresh (no plan replay); its results carry the bound shape and the right values."""
    n = fresh()
    with Context(TRACE=1):
        y = (Tensor(A)[:n.bind(11)] * 2).realize()
        assert y.shape[0].unbind() == (n, 11)
        np.testing.assert_allclose(y.numpy(), A[:11] * 2, rtol=1e-6)
        np.testing.assert_allclose(y.sum(0).numpy(), (A[:11] * 2).sum(0), rtol=1e-5)
