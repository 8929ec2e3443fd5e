"""The CPU device: LINEAR programs rendered to C (devices.c_render), compiled to a shared object, run via ctypes.

Compiler: `CC` if set, else gcc, else clang, else cc (gcc compiles about twice as fast as clang here); for a
cross target (aarch64 on an x86-64 host) the target's prefixed gcc. Flags: -O2 -fPIC -shared, the Target's
instruction-set flags (-march=native, -march=x86-64-v3, ...), plus what exactness needs (see c_render):
-ffp-contract=off (no fused multiply-add), -fwrapv (signed ints wrap), -fno-math-errno, and for gcc
-fexcess-precision=standard (a cast to _Float16 rounds). Never -ffast-math.

Cache: a shared object is keyed by a hash of the source, the compiler's identity, the flags and the Target, kept under
rewrite.env.cache_dir()/cpu (CACHE=0: no disk cache), verified before use, written atomically and bounded to
CACHE_SIZE bytes (devices.objcache); in memory the `max_libs` most recently used libraries are kept, and a
library is unloaded when no kernel refers to it any more. `compile_batch` puts many kernels in one C file,
which costs one compiler start for all of them; a batch with enough source is split into one file per host core,
balanced by source size, compiled in parallel.

Launch: `kernel({slot: array}, {name: int})` checks each array against its BUFFER (dtype, size, contiguity,
aliasing) and passes pointers in slot order, then the variables by name. A kernel with SPECIALs (e.g. core_id)
takes each as a trailing parameter and runs once per value (every combination, for several): it is compiled with
an entry wrapper `NAME__entry(void** args, int core_id)` that unpacks 64-bit argument words and turns the flat
id into the SPECIAL values, and devices.cpu_pool runs that wrapper across a native thread pool, so the slices
run on several cores at once.

SANITIZE=address compiles with AddressSanitizer and devices.memory allocates every buffer at its exact size, so
an out-of-bounds access is reported. The ASan runtime must come first in the process:
`LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 SANITIZE=address python ...`.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import hashlib
import itertools
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from _ctypes import dlclose as _dlclose
from collections.abc import Sequence

import numpy as np

from devices import cpu_pool, objcache
from devices.base import Target, cpu_target, host_flags
from devices.c_render import C_ALU_OPS, ctype, is_reserved, render_function, render_source, storage_type
from devices.linear import Program, analyze, const_value, special_bound
from devices.memory import Allocator, check_buffers, check_vars, np_dtype
from devices.toolrun import run_compiler
from rewrite.dtype import DType, dtypes
from rewrite.env import cache_dir, getenv
from rewrite.errors import CompileError, DeviceError
from rewrite.ops import Ops
from rewrite.uop import UOp

# an undeclared function must be an error, not an implicit int declaration that fails only at dlopen
# -fno-trapping-math only drops FP exception-flag bookkeeping (results are unchanged); without it gcc will not
# vectorize loops with float compares and selects
_BASE_FLAGS = ("-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
               "-fwrapv",
               "-Werror=implicit-function-declaration")
_CT = {
    dtypes.bool: ctypes.c_bool, dtypes.int8: ctypes.c_int8, dtypes.uint8: ctypes.c_uint8,
    dtypes.int16: ctypes.c_int16, dtypes.uint16: ctypes.c_uint16, dtypes.int32: ctypes.c_int32,
    dtypes.uint32: ctypes.c_uint32, dtypes.int64: ctypes.c_int64, dtypes.uint64: ctypes.c_uint64,
    dtypes.index: ctypes.c_longlong,
}


class _Library(ctypes.CDLL):
    """A kernel's shared object, unloaded (dlclose) when the last reference goes: its CPUKernels and the
    compiler's in-memory table hold it (a ctypes function pointer holds its library too)."""

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            with contextlib.suppress(Exception):
                _dlclose(handle)


