"""Callify: resolve FUNCTION calls so the scheduler sees one graph of BUFFER leaves.

`GETTUPLE(FUNCTION(TUPLE(body...), args...), i)` becomes `body[i]` with each PARAM k replaced by args[k].
Children are rewritten first, so a FUNCTION nested in a body is inlined before its parent's PARAMs are
substituted, and one function's PARAMs are never mistaken for another's. (An opaque CALL stays a CALL.)
"""

from __future__ import annotations

from typing import cast

from rewrite import Ops, ParamArg, Rule, RuleSet, UOp, graph_rewrite, op


def inline_call(g: UOp, f: UOp) -> UOp:
    body, args = f.src[0], f.src[1:]
    params = {p: args[p.arg.slot] for p in body.toposort()
              if p.op is Ops.PARAM and isinstance(p.arg, ParamArg) and isinstance(p.arg.slot, int)}
    return body.src[cast(int, g.arg)].substitute(params)  # a GETITEM's arg: the output's index


callify_rules = RuleSet("callify", [
    Rule("inline-function-call", op.GETTUPLE(op.FUNCTION(name="f"), name="g"), inline_call),
])


def callify(roots: list[UOp]) -> list[UOp]:
    if not any(u.op is Ops.FUNCTION for r in roots for u in r.toposort()):
        return roots
    return [graph_rewrite(r, callify_rules, name="callify") for r in roots]
