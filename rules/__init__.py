"""Declarative rule sets, one module per concern. Importing this package registers `UOp.simplify`.

The registered simplifier runs the fast symbolic rules, then (when `rules.eqsat` is importable and the
EGGLOG knob is not 0) e-graph saturation, then the fast rules again on what saturation extracted.

Saturation is skipped unless `worth_saturating` says the e-graph may find something the fast rules did not:
a variable whose box is a single value (the fast rules leave variables alone), or a sum whose two sides share a
leaf and one side divides or takes a remainder (`x - x%4`: the e-graph holds `(x//4)*4`, smaller and with the
exact interval, which decides comparisons such as a kernel's mask `(r - r%4) < 13`). Everything else the fast
rules leave is canonical: sums and products in order, like terms merged, divisions and moduli merged and split as
far as their intervals allow, and comparisons of such terms, which the e-graph's rules only reorder. Measured on
1,069 distinct fast results the earlier test let through (the issue-14 family table, the benchmark's random and
lane-padded kernel batches, 4,000 fuzzer expressions): the 492 it let through only for a division or modulo of
a non-leaf came back from the whole e-graph rule set no smaller and with no tighter interval, while 44 of the
others got smaller and 14 tighter. An e-graph call costs ~1-2 ms; the fast rules cost ~0.05 ms an expression.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from rewrite.env import knob_int
from rewrite.ops import Ops
from rewrite.uop import UOp, register_simplifier

# `symbolic` (the full fast set) is not re-exported here: the name would hide the rules.symbolic module
from rules.divmod import divmod_linear, divmod_rules, divmod_templates
from rules.linear import factor_sums
from rules.symbolic import (
    bool_algebra,
    canonical_order,
    comparisons,
    constant_folding,
    identities,
    index_decompositions,
    like_terms,
    linear_rules,
    max_folding,
    point_folding,
    simplify_fast,
    symbolic_simple,
    where_folding,
)

_saturate: list[Callable[[UOp], UOp] | None] = []  # looked up once: [rules.eqsat.saturate_fast] or [None]


def _egglog_saturate() -> Callable[[UOp], UOp] | None:
    if not _saturate:
        try:
            mod = importlib.import_module("rules.eqsat")
        except ImportError:  # another module provides it; without it the fast rules are the whole simplifier
            mod = None
        _saturate.append(getattr(mod, "saturate_fast", None))
    return _saturate[0]


_LEAVES = frozenset({Ops.CONST, Ops.RANGE, Ops.PARAM, Ops.SPECIAL})


def worth_saturating(u: UOp) -> bool:
    """Could e-graph saturation shrink `u`, a result of the fast rules, or tighten its interval? True when it
    holds a symbolic variable whose box is one value, or a sum whose two sides share a leaf and one of them divides
    or takes a remainder (`x - x%4`: term by term its interval is [-3, 100] for x in [0, 100], the e-graph's
    equivalent `(x//4)*4` gives [0, 100]) (module docstring)."""
    leaves: dict[UOp, frozenset[UOp]] = {}
    divmod_below: dict[UOp, bool] = {}
    for n in u.toposort():
        op = n.op
        if op is Ops.PARAM and len(n.src) == 3 and n.vmin == n.vmax:
            return True
        if op in _LEAVES:
            leaves[n], divmod_below[n] = (frozenset() if op is Ops.CONST else frozenset((n,))), False
            continue
        leaves[n] = frozenset().union(*(leaves[s] for s in n.src))
        divmod_below[n] = op is Ops.IDIV or op is Ops.MOD or any(divmod_below[s] for s in n.src)
        if op is Ops.ADD and (divmod_below[n.src[0]] or divmod_below[n.src[1]]) and \
                not leaves[n.src[0]].isdisjoint(leaves[n.src[1]]):
            return True
    return False


def simplify(u: UOp) -> UOp:
    """Fast rules, then egglog saturation (if available, EGGLOG != 0 and worth it), then the fast rules again, then
    shared constant factors taken out of sums where that leaves fewer nodes (rules.linear.factor_sums: the fast
    rules would distribute them again, so it runs last)."""
    u = simplify_fast(u)
    if knob_int("EGGLOG") != 0 and worth_saturating(u) and (sat := _egglog_saturate()) is not None:
        u = simplify_fast(sat(u))
    return factor_final(u)


def factor_final(u: UOp) -> UOp:
    """rules.linear.factor_sums on a fast result `u`; where the fast rules find more in the factored form than in `u`
    (`((b-5)//-2)*2 - 10` factored is `((b-5)//-2 - 5)*2`, whose constant joins the division), their result is
    factored in turn (a few rounds), so the full simplifier's result is a fixed point of it."""
    for _ in range(3):
        g = factor_sums(u)
        if g is u:
            return u
        h = simplify_fast(g)
        if h is u:
            return g
        u = h
    return factor_sums(u)


register_simplifier(simplify)

__all__ = [
    "bool_algebra",
    "canonical_order",
    "comparisons",
    "constant_folding",
    "divmod_linear",
    "divmod_rules",
    "divmod_templates",
    "factor_final",
    "identities",
    "index_decompositions",
    "like_terms",
    "linear_rules",
    "max_folding",
    "point_folding",
    "simplify",
    "simplify_fast",
    "symbolic_simple",
    "where_folding",
    "worth_saturating",
]
