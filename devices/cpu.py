"""The CPU device: LINEAR programs rendered to C (devices.c_render), compiled to a shared object, run via ctypes.

Compiler (devices.cpu_compiler): `CC` if set, else gcc, else clang, else cc (gcc compiles about twice as fast
as clang here); for a cross target (aarch64 on an x86-64 host) the target's prefixed gcc. Flags: -O2 -fPIC
-shared, the Target's instruction-set flags (-march=native, -march=x86-64-v3, ...), plus what exactness needs
(see c_render): -ffp-contract=off (no fused multiply-add), -fwrapv (signed ints wrap), -fno-math-errno, and for
gcc -fexcess-precision=standard (a cast to _Float16 rounds). Never -ffast-math.

Cache: a shared object is keyed by a hash of the source, the compiler's identity, the flags and the Target, kept
under rewrite.env.cache_dir()/cpu (CACHE=0: no disk cache), verified before use, written atomically and bounded
to CACHE_SIZE bytes (devices.objcache); in memory the `max_libs` most recently used libraries are kept, and a
library is unloaded when no kernel refers to it any more. `compile_batch` puts many kernels in one C file,
which costs one compiler start for all of them; a batch with enough source is split into one file per host core,
balanced by source size, compiled in parallel. `compile_ahead` starts files of a batch before the batch is
complete (lower.realize offers each kernel as soon as it is lowered), so the compiler runs on the other cores
while Python lowers the rest.

Launch: `kernel({slot: array}, {name: int})` checks each array against its BUFFER (dtype, size, contiguity,
aliasing) and passes pointers in slot order, then the variables by name. A kernel with SPECIALs (e.g. core_id)
takes each as a trailing parameter and runs once per value (every combination, for several): it is compiled with
an entry wrapper `NAME__entry(void** args, int core_id)` that unpacks 64-bit argument words and turns the flat
id into the SPECIAL values, and devices.cpu_pool runs that wrapper across a native thread pool, so the slices
run on several cores at once.

Tiers (CPU_TIERS=1, the default, on a host with two cores or more): a file whose -O2 object is neither loaded nor
in the disk cache is compiled at -Og first (gcc takes ~0.4x the CPU of -O2 on the training benchmarks' kernels,
which then run 1x to 3x as long), and its kernels run that; the same file is queued for -O2 on one background
thread whose compiler processes run at nice 19 and start only while no kernel file of a realize compiles or waits
to. A kernel takes its -O2 code at its first call after that build is done (CPUKernel.tier says which it runs). The
two tiers are cached apart (the tier is in the key); the exactness flags are the same, so results are bit for bit
the same. At exit the queued builds are dropped and a running one is terminated (its temporary file removed), so
exit does not wait; a later process that finds the -Og object cached but no -O2 one compiles the file at -O2 at
once (a script shorter than its -O2 build would otherwise run -Og code at every run).
`CPUDevice.finish_upgrades()` waits for the queued builds (benchmarks, tests).

SANITIZE=address compiles with AddressSanitizer and devices.memory allocates every buffer at its exact size, so
an out-of-bounds access is reported. The ASan runtime must come first in the process:
`LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 SANITIZE=address python ...`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import itertools
import math
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from devices import cpu_pool
from devices.base import Target, cpu_target
from devices.c_render import C_ALU_OPS, ctype, is_reserved, render_function, render_source, storage_type
from devices.c_scalar import unique_symbol
from devices.cpu_compiler import Compiler
from devices.cpu_jobs import _RUNNING, _UPGRADES, _compile_workers, _Job, _load, _Upgrade
from devices.linear import Program, analyze, const_value, special_bound
from devices.memory import Allocator, BufferSpec, buffer_specs, check_specs, check_vars, np_dtype
from devices.toolrun import balanced_groups
from rewrite.dtype import DType, dtypes
from rewrite.env import getenv
from rewrite.ops import Ops
from rewrite.uop import UOp

_CT = {
    dtypes.bool: ctypes.c_bool, dtypes.int8: ctypes.c_int8, dtypes.uint8: ctypes.c_uint8,
    dtypes.int16: ctypes.c_int16, dtypes.uint16: ctypes.c_uint16, dtypes.int32: ctypes.c_int32,
    dtypes.uint32: ctypes.c_uint32, dtypes.int64: ctypes.c_int64, dtypes.uint64: ctypes.c_uint64,
    dtypes.index: ctypes.c_longlong,
}


def entry_source(prog: Program, symbol: str, entry: str) -> str:
    """The wrapper cpu_pool calls: `void entry(void** args, int core_id)`. args holds one 64-bit word per buffer
    pointer, then per variable, then the bounds of the SPECIALs after the first; core_id is the flat index into
    their product (the last SPECIAL varies fastest), unravelled here so one launch covers every combination."""
    # the wrapper's own names must not hide the kernel it calls
    a, c = ("args", "core_id") if symbol not in ("args", "core_id") else ("args_", "core_id_")
    nb, nv = len(prog.buffers), len(prog.variables)
    params = [f"({storage_type(b.dtype)}*){a}[{i}]" for i, b in enumerate(prog.buffers.values())]
    params += [f"({ctype(p.dtype)})(intptr_t){a}[{nb + i}]" for i, p in enumerate(prog.variables.values())]
    bounds = [f"(long long)(intptr_t){a}[{nb + nv + j}]" for j in range(len(prog.specials) - 1)]
    for j in range(len(prog.specials)):
        ids = f"(long long){c}" + "".join(f" / {b}" for b in bounds[j:])
        params.append(f"({ids}) % {bounds[j - 1]}" if j else ids)
    # call the kernel through a local alias: a call to its exported name would bind to a same-named function of
    # another library (a kernel called `fork` would call libc's fork)
    return (f"static __typeof__({symbol}) {entry}_kernel __attribute__((alias(\"{symbol}\")));\n"
            f"void {entry}(void** {a}, int {c}) {{\n  {entry}_kernel({', '.join(params)});\n}}")


class CPUKernel:
    """A compiled kernel: `kernel({slot: array}, {name: value})`. `src` is its C source file; `entry` names its
    thread-pool wrapper (kernels with SPECIALs only)."""

    def __init__(self, prog: Program, symbol: str, src: str, lib: ctypes.CDLL, entry: str | None = None,
                 upgrade: _Upgrade | None = None) -> None:
        self.prog, self.name, self.symbol, self.src = prog, prog.name, symbol, src
        self._entry_name = entry
        self._bind(lib)
        # the -O2 build this kernel's -Og code waits for (tiers: module docstring); "fast" while it runs -Og
        self._upgrade = upgrade
        self.tier = "fast" if upgrade is not None else "opt"
        # constant SPECIAL bounds (the usual core_id) are read once, not at every launch
        consts = [int(const_value(sp.src[0])) for sp in prog.specials.values() if sp.src[0].op is Ops.CONST]
        self._bounds: list[int] | None = consts if len(consts) == len(prog.specials) else None
        self._specs = buffer_specs(prog.buffers, prog.stored)  # what each launch checks its arrays against

    def _bind(self, lib: ctypes.CDLL) -> None:
        """Call into `lib` from now on (its function and entry wrapper)."""
        prog = self.prog
        fn = getattr(lib, self.symbol)
        fn.argtypes = ([ctypes.c_void_p] * len(prog.buffers) + [_CT[p.dtype] for p in prog.variables.values()]
                       + [ctypes.c_longlong] * len(prog.specials))
        fn.restype = None
        # the wrapper's address, for cpu_pool.launch (a kernel compiled without one runs its ids one by one)
        entry = ctypes.cast(getattr(lib, self._entry_name), ctypes.c_void_p).value if self._entry_name else None
        self.lib, self.fn, self.entry = lib, fn, entry
        self.path: str | None = getattr(lib, "_name", None)

    def _take_upgrade(self) -> None:
        """The -O2 build is done: call it from now on (a failed or dropped build leaves the -Og code)."""
        up, self._upgrade = self._upgrade, None
        if up is not None and up.lib is not None:
            self._bind(up.lib)
            self.tier = "opt"

    def binary(self) -> bytes:
        """The shared object this kernel was loaded from (it may hold the other kernels of its batch), as bytes;
        empty when it was compiled to a temporary file that is gone (CACHE=0)."""
        try:
            with open(self.path or "", "rb") as f:
                return f.read()
        except OSError:
            return b""

    def __call__(self, buffers: dict[int, np.ndarray], var_vals: dict[str, int] | None = None) -> None:
        if self._upgrade is not None and self._upgrade.done:
            self._take_upgrade()
        prog = self.prog
        vv = var_vals or {}
        ints = check_vars(prog.variables, vv, self.name) if prog.variables else []
        args = check_specs(self._specs, buffers, vv, self.name)[1] + ints
        if not prog.specials:
            self.fn(*args)
            return
        bounds = self._bounds or [special_bound(sp, vv, self.name) for sp in prog.specials.values()]
        total = math.prod(bounds) if min(bounds) > 0 else 0
        if self.entry is None or total >= 1 << 31:
            for c in itertools.product(*map(range, bounds)):
                self.fn(*args, *c)
            return
        cpu_pool.launch(self.entry, args + bounds[1:], total)

    @property
    def checked_specs(self) -> tuple[BufferSpec, ...] | None:
        """What a caller must check its arrays against (devices.memory.check_specs's checks) before it calls
        `launch_checked`; None when this kernel takes no such launch (it has variables or SPECIAL bounds that
        depend on them, or a buffer of symbolic size)."""
        if self.prog.variables or self._bounds is None or any(n < 0 for _, _, _, n, _ in self._specs):
            return None
        return self._specs

    def launch_checked(self, ptrs: tuple[int, ...], memo: dict) -> None:
        """Run on the buffers at `ptrs` (the addresses of `checked_specs`' slots, in order), which the caller has
        checked as check_specs would: a replay checks each storage once rather than each slot at each launch.
        `memo` is the caller's, one per call site (a replay's step): the thread pool's packed argument words are
        kept there by address tuple, the last few (a replay's temporaries come back at the same addresses)."""
        if self._upgrade is not None and self._upgrade.done:
            self._take_upgrade()
        bounds = self._bounds
        if not bounds:  # no SPECIALs (checked_specs: a kernel with SPECIALs has constant bounds here)
            self.fn(*ptrs)
            return
        total = math.prod(bounds) if min(bounds) > 0 else 0
        if self.entry is None or total >= 1 << 31:
            for c in itertools.product(*map(range, bounds)):
                self.fn(*ptrs, *c)
            return
        if (words := memo.get(ptrs)) is None:
            if len(memo) >= 4:
                memo.clear()
            words = memo[ptrs] = cpu_pool.pack([*ptrs, *bounds[1:]])
        cpu_pool.launch(self.entry, words, total)


@dataclass
class _Part:
    """One kernel made ready for a C file (CPUDevice._part); `lib` is the compile of its file once begun (by
    compile_ahead), with `src` that file's text."""

    prog: Program
    sym: str
    funcs: list[str]  # its function, then its entry wrapper if any
    helpers: dict[str, str]
    entry: str | None
    target: str  # the Target's key
    lib: _Job | None = None  # its result: (library, the -O2 build to wait for or None)
    src: str = ""

    @property
    def chars(self) -> int:
        """Its C source's size (its functions'), what a file's compile time is reckoned by."""
        return sum(map(len, self.funcs))


def _file(parts: Sequence[_Part]) -> tuple[str, str]:
    """The C file of some kernels, and what to call it in messages."""
    helpers: dict[str, str] = {}
    for p in parts:
        helpers.update(p.helpers)
    src = render_source([f for p in parts for f in p.funcs], helpers)
    if int(getenv("DEBUG")) >= 4:
        print(src, file=sys.stderr)
    return src, f"kernel {parts[0].prog.name!r}" if len(parts) == 1 else f"{len(parts)} kernels"


_WARMING: list[threading.Thread] = []  # CPUDevice.warm_up's build of the thread pool, once begun


def _build_pool() -> None:
    with contextlib.suppress(Exception):  # left for the launch that needs the pool to meet and report
        cpu_pool.prepare()


def _finish_warming() -> None:
    """At exit, wait for a pool build still running: a daemon thread killed mid-compile would leave its temporary
    object in the cache directory (and the finished build is cached for the next process)."""
    for t in _WARMING:
        t.join(timeout=60)


class CPUDevice(Allocator):
    """The `cpu` device (the default): C via gcc or clang, loaded with ctypes."""

    name = "cpu"
    supported_ops: frozenset[Ops] = C_ALU_OPS | frozenset({Ops.CAST, Ops.BITCAST})
    # ops C has (libm) that lowering should still replace by their polynomial decompositions: a libm call keeps
    # a loop from vectorizing, and the decompositions are within 1 ulp (rules/transcendental.py)
    decompose: frozenset[Ops] = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})

    def __init__(self) -> None:
        super().__init__()
        self.compiler = Compiler()
        self._cross: dict[str, Compiler] = {}
        # (LINEAR, symbol) -> (Program, function text, helpers) that render made, taken by the compile of the same
        # kernel (the pipeline renders, then compiles: the function is made once); bounded, oldest dropped first
        self._rendered: dict[tuple[UOp, str], tuple[Program, str, dict[str, str]]] = {}
        self._ahead: dict[tuple[UOp, str], _Part] = {}  # (LINEAR, name) -> a kernel compile_ahead took
        self._queue: list[_Part] = []  # compile_ahead's kernels not yet in a file, all for _queue_target
        self._queue_target: Target | None = None
        # the queue, and the files compile_ahead started that are not done (a finished file starts the next one
        # from its own thread)
        self._lock = threading.Lock()
        self._inflight: dict[_Job, int] = {}  # each with its C source's size
        self._pace = (0.0, 0)  # seconds and chars of the files compile_ahead finished (their compile's pace)

    def default_target(self) -> Target:
        """The host's target, or the level CPU_TARGET names."""
        return cpu_target(str(getenv("CPU_TARGET")) or "native")

    def compiler_for(self, target: Target) -> Compiler:
        if not target.compiler_prefix:
            return self.compiler
        if target.compiler_prefix not in self._cross:
            self._cross[target.compiler_prefix] = Compiler(target.compiler_prefix)
        return self._cross[target.compiler_prefix]

    def render(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> str:
        """The C source of one kernel (a whole file: includes, helpers, the function). The text is the same for
        every cpu target: the vector widths are in the LINEAR program, the instruction set in the flags."""
        if (ahead := self._ahead.get((linear, name))) is not None:  # analyzed already by compile_ahead
            return render_source(ahead.funcs[:1], ahead.helpers)
        sym = _symbol(name)
        prog, func, helpers = self._function(linear, sym)
        if len(self._rendered) >= RENDERED_KEPT:
            del self._rendered[next(iter(self._rendered))]
        self._rendered[(linear, sym)] = (prog, func, helpers)
        return render_source([func], helpers)

    def _function(self, linear: UOp, sym: str) -> tuple[Program, str, dict[str, str]]:
        """The analyzed program, C function text and helpers of one kernel under the symbol `sym`: the one render
        made (taken, so that compile's Program is its own), else made now."""
        if (made := self._rendered.pop((linear, sym), None)) is not None:
            return made
        prog = analyze(linear, self.name, self.supported_ops, sym)
        helpers: dict[str, str] = {}
        return prog, render_function(prog, sym, helpers), helpers

    def _part(self, linear: UOp, name: str, taken: set[str], target: Target) -> _Part:
        """One kernel made ready for a C file: analyzed, its function rendered under a symbol clear of `taken`
        (which gets it), and its thread-pool entry wrapper if it has SPECIALs."""
        sym = unique_symbol(_symbol(name), taken)
        taken.add(sym)
        prog, func, helpers = self._function(linear, sym)
        prog.name = name
        part = _Part(prog, sym, [func], dict(helpers), None, target.key)
        if prog.specials:  # named clear of every kernel symbol in this file
            part.entry = next(e for i in itertools.count()
                              if not {e := f"{sym}__entry{i or ''}", f"{e}_kernel"} & taken)
            taken.update((part.entry, f"{part.entry}_kernel"))
            part.funcs.append(entry_source(prog, sym, part.entry))
        return part

    def warm_up(self) -> None:
        """Build the thread pool on a spare core now, in the background (lower.realize calls this as it begins to
        schedule a new graph: the pool's compile, ~0.2 s of CPU when the disk cache lacks it, overlaps the schedule)."""
        if not _WARMING and cpu_pool.unbuilt():
            _ = self.compiler.cc, self.compiler.is_clang  # found and identified here, not in two threads at once
            _WARMING.append(threading.Thread(target=_build_pool, name="cpu-pool-build", daemon=True))
            _WARMING[0].start()
            atexit.register(_finish_warming)

    @staticmethod
    def planning() -> contextlib.AbstractContextManager[None]:
        """lower.realize schedules and lowers a new graph's kernels in this block: the -O2 builds that earlier
        realizes queued (tiers) start after it, once no kernel file compiles either. Even at nice 19 such a build
        took a core the schedule and the lowering share with this realize's own -Og files."""
        return _RUNNING.plans()

    def compile(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> CPUKernel:
        return self.compile_batch([(linear, name)], target)[0]

    def compile_ahead(self, linear: UOp, name: str, target: Target | None = None) -> None:
        """Begin compiling a kernel before its batch is complete: lower.realize calls this for each kernel as soon
        as it is lowered, while it lowers the next ones. Kernels gather in a queue; while fewer files compile than
        the host has cores but one (Python keeps one to lower the next kernels: _ahead_slots), the queue's first
        kernels, about AHEAD_CHARS of C source at most, become a file that compiles in a background thread once
        the queue holds AHEAD_IDLE_CHARS (the compiler is another process, so waiting on it holds no GIL: it runs
        on another core while Python lowers). A file that finishes starts the next one from its own thread, so
        the compiler never waits for Python; and the kernels lowered while every slot was busy stay in the queue,
        where the compile_batch that names them shares them out across every core in files of its own (a file
        started earlier would wait for a slot whole, and be the last to finish). The compile_batch that names the
        same (LINEAR, name) takes the result. On a host with one core this does nothing (nothing to overlap)."""
        if _compile_workers() < 2:  # no core to overlap on: a file more is only another compiler start
            return
        tgt = target or self.default_target()
        if (linear, name) in self._ahead:
            return
        with self._lock:
            if self._queue and self._queue_target is not None and self._queue_target.key != tgt.key:
                self._start(len(self._queue))  # another target: its kernels go to a file of their own now
            self._queue_target = tgt
            taken = {p.sym for p in self._queue}
        part = self._part(linear, name, taken, tgt)
        self._ahead[(linear, name)] = part
        while len(self._ahead) > RENDERED_KEPT:  # never claimed (a failed realize): forget the oldest
            del self._ahead[next(iter(self._ahead))]
        with self._lock:
            self._queue.append(part)
            self._pull()

    def _pull(self) -> None:
        """Start files from the front of the queue while a slot is free and the queue holds enough (the caller
        holds the lock)."""
        while self._queue and len(self._inflight) < _ahead_slots():
            chars, n = 0, 0
            for p in self._queue:
                if n and chars + p.chars > AHEAD_CHARS:
                    break
                chars += p.chars
                n += 1
            if chars < AHEAD_IDLE_CHARS:
                return
            self._start(n)

    def _start(self, n: int) -> None:
        """Start the first n kernels of the queue compiling in the background, as one file (the caller holds the
        lock)."""
        parts, self._queue = self._queue[:n], self._queue[n:]
        tgt = self._queue_target
        assert tgt is not None  # set with the queue's first kernel
        compiler = self.compiler_for(tgt)
        _ = compiler.cc, compiler.is_clang  # find and identify the compiler here, not in two threads at once
        src, what = _file(parts)
        _RUNNING.set(_compile_workers() - 1)  # Python lowering the next kernels keeps a core
        box: list[_Job] = []
        job = _Job(self._compile_ahead_file, compiler, src, what, tgt, box, weight=len(src))
        box.append(job)
        self._inflight[job] = len(src)
        for p in parts:
            p.lib, p.src = job, src

    def _compile_ahead_file(self, compiler: Compiler, src: str, what: str, tgt: Target, box: list[_Job]) -> tuple:
        """A file compile_ahead started (on its job's thread, `box` holds the job); when it is done, the next one
        starts."""
        try:
            return _load(compiler, src, what, tgt)
        finally:
            with self._lock:
                job = box[0]
                self._inflight.pop(job, None)
                if job.began is not None:
                    secs, chars = self._pace
                    self._pace = (secs + time.perf_counter() - job.began, chars + len(src))
                self._pull()

    def _left(self) -> list[float]:
        """The work the files of compile_ahead not done yet have left, in chars of C source: a waiting file all
        of its own, a running one what the pace of the finished ones says is left of it (half of it while no
        file has finished). The caller holds the lock."""
        now, (secs, chars) = time.perf_counter(), self._pace
        out = []
        for job, n in self._inflight.items():
            if job.began is None:
                out.append(float(n))
            elif secs > 0 and chars > 0:
                out.append(max(0.0, n - (now - job.began) * chars / secs))
            else:
                out.append(n / 2)
        return out

    def compile_batch(self, kernels: Sequence[tuple[UOp, str]], target: Target | None = None) -> list[CPUKernel]:
        """Compile several kernels for `target` (default: the device's) into shared objects: one C file and
        compiler run per chunk, the chunks (as many as the host's cores, when there is enough source to share
        out) compiled in parallel. Names are made unique. Kernels that compile_ahead began are taken from there:
        the ones already compiling are waited for, the ones still gathering join this batch's files."""
        tgt = target or self.default_target()
        claimed: list[_Part | None] = []
        with self._lock:  # a file finishing may start the queue's next kernels meanwhile: claimed under the lock
            for linear, name in kernels:
                part = self._ahead.pop((linear, name), None)
                if part is not None and part.target != tgt.key:
                    part = None
                if part is not None and part.lib is None:  # still gathering: it joins this batch
                    self._queue.remove(part)
                claimed.append(part)
            left = self._left()  # the files of compile_ahead still compiling or waiting
        parts: list[_Part] = []
        taken: set[str] = set()
        for (linear, name), part in zip(kernels, claimed, strict=True):
            if part is not None and part.lib is None:
                part = self._part(linear, name, taken, tgt) if part.sym in taken else part
                taken.add(part.sym)
                if part.entry:
                    taken.update((part.entry, f"{part.entry}_kernel"))
            parts.append(part if part is not None else self._part(linear, name, taken, tgt))
        here = [i for i, p in enumerate(parts) if p.lib is None]
        # one file per core, smaller by what the core still has to do of compile_ahead's files: the largest
        # starts first (on a free core), and the cores finish together
        chunks = [[here[j] for j in c] for c in _chunks([parts[i].chars for i in here], _compile_workers(),
                                                          left)] if here else []
        srcs = [_file([parts[i] for i in chunk]) for chunk in chunks]
        compiler = self.compiler_for(tgt)
        # the thread pool these kernels launch on is built (once per cache) alongside their last files
        parallel = any(p.entry is not None and _parallel(p.prog) for p in parts)
        build_pool = tgt.runs_here and parallel and cpu_pool.unbuilt()
        _RUNNING.set(_compile_workers())  # lowering is done: the last files (and any still waiting) take every core
        if len(srcs) == 1 and not build_pool:
            libs = [_load(compiler, *srcs[0], tgt)]
        else:
            _ = compiler.cc, compiler.is_clang  # find and identify the compiler once, before the threads
            # each waits on its own compiler; started largest first, and the pool (needed only at the first
            # launch) after them all
            jobs = {i: _Job(_load, compiler, *srcs[i], tgt, weight=len(srcs[i][0]))
                    for i in sorted(range(len(srcs)), key=lambda i: -len(srcs[i][0]))}
            built = _Job(cpu_pool.prepare, weight=-1) if build_pool else None
            libs = [jobs[i].result() for i in range(len(srcs))]
            if built is not None:
                built.result()
        lib_of = {i: (lib, src) for chunk, lib, (src, _) in zip(chunks, libs, srcs, strict=True) for i in chunk}
        out: list[CPUKernel] = []
        for i, p in enumerate(parts):
            if i in lib_of:
                (lib, up), src = lib_of[i]
            else:
                assert p.lib is not None
                (lib, up), src = p.lib.result(), p.src
            out.append(CPUKernel(p.prog, p.sym, src, lib, p.entry, up))
        return out

    @staticmethod
    def finish_upgrades(timeout: float | None = None) -> bool:
        """Wait until the queued -O2 builds (tiers: module docstring) are done; whether they are. Kernels take
        theirs at their next call."""
        return _UPGRADES.wait(timeout)

    @staticmethod
    def np_dtype(dtype: DType) -> np.dtype:
        return np_dtype(dtype)

    def synchronize(self) -> None:
        pass


def build_object(src: str, out: str, target: Target, what: str = "kernel", executable: bool = False,
                 extra: tuple[str, ...] = ()) -> None:
    """Compile `src` for `target` to the file `out` without loading it (a target this host cannot run: the
    compiler checks the code, and devices.cpu_cross runs it under an emulator): a shared object, with
    `executable` a static program (`src` has a main), or what `extra` flags ask for (`-S`: assembly). Raises
    CompileError naming the compiler's complaint."""
    DEVICE.compiler_for(target)._run(src, out, what, target, extra, executable)


# how many rendered kernels the device keeps for their compile (a realize renders a batch, then compiles it)
RENDERED_KEPT = 1024
# the most C source compile_ahead puts in one file: a file that begins just before lowering ends is the last to
# finish, and about this much compiles at -Og in ~0.15 s of one core (gcc 12, Zen 3); fewer, larger files would
# spare compiler starts (~80M instructions each: process, target set-up, assembler, link)
AHEAD_CHARS = 32_000
# compile_ahead starts a file while a slot is free once its kernels have this much: the first file of a realize
# starts as soon as it is worth a compiler start, and later ones take what gathered while the compiler was busy
AHEAD_IDLE_CHARS = 8_000
# below this much C source per compiler run, another run costs more in its start than it saves in parallel
MIN_CHUNK_CHARS = 8_000


def _ahead_slots() -> int:
    """How many files compile_ahead keeps compiling at once: every core but the one Python lowers on."""
    return _compile_workers() - 1


def _chunks(sizes: list[int], workers: int, busy: Sequence[float] = ()) -> list[list[int]]:
    """Kernel indices in files of about equal C source, none much under MIN_CHUNK_CHARS (devices.toolrun.
    balanced_groups)."""
    return balanced_groups(sizes, workers, MIN_CHUNK_CHARS, busy)


def _parallel(prog: Program) -> bool:
    """Whether a launch of the kernel may take the thread pool: its SPECIALs have more than one id in all."""
    bounds = [sp.src[0] for sp in prog.specials.values()]
    return any(b.op is not Ops.CONST for b in bounds) or math.prod(int(const_value(b)) for b in bounds) > 1


def _symbol(name: str) -> str:
    """A C function name for a kernel name, clear of C words, libm and the renderer's own names."""
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"
    return "k_" + s if s[0].isdigit() or is_reserved(s) else s


DEVICE = CPUDevice()

__all__ = ["DEVICE", "CPUDevice", "CPUKernel", "Compiler", "build_object", "entry_source"]
