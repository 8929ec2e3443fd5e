"""The e-graph's interval analysis for rules.eqsat, as egglog text: `ANALYSIS` (one rule per op over the packed
`iv` lattice value of rewrite.egraph_terms, its cases computed from the bounds; the tripwires), `SEEDS` (the
intervals of the fast tier's products in one step) and `RAW_RULES` (rewrites that read an interval, which a DSL
fold cannot). rules.eqsat builds its programs from them; tests/rules/test_eqsat_iv.py checks the analysis by brute
force."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from rewrite.egraph_terms import IV_INF, IV_NEG, IV_POS, floor_div, iv_decode, iv_exact, iv_fields, iv_pack, pow2_rules


def _dec(t: str, lo: str, hi: str) -> str:
    """Facts binding `lo`, `hi` to the bounds of `t`'s packed interval (a missing one read as -+IV_INF)."""
    return " ".join([f"(= __p{t} (iv {t}))", *iv_decode(f"__p{t}", lo, hi)])


def _raw(t: str, lo: str, hi: str) -> str:
    """Facts binding `lo`, `hi` to the raw fields of `t`'s packed interval (IV_NEG / IV_POS: missing). Enough for
    min and max of bounds: a missing bound is the least (lower) or greatest (upper) field value, and comes out as
    the same missing bound."""
    return " ".join([f"(= __p{t} (iv {t}))", *iv_fields(f"__p{t}", lo, hi)])


# the numerator's bounds stored exactly (not missing: -+IV_INF is not far enough out for a quotient or a remainder)
_EXACT_A = f"(!= la__f {IV_NEG}) (!= ha__f {IV_POS})"
_AB = f"{_dec('a', 'la', 'ha')} {_dec('b', 'lb', 'hb')}"
_A = _dec("a", "la", "ha")
_AB_RAW = f"{_raw('a', 'la', 'ha')} {_raw('b', 'lb', 'hb')}"


def _iv(name: str, facts: str, lo: str, hi: str) -> str:
    return (f"(rule ({facts} (= __iv {iv_pack(lo, hi)}))\n      ((set (iv e) __iv))\n"
            f"      :ruleset analysis :name \"{name}\")")


def _corners(fn: str, x: tuple[str, str], y: tuple[str, str]) -> tuple[str, str]:
    """min and max of fn over the four corners (fn is monotone in each argument on the box)."""
    if fn == "*":
        c = [f"(* {a} {b})" for a in x for b in y]
    else:
        c = [floor_div(a, b) for a in x for b in y]
    return f"(min (min {c[0]} {c[1]}) (min {c[2]} {c[3]}))", f"(max (max {c[0]} {c[1]}) (max {c[2]} {c[3]}))"


_MUL = _corners("*", ("la", "ha"), ("lb", "hb"))
_DIV = _corners("//", ("la", "ha"), ("lb", "hb"))


def _flag(v: str) -> str:
    """1 where the integer `v` is at least 1, else 0: a condition on bounds as a value, so that one rule (one run per
    iteration, matched or not) gives what a rule per case would."""
    return f"(min 1 (max 0 {v}))"


# past every bound `iv_decode` gives (+-IV_INF) and every field value: a bound plus or minus it loses any min or max
_FAR = 1 << 34


def _far(flag: str) -> str:
    return f"(* {_FAR} {flag})"


# a remainder's upper bound by a positive divisor, its lower bound by a negative one
_MOD_POS_HI = f"(min (- hb 1) (+ ha {_far(_flag('(- 0 la)'))}))"
_MOD_NEG_LO = f"(max (+ lb 1) (- la {_far(_flag('ha'))}))"
_NOT_POS_B = f"(- 1 {_flag('lb')})"
# the quotients of a's bounds by b's lower one, and 1 unless b is one value, a's bounds are stored exactly and have
# one quotient
_Q_LO, _Q_HI = floor_div("la", "lb"), floor_div("ha", "lb")
_NOT_ONE_Q = _flag(f"(+ (+ (max (- hb lb) (- lb hb)) (max (- {_Q_LO} {_Q_HI}) (- {_Q_HI} {_Q_LO})))"
                   f" (+ {_flag(f'(- {IV_NEG + 1} la__f)')} {_flag(f'(- ha__f {IV_POS - 1})')}))")
