"""Suite `engine`: how fast graph_rewrite and UOp interning are, against tinygrad 0.14 on the same graphs and rules.

Figures (medians of >= 3 runs, more until they agree (benchmarks.runner.converged), a fresh graph built untimed
before each run; sizes per mode in SIZES, in each row's info and note):
  (a) a random integer expression DAG (index dtype, seeded; + * // % max < where over 8 bounded variables)
      rewritten with SYMBOLIC, the 40-rule set below: nodes of the input graph visited per second, and rule
      firings per second (firings counted in a separate traced run);
  (b) a deep chain x = (x + 1) + 0 that the same rules collapse to v0 + n/2;
  (c) interning: building N fresh ADD nodes, and building the same N again (every one a table hit).
With tinygrad installed, the same recipes are built with tinygrad's UOp and rewritten with the same 40 rules
as a tinygrad PatternMatcher (benchmarks/engine_tinygrad.py), and the two results are checked to be the same
graph (ours translated node by node must be tinygrad's result), so both sides do the same work. Our
graph_rewrite pauses Python's cyclic collector while it runs and tinygrad's does not; a second tinygrad row
pauses it too, so the comparison shows what that policy is worth apart from the walk and the matcher.

The rules are self-contained here (not rules/symbolic): the benchmark must not change when the project's
rule sets do. They assume index dtype (floor division, no wrap-around).
"""

from __future__ import annotations

import contextlib
import importlib.util

from benchmarks import engine_graphs
from benchmarks.runner import Bench, Timed, suite
from rewrite import Ops, Rule, RuleSet, UOp, const, fold, graph_rewrite, op, tracing, var

x, y, cond = var("x"), var("y"), var("cond")
c0, c1 = const("c0"), const("c1")


def divides(d: int, n: int) -> bool:
    # a guard helper rather than `(d > 0) & (n % d == 0)`: `&` evaluates both sides, and n % 0 would raise
    return d > 0 and n % d == 0


