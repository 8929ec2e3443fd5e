"""Every environment knob the project reads, declared in one table with its type, default and meaning.

Read a knob with the typed accessors: `knob_int("DEBUG")`, `knob_str("DEVICE")`, `knob_bool("NOOPT")`, or take
a snapshot of all of them with `knobs()` (a frozen `Knobs`, the thing to pass down as an argument). A value is
a `Context` override, else the environment variable, else the declared default. A value the table does not
allow (`DEBUG=abc`, `BEAM=-1`, `DEBUG=9`) raises `KnobError` naming the knob, the value and what is allowed;
asking for an undeclared knob, or for a knob as the wrong type, raises it too.

`Context(DEBUG=2)` overrides knobs inside a `with` block (for tests and the benchmark runner); its values are
checked the same way when the block is entered.

`getenv(name)` is the older spelling, kept as a thin wrapper: for a declared knob it returns the declared type
(statically too, through the overloads below); an undeclared name still reads the environment the old way
(parsed as an int when `default` is an int). New code uses the typed accessors.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, cast, overload

from rewrite.errors import KnobError

KnobValue = int | str | bool


@dataclass(frozen=True)
class Knob:
    """One knob: `kind` is int, str or bool; ints lie in [lo, hi] (None: unbounded); strs in `choices` if given."""

    name: str
    kind: type[int] | type[str] | type[bool]
    default: KnobValue
    doc: str
    lo: int | None = None
    hi: int | None = None
    choices: tuple[str, ...] | None = None
    # its value changes what a graph schedules or lowers to: part of every cache key of lowered work in a process
    # (plans, compiled kernels, lowered LINEARs, BEAM results; `lowering_knobs` below), so a Context
    # that sets it never gets work lowered under another value
    lowers: bool = False

    def allowed(self) -> str:
        if self.kind is bool:
            return "0 or 1 (also true/false, yes/no, on/off)"
        if self.kind is int:
            if self.lo is not None and self.hi is not None:
                return f"an integer from {self.lo} to {self.hi}"
            if self.lo is not None:
                return f"an integer >= {self.lo}"
            return "an integer"
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        return "any string"

    def parse(self, raw: object) -> KnobValue:
        """`raw` (an environment string or a `Context` value) as this knob's type; KnobError if not allowed."""
        if self.kind is bool:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, int) and raw in (0, 1):
                return bool(raw)
            if isinstance(raw, str) and raw.strip().lower() in _BOOL_TEXT:
                return _BOOL_TEXT[raw.strip().lower()]
            raise self._error(raw)
        if self.kind is int:
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise self._error(raw)
            try:
                value = int(raw)
            except ValueError:
                raise self._error(raw) from None
            if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
                raise self._error(raw)
            return value
        if not isinstance(raw, str) or (self.choices is not None and raw not in self.choices):
            raise self._error(raw)
        return raw

    def _error(self, raw: object) -> KnobError:
        return KnobError(f"knob {self.name}={raw!r} is not allowed: {self.name} must be {self.allowed()} ({self.doc})")


_BOOL_TEXT = {
    "0": False,
    "1": True,
    "": False,
    "false": False,
    "true": True,
    "no": False,
    "yes": True,
    "off": False,
    "on": True,
}

