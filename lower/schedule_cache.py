"""Schedule cache: a realize whose tensor graph has the structure of an earlier one replays that one's plan.

Scheduling and lowering depend only on a graph's structure, never on the data in its buffers, so the work of a
realize (callify, split-reduce, rangeify, kernel ASTs, compiled kernels, the memory plan) is kept as a `Plan`
keyed by the graph's structure with every GLOBAL BUFFER abstracted to its position: the k-th distinct buffer
slot met in a fixed walk of the roots (children first, roots in order). Two graphs have the same key exactly
when they differ only in which buffers they read: same ops, args, shapes, dtypes, devices and constants, the
same sharing of subterms, and the same pattern of repeated buffers (`x + x` and `x + y` differ). The knobs that
change lowering (DEVICE as the default device, NOOPT, BEAM, EGGLOG) are part of the key as well.

A replay binds the new graph's input buffers by position, allocates fresh outputs (a realize never writes into
a buffer somebody holds) and the intermediates' storage per the memory plan, launches the compiled kernels in
order and returns the intermediates' storage to the allocator. Data is looked up at every replay, so new data
under the same buffers is read; nothing of a plan holds a buffer or its data between calls. Kernels that take
`launch_checked` (the cpu device's) get their arrays' addresses from a check made once per storage and replay
(`_storage_addresses`: what devices.memory.check_specs checks per slot and launch); any storage that fails it
sends the replay through the checked calls, which name the problem. Temporaries are freed last to first, so
the next replay gets the same blocks, and the kernels' packed argument words are reused.

Multi-device graphs: a BUFFER on a device tuple is a position like any other (its device tuple is part of the
key); at a replay it stands for its shard buffers (`flat_inputs`), which take consecutive positions of the
plan's storage, and the key also records which shard buffers repeat. A result on a device tuple is rebuilt at
every replay from fresh shard buffers (`TupleResult`), as lower.schedule.assemble builds it. A plan whose steps
span several devices keeps, per step, the earlier steps it must wait for (lower.parallel.dependencies over
the plan's storage) and replays on the per-device threads (lower.parallel.run_steps).

Symbolic variables: a PARAM variable is part of the structure (its name, dtype and bounds), never its value;
a replay takes the values (`var_vals`, by name), sizes symbolic buffers with them and passes them to every
kernel, so one plan and one compiled kernel serve every value. Result buffers come back with their variables
bound (`UOp.bind`) to the replay's values. TRACE=1 bypasses the cache, so
the scheduling rules are traced at every realize.
"""

from __future__ import annotations

import collections
import sys
import time
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from lower import buffers
from lower.copyview import View, copy_into
from lower.estimate import Estimate, LazyEstimate
from lower.memory import plan as memory_plan
from lower.schedule import ScheduleItem
from rewrite import BufferArg, Ops, UOp
from rewrite.dtype import AddrSpace
from rewrite.env import getenv, lowering_knobs

MAX_PLANS = 256  # a graph with fresh constants each call (rand's key) would otherwise grow the cache forever
_BUFFER = Ops.BUFFER
_GLOBAL = AddrSpace.GLOBAL


class Key(tuple):
    """A signature: a tuple whose hash is worked out once (a realize looks its key up in several tables, and a
    model's key holds a part per node); equal to, and hashing as, the plain tuple of its parts."""

    _hash: int

    def __hash__(self) -> int:
        return self._hash


def _key(parts: list) -> Key:
    k = Key(parts)
    k._hash = tuple.__hash__(k)
    return k


def signature(roots: list[UOp], order: list[UOp] | None = None) -> tuple[tuple, list[UOp]]:
    """The structural key of `roots` and the graph's distinct GLOBAL buffers in key order (the k-th is bound to
    position k). A node is (op, arg, tag, child positions), its position its index in UOp.toposort_of(roots)
    (`order`, when the caller has it already); a BUFFER's slot becomes its position among the buffers."""
    if order is None:
        order = UOp.toposort_of(roots)
    pos = dict(zip(order, range(len(order)), strict=True))
    at = pos.__getitem__
    inputs: list[UOp] = []
    slot_pos: dict[int, int] = {}
    # a node with sources: its intern key without them (the op, the arg with its value types, the tag) and their
    # positions; a leaf: its intern key as it is (a longer tuple, so never equal to a node's part); a GLOBAL BUFFER:
    # its position among the buffers. Written out for one and two sources (most nodes): a third of the walk's time
    parts: list[tuple] = []
    add = parts.append
    for u in order:
        k, src = u._key, u.src
        if k[0] is _BUFFER and type(a := u.arg) is BufferArg and a.addrspace is _GLOBAL:
            b = slot_pos.get(a.slot)
            if b is None:
                b = slot_pos[a.slot] = len(inputs)
                inputs.append(u)
            add((_BUFFER, b, a.dtype, a.device, tuple(map(at, src))))
        elif not src:
            add(k)
        elif len(src) == 1:
            add((k[0], k[2:], (pos[src[0]],)))
        elif len(src) == 2:
            add((k[0], k[2:], (pos[src[0]], pos[src[1]])))
        else:
            add((k[0], k[2:], tuple(map(at, src))))
    parts.append(tuple(map(at, roots)))
    parts.append(lowering_knobs())
    return _key(parts), inputs


