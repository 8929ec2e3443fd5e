"""Generated matchers found again without generating them: the key of a matcher's code is the *shape* of the rules
it is made of, read off the rule objects, and the objects the code names are bound from the live rules.

rewrite.match writes a matcher per (rule set, root op) by walking the chosen rules' patterns, and names every
object it needs (an op, a dtype set, a constant, a guard) as a global `_kN`. The text it writes depends only on
the patterns' structure: kinds, ops and dtypes, whether a value or arg is constrained, capture names, arities,
`rest`/`ordered`/commutativity, which pattern nodes are one object, the guards' and callables' parameter names,
the rules' names and positions; never on the objects' values. So:

  shape    per rule, once: a token string of that structure and the tuple of every object the generator could
           name (six slots per pattern node: ops, its one op, value, dtypes, its one dtype, arg; and the guard and
           right-hand side), in one fixed walk (`rule_shape`, kept on the Rule)
  key      sha256 of the generator's own source (this module, rewrite.match and rewrite.dsl), the root op, and
           each chosen rule's index and token (`shape_key`)
  entry    (the `_match` function's code, for each `_kN` every position of the walk where its object sat, the
           source text): rewrite.codecache keeps it on disk, a dict in memory

A hit binds `_kN` to the live object at its first position, after checking that the live objects at all of its
positions are still one object (`bind`; two rules that shared one constant then but not now miss, since the
code would name both with one global). The generator is not run, nor Python's compiler. A miss generates the
matcher as before and stores the entry; a matcher that names an object outside the walk is not stored
(`positions` gives None), so a walk that missed a slot costs a miss, never a wrong matcher.
"""

from __future__ import annotations

import hashlib
import os
import types
from typing import TYPE_CHECKING, cast

from rewrite.dsl import _ANY, Pat, Rule, params_of
from rewrite.ops import GroupOp

if TYPE_CHECKING:
    from rewrite.ops import Ops

Entry = tuple[types.CodeType, tuple[tuple[int, ...], ...], str]
SLOTS = 6  # objects per pattern node in the walk


