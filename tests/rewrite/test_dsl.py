"""The rule DSL and the compiled matcher, as tables of "pattern on node => fires or not" and "rule on node => result".

`fire(rule, node)` asks the compiled matcher about `node` itself (not its children), so each row tests one
match decision; rules whose result matters are checked through graph_rewrite as well.
"""

from __future__ import annotations

import pytest

from rewrite import (
    AxisType,
    GroupOp,
    Ops,
    Rule,
    RuleError,
    RuleSet,
    UOp,
    const,
    dtypes,
    fold,
    graph_rewrite,
    op,
    var,
)

x, y, z, cond = var("x"), var("y"), var("z"), var("cond")
c0, c1 = const("c0"), const("c1")

a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)
n = UOp.variable("n", -5, 5)
p, q = UOp.variable("p", 0, 10, dtypes.int32), UOp.variable("q", 0, 10, dtypes.int32)
w = UOp.variable("w", 0, 10, dtypes.int64)
f = UOp.param(0, dtypes.float32, (2, 3))
k = UOp.const

MARK = UOp.const(-12345)  # what `mark` returns: a result no rule here could produce by accident


def mark() -> UOp:
    return MARK


def fire(rule: Rule | RuleSet, node: UOp, ctx: object = None) -> UOp | None:
    """The rule set's result on `node` itself, or None when no rule fires."""
    rs = rule if isinstance(rule, RuleSet) else RuleSet("t", [rule])
    m = rs.matcher(node.op)
    res = None if m is None else m(node, ctx)
    return None if res is None else res[0]  # type: ignore[index]