def flat_inputs(inputs: list[UOp]) -> tuple[list[UOp], tuple | None]:
    """The single-device buffers behind a graph's `inputs` (`signature`'s): a BUFFER on a device tuple stands for
    its shards, in device order. With an input on a device tuple, also the pattern in which shard buffers repeat
    (part of the key: two tuple buffers may share a shard); None when there is none. KeyError: a tuple buffer
    with no shards (never realized, or freed)."""
    if not any(isinstance(b.buf_arg.device, tuple) for b in inputs):
        return inputs, None
    flat: list[UOp] = []
    for b in inputs:
        flat += buffers.shards(b) if isinstance(b.buf_arg.device, tuple) else [b]
    first: dict[int, int] = {}
    return flat, tuple(first.setdefault(buffers.slot(b), k) for k, b in enumerate(flat))


def _count(b: UOp) -> int | UOp:
    """The element count of a BUFFER: an int, or an index expression over its variables."""
    n: int | UOp = 1
    for d in b.shape:
        n = d * n if isinstance(d, UOp) else n * d
    return n


def resolve(n: int | UOp, var_vals: dict[str, int]) -> int:
    """A symbolic count or dimension evaluated with the realize's variable values."""
    if isinstance(n, int):
        return n
    from rewrite.errors import EvalError, VariableError

    try:
        return int(n.evaluate(dict(var_vals)))
    except EvalError as e:
        raise VariableError(f"realize: a symbolic size needs a value: {e}; bind it: n = UOp.variable(name, lo, hi)"
                            f".bind(value)") from None


def bind_shape(shape: tuple, var_vals: dict[str, int]) -> tuple:
    """`shape` with each variable in it bound to its value in `var_vals`."""
    if all(isinstance(d, int) for d in shape):
        return shape
    out = []
    for d in shape:
        if isinstance(d, UOp):
            d = d.substitute({v: v.bind(var_vals[name]) for v in d.variables()
                              if (name := v.buf_arg.slot) in var_vals})
        out.append(d)
    return tuple(out)


def _device_of(b: UOp) -> str:
    d = b.buf_arg.device
    return d if isinstance(d, str) else str(getenv("DEVICE"))


def np_dtype(dtype: Any) -> Any:
    from devices.memory import np_dtype as storage

    return storage(dtype)


@dataclass(frozen=True)
class Alloc:
    """Storage to allocate at each replay: `count` elements of `dtype` on `device` (an expression over the
    variables when the buffer's size is symbolic)."""

    dtype: Any
    count: int | UOp
    device: str


@dataclass(frozen=True)
class Step:
    """One item of the plan: a compiled kernel (or a copy), its arrays as (storage index, numpy dtype to view the
    storage as) per local slot, and what DEBUG=2 prints."""

    kind: str
    kernel: Any
    refs: tuple[tuple[int, Any], ...]
    name: str
    device: str
    out_shape: str
    est: Estimate | LazyEstimate
    view: View | None = None  # a copy's window of its source (lower.copyview)
    dst_view: View | None = None  # and of its destination


@dataclass(frozen=True)
class TupleResult:
    """A result on a device tuple: a fresh BUFFER on `devices` whose shards are the storage indices `parts`, seen
    with the root's `shape` and shard `axis` (lower.multi.buffer_view)."""

    dtype: Any
    shape: tuple
    axis: int | None
    devices: tuple[str, ...]
    parts: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """Storage indices: [0, n_inputs) the graph's buffers by position, then `outs` (fresh at every replay, kept
    by the caller), then `temps` (freed after the replay). `roots[j]` is the storage index of root j's result (an
    input's index when the root is an input buffer itself), or for a root on a device tuple how to assemble it.
    `deps` (multi-device plans only): for each step, the earlier steps it waits for."""

    n_inputs: int
    input_allocs: tuple[Alloc, ...]  # for inputs that have no data yet (an empty tensor)
    outs: tuple[tuple[Any, tuple, str], ...]  # (dtype, shape, device) of each fresh result BUFFER
    temps: tuple[Alloc, ...]
    steps: tuple[Step, ...]
    roots: tuple[int | TupleResult, ...]
    written_inputs: tuple[int, ...] = ()  # inputs that a kernel writes in place (assignments' targets)
    deps: tuple[tuple[int, ...], ...] | None = None
    # replay's checked launches (`_checked_launches`), worked out at the first replay
    launches: list[Launches] = field(default_factory=list, compare=False, repr=False)


