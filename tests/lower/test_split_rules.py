"""The kernel split's decisions as named rules (lower.split): each rule realizes a node on a small graph where it
should, and does not where it should not. `realize_rules` is checked alone with `decide` (the decisions a node's
own op settles); the decisions taken while kernels are built are read from `split_decisions`, which also
reports the first ones. Results are checked against numpy, so a decision never costs correctness."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from lower.schedule import schedule, split_decisions
from lower.split import decide, realize_rules
from rewrite import Ops, UOp, dtypes
from rewrite.errors import CompilerError
from tensor import Tensor


def _decide(*roots: UOp) -> dict[UOp, str]:
    topo: dict[UOp, int] = {}
    for u in UOp.sink(*roots).toposort():
        topo.setdefault(u, len(topo))
    return decide(list(roots), topo).decided


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _why(decided: dict[UOp, str], rule: str) -> list[UOp]:
    return [n for n, r in decided.items() if r == rule]


def test_every_static_rule_is_named_in_the_rule_set() -> None:
    names = {r.name for r in realize_rules.rules}
    assert {"realize-root", "realize-contiguous", "realize-copy", "realize-assign",
            "realize-bitcast-source"} <= names


def test_realize_root_and_not_a_buffer_root() -> None:
    a = Tensor(_arr(4, 5)).realize()
    s = (a + 1).uop
    assert _decide(s) == {s: "realize-root"}
    assert _decide(a.uop) == {}  # a BUFFER root is realized already


def test_realize_contiguous() -> None:
    a = Tensor(_arr(4, 5)).realize()
    c = (a * 2).contiguous()
    out = c + 1
    d = _decide(out.uop)
    assert _why(d, "realize-contiguous") == [c.uop]
    assert _why(_decide((a * 2 + 1).uop), "realize-contiguous") == []
    np.testing.assert_allclose(out.numpy(), _arr(4, 5) * 2 + 1, rtol=1e-6)


def test_realize_copy_and_its_lazy_source_only() -> None:
    x = _arr(6)
    a = Tensor(x).realize()
    lazy = (a + 1).to("python")
    d = _decide(lazy.uop)
    copies = _why(d, "realize-copy")
    assert len(copies) == 1 and copies[0].op is Ops.COPY
    assert [u.op for u in _why(d, "realize-copy-source")] == [Ops.ADD]
    d = _decide(a.to("python").uop)  # a copy of a realized buffer: its source needs nothing
    assert _why(d, "realize-copy-source") == [] and len(_why(d, "realize-copy")) == 1
    np.testing.assert_allclose(lazy.numpy(), x + 1, rtol=1e-6)


def test_realize_assign_marks_the_store_and_aliases_the_target() -> None:
    x = _arr(3, 4)
    t = Tensor(x.copy()).realize()
    t.assign(t * 3)
    after = t.uop
    assert after.op is Ops.AFTER
    topo = {u: i for i, u in enumerate(after.toposort())}
    ctx = decide([after], topo)
    (store,) = _why(ctx.decided, "realize-assign")
    assert store.op is Ops.STORE and ctx.stores == {store: after.src[0]} and ctx.out_of[after] is after.src[0]
    np.testing.assert_allclose(t.numpy(), x * 3, rtol=1e-6)


def test_realize_assign_rejects_an_after_on_a_lazy_value() -> None:
    a = Tensor(_arr(4)).realize()
    v = (a + 1).uop
    bad = UOp(Ops.AFTER, (v, UOp(Ops.STORE, (v, v))))
    with pytest.raises(CompilerError, match="AFTER must follow a BUFFER"):
        _decide(bad)


def test_realize_bitcast_source_only_when_the_size_changes() -> None:
    x = _arr(8)
    a = Tensor(x).realize()
    half = (a * 2).bitcast(dtypes.int16)  # float32 -> int16: read as raw memory, so the product is realized
    d = _decide(half.uop)
    assert [u.op for u in _why(d, "realize-bitcast-source")] == [Ops.MUL]
    same = (a * 2).bitcast(dtypes.int32)  # the same size: an elementwise reinterpretation, fused
    assert _why(_decide(same.uop), "realize-bitcast-source") == []
    np.testing.assert_array_equal(half.numpy(), (x * 2).view(np.int16))
    np.testing.assert_array_equal(same.numpy(), (x * 2).view(np.int32))


def test_reduce_in_reduce_loop() -> None:
    x, y = _arr(6, 5), _arr(6, 7, seed=1)
    a, b = Tensor(x), Tensor(y)
    inner = a.sum(1, keepdim=True)
    out = (inner * b).sum(0)  # the row sums are read inside the loop over rows: realized once
    assert _why(split_decisions([out.uop]), "realize-reduce-in-reduce-loop") == [inner.uop]
    soft = (a - a.max(axis=1, keepdim=True)).exp().sum(1)  # the max is read in the row's own loop: fused
    assert _why(split_decisions([soft.uop]), "realize-reduce-in-reduce-loop") == []
    np.testing.assert_allclose(out.numpy(), (x.sum(1, keepdims=True) * y).sum(0), rtol=1e-4, atol=1e-5)


def test_expensive_broadcast() -> None:
    x, v = _arr(4, 16), _arr(16, 8, seed=1)
    p = Tensor(x).exp()
    out = p @ Tensor(v)  # exp broadcast over v's 8 columns inside the loop over 16: computed once instead
    (node,) = _why(split_decisions([out.uop]), "realize-expensive-broadcast")
    assert node.shape == (4, 16)  # the exp's values, under the reshape that adds the axis v's columns broadcast
    assert any(u.op is Ops.EXP2 for u in node.toposort())
    cheap = (Tensor(x) * 2) @ Tensor(v)  # a multiply is cheaper to recompute than to store and load
    assert _why(split_decisions([cheap.uop]), "realize-expensive-broadcast") == []
    np.testing.assert_allclose(out.numpy(), np.exp(x) @ v, rtol=1e-4, atol=1e-4)


@pytest.fixture
def small_limits(monkeypatch: pytest.MonkeyPatch):
    importlib.import_module("lower.realize").plans.clear()
    monkeypatch.setattr(importlib.import_module("lower.split_build"), "kernel_limits", lambda device: (4, 1 << 20))
    yield
    importlib.import_module("lower.realize").plans.clear()


def test_over_limits(small_limits: None) -> None:
    xs = [_arr(5, seed=i) for i in range(6)]
    ts = [Tensor(x).realize() for x in xs]
    total = ts[0]
    for t in ts[1:]:
        total = total + t  # six buffers and the output: more than 4 arguments
    d = split_decisions([total.uop])
    assert _why(d, "realize-over-limits")
    few = ts[0] + ts[1]
    assert _why(split_decisions([few.uop]), "realize-over-limits") == []
    np.testing.assert_allclose(total.numpy(), sum(xs), rtol=1e-5)


def test_shared_reduction() -> None:
    x = _arr(4, 9)
    a = Tensor(x).realize()
    mean = a.mean(1, keepdim=True)
    r1, r2 = a - mean, a * mean  # two kernels would each compute the mean inline
    (node,) = _why(split_decisions([r1.uop, r2.uop]), "realize-shared-reduction")
    # the row means (the row sums and the division by 9, the last value both kernels compute), computed once
    assert node.shape == (4, 1) and any(u.op is Ops.REDUCE for u in node.toposort())
    items, _ = schedule([r1.uop, r2.uop])
    assert sum(u.op is Ops.REDUCE for it in items if it.ast is not None for u in it.ast.toposort()) == 1
    assert _why(split_decisions([r1.uop]), "realize-shared-reduction") == []  # one reader: fused
    m = x.mean(1, keepdims=True)
    np.testing.assert_allclose(r1.numpy(), x - m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r2.numpy(), x * m, rtol=1e-5, atol=1e-6)


def test_store_value_realized_when_it_reads_the_target_elsewhere() -> None:
    x = _arr(6)
    t = Tensor(x.copy()).realize()
    t.assign(t.flip(0))  # writing in place would overwrite elements still to be read
    assert len(_why(split_decisions([t.uop]), "realize-store-value")) == 1
    u = Tensor(x.copy()).realize()
    u.assign(u + 1)  # each element reads only itself: written in place
    assert _why(split_decisions([u.uop]), "realize-store-value") == []
    np.testing.assert_allclose(t.numpy(), x[::-1], rtol=1e-6)
    np.testing.assert_allclose(u.numpy(), x + 1, rtol=1e-6)


def test_every_build_rule_is_named_in_its_rule_set() -> None:
    from lower.split_build import build_rules, cycle_rules, shared_rules

    assert [r.name for r in build_rules.rules] == [
        "realize-copy-source", "realize-concat-source", "realize-over-limits", "realize-point", "realize-store-value"]
    assert [r.name for r in shared_rules.rules] == ["realize-shared-reduction"]
    assert [r.name for r in cycle_rules.rules] == ["realize-assign-cycle"]
    from pathlib import Path

    from lower import split_build

    docs = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text()
    for r in (*build_rules.rules, *shared_rules.rules, *cycle_rules.rules):
        assert f"`{r.name}`" in docs and r.name in (split_build.__doc__ or "")


def test_copy_source_realized_before_the_copy() -> None:
    x = _arr(6)
    a = Tensor(x).realize()
    moved = ((a * 3).to("python") + 1).to("cpu")  # each copy moves a buffer: its lazy source is realized first
    d = split_decisions([moved.uop])
    assert sorted(u.op.name for u in _why(d, "realize-copy-source")) == ["ADD", "MUL"]
    np.testing.assert_allclose(moved.numpy(), x * 3 + 1, rtol=1e-6)


def test_assign_cycle_computes_one_value_first() -> None:
    p0, m0 = _arr(5), _arr(5, seed=1)
    p, m = Tensor(p0.copy()).realize(), Tensor(m0.copy()).realize()
    p_old, m_old = p.uop, m.uop
    p.assign(p - Tensor(m_old).flip(0) * 0.5)  # reads m's old value (elsewhere: the stores are two kernels)
    m.assign(Tensor(m_old) * 3 + Tensor(p_old))  # reads p's old value: no order of the two stores is right
    (value,) = _why(split_decisions([p.uop, m.uop]), "realize-assign-cycle")
    assert value.op in (Ops.ADD, Ops.SUB)  # the first store's value (in graph order), computed into a temporary
    Tensor.realize(p, m)
    np.testing.assert_allclose(p.numpy(), p0 - m0[::-1] * 0.5, rtol=1e-6)
    np.testing.assert_allclose(m.numpy(), m0 * 3 + p0, rtol=1e-6)


def test_assign_cycle_at_the_same_element_is_one_kernel() -> None:
    """Two stores that each read the other's old value at the element they write share one kernel
    (fuse-sibling-stores, lower.split_fuse): each element's old values are loaded before either is stored, so
    there is no cycle to break and no temporary."""
    p0, m0 = _arr(5), _arr(5, seed=1)
    p, m = Tensor(p0.copy()).realize(), Tensor(m0.copy()).realize()
    p_old, m_old = p.uop, m.uop
    p.assign(p - Tensor(m_old) * 0.5)
    m.assign(Tensor(m_old) * 3 + Tensor(p_old))
    assert _why(split_decisions([p.uop, m.uop]), "realize-assign-cycle") == []
    assert [it.outs for it in schedule([p.uop, m.uop])[0]] == [2]
    Tensor.realize(p, m)
    np.testing.assert_allclose(p.numpy(), p0 - m0 * 0.5, rtol=1e-6)
    np.testing.assert_allclose(m.numpy(), m0 * 3 + p0, rtol=1e-6)


def test_assign_without_a_cycle_decides_none() -> None:
    p0, m0 = _arr(5), _arr(5, seed=1)
    p, m = Tensor(p0.copy()).realize(), Tensor(m0.copy()).realize()
    p.assign(p - Tensor(m.uop) * 0.5)
    m.assign(m * 3)  # reads only itself: p's store reads m first, then m is written
    assert _why(split_decisions([p.uop, m.uop]), "realize-assign-cycle") == []
    Tensor.realize(p, m)
    np.testing.assert_allclose(p.numpy(), p0 - m0 * 0.5, rtol=1e-6)
    np.testing.assert_allclose(m.numpy(), m0 * 3, rtol=1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_random_assignment_rounds_match_numpy(seed: int) -> None:
    """Generated: assignments among three buffers, each value reading the old values of random others (cycles
    of any length); whatever the rules realize, every buffer ends with the value numpy computes from the old
    ones."""
    rng = np.random.default_rng(seed)
    olds = [_arr(4, seed=seed * 10 + i) for i in range(3)]
    ts = [Tensor(x.copy()).realize() for x in olds]
    uops = [t.uop for t in ts]
    want = []
    for t in ts:
        reads = rng.choice(3, size=2, replace=True)
        coef = rng.integers(1, 4, size=2).astype(np.float32)
        t.assign(Tensor(uops[reads[0]]) * float(coef[0]) + Tensor(uops[reads[1]]).flip(0) * float(coef[1]))
        want.append(olds[reads[0]] * coef[0] + olds[reads[1]][::-1] * coef[1])
    Tensor.realize(*ts)
    for t, w in zip(ts, want, strict=True):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-5, atol=1e-6)


def _two_readers() -> tuple[Tensor, Tensor, np.ndarray, np.ndarray]:
    """A row sum read by two roots: in a matmul's operand (exp(a + r) @ v: fused, r is read in an output loop)
    and inside a reduction's loop ((r * b).sum(0): realized by realize-reduce-in-reduce-loop)."""
    x, y, z = _arr(4, 16), _arr(16, 8, seed=1), _arr(4, 5, seed=2)
    a, v, b = Tensor(x).realize(), Tensor(y).realize(), Tensor(z).realize()
    r = a.sum(1, keepdim=True)
    rows = x.sum(1, keepdims=True)
    return (a + r).exp() @ v, (r * b).sum(0), np.exp(x + rows) @ y, (rows * z).sum(0)


