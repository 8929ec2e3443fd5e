"""Suite `symbolic`: how fast index expressions simplify, fast rules alone and with e-graph saturation, and
how small they get, against tinygrad 0.14's symbolic rules on the same expressions.

Workloads (every batch is simplified as one unit, the way a kernel stage rewrites a kernel's AST):
  * real kernels: gemm 64x64x64, conv2d (1,8,16,16) * (8,8,3,3) with padding 1, a sum over the last axis of a
    reshaped and permuted (4,8,16) tensor, and a 64x64 softmax are scheduled (lower.schedule) and the
    expressions of each kernel's AST are collected BEFORE the symbolic stage: the index operand of every
    INDEX, the gate of every gated LOAD and the condition of every WHERE over index math. Constants and bare
    ranges are left out (no simplifier has work there). `<kernel> kN` is that set as it is (N = 2..4);
  * `<kernel> x50`: the issue's kernel-sized batch of 50. A kernel has only a few index expressions, so the
    same expressions are padded out as upcast/unroll lanes would produce them: one to three of the kernel's
    ranges are split, r -> r'*f + k (f = 4 or 2, innermost loop and reduce ranges first), and the
    expressions are taken for successive lanes k until 50 distinct ones exist;
  * `random x50`: 50 seeded random expressions shaped like the symbolic fuzzer's (1-3 bounded variables with
    negative lows too; + * // % max where < != and, with (x*c+y)//c and (x*c+y)%c shapes).

Figures: time per batch and per expression for (1) the fast rules alone (rules.symbolic.simplify_fast);
(2) the full simplifier (fast rules, then one egglog e-graph for the batch's expressions that still have
//, %, < or !=, then the fast rules again: rules.simplify's order, batched as rules.eqsat.saturate_batch
allows), warm in this process with the in-memory result cache filled (`cached`) or emptied before each run
(`uncached`), and cold: a fresh Python process with CACHE=0 that imports the simplifier (rules and
rules.eqsat; egglog itself loads at the first saturation) and simplifies the batch once (first batch alone,
and import + first batch), the same with an on-disk cache filled by an earlier process, and where a cold
first batch's time goes (the fast rules' first pass, egglog's load); (3) tinygrad's `symbolic` matcher
(what its UOp.simplify() runs) on the same expressions translated node for node (variables by name and
bounds, RANGEs as RANGEs of the same size). Per-expression figures call each simplifier once per
expression (the full one through UOp.simplify: one egglog call per expression that needs one). Node
counts are unique nodes per expression (variables and ranges are leaves), summed over the batch. Every
result is checked against the original expression at random points of its variables (untimed). Nothing
is written to the user's cache: in-process runs use CACHE=0 (the memory cache still works), the
disk-cache rows use a temporary CACHEDIR.

Budget (the issue): a kernel's index batch simplified in at most 5 ms median once warm, 50 ms cold.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import pickle
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from benchmarks.runner import Bench, LoadMeter, Result, Timed, fmt_value, suite

# the project is imported inside functions: the cold-start child process imports this module first and
# must not have the compiler loaded before it starts its clock
if TYPE_CHECKING:
    from rewrite import UOp
    from rewrite.uop import ConstValue

BATCH = 50
WARM_BUDGET_MS, COLD_BUDGET_MS = 5.0, 50.0
CHECK_POINTS = 16  # random points per expression for the untimed equivalence check
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Workload:
    name: str
    exprs: list[UOp]
    kernel: str = ""  # the kernel it came from ("" for random)
    padded: bool = False  # a lane-padded batch of the size (these get the cold-start figures)
    stats: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- workloads


def kernel_graphs() -> dict[str, UOp]:
    from tensor import Tensor

    a, b = Tensor.empty(64, 64), Tensor.empty(64, 64)
    x, w = Tensor.empty(1, 8, 16, 16), Tensor.empty(8, 8, 3, 3)
    t = Tensor.empty(4, 8, 16)
    return {
        "gemm": (a @ b).uop,
        "conv": x.conv2d(w, padding=1).uop,
        "reduce": t.reshape(8, 4, 16).permute(2, 0, 1).sum(axis=2).uop,
        "softmax": a.softmax(-1).uop,
    }


def var_name(u: UOp) -> str | None:
    """The name of a symbolic variable (a PARAM whose slot is a name, not a buffer number)."""
    slot = getattr(u.arg, "slot", None)
    return slot if isinstance(slot, str) else None


def _is_index_math(u: UOp) -> bool:
    from rewrite import Ops, dtypes

    leaves = (Ops.CONST, Ops.RANGE, Ops.PARAM)
    for n in u.toposort():
        if n.op in leaves:
            if n.op is Ops.PARAM and var_name(n) is None:
                return False
            continue
        if n.dtype not in (dtypes.index, dtypes.bool):
            return False
    return True


def index_exprs(ast: UOp) -> list[UOp]:
    """The index operands, load gates and WHERE conditions of a kernel AST, distinct, leaves left out."""
    from rewrite import Ops

    found: list[UOp] = []
    for u in ast.toposort():
        if u.op is Ops.INDEX and len(u.src) > 1:
            found.append(u.src[1])
        elif u.op is Ops.LOAD and len(u.src) > 2:
            found.append(u.src[2])
        elif u.op is Ops.WHERE:
            found.append(u.src[0])
    keep = [e for e in dict.fromkeys(found) if e.op not in (Ops.CONST, Ops.RANGE, Ops.PARAM)]
    return [e for e in keep if _is_index_math(e)]


def kernel_batches() -> dict[str, list[UOp]]:
    """Each graph's kernel with the most index expressions (every graph here schedules to one kernel)."""
    from lower.schedule import schedule

    out: dict[str, list[UOp]] = {}
    for name, g in kernel_graphs().items():
        items, _ = schedule([g])
        batches = [index_exprs(it.ast) for it in items if it.kind == "kernel" and it.ast is not None]
        out[name] = max(batches, key=len)
    return out


