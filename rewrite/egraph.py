"""The egglog bridge: batches of index expressions saturated in one e-graph and read back as UOps.

`Saturator` owns one persistent egglog e-graph per process with its rules loaded once as text. Batches go into
it one after another, without `(push)`/`(pop)` per batch (they cost more than a small batch's saturation); it
goes back to the rules alone when it has grown or a batch did not finish. Each batch runs with an iteration
cap, a size budget checked between iterations (egglog has no node limit and a blow-up aborts the process) and
a time budget, then one packed extraction. What comes back is always an equal form (the e-graph only ever
holds equalities); if a budget stops the run, the best form found so far. A panic (a tripwire rule, an
overflow in an action) gives the inputs back unchanged.
Results are cached in memory by UOp and on disk by a hash of the expression's text and the program
(`CACHE=0` turns the disk cache off), so the cache survives across processes. Each row carries a checksum of
its key and content: a row that does not verify is deleted and saturated again; a file that is not a readable
SQLite database is removed and created afresh; an unusable cache directory means no disk cache, not an error.

The sort and the translation live in rewrite.egraph_terms, the DSL export in rewrite.egraph_export; this is
the one module here that imports egglog, lazily, and only its compiled `egglog.bindings` extension (see
`egglog_bindings`). It drives the low-level bindings, not egglog's Python DSL: on egglog 13.2 the same rules and
expressions ran ~10x faster per call and ~14x faster per 50-expression batch that way. The bindings used exist
in egglog 13.2 and 14.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rewrite.egraph_terms import (
    CTORS,
    DEFAULT_COSTS,
    I64_MAX,
    I64_MIN,
    Expr,
    Node,
    Untranslatable,
    build,
    floor_div,
    floor_mod,
    from_termdag,
    sort_decls,
    translate,
)
from rewrite.env import cache_dir, knob_int
from rewrite.ops import Ops
from rewrite.uop import UOp

PACK_CHUNK = 200  # roots per packed list term (egglog recurses on term depth)

_BINDINGS: list[Any] = []


def egglog_bindings() -> Any:
    """The `egglog.bindings` extension module, loaded without the `egglog` package around it when that is not
    imported yet. `import egglog` costs ~0.2 s (measured on 13.2: its DSL, pretty-printer, black and
    opentelemetry), the extension alone ~15 ms, and the bridge needs only the extension. It is registered
    under its own name, so a later `import egglog` finds and reuses it (a pyo3 module initializes only once
    per process). Any surprise (another layout, a loader error) falls back to the ordinary import."""
    if _BINDINGS:
        return _BINDINGS[0]
    import sys

    mod = sys.modules.get("egglog.bindings")
    if mod is None and "egglog" not in sys.modules:
        import importlib.machinery
        import importlib.util

        try:
            pkg = importlib.util.find_spec("egglog")
            for d in (pkg.submodule_search_locations or []) if pkg is not None else []:
                for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                    path = os.path.join(d, "bindings" + suffix)
                    if not os.path.exists(path):
                        continue
                    spec = importlib.util.spec_from_file_location("egglog.bindings", path)
                    if spec is None or spec.loader is None:
                        continue
                    m = importlib.util.module_from_spec(spec)
                    sys.modules["egglog.bindings"] = m
                    spec.loader.exec_module(m)
                    mod = m
                    break
                if mod is not None:
                    break
        except Exception:  # any failure here only means the ordinary import below
            sys.modules.pop("egglog.bindings", None)
            mod = None
    if mod is None:
        from egglog import bindings as mod
    _BINDINGS.append(mod)
    return mod


# ---------------------------------------------------------------------------------------------- saturation


def split_commands(text: str) -> list[str]:
    """The top-level forms of egglog text. egglog 13.2 copies the whole source into every span it parses, so
    parsing a long program in one piece is quadratic (0.12 s instead of 5 ms for the eqsat rules)."""
    out, depth, start, in_str, comment = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if comment:
            comment = ch != "\n"
        elif in_str:
            in_str = ch != '"'
        elif ch == '"':
            in_str = True
        elif ch == ";":
            comment = True
        elif ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append(text[start : i + 1])
    return out


def _parse(eg: Any, text: str) -> list:
    return [c for form in split_commands(text) for c in eg.parse_program(form)]


@dataclass(frozen=True)
class Schedule:
    """Each iteration is `(saturate (run analysis)) (run <rewrites>)`; the budgets are checked between them."""

    iterations: int = 8
    max_size: int = 20_000  # e-graph tuples (nodes plus lo/hi rows), from (print-size)
    seconds: float = 2.0
    reset_size: int = 1_500  # tuples left by earlier batches above which the next batch starts from the rules
    analysis: str = "analysis"
    rewrites: tuple[str, ...] = ("rw",)

    def step_text(self) -> str:
        rw = " ".join(f"(run {r})" for r in self.rewrites)
        return f"(run-schedule (saturate (run {self.analysis})) {rw}) (print-size)"


@dataclass
class Stats:
    roots: int = 0
    iterations: int = 0
    size: int = 0
    stop: str = ""  # saturated | iterations | size | time | panic
    seconds: float = 0.0
    error: str = ""


@dataclass
class Result:
    uop: UOp
    lo: int | None = None
    hi: int | None = None
    nodes: list[Node] | None = field(default=None, repr=False)
    settled: bool = True  # not cut short by the time budget, which depends on the machine: may go to disk


_CORRUPT = object()  # _open_db's answer for a file that is not a usable SQLite database


def _open_db(path: str) -> sqlite3.Connection | object | None:
    """A connection with the cache table, `_CORRUPT` for a garbage file, None when it cannot be used now."""
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
    body = json.dumps({k: v for k, v in d.items() if k != "c"}, sort_keys=True)
    return hashlib.sha256(f"{key}\n{body}".encode()).hexdigest()[:24]


class Saturator:
    """A rule program (egglog text, declaring rule sets named by `schedule`) and its bounded schedule."""

    def __init__(self, name: str, program: str, schedule: Schedule | None = None,
                 costs: dict[str, int] | None = None) -> None:
        self.name, self.schedule = name, schedule or Schedule()
        self.program = sort_decls(costs) + program
        self.version = hashlib.sha256(f"{self.program}\n{self.schedule!r}".encode()).hexdigest()[:24]
        self._eg: Any = None
        self._cmds: dict[str, list] = {}
        self._lock = threading.RLock()
        self._mem: dict[UOp, Result] = {}
        self._db: sqlite3.Connection | None = None
        self._db_key: tuple[int, str] = (-1, "")
        self._stale, self._batch = False, 0
        self.resets = 0  # times the e-graph went back to the rules alone
        self.last = Stats()
        self.panics = 0  # batches (or halves of them) that panicked since this saturator was made

    # -- the persistent e-graph --
    def _egraph(self) -> Any:
        """The e-graph, with the rules loaded and a snapshot of that state pushed (what `_reset` returns to)."""
        if self._eg is None:
            eg = egglog_bindings().EGraph()
            eg.run_program(*_parse(eg, self.program))
            self._cmds = {k: _parse(eg, t) for k, t in {
                "push": "(push)", "pop": "(pop)", "step": self.schedule.step_text(),
                "final": f"(run-schedule (saturate (run {self.schedule.analysis})))"}.items()}
            eg.run_program(*self._cmds["push"])
            self._eg, self._stale, self._batch = eg, False, 0
        return self._eg

    def _reset(self) -> None:
        """Back to the rules alone: `(pop)` then `(push)` again (~1.5 ms together, so not per batch)."""
        eg = self._eg
        eg.run_program(*self._cmds["pop"])
        eg.run_program(*self._cmds["push"])
        self._stale = False
        self.resets += 1

    @staticmethod
    def _insert(b: Any, exprs: list[Expr], tag: str = "") -> tuple[list, list[str], str]:
        """Commands that add every root, as binding objects (egglog 13.2 parses text in time quadratic in its
        length, and each top-level command costs ~0.2 ms): each root bound to a name (its e-class is read back
        through it) and one packed list of the roots per chunk. Names carry `tag`, unique per batch in one
        e-graph's life, since egglog refuses to bind a name twice."""
        sp = b.PanicSpan()
        lit = b.Lit
        call, i64, let = b.Call, b.Int, (lambda name, e: b.ActionCommand(b.Let(sp, name, e)))
        cmds: list = []
        names: list[str] = []
        leaves: dict[tuple, object] = {}  # the same constant or leaf in many roots is built once
        for i, e in enumerate(exprs):
            objs: list = []
            last = len(e.nodes) - 1
            for j, n in enumerate(e.nodes):
                if n[0] == "Num" or n[0] == "Var":
                    if (o := leaves.get(n)) is None:
                        args = [lit(sp, i64(n[1]))] if n[0] == "Num" else \
                            [lit(sp, b.String(n[1])), lit(sp, i64(n[2])), lit(sp, i64(n[3]))]
                        o = leaves[n] = call(sp, n[0], args)
                else:
                    o = call(sp, n[0], [objs[k] for k in n[1:]])
                if e.named[j] or j == last:
                    name = f"$r{tag}{i}" if j == last else f"$e{tag}{i}_{j}"
                    cmds.append(let(name, o))
                    o = b.Var(sp, name)
                objs.append(o)
            names.append(f"$r{tag}{i}")
        # the list nests as deep as it is long, so it is built in chunks from the back, each ending in the next
        tail, pack = call(sp, "PNil", []), f"$pack{tag}0"
        for k in reversed(range(0, len(names), PACK_CHUNK)):
            lst = tail
            for r in reversed(names[k : k + PACK_CHUNK]):
                lst = call(sp, "PCons", [b.Var(sp, r), lst])
            pack = f"$pack{tag}{k // PACK_CHUNK}"
            cmds.append(let(pack, lst))
            tail = b.Var(sp, pack)
        return cmds, names, pack

    def _run(self, exprs: list[Expr]) -> list[Result]:
        """One batch in the e-graph; raises on a panic (the caller splits the batch).

        The e-graph is not cleared between batches: `(push)`/`(pop)` cost ~1.5 ms, more than a small batch's
        whole saturation, and a batch whose terms are already there (repeated layers, lanes of one kernel)
        saturates at once. It holds only equalities, and a leaf carries its interval, so what earlier batches
        left is true here too. It is reset to the rules alone when it grows past `schedule.reset_size` (the
        cost of an egglog 13.2 iteration grows with the e-graph, not only with what is new) and after any batch
        that did not saturate or failed, so unfinished work never leaks into the next batch."""
        b = egglog_bindings()
        eg = self._egraph()
        sch, st, t0 = self.schedule, Stats(roots=len(exprs)), time.perf_counter()
        self.last = st
        sp = b.PanicSpan()
        if self._stale:
            self._reset()
        self._batch += 1
        cmds, names, pack = self._insert(b, exprs, f"b{self._batch}_")
        ok = False
        try:
            eg.run_program(*cmds)
            st.stop = "iterations"
            deadline = t0 + sch.seconds
            for _ in range(sch.iterations):
                out = eg.run_program(*self._cmds["step"])
                st.iterations += 1
                st.size = sum(n for _, n in out[-1].sizes)
                if not out[0].report.updated:
                    st.stop = "saturated"
                    break
                if st.size > sch.max_size:
                    st.stop = "size"
                    break
                if time.perf_counter() > deadline:
                    st.stop = "time"
                    break
            if st.stop in ("iterations", "saturated"):
                eg.run_program(*self._cmds["final"])
            best = eg.run_program(b.Extract(sp, b.Var(sp, pack), b.Lit(sp, b.Int(0))))[-1]
            td, tid = best.termdag, best.term
            roots: list[int] = []
            while td.get(tid).name == "PCons":
                head, tid = td.get(tid).args
                roots.append(head)
            results = []
            settled = st.stop != "time"
            lookup, to_i64 = eg.lookup_function, eg.value_to_i64
            for e, r, name in zip(exprs, roots, names, strict=True):
                _, val = eg.eval_expr(b.Var(sp, name))
                lo, hi = lookup("lo", [val]), lookup("hi", [val])
                results.append(Result(e.uop, to_i64(lo) if lo is not None else None,
                                      to_i64(hi) if hi is not None else None, from_termdag(td, r), settled))
            ok = True
            return results
        finally:
            self._stale = not ok or st.stop != "saturated" or st.size > sch.reset_size
            st.seconds = time.perf_counter() - t0

    def _run_split(self, exprs: list[Expr]) -> list[Result]:
        """A batch that panics is split in halves, so one bad expression does not cost the others."""
        try:
            return self._run(exprs)
        except BaseException as e:  # pyo3 turns a Rust panic into PanicException, a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self.panics += 1
            self.last.stop, self.last.error = "panic", str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            if type(e).__name__ != "EggSmolError":
                self._eg = None  # a Rust panic may leave the e-graph inconsistent: start a fresh one next time
            if len(exprs) == 1:
                return [Result(exprs[0].uop)]
            mid = len(exprs) // 2
            return self._run_split(exprs[:mid]) + self._run_split(exprs[mid:])

    # -- caches --
    def _disk(self) -> sqlite3.Connection | None:
        """The on-disk cache, opened once per process and path. A file that is not a readable SQLite database
        (garbage, a torn write) is removed and created afresh; an unusable directory means no disk cache."""
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

    def clear_memory(self) -> None:
        self._mem.clear()

    def forget(self) -> None:
        """Clear the memory cache and take the e-graph back to the rules alone: the next batch is saturated
        from scratch (for measuring it)."""
        self._mem.clear()
        with self._lock:
            if self._eg is not None:
                self._reset()

    def cached(self, u: UOp) -> Result | None:
        """The in-memory result for `u`, if any (no e-graph, no disk)."""
        return self._mem.get(u)

    # -- the entry point --
    def run(self, uops: Sequence[UOp]) -> list[Result]:
        """Saturate all `uops` in one e-graph (cached ones skipped); each result is its UOp (the input itself
        when it cannot be translated or read back) and the e-graph's interval of the root, if any."""
        out: dict[UOp, Result] = {}
        todo: list[Expr] = []
        seen: set[UOp] = set()
        with self._lock:
            for u in uops:
                if u in seen:
                    continue
                seen.add(u)
                if (hit := self._mem.get(u)) is not None:
                    out[u] = hit
                    continue
                if u.op in (Ops.CONST, Ops.PARAM, Ops.RANGE, Ops.SPECIAL) or u.op not in CTORS:
                    out[u] = Result(u)  # a leaf, or an op the sort lacks, is its own simplest form
                    continue
                try:
                    todo.append(translate(u))
                except Untranslatable:
                    out[u] = Result(u)
                except (TypeError, ValueError, ImportError):  # an interval the local analysis cannot give
                    out[u] = Result(u)
            disk = self._disk_get(todo) if todo else {}
            fresh = [e for i, e in enumerate(todo) if i not in disk]
            done = self._run_split(fresh) if fresh else []
            self._disk_put([(e, r) for e, r in zip(fresh, done, strict=True)])
            by_expr = dict(zip((id(e) for e in fresh), done, strict=True))
            for i, e in enumerate(todo):
                r = disk.get(i) or by_expr[id(e)]
                if r.nodes is not None:
                    try:
                        r = Result(build(r.nodes, e), r.lo, r.hi, r.nodes)
                    except Untranslatable:
                        r = Result(e.uop, r.lo, r.hi, r.nodes)
                out[e.uop] = r
            if len(self._mem) > 200_000:
                self._mem.clear()
            for u, r in out.items():
                self._mem[u] = r
        return [out[u] for u in uops]


__all__ = ["CTORS", "DEFAULT_COSTS", "I64_MAX", "I64_MIN", "Expr", "Node", "Result", "Saturator", "Schedule",
           "Stats", "Untranslatable", "build", "egglog_bindings", "floor_div", "floor_mod", "sort_decls",
           "split_commands", "translate"]