def _version() -> bytes | None:
    """The generator's identity: the source of the modules whose code decides what a matcher's text is."""
    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(b"uopc-match-shape-1")
    try:
        for name in ("match.py", "match_cache.py", "dsl.py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    except OSError:  # installed without sources: no shape keys (matchers are generated, as before)
        return None
    return h.digest()


_VERSION: list[bytes | None] = []


_NAMES: dict[frozenset, str] = {}
_COMMUTATIVE = GroupOp.Commutative


def _names(s: frozenset | None) -> str:
    if s is None:
        return "-"
    if (n := _NAMES.get(s)) is None:
        n = _NAMES[s] = ",".join(sorted(x.name for x in s))
    return n


def _one(s: frozenset | None) -> object:
    return next(iter(s)) if s is not None and len(s) == 1 else None


def _node(q: Pat) -> tuple[str, tuple[object, ...]]:
    """A pattern node's token (all of it but its number in the walk) and its six objects: both read off the node
    alone, so kept on it (`Pat.shape`); the fields read straight off the slots (Pat.commutative inlined)."""
    kind, ops, dts, src, value = q.kind, q.ops, q.dtypes, q.src, q.value
    v = "_" if value is _ANY else "v"
    if kind == "fold" and src is None and callable(value):
        v = "f" + ",".join(params_of(value))
    o = "-" if ops is None else _NAMES.get(ops) or _names(ops)
    d = "-" if dts is None else _NAMES.get(dts) or _names(dts)
    ordered = q.ordered
    comm = kind == "op" and not ordered and src is not None and len(src) == 2 and ops is not None and \
        ops <= _COMMUTATIVE
    tok = (f"{kind}/{o}/{d}/{v}/{'_' if q.arg is _ANY else 'a'}/{q.name or ''}/"
           f"{'1' if q.rest else '0'}{'1' if ordered else '0'}{'1' if comm else '0'}/"
           f"{'-' if src is None else len(src)}")
    objs = (ops, next(iter(ops)) if ops is not None and len(ops) == 1 else None, value, dts,
            next(iter(dts)) if dts is not None and len(dts) == 1 else None, q.arg)
    sh = q.shape = (tok, objs)
    return sh


def _walk(p: Pat, toks: list[str], objs: list[object], seen: dict[int, int]) -> None:
    # one token and six objects per node, in a fixed order (see the module docstring): the node's number in this
    # walk (a pattern node used twice, x + x, is one node: its first number) and its own part (_node, made once
    # per node: this runs over every pattern node of every rule a process matches with, at its first matcher)
    stack = [p]
    pop, push, tok, add = stack.pop, stack.extend, toks.append, objs.extend
    while stack:
        q = pop()
        k = seen.setdefault(id(q), len(seen))
        own, six = q.shape or _node(q)
        tok(f"{k}:{own}")
        add(six)
        if src := q.src:
            push(reversed(src))


def rule_shape(r: Rule) -> tuple[bytes, tuple[object, ...]]:
    """The rule's structure token and the objects of its walk (computed once per rule)."""
    if (sh := r.shape) is not None:
        return sh
    toks = [r.name, "-" if r.when is None else "w" + ",".join(r.when_params)]
    objs: list[object] = [r.when, r.rhs]
    seen: dict[int, int] = {}
    _walk(r.lhs, toks, objs, seen)
    if isinstance(r.rhs, Pat):
        toks.append("=")
        _walk(r.rhs, toks, objs, seen)
    elif callable(r.rhs):
        toks.append("=c" + ",".join(r.rhs_params))
    else:
        toks.append(f"=k{type(r.rhs).__name__}")
    sh = r.shape = ("|".join(toks).encode(), tuple(objs))
    return sh


def shape_key(chosen: list[tuple[int, Rule]], op: Ops) -> tuple[bytes, list[object]] | None:
    """The key of the matcher for root `op` made of `chosen` (index in the rule set, rule), and the objects of their
    walks in order; None when the generator's version cannot be read."""
    if not _VERSION:
        _VERSION.append(_version())
    if (version := _VERSION[0]) is None:
        return None
    h = hashlib.sha256(version)
    h.update(op.name.encode())
    objs: list[object] = []
    for i, r in chosen:
        tok, o = r.shape or rule_shape(r)
        h.update(b"\n%d:" % i)
        h.update(tok)
        objs += o
    return h.digest(), objs


def positions(named: dict[str, object], objs: list[object]) -> tuple[tuple[int, ...], ...] | None:
    """For each of the generator's globals `_k0, _k1, ...` (in `named`), every position in `objs` holding its object;
    None if one of them is not in the walk."""
    where: dict[int, list[int]] = {}
    for i, o in enumerate(objs):
        where.setdefault(id(o), []).append(i)
    out = []
    for n in range(len([k for k in named if k.startswith("_k")])):
        at = where.get(id(named[f"_k{n}"]))
        if not at:
            return None
        out.append(tuple(at))
    return tuple(out)


def bind(pos: tuple[tuple[int, ...], ...], objs: list[object]) -> dict[str, object] | None:
    """The globals `_kN` of a stored matcher from the live objects, or None if an object the code names once is now
    several objects (or the entry does not fit the walk)."""
    out: dict[str, object] = {}
    try:
        for n, at in enumerate(pos):
            o = objs[at[0]]
            for p in at[1:]:
                if objs[p] is not o:
                    return None
            out[f"_k{n}"] = o
    except (IndexError, TypeError):
        return None
    return out


def valid(entry: object) -> Entry | None:
    """`entry` as read from disk, if it has the form of one."""
    if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[0], types.CodeType)
            and isinstance(entry[1], tuple) and isinstance(entry[2], str)):
        return None
    if not all(isinstance(at, tuple) and at and all(isinstance(p, int) for p in at) for at in entry[1]):
        return None
    return cast(Entry, entry)  # checked field by field just above
