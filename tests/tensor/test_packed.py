"""tensor.packed: a realized weight's panel copy (tensor.nn._panels) is made once and reused while the weight's
data is unchanged; every kind of write into the weight makes the next product pack it again. Values against
numpy (float64 products rounded to float32)."""

from __future__ import annotations

import gc

import numpy as np

from lower import buffers as registry
from lower.realize import plans
from tensor import Tensor, packed
from tensor.jit import jit
from tests.tensor.util import close

M, K, N = 1024, 128, 160  # M reuses of each panel: the copy pays (tensor.nn.PANEL_ROWS); N not whole panels


def _data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return (x.astype(np.float64) @ w.astype(np.float64)).astype(np.float32)


def _run(x: Tensor, w: Tensor) -> tuple[int, np.ndarray]:
    """Kernels run to build and realize x @ w, and its value."""
    before = plans.kernels_run
    y = (x @ w).realize()
    return plans.kernels_run - before, y.numpy()


def test_weight_packed_once_while_unchanged() -> None:
    xa, wa = _data(1, M, K), _data(2, K, N)
    x, w = Tensor(xa), Tensor(wa)
    first, y1 = _run(x, w)
    again, y2 = _run(x, w)
    assert (first, again) == (2, 1)  # the packing kernel and the product, then the product alone
    assert len(packed.kept(w.uop)) == 1
    close(y1, _product(xa, wa), rtol=1e-4, atol=1e-4)
    close(y2, _product(xa, wa), rtol=1e-4, atol=1e-4)


def test_every_write_packs_again() -> None:
    xa, wa = _data(3, M, K), _data(4, K, N)
    x, w = Tensor(xa), Tensor(wa)
    _run(x, w)
    v0 = registry.version(w.uop)
    writes = [("assign", lambda: w.assign(w * 2), lambda a: a * 2),
              ("iadd", lambda: w.__iadd__(1.5), lambda a: a + np.float32(1.5)),
              ("setitem", lambda: w.__setitem__((slice(0, 7), slice(3, 9)), 0.25), None),
              ("assign host data", lambda: w.assign(Tensor(wa[::-1].copy())), lambda a: wa[::-1].copy())]
    expect = wa
    for name, write, fn in writes:
        write()
        w.realize()
        if fn is None:
            expect = expect.copy()
            expect[0:7, 3:9] = 0.25
        else:
            expect = fn(expect)
        assert registry.version(w.uop) > v0, name
        v0 = registry.version(w.uop)
        n, y = _run(x, w)
        assert n == 2, name  # packed again
        close(y, _product(xa, expect), rtol=1e-4, atol=1e-4)
        assert _run(x, w)[0] == 1, name  # and kept again
    assert len(packed.kept(w.uop)) == 1  # the stale copies were dropped


