"""Graph recipes for the engine benchmark: one description, built by each side with its own UOp API.

A recipe is a list of steps; step k builds node k from earlier nodes, so both engines get the same DAG:
  ("var", name, lo, hi)    a bounded integer variable
  ("const", value)         an index constant (bool constants are never leaves; comparisons make bools)
  (op, i, j) / ("where", c, t, f)   op in OPS, operands by step number
  ("sink", [i, ...])       the root, last step
"""

from __future__ import annotations

import random

OPS = ("add", "mul", "idiv", "mod", "max", "lt", "where")
_WEIGHTS = (30, 20, 10, 10, 8, 12, 10)
_CONSTS = (0, 1, 1, 2, 3, 4, 5, 7, 8, 16, 32, 64, 100)
_DIVISORS = (1, 2, 3, 4, 8, 16, 100)
_VAR_HIGHS = (1, 7, 15, 63, 255, 1023)

Step = tuple


def random_dag(n: int, seed: int = 0) -> list[Step]:
    """About `n` distinct nodes of random index arithmetic (+ * // % max < where) over 8 variables, seeded.

    Operands come mostly from the last few dozen nodes (so expressions nest deeply and rules like
    (x + c0) + c1 find their shapes) and often are small constants (so identities and folding fire);
    divisors and factors are mostly constants, as in index math; guarded rules read the operands' intervals.
    Values stay below 2**20, as index values do: an op that could exceed it becomes a modulo by a constant
    (unbounded products would turn the interval arithmetic of both engines into big-integer arithmetic)."""
    rng = random.Random(seed)
    steps: list[Step] = []
    hi: list[int] = []  # an upper bound of each step's value (every value is >= 0)
    consts: dict[int, int] = {}
    ints: list[int] = []
    bools: list[int] = []
    used: set[int] = set()

    def add(step: Step, bound: int) -> int:
        steps.append(step)
        hi.append(bound)
        return len(steps) - 1

    def const(v: int) -> int:
        if v not in consts:
            consts[v] = add(("const", v), v)
        return consts[v]

    def pick(pool: list[int]) -> int:
        k = pool[-1 - min(len(pool) - 1, int(rng.expovariate(1 / 24)))] if rng.random() < 0.6 else rng.choice(pool)
        used.add(k)
        return k

    for i in range(8):
        top = rng.choice(_VAR_HIGHS)
        ints.append(add(("var", f"v{i}", 0, top), top))
    while len(steps) < n - 1:
        opname = rng.choices(OPS, _WEIGHTS)[0]
        if opname == "where":
            if not bools:
                continue
            c, t, f = pick(bools), pick(ints), pick(ints)
            ints.append(add(("where", c, t, f), max(hi[t], hi[f])))
            continue
        x = pick(ints)
        if opname in ("idiv", "mod"):
            y = const(rng.choice(_DIVISORS))  # a divisor that may be 0 makes both engines give up on bounds
        elif opname == "mul":  # index math is mostly affine: node * node is rare
            y = const(rng.choice(_CONSTS)) if rng.random() < 0.95 else pick(ints)
        elif rng.random() < 0.03:
            y = x
        else:
            y = const(rng.choice(_CONSTS)) if rng.random() < 0.4 else pick(ints)
        bound = _bound(opname, hi[x], hi[y], steps[y][0] == "const")
        if bound >= 1 << 20:
            opname, y = "mod", const(rng.choice(_DIVISORS))
            bound = min(hi[x], hi[y] - 1)
        if opname in ("add", "mul") and rng.random() < 0.15:
            x, y = y, x  # constants on the left too, so commutative matching is exercised
        k = add((opname, x, y), bound)
        (bools if opname == "lt" else ints).append(k)
    roots = [k for k in range(len(steps)) if k not in used and steps[k][0] not in ("var", "const")]
    steps.append(("sink", roots))
    return steps


def _bound(opname: str, hx: int, hy: int, y_const: bool) -> int:
    if opname == "add":
        return hx + hy
    if opname == "mul":
        return hx * hy
    if opname == "idiv":
        return hx // hy if y_const and hy > 0 else hx
    if opname == "mod":
        return min(hx, hy - 1) if y_const and hy > 0 else hx
    return 1 if opname == "lt" else max(hx, hy)


def chain(n: int) -> list[Step]:
    """x = (x + 1) + 0, repeated: n nodes in one path; the rules collapse it to v + n/2."""
    steps: list[Step] = [("var", "v0", 0, 1023), ("const", 1), ("const", 0)]
    x = 0
    while len(steps) < n + 3:
        steps.append(("add", x, 1))
        steps.append(("add", len(steps) - 1, 2))
        x = len(steps) - 1
    steps.append(("sink", [x]))
    return steps