def rw(rule: Rule | RuleSet, node: UOp, **kw: object) -> UOp:
    return graph_rewrite(node, rule if isinstance(rule, RuleSet) else RuleSet("t", [rule]), **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- which nodes a pattern matches

# fmt: off
MATCHES = [
    # op sets
    ("op-set-add",            op[Ops.ADD, Ops.MUL](x, y),          a + b,                   True),
    ("op-set-mul",            op[Ops.ADD, Ops.MUL](x, y),          a * b,                   True),
    ("op-set-not-max",        op[Ops.ADD, Ops.MUL](x, y),          a.maximum(b),            False),
    ("group-binary-max",      op[GroupOp.Binary](x, y),            a.maximum(b),            True),
    ("group-binary-idiv",     op[GroupOp.Binary](x, y),            a // b,                  True),
    ("group-binary-not-sub",  op[GroupOp.Binary](x, y),            a - b,                   False),
    ("group-plus-op",         op[GroupOp.Comparison, Ops.ADD](x, y), a < b,                 True),
    ("sugar-add",             x + y,                               a + b,                   True),
    ("sugar-add-not-mul",     x + y,                               a * b,                   False),
    ("sugar-sub",             x - y,                               a - b,                   True),
    ("sugar-neg",             -x,                                  -a,                      True),
    ("sugar-where",           cond.where(x, y),                    (a < b).where(a, b),     True),
    ("nested-op",             (x + y) * z,                         (a + b) * a,             True),
    ("nested-op-wrong-inner", (x + y) * z,                         (a * b) * a,             False),
    # dtype constraints
    ("dtype-index",           var("x", dtypes.index) + y,          a + b,                   True),
    ("dtype-index-not-int32", var("x", dtypes.index) + y,          p + q,                   False),
    ("dtype-set-int32",       var("x", {dtypes.int32, dtypes.int64}) + y, p + q,            True),
    ("dtype-set-int64",       var("x", {dtypes.int32, dtypes.int64}) + y, w + w,            True),
    ("dtype-set-not-index",   var("x", {dtypes.int32, dtypes.int64}) + y, a + b,            False),
    ("dtype-on-op",           op.ADD(x, y, dtype=dtypes.int32),    p + q,                   True),
    ("dtype-on-op-not",       op.ADD(x, y, dtype=dtypes.int32),    a + b,                   False),
    ("dtype-const",           x + const("c", dtypes.int32),        p + 1,                   True),
    ("dtype-const-not",       x + const("c", dtypes.int32),        a + 1,                   False),
    # constants: any, or one value
    ("const-any",             x + c0,                              a + 7,                   True),
    ("const-not-a-var",       x + c0,                              a + b,                   False),
    ("const-value",           x + 0,                               a + 0,                   True),
    ("const-value-other",     x + 0,                               a + 1,                   False),
    ("const-bool-true",       op.WHERE(True, x, y),                k(True).where(a, b),     True),
    ("const-bool-false",      op.WHERE(True, x, y),                k(False).where(a, b),    False),
    ("const-bool-not-int",    x * True,                            a * 1,                   False),
    # a name used twice is the same node
    ("repeat-same",           x + x,                               a + a,                   True),
    ("repeat-different",      x + x,                               a + b,                   False),
    ("repeat-nested",         (x // y) + x,                        (a // b) + a,            True),
    ("repeat-nested-swapped", (x // y) + x,                        a + (a // b),            True),
    ("repeat-nested-not",     (x // y) + x,                        (a // b) + b,            False),
    ("repeat-deep",           (x * y) + (x * z),                   (a * b) + (a * 3),       True),
    ("repeat-deep-swapped",   (x * y) + (x * z),                   (a * b) + (b * 3),       True),  # x=b, y=a
    ("repeat-deep-none",      (x * y) + (x * z),                   (a * b) + (n * 3),       False),
    # commutative ops match either order; ordered=True and non-commutative ops do not
    ("comm-right",            x + 1,                               a + 1,                   True),
    ("comm-left",             x + 1,                               1 + a,                   True),
    ("comm-nested",           (x + c0) * c1,                       3 * (2 + a),             True),
    ("comm-max",              x.maximum(c0),                       k(3).maximum(a),         True),
    ("comm-cmpne",            x.ne(c0),                            k(3).ne(a),              True),
    ("ordered-right",         op.ADD(x, 1, ordered=True),          a + 1,                   True),
    ("ordered-left",          op.ADD(x, 1, ordered=True),          1 + a,                   False),
    ("noncomm-sub",           x - 1,                               1 - a,                   False),
    ("noncomm-idiv",          x // c0,                             k(4) // a,               False),
    ("noncomm-lt",            x < c0,                              k(4) < a,                False),
    # source counts: exact, rest=True, and no sources listed
    ("sink-exact",            op.SINK(x, y),                       UOp.sink(a, b),          True),
    ("sink-exact-longer",     op.SINK(x, y),                       UOp.sink(a, b, n),       False),
    ("sink-exact-shorter",    op.SINK(x, y),                       UOp.sink(a),             False),
    ("sink-rest",             op.SINK(x, y, rest=True),            UOp.sink(a, b, n),       True),
    ("sink-rest-exact",       op.SINK(x, y, rest=True),            UOp.sink(a, b),          True),
    ("sink-rest-shorter",     op.SINK(x, y, rest=True),            UOp.sink(a),             False),
    ("sink-rest-first",       op.SINK(c0, rest=True),              UOp.sink(k(1), a),       True),
    ("sink-rest-first-not",   op.SINK(c0, rest=True),              UOp.sink(a, k(1)),       False),
    ("sink-rest-only",        op.SINK(rest=True),                  UOp.sink(a, b, n),       True),
    ("sink-no-src-any-3",     op.SINK(),                           UOp.sink(a, b, n),       True),
    ("sink-no-src-any-1",     op.SINK(),                           UOp.sink(a),             True),
    # arg= constraints
    ("arg-cast",              op.CAST(x, arg=dtypes.int32),        a.cast(dtypes.int32),    True),
    ("arg-cast-not",          op.CAST(x, arg=dtypes.int32),        a.cast(dtypes.int64),    False),
    ("cast-sugar",            x.cast(dtypes.int32),                a.cast(dtypes.int32),    True),
    ("cast-sugar-not",        x.cast(dtypes.int32),                a.cast(dtypes.float32),  False),
    ("cast-sugar-any",        x.cast(),                            a.cast(dtypes.float32),  True),
    ("arg-range",             op.RANGE(x, arg=(0, AxisType.LOOP)), UOp.range(4, 0),         True),
    ("arg-range-not",         op.RANGE(x, arg=(0, AxisType.LOOP)), UOp.range(4, 1),         False),
    # a bare var matches every op, constants included
    ("var-root",              var("x", dtypes.bool),               a < b,                   True),
    ("var-root-not",          var("x", dtypes.bool),               a + b,                   False),
]
# fmt: on

@pytest.mark.parametrize(("pat", "node", "matches"), [pytest.param(pt, nd, m, id=i) for i, pt, nd, m in MATCHES])
def test_matches(pat: object, node: UOp, matches: bool) -> None:
    got = fire(Rule("probe", pat, mark), node)  # type: ignore[arg-type]
    assert (got is MARK) == matches, f"{pat!r} on {node.render()}: expected {'a' if matches else 'no'} match"


def test_capture_binds_the_matched_node() -> None:
    def pick(x: UOp, y: UOp) -> UOp:
        return x - y

    # 3 + a: the constant is y whichever side it is on
    assert fire(Rule("r", x + const("y"), pick), 3 + a) is a - 3
    assert fire(Rule("r", x + const("y"), pick), a + 3) is a - 3
    # the op set's captured node is the node itself
    assert fire(Rule("r", op[Ops.ADD, Ops.MUL](x, y, name="m"), lambda m: -m), a * b) is -(a * b)


def test_ordered_only_tries_the_written_order() -> None:
    tried: list[tuple[UOp, UOp]] = []
    fire(Rule("r", op.ADD(x, y, ordered=True), lambda ctx, x, y: ctx.append((x, y))), a + b, tried)
    assert tried == [(a, b)]
    tried.clear()
    fire(Rule("r", x + y, lambda ctx, x, y: ctx.append((x, y))), a + b, tried)
    assert tried == [(a, b), (b, a)]  # the written order first, then the swapped one


# ---------------------------------------------------------------------------- guards


def _big(c0: int) -> bool:
    return c0 > 1


# fmt: off
GUARDS = [
    # (id, rule, node, fires)
    ("const-value-yes",   Rule("r", x * c0, mark, when=lambda c0: c0 > 1),                        a * 3,    True),
    ("const-value-no",    Rule("r", x * c0, mark, when=lambda c0: c0 > 1),                        a * 1,    False),
    ("module-function",   Rule("r", x * c0, mark, when=_big),                                     a * 2,    True),
    ("and-both",          Rule("r", x * c0, mark, when=lambda c0: (c0 > 1) & (c0 < 5)),            a * 3,    True),
    ("and-one",           Rule("r", x * c0, mark, when=lambda c0: (c0 > 1) & (c0 < 5)),            a * 7,    False),
    ("or-one",            Rule("r", x * c0, mark, when=lambda c0: (c0 < 1) | (c0 > 5)),            a * 7,    True),
    ("or-none",           Rule("r", x * c0, mark, when=lambda c0: (c0 < 1) | (c0 > 5)),            a * 3,    False),
    ("opposite-cmp",      Rule("r", x * c0, mark, when=lambda c0: c0 != 0),                        a * 0,    False),
    ("vmin-vmax-yes",     Rule("r", x // c0, mark, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)), a // 11, True),
    ("vmin-vmax-edge",    Rule("r", x // c0, mark, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)), a // 10, False),
    ("vmin-negative",     Rule("r", x // c0, mark, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)), n // 11, False),
    ("vmin-of-expr",      Rule("r", x < y, mark, when=lambda x, y: x.vmax < y.vmin),   (a + 1) < (b + 20), True),
    ("vmin-of-expr-no",   Rule("r", x < y, mark, when=lambda x, y: x.vmax < y.vmin),   (a + 1) < (b + 10), False),
    ("two-consts",        Rule("r", (x + c0) + c1, mark, when=lambda c0, c1: c0 + c1 == 0),       (a + 3) + -3, True),
    ("two-consts-no",     Rule("r", (x + c0) + c1, mark, when=lambda c0, c1: c0 + c1 == 0),       (a + 3) + 3, False),
    ("ctx-yes",           Rule("r", x + y, mark, when=lambda ctx, x: x in ctx),                   a + b,    True),
]
# fmt: on

@pytest.mark.parametrize(("rule", "node", "fires"), [pytest.param(r, nd, fi, id=i) for i, r, nd, fi in GUARDS])
def test_guards(rule: Rule, node: UOp, fires: bool) -> None:
    assert (fire(rule, node, ctx={a}) is MARK) == fires


def test_guard_failure_tries_the_other_order_and_the_next_rule() -> None:
    # the first binding (x=a, y=b) fails the guard, the swapped one passes
    r = Rule("r", x.maximum(y), lambda x: x, when=lambda x, y: x.vmin >= y.vmax)
    assert fire(r, a.maximum(b + 20)) is b + 20
    rs = RuleSet("t", [Rule("never", x + y, mark, when=lambda x: x.vmin > 100), Rule("then", x + y, lambda y: y)])
    assert fire(rs, a + k(1)) is k(1)


# ---------------------------------------------------------------------------- right-hand sides


def _double(c0: int) -> int:
    return c0 * 2


# fmt: off
RESULTS = [
    # (id, rule, node, expected result of graph_rewrite)
    ("template-capture",     Rule("r", x + 0, x),                                  a + 0,           a),
    ("template-ops",         Rule("r", x * c0 + x, x * fold(c0 + 1)),               a * 3 + a,       a * 4),
    ("template-new-op",      Rule("r", x - y, x + -y),                             a - b,           a + -b),
    ("template-literal",     Rule("r", op.NEG(x), x * -1),                         -a,              a * -1),
    ("fold-expr",            Rule("r", (x + c0) + c1, x + fold(c0 + c1)),           (a + 2) + 3,     a + 5),
    ("fold-expr-nested",     Rule("r", (x * c0) < c1, x < fold((c1 + c0 - 1) // c0)), (a * 4) < 10, a < 3),
    ("fold-wraps-int32",     Rule("r", (x + c0) + c1, x + fold(c0 + c1)),  (p + (2**31 - 1)) + 1, p + (-(2**31))),
    ("fold-floor-div",       Rule("r", x + (c0 // c1), x + fold(c0 // c1)),         a + (k(-7) // k(2)), a + -4),
    ("fold-callable",        Rule("r", x * c0, x + fold(_double)),                 a * 5,           a + 10),
    ("fold-callable-lambda", Rule("r", x * c0, x + fold(lambda c0, x: c0 + x.vmax)), a * 5,         a + 15),
    ("fold-div-zero",        Rule("r", c0 // c1, fold(c0 // c1)),                  k(3) // k(0),    k(3) // k(0)),
    ("fold-mod-zero",        Rule("r", c0 % c1, fold(c0 % c1)),                    k(3) % k(0),     k(3) % k(0)),
    ("fold-div-nonzero",     Rule("r", c0 // c1, fold(c0 // c1)),                  k(7) // k(2),    k(3)),
    ("fold-lt-bool",         Rule("r", c0 < c1, fold(c0 < c1)),                    k(1) < k(2),     k(True)),
    ("number",               Rule("r", x * 0, 0),                                  a * 0,           k(0)),
    ("number-int32",         Rule("r", x * 0, 0),                                  p * 0,           k(0, dtypes.int32)),
    ("number-bool",          Rule("r", x < x, False),                              a < a,           k(False)),
    ("callable",             Rule("r", x + y, lambda x, y: x * y),                 a + b,           a * b),
    ("callable-none",        Rule("r", x + y, lambda x: None),                     a + b,           a + b),
    ("callable-same-node",   Rule("r", op.ADD(x, y, ordered=True), lambda x, y: x + y), a + b,    a + b),
]
# fmt: on


@pytest.mark.parametrize(("rule", "node", "expected"), [pytest.param(r, nd, e, id=i) for i, r, nd, e in RESULTS])
def test_results(rule: Rule, node: UOp, expected: UOp) -> None:
    got = rw(rule, node)
    assert got is expected, f"{rule!r} on {node.render()}: got {got.render()}, expected {expected.render()}"


def test_template_literals_take_the_siblings_dtype() -> None:
    # WHERE: the literal branch takes the other branch's dtype (not the condition's bool)
    r = rw(Rule("r", op.MAX(x, 0), (x < 0).where(0, x)), p.maximum(0))
    assert r is (p < 0).where(0, p)
    assert r.dtype is dtypes.int32 and r.src[1].dtype is dtypes.int32 and r.src[0].src[1].dtype is dtypes.int32
    # CAST: a literal next to a cast takes the cast's dtype
    r = rw(Rule("r", op.NEG(x), x.cast(dtypes.int32) + 1), -a)
    assert r is a.cast(dtypes.int32) + k(1, dtypes.int32)
    # a fold next to a capture takes that capture's dtype
    r = rw(Rule("r", x * c0, x + fold(c0 + 1)), p * 2)
    assert r.src[1] is k(3, dtypes.int32)


def test_template_literals_take_the_siblings_shape() -> None:
    r = rw(Rule("r", op.NEG(x), x * -1), -f)
    assert r.shape == (2, 3) and r.src[1] is f.const_like(-1.0)
    r = rw(Rule("r", op.NEG(x), 0), -f)
    assert r is f.const_like(0.0) and r.shape == (2, 3)


def test_callable_gets_ctx() -> None:
    seen: list[UOp] = []
    rw(Rule("r", x + y, lambda ctx, x: ctx.append(x)), a + b, ctx=seen)
    assert seen and seen[0] in (a, b)


def test_first_match_wins_and_a_declining_callable_passes_on() -> None:
    rs = RuleSet("t", [Rule("declines", x + y, lambda x: None), Rule("first", x + y, lambda x: x),
                       Rule("second", x + y, lambda y: y)])
    assert fire(rs, a + b) is a
    assert fire(rs.only(lambda r: r.name != "first"), a + b) is b


# ---------------------------------------------------------------------------- malformed rules

k_global = 3


def _closure_rule() -> Rule:
    k_local = 3
    return Rule("r", x + y, lambda x: x * k_local)


def _closure_guard() -> Rule:
    lim = 3
    return Rule("r", x + c0, x, when=lambda c0: c0 > lim)


def _closure_fold() -> Rule:
    extra = 1
    return Rule("r", x + c0, x + fold(lambda c0: c0 + extra))


# fmt: off
MALFORMED = [
    ("guard-unknown",        lambda: Rule("r", x + y, x, when=lambda w: w > 0),                 "when= takes w"),
    ("callback-unknown",     lambda: Rule("r", x + y, lambda x, w: x),                          "takes w"),
    ("template-unknown",     lambda: Rule("r", x + y, z),                                       "template uses 'z'"),
    ("template-unknown-deep", lambda: Rule("r", x + y, x * (z + 1)),                            "template uses 'z'"),
    ("fold-unknown",         lambda: Rule("r", x + y, fold(c0 + 1)),                            "fold() uses 'c0'"),
    ("fold-callable-unknown", lambda: Rule("r", x + y, fold(lambda q: q)),                      "fold() takes q"),
    ("closure-rhs",          _closure_rule,                                                     "closure over k_local"),
    ("closure-guard",        _closure_guard,                                                    "closure over lim"),
    ("closure-fold",         _closure_fold,                                                     "closure over extra"),
    ("name-camel",           lambda: Rule("AddZero", x + 0, x),                                 "kebab-case"),
    ("name-snake",           lambda: Rule("add_zero", x + 0, x),                                "kebab-case"),
    ("name-space",           lambda: Rule("add zero", x + 0, x),                                "kebab-case"),
    ("name-leading-dash",    lambda: Rule("-add", x + 0, x),                                    "kebab-case"),
    ("name-double-dash",     lambda: Rule("add--zero", x + 0, x),                               "kebab-case"),
    ("name-empty",           lambda: Rule("", x + 0, x),                                        "kebab-case"),
    ("lhs-number",           lambda: Rule("r", 3, x),                                           "left-hand side"),
    ("lhs-fold",             lambda: Rule("r", fold(c0 + 1), x),                                "left-hand side"),
    ("rhs-string",           lambda: Rule("r", x + 0, "x"),                                     "right-hand side"),
    ("template-op-set",      lambda: Rule("r", x + y, op[Ops.ADD, Ops.MUL](x, y)),              "one op"),
    ("template-wildcard",    lambda: Rule("r", x + y, op.ADD(x, op.NEG(rest=True))),            "needs its sources"),
    ("operand-string",       lambda: x + "y",                                                   "pattern or a number"),
    ("duplicate-names",      lambda: RuleSet("s", [Rule("r", x + 0, x), Rule("r", x * 1, x)]), "named 'r'"),
    ("duplicate-via-plus",   lambda: RuleSet("s", [Rule("r", x + 0, x)]) + RuleSet("t", [Rule("r", x * 1, x)]),
                                                                                                "named 'r'"),
    ("not-a-rule",           lambda: RuleSet("s", [x + 0]),                                     "is not a Rule"),
]
# fmt: on


@pytest.mark.parametrize(("make", "message"), [pytest.param(m, msg, id=i) for i, m, msg in MALFORMED])
def test_malformed_rules_fail_at_definition(make: object, message: str) -> None:
    with pytest.raises(RuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()  # type: ignore[operator]


def test_a_module_global_is_not_a_closure() -> None:
    r = Rule("r", x + y, lambda x: x * k_global)
    assert fire(r, a + b) is a * 3


# ---------------------------------------------------------------------------- rule sets


def test_ruleset_plus_keeps_order_and_only_filters() -> None:
    r1, r2, r3 = Rule("add-zero", x + 0, x), Rule("mul-one", x * 1, x), Rule("add-self", x + x, x * 2)
    s1, s2 = RuleSet("one", [r1, r2]), RuleSet("two", [r3])
    both = s1 + s2
    assert [r.name for r in both] == ["add-zero", "mul-one", "add-self"]
    assert both.name == "one+two" and len(both) == 3
    assert both["mul-one"] is r2
    with pytest.raises(KeyError):
        both["nope"]
    adds = both.only(lambda r: r.name.startswith("add"))
    assert [r.name for r in adds] == ["add-zero", "add-self"]
    assert rw(adds, (a * 1) + 0) is a * 1  # mul-one was filtered out
    assert rw(both, (a * 1) + 0) is a
    # composing a set with itself (the same Rule objects) keeps each rule once, at its first position
    assert [r.name for r in s1 + s1] == ["add-zero", "mul-one"]


def test_ruleset_order_decides_between_overlapping_rules() -> None:
    to_a = Rule("to-a", x + y, lambda x: x)
    to_b = Rule("to-b", x + y, lambda y: y)
    assert fire(RuleSet("ab", [to_a, to_b]), a + b) is a
    assert fire(RuleSet("ba", [to_b, to_a]), a + b) is b


def test_rules_are_indexed_by_root_op() -> None:
    rs = RuleSet("t", [Rule("add-zero", x + 0, x)])
    assert rs.matcher(Ops.MUL) is None
    assert rs.matcher(Ops.ADD) is not None
    assert "add-zero" in rs.matcher(Ops.ADD).source  # type: ignore[union-attr]


def test_commutative_nesting_beyond_the_unrolled_limit_still_matches() -> None:
    # five commutative nodes: the matcher loops over orders instead of writing them all out
    pat = ((x + c0) * c1) + ((y + 1) * (z + 2))
    node = ((k(2) + b) * k(3)) + ((2 + n) * (1 + a))
    assert fire(Rule("deep", pat, lambda x, y, z: x + y + z), node) is b + a + n


def test_a_template_keeps_the_node_shape() -> None:
    """A template whose result would not have the matched node's shape does not fire: (x*4 + y) // 4 -> x is the
    scalar x for a vector of lanes (x*4 + [0, 1, 2, 3]) // 4, which a vector's users (a LOAD gated per lane) cannot
    take. On a scalar node the same rule fires; a fold's result is checked as well."""
    pick = Rule("pick-quotient", (x * c0 + y) // c0, x)
    lanes = UOp.vconst([0, 1, 2, 3])
    assert fire(pick, (a * 4 + lanes) // 4) is None
    assert fire(pick, (a * 4 + b) // 4) is a
    folded = Rule("fold-quotient", (x * c0 + y) // c0, x * fold(c0 // c0))
    assert fire(folded, (a * 4 + lanes) // 4) is None
    assert fire(folded, (a * 4 + b) // 4) is not None
