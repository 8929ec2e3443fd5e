"""Fast symbolic rules for index arithmetic: directional, run by the compiled matcher in `graph_rewrite`.

What holds after `symbolic` has run to a fixed point on an index expression:
  * no operation has only constant operands (folded with the op-semantics table, rewrite.semantics);
  * no SUB, NEG, CMPGT, CMPGE, CMPLE or CMPEQ on index operands: x - y is x + y*-1, -x is x*-1,
    x > y is y < x, x >= y is not(x < y), x == y is not(x != y); one form for the rules below;
  * sums are canonical: a left-associated chain of terms `atom*coefficient` (coefficient omitted when 1,
    never 0), each atom at most once, in first-occurrence order, with the constant last; a product with
    a constant has it on the right, and constants are multiplied out over sums ((x+y)*c -> x*c + y*c);
  * identities are gone (x+0, x*1, x*0, x//1, x%1, x//x and x%x for x != 0, x<x, x!=x, max(x,x)),
    bool algebra and WHERE with a constant or repeated condition are folded;
  * every index ALU node whose interval (vmin == vmax) is one value is that constant;
  * division and modulo by constants are simplified as rules.divmod describes; x//c*c + x%c is x;
  * comparisons of a sum with a constant have the constant on one side, positive leading coefficients,
    and are divided through by a common factor when the remaining terms cannot change the outcome
    ((4a+b) < 16 -> a < 4 when 0 <= b < 4); max is folded when the bounds decide it; a comparison of two
    terms with the same constant factor has it divided out (-a < -b -> b < a); two comparisons of one term
    with constants that cover every value (or none) are True (or False), also along an AND/OR chain;
  * no WHERE picks the larger of two terms (that is MAX), no two wheres on one condition with complementary
    zero branches are summed, and no branch of a WHERE holds a bool node its condition decides: inside
    `c.where(t, f)`, c is True in t and False in f, and comparisons of c's term with constants are decided by
    the bounds c implies, at any depth (rules.conditions, "closure folding");
  * xor of a term with itself, and (x^y)^y, are gone; constants xor-ed in a row are folded; x & -1 is x.

Where it runs: on index expressions (RANGE/PARAM variables, CONST, and index ALU ops) before and after
egglog saturation (rules.eqsat), and wherever a stage wants clean index math. `symbolic_simple` is the
cheap subset (folding, identities, bool/where algebra, decomposition) for stages that only need cleanup.

Assumptions and dtypes:
  * Index math is exact: `dtypes.index` is an unbounded integer, IDIV/MOD are floor division and modulo
    (Python's // and %) for every sign. Most rules are restricted to `dtypes.index`.
  * Constant folding applies to every dtype: it is the op-semantics table itself (wrap-around ints, float
    rounding). A division by zero or an undefined shift is not folded.
  * On sized ints (int8..int64, uint8..uint64) only ring identities run, which hold modulo 2**bits:
    x+0, x*1, x*0, x//1, x%1, x%-1, (x+c0)+c1, (x*c0)*c1, x&0, x|0, x^0, and the bitwise x^x, (x^y)^y,
    (x^c0)^c1, x&-1 (signed). Nothing that reads intervals, divides or reorders runs there, since wrap-around
    breaks those.
  * Bool rules run on `dtypes.bool`; WHERE rules with a constant or repeated condition run on any dtype.
  * Guards are declared with `when=` and read constants and intervals (`.vmin`/`.vmax`, bounds from
    rewrite.interval). Rules never remove or introduce a division by zero.
  * Termination: every template rule makes the term smaller in a fixed order (tests/rules/
    test_termination.py); the callables (rules.linear, rules.divmod) fire only when they remove a node,
    merge terms or shrink a numerator, as their docstrings state. Commutativity and associativity as
    two-way rules exist only in the e-graph (rules.eqsat).
"""

from __future__ import annotations

