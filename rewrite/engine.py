"""graph_rewrite: apply an ordered rule set to a graph.

Default: children first, and every result is rewritten again until no rule fires (a fixed point per node);
one memo per call, so a shared subgraph is rewritten once. `bottom_up=True` tries the rules on a node
before its children (tinygrad's name for this order) and still reaches a fixed point. `walk=True` is a
single pass: each node is rebuilt from its rewritten children and tried once; results are not revisited.

Walks use an explicit stack (a 1M-node chain is fine). A node met again while its own rewrite is in
progress is a cycle; more than `max_steps` firings is a runaway rule set. Both raise RewriteLoopError,
naming the rules that kept firing. Python's cyclic garbage collector is paused during the outermost call
(rewriting makes no reference cycles, and the collector's passes over a large live graph cost a third of
the time); its state is restored on return.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Sequence
from typing import cast

from rewrite.dsl import Matcher, RuleSet
from rewrite.errors import RewriteLoopError
from rewrite.trace import current
from rewrite.uop import UOp

DEFAULT_MAX_STEPS = 2_000_000
_MISSING = cast("Matcher", object())  # not in a rule set's matcher cache yet
_BUSY = cast(UOp, object())  # in fixed_point's memo: this node's rewrite is in progress


def _ruleset(rules: RuleSet | Sequence[RuleSet]) -> RuleSet:
    if isinstance(rules, RuleSet):
        return rules
    rs = list(rules)
    out = rs[0]
    for r in rs[1:]:
        out = out + r
    return out


class FixedPoints:
    """The fixed points one rule set reached, kept across graph_rewrite calls (`fixed_points=`): node -> the node
    it rewrites to. Only for a rule set whose rules read nothing but the node (no context, no knobs), so that a
    node's fixed point is the same in every call; then a kernel's index math met again (the next kernel, the
    next stage) is not matched again. Keyed by the node, that is by its structure (UOps are interned), and
    holding the nodes alive. Bounded: cleared when a call leaves it over `limit` entries. One thread at a time
    uses it (a call that finds it busy runs with a memo of its own); TRACE runs without it, so that every firing
    is recorded, and so does the bottom-up order (its fixed points may differ)."""

    __slots__ = ("limit", "lock", "table")

    def __init__(self, limit: int = 100_000) -> None:
        self.limit = limit
        self.table: dict[UOp, UOp] = {}
        self.lock = threading.Lock()

    def clear(self) -> None:
        self.table.clear()

    def __len__(self) -> int:
        return len(self.table)


def graph_rewrite(graph: UOp, rules: RuleSet | Sequence[RuleSet], ctx: object = None, *, name: str | None = None,
                  bottom_up: bool = False, walk: bool = False, max_steps: int = DEFAULT_MAX_STEPS,
                  fixed_points: FixedPoints | None = None) -> UOp:
    """Rewrite `graph` with `rules` (see module docstring); `name` labels the stage in traces and errors;
    `fixed_points` keeps a context-free rule set's results across calls (FixedPoints)."""
    rs = _ruleset(rules)
    run = _Run(rs, ctx, name or rs.name, max_steps)
    if fixed_points is not None and not walk and not bottom_up and run.log is None and \
            fixed_points.lock.acquire(blocking=False):
        try:
            return _kept(run, graph, fixed_points)
        finally:
            fixed_points.lock.release()
    return _rewrite(run, graph, walk, bottom_up)


def _kept(run: _Run, graph: UOp, fixed_points: FixedPoints) -> UOp:
    """A fixed-point rewrite whose memo is `fixed_points`' table: entries of earlier calls are final, and this
    call's become so; a call that fails leaves entries in progress, so the table is emptied."""
    try:
        out = _rewrite(run, graph, False, False, fixed_points.table)
    except BaseException:
        fixed_points.clear()
        raise
    if len(fixed_points.table) > fixed_points.limit:
        fixed_points.clear()
    return out


class collector_paused:  # lower case: used as a function, `with collector_paused():`
    """Python's cyclic garbage collector off for the block (as it was before, after it). Rewriting allocates
    several GC-tracked objects per node (UOps, source tuples, weakrefs, intern keys) and makes no reference
    cycles, yet the collector would traverse the whole live graph again and again (a third of the time on a
    100k-node graph); cycles made in the block are collected after it. A class rather than a generator context
    manager: every graph_rewrite call enters one (~0.7 us against ~2.8 us)."""

    __slots__ = ("pause",)

    def __enter__(self) -> None:
        self.pause = gc.isenabled()
        if self.pause:
            gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.pause:
            gc.enable()


def _rewrite(run: _Run, graph: UOp, walk: bool, bottom_up: bool, memo: dict[UOp, UOp] | None = None) -> UOp:
    with collector_paused():  # the outermost call's
        return run.walk(graph) if walk else run.fixed_point(graph, bottom_up, memo)


