"""`jit`: run a step function (a training step) twice as written, then replay its kernels without Python.

    @jit
    def train_step(x, y):
        opt.zero_grad()
        loss = cross_entropy(model(x), y)
        loss.backward()
        opt.step(loss)
        return loss

Every call of a plain step rebuilds the forward, the gradient graph and the optimizer's update, hashes the graph
(lower.schedule_cache) and only then replays the cached plan: for a small model that Python work costs more than
the kernels. A `jit` function runs its body normally for its first two calls, recording each realize the body
does (the cached plan it replayed and the buffers it read and wrote); from the third call on it runs those
plans' kernels directly, in order, and returns the second call's result tensors, whose buffers the replay has
overwritten with the new values.

What a replay reads, per input buffer of each recorded plan:
  - a Tensor argument: the buffer of the argument in the same position of this call (same shape and dtype);
  - the result of an earlier plan of the same call: that plan's result buffer;
  - a buffer the body made from host data and registered with `host_input` (the optimizer's per-step scalars):
    the registered function's data, stored at every replay;
  - anything else: the buffer the second call read (a parameter, an optimizer state, a constant), so in-place
    updates (`assign`, the optimizer's) carry over from call to call.
The first two calls must agree: a buffer the body makes anew at each call with different data (`Tensor(numpy)`
of changing values, a random tensor) or a value carried between calls in a Python attribute would be frozen at
the second call's; the capture finds it (the two calls read different data there) and raises JitError, as it
does when the two calls realize different graphs. Python side effects of the body do not run on a replay, except
the functions it registered with `on_replay` (the optimizer counts its steps there), and a parameter's `.grad`
is the second call's tensor, refilled by each replay. TRACE or VIZ set: the body runs at every call. A realize
on a device tuple replays its plan's per-device steps (a Tensor argument on the tuple stands for its shards); one
across MPI ranks is captured as its schedule template (lower.mpi_cache) and replayed on every rank the same way,
its collectives included.
"""

from __future__ import annotations

import functools
import operator
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

import tensor.tensor as tt
from lower import buffers as registry
from lower import schedule_cache
from rewrite.env import env_keys, getenv, unset
from rewrite.errors import JitError
from rewrite.uop import UOp
from tensor.buffers import host_array, to_storage

Tensor = tt.Tensor
R = TypeVar("R")

# an input of a recorded plan: ("arg", i) | ("out", record, index) | ("host", slot) | ("fixed", buffer)
Source = tuple


class _Capture:
    """What one call of the body did: each replayed plan with its inputs and results, and the hooks it registered."""

    def __init__(self) -> None:
        self.records: list[tuple[schedule_cache.Plan, list[UOp], list[UOp]]] = []
        self.host: dict[int, tuple[UOp, Callable[[], np.ndarray]]] = {}
        self.after: list[Callable[[], None]] = []

    def __call__(self, p: schedule_cache.Plan, inputs: list[UOp], outs: list[UOp]) -> None:
        self.records.append((p, list(inputs), list(outs)))


_ACTIVE: list[_Capture] = []


def capturing() -> bool:
    """Whether a jit function's body is running under capture now."""
    return bool(_ACTIVE)


def host_input(t: Tensor, refresh: Callable[[], np.ndarray]) -> None:
    """Within a capture: `t` (a realized tensor the body made from host data) holds `refresh()`'s data at every
    replay, stored before the kernels run. Outside a capture nothing happens."""
    if _ACTIVE:
        if isinstance(t.device, tuple):  # on a device tuple: each shard this process holds is refilled
            from lower.multi import view_base

            base = view_base(t.uop) if t.uop.axis is None else None
            if base is None or not t.is_realized:
                raise JitError(f"host_input: a tensor on {t.device} must be realized and replicated, got "
                               f"{t.uop.short()}")
            for b in registry.shards(base):
                if registry.has_data(b):
                    _ACTIVE[-1].host[registry.slot(b)] = (b, _reshaped(refresh, b.shape))
            _ACTIVE[-1].host[registry.slot(base)] = (base, refresh)  # an MPI template reads it whole: its shards
            return
        if not t.is_realized or t.uop.op is not schedule_cache._BUFFER:
            raise JitError(f"host_input: the tensor must be realized host data (a BUFFER), got {t.uop.short()}")
        _ACTIVE[-1].host[registry.slot(t.uop)] = (t.uop, refresh)


