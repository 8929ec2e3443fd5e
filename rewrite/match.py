"""The compiled matcher: a rule set becomes, per root op, one generated Python function.

`compile_matcher(rules, op)` emits straight-line code that tries each rule whose root can be `op`, in order:
cheap checks on the node's children first (op, constant value, dtype, arg, arity), commutative sources as
a two-way loop, repeated capture names as `is` checks, then the guard, then the right-hand side (templates
are compiled too). It returns `(replacement, rule_index)` for the first rule that produces a node other
than the input (a template's, of the input's shape), or None. The source is kept on the function
(`fn.source`) for debugging.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from rewrite import codecache, match_cache
from rewrite.dsl import _ANY, Pat, Rule, params_of
from rewrite.errors import EvalError, RuleError
from rewrite.ops import Ops

if TYPE_CHECKING:
    from rewrite.dsl import Matcher, RuleSet

_MAX_DEPTH = 18  # Python allows 20 statically nested blocks (for/try); commutative loops use them
_MAX_UNROLL = 3  # commutative nodes per pattern written out in both orders (2**3 copies of the rest at most)


class _Gen:
    def __init__(self) -> None:
        from rewrite.semantics import exec_alu  # imported here, not at the top: semantics is heavier than dsl
        from rewrite.uop import UOp

        self.globals: dict[str, object] = {"_U": UOp, "_alu": exec_alu, "_EvalError": EvalError,
                                           "_FOLD_ERRORS": (EvalError, ZeroDivisionError, OverflowError, ValueError)}
        self.ids: dict[int, str] = {}
        self.lines: list[str] = []
        self.nvar = 0

    def ref(self, obj: object) -> str:
        if (n := self.ids.get(id(obj))) is None:
            n = self.ids[id(obj)] = f"_k{len(self.ids)}"
            self.globals[n] = obj
        return n

    def fresh(self, prefix: str) -> str:
        self.nvar += 1
        return f"{prefix}{self.nvar}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    # -------------------------------------------------------------- left-hand side

    def rule(self, idx: int, rule: Rule, root_op: Ops) -> None:
        self.emit(1, f"# {rule.name}")
        # a commutative node's two orders are written out as two copies of the code that follows it (a `for`
        # over both orders costs three tuples per try); past a few such nodes the copies would multiply, so loop
        unroll = sum(1 for q in _walk_pat(rule.lhs) if q.commutative) <= _MAX_UNROLL
        self.match([(rule.lhs, "u", True)], {}, 1, 0, lambda depth, bound: self.body(idx, rule, bound, depth), unroll)

    def match(self, todo: list[tuple], bound: dict[str, str], depth: int, loops: int,
              done: Callable[[int, dict[str, str]], None], unroll: bool = False) -> None:
        """Emit checks for each task in `todo`, then call `done` at the innermost depth. A task is
        (pattern, variable, is_root) or ("swap", srcvar, a, b, same, exact): both orders of commutative sources,
        queued after the node's own checks so that siblings are checked before it."""
        if not todo:
            done(depth, bound)
            return
        task, rest = todo[0], todo[1:]
        if task[0] == "swap":
            _, s, a, b, same, exact = task
            if unroll:
                self.emit(depth, f"{a}, {b} = {s}" if exact else f"{a}, {b} = {s}[0], {s}[1]")
                self.match(rest, bound, depth, loops, done, unroll)
                if not same:  # both sources are one pattern: the swapped order binds the same, skip it
                    self.emit(depth, f"{b}, {a} = {s}" if exact else f"{b}, {a} = {s}[0], {s}[1]")
                    self.match(rest, bound, depth, loops, done, unroll)
                return
            if loops >= _MAX_DEPTH:
                raise RuleError("pattern nests too many commutative ops; mark some with ordered=True")
            self.emit(depth, f"for {a}, {b} in (({s}[0], {s}[1]), ({s}[1], {s}[0])):")
            self.match(rest, bound, depth + 1, loops + 1, done, unroll)
            return
        p, v, is_root = task
        conds: list[str] = []
        if p.ops is not None and not is_root:
            one = len(p.ops) == 1
            conds.append(f"{v}.op is {self.ref(next(iter(p.ops)))}" if one else f"{v}.op in {self.ref(p.ops)}")
        if p.kind == "const" and p.value is not _ANY:
            conds.append(f"{v}.arg[0] == {self.ref(p.value)}")
        if p.dtypes is not None:
            conds.append(f"{v}.dtype is {self.ref(next(iter(p.dtypes)))}" if len(p.dtypes) == 1 else
                         f"{v}.dtype in {self.ref(p.dtypes)}")
        if p.arg is not _ANY:
            conds.append(f"{v}.arg == {self.ref(p.arg)}")
        bound = dict(bound)
        if p.name is not None:
            if p.name in bound:
                conds.append(f"{v} is {bound[p.name]}")
            else:
                bound[p.name] = v
        s = ""
        if p.src is not None:
            if is_root:  # the root's sources and their count are read once per call, in the prologue
                s = "us"
                conds.append(f"nus {'>=' if p.rest else '=='} {len(p.src)}")
            else:
                s = self.fresh("s")
                conds.append(f"len({s} := {v}.src) {'>=' if p.rest else '=='} {len(p.src)}")
        if conds:
            self.emit(depth, f"if {' and '.join(conds)}:")
            depth += 1
        new: list[tuple] = []
        if p.src is not None:
            names = [self.fresh("n") for _ in p.src]
            if p.commutative:
                new.append(("swap", s, names[0], names[1], p.src[0] is p.src[1], not p.rest))
            else:
                for i, n in enumerate(names):
                    if _constrains(p.src[i]):
                        self.emit(depth, f"{n} = {s}[{i}]")
            new += [(c, n, False) for c, n in zip(p.src, names, strict=True) if _constrains(c)]
        # breadth first: a sibling's cheap check rejects before we descend or loop
        self.match(rest + new, bound, depth, loops, done, unroll)

    # -------------------------------------------------------------- guard and right-hand side

    def call_args(self, params: list[str], rule: Rule, bound: dict[str, str]) -> str:
        caps = rule.lhs.captures()
        out = []
        for p in params:
            if p == "ctx":
                out.append("ctx")
            elif caps[p].kind == "const":
                out.append(f"{bound[p]}.arg[0]")
            else:
                out.append(bound[p])
        return ", ".join(out)

    def body(self, idx: int, rule: Rule, bound: dict[str, str], depth: int) -> None:
        if rule.when is not None:
            self.emit(depth, f"if {self.ref(rule.when)}({self.call_args(rule.when_params, rule, bound)}):")
            depth += 1
        rhs = rule.rhs
        if isinstance(rhs, Pat):
            folds = [q for q in _walk_pat(rhs) if q.kind == "fold"]
            if folds:
                self.emit(depth, "try:")
                r = self.fresh("r")
                self.emit(depth + 1, f"{r} = {self.template(rhs, rule, bound, depth + 1, 'u')}")
                self.emit(depth, "except _FOLD_ERRORS:")
                self.emit(depth + 1, "pass")
                self.emit(depth, "else:")
                self.emit(depth + 1, f"if {r} is not u and {r}.shape == u.shape: return ({r}, {idx})")
                return
            # a template keeps the node's shape: a capture of a scalar where the node is a vector of lanes (x of
            # (x*4 + lanes) // 4) would leave a LOAD with a scalar address and a gate of lanes
            expr = self.template(rhs, rule, bound, depth, "u")
            if expr.isidentifier():
                self.emit(depth, f"if {expr} is not u and {expr}.shape == u.shape: return ({expr}, {idx})")
            else:
                r = self.fresh("r")
                self.emit(depth, f"{r} = {expr}")
                self.emit(depth, f"if {r} is not u and {r}.shape == u.shape: return ({r}, {idx})")
        elif callable(rhs):
            r = self.fresh("r")
            self.emit(depth, f"{r} = {self.ref(rhs)}({self.call_args(rule.rhs_params, rule, bound)})")
            self.emit(depth, f"if {r} is not None and {r} is not u: return ({r}, {idx})")
        else:
            self.emit(depth, f"return (u.const_like({self.ref(rhs)}), {idx})")

    def template(self, t: Pat, rule: Rule, bound: dict[str, str], depth: int, like: str) -> str:
        """Emit statements building template `t`; return the variable (or expression) holding it."""
        if t.name is not None:
            return bound[t.name]
        if t.kind == "const":
            return f"{like}.const_like({self.ref(t.value)})"
        if t.kind == "fold":
            val = self.fresh("f")
            if t.src is None:
                fn = cast("Callable[..., object]", t.value)  # a fold() of no sources holds its callable
                self.emit(depth, f"{val} = {self.ref(fn)}({self.call_args(_params_of(fn), rule, bound)})")
            else:
                named = (f"{bound[q.name]}.dtype" for q in _walk_pat(t.src[0]) if q.name is not None)
                dt = next(named, f"{like}.dtype")
                self.emit(depth, f"{val} = {self.fold_value(t.src[0], bound, dt)}")
            return f"{like}.const_like({val})"
        assert t.src is not None and t.ops is not None
        opv = next(iter(t.ops))
        # literals and folds take the dtype/shape of a built sibling (WHERE's condition excluded)
        value_srcs = t.src[1:] if opv is Ops.WHERE else t.src
        sibling = next((s for s in value_srcs if s.kind not in ("const", "fold") or s.name is not None), None)
        built: dict[int, str] = {}
        sib_var = like
        if sibling is not None:
            sib_var = built[id(sibling)] = self.template(sibling, rule, bound, depth, like)
        srcs = [built.get(id(s)) or self.template(s, rule, bound, depth, sib_var) for s in t.src]
        out = self.fresh("t")
        arg = "None" if t.arg is _ANY else self.ref(t.arg)
        self.emit(depth, f"{out} = _U({self.ref(opv)}, ({', '.join(srcs)},), {arg})")
        return out

    def fold_value(self, e: Pat, bound: dict[str, str], dt: str) -> str:
        if e.name is not None:
            return f"{bound[e.name]}.arg[0]"
        if e.kind == "const":
            return self.ref(e.value)
        assert e.src is not None and e.ops is not None
        args = ", ".join(self.fold_value(s, bound, dt) for s in e.src)
        return f"_alu({self.ref(next(iter(e.ops)))}, {dt}, {args})"


