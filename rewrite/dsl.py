"""The rule language: patterns written like the math, named rules with declared guards, ordered rule sets.

    x, c0, c1 = var("x"), const("c0"), const("c1")
    RuleSet("fold", [
        Rule("add-zero",      x + 0,           x),
        Rule("add-add-const", (x + c0) + c1,   x + fold(c0 + c1)),
        Rule("div-in-range",  x // c0,         0, when=lambda x, c0: (x.vmin >= 0) & (x.vmax < c0)),
    ])

- `var(name, dtype=None)` matches any node; `const(name, dtype=None)` matches a CONST. A name used twice in
  one pattern means the same node. `dtype` is a DType or a set of them.
- Python operators on patterns build the op they name (`x - y` is SUB, `-x` is NEG); a Python number is a
  CONST of that value. `op.ADD(a, b, name=, dtype=, arg=, rest=False, ordered=False)` spells an op out;
  `op[Ops.ADD, Ops.MUL](a, b)` or `op[GroupOp.Binary](a, b)` matches any op of a set; with no sources it
  matches any sources, and `rest=True` allows sources beyond the listed ones.
- Commutative ops (GroupOp.Commutative) match their two sources in either order, unless `ordered=True`.
- The right-hand side is a template when possible: a pattern over the captures (ops to build, numbers,
  `fold(expr)` for a constant computed at rewrite time with the op-semantics table), a bare number (a constant
  of the matched node's dtype and shape), or a callable over captures (and `ctx`) returning a UOp or None.
- `when=` is a callable over capture names (and `ctx`): a const capture stands for its Python value, any other
  capture for its UOp (with `.vmin` / `.vmax`). Combine comparisons with `&` and `|`, never `and/or`, so the
  same guard runs on Python values and on z3 terms. Two traps: `&` does not short-circuit (so
  `(c1 != 0) & (c0 % c1 == 0)` divides by zero; use a helper that checks first), and `~` on a Python bool is
  -2, which is true: negate by writing the opposite comparison.
- Malformed rules (unknown capture, duplicate name, closure callback, non-kebab name) raise RuleError here,
  at definition.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from rewrite.dtype import DType
from rewrite.errors import RuleError
from rewrite.ops import GroupOp, Ops

if TYPE_CHECKING:
    from rewrite.uop import UOp

# a compiled matcher (rewrite.match): (node, ctx) -> (replacement, index of the rule that fired), or None
Matcher = Callable[["UOp", object], "tuple[UOp, int] | None"]

Number = int | float | bool
_ANY = object()  # "no constraint" for arg


class Pat:
    """A pattern node. kind: 'var' (any node), 'const' (a CONST, optionally of a fixed value), 'op', 'fold'."""

    # `shape`: this node's part of a matcher's cache key (rewrite.match_cache, made on first use: a node is never
    # changed after it is built, and one such as `x` or `c0` sits in many rules)
    __slots__ = ("arg", "dtypes", "kind", "name", "ops", "ordered", "rest", "shape", "src", "value")

    def __init__(self, kind: str, *, ops: frozenset[Ops] | None = None, src: tuple[Pat, ...] | None = None,
                 name: str | None = None, dtypes: frozenset[DType] | None = None, arg: object = _ANY,
                 rest: bool = False, ordered: bool = False, value: object = _ANY) -> None:
        self.kind, self.ops, self.src, self.name, self.dtypes = kind, ops, src, name, dtypes
        self.arg, self.rest, self.ordered, self.value = arg, rest, ordered, value
        self.shape: tuple[str, tuple[object, ...]] | None = None

    # -- structure --
    @property
    def commutative(self) -> bool:
        return (self.kind == "op" and not self.ordered and self.src is not None and len(self.src) == 2
                and self.ops is not None and self.ops <= GroupOp.Commutative)

    def captures(self) -> dict[str, Pat]:
        """Every named node of this pattern, by name (the first occurrence)."""
        out: dict[str, Pat] = {}
        stack: list[Pat] = [self]
        while stack:
            p = stack.pop()
            if p.name is not None and p.name not in out:
                out[p.name] = p
            if p.src:
                stack.extend(reversed(p.src))
        return out

    def named(self, name: str) -> Pat:
        return Pat(self.kind, ops=self.ops, src=self.src, name=name, dtypes=self.dtypes, arg=self.arg,
                   rest=self.rest, ordered=self.ordered, value=self.value)

    def __repr__(self) -> str:
        return render_pat(self)

    # -- operator sugar: each builds the one op it names --
    def _b(self, op: Ops, other: Pat | Number, rev: bool = False) -> Pat:
        o = lift(other)
        return Pat("op", ops=frozenset({op}), src=(o, self) if rev else (self, o))

    def __add__(self, o: Pat | Number) -> Pat: return self._b(Ops.ADD, o)
    def __radd__(self, o: Pat | Number) -> Pat: return self._b(Ops.ADD, o, True)
    def __sub__(self, o: Pat | Number) -> Pat: return self._b(Ops.SUB, o)
    def __rsub__(self, o: Pat | Number) -> Pat: return self._b(Ops.SUB, o, True)
    def __mul__(self, o: Pat | Number) -> Pat: return self._b(Ops.MUL, o)
    def __rmul__(self, o: Pat | Number) -> Pat: return self._b(Ops.MUL, o, True)
    def __floordiv__(self, o: Pat | Number) -> Pat: return self._b(Ops.IDIV, o)
    def __rfloordiv__(self, o: Pat | Number) -> Pat: return self._b(Ops.IDIV, o, True)
    def __mod__(self, o: Pat | Number) -> Pat: return self._b(Ops.MOD, o)
    def __rmod__(self, o: Pat | Number) -> Pat: return self._b(Ops.MOD, o, True)
    def __truediv__(self, o: Pat | Number) -> Pat: return self._b(Ops.DIV, o)
    def __and__(self, o: Pat | Number) -> Pat: return self._b(Ops.AND, o)
    def __rand__(self, o: Pat | Number) -> Pat: return self._b(Ops.AND, o, True)
    def __or__(self, o: Pat | Number) -> Pat: return self._b(Ops.OR, o)
    def __ror__(self, o: Pat | Number) -> Pat: return self._b(Ops.OR, o, True)
    def __xor__(self, o: Pat | Number) -> Pat: return self._b(Ops.XOR, o)
    def __rxor__(self, o: Pat | Number) -> Pat: return self._b(Ops.XOR, o, True)
    def __lshift__(self, o: Pat | Number) -> Pat: return self._b(Ops.SHL, o)
    def __rshift__(self, o: Pat | Number) -> Pat: return self._b(Ops.SHR, o)
    def __lt__(self, o: Pat | Number) -> Pat: return self._b(Ops.CMPLT, o)
    def __gt__(self, o: Pat | Number) -> Pat: return self._b(Ops.CMPGT, o)
    def __le__(self, o: Pat | Number) -> Pat: return self._b(Ops.CMPLE, o)
    def __ge__(self, o: Pat | Number) -> Pat: return self._b(Ops.CMPGE, o)
    def __neg__(self) -> Pat: return Pat("op", ops=frozenset({Ops.NEG}), src=(self,))
    def __invert__(self) -> Pat: return Pat("op", ops=frozenset({Ops.NOT}), src=(self,))
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def eq(self, o: Pat | Number) -> Pat: return self._b(Ops.CMPEQ, o)
    def ne(self, o: Pat | Number) -> Pat: return self._b(Ops.CMPNE, o)
    def maximum(self, o: Pat | Number) -> Pat: return self._b(Ops.MAX, o)
    def recip(self) -> Pat: return Pat("op", ops=frozenset({Ops.RECIP}), src=(self,))

    def where(self, a: Pat | Number, b: Pat | Number) -> Pat:
        return Pat("op", ops=frozenset({Ops.WHERE}), src=(self, lift(a), lift(b)))

    def cast(self, dtype: DType | None = None) -> Pat:
        """In a template, build CAST to `dtype`; in a pattern, match a CAST (to `dtype` if given)."""
        return Pat("op", ops=frozenset({Ops.CAST}), src=(self,), arg=_ANY if dtype is None else dtype)


def lift(x: Pat | Number) -> Pat:
    if isinstance(x, Pat):
        return x
    if isinstance(x, bool):  # True == 1 in Python: a bool literal must only match bool constants
        from rewrite.dtype import dtypes

        return Pat("const", ops=frozenset({Ops.CONST}), value=x, dtypes=frozenset({dtypes.bool}))
    if isinstance(x, (int, float)):
        return Pat("const", ops=frozenset({Ops.CONST}), value=x)
    raise RuleError(f"pattern operand must be a pattern or a number, got {type(x).__name__}")


def _dtypes(dtype: DType | Iterable[DType] | None) -> frozenset[DType] | None:
    if dtype is None:
        return None
    return frozenset({dtype}) if isinstance(dtype, DType) else frozenset(dtype)


def var(name: str, dtype: DType | Iterable[DType] | None = None) -> Pat:
    """Matches any node (of the given dtype or dtypes)."""
    return Pat("var", name=name, dtypes=_dtypes(dtype))


def const(name: str, dtype: DType | Iterable[DType] | None = None) -> Pat:
    """Matches a CONST; in `when=` and `fold()` it stands for the constant's Python value."""
    return Pat("const", ops=frozenset({Ops.CONST}), name=name, dtypes=_dtypes(dtype))


