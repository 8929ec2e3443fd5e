"""Linear forms of index sums, and the rules that need them: merging like terms along a sum, div/mod
recombination along a sum, and comparisons of a sum with a constant.

A sum in canonical form is a left-associated chain `((t1*f1 + t2*f2) + ...) + k`: each term is an atom
(any index node that is not ADD, not a CONST and not a MUL by a constant) times a non-zero coefficient
(omitted when 1), terms in first-occurrence order, the constant last and only when non-zero.
`linear_form` reads any ADD/MUL-by-constant tree into that form, so the callbacks here do not depend on
the templates having run first; `build_sum` writes it back.

The rules in this module are callables: each computes a new sum and returns None when it would not
change anything. Their identities are in their docstrings. They run on `dtypes.index` only: the
comparison rules divide through and read intervals, which wrap-around would break.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import cast

from rewrite.dsl import Rule, RuleSet, op, var
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

Terms = dict[UOp, int]  # atom -> coefficient, in first-occurrence order


def split_term(u: UOp) -> tuple[UOp, int]:
    """A term as (atom, coefficient): `x*c` gives (x, c), anything else (u, 1)."""
    if u.op is Ops.MUL:
        a, b = u.src
        if b.op is Ops.CONST:
            return a, b.arg[0]  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)
        if a.op is Ops.CONST:
            return b, a.arg[0]  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)
    return u, 1


def linear_form(u: UOp) -> tuple[Terms, int]:
    """`u` as sum(coefficient * atom) + constant, like terms merged, zero coefficients dropped."""
    terms: Terms = {}
    k = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    while stack:
        n, f = stack.pop()
        op = n.op
        if op is Ops.ADD or op is Ops.SUB:
            stack.append((n.src[1], f if op is Ops.ADD else -f))
            stack.append((n.src[0], f))  # popped first: terms keep their left-to-right order
        elif op is Ops.NEG:
            stack.append((n.src[0], -f))
        elif op is Ops.CONST:
            k += f * n.arg[0]  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)
        else:
            a, g = split_term(n)
            if g != 1 or a is not n:
                stack.append((a, f * g))
            else:
                terms[n] = terms.get(n, 0) + f
    return {t: f for t, f in terms.items() if f != 0}, k


def build_term(atom: UOp, f: int) -> UOp:
    return atom if f == 1 else UOp(Ops.MUL, (atom, UOp.const(f, atom.dtype)))


def build_sum(terms: Iterable[tuple[UOp, int]], k: int = 0) -> UOp:
    """The canonical chain for sum(f * atom) + k (terms with f == 0 are skipped)."""
    acc: UOp | None = None
    for t, f in terms:
        if f == 0:
            continue
        term = build_term(t, f)
        acc = term if acc is None else UOp(Ops.ADD, (acc, term))
    if acc is None:
        return UOp.const(k, dtypes.index)
    return acc if k == 0 else UOp(Ops.ADD, (acc, UOp.const(k, acc.dtype)))


def sum_bounds(terms: Iterable[tuple[UOp, int]], k: int = 0) -> tuple[int, int]:
    """Interval of sum(f * atom) + k from the atoms' intervals (what interval analysis gives the chain)."""
    lo = hi = k
    for t, f in terms:
        a, b = cast(int, t.vmin) * f, cast(int, t.vmax) * f  # the atoms of index math have int bounds
        lo, hi = (lo + a, hi + b) if a <= b else (lo + b, hi + a)
    return lo, hi


def _chain(u: UOp) -> list[UOp]:
    """The terms of a canonical chain, left to right (a trailing constant included as a term)."""
    out = []
    while u.op is Ops.ADD:
        out.append(u.src[1])
        u = u.src[0]
    out.append(u)
    out.reverse()
    return out


# ---------------------------------------------------------------------------- sums


