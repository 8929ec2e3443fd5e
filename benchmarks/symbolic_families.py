"""The `symbolic` suite's issue-14 families: benchmarks/symbolic_family_cases.py's table through our fast rules, our
full simplifier (UOp.simplify, one call per expression) and tinygrad's, with node counts per family, how many
cases each side wins, and results checked against the original at random points."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.symbolic_simplifiers import check_equal, fast_each, full_each, nodes
from benchmarks.symbolic_tinygrad import Untranslatable, tinygrad_each, to_tinygrad


def family_lines(peer: bool) -> list[str]:
    """One line per family: cases, nodes in -> fast, full, tinygrad; cases where full is larger / smaller than
    tinygrad; wrong results per simplifier."""
    from benchmarks.symbolic_family_cases import CASES, FAMILIES, build

    lines = []
    for fam in FAMILIES:
        exprs = [build(e, boxes) for f, e, boxes, _ in CASES if f == fam]
        fast, full = fast_each(exprs), full_each(exprs)
        results: dict[str, Sequence[Any]] = {"fast": fast, "full": full}
        line = (f"family {fam:<14} {len(exprs):>2} cases, nodes {_sum(exprs):>4} -> fast {_sum(fast):>4}, "
                f"full {_sum(full):>4}")
        tleaves = None
        if peer:
            try:
                texprs, tleaves = to_tinygrad(exprs)
            except Untranslatable as e:
                lines.append(f"{line}; tinygrad: not translatable ({e})")
                continue
            tout = tinygrad_each(texprs)
            results["tinygrad"] = tout
            ours, theirs = [nodes(u) for u in full], [nodes(t) for t in tout]
            worse = sum(a > b for a, b in zip(ours, theirs, strict=True))
            better = sum(a < b for a, b in zip(ours, theirs, strict=True))
            line += f", tinygrad {sum(theirs):>4}; full larger than tinygrad in {worse}, smaller in {better}"
        bad = check_equal(exprs, results, tleaves)
        lines.append(line + "; wrong results: " + ", ".join(f"{k} {v}" for k, v in bad.items()))
    return lines


def _sum(us: Sequence[Any]) -> int:
    return sum(nodes(u) for u in us)
