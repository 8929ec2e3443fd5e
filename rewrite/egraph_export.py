"""Template rules of the DSL as egglog rules over the `Idx` sort of rewrite.egraph.

`export_rules(rules, ruleset)` writes one egglog `rule` per left-hand-side variant: a commutative op whose
sources may match in either order (DSL semantics) gives both orders, an op set (`op[Ops.ADD, Ops.MUL]`) one
variant per op. Captures become query variables; `fold()` over constants is computed in the query (a failing
primitive there, an overflow or a division by zero, just does not match, where in an action it would panic
the whole command); the right-hand side is unioned with the matched e-class, and the matched node is
subsumed for the rules named in `subsume`.

The `when=` guard is translated by calling it with proxies: a const capture is an i64 query variable, any
other capture a term whose `.vmin` / `.vmax` are the bounds of its e-class's packed interval (rewrite.egraph_terms:
`iv`), looked up in the rule body where they are stored exactly.
Arithmetic on proxies builds i64 (floor `//` and `%`) or terms (`(x % c0).vmax` looks up the interval of the
node `x % c0`; a companion rule creates that node whenever the pattern matches, so the guard can see it);
comparisons build facts and `& | ~` combine them (an `|` becomes one rule per disjunct). A guard that asks for
anything else (`ctx`, `.dtype`, Python `and`/`or`/`not`, a chained comparison) cannot be translated: the rule
is skipped and reported, as are callable right-hand sides, casts, float constants and ops the sort lacks.

By default every rule also requires its matched e-class not to be a single point: a point class already
holds its `Num`, and rewriting it further only breeds constants.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from itertools import product
from typing import cast

from rewrite.dsl import _ANY, Pat, Rule
from rewrite.dtype import DType, dtypes
from rewrite.egraph_terms import CTORS, KINDS, floor_div, floor_mod, iv_exact, iv_fields
from rewrite.ops import GroupOp, Ops

MAX_VARIANTS = 16
MAX_DISJUNCTS = 8


class _Skip(Exception):
    """This rule cannot be written in egglog; the message says why."""


@dataclass
class Export:
    text: str = ""
    exported: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rule name, why)


# ---------------------------------------------------------------------------------------------- proxies


class _Body:
    """What a guard or fold adds to a rule's query: lookups, computed values, and terms it needs to exist."""

    def __init__(self) -> None:
        self.facts: list[str] = []
        self.demands: list[str] = []
        self.packed: dict[str, str] = {}  # term -> the variable bound to its packed interval
        self.n = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"__{prefix}{self.n}"

    def lookup(self, fn: str, term: str, captured: bool) -> I64:
        """`fn` ("lo" or "hi") of `term`'s packed interval, where it is stored exactly (rewrite.egraph_terms)."""
        v = self.fresh(fn)
        p = self.packed.get(term)
        if p is None:
            p = self.packed[term] = self.fresh("iv")
            self.facts.append(f"(= {p} (iv {term}))")
        self.facts += iv_exact(p, v, None) if fn == "lo" else iv_exact(p, None, v)
        if not captured and term not in self.demands:
            self.demands.append(term)
        return I64(v, self)


def _i64_text(v: object) -> str:
    if isinstance(v, I64):
        return v.t
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int):
        return str(v)
    raise _Skip(f"cannot use {type(v).__name__} {v!r} as an i64")


