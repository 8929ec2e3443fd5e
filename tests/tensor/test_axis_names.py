"""numpy's and torch's spellings of axis arguments (axis= / dim=, keepdims= / keepdim=), and torch's max(dim) /
min(dim) values-and-indices form, checked against torch (CPU) and numpy."""

from __future__ import annotations

import numpy as np
import pytest

from tensor import Tensor
from tensor.reduce import ValuesIndices

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4, 5)).astype(np.float32)
# ties and nans in one row each: torch's index is the first maximum (or the first nan)
TIES = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [np.nan, 1, np.nan, 5], [-1, -4, -4, -1]], dtype=np.float32)
INTS = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [-5, 7, 7, -5]], dtype=np.int32)
BOOLS = np.array([[True, False, True], [False, False, False]])


def close(got: Tensor, want: object) -> None:
    w = want.numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    np.testing.assert_allclose(got.numpy(), w, rtol=1e-5, atol=1e-5, equal_nan=True)


# name => (a call with numpy's spelling, the same with torch's spelling)
SPELLINGS = {
    "sum": (lambda t: t.sum(axis=1, keepdims=True), lambda t: t.sum(dim=1, keepdim=True)),
    "prod": (lambda t: t.prod(axis=(0, 2)), lambda t: t.prod(dim=(0, 2))),
    "mean": (lambda t: t.mean(axis=-1, keepdims=True), lambda t: t.mean(dim=-1, keepdim=True)),
    "var": (lambda t: t.var(axis=0), lambda t: t.var(dim=0)),
    "std": (lambda t: t.std(axis=2, keepdims=True), lambda t: t.std(dim=2, keepdim=True)),
    "any": (lambda t: (t > 0).any(axis=1), lambda t: (t > 0).any(dim=1)),
    "all": (lambda t: (t > -3).all(axis=1, keepdims=True), lambda t: (t > -3).all(dim=1, keepdim=True)),
    "max": (lambda t: t.max(axis=1), lambda t: t.max(dim=1).values),
    "min": (lambda t: t.min(axis=(1, 2)), lambda t: t.min((1, 2))),
    "argmax": (lambda t: t.argmax(axis=1, keepdims=True), lambda t: t.argmax(dim=1, keepdim=True)),
    "argmin": (lambda t: t.argmin(axis=0), lambda t: t.argmin(dim=0)),
    "logsumexp": (lambda t: t.logsumexp(axis=2), lambda t: t.logsumexp(dim=2)),
    "softmax": (lambda t: t.softmax(axis=0), lambda t: t.softmax(dim=0)),
    "log_softmax": (lambda t: t.log_softmax(axis=1), lambda t: t.log_softmax(dim=1)),
    "cumsum": (lambda t: t.cumsum(axis=2), lambda t: t.cumsum(dim=2)),
    "flip": (lambda t: t.flip(axis=(0, 2)), lambda t: t.flip(dims=(0, 2))),
    "squeeze": (lambda t: t[:, :1].squeeze(axis=1), lambda t: t[:, :1].squeeze(dim=1)),
    "unsqueeze": (lambda t: t.unsqueeze(axis=-1), lambda t: t.unsqueeze(dim=-1)),
    "cat": (lambda t: Tensor.cat(t, t, axis=1), lambda t: Tensor.cat(t, t, dim=1)),
    "stack": (lambda t: Tensor.stack(t, t, axis=2), lambda t: Tensor.stack(t, t, dim=2)),
    "split": (lambda t: t.split(2, axis=1)[1], lambda t: t.split(2, dim=1)[1]),
    "chunk": (lambda t: t.chunk(2, axis=2)[0], lambda t: t.chunk(2, dim=2)[0]),
}

# the torch call each one mirrors, for the values
TORCH = {
    "sum": lambda x: x.sum(dim=1, keepdim=True), "prod": lambda x: x.prod(2).prod(0),
    "mean": lambda x: x.mean(dim=-1, keepdim=True), "var": lambda x: x.var(dim=0),
    "std": lambda x: x.std(dim=2, keepdim=True), "any": lambda x: (x > 0).any(dim=1),
    "all": lambda x: (x > -3).all(dim=1, keepdim=True), "max": lambda x: x.max(dim=1).values,
    "min": lambda x: x.amin(dim=(1, 2)), "argmax": lambda x: x.argmax(dim=1, keepdim=True),
    "argmin": lambda x: x.argmin(dim=0), "logsumexp": lambda x: x.logsumexp(dim=2),
    "softmax": lambda x: x.softmax(dim=0), "log_softmax": lambda x: x.log_softmax(dim=1),
    "cumsum": lambda x: x.cumsum(dim=2), "flip": lambda x: x.flip(dims=(0, 2)),
    "squeeze": lambda x: x[:, :1].squeeze(dim=1), "unsqueeze": lambda x: x.unsqueeze(dim=-1),
    "cat": lambda x: torch.cat([x, x], dim=1), "stack": lambda x: torch.stack([x, x], dim=2),
    "split": lambda x: x.split(2, dim=1)[1], "chunk": lambda x: x.chunk(2, dim=2)[0],
}


