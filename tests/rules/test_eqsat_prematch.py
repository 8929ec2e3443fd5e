"""rewrite.egraph_prematch: the fast tier's rewrites matched in Python on a batch's loaded terms, their right-hand
sides loaded as rows. Oracle: the same program with the rewrites as egglog rules (rules.eqsat.fast_tier_program),
fed the same batches in the same order, gives the same forms and the same intervals."""

from __future__ import annotations

import re

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


def _egglog_value(eg, text: str) -> int | None:
    """egglog's value of the i64 `text`, None where a primitive fails (overflow, division by zero)."""
    from rewrite.egglog_io import parse_forms

    try:
        out = eg.run_program(*parse_forms(eg, f"(extract {text})"))[-1]
    except Exception:  # egglog's error for a primitive that fails
        return None
    return out.termdag.get(out.term).value.value


def test_seed_bounds_are_the_analysis_formulas_as_egglog_computes_them():
    """rules.eqsat_analysis.seed_bounds against egglog itself evaluating the same formula text (SEEDS' and the
    analysis's) on intervals around every edge of the packed fields, constants past them included: the same value, or
    no interval where egglog's arithmetic fails or the rule would not match."""
    import itertools

    from rewrite.egglog_io import egglog_bindings
    from rewrite.egraph_terms import IV_INF, IV_NEG, IV_POS, floor_div
    from rules.eqsat_analysis import _MOD_HI, _MOD_LO, _corners, seed_bounds

    eg = egglog_bindings().EGraph()
    edges = [I64_MAX, -(1 << 40), IV_NEG - 1, IV_NEG, IV_NEG + 1, -7, -1, 0, 1, 5, IV_POS - 1, IV_POS, 1 << 40]
    consts = [1, 2, 3, -3, 8, 0, IV_POS - 1, IV_POS, -(1 << 33)]
    checked = 0
    for lo, hi in itertools.combinations_with_replacement(sorted(set(edges) - {I64_MAX}), 2):
        lf, hf = min(max(lo, IV_NEG), IV_POS), max(min(hi, IV_POS), IV_NEG)
        la, ha = (-IV_INF if lf == IV_NEG else lf), (IV_INF if hf == IV_POS else hf)
        for c in consts:
            sub = {"la": la, "ha": ha, "lb": c, "hb": c, "la__f": lf, "ha__f": hf, "c": c, "k": c, "__dl": la,
                   "__dh": ha}

            def want(*texts: str) -> tuple[int, int] | None:
                vals = []
                for t in texts:
                    for name in sorted(sub, key=len, reverse=True):  # longest names first (la__f before la)
                        t = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w])", str(sub[name]), t)
                    vals.append(_egglog_value(eg, t))
                return None if None in vals else (vals[0], vals[1])

            ok = c != 0 and IV_NEG < c < IV_POS
            exact = lf != IV_NEG and hf != IV_POS
            div = want(f"(min {floor_div('la', 'c')} {floor_div('ha', 'c')})",
                       f"(max {floor_div('la', 'c')} {floor_div('ha', 'c')})") if ok and exact else None
            assert seed_bounds("Div", [(lo, hi), (c, c)]) == div, (lo, hi, c)
            assert seed_bounds("Mod", [(lo, hi), (c, c)]) == (want(_MOD_LO, _MOD_HI) if ok else None), (lo, hi, c)
            mul = want(*_corners("*", ("__dl", "__dh"), ("k", "k"))) if ok else None
            assert seed_bounds("Mul", [(lo, hi), (c, c)]) == mul, (lo, hi, c)
            checked += ok
    assert checked > 300
    assert seed_bounds("Div", [None, (3, 3)]) is None and seed_bounds("Add", [(0, 1), (3, 3)]) is None
    assert seed_bounds("Div", [(0, 9), (2, 3)]) is None  # a divisor that is not one constant


def test_seed_bounds_sound_by_brute_force():
    import random

    from rules.eqsat_analysis import seed_bounds

    rng = random.Random(5)
    for _ in range(400):
        lo = rng.randint(-40, 40)
        hi = lo + rng.randint(0, 30)
        c, k = rng.choice([1, 2, 3, 4, 7, -2, -3, -8]), rng.choice([1, 2, -3, 5])
        for op, f in (("Div", lambda v: v // c), ("Mod", lambda v: v % c)):
            d = seed_bounds(op, [(lo, hi), (c, c)])
            assert d is not None
            e = seed_bounds("Mul", [d, (k, k)])
            assert e is not None
            for v in range(lo, hi + 1):
                assert d[0] <= f(v) <= d[1] and e[0] <= f(v) * k <= e[1], (op, lo, hi, c, k, v)


def test_right_hand_sides_loaded_with_intervals_give_what_seeds_give():
    """With the right-hand sides' intervals computed in Python (PreMatcher.bounds) the batches skip the `seeds` rule
    set, and the results and intervals are those of the prematcher without them (seeds run in every batch), on the
    fast results of random expressions and on the fast tier's shapes over boxes and constants past 2**31."""
    plain = PreMatcher(eqsat.fast_tier_rules())
    assert plain.bounds is None and eqsat.fast_tier_prematcher().bounds is not None
    text = eqsat.fast_tier_program(prematched=True)[0]
    a = Saturator("bounds", text, eqsat.FAST_TIER_SCHEDULE, prematch=eqsat.fast_tier_prematcher())
    b = Saturator("seeds", text, eqsat.FAST_TIER_SCHEDULE, prematch=plain)
    _same_results(a, b)
    assert any(not key[2] for key in a._combo_cmds) and all(key[2] for key in b._combo_cmds)
    xs = [UOp.variable("x", lo, lo + w) for lo in (0, -5, 1 << 30, -(1 << 40)) for w in (7, 1 << 31, 1 << 33)]
    wide = [x + (x % c) * -1 for x in xs for c in (3, 4, -4, 1 << 31, 3 << 30)]
    wide += [x * 3 + (x // c) * (-3 * c) for x in xs for c in (2, 5, 1 << 32)]
    with Context(CACHE=0):
        for u in wide:
            g, w = a.run([u])[0], b.run([u])[0]
            assert (g.uop.render(), g.lo, g.hi) == (w.uop.render(), w.lo, w.hi), u.render()
