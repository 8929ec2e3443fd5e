"""The kernel split's shortcuts give what the long ways give (lower.schedule, lower.split_build, rules.rangeify):
localizing a kernel in one walk, a region's nodes without their order, the order a rule walk applies rules in,
the index math kept once made, and an EXPAND source's work walked once per kernel."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from lower.rangeify import build_kernel
from lower.schedule import ScheduleItem, _localize, _localize_substitute, _localize_walk, schedule
from lower.split_build import region, region_nodes, under_limits, walk_order
from rewrite import AxisType, Ops, Rule, RuleSet, UOp, dtypes, graph_rewrite, op
from rules import rangeify as rules_rangeify
from rules.rangeify import (
    ZERO,
    expand_source_index,
    flat_index,
    index_const,
    kept_index_math,
    recomputed_expensive,
    reshape_index,
    source_work,
    uses_reduce_range,
)
from tensor import Tensor
from tensor.optim import AdamW
from tests.tensor.util import layernorm


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _graphs() -> list[list[UOp]]:
    """A LayerNorm stack with a matmul and softmax (shared statistics, realize points), an AdamW step (fused
    stores: several outputs per kernel), and two roots sharing their input."""
    x, w = Tensor(_arr(6, 16)), Tensor(_arr(16, 16, seed=1))
    h = layernorm(x)
    y = layernorm(h + (h @ w).softmax(-1) @ w)
    p = Tensor(_arr(4, 8, seed=2), requires_grad=True)
    opt = AdamW([p], lr=0.01)
    (p * p).sum().backward()
    return [[y.uop], [t.uop for t in opt._assign_updates()], [x.sum(1).uop, (x * 2).uop]]


def _globalized(it: ScheduleItem) -> UOp:
    """The kernel of `it` over its global buffers again (what the split localizes)."""
    assert it.ast is not None
    return it.ast.substitute({UOp.buffer(i, b.dtype, b.shape, None): b for i, b in enumerate(it.bufs)})


def _same(a: ScheduleItem, b: ScheduleItem) -> bool:
    return (a.kind, a.bufs, a.ast, a.name, a.outs) == (b.kind, b.bufs, b.ast, b.name, b.outs)


@pytest.mark.parametrize("g", range(3))
def test_localize_in_one_walk_is_the_substitution(g: int) -> None:
    items, _ = schedule(_graphs()[g])
    kernels = [it for it in items if it.kind == "kernel"]
    assert kernels
    for it in kernels:
        raw = _globalized(it)
        walked = _localize_walk(raw)
        assert walked is not None
        assert _same(walked, _localize_substitute(raw)) and _same(walked, it)


def test_localize_of_several_stores_puts_their_outputs_first() -> None:
    a, b, g = (Tensor(_arr(5, 7, seed=s)).realize() for s in range(3))
    va, vb = a * 0.5 + g, b - g * g + a * 0.25  # vb reads a's old value: one kernel of two stores
    a.assign(va)
    b.assign(vb)
    items, _ = schedule([a.uop, b.uop])
    (it,) = [it for it in items if it.kind == "kernel"]
    assert it.outs == 2
    raw = _globalized(it)
    assert _same(_localize(raw), _localize_substitute(raw)) and _same(_localize(raw), it)


def test_localize_walk_declines_a_store_outside_the_sinks_containers() -> None:
    buf = UOp.buffer(7, Tensor([1.0]).uop.dtype, (4,))
    r = UOp.range(4, 1)
    st = buf.index(r).store(UOp.const(1.0))
    odd = UOp.sink(UOp(Ops.END, (st, r)), UOp(Ops.AFTER, (buf, st)))  # a STORE read through an AFTER too
    assert _localize_walk(odd) is not None  # the same STORE under the END: its target is known
    hidden = UOp.sink(UOp(Ops.AFTER, (buf, UOp(Ops.END, (st, r)))))
    assert _localize_walk(hidden) is None
    assert _same(_localize(hidden), _localize_substitute(hidden))


def test_region_nodes_are_the_regions_set() -> None:
    x = Tensor(_arr(6, 16)).realize()
    y = layernorm(x) * 2 + x.sum(1, keepdim=True)
    root = y.uop
    graph = root.toposort()
    for realized in ({x.uop: x.uop}, {u: u for u in graph if u.op in (Ops.BUFFER, Ops.REDUCE)}):
        order = region(root, realized)
        nodes, leaves = region_nodes(root, realized)
        assert nodes == set(order)
        assert sorted(map(id, leaves)) == sorted(id(u) for u in order if u in realized and u is not root)
        assert under_limits(nodes, leaves, 1 << 20, 1 << 20)
        assert not under_limits(nodes, leaves, len(leaves), 1 << 20)


def _record(ctx: list[UOp], n: UOp) -> None:
    ctx.append(n)


_every = RuleSet("every", [Rule("every", op[frozenset(Ops)](name="n"), _record)])


def test_walk_order_is_the_rule_walks_order() -> None:
    x = Tensor(_arr(6, 16)).realize()
    root = UOp.sink((layernorm(x) * 2).uop, (x @ Tensor(_arr(16, 3, seed=4))).uop)
    seen: list[UOp] = []
    graph_rewrite(root, _every, seen, walk=True)
    order = walk_order(root)
    assert list(order) == seen and list(order.values()) == list(range(len(seen)))


def test_index_math_kept_is_index_math_made() -> None:
    r1, r2 = UOp.range(6, 1), UOp.range(4, 2)
    assert index_const(5) is UOp.const(5) and ZERO is UOp.const(0)
    assert index_const(True) is UOp.const(True)  # a bool is not the index 1
    with kept_index_math():
        for _ in range(2):  # made, then kept
            assert flat_index((r1, r2), (6, 4)) is flat_index.__wrapped__((r1, r2), (6, 4))  # type: ignore[attr-defined]
            assert reshape_index((r1, r2), (6, 4), (24,)) == reshape_index.__wrapped__((r1, r2), (6, 4), (24,))  # type: ignore[attr-defined]
            assert expand_source_index((r1, r2), (1, 4), (6, 4)) == (ZERO, r2)
            assert uses_reduce_range((r1, r2), None) is False


def test_index_math_is_kept_only_during_a_split() -> None:
    """A gather's index holds loaded positions, so what the index math keeps would keep their BUFFERs (and the
    data under them) alive: it keeps nothing outside a split, and drops what it kept when the split ends."""
    x = Tensor(_arr(4)).realize()
    ref = weakref.ref(x.uop)
    at = (x.uop.index(UOp.range(4, 1)).load().cast(dtypes.index),)
    with kept_index_math():
        flat_index(at, (4,))
        assert any((at, (4,)) in memo for memo in rules_rangeify._kept.memos or [])
    assert rules_rangeify._kept.memos is None
    flat_index(at, (4,))  # outside a split: made, not kept
    del at, x
    gc.collect()
    assert ref() is None


def test_source_work_kept_per_kernel_gives_the_same_answer() -> None:
    x = Tensor(_arr(1, 8)).realize()
    soft = (x.exp() / x.exp().sum()).expand(16, 8)  # transcendental work broadcast over 16 rows
    at = (UOp.range(16, 1), UOp.range(8, 2, AxisType.REDUCE))  # read inside a reduction's loop
    buffers = {x.uop: x.uop}
    work: dict = {}
    for _ in range(2):
        assert recomputed_expensive(soft.uop, at, None, buffers, work) is True
        assert recomputed_expensive(soft.uop, at, None, buffers) is True
    assert work == {soft.uop.src[0]: source_work(soft.uop.src[0], buffers)}
    assert source_work(soft.uop.src[0], buffers)[0] is True
    cheap = (x + x.sum()).expand(16, 8)  # a load and a reduction: the REDUCE is met first
    assert source_work(cheap.uop.src[0], buffers)[0] is False


def test_builds_are_unchanged_by_kept_index_math() -> None:
    """Building the same kernel twice (the second time from kept index math) gives the same AST."""
    x = Tensor(_arr(6, 16)).realize()
    y = layernorm(x)
    out = UOp.buffer(99, y.uop.dtype, (96,))
    first = build_kernel(y.uop, out, {x.uop: UOp.buffer(98, x.uop.dtype, (96,))})
    again = build_kernel(y.uop, out, {x.uop: UOp.buffer(98, x.uop.dtype, (96,))})
    assert first is again
