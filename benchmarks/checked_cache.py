"""Small JSON files under the project's cache directory that are checked before they are believed.

The benchmark runner keeps two things between runs: the machine limits (benchmarks.limits: a measurement that
takes ~15 s and belongs to the machine, not to the code) and how long each suite took last time (the progress
bar's estimate). Neither is trusted blindly: a file carries the format it was written in, the key it belongs to
(CPU model, target, format version) and a SHA-256 of its payload, and `read` returns None for a file that is
missing, unreadable, not JSON, of another format or key, or whose payload does not hash to what it says (a
truncated or hand-edited file). The caller then measures again and `write` replaces the file atomically.
CACHE=0 (the project's knob for all its disk caches) reads and writes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

# rewrite.env is imported inside the functions: benchmarks.runner imports this module, and the symbolic suite's
# cold-start child imports the runner before it starts its clock, with nothing of the compiler loaded


def enabled() -> bool:
    from rewrite.env import getenv

    return bool(int(getenv("CACHE")))


def path_for(name: str, key: str) -> str:
    """The file for `name` (a kind of record) and `key` (what it belongs to)."""
    from rewrite.env import cache_dir

    return os.path.join(cache_dir(), f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json")


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def read(path: str, key: str, fmt: int) -> dict | None:
    """The payload stored at `path` if it is intact and belongs to `key` and format `fmt`; None otherwise."""
    if not enabled():
        return None
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("format") != fmt or d.get("key") != key:
        return None
    payload = d.get("payload")
    if not isinstance(payload, dict) or d.get("sha256") != _digest(payload):
        return None
    return payload


def write(path: str, key: str, fmt: int, payload: dict) -> None:
    """Store `payload` for `key` (atomically: a reader sees the old file or the new one, never half of one).
    A cache that cannot be written is skipped: the run goes on without it."""
    if not enabled():
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump({"format": fmt, "key": key, "sha256": _digest(payload), "payload": payload}, f, indent=1,
                      default=str)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