# b's interval keeps one sign (both bounds above zero, or both below)
_ONE_SIGN_B = f"(= 1 (+ {_flag('lb')} {_flag('(- 0 hb)')}))"
# the remainder's interval (iv-mod)
_MOD_LO = f"(max (min 0 (+ {_MOD_NEG_LO} {_far(_flag('lb'))})) (- (- la (* {_Q_LO} lb)) {_far(_NOT_ONE_Q)}))"
_MOD_HI = f"(min (max 0 (- {_MOD_POS_HI} {_far(_NOT_POS_B)})) (+ (- ha (* {_Q_LO} lb)) {_far(_NOT_ONE_Q)}))"
# _FAR where a Where's condition (raw fields lc, hc) is known false (so branch a is not taken), else 0; and where it
# is known true (branch b)
_NOT_A = _far(f"(- 1 {_flag('hc')})")
_NOT_B = _far(_flag("lc"))
# at least 1 where the intervals of a and b are apart (so a != b), else 0
_APART = "(+ (max 0 (- lb ha)) (max 0 (- la hb)))"
# 0 where a and b are one and the same point (so a == b), else at least 1
_SPREAD = "(+ (- ha la) (+ (- hb lb) (max (- la lb) (- lb la))))"

# the interval analysis over packed intervals (rewrite.egraph_terms: `iv`). Bounds are read with `iv_decode`
# (a missing bound as -+IV_INF, far enough out that a sum, difference, negation or product with it packs back to
# missing, and that no comparison with a stored bound holds wrongly), or as raw fields where the rule only takes
# min and max of them; a quotient or remainder needs its numerator's bounds stored exactly
ANALYSIS = "\n".join([
    "(ruleset analysis)",
    f"(rule ((= e (Num n)) (= __iv {iv_pack('n', 'n')})) ((set (iv e) __iv)) :ruleset analysis :name \"iv-num\")",
    f"(rule ((= e (Var k l h)) (= __iv {iv_pack('l', 'h')})) ((set (iv e) __iv)) :ruleset analysis"
    " :name \"iv-var\")",
    _iv("iv-add", f"(= e (Add a b)) {_AB}", "(+ la lb)", "(+ ha hb)"),
    _iv("iv-sub", f"(= e (Sub a b)) {_AB}", "(- la hb)", "(- ha lb)"),
    _iv("iv-neg", f"(= e (Neg a)) {_A}", "(- 0 ha)", "(- 0 la)"),
    _iv("iv-mul", f"(= e (Mul a b)) {_AB}", *_MUL),
    # floor division is monotone in both operands on a box whose divisor keeps one sign
    _iv("iv-div", f"(= e (Div a b)) {_AB} {_ONE_SIGN_B} {_EXACT_A}", *_DIV),
    # the remainder takes the divisor's sign: [0, hb-1] for a positive one, [lb+1, 0] for a negative one; a
    # numerator that cannot be negative (positive) bounds it too. The bounds of the other sign's case are pushed
    # past 0 and cut off there. And by a constant m with one quotient q over the numerator's whole (exact)
    # interval, x % m is x - q*m there: that interval, intersected (pushed out of the way where it does not apply)
    _iv("iv-mod", f"(= e (Mod a b)) {_AB} {_ONE_SIGN_B}", _MOD_LO, _MOD_HI),
    _iv("iv-max", f"(= e (Max a b)) {_AB_RAW}", "(max la lb)", "(max ha hb)"),
    # a comparison is [0, 1] whatever its operands; known true (false) where their intervals decide it
    *(_iv(f"iv-{c.lower()}", f"(= e ({c} a b))", "0", "1") for c in ("Lt", "Ne", "Gt", "Ge", "Le", "Eq")),
    _iv("iv-lt-known", f"(= e (Lt a b)) {_AB}", _flag("(- lb ha)"), _flag("(- hb la)")),
    _iv("iv-gt-known", f"(= e (Gt a b)) {_AB}", _flag("(- la hb)"), _flag("(- ha lb)")),
    _iv("iv-le-known", f"(= e (Le a b)) {_AB}", _flag("(+ 1 (- lb ha))"), _flag("(+ 1 (- hb la))")),
    _iv("iv-ge-known", f"(= e (Ge a b)) {_AB}", _flag("(+ 1 (- la hb))"), _flag("(+ 1 (- ha lb))")),
    _iv("iv-ne-known", f"(= e (Ne a b)) {_AB}", _flag(_APART), _flag(_SPREAD)),
    _iv("iv-eq-known", f"(= e (Eq a b)) {_AB}", f"(- 1 {_flag(_SPREAD)})", f"(- 1 {_flag(_APART)})"),
    _iv("iv-not", f"(= e (Not a)) {_A}", "(- 1 ha)", "(- 1 la)"),
    _iv("iv-and", f"(= e (And a b)) {_AB_RAW}", "(min la lb)", "(min ha hb)"),
    _iv("iv-or", f"(= e (Or a b)) {_AB_RAW}", "(max la lb)", "(max ha hb)"),
    # both branches, or the one a condition known true (false) picks: the other is pushed past every field value
    # (a boolean condition always has an interval: every comparison gets [0, 1])
    _iv("iv-where", f"(= e (Where c a b)) {_raw('c', 'lc', 'hc')} {_AB_RAW}",
        f"(min (+ la {_NOT_A}) (+ lb {_NOT_B}))", f"(max (- ha {_NOT_A}) (- hb {_NOT_B}))"),
    f"(rule ((= __p (iv e)) {' '.join(iv_exact('__p', 'v', None))} (= v (>> (<< __p 32) 32))) ((union e (Num v)))"
    " :ruleset analysis :name \"iv-point\")",
    # a division or modulo by a power of two the rules made gets its cheaper extraction twin (loaded ones come
    # with it): in the analysis, which every iteration saturates, so it costs no iteration of its own
    pow2_rules("analysis"),
    # once a class of constants holds its Num, hide the sums and products in it: rules that reassociate or
    # collect would otherwise keep building new constants out of them (Div and Mod stay visible, since guards
    # look their intervals up by structure)
    *(f"(rule ((= e ({c} (Num a) (Num b))) (= e (Num n))) ((subsume ({c} (Num a) (Num b))))"
      f" :ruleset analysis :name \"hide-const-{c.lower()}\")" for c in ("Add", "Sub", "Mul", "Max")),
    "(rule ((= e (Neg (Num a))) (= e (Num n))) ((subsume (Neg (Num a)))) :ruleset analysis :name \"hide-const-neg\")",
    # tripwires: only an unsound rule (or analysis) can get here. Checked once after each iteration's saturation
    # (Schedule.checks), not in every pass of it: what they catch stays (a class's interval only shrinks, merged
    # constants stay merged), and the result of a batch that trips is its input
    "(ruleset checks)",
    "(rule ((= (Num a) (Num b)) (< a b)) ((panic \"eqsat: two different constants merged\"))"
    " :ruleset checks :name \"tripwire-constants\")",
    f"(rule ((= __p (iv e)) {' '.join(iv_fields('__p', 'l', 'h'))} (> l h)) ((panic \"eqsat: empty interval\"))"
    " :ruleset checks :name \"tripwire-interval\")",
])



