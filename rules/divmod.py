"""Floor division and modulo of index expressions: the `divmod_rules` set (part of `rules.symbolic.symbolic`).

After it has run (with the rest of `symbolic`), a division or modulo by a constant c != 0 is gone when the
numerator's remainder stays in one period of c, its numerator has no coefficient with |f| >= |c| and its
constant lies in c's floor-remainder range, no common factor divides the numerator and c, for c > 0 no
terms that stay within [0, g) for a common factor g of c and the other coefficients are left inside it
((z + y*16 + x*64) // 128 -> x // 2 when 0 <= z + y*16 < 64), nested divisions are merged, a constant
between them included (x // a + k) // b -> (x + k*a) // (a*b) for b > 0, and for a < 0, b < 0 as well),
(x % (k*c)) // c is written (x // c) % k, a division keeps its numerator's constant inside (x + 14) // 4
rather than (x + 2) // 4 + 3 (one ADD fewer) unless it is a multiple of the divisor ((x + 36) // 3 ->
x // 3 + 12, free, and the quotient may meet like terms), a constant added after it is merged in, and a division or
modulo by y*c with a symbolic y has the common factor of c and the numerator's coefficients divided out
((a*3 + b*9) // (d*3) -> (a + b*3) // d).

Semantics: IDIV and MOD are Python's `//` and `%` (floor; the remainder takes the divisor's sign) for every
sign of numerator and divisor; that is what rewrite.semantics defines for `dtypes.index`. Every rule here is
restricted to `dtypes.index`: on sized ints wrap-around breaks both the identities and the intervals.
Divisions by zero are never created and never removed (every rule is guarded by a non-zero divisor).

Guards read intervals through `.vmin` / `.vmax` (rewrite.interval); they are bounds, so a guard that holds
on them holds for every value.
"""

from __future__ import annotations

import math
from itertools import product

from rewrite.dsl import Rule, RuleSet, const, fold, op, var
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules.linear import build_sum, is_divmod_term, linear_form, recombine_divmod, resum, sum_bounds

INDEX = dtypes.index

x, y, z = var("x", INDEX), var("y", INDEX), var("z", INDEX)
c0, c1, c2 = const("c0"), const("c1"), const("c2")


def divides(d: int, n: int) -> bool:
    """Guard helper: d != 0 and d divides n. `&` does not short-circuit, so `(d != 0) & (n % d == 0)` would
    raise on d == 0; on z3 terms (the soundness test) it builds the same formula, where n % 0 is harmless."""
    if isinstance(d, int):
        return d != 0 and n % d == 0
    return (d != 0) & (n % d == 0)


def not_divides(d: int, n: int) -> bool:
    """Guard helper: d != 0 and d does not divide n (`~divides(...)` would be wrong: ~True is -2 in Python)."""
    if isinstance(d, int):
        return d != 0 and n % d != 0
    return (d != 0) & (n % d != 0)


def _fixed_quotient(x: UOp, y: UOp) -> bool:
    """Guard of mod-fixed-quotient: y has one sign and x // y is the same at the four corners of the box
    (floor division is monotone in each operand once the divisor's sign is fixed)."""
    if y.vmin <= 0 <= y.vmax:
        return False
    q = x.vmin // y.vmin
    return q == x.vmin // y.vmax == x.vmax // y.vmin == x.vmax // y.vmax


def in_first_period(x: UOp, dlo: int, dhi: int) -> bool:
    """Guard helper: x in [0, d) or x in (d, 0] for every divisor d in [dlo, dhi], so x // d = 0, x % d = x."""
    return ((x.vmin >= 0) & (x.vmax < dlo)) | ((x.vmax <= 0) & (x.vmin > dhi))


def nonzero(y: UOp) -> bool:
    """Guard helper: the interval of y excludes 0."""
    return (y.vmin > 0) | (y.vmax < 0)


_add_mul = op.ADD(x * c0, y, ordered=True)  # the quotient keeps the operands' order
_mul_add = op.ADD(y, x * c0, ordered=True)

