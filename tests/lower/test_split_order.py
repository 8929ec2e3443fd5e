"""The kernel split runs in rounds to a fixed point over the whole graph (lower.schedule): its kernels and its
decisions do not depend on the order of the roots, and no kernel recomputes a node another decision realized
(`lower.schedule.stale_kernels` is empty) on the benchmark models. Results against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lower.schedule import schedule, split_decisions, stale_kernels
from rewrite import UOp
from rewrite.hashing import structural_hash
from tensor import Tensor
from tests.tensor.util import layernorm as _layernorm
from tests.tensor.util import np_layernorm as _np_layernorm


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _graph() -> tuple[list[Tensor], list[np.ndarray]]:
    """Six roots that share values the split realizes for different reasons: a row sum read in a matmul's
    operand and inside a reduction's loop, a softmax feeding a matmul (an expensive broadcast), LayerNorm
    statistics read by several roots, and a root that reads another root."""
    xa, xv, xb, xw = _arr(4, 16), _arr(16, 8, seed=1), _arr(4, 5, seed=2), _arr(16, 16, seed=3)
    a, v, b, w = (Tensor(x).realize() for x in (xa, xv, xb, xw))
    r = a.sum(1, keepdim=True)
    rows = xa.sum(1, keepdims=True)
    mm = (a + r).exp() @ v
    col = (r * b).sum(0)
    sm = a.softmax(-1) @ w
    ln = _layernorm(a)
    h = ln @ w
    out = _layernorm(h + ln)
    e = np.exp(xa - xa.max(-1, keepdims=True))
    np_ln = _np_layernorm(xa.astype(np.float64))
    np_h = np_ln @ xw
    want = [np.exp(xa + rows) @ xv, (rows * xb).sum(0), (e / e.sum(-1, keepdims=True)) @ xw, np_ln, np_h,
            _np_layernorm(np_h + np_ln)]
    return [mm, col, sm, ln, h, out], want


def _kernels(roots: list[UOp]) -> list[tuple[str, ...]]:
    """The schedule's items as a sorted list (the order of independent kernels follows the roots' order)."""
    items, _ = schedule(roots)
    return sorted((it.kind, it.name, structural_hash(it.ast) if it.ast is not None else "") for it in items)


_TS, _WANT = _graph()
_BASE = _kernels([t.uop for t in _TS])
_BASE_DECIDED = sorted(split_decisions([t.uop for t in _TS]).values())


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(range(len(_TS))))
def test_same_kernels_whatever_the_order_of_the_roots(order: list[int]) -> None:
    roots = [_TS[i].uop for i in order]
    assert _kernels(roots) == _BASE
    assert sorted(split_decisions(roots).values()) == _BASE_DECIDED
    assert stale_kernels(roots) == []


def test_the_graph_matches_numpy_in_any_order() -> None:
    ts, want = _graph()
    Tensor.realize(*reversed(ts))
    for t, w in zip(ts, want, strict=True):
        np.testing.assert_allclose(t.numpy(), w, rtol=1e-3, atol=1e-4)


def test_layernorm_stack_has_no_stale_kernel() -> None:
    x, w = Tensor(_arr(6, 16)), Tensor(_arr(16, 16, seed=1) * 0.25)
    outs = []
    for _ in range(4):  # a BERT-like stack: each LayerNorm's output read by a matmul and the next LayerNorm
        h = _layernorm(x)
        outs.append(h @ w)
        x = _layernorm(h + outs[-1])
    roots = [x.uop, *(o.uop for o in outs)]
    assert stale_kernels(roots) == []
    assert stale_kernels(roots[::-1]) == []
    assert _kernels(roots) == _kernels(roots[::-1])


@pytest.mark.slow
def test_benchmark_models_have_no_stale_kernel() -> None:
    """The transformer training step (every realize of one step, benchmarks.train_models) and the BERT forward
    (--quick shapes): every kernel built against the split's final decisions."""
    from benchmarks.split_digest import bert_roots, train_roots

    for roots in [bert_roots(True), *train_roots("transformer")]:
        assert stale_kernels(roots) == []
