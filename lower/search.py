"""BEAM search over OptOps: candidates compiled and timed on the device, the best kept.

`beam_search(ast, bufs, target, width)` starts from no opts and from the hand-coded heuristics' (lower.optimize: so
it never ends on a kernel slower than they pick, up to timing noise); each round extends every kept opt list with
every legal SPLIT of the current kernel's axes (into THREAD, UPCAST, UNROLL, LOOP, REDUCE, factors 2..16), times
each distinct candidate on the device with random inputs (median of 3 after a warm-up), and keeps the `width`
fastest. It stops when a round improves the best time by less than 2%, or after `max_rounds`.
A GPU target (Target.warp_size) is searched by lower.search_gpu instead (around the GPU heuristics, timed with
CUDA events; DeviceError where no GPU is usable).
Results are cached on disk, keyed by the kernel's structural hash and the Target (CACHE=0 disables it); a
cache file or entry that does not parse, or an entry that no longer applies to its kernel, is searched again and
replaced, and an unwritable cache directory is skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from lower.opt_apply import Opt, OptOps, apply_opts, axes, size
from rewrite import AxisType, UOp
from rewrite.env import LOWERING_KNOBS, cache_dir, getenv, lowering_knobs
from rewrite.errors import CompilerError
from rewrite.hashing import structural_hash

_TARGETS = (AxisType.THREAD, AxisType.UPCAST, AxisType.UNROLL, AxisType.LOOP, AxisType.REDUCE)
_FACTORS = (2, 3, 4, 8, 16)


def actions(ast: UOp) -> list[Opt]:
    out = []
    for i, r in enumerate(axes(ast)):
        try:
            n = size(r)
        except CompilerError:
            continue
        for k in _FACTORS:
            if n % k or (k == n and k > 16):
                continue
            for t in _TARGETS:
                out.append(Opt(OptOps.SPLIT, i, (k, t, t is AxisType.THREAD)))
    return out


def _buffers(bufs: tuple[UOp, ...], dev: Any) -> dict[int, np.ndarray]:
    from devices.memory import np_dtype

    rng = np.random.default_rng(0)
    out = {}
    for i, b in enumerate(bufs):
        n = int(np.prod(b.shape))
        dt = np_dtype(b.dtype)
        out[i] = (rng.standard_normal(n).astype(dt) if np.issubdtype(dt, np.floating) else np.ones(n, dtype=dt))
    return out


class WrongResult(CompilerError):
    """A candidate computed something other than the unoptimized kernel: a compiler bug, reported and skipped."""


def time_candidate(ast: UOp, bufs: dict[int, np.ndarray], target: Any, opts: list[Opt], name: str,
                   expect: np.ndarray | None = None) -> float:
    from devices import get_device
    from lower.stages import as_target, lower_kernel

    target = as_target(target)
    k = get_device(target.device).compile(lower_kernel(ast, target, opts=opts), name, target)
    bufs[0][:] = 0
    k(bufs)
    if expect is not None and not np.allclose(bufs[0], expect, rtol=1e-3, atol=1e-4, equal_nan=True):
        raise WrongResult(f"beam {name}: opts {opts} change the kernel's result")
    ts = []
    for _ in range(3):
        t = time.perf_counter()
        k(bufs)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _cache_path() -> str:
    return os.path.join(cache_dir(), "beam.json")


def _load_cache() -> dict[str, list]:
    """The cache file's entries; anything that is not a JSON object of lists (garbage, a torn write, an edit)
    counts as empty, so the next write replaces it."""
    try:
        with open(_cache_path()) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(d, dict):
        return {}
    return {k: v for k, v in d.items() if isinstance(k, str) and isinstance(v, list)}


def _cached_opts(ast: UOp, hit: list, target: Any = None) -> list[Opt] | None:
    """The cached opt list, if every entry parses and the list still applies to `ast` (for a GPU `target`: with
    its TC or SIMT opt, lower.gpu.apply_gpu_opts); None means search."""
    try:
        opts = [_opt_from_json(j) for j in hit]
        if target is not None and target.warp_size:
            from lower.gpu import apply_gpu_opts

            apply_gpu_opts(ast, opts, target)
        else:
            apply_opts(ast, opts)
    except (KeyError, IndexError, TypeError, ValueError, CompilerError):
        return None
    return opts


def _save(key: str, opts: list[Opt]) -> None:
    """Add one entry (atomically: a temporary unique per process and thread, renamed into place); a cache
    directory that cannot be written is skipped."""
    tmp = None
    try:
        path = _cache_path()
        cache = _load_cache()
        cache[key] = [_opt_to_json(o) for o in opts]
        fd, tmp = tempfile.mkstemp(prefix="beam.", suffix=".tmp", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            json.dump(cache, f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _opt_to_json(o: Opt) -> list:
    """[op, axis, arg] with the arg's tuples as lists and AxisTypes as {"axis": name}: every Opt form (a SPLIT's
    (k, AxisType, top), a TC's (shape, tm, tn, ...) or shape, PADTO's (k, mode), NOLOCALS' None)."""

    def enc(a: object) -> object:
        if isinstance(a, AxisType):
            return {"axis": a.name}
        if isinstance(a, tuple):
            return [enc(x) for x in a]
        if a is None or isinstance(a, (bool, int, str)):
            return a
        raise TypeError(f"BEAM cache: {o} has an arg that JSON cannot hold")

    return [o.op.name, o.axis, enc(o.arg)]