@dataclass(frozen=True)
class Launches:
    """How a replay launches a plan's kernels with one check per storage instead of one per slot at each launch
    (kernels that take `launch_checked`, each storage bound to one slot of a launch at most): per step the storage
    index of each slot it passes (None: that step takes the checked call, `kernel(arrays, var_vals)`), and per
    storage used so the bytes its slots need (-1: unused) and whether a kernel stores to it; `memo`, per step, what
    the kernel keeps between replays (CPUKernel.launch_checked: its packed argument words by addresses)."""

    slots: tuple[tuple[int, ...] | None, ...]
    need: tuple[int, ...]
    stored: frozenset[int]
    memo: tuple[dict, ...]


def build_plan(roots: list[UOp], inputs: list[UOp], items: list[ScheduleItem], outs: dict[UOp, UOp],
               kernels: list[Any], estimates: list[Estimate | LazyEstimate]) -> Plan:
    """The replayable form of a schedule. `inputs` are the graph's buffers by position, flattened (`flat_inputs`);
    `kernels[i]` / `estimates[i]` belong to the i-th kernel item."""
    from lower.multi import view_base
    from lower.parallel import dependencies, keep_of

    in_pos: dict[int, int] = {}
    for k, b in enumerate(inputs):
        in_pos.setdefault(buffers.slot(b), k)
    n_in = len(inputs)
    out_pos: dict[int, int] = {}
    out_specs: list[tuple[Any, tuple, str]] = []

    def result(b: UOp) -> int:
        s = buffers.slot(b)
        if s in in_pos:
            return in_pos[s]
        if s not in out_pos:
            out_pos[s] = len(out_specs)
            out_specs.append((b.dtype, b.shape, _device_of(b)))
        return n_in + out_pos[s]

    root_ix: list[int | TupleResult] = []
    for r in roots:
        b = outs[r]
        base = view_base(b) if isinstance(r.device, tuple) else None
        if base is None:
            root_ix.append(result(b))
            continue
        parts = tuple(result(p) for p in buffers.shards(base))
        root_ix.append(TupleResult(b.dtype, b.shape, b.axis, cast("tuple[str, ...]", base.device), parts))
    shared = memory_plan(items, keep_of(outs))
    temp_pos: dict[int, int] = {}  # owner slot -> temp index
    temps: list[Alloc] = []
    first_seen: dict[int, UOp] = {}
    for it in items:
        for b in it.bufs:
            first_seen.setdefault(buffers.slot(b), b)
    input_allocs = [Alloc(b.dtype, _count(b), _device_of(b)) for b in inputs]

    base_ix = n_in + len(out_specs)

    def storage(b: UOp) -> int:
        s = buffers.slot(b)
        if s in in_pos:
            return in_pos[s]
        if s in out_pos:
            return n_in + out_pos[s]
        owner = shared.get(s, first_seen[s])
        o = buffers.slot(owner)
        if o not in temp_pos:
            rep = first_seen.get(o, owner)
            temp_pos[o] = len(temps)
            temps.append(Alloc(rep.dtype, _count(rep), _device_of(rep)))
        return base_ix + temp_pos[o]

    steps: list[Step] = []
    kernel_ix = 0
    for it in items:
        refs = tuple((storage(b), np_dtype(b.dtype)) for b in it.bufs)
        shape = "x".join(str(d) for d in it.bufs[0].shape)
        dev = _device_of(it.bufs[0])
        if it.kind == "copy":
            steps.append(Step("copy", None, refs, it.name, dev, shape, Estimate(0, 0), it.view,
                              it.dst_view))
            continue
        steps.append(Step("kernel", kernels[kernel_ix], refs, it.name, dev, shape, estimates[kernel_ix]))
        kernel_ix += 1
    written = tuple(sorted({r[0] for st, it in zip(steps, items, strict=True) for r in st.refs[:it.outs]
                            if r[0] < n_in}))
    deps = None
    if len({st.device for st in steps}) > 1:
        where = {buffers.slot(b): storage(b) for it in items for b in it.bufs}
        deps = tuple(tuple(sorted(d)) for d in dependencies(items, where))
    return Plan(n_in, tuple(input_allocs), tuple(out_specs), tuple(temps), tuple(steps), tuple(root_ix), written,
                deps)


