"""Every template rule of the fast symbolic set makes the term smaller in one fixed well-founded order, checked
mechanically from the patterns. So no sequence of template rewrites can go on forever.

The order compares, lexicographically,
  1. the number of decomposed-op nodes (SUB, NEG, CMPGT, CMPGE, CMPLE, CMPEQ, SHL, SHR),
  2. the number of IDIV and MOD nodes,
  3. the number of ADD nodes,
  4. a recursive path order (RPO) with the op precedence PREC below: ADD, MUL and MAX compare their operands
     right to left (so `c + x -> x + c` and `x + (y + z) -> (x + y) + z` decrease: constants and sums move
     right and left), comparisons and bool ops compare them as multisets, the rest left to right.
Counts 1-3 are over the term as a tree; a variable stands for any term, so a rule passes a count when the
RHS has no more of those nodes than the LHS and no variable occurs more often (then the count cannot grow
for any instantiation), and decreases it when it also has strictly fewer. All constants (captures, literals
and fold() results) are one symbol, the least in the order. Pattern variables rank above constants: the
constant-folding rules come first in every set, so a variable is matched by a constant only where no
folding rule applies (the one assumption this check makes; the fuzz tests exercise it).

Callable rules (rules.linear, rules.divmod) are not templates; their docstrings state why each firing
removes a node, merges terms or shrinks a numerator, and the step budget of graph_rewrite backs that up.
"""

from __future__ import annotations

import importlib
from collections import Counter
from itertools import product

import pytest

from rewrite.dsl import Pat, Rule, RuleSet
from rewrite.ops import Ops

symbolic_module = importlib.import_module("rules.symbolic")
RULES = list({id(r): r for rs in vars(symbolic_module).values() if isinstance(rs, RuleSet) for r in rs}.values())
TEMPLATES = [r for r in RULES if r.is_template]

DECOMPOSED = frozenset({Ops.SUB, Ops.NEG, Ops.CMPGT, Ops.CMPGE, Ops.CMPLE, Ops.CMPEQ, Ops.SHL, Ops.SHR})
COUNTS = (DECOMPOSED, frozenset({Ops.IDIV, Ops.MOD}), frozenset({Ops.ADD}))
PREC = {
    Ops.NOT: 1,
    Ops.AND: 2,
    Ops.OR: 2,
    Ops.WHERE: 3,
    Ops.CMPLT: 4,
    Ops.CMPNE: 5,
    Ops.XOR: 5,
    Ops.MAX: 5,
    Ops.ADD: 6,
    Ops.MUL: 7,
    Ops.MOD: 8,
    Ops.IDIV: 9,
    **{o: 10 for o in DECOMPOSED},
}
RIGHT_TO_LEFT = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE})
MULTISET = frozenset({Ops.CMPLT, Ops.AND, Ops.OR, Ops.XOR})

# terms: ("K",) a constant, ("V", name) a variable, ("F", op, args)
K = ("K",)


def lhs_terms(p: Pat) -> list[tuple]:
    """The LHS as terms, one per orientation of its unordered commutative nodes (the matcher tries both)."""
    if p.kind == "const":
        return [K]
    if p.kind == "var":
        return [("V", p.name)]
    assert p.ops is not None
    opv = min(p.ops, key=lambda o: PREC.get(o, 0)) if len(p.ops) > 1 else next(iter(p.ops))
    if p.src is None:
        return [("F", opv, ())]
    out = []
    for args in product(*(lhs_terms(s) for s in p.src)):
        out.append(("F", opv, tuple(args)))
        if p.commutative:
            out.append(("F", opv, tuple(reversed(args))))
    return out


def rhs_term(t: object, caps: dict[str, Pat], bound: dict[str, tuple]) -> tuple:
    """The RHS as a term; a named node is the LHS subterm its capture matched (in this orientation)."""
    if not isinstance(t, Pat) or t.kind in ("const", "fold"):
        return K
    if t.name is not None:
        return bound[t.name]
    assert t.ops is not None and t.src is not None
    return ("F", next(iter(t.ops)), tuple(rhs_term(s, caps, bound) for s in t.src))


def bind(p: Pat, term: tuple, out: dict[str, tuple]) -> None:
    """Which subterm each capture name of `p` stands for in `term` (an orientation of p)."""
    if p.name is not None and p.name not in out:
        out[p.name] = term if p.kind != "const" else K
    if p.kind == "op" and p.src is not None:
        args = term[2]
        if p.commutative and not all(_fits(s, a) for s, a in zip(p.src, args, strict=True)):
            args = tuple(reversed(args))
        for s, a in zip(p.src, args, strict=True):
            bind(s, a, out)


