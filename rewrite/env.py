"""Every environment knob the project reads, in one place (documented in the README).

DEBUG=1..5  kernel count and timing; per-kernel lines; applied opts; UOp listings; generated source
TRACE=1     record every rule firing (stage, rule, before, after); rewrite.trace prints them
DEVICE      default device: cpu (default), python, cuda
BEAM=n      beam width for kernel optimization search (0 = hand-coded heuristics)
NOOPT=1     no kernel optimization at all
CACHE=0     disable the on-disk caches (compiled kernels, search results, e-graph results)
CACHEDIR    where the on-disk caches live (default: ~/.cache/uopc)
EGGLOG=0    skip e-graph saturation in simplify (fast rules only)
CACHE_SIZE  bytes the cpu device's disk cache of compiled kernels may take (default 1 GiB; LRU eviction)
SANITIZE    `address`: the cpu device compiles kernels with AddressSanitizer and allocates buffers at their
            exact size (load the kernels with libasan preloaded: see devices/cpu.py)

A knob with a value it cannot take (DEBUG=abc, BEAM=-1) raises KnobError naming the knob.

`Context(DEBUG=2)` overrides knobs inside a `with` block (for tests and the benchmark runner).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from rewrite.errors import KnobError

_DEFAULTS: dict[str, int | str] = {
    "DEBUG": 0, "TRACE": 0, "DEVICE": "cpu", "BEAM": 0, "NOOPT": 0, "CACHE": 1, "CACHEDIR": "", "EGGLOG": 1,
    "CACHE_SIZE": 1 << 30, "SANITIZE": "",
}
# knobs with a restricted range: integer knobs that must be >= 0, string knobs with their allowed values
_NONNEGATIVE = frozenset({"DEBUG", "TRACE", "BEAM", "NOOPT", "CACHE", "EGGLOG", "CACHE_SIZE"})
_CHOICES: dict[str, tuple[str, ...]] = {"SANITIZE": ("", "address")}
_overrides: dict[str, int | str] = {}


def getenv(name: str, default: int | str | None = None) -> int | str:
    """The knob's value: a `Context` override, else the environment, else the default (ints parsed)."""
    if name in _overrides:
        return _check(name, _overrides[name], "Context override")
    dflt = _DEFAULTS.get(name, default)
    raw = os.environ.get(name)
    if raw is None:
        return dflt if dflt is not None else 0
    if isinstance(dflt, int):
        try:
            v = int(raw)
        except ValueError:
            raise KnobError(f"environment variable {name}={raw!r} must be an integer (e.g. {name}={dflt})") from None
        return _check(name, v, "environment variable")
    return _check(name, raw, "environment variable")


def _check(name: str, v: int | str, where: str) -> int | str:
    if name in _NONNEGATIVE and isinstance(v, int) and v < 0:
        raise KnobError(f"{where} {name}={v} must be >= 0")
    if name in _CHOICES and v not in _CHOICES[name]:
        raise KnobError(f"{where} {name}={v!r} is not one of {', '.join(repr(c) for c in _CHOICES[name])}")
    return v


def cache_dir() -> str:
    """The cache directory, created if missing; OSError when it cannot be (callers fall back to no cache)."""
    d = str(getenv("CACHEDIR")) or os.path.join(os.path.expanduser("~"), ".cache", "uopc")
    os.makedirs(d, exist_ok=True)
    return d


@contextlib.contextmanager
def Context(**knobs: int | str) -> Iterator[None]:
    old = dict(_overrides)
    _overrides.update(knobs)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(old)