def _reshaped(refresh: Callable[[], np.ndarray], shape: tuple) -> Callable[[], np.ndarray]:
    return lambda: np.asarray(refresh()).reshape(shape)


def on_replay(fn: Callable[[], None]) -> None:
    """Within a capture: call `fn` after every replay (the Python effect of the body that the replay skips)."""
    if _ACTIVE:
        _ACTIVE[-1].after.append(fn)


def _tensors(x: Any) -> list[Tensor]:
    if isinstance(x, Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


class jit(Generic[R]):
    """A step function captured at its second call and replayed from its third (see the module's text)."""

    def __init__(self, fn: Callable[..., R]) -> None:
        self.fn = fn
        self.calls = 0
        self._first: tuple[_Capture, list[UOp]] | None = None
        self._program: list[tuple[schedule_cache.Plan, list[Source], list[UOp]]] | None = None
        self._host: list[tuple[UOp, Callable[[], np.ndarray]]] = []
        self._after: list[Callable[[], None]] = []
        self._arg_specs: list[tuple[tuple, Any, Any]] = []
        self._result: Any = None
        # the last replay's Tensor arguments (weak references), each one's UOp and device, the shards of each
        # argument on a device tuple (slot, shards: what the registry held), and each plan's input buffers: a call
        # with the same arguments, their UOps unchanged, runs those again (`_same_args`). A realized UOp stays
        # realized while it lives (a buffer's data goes only with it), and the checks made for these arguments
        # (shapes, layouts, the buffers behind them) depend on nothing else. It is dropped when an argument dies,
        # so it keeps no argument's buffers alive past the tensor (an argument given another UOp keeps the old
        # one's until the next call)
        self._last: tuple[tuple, tuple, tuple[tuple, tuple], list[list[UOp]]] | None = None

    def reset(self) -> None:
        """Forget the capture: the next two calls run the body again."""
        self.calls, self._first, self._program, self._result = 0, None, None, None
        self._host, self._after, self._last = [], [], None

    def __call__(self, *args: Any) -> R:
        if not unset(_TRACE_VIZ) and (int(getenv("TRACE")) or int(getenv("VIZ"))):
            return self.fn(*args)
        if (last := self._last) is not None and _same_args(args, last):
            return self._run(last[3])
        targs = [a for a in args if isinstance(a, Tensor)]
        if targs:
            Tensor.realize(*targs)
        bufs = _arg_buffers(targs)
        if self._program is not None:
            return self._replay(args, targs, bufs)
        self.calls += 1
        cap = _Capture()
        _ACTIVE.append(cap)
        schedule_cache.RECORDERS.append(cap)
        try:
            result = self.fn(*args)
            pending = [t for t in _tensors(result) if not t.is_realized]
            if pending:
                Tensor.realize(*pending)
        finally:
            schedule_cache.RECORDERS.remove(cap)
            _ACTIVE.remove(cap)
        if self._first is None:
            self._first = (cap, bufs)
            return result
        first, first_bufs = self._first
        self._first = None
        self._program = self._build(first, first_bufs, cap, bufs)
        self._host = list(cap.host.values())
        self._after = cap.after
        self._arg_specs = [_spec(t) for t in targs]
        self._result = result
        return result

    def _build(self, c1: _Capture, a1: list[UOp], c2: _Capture, a2: list[UOp]
               ) -> list[tuple[schedule_cache.Plan, list[Source], list[UOp]]]:
        if [id(p) for p, _, _ in c1.records] != [id(p) for p, _, _ in c2.records]:
            raise JitError(f"jit: the first two calls realized different graphs ({len(c1.records)} and "
                           f"{len(c2.records)} realizes, or different structures); a jit function must do the same "
                           f"work at every call (no Python branches on data, no changing shapes)")
        s1, s2 = self._sources(c1, a1), self._sources(c2, a2)
        for k, ((_, ins1, _), (_, ins2, _), src1, src2) in enumerate(zip(c1.records, c2.records, s1, s2,
                                                                           strict=True)):
            for j, (x, y) in enumerate(zip(src1, src2, strict=True)):
                if x[0] != y[0] or (x[0] in ("arg", "out") and x[1:] != y[1:]):
                    raise JitError(f"jit: realize {k} input {j} came from {x[0]} at the first call and {y[0]} at "
                                   f"the second; a jit function must read the same things at every call")
                if x[0] == "fixed" and x[1] is not y[1] and not _same_data(ins1[j], ins2[j]):
                    raise JitError(f"jit: realize {k} reads a buffer {ins2[j].short()} whose data differs between the "
                                   f"first two calls (new host data or random numbers made in the body, or a value "
                                   f"kept between calls in a Python attribute): a replay would freeze it; pass it "
                                   f"as a Tensor argument or update a tensor in place with assign")
        # a host input is the same buffer at every replay, its data stored anew first
        return [(p, [("fixed", c2.host[s[1]][0]) if s[0] == "host" else s for s in src], outs)
                for (p, _, outs), src in zip(c2.records, s2, strict=True)]

    @staticmethod
    def _sources(cap: _Capture, args: list[UOp]) -> list[list[Source]]:
        arg_of = {registry.slot(b): i for i, b in enumerate(args)}
        out_of: dict[int, tuple[int, int]] = {}
        out: list[list[Source]] = []
        for k, (_, ins, outs) in enumerate(cap.records):
            src: list[Source] = []
            for b in ins:
                s = registry.slot(b)
                if s in out_of:
                    src.append(("out", *out_of[s]))
                elif s in arg_of:
                    src.append(("arg", arg_of[s]))
                elif s in cap.host:
                    src.append(("host", s))
                else:
                    src.append(("fixed", b))
            out.append(src)
            for m, b in enumerate(outs):
                out_of[registry.slot(b)] = (k, m)
        return out

    def _replay(self, args: tuple, targs: list[Tensor], bufs: list[UOp]) -> Any:
        specs = [_spec(t) for t in targs]
        if specs != self._arg_specs:
            raise JitError(f"jit: called with Tensor arguments {_fmt(specs)}, captured with {_fmt(self._arg_specs)}; "
                           f"a jit function replays fixed shapes (reset() it, or make one jit per shape)")
        assert self._program is not None
        ins = [[bufs[s[1]] if s[0] == "arg" else self._program[s[1]][2][s[2]] if s[0] == "out" else s[1]
                for s in src] for _, src, _ in self._program]
        self._last = None
        if len(targs) == len(args):  # Tensor arguments only
            multi = [b for b in bufs if isinstance(b.buf_arg.device, tuple)]
            shards = (tuple(map(registry.slot, multi)), tuple(map(registry.shards, multi)))
            gone = functools.partial(_forget_last, weakref.ref(self))
            self._last = (tuple(weakref.ref(a, gone) for a in targs), tuple((a.uop, a._device) for a in targs),
                          shards, ins)
        return self._run(ins)

    def _run(self, ins: list[list[UOp]]) -> Any:
        """Run the captured plans on their input buffers (`ins`, per plan) and the registered hooks."""
        replay_into, plans = _lower_fns()
        for buf, refresh in self._host:
            if not isinstance(buf.buf_arg.device, tuple):  # a BUFFER on a tuple is refilled shard by shard
                _refill(buf, refresh())
        assert self._program is not None
        for (p, _, outs), pins in zip(self._program, ins, strict=True):
            if isinstance(p, schedule_cache.Plan):
                schedule_cache.replay(p, [], pins, None, outs)
                plans.kernels_run += sum(st.kind == "kernel" for st in p.steps)
            else:  # a realize across MPI ranks (lower.mpi_cache's template)
                replay_into(p, pins, outs)
        self.calls += 1
        for fn in self._after:
            fn()
        return self._result


_TRACE_VIZ = env_keys("TRACE", "VIZ")


def _same_args(args: tuple, last: tuple[tuple, tuple, tuple[tuple, tuple], list]) -> bool:
    """Whether `args` are the last replay's (`jit._last`): the same Tensors, each holding the same UOp on the same
    devices, and the registry holding the same shards for the buffers on a device tuple behind them."""
    refs, held, shards, _ = last
    if len(args) != len(refs):
        return False
    for a, r, (u, d) in zip(args, refs, held, strict=True):
        if a is not r() or a.uop is not u or a._device is not d:
            return False
    return all(map(operator.is_, map(_shards.get, shards[0]), shards[1]))


def _forget_last(owner: weakref.ref, gone: weakref.ref) -> None:
    """An argument of a jit's last replay died (`gone`): the jit forgets that replay (`jit._last`)."""
    j = owner()
    if j is not None and (last := j._last) is not None and any(r is gone for r in last[0]):
        j._last = None


_shards = registry._shards  # read per call by _same_args
_lowered: tuple[Callable[..., None], Any] | None = None


def _lower_fns() -> tuple[Callable[..., None], Any]:
    """lower.mpi_cache.replay_into and lower.realize.plans, imported once (a function's `from m import f` runs the
    import machinery at every call: about a microsecond)."""
    global _lowered
    if _lowered is None:
        from lower.mpi_cache import replay_into
        from lower.realize import plans

        _lowered = (replay_into, plans)
    return _lowered


def _spec(t: Tensor) -> tuple[tuple, Any, Any]:
    """What a replay's Tensor argument must match: shape, dtype and device (and the layout on a device tuple)."""
    return t.shape, t.dtype, (t.device, t.uop.axis) if isinstance(t.device, tuple) else t.device


_view_base: Callable[[UOp], UOp | None] | None = None  # lower.multi.view_base, imported on first use


def _load_view_base() -> Callable[[UOp], UOp | None]:
    global _view_base
    from lower.multi import view_base

    _view_base = view_base
    return view_base


def _arg_buffers(targs: list[Tensor]) -> list[UOp]:
    """The buffers behind the Tensor arguments, as the recorded plans name them: a tensor on a device tuple stands
    for its BUFFER on the tuple (an MPI template's input) and for its shards (a plan's: schedule_cache.flat_inputs),
    in device order."""
    view_base = _view_base or _load_view_base()
    out: list[UOp] = []
    for t in targs:
        base = view_base(t.uop) if isinstance(t.device, tuple) else t.uop
        if base is None or base.op is not schedule_cache._BUFFER:
            raise JitError("jit: a Tensor argument must be a whole realized tensor, not a view of one; pass "
                           "x.contiguous() (realized) instead")
        out += [base, *registry.shards(base)] if isinstance(base.buf_arg.device, tuple) else [base]
    return out


def _refill(buf: UOp, data: np.ndarray) -> None:
    """Store host `data` as `buf`'s storage (in place on a device with its own memory)."""
    from devices import get_device

    host = to_storage(np.asarray(data), buf.dtype)
    dev = get_device(buf.device if isinstance(buf.device, str) else str(getenv("DEVICE")))
    if getattr(dev, "device_memory", False):
        registry.wrote(buf)
        registry.lookup(buf)[:] = host
    else:
        registry.store(buf, host)


def _same_data(a: UOp, b: UOp) -> bool:
    if a.shape != b.shape or a.dtype is not b.dtype:
        return False
    if isinstance(a.device, tuple):  # on a device tuple: the shards this process holds (under MPI, its rank's)
        pairs = list(zip(registry.shards(a), registry.shards(b), strict=True))
        return all(registry.has_data(x) == registry.has_data(y) and (not registry.has_data(x) or _same_data(x, y))
                   for x, y in pairs)
    return bool(np.array_equal(host_array(a), host_array(b), equal_nan=True))


def _fmt(specs: list[tuple[tuple, Any, Any]]) -> str:
    return ", ".join(f"{d.name}{list(s)}" for s, d, _ in specs) or "none"


__all__ = ["capturing", "host_input", "jit", "on_replay"]