def is_term_of_atom(y: UOp) -> bool:
    """Guard helper: the term `y` (an atom or atom*constant) has an atom that is not a constant or a sum."""
    a = split_term(y)[0]
    return a.op is not Ops.CONST and a.op is not Ops.ADD


def is_divmod_term(y: UOp) -> bool:
    """Guard helper: the term `y` is a floor division or modulo by a constant, maybe times a constant."""
    a = split_term(y)[0]
    return (a.op is Ops.MOD or a.op is Ops.IDIV) and a.src[1].op is Ops.CONST


def merge_like_terms(x: UOp, y: UOp) -> UOp | None:
    """x + y -> one sum, y's coefficient added to the term of x with the same atom.

    Identity: a*f + ... + a*g = a*(f+g) + ...  The prefix `x` is already canonical (children are rewritten
    first), so only the last term can repeat an atom; adjacent pairs are left to the template rules."""
    ya, yf = split_term(y)
    if ya.op is Ops.CONST or ya.op is Ops.ADD:
        return None
    if not any(split_term(t)[0] is ya for t in _chain(x)):
        return None
    terms, k = linear_form(x)
    terms[ya] = terms.get(ya, 0) + yf
    return build_sum(terms.items(), k)


def _quotient_is(v: UOp, u: UOp, c: int) -> bool:
    """Is `v` the node u // c, or, for u = w // a and c > 0, the node w // (a*c) that the nested-division
    rule turns (w // a) // c into?"""
    if v.op is not Ops.IDIV or v.src[1].op is not Ops.CONST:
        return False
    d = v.src[1].arg[0]  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)
    if v.src[0] is u and d == c:
        return True
    return c > 0 and u.op is Ops.IDIV and u.src[1].op is Ops.CONST and v.src[0] is u.src[0] and d == u.src[1].arg[0] * c  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)


def _recombined(mod_term: UOp, div_term: UOp) -> UOp | None:
    """u*m if mod_term is (u % c)*m and div_term is (u // c)*(c*m); (u % (c*d))*m if div_term is
    ((u // c) % d)*(c*m) with d > 0; else None."""
    ma, m = split_term(mod_term)
    if ma.op is not Ops.MOD or ma.src[1].op is not Ops.CONST:
        return None
    u, c = ma.src[0], ma.src[1].arg[0]  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)
    da, f = split_term(div_term)
    if c == 0 or f != c * m:
        return None
    if _quotient_is(da, u, c):
        return build_term(u, m)
    # the next digit: (u % c) + ((u // c) % d)*c = u % (c*d) for d > 0 (u = (q*d + r)*c + s with r in [0, d)
    # and s in c's remainder range, so r*c + s stays in c*d's remainder range, for either sign of c)
    if da.op is Ops.MOD and da.src[1].op is Ops.CONST and (d := da.src[1].arg[0]) > 0 and _quotient_is(da.src[0], u, c):  # type: ignore[index]  # a CONST arg is (value, dtype)
        return build_term(UOp(Ops.MOD, (u, UOp.const(c * d, u.dtype))), m)
    return None


def resum(nodes: Iterable[UOp]) -> UOp:
    """The canonical sum of `nodes` (each read as a linear form, like terms merged)."""
    acc: Terms = {}
    k = 0
    for n in nodes:
        terms, kk = linear_form(n)
        for a, f in terms.items():
            acc[a] = acc.get(a, 0) + f
        k += kk
    return build_sum(acc.items(), k)


def recombine_divmod(x: UOp, y: UOp) -> UOp | None:
    """x + y where x holds (u % c)*m and y is (u // c)*(c*m), or the other way round -> u*m in their place.

    Identity: (u % c) + (u // c)*c = u for every c != 0 (floor division and modulo); and (w // a) // c =
    w // (a*c) for c > 0, so the quotient is recognised in the nested form the div rules produce."""
    terms = _chain(x)
    for i, t in enumerate(terms):
        r = _recombined(t, y) or _recombined(y, t)
        if r is not None:
            return resum([*terms[:i], r, *terms[i + 1 :]])
    return None


