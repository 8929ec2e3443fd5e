"""The egglog bridge: index expressions as terms of an e-graph sort, saturated in batches, read back as UOps.

Sort `Idx` holds every scalar of an index expression; booleans are the values 0 and 1, so one interval
domain covers comparisons and masks too. `Num(i64)` is a constant and `Var(key, lo, hi)` a leaf: a variable,
a RANGE or SPECIAL, or any other node the sort cannot express (a LOAD in a gather, a CAST), kept opaque with
its interval. A leaf's key is structural (a readable name plus a hash of its graph), so the same key means
the same UOp in every expression and every process; the UOps come back through a table of keys. Ops map to
constructors by `CTORS`; which int dtype a `Num` gets on the way back comes from the expression, and
whether it is a bool from its position (`Lt`'s operands are ints, `And`'s bools, `Where`'s branches are
what the `Where` is).

The sort models mathematical integers: IDIV and MOD are floor division and modulo, as in rewrite.semantics
(egglog's own i64 `/` and `%` truncate, so rules spell floor results with `floor_div` / `floor_mod`). A sized
int dtype wraps, so an expression of one is taken only when the local interval analysis shows that no node
of the input, and no node of the result, can wrap.

`Saturator` owns one persistent egglog e-graph per process with its rules loaded once as text; each batch
runs between `(push)` and `(pop)`, with an iteration cap, a size budget checked between iterations (egglog
has no node limit and a blow-up aborts the process) and a time budget, then one packed extraction. A panic
(a tripwire rule, an overflow in an action) gives the inputs back unchanged. Results are cached in memory by
UOp and on disk by a hash of the expression's text and the program (`CACHE=0` turns the disk cache off).
The DSL export lives in rewrite.egraph_export.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from rewrite.dtype import DType, dtypes
from rewrite.env import cache_dir, getenv
from rewrite.ops import Ops
from rewrite.render import render
from rewrite.uop import UOp

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
PACK_CHUNK = 200  # roots per packed list term (egglog recurses on term depth)

# op -> (constructor, operand kinds, result kind); kinds: i = the expression's int dtype, b = bool, = = the node's
CTORS: dict[Ops, tuple[str, str, str]] = {
    Ops.ADD: ("Add", "ii", "i"), Ops.SUB: ("Sub", "ii", "i"), Ops.MUL: ("Mul", "ii", "i"), Ops.NEG: ("Neg", "i", "i"),
    Ops.IDIV: ("Div", "ii", "i"), Ops.MOD: ("Mod", "ii", "i"), Ops.MAX: ("Max", "ii", "i"),
    Ops.CMPLT: ("Lt", "ii", "b"), Ops.CMPNE: ("Ne", "ii", "b"), Ops.CMPGT: ("Gt", "ii", "b"),
    Ops.CMPGE: ("Ge", "ii", "b"), Ops.CMPLE: ("Le", "ii", "b"), Ops.CMPEQ: ("Eq", "ii", "b"),
    Ops.NOT: ("Not", "b", "b"), Ops.AND: ("And", "bb", "b"), Ops.OR: ("Or", "bb", "b"),
    Ops.WHERE: ("Where", "b==", "="),
}
OP_OF: dict[str, Ops] = {c: o for o, (c, _, _) in CTORS.items()}
KINDS: dict[str, tuple[str, str]] = {c: (k, r) for c, k, r in CTORS.values()}

# extraction cost per constructor (literals add 1 each): fewer ops first, and division and modulo are dear
DEFAULT_COSTS: dict[str, int] = {
    "Num": 1, "Var": 1, "Add": 2, "Sub": 2, "Mul": 2, "Neg": 2, "Div": 6, "Mod": 6, "Max": 3, "Lt": 2, "Ne": 2,
    "Gt": 2, "Ge": 2, "Le": 2, "Eq": 2, "Not": 1, "And": 2, "Or": 2, "Where": 3,
}


def sort_decls(costs: dict[str, int] | None = None) -> str:
    """The sort, the packed list used to extract many roots at once, and the interval lattice `lo`/`hi`
    (merged by max and min, so an e-class keeps the intersection over its equivalent forms)."""
    c = {**DEFAULT_COSTS, **(costs or {})}
    variants = [f"(Num i64 :cost {c['Num']})", f"(Var String i64 i64 :cost {c['Var']})"]
    variants += [f"({name} {' '.join(['Idx'] * len(kinds))} :cost {c[name]})" for name, kinds, _ in CTORS.values()]
    return ("(datatype Idx\n  " + "\n  ".join(variants) + ")\n(datatype PList (PNil) (PCons Idx PList))\n"
            "(function lo (Idx) i64 :merge (max old new))\n(function hi (Idx) i64 :merge (min old new))\n")


def floor_mod(a: str, b: str) -> str:
    """egglog i64 text for Python's a % b (the sign of b); `%` alone truncates. Fails (no match) when b == 0."""
    return f"(% (+ (% {a} {b}) {b}) {b})"


