"""lower.realize moves what a new plan leaves alive to the collector's oldest generation (`_promote_survivors`)
instead of letting the next young collection traverse it: nothing stays frozen, an application's own frozen
objects stay frozen, and garbage cycles are still collected."""

from __future__ import annotations

import gc
import importlib
import weakref

import numpy as np

from tensor.tensor import Tensor

realize_mod = importlib.import_module("lower.realize")  # `lower.realize` the attribute is the function


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _new_graph(seed: int) -> np.ndarray:
    """Realize a graph of a structure no other test builds (a new plan), checked against numpy."""
    x = np.arange(seed * 3 + 5, dtype=np.float32) / 70
    got = ((Tensor(x) * seed + 1.5).exp() - x.size).numpy()
    np.testing.assert_allclose(got, np.exp(x * seed + 1.5) - x.size, rtol=1e-5)
    return got


def test_new_plan_promotes_survivors_and_leaves_nothing_frozen() -> None:
    assert gc.isenabled()
    calls: list[int] = []
    real = realize_mod._promote_survivors
    young: list[_Cycle] = []

    def counted() -> None:
        calls.append(gc.get_freeze_count())
        young.append(_Cycle())  # a tracked object of the young generation
        assert any(o is young[0] for o in gc.get_objects(generation=0))
        real()
        assert any(o is young[0] for o in gc.get_objects(generation=2))  # moved without a collection

    realize_mod._promote_survivors = counted
    try:
        _new_graph(11)
    finally:
        realize_mod._promote_survivors = real
    assert calls == [0]  # one new plan, promoted once
    assert gc.get_freeze_count() == 0  # nothing left frozen


def test_application_frozen_objects_stay_frozen() -> None:
    keep = [_Cycle() for _ in range(3)]
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        assert not any(o is keep[0] for o in gc.get_objects())  # frozen: in no generation
        _new_graph(13)
        assert not any(o is k for o in gc.get_objects() for k in keep)  # still frozen after the realize
    finally:
        gc.unfreeze()
    del keep


def test_garbage_cycles_are_still_collected() -> None:
    c = _Cycle()
    dead = weakref.ref(c)
    del c
    _new_graph(17)  # the cycle is promoted to the oldest generation with everything else
    gc.collect()
    assert dead() is None


def test_survivors_promoted_under_a_callers_pause_too() -> None:
    """Tensor realizes (and the optimizer's step) run with the collector paused: a new plan made there still moves
    what it leaves alive to the oldest generation, and the collector is on again after."""
    from rewrite.engine import collector_paused

    young: list[_Cycle] = []
    real = realize_mod._promote_survivors

    def counted() -> None:
        young.append(_Cycle())
        real()
        assert any(o is young[0] for o in gc.get_objects(generation=2))

    realize_mod._promote_survivors = counted
    try:
        with collector_paused():
            assert not gc.isenabled()
            _new_graph(19)
    finally:
        realize_mod._promote_survivors = real
    assert len(young) == 1 and gc.isenabled() and gc.get_freeze_count() == 0
