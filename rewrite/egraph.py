"""The egglog bridge: batches of index expressions saturated in one e-graph and read back as UOps.

`Saturator` owns one persistent egglog e-graph per process with its rules loaded once as text. Batches go into
it one after another, without `(push)`/`(pop)` per batch (~0.9 ms, about half a small batch's saturation): the
first command of a batch runs the `clear` rule set, which deletes the rows the last batch left (~0.1 ms), so every
batch sees an e-graph holding the rules alone (what an egglog 13.2 iteration costs grows with the e-graph's size);
a full reset comes after a failed batch and every `Schedule.reset_nodes` loaded nodes. A batch goes in as rows of
relations (egglog's `input`), hash-consed, so subterms shared by its roots are sent once. Each batch runs with an
iteration cap, a size budget checked between iterations (egglog has no node limit and a blow-up aborts the
process) and a time budget, then one packed extraction that
carries every root's interval (a single root: its own extraction and a lookup of its interval); a batch of new
nodes that the rules leave unchanged needs no extraction (its inputs are the answer). Each iteration runs only
the interval rules that can fire on the batch's e-classes (rewrite.egraph_groups). Extraction prices a division
or modulo by a power of two as a shift or a mask. What comes back is always an equal form (the e-graph only ever
holds equalities); if a budget stops the run, the best form found so far. A panic (a tripwire rule, an overflow
in an action) gives the inputs back unchanged. Results are cached in memory by UOp and on disk
(rewrite.egraph_cache).

The sort and the translation live in rewrite.egraph_terms, the load, collect and clear program text in
rewrite.egraph_load, a batch's rows and commands (`BatchBuilder`, a base of the Saturator) in rewrite.egraph_batch,
the DSL export in rewrite.egraph_export, the rules matched in Python on the loaded terms of a `Schedule.once`
program (`prematch`) in rewrite.egraph_prematch; this is the one module here that imports egglog, lazily, and only
its compiled `egglog.bindings` extension (see `egglog_bindings`). It drives the low-level bindings, not egglog's
Python DSL: on egglog 13.2 the same rules and expressions ran ~10x faster per call and ~14x faster per 50-expression
batch that way. The bindings used exist in egglog 13.2 and 14.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewrite.egglog_io import egglog_bindings, parse_forms, split_commands
from rewrite.egraph_batch import BatchBuilder
from rewrite.egraph_cache import DiskCache, Result
from rewrite.egraph_groups import split_analysis
from rewrite.egraph_load import CTOR_NAMES, LOAD_PROGRAM, TABLES, clear_program
from rewrite.egraph_prematch import PreMatcher
from rewrite.egraph_terms import (
    CTORS,
    DEFAULT_COSTS,
    I64_MAX,
    I64_MIN,
    INTERVAL_FUNCTIONS,
    Expr,
    Node,
    Schedule,
    Untranslatable,
    build,
    build_term,
    floor_div,
    floor_mod,
    from_termdag,
    iv_unpack,
    sort_decls,
    translate,
)
from rewrite.ops import Ops
from rewrite.uop import UOp

if TYPE_CHECKING:
    import sqlite3

# json, shutil, sqlite3 and tempfile are imported where they are used (the disk cache, the scratch files of
# rewrite.egraph_batch): they cost ~9 ms to import, which a process that loads the e-graph's rules but never
# saturates (most kernels) would pay

PACK_CHUNK = 200  # roots per packed list term (egglog recurses on term depth)

# ---------------------------------------------------------------------------------------------- saturation


@dataclass
class Stats:
    roots: int = 0
    iterations: int = 0
    size: int = 0
    stop: str = ""  # saturated | iterations | size | time | panic
    seconds: float = 0.0
    error: str = ""


def _unchanged(e: Expr, nodes: bool) -> Result:
    """The result for a root the e-graph did not change: the input, with the interval it was loaded with."""
    iv = e.bounds[-1] if e.bounds else None
    return Result(e.uop, iv[0] if iv else None, iv[1] if iv else None,
                  [(n[0], n[1]) if n[0] == "Var" else n for n in e.nodes] if nodes else None, True, True)


class Saturator(DiskCache, BatchBuilder):
    """A rule program (egglog text, declaring rule sets named by `schedule`) and its bounded schedule."""

    def __init__(self, name: str, program: str, schedule: Schedule | None = None,
                 costs: dict[str, int] | None = None, prematch: PreMatcher | None = None) -> None:
        self.name, self.schedule = name, schedule or Schedule()
        if prematch is not None and not (self.schedule.fused and self.schedule.once):
            raise ValueError("rules matched in Python (prematch) see the loaded terms alone: a Schedule.once program")
        self.prematch = prematch
        self.program = sort_decls(costs) + LOAD_PROGRAM + clear_program(INTERVAL_FUNCTIONS) + program
        pm = "" if prematch is None else prematch.text
        self.version = hashlib.sha256(f"{self.program}\n{self.schedule!r}\n{pm}".encode()).hexdigest()[:24]
        # the program as loaded: the analysis cut into groups by constructor (rewrite.egraph_groups)
        self._text, self._groups = split_analysis(self.program, self.schedule.analysis, self.schedule.rewrites,
                                                  CTOR_NAMES)
        if self.schedule.fused:
            self._text += self.schedule.fused_decl(self.schedule.analysis) + "\n"
        self._checks, self._seeds = (re.search(rf"\(ruleset\s+{re.escape(r)}\s*\)", self._text) is not None
                                     for r in (self.schedule.checks, self.schedule.seeds))
        self._eg: Any = None
        self._cmds: dict[str, list] = {}
        # ("analysis", groups...) or ("load", load rule sets...) -> the combined rule set that runs them
        self._combos: dict[tuple[str, ...], str] = {}
        # (groups, load rule sets, seeds run) -> the batch commands, and the declarations of their combined rule sets
        self._combo_cmds: dict[tuple[tuple[str, ...], tuple[str, ...], bool], dict[str, list]] = {}
        self._combo_decls: dict[tuple[tuple[str, ...], tuple[str, ...], bool], list[tuple[str, list]]] = {}
        self._declared: set[str] = set()  # combined rule sets the e-graph holds (in its snapshot or after it)
        self._snapshot: dict[str, list] = {}  # those of them in the snapshot `_reset` goes back to, parsed
        self._lock = threading.RLock()
        self._mem: dict[UOp, Result] = {}
        self._exprs: dict[UOp, Expr | None] = {}  # translations (None: untranslatable), kept until `forget`
        self._db: sqlite3.Connection | None = None
        self._db_key: tuple[int, str] = (-1, "")
        self._stale = False
        self._ids: dict[tuple, int] = {}  # node (children by number) -> its number, since the last clear
        self._sizes: dict[str, int] = {}  # rows per constructor table after the last batch (print-size)
        self._packs = 0
        self._loaded = 0  # nodes loaded since the last full reset
        self._dirty = False  # a batch has run since the last reset or clear
        self._dir: str | None = None
        self._files: dict[str, list] = {}  # table -> [descriptor, path, length] of its scratch file
        self.resets = 0  # times the e-graph went back to the rules alone
        self.last = Stats()
        self.panics = 0  # batches (or halves of them) that panicked since this saturator was made

    # -- the persistent e-graph --
    def _egraph(self) -> Any:
        """The e-graph, with the rules loaded and a snapshot of that state pushed (what `_reset` returns to)."""
        if self._eg is None:
            eg = egglog_bindings().EGraph()
            eg.run_program(*parse_forms(eg, self._text))
            step = self.schedule.schedule_text(checks=self._checks, seeds=self._seeds)
            self._cmds = {k: parse_forms(eg, t) for k, t in {
                "push": "(push)", "pop": "(pop)", "step": f"(run-schedule {step})", "size": "(print-size)",
                "load_step": f"(run-schedule (run load) {step})",
                "cload_step": f"(run-schedule (run clear) (run load) {step})",
                "load": "(run-schedule (run load))", "cload": "(run-schedule (run clear) (run load))",
                "clear": "(run-schedule (run clear))", "collect": "(run-schedule (run collect))",
                "analysis": f"(run-schedule (saturate (run {self.schedule.analysis})))"}.items()}
            eg.run_program(*self._cmds["push"])
            self._eg, self._stale = eg, False
            self._combo_cmds, self._combo_decls, self._declared, self._snapshot = {}, {}, set(), {}
            self._ids, self._packs, self._sizes = {}, 0, {}
            self._loaded, self._dirty = 0, False
        return self._eg

    def _reset(self) -> None:
        """Back to the rules alone: `(pop)` then `(push)` again (~0.9 ms together, so not per batch: between
        batches the `clear` rule set deletes the rows instead, in the next batch's first command). The combined
        rule sets declared since the last snapshot are declared again between the two, so that the new snapshot
        holds them: each is declared at most twice per e-graph (~0.1-0.3 ms each), not after every reset."""
        eg = self._eg
        eg.run_program(*self._cmds["pop"])
        for cmds in self._combo_decls.values():
            for name, decl in cmds:
                if name in self._declared and name not in self._snapshot:
                    eg.run_program(*decl)
                    self._snapshot[name] = decl
        eg.run_program(*self._cmds["push"])
        self._declared = set(self._snapshot)
        self._stale = False
        self._ids, self._packs, self._sizes = {}, 0, {}
        self._loaded, self._dirty = 0, False
        self.resets += 1

    def _run(self, exprs: list[Expr], nodes: bool = False) -> list[Result]:
        """One batch in the e-graph; raises on a panic (the caller splits the batch).

        The rows of the last batch are deleted by the `clear` run that starts this batch's first command (the
        cost of an egglog 13.2 iteration grows with the e-graph, not only with what is new: a random expression
        cost ~2.4 ms after others left in the e-graph, ~1.9 ms alone), instead of `(pop)` `(push)` (~0.9 ms);
        those come after a batch that failed and every `schedule.reset_nodes` loaded nodes.

        Commands per batch: the new nodes as rows (`input`) with the `clear` run, the `load` run and the first
        iteration in one `run-schedule`, the sizes, further iterations while one changes something; then for one root
        its extraction (in the same call instead of the sizes under a fused schedule) and a lookup of its interval,
        for several the roots
        as rows, the `collect` run (each root with its interval, packed in lists of PACK_CHUNK) and one
        extraction per list. Each result holds the rebuilt UOp (the input where the term does not fit it),
        and the extracted node list only when `nodes` asks for it (the disk cache stores it)."""
        b = egglog_bindings()
        eg = self._egraph()
        sch, st, t0 = self.schedule, Stats(roots=len(exprs)), time.perf_counter()
        self.last = st
        sp = b.PanicSpan()
        if self._stale or self._loaded > sch.reset_nodes:
            self._reset()
        clear = self._dirty  # the rows an earlier batch left are deleted in this batch's first command
        if clear:
            self._ids, self._sizes = {}, {}
        self._dirty = True
        ok = False
        try:
            roots, ln, unbounded, reused, added, made, seeded = self._rows(exprs)
            self._loaded += len(self._ids)
            before = self._sizes
            cm = self._commands(exprs, made, not seeded)
            # the first command: the new rows, their load, the first iteration and the sizes. Without an op node
            # that lacks an interval, the load and the first iteration are one `run-schedule` (whose report's
            # first iteration is the load's); egglog 13.2 spends ~25 us on any command, even `(print-size)`
            cmds: list = [self._input(b, "LN", ln)] if ln else []
            skip = 0
            if ln and unbounded and not sch.fused:  # (fused: the analysis runs with the first rewrites)
                cmds += [*cm["cload" if clear else "load"], *cm["analysis"], *cm["step"]]
            elif ln:  # the report's first iterations are the clear's and the load's
                cmds += cm["cload_step" if clear else "load_step"]
                skip = 2 if clear else 1
            else:
                cmds += [*(cm["clear"] if clear else []), *cm["step"]]
            zero = b.Lit(sp, b.Int(0))
            root = b.Call(sp, "N", [b.Lit(sp, b.Int(roots[0]))]) if len(exprs) == 1 else None
            # fused, one root: its extraction rides in the same call instead of the sizes (~50 us), which neither the
            # budgets (checked after the one command) nor the unchanged-batch shortcut (no extraction left to spare;
            # the fast tier's callers rule it out beforehand: rules.eqsat.fast_tier_can_change) would use
            tail = 1 if sch.fused and root is not None else 0
            sized = not tail
            cmds += [b.Extract(sp, root, zero)] if tail else cm["size"]
            best = None
            changed: bool | None = False  # None: some iteration ran, whether it changed anything is not read yet
            st.stop = "iterations"
            deadline = t0 + sch.seconds
            for _ in range(sch.iterations):
                out = eg.run_program(*cmds)
                if tail:
                    best, out, tail = out[-1], out[:-1], 0
                st.iterations += 1
                last = out[-2 if sized else -1]
                if sch.fused:  # saturated in one command; its report is read only if needed (~30 us)
                    updated, changed = True, None
                    st.stop = "saturated"
                else:
                    rep = last.report
                    updated = any(i.rule_set_report.changed for i in rep.iterations[skip:]) if skip else rep.updated
                    changed = changed or updated
                if updated and not sized and not sch.fused:
                    out = eg.run_program(*cm["size"])
                    sized = True
                if sized:  # an iteration that changed nothing left the sizes as they were
                    self._sizes = dict(out[-1].sizes)
                    st.size = sum(self._sizes.values())
                if st.stop == "saturated" or not updated:
                    st.stop = "saturated"
                    break
                if st.size > sch.max_size:
                    st.stop = "size"
                    break
                if time.perf_counter() > deadline:
                    st.stop = "time"
                    break
                # later iterations: the sizes only where the iteration changed something (the common last
                # iteration, which finds nothing, costs one command)
                cmds, skip, sized = cm["step"], 0, False
            if (best is None and st.stop == "saturated" and changed is not True and not reused and not unbounded
                    and not made
                    and all(self._sizes.get(k, 0) - before.get(k, 0) == added.get(k, 0) for k in TABLES)
                    and (changed is False or not any(i.rule_set_report.changed
                                                     for i in last.report.iterations[skip:]))):
                # nothing changed the e-graph after the load, and every op node of the batch is a new e-node
                # (each constructor table grew by exactly the batch's new nodes: none was made earlier by a
                # rule): every e-class of an op node holds just its loaded node (and a twin priced lower, read
                # back as the same op), so extraction would give back each input and collect its loaded interval
                ok = True
                return [_unchanged(e, nodes) for e in exprs]
            settled = st.stop != "time"
            if root is not None:
                # one root: its own extraction and its interval looked up, without the packed list's rows,
                # `collect` run and list terms (three commands and the rows they leave in the e-graph)
                e = exprs[0]
                if best is None:
                    best = eg.run_program(b.Extract(sp, root, zero))[-1]
                iv_v = eg.lookup_function("iv", [eg.eval_expr(root)[1]])
                lo, hi = iv_unpack(eg.value_to_i64(iv_v)) if iv_v is not None else (None, None)
                try:
                    u = build_term(best.termdag, best.term, e, {})
                except Untranslatable:
                    u = e.uop
                ok = True
                return [Result(u, lo, hi, from_termdag(best.termdag, best.term) if nodes else None, settled, True)]
            packs: list[int] = []
            lr: list[str] = []
            for k in range(0, len(roots), PACK_CHUNK):
                self._packs += 1
                p = self._packs
                packs.append(p)
                chunk = roots[k : k + PACK_CHUNK]
                lr += [f"{p}\t{j}\t{i}\n" for j, i in enumerate(chunk)]
                lr.append(f"{p}\t{len(chunk)}\t-1\n")
            # every iteration ended with the analysis saturated
            eg.run_program(self._input(b, "LR", "".join(lr)), *self._cmds["collect"])
            results: list[Result] = []
            it = iter(exprs)
            for p in packs:
                memo: dict[tuple, UOp] = {}  # shared by the roots of one extraction
                best = eg.run_program(b.Extract(sp, b.Call(sp, "PK", [b.Lit(sp, b.Int(p)), zero]), zero))[-1]
                td, tid = best.termdag, best.term
                get = td.get
                t = get(tid)
                while t.name != "PNil":
                    if t.name == "PB":
                        r, iv_t, tid = t.args
                        lo, hi = iv_unpack(get(iv_t).value.value)
                    else:  # PC: a root without an interval
                        (r, tid), lo, hi = t.args, None, None
                    e = next(it)
                    try:
                        u = build_term(td, r, e, memo)
                    except Untranslatable:
                        u = e.uop
                    results.append(Result(u, lo, hi, from_termdag(td, r) if nodes else None, settled, True))
                    t = get(tid)
            if len(results) != len(exprs):
                raise RuntimeError(f"egglog gave back {len(results)} roots for {len(exprs)}")
            ok = True
            return results
        finally:
            self._stale = not ok  # a failed batch may leave anything: a full reset (unfinished work is cleared)
            st.seconds = time.perf_counter() - t0

    def _run_split(self, exprs: list[Expr], nodes: bool = False) -> list[Result]:
        """A batch that panics is split in halves, so one bad expression does not cost the others."""
        try:
            return self._run(exprs, nodes)
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
            return self._run_split(exprs[:mid], nodes) + self._run_split(exprs[mid:], nodes)

    def clear_memory(self) -> None:
        self._mem.clear()

    def forget(self) -> None:
        """Clear the memory cache and take the e-graph back to the rules alone: the next batch is saturated
        from scratch (for measuring it)."""
        self._mem.clear()
        self._exprs.clear()
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
                if u in self._exprs:
                    ex = self._exprs[u]
                else:
                    try:
                        ex = translate(u)
                    except Untranslatable:
                        ex = None
                    except (TypeError, ValueError, ImportError):  # an interval the local analysis cannot give
                        ex = None
                    if len(self._exprs) > 200_000:
                        self._exprs.clear()
                    self._exprs[u] = ex
                if ex is None:
                    out[u] = Result(u)
                else:
                    todo.append(ex)
            db = self._disk() if todo else None
            disk = self._disk_get(todo) if db is not None else {}
            fresh = [e for i, e in enumerate(todo) if i not in disk]
            done = self._run_split(fresh, db is not None) if fresh else []
            if db is not None:
                self._disk_put([(e, r) for e, r in zip(fresh, done, strict=True)])
            by_expr = dict(zip((id(e) for e in fresh), done, strict=True))
            for i, e in enumerate(todo):
                r = disk.get(i) or by_expr[id(e)]
                if r.built:
                    r = Result(r.uop, r.lo, r.hi, r.nodes, r.settled)
                elif r.nodes is not None:
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
