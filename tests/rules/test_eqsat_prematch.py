"""rewrite.egraph_prematch: the fast tier's rewrites matched in Python on a batch's loaded terms, their right-hand
sides loaded as rows. Oracle: the same program with the rewrites as egglog rules (rules.eqsat.fast_tier_program),
fed the same batches in the same order, gives the same forms and the same intervals."""

from __future__ import annotations

import pytest

from rewrite.dsl import Rule, const, fold, var
from rewrite.egraph import Saturator
from rewrite.egraph_prematch import PreMatcher
from rewrite.egraph_terms import I64_MAX, Schedule
from rewrite.env import Context
from rewrite.uop import UOp
from rules import eqsat
from tests.rules.test_eqsat_groups import _same_results

x, c0, c1 = var("x"), const("c0"), const("c1")


def test_prematched_rewrites_give_what_the_egglog_rules_give():
    pm = Saturator("prematched", eqsat.fast_tier_program(prematched=True)[0], eqsat.FAST_TIER_SCHEDULE,
                   prematch=eqsat.fast_tier_prematcher())
    _same_results(pm, Saturator("egglog-rules", eqsat.fast_tier_program()[0], eqsat.FAST_TIER_SCHEDULE))


def test_matches_on_terms():
    pm = eqsat.fast_tier_prematcher()
    # x + (x % 4) * -1, children numbered first: 0 x, 1 Num 4, 2 Mod, 3 Num -1, 4 Mul, 5 Add
    terms = [("Var", "x", 0, 9), ("Num", 4), ("Mod", 0, 1), ("Num", -1), ("Mul", 2, 3), ("Add", 0, 4)]
    assert pm.matches(terms) == [(5, "sub-mod", ("Mul", ("Div", ("Id", 0), ("Num", 4)), ("Num", 4)))]
    # the operands the other way round, and a divisor of 0 the guard refuses
    swapped = [*terms[:5], ("Add", 4, 0)]
    assert [m[1] for m in pm.matches(swapped)] == ["sub-mod"]
    assert pm.matches([terms[0], ("Num", 0), ("Mod", 0, 1), *terms[3:]]) == []
    # two different nodes where the pattern names one capture twice
    other = [*terms, ("Var", "y", 0, 9), ("Add", 6, 4)]
    assert [m[0] for m in pm.matches(other)] == [5]


def test_folds_that_overflow_i64_do_not_match():
    terms = [("Var", "x", 0, 9), ("Num", 3), ("Mul", 0, 1), ("Num", 5), ("Mul", 2, 3)]
    big = PreMatcher([Rule("mul-const-fold", (x * c0) * c1, x * fold(c0 * c1))])
    assert big.matches(terms)[0][2] == ("Mul", ("Id", 0), ("Num", 15))
    huge = [terms[0], ("Num", I64_MAX), terms[2], ("Num", 2), terms[4]]
    assert big.matches(huge) == []


def test_only_rules_on_constants_and_a_once_schedule():
    with pytest.raises(ValueError, match="constants alone"):
        PreMatcher([Rule("mod-small", x % c0, x % c0, when=lambda x, c0: x.vmax < c0)])
    with pytest.raises(ValueError, match="builds an op"):
        PreMatcher([Rule("add-zero", x + 0, x)])
    with pytest.raises(ValueError, match="once"):
        Saturator("not-once", eqsat.fast_tier_program(prematched=True)[0], Schedule(),
                  prematch=eqsat.fast_tier_prematcher())


def test_production_saturator_prematches():
    sat = eqsat.saturator(fast_tier=True)
    assert sat.prematch is not None and "sub-mod" not in eqsat.fast_tier_program(prematched=True)[0]
    v = UOp.variable("x", 0, 100)
    with Context(CACHE=0):
        sat.clear_memory()
        r = sat.run([v + (v % 4) * -1])[0]
    assert (r.uop.render(), r.lo, r.hi) == ("((x//4)*4)", 0, 100)