def fold(expr: Pat | Callable[..., Number]) -> Pat:
    """A constant computed when the rule fires: an expression over const captures (evaluated with the
    op-semantics table in the constants' dtype) or a callable over capture names."""
    if callable(expr) and not isinstance(expr, Pat):
        _check_callable(expr, "fold", None)
        return Pat("fold", value=expr)
    return Pat("fold", src=(lift(expr),))


class _OpBuilder:
    """`op.ADD(x, y)`; `op[Ops.ADD, Ops.MUL](x, y)`; `op[GroupOp.Binary](x, y)`."""

    def __init__(self, ops: frozenset[Ops]) -> None:
        self.ops = ops

    def __call__(self, *src: Pat | Number, name: str | None = None, dtype: DType | Iterable[DType] | None = None,
                 arg: object = _ANY, rest: bool = False, ordered: bool = False) -> Pat:
        return Pat("op", ops=self.ops, src=tuple(lift(s) for s in src) if src else None, name=name,
                   dtypes=_dtypes(dtype), arg=arg, rest=rest, ordered=ordered)


class _OpNamespace:
    def __getattr__(self, name: str) -> _OpBuilder:
        try:
            return _OpBuilder(frozenset({Ops[name]}))
        except KeyError:
            raise AttributeError(f"op.{name}: no such op") from None

    def __getitem__(self, ops: Ops | Iterable[Ops | Iterable[Ops]]) -> _OpBuilder:
        s = frozenset({ops}) if isinstance(ops, Ops) else frozenset(
            x for o in ops for x in ((o,) if isinstance(o, Ops) else o))
        return _OpBuilder(s)


