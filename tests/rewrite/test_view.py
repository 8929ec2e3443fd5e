"""Seed 002: views with masks give simplified index and valid expressions; expand_node enumerates values."""

from __future__ import annotations

import itertools

import pytest

import rules  # noqa: F401 -- registers UOp.simplify
from rewrite import UOp
from rewrite.view import View, expand_node

k = UOp.variable("k", 1, 100)
x, y = UOp.variable("x", 0, 100), UOp.variable("y", 0, 100)


@pytest.mark.parametrize(("mask", "index", "valid"), [
    (None, "((x*3)+y)", "True"),
    (((0, 2), (0, 2)), "((x*3)+y)", "((x<2) and (y<2))"),
    (((1, 2), (0, 2)), "(y+3)", "(((0<x) and (x<2)) and (y<2))"),
])
def test_seed_examples(mask: tuple | None, index: str, valid: str) -> None:
    e1, e2 = View.create((k, 3), mask=mask).expr_idxs([x, y])
    assert (e1.render(), e2.render()) == (index, valid)


@pytest.mark.parametrize("mask", [None, ((0, 2), (0, 2)), ((1, 2), (0, 2)), ((3, 7), (1, 3))])
def test_index_is_exact_wherever_valid(mask: tuple | None) -> None:
    xs, ys = UOp.variable("x", 0, 9), UOp.variable("y", 0, 4)
    view = View.create((10, 5), strides=(7, 2), offset=4, mask=mask)
    e1, e2 = view.expr_idxs([xs, ys])
    for xv, yv in itertools.product(range(10), range(5)):
        env = {"x": xv, "y": yv}
        inside = mask is None or all(lo <= v < hi for v, (lo, hi) in zip((xv, yv), mask, strict=True))
        assert e2.evaluate(env) == inside
        if inside:
            assert e1.evaluate(env) == 4 + 7 * xv + 2 * yv


def test_empty_mask_is_never_valid() -> None:
    _, e2 = View.create((4,), mask=((3, 3),)).expr_idxs([UOp.variable("x", 0, 3)])
    assert e2.render() == "False"


def test_expand_node() -> None:
    a = UOp.variable("a", 5, 7)
    u = UOp.variable("_uidx0", 5, 7)
    assert expand_node(UOp.const(42)) == [UOp.const(42)]
    assert expand_node(a) == [a]
    assert [n.render() for n in expand_node(u)] == ["5", "6", "7"]
    assert [n.render() for n in expand_node(u * 3)] == ["15", "18", "21"]
    v = UOp.variable("_uidx1", 0, 1)
    assert [n.render() for n in expand_node(u * 2 + v)] == ["10", "11", "12", "13", "14", "15"]
    assert [n.render() for n in expand_node(a + u, over=[u])] == ["(a+5)", "(a+6)", "(a+7)"]