from rewrite.dsl import Rule, RuleSet, const, fold, lift, op, var
from rewrite.dtype import dtypes
from rewrite.engine import FixedPoints, graph_rewrite
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules.conditions import fold_closure, where_to_max
from rules.divmod import divides, divmod_linear, divmod_rules, divmod_templates, nonzero, not_divides
from rules.linear import gt_linear, is_term_of_atom, lt_linear, merge_like_terms, ne_linear

INDEX = dtypes.index
BOOL = dtypes.bool
INTS = dtypes.all_ints  # index and sized ints: ring identities survive wrap-around
SIGNED = dtypes.ints | {INDEX}

x, y, z = var("x"), var("y"), var("z")
xi = var("x", INDEX)
xn = var("x", INTS)
xb = var("x", BOOL)
cond = var("c", BOOL)
c0, c1 = const("c0"), const("c1")

# fmt: off
_SHIFTS = (Ops.SHL, Ops.SHR)
_FOLD_BINARY = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.CMPGT,
                Ops.CMPGE, Ops.CMPLE, Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR)
# index/bool ALU ops whose node is replaced by its value when its interval is a single point
_POINT_OPS = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.WHERE, Ops.AND,
                        Ops.OR, Ops.XOR, Ops.NOT, Ops.SHL, Ops.SHR})

constant_folding = RuleSet("constant-folding", [
    *(Rule(f"fold-{o.name.lower()}", op[o](c0, c1), fold(op[o](c0, c1))) for o in _FOLD_BINARY if o not in _SHIFTS),
    # an index shift by a huge amount is a huge (or memory-exhausting) number; no index needs more than 256 bits
    *(Rule(f"fold-{o.name.lower()}", op[o](c0, c1), fold(op[o](c0, c1)), when=lambda c1: c1 <= 256) for o in _SHIFTS),
    Rule("fold-neg",             -c0,                 fold(-c0)),
    Rule("fold-not",             ~c0,                 fold(~c0)),
])