# fmt: off
KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("DEBUG", int, 0, "on stderr: 1 kernel count and time per realize, 2 a line per kernel, 3 applied opts, "
         "LINEAR listings and compile times, 4 generated source, 5 every stage's output; >=1 full tracebacks",
         lo=0, hi=5),
    Knob("TRACE", int, 0, "1 record every rule firing and print a summary at exit, 2 list every firing", lo=0, hi=2),
    Knob("SPEC", int, 0, "1 check the graph against rewrite/spec.py between pipeline stages", lo=0),
    Knob("VIZ", int, 0, "1 record rule firings, every stage's graphs and the kernels for the viewer; at exit write "
         "the trace and serve it (docs/viz.md)", lo=0),
    Knob("VIZ_OUT", str, "", "with VIZ=1: write the trace to this file at exit and do not serve it"),
    Knob("DEVICE", str, "cpu", "the default device: cpu, python or cuda, optionally :n", lowers=True),
    Knob("CPU_TARGET", str, "native", "the cpu target to compile for (native or empty: the host)",
         choices=("", "native", "x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64"), lowers=True),
    Knob("BEAM", int, 0, "beam width of the kernel optimization search (0: the hand-coded heuristics)", lo=0,
         lowers=True),
    Knob("NOOPT", bool, False, "no kernel optimization (and no fused multiply-add accumulation)",
         lowers=True),
    Knob("NOLOCALS", bool, False, "GPU targets: no LOCAL (thread) axes, every output axis a GLOBAL (block) axis",
         lowers=True),
    Knob("CACHE", int, 1, "0 disables the on-disk caches (compiled kernels, search results, e-graph results)",
         lo=0, hi=1),
    Knob("CACHEDIR", str, "", "where the on-disk caches live (empty: ~/.cache/uopc)"),
    Knob("MATCHERDIR", str, "", "where the generated rule matchers' bytecode is kept (empty: beside the package's "
         "own bytecode, or ~/.cache/uopc-matchers where bytecode writing is off; never under CACHEDIR)"),
    Knob("EGGLOG", int, 1, "0 skips e-graph saturation in simplify (fast rules only)", lo=0, hi=1, lowers=True),
    Knob("CC", str, "", "the C compiler of the cpu device (empty: the first of gcc, clang, cc on PATH)"),
    Knob("CPU_TIERS", int, 1, "1: a cpu kernel file the disk cache lacks is compiled first at -Og (~2.5x faster to "
         "compile), then at -O2 on a spare core at low priority and swapped in once built; 0: -O2 at once",
         lo=0, hi=1),
    Knob("CACHE_SIZE", int, 1 << 30, "bytes the cpu device's disk cache of compiled kernels may take (LRU eviction)",
         lo=0),
    Knob("SANITIZE", str, "", "address: cpu kernels built with AddressSanitizer, buffers allocated at their exact "
         "size (load with libasan preloaded: see devices/cpu.py)", choices=("", "address"), lowers=True),
    Knob("CUDA_COMPILER", str, "", "the cuda device's compiler: nvrtc or nvcc (empty: NVRTC where its library "
         "loads, else nvcc)", choices=("", "nvrtc", "nvcc")),
    Knob("PYTHON_TARGET", str, "", "the python device lowers for this GPU target and runs the kernels in its grid "
         "emulator (a GPU's kernels checked without one; empty: the plain interpreter)",
         choices=("", "sm_80", "sm_86", "sm_89", "sm_90"), lowers=True),
    Knob("ALLOW_TF32", bool, False, "GPU targets: float32 matmuls may run on tf32 tensor cores (inputs rounded to 10 "
         "mantissa bits, float32 sums; like torch's allow_tf32)", lowers=True),
    Knob("WGMMA", bool, False, "sm_90 targets: the heuristics put 16-bit matmuls on Hopper's warpgroup MMA "
         "(lower.tc_wgmma; emulated and compiled, not yet run on a GPU) instead of mma.sync", lowers=True),
    Knob("TMA", bool, False, "with WGMMA: the wgmma tiles are copied by Hopper's tensor memory accelerator with "
         "mbarriers (lower.tc_tma; emulated and compiled, not yet run on a GPU) instead of cp.async", lowers=True),
    Knob("WARP_REDUCE", bool, True, "GPU targets: a block's shared reduction (GROUP_REDUCE) folds each warp's partials "
         "by shuffles, then the warps' totals through shared memory with one barrier; 0: a shared-memory tree with a "
         "barrier per round", lowers=True),
    Knob("RACECHECK", bool, True, "the python device's grid emulator reports data races: accesses of one element by "
         "two threads, one a write, with no barrier between them (devices.python_mem); 0: off"),
    Knob("ACCESSSTATS", bool, False, "the python device's grid emulator counts each warp request's shared-memory "
         "wavefronts and global sectors against their ideal (devices.python_access.access_stats)"),
    Knob("MPI_TIMEOUT", int, 300, "seconds an MPI collective may take before every rank is aborted (devices/mpi.py)",
         lo=1),
)}
# fmt: on