class Compiler:
    """A C compiler process: finds the compiler once, compiles source to a loaded, cached shared object."""

    max_libs = 256  # kernel libraries kept loaded by the in-memory table (about 40 KB each)

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix  # a cross compiler's triple prefix ("aarch64-linux-gnu-"); "" for the host's
        self._cc: str | None = None
        self._ident = ""
        self._clang: bool | None = None
        # key -> loaded library, most recently used last; at most max_libs kernel libraries
        self._libs: collections.OrderedDict[str, ctypes.CDLL] = collections.OrderedDict()
        self._runtime: dict[str, ctypes.CDLL] = {}  # the device's own libraries, kept for the process
        self._lock = threading.Lock()

    @property
    def cc(self) -> str:
        if self._cc is None:
            names = ("gcc", "clang", "cc") if not self.prefix else (f"{self.prefix}gcc",)
            want = (str(getenv("CC", "")) if not self.prefix else "") or \
                next((c for c in names if shutil.which(c)), names[0] if self.prefix else "")
            path = shutil.which(want) if want else None
            if path is None:
                raise CompileError(f"cpu: no C compiler found (tried {want or 'gcc, clang, cc'}); install gcc or "
                                   f"clang, or set CC")
            self._cc, self._ident = path, _identity(path)
        return self._cc

    @property
    def is_clang(self) -> bool:
        """Whether the compiler is clang: from the name it resolves to, or (a name like `cc` that says neither)
        from its --version line, asked once."""
        if self._clang is None:
            name = os.path.basename(os.path.realpath(self.cc)).lower()
            if "clang" in name or "gcc" in name:
                self._clang = "clang" in name
            else:
                try:
                    out = subprocess.run([self.cc, "--version"], capture_output=True, text=True, timeout=30).stdout
                except (OSError, subprocess.TimeoutExpired) as e:
                    raise CompileError(f"cpu: cannot run {self.cc} --version: {e}") from None
                self._clang = "clang" in out.lower()
        return self._clang

    def flags(self, target: Target | None = None) -> tuple[str, ...]:
        """The command line's flags for `target` (default: the host, -march=native)."""
        target = target or cpu_target("native")
        return _BASE_FLAGS + target.compile_flags + (() if self.is_clang else ("-fexcess-precision=standard",)) + \
            _sanitize_flags() + ("-lm",)

    def key(self, src: str, target: Target) -> str:
        ident = "\0".join((self.cc, self._ident, _host(), target.key, *self.flags(target)))
        return hashlib.sha256((ident + "\0" + src).encode()).hexdigest()[:32]

    def load(self, src: str, what: str, target: Target | None = None, runtime: bool = False) -> ctypes.CDLL:
        """The loaded library for `src` compiled for `target` (default: the host's): from memory, the disk cache,
        or a fresh compile. `runtime` marks one of the device's own support libraries (the thread pool): it is
        part of the installation rather than a kernel, so it stays in the disk cache even under CACHE=0 (which is
        about kernels), and is never unloaded. Kernel libraries are unloaded (dlclose) when the last object
        referring to them goes: the in-memory table keeps only the `max_libs` most recently used, and each
        CPUKernel holds its own. Code for a target the host cannot run is refused (DeviceError), not loaded."""
        target = target or cpu_target("native")
        if not target.runs_here:
            raise DeviceError(f"cpu: code for target {target.isa} cannot run on this host ({platform.machine()}, "
                              f"lacking {', '.join(sorted(target.features - host_flags())) or 'the architecture'}); "
                              f"compile it with devices.cpu.build_object, or set CPU_TARGET=native")
        key = self.key(src, target)
        with self._lock:
            if (lib := self._libs.get(key)) is not None:
                self._libs.move_to_end(key)
                return lib
            if (lib := self._runtime.get(key)) is not None:
                return lib
        int(getenv("CACHE_SIZE"))  # a bad value is an error at once, not at the first write
        if getenv("SANITIZE"):
            _check_asan_runtime()
        t0 = time.perf_counter()
        on_disk = runtime or int(getenv("CACHE"))
        cls = ctypes.CDLL if runtime else _Library
        lib, hit = self._from_disk(src, key, what, cls, target) if on_disk else \
            (self._uncached(src, what, cls, target), False)
        if int(getenv("DEBUG")) >= 3:
            how = "disk cache hit" if hit else "compiled"
            print(f"cpu: {what}: {how} in {(time.perf_counter() - t0) * 1e3:.1f} ms", file=sys.stderr)
        with self._lock:
            if runtime:
                self._runtime[key] = lib
            else:
                self._libs[key] = lib
                while len(self._libs) > self.max_libs:
                    self._libs.popitem(last=False)
        return lib

    def _from_disk(self, src: str, key: str, what: str, cls: type[ctypes.CDLL], target: Target
                   ) -> tuple[ctypes.CDLL, bool]:
        """The object from the disk cache when it verifies (objcache), else compiled there; compiled in a
        temporary directory when the cache directory cannot be written (one warning per process)."""
        d = ""
        try:
            d = os.path.join(cache_dir(), "cpu")
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            objcache.warn_unwritable(d or str(getenv("CACHEDIR")) or "~/.cache/uopc", e)
            return self._uncached(src, what, cls, target), False
        objcache.sweep_once(d)
        path = os.path.join(d, f"{key}.so")
        if objcache.verify(path, key):
            try:
                lib = cls(path)
                objcache.touch(path)
                return lib, True
            except OSError:  # verified but not loadable (e.g. built for another libc): compile it again
                pass
        elif os.path.exists(path) and int(getenv("DEBUG")) >= 1:
            print(f"cpu: cached object for {what} does not verify (truncated or damaged): compiling it again",
                  file=sys.stderr)
        try:
            tmp = objcache.temp_path(d, key)
        except OSError as e:
            objcache.warn_unwritable(d, e)
            return self._uncached(src, what, cls, target), False
        try:
            self._run(src, tmp, what, target)
            objcache.seal(tmp, key)
            os.replace(tmp, path)  # atomic: a concurrent process sees no file or the whole file
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        objcache.note_write(d, path, int(getenv("CACHE_SIZE")))
        return cls(path), False

    def _uncached(self, src: str, what: str, cls: type[ctypes.CDLL] = ctypes.CDLL, target: Target | None = None
                  ) -> ctypes.CDLL:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "k.so")
            self._run(src, path, what, target or cpu_target("native"))
            return cls(path)  # the mapping outlives the file

    def _run(self, src: str, out: str, what: str, target: Target, extra: tuple[str, ...] = (),
             executable: bool = False) -> None:
        """Compile `src` for `target` to `out` (a shared object; `extra` flags may ask for something else; with
        `executable`, a static program: `src` has a main)."""
        flags = self.flags(target)
        if executable:
            flags = tuple(f for f in flags if f not in ("-shared", "-fPIC"))
            extra = ("-static", *extra)
        cmd = [self.cc, *flags[:-1], *extra, "-x", "c", "-", "-o", out, flags[-1]]
        run_compiler(cmd, "cpu", what, src, 300, stdin=src)

    def forget(self) -> None:
        """Drop the in-memory cache (loaded libraries stay mapped while kernels hold them)."""
        self._libs.clear()


