"""The fast tier and the e-graph tier checked against each other (rules.eqsat.tier_disagreements): on the fuzzer's
random expressions, on the issue-14 family table and on the remainder family, saturation never returns more
nodes than the fast rules, never a different value, and every value lies in the e-graph's interval. Also the
remainder rules (x - x%c and x - (x//c)*c), which only the e-graph has, on their own."""

from __future__ import annotations

import random

import pytest

from benchmarks.symbolic_family_cases import CASES, build
from rewrite.env import Context
from rewrite.uop import UOp
from rules import eqsat, worth_saturating
from rules.eqsat import egraph_bounds, saturate, saturate_fast, tier_disagreements
from rules.symbolic import simplify_fast
from tests.rules.symcheck import random_case

V = UOp.variable


@pytest.fixture(autouse=True, scope="module")
def private_disk_cache(tmp_path_factory):
    with Context(CACHEDIR=str(tmp_path_factory.mktemp("eqsat-tiers-cache"))):
        eqsat.saturator().clear_memory()
        eqsat.saturator(fast_tier=True).clear_memory()
        yield


@pytest.mark.parametrize("seed", [0, 1])
def test_tiers_agree_on_random_expressions(seed: int) -> None:
    rng = random.Random(seed)
    exprs = [random_case(rng) for _ in range(150)]
    assert tier_disagreements(exprs, seed=seed) == []


def test_tiers_agree_on_the_family_table() -> None:
    assert tier_disagreements([build(e, boxes) for _, e, boxes, _ in CASES]) == []


def test_the_checker_catches_a_wrong_result(monkeypatch) -> None:
    """tier_disagreements is not vacuous: an e-graph that answers x + 1 for everything is caught."""
    x = V("x", 0, 9)
    sat = eqsat.saturator(fast_tier=True)
    real = sat.run

    def wrong(us):
        return [type(r)(u + 1, r.lo, r.hi, r.nodes) for u, r in zip(us, real(us), strict=True)]

    monkeypatch.setattr(sat, "run", wrong)
    assert any(line.startswith("differ") for line in tier_disagreements([(x * 4 + 3) // 4]))


x100, r16 = V("x", 0, 100), UOp.range(16, 1)

# fmt: off
REMAINDER = [  # (expression, what saturation gives, its e-graph interval)
    (x100 - x100 % 4,                 "((x//4)*4)",  (0, 100)),
    (x100 - (x100 // 4) * 4,          "(x%4)",       (0, 3)),
    (x100 % 4 - x100,                 "((x//4)*-4)", (-100, 0)),
    ((x100 // 4) * 4 - x100,          "(-(x%4))",    (-3, 0)),
    ((r16 * 4) - (r16 * 4) % 8,       "((r1//2)*8)", (0, 56)),
]
# fmt: on


@pytest.mark.parametrize("e,want,bounds", REMAINDER, ids=lambda v: v.render() if isinstance(v, UOp) else str(v))
def test_remainder_rules(e: UOp, want: str, bounds: tuple[int, int]) -> None:
    f = simplify_fast(e)
    assert worth_saturating(f)
    assert saturate(f).render() == want
    assert simplify_fast(saturate_fast(f)) is simplify_fast(saturate(f))  # the fast-tier program, as read back
    assert egraph_bounds(f) == bounds
    assert (f.vmin, f.vmax) != bounds, "the fast tier's own interval is already as tight"


def test_egraph_form_that_loses_a_shared_subterm_is_not_taken() -> None:
    """Found by the full simplifier's long fuzz: the fast result shares `a*-1` between two terms; the e-graph's
    remainder form of one of them, `(a//-14)*14`, is smaller as a tree but leaves a node more in the graph once the
    fast rules read it back, so the full simplifier keeps the fast result."""
    from rules.linear import count_nodes

    a = V("a", -8, 3)
    e = ((((a * 12 + a) % 12) % 4) + ((((a * -2) + a) % -2) + (a % -4))) * ((((a.ne(6)).where(a, a)) % -14) - a)
    f = simplify_fast(e)
    s = e.simplify()
    assert count_nodes(s)[0] <= count_nodes(f)[0], f"{f.render()} -> {s.render()}"


def test_point_variable_then_remainder_pair_is_a_fixed_point() -> None:
    """Found by the full simplifier's long fuzz: the e-graph makes the one-value variable `a` a constant, the fast
    rules then reorder the sum so that `b*-1 + b%4` is one node, which a second e-graph round turns into
    `(b//4)*-4`; the full simplifier's result must be a fixed point of it."""
    a, b = V("a", 1, 1), V("b", -8, 7)
    e = (a + b * -1) + b % 4
    s = e.simplify()
    assert s.simplify() is s, f"{s.render()} -> {s.simplify().render()}"
    assert "%" not in s.render(), s.render()