def floor_div(a: str, b: str) -> str:
    """egglog i64 text for Python's a // b: the remainder taken off first makes the truncating `/` exact."""
    return f"(/ (- {a} {floor_mod(a, b)}) {b})"


# ---------------------------------------------------------------------------------------------- translation


class Untranslatable(Exception):
    """The expression (or the e-graph's result) cannot be carried between UOps and the sort."""


@dataclass
class Expr:
    """One root, ready for a batch: its term as a node list (children first), its leaves by key."""

    uop: UOp
    int_dtype: DType
    nodes: list[tuple]  # ("Num", v) | ("Var", key, lo, hi) | (constructor, child index, ...)
    named: list[bool]  # a shared subterm big enough to bind once by name instead of spelling it out per use
    leaves: dict[str, UOp]
    stable: bool  # every leaf key is structural, so the disk cache may hold it

    def canonical(self) -> str:
        return "\n".join([f"{self.uop.dtype.name} {self.int_dtype.name}", *map(repr, self.nodes)])


_SAFE = re.compile(r"[^A-Za-z0-9_]")


def _graph_text(u: UOp) -> str | None:
    """A stable text of a whole subgraph (None if some arg prints differently per process, e.g. an address)."""
    idx: dict[UOp, int] = {}
    lines = []
    for n in u.toposort():
        idx[n] = len(idx)
        lines.append(f"{n.op.name}:{n.dtype!r}:{n.arg!r}:{n.tag!r}:{[idx[s] for s in n.src]}")
    text = "\n".join(lines)
    return None if " at 0x" in text else text


def _leaf_key(u: UOp, prefix: str) -> tuple[str, bool]:
    text = _graph_text(u)
    if text is None:
        return f"{prefix}{id(u):x}", False
    name = _SAFE.sub("_", render(u))[:24] if u.op is not Ops.CONST else "c"
    return f"{prefix}{name}@{hashlib.sha1(text.encode()).hexdigest()[:16]}", True


def _bounds(u: UOp) -> tuple[int, int]:
    if u.op is Ops.PARAM and len(u.src) == 3 and all(s.op is Ops.CONST for s in u.src[1:]):
        lo, hi = u.src[1].arg[0], u.src[2].arg[0]  # type: ignore[index]
    elif u.op in (Ops.RANGE, Ops.SPECIAL):
        b = u.src[0]
        n = b.arg[0] if b.op is Ops.CONST else b.vmax  # type: ignore[index]
        lo, hi = 0, max(int(n) - 1, 0)  # a RANGE of no iterations never evaluates; any point is sound
    else:
        lo, hi = u.vmin, u.vmax
    if isinstance(lo, bool) or isinstance(hi, bool):
        lo, hi = int(lo), int(hi)
    if not (isinstance(lo, int) and isinstance(hi, int) and I64_MIN <= lo <= hi <= I64_MAX):
        raise Untranslatable(f"{u.short()}: interval [{lo}, {hi}] is not an i64 interval")
    return lo, hi


def _int_dtype(root: UOp) -> DType:
    if root.dtype.is_int:
        return root.dtype
    stack, seen = [root], {root}
    while stack:
        n = stack.pop()
        if n.op in CTORS:
            for s in n.src:
                if s.dtype.is_int and s.dtype.count == 1:
                    return s.dtype
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
    return dtypes.index