def test_stale_kernels_reports_a_kernel_built_before_a_later_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    from lower.schedule import stale_kernels
    from lower.split_build import BuildContext

    mm, col, want_mm, want_col = _two_readers()
    # the split's rounds build again every kernel that computed a node a later decision realized: none is stale
    assert stale_kernels([mm.uop, col.uop]) == []
    assert stale_kernels([col.uop, mm.uop]) == []
    # without that (no kernel remembers what it computes inline), the matmul's kernel, built in the round that
    # realizes r, keeps computing r inline
    monkeypatch.setattr(BuildContext, "accept", lambda self, node: None)
    (line,) = stale_kernels([col.uop, mm.uop])
    assert line.startswith("realize-root") and "realize-reduce-in-reduce-loop" in line
    monkeypatch.undo()
    Tensor.realize(col, mm)  # either way the values are right
    np.testing.assert_allclose(mm.numpy(), want_mm, rtol=1e-4)
    np.testing.assert_allclose(col.numpy(), want_col, rtol=1e-4, atol=1e-5)


def test_the_split_does_not_depend_on_the_order_of_the_roots() -> None:
    mm, col, _, _ = _two_readers()
    first = sorted(split_decisions([mm.uop, col.uop]).values())
    assert sorted(split_decisions([col.uop, mm.uop]).values()) == first
