"""The e-graph's fast-tier program (rules.eqsat.fast_tier_program: the rewrites in FAST_TIER_RULES, the analysis
less FAST_TIER_DEAD_ANALYSIS), which rules.simplify and the pipeline saturate with, against the whole rule set on
results of the fast tier: on the issue-14 family table, the fuzzer's expressions, the benchmark's random batch and
its lane-padded kernel batches, no result of the pruned program has more nodes (after the fast rules, as
rules.simplify reads it back) and no interval it gives is looser. The pruning was measured on a larger sample of
the same kinds (rules.eqsat's comment); this keeps checking it."""

from __future__ import annotations

import random
import re

import pytest

from benchmarks.symbolic_family_cases import CASES, build
from benchmarks.symbolic_workloads import kernel_batches, lane_batch, random_batch
from rewrite.egglog_io import split_commands
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules import eqsat, worth_saturating
from rules.linear import count_nodes
from rules.symbolic import simplify_fast
from tests.rules.symcheck import random_case


@pytest.fixture(autouse=True, scope="module")
def no_disk_cache():
    with Context(CACHE=0):
        yield


def _sample() -> list[UOp]:
    exprs = [build(e, boxes) for _, e, boxes, _ in CASES] + random_batch(seed=7)
    exprs += [e for ex in kernel_batches().values() for e in lane_batch(ex)]
    for seed in (3, 4):
        rng = random.Random(seed)
        exprs += [random_case(rng) for _ in range(400)]
    # every fast result the e-graph could work on (a div, mod or comparison), not only those rules.worth_saturating
    # lets through, so the check does not lean on the gate
    return [f for f in dict.fromkeys(simplify_fast(e) for e in exprs)
            if worth_saturating(f) or any(n.op in (Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE) for n in f.toposort())]


def test_fast_tier_program_loses_nothing() -> None:
    full, tier = eqsat.saturator(), eqsat.saturator(fast_tier=True)
    sample = _sample()
    assert len(sample) >= 300
    shrunk = 0
    for k in range(0, len(sample), 25):
        batch = sample[k : k + 25]
        for f, a, b in zip(batch, full.run(batch), tier.run(batch), strict=True):
            na, nb = count_nodes(simplify_fast(a.uop))[0], count_nodes(simplify_fast(b.uop))[0]
            assert nb <= na, f"{f.render()}: whole set {a.uop.render()}, fast-tier program {b.uop.render()}"
            if a.lo is not None and a.hi is not None:
                assert b.lo is not None and b.hi is not None and a.lo <= b.lo and b.hi <= a.hi, (
                    f"{f.render()}: interval [{b.lo}, {b.hi}], the whole set gives [{a.lo}, {a.hi}]")
            shrunk += nb < count_nodes(f)[0]
    assert shrunk >= 5, "the sample holds fast results the e-graph shrinks (the remainder family)"
    assert full.panics == 0 and tier.panics == 0


def test_pruned_names_are_rules() -> None:
    """The kept rewrites are rules of `eqsat` and the dropped interval rules are rules of the analysis, so a renamed
    rule cannot silently fall out of (or stay in) the program."""
    assert eqsat.FAST_TIER_RULES.issubset({r.name for r in eqsat.eqsat})
    names = {m.group(1) for f in split_commands(eqsat.ANALYSIS) if (m := re.search(r':name "([^"]+)"', f))}
    assert eqsat.FAST_TIER_DEAD_ANALYSIS.issubset(names)
    text, ex = eqsat.fast_tier_program()
    assert not ex.skipped
    assert not any(f':name "{n}"' in text for n in eqsat.FAST_TIER_DEAD_ANALYSIS)


def test_skipped_expressions_come_back_unchanged() -> None:
    """saturate_fast skips the e-graph where no fast-tier rewrite matches (rules.eqsat.fast_tier_can_change): on the
    sample, every such expression comes back from the fast-tier program as it went in, with the fast tier's own
    interval, so skipping loses nothing; and the check is not vacuous either way."""
    tier = eqsat.saturator(fast_tier=True)
    sample = _sample()
    skipped = [f for f in sample if not eqsat.fast_tier_can_change(f)]
    assert 100 <= len(skipped) < len(sample)
    for k in range(0, len(skipped), 25):
        batch = skipped[k : k + 25]
        for f, r in zip(batch, tier.run(batch), strict=True):
            assert r.uop is f, f"{f.render()} -> {r.uop.render()}"
            assert r.lo is None or r.hi is None or (r.lo <= f.vmin and f.vmax <= r.hi), (
                f"{f.render()}: [{r.lo}, {r.hi}] is tighter than [{f.vmin}, {f.vmax}]")
    assert all(eqsat.saturate_fast(f) is f for f in skipped[:50])


def test_fast_tier_rules_are_restrictions_of_eqsat_rules() -> None:
    """Each fast-tier rewrite is its `eqsat` rule (checked for soundness by test_soundness.py) matching products by a
    constant only as `x * c`: the same right-hand side and guard, and on random instances of its pattern the `eqsat`
    rule matches too, with the same result."""
    from rewrite.dsl import RuleSet
    from tests.rules.test_soundness import EQSAT_DTYPES, EQSAT_HINTS, draw, fire

    by_name = {r.name: r for r in eqsat.eqsat}
    for rule in eqsat.fast_tier_rules():
        orig = by_name[rule.name]
        assert rule.rhs is orig.rhs and rule.when is orig.when
        one, other = RuleSet("one", [rule]), RuleSet("other", [orig])
        rng = random.Random(rule.name)
        fired = 0
        for _ in range(200):
            got = draw(rule, rng, wide=False, value_dtypes=EQSAT_DTYPES, hints=EQSAT_HINTS)
            if got is None or (a := fire(one, got[0])) is None:
                continue
            fired += 1
            b = fire(other, got[0])
            assert b is not None and b[0] is a[0], f"{rule.name} on {got[0].render()}"
        assert fired, rule.name