# the declared knobs by type, for the static types of `getenv` (a test checks these agree with KNOBS)
IntKnob = Literal["DEBUG", "TRACE", "SPEC", "VIZ", "BEAM", "CACHE", "EGGLOG", "CACHE_SIZE", "MPI_TIMEOUT",
                 "CPU_TIERS"]
StrKnob = Literal["DEVICE", "CPU_TARGET", "CACHEDIR", "MATCHERDIR", "CC", "SANITIZE", "VIZ_OUT", "CUDA_COMPILER",
                  "PYTHON_TARGET"]
BoolKnob = Literal["NOOPT", "NOLOCALS", "ALLOW_TF32", "WGMMA", "TMA", "WARP_REDUCE", "RACECHECK", "ACCESSSTATS"]

_overrides: dict[str, KnobValue] = {}


def _knob(name: str, kind: type) -> Knob:
    k = KNOBS.get(name)
    if k is None:
        raise KnobError(
            f"unknown knob {name!r}; the declared knobs are {', '.join(KNOBS)} (declare new ones in "
            "rewrite/env.py KNOBS)"
        )
    if k.kind is not kind:
        raise KnobError(
            f"knob {name} is declared {k.kind.__name__}, not {kind.__name__}: read it with "
            f"knob_{k.kind.__name__}({name!r})"
        )
    return k


def _value(k: Knob) -> KnobValue:
    if k.name in _overrides:
        return _overrides[k.name]  # checked by Context on entry
    raw = os.environ.get(k.name)
    return k.default if raw is None else k.parse(raw)


def knob_int(name: str) -> int:
    """The value of int knob `name` (DEBUG, TRACE, SPEC, VIZ, BEAM, CACHE, EGGLOG)."""
    return cast(int, _value(_knob(name, int)))  # Context and parse made it a int


def knob_str(name: str) -> str:
    """The value of str knob `name` (DEVICE, CPU_TARGET, CACHEDIR, CC)."""
    return cast(str, _value(_knob(name, str)))  # Context and parse made it a str


def knob_bool(name: str) -> bool:
    """The value of bool knob `name` (NOOPT)."""
    return cast(bool, _value(_knob(name, bool)))  # Context and parse made it a bool


@dataclass(frozen=True)
class Knobs:
    """Every declared knob, read at one moment: `knobs()`. Field names are the knob names in lower case."""

    debug: int
    trace: int
    spec: int
    viz: int
    viz_out: str
    device: str
    cpu_target: str
    beam: int
    noopt: bool
    nolocals: bool
    cache: int
    cachedir: str
    matcherdir: str
    egglog: int
    cc: str
    cpu_tiers: int
    cache_size: int
    sanitize: str
    cuda_compiler: str
    python_target: str
    allow_tf32: bool
    wgmma: bool
    tma: bool
    warp_reduce: bool
    racecheck: bool
    accessstats: bool
    mpi_timeout: int


