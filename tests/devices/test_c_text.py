"""Text helpers of the C renderer (devices.c_scalar), against brute-force references."""

from __future__ import annotations

import itertools
import random

from devices.c_scalar import unparen


def _unparen_reference(s: str) -> str:
    """The outer parentheses dropped when they enclose everything: the depth is walked character by character and
    must not come back to 0 before the last one; a statement expression `({ ... })` keeps its parentheses."""
    if not (s.startswith("(") and s.endswith(")")) or s.startswith("({"):
        return s
    depth = 0
    for i, ch in enumerate(s):
        depth += ch == "("
        depth -= ch == ")"
        if depth == 0 and i < len(s) - 1:
            return s
    return s[1:-1]


def test_unparen_examples() -> None:
    assert unparen("(a+b)") == "a+b"
    assert unparen("(a+b)*(c+d)") == "(a+b)*(c+d)"
    assert unparen("((a+b)*(c+d))") == "(a+b)*(c+d)"
    assert unparen("({ int x = 1; x; })") == "({ int x = 1; x; })"
    assert unparen("()") == ""
    assert unparen("a") == "a" and unparen("") == ""
    assert unparen("(x)(y)") == "(x)(y)"


def test_unparen_matches_the_reference_on_every_short_string() -> None:
    # every string up to 7 characters over an alphabet with both parentheses, a brace and a non-ASCII letter
    n = 0
    for k in range(8):
        for chars in itertools.product("()a{é", repeat=k):
            s = "".join(chars)
            assert unparen(s) == _unparen_reference(s), s
            n += 1
    assert n > 90_000


def test_unparen_matches_the_reference_on_long_expressions() -> None:
    rng = random.Random(0)

    def expr(depth: int) -> str:
        if depth == 0 or rng.random() < 0.2:
            return rng.choice(["x", "alu0", "1.0f", "data0[ridx0]", "é"])
        a, b = expr(depth - 1), expr(depth - 1)
        return rng.choice([f"({a}+{b})", f"{a}*{b}", f"(({a}))", f"f({a}, {b})", f"({a})-({b})"])

    for _ in range(3000):
        s = expr(rng.randint(1, 9))
        for t in (s, f"({s})", f"({s}", f"{s})"):
            assert unparen(t) == _unparen_reference(t), t