def _sanitize_flags() -> tuple[str, ...]:
    """SANITIZE=address: AddressSanitizer instrumentation (with exact-size buffers from devices.memory, a read or
    write past a buffer's end is reported and the process stops)."""
    return ("-fsanitize=address", "-fno-omit-frame-pointer") if getenv("SANITIZE") == "address" else ()


def _check_asan_runtime() -> None:
    """An ASan-instrumented object needs the ASan runtime loaded first in the process (else it aborts the process
    at dlopen): say how, instead."""
    if _ASAN_OK:
        return
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
        loaded = "libasan" in maps or "libclang_rt.asan" in maps
    except OSError:
        loaded = True  # cannot tell: let the loader decide
    if not loaded:
        raise DeviceError("SANITIZE=address: the AddressSanitizer runtime is not loaded in this process; run python "
                          "with LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0")
    _ASAN_OK.append(True)


_ASAN_OK: list[bool] = []


def _identity(path: str) -> str:
    """The compiler build, for the cache key, without starting it (`--version` costs a process start, ~3 ms): the
    binary the path resolves to, with its size and modification time, which an upgrade changes."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return real
    return f"{real} {st.st_size} {st.st_mtime_ns}"


def _host() -> str:
    """What -march=native compiles for: a cached object must not be loaded on a CPU lacking its instructions."""
    if not _HOST:
        flags = " ".join(sorted(host_flags()))
        _HOST.append(f"{platform.machine()} {hashlib.sha256(flags.encode()).hexdigest()[:16]}")
    return _HOST[0]


_HOST: list[str] = []


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

    def __init__(self, prog: Program, symbol: str, src: str, lib: ctypes.CDLL, entry: str | None = None) -> None:
        self.prog, self.name, self.symbol, self.src, self.lib = prog, prog.name, symbol, src, lib
        self.path: str | None = getattr(lib, "_name", None)
        fn = getattr(lib, symbol)
        fn.argtypes = ([ctypes.c_void_p] * len(prog.buffers) + [_CT[p.dtype] for p in prog.variables.values()]
                       + [ctypes.c_longlong] * len(prog.specials))
        fn.restype = None
        self.fn = fn
        # the wrapper's address, for cpu_pool.launch (a kernel compiled without one runs its ids one by one)
        self.entry = ctypes.cast(getattr(lib, entry), ctypes.c_void_p).value if entry else None
        # constant SPECIAL bounds (the usual core_id) are read once, not at every launch
        consts = [int(const_value(sp.src[0])) for sp in prog.specials.values() if sp.src[0].op is Ops.CONST]
        self._bounds: list[int] | None = consts if len(consts) == len(prog.specials) else None

    def binary(self) -> bytes:
        """The shared object this kernel was loaded from (it may hold the other kernels of its batch), as bytes;
        empty when it was compiled to a temporary file that is gone (CACHE=0)."""
        try:
            with open(self.path or "", "rb") as f:
                return f.read()
        except OSError:
            return b""

    def __call__(self, buffers: dict[int, np.ndarray], var_vals: dict[str, int] | None = None) -> None:
        prog = self.prog
        vv = var_vals or {}
        ints = check_vars(prog.variables, vv, self.name)
        args = check_buffers(prog.buffers, buffers, vv, prog.stored, self.name)[1] + ints
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

    def compile(self, linear: UOp, name: str = "kernel", target: Target | None = None) -> CPUKernel:
        return self.compile_batch([(linear, name)], target)[0]

    def compile_batch(self, kernels: Sequence[tuple[UOp, str]], target: Target | None = None) -> list[CPUKernel]:
        """Compile several kernels for `target` (default: the device's) into shared objects: one C file and
        compiler run per chunk, the chunks (as many as the host's cores, when there is enough source to share
        out) compiled in parallel. Names are made unique."""
        tgt = target or self.default_target()
        progs: list[Program] = []
        syms: list[str] = []
        parts: list[tuple[list[str], dict[str, str]]] = []  # per kernel: its functions and the helpers they use
        for linear, name in kernels:
            sym = _symbol(name)
            if sym in syms:
                sym = next(f"{sym}_{i}" for i in itertools.count(1) if f"{sym}_{i}" not in syms)
            syms.append(sym)
            prog, func, helpers = self._function(linear, sym)
            prog.name = name
            parts.append(([func], dict(helpers)))
            progs.append(prog)
        # entry wrappers for the kernels with SPECIALs, named clear of every kernel symbol in this file
        entries: list[str | None] = []
        for prog, sym, (funcs, _) in zip(progs, syms, parts, strict=True):
            entry = None
            if prog.specials:
                entry = next(e for i in itertools.count()
                             if not {e := f"{sym}__entry{i or ''}", f"{e}_kernel"} & set(syms))
                funcs.append(entry_source(prog, sym, entry))
            entries.append(entry)
        chunks = _chunks([sum(map(len, f)) for f, _ in parts], _compile_workers())
        srcs: list[tuple[str, str]] = []
        for chunk in chunks:
            helpers = {}
            for i in chunk:
                helpers.update(parts[i][1])
            src = render_source([f for i in chunk for f in parts[i][0]], helpers)
            if int(getenv("DEBUG")) >= 4:
                print(src, file=sys.stderr)
            what = f"kernel {kernels[chunk[0]][1]!r}" if len(chunk) == 1 else f"{len(chunk)} kernels"
            srcs.append((src, what))
        compiler = self.compiler_for(tgt)
        # the thread pool these kernels launch on is built (once per cache) alongside them, not after them
        parallel = any(e is not None and _parallel(p) for e, p in zip(entries, progs, strict=True))
        build_pool = tgt.runs_here and parallel and cpu_pool.unbuilt()
        if len(srcs) == 1 and not build_pool:
            libs = [compiler.load(*srcs[0], tgt)]
        else:
            from concurrent.futures import ThreadPoolExecutor

            _ = compiler.cc, compiler.is_clang  # find and identify the compiler once, before the threads
            with ThreadPoolExecutor(len(srcs) + build_pool) as pool:  # each thread waits on its own compiler process
                built = pool.submit(cpu_pool.prepare) if build_pool else None
                libs = list(pool.map(lambda sw: compiler.load(sw[0], sw[1], tgt), srcs))
                if built is not None:
                    built.result()
        out: list[CPUKernel] = []
        lib_of = {i: (lib, src) for chunk, lib, (src, _) in zip(chunks, libs, srcs, strict=True) for i in chunk}
        for i in range(len(kernels)):
            lib, src = lib_of[i]
            out.append(CPUKernel(progs[i], syms[i], src, lib, entries[i]))
        return out

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
# below this much C source per compiler run, another run costs more in its start than it saves in parallel
MIN_CHUNK_CHARS = 16_000


def _compile_workers() -> int:
    """Compiler processes to run at once: one per core this process may use (the compiler runs on the host,
    whatever the target)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return max(1, os.cpu_count() or 1)


def _chunks(sizes: list[int], workers: int) -> list[list[int]]:
    """Kernel indices in groups of about equal source size, at most `workers` groups and none much under
    MIN_CHUNK_CHARS: the largest first, each to the smallest group so far (a kernel's compile time grows with
    its source). Each group keeps the kernels' order."""
    n = max(1, min(workers, len(sizes), sum(sizes) // MIN_CHUNK_CHARS))
    groups: list[list[int]] = [[] for _ in range(n)]
    load = [0] * n
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        g = load.index(min(load))
        groups[g].append(i)
        load[g] += sizes[i]
    return [sorted(g) for g in groups if g]


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
