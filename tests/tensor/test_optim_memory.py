"""Training memory: an optimizer step writes parameters and state in place (the same buffers every step), the
live buffer count and the process's resident memory stay flat over hundreds of steps."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lower import buffers as registry
from tensor.modules import Linear, Sequential, cross_entropy
from tensor.optim import SGD, AdamW, Optimizer
from tensor.tensor import Tensor
from tests.tensor.util import rss_mb as _rss_mb


def _mlp_steps(opt_cls: Callable[..., Optimizer], steps: int,
               probe: int) -> tuple[list, list, dict[int, float], dict[int, int]]:
    Tensor.manual_seed(0)
    model = Sequential(Linear(64, 32), Tensor.relu, Linear(32, 4))
    params = model.parameters()
    opt = opt_cls(params, lr=1e-2)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((16, 64)).astype(np.float32)).realize()
    y = Tensor(rng.integers(0, 4, 16).astype(np.int32)).realize()
    before = [p.uop for p in params]
    rss: dict[int, float] = {}
    live: dict[int, int] = {}
    for i in range(steps):
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)
        loss.item()
        if (i + 1) % probe == 0:
            rss[i + 1], live[i + 1] = _rss_mb(), len(registry._data)
    return before, [p.uop for p in params], rss, live


def test_adamw_updates_in_place_and_memory_stays_flat() -> None:
    before, after, rss, live = _mlp_steps(AdamW, 300, 50)
    assert all(a is b for a, b in zip(before, after, strict=True)), "parameters must keep their buffers"
    assert live[300] <= live[50], f"live buffers grew: {live}"
    assert rss[300] - rss[50] < 16.0, f"RSS grew by {rss[300] - rss[50]:.1f} MB over 250 steps: {rss}"


def test_sgd_nesterov_keeps_its_buffers() -> None:
    """Cross-reading state (the update reads the new momentum, the momentum the old parameter with weight decay):
    the scheduler breaks the cycle with one temporary; the parameters still keep their buffers (test_optim checks
    the values against numpy and torch)."""
    before, after, _, live = _mlp_steps(lambda ps, lr: SGD(ps, lr=lr, momentum=0.9, nesterov=True,
                                                            weight_decay=0.01), 40, 20)
    assert all(a is b for a, b in zip(before, after, strict=True))
    assert live[40] <= live[20]
