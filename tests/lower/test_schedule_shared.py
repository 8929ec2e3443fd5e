"""A reduction that several kernels would compute inline is realized once (lower.schedule): a stack of N
LayerNorms, where each LayerNorm's output is read by the next one's statistics and by a matmul, makes O(N)
reduction loops in total, not O(N^2) (each kernel recomputing every earlier LayerNorm's statistics), and each
kernel reads a bounded number of buffers. Results against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from lower import schedule
from rewrite import Ops
from tensor import Tensor
from tests.tensor.util import layernorm as _layernorm
from tests.tensor.util import np_layernorm as _np_layernorm


def _stack(x: Tensor, w: Tensor, n: int) -> tuple[Tensor, list[Tensor]]:
    """n residual blocks y = LN(y + LN(y) @ w); returns the output and every block's matmul."""
    mms = []
    for _ in range(n):
        h = _layernorm(x)
        mm = h @ w
        mms.append(mm)
        x = _layernorm(h + mm)
    return x, mms


def _np_stack(x: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    for _ in range(n):
        h = _np_layernorm(x)
        x = _np_layernorm(h + h @ w)
    return x


def _reduction_loops(t: Tensor) -> tuple[int, int, int]:
    """(kernels, REDUCE nodes over all kernels, the most buffers one kernel reads)"""
    items, _ = schedule([t.uop])
    ks = [it for it in items if it.kind == "kernel"]
    reduces = sum(1 for it in ks if it.ast is not None for u in it.ast.toposort() if u.op is Ops.REDUCE)
    return len(ks), reduces, max(len(it.bufs) for it in ks)


@pytest.mark.parametrize("n", [1, 3])
def test_layernorm_stack_matches_numpy(n: int) -> None:
    rng = np.random.default_rng(n)
    xn = rng.standard_normal((6, 16), dtype=np.float32)
    wn = (rng.standard_normal((16, 16), dtype=np.float32) * 0.25).astype(np.float32)
    got = _stack(Tensor(xn), Tensor(wn), n)[0].numpy()
    ref = _np_stack(xn.astype(np.float64), wn.astype(np.float64), n)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_reductions_grow_linearly_with_depth() -> None:
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((6, 16), dtype=np.float32))
    w = Tensor(rng.standard_normal((16, 16), dtype=np.float32))
    counts = {n: _reduction_loops(_stack(x, w, n)[0]) for n in (2, 4, 8)}
    # per block: two LayerNorms (two statistics each) and a matmul, so 5 reductions; each realized once
    for n, (_, reduces, _) in counts.items():
        assert reduces <= 5 * n + 2, (n, counts)
    # the same per block whatever the depth, and no kernel reads a chain of earlier blocks' buffers
    assert counts[8][1] - counts[4][1] == 2 * (counts[4][1] - counts[2][1]), counts
    assert counts[8][2] == counts[4][2], counts
    assert max(c[2] for c in counts.values()) <= 4, counts  # the widest kernel: bounded, whatever the depth
    assert counts[8][0] - counts[4][0] == 2 * (counts[4][0] - counts[2][0]), counts  # kernels: linear too


def test_single_layernorm_stays_one_kernel() -> None:
    x = Tensor(np.random.default_rng(1).standard_normal((8, 32), dtype=np.float32))
    assert _reduction_loops(_layernorm(x))[0] == 1


def test_statistic_read_by_two_roots_is_computed_once() -> None:
    rng = np.random.default_rng(2)
    an, bn = rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((4, 8), dtype=np.float32)
    a, b = Tensor(an), Tensor(bn)
    s = a.sum(-1, keepdim=True)
    outs = [(b * s).sum(-1), (b + s).max(axis=-1)]
    items, _ = schedule([o.uop for o in outs])
    reduces = sum(1 for it in items if it.ast is not None for u in it.ast.toposort() if u.op is Ops.REDUCE)
    assert reduces == 3  # the shared sum once, then each root's own reduction
    Tensor.realize(*outs)
    np.testing.assert_allclose(outs[0].numpy(), (bn * an.sum(-1, keepdims=True)).sum(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), (bn + an.sum(-1, keepdims=True)).max(-1), rtol=1e-5, atol=1e-5)


def test_cheap_shared_value_stays_inline() -> None:
    """The byte rule: the row means two kernels would each compute in a loop of their own are stored once; the
    centred value `x - mean` they both compute stays inline (each reads x anyway: storing it would only add
    a write and a read)."""
    from lower.schedule import split_decisions

    xn = np.random.default_rng(3).standard_normal((4, 16), dtype=np.float32)
    x = Tensor(xn)
    c = x - x.mean(-1, keepdim=True)
    outs = [c * 2.0, c + 1.0]
    shared = [n for n, why in split_decisions([o.uop for o in outs]).items() if why == "realize-shared-reduction"]
    assert [n.shape for n in shared] == [(4, 1)], shared
    Tensor.realize(*outs)
    cn = xn - xn.mean(-1, keepdims=True)
    np.testing.assert_allclose(outs[0].numpy(), cn * 2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs[1].numpy(), cn + 1, rtol=1e-5, atol=1e-5)
