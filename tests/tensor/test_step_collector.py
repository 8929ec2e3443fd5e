"""An eager training step's own graph building (backward, the optimizer's update, a realize) runs with Python's
cyclic collector paused (rewrite.engine.collector_paused), so young collections do not traverse the step's live
graph again and again; the collector is on again after each, errors included, and the step's values are
unchanged (checked against numpy)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from rewrite.errors import GradientError
from tensor import Tensor
from tensor.optim import SGD


@contextmanager
def _collections(threshold: int = 50) -> Iterator[list[int]]:
    """Count the collector's runs in the block, with young collections made frequent."""
    old = gc.get_threshold()
    seen: list[int] = []

    def cb(phase: str, info: dict) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.set_threshold(threshold, 10, 10)
    gc.callbacks.append(cb)
    try:
        yield seen
    finally:
        gc.callbacks.remove(cb)
        gc.set_threshold(*old)


def _count(fn: Callable[[], object]) -> int:
    with _collections() as seen:
        fn()
    return len(seen)


def _deep(w: Tensor, n: int = 150) -> Tensor:
    h = w
    for k in range(n):
        h = (h * 0.99 + 0.01 * k).relu() + h * 1e-3
    return h.sum()


def test_backward_step_and_realize_run_with_the_collector_paused() -> None:
    assert gc.isenabled()
    rng = np.random.default_rng(0)
    w0 = rng.uniform(0.5, 1.0, (8,))
    w = Tensor(w0, requires_grad=True)
    opt = SGD([w], lr=0.01)
    holder: list[Tensor] = []
    assert _count(lambda: holder.append(_deep(w))) > 5  # the forward: user code, collected as usual
    loss = holder[0]
    assert _count(loss.backward) <= 1  # at most one young collection, as the collector comes back on
    assert gc.isenabled()
    assert _count(lambda: opt.step(loss)) <= 1
    assert gc.isenabled()
    # the values: d/dw of the same function in numpy (forward-mode: the function is elementwise, then summed)
    h, dh = w0.copy(), np.ones_like(w0)
    for k in range(150):
        pre = h * 0.99 + 0.01 * k
        h, dh = np.maximum(pre, 0) + h * 1e-3, (pre > 0) * 0.99 * dh + 1e-3 * dh
    np.testing.assert_allclose(loss.item(), h.sum(), rtol=1e-12)
    np.testing.assert_allclose(w.numpy(), w0 - 0.01 * dh, rtol=1e-12)


def test_collector_back_on_after_errors() -> None:
    x = Tensor(np.ones(3))  # requires no gradient: backward refuses
    with pytest.raises(GradientError):
        (x * 2).sum().backward()
    assert gc.isenabled()
    w = Tensor(np.ones(3), requires_grad=True)
    with pytest.raises(GradientError):
        SGD([w], lr=0.1).step()  # no gradient yet
    assert gc.isenabled()
