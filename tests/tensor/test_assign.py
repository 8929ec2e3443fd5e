"""assign (STORE then AFTER) and the in-place operators: the realized buffer is written in place, lazy tensors
keep the values they were made with (value semantics), values that read the target are computed right, and
torch's in-place results and dtype rules hold."""

from __future__ import annotations

import numpy as np
import pytest

from lower.schedule import schedule
from rewrite import Ops, UOp
from rewrite.errors import DTypeError, GradientError, ShapeError
from tensor import Tensor
from tensor.autograd import no_grad


def realized(a: np.ndarray | list, device: str = "cpu") -> Tensor:
    return Tensor(np.asarray(a, dtype=np.float32), device=device).realize()


@pytest.mark.parametrize("device", ["cpu", "python"])
def test_assign_writes_the_same_buffer(device: str) -> None:
    t = realized([1, 2, 3], device)
    buf = t.uop
    t.assign(t * 2)
    assert t.uop.op is Ops.AFTER
    np.testing.assert_array_equal(t.numpy(), [2, 4, 6])
    assert t.uop is buf  # no new buffer: the old one holds the new data


def test_raw_after_store_realizes_the_stored_value() -> None:
    """The spec's assign written by hand: AFTER(b, STORE(b, v)) realizes to v (it used to drop the STORE)."""
    t = realized([1, 2, 3])
    b = t.uop
    out = Tensor._wrap(UOp(Ops.AFTER, (b, UOp(Ops.STORE, (b, (t + 1).uop)))), t.device)
    np.testing.assert_array_equal(out.numpy(), [2, 3, 4])
    np.testing.assert_array_equal(t.numpy(), [2, 3, 4])
    assert out.uop is b


def test_lazy_readers_keep_the_old_value() -> None:
    t = realized([1, 2, 3])
    a = t + 0  # lazy, reads the buffer
    b = t.exp()  # lazy as well
    alias = Tensor(t)  # the same buffer: an alias, sees the update
    t.assign(t * 2).realize()
    np.testing.assert_array_equal(a.numpy(), [1, 2, 3])
    np.testing.assert_allclose(b.numpy(), np.exp([1, 2, 3]), rtol=1e-6)
    np.testing.assert_array_equal(alias.numpy(), [2, 4, 6])


def test_reader_in_the_same_realize_runs_before_the_store() -> None:
    t = realized([1, 2, 3])
    a = t * 10
    t.assign(t + 1)
    Tensor.realize(t, a)  # t's graph first in topological order, yet a must read the old data
    np.testing.assert_array_equal(a.numpy(), [10, 20, 30])
    np.testing.assert_array_equal(t.numpy(), [2, 3, 4])


def test_value_reading_other_elements_is_computed_first() -> None:
    """A flip, a matmul and a shift read elements other than the one written: computed into a temporary, then
    stored, so no element is read after it was overwritten."""
    x = realized([1, 2, 3, 4])
    x.assign(x.flip(0))
    np.testing.assert_array_equal(x.numpy(), [4, 3, 2, 1])
    m = realized(np.arange(9).reshape(3, 3))
    m.assign(m @ m)
    np.testing.assert_array_equal(m.numpy(), np.arange(9.0).reshape(3, 3) @ np.arange(9.0).reshape(3, 3))
    s = realized([1, 2, 3, 4])
    s.assign(s[1:].pad(((0, 1),)) + s)
    np.testing.assert_array_equal(s.numpy(), [3, 5, 7, 4])
    c = realized([1, 2, 3])
    c.assign(c - c.sum())
    np.testing.assert_array_equal(c.numpy(), [-5, -4, -3])


def test_chained_assignments_and_their_readers() -> None:
    y = realized([1, 2, 3])
    y.assign(y.flip(0))
    z = y * 10  # reads the first assignment's value
    y.assign(y + 1)
    np.testing.assert_array_equal(y.numpy(), [4, 3, 2])
    np.testing.assert_array_equal(z.numpy(), [30, 20, 10])
    w = y + 0  # made after the realize: reads the buffer
    y.assign(y * 0)
    y.realize()
    np.testing.assert_array_equal(w.numpy(), [4, 3, 2])


def test_lazy_tensor_of_the_assignment_reads_the_buffer_later() -> None:
    t = realized([1, 2])
    t.assign(t + 1)
    u = t * 3  # a graph over the AFTER
    t.realize()
    t.assign(t + 100).realize()  # must not disturb u, which means (old t + 1) * 3
    np.testing.assert_array_equal(u.numpy(), [6, 9])
    np.testing.assert_array_equal(t.numpy(), [102, 103])


def test_assign_repeated_does_not_reuse_a_done_store() -> None:
    """The same graph AFTER(b, STORE(b, b + 1)) twice is two increments (hash-consing makes it one UOp)."""
    t = realized([0, 0])
    for _ in range(3):
        t.assign(t + 1).realize()
    np.testing.assert_array_equal(t.numpy(), [3, 3])


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_inplace_operators_match_torch(op: str) -> None:
    torch = pytest.importorskip("torch")  # the oracle, where installed
    a = np.array([[1.5, -2.0, 3.0], [0.5, 4.0, -1.0]], dtype=np.float32)
    y = np.array([2.0, -0.5, 4.0], dtype=np.float32)
    t, tt_ = realized(a), torch.tensor(a)
    buf = t.uop
    ns: dict = {"t": t, "y": Tensor(y), "tt": tt_, "ty": torch.tensor(y)}
    exec(f"t {op} y; tt {op} ty", ns)
    assert ns["t"] is t  # the same object, updated
    np.testing.assert_allclose(t.numpy(), ns["tt"].numpy(), rtol=1e-6)
    assert t.uop is buf


def test_inplace_on_int_and_scalar_and_lazy() -> None:
    x = Tensor([1, 2, 3]).realize()
    x *= 2
    x -= 1
    x //= 2
    np.testing.assert_array_equal(x.numpy(), [0, 1, 2])
    lazy = Tensor.ones(3)
    lazy += 2  # no buffer yet: the tensor becomes the value
    np.testing.assert_array_equal(lazy.numpy(), [3, 3, 3])


def test_dtype_shape_and_gradient_errors() -> None:
    x = Tensor([1, 2, 3]).realize()
    with pytest.raises(DTypeError):
        x += 1.5
    with pytest.raises(DTypeError):
        x /= 2
    with pytest.raises(DTypeError):
        x.assign(Tensor([1.0, 2.0, 3.0]))
    f = realized([1, 2, 3])
    with pytest.raises(ShapeError):
        f.assign(Tensor([1.0, 2.0]))
    f.assign(Tensor([5.0]))  # broadcast, as torch's copy_
    np.testing.assert_array_equal(f.numpy(), [5, 5, 5])
    f.assign(Tensor([1, 2, 3]))  # an int value is cast to the float tensor
    np.testing.assert_array_equal(f.numpy(), [1, 2, 3])
    w = Tensor([1.0, 2.0], requires_grad=True).realize()
    with pytest.raises(GradientError):
        w.assign(w * 2)
    with no_grad():
        w -= 1
    np.testing.assert_array_equal(w.numpy(), [0, 1])
    with pytest.raises(TypeError):
        f.assign("nope")


def test_store_kernel_writes_into_the_target() -> None:
    t = realized([1, 2, 3])
    buf = t.uop
    t.assign(t * 2)
    items, outs = schedule([t.uop])
    assert [it.kind for it in items] == ["kernel"] and items[0].bufs[0] is buf and outs[t.uop] is buf
