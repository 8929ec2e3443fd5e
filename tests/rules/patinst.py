"""Instantiating a rule's left-hand side: a random UOp that has the pattern's shape.

var captures become variables with random boxes (negative values included) or, for index, small random
sums over a few shared variables (so the rules that look inside their operands get something to see);
const captures become random constants; literals keep their value; an op set picks one of its ops; a node
with unspecified sources gets random operands. Dtypes follow the op (WHERE's condition and NOT's operand
are bool, comparisons take the pattern's operand dtype) and the pattern's dtype constraints; a combination
the op rejects raises DTypeError, which the caller treats as "no instance".
"""

from __future__ import annotations

import random
from collections.abc import Callable

from rewrite.dsl import _ANY, Pat
from rewrite.dtype import DType, dtypes
from rewrite.ops import GroupOp, Ops
from rewrite.uop import UOp

_PREFER = (dtypes.index, dtypes.int8, dtypes.bool, dtypes.uint8)
_ARITY = {**{o: 1 for o in GroupOp.UnaryALU}, **{o: 2 for o in GroupOp.BinaryALU}, Ops.WHERE: 3}


def _pick(choices: frozenset[DType], want: DType) -> DType:
    if want in choices:
        return want
    for d in _PREFER:
        if d in choices:
            return d
    return next(iter(choices))


def _operand_dtype(p: Pat, fallback: DType) -> DType:
    """The operand dtype a comparison pattern asks for: the first constrained operand's, else `fallback`."""
    stack = list(p.src or ())
    while stack:
        q = stack.pop(0)
        if q.dtypes is not None:
            return _pick(q.dtypes, fallback)
        if q.kind == "op" and q.ops and not q.ops & GroupOp.Comparison and q.src:
            stack.extend(q.src)
    return fallback


class Instance:
    """One draw: `build(pat)` returns the UOp and fills `caps` (capture name -> UOp)."""

    def __init__(
        self,
        rng: random.Random,
        value_dtype: DType,
        wide: bool = False,
        hints: dict[str, Callable[[Instance], UOp]] | None = None,
    ) -> None:
        self.rng, self.T, self.wide = rng, value_dtype, wide
        self.caps: dict[str, UOp] = {}
        self.hints = hints or {}
        self.fresh = 0
        self.pool = [UOp.variable(f"v{i}", *self.box(dtypes.index)) for i in range(3)]

    # -- leaves --
    def box(self, dt: DType) -> tuple[int, int]:
        r = self.rng
        if dt is dtypes.bool:
            return r.choice(((False, True), (False, True), (False, False), (True, True)))
        if self.wide:
            lo = r.choice((0, 0, -1, r.randint(-(10**6), 10**6), r.randint(-1000, 1000)))
            hi = lo + r.choice((0, 1, r.randint(0, 50), r.randint(0, 10**6)))
        else:
            lo = r.choice((0, 0, 0, 1, -1, -2, -3, -5, -8, 3))
            hi = lo + r.choice((0, 1, 2, 3, 4, 5, 7, 9, 11))
        if dt.kind in "iu":
            lo, hi = max(lo, dt.min), min(hi, dt.max)
            lo = min(lo, hi)
        return lo, hi

    def constant(self, dt: DType) -> int | bool:
        r = self.rng
        if dt is dtypes.bool:
            return r.random() < 0.5
        seen = [u.arg[0] for u in self.caps.values() if u.op is Ops.CONST and type(u.arg[0]) is int]
        if seen and r.random() < 0.35:  # guards often relate constants: equal, multiples, products
            a, b = r.choice(seen), r.choice(seen)
            v = r.choice((a, -a, a * b, a * r.choice((2, 3, -2)), b * a * r.choice((1, -1))))
            return max(min(v, dt.max), dt.min) if dt.kind in "iu" else v
        if self.wide:
            v = r.choice((r.randint(-16, 16), r.randint(-1000, 1000), r.randint(-(10**6), 10**6)))
        else:
            v = r.choice((r.randint(-4, 4), r.randint(-9, 9), r.choice((-16, -12, -8, -6, 6, 8, 12, 16))))
        return max(min(v, dt.max), dt.min) if dt.kind in "iu" else v

    def subexpr(self) -> UOp:
        """A small index expression over the shared pool: a linear form, a div or a mod of a variable."""
        r = self.rng
        vs = r.sample(self.pool, r.randint(1, 3))
        k = r.random()
        if k < 0.55:
            term = lambda v, f: v if f == 1 else v * f
            acc = term(vs[0], r.choice((1, 1, 2, 3, 4, -1, -2, 8)))
            for v in vs[1:]:
                acc = acc + term(v, r.choice((1, 1, 2, 4, -1, 3)))
            k0 = r.choice((0, 0, 0, 1, 3, -1, -4, 8))
            return acc + k0 if k0 else acc
        c = UOp.const(r.choice((2, 3, 4, 8, -2, -3, -4)))
        base = vs[0] if r.random() < 0.7 else vs[0] + vs[-1]
        return base // c if k < 0.75 else base % c

    # -- patterns --
    def build(self, p: Pat, want: DType | None = None) -> UOp:
        want = want or self.T
        if p.name is not None and p.name in self.caps:
            return self.caps[p.name]
        if p.name is not None and p.name in self.hints and (u := self.hints[p.name](self)) is not None:
            self.caps[p.name] = u
            return u
        if p.dtypes is not None:
            want = _pick(p.dtypes, want)
        if p.kind == "var":
            if want is dtypes.index and self.rng.random() < 0.35:
                u = self.subexpr()
            else:
                self.fresh += 1
                u = UOp.variable(p.name or f"w{self.fresh}", *self.box(want), dtype=want)
        elif p.kind == "const":
            u = UOp.const(p.value if p.value is not _ANY else self.constant(want), want)
        elif p.kind == "op":
            u = self.build_op(p, want)
        else:
            raise TypeError(f"cannot instantiate a {p.kind} pattern on a left-hand side")
        if p.name is not None:
            self.caps[p.name] = u
        return u

    def build_op(self, p: Pat, want: DType) -> UOp:
        assert p.ops is not None
        opv = self.rng.choice(sorted(p.ops))
        n = _ARITY.get(opv, 2)
        srcs = p.src if p.src is not None else tuple(Pat("var") for _ in range(n))
        if opv in GroupOp.Comparison:
            operand = _operand_dtype(p, self.T if self.T is not dtypes.bool else dtypes.index)
            wants = [operand] * len(srcs)
        elif opv is Ops.WHERE:
            wants = [dtypes.bool, want, want]
        elif opv is Ops.NOT:
            wants = [dtypes.bool]
        else:
            wants = [want] * len(srcs)
        srcs_built = tuple(self.build(s, w) for s, w in zip(srcs, wants, strict=True))
        return UOp(opv, srcs_built, None if p.arg is _ANY else p.arg)


__all__ = ["Instance"]