@pytest.mark.parametrize("name", SPELLINGS)
def test_both_spellings_agree_with_torch(name: str) -> None:
    numpy_style, torch_style = SPELLINGS[name]
    want = TORCH[name](torch.from_numpy(A))
    close(numpy_style(Tensor(A)), want)
    close(torch_style(Tensor(A)), want)


@pytest.mark.parametrize("call", [
    lambda t: t.sum(1, dim=1), lambda t: t.sum(axis=1, dim=1), lambda t: t.mean(0, keepdim=True, keepdims=True),
    lambda t: t.max(dim=1, axis=1), lambda t: t.argmax(axis=0, dim=0), lambda t: t.cumsum(0, dim=1),
    lambda t: t.softmax(axis=0, dim=0), lambda t: Tensor.cat(t, t, dim=0, axis=0), lambda t: t.flip(axis=0, dims=0),
    lambda t: t.unsqueeze(0, axis=0), lambda t: t.split(1, 0, axis=0), lambda t: t.logsumexp(keepdim=1, keepdims=1),
], ids=["sum-pos", "sum", "mean-keep", "max", "argmax", "cumsum", "softmax", "cat", "flip", "unsqueeze", "split",
        "logsumexp-keep"])
def test_both_spellings_at_once_is_a_type_error_naming_both(call: object) -> None:
    names = "(axis|dim|keepdim|keepdims|dims)"
    with pytest.raises(TypeError, match=rf"got both {names}= and {names}="):
        call(Tensor(A))  # type: ignore[operator]


@pytest.mark.parametrize("data", [TIES, INTS, BOOLS, A[0]], ids=["ties-nan", "int", "bool", "random"])
@pytest.mark.parametrize("fn", ["max", "min"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_dim_is_values_and_indices_as_torch(data: np.ndarray, fn: str, dim: int, keepdim: bool) -> None:
    want = getattr(torch.from_numpy(data), fn)(dim, keepdim=keepdim)
    got = getattr(Tensor(data), fn)(dim, keepdim=keepdim)
    assert isinstance(got, ValuesIndices) and isinstance(got, tuple)
    values, indices = got  # unpacks like torch.return_types.max
    close(values, want.values)
    np.testing.assert_array_equal(indices.numpy(), want.indices.numpy())
    assert indices.dtype.name == "int64" and values.dtype is Tensor(data).dtype
    by_name = getattr(Tensor(data), fn)(dim=dim, keepdim=keepdim)
    np.testing.assert_array_equal(by_name.indices.numpy(), want.indices.numpy())


def test_max_min_without_dim_and_with_axis_give_values_only() -> None:
    t, x = Tensor(A), torch.from_numpy(A)
    assert isinstance(t.max(), Tensor) and t.max().shape == ()
    close(t.max(), x.max())
    close(t.min(), x.min())
    assert isinstance(t.max(axis=1), Tensor)
    close(t.max(axis=1, keepdims=True), A.max(1, keepdims=True))
    close(t.min((0, 2)), A.min((0, 2)))  # a tuple of axes: values (torch.amin)


def test_max_min_of_another_tensor_is_elementwise_as_torch() -> None:
    b = RNG.standard_normal((4, 5)).astype(np.float32)
    close(Tensor(A).max(Tensor(b)), torch.max(torch.from_numpy(A), torch.from_numpy(b)))
    close(Tensor(A).min(Tensor(b)), torch.min(torch.from_numpy(A), torch.from_numpy(b)))
    with pytest.raises(TypeError, match="takes no axis"):
        Tensor(A).max(Tensor(b), keepdim=True)


def test_max_dim_values_carry_gradients() -> None:
    t = Tensor(TIES[[0, 3]], requires_grad=True)
    x = torch.tensor(TIES[[0, 3]], requires_grad=True)
    t.max(1).values.sum().backward()
    x.max(1).values.sum().backward()
    assert t.grad is not None
    # torch sends the gradient to the chosen index; a sum of maxima here splits it among ties, both are valid
    # subgradients, so only the total per row is compared
    np.testing.assert_allclose(t.grad.numpy().sum(1), x.grad.numpy().sum(1))


def test_unsqueeze_needs_an_axis() -> None:
    with pytest.raises(TypeError, match="unsqueeze"):
        Tensor(A).unsqueeze()


def test_defaults_unchanged() -> None:
    t = Tensor(A)
    close(t.cumsum(), A.cumsum(0))
    close(t.cumsum(None), A.cumsum())
    close(t.softmax(), torch.from_numpy(A).softmax(-1))
    close(Tensor.cat(t, t), np.concatenate([A, A]))
    close(Tensor.stack(t, t), np.stack([A, A]))


def test_indices_along_a_symbolic_axis_are_a_clear_error() -> None:
    from rewrite.errors import VariableError
    from tensor import Variable

    x = Tensor(A[0])
    n = Variable("n", 1, 4).bind(3)
    with pytest.raises(VariableError, match=r"max\(dim\): positions along a symbolic axis"):
        x[:n].max(0)
    np.testing.assert_allclose(x[:n].max(axis=0).numpy(), A[0][:3].max(0))
    values, indices = x[:n].max(1)  # a concrete axis of a symbolic tensor
    np.testing.assert_allclose(values.numpy(), A[0][:3].max(1))
    np.testing.assert_array_equal(indices.numpy(), A[0][:3].argmax(1))
