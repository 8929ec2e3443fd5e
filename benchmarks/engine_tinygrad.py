"""The tinygrad side of the engine benchmark: the same recipes built with tinygrad's UOp, the same 40 rules
(benchmarks/bench_engine.py, in the same order) written as a tinygrad PatternMatcher.

Index arithmetic in tinygrad 0.14 is dtype `weakint` with FLOORDIV/FLOORMOD, the floor semantics our
IDIV/MOD have. Replacements are built with the plain UOp constructor and an explicit dtype (no operator
sugar), the cheapest way tinygrad offers, so the comparison does not charge tinygrad for conveniences.
Imported only when tinygrad is installed.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

from tinygrad.dtype import dtypes
from tinygrad.helpers import Context
from tinygrad.uop.ops import Ops, PatternMatcher, UOp, UPat, graph_rewrite

from benchmarks.bench_engine import divides

IDX, BOOL = dtypes.weakint, dtypes.bool


def _k(v: object, like: UOp) -> UOp:
    return UOp(Ops.CONST, like.dtype, arg=v)


def _kb(v: bool) -> UOp:
    return UOp(Ops.CONST, BOOL, arg=v)


def _b(o: Ops, a: UOp, b: UOp) -> UOp:
    return UOp(o, BOOL if o is Ops.CMPLT else a.dtype, (a, b))


def _fold(c0: UOp, c1: UOp, o: Ops) -> UOp | None:
    a, b = c0.arg, c1.arg
    if o in (Ops.FLOORDIV, Ops.FLOORMOD) and b == 0:
        return None
    v = {Ops.ADD: lambda: a + b, Ops.MUL: lambda: a * b, Ops.FLOORDIV: lambda: a // b, Ops.FLOORMOD: lambda: a % b,
         Ops.MAX: lambda: max(a, b)}[o]()
    return _k(v, c0)


def _bin(o: Ops, a: UPat, b: UPat, ordered: bool = False) -> UPat:
    # a list src is tinygrad's commutative match (both orders); our DSL does the same for commutative ops
    comm = o in (Ops.ADD, Ops.MUL, Ops.MAX) and not ordered
    return UPat(o, src=[a, b] if comm else (a, b))


X, Y, COND = UPat.var("x"), UPat.var("y"), UPat.var("cond")
C0, C1 = UPat.cvar("c0"), UPat.cvar("c1")
A, M, D, R, MX, LT = Ops.ADD, Ops.MUL, Ops.FLOORDIV, Ops.FLOORMOD, Ops.MAX, Ops.CMPLT


def K(v: object) -> UPat:
    return UPat(Ops.CONST, arg=v)


# fmt: off
SYMBOLIC = PatternMatcher([
    (_bin(A, X, K(0)), lambda x: x),
    (_bin(M, X, K(1)), lambda x: x),
    (_bin(M, X, K(0)), lambda x: _k(0, x)),
    (_bin(D, X, K(1)), lambda x: x),
    (_bin(R, X, K(1)), lambda x: _k(0, x)),
    (_bin(MX, X, X), lambda x: x),
    (UPat(Ops.WHERE, src=(COND, X, X)), lambda cond, x: x),
    (_bin(LT, X, X), lambda x: _kb(False)),
    (_bin(D, X, X), lambda x: _k(1, x) if x.vmin > 0 else None),
    (_bin(R, X, X), lambda x: _k(0, x) if x.vmin > 0 else None),
    (_bin(A, C0, C1), lambda c0, c1: _fold(c0, c1, A)),
    (_bin(M, C0, C1), lambda c0, c1: _fold(c0, c1, M)),
    (_bin(D, C0, C1), lambda c0, c1: _fold(c0, c1, D)),
    (_bin(R, C0, C1), lambda c0, c1: _fold(c0, c1, R)),
    (_bin(MX, C0, C1), lambda c0, c1: _fold(c0, c1, MX)),
    (_bin(LT, C0, C1), lambda c0, c1: _kb(c0.arg < c1.arg)),
    (UPat(Ops.WHERE, src=(K(True), X, Y)), lambda x, y: x),
    (UPat(Ops.WHERE, src=(K(False), X, Y)), lambda x, y: y),
    (_bin(A, C0, X, ordered=True), lambda c0, x: _b(A, x, c0)),
    (_bin(M, C0, X, ordered=True), lambda c0, x: _b(M, x, c0)),
    (_bin(A, X, X), lambda x: _b(M, x, _k(2, x))),
    (_bin(A, _bin(M, X, C0), X), lambda x, c0: _b(M, x, _k(c0.arg + 1, x))),
    (_bin(A, _bin(M, X, C0), _bin(M, X, C1)), lambda x, c0, c1: _b(M, x, _k(c0.arg + c1.arg, x))),
    (_bin(A, _bin(A, X, C0), C1), lambda x, c0, c1: _b(A, x, _k(c0.arg + c1.arg, x))),
    (_bin(M, _bin(M, X, C0), C1), lambda x, c0, c1: _b(M, x, _k(c0.arg * c1.arg, x))),
    (_bin(A, _bin(A, X, C0), Y), lambda x, c0, y: _b(A, _b(A, x, y), c0)),
    (_bin(M, _bin(A, X, C0), C1), lambda x, c0, c1: _b(A, _b(M, x, c1), _k(c0.arg * c1.arg, x))),
    (_bin(MX, _bin(MX, X, C0), C1), lambda x, c0, c1: _b(MX, x, _k(max(c0.arg, c1.arg), x))),
    (_bin(D, X, C0), lambda x, c0: _k(0, x) if x.vmin >= 0 and x.vmax < c0.arg else None),
    (_bin(R, X, C0), lambda x, c0: x if x.vmin >= 0 and x.vmax < c0.arg else None),
    (_bin(D, _bin(D, X, C0), C1),
     lambda x, c0, c1: _b(D, x, _k(c0.arg * c1.arg, x)) if c0.arg > 0 and c1.arg > 0 else None),
    (_bin(R, _bin(R, X, C0), C1), lambda x, c0, c1: _b(R, x, c1) if divides(c1.arg, c0.arg) else None),
    (_bin(D, _bin(M, X, C0), C1),
     lambda x, c0, c1: _b(M, x, _k(c0.arg // c1.arg, x)) if divides(c1.arg, c0.arg) else None),
    (_bin(R, _bin(M, X, C0), C1), lambda x, c0, c1: _k(0, x) if divides(c1.arg, c0.arg) else None),
    (_bin(D, _bin(A, _bin(M, X, C0), Y), C0), lambda x, c0, y: _b(A, x, _b(D, y, c0)) if c0.arg > 0 else None),
    (_bin(R, _bin(A, _bin(M, X, C0), Y), C0), lambda x, c0, y: _b(R, y, c0) if c0.arg > 0 else None),
    (_bin(MX, X, Y), lambda x, y: x if x.vmin >= y.vmax else None),
    (_bin(LT, X, Y), lambda x, y: _kb(True) if x.vmax < y.vmin else None),
    (_bin(LT, X, Y), lambda x, y: _kb(False) if x.vmin >= y.vmax else None),
    (_bin(LT, _bin(A, X, C0), C1), lambda x, c0, c1: _b(LT, x, _k(c1.arg - c0.arg, x))),
])
# fmt: on
assert len(SYMBOLIC.patterns) == 40

_BINARY = {"add": A, "mul": M, "idiv": D, "mod": R, "max": MX, "lt": LT}


def build(steps: list[tuple]) -> UOp:
    nodes: list[UOp] = []
    for s in steps:
        k = s[0]
        if k == "var":
            u = UOp.variable(s[1], s[2], s[3], dtype=IDX)
        elif k == "const":
            u = UOp(Ops.CONST, IDX, arg=s[1])
        elif k == "where":
            u = UOp(Ops.WHERE, IDX, (nodes[s[1]], nodes[s[2]], nodes[s[3]]))
        elif k == "sink":
            u = UOp(Ops.SINK, dtypes.void, tuple(nodes[i] for i in s[1]))
        else:
            o = _BINARY[k]
            u = UOp(o, BOOL if o is LT else IDX, (nodes[s[1]], nodes[s[2]]))
        nodes.append(u)
    return nodes[-1]


def rewrite(g: UOp) -> UOp:
    return graph_rewrite(g, SYMBOLIC)


def rewrite_gc_paused(g: UOp) -> UOp:
    """tinygrad with the collector paused around the call, as our graph_rewrite does by itself: shows how
    much of the difference is that policy rather than the walk and the matcher."""
    gc.disable()
    try:
        return graph_rewrite(g, SYMBOLIC)
    finally:
        gc.enable()


@contextlib.contextmanager
def deep_stack() -> Iterator[None]:
    """tinygrad stops graph_rewrite when its work stack passes 250k entries; a 200k-node chain needs more."""
    with Context(REWRITE_STACK_LIMIT=10_000_000):
        yield


class _Counting(PatternMatcher):
    fired = 0

    def rewrite(self, uop: UOp, ctx: object = None) -> UOp | None:
        r = super().rewrite(uop, ctx)
        if r is not None:
            _Counting.fired += 1
        return r


def count_firings(steps: list[tuple]) -> int:
    pm = _Counting(SYMBOLIC.patterns)
    _Counting.fired = 0
    graph_rewrite(build(steps), pm)
    return _Counting.fired


def expr_size(root: UOp) -> int:
    """Nodes with variables as leaves, as bench_engine.expr_size counts ours."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        u = stack.pop()
        if id(u) in seen:
            continue
        seen.add(id(u))
        if not u.is_variable:
            stack.extend(u.src)
    return len(seen)