class I64:
    """An i64 value in a rule body: a const capture, a bound, or arithmetic over them."""

    __slots__ = ("b", "t")

    def __init__(self, t: str, b: _Body) -> None:
        self.t, self.b = t, b

    def _op(self, fmt: Callable[[str, str], str], o: object, rev: bool = False) -> I64:
        a, c = self.t, _i64_text(o)
        return I64(fmt(c, a) if rev else fmt(a, c), self.b)

    def __add__(self, o: object) -> I64: return self._op(lambda a, c: f"(+ {a} {c})", o)
    def __radd__(self, o: object) -> I64: return self._op(lambda a, c: f"(+ {a} {c})", o, True)
    def __sub__(self, o: object) -> I64: return self._op(lambda a, c: f"(- {a} {c})", o)
    def __rsub__(self, o: object) -> I64: return self._op(lambda a, c: f"(- {a} {c})", o, True)
    def __mul__(self, o: object) -> I64: return self._op(lambda a, c: f"(* {a} {c})", o)
    def __rmul__(self, o: object) -> I64: return self._op(lambda a, c: f"(* {a} {c})", o, True)
    def __floordiv__(self, o: object) -> I64: return self._op(floor_div, o)
    def __rfloordiv__(self, o: object) -> I64: return self._op(floor_div, o, True)
    def __mod__(self, o: object) -> I64: return self._op(floor_mod, o)
    def __rmod__(self, o: object) -> I64: return self._op(floor_mod, o, True)
    def __neg__(self) -> I64: return I64(f"(- 0 {self.t})", self.b)
    def __pos__(self) -> I64: return self
    def __abs__(self) -> I64: return I64(f"(max {self.t} (- 0 {self.t}))", self.b)
    def maximum(self, o: object) -> I64: return self._op(lambda a, c: f"(max {a} {c})", o)
    def minimum(self, o: object) -> I64: return self._op(lambda a, c: f"(min {a} {c})", o)

    def _cmp(self, op: str, o: object) -> Fact: return Fact(("cmp", op, self.t, _i64_text(o)))
    def __lt__(self, o: object) -> Fact: return self._cmp("<", o)
    def __le__(self, o: object) -> Fact: return self._cmp("<=", o)
    def __gt__(self, o: object) -> Fact: return self._cmp(">", o)
    def __ge__(self, o: object) -> Fact: return self._cmp(">=", o)
    # == and != build facts (the DSL reads like the math), so they return a Fact, not a bool, and a term is unhashable
    def __eq__(self, o: object) -> Fact: return self._cmp("==", o)  # type: ignore[override]  # builds a Fact
    def __ne__(self, o: object) -> Fact: return self._cmp("!=", o)  # type: ignore[override]  # builds a Fact
    __hash__ = None  # type: ignore[assignment]  # == builds a Fact, so terms are not hashable

    def __bool__(self) -> bool:
        raise _Skip("the guard takes the truth value of an i64 (Python and/or/not/if, or a chained comparison)")


class Term:
    """A capture that is a node: its interval, and nodes built from it (`x % c0`) whose interval a guard reads."""

    __slots__ = ("b", "captured", "t")

    def __init__(self, t: str, b: _Body, captured: bool = True) -> None:
        self.t, self.b, self.captured = t, b, captured

    @property
    def vmin(self) -> I64: return self.b.lookup("lo", self.t, self.captured)
    @property
    def vmax(self) -> I64: return self.b.lookup("hi", self.t, self.captured)
    @property
    def min_max(self) -> tuple[I64, I64]: return self.vmin, self.vmax

    def _op(self, ctor: str, o: object, rev: bool = False) -> Term:
        ot = o.t if isinstance(o, Term) else f"(Num {_i64_text(o)})"
        return Term(f"({ctor} {ot} {self.t})" if rev else f"({ctor} {self.t} {ot})", self.b, False)

    def __add__(self, o: object) -> Term: return self._op("Add", o)
    def __radd__(self, o: object) -> Term: return self._op("Add", o, True)
    def __sub__(self, o: object) -> Term: return self._op("Sub", o)
    def __rsub__(self, o: object) -> Term: return self._op("Sub", o, True)
    def __mul__(self, o: object) -> Term: return self._op("Mul", o)
    def __rmul__(self, o: object) -> Term: return self._op("Mul", o, True)
    def __floordiv__(self, o: object) -> Term: return self._op("Div", o)
    def __mod__(self, o: object) -> Term: return self._op("Mod", o)
    def __neg__(self) -> Term: return Term(f"(Neg {self.t})", self.b, False)
    def maximum(self, o: object) -> Term: return self._op("Max", o)

    def __bool__(self) -> bool:
        raise _Skip("the guard takes the truth value of a node")


_NEG = {"<": ">=", ">=": "<", ">": "<=", "<=": ">", "==": "!=", "!=": "=="}
_EGG = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "!="}


