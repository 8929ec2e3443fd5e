"""Run a multi-device schedule with the devices working at once: one persistent thread per device.

Each kernel runs on the thread of its device and each copy on the thread of its destination, in schedule
order as far as the dependencies allow (a device runs its first item that is ready, so an item waiting for
another device does not hold back the device's independent later items); an item waits only for the items it
depends on through storage: the last write of everything it reads or writes, and every read since then of what
it writes (the memory plan may give two buffers one array, so storage, not buffers, is what is compared). A
compiled cpu kernel drops the GIL while it runs, so kernels of different devices overlap. Each cpu device of
the schedule gets its share of the host's cores: its kernels are compiled for a Target with `cores // number of
cpu devices` threads (`shared_targets`), so n devices use the cores once between them instead of n times.

The threads are a `DevicePool`, made once per set of devices and kept (`pool_for`): starting threads at every
realize cost milliseconds on a loaded machine. The first device's items run on the caller's thread, the others
on the pool's threads, which sleep on a queue between realizes. One realize's work enters every queue under one
lock, so two realizes from two threads queue in the same order on every device and never wait on each other in
a cycle. A forked child drops the pools (their threads do not exist there) and makes new ones on first use.

`keep_of` names the buffers a schedule's results hold (a result on a device tuple holds its shards' buffers),
which the memory plan must leave alone.
"""

from __future__ import annotations

import atexit
import functools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import cast

from devices import target_for
from devices.base import Target
from lower import buffers
from lower.copyview import copy_into
from lower.memory import plan
from lower.schedule import ScheduleItem
from rewrite import Ops, UOp
from rewrite.env import getenv


