"""CUDA source to cubin: NVRTC (the runtime compiler library, loaded with ctypes) or nvcc, through one disk cache.

Both compile without a GPU. `cuda_compiler()` picks one: the CUDA_COMPILER knob names it ("nvrtc" or "nvcc"),
else NVRTC where its library loads and nvcc otherwise.

NVRTC: libnvrtc from the `nvidia-cuda-nvrtc` wheel (the project's `gpu` extra; the CUDA 12 wheel's layout is
found too), else the system's (the loader's search path, CUDA_PATH / CUDA_HOME, /usr/local/cuda). NVRTC has no
C library headers; the rendered source needs none (devices.cuda_render writes its typedefs and constants
inline). It does need cuda_fp16.h / cuda_bf16.h for half and bfloat16 kernels: the include folder beside the
library (the `nvidia-cuda-runtime` wheel installs them there), else a toolkit's; a half kernel with no such
folder is a CompileError saying what to install. Options: the Target's architecture (`--gpu-architecture=sm_XX`,
so the result is a cubin for that GPU, not PTX) and the exactness flags nvcc gets (no FMA contraction, IEEE
division and square root, no flush to zero).

nvcc: `nvcc -cubin -arch=sm_XX -O3` plus the same exactness flags, found on PATH. Either compiles a source that
uses wgmma (lower.tc_wgmma) for sm_90a, the architecture-specific variant of sm_90 that wgmma needs (`arch_for`).

The cache: rewrite.env.cache_dir()/cuda, an entry per hash of the source, the Target's key, the compiler's name,
version and options (NVRTC's include folder among them), with devices.objcache's checksummed footer (a damaged
or truncated entry is compiled again) and its size bound; CACHE=0 compiles without it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from devices import objcache
from devices.base import Target
from devices.toolrun import numbered, run_compiler
from rewrite.env import cache_dir, getenv, knob_str
from rewrite.errors import CompileError

# exactness, as devices.cuda_render documents: no contraction into FMA, IEEE division and sqrt, denormals kept
_EXACT = ("-fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true")


def arch_for(target: Target, src: str) -> str:
    """The architecture to compile `src` for: the Target's, with sm_90's architecture-specific features
    ("sm_90a": wgmma, lower.tc_wgmma) where the source uses them (such a cubin runs on sm_90 GPUs only)."""
    return target.isa + "a" if target.isa == "sm_90" and "wgmma." in src else target.isa


class CudaCompiler:
    """What NVRTC and nvcc share: the Target check, the cache key and the disk cache. A subclass gives `name`,
    `version`, `flags(target)` and `_compile(src, target, what) -> cubin bytes`."""

    name = ""

    @property
    def version(self) -> str:
        raise NotImplementedError

    def flags(self, target: Target, src: str = "") -> tuple[str, ...]:
        raise NotImplementedError

    def _compile(self, src: str, target: Target, what: str) -> bytes:
        raise NotImplementedError

    def check_target(self, target: Target) -> None:
        if target.arch != "cuda":
            raise CompileError(f"cuda: cannot compile for the {target.device} target {target.isa}; use "
                               f"devices.base.gpu_target(sm)")

    def key(self, src: str, target: Target) -> str:
        ident = "\0".join((self.name, self.version, target.key, *self.flags(target, src)))
        return hashlib.sha256((ident + "\0" + src).encode()).hexdigest()[:32]

    def cubin(self, src: str, target: Target, what: str = "kernel") -> bytes:
        """The cubin of `src` for `target`: from the disk cache when it verifies, else compiled (and cached)."""
        key = self.key(src, target)
        t0 = time.perf_counter()
        if not int(getenv("CACHE")):
            return self._compile(src, target, what)
        d = ""
        try:
            d = os.path.join(cache_dir(), "cuda")
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            objcache.warn_unwritable(d or "the cache directory", e)
            return self._compile(src, target, what)
        objcache.sweep_once(d)
        path = os.path.join(d, f"{key}.cubin")
        if objcache.verify(path, key):
            with open(path, "rb") as f:
                data = f.read()[:-objcache.FOOTER]
            objcache.touch(path)
            if int(getenv("DEBUG")) >= 3:
                print(f"cuda: {what}: disk cache hit", file=sys.stderr)
            return data
        if os.path.exists(path) and int(getenv("DEBUG")) >= 1:
            print(f"cuda: cached cubin for {what} does not verify (truncated or damaged): compiling it again",
                  file=sys.stderr)
        data = self._compile(src, target, what)
        try:
            tmp = objcache.temp_path(d, key)
        except OSError as e:
            objcache.warn_unwritable(d, e)
            return data
        try:
            with open(tmp, "wb") as f:
                f.write(data)
            objcache.seal(tmp, key)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        objcache.note_write(d, path, int(getenv("CACHE_SIZE")), suffix=".cubin")
        if int(getenv("DEBUG")) >= 3:
            print(f"cuda: {what}: compiled by {self.name} in {(time.perf_counter() - t0) * 1e3:.1f} ms",
                  file=sys.stderr)
        return data


class NVCC(CudaCompiler):
    """nvcc, found on PATH once; compiles CUDA source to cubin bytes through the disk cache."""

    name = "nvcc"

    def __init__(self) -> None:
        self._path: str | None = None
        self._version = ""

    @property
    def path(self) -> str:
        if self._path is None:
            found = shutil.which("nvcc")
            if found is None:
                raise CompileError("cuda: nvcc is not on PATH; install the CUDA toolkit (or add its bin folder to "
                                   "PATH), or NVRTC (pip install uopc[gpu]) to compile CUDA kernels")
            try:
                out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60).stdout
            except (OSError, subprocess.TimeoutExpired) as e:
                raise CompileError(f"cuda: cannot run {found} --version: {e}") from None
            self._path, self._version = found, out.strip().splitlines()[-1] if out.strip() else found
        return self._path

    @property
    def version(self) -> str:
        _ = self.path
        return self._version

    def flags(self, target: Target, src: str = "") -> tuple[str, ...]:
        self.check_target(target)
        arch = tuple(f"-arch={arch_for(target, src)}" if f == f"-arch={target.isa}" else f
                     for f in target.compile_flags)
        return ("-cubin", "-O3", *_EXACT, *arch)

    def _compile(self, src: str, target: Target, what: str) -> bytes:
        with tempfile.TemporaryDirectory() as d:
            cu, out = os.path.join(d, "k.cu"), os.path.join(d, "k.cubin")
            with open(cu, "w") as f:
                f.write(src)
            cmd = [self.path, *self.flags(target, src), "-o", out, cu]
            run_compiler(cmd, "cuda", what, src, 600, where=f" for {target.isa}")
            with open(out, "rb") as f:
                return f.read()


def _wheel_dirs() -> list[str]:
    """The `nvidia` namespace package's folders holding NVRTC: cu13/ (CUDA 13 wheels), cuda_nvrtc/ (CUDA 12)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return [os.path.join(r, sub) for r in roots for sub in ("cu13", "cuda_nvrtc", "cuda_runtime")
            if os.path.isdir(os.path.join(r, sub))]