# ---------------------------------------------------------------------------- comparisons


def _const(v: int | bool, like: UOp) -> UOp:
    return UOp.const(v, like.dtype)


def _gcd_splits(items: list[tuple[UOp, int]]) -> Iterable[tuple[int, list[tuple[UOp, int]], list[tuple[UOp, int]]]]:
    """(g, big, small): g > 1 divides the coefficient of every `big` term; `small` holds the others. The
    candidates for g are the gcds of the coefficients from each magnitude upward."""
    seen = set()
    for cut in sorted({abs(f) for _, f in items}):
        g = math.gcd(*(f for _, f in items if abs(f) >= cut))
        if g > 1 and g not in seen:
            seen.add(g)
            yield g, [(t, f) for t, f in items if f % g == 0], [(t, f) for t, f in items if f % g != 0]


def _lanes_kept(r: UOp | None, x: UOp) -> UOp | None:
    """A comparison's rewrite only where it keeps the comparison's shape: after expand the sum may be a lane
    vector whose lanes live only in terms the rewrite drops (their bounds decide nothing), and a scalar result
    would no longer be a vector its readers pick lanes from."""
    return r if r is None or r.shape == x.shape else None


def lt_linear(x: UOp, c0: int) -> UOp | None:
    """`_lt_linear` where it keeps the comparison's lanes."""
    return _lanes_kept(_lt_linear(x, c0), x)


def gt_linear(c0: int, x: UOp) -> UOp | None:
    """`_gt_linear` where it keeps the comparison's lanes."""
    return _lanes_kept(_gt_linear(c0, x), x)


def ne_linear(x: UOp, c0: int) -> UOp | None:
    """`_ne_linear` where it keeps the comparison's lanes."""
    return _lanes_kept(_ne_linear(x, c0), x)


