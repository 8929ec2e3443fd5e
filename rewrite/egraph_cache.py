"""The results of rewrite.egraph's saturator and their on-disk cache (a SQLite file in the cache directory).

Results are cached on disk by a hash of the expression's text and the program (`CACHE=0` turns the disk cache
off), so the cache survives across processes. Each row carries a checksum of its key and content: a row that does
not verify is deleted and saturated again; a file that is not a readable SQLite database is removed and created
afresh; an unusable cache directory means no disk cache, not an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rewrite.egraph_terms import Expr, Node
from rewrite.env import cache_dir, knob_int
from rewrite.uop import UOp

if TYPE_CHECKING:
    import sqlite3

# json and sqlite3 are imported where they are used: ~9 ms at import, which a process that loads the e-graph's
# rules but never saturates (most kernels) would otherwise pay


@dataclass
class Result:
    uop: UOp
    lo: int | None = None
    hi: int | None = None
    nodes: list[Node] | None = field(default=None, repr=False)
    settled: bool = True  # not cut short by the time budget, which depends on the machine: may go to disk
    built: bool = False  # `uop` is already the extracted term rebuilt (no need to build it from `nodes`)


_CORRUPT = object()  # _open_db's answer for a file that is not a usable SQLite database


def _open_db(path: str) -> sqlite3.Connection | object | None:
    """A connection with the cache table, `_CORRUPT` for a garbage file, None when it cannot be used now."""
    import sqlite3

    db = None
    try:
        db = sqlite3.connect(path, timeout=5, check_same_thread=False)
        # a cache needs no durability: without fsync a commit costs microseconds instead of ~20 ms
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=OFF")
        db.execute("CREATE TABLE IF NOT EXISTS eg (key TEXT PRIMARY KEY, val TEXT)")
        db.execute("SELECT key, val FROM eg LIMIT 1").fetchall()
        return db
    except sqlite3.OperationalError:  # locked by another process, read-only, no such directory
        return None
    except sqlite3.DatabaseError:  # "file is not a database", "database disk image is malformed"
        if db is not None:
            db.close()
        return _CORRUPT


def _row_sum(key: str, d: dict) -> str:
    """A row's checksum: its key and its content (without the checksum field), so an edited or moved row fails."""
    import json

    body = json.dumps({k: v for k, v in d.items() if k != "c"}, sort_keys=True)
    return hashlib.sha256(f"{key}\n{body}".encode()).hexdigest()[:24]


class DiskCache:
    """The disk cache of a saturator: rows keyed by `version` (its program and schedule) and an expression."""

    version: str
    _db: sqlite3.Connection | None
    _db_key: tuple[int, str]

    def _disk(self) -> sqlite3.Connection | None:
        """The on-disk cache, opened once per process and path. A file that is not a readable SQLite database
        (garbage, a torn write) is removed and created afresh; an unusable directory means no disk cache."""
        import sqlite3

        if knob_int("CACHE") == 0:
            return None
        try:
            path = os.path.join(cache_dir(), "egraph.sqlite")
        except OSError:  # unwritable CACHEDIR or HOME: no disk cache
            return None
        if self._db is None or self._db_key != (os.getpid(), path):
            db = _open_db(path)
            if db is _CORRUPT:
                for p in (path, path + "-wal", path + "-shm"):
                    with contextlib.suppress(OSError):
                        os.unlink(p)
                db = _open_db(path)
            if not isinstance(db, sqlite3.Connection):
                return None
            self._db, self._db_key = db, (os.getpid(), path)
        return self._db

    def _disk_key(self, e: Expr) -> str:
        return hashlib.sha256(f"{self.version}\n{e.canonical()}".encode()).hexdigest()

    def _disk_get(self, exprs: list[Expr]) -> dict[int, Result]:
        """Cached results for `exprs`, each row checked against its checksum: a row that does not verify (edited
        or damaged) is deleted and its expression saturated again."""
        import json
        import sqlite3

        db = self._disk()
        if db is None:
            return {}
        keys = {self._disk_key(e): i for i, e in enumerate(exprs) if e.stable}
        if not keys:
            return {}
        found: dict[int, Result] = {}
        bad: list[str] = []
        try:
            ks = list(keys)
            for j in range(0, len(ks), 500):
                chunk = ks[j : j + 500]
                rows = db.execute(f"SELECT key, val FROM eg WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                for k, v in rows:
                    try:
                        d = json.loads(v)
                        if not isinstance(d, dict) or d.get("c") != _row_sum(k, d):
                            raise ValueError("checksum")
                        r = Result(exprs[keys[k]].uop, d["lo"], d["hi"], [tuple(n) for n in d["n"]])
                    except (ValueError, KeyError, TypeError):
                        bad.append(k)
                        continue
                    found[keys[k]] = r
            if bad:
                with db:
                    db.executemany("DELETE FROM eg WHERE key = ?", [(k,) for k in bad])
        except sqlite3.OperationalError:  # locked or read-only: a miss
            return found
        except sqlite3.DatabaseError:  # damaged pages: rebuilt at the next open
            self._db = None
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(cache_dir(), "egraph.sqlite"))
            return {}
        return found

    def _disk_put(self, pairs: list[tuple[Expr, Result]]) -> None:
        import json
        import sqlite3

        db = self._disk()
        if db is None:
            return
        rows = []
        for e, r in pairs:
            if e.stable and r.nodes is not None and r.settled:
                k = self._disk_key(e)
                d: dict[str, Any] = {"lo": r.lo, "hi": r.hi, "n": r.nodes}
                d["c"] = _row_sum(k, d)
                rows.append((k, json.dumps(d)))
        if not rows:
            return
        try:
            with db:
                db.executemany("INSERT OR REPLACE INTO eg (key, val) VALUES (?, ?)", rows)
        except sqlite3.Error:
            pass


__all__ = ["DiskCache", "Result"]