def _seed(name: str, facts: str, lo: str, hi: str) -> str:
    """A rule of `SEEDS`: the intervals of `d` (bounds `lo`, `hi`) and of its product `e` by a constant k."""
    prod = _corners("*", ("__dl", "__dh"), ("k", "k"))
    return (f"(rule ({facts} (= e (Mul d (Num k))) (= __dl {lo}) (= __dh {hi}) (= __ivd {iv_pack('__dl', '__dh')})"
            f" (= __iv {iv_pack(*prod)}))\n      ((set (iv d) __ivd) (set (iv e) __iv))\n"
            f"      :ruleset seeds :name \"{name}\")")


# the intervals of the products the fast tier's rewrites build, (x // c) * k and (x % c) * k, from x's interval in one
# step: a rule set run once, right after the rewrites' pass (Schedule.seeds), so that the analysis's saturation
# starts from them instead of reaching them in two passes (the quotient or remainder, then the product). They are
# the intervals those two passes give (iv-div by a constant, iv-mod with b = c, iv-mul by a constant), so the results
# are the same, two passes sooner; where x has no interval yet they do not fire and the analysis gets there as before
SEEDS = "\n".join([
    "(ruleset seeds)",
    _seed("seed-div", f"(= d (Div a (Num c))) (!= c 0) {_A} {_EXACT_A}", f"(min {floor_div('la', 'c')} "
          f"{floor_div('ha', 'c')})", f"(max {floor_div('la', 'c')} {floor_div('ha', 'c')})"),
    _seed("seed-mod", f"(= d (Mod a (Num c))) {_A} (= lb c) (= hb c) {_ONE_SIGN_B}", _MOD_LO, _MOD_HI),
])

# x % m is x shifted by a constant when every value of x has the same quotient (the fold needs x's interval,
# which a DSL fold() cannot read)
RAW_RULES = "\n".join([
    f"(rule ((= e (Mod x (Num m))) (> m 0) (= __px (iv x)) {' '.join(iv_exact('__px', 'l', 'h'))}"
    f" (= k {floor_div('l', 'm')}) (= k {floor_div('h', 'm')}) (!= k 0) (= d (- 0 (* k m))) (= __pe (iv e))"
    f" {' '.join(iv_fields('__pe', 'el', 'eh'))} (< el eh))"
    " ((union e (Add x (Num d)))) :ruleset rw :name \"mod-shift\")",
])


# ---------------------------------------------------------------------------------------------- the seeds in Python

