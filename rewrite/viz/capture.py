"""The recorder behind the viewer: what the compiler did, kept as UOps until it is serialized.

`ACTIVE` is the recorder in use, or None. Everything that reports to it checks `ACTIVE is not None` (or
`active()`) first, so with VIZ off nothing is captured: no frames are inspected, no graphs kept.

A `Recorder` holds
- `log`: the engine's firings (a rewrite.trace.TraceLog pushed as the current log while recording);
- `realizes`: one `RealizeRecord` per realize (or per pipeline run outside a realize), each with its pipeline
  stages (`StageRecord`: the stage's graph before and after, and the slice of `log.firings` it made) and its
  kernel runs (`RunRecord`);
- `kernels`: one `KernelRecord` per compiled kernel (opts, LINEAR listing, source, work estimate);
- `derived`: links the rules do not make: a node a stage's function built from another (a kernel's REDUCE from
  the tensor REDUCE it computes), kept as new node -> (old node, how);
- `callsite_of`: for each tensor-graph node, the index in `callsites` of the Tensor call that created it (the
  first user-code frame outside this project's packages, and the Tensor method called).
"""

from __future__ import annotations

import atexit
import contextlib
import linecache
import os
import sys
import time
import types
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rewrite import trace

if TYPE_CHECKING:
    from rewrite.uop import UOp

ACTIVE: Recorder | None = None

# frames in these folders are the compiler's own; the first frame outside them is the user's call
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_INTERNAL = tuple(os.path.join(_ROOT, p) + os.sep for p in ("rewrite", "rules", "lower", "devices", "tensor"))

KernelInfo = str | int | float | list[str]


@dataclass
class StageRecord:
    name: str
    scope: str
    kernel: str
    before: UOp
    after: UOp
    first: int  # log.firings[first:last] were made by this stage
    last: int
    ms: float


@dataclass
class RunRecord:
    kernel: int  # index into Recorder.kernels
    seconds: float


@dataclass
class RealizeRecord:
    label: str
    stages: list[StageRecord] = field(default_factory=list)
    runs: list[RunRecord] = field(default_factory=list)


@dataclass
class KernelRecord:
    name: str
    device: str
    info: dict[str, KernelInfo] = field(default_factory=dict)  # opts, linear, source, flops, mem_bytes, ...


