"""Proving a template rule with z3: LHS == RHS wherever the LHS is defined and the guard holds.

Index values are z3 Ints, bools are z3 Bools. Floor division and modulo are encoded from z3's Euclidean
`/` (which equals floor division for a positive divisor): floor(a / b) = a / b if b > 0 else (-a) / (-b),
and a % b = a - b * floor(a / b); every division on the left-hand side adds "divisor != 0" to the premises
and every division on the right-hand side must be defined too. Const captures are free Ints; var captures
and named subterms stand for any value in an interval [lo, hi] with free lo <= hi, and the guard reads
those through `.vmin` / `.vmax` (guards combine with & | so they take z3 terms). That is the abstraction
the rules rely on: intervals are bounds, not exact ranges. Only index/bool instances are encoded (sized
ints wrap; their soundness is checked by evaluation).
"""

from __future__ import annotations

import itertools
from typing import Any

from rewrite.dsl import _ANY, Pat, Rule
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

try:
    import z3
except ImportError:  # pragma: no cover - z3 is optional
    z3 = None


class Unsupported(Exception):
    """The rule uses something this encoding does not cover (a callable, a shift, a sized int)."""


def fdiv(a: Any, b: Any) -> Any:
    return z3.If(b > 0, a / b, (-a) / (-b))


def fmod(a: Any, b: Any) -> Any:
    return a - b * fdiv(a, b)


class _Bounds:
    """What a guard sees for a non-constant capture: symbolic interval bounds. A guard may also build a node from
    a capture and a constant (`(x % c0).vmax`, as the e-graph rules do): that node gets bounds of its own, free
    except that they bound its value (the premises an interval analysis guarantees, and nothing more)."""

    def __init__(self, name: str, value: Any = None, premises: list | None = None) -> None:
        self.name, self.value, self.premises = name, value, premises
        self.vmin, self.vmax = z3.Int(f"{name}.lo"), z3.Int(f"{name}.hi")
        if premises is not None and value is not None:
            premises += [self.vmin <= value, value <= self.vmax]

    def _derived(self, sym: str, other: object, fn: Any) -> _Bounds:
        if self.premises is None or not (isinstance(other, int) or z3.is_int(other)):
            raise TypeError(f"a guard combines an interval with {type(other).__name__}")
        o = z3.IntVal(other) if isinstance(other, int) else other
        return _Bounds(f"({self.name}{sym}{o})", fn(self.value, o), self.premises)

    def __mod__(self, other: object) -> _Bounds:
        return self._derived("%", other, fmod)

    def __floordiv__(self, other: object) -> _Bounds:
        return self._derived("//", other, fdiv)


def _binop(op: Ops, a: Any, b: Any, defined: list) -> Any:
    if op is Ops.ADD:
        return a + b
    if op is Ops.SUB:
        return a - b
    if op is Ops.MUL:
        return a * b
    if op is Ops.MAX:
        return z3.Or(a, b) if z3.is_bool(a) else z3.If(a >= b, a, b)
    if op in (Ops.IDIV, Ops.MOD):
        defined.append(b != 0)
        return fdiv(a, b) if op is Ops.IDIV else fmod(a, b)
    if op is Ops.CMPLT:
        return a < b
    if op is Ops.CMPGT:
        return a > b
    if op is Ops.CMPLE:
        return a <= b
    if op is Ops.CMPGE:
        return a >= b
    if op is Ops.CMPNE:
        return a != b
    if op is Ops.CMPEQ:
        return a == b
    if z3.is_bool(a) and op in (Ops.AND, Ops.OR, Ops.XOR):
        return {Ops.AND: z3.And, Ops.OR: z3.Or, Ops.XOR: z3.Xor}[op](a, b)
    raise Unsupported(f"op {op.name}")


def _apply(op: Ops, args: list, defined: list) -> Any:
    if op is Ops.NEG:
        return -args[0]
    if op is Ops.NOT:
        return z3.Not(args[0])
    if op is Ops.WHERE:
        return z3.If(args[0], args[1], args[2])
    if len(args) == 2:
        return _binop(op, args[0], args[1], defined)
    raise Unsupported(f"op {op.name}")


def _literal(v: object, like_bool: bool) -> Any:
    return z3.BoolVal(bool(v)) if isinstance(v, bool) or like_bool else z3.IntVal(int(v))  # type: ignore[call-overload]


