"""The multi-device runner (lower.parallel): persistent per-device threads made once per device set, steps run on
their device's thread in order after their dependencies, errors raised on the caller's thread; the memory plan
keeps devices apart."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from lower import parallel
from lower.buffers import new_buffer, slot
from lower.memory import plan
from lower.schedule import ScheduleItem
from rewrite import dtypes
from tensor import Tensor

CPU2 = ("cpu:0", "cpu:1")


def test_realizes_reuse_one_pool_per_device_set() -> None:
    x = Tensor(np.arange(16, dtype=np.float32)).shard(CPU2, 0).realize()
    (x * 2).realize()
    pool = parallel.pools()[CPU2]
    threads = threading.active_count()
    for i in range(5):
        np.testing.assert_array_equal((x * i + 1).numpy(), np.arange(16) * i + 1)
    assert parallel.pools()[CPU2] is pool
    assert threading.active_count() == threads  # no thread started per realize
    assert [t.name for t in pool._threads] == ["device cpu:1"] and all(t.is_alive() for t in pool._threads)


def test_run_steps_keeps_device_order_and_dependencies() -> None:
    devices = ["cpu:0", "cpu:1", "cpu:1", "cpu:0", "cpu:1"]
    deps = [[], [], [0], [2], [3]]
    log: list[tuple[int, str]] = []
    lock = threading.Lock()

    def step(k: int) -> None:
        if k == 0:
            time.sleep(0.02)  # step 2 must still wait for it
        with lock:
            log.append((k, threading.current_thread().name))

    parallel.run_steps(devices, deps, step)
    order = [k for k, _ in log]
    assert sorted(order) == list(range(5))
    for k, ds in enumerate(deps):
        assert all(order.index(d) < order.index(k) for d in ds)
    assert order.index(1) < order.index(2) < order.index(4)  # one device's dependent steps in order
    on = dict(log)
    assert on[1] == on[2] == on[4] == "device cpu:1" and on[0] == on[3] != "device cpu:1"


def test_run_steps_does_not_hold_back_a_ready_step_behind_one_waiting_for_another_device() -> None:
    # the reduce-scatter pattern: each device adds the other's chunk into its own; the step that adds on cpu:0
    # comes first in the schedule but waits for cpu:1, whose step waits (here: needs) cpu:0's independent one
    devices = ["cpu:1", "cpu:0", "cpu:0", "cpu:1"]
    deps: list[list[int]] = [[], [0], [], [2]]
    started = threading.Event()
    seen: list[bool] = []

    def step(k: int) -> None:
        if k == 2:
            started.set()
        if k == 0:
            seen.append(started.wait(timeout=10))  # in schedule order, step 2 ran only after step 1, after this

    parallel.run_steps(devices, deps, step)
    assert seen == [True]


def test_row_parallel_matmul_runs_both_devices_product_kernels_at_once() -> None:
    from lower.parallel import dependencies
    from lower.realize import _device_of
    from lower.schedule import schedule

    rng = np.random.default_rng(0)
    a, b = (Tensor(rng.standard_normal((256, 256), dtype=np.float32)) for _ in range(2))
    c = a.shard(CPU2, 1).realize() @ b.shard(CPU2, 0).realize()
    items, _ = schedule([c.uop])
    devs = [_device_of(it.bufs[0]) for it in items]
    deps = dependencies(items, {slot(x): slot(x) for it in items for x in it.bufs})  # no storage shared
    products = {k for k, it in enumerate(items) if it.kind == "kernel" and it.name.startswith("r_")}
    assert {devs[k] for k in products} == set(CPU2)
    first: set[str] = set()
    both = threading.Barrier(2, timeout=10)  # the first product kernel each device runs waits for the other's

    def step(k: int) -> None:
        if k in products and devs[k] not in first:
            first.add(devs[k])
            both.wait()

    parallel.run_steps(devs, [sorted(d) for d in deps], step)  # a BrokenBarrierError if they ran one after another


def test_run_steps_raises_the_first_error_and_stops() -> None:
    ran: list[int] = []

    def step(k: int) -> None:
        if k == 1:
            raise ValueError("step 1 failed")
        ran.append(k)

    with pytest.raises(ValueError, match="step 1 failed"):
        parallel.run_steps(["cpu:0", "cpu:1", "cpu:0", "cpu:1"], [[], [], [1], []], step)
    assert 2 not in ran  # it waited for the failed step and did not run
    parallel.run_steps(["cpu:0", "cpu:1"], [[], []], lambda k: ran.append(10 + k))  # the pool still works
    assert {10, 11} <= set(ran)


def test_memory_plan_shares_storage_only_on_one_device() -> None:
    a0, b0, c0 = (new_buffer(dtypes.float32, (64,), "cpu:0") for _ in range(3))
    a1, b1 = (new_buffer(dtypes.float32, (64,), "cpu:1") for _ in range(2))
    items = [ScheduleItem("kernel", (a0,)), ScheduleItem("kernel", (b0, a0)), ScheduleItem("kernel", (a1, b0)),
             ScheduleItem("kernel", (c0, a1)), ScheduleItem("kernel", (b1, c0))]
    shared = plan(items, {b1})
    owner = {slot(b): slot(shared[slot(b)]) for b in (a0, b0, c0, a1)}
    assert owner[slot(c0)] in (slot(a0), slot(b0))  # dead by then, same device and size
    assert owner[slot(a1)] == slot(a1)  # a0 was free too, but on cpu:0