def translate(root: object) -> UOp:
    """Our UOp graph as tinygrad's: the same structure node for node (variables by name and bounds)."""
    from rewrite import Ops as O

    ours = {O.ADD: A, O.MUL: M, O.IDIV: D, O.MOD: R, O.MAX: MX, O.CMPLT: LT, O.WHERE: Ops.WHERE, O.SINK: Ops.SINK}
    out: dict[object, UOp] = {}
    for u in root.toposort():  # type: ignore[attr-defined]
        if u.op is O.PARAM and isinstance(u.arg.slot, str):
            out[u] = UOp.variable(u.arg.slot, u.vmin, u.vmax, dtype=IDX)
        elif u.op is O.CONST:
            v = u.arg[0]
            out[u] = UOp(Ops.CONST, BOOL if isinstance(v, bool) else IDX, arg=v)
        elif u.op in ours:
            o = ours[u.op]
            dt = dtypes.void if o is Ops.SINK else BOOL if o is LT else IDX
            out[u] = UOp(o, dt, tuple(out[s] for s in u.src))
    return out[root]


def same_graph(a: UOp, b: UOp) -> bool:
    return a is b  # hash-consed: structurally equal graphs are one object


def intern_maker(n: int) -> Callable[[object], list[UOp]]:
    """A function building n ADD nodes over fresh constants, as bench_engine's interning figure does for ours."""
    v = UOp.variable("v", 0, 100, dtype=IDX)
    consts = [UOp(Ops.CONST, IDX, arg=i) for i in range(n)]

    def make(_: object) -> list[UOp]:
        return [UOp(Ops.ADD, IDX, (v, c)) for c in consts]

    return make
