"""A disk cache of generated Python code (the rule matchers' bytecode), like Python's own `.pyc` files.

Every process used to generate and compile each rule matcher it needs (rewrite.match): for the matchers of a first
realize that took ~15-35 ms, inside the first kernels' lowering. rewrite.match_cache keys each matcher by the
shape of its rules and keeps (code, where its names come from, source) here, one file per key. Where: as Python
keeps its own bytecode, beside the package (`rewrite/__pycache__/uopc-matchers`, or under
`sys.pycache_prefix` when that is set); where that cannot be written, or bytecode writing is off, in the matchers'
own cache directory, `~/.cache/uopc-matchers` (`default_dir`); the knob MATCHERDIR names another directory, used
for reading and writing alike. Never under CACHEDIR (the kernel cache) unless nothing else can be written: the
files are the library's code, as .pyc files are, so a process with a fresh or cleared CACHEDIR (a cold benchmark)
still finds the library's matchers, while a new Python version or an edited rule or generator gets new keys.

  name     the key's hex and the interpreter's bytecode tag (`sys.implementation.cache_tag`), so another Python
           never reads the file
  content  MAGIC, importlib.util.MAGIC_NUMBER (the bytecode format), the full 32-byte key, the payload's CRC-32
           (`digest`), then the payload: the marshal'd value

A file is trusted only when all of that checks out: a wrong magic, another bytecode format or key (a renamed or
colliding file), a payload whose digest differs (truncated, damaged) or that does not unmarshal, is a miss (and
the caller checks the value's form too): the matcher is generated again and the file written anew. Files are
written whole to a temporary name and renamed (a concurrent process sees no file or the whole file).

Like Python's bytecode cache, it never writes beside the package when `sys.dont_write_bytecode`
(PYTHONDONTWRITEBYTECODE, common in container images) is set; the files then go to the matchers' own directory
(and are read from there and from beside the package): without them every process would generate its matchers
again (~0.1-0.3 s of a first realize). CACHE=0, which turns off the caches of results (compiled kernels, search
and e-graph results), leaves it on: it holds the library's own code, not anything computed from a user's program.
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

from rewrite.env import cache_dir, env_keys, knob_str, unset

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


ROOT: str | None = None  # the directory to use instead of the one beside the package (tests)
_made: dict[tuple, tuple[str | None, tuple[str, ...]]] = {}  # `_where()` -> `_dirs()`


def default_dir() -> str | None:
    """The matchers' own cache directory where bytecode is not written beside the package: `~/.cache/uopc-matchers`,
    beside (not under) the kernel cache's default root, so clearing a CACHEDIR never clears it; None without a
    home directory (`~` would otherwise name a directory `~` under the working directory)."""
    home = os.path.expanduser("~")
    return None if home.startswith("~") else os.path.join(home, ".cache", "uopc-matchers")


def _beside() -> str:
    """Where Python keeps the package's own bytecode: `rewrite/__pycache__/uopc-matchers`, or under
    `sys.pycache_prefix` when that is set."""
    if ROOT is not None:
        return ROOT
    return os.path.join(sys.pycache_prefix, "uopc-matchers") if sys.pycache_prefix else \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__", "uopc-matchers")


def _candidates() -> Iterator[str]:
    """Where the files may be written, in order of preference: MATCHERDIR alone when it is set; else beside the
    package's bytecode (unless bytecode writing is off), then `default_dir()`, then, only where neither can be
    written (a read-only HOME too), the kernel cache directory's `matchers`. The tests' ROOT stands for the place
    beside the package, with nothing after it."""
    if d := knob_str("MATCHERDIR"):
        yield d
        return
    if not sys.dont_write_bytecode:
        yield _beside()
    if ROOT is not None:
        return
    if (own := default_dir()) is not None:
        yield own
    try:
        yield os.path.join(cache_dir(), "matchers")
    except OSError:
        return


_KEYS = env_keys("MATCHERDIR", "CACHEDIR")


def _where() -> tuple:
    """What decides the directories: the tests' ROOT, the knobs, bytecode writing and its prefix."""
    if ROOT is None and unset(_KEYS):  # the common case: a few dict lookups, no knob parsed
        return (None, "", "", sys.dont_write_bytecode, sys.pycache_prefix)
    return (ROOT, knob_str("MATCHERDIR"), knob_str("CACHEDIR"), sys.dont_write_bytecode, sys.pycache_prefix)


def _dirs() -> tuple[str | None, tuple[str, ...]]:
    """The directory the files are written to (None where none can be written), and every directory a file is
    looked for in: that one, and beside the package when bytecode writing is off but an earlier process (or an
    installation) wrote files there, as Python still reads existing .pyc files. Found once per setting."""
    where = _where()
    if (known := _made.get(where)) is not None:
        return known
    out: str | None = None
    for d in _candidates():
        try:
            os.makedirs(d, exist_ok=True)
        except OSError:
            continue
        if os.access(d, os.W_OK):
            out = d
            break
    read = [out] if out is not None else []
    if sys.dont_write_bytecode and not where[1] and (b := _beside()) not in read:
        read.append(b)
    known = _made[where] = (out, tuple(read))
    return known


def _dir() -> str | None:
    """The directory the files are written to (and read from first), None where none can be written."""
    return _dirs()[0]


def _path(d: str, key: bytes) -> str:
    return os.path.join(d, f"{key.hex()[:40]}.{sys.implementation.cache_tag}.code")


def load(key: bytes) -> object | None:
    """The value stored under `key` (32 bytes), or None when there is none that verifies."""
    blob = None
    for d in _dirs()[1]:
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
    """Keep `value` (marshal-able: code objects, tuples, strings, numbers) under `key` for the next process, in
    `_dir()` (nothing where no directory can be written)."""
    d = _dir()
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
