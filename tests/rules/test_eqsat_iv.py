"""The e-graph's packed intervals (rewrite.egraph_terms: one i64 `iv` per e-class, the bounds in two signed 32-bit
fields, a bound that does not fit stored looser, IV_NEG / IV_POS for a missing one): the egglog encoding, merge
and decoding against their Python oracle on values around every edge; and the analysis built on them
(rules.eqsat.ANALYSIS) sound by brute force on hundreds of random expressions over small boxes, never looser than
the fast tier's own interval there, and sound at sampled points on boxes past 2**31, where bounds go missing."""

from __future__ import annotations

import itertools
import random

import pytest

from rewrite.egglog_io import egglog_bindings, parse_forms
from rewrite.egraph import Saturator
from rewrite.egraph_terms import (
    I64_MAX,
    I64_MIN,
    IV_INF,
    IV_NEG,
    IV_POS,
    iv_decode,
    iv_merge,
    iv_pack,
    iv_packed,
    iv_unpack,
)
from rewrite.env import Context
from rewrite.errors import EvalError
from rewrite.evaluate import evaluate
from rewrite.ops import Ops
from rewrite.render import render
from rewrite.uop import UOp
from rules import eqsat
from rules.symbolic import simplify_fast
from tests.rules.symcheck import random_case

EDGES = [I64_MIN, -(1 << 40), IV_NEG - 1, IV_NEG, IV_NEG + 1, -7, -1, 0, 1, 5, IV_POS - 1, IV_POS, IV_POS + 1,
         1 << 40, I64_MAX]


@pytest.fixture(autouse=True, scope="module")
def no_disk_cache():
    with Context(CACHE=0):
        yield


def _eval(eg, text: str) -> int:
    out = eg.run_program(*parse_forms(eg, f"(extract {text})"))[-1]
    return out.termdag.get(out.term).value.value


def _ref_bounds(lo: int, hi: int) -> tuple[int, int]:
    """What a packed interval keeps of [lo, hi]: each bound, or a looser one (the field's edge) where it does not
    fit, a missing one as I64_MIN / I64_MAX."""
    rlo = I64_MIN if lo <= IV_NEG else min(lo, IV_POS)
    rhi = I64_MAX if hi >= IV_POS else max(hi, IV_NEG)
    return rlo, rhi


def test_pack_unpack_and_merge_in_egglog_match_python():
    eg = egglog_bindings().EGraph()
    pairs = [(lo, hi) for lo, hi in itertools.product(EDGES, EDGES) if lo <= hi]
    for lo, hi in pairs:
        p = _eval(eg, iv_pack(str(lo), str(hi)))
        assert p == iv_packed(lo, hi)
        rlo, rhi = iv_unpack(p)
        assert (rlo, rhi) == _ref_bounds(lo, hi)
        assert rlo <= lo and hi <= rhi  # never tighter than the interval packed
    rng = random.Random(0)
    for (a, b), (c, d) in (rng.sample(pairs, 2) for _ in range(150)):
        m = _eval(eg, iv_merge(str(iv_packed(a, b)), str(iv_packed(c, d))))
        la, ha = iv_unpack(iv_packed(a, b))
        lc, hc = iv_unpack(iv_packed(c, d))
        assert iv_unpack(m) == (max(la, lc), min(ha, hc))


def test_decode_reads_a_missing_bound_past_every_field_value():
    """`iv_decode`'s facts, run as a rule's query on each packed value, bind a stored bound as it is and a missing one
    as -IV_INF / IV_INF, which is past every field value (so a sum with any stored bound is still past the field)."""
    eg = egglog_bindings().EGraph()
    facts = " ".join(iv_decode("p", "l", "h"))
    eg.run_program(*parse_forms(eg, "(function DL (i64) i64 :merge new) (function DH (i64) i64 :merge new)"
                                    "(relation P (i64)) (ruleset t)"
                                    f"(rule ((P p) {facts}) ((set (DL p) l) (set (DH p) h)) :ruleset t)"))
    packed = {iv_packed(lo, hi) for lo, hi in itertools.product(EDGES, EDGES) if lo <= hi}
    eg.run_program(*parse_forms(eg, " ".join(f"(P {p})" for p in packed) + " (run-schedule (run t))"))
    assert IV_INF + IV_NEG >= IV_POS and -IV_INF + IV_POS <= IV_NEG
    for p in packed:
        rlo, rhi = iv_unpack(p)
        assert _eval(eg, f"(DL {p})") == (-IV_INF if rlo == I64_MIN else rlo)
        assert _eval(eg, f"(DH {p})") == (IV_INF if rhi == I64_MAX else rhi)


