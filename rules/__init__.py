"""Declarative rule sets, one module per concern. Importing this package registers `UOp.simplify`.

The registered simplifier runs the fast symbolic rules, then (when `rules.eqsat` is importable and the
EGGLOG knob is not 0) e-graph saturation, then the fast rules again on what saturation extracted. Saturation
is skipped when the fast result has no division, modulo or comparison left (after the fast rules every such
op has a non-constant operand): sums and products are already canonical there, and an egglog call costs ~10 ms.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from rewrite.env import getenv
from rewrite.ops import Ops
from rewrite.uop import UOp, register_simplifier

# `symbolic` (the full fast set) is not re-exported here: the name would hide the rules.symbolic module
from rules.divmod import divmod_linear, divmod_rules, divmod_templates
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

_saturate: list[Callable[[UOp], UOp] | None] = []  # looked up once: [rules.eqsat.saturate] or [None]


def _egglog_saturate() -> Callable[[UOp], UOp] | None:
    if not _saturate:
        try:
            mod = importlib.import_module("rules.eqsat")
        except ImportError:  # another module provides it; without it the fast rules are the whole simplifier
            mod = None
        _saturate.append(getattr(mod, "saturate", None))
    return _saturate[0]


_SATURATE_FOR = frozenset({Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE})


def simplify(u: UOp) -> UOp:
    """Fast rules, then egglog saturation (if available, EGGLOG != 0 and worth it), then the fast rules again."""
    u = simplify_fast(u)
    worth = int(getenv("EGGLOG")) != 0 and any(n.op in _SATURATE_FOR for n in u.toposort())
    if worth and (sat := _egglog_saturate()) is not None:
        u = simplify_fast(sat(u))
    return u


register_simplifier(simplify)

__all__ = [
    "bool_algebra",
    "canonical_order",
    "comparisons",
    "constant_folding",
    "divmod_linear",
    "divmod_rules",
    "divmod_templates",
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
]