def _opt_from_json(j: list) -> Opt:
    """The Opt `_opt_to_json` wrote; ValueError for anything else (an older entry or an edit: searched again)."""

    def dec(a: object) -> object:
        if isinstance(a, dict):
            if set(a) != {"axis"}:
                raise ValueError(f"not a cached opt arg: {a!r}")
            return AxisType[a["axis"]]
        if isinstance(a, list):
            return tuple(dec(x) for x in a)
        return a

    if not (isinstance(j, list) and len(j) == 3 and isinstance(j[0], str) and (j[1] is None or isinstance(j[1], int))
            and not isinstance(j[1], bool)):
        raise ValueError(f"not a cached opt: {j!r}")
    o = Opt(OptOps[j[0]], j[1], dec(j[2]))
    if o.op is OptOps.SPLIT:
        o.split_arg  # noqa: B018  # a SPLIT whose arg is not (k, AxisType, top) is a KernelOptError here
    return o


def timed_round(cands: list[list[Opt]], time_one: Callable[[list[Opt]], float], name: str, rnd: int,
                best_t: float) -> list[tuple[float, list[Opt]]]:
    """One BEAM round: each candidate timed by `time_one` (with a progress line on stderr), fastest first. A
    candidate whose result differs from the default's is reported and skipped; one the lowering or the device
    refuses (CompilerError) is dropped."""
    timed: list[tuple[float, list[Opt]]] = []
    for i, c in enumerate(cands):
        sys.stderr.write(f"\r  beam {name} round {rnd + 1}: {i + 1}/{len(cands)} candidates, best "
                         f"{best_t * 1e3:.3f} ms")
        try:
            timed.append((time_one(c), c))
        except WrongResult as e:
            sys.stderr.write(f"\n  {e} (skipped; please report)\n")
        except CompilerError:
            continue
    sys.stderr.write("\n")
    return sorted(timed, key=lambda x: x[0])


def beam_key(ast: UOp, target: Any, width: int) -> str:
    """The disk cache's key of a search: the kernel's structure, the whole target, the width and the knobs that
    change lowering but are not the target's (WGMMA, TMA, WARP_REDUCE...: the heuristics' starting point and what
    the candidates lower to; BEAM and DEVICE left out). "h": searched with the heuristics' opts in the beam."""
    knobs = ",".join(f"{n}={v}" for n, v in zip(LOWERING_KNOBS, lowering_knobs(), strict=True)
                     if n not in ("DEVICE", "BEAM"))
    return f"{structural_hash(ast)}:{target.key}:{width}:{knobs}:h"


def beam_search(ast: UOp, bufs_uops: tuple[UOp, ...], target: Any, width: int, max_rounds: int = 4,
                name: str = "beam") -> list[Opt]:
    """The best opts found for `ast` on `target` (a Target or a device), cached on disk by the kernel's
    structure, the whole target (its key) and the width."""
    from lower.stages import as_target

    target = as_target(target)
    key = beam_key(ast, target, width)
    use_cache = bool(getenv("CACHE"))
    hit = _load_cache().get(key) if use_cache else None
    if hit is not None and (opts := _cached_opts(ast, hit, target)) is not None:
        return opts
    if target.warp_size:  # a GPU: candidates around the GPU heuristics, timed on the CUDA device
        from lower.search_gpu import beam_search_gpu

        found = beam_search_gpu(ast, bufs_uops, target, width, max_rounds, name)
        if use_cache:
            _save(key, found)
        return found
    bufs = _buffers(bufs_uops, target)
    best_opts: list[Opt] = []
    best_t = time_candidate(ast, bufs, target, [], name)
    expect = bufs[0].copy()
    beam: list[tuple[float, list[Opt]]] = [(best_t, [])]
    seen: set[UOp] = set()
    from lower.optimize import hand_coded

    try:  # the heuristics' opts start in the beam too: the search never ends on a kernel slower than them
        heur = hand_coded(ast, target)
        if heur:
            heur_t = time_candidate(ast, bufs, target, heur, name, expect)
            beam = sorted([*beam, (heur_t, heur)], key=lambda b: b[0])
            if heur_t < best_t:
                best_t, best_opts = heur_t, heur
    except CompilerError as e:  # WrongResult included: reported like any candidate's, then searched without
        print(f"beam {name}: the heuristics' opts fail ({e}); searching from none", file=sys.stderr)
    for rnd in range(max_rounds):
        cands: list[list[Opt]] = []
        for _, opts in beam:
            cur = apply_opts(ast, opts)
            for a in actions(cur):
                try:
                    nxt = apply_opts(cur, [a])
                except CompilerError:
                    continue
                if nxt in seen:
                    continue
                seen.add(nxt)
                cands.append([*opts, a])
        timed = timed_round(cands, lambda c: time_candidate(ast, bufs, target, c, name, expect), name, rnd, best_t)
        if not timed:
            break
        beam = timed[:width]
        if beam[0][0] < best_t * 0.98:
            best_t, best_opts = beam[0]
        else:
            break
    if getenv("DEBUG") >= 3:
        print(f"beam {name}: {best_opts} ({best_t * 1e3:.3f} ms)", file=sys.stderr)
    if use_cache:
        _save(key, best_opts)
    return best_opts
