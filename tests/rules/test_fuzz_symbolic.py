"""Fuzzing the fast symbolic rules: random index expressions (depth up to 4, 1-3 variables, boxes with
negative lows; + - * // % max where, with < and != in conditions; constants of either sign, never a
constant 0 divisor) are simplified with simplify_fast and compared with the original by brute force over
every point of the variables' boxes. The simplified expression's [vmin, vmax] must hold every value, its
dtype must be the original's, and simplifying it again must change nothing (a fixed point).

CI runs 5,000 expressions (five seeded batches of 900 plus 500 hypothesis examples); FUZZ_LONG=1 or
`-m slow` runs 100,000 more. The full simplifier (UOp.simplify: the fast rules, the e-graph's fast tier where it
can change something, the fast rules again, shared factors taken out of sums) gets the same checks on a seeded
batch in CI and on 100,000 expressions in the long run, and must never return more unique nodes than the fast
rules alone.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rules  # noqa: F401  # registers UOp.simplify
from rewrite.uop import UOp
from rules.linear import count_nodes
from rules.symbolic import simplify_fast
from tests.rules.symcheck import grid, grid_eval, leaves, point_env, random_case


def check(u: UOp, rng: random.Random, full: bool = False) -> bool:
    """Assert everything about one expression; True if the rules changed it. `full`: UOp.simplify instead of the fast
    rules, and its result has no more unique nodes than theirs."""
    s = u.simplify() if full else simplify_fast(u)
    vs = leaves(u)
    env = grid(vs)
    n = len(next(iter(env.values()))) if env else 1
    v0, d0 = grid_eval(u, env, n)
    assert d0.all(), f"generator produced an undefined expression: {u.render()}"
    assert s.dtype is u.dtype, f"{u.render()} -> {s.render()} changed dtype {u.dtype} -> {s.dtype}"
    assert {v.render() for v in leaves(s)} <= {v.render() for v in vs}
    v1, d1 = grid_eval(s, env, n)
    bad = ~d1 | (v0 != v1)
    if bad.any():
        i = int(bad.argmax())
        pytest.fail(f"{u.render()} -> {s.render()} differs at {point_env(env, i)}: {v0[i]} vs {v1[i]}")
    lo, hi = s.vmin, s.vmax
    out = (v0 < lo) | (v0 > hi)
    if out.any():
        i = int(out.argmax())
        pytest.fail(f"{u.render()} -> {s.render()} has interval [{lo}, {hi}] but is {v0[i]} at {point_env(env, i)}")
    if full:
        f = simplify_fast(u)
        assert count_nodes(s)[0] <= count_nodes(f)[0], f"{u.render()}: full {s.render()}, fast {f.render()}"
        assert s.simplify() is s, f"not a fixed point: {s.render()} -> {s.simplify().render()}"
    else:
        assert simplify_fast(s) is s, f"not a fixed point: {s.render()} -> {simplify_fast(s).render()}"
    i = rng.randrange(n)  # the vectorized evaluator agrees with the reference one
    assert u.evaluate(point_env(env, i)) == v0[i] == s.evaluate(point_env(env, i))
    return s is not u


def run_batch(seed: int, count: int, full: bool = False) -> int:
    rng = random.Random(seed)
    return sum(check(random_case(rng), rng, full) for _ in range(count))


@pytest.mark.parametrize("seed", range(5))
def test_fuzz_batch(seed: int) -> None:
    changed = run_batch(seed, 900)
    assert changed > 300  # the generator makes expressions the rules have something to do on


def test_fuzz_full_simplifier() -> None:
    assert run_batch(5, 900, full=True) > 300


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.randoms(use_true_random=False), st.integers(1, 4))
def test_fuzz_hypothesis(rng: random.Random, depth: int) -> None:
    check(random_case(rng, depth), rng)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 110))
def test_fuzz_long(seed: int, request: pytest.FixtureRequest) -> None:
    """100,000 expressions: runs with FUZZ_LONG=1, or when selected with `-m slow`."""
    marks = str(request.config.getoption("markexpr", "") or "")
    if os.environ.get("FUZZ_LONG", "0") != "1" and not ("slow" in marks and "not slow" not in marks):
        pytest.skip("long fuzz: set FUZZ_LONG=1 or run with -m slow")
    run_batch(seed, 10_000)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200, 210))
def test_fuzz_long_full(seed: int, request: pytest.FixtureRequest) -> None:
    """100,000 expressions through the full simplifier: runs with FUZZ_LONG=1, or when selected with `-m slow`."""
    marks = str(request.config.getoption("markexpr", "") or "")
    if os.environ.get("FUZZ_LONG", "0") != "1" and not ("slow" in marks and "not slow" not in marks):
        pytest.skip("long fuzz: set FUZZ_LONG=1 or run with -m slow")
    run_batch(seed, 10_000, full=True)


def test_simplification_shrinks_on_average() -> None:
    """The point of the rules: measured on a fixed batch, simplified expressions are much smaller."""
    rng = random.Random(1234)
    before = after = 0
    for _ in range(300):
        u = random_case(rng)
        before += len(u.toposort())
        after += len(simplify_fast(u).toposort())
    assert after < 0.6 * before, (before, after)