op = _OpNamespace()

# ---------------------------------------------------------------------------- rules


_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


_PLAIN_FLAGS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def params_of(fn: Callable[..., object]) -> list[str]:
    """The names of `fn`'s parameters, as `inspect.signature` gives them. A plain function (no *args, **kwargs,
    keyword-only parameters, `__wrapped__` or `__signature__`) is read off its code object: `inspect.signature`
    costs ~30 us a call, and every rule with a guard or a computed right-hand side asks once (hundreds at
    import)."""
    code = getattr(fn, "__code__", None)
    if isinstance(fn, types.FunctionType) and isinstance(code, types.CodeType) and not code.co_flags & _PLAIN_FLAGS \
            and not code.co_kwonlyargcount and not hasattr(fn, "__wrapped__") and not hasattr(fn, "__signature__"):
        return list(code.co_varnames[: code.co_argcount])
    return [p.name for p in inspect.signature(fn).parameters.values()]


_params = params_of


def _check_callable(fn: Callable[..., object], what: str, caps: Iterable[str] | None, rule: str = "") -> list[str]:
    where = f"rule {rule!r}: " if rule else ""
    if getattr(fn, "__closure__", None):
        code = getattr(fn, "__code__", None)
        names = ", ".join(code.co_freevars) if isinstance(code, types.CodeType) else "its enclosing scope"
        raise RuleError(f"{where}{what} is a closure over {names}; rules must be pure: pass values through "
                        f"captures or ctx, or define the callback at module level")
    params = _params(fn)
    if caps is not None:
        unknown = [p for p in params if p != "ctx" and p not in caps]
        if unknown:
            raise RuleError(f"{where}{what} takes {', '.join(unknown)}, which the pattern does not capture "
                            f"(captures: {', '.join(sorted(caps)) or 'none'})")
    return params


