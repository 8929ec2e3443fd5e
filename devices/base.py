"""Targets: everything the pipeline may ask about where code runs, as one typed, immutable value.

A `Target` names a device ("cpu", "python", "cuda") and the facts lowering reads: the instruction set the
compiler is told to use, the vector register width and count, fused multiply-add, cache sizes, cores, and the
limits of one kernel (buffer arguments, instructions). Heuristics read these fields; no constant about one
machine lives anywhere else. A Target is passed explicitly down the pipeline and is part of every cache key
(`Target.key`): a kernel compiled for AVX2 is never reused for AVX-512 or for another register width.

The cpu target is detected from the host (`host_target`): the x86-64 micro-architecture level from the CPU
flags (v2: SSE4.2, v3: AVX2+FMA, v4: AVX-512 F/BW/CD/DQ/VL), or aarch64 with NEON (and SVE, noted), cache
sizes from sysfs, cores from the affinity mask. `cpu_target(name)` gives the target for an explicit level
(`CPU_TARGET=x86-64-v2|x86-64-v3|x86-64-v4|aarch64|native`): code for another level can be compiled anywhere,
but runs only where the host has its instructions (`Target.runs_here`).
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass, field, fields, replace
from typing import Protocol

from rewrite.env import knob_bool
from rewrite.errors import DeviceError
from rewrite.ops import Ops

# what each x86-64 micro-architecture level adds, as /proc/cpuinfo names the flags (lzcnt shows as abm)
_X86_LEVELS: dict[str, frozenset[str]] = {
    "x86-64-v2": frozenset({"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}),
    "x86-64-v3": frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    "x86-64-v4": frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
}
# (vector bytes, vector registers, fma) per level: xmm x16, ymm x16, zmm x32; aarch64 NEON has 32 q registers
_ISA_FACTS: dict[str, tuple[int, int, bool]] = {
    "x86-64": (16, 16, False), "x86-64-v2": (16, 16, False), "x86-64-v3": (32, 16, True),
    "x86-64-v4": (64, 32, True), "aarch64": (16, 32, True),
}
CPU_TARGET_NAMES = ("native", "x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64")


@dataclass(frozen=True)
class Target:
    """Where a kernel runs, as lowering sees it. `isa` is the instruction set level the code assumes
    ("x86-64-v3", "aarch64", "python"); `name` is what the user asked for ("native" or a level)."""

    device: str
    name: str
    isa: str
    arch: str  # the machine the code is for: "x86_64", "aarch64", or "" for an interpreter
    compile_flags: tuple[str, ...] = ()  # what selects the instruction set on the compiler's command line
    compiler_prefix: str = ""  # a cross compiler's triple prefix ("aarch64-linux-gnu-"), "" for the host's
    vector_bytes: int = 0  # one SIMD register; 0: no vector code (an interpreter)
    vector_registers: int = 0
    fma: bool = False
    cores: int = 1
    cache_line: int = 64
    l1d_bytes: int = 32 << 10
    l2_bytes: int = 1 << 20
    l3_bytes: int = 8 << 20
    # the memory page: hardware prefetchers follow a stream of addresses only within one page
    page_bytes: int = 4 << 10
    # streaming (non-temporal) stores: an output of at least this many bytes is written around the caches
    # (rules.streaming); 0: never. On x86 the whole last-level cache: an output larger than it cannot wait there for
    # its reader anyway, and a plain store first reads each line it writes (a triad moves 16 bytes an element, not 12)
    stream_bytes: int = 0
    # what one kernel may hold; the scheduler (lower.schedule) realizes intermediates to stay within them.
    # max_args: buffers per kernel (ctypes calls at most 1024 arguments; room is left for variables and SPECIALs).
    # max_kernel_ops: tensor-level ops fused into one kernel, an expensive op (exp2, sin, ...) counting 16: gcc
    # takes super-linear time in a kernel's size (a 2,000-op chain 0.5 s, 10,000 ops 5 s, 40,000 ops 50 s on an
    # EPYC) and crashes at 100,000, so kernels are cut at 4,096. The python target keeps the same bounds, so the
    # reference's kernels have the cpu device's shape.
    max_args: int = 512
    max_kernel_ops: int = 4096
    features: frozenset[str] = field(default_factory=frozenset)  # the CPU flags the code needs
    interpreted: bool = False  # an interpreter: cost is per instruction, so no kernel optimization pays
    # GPU facts (0 / empty on a CPU)
    warp_size: int = 0
    local_memory_bytes: int = 0
    tensor_cores: tuple[str, ...] = ()

    @functools.cached_property
    def key(self) -> str:
        """Every field as text: a cache key part that changes whenever anything lowering reads changes."""
        return "|".join(f"{f.name}={getattr(self, f.name)!s}" for f in fields(self) if f.name != "features") + \
            "|features=" + ",".join(sorted(self.features))

    def lanes(self, itemsize: int) -> int:
        """Elements of `itemsize` bytes in one vector register (1 with no vector registers)."""
        return max(1, self.vector_bytes // max(1, itemsize))

    @property
    def runs_here(self) -> bool:
        """Whether code for this target runs on this host (same machine, every needed CPU flag present)."""
        if not self.arch:
            return True
        if self.arch == "cuda":
            return False  # a GPU's code: the cuda device decides whether its GPU runs it
        return self.arch == host_arch() and self.features <= host_flags()

    def with_(self, **changes: object) -> Target:
        """A copy with some fields changed (e.g. `cores=1`), for experiments and tests."""
        return replace(self, **changes)  # type: ignore[arg-type]  # dataclasses.replace takes the field types

    def __str__(self) -> str:
        if not self.arch:
            return self.device
        if self.arch == "cuda":
            return (f"cuda {self.isa}: {self.cores} multiprocessors, warp {self.warp_size}, shared memory "
                    f"{self.local_memory_bytes >> 10} KiB/block, L2 {self.l2_bytes >> 20} MiB")
        simd = f"{self.vector_bytes * 8}-bit x{self.vector_registers}" if self.vector_bytes else "no SIMD"
        return (f"{self.device} {self.isa}{' (native)' if self.name == 'native' else ''}: {simd}"
                f"{', FMA' if self.fma else ''}, {self.cores} cores, L1d {self.l1d_bytes >> 10} KiB, "
                f"L2 {self.l2_bytes >> 10} KiB, L3 {self.l3_bytes >> 20} MiB")


class Device(Protocol):
    """What lower/ asks of a device module: its name, the ops it runs natively (and those it would rather have
    decomposed), its default target, and compiling LINEAR programs for a target into callable kernels."""

    name: str
    supported_ops: frozenset[Ops]
    decompose: frozenset[Ops]

    def default_target(self) -> Target: ...


# ---------------------------------------------------------------- host detection


@functools.cache
def host_arch() -> str:
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


@functools.cache
def host_flags() -> frozenset[str]:
    """The host CPU's feature flags as /proc/cpuinfo lists them (x86 `flags`, arm `Features`)."""
    try:
        with open("/proc/cpuinfo") as f:
            line = next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        line = ""
    return frozenset(line.partition(":")[2].split())


