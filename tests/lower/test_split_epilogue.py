"""The kernel split's reduction epilogues (rules.rangeify: realize-reduce-epilogue, and the realize points taken
under their reshapes): a matmul's bias added while its output is split into attention heads is one kernel that
stores straight into the heads' layout, not the bare product plus an elementwise kernel that permutes it; and a
value realized both as a matmul operand and for its other readers is stored once, not copied. Results are
checked against numpy (float64) and against the reference `python` device."""

from __future__ import annotations

import numpy as np
import pytest

from lower.schedule import schedule, split_decisions
from rewrite import Ops, UOp
from rules.rangeify import REDUCE_EPILOGUE, RealizePoint, heavy_reduction, realize_point, reduce_epilogue
from tensor import Tensor

B, T, H, D = 2, 32, 2, 4  # batch, sequence (>= CHEAP_RECOMPUTE_LIMIT: the score matmul repeats q's rows T times)
HID = H * D


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _kernels(*roots: Tensor) -> list:
    items, _ = schedule([r.uop for r in roots])
    return [it for it in items if it.kind == "kernel"]


def _has(ast: UOp, o: Ops) -> bool:
    return any(u.op is o for u in ast.toposort())


def _np_heads(y: np.ndarray, batched: bool) -> np.ndarray:
    return y.reshape(B, T, H, D).transpose(0, 2, 1, 3) if batched else y.reshape(T, H, D).transpose(1, 0, 2)


def _heads(y: Tensor, batched: bool) -> Tensor:
    return y.reshape(B, T, H, D).permute(0, 2, 1, 3) if batched else y.reshape(T, H, D).permute(1, 0, 2)


def _scores(device: str, batched: bool, bias: bool, act: str) -> tuple[Tensor, np.ndarray]:
    """q @ k^T with q, k = heads(act(x @ W + b)): k is read transposed (stored (.., d, t)), q as it is."""
    xs = _arr(*((B, T, HID) if batched else (T, HID)))
    ws = [_arr(HID, HID, seed=i + 1) for i in range(2)]
    bs = [_arr(HID, seed=i + 3) for i in range(2)]
    x = Tensor(xs, device=device)

    def proj(i: int) -> Tensor:
        y = x @ Tensor(ws[i], device=device)
        y = y + Tensor(bs[i], device=device) if bias else y
        return {"none": y, "relu": y.relu(), "tanh": y.tanh()}[act]

    def np_proj(i: int) -> np.ndarray:
        y = xs.astype(np.float64) @ ws[i] + (bs[i] if bias else 0)
        return {"none": y, "relu": np.maximum(y, 0), "tanh": np.tanh(y)}[act]

    q, k = _heads(proj(0), batched), _heads(proj(1), batched)
    nq, nk = _np_heads(np_proj(0), batched), _np_heads(np_proj(1), batched)
    return q @ k.transpose(-1, -2), nq @ np.swapaxes(nk, -1, -2)


VARIANTS = [(True, True, "none"), (False, True, "none"), (True, False, "none"), (True, True, "relu"),
            (True, False, "tanh"), (False, False, "relu")]


@pytest.mark.parametrize(("batched", "bias", "act"), VARIANTS)
def test_projection_epilogue_is_one_kernel_in_the_heads_layout(batched: bool, bias: bool, act: str) -> None:
    out, want = _scores("cpu", batched, bias, act)
    ks = _kernels(out)
    # the two projections and the scores: no kernel that only adds a bias or permutes the product
    assert len(ks) == 3 and all(_has(it.ast, Ops.REDUCE) for it in ks), [it.name for it in ks]
    epi = [n for n, why in split_decisions([out.uop]).items() if why == REDUCE_EPILOGUE]
    if bias or act == "tanh":  # the epilogue would have its own kernel: stored in the heads' layout by the product's
        lead = (B, H) if batched else (H,)
        assert sorted(n.shape for n in epi) == sorted([(*lead, T, D), (*lead, D, T)])  # k stored transposed
        assert all(any(u.op is Ops.REDUCE for u in n.toposort()) for n in epi)
    else:  # a bare product (or its ReLU: one load and an op, recomputed where read) is stored as it is
        assert epi == []
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("batched", "bias", "act"), [(True, True, "none"), (False, True, "relu")])
def test_projection_epilogue_on_the_reference_device(batched: bool, bias: bool, act: str) -> None:
    out, want = _scores("python", batched, bias, act)
    cpu, _ = _scores("cpu", batched, bias, act)
    got = out.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, cpu.numpy(), rtol=1e-5, atol=1e-5)


