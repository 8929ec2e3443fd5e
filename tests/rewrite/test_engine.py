"""graph_rewrite and substitute: visit orders, fixed points, sharing, loop detection, deep graphs, ctx, tracing."""

from __future__ import annotations

import gc
from collections import Counter

import pytest

from rewrite import (
    GroupOp,
    Ops,
    RewriteLoopError,
    Rule,
    RuleSet,
    UOp,
    const,
    fold,
    graph_rewrite,
    op,
    substitute,
    tracing,
    var,
)
from rewrite.engine import FixedPoints
from rewrite.env import Context
from rewrite.trace import GLOBAL_LOG

x, y = var("x"), var("y")
c0, c1 = const("c0"), const("c1")
a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
k = UOp.const

ADD_ZERO = Rule("add-zero", x + 0, x)
MUL_ONE = Rule("mul-one", x * 1, x)
MUL_ONE_TO_ADD_ZERO = Rule("mul-one-to-add-zero", x * 1, x + 0)
DEC = Rule("dec", x + c0, x + fold(c0 - 1), when=lambda c0: c0 > 0)
ADD_ADD_CONST = Rule("add-add-const", (x + c0) + c1, x + fold(c0 + c1))


def record(ctx: list[UOp], x: UOp) -> None:
    if x.op in GroupOp.ALU:
        ctx.append(x)


RECORD = RuleSet("record", [Rule("record", x, record)])


def count_and_strip(ctx: Counter[UOp], x: UOp) -> UOp:
    ctx[x] += 1
    return x


# ---------------------------------------------------------------------------- visit order


def test_children_are_tried_before_parents() -> None:
    g = (a + b) * (a - b)
    seen: list[UOp] = []
    assert graph_rewrite(g, RECORD, ctx=seen) is g
    assert set(seen) == {a + b, a - b, g} and len(seen) == 3  # each node tried once
    assert seen[-1] is g


def test_bottom_up_tries_a_node_before_its_children() -> None:
    g = (a + b) * (a - b)
    seen: list[UOp] = []
    assert graph_rewrite(g, RECORD, ctx=seen, bottom_up=True) is g
    assert seen[0] is g and set(seen[1:]) == {a + b, a - b} and len(seen) == 3


def test_walk_tries_children_before_parents_once() -> None:
    g = (a + b) * (a - b)
    seen: list[UOp] = []
    assert graph_rewrite(g, RECORD, ctx=seen, walk=True) is g
    assert set(seen) == {a + b, a - b, g} and len(seen) == 3 and seen[-1] is g


# the three drivers on the same inputs; each row tells at least two of them apart
OUTER = Rule("outer", (x + 0) * c0, x - c0)
# fmt: off
DRIVERS = [
    # (id, rules, input, default, bottom_up, walk)
    ("parent-first",   [ADD_ZERO, OUTER],             (a + 0) * 2,     a * 2,  a - 2,  a * 2),
    ("revisit-result", [MUL_ONE_TO_ADD_ZERO, ADD_ZERO], a * 1,         a,      a,      a + 0),
    ("rebuilt-parent", [MUL_ONE_TO_ADD_ZERO, ADD_ZERO], (a * 1) * 1,   a,      a,      (a + 0) + 0),
    ("result-children", [Rule("neg", op.NEG(x), (x + 0) * 1), ADD_ZERO, MUL_ONE], -(a + 0), a, a, (a + 0) * 1),
]
# fmt: on


@pytest.mark.parametrize(
    ("rules", "g", "default", "bottom_up", "walk"), [pytest.param(*r[1:], id=r[0]) for r in DRIVERS]
)
def test_drivers_differ(rules: list[Rule], g: UOp, default: UOp, bottom_up: UOp, walk: UOp) -> None:
    rs = RuleSet("t", rules)
    assert graph_rewrite(g, rs) is default
    assert graph_rewrite(g, rs, bottom_up=True) is bottom_up
    assert graph_rewrite(g, rs, walk=True) is walk


def test_fixed_point_per_node() -> None:
    rs = RuleSet("t", [DEC, ADD_ZERO])
    with tracing() as log:
        assert graph_rewrite((a + 5) * b, rs) is a * b
    assert log.counts() == Counter({"dec": 5, "add-zero": 1})
    assert graph_rewrite((a + 5) * b, rs, walk=True) is (a + 4) * b


def test_no_rule_fires_returns_the_same_object() -> None:
    g = (a + b) * 3
    assert graph_rewrite(g, RuleSet("t", [ADD_ZERO])) is g
    assert graph_rewrite(g, RuleSet("t", [ADD_ZERO]), bottom_up=True) is g
    assert graph_rewrite(g, RuleSet("t", [ADD_ZERO]), walk=True) is g


