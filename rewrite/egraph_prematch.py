"""Template rules of the DSL matched in Python on a batch's terms as they are loaded, their right-hand sides given to
the e-graph as rows (rewrite.egraph's Saturator, `prematch`), instead of as egglog rules.

Why: egglog 13.2 pays for every rule of a run whose tables have new rows, matched or not, and for every variant of a
rule (one per commutative order, and one per atom of its query for semi-naive evaluation). A rewrite that runs once,
on the e-graph as loaded (a `Schedule.once` program: one pass of its rewrites, then the analysis saturated), finds
exactly the matches of its pattern on the loaded terms: after the `clear` run the e-graph holds the batch's rows
alone (rows a rule subsumed cannot be matched), hash-consed, so each e-class is one loaded node and two captures
are the same e-class exactly when they are the same node. Those matches are found here, on the same pattern
variants the export writes (rewrite.egraph_export), with the guard and the folds computed on i64 values (an
overflow or a division by zero does not match, as in egglog's query), and the e-graph gets each right-hand side as
new nodes whose root is unioned with the matched node's e-class at load.

Only rules whose guard reads nothing but constant captures and whose right-hand side is a template qualify
(`PreMatcher` raises ValueError on others): intervals are the e-graph's, and are not known yet when it loads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from rewrite.dsl import _ANY, Pat, Rule
from rewrite.egraph_export import _Skip, _variants, export_rules
from rewrite.egraph_terms import CTORS, I64_MAX, I64_MIN
from rewrite.ops import Ops

# a right-hand side node: ("Num", v) | ("Id", node number) | (constructor, child, ...)
Rhs = tuple
# the interval of a right-hand side op node from its operands' intervals (None: none known), or None
Bounds = Callable[[str, Sequence[tuple[int, int] | None]], tuple[int, int] | None]


class _NoMatch(Exception):
    """An i64 operation of a guard or fold overflowed or divided by zero: egglog's query does not match there."""


def _i64(v: int) -> I64v:
    if not I64_MIN <= v <= I64_MAX:
        raise _NoMatch
    return I64v(v)


