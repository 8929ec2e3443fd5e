"""Helpers shared by the symbolic-rule tests: a vectorized brute-force evaluator over variable boxes and a
random index-expression generator.

`grid_eval` computes an index/bool expression at every point of its variables' boxes at once with numpy
(floor // and % as numpy defines them for integers, which match Python's), tracking where the value is
defined (no division by zero, no negative shift). It is checked against the reference evaluator
`UOp.evaluate` (rewrite/evaluate.py) in the tests that use it, so a bug here cannot hide one in the rules.
"""

from __future__ import annotations

import itertools
import random

import numpy as np

from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

Box = tuple[int, int]


def leaves(u: UOp) -> list[UOp]:
    """The variables (named PARAMs) and RANGEs of `u`, sorted by rendered name."""
    out = {n for n in u.toposort() if (n.op is Ops.PARAM and isinstance(n.arg.slot, str)) or n.op is Ops.RANGE}
    return sorted(out, key=lambda n: n.render())


def box_of(v: UOp) -> Box:
    if v.op is Ops.RANGE:
        return 0, int(v.src[0].arg[0]) - 1
    return int(v.src[1].arg[0]), int(v.src[2].arg[0])


def grid(vs: list[UOp], max_points: int | None = None, rng: random.Random | None = None) -> dict[str, np.ndarray]:
    """Every assignment of the variables within their boxes (or `max_points` random ones if there are more)."""
    boxes = [box_of(v) for v in vs]
    size = 1
    for lo, hi in boxes:
        size *= hi - lo + 1
    names = [v.render() for v in vs]
    if max_points is None or size <= max_points:
        axes = [np.arange(lo, hi + 1, dtype=np.int64) for lo, hi in boxes]
        mesh = np.meshgrid(*axes, indexing="ij") if axes else []
        return {n: _typed(m.reshape(-1), v) for n, m, v in zip(names, mesh, vs, strict=True)}
    rng = rng or random.Random(0)
    pts = {
        n: np.array([rng.randint(lo, hi) for _ in range(max_points)], dtype=np.int64)
        for n, (lo, hi) in zip(names, boxes, strict=True)
    }
    for n, (lo, hi) in zip(names, boxes, strict=True):  # corners matter most for interval-guarded rules
        pts[n][:2] = (lo, hi)
    return {n: _typed(pts[n], v) for n, v in zip(names, vs, strict=True)}


def _typed(a: np.ndarray, v: UOp) -> np.ndarray:
    return a.astype(bool) if v.dtype is dtypes.bool else a