def writable(buf: UOp) -> Any:
    """The storage of `buf`, made writable: input data is kept read-only (tensor.buffers), so a buffer that an
    assignment writes in place gets its own writable copy first. Counts the write (buffers.wrote)."""
    buffers.wrote(buf)
    arr = buffers.lookup(buf)
    if isinstance(arr, np.ndarray) and not arr.flags.writeable:
        arr = arr.copy()
        buffers.store(buf, arr)
    return arr


def _alloc(a: Alloc, var_vals: dict[str, int] | None = None) -> tuple[Any, np.ndarray]:
    from devices import get_device

    dev = get_device(a.device)
    return dev, dev.alloc(resolve(a.count, var_vals or {}), a.dtype)


RECORDERS: list[Any] = []  # callables (plan, inputs, result buffers) told of every replay (tensor.jit's capture)


def replay(p: Plan, roots: list[UOp], inputs: list[UOp], var_vals: dict[str, int] | None = None,
           outs: list[UOp] | None = None) -> dict[UOp, UOp]:
    """Run plan `p` on a graph with its key: `inputs` are that graph's buffers by position (flattened:
    `flat_inputs`), `var_vals` the values of its variables by name. `outs` (tensor.jit's replays): write the
    results into these buffers (an earlier replay's, in order) instead of fresh ones. Every function in
    `RECORDERS` is told of the replay (p, inputs, result buffers) once it has run."""
    vv = dict(var_vals or {})
    debug = int(getenv("DEBUG"))
    t0 = time.perf_counter()
    arrays: list[np.ndarray] = []
    for b, a in zip(inputs, p.input_allocs, strict=True):
        if not buffers.has_data(b):  # an empty tensor: storage on first use, as a fresh schedule would
            dev, arr = _alloc(a, vv)
            buffers.store(b, arr, owner=dev)
        arrays.append(buffers.lookup(b))
    for i in p.written_inputs:
        arrays[i] = writable(inputs[i])
    out_bufs: list[UOp] = []
    for b in outs or ():
        arrays.append(writable(b))
    out_bufs += outs or ()
    for dtype, shape, device in p.outs if outs is None else ():
        b = buffers.new_buffer(dtype, bind_shape(shape, vv), device)
        dev, arr = _alloc(Alloc(dtype, _count(b), device), vv)
        buffers.store(b, arr, owner=dev)
        out_bufs.append(b)
        arrays.append(arr)
    temps = [_alloc(a, vv) for a in p.temps]
    arrays += [arr for _, arr in temps]
    fast = _checked_launches(p) if debug < 2 and p.deps is None else None
    ptrs = _storage_addresses(fast, arrays) if fast is not None else None

    def run(k: int) -> None:
        st = p.steps[k]
        if ptrs is not None and (slots := fast.slots[k]) is not None:  # type: ignore[union-attr]  # fast is set
            st.kernel.launch_checked(tuple(map(ptrs.__getitem__, slots)), fast.memo[k])  # type: ignore[union-attr]
            return
        views = [a if a.dtype == dt else a.view(dt) for a, dt in ((arrays[i], dt) for i, dt in st.refs)]
        if st.kind == "copy":
            copy_into(views[0], views[1], st.view, st.dst_view)
            return
        t1 = time.perf_counter()
        st.kernel(dict(enumerate(views)), vv)
        if debug >= 2:
            dt_s = time.perf_counter() - t1
            print(f"*** {st.device:6s} {st.name:28s} out {st.out_shape:>10s}  {dt_s * 1e3:9.3f} ms  "
                  f"{st.est.mem_bytes / dt_s / 1e9:7.2f} GB/s  {st.est.flops / dt_s / 1e9:7.2f} GFLOP/s",
                  file=sys.stderr)

    try:
        if p.deps is None:
            for k in range(len(p.steps)):
                run(k)
        else:
            from lower.parallel import run_steps

            run_steps([st.device for st in p.steps], p.deps, run)
    finally:
        arrays.clear()
        # freed last to first: the pool hands the most recently freed block of a size out first, so the next
        # replay's temporaries get the same blocks in the same order (the same addresses: kernels' packed words)
        for dev, arr in reversed(temps):
            dev.free(arr)
    if debug >= 1:
        nk = sum(s.kind == "kernel" for s in p.steps)
        on = f" on {len({s.device for s in p.steps})} devices" if p.deps is not None else ""
        print(f"ran {nk} kernels, {len(p.steps) - nk} copies{on} in {(time.perf_counter() - t0) * 1e3:.2f} ms",
              file=sys.stderr)
    for rec in RECORDERS:
        rec(p, inputs, out_bufs)
    if outs is not None and not roots:  # a replay for its effect on `outs` alone
        return {}
    n_in = p.n_inputs

    def buffer_of(i: int) -> UOp:
        return inputs[i] if i < n_in else out_bufs[i - n_in]

    res: dict[UOp, UOp] = {}
    for r, ix in zip(roots, p.roots, strict=True):
        res[r] = buffer_of(ix) if isinstance(ix, int) else _assemble(ix, [buffer_of(i) for i in ix.parts])
    return res