class Rule:
    """A named rewrite: `lhs` pattern, `rhs` template/number/callable, optional guard `when`."""

    __slots__ = ("doc", "lhs", "location", "name", "removes", "rhs", "rhs_params", "shape", "when", "when_params")

    def __init__(self, name: str, lhs: Pat, rhs: Pat | Number | Callable[..., object],
                 when: Callable[..., object] | None = None, removes: Ops | None = None, doc: str = "") -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise RuleError(f"rule name {name!r} must be kebab-case (lowercase words joined by '-')")
        if not isinstance(lhs, Pat) or lhs.kind == "fold":
            raise RuleError(f"rule {name!r}: the left-hand side must be a pattern, got {lhs!r}")
        self.name, self.lhs, self.when, self.removes, self.doc = name, lhs, when, removes, doc
        self.shape: tuple[bytes, tuple[object, ...]] | None = None  # rewrite.match_cache.rule_shape, made on first use
        caps = lhs.captures()
        self.location = _caller()
        if isinstance(rhs, Pat):
            _check_template(name, rhs, caps)
        elif callable(rhs):
            self.rhs_params = _check_callable(rhs, "the right-hand side", caps, name)
        elif not isinstance(rhs, (bool, int, float)):
            raise RuleError(f"rule {name!r}: right-hand side must be a pattern, a number or a callable")
        self.rhs = rhs
        self.when_params = _check_callable(when, "when=", caps, name) if when is not None else []

    @property
    def is_template(self) -> bool:
        return not callable(self.rhs) or isinstance(self.rhs, Pat)

    def __repr__(self) -> str:
        rhs = render_pat(self.rhs) if isinstance(self.rhs, Pat) else repr(self.rhs) if not callable(self.rhs) \
            else getattr(self.rhs, "__name__", "<fn>")
        return f"Rule({self.name!r}: {render_pat(self.lhs)} -> {rhs})"


def _caller() -> str:
    f = inspect.currentframe()
    while f is not None and f.f_globals.get("__name__") == __name__:
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


def _check_template(rule: str, t: Pat, caps: dict[str, Pat]) -> None:
    stack = [t]
    while stack:
        p = stack.pop()
        if p.kind == "fold":
            if p.src is None:
                _check_callable(cast("Callable[..., object]", p.value), "fold()", caps, rule)  # fold(fn): fn
            else:
                for q in _walk(p.src[0]):
                    if q.name is not None and q.name not in caps:
                        raise RuleError(f"rule {rule!r}: fold() uses {q.name!r}, which the pattern does not capture")
                    if q.kind == "var" and q.name is None:
                        raise RuleError(f"rule {rule!r}: fold() may only use captures and numbers")
            continue
        if p.name is not None:  # a named node in a template refers to that capture, whatever its shape
            if p.name not in caps:
                raise RuleError(f"rule {rule!r}: template uses {p.name!r}, which the pattern does not capture "
                                f"(captures: {', '.join(sorted(caps)) or 'none'})")
            continue
        if p.kind == "var":
            raise RuleError(f"rule {rule!r}: template has an unnamed wildcard; every leaf must be a capture or number")
        if p.kind == "op":
            if p.ops is None or len(p.ops) != 1:
                raise RuleError(f"rule {rule!r}: a template op must be one op, got {p.ops}")
            if p.src is None:
                raise RuleError(f"rule {rule!r}: a template op needs its sources")
            stack.extend(p.src)


