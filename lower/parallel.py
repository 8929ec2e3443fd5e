"""Run a multi-device schedule with the devices working at once: one thread per device.

Each kernel runs on the thread of its device and each copy on the thread of its destination, in schedule
order; an item waits only for the items it depends on through storage: the last write of everything it reads
or writes, and every read since then of what it writes (the memory plan may give two buffers one array, so
storage, not buffers, is what is compared). A compiled cpu kernel drops the GIL while it runs, so kernels of
different devices overlap. Each cpu device of the schedule gets its share of the host's cores: its kernels are
compiled for a Target with `cores // number of cpu devices` threads (`shared_targets`), so n devices use the
cores once between them instead of n times.

`keep_of` names the buffers a schedule's results hold (a result on a device tuple holds its shards' buffers),
which the memory plan must leave alone.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from typing import cast

from devices import target_for
from devices.base import Target
from lower import buffers
from lower.memory import plan
from lower.schedule import ScheduleItem
from rewrite import Ops, UOp
from rewrite.env import getenv


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


def run_parallel(items: list[ScheduleItem], keep: set[UOp], var_vals: dict[str, int] | None = None) -> None:
    """Run `items` with one thread per device (see the module docstring); buffers in `keep` get their own
    storage, the other intermediates share it by lifetime (lower.memory)."""
    from lower.realize import _array, _device_of, _raw, compile_kernels

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
            storage[s] = id(_raw(b, vv))  # one array, one key (shared by the plan or by a bitcast's alias)
    dev_of = {k: _device_of(it.bufs[0]) for k, it in enumerate(items)}
    targets = shared_targets(items, dev_of)
    kernels: dict[int, object] = {}
    for d, tgt in targets.items():  # each device's new kernels compiled in one batch
        ks = [k for k, it in enumerate(items) if it.kind == "kernel" and dev_of[k] == d]
        wanted = [(items[k].ast, d, items[k].name, items[k].bufs) for k in ks]
        kernels.update(zip(ks, compile_kernels(wanted, tgt), strict=True))  # type: ignore[arg-type]  # kernels have ASTs
    deps = dependencies(items, storage)
    done = [threading.Event() for _ in items]
    errors: list[BaseException] = []

    def run_device(ks: list[int]) -> None:
        for k in ks:
            for d in deps[k]:
                done[d].wait()
            if errors:
                break
            it = items[k]
            try:
                if it.kind == "copy":
                    _array(it.bufs[0], vv)[:] = _array(it.bufs[1], vv)
                else:
                    kernels[k]({i: _array(b, vv) for i, b in enumerate(it.bufs)}, vv)  # type: ignore[operator]
            except BaseException as e:  # reported on the caller's thread
                errors.append(e)
            finally:
                done[k].set()
        for k in ks:  # on an error, release whoever waits on this device's items
            done[k].set()

    per_dev: dict[str, list[int]] = {}
    for k in range(len(items)):
        per_dev.setdefault(dev_of[k], []).append(k)
    threads = [threading.Thread(target=run_device, args=(ks,), name=f"device {d}") for d, ks in per_dev.items()]
    for t in threads[1:]:
        t.start()
    if threads:
        threads[0].run()  # the first device on this thread
    for t in threads[1:]:
        t.join()
    if errors:
        raise errors[0]
    if int(getenv("DEBUG")) >= 1:
        nk = sum(it.kind == "kernel" for it in items)
        print(f"ran {nk} kernels, {len(items) - nk} copies on {len(per_dev)} devices in "
              f"{(time.perf_counter() - t0) * 1e3:.2f} ms", file=sys.stderr)


__all__ = ["dependencies", "keep_of", "run_parallel", "shared_targets"]
