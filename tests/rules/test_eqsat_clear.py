"""The persistent e-graph's cheap reset (rewrite.egraph's `clear` rule set, run in each batch's first command): after
many batches, each cleared of the one before, every result (form and interval) equals what an e-graph holding the
rules alone gives, for the whole rule set and for the fast-tier program; the full reset every
`Schedule.reset_nodes` loaded nodes happens and changes nothing either; and a clear leaves no row behind."""

from __future__ import annotations

import dataclasses
import random

import pytest

from benchmarks.symbolic_workloads import random_batch
from rewrite.egraph import Saturator
from rewrite.env import Context
from rewrite.uop import UOp
from rules import eqsat
from rules.symbolic import simplify_fast
from tests.rules.symcheck import random_case


@pytest.fixture(autouse=True, scope="module")
def no_disk_cache():
    with Context(CACHE=0):
        yield


def _sample(n: int) -> list[UOp]:
    rng = random.Random(11)
    exprs = random_batch(seed=7) + [random_case(rng) for _ in range(n)]
    return list(dict.fromkeys(u for u in exprs if u.src))


def _key(r) -> tuple:
    return r.uop.render(), r.lo, r.hi


def _fresh(sat: Saturator, exprs: list[UOp], size: int = 3) -> list[tuple]:
    """Each batch of `size` from an e-graph holding the rules alone (`forget`: `(pop)` `(push)`)."""
    out = []
    for k in range(0, len(exprs), size):
        sat.forget()
        out += [_key(r) for r in sat.run(exprs[k : k + size])]
    return out


@pytest.mark.parametrize("fast_tier", [False, True], ids=["full", "fast-tier"])
def test_results_after_many_clears_equal_a_fresh_egraphs(fast_tier):
    exprs = _sample(150)
    if fast_tier:
        exprs = list(dict.fromkeys(u for u in (simplify_fast(e) for e in exprs) if u.src))
    text, _ = eqsat.fast_tier_program() if fast_tier else eqsat.program()
    sch = eqsat.FAST_TIER_SCHEDULE if fast_tier else eqsat.SCHEDULE
    kept = Saturator("clear-kept", text, sch)
    got = []
    for k in range(0, len(exprs), 3):  # batches of three, one after another in one e-graph, each cleared
        kept.clear_memory()
        got += [_key(r) for r in kept.run(exprs[k : k + 3])]
    assert kept.resets == 0 and len(exprs) > 100
    want = _fresh(Saturator("clear-fresh", text, sch), exprs)
    assert got == want
    # the same batches again, in the reverse order: a clear leaves nothing an earlier batch found
    kept.clear_memory()
    again: list[tuple] = []
    for k in reversed(range(0, len(exprs), 3)):
        again = [_key(r) for r in kept.run(exprs[k : k + 3])] + again
    assert again == want


def test_full_reset_every_reset_nodes():
    exprs = _sample(60)
    text, _ = eqsat.program()
    small = dataclasses.replace(eqsat.SCHEDULE, reset_nodes=40)
    sat = Saturator("clear-reset", text, small)
    got = [_key(sat.run([e])[0]) for e in exprs]
    assert sat.resets >= sum(len(e.toposort()) for e in exprs) // 2 // 40  # nodes loaded, less shared leaves
    assert got == _fresh(Saturator("clear-reset-fresh", text, eqsat.SCHEDULE), exprs, 1)


@pytest.mark.parametrize("fast_tier", [False, True], ids=["full", "fast-tier"])
def test_clear_leaves_no_rows(fast_tier):
    """After a clear the tables hold nothing but rows a rule subsumed (the fast-tier program subsumes none)."""
    from rewrite.egglog_io import parse_forms

    text, _ = eqsat.fast_tier_program() if fast_tier else eqsat.program()
    sch = eqsat.FAST_TIER_SCHEDULE if fast_tier else eqsat.SCHEDULE
    sat = Saturator("clear-rows", text, sch)
    exprs = _sample(20)
    if fast_tier:
        exprs = [simplify_fast(e) for e in exprs]
    sat.run(exprs[:10])
    eg = sat._egraph()
    size = dict(eg.run_program(*parse_forms(eg, "(print-size)"))[-1].sizes)
    assert sum(size.values()) > 0
    eg.run_program(*parse_forms(eg, "(run-schedule (run clear)) (print-size)"))
    size = dict(eg.run_program(*parse_forms(eg, "(print-size)"))[-1].sizes)
    if fast_tier:
        assert sum(size.values()) == 0, size
    else:  # only subsumed rows of the op tables can stay
        assert all(n == 0 for t, n in size.items() if t not in {"Add", "Sub", "Mul", "Max", "Neg", "Div", "Mod",
                                                                 "And", "Or", "Not", "Where"}), size
