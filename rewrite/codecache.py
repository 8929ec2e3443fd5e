"""A disk cache of the generated rule matchers' Python bytecode, like Python's own `.pyc` files.

Every process used to compile each generated matcher (rewrite.match) from its source text: `compile()` of the
matchers a first realize needs took ~10-25 ms, inside the first kernels' lowering. Here the compiled code of a
matcher's source is kept on disk under `rewrite.env.cache_dir()/matchers`, one file per source text:

  name     sha256(source) and the interpreter's bytecode tag (`sys.implementation.cache_tag`), so another source or
           another Python never reads the file
  content  MAGIC, importlib.util.MAGIC_NUMBER (the bytecode format), the full sha256 of the source, the sha256 of
           the payload, then the payload: the marshal'd code object

A file is trusted only when all of that checks out: a wrong magic, another bytecode format or source hash (a
renamed or colliding file), a payload whose digest differs (truncated, damaged), or a payload that does not
unmarshal to a code object, is a miss: the source is compiled again and the file written anew. Files are written
whole to a temporary name and renamed (a concurrent process sees no file or the whole file).

What the key is: the source text, which is the generated code (the rule set's content as the generator reads it),
so an entry never goes stale; the objects the code names (patterns' constants, guards, right-hand sides) are
bound afresh from the live rule set each time (rewrite.match), never read from disk.

Like Python's bytecode cache, it is read always and written unless `sys.dont_write_bytecode`
(PYTHONDONTWRITEBYTECODE) is set; CACHE=0, which turns off the caches of results (compiled kernels, search and
e-graph results), leaves it on: it holds the library's own code, not anything computed from a user's program.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import sys
import types
from importlib.util import MAGIC_NUMBER

from rewrite.env import cache_dir

MAGIC = b"uopcMC01"
_DIGEST = 32
_HEADER = len(MAGIC) + len(MAGIC_NUMBER) + 2 * _DIGEST
MAX_FILES = 4096  # past this many files, the oldest half is removed (a rule edit leaves its old matchers behind)
_swept: list[bool] = []


def _dir() -> str | None:
    try:
        d = os.path.join(cache_dir(), "matchers")
        os.makedirs(d, exist_ok=True)
        return d
    except OSError:
        return None


def _path(d: str, key: bytes) -> str:
    return os.path.join(d, f"{key.hex()[:40]}.{sys.implementation.cache_tag}.code")


def source_key(src: str) -> bytes:
    return hashlib.sha256(src.encode()).digest()


def load(src: str, key: bytes | None = None) -> types.CodeType | None:
    """The cached code of `src`, or None when there is none that verifies."""
    key = key or source_key(src)
    d = _dir()
    if d is None:
        return None
    try:
        with open(_path(d, key), "rb") as f:
            blob = f.read()
    except OSError:
        return None
    head, payload = blob[:_HEADER], blob[_HEADER:]
    if head != MAGIC + MAGIC_NUMBER + key + hashlib.sha256(payload).digest():
        return None
    try:
        code = marshal.loads(payload)
    except (ValueError, EOFError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None


def store(src: str, code: types.CodeType, key: bytes | None = None) -> None:
    """Keep `code`, compiled from `src`, for the next process (nothing when bytecode writing is off or the cache
    directory cannot be written)."""
    if sys.dont_write_bytecode:
        return
    key = key or source_key(src)
    d = _dir()
    if d is None:
        return
    payload = marshal.dumps(code)
    path = _path(d, key)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + MAGIC_NUMBER + key + hashlib.sha256(payload).digest() + payload)
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
