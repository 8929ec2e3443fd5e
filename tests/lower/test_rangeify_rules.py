"""Rangeify's realize-point rules (rules.rangeify): each rule applied alone at a hand-made site fires exactly where
its decision says, and the kernel builder returns the rule's RealizePoint (no exception) where a kernel needs one.
The end-to-end decisions (and numpy checks of the results) are in test_split_rules.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from lower import split
from lower.rangeify import KernelBuilder, build_kernel, rangeify_rules
from lower.schedule import split_decisions
from rewrite import AxisType, Ops, UOp, dtypes
from rules.rangeify import (
    BITCAST_SOURCE,
    BROADCAST_REDUCE,
    EXPENSIVE_BROADCAST,
    REDUCE_EPILOGUE,
    REDUCE_IN_REDUCE_LOOP,
    RealizePoint,
    broadcast_repeats,
    realize_point,
    realize_point_rules,
)
from tensor import Tensor


@dataclass
class _Site:
    idx: tuple[UOp, ...]
    valid: UOp | None = None
    top: bool = False
    buffers: dict[UOp, UOp] = field(default_factory=dict)
    loops: tuple[UOp, ...] = ()
    work: dict[UOp, tuple[bool | None, int]] = field(default_factory=dict)
    closed: UOp | None = None
    asked: list[UOp] = field(default_factory=list)

    def collapsed(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> UOp | None:
        self.asked.append(n)
        return self.closed


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


RED = UOp.range(6, 1, AxisType.REDUCE)
LOOP = UOp.range(6, 2, AxisType.LOOP)
ZERO = UOp.const(0)


def test_every_realize_point_rule_is_named_and_documented() -> None:
    names = [r.name for r in realize_point_rules]
    assert names == [REDUCE_IN_REDUCE_LOOP, BROADCAST_REDUCE, REDUCE_EPILOGUE, EXPENSIVE_BROADCAST, BITCAST_SOURCE]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text()
    for name in names:
        assert name in docs and name in (split.__doc__ or "")


def test_reduce_in_reduce_loop_fires_only_inside_a_reduction_loop() -> None:
    r = Tensor(_arr(6, 5)).realize().sum(1, keepdim=True).uop  # (6, 1)
    assert realize_point(_Site((RED, ZERO)), r) == RealizePoint(r, REDUCE_IN_REDUCE_LOOP)
    assert realize_point(_Site((LOOP, ZERO)), r) is None  # read in an output loop: fused
    assert realize_point(_Site((LOOP, ZERO), valid=RED < 3), r) == RealizePoint(r, REDUCE_IN_REDUCE_LOOP)  # the gate
    assert realize_point(_Site((RED, ZERO), top=True), r) is None  # the kernel's own root
    site = _Site((RED, ZERO), closed=UOp.const(7))
    assert realize_point(site, r) is None and site.asked == [r]  # a closed form: no loop to recompute


def test_broadcast_repeats_counts_the_outer_loops_a_value_ignores() -> None:
    n, c, hw = (UOp.range(d, i + 1, AxisType.LOOP) for i, d in enumerate((100, 8, 64)))
    loops = (n, c, hw)
    assert broadcast_repeats((c,), None, loops) == 100  # per channel, inside the batch loop: 100 times
    assert broadcast_repeats((n,), None, loops) == 1  # a prefix of the loops: hoisted out of the inner ones
    assert broadcast_repeats((n * 8 + c,), None, loops) == 1
    assert broadcast_repeats((hw,), None, loops) == 800
    assert broadcast_repeats((ZERO,), None, loops) == 1  # depends on no loop: computed once
    assert broadcast_repeats((ZERO,), c < 3, loops) == 100  # the gate counts as a dependence


def test_broadcast_reduce_fires_only_when_outer_loops_would_repeat_it() -> None:
    r = Tensor(_arr(4, 5)).realize().sum(1, keepdim=True).uop  # (4, 1)
    n, c = UOp.range(100, 1, AxisType.LOOP), UOp.range(4, 2, AxisType.LOOP)
    assert realize_point(_Site((c, ZERO), loops=(n, c)), r) == RealizePoint(r, BROADCAST_REDUCE)
    assert realize_point(_Site((c, ZERO), loops=(c, n)), r) is None  # the statistic's loop outermost: hoisted
    assert realize_point(_Site((c, ZERO), loops=(UOp.range(4, 3, AxisType.LOOP), c)), r) is None  # 4 < the limit
    assert realize_point(_Site((c, ZERO), loops=(n, c), top=True), r) is None  # the kernel's own root
    site = _Site((c, ZERO), loops=(n, c), closed=UOp.const(7))
    assert realize_point(site, r) is None  # a closed form: no loop to recompute


def test_batchnorm_statistics_are_realized_and_rows_stay_fused() -> None:
    """NCHW per-channel statistics (a BatchNorm's) read in the (N, C, H, W) output loops would be recomputed
    for every image if fused: they get kernels of their own. A softmax's row statistics depend on the outer loop
    and stay in the row's kernel."""
    x = _arr(16, 4, 6, 6)
    h = Tensor(x)
    mean = h.mean((0, 2, 3), keepdim=True)
    c = h - mean
    out = c * ((c * c).mean((0, 2, 3), keepdim=True) + 1e-5).rsqrt()
    why = split_decisions([out.uop])
    assert sorted(v for v in why.values() if v == BROADCAST_REDUCE) == [BROADCAST_REDUCE] * 2
    m = x.mean((0, 2, 3), keepdims=True)
    want = (x - m) / np.sqrt(((x - m) ** 2).mean((0, 2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    soft = Tensor(_arr(16, 32)).softmax(-1)
    assert BROADCAST_REDUCE not in split_decisions([soft.uop]).values()


def test_expensive_broadcast_fires_on_broadcast_work_read_in_a_loop() -> None:
    a = Tensor(_arr(4, 1)).realize()
    exp = a.exp().expand(4, 16).uop  # exp repeated 16 times by the broadcast
    src = exp.src[0]
    assert src.op is not Ops.EXPAND
    assert realize_point(_Site((RED, RED)), exp) == RealizePoint(src, EXPENSIVE_BROADCAST)
    assert realize_point(_Site((LOOP, RED)), exp) is None  # the source's index does not move with the loop
    assert realize_point(_Site((RED, RED), buffers={src: src}), exp) is None  # realized already
    few = a.exp().expand(4, 4).uop  # repeated fewer than RECOMPUTE_LIMIT times: recomputed
    assert realize_point(_Site((RED, RED)), few) is None
    cheap = (a * 2).expand(4, 64).uop  # one load and a multiply: cheaper to recompute
    assert realize_point(_Site((RED, RED), buffers={a.uop: a.uop}), cheap) is None
    b = Tensor(_arr(4, 1, seed=1)).realize()
    two = (a * b).relu().expand(4, 64).uop  # work over two loads, repeated 64 times
    site = _Site((RED, RED), buffers={a.uop: a.uop, b.uop: b.uop})
    assert realize_point(site, two) == RealizePoint(two.src[0], EXPENSIVE_BROADCAST)


def test_bitcast_source_fires_on_a_lazy_source_of_a_resizing_bitcast() -> None:
    a = Tensor(_arr(8)).realize()
    src = (a * 2).uop
    half = (a * 2).bitcast(dtypes.int16).uop
    assert half.op is Ops.BITCAST and half.src[0] is src
    assert realize_point(_Site((LOOP,)), half) == RealizePoint(src, BITCAST_SOURCE)
    assert realize_point(_Site((LOOP,), buffers={src: src}), half) is None
    same = (a * 2).bitcast(dtypes.int32).uop  # the same element size: elementwise
    assert realize_point(_Site((LOOP,)), same) is None


def test_the_builder_returns_the_realize_point() -> None:
    x, y = _arr(6, 5), _arr(6, 7, seed=1)
    a, b = Tensor(x).realize(), Tensor(y).realize()
    inner = a.sum(1, keepdim=True)
    out = (inner * b).sum(0)
    bufs = {u: UOp.buffer(i, u.dtype, (int(np.prod(u.shape)),), None) for i, u in enumerate((a.uop, b.uop))}
    out_buf = UOp.buffer(9, out.uop.dtype, (7,), None)
    got = build_kernel(out.uop, out_buf, bufs)
    assert got == RealizePoint(inner.uop, REDUCE_IN_REDUCE_LOOP)
    bufs[inner.uop] = UOp.buffer(5, inner.uop.dtype, (6,), None)  # realized: the kernel reads it
    kernel = build_kernel(out.uop, out_buf, bufs)
    assert isinstance(kernel, UOp) and kernel.op is Ops.SINK
    assert sum(u.op is Ops.REDUCE for u in kernel.toposort()) == 1
    assert split_decisions([out.uop])[inner.uop] == REDUCE_IN_REDUCE_LOOP
    np.testing.assert_allclose(out.numpy(), (x.sum(1, keepdims=True) * y).sum(0), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------- the op-family rules of rangeify


def _fired(root: UOp) -> list[tuple[UOp, str]]:
    """Each site the builder expands for `root` (realized BUFFERs as its buffers) and the rule that fired there."""
    bufs = {u: u for u in root.toposort() if u.op is Ops.BUFFER}
    kb = KernelBuilder(bufs, [0])
    kb.fired = []
    idx = tuple(UOp.range(d, k + 1, AxisType.LOOP) if d != 1 else ZERO for k, d in enumerate(root.shape))
    assert kb.value(root, idx) is not None
    return kb.fired


def _a(*shape: int, seed: int = 0) -> tuple[np.ndarray, Tensor]:
    x = _arr(*shape, seed=seed)
    return x, Tensor(x).realize()


def _families() -> list[tuple[str, Tensor, np.ndarray]]:
    x, a = _a(4, 5)
    c, col = _a(4, 1, seed=1)
    ix = np.array([3, 0, 7, 1], np.int32)  # 7 is outside a's 4 rows: reads zeros
    gathered = np.stack([x[3], x[0], np.zeros(5, np.float32), x[1]])
    vals = np.array([3, 1, 4, 1, 5], np.int32)
    return [
        ("rangeify-load", a + 0, x),
        ("rangeify-leaf", a + 1.5, x + 1.5),
        ("rangeify-same-index", a.detach() * 2, x * 2),
        ("rangeify-reshape", a.reshape(2, 10) * 2, x.reshape(2, 10) * 2),
        ("rangeify-expand", col.expand(4, 5) * a, c * x),
        ("rangeify-permute", a.permute(1, 0) * 2, x.T * 2),
        ("rangeify-shrink", a[1:3, 2:5] * 2, x[1:3, 2:5] * 2),
        ("rangeify-flip", a.flip(1) * 2, x[:, ::-1] * 2),
        ("rangeify-pad", a.pad(((1, 0), (0, 2))) * 2, np.pad(x, ((1, 0), (0, 2))) * 2),
        ("rangeify-index", a.index_select(0, Tensor(ix)) * 2, gathered * 2),
        ("rangeify-reduce-empty", Tensor(np.zeros((0, 5), np.float32)).sum(0) + a[0], x[0]),
        ("rangeify-reduce", a.sum(1), x.sum(1)),
        ("rangeify-stack", Tensor(UOp.stack(UOp.const(2.0), UOp.const(7.0))) * a[0, :2], np.array([2, 7]) * x[0, :2]),
        ("rangeify-vconst", Tensor(UOp.vconst(list(vals), dtypes.int32)) * 2, vals * 2),
        ("rangeify-resizing-bitcast", a.bitcast(dtypes.int16), x.view(np.int16)),
        ("rangeify-elementwise", (a * a).cast(dtypes.float16), (x * x).astype(np.float16)),
    ]


def test_every_op_family_has_one_named_rule_after_the_realize_points() -> None:
    names = [r.name for r in rangeify_rules]
    assert names[:2] == ["rangeify-load", "rangeify-leaf"]
    n = len(realize_point_rules.rules)
    assert names[2:2 + n] == [r.name for r in realize_point_rules]  # decided before an op's own rule builds it
    assert {name for name, _, _ in _families()} == set(names) - {r.name for r in realize_point_rules}


FAMILIES = [r.name for r in rangeify_rules if r.name not in {p.name for p in realize_point_rules}]


@pytest.mark.parametrize("name", FAMILIES)
def test_each_op_family_rule_fires_and_computes_numpys_result(name: str) -> None:
    ((t, want),) = [(t, want) for n, t, want in _families() if n == name]
    fired = {rule for _, rule in _fired(t.uop)}
    assert name in fired, (name, fired)
    got = t.numpy()
    assert got.shape == want.shape
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_an_op_without_a_rule_is_a_clear_error() -> None:
    a = Tensor(_arr(3)).realize()
    bad = UOp(Ops.SINK, (a.uop,))
    with pytest.raises(NotImplementedError, match="rangeify: no lowering for SINK"):
        KernelBuilder({}, [0]).value(bad, ())
