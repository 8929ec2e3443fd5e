"""Replay of multi-device graphs (lower.schedule_cache with lower.parallel): a realize whose inputs or results live
on device tuples keeps a plan like any other, with the shard buffers as positional inputs. Checked: the second
realize of the same structure with new data schedules and compiles nothing and computes with the new data; every
device's copy of a replicated result is bitwise the same; results are fresh; shard aliasing is part of the key;
a graph from one device through a tuple and back replays with its devices at once."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from lower import buffers
from lower.multi import view_base
from lower.realize import plans
from rewrite import UOp, dtypes
from tensor import Tensor
from tensor import multi as M

realize = importlib.import_module("lower.realize")  # the module (lower.realize is also the function's name)
CPU2 = ("cpu:0", "cpu:1")
RNG = np.random.default_rng(11)


class Calls:
    """Counts the schedules built and kernels compiled by lower.realize (monkeypatched wrappers)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.schedules = self.compiles = 0
        sched, comp = realize.schedule, realize.compile_kernels

        def schedule(*a, **k):  # type: ignore[no-untyped-def]
            self.schedules += 1
            return sched(*a, **k)

        def compile_kernels(*a, **k):  # type: ignore[no-untyped-def]
            self.compiles += 1
            return comp(*a, **k)

        monkeypatch.setattr(realize, "schedule", schedule)
        monkeypatch.setattr(realize, "compile_kernels", compile_kernels)


def shard_values(t: Tensor) -> list[np.ndarray]:
    base = view_base(t.uop)
    assert base is not None
    return [np.asarray(buffers.lookup(s)) for s in buffers.shards(base)]


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("form", ["spec", "sum over shards"])
def test_second_allreduce_schedules_nothing_and_reads_the_new_data(monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    def allreduce(T: Tensor) -> Tensor:
        return M.allreduce(T) if form == "spec" else T.reshape(2, 512).sum(0)

    allreduce(Tensor(data(1024)).shard(CPU2, 0).realize()).realize()  # warm: the plans exist
    calls = Calls(monkeypatch)
    h0 = plans.hits
    results = []
    for _ in range(3):
        a = data(1024)
        r = allreduce(Tensor(a).shard(CPU2, 0).realize()).realize()
        results.append((r, a))
    assert (calls.schedules, calls.compiles, plans.hits - h0) == (0, 0, 6)  # the shard and the allreduce
    for r, a in results:  # each result kept its own data: outputs are fresh at every replay
        want = a.reshape(2, 512).sum(0)
        s0, s1 = shard_values(r)
        np.testing.assert_array_equal(s0, s1)  # bitwise the same on both devices
        np.testing.assert_allclose(s0, want, rtol=1e-6, atol=1e-6)
        assert r.device == CPU2 and r.uop.axis is None


def test_sharded_results_and_mixed_devices_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    def step(x: Tensor, w: Tensor) -> Tensor:  # one device -> tuple -> one device, through a sharded matmul
        return ((x.to(CPU2) @ w.shard(CPU2, 1)).relu() * 2).to("cpu:0")

    calls = Calls(monkeypatch)
    for i in range(3):
        a, b = data(8, 6), data(6, 4)
        np.testing.assert_allclose(step(Tensor(a), Tensor(b)).numpy(), np.maximum(a @ b, 0) * 2, rtol=1e-5,
                                   atol=1e-5)
        s = (Tensor(a).shard(CPU2, 1) * 3).realize()  # a result sharded on axis 1
        np.testing.assert_array_equal(s.numpy(), a * 3)  # gathered onto cpu:0
        if i == 0:
            first = calls.schedules
    assert first >= 3 and calls.schedules == first  # the first round scheduled each graph, the others replayed


def test_a_multi_device_plan_runs_its_devices_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    build = realize.build_plan
    monkeypatch.setattr(realize, "build_plan", lambda *a: built.append(build(*a)) or built[-1])
    x = Tensor(data(64)).to("cpu:0").realize()
    y = (x.shard(CPU2, 0) * 2).to("cpu:1")  # from one device through a tuple to another: no tuple in or out
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)
    p = next(p for p in built if {s.device for s in p.steps} == set(CPU2))
    assert p.deps is not None and len(p.deps) == len(p.steps)
    devs = [s.device for s in p.steps]
    assert all(d < k for k, ds in enumerate(p.deps) for d in ds)
    # a step waits for another device's step only to read what that one wrote (a copy out of it)
    for k, ds in enumerate(p.deps):
        for d in ds:
            assert devs[d] == devs[k] or p.steps[k].kind == "copy", (k, d, p.steps)


def _tuple_buffer(parts: tuple[UOp, ...]) -> UOp:
    b = buffers.new_buffer(dtypes.float32, (8,), CPU2)
    buffers.store_shards(b, parts)
    return b


def _shard(a: np.ndarray, dev: str) -> UOp:
    b = buffers.new_buffer(dtypes.float32, (4,), dev)
    buffers.store(b, a.copy())
    return b


def test_shard_aliasing_is_part_of_the_key() -> None:
    a, b = data(8), data(8)
    pa = (_shard(a[:4], "cpu:0"), _shard(a[4:], "cpu:1"))
    pb = (_shard(b[:4], "cpu:0"), _shard(b[4:], "cpu:1"))
    x, same, other = _tuple_buffer(pa), _tuple_buffer(pa), _tuple_buffer(pb)
    m0 = plans.misses
    for y, want in ((other, a + b), (same, a + a)):
        out = x + y
        res = realize.realize([out])[out]
        base = view_base(res)
        assert base is not None
        got = np.concatenate([np.asarray(buffers.lookup(s)) for s in buffers.shards(base)])
        np.testing.assert_array_equal(got, want)
    assert plans.misses - m0 == 2