def _checked_launches(p: Plan) -> Launches:
    """The plan's Launches, worked out at its first replay."""
    if p.launches:
        return p.launches[0]
    n = p.n_inputs + len(p.outs) + len(p.temps)
    need = [-1] * n
    stored: set[int] = set()
    slots: list[tuple[int, ...] | None] = []
    for st in p.steps:
        specs = getattr(st.kernel, "checked_specs", None) if st.kind == "kernel" else None
        if specs is None or any(slot >= len(st.refs) or st.refs[slot][1] != want for slot, _, want, _, _ in specs):
            slots.append(None)
            continue
        idx = tuple(st.refs[slot][0] for slot, _, _, _, _ in specs)
        if len(set(idx)) != len(idx):  # one storage in two slots: the checked call says whether that may be
            slots.append(None)
            continue
        for i, (_, _, want, count, is_stored) in zip(idx, specs, strict=True):
            need[i] = max(need[i], count * want.itemsize)
            if is_stored:
                stored.add(i)
        slots.append(idx)
    launches = Launches(tuple(slots), tuple(need), frozenset(stored), tuple({} for _ in slots))
    p.launches.append(launches)
    return launches


def _storage_addresses(fast: Launches, arrays: list[np.ndarray]) -> list[int] | None:
    """The address of each storage the checked launches use, once every check that devices.memory.check_specs
    makes at a launch holds for it: a 1-D C-contiguous numpy array with the bytes its slots need, writable if a
    kernel stores to it, no two such storages at one address (so no launch's buffers alias). None when any does
    not: the replay then makes the checked calls, which say what is wrong."""
    ptrs = [0] * len(arrays)
    seen: set[int] = set()
    stored = fast.stored
    for i, (arr, need) in enumerate(zip(arrays, fast.need, strict=True)):
        if need < 0:
            continue
        if type(arr) is not np.ndarray or arr.ndim != 1 or arr.nbytes < need:
            return None
        flags = arr.flags
        if not flags.c_contiguous or (i in stored and not flags.writeable):
            return None
        ptrs[i] = ptr = arr.ctypes.data
        if need:
            if ptr in seen:
                return None
            seen.add(ptr)
    return ptrs


def _assemble(t: TupleResult, parts: list[UOp]) -> UOp:
    from lower.multi import buffer_view, storage_shape

    buf = buffers.new_buffer(t.dtype, storage_shape(t.shape, t.axis, len(t.devices)), t.devices)
    buffers.store_shards(buf, tuple(parts))
    return buffer_view(buf, t.shape, t.axis)


class PlanCache:
    """Plans by structural key, least recently used out first; counts hits and misses."""

    def __init__(self, limit: int = MAX_PLANS) -> None:
        self.limit = limit
        self._plans: collections.OrderedDict[tuple, Plan] = collections.OrderedDict()
        self.hits = self.misses = 0
        self.kernels_run = 0  # kernels launched by the plans replayed (what a benchmark reports per step)

    def get(self, key: tuple) -> Plan | None:
        p = self._plans.get(key)
        if p is None:
            self.misses += 1
            return None
        self.hits += 1
        self._plans.move_to_end(key)
        return p

    def put(self, key: tuple, p: Plan) -> None:
        self._plans[key] = p
        self._plans.move_to_end(key)
        while len(self._plans) > self.limit:
            self._plans.popitem(last=False)

    def clear(self) -> None:
        self._plans.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._plans)


__all__ = ["Plan", "PlanCache", "TupleResult", "bind_shape", "build_plan", "flat_inputs", "lowering_knobs", "replay",
           "resolve", "signature"]