# fmt: off
ARITIES = [
    ("0", UOp.sink(),                                  UOp.sink()),
    ("1", -(a + 0),                                    -a),
    ("2", (a + 0) * (b + 0),                           a * b),
    ("3", (a < b).where(a + 0, b + 0),                 (a < b).where(a, b)),
    ("4", UOp.sink(a + 0, b, b + 0, a * 2),            UOp.sink(a, b, b, a * 2)),
]
# fmt: on


@pytest.mark.parametrize("mode", [{}, {"bottom_up": True}, {"walk": True}])
@pytest.mark.parametrize(("g", "expected"), [pytest.param(*r[1:], id=f"{r[0]}-sources") for r in ARITIES])
def test_nodes_of_every_arity_are_rebuilt(g: UOp, expected: UOp, mode: dict[str, bool]) -> None:
    assert graph_rewrite(g, RuleSet("t", [ADD_ZERO]), **mode) is expected


def test_a_sequence_of_rule_sets_is_their_sum() -> None:
    g = (a * 1) + 0
    assert graph_rewrite(g, [RuleSet("one", [ADD_ZERO]), RuleSet("two", [MUL_ONE])]) is a


# ---------------------------------------------------------------------------- sharing


@pytest.mark.parametrize("mode", [{}, {"bottom_up": True}, {"walk": True}])
def test_shared_subgraphs_are_rewritten_once(mode: dict[str, bool]) -> None:
    s = a + 0
    g = (s * s) + (s - (s * s))  # s is used four times, s * s twice
    calls: Counter[UOp] = Counter()
    rs = RuleSet("t", [Rule("strip", x + 0, count_and_strip)])
    assert graph_rewrite(g, rs, ctx=calls, **mode) is (a * a) + (a - (a * a))
    assert calls == Counter({a: 1})


def test_each_node_of_a_diamond_is_tried_once() -> None:
    top = a + b
    left, right = top * 2, top * 3
    g = left - right
    seen: list[UOp] = []
    graph_rewrite(g, RECORD, ctx=seen)
    assert Counter(seen) == Counter({top: 1, left: 1, right: 1, g: 1})


# ---------------------------------------------------------------------------- runaway rule sets


TO_MUL = Rule("to-mul", x + x, x * 2)
TO_ADD = Rule("to-add", x * 2, x + x)


@pytest.mark.parametrize("mode", [{}, {"bottom_up": True}])
def test_a_cycle_raises_and_names_its_rules(mode: dict[str, bool]) -> None:
    with pytest.raises(RewriteLoopError, match="rules on the cycle: to-add, to-mul"):
        graph_rewrite((a + a) - b, RuleSet("t", [TO_MUL, TO_ADD]), **mode)


def test_a_rule_that_undoes_itself_raises() -> None:
    swap = Rule("swap", op.ADD(x, y, ordered=True), lambda x, y: UOp(Ops.ADD, (y, x)))
    with pytest.raises(RewriteLoopError, match="swap"):
        graph_rewrite(a + b, RuleSet("t", [swap]))


def test_a_result_containing_the_node_being_rewritten_raises() -> None:
    with pytest.raises(RewriteLoopError, match="led back to the node being rewritten; rules on the cycle: wrap"):
        graph_rewrite(-a, RuleSet("t", [Rule("wrap", op.NEG(x), op.NEG(op.NEG(x)))]))


def test_walk_does_not_loop_on_a_cycle() -> None:
    assert graph_rewrite(a + a, RuleSet("t", [TO_MUL, TO_ADD]), walk=True) is a * 2


@pytest.mark.parametrize(
    "rule",
    [Rule("bump", x * c0, x * fold(c0 + 1)), Rule("wrap-neg", op.NEG(x), -(x + 0))],
    ids=["new-constant-each-time", "growing-term"],
)
def test_a_runaway_rule_hits_max_steps_and_is_named(rule: Rule) -> None:
    g = -(a * 2) if rule.name == "wrap-neg" else a * 2
    with pytest.raises(RewriteLoopError, match=rf"more than 50 rule firings.*most fired: {rule.name} \(5[01]\)"):
        graph_rewrite(g, RuleSet("t", [rule]), max_steps=50)


def test_max_steps_counts_firings() -> None:
    rs = RuleSet("t", [DEC, ADD_ZERO])
    assert graph_rewrite((a + 100) * b, rs, max_steps=101) is a * b  # 100 decrements and one add-zero
    with pytest.raises(RewriteLoopError, match=r"more than 100 rule firings; most fired: dec \(100\)"):
        graph_rewrite((a + 100) * b, rs, max_steps=100)


# ---------------------------------------------------------------------------- deep graphs (no recursion)


def _chain(leaf: UOp, n: int) -> UOp:
    u, one = leaf, k(1)
    gc.disable()  # building: the collector would traverse the growing chain again and again (half the time)
    try:
        for _ in range(n):
            u = UOp(Ops.ADD, (u, one))
    finally:
        gc.enable()
    return u