class I64v(int):
    """An i64 value of a guard or fold: arithmetic that leaves i64 or divides by zero does not match (egglog's
    primitives fail there), floor `//` and `%` as everywhere in the sort."""

    def __add__(self, o: int) -> I64v: return _i64(int(self) + int(o))
    def __radd__(self, o: int) -> I64v: return _i64(int(o) + int(self))
    def __sub__(self, o: int) -> I64v: return _i64(int(self) - int(o))
    def __rsub__(self, o: int) -> I64v: return _i64(int(o) - int(self))
    def __mul__(self, o: int) -> I64v: return _i64(int(self) * int(o))
    def __rmul__(self, o: int) -> I64v: return _i64(int(o) * int(self))
    def __neg__(self) -> I64v: return _i64(-int(self))

    def __floordiv__(self, o: int) -> I64v:
        if int(o) == 0:
            raise _NoMatch
        return _i64(int(self) // int(o))

    def __rfloordiv__(self, o: int) -> I64v:
        if int(self) == 0:
            raise _NoMatch
        return _i64(int(o) // int(self))

    def __mod__(self, o: int) -> I64v:
        if int(o) == 0:
            raise _NoMatch
        return _i64(int(self) % int(o))

    def __rmod__(self, o: int) -> I64v:
        if int(self) == 0:
            raise _NoMatch
        return _i64(int(o) % int(self))


def _fold(p: Pat, consts: dict[str, I64v]) -> I64v:
    """The value of a fold() expression over const captures (the operations rewrite.egraph_export's `_fold` takes)."""
    if p.kind == "const":
        if p.name is not None:
            return consts[p.name]
        return _i64(int(cast(int, p.value)))
    o = next(iter(p.ops or ()))
    a = [_fold(s, consts) for s in p.src or ()]
    if o is Ops.NEG:
        return -a[0]
    x, y = a
    if o is Ops.MAX:
        return max(x, y)
    if o is Ops.ADD:
        return x + y
    if o is Ops.SUB:
        return x - y
    if o is Ops.MUL:
        return x * y
    if o is Ops.IDIV:
        return x // y
    return x % y  # MOD (the export takes no other op)


def _template(p: object, nodes: dict[str, int], consts: dict[str, I64v]) -> Rhs:
    if isinstance(p, int):
        return ("Num", int(p))
    assert isinstance(p, Pat)
    if p.kind == "fold":
        return ("Num", int(_fold(cast(tuple, p.src)[0], consts)))
    if p.name is not None:
        return ("Num", int(consts[p.name])) if p.name in consts else ("Id", nodes[p.name])
    if p.kind == "const":
        return ("Num", int(cast(int, p.value)))
    o = next(iter(p.ops or ()))
    return (CTORS[o][0], *(_template(s, nodes, consts) for s in p.src or ()))


def _compile(t: tuple) -> Callable[[int, list[tuple]], tuple[dict[str, int], dict[str, I64v]] | None]:
    """A matcher of the concrete pattern tree `t` (rewrite.egraph_export's `_variants`) at a node: straight-line
    Python (most tries fail at the first child's constructor), giving the captures' node numbers and constant values,
    or None. Two captures of one name match the same node (the same e-class, on loaded terms), or the same value."""
    lines: list[str] = []
    nodes: dict[str, str] = {}
    consts: dict[str, str] = {}
    count = [0]

    def fresh() -> str:
        count[0] += 1
        return f"v{count[0]}"

    def walk(t: tuple, at: str) -> None:
        tag = t[0]
        if tag == "var":
            if t[1] in nodes:
                lines.append(f"if {at} != {nodes[t[1]]}: return None")
            else:
                nodes[t[1]] = at
            return
        n = fresh()
        lines.append(f"{n} = terms[{at}]")
        if tag == "const":
            _, name, v, _ = t
            lines.append(f"if {n}[0] != 'Num': return None")
            if v is not _ANY:
                lines.append(f"if {n}[1] != {int(v)}: return None")
            if name is not None:
                if name in consts:
                    lines.append(f"if {n}[1] != {consts[name]}: return None")
                else:
                    consts[name] = f"{n}[1]"
            return
        _, ctor, name, kids, _ = t
        lines.append(f"if {n}[0] != {ctor!r} or len({n}) != {len(kids) + 1}: return None")
        if name is not None:
            if name in nodes:
                lines.append(f"if {at} != {nodes[name]}: return None")
            else:
                nodes[name] = at
        ids = [fresh() for _ in kids]
        for j, k in enumerate(ids):
            lines.append(f"{k} = {n}[{j + 1}]")
        for k, c in zip(kids, ids, strict=True):
            walk(k, c)

    walk(t, "i")
    body = "\n    ".join(lines)
    caps = ", ".join(f"{k!r}: {v}" for k, v in nodes.items())
    vals = ", ".join(f"{k!r}: I64v({v})" for k, v in consts.items())
    src = f"def m(i, terms):\n    {body}\n    return {{{caps}}}, {{{vals}}}\n"
    env: dict[str, object] = {"I64v": I64v}
    exec(compile(src, f"<prematch {t[1]}>", "exec"), env)  # our own pattern's code, as rewrite.match generates
    return cast(Callable[[int, list[tuple]], "tuple[dict[str, int], dict[str, I64v]] | None"], env["m"])


class _Variant:
    __slots__ = ("guard", "match", "params", "rhs", "rule")

    def __init__(self, rule: Rule, tree: tuple) -> None:
        self.rule, self.rhs, self.guard, self.params = rule, rule.rhs, rule.when, rule.when_params
        self.match = _compile(tree)


class PreMatcher:
    """Template rules matched in Python on hash-consed terms: `terms[i]` is ("Num", v), ("Var", key, lo, hi), or
    (constructor, child number, ...) with children numbered before their parents."""

    def __init__(self, rules: Iterable[Rule], bounds: Bounds | None = None) -> None:
        self.rules = list(rules)
        # the interval of a right-hand side node (constructor, its operands' intervals) as the e-graph's analysis
        # would give it, or None: what the saturator loads the node with (rules.eqsat_analysis.seed_bounds)
        self.bounds = bounds
        self.by_ctor: dict[str, list[_Variant]] = {}
        texts: list[str] = []
        for r in self.rules:
            if any(n not in _const_names(r.lhs) for n in r.when_params):
                raise ValueError(f"rule {r.name!r}: only rules whose guard reads constants alone match in "
                                 "Python")
            if not (isinstance(r.rhs, Pat) and r.rhs.kind == "op" and r.rhs.name is None):
                raise ValueError(f"rule {r.name!r}: only a right-hand side that builds an op matches in Python")
            ex = export_rules([r], "prematch", point_guard=False)
            if ex.skipped:
                raise ValueError(f"rule {r.name!r} does not export: {ex.skipped[0][1]}")
            texts.append(ex.text)
            try:
                trees = _variants(r.lhs)
            except _Skip as e:  # export_rules would have said so already
                raise ValueError(f"rule {r.name!r}: {e}") from e
            for t in trees:
                self.by_ctor.setdefault(t[1], []).append(_Variant(r, t))
        # the rules as egglog would run them, guards included (what a disk cache of the results is keyed by)
        self.text = "".join(texts)

    def matches(self, terms: list[tuple], start: int = 0) -> list[tuple[int, str, Rhs]]:
        """(matched node, rule name, right-hand side) for every match at nodes `start` onwards, in node order and
        then in the order of the rules and their variants."""
        out: list[tuple[int, str, Rhs]] = []
        by_ctor = self.by_ctor
        for i in range(start, len(terms)):
            vs = by_ctor.get(terms[i][0])
            if vs is None:
                continue
            for v in vs:
                m = v.match(i, terms)
                if m is None:
                    continue
                nodes, consts = m
                try:
                    if v.guard is not None and not v.guard(**{k: consts[k] for k in v.params}):
                        continue
                    rhs = _template(v.rhs, nodes, consts)
                except (_NoMatch, ZeroDivisionError, OverflowError):
                    continue
                out.append((i, v.rule.name, rhs))
        return out


def _const_names(p: Pat) -> set[str]:
    return {n for n, q in p.captures().items() if q.kind == "const"}


__all__ = ["Bounds", "PreMatcher", "Rhs"]
