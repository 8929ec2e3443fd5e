"""The cpu device's C compiler: finding gcc or clang, the command line, and compiling source to a loaded shared
object through the disk cache (devices.objcache). devices.cpu (the device) re-exports `Compiler`.

Flags: -O2 -fPIC -shared, the Target's instruction-set flags (-march=native, -march=x86-64-v3, ...), plus what
exactness needs (see c_render): -ffp-contract=off (no fused multiply-add), -fwrapv (signed ints wrap),
-fno-math-errno, and for gcc -fexcess-precision=standard (a cast to _Float16 rounds) and
-fno-tree-loop-if-convert (GCC_EXACT_FLAGS: gcc 12's wrong code for gated loads). Never -ffast-math. A kernel
library loaded here is linked lean (gcc on Linux: `-nostdlib -lgcc`, see _LEAN_LINK), the thread pool's
runtime and programs in full.

Tiers: the same flags with -Og in place of -O2 (and, for gcc, GCC_FAST_FLAGS) are the "fast" tier (devices.cpu
compiles a file the disk cache lacks at it first, then at -O2 in the background: CPU_TIERS). Both keep the
exactness flags, so a kernel's results are the same bit for bit; the flags are part of the cache key, so the two
tiers' objects are cached apart.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from _ctypes import dlclose as _dlclose

from devices import objcache
from devices.base import Target, cpu_target, host_flags
from devices.c_scalar import _LIBM as _LIBM_TABLE
from devices.toolrun import run_compiler
from rewrite.env import cache_dir, getenv
from rewrite.errors import CompileError, DeviceError

# an undeclared function must be an error, not an implicit int declaration that fails only at dlopen
# -fno-trapping-math only drops FP exception-flag bookkeeping (results are unchanged); without it gcc will not
# vectorize loops with float compares and selects
_BASE_FLAGS = ("-O2", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
               "-fwrapv",
               "-Werror=implicit-function-declaration")
# the fast tier's optimization level: on the training benchmarks' kernels gcc takes about 0.4x the CPU of -O2, and
# the kernels run 1x (transformer) to 3x (cnn) as long (docs in devices/cpu.py)
FAST_LEVEL = "-Og"
# what gcc's fast tier adds to -Og: optimizations that cost more compile time than the -Og kernels of one training
# step win back, none of them about exactness (results stay the same bit for bit). -fira-region=one colours each
# function's registers as one region instead of loop by loop (the loop regions were a third of cc1's work on the
# kernels' register tiles); no guessed branch probabilities; no RTL CSE, forward propagation or hard-register copy
# propagation (their names are gcc's pass names, stable since gcc 4). On the cold transformer training step's
# files gcc runs 15-20% fewer instructions with them (callgrind over gcc, cc1, as and ld, gcc 12: the largest file
# 1124M -> 1012M with -fira-region=one alone, -> 906M with all and the link below), and the step's kernels at -Og
# ran as fast (a replay of its 158 launches, alternated A/B under load: process CPU min 63.4 vs 65.8 ms, medians
# within noise)
GCC_FAST_FLAGS = ("-fira-region=one", "-fno-guess-branch-probability", "-fdisable-rtl-cse1", "-fdisable-rtl-fwprop1",
                  "-fdisable-rtl-fwprop2", "-fdisable-rtl-cprop_hardreg")
# gcc only, both tiers: no if-conversion of loops for its vectorizer. gcc 12.2 (Debian 12's) vectorized an outer
# loop whose unrolled inner sums read `gate ? x[i] : 0.0f` into masked AVX/AVX-512 loads and computed wrong lanes:
# a cat of two padded row means (the program fuzzer's seed 35011765, NOOPT=1) got 4.9e28 where -0.75 was right,
# while clang, gcc -fno-tree-loop-vectorize and gcc with this flag were right and ASan/UBSan found nothing. Our own
# vector code (lanes, masked loads) is explicit, so this only keeps gcc from if-converting the scalar loops left:
# 30 of the 171 kernels of the kernel and training suites compile to other machine code, mostly other registers
# and stack slots (the largest change: the cross entropy's one-hot kernels, 152 -> 123 instructions); the three
# training models' jit steps ran the same within noise (2-core AVX-512 Xeon, 3 alternated runs)
GCC_EXACT_FLAGS = ("-fno-tree-loop-if-convert",)
TIERS = ("opt", "fast")
# how a kernel's shared object is linked where it is loaded into this process (gcc, Linux): against libm and
# libgcc's static helpers only, without libc and the C runtime's start files, which a kernel never uses (its few
# libc calls, memcpy, bind to the libc every process has loaded, as libm's own calls do). The link is then ~11 ms
# of CPU shorter per compiler run (gcc 12, Zen 3: 51 -> 40 ms for an empty file, medians of 40 alternated runs),
# ~8% of a cold training step's compiles. The machine code is the same, so the cache key (the flags) is too.
_LEAN_LINK = ("-nostdlib", "-lm", "-lgcc")
# ... and without -lm where this process has libm loaded already (CPython links it): the kernel's libm calls then
# bind to that libm as its libc calls bind to libc, and ld does not read libm.so.6's symbol table, which was two
# thirds of a lean link (callgrind: 18.1M -> 6.1M instructions; ~2% of the cold training step's compiles). An
# object linked so and found in the disk cache by a process without libm fails to load and is compiled again.
_LEANER_LINK = ("-nostdlib", "-lgcc")
# the libm functions the renderer's C may call: devices.c_scalar's table, float and double, and its helpers' two
_LIBM_CALLS = (*(f + s for f in _LIBM_TABLE.values() for s in ("f", "")), "fabs", "fmod")
class _Library(ctypes.CDLL):
    """A kernel's shared object, unloaded (dlclose) when the last reference goes: its CPUKernels and the
    compiler's in-memory table hold it (a ctypes function pointer holds its library too)."""

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle:
            try:  # noqa: SIM105 -- not contextlib: at interpreter shutdown this module's globals may be gone
                _dlclose(handle)
            except Exception:
                pass


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

    def flags(self, target: Target | None = None, tier: str = "opt") -> tuple[str, ...]:
        """The command line's flags for `target` (default: the host, -march=native); `tier` "fast": -Og for -O2."""
        target = target or cpu_target("native")
        if tier not in TIERS:
            raise ValueError(f"cpu: unknown compile tier {tier!r} (one of {', '.join(TIERS)})")
        base = _BASE_FLAGS if tier == "opt" else tuple(FAST_LEVEL if f == "-O2" else f for f in _BASE_FLAGS) + \
            (() if self.is_clang else GCC_FAST_FLAGS)
        return base + target.compile_flags + (() if self.is_clang else ("-fexcess-precision=standard",
                                                                         *GCC_EXACT_FLAGS)) + \
            _sanitize_flags() + ("-lm",)

    def key(self, src: str, target: Target, tier: str = "opt") -> str:
        # the tier is named besides its flags (the -O2 key is as before tiers, so existing caches stay valid)
        ident = "\0".join((self.cc, self._ident, _host(), target.key, *(() if tier == "opt" else (tier,)),
                           *self.flags(target, tier)))
        return hashlib.sha256((ident + "\0" + src).encode()).hexdigest()[:32]

    def load(self, src: str, what: str, target: Target | None = None, runtime: bool = False, tier: str = "opt",
             live: set[subprocess.Popen] | None = None, where: str | None = None) -> ctypes.CDLL:
        """The loaded library for `src` compiled for `target` (default: the host's): from memory, the disk cache,
        or a fresh compile. `runtime` marks one of the device's own support libraries (the thread pool): it is
        part of the installation rather than a kernel, so it stays in the disk cache even under CACHE=0 (which is
        about kernels), and is never unloaded. Kernel libraries are unloaded (dlclose) when the last object
        referring to them goes: the in-memory table keeps only the `max_libs` most recently used, and each
        CPUKernel holds its own. Code for a target the host cannot run is refused (DeviceError), not loaded.
        `tier`: "opt" (-O2) or "fast" (-Og, cached under its own key). `live`: the compiler process is in this set
        while it runs (devices.cpu's background builds, terminated at exit). `where`: the cache directory to use
        instead of the knobs' (CACHE, CACHEDIR) at this moment, "" for none (a background build uses the
        settings in force when it was queued)."""
        target = target or cpu_target("native")
        self._check_target(target)
        key = self.key(src, target, tier)
        if (lib := self._in_memory(key)) is not None:
            return lib
        int(getenv("CACHE_SIZE"))  # a bad value is an error at once, not at the first write
        if getenv("SANITIZE"):
            _check_asan_runtime()
        t0 = time.perf_counter()
        on_disk = runtime or (int(getenv("CACHE")) if where is None else bool(where))
        cls = ctypes.CDLL if runtime else _Library
        lib, hit = self._from_disk(src, key, what, cls, target, tier, live, where) if on_disk else \
            (self._uncached(src, what, cls, target, tier, live), False)
        if int(getenv("DEBUG")) >= 3:
            how = "disk cache hit" if hit else "compiled"
            print(f"cpu: {what}: {how} in {(time.perf_counter() - t0) * 1e3:.1f} ms", file=sys.stderr)
        with self._lock:
            if runtime:
                self._runtime[key] = lib
            else:
                self._remember(key, lib)
        return lib

    def cached(self, src: str, target: Target | None = None) -> ctypes.CDLL | None:
        """The -O2 library for `src` if it is loaded or in the disk cache (loaded now), else None: nothing is
        compiled."""
        target = target or cpu_target("native")
        self._check_target(target)
        key = self.key(src, target)
        if (lib := self._in_memory(key)) is not None:
            return lib
        if (path := self._disk_path(key)) is None:
            return None
        try:
            lib = _Library(path)
        except OSError:
            return None
        objcache.touch(path)
        with self._lock:
            self._remember(key, lib)
        return lib

    def in_disk_cache(self, src: str, target: Target, tier: str) -> bool:
        """Whether the disk cache holds a sound object of `src` at `tier` (nothing is loaded or compiled)."""
        return self._disk_path(self.key(src, target, tier)) is not None

    @staticmethod
    def _disk_path(key: str) -> str | None:
        """The path of the object cached under `key` when the disk cache is on and it verifies, else None."""
        if not int(getenv("CACHE")):
            return None
        try:
            path = os.path.join(cache_dir(), "cpu", f"{key}.so")
        except OSError:  # the load that follows warns of it
            return None
        return path if objcache.verify(path, key) else None

    def _check_target(self, target: Target) -> None:
        if not target.runs_here:
            raise DeviceError(f"cpu: code for target {target.isa} cannot run on this host ({platform.machine()}, "
                              f"lacking {', '.join(sorted(target.features - host_flags())) or 'the architecture'}); "
                              f"compile it with devices.cpu.build_object, or set CPU_TARGET=native")

    def _in_memory(self, key: str) -> ctypes.CDLL | None:
        with self._lock:
            if (lib := self._libs.get(key)) is not None:
                self._libs.move_to_end(key)
                return lib
            return self._runtime.get(key)

    def _remember(self, key: str, lib: ctypes.CDLL) -> None:
        """Keep a kernel library in the in-memory table (the caller holds the lock)."""
        self._libs[key] = lib
        while len(self._libs) > self.max_libs:
            self._libs.popitem(last=False)

    def _from_disk(self, src: str, key: str, what: str, cls: type[ctypes.CDLL], target: Target, tier: str = "opt",
                   live: set[subprocess.Popen] | None = None, where: str | None = None) -> tuple[ctypes.CDLL, bool]:
        """The object from the disk cache when it verifies (objcache), else compiled there; compiled in a
        temporary directory when the cache directory cannot be written (one warning per process)."""
        d = ""
        try:
            d = os.path.join(where or cache_dir(), "cpu")
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            objcache.warn_unwritable(d or str(getenv("CACHEDIR")) or "~/.cache/uopc", e)
            return self._uncached(src, what, cls, target, tier, live), False
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
            return self._uncached(src, what, cls, target, tier, live), False
        try:
            self._run(src, tmp, what, target, tier=tier, live=live, lean=cls is _Library)
            objcache.seal(tmp, key)
            os.replace(tmp, path)  # atomic: a concurrent process sees no file or the whole file
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        objcache.note_write(d, path, int(getenv("CACHE_SIZE")))
        return cls(path), False

    def _uncached(self, src: str, what: str, cls: type[ctypes.CDLL] = ctypes.CDLL, target: Target | None = None,
                  tier: str = "opt", live: set[subprocess.Popen] | None = None) -> ctypes.CDLL:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "k.so")
            self._run(src, path, what, target or cpu_target("native"), tier=tier, live=live, lean=cls is _Library)
            return cls(path)  # the mapping outlives the file

    def _run(self, src: str, out: str, what: str, target: Target, extra: tuple[str, ...] = (),
             executable: bool = False, tier: str = "opt", live: set[subprocess.Popen] | None = None,
             lean: bool = False) -> None:
        """Compile `src` for `target` to `out` (a shared object; `extra` flags may ask for something else; with
        `executable`, a static program: `src` has a main). `lean`: a kernel library this process loads, linked
        as _LEAN_LINK says where that holds (gcc on Linux, no sanitizer)."""
        flags = self.flags(target, tier)
        if executable:
            flags = tuple(f for f in flags if f not in ("-shared", "-fPIC"))
            extra = ("-static", *extra)
        link: tuple[str, ...] = (flags[-1],)
        if lean and not executable and not extra and target.runs_here and sys.platform.startswith("linux") and \
                not self.is_clang and not getenv("SANITIZE"):
            link = _LEANER_LINK if _libm_loaded() else _LEAN_LINK
        cmd = [self.cc, *flags[:-1], *extra, "-x", "c", "-", "-o", out, *link]
        run_compiler(cmd, "cpu", what, src, 300, stdin=src, live=live)

    def forget(self) -> None:
        """Drop the in-memory cache (loaded libraries stay mapped while kernels hold them)."""
        self._libs.clear()


def _libm_loaded() -> bool:
    """Whether every libm function a kernel may call is in this process's global symbol scope (where a library
    loaded with ctypes finds the symbols it does not define), asked once."""
    if not _LIBM:
        try:
            scope = ctypes.CDLL(None)
            _LIBM.append(all(hasattr(scope, f) for f in _LIBM_CALLS))
        except OSError:
            _LIBM.append(False)
    return _LIBM[0]


_LIBM: list[bool] = []


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


__all__ = ["Compiler"]