class Fact:
    """A guard formula: comparisons combined with & | ~ (Python's and/or/not cannot be overloaded)."""

    __slots__ = ("f",)

    def __init__(self, f: tuple) -> None:
        self.f = f

    def __and__(self, o: object) -> Fact: return Fact(("and", self.f, _formula(o)))
    def __rand__(self, o: object) -> Fact: return Fact(("and", _formula(o), self.f))
    def __or__(self, o: object) -> Fact: return Fact(("or", self.f, _formula(o)))
    def __ror__(self, o: object) -> Fact: return Fact(("or", _formula(o), self.f))
    def __invert__(self) -> Fact: return Fact(("not", self.f))

    def __bool__(self) -> bool:
        raise _Skip("the guard combines facts with Python and/or/not or a chained comparison; use & | ~")


def _formula(o: object) -> tuple:
    if isinstance(o, Fact):
        return o.f
    if isinstance(o, bool):
        return ("const", o)
    raise _Skip(f"cannot combine a guard fact with {type(o).__name__}")


def _dnf(f: tuple, neg: bool = False) -> list[list[str]]:
    """Disjunctive normal form as lists of egglog facts ([] is true; no disjunct at all is false)."""
    tag = f[0]
    if tag == "const":
        return [[]] if f[1] != neg else []
    if tag == "not":
        return _dnf(f[1], not neg)
    if tag == "cmp":
        op = _NEG[f[1]] if neg else f[1]
        return [[f"({_EGG[op]} {f[2]} {f[3]})"]]
    conj = (tag == "and") != neg
    a, b = _dnf(f[1], neg), _dnf(f[2], neg)
    out = [x + y for x in a for y in b] if conj else a + b
    if len(out) > MAX_DISJUNCTS:
        raise _Skip(f"the guard has more than {MAX_DISJUNCTS} disjuncts")
    return out


# ---------------------------------------------------------------------------------------------- patterns

_OK_INT = (dtypes.index,)


def _kind_allowed(dts: frozenset[DType] | None, kind: str) -> bool:
    """May a capture constrained to `dts` stand at a position of this kind? Index rules hold for every int
    expression the e-graph takes (those never wrap); rules only for sized ints may rely on wrapping."""
    if dts is None:
        return True
    ok_i = any(d in _OK_INT for d in dts)
    ok_b = dtypes.bool in dts
    return {"i": ok_i, "b": ok_b}.get(kind, ok_i and ok_b)


def _variants(p: Pat) -> list[tuple]:
    """Concrete trees: ("var", name, dtypes) | ("const", name, value, dtypes) | ("op", ctor, name, children)."""
    if p.kind == "var":
        return [("var", p.name, p.dtypes)]
    if p.kind == "const":
        v = p.value
        if v is not _ANY and (isinstance(v, float) and not v.is_integer()):
            raise _Skip(f"float constant {v!r}")
        return [("const", p.name, v, p.dtypes)]
    if p.kind != "op":
        raise _Skip(f"a {p.kind} node in the pattern")
    if p.src is None or p.rest:
        raise _Skip("an op pattern with any sources (rest=True or no sources)")
    if p.arg is not _ANY:
        raise _Skip("an op pattern that constrains arg")
    ops = sorted(o for o in (p.ops or ()) if o in CTORS)
    if not ops:
        raise _Skip(f"ops {sorted(o.name for o in p.ops or ())} are not in the e-graph sort")
    out: list[tuple] = []
    for o in ops:
        if len(p.src) != len(CTORS[o][1]):
            continue
        for kids in product(*(_variants(s) for s in p.src)):
            out.append(("op", CTORS[o][0], p.name, kids, p.dtypes))
            if o in GroupOp.Commutative and not p.ordered and len(kids) == 2 and kids[0] != kids[1]:
                out.append(("op", CTORS[o][0], p.name, (kids[1], kids[0]), p.dtypes))
        if len(out) > MAX_VARIANTS:
            raise _Skip(f"more than {MAX_VARIANTS} pattern variants")
    return out


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _vname(name: str, const: bool) -> str:
    if not _NAME.match(name):
        raise _Skip(f"capture name {name!r}")
    return f"{'n' if const else 'v'}_{name}"