def test_lazy_product_keeps_the_value_it_was_made_with() -> None:
    """A product built before the weight is overwritten reads the copy of the old data, as any lazy tensor reading
    the old buffer would (tensor.inplace's snapshots); one built after reads the new data."""
    xa, wa = _data(5, M, K), _data(6, K, N)
    x, w = Tensor(xa), Tensor(wa)
    _run(x, w)
    old = x @ w
    w.assign(w + 1).realize()
    new = x @ w
    close(old.numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
    close(new.numpy(), _product(xa, wa + 1), rtol=1e-4, atol=1e-4)


def test_gradients_reach_the_weight_through_its_copy() -> None:
    xa, wa = _data(7, M, K), _data(8, K, N)
    x, w = Tensor(xa), Tensor(wa)
    _run(x, w)
    y = x @ w
    assert w.uop not in y.uop.toposort()  # the product reads the kept copy
    (g,) = Tensor.gradient(y.sum(), w)
    close(g.numpy(), np.broadcast_to(xa.astype(np.float64).sum(0)[:, None], (K, N)).astype(np.float32),
          rtol=1e-4, atol=1e-3)
    w.requires_grad_()
    (y * y).sum().backward()
    assert w.grad is not None
    gy = 2 * _product(xa, wa).astype(np.float64)
    close(w.grad.numpy(), (xa.T.astype(np.float64) @ gy).astype(np.float32), rtol=1e-4, atol=1e-2)


def test_weight_that_needs_a_gradient_is_packed_in_the_graph() -> None:
    """A parameter being trained changes every step: its product packs it in the product's own schedule."""
    x, w = Tensor(_data(9, M, K)), Tensor(_data(10, K, N), requires_grad=True)
    assert _run(x, w)[0] == 2 and _run(x, w)[0] == 2
    assert packed.kept(w.uop) == []


def test_jit_packs_its_weight_argument_at_every_replay() -> None:
    """A jit capture records the packing kernel: its replays pack each call's weight, not a copy kept from the
    capture."""
    xa = _data(11, M, K)
    x = Tensor(xa)

    @jit
    def f(w: Tensor) -> Tensor:
        return x @ w

    for k in range(4):
        wa = _data(20 + k, K, N)
        close(f(Tensor(wa)).numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
    assert f.calls == 4


def test_copy_is_dropped_with_its_weight() -> None:
    x, w = Tensor(_data(12, M, K)), Tensor(_data(13, K, N))
    _run(x, w)
    (copy,) = packed.kept(w.uop)
    slot = registry.slot(w.uop)
    del w
    gc.collect()
    assert slot not in {s for s, _ in packed._cache}
    assert copy not in packed._by_packed


def test_jit_replay_sees_a_later_write_to_a_kept_weight() -> None:
    """A weight packed (and kept) before a jit capture: the capture still records its packing, so a replay after
    the weight is overwritten reads the new data."""
    xa, wa = _data(14, M, K), _data(15, K, N)
    x, w = Tensor(xa), Tensor(wa)
    _run(x, w)  # kept before the capture

    @jit
    def f(s: Tensor) -> Tensor:
        return (x @ w) * s

    one = Tensor(np.ones((1,), np.float32))
    for _ in range(3):
        close(f(one).numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
    w.assign(Tensor(wa * 3)).realize()
    close(f(one).numpy(), _product(xa, wa * 3), rtol=1e-4, atol=1e-4)
    assert f.calls == 4


def test_building_a_product_runs_nothing() -> None:
    """The packing is realized with the first product that reads it (one schedule), not when the product is built."""
    xa, wa = _data(16, M, K), _data(17, K, N)
    x, w = Tensor(xa), Tensor(wa)
    before = plans.kernels_run
    y = x @ w
    assert plans.kernels_run == before and packed.kept(w.uop) == []
    close(y.numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
    assert plans.kernels_run - before == 2 and len(packed.kept(w.uop)) == 1


def test_realize_that_also_writes_the_weight_keeps_no_stale_copy() -> None:
    """A product built before an assignment to its weight, realized together with it, reads the old data (its
    value when made); the copy it packed is of that old data, so it is not kept for the new data."""
    xa, wa = _data(18, M, K), _data(19, K, N)
    x, w = Tensor(xa), Tensor(wa)
    y = x @ w
    w.assign(w * 2)
    Tensor.realize(y, w)
    close(y.numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
    close((x @ w).numpy(), _product(xa, wa * 2), rtol=1e-4, atol=1e-4)


def test_jit_body_reading_a_pending_packing() -> None:
    """A product built (not realized) before a jit whose body builds the same product: the capture's two calls
    realize the same graphs (the pending packing is not realized along inside a capture)."""
    xa, wa = _data(20, M, K), _data(21, K, N)
    x, w = Tensor(xa), Tensor(wa)
    y = x @ w

    @jit
    def f(s: Tensor) -> Tensor:
        return (x @ w) * s

    one = Tensor(np.ones((1,), np.float32))
    for _ in range(4):
        close(f(one).numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
    close(y.numpy(), _product(xa, wa), rtol=1e-4, atol=1e-4)
