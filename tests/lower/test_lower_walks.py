"""The kernel stages' shortcuts give what the walks they replace gave: open ranges from one walk of the kernel
(lower.linearize), the copies of a replicated range from one walk of its body (lower.expand), and a memoized
apply_opt (lower.opt_apply)."""

from __future__ import annotations

import pytest

from devices.base import cpu_target
from lower import schedule
from lower.buffers import new_buffer
from lower.expand import _copies
from lower.linearize import _AccCtx, open_ranges, reduce_to_acc
from lower.opt_apply import Opt, OptOps, _apply_opt, apply_opt, axes
from lower.optimize import hand_coded
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes, graph_rewrite
from rewrite.errors import KernelOptError


def _ast(out: UOp) -> UOp:
    items, _ = schedule([out])
    (it,) = [i for i in items if i.kind == "kernel"]
    return it.ast


def _matmul(n: int = 16, k: int = 32, m: int = 64) -> UOp:
    a, b = new_buffer(dtypes.float32, (n, k), "cpu"), new_buffer(dtypes.float32, (k, m), "cpu")
    return _ast((a.reshape((n, k, 1)).expand((n, k, m)) * b.reshape((1, k, m)).expand((n, k, m))).sum((1,)))


def _softmax() -> UOp:
    a = new_buffer(dtypes.float32, (8, 64), "cpu")
    e = (a - a.max((1,)).reshape((8, 1)).expand((8, 64))).exp2()
    return _ast(e / e.sum((1,)).reshape((8, 1)).expand((8, 64)))


@pytest.mark.parametrize("make", [_matmul, _softmax], ids=["matmul", "softmax"])
def test_open_ranges_of_one_walk_match_a_walk_per_node(make) -> None:
    """_AccCtx.open_ranges (entries kept per node) gives open_ranges (a toposort per call) for every node of a
    kernel whose reductions became accumulators (ENDs closing ranges inside), asked in either order."""
    target = cpu_target()
    expanded = lower_kernel(make(), target, upto="stream-stores")
    g = graph_rewrite(expanded, reduce_to_acc, _AccCtx())
    topo = g.toposort()
    assert any(u.op is Ops.END for u in topo) and sum(u.op is Ops.RANGE for u in topo) >= 2
    for order in (topo, topo[::-1]):
        ctx = _AccCtx()
        for u in order:
            assert ctx.open_ranges(u) == open_ranges(u), u.short()


def test_copies_of_one_walk_match_a_substitute_per_copy() -> None:
    """lower.expand._copies gives body.substitute({r: c}) for each c, shared nodes kept shared, and the body
    itself n times where it does not read r."""
    r = UOp.range(4, 1, AxisType.UPCAST)
    q = UOp.range(8, 2)
    buf = new_buffer(dtypes.float32, (64,), "cpu")
    shared = (q * 2 + 1) % 5
    body = buf.index(r * 16 + q * 2 + shared).load() * buf.index(shared).load()
    got = _copies(body, r, 4)
    assert got == [body.substitute({r: UOp.const(c)}) for c in range(4)]
    assert len(set(got)) == 4
    other = buf.index(shared).load()
    assert _copies(other, r, 3) == [other] * 3


def test_apply_opt_is_memoized_and_matches_the_plain_apply() -> None:
    """apply_opt gives what the opt does (the same node again for the same AST and opt); an opt whose arg cannot
    be hashed is applied without the memo, and an illegal opt still raises each time."""
    ast = _matmul()
    target = cpu_target()
    cur = ast
    for o in hand_coded(ast, target, threads=1):
        nxt = apply_opt(cur, o)
        assert nxt is _apply_opt(cur, o) and apply_opt(cur, o) is nxt
        cur = nxt
    assert len(axes(cur)) > len(axes(ast))
    up = Opt(OptOps.SPLIT, 0, (2, AxisType.UPCAST, False))
    with pytest.raises(KernelOptError, match="positive int"):  # a list arg: no memo, the opt's own check
        apply_opt(ast, Opt(OptOps.PADTO, 0, [4]))
    bad = Opt(OptOps.SPLIT, 0, (3, AxisType.UPCAST, False))  # 3 divides no axis of 16
    for _ in range(2):
        with pytest.raises(KernelOptError):
            apply_opt(ast, bad)
    assert apply_opt(ast, up) is apply_opt(ast, up)


def _index_exprs_by_a_whole_walk(ast: UOp) -> list[UOp]:
    """What lower.pipeline._index_exprs gave when it marked every node of the kernel."""
    from lower.pipeline import _SATURATE_OPS

    out: dict[UOp, None] = {}
    holds: dict[UOp, bool] = {}
    for u in ast.toposort():
        holds[u] = u.op in _SATURATE_OPS or any(holds[s] for s in u.src)
        cands = (u.src[1],) if u.op is Ops.INDEX and len(u.src) == 2 else u.src[2:] if u.op is Ops.LOAD else \
            u.src[:1] if u.op is Ops.WHERE else ()
        for e in cands:
            if holds[e] and e.shape == () and (e.dtype is dtypes.index or e.dtype is dtypes.bool):
                out[e] = None
    return list(out)


def _padded_conv() -> UOp:
    x = new_buffer(dtypes.float32, (1, 2, 9, 9), "cpu")
    w = new_buffer(dtypes.float32, (3, 2, 3, 3), "cpu")
    from tensor import Tensor

    return _ast(Tensor(x).conv2d(Tensor(w), padding=1).uop)


@pytest.mark.parametrize("make, some", [(_matmul, True), (_softmax, False), (_padded_conv, True)],
                         ids=["matmul", "softmax", "conv"])
def test_index_exprs_walk_only_the_index_math(make, some: bool) -> None:
    """_index_exprs, which marks only the nodes below scalar index and bool candidates, gives the expressions (in
    the same order) that marking every node gave, after each kernel stage."""
    from lower.pipeline import _index_exprs

    ast = make()
    seen = 0
    # the host's target, and AVX2's, whose 8-lane tiles leave the matmul index math to compare or divide (on an
    # AVX-512 host its 16-lane tiles divide the shape exactly), so the check is never vacuous
    for target in dict.fromkeys((cpu_target(), cpu_target("x86-64-v3"))):
        for stage in ("rangeify", "symbolic", "optimize", "expand", "symbolic-opt"):
            g = ast if stage == "rangeify" else lower_kernel(ast, target, upto=stage)
            assert _index_exprs(g) == _index_exprs_by_a_whole_walk(g)
            seen += len(_index_exprs(g)) if target.isa == "x86-64-v3" else 0
    assert (seen > 0) == some  # softmax: plain sums; the others compare or divide
