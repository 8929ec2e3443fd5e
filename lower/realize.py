"""Run a schedule: allocate buffers, compile kernels (cached by AST and device), launch in order."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from lower import buffers
from lower.estimate import Estimate, estimate
from lower.memory import plan
from lower.schedule import ScheduleItem, schedule
from lower.stages import lower_kernel
from rewrite import UOp
from rewrite.env import getenv

_compiled: dict[tuple[UOp, str], Any] = {}
_estimates: dict[tuple[UOp, str], Estimate] = {}


def _np_dtype(dtype: Any) -> Any:
    if dtype.name == "bfloat16":
        return np.uint16
    if dtype.name == "index":
        return np.int64
    return np.dtype(dtype.name)


def _device_of(buf: UOp) -> str:
    d = buf.arg.device  # type: ignore[union-attr]
    return d if isinstance(d, str) else str(getenv("DEVICE"))


def _raw(buf: UOp) -> Any:
    """The storage array of `buf` as allocated (its own dtype), allocating it on first use."""
    if not buffers.has_data(buf):
        from devices import get_device

        n = 1
        for d in buf.shape:
            n *= d
        dev = get_device(_device_of(buf))
        buffers.store(buf, dev.alloc(n, buf.dtype), owner=dev)
    return buffers.lookup(buf)


def _array(buf: UOp) -> Any:
    want = _np_dtype(buf.dtype)
    arr = _raw(buf)
    # a BUFFER may name another's storage with a different dtype (a bitcast that changes the element size)
    return arr if arr.dtype == want else arr.view(want)


def get_kernel(ast: UOp, device_name: str, name: str, bufs: tuple | None = None) -> Any:
    key = (ast, device_name)
    if (k := _compiled.get(key)) is None:
        from devices import get_device

        dev = get_device(device_name)
        linear = lower_kernel(ast, dev, bufs=bufs, name=name)
        if getenv("DEBUG") >= 3:
            print(f"--- {name} ({device_name})\n{linear}")
        k = _compiled[key] = dev.compile(linear, name)
        _estimates[key] = estimate(linear)
    return k


def run_schedule(items: list[ScheduleItem], keep: set[UOp] | None = None) -> None:
    """Run `items` in order. Buffers in `keep` (the results someone holds) get their own storage; the
    schedule's other intermediates share storage by lifetime (lower.memory) and are dropped at the end."""
    debug = int(getenv("DEBUG"))
    t0 = time.perf_counter()
    shared = plan(items, keep or set())
    for it in items:
        for b in it.bufs:
            owner = shared.get(b.arg.slot)  # type: ignore[union-attr]
            if owner is not None and owner.arg.slot != b.arg.slot and not buffers.has_data(b):  # type: ignore[union-attr]
                buffers.store(b, _raw(owner))
        if it.kind == "copy":
            dst, src = it.bufs
            _array(dst)[:] = _array(src)
            continue
        assert it.ast is not None
        dev = _device_of(it.bufs[0])
        kernel = get_kernel(it.ast, dev, it.name, it.bufs)
        st = time.perf_counter()
        kernel({i: _array(b) for i, b in enumerate(it.bufs)})
        if debug >= 2:
            dt = time.perf_counter() - st
            est = _estimates.get((it.ast, dev), Estimate(0, 0))
            shape = "x".join(str(d) for d in it.bufs[0].shape)
            print(f"*** {dev:6s} {it.name:28s} out {shape:>10s}  {dt * 1e3:9.3f} ms  "
                  f"{est.mem_bytes / dt / 1e9:7.2f} GB/s  {est.flops / dt / 1e9:7.2f} GFLOP/s")
    if debug >= 1:
        nk = sum(it.kind == "kernel" for it in items)
        print(f"ran {nk} kernels, {len(items) - nk} copies in {(time.perf_counter() - t0) * 1e3:.2f} ms")


def realize(roots: list[UOp]) -> dict[UOp, UOp]:
    """Compute `roots`; returns, for each, the BUFFER (of the root's shape) holding its value."""
    items, outs = schedule(roots)
    run_schedule(items, keep=set(outs.values()))
    return outs