def _toolkit_dirs() -> list[str]:
    dirs = [os.environ[v] for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)]
    return [*dirs, "/usr/local/cuda"]


def _find_nvrtc() -> tuple[ctypes.CDLL, str]:
    """The NVRTC library and the path it was loaded from; CompileError listing where it looked."""
    tried: list[str] = []
    names = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so")
    cands = [os.path.join(d, "lib", n) for d in _wheel_dirs() for n in names]
    cands += [os.path.join(d, lib, n) for d in _toolkit_dirs() for lib in ("lib64", "lib") for n in names]
    found = ctypes.util.find_library("nvrtc")
    cands += [*([found] if found else []), *names]
    for c in cands:
        if os.sep in c and not os.path.exists(c):
            continue
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append(f"{c}: {e}")
    raise CompileError("cuda: NVRTC (libnvrtc) is not installed; pip install uopc[gpu] (the nvidia-cuda-nvrtc and "
                       "nvidia-cuda-runtime wheels) or a CUDA toolkit, or use nvcc (CUDA_COMPILER=nvcc)"
                       + ("; tried " + "; ".join(tried) if tried else ""))


def _find_headers(lib_path: str) -> str | None:
    """A folder with cuda_fp16.h: beside the library first (the wheels' shared prefix), then a toolkit's."""
    near = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(lib_path))), "include")
    dirs = [near, *(os.path.join(d, "include") for d in _wheel_dirs()),
            *(os.path.join(d, "include") for d in _toolkit_dirs())]
    if (nvcc := shutil.which("nvcc")) is not None:
        dirs.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include"))
    return next((d for d in dirs if os.path.exists(os.path.join(d, "cuda_fp16.h"))), None)


