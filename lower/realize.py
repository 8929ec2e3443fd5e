"""Run a schedule: allocate buffers, compile kernels (cached by AST, device and lowering knobs), launch in order.

`realize` keeps each schedule it runs as a replayable plan keyed by the graph's structure (lower.schedule_cache):
a later realize of a graph with the same structure, whatever buffers it reads, skips scheduling and lowering.
That holds for multi-device graphs too (inputs and results on device tuples); a schedule whose items span
several devices runs them at once, one thread per device (lower.parallel).
On a miss, the schedule's new kernels go through the pipeline's kernel stages and then its program stages (render,
compile) as one SINK of PROGRAMs per device, which the compile stage compiles together (one compiler run per host
core when the device can batch), so SPEC=1, DEBUG and VIZ see render and compile as they see every stage."""

from __future__ import annotations

import contextlib
import gc
import itertools
import sys
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from devices import get_device, target_for
from devices.base import Target
from lower import buffers
from lower.copyview import copy_into
from lower.estimate import Estimate, LazyEstimate, estimate
from lower.linearize import listing
from lower.memory import plan
from lower.mpi_exec import on_ranks
from lower.pipeline import Lowering, loaded, program_stages
from lower.schedule import ScheduleItem, schedule
from lower.schedule_cache import (
    Plan,
    PlanCache,
    bind_shape,
    build_plan,
    flat_inputs,
    lowering_knobs,
    replay,
    resolve,
    signature,
    writable,
)
from lower.stages import lower_kernel
from rewrite import Ops, UOp
from rewrite.engine import collector_paused
from rewrite.env import getenv
from rewrite.viz import capture as viz_capture

_compiled: dict[tuple, Any] = {}  # (ast, device, target key, lowering knobs) -> compiled kernel
_estimates: dict[tuple, Estimate | LazyEstimate] = {}
# (LINEAR, device, target key, lowering knobs) -> the key of the kernel compiled for that program
_by_linear: dict[tuple, tuple] = {}
plans = PlanCache()
_ranked: dict[tuple, bool] = {}  # signature key -> whether its graph has nodes on MPI ranks' devices


def _np_dtype(dtype: Any) -> Any:
    if dtype.name == "bfloat16":
        return np.uint16
    if dtype.name == "index":
        return np.int64
    return np.dtype(dtype.name)


def _device_of(buf: UOp) -> str:
    return _device_name(buf.buf_arg.device)


def _device_name(d: object) -> str:
    """A node's device as a name: its own, or for a device-less one the default (DEVICE)."""
    return d if isinstance(d, str) else str(getenv("DEVICE"))


def _raw(buf: UOp, var_vals: dict[str, int] | None = None) -> Any:
    """The storage array of `buf` as allocated (its own dtype), allocating it on first use."""
    if not buffers.has_data(buf):
        from devices import get_device

        n = 1
        for d in buf.shape:
            n *= resolve(d, var_vals or {})
        dev = get_device(_device_of(buf))
        buffers.store(buf, dev.alloc(n, buf.dtype), owner=dev)
    return buffers.lookup(buf)


def _array(buf: UOp, var_vals: dict[str, int] | None = None) -> Any:
    want = _np_dtype(buf.dtype)
    arr = _raw(buf, var_vals)
    # a BUFFER may name another's storage with a different dtype (a bitcast that changes the element size)
    return arr if arr.dtype == want else arr.view(want)


def _kernel_key(ast: UOp, device_name: str, target: Target | None = None) -> tuple:
    # the knobs but DEVICE (the first; the kernel's device is in the key itself)
    return (ast, device_name, (target or target_for(device_name)).key, lowering_knobs()[1:])


def get_kernel(ast: UOp, device_name: str, name: str, bufs: tuple | None = None, target: Target | None = None) -> Any:
    """The compiled kernel of `ast` for `device_name` (for `target`, default the device's own)."""
    key = _kernel_key(ast, device_name, target)
    if (k := _compiled.get(key)) is None:
        k = compile_kernels([(ast, device_name, name, bufs)], target)[0]
    return k