class DevicePool:
    """Persistent threads for a set of devices: `run(work)` runs work[0] on the caller's thread and work[i] on
    the thread of devices[i], all at once, and returns when all are done."""

    def __init__(self, devices: tuple[str, ...]) -> None:
        self.devices = devices
        self._lock = threading.Lock()
        self._queues: list[queue.SimpleQueue[Callable[[], None] | None]] = [queue.SimpleQueue() for _ in devices[1:]]
        self._threads = [threading.Thread(target=self._serve, args=(q,), name=f"device {d}", daemon=True)
                         for d, q in zip(devices[1:], self._queues, strict=True)]
        for t in self._threads:
            t.start()

    @staticmethod
    def _serve(q: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        while (job := q.get()) is not None:
            job()

    def run(self, work: Sequence[Callable[[], None]]) -> None:
        """Run `work[i]` for devices[i] (a callable per device, none may raise) and wait for all of them."""
        assert len(work) == len(self.devices), (len(work), self.devices)
        done = [threading.Event() for _ in work[1:]]

        def job(fn: Callable[[], None], ev: threading.Event) -> Callable[[], None]:
            def go() -> None:
                try:
                    fn()
                finally:
                    ev.set()
            return go

        with self._lock:  # every queue gets this realize's work at once: the same order on every device
            for q, fn, ev in zip(self._queues, work[1:], done, strict=True):
                q.put(job(fn, ev))
        try:
            work[0]()
        finally:  # the others may still use this realize's storage: it is freed only after they stopped
            for ev in done:
                ev.wait()

    def close(self) -> None:
        for q in self._queues:
            q.put(None)
        for t in self._threads:
            t.join(timeout=1.0)


_pools: dict[tuple[str, ...], DevicePool] = {}
_pools_lock = threading.Lock()


def pool_for(devices: tuple[str, ...]) -> DevicePool:
    """The pool of `devices` (in this order), made on first use and kept."""
    with _pools_lock:
        p = _pools.get(devices)
        if p is None:
            p = _pools[devices] = DevicePool(devices)
        return p


def pools() -> dict[tuple[str, ...], DevicePool]:
    """The pools made so far, by device set (for tests and DEBUG)."""
    return dict(_pools)


def _close_pools() -> None:
    with _pools_lock:
        for p in _pools.values():
            p.close()
        _pools.clear()


def _forget_pools() -> None:  # in a forked child: the threads are the parent's
    global _pools_lock
    _pools.clear()
    _pools_lock = threading.Lock()


atexit.register(_close_pools)
os.register_at_fork(after_in_child=_forget_pools)


def run_steps(devices: Sequence[str], deps: Sequence[Sequence[int]], step: Callable[[int], None]) -> None:
    """Run step k (0 <= k < len(devices)) on the thread of `devices[k]`, a step after the steps `deps[k]`
    (earlier ones) have run; the first error is raised here once every device stopped. Steps all on one device
    run on the caller's thread, in order.

    A device runs the first of its steps (in schedule order) whose dependencies have all run, not strictly the
    next one: a step that waits for another device does not hold back the device's later steps that do not
    depend on it. `deps` must name every step a step has to follow (`dependencies` does: every earlier access to
    the same storage, transitively), so steps of one device that it leaves unordered may run in either order. A
    reduce-scatter whose partial products are computed straight into the exchanged chunks needs this: device 0
    computes the chunk it sends while device 1 computes the one it sends, instead of device 0 waiting for device
    1's chunk first because the schedule lists the step that adds it earlier."""
    per_dev: dict[str, list[int]] = {}
    for k, d in enumerate(devices):
        per_dev.setdefault(d, []).append(k)
    if len(per_dev) <= 1:
        for k in range(len(devices)):
            step(k)
        return
    done = [False] * len(devices)
    changed = threading.Condition()
    errors: list[BaseException] = []

    def next_ready(pending: list[int]) -> int | None:  # with `changed` held; None: stop (an error)
        while not errors:
            for i, k in enumerate(pending):
                if all(done[d] for d in deps[k]):
                    return pending.pop(i)
            changed.wait()
        return None

    def run_device(ks: list[int]) -> None:
        pending = list(ks)
        try:
            while pending:
                with changed:
                    k = next_ready(pending)
                if k is None:
                    break
                try:
                    step(k)
                except BaseException as e:  # recorded before the step counts as done: no one runs after it
                    errors.append(e)
                    raise
                finally:
                    with changed:
                        done[k] = True
                        changed.notify_all()
        except BaseException as e:  # reported on the caller's thread (a Ctrl-C while waiting too), others stop
            if not any(x is e for x in errors):
                errors.append(e)
            with changed:
                changed.notify_all()

    order = tuple(sorted(per_dev))  # one pool per set of devices, whatever order the schedule meets them in
    pool_for(order).run([functools.partial(run_device, per_dev[d]) for d in order])
    if errors:
        raise errors[0]


def keep_of(outs: dict[UOp, UOp]) -> set[UOp]:
    """The buffers that hold the results `outs` (a root's BUFFER, or for a view of a BUFFER on a device tuple,
    its shards' buffers)."""
    from lower.multi import view_base

    keep: set[UOp] = set()
    for b in outs.values():
        base = view_base(b)
        if base is None:
            keep.add(b)
        else:
            keep |= set(buffers.shards(base))
    return keep


def shared_targets(items: list[ScheduleItem], device_of: dict[int, str]) -> dict[str, Target]:
    """The Target of each device that runs kernels: a cpu device gets its share of the host's cores."""
    devs = sorted({device_of[i] for i, it in enumerate(items) if it.kind == "kernel"})
    cpus = [d for d in devs if d.split(":")[0] == "cpu"]
    out: dict[str, Target] = {}
    for d in devs:
        t = target_for(d)
        if d in cpus and len(cpus) > 1:
            t = replace(t, cores=max(1, t.cores // len(cpus)))
        out[d] = t
    return out


def _writes(it: ScheduleItem) -> set[int]:
    """The local slots an item writes: a copy its destination, a kernel the buffers it STOREs into."""
    if it.kind == "copy" or it.ast is None:
        return {0}
    return {cast(int, s.src[0].src[0].buf_arg.slot) for s in it.ast.toposort()
            if s.op is Ops.STORE and s.src[0].op is Ops.INDEX and s.src[0].src[0].op is Ops.BUFFER}


def _base(a: object) -> object:
    """The array that owns `a`'s memory (numpy's `base` chain): two views of one array are one storage, so the
    items that touch them stay ordered (run_steps lets a device run its ready items out of schedule order)."""
    while (b := getattr(a, "base", None)) is not None:
        a = b
    return a


def dependencies(items: list[ScheduleItem], storage: dict[int, int]) -> list[set[int]]:
    """For each item, the earlier items it must wait for (`storage` maps a buffer slot to its array's key)."""
    last_write: dict[int, int] = {}
    reads_since: dict[int, set[int]] = {}
    deps: list[set[int]] = []
    for k, it in enumerate(items):
        w = _writes(it)
        d: set[int] = set()
        for i, b in enumerate(it.bufs):
            key = storage[buffers.slot(b)]
            if key in last_write:
                d.add(last_write[key])
            if i in w:
                d |= reads_since.get(key, set())
        for i, b in enumerate(it.bufs):
            key = storage[buffers.slot(b)]
            if i in w:
                last_write[key] = k
                reads_since[key] = set()
            else:
                reads_since.setdefault(key, set()).add(k)
        d.discard(k)
        deps.append(d)
    return deps


def compile_for_devices(items: list[ScheduleItem]) -> tuple[list[object], list[tuple]]:
    """The compiled kernel of each kernel item of a multi-device schedule, in item order, each for its device's
    share of the cores (`shared_targets`), every device's new kernels in one batch; and each one's cache key
    (lower.realize's `_kernel_key`, for its estimate)."""
    from lower.realize import _device_of, _kernel_key, compile_kernels

    dev_of = {k: _device_of(it.bufs[0]) for k, it in enumerate(items)}
    targets = shared_targets(items, dev_of)
    kernels: dict[int, object] = {}
    keys: dict[int, tuple] = {}
    for d, tgt in targets.items():
        ks = [k for k, it in enumerate(items) if it.kind == "kernel" and dev_of[k] == d]
        wanted = [(items[k].ast, d, items[k].name, items[k].bufs) for k in ks]
        kernels.update(zip(ks, compile_kernels(wanted, tgt), strict=True))  # type: ignore[arg-type]  # kernels have ASTs
        keys.update((k, _kernel_key(cast(UOp, items[k].ast), d, tgt)) for k in ks)
    order = sorted(kernels)
    return [kernels[k] for k in order], [keys[k] for k in order]


def run_parallel(items: list[ScheduleItem], keep: set[UOp], var_vals: dict[str, int] | None = None) -> None:
    """Run `items` with one thread per device (see the module docstring); buffers in `keep` get their own
    storage, the other intermediates share it by lifetime (lower.memory). The path with no plan kept (TRACE,
    VIZ); lower.realize replays plans of multi-device graphs through `run_steps` as well."""
    from lower.realize import _array, _device_of, _raw

    vv = dict(var_vals or {})
    t0 = time.perf_counter()
    shared = plan(items, keep)
    storage: dict[int, int] = {}
    for it in items:  # storage first, on this thread: the allocators are not shared between threads
        for b in it.bufs:
            s = buffers.slot(b)
            owner = shared.get(s)
            if owner is not None and buffers.slot(owner) != s and not buffers.has_data(b):
                buffers.store(b, _raw(owner, vv))
            storage[s] = id(_base(_raw(b, vv)))  # one array, one key (shared by the plan, a bitcast's alias, a view)
        for b in it.bufs[:it.outs if it.kind == "kernel" else 1]:
            buffers.wrote(b)  # an assignment's target is written in place
    kernel_list, _ = compile_for_devices(items)
    kernel_ix = [k for k, it in enumerate(items) if it.kind == "kernel"]
    kernels = dict(zip(kernel_ix, kernel_list, strict=True))
    deps = dependencies(items, storage)

    def step(k: int) -> None:
        it = items[k]
        if it.kind == "copy":
            copy_into(_array(it.bufs[0], vv), _array(it.bufs[1], vv), it.view, it.dst_view)
        else:
            kernels[k]({i: _array(b, vv) for i, b in enumerate(it.bufs)}, vv)  # type: ignore[operator]

    devs = [_device_of(it.bufs[0]) for it in items]
    run_steps(devs, [sorted(d) for d in deps], step)
    if int(getenv("DEBUG")) >= 1:
        nk = sum(it.kind == "kernel" for it in items)
        print(f"ran {nk} kernels, {len(items) - nk} copies on {len(set(devs))} devices in "
              f"{(time.perf_counter() - t0) * 1e3:.2f} ms", file=sys.stderr)


__all__ = ["DevicePool", "compile_for_devices", "dependencies", "keep_of", "pool_for", "pools", "run_parallel",
           "run_steps", "shared_targets"]
