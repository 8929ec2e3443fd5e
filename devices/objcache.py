"""The cpu device's on-disk cache of compiled shared objects: verified before use, written atomically, bounded.

Each cached object `KEY.so` ends with a footer: a magic word and the SHA-256 of the key and the object's bytes.
A file is trusted (dlopen'ed) only when its footer matches, so a truncated object (a crash or a full disk
mid-write: dlopen of it dies with SIGBUS), a damaged one, or another kernel's object copied over it (a valid
footer, but for another key) is not loaded: the caller compiles it again and replaces it. The footer sits after
the ELF image, where the loader never looks. This guards against accidents, not against someone who recomputes
the footer on purpose.

A new object is compiled to a temporary name unique per process and thread (`mkstemp`), verified, and renamed
into place: a concurrent reader sees no file or the whole file. Temporaries left by a killed compile (`kill -9`)
are removed once they are older than STALE_S, when a process first uses the cache. The directory is kept under
CACHE_SIZE bytes (rewrite.env, default 1 GiB): when a write takes it over the bound, the least recently used
objects (by modification time, which a cache hit refreshes) go first, down to 90% of the bound.

A cache directory that cannot be created or written (read-only CACHEDIR or HOME) is not an error: the caller
compiles in a temporary directory instead, and `warn_unwritable` says so once per process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
import time
import warnings

MAGIC = b"UOPCSO01"
FOOTER = len(MAGIC) + 32
STALE_S = 600.0  # a temporary file this old belongs to a compile that died
TMP_SUFFIX = ".tmp.so"

_lock = threading.Lock()
_cleaned: set[str] = set()  # directories swept for stale temporaries by this process
_written: dict[str, int] = {}  # directory -> bytes written since its last size scan
_warned: list[bool] = []


class CacheWarning(UserWarning):
    """The on-disk cache could not be used (unwritable directory); work goes on without it."""


def _digest(key: str, body: bytes) -> bytes:
    return hashlib.sha256(key.encode() + b"\0" + body).digest()


def verify(path: str, key: str) -> bool:
    """Whether `path` holds a complete object written for `key` (its footer matches its bytes)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    if len(data) <= FOOTER or data[-FOOTER:-32] != MAGIC:
        return False
    return data[-32:] == _digest(key, data[:-FOOTER])


def seal(path: str, key: str) -> None:
    """Append the footer for `key` to the freshly compiled object at `path`."""
    with open(path, "rb") as f:
        body = f.read()
    with open(path, "ab") as f:
        f.write(MAGIC + _digest(key, body))


def temp_path(d: str, key: str) -> str:
    """A new, empty temporary file in `d` for the object of `key`, named uniquely for this process and thread."""
    fd, path = tempfile.mkstemp(prefix=f"{key}.{os.getpid()}.{threading.get_ident()}.", suffix=TMP_SUFFIX, dir=d)
    os.close(fd)
    return path


def touch(path: str) -> None:
    """Mark a cache hit, for least-recently-used eviction (best effort: a read-only cache stays as it is)."""
    with contextlib.suppress(OSError):
        os.utime(path)


def sweep_stale(d: str, now: float | None = None, stale_s: float = STALE_S) -> int:
    """Remove temporaries in `d` older than `stale_s` seconds (left by killed compiles); how many went."""
    now = time.time() if now is None else now
    gone = 0
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for n in names:
        if not n.endswith(TMP_SUFFIX):
            continue
        p = os.path.join(d, n)
        try:
            if now - os.stat(p).st_mtime > stale_s:
                os.unlink(p)
                gone += 1
        except OSError:
            pass
    return gone


def sweep_once(d: str) -> None:
    """`sweep_stale(d)` the first time this process uses `d`."""
    with _lock:
        if d in _cleaned:
            return
        _cleaned.add(d)
    sweep_stale(d)


def evict(d: str, limit: int, keep: str | None = None, suffix: str = ".so") -> int:
    """If the objects (files ending in `suffix`) in `d` take more than `limit` bytes, remove the least recently
    used (oldest mtime) down to 90% of it, never `keep` (the object just written). Returns the bytes left."""
    entries = []
    total = 0
    try:
        names = os.listdir(d)
    except OSError:
        return 0
    for n in names:
        if not n.endswith(suffix) or n.endswith(TMP_SUFFIX):
            continue
        p = os.path.join(d, n)
        try:
            st = os.stat(p)
        except OSError:
            continue
        total += st.st_size
        entries.append((st.st_mtime_ns, n, p, st.st_size))
    if total <= limit:
        return total
    entries.sort()
    for _, _, p, size in entries:
        if total <= limit * 9 // 10:
            break
        if p == keep:
            continue
        try:
            os.unlink(p)
            total -= size
        except OSError:
            pass
    return total


def note_write(d: str, path: str, limit: int, suffix: str = ".so") -> None:
    """Account for a new object; scan and evict when this process's writes may have taken `d` over `limit`
    (the first write scans, later ones only after they add up to 1/16 of the bound)."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return
    with _lock:
        pending = _written.get(d)
        pending = size if pending is None else pending + size
        scan = pending == size or pending > limit // 16
        _written[d] = 0 if scan else pending
    if scan:
        evict(d, limit, keep=path, suffix=suffix)


def warn_unwritable(d: str, err: BaseException) -> None:
    """One warning per process: the cache directory cannot be used, so objects are compiled in a temporary one."""
    with _lock:
        if _warned:
            return
        _warned.append(True)
    warnings.warn(f"uopc: cache directory {d!r} is not writable ({err}); compiling in a temporary directory "
                  f"instead. Set CACHEDIR to a writable directory, or CACHE=0.", CacheWarning, stacklevel=4)


def reset_warning() -> None:
    """Forget that the warning was given (tests)."""
    with _lock:
        _warned.clear()


__all__ = ["FOOTER", "MAGIC", "STALE_S", "CacheWarning", "evict", "note_write", "reset_warning", "seal",
           "sweep_once", "sweep_stale", "temp_path", "touch", "verify", "warn_unwritable"]