def compile_kernels(wanted: Sequence[tuple[UOp, str, str, tuple | None]], target: Target | None = None) -> list[Any]:
    """The compiled kernel for each (ast, device, name, bufs): from memory, or through the pipeline (lower_kernel's
    kernel stages, then the program stages render and compile: lower.pipeline.program_stages), the new ones of a
    device as one SINK of PROGRAMs that the compile stage compiles in one batch (one compiler start per host core
    instead of one per kernel). `target` replaces the devices' default Target (for the kernels of one device)."""
    new: dict[tuple, tuple[UOp, UOp, str]] = {}  # key -> (AST, LINEAR, unique name), in first-use order
    todo = {k: w for w in wanted if (k := _kernel_key(w[0], w[1], target)) not in _compiled}
    seen: dict[str, set[str]] = {}  # device -> the names its batch uses
    same: dict[tuple, tuple] = {}  # key -> the key of an earlier kernel whose LINEAR it is
    for key, (ast, device_name, name, bufs) in todo.items():
        linear = lower_kernel(ast, target or target_for(device_name), bufs=bufs, name=name, memo=True)
        if getenv("DEBUG") >= 3:
            print(f"--- {name} ({device_name})\n{linear}", file=sys.stderr)
        # two ASTs may lower to one program (the same op on buffers of one shape, in other slots' order...):
        # it is rendered and compiled once, for the first
        lkey = (linear, *key[1:])
        if (first := _by_linear.get(lkey)) is not None and (first in new or first in _compiled):
            same[key] = first
            if (rec := viz_capture.ACTIVE) is not None:
                est = estimate(linear)
                rec.kernel(key, name, device_name, linear=listing(linear), flops=est.flops, mem_bytes=est.mem_bytes)
            continue
        _by_linear[lkey] = key
        # a repeated name is numbered (`r_8_16`, `r_8_16_1`, ...): the kernels of one batch share a file, so each
        # needs its own symbol, and render then names it as compile will (the device renders it once)
        used = seen.setdefault(device_name, set())
        name = next(u for i in itertools.count() if (u := f"{name}_{i}" if i else name) not in used)
        used.add(name)
        new[key] = (ast, linear, name)
        if len(todo) > 1 and (ahead := getattr(get_device(device_name), "compile_ahead", None)) is not None:
            ahead(linear, name, target or target_for(device_name))  # compiles while the next kernels lower
        if (rec := viz_capture.ACTIVE) is not None:  # now: the notes the kernel stages took under its name join it
            est = estimate(linear)
            rec.kernel(key, name, device_name, linear=listing(linear), flops=est.flops, mem_bytes=est.mem_bytes)
    by_dev: dict[str, list[tuple]] = {}
    for key in new:
        by_dev.setdefault(key[1], []).append(key)
    for device_name, keys in by_dev.items():
        names = [new[k][2] for k in keys]
        progs = [UOp(Ops.PROGRAM, new[key][:2], name) for key, name in zip(keys, names, strict=True)]
        ctx = Lowering.from_env(target or target_for(device_name), name=names[0] if len(names) == 1 else
                                f"{len(names)} kernels")
        done = program_stages(progs[0] if len(progs) == 1 else UOp.sink(*progs), ctx)
        for key, prog in zip(keys, done.src if done.op is Ops.SINK else (done,), strict=True):
            _compiled[key] = loaded(prog)
            _estimates[key] = LazyEstimate(new[key][1])
            if (rec := viz_capture.ACTIVE) is not None:
                rec.kernel(key, new[key][2], device_name, source=str(prog.src[2].arg))
    for key, first in same.items():
        _compiled[key], _estimates[key] = _compiled[first], _estimates[first]
    return [_compiled[_kernel_key(ast, d, target)] for ast, d, _, _ in wanted]