identities = RuleSet("identities", [
    Rule("add-zero",             xn + 0,              x),
    Rule("mul-one",              xn * 1,              x),
    Rule("mul-zero",             xn * 0,              0),
    Rule("idiv-one",             xn // 1,             x),
    Rule("mod-one",              xn % 1,              0),
    Rule("mod-neg-one",          var("x", SIGNED) % -1, 0),
    Rule("idiv-neg-one",         xi // -1,            x * -1),
    Rule("idiv-self",            xi // xi,            1, when=lambda x: nonzero(x)),
    Rule("mod-self",             xi % xi,             0, when=lambda x: nonzero(x)),
    Rule("max-self",             xi.maximum(xi),      x),
    Rule("lt-self",              xi < xi,             False),
    Rule("ne-self",              xi.ne(xi),           False),
    Rule("and-zero",             xn & 0,              0),
    Rule("or-zero",              xn | 0,              x),
    Rule("xor-zero",             xn ^ 0,              x),
    Rule("shl-zero",             xi << 0,             x),
    Rule("shr-zero",             xi >> 0,             x),
    # index shifts are exact: x << c is x * 2**c, x >> c is x // 2**c (arithmetic shift = floor division)
    Rule("shl-to-mul",           xi << c0,            x * fold(lift(1) << c0),  when=lambda c0: (c0 >= 0) & (c0 < 256)),
    Rule("shr-to-div",           xi >> c0,            x // fold(lift(1) << c0), when=lambda c0: (c0 >= 0) & (c0 < 256)),
])

bool_algebra = RuleSet("bool-algebra", [
    Rule("and-true",             xb & True,           x),
    Rule("and-false",            xb & False,          False),
    Rule("or-true",              xb | True,           True),
    Rule("or-false",             xb | False,          x),
    Rule("and-self",             xb & xb,             x),
    Rule("or-self",              xb | xb,             x),
    Rule("xor-false",            xb ^ False,          x),
    Rule("xor-true",             xb ^ True,           ~x),
    Rule("xor-self",             xb ^ xb,             False),
    Rule("not-not",              ~~x,                 x),
    # xor is its own inverse on bools and every int dtype (bitwise, so wrap-around cannot matter)
    Rule("xor-cancel",           (var("x", INTS | {BOOL}) ^ y) ^ y,    x),
    Rule("xor-self-int",         xn ^ xn,             0),
    Rule("xor-const-combine",    (xn ^ c0) ^ c1,      x ^ fold(c0 ^ c1)),
    Rule("and-neg-one",          var("x", SIGNED) & -1, x),
    Rule("and-not-self",         xb & ~xb,            False),
    Rule("or-not-self",          xb | ~xb,            True),
    Rule("ne-false",             xb.ne(False),        x),
    Rule("ne-true",              xb.ne(True),         ~x),
    Rule("eq-true",              xb.eq(True),         x),
    Rule("eq-false",             xb.eq(False),        ~x),
])

where_folding = RuleSet("where-folding", [
    Rule("where-true",           op.WHERE(True, x, y),                x),
    Rule("where-false",          op.WHERE(False, x, y),               y),
    Rule("where-same",           cond.where(x, x),                    x),
    Rule("where-not",            (~cond).where(x, y),                 cond.where(y, x)),
    Rule("where-nested-then",    cond.where(cond.where(x, y), z),     cond.where(x, z)),
    Rule("where-nested-else",    cond.where(x, cond.where(y, z)),     cond.where(x, z)),
    Rule("where-bool-cond",      op.WHERE(cond, True, False, dtype=BOOL), cond),
    Rule("where-bool-not",       op.WHERE(cond, False, True, dtype=BOOL), ~cond),
    # two wheres on one condition, one branch zero each: one where (index sums only, where + is exact)
    Rule("add-where-complement", cond.where(xi, 0) + cond.where(0, y),  cond.where(x, y)),
])

# the branch a where selects knows its condition: nested wheres on the same or an implied condition fold, at any
# depth (rules.conditions); and a where that picks the larger of two terms is their max
where_closure = RuleSet("where-closure", [
    Rule("where-lt-max",         (xi < y).where(y, x),                where_to_max),  # (y < x).where(x, y) too
    # index and bool wheres only: the rule walks both branches, which for a float where can be a whole kernel
    Rule("where-closure",        op.WHERE(cond, x, y, dtype={INDEX, BOOL}), fold_closure),
])

# one canonical form for index math: no SUB, NEG or comparison other than < and !=
index_decompositions = RuleSet("index-decompositions", [
    Rule("sub-to-add",           xi - y,              x + y * -1),
    Rule("neg-to-mul",           -xi,                 x * -1),
    Rule("gt-to-lt",             xi > y,              y < x),
    Rule("ge-to-lt",             xi >= y,             ~(x < y)),
    Rule("le-to-lt",             xi <= y,             ~(y < x)),
    Rule("eq-to-ne",             xi.eq(y),            ~x.ne(y)),
])

symbolic_simple = constant_folding + identities + bool_algebra + where_folding + index_decompositions
symbolic_simple.name = "symbolic-simple"

canonical_order = RuleSet("canonical-order", [
    Rule("add-const-combine",    op.ADD(op.ADD(xn, c0, ordered=True), c1, ordered=True), x + fold(c0 + c1)),
    Rule("mul-const-combine",    op.MUL(op.MUL(xn, c0, ordered=True), c1, ordered=True), x * fold(c0 * c1)),
    Rule("add-const-right",      op.ADD(c0, xi, ordered=True),                           x + c0),
    Rule("mul-const-right",      op.MUL(c0, xi, ordered=True),                           x * c0),
    Rule("add-left-assoc",       op.ADD(xi, op.ADD(y, z, ordered=True), ordered=True),   (x + y) + z),
    Rule("add-const-last",       op.ADD(op.ADD(xi, c0, ordered=True), y, ordered=True),  (x + y) + c0),
    Rule("mul-const-out-left",   op.MUL(op.MUL(xi, c0, ordered=True), y, ordered=True),  (x * y) * c0),
    Rule("mul-const-out-right",  op.MUL(y, op.MUL(xi, c0, ordered=True), ordered=True),  (y * x) * c0),
    Rule("mul-distribute-const", op.MUL(op.ADD(xi, y, ordered=True), c0, ordered=True),  x * c0 + y * c0),
])

like_terms = RuleSet("like-terms", [
    Rule("add-self",             xi + xi,             x * 2),
    Rule("add-like-terms",       xi * c0 + xi * c1,   x * fold(c0 + c1)),
    Rule("add-term-multiple",    xi + xi * c0,        x * fold(c0 + 1)),
])

comparisons = RuleSet("comparisons", [
    Rule("lt-add-const",         (xi + c0) < c1,      x < fold(c1 - c0)),
    Rule("lt-const-add",         c0 < (xi + c1),      fold(c0 - c1) < x),
    Rule("lt-mul-pos",           (xi * c0) < c1,      x < fold((c1 + c0 - 1) // c0),  when=lambda c0: c0 > 0),
    Rule("lt-mul-neg",           (xi * c0) < c1,      fold(c1 // c0) < x,             when=lambda c0: c0 < 0),
    Rule("lt-const-mul-pos",     c0 < (xi * c1),      fold(c0 // c1) < x,             when=lambda c1: c1 > 0),
    Rule("lt-const-mul-neg",     c0 < (xi * c1),      x < fold((c0 + c1 + 1) // c1),  when=lambda c1: c1 < 0),
    Rule("lt-div-pos",           (xi // c0) < c1,     x < fold(c1 * c0),              when=lambda c0: c0 > 0),
    Rule("lt-const-div-pos",     c0 < (xi // c1),     fold((c0 + 1) * c1 - 1) < x,    when=lambda c1: c1 > 0),
    Rule("not-lt-const",         ~(xi < c0),          fold(c0 - 1) < x),
    Rule("not-const-lt",         ~(c0 < xi),          x < fold(c0 + 1)),
    Rule("ne-const-left",        op.CMPNE(c0, xi, ordered=True), x.ne(c0)),
    Rule("ne-add-const",         (xi + c0).ne(c1),    x.ne(fold(c1 - c0))),
    Rule("ne-mul-const",         (xi * c0).ne(c1),    x.ne(fold(c1 // c0)),  when=lambda c0, c1: divides(c0, c1)),
    Rule("ne-mul-const-never",   (xi * c0).ne(c1),    True,                  when=lambda c0, c1: not_divides(c0, c1)),
    Rule("and-lt-lt",            (xi < c0) & (xi < c1), x < c0,              when=lambda c0, c1: c0 <= c1),
    Rule("and-gt-gt",            (c0 < xi) & (c1 < xi), c1 < x,              when=lambda c0, c1: c0 <= c1),
    Rule("or-lt-lt",             (xi < c0) | (xi < c1), x < c1,              when=lambda c0, c1: c0 <= c1),
    Rule("or-gt-gt",             (c0 < xi) | (c1 < xi), c0 < x,              when=lambda c0, c1: c0 <= c1),
    # two comparisons of one term that cover every value, or none
    Rule("or-lt-gt-all",         (xi < c0) | (c1 < xi), True,                when=lambda c0, c1: c1 < c0),
    Rule("and-lt-gt-none",       (xi < c0) & (c1 < xi), False,               when=lambda c0, c1: c0 <= c1 + 1),
    Rule("or-lt-gt-all-chain",   ((xi < c0) | y) | (c1 < xi), True,          when=lambda c0, c1: c1 < c0),
    Rule("or-gt-lt-all-chain",   ((c1 < xi) | y) | (xi < c0), True,          when=lambda c0, c1: c1 < c0),
    Rule("and-lt-gt-none-chain", ((xi < c0) & y) & (c1 < xi), False,         when=lambda c0, c1: c0 <= c1 + 1),
    Rule("and-gt-lt-none-chain", ((c1 < xi) & y) & (xi < c0), False,         when=lambda c0, c1: c0 <= c1 + 1),
    Rule("or-ne-lt",             xi.ne(c0) | (xi < c1), True,                when=lambda c0, c1: c0 < c1),
    Rule("or-ne-gt",             xi.ne(c0) | (c1 < xi), True,                when=lambda c0, c1: c1 < c0),
    Rule("and-ne-lt",            xi.ne(c0) & (xi < c1), x < c1,              when=lambda c0, c1: c1 <= c0),
    Rule("and-ne-gt",            xi.ne(c0) & (c1 < xi), c1 < x,              when=lambda c0, c1: c0 <= c1),
    # the same factor on both sides: divide it out, swapping the sides when it is negative
    Rule("lt-mul-both-pos",      (xi * c0) < (y * c0), x < y,                when=lambda c0: c0 > 0),
    Rule("lt-mul-both-neg",      (xi * c0) < (y * c0), y < x,                when=lambda c0: c0 < 0),
    Rule("lt-neg-add-neg",       (xi * -1 + c0) < (y * -1), (y + c0) < x),
])

max_folding = RuleSet("max-folding", [
    Rule("max-const-left",       op.MAX(c0, xi, ordered=True),                          x.maximum(c0)),
    Rule("max-const-combine",    op.MAX(op.MAX(xi, c0, ordered=True), c1, ordered=True),
         x.maximum(fold(op.MAX(c0, c1)))),
    Rule("max-by-bounds",        xi.maximum(y),       x, when=lambda x, y: x.vmin >= y.vmax),
])

# a node whose interval is one value is that value (sound because intervals are; an op that could fail,
# like a division by a divisor whose interval holds 0, gets the dtype's whole range, never a point)
point_folding = RuleSet("point-folding", [
    Rule("fold-point-interval",  op[_POINT_OPS](name="x", dtype={INDEX, BOOL}, rest=True), fold(lambda x: x.vmin),
         when=lambda x: x.vmin == x.vmax),
])

linear_rules = RuleSet("linear", [
    Rule("add-chain-like-terms", op.ADD(xi, y, ordered=True),   merge_like_terms, when=lambda y: is_term_of_atom(y)),
    Rule("lt-linear",            xi < c0,                       lt_linear),
    Rule("lt-linear-const-left", c0 < xi,                       gt_linear),
    Rule("ne-linear",            xi.ne(c0),                     ne_linear),
])
# fmt: on

# order matters only among rules on the same root op: cheap templates first, then point folding, then the
# callables that build linear forms
symbolic = (
    symbolic_simple
    + canonical_order
    + like_terms
    + divmod_templates
    + comparisons
    + max_folding
    + point_folding
    + where_closure
    + linear_rules
    + divmod_linear
)
symbolic.name = "symbolic"


# `symbolic`'s rules read only the node (its ops, constants and intervals), so a node's fixed point is the same in
# every call: kept across calls (index math recurs from kernel to kernel and from stage to stage); a benchmark that
# times the rules themselves clears it first
FIXED_POINTS = FixedPoints()


def simplify_fast(u: UOp) -> UOp:
    """The fast rules to a fixed point (no e-graph)."""
    return graph_rewrite(u, symbolic, name="symbolic", fixed_points=FIXED_POINTS)


__all__ = [
    "bool_algebra",
    "canonical_order",
    "comparisons",
    "constant_folding",
    "divmod_rules",
    "identities",
    "index_decompositions",
    "like_terms",
    "linear_rules",
    "max_folding",
    "point_folding",
    "simplify_fast",
    "symbolic",
    "symbolic_simple",
    "where_closure",
    "where_folding",
]
