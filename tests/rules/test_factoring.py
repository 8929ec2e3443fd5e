"""rules.linear's factoring of shared constant factors out of index sums: the rule `add-factor-common` (one chain,
`factor_common`) checked for soundness like every other rule (tests/rules/test_soundness.py's draws: small boxes
at every point, wide boxes with hypothesis, and z3 on every instance it rewrites, where z3 is installed), and the
pass over whole expressions (`factor_sums`, what rules.simplify runs last): equal values, never more nodes or ops,
a fixed point, and the kernel sum that tinygrad keeps factored (`(r9*4 + r5)*16`) no larger than tinygrad's."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rules  # noqa: F401  # registers UOp.simplify
from rewrite.dsl import Rule
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules.linear import count_nodes, factor_sums, factoring
from rules.symbolic import simplify_fast
from tests.rules.patinst import Instance
from tests.rules.symcheck import box_of, leaves, random_box, random_case, random_expr, same_values
from tests.rules.test_soundness import DRAWS, _check_wide, _single, check_points, draw, fire
from tests.rules.z3enc import _apply, z3

RULES: list[Rule] = list(factoring)


def _chain_hint(inst: Instance) -> dict[str, UOp]:
    """s of `x + y`: a chain of 2-5 terms over distinct atoms whose coefficients share a factor g (some of them g
    times a coefficient another term has, as index math from strided views does), maybe with a constant."""
    r = inst.rng
    g = r.choice((2, 3, 4, 8, 16, -4))
    atoms: list[UOp] = list(inst.pool)
    atoms += [inst.pool[0] // r.choice((2, 3)), inst.pool[1] % r.choice((4, 5))]
    r.shuffle(atoms)
    acc: UOp | None = None
    for a in atoms[: r.randint(2, 5)]:
        f = r.choice((g, g * 4, g * r.choice((2, 3, -1)), 4, 1, -1))
        t = a if f == 1 else a * f
        acc = t if acc is None else acc + t
    assert acc is not None
    k = r.choice((0, 0, g, g * 3, 1, -g, 5))
    return {"s": acc + k if k else acc}


HINTS = {"add-factor-common": _chain_hint}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_rule_sound_small_boxes(rule: Rule) -> None:
    rng = random.Random(f"small-{rule.name}")
    single = _single(rule)
    fired = 0
    for _ in range(DRAWS):
        got = draw(rule, rng, wide=False, hints=HINTS)
        if got is None or (res := fire(single, got[0])) is None:
            continue
        fired += 1
        check_points(rule, got[0], res[0], rng)
    assert fired >= DRAWS // 10, f"{rule.name} fired {fired} times on {DRAWS} draws"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_rule_sound_wide_boxes(rule: Rule) -> None:
    single = _single(rule)
    fired = []

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.randoms(use_true_random=False))
    def run(rng: random.Random) -> None:
        if _check_wide(rule, single, rng, hints=HINTS):
            fired.append(1)

    run()
    assert fired, f"{rule.name} never fired on wide instances"


def _encode(u: UOp, env: dict[UOp, Any], defined: list) -> Any:
    memo: dict[UOp, Any] = dict(env)
    for n in UOp.toposort_of([u], skip=lambda n: n in env):  # a leaf's own operands (its bounds) are not values
        if n in memo:
            continue
        memo[n] = z3.IntVal(int(n.arg[0])) if n.op is Ops.CONST else _apply(n.op, [memo[s] for s in n.src], defined)
    return memo[u]


@pytest.mark.skipif(z3 is None, reason="z3 is not installed")
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_rule_instances_proved_by_z3(rule: Rule) -> None:
    """Every instance the rule rewrites (wide boxes, so the values are far from the small ones above) is proved equal
    to its input over the variables' whole boxes."""
    rng = random.Random(f"z3-{rule.name}")
    single = _single(rule)
    proved = 0
    for _ in range(DRAWS):
        got = draw(rule, rng, wide=True, value_dtypes=(dtypes.index,), hints=HINTS)
        if got is None or (res := fire(single, got[0])) is None:
            continue
        u, r = got[0], res[0]
        env = {v: z3.Int(v.render()) for v in leaves(u)}
        premises = [z3.And(env[v] >= box_of(v)[0], env[v] <= box_of(v)[1]) for v in env]
        defined: list = []
        a = _encode(u, env, defined)
        b = _encode(r, env, defined)
        s = z3.Solver()
        s.set("timeout", 2000)
        s.add(*premises, *defined, a != b)
        assert s.check() == z3.unsat, f"{rule.name}: {u.render()} -> {r.render()}: z3 finds {s.model()}"
        proved += 1
    assert proved >= 10, f"{rule.name} rewrote only {proved} instances"