def test_attention_block_has_no_standalone_permute_kernel() -> None:
    """softmax(q k^T) v with biased projections: every kernel reduces (the heads' permutes are stores' layouts)."""
    xs = _arr(B, T, HID)
    ws, bs = [_arr(HID, HID, seed=i + 1) for i in range(3)], [_arr(HID, seed=i + 4) for i in range(3)]
    x = Tensor(xs)
    q, k, v = (_heads(x @ Tensor(w) + Tensor(b), True) for w, b in zip(ws, bs, strict=True))
    att = ((q @ k.transpose(-1, -2)) * 0.5).softmax(-1) @ v
    ks = _kernels(att)
    assert all(_has(it.ast, Ops.REDUCE) for it in ks), [it.name for it in ks]
    nq, nk, nv = (_np_heads(xs.astype(np.float64) @ w + b, True) for w, b in zip(ws, bs, strict=True))
    s = (nq @ np.swapaxes(nk, -1, -2)) * 0.5
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(att.numpy(), (e / e.sum(-1, keepdims=True)) @ nv, rtol=1e-4, atol=1e-5)


def test_not_an_epilogue_through_a_window_or_of_two_reductions() -> None:
    """A bias over a window of the product (a SHRINK: not every element is the product's), or over two products,
    is no single reduction's epilogue: the rule does not fire, and the results stay right."""
    xs, w1, w2, b = _arr(B, T, HID), _arr(HID, 2 * HID, seed=1), _arr(HID, HID, seed=2), _arr(HID, seed=3)
    x = Tensor(xs)
    win = _heads((x @ Tensor(w1))[..., :HID] + Tensor(b), True)
    two = _heads(x @ Tensor(w2) + x @ Tensor(w2 * 2) + Tensor(b), True)
    out = win @ two.transpose(-1, -2)
    assert REDUCE_EPILOGUE not in split_decisions([out.uop]).values()
    nx = xs.astype(np.float64)
    nwin = _np_heads((nx @ w1)[..., :HID] + b, True)
    ntwo = _np_heads(nx @ w2 + nx @ (w2 * 2) + b, True)
    np.testing.assert_allclose(out.numpy(), nwin @ np.swapaxes(ntwo, -1, -2), rtol=1e-4, atol=1e-4)