def _leaves(u: UOp) -> list[UOp]:
    return [n for n in u.toposort() if n.op is Ops.PARAM and len(n.src) == 3]


def _values(u: UOp, envs: list[dict]) -> list[int]:
    out = []
    for env in envs:
        try:
            v = evaluate(u, env)
        except EvalError:
            continue
        out.append(int(v))
    return out


def _all_points(u: UOp) -> list[dict] | None:
    boxes = [(render(n), int(n.src[1].value), int(n.src[2].value)) for n in _leaves(u)]
    total = 1
    for _, lo, hi in boxes:
        total *= hi - lo + 1
    if total > 4000:
        return None
    return [dict(zip([b[0] for b in boxes], pt, strict=True))
            for pt in itertools.product(*(range(lo, hi + 1) for _, lo, hi in boxes))]


@pytest.mark.parametrize("fast_tier", [False, True], ids=["full", "fast-tier"])
def test_intervals_sound_by_brute_force_and_no_looser_than_the_fast_tiers(fast_tier):
    rng = random.Random(21)
    exprs = list(dict.fromkeys(u for u in (random_case(rng) for _ in range(400)) if u.src and u.dtype.is_int))
    if fast_tier:
        exprs = list(dict.fromkeys(u for u in (simplify_fast(e) for e in exprs) if u.src))
    text, _ = eqsat.fast_tier_program() if fast_tier else eqsat.program()
    sat = Saturator("iv-brute", text, eqsat.FAST_TIER_SCHEDULE if fast_tier else eqsat.SCHEDULE)
    checked = 0
    for k in range(0, len(exprs), 4):
        batch = exprs[k : k + 4]
        for u, r in zip(batch, sat.run(batch), strict=True):
            pts = _all_points(u)
            if pts is None or r.lo is None or r.hi is None:
                continue
            vals = _values(u, pts)
            if not vals:
                continue
            checked += 1
            assert r.lo <= min(vals) and max(vals) <= r.hi, f"{render(u)}: [{r.lo}, {r.hi}] vs {min(vals)}..{max(vals)}"
            assert u.vmin <= r.lo and r.hi <= u.vmax, f"{render(u)}: [{r.lo}, {r.hi}] looser than {u.min_max}"
    assert checked >= 150


def _wide(rng: random.Random) -> UOp:
    """A random expression over variables whose boxes reach past 2**31 (and some that stay small)."""
    def var(i: int) -> UOp:
        lo = rng.choice([0, -5, -(1 << 33), 1 << 30, IV_POS - 3])
        hi = lo + rng.choice([3, 100, 1 << 31, 1 << 34])
        return UOp.variable(f"w{i}", lo, hi)

    vs = [var(i) for i in range(3)]

    def build(d: int) -> UOp:
        if d == 0 or rng.random() < 0.25:
            return rng.choice(vs) if rng.random() < 0.7 else UOp.const(rng.choice([2, 3, 8, -4, 1 << 31]))
        a, b = build(d - 1), build(d - 1)
        k = rng.choice(["+", "-", "*", "//", "%", "max", "<"])
        c = UOp.const(rng.choice([2, 3, 4, 8, 1 << 31, 3 << 30]))
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * rng.choice([2, -3, 1]),
                "//": lambda: a // c, "%": lambda: a % c, "max": lambda: a.maximum(b),
                "<": lambda: (a < b).where(a, b)}[k]()

    return build(3)


def test_intervals_sound_past_the_fields_at_sampled_points():
    rng = random.Random(3)
    exprs = list(dict.fromkeys(u for u in (_wide(rng) for _ in range(200)) if u.src))
    sat = Saturator("iv-wide", eqsat.program()[0], eqsat.SCHEDULE)
    checked = missing = 0
    for k in range(0, len(exprs), 4):
        batch = exprs[k : k + 4]
        for u, r in zip(batch, sat.run(batch), strict=True):
            if r.lo is None or r.hi is None:
                continue
            missing += r.lo == I64_MIN or r.hi == I64_MAX
            leaves = _leaves(u)
            envs = []
            for _ in range(40):
                env = {}
                for n in leaves:
                    lo, hi = int(n.src[1].value), int(n.src[2].value)
                    env[render(n)] = rng.choice([lo, hi, rng.randint(lo, hi)])
                envs.append(env)
            for v in _values(u, envs):
                checked += 1
                assert r.lo <= v <= r.hi, f"{render(u)} = {v} outside [{r.lo}, {r.hi}]"
    assert checked > 1000 and missing > 0
