"""Peers held to the instruction set our kernels are compiled for.

`CPU_TARGET=x86-64-v3` on an AVX-512 host compiles our kernels for AVX2, but numpy's OpenBLAS, its own ufunc loops,
PyTorch (MKL, oneDNN, ATen's kernels, torch.compile's C++) and tinygrad's clang would still pick AVX-512 at run
time: the ratios would then compare AVX2 code against AVX-512 code, which answers no one's question. A user with an
AVX2 machine wants the ratio their peers give on it. So when the requested level is below the host's, the runner
starts again with each peer's own switch set to that level (`limit_peers`), and the run's description says so.

What each switch is, and what was measured on an Intel Xeon with AVX-512 (2 cores) to confirm it takes effect:
- OpenBLAS (numpy's BLAS, built with DYNAMIC_ARCH): `OPENBLAS_CORETYPE` picks the kernel family; Haswell is its
  AVX2 one. numpy matmul 1024: 331 -> 219 GFLOP/s.
- numpy's dispatched ufunc loops: `NPY_DISABLE_CPU_FEATURES` drops the dispatch targets above the level (the names
  taken from numpy's own list of what it dispatches to). np.exp of 4M float32: 1.7 -> 6.6 ms.
- PyTorch: `ATEN_CPU_CAPABILITY` (ATen's vectorized kernels and torch.compile's vector ISA),
  `MKL_ENABLE_INSTRUCTIONS` (MKL's GEMM), `ONEDNN_MAX_CPU_ISA` (oneDNN's convolutions). torch matmul 1024:
  299 -> 190 GFLOP/s, conv2d (8,64,56,56) 3x3: 5.1 -> 8.0 ms; torch.backends.cpu.get_cpu_capability() reads AVX2.
- tinygrad: its DEV target names the clang -march (`CPU:CLANG:x86_64,x86-64-v3`).
JAX is not a cpu peer of these suites; `XLA_FLAGS=--xla_cpu_max_isa` did not change its matmul when tried (its GEMM
picks its kernels at run time), so it is left out here rather than claimed limited.
"""

from __future__ import annotations

import importlib
import os
import sys

from devices.base import host_arch, host_flags, x86_level

# the x86-64 levels in order; a peer is limited only when the requested one is below the host's
LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")

# numpy's dispatch targets that each level has (older numpy builds name single features, newer ones levels)
_NUMPY_HAS = {"x86-64-v2": {"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "SSE42", "POPCNT", "X86_V2"}}
_NUMPY_HAS["x86-64-v3"] = _NUMPY_HAS["x86-64-v2"] | {"AVX", "F16C", "FMA3", "AVX2", "X86_V3"}
_SWITCHES: dict[str, dict[str, str]] = {
    "x86-64-v2": {"OPENBLAS_CORETYPE": "Nehalem", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
                  "ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"},
    "x86-64-v3": {"OPENBLAS_CORETYPE": "Haswell", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                  "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
}
MARK = "UOPC_PEERS_LIMITED"  # set in the restarted runner: the level its peers are held to


def host_level() -> str:
    """This host's x86-64 level ("" on another architecture)."""
    return x86_level(host_flags()) if host_arch() == "x86_64" else ""


def peer_env(requested: str, host: str) -> dict[str, str]:
    """The environment that holds the peers to level `requested` on a host of level `host`: empty unless both are
    x86-64 levels and `requested` is the lower (then every peer's switch, see the module docstring)."""
    if requested not in _SWITCHES or host not in LEVELS or LEVELS.index(requested) >= LEVELS.index(host):
        return {}
    return {**_SWITCHES[requested], "NPY_DISABLE_CPU_FEATURES": " ".join(numpy_above(requested)),
            "DEV": f"CPU:CLANG:x86_64,{requested}", MARK: requested}


def numpy_above(level: str) -> list[str]:
    """The targets numpy's build dispatches to at run time that `level` does not have."""
    try:
        umath = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:  # numpy before 2.0 kept it in numpy.core
        umath = importlib.import_module("numpy.core._multiarray_umath")
    dispatch: list[str] = umath.__cpu_dispatch__
    return [n for n in dispatch if n not in _NUMPY_HAS[level]]


def tinygrad_dev() -> str:
    """tinygrad's DEV for the cpu peer: the limited target when this run is limited, else plain CPU (native)."""
    level = os.environ.get(MARK, "")
    return f"CPU:CLANG:x86_64,{level}" if level else "CPU"


def limited_to() -> str:
    """The level this run's peers are held to ("" when they run at the host's own)."""
    return os.environ.get(MARK, "")


def limit_peers(argv: list[str]) -> None:
    """Restart this runner (`python -m benchmarks argv...`) with the peers held to CPU_TARGET's level when it is below
    the host's (see the module docstring); returns without doing anything when no limit applies or the process
    already carries it. A switch the user set already is kept as they set it."""
    requested = os.environ.get("CPU_TARGET", "")
    env = peer_env(requested, host_level())
    if not env or os.environ.get(MARK) == requested:
        return
    new = {**env, **{k: v for k, v in os.environ.items() if k in env and k != MARK}}
    print(f"peers held to {requested} like our kernels (CPU_TARGET): "
          + " ".join(f"{k}={v}" for k, v in new.items() if k != MARK), file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, "-m", "benchmarks", *argv], {**os.environ, **new})


__all__ = ["LEVELS", "MARK", "host_level", "limit_peers", "limited_to", "peer_env", "tinygrad_dev"]
