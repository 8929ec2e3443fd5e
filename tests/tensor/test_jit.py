"""tensor.jit: a captured training step replays the same numbers as the step run eagerly (bit for bit) and as the
numpy references of tests/tensor/test_optim.py, with a learning-rate schedule and a new batch at every call; what
cannot be replayed (new data made in the body, a different graph per call, a new argument shape) is a JitError."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

from lower.realize import plans
from rewrite.errors import JitError
from tensor import Tensor
from tensor.jit import jit
from tensor.optim import SGD, AdamW
from tests.tensor.test_optim import CONFIGS, LRS, _data, _loss_grad, _target

STEPS = 6
SCHEDULE = [LRS[k % len(LRS)] for k in range(STEPS)]


def _loss(ps: list[Tensor], tgts: list[Tensor]) -> Tensor:
    total = None
    for p, t in zip(ps, tgts, strict=True):
        term = ((p - t) ** 3 + p * p).sum()
        total = term if total is None else total + term
    assert total is not None
    return total


def _train(cls, kwargs, use_jit: bool) -> tuple[list[list[np.ndarray]], list[float], object]:
    ps = [Tensor(d, requires_grad=True) for d in _data(1)]
    opt = cls(ps, lr=SCHEDULE[0], **kwargs)

    def step(*tgts: Tensor) -> Tensor:
        opt.zero_grad()
        loss = _loss(ps, list(tgts))
        loss.backward()
        opt.step(loss)
        return loss

    run = jit(step) if use_jit else step
    history, losses = [], []
    for k, lr in enumerate(SCHEDULE):
        opt.lr = lr
        loss = run(*[Tensor(t) for t in _target(k)])  # a new batch (the targets) at every call
        losses.append(loss.item())
        history.append([p.numpy() for p in ps])
    return history, losses, opt


@pytest.mark.parametrize("name,cls,ref,kwargs,torch_name", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_replay_matches_eager_and_numpy(name, cls, ref, kwargs, torch_name):
    eager, eager_losses, _ = _train(cls, kwargs, use_jit=False)
    replayed, losses, opt = _train(cls, kwargs, use_jit=True)
    assert opt.steps == STEPS  # the replays count their steps (bias corrections, SGD's first-step dampening)
    assert losses == eager_losses
    for k, (a, b) in enumerate(zip(replayed, eager, strict=True)):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y, err_msg=f"{name} step {k}")
    ps = _data(1)
    states: list[dict] = [{} for _ in ps]
    for k, lr in enumerate(SCHEDULE):
        gs = _loss_grad(ps, _target(k))
        ps = [ref(p, g, st, k + 1, lr, **kwargs) for p, g, st in zip(ps, gs, states, strict=True)]
        for x, y in zip(replayed[k], ps, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14, err_msg=f"{name} step {k}")


def test_replay_launches_the_eager_kernels_and_refills_its_result():
    w = Tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    opt = AdamW([w], lr=0.1)

    @jit
    def step(x: Tensor) -> Tensor:
        opt.zero_grad()
        loss = (w * x).sum() ** 2
        loss.backward()
        opt.step(loss)
        return loss

    counts, results = [], []
    for k in range(4):
        before = plans.kernels_run
        results.append(step(Tensor(np.full((2, 3), k + 1.0))))
        values = results[-1].item()
        counts.append((plans.kernels_run - before, values))
    assert counts[0][0] > 0 and counts[2][0] == counts[3][0] == counts[1][0]
    assert results[2] is results[1] and results[3] is results[1]  # the second call's tensor, refilled
    assert len({v for _, v in counts}) == 4  # each call's own loss
    assert step.calls == 4


def test_new_data_made_in_the_body_is_an_error():
    w = Tensor(np.ones(3), requires_grad=True)
    opt = SGD([w], lr=0.1)
    rng = np.random.default_rng(0)

    @jit
    def step() -> Tensor:
        opt.zero_grad()
        loss = (w * Tensor(rng.standard_normal(3))).sum()  # a replay would freeze this data
        loss.backward()
        opt.step(loss)
        return loss

    step()
    with pytest.raises(JitError, match="differs between the first two calls"):
        step()


def test_a_different_graph_per_call_is_an_error():
    w = Tensor(np.ones(3), requires_grad=True)
    opt = SGD([w], lr=0.1)
    calls = [0]

    @jit
    def step() -> Tensor:
        calls[0] += 1
        opt.zero_grad()
        loss = (w * w).sum() if calls[0] == 1 else (w * w * w).sum()
        loss.backward()
        opt.step(loss)
        return loss

    step()
    with pytest.raises(JitError, match="different graphs"):
        step()


def test_a_new_argument_shape_is_an_error():
    @jit
    def double(x: Tensor) -> Tensor:
        return x * 2

    for k in range(3):
        np.testing.assert_array_equal(double(Tensor(np.full(4, float(k)))).numpy(), np.full(4, 2.0 * k))
    with pytest.raises(JitError, match="captured with"):
        double(Tensor(np.ones(5)))
    double.reset()
    np.testing.assert_array_equal(double(Tensor(np.ones(5))).numpy(), np.full(5, 2.0))


def test_the_same_argument_again_replays_on_its_data_now():
    """Calls with the argument of the last replay take a shortcut (jit._last); an in-place update of it, a lazy
    argument, and another argument in between all replay on the data the argument holds at the call."""

    @jit
    def double(x: Tensor) -> Tensor:
        return x * 2

    a, b = Tensor(np.arange(4.0)).realize(), Tensor(np.full(4, 7.0)).realize()
    want = np.arange(4.0)
    for k in range(5):
        for _ in range(2):  # the second call is the shortcut's
            np.testing.assert_array_equal(double(a).numpy(), 2 * want, err_msg=f"call {k}")
        a.assign(a + 1)  # a is lazy now: the next call realizes it (in place)
        want = want + 1
        if k % 2:
            np.testing.assert_array_equal(double(b).numpy(), np.full(4, 14.0))
    lazy = a * 3
    np.testing.assert_array_equal(double(lazy).numpy(), 6 * want)
    np.testing.assert_array_equal(double(lazy).numpy(), 6 * want)
    assert double.calls == 14


def test_a_dropped_argument_is_not_kept_by_the_jit():
    """The last-call shortcut refers to its arguments weakly: a dropped argument's buffer goes with it."""

    @jit
    def double(x: Tensor) -> Tensor:
        return x * 2

    for k in range(3):  # the capture's two calls and a replay
        double(Tensor(np.full(4, float(k))).realize())
    a = Tensor(np.full(4, 5.0)).realize()
    np.testing.assert_array_equal(double(a).numpy(), np.full(4, 10.0))
    buf = weakref.ref(a.uop)
    del a
    assert buf() is None
    np.testing.assert_array_equal(double(Tensor(np.full(4, 6.0))).numpy(), np.full(4, 12.0))