# fmt: off
SYMBOLIC = RuleSet("bench-symbolic", [
    # identities
    Rule("add-zero",        x + 0,                     x),
    Rule("mul-one",         x * 1,                     x),
    Rule("mul-zero",        x * 0,                     0),
    Rule("idiv-one",        x // 1,                    x),
    Rule("mod-one",         x % 1,                     0),
    Rule("max-self",        x.maximum(x),              x),
    Rule("where-same",      cond.where(x, x),          x),
    Rule("lt-self",         x < x,                     False),
    Rule("idiv-self",       x // x,                    1, when=lambda x: x.vmin > 0),
    Rule("mod-self",        x % x,                     0, when=lambda x: x.vmin > 0),
    # constant folding (a zero divisor declines the rule)
    Rule("fold-add",        c0 + c1,                   fold(c0 + c1)),
    Rule("fold-mul",        c0 * c1,                   fold(c0 * c1)),
    Rule("fold-idiv",       c0 // c1,                  fold(c0 // c1)),
    Rule("fold-mod",        c0 % c1,                   fold(c0 % c1)),
    Rule("fold-max",        c0.maximum(c1),            fold(c0.maximum(c1))),
    Rule("fold-lt",         c0 < c1,                   fold(c0 < c1)),
    Rule("where-true",      op.WHERE(True, x, y),      x),
    Rule("where-false",     op.WHERE(False, x, y),     y),
    # constants to the right
    Rule("add-const-left",  op.ADD(c0, x, ordered=True), x + c0),
    Rule("mul-const-left",  op.MUL(c0, x, ordered=True), x * c0),
    # like terms
    Rule("add-self",        x + x,                     x * 2),
    Rule("add-mul-self",    x * c0 + x,                x * fold(c0 + 1)),
    Rule("add-mul-mul",     x * c0 + x * c1,           x * fold(c0 + c1)),
    # constant reassociation
    Rule("add-add-const",   (x + c0) + c1,             x + fold(c0 + c1)),
    Rule("mul-mul-const",   (x * c0) * c1,             x * fold(c0 * c1)),
    Rule("add-const-out",   (x + c0) + y,              (x + y) + c0),
    Rule("mul-add-const",   (x + c0) * c1,             x * c1 + fold(c0 * c1)),
    Rule("max-max-const",   (x.maximum(c0)).maximum(c1), x.maximum(fold(c0.maximum(c1)))),
    # division and modulo by constants
    Rule("idiv-small",      x // c0,                   0, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)),
    Rule("mod-small",       x % c0,                    x, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)),
    Rule("idiv-idiv",       (x // c0) // c1,           x // fold(c0 * c1), when=lambda c0, c1: (c0 > 0) & (c1 > 0)),
    Rule("mod-mod",         (x % c0) % c1,             x % c1, when=lambda c0, c1: divides(c1, c0)),
    Rule("mul-idiv",        (x * c0) // c1,            x * fold(c0 // c1), when=lambda c0, c1: divides(c1, c0)),
    Rule("mul-mod",         (x * c0) % c1,             0, when=lambda c0, c1: divides(c1, c0)),
    Rule("add-mul-idiv",    (x * c0 + y) // c0,        x + y // c0, when=lambda c0: c0 > 0),
    Rule("add-mul-mod",     (x * c0 + y) % c0,         y % c0, when=lambda c0: c0 > 0),
    # bounds and comparisons
    Rule("max-bounds",      x.maximum(y),              x, when=lambda x, y: x.vmin >= y.vmax),
    Rule("lt-true",         x < y,                     True, when=lambda x, y: x.vmax < y.vmin),
    Rule("lt-false",        x < y,                     False, when=lambda x, y: x.vmin >= y.vmax),
    Rule("lt-add-const",    (x + c0) < c1,             x < fold(c1 - c0)),
])
# fmt: on

_BINARY = {"add": Ops.ADD, "mul": Ops.MUL, "idiv": Ops.IDIV, "mod": Ops.MOD, "max": Ops.MAX, "lt": Ops.CMPLT}


def build(steps: list[tuple]) -> UOp:
    """Our UOp graph for a recipe (see engine_graphs); returns the SINK."""
    nodes: list[UOp] = []
    for s in steps:
        k = s[0]
        if k == "var":
            u = UOp.variable(s[1], s[2], s[3])
        elif k == "const":
            u = UOp.const(s[1])
        elif k == "where":
            u = UOp(Ops.WHERE, (nodes[s[1]], nodes[s[2]], nodes[s[3]]))
        elif k == "sink":
            u = UOp(Ops.SINK, tuple(nodes[i] for i in s[1]))
        else:
            u = UOp(_BINARY[k], (nodes[s[1]], nodes[s[2]]))
        nodes.append(u)
    return nodes[-1]


def expr_size(root: UOp) -> int:
    """Nodes of an expression with variables as leaves (their bound constants are not part of it)."""
    seen: set[UOp] = set()
    stack = [root]
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u.op is not Ops.PARAM:
            stack.extend(u.src)
    return len(seen)


def rewrite(g: UOp) -> UOp:
    return graph_rewrite(g, SYMBOLIC)


def count_firings(steps: list[tuple]) -> int:
    with tracing() as log:
        rewrite(build(steps))
    return len(log.firings)


# ---------------------------------------------------------------------------- the suite


def tinygrad_version() -> str | None:
    """The installed tinygrad's version, or None: the peer figures need it, the suite does not."""
    if importlib.util.find_spec("tinygrad") is None:
        return None
    from importlib import metadata

    return metadata.version("tinygrad")


# nodes in the dag, the chain, and built for interning, per mode: rates per node hardly change past ~10k nodes
# (the walk and the matcher are linear), so the default run's sizes are a third of --full's 100k/200k/200k
SIZES = {"quick": (10_000, 20_000, 20_000), "default": (30_000, 60_000, 100_000),
         "full": (100_000, 200_000, 200_000)}


@suite("engine")
def engine(b: Bench) -> None:
    n_dag, n_chain, n_intern = SIZES[b.mode]
    dag = engine_graphs.random_dag(n_dag, seed=1)
    deep = engine_graphs.chain(n_chain)
    peer = tinygrad_version()
    if peer is None:
        b.note("tinygrad is not installed: no peer figures (pip install tinygrad==0.14.0)")
    else:
        from benchmarks import engine_tinygrad as tg

        b.note(f"peer: tinygrad {peer}, same recipe built with its UOp API, same 40 rules as a PatternMatcher")

    # compile the matchers of both sides on a small graph first: the timed runs measure rewriting only
    warm = engine_graphs.random_dag(3000, seed=99)
    rewrite(build(warm))
    if peer is not None:
        tg.rewrite(tg.build(warm))

    cases: list[tuple[str, list[tuple]]] = [("dag", dag), ("chain", deep), ("intern", [])]
    for label, steps in b.cases(cases, lambda c: f"{c[0]} ({len(c[1]) or n_intern} nodes)"):
        if label == "intern":
            _interning(b, n_intern, peer is not None)
            continue
        g = build(steps)
        n_in, out = len(g.toposort()), rewrite(g)
        size_in, size_out = expr_size(g), expr_size(out)
        firings = count_firings(steps)
        del g, out
        line = f"{label}: {n_in} nodes in (expression {size_in}), ours -> {size_out} nodes, {firings} firings"
        jobs = [Timed(f"{label}/ours", rewrite, n_in, "nodes/s", setup=lambda s=steps: build(s),
                      info={"nodes_in": n_in, "expr_in": size_in, "expr_out": size_out, "firings": firings})]
        if peer is not None:
            with tg.deep_stack():
                tg_in = tg.build(steps)
                tg_n_in, tg_out = len(tg_in.toposort()), tg.rewrite(tg_in)
                same = tg.same_graph(tg.translate(rewrite(build(steps))), tg_out)
                tg_size_out, tg_firings = tg.expr_size(tg_out), tg.count_firings(steps)
                del tg_in, tg_out
            line += (f"; tinygrad -> {tg_size_out} nodes, {tg_firings} firings; results identical: "
                     f"{'yes' if same else 'NO'}")
            tg_setup = lambda s=steps: tg.build(s)
            jobs += [Timed(f"{label}/tinygrad", tg.rewrite, n_in, "nodes/s", setup=tg_setup,
                           info={"nodes_in": tg_n_in, "expr_out": tg_size_out, "firings": tg_firings,
                                 "same_result": same}),
                     Timed(f"{label}/tinygrad gc paused", tg.rewrite_gc_paused, n_in, "nodes/s", setup=tg_setup)]
        with tg.deep_stack() if peer is not None else contextlib.nullcontext():
            ours, *theirs = b.measure_together(jobs)
        b.rate_from(ours, f"{label}/ours firings", "firings/s", firings)
        if theirs:
            b.compare(f"{label} rewrite (nodes/s)", ours, theirs[0], "tinygrad")
            b.compare(f"{label} rewrite, peer gc paused", ours, theirs[1], "tinygrad")
        b.note(line)


def _interning(b: Bench, n: int, with_peer: bool) -> None:
    v = UOp.variable("v", 0, 100)
    consts = [UOp.const(i) for i in range(n)]

    def make(_: object) -> list[UOp]:
        return [UOp(Ops.ADD, (v, c)) for c in consts]

    fresh = [Timed("intern/ours fresh", make, n, "ns/node", per_item=1e9)]
    hit = [Timed("intern/ours hit", make, n, "ns/node", per_item=1e9)]
    if with_peer:
        from benchmarks import engine_tinygrad as tg

        tmake = tg.intern_maker(n)
        fresh.append(Timed("intern/tinygrad fresh", tmake, n, "ns/node", per_item=1e9))
        hit.append(Timed("intern/tinygrad hit", tmake, n, "ns/node", per_item=1e9))
    rf = b.measure_together(fresh)
    kept = [job.fn(None) for job in hit]  # from here on, every node built is already interned
    rh = b.measure_together(hit)
    del kept
    if with_peer:
        b.compare("intern fresh (ns/node)", rf[0], rf[1], "tinygrad")
        b.compare("intern hit (ns/node)", rh[0], rh[1], "tinygrad")