def x86_level(flags: frozenset[str]) -> str:
    """The highest x86-64 micro-architecture level whose flags (and every lower level's) are all in `flags`."""
    level = "x86-64"
    for name, need in _X86_LEVELS.items():
        if not need <= flags:
            break
        level = name
    return level


def _level_features(level: str) -> frozenset[str]:
    out: set[str] = set()
    for name, need in _X86_LEVELS.items():
        out |= need
        if name == level:
            return frozenset(out)
    return frozenset()


def _sysfs_caches() -> dict[str, int]:
    """Data/unified cache sizes of cpu0 by level ("L1", "L2", "L3"), from sysfs; empty where not readable."""
    out: dict[str, int] = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for e in entries:
        if not e.startswith("index"):
            continue
        try:
            with open(f"{base}/{e}/level") as f:
                level = f.read().strip()
            with open(f"{base}/{e}/type") as f:
                kind = f.read().strip()
            with open(f"{base}/{e}/size") as f:
                text = f.read().strip()
        except OSError:
            continue
        if kind == "Instruction":
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        digits = text[:-1] if text[-1:].isalpha() else text
        if digits.isdigit():
            out[f"L{level}"] = int(digits) * mult
    return out


def _page_bytes() -> int:
    try:
        return max(1 << 12, os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return 4 << 10


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cpu_target(name: str = "native") -> Target:
    """The cpu Target for `name` ("native": what this host has; or an explicit level). The sizes of caches and the
    core count (and the page size) are the host's either way (a cross target's are unknown here, so the host's stand
    in)."""
    if name not in CPU_TARGET_NAMES:
        raise DeviceError(f"CPU_TARGET={name!r} is not a known cpu target; use one of {', '.join(CPU_TARGET_NAMES)}")
    return _cpu_target(name)


@functools.cache
def _cpu_target(name: str) -> Target:
    host = host_arch()
    flags = host_flags()
    cflags: tuple[str, ...]
    if name == "native":
        if host == "aarch64":
            isa, cflags = "aarch64", ("-mcpu=native",)
        elif host == "x86_64":
            isa, cflags = x86_level(flags), ("-march=native",)
        else:
            isa, cflags = host, ()
    elif name == "aarch64":
        isa, cflags = "aarch64", ("-march=armv8-a",)
    else:
        isa, cflags = name, (f"-march={name}", "-mtune=generic")
    arch = "aarch64" if isa == "aarch64" else "x86_64" if isa.startswith("x86-64") else host
    vbytes, vregs, fma = _ISA_FACTS.get(isa, (16, 16, False))
    if arch == "x86_64" and vbytes == 64:
        # gcc's tuning for many AVX-512 Intel cores (what -march=native picks there) prefers 256-bit vectors: the
        # renderer's 16-lane helpers (lane loops such as the FMA's) then became ymm halves joined by shuffles, and a
        # 1024 matmul ran at 9 GFLOP/s instead of ~200. The kernels are written for the Target's 64-byte registers.
        cflags += ("-mprefer-vector-width=512",)
    features = _level_features(isa) if arch == "x86_64" else frozenset({"asimd"}) if arch == "aarch64" else frozenset()
    if name == "native" and host == "aarch64":
        features = frozenset({"asimd"}) | (flags & {"sve", "sve2"})
    caches = _sysfs_caches()
    prefix = "aarch64-linux-gnu-" if arch == "aarch64" and host != "aarch64" else ""
    return Target("cpu", name, isa, arch, cflags, prefix, vbytes, vregs, fma, _cores(),
                  l1d_bytes=caches.get("L1", 32 << 10), l2_bytes=caches.get("L2", 1 << 20),
                  l3_bytes=caches.get("L3", 8 << 20), page_bytes=_page_bytes(), features=features,
                  stream_bytes=caches.get("L3", 8 << 20) if arch == "x86_64" else 0)


def python_target() -> Target:
    """The reference interpreter: one core, interpreted (the heuristics choose no opts), and lanes as wide as the
    widest cpu's, so explicit opts expand into the same vector code the cpu device would run."""
    return Target("python", "python", "python", "", vector_bytes=64, vector_registers=32, interpreted=True)


# NVIDIA compute capabilities lowering knows: (multiprocessors of the usual part, L2 bytes, shared memory one block
# may hold with the opt-in attribute, the mma.sync shapes "MxNxK in->acc" its tensor cores run)
_SM_FACTS: dict[str, tuple[int, int, int, tuple[str, ...]]] = {
    "sm_80": (108, 40 << 20, 163 << 10, ("16x8x16 half->float", "16x8x16 bfloat16->float", "16x8x8 tf32->float")),
    "sm_86": (84, 6 << 20, 99 << 10, ("16x8x16 half->float", "16x8x16 bfloat16->float", "16x8x8 tf32->float")),
    "sm_89": (128, 72 << 20, 99 << 10, ("16x8x16 half->float", "16x8x16 bfloat16->float", "16x8x8 tf32->float")),
    "sm_90": (132, 50 << 20, 227 << 10, ("16x8x16 half->float", "16x8x16 bfloat16->float", "16x8x8 tf32->float")),
}
GPU_TARGET_NAMES = tuple(_SM_FACTS)


def gpu_target(sm: str = "sm_90", multiprocessors: int | None = None, tf32: bool | None = None) -> Target:
    """The cuda Target for compute capability `sm` ("sm_80", "sm_90", ...). `cores` is the multiprocessor count
    (the device module passes the count it reads from the driver; the usual part's otherwise), `vector_bytes` the
    widest load one thread issues (128-bit), `vector_registers` the registers one thread may use, and
    `local_memory_bytes` the shared memory one block may hold. Code for it runs only on a GPU of that capability
    or newer, which the cuda device checks; `runs_here` says False, since no host CPU runs it. The tf32 tensor
    cores are among `tensor_cores` only with `tf32` (default: the ALLOW_TF32 knob), since they round float32
    inputs to 10 mantissa bits: float32 matmuls stay float32 unless asked (like torch's allow_tf32)."""
    if sm not in _SM_FACTS:
        raise DeviceError(f"cuda target {sm!r} is not known; use one of {', '.join(GPU_TARGET_NAMES)}")
    sms, l2, smem, tcs = _SM_FACTS[sm]
    if not (knob_bool("ALLOW_TF32") if tf32 is None else tf32):
        tcs = tuple(t for t in tcs if "tf32" not in t)
    return Target("cuda", sm, sm, "cuda", (f"-arch={sm}",), vector_bytes=16, vector_registers=255, fma=True,
                  cores=multiprocessors or sms, cache_line=128, l1d_bytes=smem, l2_bytes=l2, l3_bytes=0,
                  max_args=256, warp_size=32, local_memory_bytes=smem, tensor_cores=tcs)


__all__ = ["CPU_TARGET_NAMES", "GPU_TARGET_NAMES", "Device", "Target", "cpu_target", "gpu_target", "host_arch",
           "host_flags", "python_target", "x86_level"]
