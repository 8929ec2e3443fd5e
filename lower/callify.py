"""Callify: resolve FUNCTION calls so the scheduler sees one graph of BUFFER leaves.

`GETTUPLE(FUNCTION(TUPLE(body...), args...), i)` becomes `body[i]` with each PARAM k replaced by args[k].
Children are rewritten first, so a FUNCTION nested in a body is inlined before its parent's PARAMs are
substituted, and one function's PARAMs are never mistaken for another's. (An opaque CALL stays a CALL.)
"""

from __future__ import annotations

from typing import cast

from rewrite import Ops, ParamArg, Rule, RuleSet, UOp, graph_rewrite, op


def inline_call(g: UOp, f: UOp, ctx: dict[UOp, tuple[UOp, ...]] | None = None) -> UOp:
    """`ctx` (when given) keeps each call's inlined outputs: a call's outputs are usually all read, and one
    substitution over the whole body shares the walk its outputs have in common."""
    if ctx is not None and (outs := ctx.get(f)) is not None:
        return outs[cast(int, g.arg)]
    body, args = f.src[0], f.src[1:]
    params = {p: args[p.arg.slot] for p in body.toposort()
              if p.op is Ops.PARAM and isinstance(p.arg, ParamArg) and isinstance(p.arg.slot, int)}
    if ctx is None:
        return body.src[cast(int, g.arg)].substitute(params)  # a GETITEM's arg: the output's index
    outs = ctx[f] = body.substitute(params).src
    return outs[cast(int, g.arg)]


callify_rules = RuleSet("callify", [
    Rule("inline-function-call", op.GETTUPLE(op.FUNCTION(name="f"), name="g"), inline_call),
])


def callify(roots: list[UOp]) -> list[UOp]:
    # one walk and one rewrite over all roots: a training step's roots share most of their graph
    if not any(u.op is Ops.FUNCTION for u in UOp.toposort_of(roots)):
        return roots
    return list(graph_rewrite(UOp.sink(*roots), callify_rules, {}, name="callify").src)
