"""Indexing by data (x[tensor], x[list], x[mask]) against numpy, with gradients against torch; the read is an
INDEX (O(indices x row)), not a reduction over the indexed axis; Embedding reads rows the same way; one_hot,
masked_fill, tril/triu and clamp(min=, max=) against torch."""

from __future__ import annotations

import numpy as np
import pytest

from lower import schedule
from rewrite.errors import DTypeError, ShapeError
from rewrite.ops import Ops
from tensor import Tensor
from tensor.modules import Embedding


def _grad(t: Tensor) -> np.ndarray:
    assert t.grad is not None
    return t.grad.numpy()


A = np.arange(60, dtype=np.float32).reshape(3, 4, 5)

CASES = [
    ([0, 2],), (np.array([2, -1]),), (slice(None), [1, 3]), (slice(None), [1, 3], [0, 4]),
    ([0, 1], slice(None), [2, 3]), (A[..., 0] > 20,), (1, [0, 3]), (Ellipsis, [4, 0]),
    (np.array([[0, 1], [2, 2]]),), (slice(None), None, [1, 2]), (slice(None), A[0] > 7), ([2, 2, 2],),
]


@pytest.mark.parametrize("idx", CASES, ids=[str(i) for i in range(len(CASES))])
@pytest.mark.parametrize("as_tensor", [False, True])
def test_advanced_indexing_matches_numpy(idx: tuple, as_tensor: bool) -> None:
    conv = tuple(Tensor(i) if as_tensor and isinstance(i, (list, np.ndarray)) else i for i in idx)
    got = Tensor(A)[conv if len(conv) > 1 else conv[0]].numpy()
    want = A[idx if len(idx) > 1 else idx[0]]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_index_out_of_range_and_bad_dtype() -> None:
    with pytest.raises(IndexError, match="out of range"):
        Tensor(A)[[0, 3]]
    with pytest.raises(IndexError, match="out of range"):
        Tensor(A)[Tensor([-4]).realize()]
    with pytest.raises(IndexError):
        Tensor(A)[Tensor([0.5])]
    with pytest.raises(IndexError):
        Tensor(A)[np.ones((2, 2), dtype=bool)]  # the mask does not match the axes


def test_tensor_index_is_a_gather_not_a_reduction() -> None:
    """30k x 256 table, 1024 positions: one kernel, its only loops are over the positions and the row."""
    table = Tensor.empty(30000, 256).realize()
    ids = Tensor(np.random.default_rng(0).integers(0, 30000, 1024).astype(np.int32)).realize()
    items, _ = schedule([table[ids].uop])
    assert len(items) == 1
    ast = items[0].ast
    assert ast is not None
    assert not any(u.op is Ops.REDUCE for u in ast.toposort())
    sizes = sorted(int(u.src[0].value) for u in ast.toposort() if u.op is Ops.RANGE)
    assert 30000 not in sizes and np.prod(sizes) <= 1024 * 256


def test_indexing_gradient_matches_torch_with_duplicates() -> None:
    torch = pytest.importorskip("torch")  # the oracle, where installed
    w = np.random.default_rng(1).standard_normal((6, 3)).astype(np.float32)
    idx = [4, 1, 4, -1, 0]
    x = Tensor(w, requires_grad=True)
    (x[idx] * Tensor(np.arange(15, dtype=np.float32).reshape(5, 3))).sum().backward()
    tx = torch.tensor(w, requires_grad=True)
    (tx[idx] * torch.arange(15, dtype=torch.float32).reshape(5, 3)).sum().backward()
    np.testing.assert_allclose(_grad(x), tx.grad.numpy(), rtol=1e-6)  # type: ignore[union-attr]


def test_embedding_reads_rows_and_trains_like_torch() -> None:
    torch = pytest.importorskip("torch")  # the oracle, where installed
    emb = Embedding(10, 4)
    ids = np.array([[1, 9, 1], [0, 3, 3]], dtype=np.int32)
    out = emb(Tensor(ids))
    assert any(u.op is Ops.INDEX for u in out.uop.toposort())
    temb = torch.nn.Embedding(10, 4)
    with torch.no_grad():
        temb.weight.copy_(torch.tensor(emb.weight.numpy()))
    tout = temb(torch.tensor(ids, dtype=torch.int64))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy())
    out = emb(Tensor(ids))
    (out * out).sum().backward()
    (tout * tout).sum().backward()
    assert temb.weight.grad is not None
    np.testing.assert_allclose(_grad(emb.weight), temb.weight.grad.numpy(), rtol=1e-5)


def test_one_hot_masked_fill_tril_triu_clamp() -> None:
    torch = pytest.importorskip("torch")  # the oracle, where installed
    c = np.array([[0, 3], [2, 2]], dtype=np.int64)
    np.testing.assert_array_equal(Tensor(c).one_hot(5).numpy(), torch.nn.functional.one_hot(torch.tensor(c), 5))
    np.testing.assert_array_equal(Tensor(c).one_hot().numpy(), torch.nn.functional.one_hot(torch.tensor(c)))
    with pytest.raises(IndexError):
        Tensor(c).realize().one_hot(3)
    with pytest.raises(DTypeError):
        Tensor([1.0]).one_hot(2)
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    m = x > 0
    np.testing.assert_array_equal(Tensor(x).masked_fill(Tensor(m), -1e9).numpy(),
                                  torch.tensor(x).masked_fill(torch.tensor(m), -1e9).numpy())
    np.testing.assert_array_equal(Tensor(x).masked_fill(Tensor(m[0]), 2.0).numpy(),
                                  torch.tensor(x).masked_fill(torch.tensor(m[0]), 2.0).numpy())
    with pytest.raises(DTypeError):
        Tensor(x).masked_fill(Tensor(x), 0.0)
    with pytest.raises(ShapeError):
        Tensor(x).masked_fill(Tensor(np.ones((2, 4), dtype=bool)), 0.0)
    for d in (-1, 0, 2):
        np.testing.assert_array_equal(Tensor(x).tril(d).numpy(), torch.tensor(x).tril(d).numpy())
        np.testing.assert_array_equal(Tensor(x).triu(d).numpy(), torch.tensor(x).triu(d).numpy())
    np.testing.assert_array_equal(Tensor(x).clamp(min=0).numpy(), torch.tensor(x).clamp(min=0).numpy())
    np.testing.assert_array_equal(Tensor(x).clamp(max=0.1).numpy(), torch.tensor(x).clamp(max=0.1).numpy())
    np.testing.assert_array_equal(Tensor(x).clamp(-0.5, 0.5).numpy(), torch.tensor(x).clamp(-0.5, 0.5).numpy())
    with pytest.raises(ValueError):
        Tensor(x).clamp()
    t = Tensor(x, requires_grad=True)
    t.masked_fill(Tensor(m), 0.0).tril().clamp(max=0.3).sum().backward()
    tt_ = torch.tensor(x, requires_grad=True)
    tt_.masked_fill(torch.tensor(m), 0.0).tril().clamp(max=0.3).sum().backward()
    np.testing.assert_allclose(_grad(t), tt_.grad.numpy())  # type: ignore[union-attr]