# ---------------------------------------------------------------------------------------------- the pass


def _r(i: int, n: int) -> UOp:
    return UOp.range(n, i)


def test_conv_sum_as_small_as_tinygrads() -> None:
    """The conv kernel's input index: tinygrad keeps `(r9*4 + r5)*16` (18 unique nodes), the fast rules give
    `r9*64 + r5*16` (19); the factored form shares the constants."""
    r5, r6, r7, r8, r9 = _r(5, 3), _r(6, 4), _r(7, 4), _r(8, 2), _r(9, 3)
    e = r7 * 4 + r6 + r9 * 64 + r5 * 16 + r8 * 1024 + -17
    f = simplify_fast(e)
    assert count_nodes(f) == (19, 9)
    s = e.simplify()
    n, ops = count_nodes(s)
    assert n <= 18 and ops <= 9, s.render()
    same_values(e, s)
    assert s.simplify() is s


def test_no_shared_factor_left_alone() -> None:
    a, b = UOp.variable("a", 0, 9), UOp.variable("b", 0, 9)
    for e in (a * 3 + b * 5 + 1, a * 6 + b * 10, a + b * 4, a * 4 + 8):  # no form with fewer nodes and no more ops
        f = simplify_fast(e)
        assert factor_sums(f) is f, f.render()


def _random_sum(rng: random.Random) -> UOp:
    """A sum of 2-5 of the fuzzer's small expressions with coefficients that often share a factor, plus a constant."""
    vs = [UOp.variable(n, *random_box(rng)) for n in ("a", "b", "c")[: rng.randint(1, 3)]]
    g = rng.choice((2, 3, 4, 8, -2))
    acc = UOp.const(rng.choice((0, g, 3 * g, 1)))
    for _ in range(rng.randint(2, 5)):
        acc = acc + random_expr(rng, vs, rng.randint(0, 2)) * rng.choice((g, 4 * g, -g, 1, 4, 3))
    return acc


@pytest.mark.parametrize("seed", [0, 1])
def test_pass_on_random_expressions(seed: int) -> None:
    """On the fuzzer's expressions and on random sums (fast results, which the pass follows): equal values at every
    point, never more unique nodes or ops, and nothing left to factor in what it returns."""
    rng = random.Random(seed)
    changed = 0
    for i in range(400):
        f = simplify_fast(random_case(rng) if i % 2 else _random_sum(rng))
        g = factor_sums(f)
        if g is f:
            continue
        changed += 1
        same_values(f, g)
        (n0, o0), (n1, o1) = count_nodes(f), count_nodes(g)
        assert n1 < n0 and o1 <= o0, f"{f.render()} -> {g.render()}"
        assert factor_sums(g) is g
    assert changed >= 10, changed


def test_pass_on_kernel_index_batches() -> None:
    """Every expression of the benchmark's lane-padded kernel batches: simplify is a fixed point and equals its
    input at every point of the ranges, and the factored form is never larger than the fast rules' form."""
    from benchmarks.symbolic_workloads import kernel_batches, lane_batch

    fewer = 0
    for exprs in kernel_batches().values():
        for e in lane_batch(exprs)[:20]:
            s = e.simplify()
            f = simplify_fast(e)
            assert count_nodes(s) <= count_nodes(f), f"{f.render()} -> {s.render()}"
            fewer += count_nodes(s) < count_nodes(f)
            assert s.simplify() is s, f"{s.render()} -> {s.simplify().render()}"
            same_values(e, s)
    assert fewer >= 10


def test_factored_form_the_fast_rules_shrink_is_a_fixed_point() -> None:
    """Found by the full simplifier's long fuzz (`a` has one value, so the e-graph makes it a constant):
    `((b-5)//-2)*2 - 10` factored is `((b-5)//-2 - 5)*2`, where the fast rules merge the constant into the division;
    the full simplifier takes that further form, a fixed point."""
    a, b = UOp.variable("a", -5, -5), UOp.variable("b", -8, 7)
    e = ((UOp.const(-15) - (a + a)) + (b + a) // -2) * 2
    s = e.simplify()
    assert s.simplify() is s, f"{s.render()} -> {s.simplify().render()}"
    same_values(e, s)