class NVRTC(CudaCompiler):
    """The NVRTC library, loaded once (CompileError where it is missing); compiles in-process to a cubin."""

    name = "nvrtc"

    def __init__(self) -> None:
        self._lib: ctypes.CDLL | None = None
        self._path = ""
        self._version = ""
        self._include: str | None = None
        self._lock = threading.Lock()

    @property
    def lib(self) -> ctypes.CDLL:
        if self._lib is None:
            lib, path = _find_nvrtc()
            major, minor = ctypes.c_int(), ctypes.c_int()
            if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
                raise CompileError(f"cuda: {path}: nvrtcVersion failed")
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            self._path, self._version = path, f"{major.value}.{minor.value}"
            self._include = _find_headers(path)
            self._lib = lib
        return self._lib

    @property
    def version(self) -> str:
        _ = self.lib
        return self._version

    @property
    def include(self) -> str | None:
        """The folder NVRTC takes cuda_fp16.h and cuda_bf16.h from (None: not found)."""
        _ = self.lib
        return self._include

    def flags(self, target: Target, src: str = "") -> tuple[str, ...]:
        self.check_target(target)
        inc = (f"--include-path={self.include}",) if self.include else ()
        # NVRTC 12.4+: leave out what no kernel of ours uses (textures, device-runtime calls, ...): 15-40 ms less a
        # small kernel's compile, the same cubin
        lean = ("--minimal",) if tuple(int(x) for x in self.version.split(".")[:2]) >= (12, 4) else ()
        return (f"--gpu-architecture={arch_for(target, src)}", *_EXACT, *lean, *inc)

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise CompileError(f"cuda: NVRTC {what}: {self.lib.nvrtcGetErrorString(rc).decode()}")

    def _compile(self, src: str, target: Target, what: str) -> bytes:
        lib, opts = self.lib, self.flags(target, src)
        if self.include is None and ("<cuda_fp16.h>" in src or "<cuda_bf16.h>" in src):
            raise CompileError(f"cuda: {what} uses half or bfloat16, and NVRTC needs cuda_fp16.h / cuda_bf16.h: "
                               "pip install nvidia-cuda-runtime (in uopc[gpu]) or set CUDA_PATH to a CUDA toolkit")
        prog = ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), b"kernel.cu", 0, None, None), "create")
        try:
            argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
            rc = lib.nvrtcCompileProgram(prog, len(opts), argv)
            if rc != 0:
                n = ctypes.c_size_t()
                lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
                log = ctypes.create_string_buffer(n.value)
                lib.nvrtcGetProgramLog(prog, log)
                raise CompileError(f"cuda: NVRTC {self.version} failed on {what} for {target.isa}:\n"
                                   f"{log.value.decode(errors='replace').strip()}\n--- source ---\n{numbered(src)}")
            n = ctypes.c_size_t()
            self._check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "cubin size")
            out = ctypes.create_string_buffer(n.value)
            self._check(lib.nvrtcGetCUBIN(prog, out), "cubin")
            return out.raw
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


_COMPILERS: dict[str, CudaCompiler] = {"nvrtc": NVRTC(), "nvcc": NVCC()}


def nvrtc_available() -> tuple[bool, str]:
    """(True, the library's path and version) where NVRTC loads, else (False, why not)."""
    c = _COMPILERS["nvrtc"]
    assert isinstance(c, NVRTC)
    try:
        return True, f"{c._path or _find_nvrtc()[1]} (NVRTC {c.version})"
    except CompileError as e:
        return False, str(e)


def cuda_compiler() -> CudaCompiler:
    """The compiler the CUDA_COMPILER knob names, else NVRTC where it loads, else nvcc."""
    want = knob_str("CUDA_COMPILER")
    if want:
        return _COMPILERS[want]
    return _COMPILERS["nvrtc"] if nvrtc_available()[0] else _COMPILERS["nvcc"]


__all__ = ["NVCC", "NVRTC", "CudaCompiler", "arch_for", "cuda_compiler", "nvrtc_available"]
