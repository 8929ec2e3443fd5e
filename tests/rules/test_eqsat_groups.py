"""rewrite.egraph_groups: the interval analysis cut into groups by constructor, each batch running only the groups
whose constructors it holds. Oracle: the same saturator with the analysis whole (one group), fed the same batches
in the same order in one persistent e-graph, gives the same forms and the same intervals."""

from __future__ import annotations

import random

from benchmarks.symbolic_workloads import needy_random, random_batch
from rewrite.egraph import Saturator
from rewrite.egraph_groups import groups_for, split_analysis
from rewrite.env import Context
from rewrite.uop import UOp
from rules import eqsat
from rules.symbolic import simplify_fast
from tests.rules.symcheck import random_case

CTORS = {"Num", "Var", "Add", "Mul", "Mod", "Where", "Lt"}
PROGRAM = """(ruleset analysis)
(rule ((= e (Add a b)) (= la (lo a))) ((set (lo e) la)) :ruleset analysis :name "a")
(rule ((= e (Where c a b)) (= la (lo a))) ((set (lo e) la)) :ruleset analysis :name "w")
(rule ((= e (Where c a b)) (= c (Lt x y))) ((set (lo e) 0)) :ruleset analysis :name "wl")
(rule ((= v (lo e)) (= v (hi e))) ((union e (Num v))) :ruleset analysis :name "point")
(ruleset rw)
(rule ((= e (Add x (Mul y (Num 0))))) ((union e (Mod x (Num 1)))) :ruleset rw :name "r")
"""


def test_split_moves_only_rules_of_constructors_the_rewrites_never_name():
    text, groups = split_analysis(PROGRAM, "analysis", ("rw",), CTORS)
    assert groups == {frozenset({"Where"}): "analysis__where", frozenset({"Where", "Lt"}): "analysis__lt_where"}
    assert '(rule ((= e (Add a b)) (= la (lo a))) ((set (lo e) la)) :ruleset analysis :name "a")' in text
    assert ':ruleset analysis__where :name "w"' in text and ':ruleset analysis__lt_where :name "wl"' in text
    assert ':ruleset analysis :name "point"' in text
    assert text.index("(ruleset analysis__where)") < text.index(':name "w"')
    assert groups_for(groups, {"Add", "Where"}) == ("analysis__where",)
    assert groups_for(groups, {"Add", "Where", "Lt"}) == ("analysis__lt_where", "analysis__where")
    assert groups_for(groups, {"Add", "Lt"}) == ()


def test_rewrites_that_name_every_constructor_leave_the_analysis_whole():
    assert eqsat.saturator()._groups == {}
    assert eqsat.saturator(fast_tier=True)._groups  # the fast tier's rewrites name only + * // %


def _fast_results(n: int) -> list[UOp]:
    rng = random.Random(3)
    out = [simplify_fast(random_case(rng)) for _ in range(n)]
    out += [simplify_fast(e) for seed in (11, 12) for e in random_batch(seed)]
    out += [simplify_fast(e) for e in needy_random(12, range(1000, 1300))]  # ones the rewrites change
    return [u for u in dict.fromkeys(out) if u.src]  # most of them the rewrites leave alone: intervals only


def _same_results(a: Saturator, b: Saturator) -> None:
    exprs = _fast_results(200)
    assert sum(map(eqsat.fast_tier_can_change, exprs)) >= 10
    with Context(CACHE=0):
        for sat in (a, b):
            sat.forget()
        got = [(a.run([u])[0], b.run([u])[0]) for u in exprs]  # one at a time: the e-graph accumulates
        batch = (a.run(exprs[:40]), b.run(exprs[:40]))
    for g, w in [*got, *zip(*batch, strict=True)]:
        assert (g.uop.render(), g.lo, g.hi) == (w.uop.render(), w.lo, w.hi)
    assert sum(g.uop is not u for (g, _), u in zip(got, exprs, strict=True)) >= 10  # the e-graph changed some


def _whole(text: str) -> Saturator:
    """The analysis loaded and run whole, iterations of the rewrites then the analysis saturated."""
    sat = Saturator("whole", text, eqsat.SCHEDULE)
    sat._text, sat._groups = sat.program, {}
    return sat


def test_grouped_analysis_gives_what_the_whole_analysis_gives():
    text, _ = eqsat.fast_tier_program()
    grouped = Saturator("grouped", text, eqsat.SCHEDULE)
    assert grouped._groups
    _same_results(grouped, _whole(text))


def test_fused_schedule_gives_what_the_iterations_give():
    """The fast tier's schedule (rewrites and analysis saturated together, grouped) against the iterations."""
    text, _ = eqsat.fast_tier_program()
    assert eqsat.FAST_TIER_SCHEDULE.fused and eqsat.saturator(fast_tier=True).schedule.fused
    _same_results(Saturator("fused", text, eqsat.FAST_TIER_SCHEDULE), _whole(text))


def test_scratch_files_removed_behind_our_back_are_made_again():
    """The rows go to egglog through scratch files kept open; a temp cleaner that removes them must not make the
    next batch fail (egglog's `input` panics on a missing file)."""
    import shutil

    text, _ = eqsat.fast_tier_program()
    sat = Saturator("scratch", text, eqsat.FAST_TIER_SCHEDULE)
    x = UOp.variable("x", 0, 100)
    with Context(CACHE=0):
        assert sat.run([x + (x % 4) * -1])[0].uop.render() == "((x//4)*4)"
        assert sat._dir is not None
        shutil.rmtree(sat._dir)
        assert sat.run([x + (x % 8) * -1])[0].uop.render() == "((x//8)*8)"
        assert sat.last.stop == "saturated" and sat.panics == 0