def grid_eval(u: UOp, env: dict[str, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, defined) of the index/bool expression `u` at the n points of `env`."""
    vals: dict[UOp, np.ndarray] = {}
    ok: dict[UOp, np.ndarray] = {}
    true = np.ones(n, dtype=bool)
    for node in u.toposort():
        op, src = node.op, node.src
        if op is Ops.CONST:
            v = node.arg[0]
            vals[node] = np.full(n, v, dtype=bool if isinstance(v, bool) else np.int64)
            ok[node] = true
            continue
        if op is Ops.PARAM or op is Ops.RANGE:
            if op is Ops.PARAM and not isinstance(node.arg.slot, str):
                raise TypeError("grid_eval: only named variables")
            vals[node], ok[node] = env[node.render()], true
            continue
        if op is Ops.VCONST:  # shape operands of PARAM
            continue
        a = [vals[s] for s in src]
        d = ok[src[0]]
        for s in src[1:]:
            d = d & ok[s]
        if op is Ops.ADD:
            r = a[0] + a[1]
        elif op is Ops.SUB:
            r = a[0] - a[1]
        elif op is Ops.MUL:
            r = a[0] * a[1]
        elif op is Ops.NEG:
            r = -a[0]
        elif op is Ops.MAX:
            r = np.maximum(a[0], a[1])
        elif op in (Ops.IDIV, Ops.MOD):
            nz = a[1] != 0
            den = np.where(nz, a[1], 1)
            r = np.floor_divide(a[0], den) if op is Ops.IDIV else np.remainder(a[0], den)
            d = d & nz
        elif op is Ops.CMPLT:
            r = a[0] < a[1]
        elif op is Ops.CMPNE:
            r = a[0] != a[1]
        elif op is Ops.CMPEQ:
            r = a[0] == a[1]
        elif op is Ops.CMPGT:
            r = a[0] > a[1]
        elif op is Ops.CMPGE:
            r = a[0] >= a[1]
        elif op is Ops.CMPLE:
            r = a[0] <= a[1]
        elif op is Ops.NOT:
            r = ~a[0]
        elif op is Ops.AND:
            r = a[0] & a[1]
        elif op is Ops.OR:
            r = a[0] | a[1]
        elif op is Ops.XOR:
            r = a[0] ^ a[1]
        elif op in (Ops.SHL, Ops.SHR):
            okshift = (a[1] >= 0) & (a[1] < 40)
            sh = np.where(okshift, a[1], 0)
            r = np.left_shift(a[0], sh) if op is Ops.SHL else np.right_shift(a[0], sh)
            d = d & okshift
        elif op is Ops.WHERE:
            r = np.where(a[0], a[1], a[2])
            d = ok[src[0]] & np.where(a[0], ok[src[1]], ok[src[2]])
        else:
            raise TypeError(f"grid_eval: {op.name} is not supported")
        vals[node], ok[node] = r, d
    return vals[u], ok[u]


def point_env(env: dict[str, np.ndarray], i: int) -> dict[str, int | bool]:
    return {k: v[i].item() for k, v in env.items()}


def same_values(u: UOp, s: UOp) -> None:
    """`s` (a rewrite of `u`) has u's value wherever u is defined, and its [vmin, vmax] holds every such value:
    checked at every point of the variables' boxes (grid)."""
    env = grid(leaves(u))
    n = len(next(iter(env.values()))) if env else 1
    v0, d0 = grid_eval(u, env, n)
    v1, d1 = grid_eval(s, env, n)
    bad = d0 & (~d1 | (v0 != v1))
    assert not bad.any(), f"{u.render()} -> {s.render()} differs at {point_env(env, int(bad.argmax()))}"
    out = d0 & ((v0 < s.vmin) | (v0 > s.vmax))
    assert not out.any(), f"{s.render()}: [{s.vmin}, {s.vmax}] misses a value at {point_env(env, int(out.argmax()))}"


def fits_int64(u: UOp) -> bool:
    """Every constant of `u` is far enough inside int64 for grid_eval's products not to overflow."""
    return all(abs(n.arg[0]) < 2**40 for n in u.toposort() if n.op is Ops.CONST and not isinstance(n.arg[0], bool))


# ---------------------------------------------------------------------------- random index expressions

_LOWS = (0, 0, 0, 1, -1, -2, -5, -8)


def random_box(rng: random.Random) -> Box:
    lo = rng.choice(_LOWS)
    return lo, lo + rng.choice((0, 1, 2, 3, 4, 5, 7, 8, 11, 15))


def random_const(rng: random.Random, nonzero: bool = False) -> int:
    while True:
        c = rng.choice((rng.randint(-4, 4), rng.randint(-16, 16), rng.choice((2, 3, 4, 6, 8, 12, 16, -2, -4))))
        if c or not nonzero:
            return c


def random_expr(rng: random.Random, vs: list[UOp], depth: int) -> UOp:
    """A random index expression over `vs`: + - * // % max where, with < and != inside conditions."""
    if depth <= 0 or rng.random() < 0.2:
        return rng.choice(vs) if rng.random() < 0.8 else UOp.const(random_const(rng))
    k = rng.random()
    sub = lambda: random_expr(rng, vs, depth - 1)
    if k < 0.10:  # the shapes index math is made of: (x*c + y) // c and % c, nested
        c = random_const(rng, nonzero=True)
        num = sub() * c + sub()
        return num // c if rng.random() < 0.5 else num % c
    if k < 0.22:
        return sub() + sub()
    if k < 0.30:
        return sub() - sub()
    if k < 0.45:
        return sub() * UOp.const(random_const(rng)) if rng.random() < 0.8 else sub() * sub()
    if k < 0.62:
        return sub() // UOp.const(random_const(rng, nonzero=True))
    if k < 0.80:
        return sub() % UOp.const(random_const(rng, nonzero=True))
    if k < 0.88:
        return sub().maximum(sub())
    return random_cond(rng, vs, depth - 1).where(sub(), sub())


def random_cond(rng: random.Random, vs: list[UOp], depth: int) -> UOp:
    a = random_expr(rng, vs, depth)
    b = UOp.const(random_const(rng)) if rng.random() < 0.7 else random_expr(rng, vs, depth)
    return a < b if rng.random() < 0.7 else a.ne(b)


def random_case(rng: random.Random, depth: int = 4) -> UOp:
    names = ("a", "b", "c")[: rng.randint(1, 3)]
    vs = [UOp.variable(n, *random_box(rng)) for n in names]
    return random_cond(rng, vs, depth - 1) if rng.random() < 0.15 else random_expr(rng, vs, depth)


def boxes_product(vs: list[UOp]) -> int:
    return int(np.prod([box_of(v)[1] - box_of(v)[0] + 1 for v in vs])) if vs else 1


__all__ = [
    "box_of",
    "boxes_product",
    "dtypes",
    "fits_int64",
    "grid",
    "grid_eval",
    "itertools",
    "leaves",
    "point_env",
    "random_case",
    "random_expr",
]
