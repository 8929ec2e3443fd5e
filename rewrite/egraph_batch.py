"""How a batch goes into rewrite.egraph's e-graph: its nodes as rows of LN and the commands that run it.

`BatchBuilder` is the part of the `Saturator` that prepares one batch: the rows of the nodes the e-graph does not
hold yet (hash-consed by structure, so a subterm shared by many roots is sent once), with the right-hand sides of
the `prematch` rules that match them (rewrite.egraph_prematch); the batch's commands, which run only the load
rules of its node kinds and the analysis rules of the groups its constructors make (rewrite.egraph_groups), as
combined rule sets declared when first needed; and the scratch files the rows go through (egglog's `input`).
The Saturator (rewrite.egraph) owns the e-graph, its resets, the iterations and the extraction. No egglog import
here: the bindings module comes in as an argument where a command is made.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from typing import Any

from rewrite.egglog_io import parse_forms
from rewrite.egraph_groups import groups_for
from rewrite.egraph_load import CODES, TWIN_CODES, TWIN_OF, load_sets
from rewrite.egraph_prematch import PreMatcher
from rewrite.egraph_terms import Expr, Schedule, is_pow2

# shutil and tempfile are imported where the scratch files are made (see rewrite.egraph: a process that loads the
# e-graph's rules but never saturates should not pay for them)


class BatchBuilder:
    """The rows and commands of a batch, for a saturator's persistent e-graph (the state is the Saturator's: it
    sets every attribute below in its `__init__` and `_egraph`)."""

    schedule: Schedule
    prematch: PreMatcher | None
    _eg: Any
    _cmds: dict[str, list]
    _groups: dict[frozenset[str], str]
    _checks: bool
    _seeds: bool
    _combos: dict[tuple[str, ...], str]
    _combo_cmds: dict[tuple[tuple[str, ...], tuple[str, ...], bool], dict[str, list]]
    _combo_decls: dict[tuple[tuple[str, ...], tuple[str, ...], bool], list[tuple[str, list]]]
    _declared: set[str]
    _ids: dict[tuple, int]
    _dir: str | None
    _files: dict[str, list]

    def _commands(self, exprs: list[Expr], made: set[str], seeds: bool = True) -> dict[str, list]:
        """The commands for a batch: the load rules of the node kinds it has (`load_sets`; `made`: those of the
        right-hand sides of `prematch`), and the iterations with the analysis rules of the groups whose constructors
        all occur in it (rewrite.egraph_groups), each a combined rule set declared when first needed (and kept by
        `_reset`). Without `seeds`, the iterations leave out the program's seeds rule set: the batch's new nodes
        came with the intervals it would give them (`_rows`), so it could only repeat what the analysis does."""
        kinds = {n[0] for e in exprs for n in e.nodes} | made
        combo = (groups_for(self._groups, kinds), load_sets(kinds), seeds)
        cmds = self._combo_cmds.get(combo)
        eg = self._eg
        if cmds is None:
            sch = self.schedule
            keys, loads, _ = combo
            load = self._combos.setdefault(("load", *loads), f"load__with{len(self._combos)}")
            decls = {load: f"(unstable-combined-ruleset {load} {' '.join(loads)})"}
            name = sch.analysis
            if keys:
                name = self._combos.setdefault(("analysis", *keys), f"{sch.analysis}__with{len(self._combos)}")
                decls[name] = f"(unstable-combined-ruleset {name} {sch.analysis} {' '.join(keys)})"
                if sch.fused:
                    decls[name] += sch.fused_decl(name, keys)
            step = sch.schedule_text(name, self._checks, self._seeds and seeds)
            cmds = self._combo_cmds[combo] = {**self._cmds, **{k: parse_forms(eg, t) for k, t in {
                "step": f"(run-schedule {step})", "load_step": f"(run-schedule (run {load}) {step})",
                "cload_step": f"(run-schedule (run clear) (run {load}) {step})",
                "load": f"(run-schedule (run {load}))", "cload": f"(run-schedule (run clear) (run {load}))",
                "analysis": f"(run-schedule (saturate (run {name})))"}.items()}}
            self._combo_decls[combo] = [(n, parse_forms(eg, d)) for n, d in decls.items()]
        for n, decl in self._combo_decls[combo]:
            if n not in self._declared:
                eg.run_program(*decl)
                self._declared.add(n)
        return cmds

    def _rows(self, exprs: list[Expr]) -> tuple[list[int], str, bool, bool, dict[str, int], set[str], bool]:
        """The e-class number of every root, the LN rows of the nodes the e-graph does not hold yet, whether one
        of those is an op node without an interval (the analysis must run before the first rewrites), whether
        some op node or single-point variable of the batch was in the e-graph before it (its e-class may hold
        forms found earlier; a constant, or a variable of a wider box, is the cheapest member of any e-class it
        is in), and how many rows the new op nodes add to each constructor table if none of them is there yet.

        Nodes are hash-consed by structure (`_ids`, emptied with the e-graph's rows by a clear or a reset), so a
        subterm shared by many roots is sent once. Last, the right-hand sides of the `prematch` rules that match the
        new nodes (rewrite.egraph_prematch) as rows of their own (`_made`); their kinds are the sixth value, and the
        last whether every op node among them came with its interval (`PreMatcher.bounds`: then the program's `seeds`
        rule set has nothing to add, see `_commands`)."""
        ids, codes, twins = self._ids, CODES, TWIN_CODES
        ln: list[str] = []
        roots: list[int] = []
        unbounded = False
        n0 = len(ids)
        reused = False
        added: dict[str, int] = {}
        pm = self.prematch
        ivs: dict[int, tuple[int, int]] | None = {} if pm is not None and pm.bounds is not None else None
        for e in exprs:
            g: list[int] = []
            bounds = e.bounds or [None] * len(e.nodes)
            for n, iv in zip(e.nodes, bounds, strict=True):
                key = n if n[0] == "Num" or n[0] == "Var" else (n[0], *[g[k] for k in n[1:]])
                i = ids.get(key)
                if i is not None:
                    if i < n0 and n[0] != "Num" and (n[0] != "Var" or n[2] == n[3]):
                        reused = True
                else:
                    i = ids[key] = len(ids)
                    if ivs is not None:  # what the load gives node i (the right-hand sides' intervals read it)
                        if n[0] == "Var":
                            ivs[i] = (n[2], n[3])
                        elif n[0] == "Num":
                            ivs[i] = (n[1], n[1])
                        elif iv is not None:
                            ivs[i] = (iv[0], iv[1])
                    if n[0] == "Var":
                        ln.append(f"{i}\t-1\t0\t0\t0\t{n[1]}\t{n[2]}\t{n[3]}\t1\n")
                    elif n[0] == "Num":
                        ln.append(f"{i}\t0\t{n[1]}\t0\t0\t-\t{n[1]}\t{n[1]}\t1\n")
                    else:
                        kids = key[1:] + (0,) * (4 - len(key))
                        code = codes[n[0]]
                        if n[0] in twins and e.nodes[n[2]][0] == "Num" and is_pow2(e.nodes[n[2]][1]):
                            code = twins[n[0]]
                        bnd = "0\t0\t0" if iv is None else f"{iv[0]}\t{iv[1]}\t1"
                        unbounded = unbounded or iv is None
                        ln.append(f"{i}\t{code}\t{kids[0]}\t{kids[1]}\t{kids[2]}\t-\t{bnd}\n")
                        added[n[0]] = added.get(n[0], 0) + 1
                        if code != codes[n[0]]:
                            twin = TWIN_OF[n[0]]
                            added[twin] = added.get(twin, 0) + 1
                g.append(i)
            roots.append(g[-1])
        made: set[str] = set()
        seeded = [True]
        if pm is not None:
            terms = list(ids)  # node number -> its key: ("Num", v), ("Var", ...) or (constructor, child numbers...)
            for i, _, rhs in pm.matches(terms, n0):
                self._made(rhs, i, terms, ln, made, ivs, seeded)
        return roots, "".join(ln), unbounded, reused, added, made, seeded[0] and ivs is not None

    def _made(self, t: tuple, into: int | None, terms: list[tuple], ln: list[str], made: set[str],
              ivs: dict[int, tuple[int, int]] | None, seeded: list[bool]) -> int:
        """The node number of the right-hand side term `t` (rewrite.egraph_prematch.Rhs), its new nodes added to
        `ln`; with `into`, its root goes in as a row of node `into`, so that the load unions the two (the rule's
        union). An op node comes with the interval `PreMatcher.bounds` gives it from its operands' (`ivs`: node
        number -> the interval its row loads), else without one (the analysis gives it one, as to a node a rule
        makes) and `seeded[0]` turns False."""
        name = t[0]
        if name == "Id":
            return t[1]
        ids = self._ids
        if name == "Num":
            i = ids.get(t)
            if i is None:
                i = ids[t] = len(ids)
                ln.append(f"{i}\t0\t{t[1]}\t0\t0\t-\t{t[1]}\t{t[1]}\t1\n")
                made.add("Num")
                if ivs is not None:
                    ivs[i] = (t[1], t[1])
            return i
        kids = tuple(self._made(k, None, terms, ln, made, ivs, seeded) for k in t[1:])
        bounds = self.prematch.bounds if self.prematch is not None and ivs is not None else None
        iv = bounds(name, [ivs.get(k) for k in kids]) if bounds is not None and ivs is not None else None
        if iv is None:
            seeded[0] = False
        key = (name, *kids)
        i = ids.get(key) if into is None else into
        if i is None or into is not None:
            if i is None:
                i = ids[key] = len(ids)
            code = CODES[name]
            d = t[2] if name in TWIN_CODES else None  # a divisor that is a power of two: the twin's code too
            if d is not None and d[0] == "Id":
                d = terms[d[1]]
            if d is not None and d[0] == "Num" and is_pow2(d[1]):
                code = TWIN_CODES[name]
                made.add(TWIN_OF[name])
            k3 = kids + (0,) * (3 - len(kids))
            bnd = "0\t0\t0" if iv is None else f"{iv[0]}\t{iv[1]}\t1"
            ln.append(f"{i}\t{code}\t{k3[0]}\t{k3[1]}\t{k3[2]}\t-\t{bnd}\n")
            made.add(name)
            if iv is not None and ivs is not None and into is None:
                ivs[i] = iv
        return i

    def _input(self, b: Any, table: str, text: str) -> Any:
        """An `(input table file)` command for rows written to this saturator's scratch file for `table`.
        egglog 13.2 has no bulk insert in its Python bindings; a file of rows read by `input` and turned into
        terms by the `load` rules costs ~1 us per node, where the same terms as actions cost ~4-5 us. The file
        stays open and is overwritten in place: opening with truncation costs ~0.2 ms CPU (and up to ms of
        wall time) on ext4, rewriting ~0.013 ms; it is shortened only when the new rows are shorter, with
        `os.pwrite`/`os.ftruncate` on its descriptor (no text-file seek or flush); a scratch file removed behind
        our back (a temp cleaner: egglog's `input` panics on a missing file) shows as no link left, `os.fstat`."""
        f = self._files.get(table)
        if f is not None and os.fstat(f[0]).st_nlink == 0:
            self._drop_files()
            f = None
        if f is None:
            if self._dir is None or not os.path.isdir(self._dir):
                import shutil
                import tempfile

                self._dir = tempfile.mkdtemp(prefix="uopc-egraph-")
                atexit.register(shutil.rmtree, self._dir, True)
            path = os.path.join(self._dir, f"{table}.tsv")
            f = self._files[table] = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600), path, 0]
        data = text.encode()
        os.pwrite(f[0], data, 0)
        if len(data) < f[2]:
            os.ftruncate(f[0], len(data))
        f[2] = len(data)
        return b.Input(b.PanicSpan(), table, f[1])

    def _drop_files(self) -> None:
        """Close the scratch files; the next batch makes them again (in a new directory if this one is gone)."""
        for fd, _, _ in self._files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._files = {}


__all__ = ["BatchBuilder"]