# fmt: off
divmod_templates = RuleSet("divmod-templates", [
    Rule("div-small",          x // y,              0, when=lambda x, y: in_first_period(x, y.vmin, y.vmax)),
    Rule("mod-small",          x % y,               x, when=lambda x, y: in_first_period(x, y.vmin, y.vmax)),
    Rule("div-exact-mul",      (x * c0) // c1,      x * fold(c0 // c1), when=lambda c0, c1: divides(c1, c0)),
    Rule("mod-exact-mul",      (x * c0) % c1,       0,                  when=lambda c0, c1: divides(c1, c0)),
    Rule("div-mul-var",        (x * y) // y,        x,                  when=lambda y: nonzero(y)),
    Rule("mod-mul-var",        (x * y) % y,         0,                  when=lambda y: nonzero(y)),
    # (x*c + y) // c -> x when y is in c's first period, else the multiple of c splits off exactly
    Rule("div-add-mul-small",  (x * c0 + y) // c0,  x,                  when=lambda c0, y: in_first_period(y, c0, c0)),
    Rule("mod-add-mul-small",  (x * c0 + y) % c0,   y,                  when=lambda c0, y: in_first_period(y, c0, c0)),
    Rule("div-add-mul",        _add_mul // c1,      x * fold(c0 // c1) + y // c1, when=lambda c0, c1: divides(c1, c0)),
    Rule("div-add-mul-right",  _mul_add // c1,      y // c1 + x * fold(c0 // c1), when=lambda c0, c1: divides(c1, c0)),
    Rule("mod-add-mul",        (x * c0 + y) % c1,   y % c1,             when=lambda c0, c1: divides(c1, c0)),
    Rule("div-add-mul-var",    op.ADD(x * y, z, ordered=True) // y, x + z // y, when=lambda y: nonzero(y)),
    Rule("div-add-mul-var-right", op.ADD(z, x * y, ordered=True) // y, z // y + x, when=lambda y: nonzero(y)),
    Rule("mod-add-mul-var",    (x * y + z) % y,     z % y,              when=lambda y: nonzero(y)),
    # nesting; floor(floor(v) / b) = floor(v / b) needs b > 0
    Rule("div-div",            (x // c0) // c1,     x // fold(c0 * c1), when=lambda c0, c1: (c0 != 0) & (c1 > 0)),
    Rule("div-of-mod",         (x % c0) // c1,      (x // c1) % fold(c0 // c1),
         when=lambda c0, c1: divides(c1, c0) & (((c0 > 0) & (c1 > 0)) | ((c0 < 0) & (c1 < 0)))),
    Rule("mod-mod",            (x % c0) % c1,       x % c1,         when=lambda c0, c1: (c0 != 0) & divides(c1, c0)),
    # floor(floor(v) + k) / b) = floor((v + k) / b) for b > 0, and v = x / c0 for either sign of c0
    Rule("div-add-div",        (x // c0 + c2) // c1, (x + fold(c2 * c0)) // fold(c0 * c1),
         when=lambda c0, c1: (c0 != 0) & (c1 > 0)),
    # both negative: -(x // c0) = ceil(x / -c0) = (x - c0 - 1) // -c0, so the outer division is by a positive
    Rule("div-div-neg",        (x // c0) // c1,     (x + fold(-c0 - 1)) // fold(c0 * c1),
         when=lambda c0, c1: (c0 < 0) & (c1 < 0)),
    Rule("div-add-div-neg",    (x // c0 + c2) // c1, (x + fold(c2 * c0 - c0 - 1)) // fold(c0 * c1),
         when=lambda c0, c1: (c0 < 0) & (c1 < 0)),
    # a constant after a division goes into its numerator's constant (a multiple of the divisor, either sign)
    Rule("add-div-const",      (x + c2) // c0 + c1, (x + fold(c2 + c1 * c0)) // c0,
         when=lambda c0, c2: not_divides(c0, c2)),
    # x % y = x - y*q when the quotient q is one number over the whole box (x in [20,23], y in [8,10])
    Rule("mod-fixed-quotient", x % y,               x + y * fold(lambda x, y: -(x.vmin // y.vmin)),
         when=_fixed_quotient),
    # recombination: x//c*c + x%c = x, scaled by m
    Rule("add-div-mod",        (x // c0) * c0 + x % c0,        x,      when=lambda c0: c0 != 0),
    Rule("add-div-mod-scaled", (x // c0) * c1 + (x % c0) * c2, x * c2,
         when=lambda c0, c1, c2: (c0 != 0) & (c1 == c0 * c2)),
])
# fmt: on


# ---------------------------------------------------------------------------- the linear-form rules


def _tdiv(f: int, c: int) -> int:
    """Division truncating toward zero: f - c*_tdiv(f, c) has the sign of f and is smaller than |c|."""
    q = abs(f) // abs(c)
    return q if (f < 0) == (c < 0) else -q


def _remainder_choices(fs: list[int], c: int) -> list[tuple[int, ...]]:
    """Coefficient vectors r with r_i = f_i (mod c) to try for a one-period remainder: the floor remainders,
    the smallest in magnitude, and for up to three terms every combination of the two signs."""
    opts = [(f % c,) if f % c == 0 else (f % c, f % c - c) for f in fs]
    cands = [tuple(o[0] for o in opts), tuple(min(o, key=abs) for o in opts)]
    if len(fs) <= 3:
        cands += list(product(*opts))
    return list(dict.fromkeys(cands))


def _one_period(items: list[tuple[UOp, int]], k: int, c: int) -> tuple[list[tuple[UOp, int]], int] | None:
    """(remainder terms, q) when R = sum(r_i * t_i) + k % c has one floor quotient q = R // c over its interval."""
    atoms = [t for t, _ in items]
    kr = k % c
    for rs in _remainder_choices([f for _, f in items], c):
        lo, hi = sum_bounds(zip(atoms, rs, strict=True), kr)
        if lo // c == hi // c:
            return list(zip(atoms, rs, strict=True)), lo // c
    return None


def _divmod_linear(x: UOp, c: int, is_div: bool) -> UOp | None:
    terms, k = linear_form(x)
    items = list(terms.items())
    cu = UOp.const(c, x.dtype)
    # 1. the remainder stays in one period: no division is left
    if (found := _one_period(items, k, c)) is not None:
        rem, q = found
        if is_div:
            return build_sum([(t, (f - r) // c) for (t, f), (_, r) in zip(items, rem, strict=True)], k // c + q)
        return build_sum(rem, k % c - q * c)
    # 2. modulo only: a term (u % m) with c | m is congruent to u modulo c
    if not is_div and any(_mod_by_multiple(t, c) for t, _ in items):
        nodes = [UOp(Ops.MUL, (t.src[0] if _mod_by_multiple(t, c) else t, UOp.const(f, x.dtype))) for t, f in items]
        return UOp(Ops.MOD, (resum([*nodes, UOp.const(k, x.dtype)]), cu))
    # 3. split the multiples of c off the coefficients (truncating toward zero) and the constant (floor for
    #    c > 0, so (a-2)//4 -> (a+2)//4 - 1; truncating for c < 0, so (a+1)%-11 keeps its 1)
    qs = [_tdiv(f, c) for _, f in items]
    # a division keeps its constant inside, (x + 14) // 4 (one ADD fewer than (x + 2) // 4 + 3; add-div-const
    # merges an outer one in), unless it is a multiple of c: (x + 36) // 3 -> x // 3 + 12 costs nothing and lets
    # the quotient meet like terms
    kq = (k // c if k % c == 0 else 0) if is_div else k // c if c > 0 else _tdiv(k, c)
    kr = k - kq * c
    if kq != 0 or any(qs):
        rem_sum = build_sum([(t, f - q * c) for (t, f), q in zip(items, qs, strict=True)], kr)
        if not is_div:
            return UOp(Ops.MOD, (rem_sum, cu))
        quotient = [(t, q) for (t, _), q in zip(items, qs, strict=True)]
        return build_sum([*quotient, (UOp(Ops.IDIV, (rem_sum, cu)), 1)], kq)
    # 4. a common factor g of the coefficients and c; the constant's remainder mod g drops out of the
    #    quotient when c > 0 (0 <= k % g < g cannot reach the next multiple of c), so c < 0 needs g | k
    g = math.gcd(c, *(f for _, f in items))
    if g > 1 and (c > 0 or k % g == 0):
        inner = build_sum([(t, f // g) for t, f in items], k // g)
        cg = UOp.const(c // g, x.dtype)
        if is_div:
            return UOp(Ops.IDIV, (inner, cg))
        return build_sum([(UOp(Ops.MOD, (inner, cg)), g)], k % g)
    # 5. small terms under a common factor: x = g*B + S with g | c and 0 <= S < g, where S holds the terms whose
    #    coefficient g does not divide and k % g; then x // c = B // (c/g) and x % c = (B % (c/g))*g + S
    if c > 0:
        for g, big, small in _factor_splits(items, c):
            lo, hi = sum_bounds(small, k % g)
            if lo < 0 or hi >= g:
                continue
            inner = build_sum([(t, f // g) for t, f in big], k // g)
            cg = UOp.const(c // g, x.dtype)
            if is_div:
                return UOp(Ops.IDIV, (inner, cg))
            # the modulo takes the place of the first term it holds; the small terms keep theirs
            lead, modulo = big[0][0], UOp(Ops.MOD, (inner, cg))
            return build_sum([(modulo, g) if t is lead else (t, f) for t, f in items if f % g or t is lead], k % g)
    return None


def _factor_splits(items: list[tuple[UOp, int]], c: int) -> list[tuple[int, list, list]]:
    """(g, big, small) with g > 1 dividing c and the coefficient of every `big` term, `small` the other terms
    (at least one): g is gcd(c, the coefficients of magnitude >= each coefficient's), smallest g first."""
    out, seen = [], set()
    for cut in sorted({abs(f) for _, f in items}):
        g = math.gcd(c, *(f for _, f in items if abs(f) >= cut))
        if g > 1 and g not in seen:
            seen.add(g)
            small = [(t, f) for t, f in items if f % g]
            if small:
                out.append((g, [(t, f) for t, f in items if f % g == 0], small))
    return out


def _mod_by_multiple(t: UOp, c: int) -> bool:
    return t.op is Ops.MOD and t.src[1].op is Ops.CONST and divides(c, t.src[1].arg[0]) and t.src[1].arg[0] != 0  # type: ignore[index]  # hot path: a CONST arg is (value, dtype)


def divide_linear(x: UOp, c0: int) -> UOp | None:
    """x // c for x = sum(f_i * t_i) + k, tried in order:

    1. one period: with r_i = f_i (mod c) and R = sum(r_i * t_i) + k % c, if R // c is one number q over
       R's interval, then x // c = sum(((f_i - r_i) / c) * t_i) + k // c + q (no division left);
    2. split: x // c = sum(q_i * t_i) + kq + (sum((f_i - q_i*c) * t_i) + k - kq*c) // c, exact for any
       integers q_i and kq; q_i is f_i / c truncated (each coefficient shrinks toward zero), kq is k / c
       when c divides k and 0 otherwise (the constant stays inside);
    3. common factor g of c and every f_i: x // c = (sum(f_i/g * t_i) + k // g) // (c/g), exact when c > 0
       or g | k;
    4. small terms: for c > 0 and g > 1 dividing c, write x = g*B + S where B = sum over the terms g divides of
       (f_i/g)*t_i + k // g and S = the other terms + k % g; if 0 <= S < g over S's interval then
       x // c = floor(floor(x / g) / (c/g)) = B // (c/g), since floor(x / g) = B."""
    return _divmod_linear(x, c0, True)


def modulo_linear(x: UOp, c0: int) -> UOp | None:
    """x % c for x = sum(f_i * t_i) + k: the same steps as divide_linear, since x % c = x - c*(x // c):

    1. one period: x % c = R - q*c;
    2. a term (u % m) with c | m is replaced by u (u % m = u - m*(u // m), a multiple of c apart);
    3. split: x % c = (sum(r_i * t_i) + kr) % c for any r_i = f_i and kr = k (mod c), chosen as in
       divide_linear;
    4. common factor: x % c = ((sum(f_i/g * t_i) + k // g) % (c/g)) * g + k % g, when c > 0 or g | k;
    5. small terms (as divide_linear's step 4): x % c = x - c*(B // (c/g)) = g*(B % (c/g)) + S."""
    return _divmod_linear(x, c0, False)


def divide_common_factor(x: UOp, y: UOp, c0: int, is_div: bool) -> UOp | None:
    """x // (y*c0) and x % (y*c0) with g = gcd(c0, x's coefficients and constant) > 1 divided out:
    (g*A) // (g*B) = A // B and (g*A) % (g*B) = g*(A % B) for g > 0 (the quotient floor(A/B) is the same), and
    g*B is 0 exactly where B is, so no division by zero appears or goes."""
    terms, k = linear_form(x)
    g = math.gcd(c0, k, *terms.values())
    if g <= 1:
        return None
    a = build_sum([(t, f // g) for t, f in terms.items()], k // g)
    b = y if c0 // g == 1 else UOp(Ops.MUL, (y, UOp.const(c0 // g, y.dtype)))
    if is_div:
        return UOp(Ops.IDIV, (a, b))
    return UOp(Ops.MUL, (UOp(Ops.MOD, (a, b)), UOp.const(g, x.dtype)))


def div_common_factor(x: UOp, y: UOp, c0: int) -> UOp | None:
    """x // (y*c0) with a common factor of c0 and x divided out (divide_common_factor)."""
    return divide_common_factor(x, y, c0, True)


def mod_common_factor(x: UOp, y: UOp, c0: int) -> UOp | None:
    """x % (y*c0) with a common factor of c0 and x divided out, times that factor (divide_common_factor)."""
    return divide_common_factor(x, y, c0, False)


# fmt: off
divmod_linear = RuleSet("divmod-linear", [
    Rule("div-common-factor-var", x // (y * c0), div_common_factor, when=lambda c0: c0 != 0),
    Rule("mod-common-factor-var", x % (y * c0),  mod_common_factor, when=lambda c0: c0 != 0),
    Rule("div-linear",  x // c0, divide_linear, when=lambda c0: c0 != 0),
    Rule("mod-linear",  x % c0,  modulo_linear, when=lambda c0: c0 != 0),
    Rule("add-chain-div-mod", op.ADD(x, y, ordered=True), recombine_divmod, when=lambda y: is_divmod_term(y)),
])
# fmt: on

divmod_rules = divmod_templates + divmod_linear

__all__ = [
    "divide_linear",
    "divides",
    "divmod_linear",
    "divmod_rules",
    "divmod_templates",
    "in_first_period",
    "modulo_linear",
    "nonzero",
    "not_divides",
]