def _lt_linear(x: UOp, c0: int) -> UOp | None:
    """sum < c0 with the sum's constant moved right, divided through by a common factor, negated when
    every coefficient is negative.

    Identity: for g > 0 and every value of R in [lo, hi], g*S + R < c  <=>  S < q + 1 where
    q = (c - 1 - R) // g, provided q is the same at R = lo and R = hi (it is monotone in R)."""
    terms, k = linear_form(x)
    if not terms:
        return None
    c = c0 - k
    items = list(terms.items())
    if all(f < 0 for _, f in items):  # -S < c  <=>  -c < S
        return UOp(Ops.CMPLT, (_const(-c, x), build_sum([(t, -f) for t, f in items])))
    for g, big, small in _gcd_splits(items):
        lo, hi = sum_bounds(small)
        q = (c - 1 - lo) // g
        if q == (c - 1 - hi) // g:
            return UOp(Ops.CMPLT, (build_sum([(t, f // g) for t, f in big]), _const(q + 1, x)))
    if k != 0:
        return UOp(Ops.CMPLT, (build_sum(items), _const(c, x)))
    return None


def _gt_linear(c0: int, x: UOp) -> UOp | None:
    """c0 < sum, the mirror of lt_linear.

    Identity: for g > 0 and every R in [lo, hi], c < g*S + R  <=>  q < S where q = (c - R) // g,
    provided q is the same at R = lo and R = hi."""
    terms, k = linear_form(x)
    if not terms:
        return None
    c = c0 - k
    items = list(terms.items())
    if all(f < 0 for _, f in items):  # c < -S  <=>  S < -c
        return UOp(Ops.CMPLT, (build_sum([(t, -f) for t, f in items]), _const(-c, x)))
    for g, big, small in _gcd_splits(items):
        lo, hi = sum_bounds(small)
        q = (c - lo) // g
        if q == (c - hi) // g:
            return UOp(Ops.CMPLT, (_const(q, x), build_sum([(t, f // g) for t, f in big])))
    if k != 0:
        return UOp(Ops.CMPLT, (_const(c, x), build_sum(items)))
    return None


def _ne_linear(x: UOp, c0: int) -> UOp | None:
    """sum != c0 with the constant moved right, signs made positive, divided by the coefficients' gcd.

    Identity: g*S != c is True when g does not divide c, else S != c/g."""
    terms, k = linear_form(x)
    if not terms:
        return None
    c = c0 - k
    items = list(terms.items())
    flip = all(f < 0 for _, f in items)
    if flip:
        items, c = [(t, -f) for t, f in items], -c
    g = math.gcd(*(f for _, f in items))
    if g > 1:
        if c % g:
            return UOp.const(True, dtypes.bool)
        return UOp(Ops.CMPNE, (build_sum([(t, f // g) for t, f in items]), _const(c // g, x)))
    if k != 0 or flip:
        return UOp(Ops.CMPNE, (build_sum(items), _const(c, x)))
    return None


# ---------------------------------------------------------------------------- factoring (after the last fast pass)

# a factored sum over a chain's atoms by position: its terms (an atom's index and its coefficient, or a factored sum
# and its factor) and its constant
_Item = tuple[object, int]  # (int | _Sum, coefficient or factor)
_Sum = tuple[tuple[_Item, ...], int]
_LEAF_OPS = (Ops.RANGE, Ops.PARAM, Ops.SPECIAL)
MAX_FACTOR_TERMS = 10  # longer chains are left alone (the search tries a few factors per level)
MAX_FACTOR_DEPTH = 3  # factors taken out of a factored sum again, at most


def _chain_items(terms: list[UOp]) -> tuple[list[tuple[UOp, int]], int] | None:
    """The terms of an index chain as (atom, coefficient) and its constant, or None for a chain that repeats an
    atom, holds a nested sum or has more than MAX_FACTOR_TERMS terms."""
    items: list[tuple[UOp, int]] = []
    k = 0
    for t in terms:
        if t.op is Ops.CONST:
            k += t.arg[0]  # type: ignore[index]  # a CONST arg is (value, dtype)
            continue
        a, f = split_term(t)
        if a.op is Ops.ADD or a.op is Ops.CONST:
            return None
        items.append((a, f))
    if len(items) > MAX_FACTOR_TERMS or len({id(a) for a, _ in items}) != len(items):
        return None
    return items, k


def _price(s: _Sum, free: frozenset[int]) -> tuple[int, int]:
    """(unique nodes, ops) the chain-level structure of `s` adds to its atoms: one ADD per term after the first, one
    MUL per coefficient other than 1 and per factor, and each constant value once unless an atom already holds it."""
    consts: set[int] = set()
    ops = 0
    stack = [s]
    while stack:
        items, k = stack.pop()
        ops += len(items) + (k != 0) - 1
        if k != 0:
            consts.add(k)
        for x, f in items:
            if isinstance(x, tuple):
                stack.append(x)
            if f != 1 or isinstance(x, tuple):
                ops += 1
                consts.add(f)
    return ops + len(consts - free), ops


def _shared_factors(coefs: Iterable[int], k: int) -> list[int]:
    """The factors worth taking out of a sum: each coefficient g >= 2 that divides another coefficient or the
    constant. Taking g out adds one MUL (the group's) and drops one for each member whose coefficient is g, so a
    group with no such member has more ops, which no factored form may (its inner groups pay for themselves the
    same way)."""
    cs = list(coefs)
    out: set[int] = set()
    for i, g in enumerate(cs):
        if g >= 2 and g not in out and ((k != 0 and k % g == 0)
                                        or any(j != i and f % g == 0 for j, f in enumerate(cs))):
            out.add(g)
    return sorted(out)


def _flat_cost(items: Iterable[tuple[object, int]], k: int) -> tuple[int, set[int]]:
    """(ops, constants) of a flat sum's own structure: its ADDs, a MUL per coefficient other than 1, its constants."""
    ops, consts = (k != 0) - 1, {k} if k else set()
    for _, f in items:
        ops += 1 if f == 1 else 2
        if f != 1:
            consts.add(f)
    return ops, consts


def _best(items: tuple[tuple[int, int], ...], k: int, free: frozenset[int],
          depth: int = 0) -> tuple[_Sum, int, frozenset[int]]:
    """The cheapest (by `_price`: ops plus constants not in `free`) of: the flat sum(items) + k, and for each factor g
    worth taking out (`_shared_factors`), the terms g divides as (their sum / g, factored the same way) * g in place
    of the first of them, the constant inside or not when g divides it. Returns the form, its ops and constants."""
    ops, consts = _flat_cost(items, k)
    best: tuple[_Sum, int, frozenset[int]] = ((items, k), ops, frozenset(consts))
    if depth >= MAX_FACTOR_DEPTH or (len(items) < 2 and not k):
        return best
    cost = ops + len(consts - free)
    for g in _shared_factors((f for _, f in items), k):
        members = [(a, f // g) for a, f in items if f % g == 0]
        first = next(i for i, (_, f) in enumerate(items) if f % g == 0)
        rest: list[_Item] = [(a, f) for a, f in items if f % g != 0]
        for with_k in (False, True) if k and k % g == 0 else (False,):
            if len(members) + with_k < 2:
                continue
            inner, i_ops, i_consts = _best(tuple(members), k // g if with_k else 0, free, depth + 1)
            r_ops, r_consts = _flat_cost(rest, 0 if with_k else k)
            c_ops = r_ops + 2 + i_ops  # the group is one more term (an ADD) times g (a MUL)
            c_consts = r_consts | i_consts | {g}
            if (c := c_ops + len(c_consts - free)) < cost:
                at = sum(1 for _, f in items[:first] if f % g != 0)  # the group stands where its first term stood
                best, cost = (((*rest[:at], (inner, g), *rest[at:]), 0 if with_k else k), c_ops,
                              frozenset(c_consts)), c
    return best


@functools.lru_cache(maxsize=4096)
def _factoring(coefs: tuple[int, ...], k: int, free: frozenset[int]) -> _Sum | None:
    """The factored form of sum(coefs[i] * atom i) + k with fewer nodes and no more ops than the flat one, or None
    (cached: the lanes of a kernel repeat the same coefficients)."""
    items = tuple(enumerate(coefs))
    best = _best(items, k, free)[0]
    n0, o0 = _price((items, k), free)
    n1, o1 = _price(best, free)
    return best if n1 < n0 and o1 <= o0 else None


def _build_factored(s: _Sum, atoms: list[UOp]) -> UOp:
    items, k = s
    return build_sum([(_build_factored(x, atoms) if isinstance(x, tuple) else atoms[cast(int, x)], f)
                      for x, f in items], k)


def factor_common(s: UOp) -> UOp | None:
    """An index sum with terms that share a constant factor, written with the factor taken out once where that makes
    the sum smaller in unique nodes (a constant counts once however often it is used, a shared subterm once) without
    adding an op: `r7*4 + r6 + r9*64 + r5*16` -> `r7*4 + r6 + (r9*4 + r5)*16` (64 is gone, 4 is shared). The
    inner sum may be factored again, and the constant may join a group it divides.

    Identity: a*(g*p) + b*(g*q) + ... + g*m = (a*p + b*q + ... + m)*g (distributivity, exact on integers).
    The fast rules distribute such a product again (rules.symbolic's canonical form), so this runs only on a
    final result (`factor_sums`), never inside the fast rule set. None when no factoring is smaller."""
    if s.dtype is not dtypes.index or s.op is not Ops.ADD:
        return None
    return _factor_chain(_chain(s))


def _factor_chain(terms: list[UOp]) -> UOp | None:
    """`factor_common` on the chain of `terms`."""
    if len(terms) < 2:
        return None
    parsed = _chain_items(terms)
    if parsed is None:
        return None
    items, k = parsed
    coefs = tuple(f for _, f in items)
    gs = _shared_factors(coefs, k)
    if not gs:
        return None
    free = frozenset(int(n.arg[0]) for a, _ in items for n in _atom_nodes(a)  # type: ignore[index]  # CONST arg
                     if n.op is Ops.CONST and n.dtype is dtypes.index)
    if not _may_gain(coefs, k, gs, free):
        return None
    best = _factoring(coefs, k, free)
    return None if best is None else _build_factored(best, [a for a, _ in items])


def _may_gain(coefs: tuple[int, ...], k: int, gs: list[int], free: frozenset[int]) -> bool:
    """A quick test before the search: some factor g has two terms with coefficient g (one MUL fewer), or a
    member's quotient, or the constant's, is a constant the sum already holds (one constant fewer). A factored form
    whose quotients are all new constants keeps as many constants as it removes, and each group costs a MUL its
    coefficient-g member pays back, so without either it is no smaller (the search would find nothing)."""
    have = set(coefs) | free | ({k} if k else set())
    for g in gs:
        if sum(1 for f in coefs if f == g) >= 2:
            return True
        if any(f != g and f % g == 0 and f // g in have for f in coefs) or (k != 0 and k % g == 0 and k // g in have):
            return True
    return False


def _atom_nodes(a: UOp) -> list[UOp]:
    return [a] if a.op in _LEAF_OPS else a.toposort()


def count_nodes(u: UOp) -> tuple[int, int]:
    """(unique nodes, ops) of `u`, variables and ranges as leaves (their bounds not counted), constants once each."""
    seen: set[UOp] = set()
    stack = [u]
    ops = 0
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op in _LEAF_OPS or n.op is Ops.CONST:
            continue
        ops += 1
        stack.extend(n.src)
    return len(seen), ops


_FACTORED: dict[UOp, UOp] = {}  # factor_sums' results (a kernel's expressions come back through every stage)


def clear_factor_cache() -> None:
    _FACTORED.clear()
    _factoring.cache_clear()


def factor_sums(u: UOp) -> UOp:
    """`factor_common` on every index sum of `u` (each maximal chain once, after its atoms), kept only where the
    whole expression gets fewer unique nodes and no more ops. Results are cached by UOp."""
    if (hit := _FACTORED.get(u)) is not None:
        return hit
    if len(_FACTORED) > 100_000:
        _FACTORED.clear()
    out = _FACTORED[u] = _factor_sums(u)
    return out


def _factor_sums(u: UOp) -> UOp:
    memo: dict[UOp, UOp] = {}

    def go(n: UOp) -> UOp:
        if (r := memo.get(n)) is not None:
            return r
        if n.op is Ops.ADD and n.dtype is dtypes.index:
            terms = _chain(n)
            new = [t if not t.src or t.op in _LEAF_OPS else go(t) for t in terms]
            chain = n if all(a is b for a, b in zip(terms, new, strict=True)) else _rechain(new)
            r = _factor_chain(new) or chain
        else:
            src = tuple(s if not s.src or s.op in _LEAF_OPS else go(s) for s in n.src)
            r = n if all(a is b for a, b in zip(src, n.src, strict=True)) else n.replace(src=src)
        memo[n] = r
        return r

    out = u if not u.src or u.op in _LEAF_OPS else go(u)
    if out is u:
        return u
    (n0, o0), (n1, o1) = count_nodes(u), count_nodes(out)
    return out if n1 < n0 and o1 <= o0 else u


def _rechain(terms: list[UOp]) -> UOp:
    acc = terms[0]
    for t in terms[1:]:
        acc = UOp(Ops.ADD, (acc, t))
    return acc


# the factoring as a rule (on one chain, as `factor_sums` applies it), so the soundness checks are generated from it
factoring = RuleSet("factoring", [
    Rule("add-factor-common", op.ADD(var("x", dtypes.index), var("y"), name="s"), factor_common),
])