def lane_batch(exprs: list[UOp], n: int = BATCH) -> list[UOp]:
    """`n` distinct expressions: `exprs` for successive lanes of split ranges, r -> r'*f + k, as an
    upcast/unroll by f leaves them. Ranges are split innermost loop first, then innermost reduce, then the
    rest, one more whenever the lanes so far give fewer than `n` distinct expressions."""
    from rewrite import AxisType, UOp

    def rid(r: UOp) -> int:
        return r.arg[0]  # type: ignore[index]

    def kind(r: UOp) -> AxisType:
        return r.arg[1]  # type: ignore[index]

    ranges = sorted({r for e in exprs for r in e.ranges()}, key=rid, reverse=True)
    order: list[UOp] = []
    for t in (AxisType.LOOP, AxisType.REDUCE):
        order += [r for r in ranges if kind(r) is t][:1]
    order += [r for r in ranges if r not in order]
    next_id = max((rid(r) for r in ranges), default=0) + 1
    splits: list[tuple[UOp, UOp, int]] = []  # (range, its outer part, factor)
    out: dict[UOp, None] = {}
    for r in order:
        size = int(r.vmax) + 1
        f = next((f for f in (4, 2) if size % f == 0 and size > f), None)
        if f is None:
            continue
        splits.append((r, UOp.range(size // f, next_id, kind(r)), f))
        next_id += 1
        out.clear()
        for lane in itertools.product(*(range(sf) for _, _, sf in splits)):
            sub = {sr: outer * sf + k if k else outer * sf for (sr, outer, sf), k in zip(splits, lane, strict=True)}
            for e in exprs:
                out[e.substitute(sub)] = None
                if len(out) == n:
                    return list(out)
    return list(out)  # fewer than n: the kernel has no more distinct lanes to give


def random_batch(seed: int, n: int = BATCH) -> list[UOp]:
    """`n` seeded random index expressions (shapes like tests/rules' fuzzer, generated here so the
    benchmark does not move when the tests' generator does)."""
    from rewrite import UOp

    rng = random.Random(seed)

    def const(nonzero: bool = False) -> int:
        while True:
            c = rng.choice((rng.randint(-4, 4), rng.choice((2, 3, 4, 6, 8, 16, 32, -2, -4))))
            if c or not nonzero:
                return c

    def expr(vs: list[UOp], depth: int) -> UOp:
        if depth <= 0 or rng.random() < 0.15:
            return rng.choice(vs) if rng.random() < 0.85 else UOp.const(const())
        k, sub = rng.random(), (lambda: expr(vs, depth - 1))
        if k < 0.18:  # what index math is made of: (x*c + y) // c and % c
            c = abs(const(nonzero=True))
            num = sub() * c + sub()
            return num // c if rng.random() < 0.5 else num % c
        if k < 0.36:
            return sub() + sub()
        if k < 0.50:
            return sub() * const()
        if k < 0.64:
            return sub() // const(nonzero=True)
        if k < 0.80:
            return sub() % const(nonzero=True)
        if k < 0.88:
            return sub().maximum(sub())
        return cond(vs, depth - 1).where(sub(), sub())

    def cond(vs: list[UOp], depth: int) -> UOp:
        a = expr(vs, depth)
        b = UOp.const(const()) if rng.random() < 0.7 else expr(vs, depth)
        c = a < b if rng.random() < 0.7 else a.ne(b)
        return c & (rng.choice(vs) < const()) if rng.random() < 0.2 else c

    out: dict[UOp, None] = {}
    while len(out) < n:
        vs = []
        for name in ("a", "b", "c")[: rng.randint(1, 3)]:
            lo = rng.choice((0, 0, 0, 1, -2, -5))
            vs.append(UOp.variable(name, lo, lo + rng.choice((1, 3, 7, 15, 31, 63))))
        e = cond(vs, 3) if rng.random() < 0.15 else expr(vs, 4)
        if e.src:  # a bare variable or constant gives no simplifier anything to do
            out[e] = None
    return list(out)


# ---------------------------------------------------------------------------------------------- simplifiers


def fast_batch(exprs: Sequence[UOp]) -> tuple[UOp, ...]:
    """The fast rules on the batch as one graph (a kernel stage rewrites the kernel's whole AST at once)."""
    from rewrite import UOp
    from rules.symbolic import simplify_fast

    return simplify_fast(UOp.sink(*exprs)).src


def wants_saturation(u: UOp) -> bool:
    # rules.simplify's test: after the fast rules, a // % < or != left over is one with a non-constant operand
    from rewrite import Ops

    return any(n.op in (Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE) for n in u.toposort())


def full_batch(exprs: Sequence[UOp]) -> tuple[UOp, ...]:
    """Fast rules, one e-graph for what is left with // % < !=, fast rules again (rules.simplify, batched)."""
    from rules.eqsat import saturate_batch

    fast = fast_batch(exprs)
    worth = [u for u in dict.fromkeys(fast) if wants_saturation(u)]
    if not worth:
        return fast
    sat = dict(zip(worth, saturate_batch(worth), strict=True))
    return fast_batch([sat.get(u, u) for u in fast])


def full_each(exprs: Sequence[UOp]) -> list[UOp]:
    import rules  # noqa: F401 -- installs UOp.simplify

    return [e.simplify() for e in exprs]


def fast_each(exprs: Sequence[UOp]) -> list[UOp]:
    from rules.symbolic import simplify_fast

    return [simplify_fast(e) for e in exprs]


@contextlib.contextmanager
def no_disk_cache() -> Iterator[None]:
    from rewrite.env import Context

    with Context(CACHE=0):
        yield


def clear_memory_cache() -> None:
    from rules.eqsat import saturator

    saturator().clear_memory()


def nodes(u: Any) -> int:
    """Unique nodes of one expression, variables and ranges as leaves (their bound operands not counted);
    works on our UOps and tinygrad's alike."""
    seen: set[int] = set()
    stack = [u]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op.name not in ("PARAM", "RANGE", "BUFFER"):
            stack.extend(n.src)
    return len(seen)


def total_nodes(exprs: Sequence[Any]) -> int:
    return sum(nodes(e) for e in exprs)


# ---------------------------------------------------------------------------------------------- tinygrad


class Untranslatable(Exception):
    pass


def tinygrad_version() -> str | None:
    import importlib.util

    if importlib.util.find_spec("tinygrad") is None:
        return None
    from importlib import metadata

    return metadata.version("tinygrad")


def to_tinygrad(exprs: Sequence[UOp]) -> tuple[list[Any], dict[Any, Any]]:
    """Our expressions as tinygrad UOps, node for node with tinygrad's plain constructor (no operator sugar,
    which could fold while building), and the map from our leaves to theirs."""
    from tinygrad.dtype import dtypes as tdt
    from tinygrad.uop.ops import AxisType as TAxis
    from tinygrad.uop.ops import Ops as T
    from tinygrad.uop.ops import UOp as TUOp

    from rewrite import Ops

    same = {Ops.ADD: T.ADD, Ops.MUL: T.MUL, Ops.IDIV: T.FLOORDIV, Ops.MOD: T.FLOORMOD, Ops.MAX: T.MAX,
            Ops.CMPLT: T.CMPLT, Ops.CMPNE: T.CMPNE, Ops.CMPEQ: T.CMPEQ, Ops.AND: T.AND, Ops.OR: T.OR,
            Ops.XOR: T.XOR, Ops.WHERE: T.WHERE}
    out: dict[UOp, Any] = {}
    leaves: dict[Any, Any] = {}
    for e in exprs:
        for u in e.toposort():
            if u in out:
                continue
            if u.op is Ops.CONST:
                v = u.arg[0]  # type: ignore[index]
                t = TUOp.const(v, tdt.bool if isinstance(v, bool) else tdt.weakint)
            elif u.op is Ops.PARAM and (name := var_name(u)) is not None:
                t = leaves[u] = TUOp.variable(name, int(u.vmin), int(u.vmax))
            elif u.op is Ops.RANGE:
                rid, axis = cast(tuple, u.arg)
                t = leaves[u] = TUOp.range(int(u.vmax) + 1, rid, TAxis[axis.name])
            elif u.op is Ops.NOT:  # tinygrad has no NOT: its logical_not is x != True
                t = TUOp(T.CMPNE, tdt.bool, (out[u.src[0]], TUOp.const(True, tdt.bool)))
            elif u.op in same:
                o = same[u.op]
                dt = tdt.bool if u.dtype.scalar.is_bool else tdt.weakint
                t = TUOp(o, dt, tuple(out[s] for s in u.src))
            elif u.op is Ops.VCONST:  # the shape operand of a variable: not part of the expression
                continue
            else:
                raise Untranslatable(u.op.name)
            out[u] = t
    return [out[e] for e in exprs], leaves


def tinygrad_batch(texprs: Sequence[Any]) -> Any:
    from tinygrad.uop.ops import UOp as TUOp
    from tinygrad.uop.ops import graph_rewrite
    from tinygrad.uop.symbolic import symbolic

    return graph_rewrite(TUOp.sink(*texprs), symbolic, name="simplify").src


def tinygrad_each(texprs: Sequence[Any]) -> list[Any]:
    return [t.simplify() for t in texprs]


_TG_EVAL: dict[str, Callable[..., Any]] = {
    "ADD": lambda a, b: a + b, "SUB": lambda a, b: a - b, "MUL": lambda a, b: a * b, "NEG": lambda a: -a,
    "FLOORDIV": lambda a, b: a // b, "FLOORMOD": lambda a, b: a % b, "MAX": max, "CMPLT": lambda a, b: a < b,
    "CMPNE": lambda a, b: a != b, "CMPEQ": lambda a, b: a == b, "AND": lambda a, b: a and b if isinstance(a, bool)
    else a & b, "OR": lambda a, b: a or b if isinstance(a, bool) else a | b, "XOR": lambda a, b: a ^ b,
    "WHERE": lambda c, a, b: a if c else b, "CAST": lambda a: a,
}


def tinygrad_eval(t: Any, env: dict[Any, int]) -> Any:
    """A tinygrad index expression's value (floor // and %, as weakint has them). The walk stops at the
    leaves in `env`: a tinygrad variable is a BUFFER whose source is its (empty) shape."""
    vals: dict[int, Any] = {}
    stack: list[tuple[Any, bool]] = [(t, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in vals:
            continue
        name = n.op.name
        if name == "CONST":
            vals[id(n)] = n.arg
        elif n in env:
            vals[id(n)] = env[n]
        elif name not in _TG_EVAL:
            raise Untranslatable(name)
        elif ready:
            vals[id(n)] = _TG_EVAL[name](*(vals[id(s)] for s in n.src))
        else:
            stack.append((n, True))
            stack.extend((s, False) for s in n.src)
    return vals[id(t)]


# ---------------------------------------------------------------------------------------------- checking


def _is_variable(u: UOp) -> bool:
    from rewrite import Ops

    return u.op is Ops.RANGE or (u.op is Ops.PARAM and var_name(u) is not None)


def check_equal(orig: Sequence[UOp], results: dict[str, Sequence[Any]], tleaves: dict[Any, Any] | None,
                seed: int = 0) -> dict[str, str]:
    """Per simplifier: how many results differ from their original at some random point of its variables,
    and how many could not be evaluated (an op the small tinygrad evaluator here lacks)."""
    rng = random.Random(seed)
    wrong: dict[str, set[int]] = {k: set() for k in results}
    unchecked: dict[str, set[int]] = {k: set() for k in results}
    for i, e in enumerate(orig):
        leaves = [u for u in e.toposort() if _is_variable(u)]
        for _ in range(CHECK_POINTS):
            point = {u: rng.randint(int(u.vmin), int(u.vmax)) for u in leaves}
            by_name: dict[str, ConstValue] = {u.render(): v for u, v in point.items()}
            want = e.evaluate(by_name)
            for label, res in results.items():
                if i in wrong[label] or i in unchecked[label]:
                    continue
                try:
                    if label == "tinygrad":
                        assert tleaves is not None
                        got = tinygrad_eval(res[i], {tleaves[u]: v for u, v in point.items() if u in tleaves})
                    else:
                        got = res[i].evaluate(by_name)
                except Untranslatable:
                    unchecked[label].add(i)
                    continue
                if got != want:
                    wrong[label].add(i)
    return {k: f"{len(wrong[k])}" + (f" ({len(unchecked[k])} unchecked)" if unchecked[k] else "") for k in results}


# ---------------------------------------------------------------------------------------------- cold start


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def cold_child(path: str, parts: bool = False) -> None:
    """Run in a fresh process (`python -c ...`): import the simplifier and simplify the pickled batch once,
    print the timings as JSON. Nothing of the compiler is loaded before the clock starts. With `parts`, the
    first batch is taken apart instead: the fast rules' first pass, egglog's load, then the full simplifier."""
    preloaded = sorted(m for m in ("rewrite", "rules", "egglog", "tensor", "lower") if m in sys.modules)
    clock = _clock
    t0 = clock()
    # the simplifier and everything it imports, the e-graph tier's module included (egglog itself is imported
    # by the first saturation, inside the first batch)
    import rules  # noqa: F401
    from rules.eqsat import saturate_batch, saturator

    t1 = clock()
    with open(path, "rb") as f:  # unpickling needs rewrite/, imported just above; not timed
        exprs = pickle.load(f)
    from rewrite import UOp

    out: dict[str, Any] = {"preloaded": preloaded, "import": [t1[0] - t0[0], t1[1] - t0[1]]}
    steps: list[tuple[str, Callable[[], object]]] = [("first", lambda: full_batch(exprs))]
    if parts:
        # a tiny e-graph loads egglog and its rules (what the first saturation pays), and runs one small batch
        probe = UOp.variable("probe", 0, 9) // 2 < 3
        steps = [("fast", lambda: fast_batch(exprs)), ("egglog_load", lambda: saturate_batch([probe])),
                 ("rest", lambda: full_batch(exprs))]
    for name, fn in steps:
        before = saturator().last  # a new Stats object whenever an e-graph runs
        a = clock()
        fn()
        z = clock()
        out[name] = [z[0] - a[0], z[1] - a[1]]
    st = saturator().last
    ran = st is not before  # the last step (the batch itself) needed an e-graph
    out.update(sat_stop=st.stop if ran else "", sat_roots=st.roots if ran else 0)
    print(json.dumps(out))


_CHILD = "import sys; from benchmarks.bench_symbolic import cold_child; cold_child(sys.argv[1], sys.argv[2] == 'parts')"


class ColdRunner:
    """Fresh processes that simplify one pickled batch; the batch and any cache live in a temporary folder."""

    def __init__(self, exprs: list[UOp], env: dict[str, str]) -> None:
        self.tmp = tempfile.mkdtemp(prefix="bench-symbolic-")
        self.path = os.path.join(self.tmp, "batch.pkl")
        with open(self.path, "wb") as f:
            pickle.dump(list(exprs), f)
        self.env = dict(os.environ, PYTHONPATH=_REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
        if self.env.get("CACHE") != "0":  # a disk cache of our own, never the user's
            self.env["CACHEDIR"] = os.path.join(self.tmp, "cache")

    def __enter__(self) -> ColdRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spawn(self, parts: bool = False) -> tuple[dict[str, Any], float | None]:
        """One child's JSON and the foreign load while it ran."""
        meter, before = LoadMeter(), os.times()
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _CHILD, self.path, "parts" if parts else "whole"], cwd=_REPO,
                           env=self.env, capture_output=True, text=True, check=False)
        wall, after = time.perf_counter() - t0, os.times()
        if p.returncode != 0:
            raise RuntimeError(f"cold child failed: {p.stderr[-2000:]}")
        # LoadMeter counts only this process as ours; the child's CPU time is ours too
        f = meter.foreign()
        kids = (after.children_user + after.children_system) - (before.children_user + before.children_system)
        return json.loads(p.stdout.strip().splitlines()[-1]), (None if f is None else max(0.0, f - kids / wall))

    def many(self, b: Bench, label: str, runs: int, parts: bool = False) -> tuple[list[dict[str, Any]], float | None]:
        data, loads = [], []
        for i in range(runs):
            b.say(f"{label}: cold process {i + 1}/{runs}")
            d, fgn = self.spawn(parts)
            data.append(d)
            if fgn is not None:
                loads.append(fgn)
        return data, (statistics.median(loads) if loads else None)


def run_cold(b: Bench, label: str, exprs: list[UOp], env: dict[str, str], runs: int, prime: bool = False
             ) -> tuple[Result, Result]:
    """Cold first-batch figures from `runs` fresh processes: (first batch alone, import + first batch).
    `prime` runs one process first to fill the on-disk cache the measured ones read."""
    with ColdRunner(exprs, env) as cr:
        if prime:
            cr.spawn()
        data, fgn = cr.many(b, label, runs)
    info = {"preloaded": data[0]["preloaded"], "sat_stop": data[0]["sat_stop"], "sat_roots": data[0]["sat_roots"]}
    first = Result(f"{label} first batch", "ms/batch", [1e3 * d["first"][0] for d in data], False, fgn, info,
                   [1e3 * d["first"][1] for d in data])
    total = Result(f"{label} import+first", "ms/batch", [1e3 * (d["import"][0] + d["first"][0]) for d in data],
                   False, fgn, info, [1e3 * (d["import"][1] + d["first"][1]) for d in data])
    b.record(first)
    b.record(total)
    return first, total


def cold_parts(b: Bench, label: str, exprs: list[UOp], runs: int) -> str:
    """Where a cold first batch's time goes (CACHE=0), as a note: medians of CPU ms over `runs` processes."""
    with ColdRunner(exprs, {"CACHE": "0"}) as cr:
        data, fgn = cr.many(b, f"{label} parts", runs, parts=True)
    med = {k: 1e3 * statistics.median(d[k][1] for d in data) for k in ("import", "fast", "egglog_load", "rest")}
    return (f"import {med['import']:.0f}, fast rules' first pass {med['fast']:.0f}, egglog load + tiny e-graph "
            f"{med['egglog_load']:.0f}, then the full batch {med['rest']:.0f} (its e-graph: "
            f"{data[0]['sat_roots']} roots) [CPU ms, median of {runs}, fgn {'-' if fgn is None else f'{fgn:.2f}'}]")


# ---------------------------------------------------------------------------------------------- the suite


def build_workloads() -> tuple[list[Workload], list[Workload]]:
    """(batches, per-expression pools)."""
    batches: list[Workload] = []
    kernels = kernel_batches()
    for name, exprs in kernels.items():
        batches.append(Workload(f"{name} k{len(exprs)}", exprs, name))
    lanes: list[Workload] = []
    for name, exprs in kernels.items():
        lb = lane_batch(exprs)
        lanes.append(Workload(f"{name} x{len(lb)}", lb, name, True))
    batches += lanes
    rnd = random_batch(seed=7)
    batches.append(Workload(f"random x{len(rnd)}", rnd))
    pool = list(dict.fromkeys(e for w in lanes for e in w.exprs))
    pools = [Workload(f"per-expr kernel {len(pool)}", pool), Workload(f"per-expr random {len(rnd)}", rnd)]
    return batches, pools


@suite("symbolic")
def symbolic(b: Bench) -> None:
    q = b.quick
    fast_runs, slow_runs, cold_runs = (7, 3, 3) if q else (21, 5, 5)
    load0 = os.getloadavg()
    b.say("building workloads")
    batches, pools = build_workloads()
    peer = tinygrad_version()
    if peer is None:
        b.note("tinygrad is not installed: no peer figures (pip install tinygrad==0.14.0)")
    import rules  # noqa: F401
    from rules.eqsat import saturator

    # warm up both sides (matcher compilation, egglog import and rule loading) outside any timed run
    warm = random_batch(seed=99, n=10)
    with no_disk_cache():
        full_batch(warm)
        full_each(warm)
    tg: dict[str, tuple[list[Any], dict[Any, Any]]] = {}
    if peer is not None:
        tinygrad_each(to_tinygrad(warm)[0])
        for w in batches + pools:
            try:
                tg[w.name] = to_tinygrad(w.exprs)
            except Untranslatable as e:
                b.note(f"{w.name}: not translatable to tinygrad ({e})")

    budget_lines: list[str] = []
    with no_disk_cache():
        # most rows last under the 50 ms LoadMeter needs for a reading of its own: one reading over them all
        meter = LoadMeter()
        for w in batches:
            _batch_figures(b, w, tg.get(w.name), fast_runs, saturator)
        for w in pools:
            _pool_figures(b, w, tg.get(w.name), fast_runs, slow_runs)
        fgn_warm = meter.foreign()
        cold: dict[str, list[tuple[str, Result]]] = {}
        parts: dict[str, str] = {}
        for w in (w for w in batches if w.padded):
            first, total = run_cold(b, f"{w.name}/full cold CACHE=0", w.exprs, {"CACHE": "0"}, cold_runs)
            cold[w.name] = [("cold first batch", first), ("cold import+first", total)]
            if not q:
                disk, _ = run_cold(b, f"{w.name}/full cold disk-cached", w.exprs, {"CACHE": "1"}, cold_runs,
                                   prime=True)
                cold[w.name].append(("cold first batch, disk cache filled", disk))
                parts[w.name] = cold_parts(b, w.name, w.exprs, cold_runs)

    b.note("kN: a kernel's own index expressions and gates before the symbolic stage; xN: the same kernel's "
           "padded to ~50 with upcast/unroll lanes; random: seeded generator; per-expr: one call per expression "
           "over all xN expressions / the random batch. Node counts: unique nodes per expression, summed")
    for w in batches:
        s = w.stats
        line = (f"{w.name:<12} nodes {s['in']:>5} -> fast {s['fast']:>4}, full {s['full']:>4}"
                + (f", tinygrad {s['tg']:>4} (its input {s['tg_in']})" if "tg" in s else "")
                + f"; egglog: {s['sat'] or 'not needed (no // % < != left after the fast rules)'}"
                + f"; wrong results: {s['bad']}")
        b.note(line)
    for w in pools:
        s = w.stats
        b.note(f"{w.name:<12} nodes {s['in']:>5} -> fast {s['fast']:>4}, full {s['full']:>4}"
               + (f", tinygrad {s['tg']:>4}" if "tg" in s else ""))
    budget_lines.append(f"budget: a kernel batch in <= {WARM_BUDGET_MS:g} ms median warm, <= {COLD_BUDGET_MS:g} ms"
                        " cold, for the full simplifier (fast rules alone for reference); each figure as wall/cpu"
                        " median ms with a verdict for each (cpu is what to believe when fgn is high)")
    for w in batches:
        if not w.kernel:
            continue
        rows = [("fast", w.stats["r_fast"], WARM_BUDGET_MS), ("warm cached", w.stats["r_cached"], WARM_BUDGET_MS),
                ("warm uncached", w.stats["r_uncached"], WARM_BUDGET_MS)]
        rows += [(label, r, COLD_BUDGET_MS) for label, r in cold.get(w.name, [])]
        budget_lines.append(f"  {w.name:<12} " + "; ".join(_budget(label, r, lim) for label, r, lim in rows))
    budget_lines += [f"  cold parts {name}: {text}" for name, text in parts.items()]
    for ln in budget_lines:
        b.note(ln)
    load1 = os.getloadavg()
    if fgn_warm is not None:
        b.note(f"foreign load over all in-process rows: {fgn_warm:.2f} vCPUs (rows under 50 ms show fgn '-')")
    b.note(f"load average (1/5/15 min) at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, at end "
           f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}; {os.cpu_count()} CPUs; fgn = other processes' load")
    from importlib import metadata

    b.note(f"egglog {metadata.version('egglog')}, Python {sys.version.split()[0]}"
           + (f", tinygrad {peer} (its `symbolic` matcher, what UOp.simplify() runs)" if peer else ""))


def _verdict(ms: float, budget: float) -> str:
    return "PASS" if ms <= budget else "FAIL"


def _budget(label: str, r: Result, limit: float) -> str:
    cpu = r.cpu_median
    if cpu is None:
        return f"{label} {fmt_value(r.median)} {_verdict(r.median, limit)}"
    return f"{label} {fmt_value(r.median)}/{fmt_value(cpu)} {_verdict(r.median, limit)}/{_verdict(cpu, limit)}"


def _per_batch(name: str, fn: Callable[[object], object], runs: int,
               setup: Callable[[], object] | None = None) -> Timed:
    return Timed(name, fn, 1, "ms/batch", setup=setup, runs=runs, per_item=1e3)


def _per_expr(name: str, fn: Callable[[object], object], n: int, runs: int,
              setup: Callable[[], object] | None = None) -> Timed:
    return Timed(name, fn, n, "us/expr", setup=setup, runs=runs, per_item=1e6)


def _batch_figures(b: Bench, w: Workload, tg: tuple[list[Any], dict[Any, Any]] | None, runs: int,
                   saturator: Callable[[], Any]) -> None:
    exprs = w.exprs
    clear_memory_cache()
    before = saturator().last
    full_out = full_batch(exprs)  # fills the memory cache for the cached rows, and gives the e-graph's stats
    st = saturator().last if saturator().last is not before else None  # None: no e-graph was needed
    # timed in turns, so a change in the machine's load falls on all four alike; the uncached runs refill the
    # memory cache, so the cached runs that follow them in the next turn still find it full
    jobs = [_per_batch(f"{w.name}/fast", lambda _: fast_batch(exprs), runs),
            _per_batch(f"{w.name}/full warm cached", lambda _: full_batch(exprs), runs),
            _per_batch(f"{w.name}/full warm uncached", lambda _: full_batch(exprs), runs, clear_memory_cache)]
    if tg is not None:
        texprs = tg[0]
        jobs.append(_per_batch(f"{w.name}/tinygrad", lambda _: tinygrad_batch(texprs), runs))
    res = b.measure_together(jobs)
    fast, cached, uncached = res[:3]
    fast_out = fast_batch(exprs)
    results: dict[str, Sequence[Any]] = {"fast": fast_out, "full": full_out}
    w.stats.update(exprs=len(exprs), r_fast=fast, r_cached=cached, r_uncached=uncached,
                   **{"in": total_nodes(exprs), "fast": total_nodes(fast_out), "full": total_nodes(full_out)},
                   sat=None if st is None else f"{st.roots} roots, {st.iterations} iterations, stop={st.stop}, "
                   f"{1e3 * st.seconds:.1f} ms in egglog")
    if tg is not None:
        tout = tinygrad_batch(tg[0])
        results["tinygrad"] = tout
        w.stats.update(tg=total_nodes(tout), tg_in=total_nodes(tg[0]))
        b.compare(f"{w.name}: fast vs tinygrad", fast, res[3], "tinygrad")
        b.compare(f"{w.name}: full uncached vs tinygrad", uncached, res[3], "tinygrad")
    bad = check_equal(exprs, results, tg[1] if tg is not None else None)
    w.stats["bad"] = ", ".join(f"{k} {v}" for k, v in bad.items())


def _pool_figures(b: Bench, w: Workload, tg: tuple[list[Any], dict[Any, Any]] | None, fast_runs: int,
                  slow_runs: int) -> None:
    exprs = w.exprs
    n = len(exprs)
    full_each(exprs)
    jobs = [_per_expr(f"{w.name}/fast", lambda _: fast_each(exprs), n, fast_runs),
            _per_expr(f"{w.name}/full cached", lambda _: full_each(exprs), n, fast_runs),
            _per_expr(f"{w.name}/full uncached", lambda _: full_each(exprs), n, slow_runs, clear_memory_cache)]
    if tg is not None:
        texprs = tg[0]
        jobs.append(_per_expr(f"{w.name}/tinygrad", lambda _: tinygrad_each(texprs), n, fast_runs))
    res = b.measure_together(jobs)
    w.stats.update(**{"in": total_nodes(exprs), "fast": total_nodes(fast_each(exprs)),
                      "full": total_nodes(full_each(exprs))})
    if tg is not None:
        w.stats["tg"] = total_nodes(tinygrad_each(tg[0]))
        b.compare(f"{w.name}: fast vs tinygrad", res[0], res[3], "tinygrad")
        b.compare(f"{w.name}: full uncached vs tinygrad", res[2], res[3], "tinygrad")