def _walk(p: Pat) -> list[Pat]:
    out, stack = [], [p]
    while stack:
        q = stack.pop()
        out.append(q)
        if q.src:
            stack.extend(q.src)
    return out


class RuleSet:
    """An ordered list of rules (first match wins). `a + b` composes; `.only(pred)` filters."""

    def __init__(self, name: str, rules: Sequence[Rule]) -> None:
        self.name, self.rules = name, tuple(rules)
        seen: dict[str, Rule] = {}
        for r in self.rules:
            if not isinstance(r, Rule):
                raise RuleError(f"rule set {name!r}: {r!r} is not a Rule")
            if (o := seen.get(r.name)) is not None and o is not r:
                raise RuleError(f"rule set {name!r}: two different rules are named {r.name!r} ({o.location} and "
                                f"{r.location}); rule names must be unique")
            seen[r.name] = r
        # the same Rule object twice (from composing overlapping sets) keeps its first position
        if len(seen) != len(self.rules):
            uniq, ids = [], set()
            for r in self.rules:
                if id(r) not in ids:
                    ids.add(id(r))
                    uniq.append(r)
            self.rules = tuple(uniq)
        self._matchers: dict[Ops, Matcher | None] = {}
        self._by_op: tuple[dict[Ops, list[int]], list[int]] | None = None  # rules_for's index, made on first use

    def rules_for(self, op: Ops) -> list[tuple[int, Rule]]:
        """The rules whose pattern's root can be `op` (an op it names, or any op), with their positions, in order:
        what the matcher for `op` is made of. One pass over the rules builds an index by op, the first time."""
        if self._by_op is None:
            by: dict[Ops, list[int]] = {}
            anyop: list[int] = []
            for i, r in enumerate(self.rules):
                if r.lhs.ops is None:
                    anyop.append(i)
                else:
                    for o in r.lhs.ops:
                        by.setdefault(o, []).append(i)
            self._by_op = (by, anyop)
        by, anyop = self._by_op
        own = by.get(op, [])
        idx = sorted(own + anyop) if anyop and own else own or anyop
        rules = self.rules
        return [(i, rules[i]) for i in idx]

    def __add__(self, other: RuleSet) -> RuleSet:
        return RuleSet(f"{self.name}+{other.name}", self.rules + other.rules)

    def only(self, pred: Callable[[Rule], bool], name: str | None = None) -> RuleSet:
        return RuleSet(name or f"{self.name}.only", [r for r in self.rules if pred(r)])

    def __iter__(self):
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __getitem__(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(f"rule set {self.name!r} has no rule {name!r}")

    def matcher(self, op: Ops) -> Matcher | None:
        """The compiled match function for nodes whose op is `op` (None if no rule can match it)."""
        try:
            return self._matchers[op]
        except KeyError:
            from rewrite.match import compile_matcher

            fn = self._matchers[op] = compile_matcher(self, op)
            return fn

    def __repr__(self) -> str:
        return f"RuleSet({self.name!r}, {len(self.rules)} rules)"


def render_pat(p: object) -> str:
    if not isinstance(p, Pat):
        return repr(p)
    if p.kind == "var":
        return p.name or "_"
    if p.kind == "const":
        return p.name if p.name else repr(p.value)
    if p.kind == "fold":
        return f"fold({render_pat(p.src[0]) if p.src else getattr(p.value, '__name__', 'fn')})"
    opn = "|".join(sorted(o.name for o in p.ops)) if p.ops else "*"
    src = "..." if p.src is None else ", ".join(render_pat(s) for s in p.src) + (", ..." if p.rest else "")
    return f"{opn}({src})" + (f"@{p.name}" if p.name else "")
