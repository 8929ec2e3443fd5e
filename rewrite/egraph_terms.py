"""Index expressions as terms of the e-graph sort `Idx`, and extracted terms back as UOps (rewrite.egraph
runs them).

Sort `Idx` holds every scalar of an index expression; booleans are the values 0 and 1, so one interval
domain covers comparisons and masks too. `Num(i64)` is a constant and `Var(key, lo, hi)` a leaf: a variable,
a RANGE or SPECIAL, or any other node the sort cannot express (a LOAD in a gather, a CAST), kept opaque with
its interval. A leaf's key is structural (a readable name plus a hash of its graph), so the same key means
the same UOp in every expression and every process; the UOps come back through a table of keys. Ops map to
constructors by `CTORS`; which int dtype a `Num` gets on the way back comes from the expression, and
whether it is a bool from its position (`Lt`'s operands are ints, `And`'s bools, `Where`'s branches are
what the `Where` is).

The sort models mathematical integers: IDIV and MOD are floor division and modulo, as in rewrite.semantics
(egglog's own i64 `/` and `%` truncate, so rules spell floor results with `floor_div` / `floor_mod`). A sized
int dtype wraps, so an expression of one is taken only when the local interval analysis shows that no node
of the input, and no node of the result, can wrap.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.render import render
from rewrite.uop import UOp

I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

# op -> (constructor, operand kinds, result kind); kinds: i = the expression's int dtype, b = bool, = = the node's
CTORS: dict[Ops, tuple[str, str, str]] = {
    Ops.ADD: ("Add", "ii", "i"), Ops.SUB: ("Sub", "ii", "i"), Ops.MUL: ("Mul", "ii", "i"), Ops.NEG: ("Neg", "i", "i"),
    Ops.IDIV: ("Div", "ii", "i"), Ops.MOD: ("Mod", "ii", "i"), Ops.MAX: ("Max", "ii", "i"),
    Ops.CMPLT: ("Lt", "ii", "b"), Ops.CMPNE: ("Ne", "ii", "b"), Ops.CMPGT: ("Gt", "ii", "b"),
    Ops.CMPGE: ("Ge", "ii", "b"), Ops.CMPLE: ("Le", "ii", "b"), Ops.CMPEQ: ("Eq", "ii", "b"),
    Ops.NOT: ("Not", "b", "b"), Ops.AND: ("And", "bb", "b"), Ops.OR: ("Or", "bb", "b"),
    Ops.WHERE: ("Where", "b==", "="),
}
# extraction-only twins of a division or modulo whose divisor is a positive power of two: the same operands and
# value, priced as what the kernel pays for them (an arithmetic shift, a mask) instead of a general division.
# Every such Div/Mod in the e-graph is unioned with its twin (at load, and by `pow2_rules` for nodes the rules
# make); no rule matches a twin, and it reads back as the op it stands for.
POW2_TWINS: dict[str, str] = {"DivP2": "Div", "ModP2": "Mod"}
OP_OF: dict[str, Ops] = {c: o for o, (c, _, _) in CTORS.items()}
KINDS: dict[str, tuple[str, str]] = {c: (k, r) for c, k, r in CTORS.values()}
for _twin, _of in POW2_TWINS.items():
    OP_OF[_twin], KINDS[_twin] = OP_OF[_of], KINDS[_of]

# extraction cost per constructor (literals add 1 each): fewer ops first, and division and modulo are dear unless
# the divisor is a power of two (a shift or a mask costs what an add does)
DEFAULT_COSTS: dict[str, int] = {
    "Num": 1, "Var": 1, "Add": 2, "Sub": 2, "Mul": 2, "Neg": 2, "Div": 6, "Mod": 6, "Max": 3, "Lt": 2, "Ne": 2,
    "Gt": 2, "Ge": 2, "Le": 2, "Eq": 2, "Not": 1, "And": 2, "Or": 2, "Where": 3, "DivP2": 2, "ModP2": 2,
}


def is_pow2(c: int) -> bool:
    """Is `c` a positive power of two (a divisor that is a shift or a mask)?"""
    return c > 0 and c & (c - 1) == 0


def pow2_rules(ruleset: str) -> str:
    """egglog rules that union every Div and Mod by a positive power of two with its extraction twin."""
    return "".join(f"(rule ((= e ({of} x (Num c))) (> c 0) (= 0 (& c (- c 1)))) ((union e ({twin} x (Num c))))"
                   f" :ruleset {ruleset} :name \"twin-{twin.lower()}\")\n" for twin, of in POW2_TWINS.items())


# ---------------------------------------------------------------------------------------------- intervals
# An e-class's interval is ONE i64, `(iv e)`: the lower bound in the high 32 bits and the upper bound in the low
# 32 bits, each a signed 32-bit field, so an interval rule does one lookup per operand and one `set`, and the merge
# (the intersection) is one. A bound that does not fit its field is stored looser: a lower bound at or below
# IV_NEG is IV_NEG, which stands for "no lower bound" (minus infinity), one above IV_POS is IV_POS; an upper bound
# at or above IV_POS is IV_POS, "no upper bound", one below IV_NEG is IV_NEG. So a stored field is always a sound
# bound, exact when strictly between IV_NEG and IV_POS, and the merge is max of the lower fields and min of the upper
# ones. Intervals of values past 2**31 are lost (a looser interval, never a wrong one).
IV_NEG, IV_POS = -(1 << 31), (1 << 31) - 1
IV_INF = (1 << 32) - 1  # what `iv_decode` reads a missing bound as: past every field value, so sums stay past too
INTERVAL_FUNCTIONS = ("iv",)  # the interval lattice's functions of an e-class (`sort_decls`)
_M32 = (1 << 32) - 1


def iv_pack(lo: str, hi: str) -> str:
    """egglog i64 text for the packed interval of the bounds `lo`, `hi` (i64 texts), each clamped into its field."""
    return (f"(| (<< (min (max {lo} {IV_NEG}) {IV_POS}) 32) "
            f"(& (max (min {hi} {IV_POS}) {IV_NEG}) {_M32}))")


def iv_merge(old: str, new: str) -> str:
    """egglog text for the intersection of two packed intervals: max of the lower fields, min of the upper ones."""
    return (f"(| (<< (max (>> {old} 32) (>> {new} 32)) 32) "
            f"(& (min (>> (<< {old} 32) 32) (>> (<< {new} 32) 32)) {_M32}))")


def iv_fields(p: str, lo: str, hi: str) -> list[str]:
    """Query facts binding `lo` and `hi` to the raw fields of the packed interval `p` (IV_NEG / IV_POS: none)."""
    return [f"(= {lo} (>> {p} 32))", f"(= {hi} (>> (<< {p} 32) 32))"]


def iv_decode(p: str, lo: str, hi: str) -> list[str]:
    """Query facts binding `lo` and `hi` to the bounds in the packed interval `p`, a missing bound read as -IV_INF
    or IV_INF (past any field value, so a sum, difference or product with it, packed again, is missing too)."""
    rl, rh = f"{lo}__f", f"{hi}__f"
    return [*iv_fields(p, rl, rh),
            f"(= {lo} (+ {rl} (min 0 (- (* (+ {rl} {-IV_NEG}) {IV_POS}) {IV_POS}))))",
            f"(= {hi} (+ {rh} (max 0 (- {-IV_NEG} (* (- {IV_POS} {rh}) {-IV_NEG})))))"]


def iv_exact(p: str, lo: str | None, hi: str | None) -> list[str]:
    """Query facts binding `lo` and/or `hi` to the exact bounds in the packed interval `p`: the facts hold only
    where the asked bounds are stored exactly (strictly between IV_NEG and IV_POS)."""
    f = iv_fields(p, lo or f"{p}__l", hi or f"{p}__h")
    out = [f[0]] if lo else []
    out += [f[1]] if hi else []
    for v in (lo, hi):
        if v:
            out += [f"(< {IV_NEG} {v})", f"(< {v} {IV_POS})"]
    return out


def iv_unpack(p: int) -> tuple[int, int]:
    """The bounds of a packed interval read back in Python: a missing one as I64_MIN or I64_MAX."""
    lo, hi = p >> 32, ((p & _M32) ^ (1 << 31)) - (1 << 31)
    return (I64_MIN if lo == IV_NEG else lo), (I64_MAX if hi == IV_POS else hi)


def iv_packed(lo: int, hi: int) -> int:
    """`iv_pack` in Python (the tests' oracle)."""
    lf, hf = min(max(lo, IV_NEG), IV_POS), max(min(hi, IV_POS), IV_NEG)
    v = (lf << 32) | (hf & _M32)
    return v - (1 << 64) if v >= 1 << 63 else v


def sort_decls(costs: dict[str, int] | None = None) -> str:
    """The sort, the packed list used to extract many roots at once, and the interval lattice `iv` (packed
    bounds, merged by intersection, so an e-class keeps the intersection over its equivalent forms)."""
    c = {**DEFAULT_COSTS, **(costs or {})}
    variants = [f"(Num i64 :cost {c['Num']})", f"(Var String i64 i64 :cost {c['Var']})"]
    variants += [f"({name} {' '.join(['Idx'] * len(kinds))} :cost {c[name]})" for name, kinds, _ in CTORS.values()]
    variants += [f"({twin} Idx Idx :cost {c[twin]})" for twin in POW2_TWINS]
    return ("(datatype Idx\n  " + "\n  ".join(variants) + ")\n(datatype PList (PNil) (PCons Idx PList))\n"
            f"(function iv (Idx) i64 :merge {iv_merge('old', 'new')})\n")


def floor_mod(a: str, b: str) -> str:
    """egglog i64 text for Python's a % b (the sign of b); `%` alone truncates. Fails (no match) when b == 0."""
    return f"(% (+ (% {a} {b}) {b}) {b})"


def floor_div(a: str, b: str) -> str:
    """egglog i64 text for Python's a // b: the remainder taken off first makes the truncating `/` exact."""
    return f"(/ (- {a} {floor_mod(a, b)}) {b})"


# ---------------------------------------------------------------------------------------------- translation


class Untranslatable(Exception):
    """The expression (or the e-graph's result) cannot be carried between UOps and the sort."""


@dataclass
class Expr:
    """One root, ready for a batch: its term as a node list (children first), its leaves by key."""

    uop: UOp
    int_dtype: DType
    nodes: list[tuple]  # ("Num", v) | ("Var", key, lo, hi) | (constructor, child index, ...)
    leaves: dict[str, UOp]
    stable: bool  # every leaf key is structural, so the disk cache may hold it
    # an op node's interval from rewrite.interval (None: a leaf, or not strictly inside i64), given to the e-graph
    # with the node so that its interval analysis starts from it instead of climbing up from the leaves
    bounds: list[tuple[int, int] | None] = field(default_factory=list)

    def canonical(self) -> str:
        return "\n".join([f"{self.uop.dtype.name} {self.int_dtype.name}", *map(repr, self.nodes)])


_SAFE = re.compile(r"[^A-Za-z0-9_]")


def _graph_text(u: UOp) -> str | None:
    """A stable text of a whole subgraph (None if some arg prints differently per process, e.g. an address)."""
    idx: dict[UOp, int] = {}
    lines = []
    for n in u.toposort():
        idx[n] = len(idx)
        lines.append(f"{n.op.name}:{n.dtype!r}:{n.arg!r}:{n.tag!r}:{[idx[s] for s in n.src]}")
    text = "\n".join(lines)
    return None if " at 0x" in text else text


_KEYS: weakref.WeakKeyDictionary[UOp, tuple[str, bool]] = weakref.WeakKeyDictionary()


def _leaf_key(u: UOp, prefix: str) -> tuple[str, bool]:
    if (hit := _KEYS.get(u)) is None:
        hit = _KEYS[u] = _make_key(u, prefix)
    return hit


def _make_key(u: UOp, prefix: str) -> tuple[str, bool]:
    text = _graph_text(u)
    if text is None:
        return f"{prefix}{id(u):x}", False
    name = _SAFE.sub("_", render(u))[:24] if u.op is not Ops.CONST else "c"
    return f"{prefix}{name}@{hashlib.sha1(text.encode()).hexdigest()[:16]}", True


def _bounds(u: UOp) -> tuple[int, int]:
    if u.op is Ops.PARAM and len(u.src) == 3 and all(s.op is Ops.CONST for s in u.src[1:]):
        lo, hi = u.src[1].value, u.src[2].value
    elif u.op in (Ops.RANGE, Ops.SPECIAL):
        b = u.src[0]
        n = b.value if b.op is Ops.CONST else b.vmax
        lo, hi = 0, max(int(n) - 1, 0)  # a RANGE of no iterations never evaluates; any point is sound
    else:
        lo, hi = u.vmin, u.vmax
    if isinstance(lo, bool) or isinstance(hi, bool):
        lo, hi = int(lo), int(hi)
    if not (isinstance(lo, int) and isinstance(hi, int) and I64_MIN <= lo <= hi <= I64_MAX):
        raise Untranslatable(f"{u.short()}: interval [{lo}, {hi}] is not an i64 interval")
    return lo, hi


def _int_dtype(root: UOp) -> DType:
    if root.dtype.is_int:
        return root.dtype
    stack, seen = [root], {root}
    while stack:
        n = stack.pop()
        if n.op in CTORS:
            for s in n.src:
                if s.dtype.is_int and s.dtype.count == 1:
                    return s.dtype
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
    return dtypes.index


def _no_wrap(u: UOp) -> bool:
    """A sized-int node whose interval is not the whole dtype range cannot have wrapped (rewrite.interval gives
    the whole range to any node that may wrap)."""
    dt = u.dtype
    if dt is dtypes.index or not dt.is_int:
        return True
    lo, hi = u.min_max
    return not (lo == dt.min and hi == dt.max)


def translate(u: UOp) -> Expr:
    """The node list (children first) and node intervals of `u`; raises Untranslatable when it is not a scalar
    int or bool expression."""
    if u.shape != () or u.dtype.count != 1 or not (u.dtype.is_int or u.dtype.is_bool):
        raise Untranslatable(f"{u.short()} is not a scalar int or bool expression")
    idt = _int_dtype(u)

    bool_ = dtypes.bool

    def is_op(n: UOp) -> bool:
        """An op of the sort whose operands have the kinds its constructor takes (i: idt, b: bool, =: its own)."""
        spec = CTORS.get(n.op)
        if spec is None or (n.dtype is not idt and n.dtype is not bool_) or n.shape != ():
            return False
        kinds, src = spec[1], n.src
        if len(src) != len(kinds):
            return False
        return all(s.dtype is (idt if k == "i" else bool_ if k == "b" else n.dtype)
                   for s, k in zip(src, kinds, strict=True))

    order: list[UOp] = []
    ops: set[UOp] = set()  # the nodes of `order` that are ops of the sort (is_op, decided once per node)
    visited: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(u, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
            continue
        if n in visited:
            continue
        visited.add(n)
        stack.append((n, True))
        if is_op(n):
            ops.add(n)
            for s in reversed(n.src):
                if s not in visited:
                    stack.append((s, False))
    idx: dict[UOp, int] = {}
    nodes: list[tuple] = []
    leaves: dict[str, UOp] = {}
    stable = True
    bounds: list[tuple[int, int] | None] = []
    for n in order:
        iv: tuple[int, int] | None = None
        if n in ops:
            if idt is not dtypes.index and not _no_wrap(n):
                raise Untranslatable(f"{n.short()} may wrap around in {idt.name}")
            kids = tuple(idx[s] for s in n.src)
            node: tuple = (CTORS[n.op][0], *kids)
            lo, hi = n.min_max
            if isinstance(lo, (int, bool)) and isinstance(hi, (int, bool)) and I64_MIN < lo <= hi < I64_MAX:
                iv = (int(lo), int(hi))
        elif n.op is Ops.CONST and (n.dtype is idt or n.dtype is dtypes.bool):
            v = int(n.value)
            if not I64_MIN <= v <= I64_MAX:
                raise Untranslatable(f"constant {v} does not fit in i64")
            node = ("Num", v)
        elif n.dtype is idt or n.dtype is dtypes.bool:
            named = (n.op is Ops.PARAM and isinstance(getattr(n.arg, "slot", None), str)) or n.op in (Ops.RANGE,
                                                                                                      Ops.SPECIAL)
            key, ok = _leaf_key(n, "" if named else "o_")
            stable = stable and ok
            leaves[key] = n
            node = ("Var", key, *_bounds(n))
        else:
            raise Untranslatable(f"{n.short()} has dtype {n.dtype.name}, not {idt.name} or bool")
        idx[n] = len(nodes)
        nodes.append(node)
        bounds.append(iv)
    return Expr(u, idt, nodes, leaves, stable, bounds)


# ---------------------------------------------------------------------------------------------- terms back

Node = tuple  # ("Num", v) | ("Var", key) | (ctor, child index, ...): one root's extracted term, children first


def from_termdag(termdag: object, root_id: int) -> list[Node]:
    """The extracted term under `root_id` as a node list (children before parents, shared terms once)."""
    get = termdag.get  # type: ignore[attr-defined]  # egglog's TermDag: its bindings have no type stubs
    local: dict[int, int] = {}
    nodes: list[Node] = []
    stack: list[tuple[int, bool]] = [(root_id, False)]
    while stack:
        tid, done = stack.pop()
        if tid in local and not done:
            continue
        t = get(tid)
        if t.name == "Num" or t.name == "Var":
            local[tid] = len(nodes)
            nodes.append((t.name, get(t.args[0]).value.value))  # the literal: a key or a value
        elif done:
            local[tid] = len(nodes)
            nodes.append((t.name, *(local[a] for a in t.args)))
        else:
            stack.append((tid, True))
            stack.extend((a, False) for a in reversed(t.args) if a not in local)
    return nodes


def _operand_kinds(name: str, kind: str) -> list[str]:
    """The kinds ("i" int, "b" bool) of the operands of `name` in a place of kind `kind`; Untranslatable when `name`
    cannot stand there (both extractions check the e-graph's term against the op table KINDS this way)."""
    kinds, res = KINDS[name]
    if res != "=" and res != kind:
        raise Untranslatable(f"{name} where a {'bool' if kind == 'b' else 'int'} belongs")
    return [kind if k == "=" else k for k in kinds]


_KINDS_AT: dict[tuple[str, str], list[str] | str] = {}  # (name, kind) -> operand kinds, or why it cannot stand there


def _kinds_at(name: str, kind: str) -> list[str]:
    """`_operand_kinds`, remembered (build_term asks it once per node of every extracted term)."""
    hit = _KINDS_AT.get((name, kind))
    if hit is None:
        try:
            hit = _KINDS_AT[(name, kind)] = _operand_kinds(name, kind)
        except Untranslatable as e:
            hit = _KINDS_AT[(name, kind)] = str(e)
        except KeyError:  # not a constructor of the sort: not remembered
            raise
    if isinstance(hit, str):
        raise Untranslatable(hit)
    return hit


def build_term(termdag: object, root_id: int, expr: Expr, memo: dict[tuple, UOp]) -> UOp:
    """`build(from_termdag(termdag, root_id), expr)` without the node list in between: the UOp of the extracted
    term `root_id`. `memo` maps (term id, kind, int dtype) to its UOp and may be shared by the roots of one
    extraction (a leaf key names the same UOp in every expression); raises Untranslatable like `build`."""
    get = termdag.get  # type: ignore[attr-defined]  # egglog's TermDag: its bindings have no type stubs
    idt = expr.int_dtype
    leaves = expr.leaves
    root_kind = "b" if expr.uop.dtype is dtypes.bool else "i"
    stack: list[tuple[int, str, bool]] = [(root_id, root_kind, False)]
    pending: dict[tuple, tuple] = {}  # (term id, kind, dtype) -> (name, operand keys), between its two visits
    try:
        while stack:
            tid, kind, done = stack.pop()
            key = (tid, kind, idt)
            if done:
                name, keys = pending.pop(key)
                memo[key] = UOp(OP_OF[name], tuple(memo[k] for k in keys))
                continue
            if key in memo:
                continue
            t = get(tid)
            name = t.name
            if name == "Num":
                v = get(t.args[0]).value.value
                if kind == "b":
                    if v not in (0, 1):
                        raise Untranslatable(f"Num {v} where a bool belongs")
                    memo[key] = UOp.const(bool(v))
                else:
                    if not idt.min <= v <= idt.max:
                        raise Untranslatable(f"Num {v} does not fit {idt.name}")
                    memo[key] = UOp.const(v, idt)
                continue
            if name == "Var":
                k = get(t.args[0]).value.value
                leaf = leaves.get(k)
                if leaf is None or (leaf.dtype is dtypes.bool) != (kind == "b"):
                    raise Untranslatable(f"leaf {k!r} unknown here or of the wrong kind")
                memo[key] = leaf
                continue
            keys = tuple((a, c, idt) for a, c in zip(t.args, _kinds_at(name, kind), strict=True))
            pending[key] = (name, keys)
            stack.append((tid, kind, True))
            stack.extend((k[0], k[1], False) for k in keys if k not in memo)
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:  # a dtype clash, a malformed term
        raise Untranslatable(f"cannot rebuild the extracted term: {e}") from e
    out = memo[(root_id, root_kind, idt)]
    if idt is not dtypes.index and not all(_no_wrap(n) for n in out.toposort()):
        raise Untranslatable(f"the result may wrap around in {idt.name}")
    return out


def build(nodes: Sequence[Node], expr: Expr) -> UOp:
    """The UOp for an extracted node list; raises Untranslatable on anything that does not fit `expr`."""
    idt = expr.int_dtype
    root_kind = "b" if expr.uop.dtype is dtypes.bool else "i"
    memo: dict[tuple[int, str], UOp] = {}
    stack: list[tuple[int, str, bool]] = [(len(nodes) - 1, root_kind, False)]
    try:
        while stack:
            i, kind, done = stack.pop()
            if (i, kind) in memo:
                continue
            node = nodes[i]
            name = node[0]
            if name == "Num":
                v = node[1]
                if kind == "b":
                    if v not in (0, 1):
                        raise Untranslatable(f"Num {v} where a bool belongs")
                    memo[(i, kind)] = UOp.const(bool(v))
                else:
                    if not idt.min <= v <= idt.max:
                        raise Untranslatable(f"Num {v} does not fit {idt.name}")
                    memo[(i, kind)] = UOp.const(v, idt)
                continue
            if name == "Var":
                leaf = expr.leaves.get(node[1])
                if leaf is None or (leaf.dtype is dtypes.bool) != (kind == "b"):
                    raise Untranslatable(f"leaf {node[1]!r} unknown here or of the wrong kind")
                memo[(i, kind)] = leaf
                continue
            want = _operand_kinds(name, kind)
            if not done:
                stack.append((i, kind, True))
                stack.extend((c, k, False) for c, k in zip(node[1:], want, strict=True))
                continue
            memo[(i, kind)] = UOp(OP_OF[name], tuple(memo[(c, k)] for c, k in zip(node[1:], want, strict=True)))
    except (TypeError, ValueError, KeyError, IndexError) as e:  # a dtype clash or a malformed node list
        raise Untranslatable(f"cannot rebuild the extracted term: {e}") from e
    out = memo[(len(nodes) - 1, root_kind)]
    if idt is not dtypes.index and not all(_no_wrap(n) for n in out.toposort()):
        raise Untranslatable(f"the result may wrap around in {idt.name}")
    return out


# the saturation schedule: here rather than in rewrite.egraph so that a rule module can declare its schedule without
# importing the e-graph driver (rules.eqsat loads it only when it saturates)
@dataclass(frozen=True)
class Schedule:
    """Each iteration is `(run <rewrites>) (saturate (run analysis))`, so the analysis is saturated whenever an
    iteration ends; the budgets are checked between them. The nodes of a batch arrive with their intervals (the
    fast tier's analysis), so the first rewrites need no analysis run before them: that run, over every new node,
    cost as much as the rewrites' own when it found nothing to tighten, which it almost never did. It runs first
    only for a batch with an op node that came without an interval.

    With `fused`, an iteration is instead one saturation of the rewrites and the analysis together (one combined
    rule set): the same saturated e-graph (a rule fires once its match and guard hold, and intervals only tighten,
    so the order of firing does not change what saturation ends with) in one command, without the second
    iteration that only confirms that the rewrites find nothing more (~0.3 ms of ~2 for one small expression).
    Only for rule sets that saturate after a few rounds whatever the input (the budgets are checked after the
    command): the fast tier's remainder rules, which never make a node that a rule matches at its root. With
    `once` as well, the command is one pass of the rewrites (together with the analysis's first pass over the new
    nodes) and then the analysis saturated, with no second pass of the rewrites over what the first made: for
    rewrites whose caller reads the result back and runs again where a rewrite still matches (rules.eqsat._rounds)."""

    iterations: int = 8
    max_size: int = 20_000  # e-graph tuples (nodes plus interval rows), from (print-size)
    seconds: float = 2.0
    reset_nodes: int = 200_000  # nodes loaded since the last full reset (`(pop)` `(push)`) above which the next
    # batch gets one instead of the cheap `clear` (rewrite.egraph): it bounds egglog's union-find and subsumed rows
    analysis: str = "analysis"
    rewrites: tuple[str, ...] = ("rw",)
    fused: bool = False
    # a rule set of checks (tripwires) run once at the end of each iteration, where the program declares it: a rule
    # in the analysis instead would run in each of its passes (egglog 13.2 pays for every rule of a run whose
    # tables changed, matched or not)
    checks: str = "checks"
    once: bool = False  # with `fused`: one pass of the rewrites, then the analysis saturated
    # with `once`: a rule set run once between the rewrites' pass and the analysis's saturation, where the program
    # declares it (intervals of what the rewrites built, given in one step where the analysis takes several)
    seeds: str = "seeds"

    def schedule_text(self, analysis: str | None = None, checks: bool = False, seeds: bool = False) -> str:
        """One iteration, as the body of a `run-schedule` (`analysis`: the rule set to saturate instead of the
        whole analysis, see `Saturator._commands`; with `fused`, the combined rule set of the rewrites and it;
        `checks`, `seeds`: the program declares the rule set `self.checks`, run last, or `self.seeds`)."""
        tail = f" (run {self.checks})" if checks else ""
        if self.fused and self.once:  # the rewrites' pass is also the analysis's first
            a = analysis or self.analysis
            seed = f" (run {self.seeds})" if seeds else ""
            return f"(run {self.fused_name(a)}){seed} (saturate (run {a})){tail}"
        if self.fused:
            return f"(saturate (run {self.fused_name(analysis or self.analysis)})){tail}"
        rw = " ".join(f"(run {r})" for r in self.rewrites)
        return f"{rw} (saturate (run {analysis or self.analysis})){tail}"

    def fused_name(self, analysis: str) -> str:
        return f"{analysis}__fused"

    def fused_decl(self, analysis: str, groups: Sequence[str] = ()) -> str:
        """The declaration of the rule set a `fused` schedule runs: the rewrites, the analysis and `groups`."""
        sets = " ".join((*self.rewrites, self.analysis, *groups))
        return f"(unstable-combined-ruleset {self.fused_name(analysis)} {sets})"


__all__ = [
    "CTORS",
    "DEFAULT_COSTS",
    "I64_MAX",
    "I64_MIN",
    "INTERVAL_FUNCTIONS",
    "IV_INF",
    "IV_NEG",
    "IV_POS",
    "KINDS",
    "OP_OF",
    "POW2_TWINS",
    "Expr",
    "Node",
    "Schedule",
    "Untranslatable",
    "build",
    "build_term",
    "floor_div",
    "floor_mod",
    "from_termdag",
    "is_pow2",
    "iv_decode",
    "iv_exact",
    "iv_fields",
    "iv_merge",
    "iv_pack",
    "iv_packed",
    "iv_unpack",
    "pow2_rules",
    "sort_decls",
    "translate",
]