def _chain_depth(u: UOp, leaf: UOp) -> int:
    depth, one = 0, k(1)
    while u is not leaf:
        assert u.op is Ops.ADD and u.src[1] is one, u.short()
        u, depth = u.src[0], depth + 1
    return depth


def test_million_node_chain_is_rebuilt_without_recursion() -> None:
    # the leaf rewrites, so every one of the 1M parents is rebuilt and tried again
    n = 1_000_000
    g = _chain(a * 1, n)
    out = graph_rewrite(g, RuleSet("t", [MUL_ONE]))
    del g
    assert _chain_depth(out, a) == n


@pytest.mark.parametrize("mode", [{"bottom_up": True}, {"walk": True}])
def test_deep_chain_other_drivers(mode: dict[str, bool]) -> None:
    n = 200_000
    out = graph_rewrite(_chain(a * 1, n), RuleSet("t", [MUL_ONE]), **mode)
    assert _chain_depth(out, a) == n


def test_deep_chain_that_folds_to_one_node() -> None:
    assert graph_rewrite(_chain(a, 100_000), RuleSet("t", [ADD_ADD_CONST])) is a + 100_000


def test_deep_substitute() -> None:
    out = substitute(_chain(a, 200_000), {a: b})
    assert _chain_depth(out, b) == 200_000


# ---------------------------------------------------------------------------- ctx, gc state


def test_ctx_reaches_callbacks_and_guards() -> None:
    class Ctx:
        allow = False
        seen: list[UOp]

    ctx = Ctx()
    ctx.seen = []

    def note(ctx: Ctx, x: UOp) -> UOp:
        ctx.seen.append(x)
        return x

    rs = RuleSet("t", [Rule("strip", x + 0, note, when=lambda ctx: ctx.allow)])
    assert graph_rewrite(a + 0, rs, ctx=ctx) is a + 0 and ctx.seen == []
    ctx.allow = True
    assert graph_rewrite(a + 0, rs, ctx=ctx) is a and ctx.seen == [a]


_CTX_SEEN: list[object] = []


def test_callbacks_without_ctx_get_none_by_default() -> None:
    _CTX_SEEN.clear()
    graph_rewrite(a + 0, RuleSet("t", [Rule("r", x + 0, lambda ctx, x: _CTX_SEEN.append(ctx))]))
    assert _CTX_SEEN == [None]


def boom(x: UOp) -> UOp:
    raise ValueError("callback failed")


def gc_state(ctx: list[bool], x: UOp) -> None:
    ctx.append(gc.isenabled())


def test_gc_state_is_restored() -> None:
    assert gc.isenabled()
    during: list[bool] = []
    graph_rewrite(a + 0, RuleSet("t", [Rule("probe", x, gc_state)]), ctx=during)
    assert during and not any(during)  # paused while the rewrite runs
    assert gc.isenabled()
    with pytest.raises(ValueError, match="callback failed"):
        graph_rewrite(a + 0, RuleSet("t", [Rule("boom", x + 0, boom)]))
    assert gc.isenabled()
    gc.disable()
    try:
        graph_rewrite(a + 0, RuleSet("t", [ADD_ZERO]))
        assert not gc.isenabled()  # a caller's choice is left alone
    finally:
        gc.enable()


# ---------------------------------------------------------------------------- tracing


def test_tracing_records_stage_rule_before_after() -> None:
    rs = RuleSet("simp", [MUL_ONE, ADD_ZERO])
    with tracing() as log:
        out = graph_rewrite((a * 1) + (b + 0), rs, name="stage-1")
    assert out is a + b
    got = sorted((f.stage, f.rule, f.before.render(), f.after.render()) for f in log.firings)
    assert got == [("stage-1", "add-zero", "(b+0)", "b"), ("stage-1", "mul-one", "(a*1)", "a")]
    assert [f.rule for f in log.made(b)] == ["add-zero"]
    assert log.made(out) == []  # a+b was rebuilt from rewritten children, no rule made it
    assert "[stage-1] mul-one: (a*1) -> a" in log.format()


def test_tracing_defaults_the_stage_to_the_rule_set_name() -> None:
    with tracing() as log:
        graph_rewrite(a + 0, RuleSet("simp", [ADD_ZERO]))
    assert [f.stage for f in log.firings] == ["simp"]


def test_made_follows_a_chain_of_rewrites() -> None:
    with tracing() as log:
        graph_rewrite(a * 1, RuleSet("t", [MUL_ONE_TO_ADD_ZERO, ADD_ZERO]))
    assert [f.rule for f in log.made(a)] == ["mul-one-to-add-zero", "add-zero"]


