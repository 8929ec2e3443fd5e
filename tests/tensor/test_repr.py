"""What print(t) shows: values for a realized tensor, the shape for an unrealized one, and never a realize."""

from __future__ import annotations

import numpy as np

from tensor import Tensor, Variable, dtypes

CASES = [  # tensor => repr
    (lambda: Tensor([[1.0, 2.0], [3.0, 4.0]]),
     "Tensor([[1., 2.],\n        [3., 4.]], device='cpu', dtype=dtypes.float32)"),
    (lambda: Tensor([True, False]), "Tensor([ True, False], device='cpu', dtype=dtypes.bool)"),
    (lambda: Tensor([1, -2, 3], dtype=dtypes.int8), "Tensor([ 1, -2,  3], device='cpu', dtype=dtypes.int8)"),
    (lambda: Tensor(2.5), "Tensor(2.5, device='cpu', dtype=dtypes.float32)"),  # a number: shown without a kernel
    (lambda: Tensor(np.zeros((0, 3), np.float32)), "Tensor([], device='cpu', dtype=dtypes.float32)"),
    (lambda: Tensor([1.0, 2.0], requires_grad=True),
     "Tensor([1., 2.], device='cpu', dtype=dtypes.float32, requires_grad=True)"),
    (lambda: Tensor([1.0, 2.0]) + 1, "Tensor(<unrealized>, shape=(2,), device='cpu', dtype=dtypes.float32)"),
    (lambda: (Tensor([1.0, 2.0]) + 1).realize(), "Tensor([2., 3.], device='cpu', dtype=dtypes.float32)"),
    (lambda: Tensor.zeros(2, 3, dtype=dtypes.float16),
     "Tensor(<unrealized>, shape=(2, 3), device='cpu', dtype=dtypes.float16)"),
]


def test_repr_table() -> None:
    for make, want in CASES:
        t = make()
        assert repr(t) == want
        assert str(t) == want


def test_large_tensors_are_summarized_as_torch() -> None:
    s = repr(Tensor.arange(5000).realize())
    assert s == "Tensor([   0,    1,    2, ..., 4997, 4998, 4999], device='cpu', dtype=dtypes.int32)"
    assert len(repr(Tensor(np.ones((300, 300), np.float32)))) < 1000


def test_printing_does_not_realize() -> None:
    t = Tensor([1.0, 2.0]) * 3
    before = t.uop
    repr(t)
    assert not t.is_realized and t.uop is before


def test_symbolic_shape_shows_values_at_the_bound_size() -> None:
    n = Variable("n", 1, 10).bind(3)
    t = (Tensor(np.arange(10, dtype=np.float32))[:n] * 2).realize()
    assert repr(t) == "Tensor([0., 2., 4.], shape=(n,), device='cpu', dtype=dtypes.float32)"