def _constrains(p: Pat) -> bool:
    return not (p.kind == "var" and p.name is None and p.dtypes is None)


def _walk_pat(p: Pat) -> list[Pat]:
    out, stack = [], [p]
    while stack:
        q = stack.pop()
        out.append(q)
        if q.src and q.kind != "fold":
            stack.extend(q.src)
    return out


def _params_of(fn: Callable[..., object]) -> list[str]:
    return params_of(fn)


_CODE: dict[str, types.CodeType] = {}  # generated matcher source -> the code of its `_match` function
_ENTRIES: dict[bytes, match_cache.Entry] = {}  # shape key -> (code, positions of its names, source)


def _function_code(src: str) -> types.CodeType:
    """The code of the `_match` function `src` defines (compiled once per process and text)."""
    if (code := _CODE.get(src)) is None:
        module = compile(src, "<rules>", "exec")
        code = _CODE[src] = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    return code


def _made(code: types.CodeType, names: dict[str, object], src: str, where: str) -> types.FunctionType:
    fn = types.FunctionType(code.replace(co_filename=where), names, "_match")
    fn.__dict__["source"] = src  # the generated matcher's source, for debugging
    return fn


def _chosen(rules: RuleSet, op: Ops) -> list[tuple[int, Rule]]:
    return rules.rules_for(op)


