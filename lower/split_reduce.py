"""Split a large reduction with a small output into two kernels, so it can use every core.

`x.sum(axis)` over n >= 2^15 elements per output (and at most 64 outputs) becomes
`x.reshape(..., P, n/P, ...).sum(inner).contiguous().sum(P-axis)`: the first kernel produces P partial
results per output in a loop that the optimizer splits across threads, the second combines them. The
order of additions changes (partials first), so floating-point sums may differ in the last bits from a
single loop; NOOPT=1 turns the split off.
"""

from __future__ import annotations

from rewrite import Ops, Rule, RuleSet, UOp, graph_rewrite, op

MIN_SPLIT = 1 << 15
MAX_OUTPUTS = 64
_PARTS = (256, 128, 64, 32, 16)


def split_large_reduce(red: UOp) -> UOp | None:
    rop, axes = red.reduce_op, red.reduce_axes
    x = red.src[0]
    if len(red.src) != 1 or len(axes) != 1 or not all(isinstance(d, int) for d in x.shape):
        return None
    a = axes[0]
    n = x.shape[a]
    outs = 1
    for d in red.shape:
        outs *= d
    if n < MIN_SPLIT or outs > MAX_OUTPUTS:
        return None
    p = next((p for p in _PARTS if n % p == 0 and n // p >= 256), None)
    if p is None:
        return None
    split = x.reshape((*x.shape[:a], p, n // p, *x.shape[a + 1 :]))
    partial = split.reduce(rop, (a + 1,)).contiguous()
    return partial.reduce(rop, (a,)).reshape(red.shape)


split_reduce_rules = RuleSet("split-reduce", [
    Rule("split-large-reduce", op.REDUCE(name="red"), split_large_reduce),
])


def split_reductions(roots: list[UOp]) -> list[UOp]:
    if not any(u.op is Ops.REDUCE for u in UOp.toposort_of(roots)):
        return roots
    # bottom_up: the rule sees each original REDUCE before its rewritten parts, which it must not split again
    # one walk over all roots (they share most of their graph)
    return list(graph_rewrite(UOp.sink(*roots), split_reduce_rules, name="split-reduce", walk=True).src)