def test_nothing_is_recorded_outside_tracing_and_trace_env_records_globally() -> None:
    with tracing() as log:
        pass
    graph_rewrite(a + 0, RuleSet("t", [ADD_ZERO]))
    assert log.firings == []
    before = len(GLOBAL_LOG.firings)
    with Context(TRACE=0):
        graph_rewrite(b + 0, RuleSet("t", [ADD_ZERO]))
    assert len(GLOBAL_LOG.firings) == before
    with Context(TRACE=1):
        graph_rewrite(b + 0, RuleSet("t", [ADD_ZERO]))
    assert [(f.rule, f.after) for f in GLOBAL_LOG.firings[before:]] == [("add-zero", b)]
    del GLOBAL_LOG.firings[before:]


def test_nested_tracing_goes_to_the_innermost_log() -> None:
    with tracing() as outer:
        with tracing() as inner:
            graph_rewrite(a + 0, RuleSet("t", [ADD_ZERO]))
        graph_rewrite(b + 0, RuleSet("t", [ADD_ZERO]))
    assert [f.after for f in inner.firings] == [a]
    assert [f.after for f in outer.firings] == [b]


# ---------------------------------------------------------------------------- substitute

c = UOp.variable("c", 0, 10)
# fmt: off
SUBSTITUTE = [
    # (id, graph, mapping, expected)
    ("leaf",              (a + b) * a,        {a: c},              (c + b) * c),
    ("inner-node",        (a + b) * a,        {a + b: c},          c * a),
    ("root",              a + b,              {a + b: c},          c),
    ("not-inside-values", a + b,              {a: a + 1},          (a + 1) + b),
    ("swap",              a - b,              {a: b, b: a},        b - a),
    ("no-match",          a + b,              {c: a},              a + b),
    ("empty",             a * b,              {},                  a * b),
]
# fmt: on


@pytest.mark.parametrize(("g", "mapping", "expected"), [pytest.param(*r[1:], id=r[0]) for r in SUBSTITUTE])
def test_substitute(g: UOp, mapping: dict[UOp, UOp], expected: UOp) -> None:
    assert substitute(g, mapping) is expected
    assert g.substitute(mapping) is expected


def test_substitute_rewrites_shared_nodes_once_and_keeps_sharing() -> None:
    s = a + b
    out = substitute(s * s - s, {a: c})
    t = c + b
    assert out is t * t - t


# ---------------------------------------------------------------------------- fixed points kept across calls


_TRIED: Counter[UOp] = Counter()  # the nodes the probe rule was tried on


def probe(x: UOp) -> None:
    _TRIED[x] += 1


def test_fixed_points_are_kept_across_calls() -> None:
    tried = _TRIED
    tried.clear()
    rs, fp = RuleSet("t", [ADD_ZERO, Rule("probe", x, probe)]), FixedPoints()
    assert graph_rewrite((a + 0) * b, rs, fixed_points=fp) is a * b
    assert fp.table[(a + 0) * b] is a * b and fp.table[a + 0] is a
    first = dict(tried)
    assert graph_rewrite(((a + 0) * b) + 1, rs, fixed_points=fp) is (a * b) + 1
    assert all(tried[u] == n for u, n in first.items())  # what the first call settled is not tried again
    assert tried[(a * b) + 1] == 1
    assert graph_rewrite(((a + 0) * b) + 1, rs) is (a * b) + 1  # the same result without the table


def test_fixed_points_are_bounded_and_dropped_after_a_failure() -> None:
    fp = FixedPoints(limit=2)
    graph_rewrite((a + 0) * (b + 0), RuleSet("t", [ADD_ZERO]), fixed_points=fp)
    assert len(fp) == 0  # the call left more than `limit` entries
    fp = FixedPoints()
    graph_rewrite(a + 0, RuleSet("t", [ADD_ZERO]), fixed_points=fp)
    assert len(fp) > 0
    with pytest.raises(ValueError, match="callback failed"):
        graph_rewrite(b * 1, RuleSet("t", [ADD_ZERO, Rule("boom", x * 1, boom)]), fixed_points=fp)
    assert len(fp) == 0  # entries of the failed call were in progress
    assert graph_rewrite(a + 0, RuleSet("t", [ADD_ZERO]), fixed_points=fp) is a


def test_fixed_points_unused_when_tracing_or_bottom_up() -> None:
    fp = FixedPoints()
    rs = RuleSet("t", [ADD_ZERO])
    graph_rewrite(a + 0, rs, fixed_points=fp)
    with tracing() as log:
        assert graph_rewrite(a + 0, rs, fixed_points=fp) is a
    assert [f.rule for f in log.firings] == ["add-zero"]  # every firing recorded, none looked up
    fp.clear()
    assert graph_rewrite(b + 0, rs, bottom_up=True, fixed_points=fp) is b
    assert len(fp) == 0