def run_schedule(items: list[ScheduleItem], keep: set[UOp] | None = None,
                 var_vals: dict[str, int] | None = None) -> None:
    """Run `items` in order with the variables' values `var_vals`. Buffers in `keep` (the results someone holds)
    get their own storage; the schedule's other intermediates share storage by lifetime (lower.memory) and are
    dropped at the end."""
    vv = dict(var_vals or {})
    debug = int(getenv("DEBUG"))
    t0 = time.perf_counter()
    shared = plan(items, keep or set())
    for it in items:
        for b in it.bufs:
            owner = shared.get(buffers.slot(b))
            if owner is not None and buffers.slot(owner) != buffers.slot(b) and not buffers.has_data(b):
                buffers.store(b, _raw(owner, vv))
        if it.kind == "copy":
            dst, src = it.bufs
            buffers.wrote(dst)  # an assignment's target is written in place
            copy_into(_array(dst, vv), _array(src, vv), it.view, it.dst_view)
            continue
        assert it.ast is not None
        for b in it.bufs[:it.outs]:
            if buffers.has_data(b):  # an assignment's target, written in place
                writable(b)
        dev = _device_of(it.bufs[0])
        kernel = get_kernel(it.ast, dev, it.name, it.bufs)
        st = time.perf_counter()
        arrays = {i: _array(b, vv) for i, b in enumerate(it.bufs)}
        kernel(arrays, vv)
        if (rec := viz_capture.ACTIVE) is not None:
            rec.run(_kernel_key(it.ast, dev), it.name, dev, time.perf_counter() - st)
        if debug >= 2:
            dt = time.perf_counter() - st
            est: Estimate | LazyEstimate = _estimates.get(_kernel_key(it.ast, dev), Estimate(0, 0))
            shape = "x".join(str(d) for d in it.bufs[0].shape)
            print(f"*** {dev:6s} {it.name:28s} out {shape:>10s}  {dt * 1e3:9.3f} ms  "
                  f"{est.mem_bytes / dt / 1e9:7.2f} GB/s  {est.flops / dt / 1e9:7.2f} GFLOP/s", file=sys.stderr)
    if debug >= 1:
        nk = sum(it.kind == "kernel" for it in items)
        print(f"ran {nk} kernels, {len(items) - nk} copies in {(time.perf_counter() - t0) * 1e3:.2f} ms",
              file=sys.stderr)


def realize(roots: list[UOp], var_vals: dict[str, int] | None = None, order: list[UOp] | None = None
            ) -> dict[UOp, UOp]:
    """Compute `roots`; returns, for each, the BUFFER (of the root's shape) holding its value. A graph with the
    structure of one realized before replays that one's plan (schedule, kernels, memory plan). `var_vals` gives
    the values of the graph's (unbound) variables by name; they are not part of any cache key, and results come
    back with their shapes' variables bound to them. `order`: UOp.toposort_of(roots), when the caller has it."""
    if (rec := viz_capture.ACTIVE) is not None:
        with rec.realize("realize"):
            return _realize_fresh(roots, var_vals)
    if int(getenv("TRACE")):  # tracing wants the scheduling rules to fire, so nothing is replayed
        return _realize_fresh(roots, var_vals)
    key, inputs = signature(roots, order)
    # the key names every node's op, arg and buffers' devices, so whether it spans MPI ranks is known per key
    if (ranked := _ranked.get(key)) is None:
        if len(_ranked) >= 4096:
            _ranked.clear()
        ranked = _ranked[key] = on_ranks([*roots, *inputs])
    if ranked:  # devices of several MPI ranks: each rank runs its part (lower.mpi_exec)
        from lower.mpi_cache import realize_ranks

        return realize_ranks(roots, var_vals, (key, inputs))
    try:
        flat, shared_shards = flat_inputs(inputs)
    except KeyError:  # a tuple buffer without shards: the multi stage says what is wrong
        schedule(roots)
        raise
    if shared_shards is not None:
        key = (*key, shared_shards)
    if (p := plans.get(key)) is None:
        # the schedule and the kernels' lowering build graphs and make few reference cycles, so the collector's
        # passes over everything they keep alive are spared (~5% of a first training step), as within one
        # graph_rewrite; what they leave alive then goes to the oldest generation untraversed, where the full
        # collections find the cycles made (_promote_survivors)
        with collector_paused():
            p = _planned(roots, flat)
        _promote_survivors()
        plans.put(key, p)
    plans.kernels_run += sum(st.kind == "kernel" for st in p.steps)
    return replay(p, roots, flat, var_vals)