def matcher_key(rules: RuleSet, op: Ops) -> bytes | None:
    """The key under which the matcher of `rules` for root `op` is cached (rewrite.match_cache.shape_key)."""
    chosen = _chosen(rules, op)
    return (k[0] if (k := match_cache.shape_key(chosen, op)) is not None else None) if chosen else None


def compile_matcher(rules: RuleSet, op: Ops) -> Matcher | None:
    chosen = _chosen(rules, op)
    if not chosen:
        return None
    where = f"<rules {rules.name} on {op.name}>"  # the file name tracebacks show
    # a matcher of the same shape made before, in this process or (rewrite.codecache) an earlier one: its code with
    # this rule set's objects (rewrite.match_cache)
    shaped = match_cache.shape_key(chosen, op)
    if shaped is not None:
        key, objs = shaped
        entry = _ENTRIES.get(key) or match_cache.valid(codecache.load(key))
        if entry is not None and (bound := match_cache.bind(entry[1], objs)) is not None:
            _ENTRIES[key] = entry
            g = _Gen()
            g.globals.update(bound)
            return _made(entry[0], g.globals, entry[2], where)
    g = _Gen()
    g.emit(0, "def _match(u, ctx):")
    g.emit(1, "us = u.src")
    g.emit(1, "nus = len(us)")
    for i, r in chosen:
        g.rule(i, r, op)
    g.emit(1, "return None")
    src = "\n".join(g.lines)
    # one rule set is often part of others (symbolic inside symbolic+x, a device's rules inside its renderer's),
    # whose matchers for an op come out the same text: compiled once
    code = _function_code(src)
    if shaped is not None and (pos := match_cache.positions(g.globals, shaped[1])) is not None:
        _ENTRIES[shaped[0]] = entry = (code, pos, src)
        codecache.store(shaped[0], entry)
    return _made(code, g.globals, src, where)
