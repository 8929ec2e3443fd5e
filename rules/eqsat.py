"""E-graph saturation of index expressions: the rules, the interval analysis and the bounded schedule.

What holds after `saturate(u)`: the result equals `u` for every value of its variables within their bounds
(floor `//` and `%`, as rewrite.semantics defines them), and it is the cheapest form the e-graph found within
its budget (fewest ops; `//` and `%` dear unless by a power of two), or `u` itself when nothing cheaper turned
up, the expression is not an index expression, or a tripwire fired. `egraph_bounds(u)` is an interval of `u`
at least as tight as `[u.vmin, u.vmax]`: the e-graph's interval is the intersection over every equivalent form
it found.

Where it runs: after the fast directional rules (rules.symbolic), on the index expressions of one kernel at a
time, behind an in-memory and an on-disk cache. It assumes canonical sums from the fast pass (constants last), so
it needs no general associativity or commutativity, which would explode the e-graph. Two programs: the whole rule
set (`saturate`, `saturate_batch`, `egraph_bounds`: any index expression), and the fast-tier program
(`saturate_fast`, `saturate_fast_batch`: what rules.simplify and the pipeline run on results of the fast rules),
which keeps only the rewrites that can still change such a result (FAST_TIER_RULES, measured below) and is not
called at all where none of them matches (`fast_tier_can_change`). The fast-tier program runs one pass of its
rewrites, gives the products they built their intervals in one step (SEEDS), then saturates the analysis, all in
one egglog command (FAST_TIER_SCHEDULE); that one pass sees the terms as loaded, so its rewrites are matched in
Python as a batch loads (rewrite.egraph_prematch, `fast_tier_prematcher`) and egglog gets what they build as rows,
with the intervals SEEDS would give them computed in Python by the same formulas (rules.eqsat_analysis.seed_bounds),
so that such a batch skips the SEEDS run (~0.5 M instructions of ~5.4 per expression that needs the e-graph).

The rules ("lin" style): interval analysis (rules.eqsat_analysis: one packed `iv` lattice value per e-class,
rewrite.egraph_terms; one rule per op, its cases (a divisor's sign, a comparison known true or false, a known
condition) computed from the bounds rather than a rule each, since egglog 13.2 pays for every rule of a pass; a
point interval is unioned with its constant, which also folds every constant expression through floor division);
identities (subsumed where no other rule needs the matched node); constants oriented right and floated out of sums;
div/mod cancelling guarded by intervals; `(a+b)//m` and `(a+b)%m` split when the remainders cannot carry; nested
`//` and `%`; recombination `x//c*c + x%c -> x` and its remainder forms `x - x%c -> (x//c)*c`, `x - (x//c)*c -> x%c`
(either side may carry the tighter interval); comparisons moved onto the variable; max, where, and, or folding.
Associativity, commutativity and distribution appear only in the bounded forms above. Two different constants in one
e-class, or an empty interval, panic (a tripwire, checked once per iteration: the inputs come back unchanged). The
DSL rules (`eqsat`) are checked like the fast ones by the soundness test generated from the rule list
(tests/rules/test_soundness.py: small boxes, wide boxes, z3), so their guards must also run on Python values:
`divides` instead of `(c1 != 0) & (c0 % c1 == 0)`, which raises on c1 == 0 where egglog just does not match.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rewrite.dsl import Pat, Rule, RuleSet, const, fold, op, var
from rewrite.ops import Ops
from rewrite.uop import ConstValue, UOp
from rules.divmod import divides

if TYPE_CHECKING:
    from rewrite.egraph import Saturator
    from rewrite.egraph_export import Export
    from rewrite.egraph_prematch import PreMatcher
    from rewrite.egraph_terms import Schedule

# The e-graph driver (rewrite.egraph) and the rule export (rewrite.egraph_export) are imported when a program is
# built (`program`, `saturator`), not here: a kernel whose index expressions no fast-tier rule can change
# (`fast_tier_can_change`, most of them) needs only the DSL rules below, and the two cost ~5-7 ms to import.
# So is what only a program needs, made on first access by the module's `__getattr__` (`_eqsat()`, `_schedule()`
# within it): the rule set `eqsat` (~85 rules; `fast_tier_can_change` needs only the five FAST_TIER_RULES, which it
# lists), SCHEDULE and FAST_TIER_SCHEDULE (rewrite.egraph_terms, whose dataclasses Python compiles at import), and
# rules.eqsat_analysis's ANALYSIS, RAW_RULES, SEEDS: with them the import cost ~19 M instructions (callgrind).

# ---------------------------------------------------------------------------------------------- rewrites

x, y, z = var("x"), var("y"), var("z")
c0, c1, c2 = const("c0"), const("c1"), const("c2")


def ordered(p: Pat) -> Pat:
    """The same pattern with every commutative op matched only as written: constants are kept on the right,
    so the e-graph needs one rule where the fast matcher tries both orders."""
    if p.kind != "op" or p.src is None:
        return p
    return Pat("op", ops=p.ops, src=tuple(ordered(s) for s in p.src), name=p.name, dtypes=p.dtypes, arg=p.arg,
               rest=p.rest, ordered=True)


# x less its remainder is its quotient times the divisor, and back (the fast tier's rewrites, FAST_TIER_RULES:
# module-level, since `fast_tier_can_change` matches them without building the whole rule set)
# fmt: off
_FAST_TIER = (
    Rule("sub-mod",         x + (x % c0) * -1,          (x // c0) * c0, when=lambda c0: c0 != 0),
    Rule("sub-div",         x + (x // c0) * c1,         x % c0, when=lambda c0, c1: (c0 != 0) & (c1 == -c0)),
    Rule("mod-sub",         x % c0 + x * -1,            (x // c0) * fold(-c0), when=lambda c0: c0 != 0),
    Rule("sub-mod-scaled",  ordered(x * c2) + (x % c0) * c1, (x // c0) * fold(c0 * c2),
         when=lambda c0, c1, c2: (c0 != 0) & (c1 == -c2)),
    Rule("sub-div-scaled",  ordered(x * c2) + (x // c0) * c1, (x % c0) * c2,
         when=lambda c0, c1, c2: (c0 != 0) & (c1 == -(c0 * c2))),
)


@functools.cache
def _eqsat() -> RuleSet:
    """The rule set `eqsat`, built on first use."""
    return RuleSet("eqsat", [
        # constants to the right (the only commutativity here)
        Rule("add-const-left",  ordered(c0 + x),            x + c0,      when=lambda x: x.vmin < x.vmax),
        Rule("mul-const-left",  ordered(c0 * x),            x * c0,      when=lambda x: x.vmin < x.vmax),
        Rule("max-const-left",  ordered(op.MAX(c0, x)),     x.maximum(c0), when=lambda x: x.vmin < x.vmax),
        Rule("ne-const-left",   ordered(op.CMPNE(c0, x)),   x.ne(c0),    when=lambda x: x.vmin < x.vmax),
        # identities
        Rule("add-zero",        ordered(x + 0),             x),
        Rule("sub-zero",        x - 0,                      x),
        Rule("mul-one",         ordered(x * 1),             x),
        Rule("div-one",         x // 1,                     x),
        Rule("neg-neg",         op.NEG(-x),                 x),
        Rule("sub-self",        x - x,                      0),
        Rule("max-self",        x.maximum(x),               x),
        Rule("and-self",        x & x,                      x),
        Rule("or-self",         x | x,                      x),
        Rule("not-not",         ~(~x),                      x),
        Rule("and-true",        ordered(x & True),          x),
        Rule("or-false",        ordered(x | False),         x),
        Rule("and-not-self",    x & ~x,                     False),
        Rule("or-not-self",     x | ~x,                     True),
        Rule("lt-self",         x < x,                      False),
        Rule("ne-self",         x.ne(x),                    False),
        Rule("where-same",      y.where(x, x),              x),
        Rule("where-true",      op.WHERE(True, x, y),       x),
        Rule("where-false",     op.WHERE(False, x, y),      y),
        Rule("where-not",       (~z).where(x, y),           z.where(y, x)),
        # subtraction and negation as sums, so the sum rules see them; extraction takes whichever is cheaper
        Rule("sub-to-add",      x - y,                      x + y * -1),
        Rule("neg-to-mul",      -x,                         x * -1),
        Rule("add-neg-to-sub",  ordered(x + y * -1),        x - y),
        Rule("mul-neg-one",     ordered(x * -1),            -x),
        # bounded reassociation and distribution
        Rule("add-const-const", ordered((x + c0) + c1),     x + fold(c0 + c1)),
        Rule("mul-const-const", ordered((x * c0) * c1),     x * fold(c0 * c1)),
        Rule("add-float-const", ordered((x + c0) + y),      (x + y) + c0, when=lambda y: y.vmin < y.vmax),
        Rule("mul-dist-const",  ordered((x + c1) * c0),     x * c0 + fold(c1 * c0)),
        Rule("add-collect",     ordered(x * c0 + x * c1),   x * fold(c0 + c1), when=lambda x: x.vmin < x.vmax),
        Rule("add-collect-one", ordered(x * c0 + x),        x * fold(c0 + 1), when=lambda x: x.vmin < x.vmax),
        Rule("add-collect-nest", ordered((y + x * c0) + x * c1), y + x * fold(c0 + c1), when=lambda x: x.vmin < x.vmax),
        Rule("add-self",        x + x,                      x * 2),
        # division and modulo by constants
        Rule("div-mul-cancel",  ordered((x * c0) // c1),    x * fold(c0 // c1),
             when=lambda c0, c1: divides(c1, c0)),
        Rule("mod-mul-zero",    ordered((x * c0) % c1),     0, when=lambda c0, c1: divides(c1, c0)),
        Rule("div-add-mul",     (ordered(x * c0) + y) // c1, x * fold(c0 // c1) + y // c1,
             when=lambda c0, c1: divides(c1, c0)),
        Rule("mod-add-mul",     (ordered(x * c0) + y) % c1, y % c1, when=lambda c0, c1: divides(c1, c0)),
        Rule("div-add-const",   ordered((x + c0) // c1),    (x + fold(c0 % c1)) // c1 + fold(c0 // c1),
             when=lambda c0, c1: (c1 > 0) & ((c0 < 0) | (c0 >= c1))),
        Rule("mod-add-const",   ordered((x + c0) % c1),     (x + fold(c0 % c1)) % c1,
             when=lambda c0, c1: (c1 > 0) & ((c0 < 0) | (c0 >= c1))),
        # the remainders of x and y cannot carry into the quotient
        Rule("div-split",       ordered((x + y) // c0),     x // c0 + y // c0,
             when=lambda x, y, c0: (c0 > 0) & ((x % c0).vmax + (y % c0).vmax < c0)),
        Rule("mod-split",       ordered((x + y) % c0),      x % c0 + y % c0,
             when=lambda x, y, c0: (c0 > 0) & ((x % c0).vmax + (y % c0).vmax < c0)),
        Rule("mod-small",       x % c0,                     x, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)),
        Rule("div-div",         (x // c0) // c1,            x // fold(c0 * c1),
             when=lambda c0, c1: (c0 > 0) & (c1 > 0)),
        Rule("mod-mod",         (x % c0) % c1,              x % c1,
             when=lambda c0, c1: (c0 > 0) & (c1 > 0) & divides(c1, c0)),
        Rule("mod-div",         (x % c0) // c1,             (x // c1) % fold(c0 // c1),
             when=lambda c0, c1: (c0 > 0) & (c1 > 0) & divides(c1, c0)),
        Rule("recombine",       ordered((x // c0) * c0) + x % c0, x),
        Rule("recombine-scaled", ordered((x // c0) * c1) + ordered((x % c0) * c2), x * c2,
             when=lambda c0, c1, c2: c1 == c0 * c2),
        # x less its remainder is its quotient times the divisor, and back: either form can carry the tighter
        # interval (x - x%4 over [0, 100] is [-3, 100] term by term, (x//4)*4 is [0, 100]), and the e-class keeps both
        *_FAST_TIER,
        # comparisons: move constants off the variable's side
        Rule("lt-add-const",    ordered((x + c0) < c1),     x < fold(c1 - c0)),
        Rule("lt-mul-const",    ordered((x * c0) < c1),     x < fold(-((-c1) // c0)), when=lambda c0: c0 > 0),
        Rule("lt-div-const",    (x // c0) < c1,             x < fold(c1 * c0), when=lambda c0: c0 > 0),
        Rule("ne-add-const",    ordered((x + c0).ne(c1)),   x.ne(fold(c1 - c0))),
        Rule("gt-to-lt",        op.CMPGT(x, y),             y < x),
        Rule("ge-to-not-lt",    op.CMPGE(x, y),             ~(x < y)),
        Rule("le-to-not-lt",    op.CMPLE(x, y),             ~(y < x)),
        Rule("eq-to-not-ne",    op.CMPEQ(x, y),             ~x.ne(y)),
        # max by intervals
        Rule("max-left",        ordered(x.maximum(y)),      x, when=lambda x, y: x.vmin >= y.vmax),
        Rule("max-right",       ordered(x.maximum(y)),      y, when=lambda x, y: y.vmin >= x.vmax),
    ])
# fmt: on

# rules whose matched node nothing else needs once it is rewritten: hide it from matching and extraction.
# Only rules that union the node with one of its operands: that class keeps a visible node. A swap such as
# c + x -> x + c must not hide its node: once x turns out to equal c, both sides are the same row, and a
# hidden row is hidden for good, which can leave an e-class with nothing to extract.
SUBSUME = frozenset({
    "add-zero", "sub-zero", "mul-one", "div-one", "neg-neg", "not-not", "and-true", "or-false", "where-true",
    "where-false", "where-same",
})

# the fast tier's rewrites (FAST_TIER_RULES) saturate after a few rounds whatever the input: each makes only
# products, divisions and modulos, and every one of them matches at a sum, so none builds a node a rule matches at
# its root. So one pass of them, then the analysis saturated, in one command (Schedule.fused, Schedule.once): a
# second pass finds a match only where the analysis made new constants or merged classes under a sum, which
# `_rounds` catches on the read-back form. Measured: the same results and intervals as saturating rewrites and
# analysis together on 421 + 3,160 expressions (the family table, the benchmark's random and kernel batches, the
# fuzzer's), at ~25% less time per expression (the second pass's joins, over every new product, division and
# constant, were most of an iteration)
@functools.cache
def _schedule(fast_tier: bool) -> Schedule:
    """SCHEDULE (iterations=8, max_size=20_000, seconds=2.0), or FAST_TIER_SCHEDULE: the same, fused and once."""
    from rewrite.egraph_terms import Schedule

    full = Schedule(iterations=8, max_size=20_000, seconds=2.0)
    return dataclasses.replace(full, fused=True, once=True) if fast_tier else full


# rules that fire only on e-classes that are not a single point (export_rules' point_guard). None: the guard
# reads the class's `lo` and `hi`, which change in every iteration that adds nodes, so egglog 13.2 re-runs
# every guarded rule on those changes too: with it on all rules a random expression that needs the e-graph
# cost 6.4 ms, without it 4.7 ms (CPU, same results on the benchmark's random expressions). A point class
# already holds its Num (iv-point), which extraction prefers, and hide-const-* subsume the constant sums in it.
POINT_GUARD: frozenset[str] = frozenset()


# The rules that can still shrink a result of the fast tier (rules.symbolic), or tighten its interval: the remainder
# forms, which only the e-graph has. Every other rewrite of `eqsat` is one the fast tier has already applied (its
# fixed point holds no SUB, NEG, constant on the left, identity, foldable constant, nested div or mod it could
# merge, ...), so on a fast result it only adds forms no smaller than the input. Measured on 943 distinct fast
# results that rules.worth_saturating lets through (the issue-14 family table, the benchmark's random batch and
# lane-padded kernel batches, 3,600 fuzzer expressions): dropping the other rewrites one group at a time, no
# result got more nodes and no interval got looser, and a saturation per expression cost ~1.1 ms instead of ~4
# (CPU, accumulated e-graph as the benchmark runs it). tests/rules/test_eqsat_prune.py keeps checking it.
FAST_TIER_RULES = frozenset({"sub-mod", "sub-div", "mod-sub", "sub-mod-scaled", "sub-div-scaled"})
# analysis rules for what neither a fast result nor those rules hold: SUB, NEG and the comparisons the fast tier
# turns into < and !=, and operations on two constants (folded by the fast tier; the rules build none): each rule
# of a rule set costs egglog 13.2 time in every run of it, matched or not
FAST_TIER_DEAD_ANALYSIS = frozenset({
    "iv-sub", "iv-neg", "iv-gt", "iv-ge", "iv-le", "iv-eq", "iv-gt-known", "iv-le-known", "iv-ge-known", "iv-eq-known",
    "hide-const-add", "hide-const-sub", "hide-const-mul", "hide-const-max", "hide-const-neg",
})


# and with the rewrites matched in Python, the intervals of constants and variables: every one of them comes with its
# interval (the loaded nodes and the constants the rewrites' right-hand sides make), and no egglog rule makes one
# without it (iv-point's constant joins a class that holds its interval)
PREMATCHED_DEAD_ANALYSIS = frozenset({"iv-num", "iv-var"})


def _without(text: str, names: frozenset[str]) -> str:
    """egglog `text` less the rules named in `names`."""
    from rewrite.egglog_io import split_commands

    forms = split_commands(text)
    keep = [f for f in forms if (m := re.search(r':name "([^"/]+)', f)) is None or m.group(1) not in names]
    return "\n".join(keep) + "\n"


def program(rules: RuleSet | None = None, raw: str | None = None, analysis: str | None = None
            ) -> tuple[str, Export]:
    """The egglog text for the analysis (default ANALYSIS), `rules` (default `eqsat`) exported into rule set
    `rw`, and `raw` rules (default RAW_RULES)."""
    from rewrite.egraph_export import export_rules
    from rules import eqsat_analysis

    rules = _eqsat() if rules is None else rules
    raw = eqsat_analysis.RAW_RULES if raw is None else raw
    analysis = eqsat_analysis.ANALYSIS if analysis is None else analysis

    ex = export_rules(rules, "rw", subsume=SUBSUME, point_guard=POINT_GUARD)
    return f"{analysis}\n(ruleset rw)\n{ex.text}{raw}\n", ex


def _const_right(p: Pat) -> Pat:
    """`p` with every product by a constant matched only as `x * c`: a fast result has its constants on the right
    (rules.symbolic), so the `c * x` variants the export would also write can never match one."""
    if p.kind != "op" or p.src is None:
        return p
    src = tuple(_const_right(s) for s in p.src)
    const_right = p.ops == frozenset({Ops.MUL}) and len(src) == 2 and src[1].kind == "const"
    return Pat("op", ops=p.ops, src=src, name=p.name, dtypes=p.dtypes, arg=p.arg, rest=p.rest,
               ordered=p.ordered or const_right)


def fast_tier_rules() -> RuleSet:
    """The rewrites of FAST_TIER_RULES, each matching products by a constant only as `x * c` (`_const_right`): a
    subset of what the rule of `eqsat` matches, with its right-hand side and guard (so the same soundness)."""
    return RuleSet("eqsat-fast-tier", [Rule(r.name, _const_right(r.lhs), r.rhs, when=r.when) for r in _FAST_TIER])


def fast_tier_program(prematched: bool = False) -> tuple[str, Export]:
    """`program` for results of the fast tier: the rewrites of `fast_tier_rules`, the analysis less
    FAST_TIER_DEAD_ANALYSIS, and SEEDS instead of the raw rules. With `prematched`, no rewrites: the saturator
    matches them in Python on the loaded terms (`fast_tier_prematcher`)."""
    from rules.eqsat_analysis import ANALYSIS, SEEDS

    if prematched:
        dead = FAST_TIER_DEAD_ANALYSIS | PREMATCHED_DEAD_ANALYSIS
        return program(RuleSet("none", []), SEEDS, _without(ANALYSIS, dead))
    return program(fast_tier_rules(), SEEDS, _without(ANALYSIS, FAST_TIER_DEAD_ANALYSIS))


def fast_tier_prematcher() -> PreMatcher:
    """The rewrites of `fast_tier_rules` matched in Python (rewrite.egraph_prematch): under FAST_TIER_SCHEDULE they
    run once, on the e-graph as loaded, so their matches are those on the loaded terms, and the e-graph gets only
    what they build. The same matches, unions and saturated e-graph as the egglog rules of `fast_tier_program`, without
    their ~30 rule runs per expression (10 variants, each joined once per atom of its query), matched or not."""
    from rewrite.egraph_prematch import PreMatcher
    from rules.eqsat_analysis import seed_bounds

    return PreMatcher(fast_tier_rules(), bounds=seed_bounds)


def __getattr__(name: str) -> Any:
    """What the module provides on first access (see the note on imports): `eqsat`, SCHEDULE,
    FAST_TIER_SCHEDULE, and rules.eqsat_analysis's ANALYSIS, RAW_RULES and SEEDS."""
    if name == "eqsat":
        value: Any = _eqsat()
    elif name in ("SCHEDULE", "FAST_TIER_SCHEDULE"):
        value = _schedule(name == "FAST_TIER_SCHEDULE")
    elif name in ("ANALYSIS", "RAW_RULES", "SEEDS"):
        from rules import eqsat_analysis

        value = getattr(eqsat_analysis, name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


_SAT: dict[str, Saturator] = {}
_EXPORT: dict[str, Export] = {}


def saturator(fast_tier: bool = False) -> Saturator:
    """The process-wide saturator (one persistent e-graph; the rules are loaded on first use): the whole rule set
    for any index expression, or with `fast_tier` the rules that can still shrink a fast-tier result."""
    key = "fast" if fast_tier else "full"
    if key not in _SAT:
        from rewrite.egraph import Saturator

        text, ex = fast_tier_program(prematched=True) if fast_tier else program()
        _EXPORT[key] = ex
        sch = _schedule(fast_tier)
        _SAT[key] = Saturator("eqsat-fast" if fast_tier else "eqsat", text, sch,
                              prematch=fast_tier_prematcher() if fast_tier else None)
    return _SAT[key]


def skipped_rules() -> list[tuple[str, str]]:
    """DSL rules of `eqsat` the export could not translate, with the reason (should be empty)."""
    saturator()
    return _EXPORT["full"].skipped


def saturate(u: UOp) -> UOp:
    """The cheapest equivalent form of the index expression `u` the e-graph finds (or `u`)."""
    sat = saturator()
    return hit.uop if (hit := sat.cached(u)) is not None else sat.run([u])[0].uop


def saturate_batch(exprs: Sequence[UOp]) -> list[UOp]:
    """`saturate` for all index expressions of one kernel at once: one e-graph, one packed extraction."""
    return [r.uop for r in saturator().run(exprs)]


_FAST_TIER_SET: list[RuleSet] = []


def fast_tier_can_change(u: UOp) -> bool:
    """Can the fast-tier program change `u` at all? Only where one of its rewrites matches a node of `u` as it is
    (checked with the compiled matcher of the same DSL rules, whose guards read only constants), or where a
    variable's box is a single value (the analysis makes it a constant). Otherwise no rule fires in the e-graph,
    the only unions are the analysis's, and the interval it computes is the fast tier's own (a fast result has no
    node whose interval is one value): the e-graph would give `u` back, at the cost of an egglog call (~1-2 ms).
    tests/rules/test_eqsat_prune.py checks that on its sample."""
    if not _FAST_TIER_SET:
        _FAST_TIER_SET.append(fast_tier_rules())
    rs = _FAST_TIER_SET[0]
    for n in u.toposort():
        if n.op is Ops.PARAM and len(n.src) == 3 and n.vmin == n.vmax:
            return True
        m = rs.matcher(n.op)
        if m is not None and m(n, None) is not None:
            return True
    return False


FAST_TIER_ROUNDS = 3  # e-graph rounds per expression at most (each one on the fast rules' reading of the last)


def _rounds(u: UOp, first: UOp) -> UOp:
    """The fast rules' reading of `first`, the e-graph's form of the fast result `u`, then more e-graph rounds while
    a fast-tier rewrite matches the new form (a point variable made a constant can reorder a sum so that a remainder
    pair becomes adjacent), each kept only if it has no more nodes than the form before it: the extraction prices a
    tree, so a form that drops one use of a shared subterm (`a*-1` used twice) can leave a node more in the graph
    (found by the full simplifier's long fuzz)."""
    from rules.linear import count_nodes
    from rules.symbolic import simplify_fast

    cur, r = u, first
    for i in range(FAST_TIER_ROUNDS):
        if i:
            if not fast_tier_can_change(cur):
                break
            r = saturator(fast_tier=True).run([cur])[0].uop
        if r is cur:
            break
        g = simplify_fast(r)
        if g is cur or count_nodes(g)[0] > count_nodes(cur)[0]:
            break
        cur = g
    return cur


def saturate_fast(u: UOp) -> UOp:
    """`saturate` for a result of the fast tier (rules.symbolic.simplify_fast), with the rules that can still shrink
    one (FAST_TIER_RULES), only where one of them can fire (`fast_tier_can_change`), read back by the fast rules and
    kept only where that has no more nodes than `u` (`_rounds`): what rules.simplify runs."""
    if not fast_tier_can_change(u):
        return u
    sat = saturator(fast_tier=True)
    return _rounds(u, hit.uop if (hit := sat.cached(u)) is not None else sat.run([u])[0].uop)


def saturate_fast_batch(exprs: Sequence[UOp]) -> list[UOp]:
    """`saturate_fast` for the index expressions of one kernel at once (the pipeline's symbolic stage): one e-graph
    for the first round of all of them."""
    todo = [u for u in dict.fromkeys(exprs) if fast_tier_can_change(u)]
    done = dict(zip(todo, (r.uop for r in saturator(fast_tier=True).run(todo)), strict=True)) if todo else {}
    return [_rounds(u, done[u]) if u in done else u for u in exprs]


def egraph_bounds(u: UOp) -> tuple[ConstValue, ConstValue]:
    """The e-graph's interval of `u` intersected with `u`'s own: never looser than `[u.vmin, u.vmax]`."""
    lo, hi = u.vmin, u.vmax
    sat = saturator()
    r = hit if (hit := sat.cached(u)) is not None else sat.run([u])[0]
    if r.lo is not None and r.hi is not None and not isinstance(lo, float):
        lo, hi = max(lo, r.lo), min(hi, r.hi)
        if u.dtype.scalar.is_bool:
            lo, hi = bool(lo), bool(hi)
    return lo, hi


def _leaf_box(u: UOp) -> tuple[int, int] | None:
    if u.op is Ops.PARAM and len(u.src) == 3 and all(s.op is Ops.CONST for s in u.src[1:]):
        return int(u.src[1].value), int(u.src[2].value)
    if u.op is Ops.RANGE and u.src[0].op is Ops.CONST and u.src[0].value > 0:
        return 0, int(u.src[0].value) - 1
    return None


def tier_disagreements(exprs: Sequence[UOp], points: int = 16, seed: int = 0) -> list[str]:
    """The fast tier and saturation checked against each other (a debug and test oracle): for each expression,
    the fast rules' result f and the full result g (saturation of f, then the fast rules again, as
    rules.simplify does). One line for every g with more nodes than f, every one of `points` random assignments
    of the variables and ranges within their boxes where the input, f and g differ (an op that fails, such as a
    division by zero, counts as one more value), and every value of f outside the e-graph's interval of f.
    Expressions over other leaves (loads, casts) are skipped."""
    import random

    from rewrite.errors import EvalError
    from rewrite.evaluate import evaluate
    from rewrite.render import render
    from rules.symbolic import simplify_fast

    rng = random.Random(seed)
    fast = [simplify_fast(e) for e in exprs]
    sat = saturator(fast_tier=True).run(fast)
    out: list[str] = []
    for e, f, r in zip(exprs, fast, sat, strict=True):
        g = simplify_fast(r.uop)
        if len(g.toposort()) > len(f.toposort()):
            out.append(f"larger: {render(e)}: fast {render(f)}, e-graph {render(g)}")
        leaves = [n for n in e.toposort() if n.op in (Ops.PARAM, Ops.RANGE, Ops.SPECIAL)]
        boxes = [_leaf_box(n) for n in leaves]
        known = set(leaves)
        if any(b is None for b in boxes) or any(n.op in (Ops.PARAM, Ops.RANGE, Ops.SPECIAL) and n not in known
                                                for n in g.toposort()):
            continue
        for _ in range(points):
            env: dict[str, int | float | bool] = {}
            for n, box in zip(leaves, boxes, strict=True):
                v = rng.randint(*box) if box is not None else 0
                env[render(n)] = bool(v) if n.dtype.is_bool else v
            vals: list[object] = []
            for u in (e, f, g):
                try:
                    vals.append(evaluate(u, env))
                except EvalError as err:
                    vals.append(f"error {type(err).__name__}")
            if not vals[0] == vals[1] == vals[2]:
                out.append(f"differ at {env}: {render(e)} = {vals[0]}, fast {render(f)} = {vals[1]}, "
                           f"e-graph {render(g)} = {vals[2]}")
                break
            if isinstance(vals[1], int) and r.lo is not None and r.hi is not None and not r.lo <= vals[1] <= r.hi:
                out.append(f"outside the e-graph's interval [{r.lo}, {r.hi}] at {env}: {render(f)} = {vals[1]}")
                break
    return out


# (and, made on first access: eqsat, SCHEDULE, FAST_TIER_SCHEDULE, ANALYSIS, RAW_RULES, SEEDS)
__all__ = ["FAST_TIER_DEAD_ANALYSIS", "FAST_TIER_ROUNDS", "FAST_TIER_RULES",
           "PREMATCHED_DEAD_ANALYSIS", "egraph_bounds", "fast_tier_can_change",
           "fast_tier_prematcher", "fast_tier_program", "ordered",
           "program", "saturate", "saturate_batch", "saturate_fast", "saturate_fast_batch", "saturator",
           "skipped_rules", "tier_disagreements"]