def _promote_survivors() -> None:
    """Move every object the collector tracks to its oldest generation without traversing them. The schedule and
    the kernels' lowering above leave ~100k new objects alive (the plan, the kernels, the caches of graphs and
    rewrites) and no garbage cycles; with the collector back on, the next young collection would traverse them all
    (~18 ms after the transformer's first training step) and a middle one again later, to find nothing. The
    oldest generation's full collections still see them. Done with the collector off too (a caller's
    collector_paused: tensor.optim's step, tensor.tensor's realize, which turn it back on after; both moves are
    O(1)), but not while the application holds frozen objects (gc.freeze: unfreezing would release its own too)."""
    if not gc.get_freeze_count():
        gc.freeze()
        gc.unfreeze()


def _planned(roots: list[UOp], flat: list[UOp]) -> Plan:
    """A new plan for `roots`: schedule, compile the kernels, plan the memory."""
    with _preparing(roots):
        items, outs = schedule(roots)
        multi = len({_device_of(it.bufs[0]) for it in items}) > 1
        if multi:  # each device's kernels for its share of the cores
            from lower.parallel import compile_for_devices

            kernels, keys = compile_for_devices(items)
        else:
            wanted = [(it.ast, _device_of(it.bufs[0]), it.name, it.bufs) for it in items
                      if it.kind == "kernel" and it.ast is not None]  # a kernel item always has its AST
            kernels = compile_kernels(wanted)
            keys = [_kernel_key(a, d) for a, d, _, _ in wanted]
    ests: list[Estimate | LazyEstimate] = [_estimates.get(k, Estimate(0, 0)) for k in keys]
    return build_plan(roots, flat, items, outs, kernels, ests)


@contextlib.contextmanager
def _preparing(roots: list[UOp]) -> Iterator[None]:
    """The block that schedules and lowers a new plan for `roots`: their devices get ready for their kernels
    meanwhile (`warm_up`: the cpu device builds its thread pool in the background) and hold the background work
    that would share the cores with it (`planning`: the cpu device's -O2 builds)."""
    devices = [get_device(_device_name(d)) for d in {r.device for r in roots}]
    for dev in devices:
        if (warm := getattr(dev, "warm_up", None)) is not None:
            warm()
    with contextlib.ExitStack() as stack:
        for dev in devices:
            if (hold := getattr(dev, "planning", None)) is not None:
                stack.enter_context(hold())
        yield


def _realize_fresh(roots: list[UOp], var_vals: dict[str, int] | None) -> dict[UOp, UOp]:
    """Schedule, lower and run with no plan replayed, so every stage and rule runs (for TRACE and VIZ)."""
    items, outs = schedule(roots)
    if on_ranks([*roots, *(b for it in items for b in it.bufs)]):
        from lower.mpi_exec import run_ranks

        run_ranks(items, var_vals)
        return outs
    if len({_device_of(it.bufs[0]) for it in items}) > 1:
        from lower.parallel import keep_of, run_parallel

        run_parallel(items, keep_of(outs), var_vals)
    else:
        run_schedule(items, keep=set(outs.values()), var_vals=var_vals)
    if var_vals:  # the results' shapes name the values, as a replay's do
        outs = {r: _rebind(b, var_vals) for r, b in outs.items()}
    return outs


def _rebind(buf: UOp, var_vals: dict[str, int]) -> UOp:
    """`buf` with its shape's variables bound, naming the same storage (kept alive by holding `buf`)."""
    shape = bind_shape(buf.shape, var_vals)
    if shape == buf.shape:
        return buf
    new = buffers.new_buffer(buf.dtype, shape, _device_of(buf))
    buffers.store(new, buffers.lookup(buf))
    _keep_alive[buffers.slot(new)] = buf  # until `new` is garbage
    weakref.finalize(new, _keep_alive.pop, buffers.slot(new), None)
    return new


_keep_alive: dict[int, UOp] = {}
