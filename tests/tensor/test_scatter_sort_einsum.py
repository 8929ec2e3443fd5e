"""scatter / scatter_reduce / __setitem__, sort / topk and einsum against torch, with gradients."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import ShapeError
from tensor import Tensor

torch = pytest.importorskip("torch")  # every test here checks against torch (CPU), the oracle where installed

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 5)).astype(np.float32)
IDX = np.array([[0, 4, 0], [1, 1, 1], [2, 3, 4]])  # duplicates in rows 0 and 1
SRC = rng.standard_normal((3, 3)).astype(np.float32)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_torch(reduce: str, include_self: bool) -> None:
    got = Tensor(X).scatter_reduce(1, Tensor(IDX), Tensor(SRC), reduce, include_self=include_self)
    want = torch.tensor(X).scatter_reduce(1, torch.tensor(IDX), torch.tensor(SRC), reduce, include_self=include_self)
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)


def test_scatter_add_gradient_and_errors() -> None:
    x, s = Tensor(X, requires_grad=True), Tensor(SRC, requires_grad=True)
    (x.scatter_add(1, Tensor(IDX), s) ** 2).sum().backward()
    tx, ts = torch.tensor(X, requires_grad=True), torch.tensor(SRC, requires_grad=True)
    (tx.scatter_add(1, torch.tensor(IDX), ts) ** 2).sum().backward()
    assert x.grad is not None and s.grad is not None and tx.grad is not None and ts.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5)
    np.testing.assert_allclose(s.grad.numpy(), ts.grad.numpy(), rtol=1e-5)
    with pytest.raises(IndexError):
        Tensor(X).scatter_add(1, Tensor(IDX + 3).realize(), Tensor(SRC))
    with pytest.raises(ShapeError):
        Tensor(X).scatter_add(1, Tensor(IDX[0]), Tensor(SRC))
    with pytest.raises(ValueError):
        Tensor(X).scatter_reduce(1, Tensor(IDX), Tensor(SRC), "median")


def test_scatter_matches_torch() -> None:
    idx = np.array([[0, 4, 2], [1, 3, 0]])
    got = Tensor(X).scatter(1, Tensor(idx), Tensor(SRC))
    np.testing.assert_array_equal(got.numpy(), torch.tensor(X).scatter(1, torch.tensor(idx), torch.tensor(SRC)))


def test_setitem_in_place_like_torch() -> None:
    t, tx = Tensor(X.copy()).realize(), torch.tensor(X.copy())
    buf = t.uop
    t[1] = 7.0
    tx[1] = 7.0
    t[:, 1:4:2] = Tensor(np.ones((3, 2), np.float32))
    tx[:, 1:4:2] = 1.0
    t[Tensor([0, 2]), 0] = -1.0
    tx[torch.tensor([0, 2]), 0] = -1.0
    t[t > 1.0] = 0.0
    tx[tx > 1.0] = 0.0
    t[..., -1] = Tensor([1.0, 2.0, 3.0])
    tx[..., -1] = torch.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(t.numpy(), tx.numpy())
    assert t.uop is buf
    with pytest.raises(ShapeError):
        t[0] = Tensor([1.0, 2.0])


@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_is_stable_like_torch(descending: bool, dim: int) -> None:
    a = rng.integers(0, 4, (4, 6)).astype(np.float32)
    v, i = Tensor(a).sort(dim=dim, descending=descending)
    tv, ti = torch.tensor(a).sort(dim=dim, descending=descending, stable=True)
    np.testing.assert_array_equal(v.numpy(), tv.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())


def test_topk_values_indices_and_gradient() -> None:
    a = rng.standard_normal((3, 7)).astype(np.float32)
    for largest in (True, False):
        v, i = Tensor(a).topk(3, largest=largest)
        tv, ti = torch.tensor(a).topk(3, largest=largest)
        np.testing.assert_array_equal(v.numpy(), tv.numpy())
        np.testing.assert_array_equal(i.numpy(), ti.numpy())
    x = Tensor(a, requires_grad=True)
    (x.topk(2)[0] * Tensor([[1.0, 2.0]])).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    (tx.topk(2)[0] * torch.tensor([[1.0, 2.0]])).sum().backward()
    assert x.grad is not None and tx.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
    with pytest.raises(ShapeError):
        Tensor(a).topk(8)


EINSUMS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
           ("ij->ji", [(3, 4)]), ("i,i->", [(5,), (5,)]), ("ij,jk", [(3, 4), (4, 2)]), ("ii", [(3, 3)]),
           ("i,j->ij", [(2,), (3,)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)])]


@pytest.mark.parametrize("formula,shapes", EINSUMS, ids=[f for f, _ in EINSUMS])
def test_einsum_matches_torch_with_gradients(formula: str, shapes: list) -> None:
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ours = [Tensor(a, requires_grad=True) for a in arrs]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrs]
    out, tout = Tensor.einsum(formula, *ours), torch.einsum(formula, *theirs)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    Tensor.einsum(formula, *ours).sum().backward()
    tout.sum().backward()
    for o, t in zip(ours, theirs, strict=True):
        assert o.grad is not None and t.grad is not None
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_einsum_errors() -> None:
    with pytest.raises(ValueError):
        Tensor.einsum("ij,jk->ik", Tensor(X))
    with pytest.raises(ShapeError):
        Tensor.einsum("ij,jk->ik", Tensor(X), Tensor(X))
    with pytest.raises(NotImplementedError):
        Tensor.einsum("...i->i", Tensor(X))
