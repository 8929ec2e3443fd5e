"""The e-graph's extraction cost: a division or modulo by a positive power of two is priced as the shift or mask
the kernel pays for it (its extraction twin DivP2 / ModP2), any other as a division.

Oracles: Python's `c > 0 and c & (c - 1) == 0` for which divisors get a twin (the egglog guard of the twin rule
and the load-time choice must both agree with it), brute force over the variable's box for the value of every
result, and the same program with the twins priced like divisions for the choice extraction makes.
"""

from __future__ import annotations

import pytest

from rewrite.egraph import Saturator
from rewrite.egraph_terms import POW2_TWINS, is_pow2, iv_packed
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules import eqsat

V = UOp.variable

DIVISORS = sorted({*range(-40, 41), *(s * 2**k + d for k in range(5, 63) for s in (1, -1) for d in (-1, 0, 1))} - {0})


@pytest.fixture()
def private_cache(tmp_path):
    """A disk cache of this test's own: results then carry their extracted node lists."""
    with Context(CACHEDIR=str(tmp_path), CACHE=1):
        yield


def _names(nodes) -> set[str]:
    return {n[0] for n in nodes}


def test_is_pow2_agrees_with_its_definition():
    assert [c for c in range(-70, 70) if is_pow2(c)] == [1, 2, 4, 8, 16, 32, 64]
    assert all(is_pow2(2**k) and not is_pow2(-(2**k)) and (k < 2 or not is_pow2(2**k + 1)) for k in range(63))


def _divisions(nodes) -> list[tuple[str, int]]:
    """(constructor, divisor) of every division and modulo in an extracted node list (by a constant here)."""
    return [(n[0], nodes[n[2]][1]) for n in nodes if n[0] in ("Div", "Mod", *POW2_TWINS)]


@pytest.mark.parametrize("op", [Ops.IDIV, Ops.MOD])
def test_twins_exactly_for_power_of_two_divisors(private_cache, op):
    """Loaded nodes (the twin code chosen in Python) and nodes the rules make (the egglog guard) alike: every
    division in an extracted term is a twin exactly when its divisor is a positive power of two, and every
    result keeps the value of its input on the whole box."""
    x = V("x", -50, 50)
    sat = Saturator("twins", eqsat.program()[0], eqsat.SCHEDULE)
    loaded = [UOp(op, (x, UOp.const(c))) for c in DIVISORS]
    # made by the rules, not loaded: (x // 2) // c -> x // (2c) and (x % 4c) % c -> x % c
    made = [(x // 2) // c if op is Ops.IDIV else (x % (4 * c)) % c for c in DIVISORS if 0 < c < 2**60]
    for exprs in (loaded, made):
        res = sat.run(exprs)
        seen = {True: 0, False: 0}
        for e, r in zip(exprs, res, strict=True):
            assert r.nodes is not None
            for name, d in _divisions(r.nodes):
                assert (name in POW2_TWINS) == is_pow2(d), (e.render(), r.nodes)
                seen[name in POW2_TWINS] += 1
            for v in range(-50, 51):
                assert r.uop.evaluate({"x": v}) == e.evaluate({"x": v}), (v, e.render(), r.uop.render())
        assert seen[True] >= 10 and seen[False] >= 10, seen  # both kinds were there to check


def test_twins_read_back_as_the_op_they_stand_for(private_cache):
    x = V("x", 0, 100)
    e = (x // 2) // 4 + x % 16  # the rules make x // 8, so extraction runs and picks both twins
    sat = Saturator("twins", eqsat.program()[0], eqsat.SCHEDULE)
    r = sat.run([e])[0]
    assert r.nodes is not None and set(POW2_TWINS) <= _names(r.nodes)
    want = (x // 8 + x % 16).render()
    assert r.uop.render() == want and {Ops.IDIV, Ops.MOD} <= {n.op for n in r.uop.toposort()}
    sat.clear_memory()
    again = sat.run([e])[0]  # now from the disk cache: rebuilt from the stored node list
    assert again.uop.render() == want


# x // 6 equals (x + 2) // 8 for x in [0, 7] (checked below): one more op and a literal (Add 2, Num 2) for a
# shift instead of a division. With the default prices that is a tie (Div 6 against DivP2 2 + 4); a division
# priced at 8 makes the shifted form strictly cheaper, but only through its twin.
_SHIFTED = (f'(rule ((= e (Div x (Num 6))) (= (iv x) {iv_packed(0, 7)})) ((union e (Div (Add x (Num 2)) (Num 8))))'
            ' :ruleset rw :name "test-shifted-divisor")\n')


def test_extraction_prices_a_power_of_two_division_as_a_shift():
    x = V("x", 0, 7)
    assert all(v // 6 == (v + 2) // 8 for v in range(8))  # the test rule holds on the box
    text = eqsat.program(raw=eqsat.RAW_RULES + _SHIFTED)[0]
    dear = {"Div": 8, "Mod": 8}
    priced = Saturator("pow2-priced", text, eqsat.SCHEDULE, costs=dear)
    flat = Saturator("pow2-flat", text, eqsat.SCHEDULE, costs={**dear, **{t: 8 for t in POW2_TWINS}})
    with Context(CACHE=0):
        shifted, divided = priced.run([x // 6])[0].uop, flat.run([x // 6])[0].uop
    assert shifted.render() == ((x + 2) // 8).render()
    assert divided.render() == (x // 6).render()