@pytest.mark.parametrize("norm", ["LayerNorm", "GroupNorm", "BatchNorm2d"])
def test_norm_layers_train_under_jit_as_without(norm: str):
    """A norm layer's ones/zeros parameters (and BatchNorm's running statistics) are buffers from the start, so the
    step's graph is the same at every call and the jit replays it: the same losses and weights as without jit."""
    from tensor import layers, modules

    def run(use_jit: bool) -> tuple[list[float], dict]:
        Tensor.manual_seed(0)
        make = {"LayerNorm": lambda: modules.LayerNorm((3, 2, 2)), "GroupNorm": lambda: layers.GroupNorm(1, 3),
                "BatchNorm2d": lambda: modules.BatchNorm2d(3)}[norm]
        model = modules.Sequential(modules.Conv2d(2, 3, 1), make(), lambda x: x.reshape(x.shape[0], -1),
                                   modules.Linear(12, 4))
        opt = AdamW(model.parameters(), lr=1e-2)

        def step(x: Tensor, y: Tensor) -> Tensor:
            opt.zero_grad()
            loss = modules.cross_entropy(model(x), y)
            loss.backward()
            opt.step(loss)
            return loss

        f = jit(step) if use_jit else step
        rng = np.random.default_rng(0)
        losses = [f(Tensor(rng.standard_normal((5, 2, 2, 2), np.float32)),
                    Tensor(rng.integers(0, 4, 5).astype(np.int32))).item() for _ in range(5)]
        return losses, {k: v.numpy() for k, v in model.state_dict().items()}

    (lj, wj), (le, we) = run(True), run(False)
    assert lj == le
    for k in we:
        np.testing.assert_array_equal(wj[k], we[k], err_msg=k)