class Encoder:
    def __init__(self, rule: Rule, caps: dict[str, UOp]) -> None:
        self.rule, self.inst = rule, caps
        self.terms: dict[str, Any] = {}  # capture -> z3 term
        self.bounds: dict[str, _Bounds] = {}
        self.premises: list = []

    def var(self, name: str) -> Any:
        if name not in self.terms:
            dt = self.inst[name].dtype
            if dt is dtypes.bool:
                self.terms[name] = z3.Bool(name)
            elif dt is dtypes.index:
                self.terms[name] = z3.Int(name)
            else:
                raise Unsupported(f"dtype {dt.name}")
        return self.terms[name]

    def lhs(self, p: Pat, node: UOp) -> Any:
        if p.name is not None and p.name in self.terms:
            return self.terms[p.name]
        if p.kind in ("var", "const") and p.value is _ANY:
            t = self.var(p.name) if p.name else self.var_unnamed(node)
        elif p.kind == "const":
            t = _literal(p.value, node.dtype is dtypes.bool)
        elif p.kind == "op":
            if p.src is None:
                raise Unsupported("a node with unspecified sources")
            t = _apply(node.op, [self.lhs(s, n) for s, n in zip(p.src, node.src, strict=True)], self.premises)
        else:
            raise Unsupported(p.kind)
        if p.name is not None:
            self.terms[p.name] = t
        return t

    def var_unnamed(self, node: UOp) -> Any:
        raise Unsupported("an unnamed wildcard")

    def rhs(self, t: object, like_bool: bool, defined: list) -> Any:
        if not isinstance(t, Pat):
            if callable(t):
                raise Unsupported("a callable right-hand side")
            return _literal(t, like_bool)
        if t.name is not None:
            return self.terms[t.name]
        if t.kind == "const":
            return _literal(t.value, like_bool)
        if t.kind == "fold":
            if t.src is None:
                raise Unsupported("fold() of a callable")
            return self.rhs(t.src[0], like_bool, defined)
        assert t.ops is not None and t.src is not None
        opv = next(iter(t.ops))
        bools = [False] * len(t.src)
        if opv is Ops.WHERE:
            bools = [True, like_bool, like_bool]
        elif opv is Ops.NOT or (opv in (Ops.AND, Ops.OR, Ops.XOR) and like_bool):
            bools = [True] * len(t.src)
        return _apply(opv, [self.rhs(s, b, defined) for s, b in zip(t.src, bools, strict=True)], defined)

    def guard(self) -> Any:
        when = self.rule.when
        if when is None:
            return z3.BoolVal(True)
        caps = self.rule.lhs.captures()
        args = []
        for name in self.rule.when_params:
            if name == "ctx":
                args.append(None)
            elif caps[name].kind == "const":
                args.append(self.terms[name])
            else:
                if name not in self.bounds:
                    v = self.terms[name]
                    if z3.is_bool(v):
                        raise Unsupported("interval of a bool")
                    self.bounds[name] = _Bounds(name, v, self.premises)
                args.append(self.bounds[name])
        try:
            g = when(*args)
        except (TypeError, ZeroDivisionError, z3.Z3Exception) as e:
            raise Unsupported(f"guard on z3 terms: {e}") from None
        return g if z3.is_expr(g) else z3.BoolVal(bool(g))

    def const_names(self) -> list[str]:
        caps = self.rule.lhs.captures()
        return [n for n, p in caps.items() if p.kind == "const" and p.value is _ANY and z3.is_int(self.terms[n])]


def _check(premises: list, goal: Any, timeout_ms: int) -> tuple[Any, Any]:
    s = z3.Solver()
    s.set(timeout=timeout_ms)
    s.add(*premises)
    s.add(z3.Not(goal))
    r = s.check()
    return r, (s.model() if r == z3.sat else s.reason_unknown() if r == z3.unknown else None)


def prove(rule: Rule, root: UOp, caps: dict[str, UOp], timeout_ms: int = 400, const_range: int = 6) -> tuple[str, str]:
    """('proved' | 'proved-per-constant' | 'unknown' | 'unsupported' | 'counterexample', detail).

    First for symbolic constants; when that is nonlinear enough that z3 gives up, once per assignment of the
    constant captures in [-const_range, const_range] that passes the guard (the problem is then linear in
    the variables and their bounds, so z3 decides it)."""
    if z3 is None:
        return "unsupported", "z3 is not installed"
    enc = Encoder(rule, caps)
    try:
        lhs = enc.lhs(rule.lhs, root)
        guard = enc.guard()
        rdef: list = []
        rhs = enc.rhs(rule.rhs, z3.is_bool(lhs), rdef)
    except Unsupported as e:
        return "unsupported", str(e)
    goal = z3.And(*rdef, lhs == rhs)
    r, info = _check([*enc.premises, guard], goal, timeout_ms)
    if r == z3.unsat:
        return "proved", ""
    if r == z3.sat:
        return "counterexample", str(info)
    names = enc.const_names()
    if not names:
        return "unknown", str(info)
    consts = [enc.terms[n] for n in names]
    checked = 0
    for vals in itertools.product(range(-const_range, const_range + 1), repeat=len(names)):
        sub = list(zip(consts, map(z3.IntVal, vals), strict=True))
        g = z3.simplify(z3.substitute(guard, *sub))
        if z3.is_false(g):
            continue
        prem = [z3.substitute(p, *sub) for p in enc.premises]
        r, info = _check([*prem, g], z3.substitute(goal, *sub), timeout_ms)
        if r == z3.sat:
            return "counterexample", f"{dict(zip(names, vals, strict=True))}: {info}"
        if r != z3.unsat:
            return "unknown", f"{dict(zip(names, vals, strict=True))}: {info}"
        checked += 1
    return "proved-per-constant", f"{checked} assignments of {', '.join(names)} in [-{const_range}, {const_range}]"


__all__ = ["prove", "z3"]