def _fits(p: Pat, t: tuple) -> bool:
    if p.kind == "const":
        return t == K
    if p.kind == "var":
        return t == ("V", p.name)
    if t[0] != "F" or t[1] not in (p.ops or ()) or p.src is None:
        return t[0] == "F" and t[1] in (p.ops or ())
    orders = [t[2], tuple(reversed(t[2]))] if p.commutative else [t[2]]
    return any(all(_fits(s, a) for s, a in zip(p.src, args, strict=True)) for args in orders)


# ---------------------------------------------------------------------------- the order


def count(t: tuple, ops: frozenset) -> tuple[int, Counter]:
    if t == K:
        return 0, Counter()
    if t[0] == "V":
        return 0, Counter({t[1]: 1})
    n, vs = int(t[1] in ops), Counter()
    for a in t[2]:
        m, w = count(a, ops)
        n += m
        vs += w
    return n, vs


def equiv(s: tuple, t: tuple) -> bool:
    if s[0] != t[0]:
        return False
    if s[0] != "F":
        return s == t
    if s[1] != t[1] or len(s[2]) != len(t[2]):
        return False
    if s[1] in MULTISET:
        rest = list(t[2])
        for a in s[2]:
            j = next((i for i, b in enumerate(rest) if equiv(a, b)), None)
            if j is None:
                return False
            rest.pop(j)
        return True
    return all(equiv(a, b) for a, b in zip(s[2], t[2], strict=True))


def greater(s: tuple, t: tuple) -> bool:
    """s > t in the recursive path order."""
    if s == K:
        return False
    if s[0] == "V":
        return t == K  # the assumption above: a pattern variable is not a constant
    if t == K:
        return True
    if any(equiv(a, t) or greater(a, t) for a in s[2]):
        return True
    if t[0] == "V":
        return False
    f, g = s[1], t[1]
    if PREC.get(f, 0) > PREC.get(g, 0):
        return all(greater(s, b) for b in t[2])
    if f == g:
        if f in MULTISET:
            return _multiset_greater(list(s[2]), list(t[2]))
        pairs = list(zip(s[2], t[2], strict=True))
        if f in RIGHT_TO_LEFT:
            pairs.reverse()
        for a, b in pairs:
            if not equiv(a, b):
                return greater(a, b) and all(greater(s, c) for c in t[2])
    return False


def _multiset_greater(ms: list[tuple], ns: list[tuple]) -> bool:
    ms, ns = list(ms), list(ns)
    for a in list(ms):
        j = next((i for i, b in enumerate(ns) if equiv(a, b)), None)
        if j is not None:
            ms.remove(a)
            ns.pop(j)
    return bool(ms) and all(any(greater(a, b) for a in ms) for b in ns)


def decreases(lhs: tuple, rhs: tuple) -> str | None:
    """None if lhs > rhs in the order of the module docstring, else why not."""
    for i, ops in enumerate(COUNTS, 1):
        (ln, lv), (rn, rv) = count(lhs, ops), count(rhs, ops)
        if any(rv[v] > lv[v] for v in rv) or rn > ln:
            return f"count {i} ({', '.join(sorted(o.name for o in ops))}) can grow: {ln}+{dict(lv)} -> {rn}+{dict(rv)}"
        if rn < ln:
            return None
    return None if greater(lhs, rhs) else "the counts tie and the path order does not decrease"


@pytest.mark.parametrize("rule", TEMPLATES, ids=lambda r: r.name)
def test_template_rule_decreases(rule: Rule) -> None:
    caps = rule.lhs.captures()
    for lhs in lhs_terms(rule.lhs):
        bound: dict[str, tuple] = {}
        bind(rule.lhs, lhs, bound)
        rhs = rhs_term(rule.rhs, caps, bound)
        why = decreases(lhs, rhs)
        assert why is None, f"{rule.name}: {rule.lhs} -> {rule.rhs} is not smaller: {why}"


def test_order_rejects_growing_and_looping_rules() -> None:
    """The check can fail: commuting, distributing a variable, and undoing a canonical step are rejected."""
    from rewrite.dsl import const, op, var

    x, y, c = var("x"), var("y"), const("c")
    bad = [
        Rule("commute", op.ADD(x, y, ordered=True), y + x),
        Rule("distribute-var", op.MUL(op.ADD(x, y, ordered=True), var("z"), ordered=True), x * var("z") + y * var("z")),
        Rule("const-left", op.ADD(x, c, ordered=True), c + x),
        Rule("right-assoc", op.ADD(op.ADD(x, y, ordered=True), var("z"), ordered=True), x + (y + var("z"))),
        Rule("add-sub", x + y, (x - y) + y * 2),
    ]
    for rule in bad:
        caps = rule.lhs.captures()
        lhs = lhs_terms(rule.lhs)[0]
        bound: dict[str, tuple] = {}
        bind(rule.lhs, lhs, bound)
        assert decreases(lhs, rhs_term(rule.rhs, caps, bound)) is not None, rule.name


def test_every_template_is_checked() -> None:
    assert len(TEMPLATES) >= 100 and all(r.is_template for r in TEMPLATES)
