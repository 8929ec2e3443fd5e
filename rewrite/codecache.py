"""A disk cache of generated Python code (the rule matchers' bytecode), like Python's own `.pyc` files.

Every process used to generate and compile each rule matcher it needs (rewrite.match): for the matchers of a first
realize that took ~15-35 ms, inside the first kernels' lowering. rewrite.match_cache keys each matcher by the
shape of its rules and keeps (code, where its names come from, source) here, one file per key. Where: as Python
keeps its own bytecode, beside the package (`rewrite/__pycache__/uopc-matchers`, or under
`sys.pycache_prefix` when that is set), so a process with a fresh CACHEDIR (a cold benchmark) still finds the
library's matchers; where that directory cannot be written (a read-only installation), under
`rewrite.env.cache_dir()/matchers`.

  name     the key's hex and the interpreter's bytecode tag (`sys.implementation.cache_tag`), so another Python
           never reads the file
  content  MAGIC, importlib.util.MAGIC_NUMBER (the bytecode format), the full 32-byte key, the payload's CRC-32
           (`digest`), then the payload: the marshal'd value

A file is trusted only when all of that checks out: a wrong magic, another bytecode format or key (a renamed or
colliding file), a payload whose digest differs (truncated, damaged) or that does not unmarshal, is a miss (and
the caller checks the value's form too): the matcher is generated again and the file written anew. Files are
written whole to a temporary name and renamed (a concurrent process sees no file or the whole file).

Like Python's bytecode cache, it never writes beside the package when `sys.dont_write_bytecode`
(PYTHONDONTWRITEBYTECODE, common in container images) is set; the files then go to (and are also read from)
`rewrite.env.cache_dir()/matchers`, as kernels do: without them every process would generate its matchers again
(~0.3 s of a first realize). CACHE=0, which turns off the caches of results (compiled kernels, search and
e-graph results), leaves it on: it holds the library's own code, not anything computed from a user's program.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import sys
import zlib
from collections.abc import Iterator
from importlib.util import MAGIC_NUMBER
from typing import Any

from rewrite.env import cache_dir, knob_str

MAGIC = b"uopcMC02"
_KEY, _DIGEST = 32, 4
_HEADER = len(MAGIC) + len(MAGIC_NUMBER) + _KEY + _DIGEST


def digest(payload: bytes) -> bytes:
    """The check of a payload against damage (a torn or flipped file; files are written whole and renamed, and
    what a file holds is the library's own code, so nothing here is a defence against a forger): a CRC-32. It was a
    sha256, the same check at ~10x the cost where the CPU lacks SHA instructions (valgrind's emulated one, some
    older x86): ~5 KB per matcher, 40-130 matchers per process."""
    return zlib.crc32(payload).to_bytes(_DIGEST, "little")
MAX_FILES = 4096  # past this many files, the oldest half is removed (a rule edit leaves its old matchers behind)
_swept: list[bool] = []


ROOT: str | None = None  # the directory to use instead of the default ones (tests)
_made: dict[tuple, str | None] = {}  # (ROOT, CACHEDIR) -> the directory in use (None: none can be written)


def _candidates() -> Iterator[str]:
    """Where the files may go, in order: beside the package's own bytecode, else the cache directory (asked only
    when the first cannot be used: an unusable cache directory is an OSError, which means no second place)."""
    if ROOT is not None:
        yield ROOT
        return
    yield os.path.join(sys.pycache_prefix, "uopc-matchers") if sys.pycache_prefix else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", "uopc-matchers")
    try:
        yield os.path.join(cache_dir(), "matchers")
    except OSError:
        return


def _dir() -> str | None:
    where = (ROOT, knob_str("CACHEDIR"))
    if where not in _made:
        _made[where] = None
        for d in _candidates():
            try:
                os.makedirs(d, exist_ok=True)
            except OSError:
                continue
            if os.access(d, os.W_OK):
                _made[where] = d
                break
    return _made[where]


def _aside() -> str | None:
    """The cache directory's place, for a process that must not write beside the package (bytecode writing off);
    None where there is none (tests' ROOT, an unusable cache directory)."""
    if ROOT is not None:
        return None
    where = ("aside", knob_str("CACHEDIR"))
    if where not in _made:
        _made[where] = None
        with contextlib.suppress(OSError):
            d = os.path.join(cache_dir(), "matchers")
            os.makedirs(d, exist_ok=True)
            if os.access(d, os.W_OK):
                _made[where] = d
    return _made[where]


def _path(d: str, key: bytes) -> str:
    return os.path.join(d, f"{key.hex()[:40]}.{sys.implementation.cache_tag}.code")


def load(key: bytes) -> object | None:
    """The value stored under `key` (32 bytes), or None when there is none that verifies."""
    blob = None
    for d in (_dir(), _aside() if sys.dont_write_bytecode else None):
        if d is None:
            continue
        try:
            with open(_path(d, key), "rb") as f:
                blob = f.read()
            break
        except OSError:
            continue
    if blob is None:
        return None
    head, payload = blob[:_HEADER], blob[_HEADER:]
    if head != MAGIC + MAGIC_NUMBER + key + digest(payload):
        return None
    try:
        return marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None


def store(key: bytes, value: Any) -> None:
    """Keep `value` (marshal-able: code objects, tuples, strings, numbers) under `key` for the next process: beside
    the package, or in the cache directory when bytecode writing is off (nothing where neither can be written)."""
    d = _aside() if sys.dont_write_bytecode else _dir()
    if d is None:
        return
    payload = marshal.dumps(value)
    path = _path(d, key)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + MAGIC_NUMBER + key + digest(payload) + payload)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return
    if not _swept:
        _swept.append(True)
        _sweep(d)


def _sweep(d: str) -> None:
    """Bound the directory: past MAX_FILES files, remove the least recently written half."""
    try:
        names = os.listdir(d)
        if len(names) <= MAX_FILES:
            return
        paths = sorted((os.path.join(d, n) for n in names), key=lambda p: os.stat(p).st_mtime)
    except OSError:
        return
    for p in paths[: len(paths) // 2]:
        with contextlib.suppress(OSError):
            os.unlink(p)