def knobs() -> Knobs:
    """A snapshot of every knob (Context overrides, else the environment, else the defaults), checked."""
    return Knobs(
        debug=knob_int("DEBUG"),
        trace=knob_int("TRACE"),
        spec=knob_int("SPEC"),
        viz=knob_int("VIZ"),
        viz_out=knob_str("VIZ_OUT"),
        device=knob_str("DEVICE"),
        cpu_target=knob_str("CPU_TARGET"),
        beam=knob_int("BEAM"),
        noopt=knob_bool("NOOPT"),
        nolocals=knob_bool("NOLOCALS"),
        cache=knob_int("CACHE"),
        cachedir=knob_str("CACHEDIR"),
        matcherdir=knob_str("MATCHERDIR"),
        egglog=knob_int("EGGLOG"),
        cc=knob_str("CC"),
        cpu_tiers=knob_int("CPU_TIERS"),
        cache_size=knob_int("CACHE_SIZE"),
        sanitize=knob_str("SANITIZE"),
        cuda_compiler=knob_str("CUDA_COMPILER"),
        python_target=knob_str("PYTHON_TARGET"),
        allow_tf32=knob_bool("ALLOW_TF32"),
        wgmma=knob_bool("WGMMA"),
        tma=knob_bool("TMA"),
        warp_reduce=knob_bool("WARP_REDUCE"),
        racecheck=knob_bool("RACECHECK"),
        accessstats=knob_bool("ACCESSSTATS"),
        mpi_timeout=knob_int("MPI_TIMEOUT"),
    )


@overload
def getenv(name: IntKnob, default: int | None = None) -> int: ...
@overload
def getenv(name: StrKnob, default: str | None = None) -> str: ...
@overload
def getenv(name: BoolKnob, default: bool | None = None) -> bool: ...
@overload
def getenv(name: str, default: KnobValue | None = None) -> KnobValue: ...
def getenv(name: str, default: KnobValue | None = None) -> KnobValue:
    """The older spelling of the typed accessors (module docstring): a declared knob's value, of its type."""
    if (k := KNOBS.get(name)) is not None:
        return _value(k)
    if name in _overrides:
        return _overrides[name]
    raw = os.environ.get(name)
    if raw is None:
        return default if default is not None else 0
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise KnobError(f"environment variable {name}={raw!r} must be an integer") from None
    return raw


_ENV_DATA: dict | None = getattr(os.environ, "_data", None)  # CPython: the dict os.environ keeps, keys encoded


def env_keys(*names: str) -> tuple:
    """Knob names as os.environ's own dict holds them, for `unset`."""
    enc = getattr(os.environ, "encodekey", None)
    return tuple(enc(n) for n in names) if enc is not None and _ENV_DATA is not None else names


def unset(keys: tuple) -> bool:
    """True when none of the knobs `keys` (from `env_keys`) is set, in the environment or by any Context: then each
    is at its default. A few dict lookups, for checks made per call (`getenv` encodes the name and reads
    os.environ through its Python methods); False means only "maybe set": read the knob then."""
    if _overrides or _ENV_DATA is None:
        return False
    return not any(map(_ENV_DATA.__contains__, keys))


# the knobs whose values change what a graph lowers to (Knob.lowers), in table order
LOWERING_KNOBS = tuple(name for name, k in KNOBS.items() if k.lowers)
_LOWERING_KEYS = env_keys(*LOWERING_KNOBS)
_LOWERING_DEFAULTS = tuple(KNOBS[name].default for name in LOWERING_KNOBS)


def lowering_knobs() -> tuple:
    """The values of LOWERING_KNOBS now, DEVICE first: part of the key of everything a process keeps lowered
    (plans, compiled kernels, lowered LINEARs, BEAM results), so work lowered under one value is never handed to a
    Context that sets another. Read once per realize, so the common case (none set) is a few dict lookups."""
    if unset(_LOWERING_KEYS):
        return _LOWERING_DEFAULTS
    return tuple(_value(KNOBS[name]) for name in LOWERING_KNOBS)


def cache_dir() -> str:
    d = knob_str("CACHEDIR") or os.path.join(os.path.expanduser("~"), ".cache", "uopc")
    os.makedirs(d, exist_ok=True)
    return d


@contextlib.contextmanager
def Context(**overrides: KnobValue) -> Iterator[None]:
    """Override knobs inside a `with` block; a declared knob's value is checked (KnobError) before it applies."""
    checked = {name: (KNOBS[name].parse(v) if name in KNOBS else v) for name, v in overrides.items()}
    old = dict(_overrides)
    _overrides.update(checked)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(old)
