"""Issue 14's simplification families (benchmarks/symbolic_family_cases.py) through the full simplifier: each row must
reach its exact form or node budget, equal the input at every point of its variables' boxes (brute force, the
fast tier's result too), and be a fixed point of the simplifier."""

from __future__ import annotations

import pytest

import rules  # noqa: F401  # registers UOp.simplify
from benchmarks.symbolic_family_cases import CASES, FAMILIES, build
from rewrite.uop import UOp
from rules.symbolic import simplify_fast
from tests.rules.symcheck import same_values


def nodes(u: UOp) -> int:
    """Unique nodes, variables and ranges as leaves (what benchmarks.symbolic_simplifiers.nodes counts)."""
    from benchmarks.symbolic_simplifiers import nodes as count

    return count(u)


@pytest.mark.parametrize(("family", "expr", "boxes", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_family_case(family: str, expr: str, boxes: str, expected: int | str) -> None:
    u = build(expr, boxes)
    s = u.simplify()
    if isinstance(expected, str):
        assert s.render() == expected, f"{u.render()} -> {s.render()}, expected {expected}"
    else:
        assert nodes(s) <= expected, f"{u.render()} -> {s.render()}: {nodes(s)} nodes, at most {expected} expected"
    assert nodes(s) <= nodes(u)
    same_values(u, s)
    same_values(u, simplify_fast(u))
    assert s.simplify() is s, f"{s.render()} -> {s.simplify().render()}: not a fixed point"


@pytest.mark.parametrize(("family", "expr", "boxes", "expected"), CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_family_case_through_the_egraph(family: str, expr: str, boxes: str, expected: int | str) -> None:
    """The e-graph tier on its own agrees with the input at every point and is no larger than the input; on the
    fast tier's result it finds nothing smaller than the fast tier's node count (the two checked against each
    other)."""
    from rules.eqsat import saturate

    u = build(expr, boxes)
    r = saturate(u)
    same_values(u, r)
    assert nodes(r) <= nodes(u)
    f = simplify_fast(u)
    g = saturate(f)
    same_values(u, g)
    assert nodes(simplify_fast(g)) <= nodes(f)


def test_every_family_has_cases() -> None:
    counts = {f: sum(c[0] == f for c in CASES) for f in FAMILIES}
    assert set(counts) == {"nested-div", "symbolic-gcd", "recombine", "neg-div-const", "comparisons", "where", "xor",
                           "remainder"}
    assert min(counts.values()) >= 6, counts


def test_closure_folding_keeps_the_gate_of_a_load_in_the_other_branch() -> None:
    """A WHERE is a select: both branches run, so a gated load in the branch not selected still executes and its
    gate keeps it in bounds (Tensor.cat of two buffers read a[-2] when this gate was folded away)."""
    from rewrite.dtype import dtypes
    from rewrite.ops import Ops
    i = UOp.variable("i", 0, 4)
    a, b = UOp.buffer(0, dtypes.bool, (3,)), UOp.buffer(1, dtypes.bool, (2,))
    first = i < 3
    second = UOp(Ops.NOT, (first,))
    la = a.index(i).load(UOp.const(False, dtypes.bool), first)
    lb = b.index(i - 3).load(UOp.const(False, dtypes.bool), second)
    out = first.where(la, lb).simplify()
    loads = [u for u in out.toposort() if u.op is Ops.LOAD]
    assert len(loads) == 2 and all(len(ld.src) == 3 and ld.src[2].op is not Ops.CONST for ld in loads), out.render()