def _no_wrap(u: UOp) -> bool:
    """A sized-int node whose interval is not the whole dtype range cannot have wrapped (rewrite.interval gives
    the whole range to any node that may wrap)."""
    dt = u.dtype
    if dt is dtypes.index or not dt.is_int:
        return True
    lo, hi = u.min_max
    return not (lo == dt.min and hi == dt.max)


def translate(u: UOp) -> Expr:
    """The let-program and root term of `u`; raises Untranslatable when it is not a scalar int/bool expression."""
    if u.shape != () or u.dtype.count != 1 or not (u.dtype.is_int or u.dtype.is_bool):
        raise Untranslatable(f"{u.short()} is not a scalar int or bool expression")
    idt = _int_dtype(u)

    def kind_ok(n: UOp, kind: str, parent: UOp) -> bool:
        want = idt if kind == "i" else dtypes.bool if kind == "b" else parent.dtype
        return n.dtype is want

    def is_op(n: UOp) -> bool:
        spec = CTORS.get(n.op)
        return (spec is not None and n.shape == () and (n.dtype is idt or n.dtype is dtypes.bool)
                and len(n.src) == len(spec[1]) and all(kind_ok(s, k, n) for s, k in zip(n.src, spec[1], strict=True)))

    order: list[UOp] = []
    refs: dict[UOp, int] = {u: 1}
    visited: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(u, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n in visited:
            continue
        visited.add(n)
        stack.append((n, True))
        if is_op(n):
            for s in reversed(n.src):
                refs[s] = refs.get(s, 0) + 1
                if s not in visited:
                    stack.append((s, False))
    idx: dict[UOp, int] = {}
    nodes: list[tuple] = []
    size: list[int] = []
    leaves: dict[str, UOp] = {}
    stable = True
    for n in order:
        if is_op(n):
            if idt is not dtypes.index and not _no_wrap(n):
                raise Untranslatable(f"{n.short()} may wrap around in {idt.name}")
            kids = tuple(idx[s] for s in n.src)
            node: tuple = (CTORS[n.op][0], *kids)
            size.append(1 + sum(size[k] for k in kids))
        elif n.op is Ops.CONST and (n.dtype is idt or n.dtype is dtypes.bool):
            v = int(n.arg[0])  # type: ignore[index]
            if not I64_MIN <= v <= I64_MAX:
                raise Untranslatable(f"constant {v} does not fit in i64")
            node = ("Num", v)
            size.append(1)
        elif n.dtype is idt or n.dtype is dtypes.bool:
            named = (n.op is Ops.PARAM and isinstance(getattr(n.arg, "slot", None), str)) or n.op in (Ops.RANGE,
                                                                                                      Ops.SPECIAL)
            key, ok = _leaf_key(n, "" if named else "o_")
            stable = stable and ok
            leaves[key] = n
            node = ("Var", key, *_bounds(n))
            size.append(1)
        else:
            raise Untranslatable(f"{n.short()} has dtype {n.dtype.name}, not {idt.name} or bool")
        idx[n] = len(nodes)
        nodes.append(node)
    # egglog walks a term as a tree, so a big subterm used twice is bound once (a DAG of shared sums would
    # otherwise be spelled out exponentially)
    named_flags = [refs[n] > 1 and size[i] > 16 and n is not u for i, n in enumerate(order)]
    return Expr(u, idt, nodes, named_flags, leaves, stable)


# ---------------------------------------------------------------------------------------------- terms back

Node = tuple  # ("Num", v) | ("Var", key) | (ctor, child index, ...): one root's extracted term, children first


def _from_termdag(termdag: object, root_id: int) -> list[Node]:
    """The extracted term under `root_id` as a node list (children before parents, shared terms once)."""
    from egglog import bindings

    get = termdag.get  # type: ignore[attr-defined]
    local: dict[int, int] = {}
    nodes: list[Node] = []
    stack: list[tuple[int, bool]] = [(root_id, False)]
    while stack:
        tid, done = stack.pop()
        if tid in local and not done:
            continue
        t = get(tid)
        if t.name == "Num" or t.name == "Var":
            lit = get(t.args[0])
            assert isinstance(lit, bindings.TermLit)
            local[tid] = len(nodes)
            nodes.append((t.name, lit.value.value))
        elif done:
            local[tid] = len(nodes)
            nodes.append((t.name, *(local[a] for a in t.args)))
        else:
            stack.append((tid, True))
            stack.extend((a, False) for a in reversed(t.args) if a not in local)
    return nodes


def build(nodes: Sequence[Node], expr: Expr) -> UOp:
    """The UOp for an extracted node list; raises Untranslatable on anything that does not fit `expr`."""
    idt = expr.int_dtype
    root_kind = "b" if expr.uop.dtype is dtypes.bool else "i"
    memo: dict[tuple[int, str], UOp] = {}
    stack: list[tuple[int, str, bool]] = [(len(nodes) - 1, root_kind, False)]
    try:
        while stack:
            i, kind, done = stack.pop()
            if (i, kind) in memo:
                continue
            node = nodes[i]
            name = node[0]
            if name == "Num":
                v = node[1]
                if kind == "b":
                    if v not in (0, 1):
                        raise Untranslatable(f"Num {v} where a bool belongs")
                    memo[(i, kind)] = UOp.const(bool(v))
                else:
                    if not idt.min <= v <= idt.max:
                        raise Untranslatable(f"Num {v} does not fit {idt.name}")
                    memo[(i, kind)] = UOp.const(v, idt)
                continue
            if name == "Var":
                leaf = expr.leaves.get(node[1])
                if leaf is None or (leaf.dtype is dtypes.bool) != (kind == "b"):
                    raise Untranslatable(f"leaf {node[1]!r} unknown here or of the wrong kind")
                memo[(i, kind)] = leaf
                continue
            kinds, res = KINDS[name]
            if res != "=" and res != kind:
                raise Untranslatable(f"{name} where a {'bool' if kind == 'b' else 'int'} belongs")
            want = [kind if k == "=" else k for k in kinds]
            if not done:
                stack.append((i, kind, True))
                stack.extend((c, k, False) for c, k in zip(node[1:], want, strict=True))
                continue
            memo[(i, kind)] = UOp(OP_OF[name], tuple(memo[(c, k)] for c, k in zip(node[1:], want, strict=True)))
    except (TypeError, ValueError, KeyError, IndexError) as e:  # a dtype clash or a malformed node list
        raise Untranslatable(f"cannot rebuild the extracted term: {e}") from e
    out = memo[(len(nodes) - 1, root_kind)]
    if idt is not dtypes.index and not all(_no_wrap(n) for n in out.toposort()):
        raise Untranslatable(f"the result may wrap around in {idt.name}")
    return out


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


def _parse(eg: object, text: str) -> list:
    return [c for form in split_commands(text) for c in eg.parse_program(form)]  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Schedule:
    """Each iteration is `(saturate (run analysis)) (run <rewrites>)`; the budgets are checked between them."""

    iterations: int = 8
    max_size: int = 20_000  # e-graph tuples (nodes plus lo/hi rows), from (print-size)
    seconds: float = 2.0
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


class Saturator:
    """A rule program (egglog text, declaring rule sets named by `schedule`) and its bounded schedule."""

    def __init__(self, name: str, program: str, schedule: Schedule | None = None,
                 costs: dict[str, int] | None = None) -> None:
        self.name, self.schedule = name, schedule or Schedule()
        self.program = sort_decls(costs) + program
        self.version = hashlib.sha256(f"{self.program}\n{self.schedule!r}".encode()).hexdigest()[:24]
        self._eg: object = None
        self._cmds: dict[str, list] = {}
        self._lock = threading.RLock()
        self._mem: dict[UOp, Result] = {}
        self._db: sqlite3.Connection | None = None
        self._db_pid = -1
        self.last = Stats()

    # -- the persistent e-graph --
    def _egraph(self) -> object:
        if self._eg is None:
            from egglog import bindings

            eg = bindings.EGraph()
            eg.run_program(*_parse(eg, self.program))
            self._cmds = {k: _parse(eg, t) for k, t in {
                "push": "(push)", "pop": "(pop)", "step": self.schedule.step_text(),
                "final": f"(run-schedule (saturate (run {self.schedule.analysis})))"}.items()}
            self._eg = eg
        return self._eg

    @staticmethod
    def _insert(b: object, exprs: list[Expr]) -> tuple[list, str]:
        """Commands that add every root, as binding objects (egglog 13.2 parses text in time quadratic in its
        length, and each top-level command costs ~0.2 ms): one packed list of the roots per chunk."""
        sp = b.PanicSpan()  # type: ignore[attr-defined]
        lit = b.Lit  # type: ignore[attr-defined]
        call, i64, let = b.Call, b.Int, (lambda name, e: b.ActionCommand(b.Let(sp, name, e)))  # type: ignore[attr-defined]
        cmds: list = []
        roots = []
        for i, e in enumerate(exprs):
            objs: list = []
            for j, n in enumerate(e.nodes):
                if n[0] == "Num":
                    o = call(sp, "Num", [lit(sp, i64(n[1]))])
                elif n[0] == "Var":
                    o = call(sp, "Var", [lit(sp, b.String(n[1])), lit(sp, i64(n[2])), lit(sp, i64(n[3]))])  # type: ignore[attr-defined]
                else:
                    o = call(sp, n[0], [objs[k] for k in n[1:]])
                if e.named[j]:
                    cmds.append(let(f"$e{i}_{j}", o))
                    o = b.Var(sp, f"$e{i}_{j}")  # type: ignore[attr-defined]
                objs.append(o)
            roots.append(objs[-1])
        # the list nests as deep as it is long, so it is built in chunks, each ending in the one before
        tail, name = call(sp, "PNil", []), "$pack0"
        for k in range(0, len(roots), PACK_CHUNK):
            pack = tail
            for r in reversed(roots[k : k + PACK_CHUNK]):
                pack = call(sp, "PCons", [r, pack])
            name = f"$pack{k // PACK_CHUNK}"
            cmds.append(let(name, pack))
            tail = b.Var(sp, name)  # type: ignore[attr-defined]
        return cmds, name

    def _run(self, exprs: list[Expr]) -> list[Result]:
        """One batch in the e-graph; raises on a panic (the caller splits the batch)."""
        from egglog import bindings as b

        eg = self._egraph()
        sch, st, t0 = self.schedule, Stats(roots=len(exprs)), time.perf_counter()
        self.last = st
        sp = b.PanicSpan()
        cmds, pack = self._insert(b, exprs)
        eg.run_program(*self._cmds["push"])  # type: ignore[attr-defined]
        try:
            eg.run_program(*cmds)  # type: ignore[attr-defined]
            st.stop = "iterations"
            for _ in range(sch.iterations):
                out = eg.run_program(*self._cmds["step"])  # type: ignore[attr-defined]
                st.iterations += 1
                st.size = sum(n for _, n in out[-1].sizes)
                if not out[0].report.updated:
                    st.stop = "saturated"
                    break
                if st.size > sch.max_size:
                    st.stop = "size"
                    break
                if time.perf_counter() - t0 > sch.seconds:
                    st.stop = "time"
                    break
            if st.stop in ("iterations", "saturated"):
                eg.run_program(*self._cmds["final"])  # type: ignore[attr-defined]
            best = eg.run_program(b.Extract(sp, b.Var(sp, pack), b.Lit(sp, b.Int(0))))[-1]  # type: ignore[attr-defined]
            td, tid = best.termdag, best.term
            roots: list[int] = []
            while td.get(tid).name == "PCons":
                head, tid = td.get(tid).args
                roots.append(head)
            results = []
            for e, r in zip(exprs, roots, strict=True):
                # the extracted term is made of e-nodes of the root's class, so evaluating it finds that class
                _, val = eg.eval_expr(td.term_to_expr(r, sp))  # type: ignore[attr-defined]
                lo, hi = eg.lookup_function("lo", [val]), eg.lookup_function("hi", [val])  # type: ignore[attr-defined]
                results.append(Result(e.uop, eg.value_to_i64(lo) if lo is not None else None,  # type: ignore[attr-defined]
                                      eg.value_to_i64(hi) if hi is not None else None, _from_termdag(td, r)))
            return results
        finally:
            eg.run_program(*self._cmds["pop"])  # type: ignore[attr-defined]
            st.seconds = time.perf_counter() - t0

    def _run_split(self, exprs: list[Expr]) -> list[Result]:
        """A batch that panics is split in halves, so one bad expression does not cost the others."""
        try:
            return self._run(exprs)
        except BaseException as e:  # pyo3 turns a Rust panic into PanicException, a BaseException
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                raise
            self.last.stop, self.last.error = "panic", str(e).splitlines()[0][:300] if str(e) else type(e).__name__
            if type(e).__name__ != "EggSmolError":
                self._eg = None  # a Rust panic may leave the e-graph inconsistent: start a fresh one next time
            if len(exprs) == 1:
                return [Result(exprs[0].uop)]
            mid = len(exprs) // 2
            return self._run_split(exprs[:mid]) + self._run_split(exprs[mid:])

    # -- caches --
    def _disk(self) -> sqlite3.Connection | None:
        if int(getenv("CACHE")) == 0:
            return None
        if self._db is None or self._db_pid != os.getpid():
            try:
                db = sqlite3.connect(os.path.join(cache_dir(), "egraph.sqlite"), timeout=5, check_same_thread=False)
                # a cache needs no durability: without fsync a commit costs microseconds instead of ~20 ms
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=OFF")
                db.execute("CREATE TABLE IF NOT EXISTS eg (key TEXT PRIMARY KEY, val TEXT)")
                self._db, self._db_pid = db, os.getpid()
            except sqlite3.Error:
                return None
        return self._db

    def _disk_key(self, e: Expr) -> str:
        return hashlib.sha256(f"{self.version}\n{e.canonical()}".encode()).hexdigest()

    def _disk_get(self, exprs: list[Expr]) -> dict[int, Result]:
        db = self._disk()
        keys = {self._disk_key(e): i for i, e in enumerate(exprs) if e.stable}
        if db is None or not keys:
            return {}
        found: dict[int, Result] = {}
        try:
            ks = list(keys)
            for j in range(0, len(ks), 500):
                chunk = ks[j : j + 500]
                rows = db.execute(f"SELECT key, val FROM eg WHERE key IN ({','.join('?' * len(chunk))})", chunk)
                for k, v in rows:
                    d = json.loads(v)
                    found[keys[k]] = Result(exprs[keys[k]].uop, d["lo"], d["hi"], [tuple(n) for n in d["n"]])
        except (sqlite3.Error, ValueError, KeyError, TypeError):
            return {}
        return found

    def _disk_put(self, pairs: list[tuple[Expr, Result]]) -> None:
        db = self._disk()
        rows = [(self._disk_key(e), json.dumps({"lo": r.lo, "hi": r.hi, "n": r.nodes})) for e, r in pairs
                if e.stable and r.nodes is not None]
        if db is None or not rows:
            return
        try:
            with db:
                db.executemany("INSERT OR REPLACE INTO eg (key, val) VALUES (?, ?)", rows)
        except sqlite3.Error:
            pass

    def clear_memory(self) -> None:
        self._mem.clear()

    # -- the entry point --
    def run(self, uops: Sequence[UOp]) -> list[Result]:
        """Saturate all `uops` in one e-graph (cached ones skipped); each result is its UOp (the input itself
        when it cannot be translated or read back) and the e-graph's interval of the root, if any."""
        out: dict[UOp, Result] = {}
        todo: list[Expr] = []
        with self._lock:
            for u in uops:
                if u in out:
                    continue
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
            disk = self._disk_get(todo)
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
           "Stats", "Untranslatable", "build", "floor_div", "floor_mod", "sort_decls", "translate"]