def _sexpr(text: str) -> object:
    """The s-expression of egglog i64 text: a name, an int, or a list [op, args...]."""
    toks = text.replace("(", " ( ").replace(")", " ) ").split()
    stack: list[list[object]] = [[]]
    for t in toks:
        if t == "(":
            stack.append([])
        elif t == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(int(t) if t.lstrip("-").isdigit() else t)
    return stack[0][0]


# egglog's i64 primitives as Python helpers: `/` and `%` truncate (Rust), and an operation that leaves i64 or divides
# by zero fails, which makes the rule not match (raised here as ArithmeticError)
def _chk(v: int) -> int:
    if not -(1 << 63) <= v < 1 << 63:
        raise OverflowError
    return v


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)  # ZeroDivisionError where b == 0
    return _chk(q if (a < 0) == (b < 0) else -q)


def _tmod(a: int, b: int) -> int:
    return _chk(a - b * _tdiv(a, b))


_PY_OPS = {"+": "_chk({} + {})", "-": "_chk({} - {})", "*": "_chk({} * {})", "/": "_tdiv({}, {})",
           "%": "_tmod({}, {})", "min": "min({}, {})", "max": "max({}, {})"}


def _py(e: object) -> str:
    if isinstance(e, list):
        return _PY_OPS[str(e[0])].format(*(_py(a) for a in e[1:]))
    return str(e)


def _compile_i64(params: str, *texts: str) -> Callable[..., tuple[int, ...]]:
    """A Python function of `params` giving the values of the egglog i64 `texts` (raises ArithmeticError where egglog
    fails): the analysis's own formulas, so that Python and the e-graph agree to the bit."""
    body = ", ".join(_py(_sexpr(t)) for t in texts)
    env: dict[str, object] = {"_chk": _chk, "_tdiv": _tdiv, "_tmod": _tmod}
    exec(compile(f"def f({params}):\n    return ({body},)\n", "<eqsat seeds>", "exec"), env)  # our own formulas
    return cast("Callable[..., tuple[int, ...]]", env["f"])


_SEED_DIV = _compile_i64("la, ha, c", f"(min {floor_div('la', 'c')} {floor_div('ha', 'c')})",
                         f"(max {floor_div('la', 'c')} {floor_div('ha', 'c')})")
_SEED_MOD = _compile_i64("la, ha, lb, hb, la__f, ha__f", _MOD_LO, _MOD_HI)
_SEED_MUL = _compile_i64("__dl, __dh, k", *_corners("*", ("__dl", "__dh"), ("k", "k")))


def _fields(iv: tuple[int, int]) -> tuple[int, int]:
    """The fields of `iv` as the e-graph stores it (iv_pack: each bound clamped into its 32-bit field)."""
    return min(max(iv[0], IV_NEG), IV_POS), max(min(iv[1], IV_POS), IV_NEG)


def _decoded(f: tuple[int, int]) -> tuple[int, int]:
    """iv_decode in Python: a missing bound as -+IV_INF."""
    return (-IV_INF if f[0] == IV_NEG else f[0]), (IV_INF if f[1] == IV_POS else f[1])


def seed_bounds(ctor: str, kids: Sequence[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The interval the e-graph's analysis gives a node the fast tier's rewrites build, `Div` or `Mod` of an operand by
    a constant, or `Mul` of such a node by a constant, from its operands' intervals as loaded (`kids`, bounds as the
    rows carry them, None where there is none), computed with the analysis's own formulas (those of SEEDS, which are
    iv-div's, iv-mod's and iv-mul's for a constant operand); None where the rule would not match or a constant does
    not fit a field (IV_NEG < c < IV_POS: there SEEDS and the analysis read it differently). The operands' intervals
    only tighten in the e-graph and the formulas are monotone, so the result holds for the e-class at every step of
    the saturation (rewrite.egraph's Saturator loads it with the node, `PreMatcher.bounds`)."""
    if len(kids) != 2 or kids[0] is None or kids[1] is None:
        return None
    c = kids[1]
    if c[0] != c[1] or not IV_NEG < c[0] < IV_POS or c[0] == 0:
        return None
    lf, hf = _fields(kids[0])
    la, ha = _decoded((lf, hf))
    try:
        if ctor == "Div":
            if lf == IV_NEG or hf == IV_POS:  # _EXACT_A
                return None
            lo, hi = _SEED_DIV(la, ha, c[0])
        elif ctor == "Mod":
            lo, hi = _SEED_MOD(la, ha, c[0], c[0], lf, hf)
        elif ctor == "Mul":
            lo, hi = _SEED_MUL(la, ha, c[0])
        else:
            return None
    except ArithmeticError:
        return None
    return lo, hi