class _Run:
    __slots__ = ("ctx", "fired", "log", "max_steps", "rs", "stage", "steps", "why")

    def __init__(self, rs: RuleSet, ctx: object, stage: str, max_steps: int) -> None:
        self.rs, self.ctx, self.stage, self.max_steps = rs, ctx, stage, max_steps
        self.steps = 0
        self.fired = [0] * len(rs.rules)
        self.why: dict[UOp, int] = {}
        self.log = current()

    def try_rules(self, n: UOp) -> UOp | None:
        m = self.rs._matchers.get(n.op, _MISSING)
        if m is _MISSING:
            m = self.rs.matcher(n.op)
        if m is None:
            return None
        res = m(n, self.ctx)
        return None if res is None else self.fired_on(n, res)

    def fired_on(self, n: UOp, res: tuple[UOp, int]) -> UOp:
        """Book a firing (counts, step budget, trace) and return its result."""
        r, k = res
        self.fired[k] += 1
        self.why[n] = k
        self.steps += 1
        if self.steps > self.max_steps:
            raise self.loop_error(f"more than {self.max_steps} rule firings")
        if self.log is not None:
            rule = self.rs.rules[k]
            self.log.record(self.stage, rule.name, n, r, rule.location)
        return r

    def loop_error(self, what: str, cycle: Sequence[UOp] = ()) -> RewriteLoopError:
        names = self.rs.rules
        top = sorted(((c, names[k].name) for k, c in enumerate(self.fired) if c), reverse=True)[:8]
        on_cycle = sorted({names[self.why[n]].name for n in cycle if n in self.why})
        msg = f"graph_rewrite [{self.stage}]: {what}"
        if on_cycle:
            msg += f"; rules on the cycle: {', '.join(on_cycle)}"
        if top:
            msg += "; most fired: " + ", ".join(f"{n} ({c})" for c, n in top)
        return RewriteLoopError(msg + ". A rule set must make terms smaller or more canonical; check these rules "
                                "for a pair that undo each other or a rule whose result matches itself.")

    def fixed_point(self, root: UOp, bottom_up: bool, memo: dict[UOp, UOp] | None = None) -> UOp:
        # replace[n] is n's final result, or _BUSY while n's rewrite is in progress (one dict does the memo and
        # the cycle check: a node met again while _BUSY is a rewrite that led back to itself); `memo`, when
        # given, is that dict, holding earlier calls' final results
        replace: dict[UOp, UOp] = {} if memo is None else memo
        stack: list = [root]
        push, pop, get = stack.append, stack.pop, replace.get
        try_rules, fired_on, ctx = self.try_rules, self.fired_on, self.ctx
        # the hot loop: the matcher lookup and the rebuild of the sources are written out (no method call, no
        # list comprehension frame for the usual 1-3 sources)
        matchers, compile_matcher = self.rs._matchers, self.rs.matcher
        while stack:
            e = pop()
            if e.__class__ is UOp:  # first visit
                if (d := get(e)) is not None:
                    if d is _BUSY:
                        raise self.cycle_error(replace)
                    continue
                replace[e] = _BUSY
                if bottom_up and (r := try_rules(e)) is not None:
                    push((e, r))
                    push(r)
                    continue
                # the sources still to rewrite go on the stack above the node's second visit; a node whose sources
                # are all done (a leaf, or sources met before) has its second visit now, without the stack (what
                # pushing it alone and popping it next did)
                waits = False
                for s in e.src:
                    if (d := get(s)) is None:
                        if not waits:
                            push((e, None))
                            waits = True
                        push(s)
                    elif d is _BUSY:
                        raise self.cycle_error(replace)
                if waits:
                    continue
                n = e
            else:
                n, r = e
                if r is not None:  # the replacement is done: link it
                    replace[n] = replace[r]
                    continue
            src = n.src
            ns = len(src)
            new: tuple[UOp, ...]
            if ns == 2:
                new = (replace[src[0]], replace[src[1]])
            elif ns == 1:
                new = (replace[src[0]],)
            elif ns == 0:
                new = src
            elif ns == 3:
                new = (replace[src[0]], replace[src[1]], replace[src[2]])
            else:
                new = tuple([replace[s] for s in src])
            if new == src:
                if bottom_up:
                    r = None
                else:
                    m = matchers.get(n.op, _MISSING)
                    if m is _MISSING:
                        m = compile_matcher(n.op)
                    r = None if m is None or (res := m(n, ctx)) is None else fired_on(n, res)
                if r is None:
                    replace[n] = n
                    continue
            else:
                r = UOp(n.op, new, n.arg, n.tag)
            if (done := get(r)) is None:
                push((n, r))
                push(r)
            elif done is _BUSY:
                raise self.cycle_error(replace)
            else:
                replace[n] = done
        return replace[root]

    def cycle_error(self, replace: dict[UOp, UOp]) -> RewriteLoopError:
        busy = [n for n, d in replace.items() if d is _BUSY]
        return self.loop_error("a rewrite led back to the node being rewritten", busy)

    def walk(self, root: UOp) -> UOp:
        replace: dict[UOp, UOp] = {}
        stack: list = [root]
        push, pop = stack.append, stack.pop
        while stack:
            e = pop()
            if e.__class__ is UOp:
                if e in replace:
                    continue
                push((e, None))
                for s in e.src:
                    if s not in replace:
                        push(s)
                continue
            n = e[0]
            if n in replace:
                continue
            new = tuple([replace[s] for s in n.src])
            base = n if new == n.src else UOp(n.op, new, n.arg, n.tag)
            r = self.try_rules(base)
            replace[n] = base if r is None else r
        return replace[root]


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Replace each key of `mapping` by its value wherever it occurs (not inside the values), one walk."""
    replace: dict[UOp, UOp] = dict(mapping)
    stack: list = [root]
    push, pop = stack.append, stack.pop
    while stack:
        e = pop()
        if e.__class__ is UOp:
            if e in replace:
                continue
            waits = False  # as in fixed_point: a node whose sources are all done is rebuilt now
            for s in e.src:
                if s not in replace:
                    if not waits:
                        push((e, None))
                        waits = True
                    push(s)
            if waits:
                continue
            n = e
        else:
            n = e[0]
            if n in replace:
                continue
        new = tuple([replace[s] for s in n.src])
        replace[n] = n if new == n.src else UOp(n.op, new, n.arg, n.tag)
    return replace[root]