class _Query:
    def __init__(self) -> None:
        self.facts: list[str] = []
        self.named: dict[str, str] = {}  # capture name of an op node -> its constructor text

    def term(self, t: tuple, kind: str) -> str:
        """egglog text for a concrete pattern node; kind is what its position holds (i, b, or ? for either)."""
        tag = t[0]
        if tag == "var":
            if not _kind_allowed(t[2], kind):
                raise _Skip(f"capture {t[1]!r} is constrained to {sorted(d.name for d in t[2])} at a "
                            f"{'bool' if kind == 'b' else 'int'} position")
            return _vname(t[1], False)
        if tag == "const":
            _, name, v, dts = t
            if not _kind_allowed(dts, kind):
                raise _Skip(f"constant {name or v!r} is constrained to dtypes the position does not hold")
            if name is None:
                if v is _ANY:
                    raise _Skip("an unnamed constant of any value")
                return f"(Num {int(v)})"
            n = _vname(name, True)
            if v is not _ANY:
                self.facts.append(f"(= {n} {int(v)})")
            return f"(Num {n})"
        _, ctor, name, kids, dts = t
        kinds, res = KINDS[ctor]
        if res != "=" and kind != "?" and res != kind:
            raise _Skip(f"{ctor} at a {'bool' if kind == 'b' else 'int'} position never matches")
        here = kind if res == "=" else res
        if not _kind_allowed(dts, here):
            raise _Skip(f"an op constrained to dtypes its position does not hold ({ctor})")
        text = f"({ctor} {' '.join(self.term(k, here if c == '=' else c) for k, c in zip(kids, kinds, strict=True))})"
        if name is None:
            return text
        v = _vname(name, False)
        self.facts.append(f"(= {v} {text})")
        self.named[name] = text
        return v


def _root_kind(t: tuple) -> str:
    if t[0] != "op":
        raise _Skip("the left-hand side is a bare capture")
    res = KINDS[t[1]][1]
    return "?" if res == "=" else res


def _captures(t: tuple, out: dict[str, bool]) -> dict[str, bool]:
    """capture name -> is a const capture."""
    if t[0] in ("var", "const"):
        if t[1] is not None:
            out[t[1]] = t[0] == "const"
    else:
        if t[2] is not None:
            out[t[2]] = False
        for k in t[3]:
            _captures(k, out)
    return out


def _fold(p: Pat, consts: dict[str, I64], body: _Body) -> I64 | int:
    """The value of a fold() expression: an I64 over const captures (Python ints where no capture is involved;
    both use floor // and %)."""
    if p.kind == "const":
        if p.name is not None:
            if p.name not in consts:
                raise _Skip(f"fold() uses {p.name!r}, which is not a constant capture")
            return consts[p.name]
        if isinstance(p.value, int):
            return int(p.value)
        raise _Skip(f"fold() over {p.value!r}")
    if p.kind == "op" and p.ops is not None and len(p.ops) == 1 and p.src:
        o = next(iter(p.ops))
        a = [_fold(s, consts, body) for s in p.src]
        if o is Ops.NEG and len(a) == 1:
            return -a[0]
        if len(a) == 2:
            x, y = a
            if o is Ops.MAX:
                return I64(f"(max {_i64_text(x)} {_i64_text(y)})", body)
            if isinstance(x, int) and isinstance(y, I64):  # so that the I64 operators (floor // and %) apply
                x = I64(str(x), body)
            if o is Ops.ADD: return x + y
            if o is Ops.SUB: return x - y
            if o is Ops.MUL: return x * y
            if o is Ops.IDIV: return x // y
            if o is Ops.MOD: return x % y
    raise _Skip(f"fold() of {p!r}")


def _template(p: object, caps: dict[str, bool], consts: dict[str, I64], body: _Body) -> str:
    if isinstance(p, int):  # bool too
        return f"(Num {int(p)})"
    if not isinstance(p, Pat):
        raise _Skip("a callable right-hand side")
    if p.kind == "fold":
        if p.src is None:
            raise _Skip("fold() of a callable")
        v = _fold(p.src[0], consts, body)
        name = body.fresh("f")
        body.facts.append(f"(= {name} {_i64_text(v)})")
        return f"(Num {name})"
    if p.name is not None:
        return f"(Num {_vname(p.name, True)})" if caps.get(p.name) else _vname(p.name, False)
    if p.kind == "const":
        if isinstance(p.value, float) and not p.value.is_integer():
            raise _Skip(f"float constant {p.value!r} on the right-hand side")
        return f"(Num {int(cast('int | float', p.value))})"  # a const pattern's value is a number
    if p.kind == "op" and p.ops is not None and len(p.ops) == 1 and p.src is not None:
        o = next(iter(p.ops))
        if o not in CTORS or p.arg is not _ANY:
            raise _Skip(f"{o.name} on the right-hand side is not in the e-graph sort")
        return f"({CTORS[o][0]} {' '.join(_template(s, caps, consts, body) for s in p.src)})"
    raise _Skip(f"right-hand side node {p!r}")