def test_a_product_read_by_another_kernel_is_computed_once() -> None:
    """The product a biased epilogue would compute inline is also read raw by another root: it is realized
    (a heavy reduction two kernels compute: realize-shared-reduction), not computed by both kernels."""
    b_, t, h, d = 2, 64, 4, 4  # 16 columns: each product element sums 16 terms of 16-element rows (heavy)
    xs, w, w2, b = _arr(b_, t, h * d), _arr(h * d, h * d, seed=1), _arr(h * d, h * d, seed=2), _arr(h * d, seed=3)
    x = Tensor(xs)

    def heads(y: Tensor) -> Tensor:
        return y.reshape(b_, t, h, d).permute(0, 2, 1, 3)

    def np_heads(y: np.ndarray) -> np.ndarray:
        return y.reshape(b_, t, h, d).transpose(0, 2, 1, 3)

    p = x @ Tensor(w)
    s = heads(p + Tensor(b)) @ heads(x @ Tensor(w2)).transpose(-1, -2)
    other = p.relu()
    ks = _kernels(s, other)
    # each projection's product computed by one kernel (reading x and its weight); the others read its buffer
    w_readers = [it for it in ks if any(u.shape == (h * d * h * d,) for u in it.bufs[1:])]
    assert len(w_readers) == 2, [it.name for it in ks]
    assert REDUCE_EPILOGUE not in split_decisions([s.uop, other.uop]).values() or \
        "realize-shared-reduction" in split_decisions([s.uop, other.uop]).values()
    nx = xs.astype(np.float64)
    want = np_heads(nx @ w + b) @ np.swapaxes(np_heads(nx @ w2), -1, -2)
    np.testing.assert_allclose(s.numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(other.numpy(), np.maximum(nx @ w, 0), rtol=1e-4, atol=1e-4)


def _identity_copy(ast: UOp) -> bool:
    """A kernel that stores each element it loads at the same index of another buffer: a copy of a value."""
    topo = ast.toposort()
    st, ld = [u for u in topo if u.op is Ops.STORE], [u for u in topo if u.op is Ops.LOAD]
    return len(st) == 1 and len(ld) == 1 and st[0].src[1] is ld[0] and ld[0].src[0].src[1:] == st[0].src[0].src[1:]


def test_layernorm_output_read_by_matmuls_is_stored_once() -> None:
    """A LayerNorm's output is realized as a matmul operand (its rsqrt broadcast into the product's loop) and for
    its residual reader: one kernel stores it, none copies it (its reshape is the same memory)."""
    xs, w1, w2 = _arr(4, 64, 96), _arr(96, 96, seed=1), _arr(96, 96, seed=2)
    g, b = _arr(96, seed=3), _arr(96, seed=4)
    x, gt, bt = Tensor(xs), Tensor(g), Tensor(b)

    def ln(h: Tensor) -> Tensor:
        c = h - h.mean(-1, keepdim=True)
        return c * ((c * c).mean(-1, keepdim=True) + 1e-5).rsqrt() * gt + bt

    y = ln(x)
    out = ln(y + y @ Tensor(w1) @ Tensor(w2))
    ks = _kernels(out)
    assert not any(_identity_copy(it.ast) for it in ks), [it.name for it in ks]
    assert len(ks) == 4  # LayerNorm, two matmuls, the residual LayerNorm

    def np_ln(h: np.ndarray) -> np.ndarray:
        c = h - h.mean(-1, keepdims=True)
        return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g + b

    ny = np_ln(xs.astype(np.float64))
    np.testing.assert_allclose(out.numpy(), np_ln(ny + ny @ w1 @ w2), rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------------------- the rule's parts, alone


def test_reduce_epilogue_finds_one_reduction_seen_through_views() -> None:
    a, w, b = Tensor(_arr(T, HID)).realize(), Tensor(_arr(HID, HID, seed=1)).realize(), Tensor(_arr(HID)).realize()
    bufs = {u: u for u in (a.uop, w.uop, b.uop)}
    prod = (a @ w).uop
    red = next(u for u in prod.toposort() if u.op is Ops.REDUCE)
    biased = _heads(a @ w + b, False).uop
    assert reduce_epilogue(biased, bufs) == (red, False, 2)  # the product and the bias
    assert reduce_epilogue(_heads((a @ w).abs().sqrt(), False).uop, bufs) == (red, True, 1)
    assert reduce_epilogue(_heads(a @ w, False).uop, bufs) is None  # views only: nothing to fuse
    assert reduce_epilogue(((a @ w)[:, :4] + 1).uop, bufs) is None  # a window of the product
    w2 = Tensor(_arr(HID, HID, seed=2)).realize()
    assert reduce_epilogue((a @ w + a @ w2).uop, {**bufs, w2.uop: w2.uop}) is None  # two reductions
    assert reduce_epilogue((a @ w + a @ w).uop, bufs) == (red, False, 1)  # the same one, read twice
    assert reduce_epilogue((a + b).uop, bufs) is None  # no reduction


def test_heavy_reduction_is_a_contraction_not_a_row_sum() -> None:
    a, w = Tensor(_arr(64, 32)).realize(), Tensor(_arr(32, 32, seed=1)).realize()
    prod = next(u for u in (a @ w).uop.toposort() if u.op is Ops.REDUCE)
    reads = (64 * 32 + 32 * 32) * 4
    assert heavy_reduction(prod, reads)  # 64 * 32 * 32 products from the bytes of two small operands: 21 each
    assert not heavy_reduction(prod, reads * 3)  # 7 products per element read: under RECOMPUTE_LIMIT
    rows = next(u for u in a.sum(1).uop.toposort() if u.op is Ops.REDUCE)
    assert not heavy_reduction(rows, 64 * 32 * 4)  # each element read is added once
    assert not heavy_reduction(prod, 0) and not heavy_reduction(prod, None)  # nothing read: constants


def test_reduce_epilogue_rule_fires_at_a_site_in_a_reduction_loop() -> None:
    from rewrite import AxisType

    a, w, b = Tensor(_arr(T, HID)).realize(), Tensor(_arr(HID, HID, seed=1)).realize(), Tensor(_arr(HID)).realize()
    bufs = {u: u for u in (a.uop, w.uop, b.uop)}
    q = _heads(a @ w + b, False)  # (H, T, D)
    e = q.reshape(H, T, 1, D).expand(H, T, T, D).uop  # read by q @ k^T: broadcast over k's T rows
    red = UOp.range(D, 1, AxisType.REDUCE)
    loops = tuple(UOp.range(n, i + 2, AxisType.LOOP) for i, n in enumerate((H, T, T)))

    class Site:
        idx, valid, top, buffers, work = (*loops, red), None, False, bufs, {}

        def collapsed(self, n: UOp, idx: tuple[UOp, ...], valid: UOp | None) -> None:
            return None

    assert realize_point(Site(), e) == RealizePoint(q.uop, REDUCE_EPILOGUE)  # the heads' value, under the reshape
    Site.idx = (*loops, UOp.const(0))  # read outside any reduction's loop: fused where it is
    assert realize_point(Site(), e) is None
