"""A replay's checked launches (lower.schedule_cache): each storage is checked once per replay and the kernels get
its address, so what a launch's checks (devices.memory.check_specs) catch must still be caught, and nothing a
replay keeps (the plan's Launches, a kernel's packed argument words) may hand a kernel stale addresses."""

from __future__ import annotations

import numpy as np
import pytest

from devices.cpu import CPUKernel
from lower import realize
from lower.buffers import lookup, new_buffer, store
from lower.realize import plans
from lower.schedule_cache import signature
from rewrite import UOp, dtypes
from rewrite.errors import DeviceError

RNG = np.random.default_rng(11)


def buf(a: np.ndarray) -> UOp:
    b = new_buffer(getattr(dtypes, a.dtype.name), a.shape, "cpu")
    store(b, np.ascontiguousarray(a).reshape(-1))
    return b


def value(b: UOp) -> np.ndarray:
    return np.asarray(lookup(b)).reshape(b.shape)


def graph(x: UOp, y: UOp) -> UOp:
    # two kernels: the reduction's result is an intermediate (a temporary of the plan) read by the second
    s = (x * y).sum((1,))
    return (x + s.reshape((s.shape[0], 1)).expand(x.shape)).sum((0,))


def want(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a + (a * b).sum(1, keepdims=True)).sum(0, keepdims=True)  # UOp reductions keep their axes


def test_a_replay_takes_the_checked_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = RNG.standard_normal((300, 40)).astype(np.float32), RNG.standard_normal((300, 40)).astype(np.float32)
    x, y = buf(a), buf(b)
    realize([graph(x, y)])
    calls = {"checked": 0, "call": 0}
    launch, call = CPUKernel.launch_checked, CPUKernel.__call__

    def counted_launch(self: CPUKernel, ptrs: tuple[int, ...], memo: dict) -> None:
        calls["checked"] += 1
        launch(self, ptrs, memo)

    def counted_call(self: CPUKernel, *args: object) -> None:
        calls["call"] += 1
        call(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(CPUKernel, "launch_checked", counted_launch)
    monkeypatch.setattr(CPUKernel, "__call__", counted_call)
    g = graph(x, y)
    out = realize([g])[g]
    np.testing.assert_allclose(value(out), want(a, b), rtol=1e-4, atol=1e-3)
    p = plans.get(signature([g])[0])
    assert p is not None and len(p.launches) == 1  # worked out once, at the first replay
    assert calls == {"checked": sum(st.kind == "kernel" for st in p.steps), "call": 0}


def test_new_storage_every_replay_is_read() -> None:
    """The addresses come from this replay's arrays, whatever a kernel's packed words hold from earlier ones."""
    x, y = buf(np.zeros((300, 40), np.float32)), buf(np.zeros((300, 40), np.float32))
    for _ in range(4):
        a, b = RNG.standard_normal((300, 40)).astype(np.float32), RNG.standard_normal((300, 40)).astype(np.float32)
        store(x, a.reshape(-1).copy())  # the same BUFFERs, new arrays (new addresses)
        store(y, b.reshape(-1).copy())
        g = graph(x, y)
        np.testing.assert_allclose(value(realize([g])[g]), want(a, b), rtol=1e-4, atol=1e-3)
    # alternating between two sets of buffers: each replay's words are its own
    sets = [(RNG.standard_normal((300, 40)).astype(np.float32), RNG.standard_normal((300, 40)).astype(np.float32))
            for _ in range(2)]
    bufs = [(buf(a), buf(b)) for a, b in sets]
    for k in range(4):
        (a, b), (x, y) = sets[k % 2], bufs[k % 2]
        g = graph(x, y)
        np.testing.assert_allclose(value(realize([g])[g]), want(a, b), rtol=1e-4, atol=1e-3)


def test_two_inputs_on_one_storage_are_refused_on_every_replay() -> None:
    a = RNG.standard_normal(72).astype(np.float32)  # sizes no other test's graphs have: this file's plans are new
    for _ in range(2):  # the plan's first run and its replay
        x, y = buf(a), buf(a)
        store(y, lookup(x))  # two BUFFERs, one array: a kernel's pointers would alias
        with pytest.raises(DeviceError, match="same memory"):
            realize([x * y])


@pytest.mark.parametrize("bad", ["short", "strided", "2d"])
def test_a_bad_storage_is_refused_on_a_replay(bad: str) -> None:
    a = RNG.standard_normal(88).astype(np.float32)
    realize([buf(a) * 2.0])
    x = buf(a)
    arr = {"short": np.zeros(10, np.float32), "strided": np.zeros(176, np.float32)[::2],
           "2d": np.zeros((8, 11), np.float32)}[bad]
    store(x, arr)
    with pytest.raises(DeviceError, match=r"elements|C-contiguous"):
        realize([x * 2.0])


def test_a_written_read_only_input_gets_its_own_copy() -> None:
    """An input stored read-only (tensor data) that a kernel writes in place: the replay writes a copy."""
    from tensor import Tensor

    for k in range(3):
        src = np.arange(19, dtype=np.float32) + k
        t = Tensor(src)
        t.realize()
        t.assign(t * 2.0 + 1.0).realize()
        np.testing.assert_array_equal(t.numpy(), src * 2.0 + 1.0)
        np.testing.assert_array_equal(src, np.arange(19, dtype=np.float32) + k)  # the caller's array untouched


def test_signature_from_a_given_order_is_the_same() -> None:
    x, y = buf(RNG.standard_normal((30, 4)).astype(np.float32)), buf(RNG.standard_normal((30, 4)).astype(np.float32))
    roots = [graph(x, y), x * y]
    assert signature(roots, UOp.toposort_of(roots)) == signature(roots)