def _rule_text(facts: list[str], actions: list[str], ruleset: str, name: str) -> str:
    return f"(rule ({' '.join(facts)})\n      ({' '.join(actions)})\n      :ruleset {ruleset} :name \"{name}\")"


def _export_one(rule: Rule, ruleset: str, subsume: bool, point_guard: bool) -> list[str]:
    if "ctx" in rule.when_params:
        raise _Skip("the guard reads ctx")
    out: list[str] = []
    for k, t in enumerate(_variants(rule.lhs)):
        q = _Query()
        root_kind = _root_kind(t)
        root_text = q.term(t, root_kind)
        root = root_text if t[2] is not None else "__root"
        facts = ([] if t[2] is not None else [f"(= __root {root_text})"]) + q.facts
        if point_guard:
            facts += [f"(= __riv (iv {root}))", *iv_fields("__riv", "__rlo", "__rhi"), "(< __rlo __rhi)"]
        caps = _captures(t, {})
        body = _Body()
        consts = {n: I64(_vname(n, True), body) for n, c in caps.items() if c}
        terms = {n: Term(_vname(n, False), body) for n, c in caps.items() if not c}
        disjuncts: list[list[str]] = [[]]
        if rule.when is not None:
            try:
                g = rule.when(**{n: consts.get(n, terms.get(n)) for n in rule.when_params})
            except _Skip:
                raise
            except Exception as e:  # an attribute or operation the proxies do not have
                raise _Skip(f"the guard cannot be translated ({type(e).__name__}: {e})") from e
            if isinstance(g, bool):
                disjuncts = [[]] if g else []
            elif isinstance(g, Fact):
                disjuncts = _dnf(g.f)
            else:
                raise _Skip(f"the guard returned {type(g).__name__}, not a comparison")
        if not disjuncts:
            raise _Skip("the guard is always false")
        guard_facts = list(body.facts)
        demands = list(body.demands)
        rhs = _template(rule.rhs, caps, consts, body)
        fold_facts = body.facts[len(guard_facts):]
        actions = [f"(union {root} {rhs})"]
        if subsume:
            actions.append(f"(subsume {root_text if t[2] is None else q.named[t[2]]})")
        suffix = f"/{k}" if k else ""
        if demands:
            # create the nodes a guard reads only where the guard's own tests (those that read no interval) pass
            pure = [a for a in disjuncts[0] if "__lo" not in a and "__hi" not in a and all(a in d for d in disjuncts)]
            out.append(_rule_text(facts + pure, demands, ruleset, f"{rule.name}{suffix}/demand"))
        for j, d in enumerate(disjuncts):
            name = f"{rule.name}{suffix}" + (f"/or{j}" if j else "")
            out.append(_rule_text(facts + guard_facts + d + fold_facts, actions, ruleset, name))
    return out


def export_rules(rules: Iterable[Rule], ruleset: str, *, subsume: Collection[str] = (),
                 point_guard: bool | Collection[str] = True) -> Export:
    """egglog text for `rules` in rule set `ruleset`, with what was exported and what was skipped (and why).

    `subsume`: names of rules whose matched node is hidden once rewritten (safe when no other rule needs to
    see that node). `point_guard`: True for all, or the names of the rules that fire only on e-classes that
    are not a single point."""
    ex = Export()
    chunks = []
    for r in rules:
        pg = point_guard if isinstance(point_guard, bool) else r.name in point_guard
        try:
            chunks.extend(_export_one(r, ruleset, r.name in subsume, pg))
            ex.exported.append(r.name)
        except _Skip as e:
            ex.skipped.append((r.name, str(e)))
    ex.text = "\n".join(chunks) + ("\n" if chunks else "")
    return ex


__all__ = ["I64", "Export", "Fact", "Term", "export_rules"]
