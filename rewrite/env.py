"""Every environment knob the project reads, in one place (documented in the README).

DEBUG=1..5  kernel count and timing; per-kernel lines; applied opts; UOp listings; generated source
TRACE=1     record every rule firing (stage, rule, before, after); rewrite.trace prints them
SPEC=1      check every pipeline stage's output against the spec (rewrite.spec)
DEVICE      default device: cpu (default), python, cuda
CPU_TARGET  what the cpu device compiles for: native (default), x86-64-v2, x86-64-v3, x86-64-v4, aarch64
BEAM=n      beam width for kernel optimization search (0 = hand-coded heuristics)
NOOPT=1     no kernel optimization at all
CACHE=0     disable the on-disk caches (compiled kernels, search results, e-graph results)
CACHEDIR    where the on-disk caches live (default: ~/.cache/uopc)
EGGLOG=0    skip e-graph saturation in simplify (fast rules only)

`Context(DEBUG=2)` overrides knobs inside a `with` block (for tests and the benchmark runner).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

_DEFAULTS: dict[str, int | str] = {
    "DEBUG": 0, "TRACE": 0, "SPEC": 0, "DEVICE": "cpu", "CPU_TARGET": "native", "BEAM": 0, "NOOPT": 0, "CACHE": 1,
    "CACHEDIR": "", "EGGLOG": 1,
}
_overrides: dict[str, int | str] = {}


def getenv(name: str, default: int | str | None = None) -> int | str:
    """The knob's value: a `Context` override, else the environment, else the default (ints parsed)."""
    if name in _overrides:
        return _overrides[name]
    dflt = _DEFAULTS.get(name, default)
    raw = os.environ.get(name)
    if raw is None:
        return dflt if dflt is not None else 0
    if isinstance(dflt, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"environment variable {name}={raw!r} must be an integer") from None
    return raw


def cache_dir() -> str:
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