class Recorder:
    def __init__(self) -> None:
        self.log = trace.TraceLog()
        self.realizes: list[RealizeRecord] = []
        self.kernels: list[KernelRecord] = []
        self.kernel_ix: dict[Hashable, int] = {}
        self.callsites: list[str] = []
        self.callsite_of: dict[UOp, int] = {}
        self.derived: dict[UOp, tuple[UOp, str]] = {}
        self._callsite_ix: dict[str, int] = {}
        self._open: list[RealizeRecord] = []
        self._notes: dict[str, dict[str, KernelInfo]] = {}

    # -- realizes and stages (reported by lower/) --

    @contextlib.contextmanager
    def realize(self, label: str) -> Iterator[RealizeRecord]:
        """Group the stages and kernel runs inside this block under one realize."""
        rec = RealizeRecord(f"{label} {len(self.realizes)}")
        self.realizes.append(rec)
        self._open.append(rec)
        try:
            yield rec
        finally:
            self._open.pop()

    def _current(self) -> RealizeRecord:
        if self._open:
            return self._open[-1]
        if not self.realizes or self.realizes[-1].label.startswith("realize"):
            self.realizes.append(RealizeRecord(f"compile {len(self.realizes)}"))
        return self.realizes[-1]

    def stage_begin(self) -> tuple[int, float]:
        return len(self.log.firings), time.perf_counter()

    def stage_end(self, begun: tuple[int, float], name: str, scope: str, kernel: str, before: UOp,
                  after: UOp) -> None:
        first, t0 = begun
        ms = (time.perf_counter() - t0) * 1e3
        self._current().stages.append(StageRecord(name, scope, kernel, before, after, first, len(self.log.firings),
                                                  ms))

    def derive(self, new: UOp, old: UOp, how: str) -> None:
        """`new` was built from `old` by a function (not a rule); the first link reported for `new` stays."""
        if new is not old:
            self.derived.setdefault(new, (old, how))

    # -- kernels (reported by lower/) --

    def note(self, kernel: str, **info: KernelInfo) -> None:
        """Facts about a kernel being lowered (its opts), kept until `kernel()` registers it under `kernel`."""
        self._notes.setdefault(kernel, {}).update(info)

    def kernel(self, key: Hashable, name: str, device: str, **info: KernelInfo) -> int:
        """Register (or add facts to) the kernel known by `key`; the notes taken under its name join it."""
        ix = self.kernel_ix.get(key)
        if ix is None:
            ix = self.kernel_ix[key] = len(self.kernels)
            self.kernels.append(KernelRecord(name, device))
        k = self.kernels[ix]
        k.info.update(self._notes.pop(name, {}))
        k.info.update(info)
        return ix

    def run(self, key: Hashable, name: str, device: str, seconds: float) -> None:
        ix = self.kernel_ix.get(key)
        if ix is None:  # compiled before recording began
            ix = self.kernel(key, name, device)
        self._current().runs.append(RunRecord(ix, seconds))

    # -- tensor calls (reported by tensor/) --

    def created(self, u: UOp) -> None:
        """`u` was made by a Tensor call: its nodes that no earlier call made are attributed to this one."""
        if u in self.callsite_of:
            return
        text = _callsite()
        site = self._callsite_ix.get(text)
        if site is None:
            site = self._callsite_ix[text] = len(self.callsites)
            self.callsites.append(text)
        stack = [u]
        while stack:
            n = stack.pop()
            if n in self.callsite_of:
                continue
            self.callsite_of[n] = site
            stack.extend(s for s in n.src if s not in self.callsite_of)

    # -- output --

    def to_json(self) -> dict:
        from rewrite.viz.serialize import to_json

        return to_json(self)

    def write(self, path: str) -> None:
        from rewrite.viz.serialize import write

        write(self, path)


def _callsite() -> str:
    """`method() at file:line in function: code` for the innermost frame outside the compiler's packages."""
    f: types.FrameType | None = sys._getframe(2)
    method = "?"
    while f is not None and f.f_code.co_filename.startswith(_INTERNAL):
        method = f.f_code.co_name
        f = f.f_back
    if f is None:
        return f"{method}()"
    fn = f.f_code.co_filename
    rel = os.path.relpath(fn) if not os.path.relpath(fn).startswith("..") else fn
    code = linecache.getline(fn, f.f_lineno).strip()
    return f"{method}() at {rel}:{f.f_lineno} in {f.f_code.co_name}: {code}"


def active() -> Recorder | None:
    return ACTIVE


def start() -> Recorder:
    """Begin recording for the rest of the process (what VIZ=1 does); returns the recorder."""
    global ACTIVE
    if ACTIVE is None:
        ACTIVE = Recorder()
        trace._active.insert(0, ACTIVE.log)  # below any tracing() block, so those still see their own firings
    return ACTIVE


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record inside this block (the programmatic VIZ=1); the recorder stays readable after it."""
    global ACTIVE
    prev, rec = ACTIVE, Recorder()
    ACTIVE = rec
    trace._active.append(rec.log)
    try:
        yield rec
    finally:
        trace._active.remove(rec.log)
        ACTIVE = prev


def _at_exit() -> None:
    """VIZ=1: write the trace (to VIZ_OUT, else a temporary file) and, without VIZ_OUT, serve it until Ctrl-C."""
    from rewrite.env import knob_str

    rec = ACTIVE
    if rec is None:
        return
    out = knob_str("VIZ_OUT")
    path = out or os.path.join(_tempdir(), f"uopc-viz-{os.getpid()}.json")
    t0 = time.perf_counter()
    rec.write(path)
    sys.stderr.write(f"VIZ: wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB in "
                     f"{time.perf_counter() - t0:.2f} s)\n")
    if out:
        return
    from rewrite.viz.server import serve_forever

    serve_forever(path)


def _tempdir() -> str:
    import tempfile

    return tempfile.gettempdir()


def start_from_env() -> None:
    """Called once at import of `rewrite` when VIZ>=1."""
    start()
    atexit.register(_at_exit)
