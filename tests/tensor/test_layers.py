"""tensor.layers and the functional conv1d / conv_transpose2d / scaled_dot_product_attention: forward values and
gradients against numpy loop definitions with central-difference gradients (CI, no torch), and against torch
with the same weights where torch is installed."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import ArgumentError, ShapeError
from tensor import Tensor
from tensor.attention import scaled_dot_product_attention
from tensor.modules import (
    BatchNorm1d,
    Conv1d,
    ConvTranspose1d,
    ConvTranspose2d,
    GroupNorm,
    MultiheadAttention,
    RMSNorm,
    realize_pending,
)
from tensor.nn import conv_transpose2d
from tensor.state import get_state_dict, load_state_dict
from tests.tensor import nn_reference as ref
from tests.tensor.test_modules import _double, _torch_check, rnd


def _value_and_grads(f, arrays: list[np.ndarray], w: np.ndarray | None = None):
    """f(*Tensors) with a weighted sum's gradients for each argument (float64)."""
    ts = [Tensor(a, requires_grad=True) for a in arrays]
    out = f(*ts)
    wt = rnd(*out.shape, seed=11) if w is None else w
    (out * Tensor(wt)).sum().backward()
    return out.numpy(), [t.grad.numpy() for t in ts], wt


CT_CASES = [  # cin, cout, kernel, stride, padding, output_padding, dilation, groups, spatial
    (4, 6, 3, 2, 1, 1, 1, 2, (3, 2)),
    (2, 3, (2, 3), (1, 2), 0, (0, 1), (2, 1), 1, (2, 3)),
    (3, 3, 3, 3, 4, 2, 2, 3, (3, 3)),  # padding beyond dilation*(k-1): the input is cropped
    (2, 4, 3, 1, 2, 1, 2, 2, (3, 4)),  # stride 1: no phases; padding crops, output_padding extends
    (2, 2, 4, (2, 4), (1, 0), (1, 3), (2, 1), 1, (2, 2)),  # stride 4 with 4 taps: every phase has one tap
    # dilation 1, stride > 1: one stride-1 transposed conv per output phase, interleaved (tensor.conv._subpixel)
    (3, 2, 2, 3, 0, 2, 1, 1, (3, 2)),  # kernel 2 < stride 3: a phase with no tap; output_padding past the taps
    (2, 4, (3, 4), (2, 3), (2, 1), (1, 2), 1, 2, (2, 3)),  # mixed strides, groups, crops and output_padding
    (2, 3, 5, (2, 1), 3, 0, 1, 1, (4, 3)),  # stride 1 on one axis only; padding crops into the taps
]


@pytest.mark.parametrize("case", CT_CASES)
def test_conv_transpose2d_matches_definition_and_finite_differences(case) -> None:
    cin, cout, k, s, p, op, d, g, sp = case
    ks = (k, k) if isinstance(k, int) else k
    pair = lambda v: (v, v) if isinstance(v, int) else v
    x, w, b = rnd(2, cin, *sp, seed=1), rnd(cin, cout // g, *ks, seed=2), rnd(cout, seed=3)
    out, (gx, gw, gb), wt = _value_and_grads(lambda X, W, B: conv_transpose2d(X, W, B, s, p, op, g, d), [x, w, b])
    args = (pair(s), pair(p), pair(op), pair(d), g)
    np.testing.assert_allclose(out, ref.conv_transpose_nd(x, w, b, *args), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gx, ref.fd_grad(lambda a: (ref.conv_transpose_nd(a, w, b, *args) * wt).sum(), x),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gw, ref.fd_grad(lambda a: (ref.conv_transpose_nd(x, a, b, *args) * wt).sum(), w),
                               rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gb, wt.sum(tuple(i for i in range(wt.ndim) if i != 1)), rtol=1e-12)


@pytest.mark.parametrize("case", CT_CASES)
def test_conv_transpose2d_matches_torch(case) -> None:
    torch = pytest.importorskip("torch")
    cin, cout, k, s, p, op, d, g, sp = case
    m = _double(ConvTranspose2d(cin, cout, k, s, p, op, g, True, d))
    _torch_check(m, torch.nn.ConvTranspose2d(cin, cout, k, s, p, op, g, True, d).double(), rnd(2, cin, *sp), torch)


def test_conv1d_and_conv_transpose1d_match_definition_and_torch() -> None:
    x = rnd(2, 4, 9, seed=4)
    conv = _double(Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2))
    W, B = conv.weight.numpy(), conv.bias.numpy()
    assert np.all(np.abs(W) <= 1 / np.sqrt(2 * 3))  # torch's default bound 1/sqrt(fan_in)
    out, (gx,), wt = _value_and_grads(conv, [x])
    want = ref.conv_nd(x, W, B, (2,), (2,), (2,), 2)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gx, ref.fd_grad(lambda a: (ref.conv_nd(a, W, B, (2,), (2,), (2,), 2) * wt).sum(), x),
                               rtol=1e-6, atol=1e-7)
    ct = _double(ConvTranspose1d(4, 2, 4, stride=3, padding=1, output_padding=2))
    out = ct(Tensor(x)).numpy()
    want = ref.conv_transpose_nd(x, ct.weight.numpy(), ct.bias.numpy(), (3,), (1,), (2,), (1,), 1)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    torch = pytest.importorskip("torch")
    _torch_check(_double(Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)),
                 torch.nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2).double(), x, torch)
    _torch_check(_double(ConvTranspose1d(4, 2, 4, stride=3, padding=1, output_padding=2)),
                 torch.nn.ConvTranspose1d(4, 2, 4, stride=3, padding=1, output_padding=2).double(), x, torch)


@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 5)])
def test_batchnorm1d_training_eval_and_running_stats(shape) -> None:
    bn = _double(BatchNorm1d(3, momentum=0.3))
    x = rnd(*shape, seed=5) * 2 + 1
    axes = (0,) if len(shape) == 2 else (0, 2)
    bshape = (1, 3) if len(shape) == 2 else (1, 3, 1)
    y = bn(Tensor(x)).numpy()
    realize_pending()
    mu, var = x.mean(axes), x.var(axes)
    np.testing.assert_allclose(y, (x - mu.reshape(bshape)) / np.sqrt(var.reshape(bshape) + 1e-5), rtol=1e-10)
    n = x.size // 3
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.3 * mu, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.7 + 0.3 * var * n / (n - 1), rtol=1e-12)
    bn.eval()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), (x - rm.reshape(bshape)) / np.sqrt(rv.reshape(bshape) + 1e-5),
                               rtol=1e-10)
    torch = pytest.importorskip("torch")
    _torch_check(_double(BatchNorm1d(3)), torch.nn.BatchNorm1d(3).double(), x, torch)


def test_rmsnorm_and_groupnorm_match_formulas_and_torch() -> None:
    x = rnd(2, 6, 4, seed=6) * 3
    rms = _double(RMSNorm(4, eps=1e-6))
    rms.weight.uop = Tensor(rnd(4, seed=7)).uop
    out, (gx,), wt = _value_and_grads(rms, [x])

    def rms_np(a: np.ndarray) -> np.ndarray:
        return a / np.sqrt((a * a).mean(-1, keepdims=True) + 1e-6) * rms.weight.numpy()

    np.testing.assert_allclose(out, rms_np(x), rtol=1e-10)
    np.testing.assert_allclose(gx, ref.fd_grad(lambda a: (rms_np(a) * wt).sum(), x), rtol=1e-5, atol=1e-7)
    gn = _double(GroupNorm(3, 6))
    gn.weight.uop, gn.bias.uop = Tensor(rnd(6, seed=8)).uop, Tensor(rnd(6, seed=9)).uop

    def gn_np(a: np.ndarray) -> np.ndarray:
        g = a.reshape(2, 3, -1)
        z = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(a.shape)
        return z * gn.weight.numpy().reshape(1, 6, 1) + gn.bias.numpy().reshape(1, 6, 1)

    out, (gx,), wt = _value_and_grads(gn, [x])
    np.testing.assert_allclose(out, gn_np(x), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gx, ref.fd_grad(lambda a: (gn_np(a) * wt).sum(), x), rtol=1e-5, atol=1e-7)
    # eps=None: the dtype's machine epsilon (float32: 2^-23), as torch
    tiny = np.full((1, 4), 1e-4, np.float32)
    got = RMSNorm(4)(Tensor(tiny)).numpy()
    np.testing.assert_allclose(got, tiny / np.sqrt(np.float32(1e-8) + np.finfo(np.float32).eps), rtol=1e-5)
    torch = pytest.importorskip("torch")
    _torch_check(_double(RMSNorm((6, 4), eps=1e-6)), torch.nn.RMSNorm((6, 4), eps=1e-6).double(), x, torch)
    _torch_check(_double(GroupNorm(2, 6)), torch.nn.GroupNorm(2, 6).double(), x, torch)
    _torch_check(_double(GroupNorm(3, 6, affine=False)), torch.nn.GroupNorm(3, 6, affine=False).double(), x, torch)


def _masks(L: int, S: int) -> dict[str, object]:
    rng = np.random.default_rng(3)
    allowed = rng.random((L, S)) > 0.3
    allowed[:, 0] = True  # every row keeps a key
    return {"none": None, "bool": allowed, "float": rng.standard_normal((L, S)), "causal": "causal"}


@pytest.mark.parametrize("kind", ["none", "bool", "float", "causal"])
def test_sdpa_matches_definition_and_finite_differences(kind: str) -> None:
    q, k, v = rnd(2, 3, 4, 5, seed=1), rnd(2, 3, 6, 5, seed=2), rnd(2, 3, 6, 3, seed=3)
    if kind == "causal":
        q = rnd(2, 3, 6, 5, seed=1)
    mask = _masks(q.shape[-2], 6)[kind]
    causal = kind == "causal"
    m = None if mask is None or causal else np.asarray(mask)
    out, (gq, gk, gv), wt = _value_and_grads(
        lambda Q, K, V: scaled_dot_product_attention(Q, K, V, None if m is None else Tensor(m), is_causal=causal,
                                                     scale=0.7), [q, k, v])

    def f(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return ref.sdpa(a, b, c, m, causal, 0.7)

    np.testing.assert_allclose(out, f(q, k, v), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gq, ref.fd_grad(lambda a: (f(a, k, v) * wt).sum(), q), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gk, ref.fd_grad(lambda a: (f(q, a, v) * wt).sum(), k), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gv, ref.fd_grad(lambda a: (f(q, k, a) * wt).sum(), v), rtol=1e-5, atol=1e-7)
    # the Tensor method is the same function, scale defaults to 1/sqrt(E)
    np.testing.assert_allclose(Tensor(q).scaled_dot_product_attention(Tensor(k), Tensor(v)).numpy(),
                               ref.sdpa(q, k, v), rtol=1e-10)
    torch = pytest.importorskip("torch")
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    tm = None if m is None else torch.tensor(m)
    tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, tm, is_causal=causal, scale=0.7)
    (tout * torch.tensor(wt)).sum().backward()
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    for ours, t in ((gq, tq), (gk, tk), (gv, tv)):
        np.testing.assert_allclose(ours, t.grad.numpy(), rtol=1e-9, atol=1e-11)


def test_sdpa_dropout_keeps_a_fraction_and_rescales() -> None:
    Tensor.manual_seed(4)
    S = 64
    q, k = Tensor(np.zeros((32, S, 8), np.float32)), Tensor(np.zeros((32, S, 8), np.float32))
    v = Tensor(np.eye(S, dtype=np.float32))  # the output rows are the (dropped) attention weights, each 1/S
    out = scaled_dot_product_attention(q, k, v, dropout_p=0.25).numpy()
    kept = out != 0
    assert 0.72 < kept.mean() < 0.78
    np.testing.assert_allclose(out[kept], 1 / S / 0.75, rtol=1e-6)
    with pytest.raises(ArgumentError, match="dropout_p"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(ShapeError, match=r"query \(32, 64, 8\), key \(32, 64, 8\), value \(64, 64\)|value"):
        scaled_dot_product_attention(q, k, Tensor(np.zeros((32, 5, 2), np.float32)))


def _mha_state(m: MultiheadAttention) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in get_state_dict(m).items()}


@pytest.mark.parametrize("masked", [False, True])
def test_multihead_attention_matches_definition(masked: bool) -> None:
    Tensor.manual_seed(2)
    m = _double(MultiheadAttention(8, 2, batch_first=True))
    m.in_proj_bias.uop = Tensor(rnd(24, seed=5)).uop
    sd = _mha_state(m)
    assert sorted(sd) == ["in_proj_bias", "in_proj_weight", "out_proj.bias", "out_proj.weight"]
    bound = np.sqrt(6 / (8 + 24))  # xavier_uniform over (3E, E), as torch
    assert np.all(np.abs(sd["in_proj_weight"]) <= bound) and np.abs(sd["in_proj_weight"]).max() > 0.8 * bound
    q, k, v = rnd(2, 3, 8, seed=1), rnd(2, 5, 8, seed=2), rnd(2, 5, 8, seed=3)
    mask = np.zeros((3, 5), bool)
    if masked:
        mask[:, 3:] = True
    wq = Tensor(q, requires_grad=True)
    out, weights = m(wq, Tensor(k), Tensor(v), attn_mask=Tensor(mask) if masked else None)
    wt = rnd(2, 3, 8, seed=4)
    (out * Tensor(wt)).sum().backward()
    args = (sd["in_proj_weight"], sd["in_proj_bias"], sd["out_proj.weight"], sd["out_proj.bias"], 2,
            mask if masked else None)
    want, want_w = ref.mha(q, k, v, *args)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), want_w, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(wq.grad.numpy(), ref.fd_grad(lambda a: (ref.mha(a, k, v, *args)[0] * wt).sum(), q),
                               rtol=1e-5, atol=1e-7)
    if masked:
        assert np.all(weights.numpy()[:, :, 3:] == 0)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_loads_torch_weights_and_matches(batch_first: bool) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(8, 4, batch_first=batch_first).double()
    with torch.no_grad():
        tm.in_proj_bias.copy_(torch.randn(24))
    m = MultiheadAttention(8, 4, batch_first=batch_first)
    load_state_dict(m, {k: v.numpy() for k, v in tm.state_dict().items()})
    _double(m)
    shape = (2, 5, 8) if batch_first else (5, 2, 8)
    x, kv = rnd(*shape, seed=1), rnd(*((2, 6, 8) if batch_first else (6, 2, 8)), seed=2)
    attn_mask = np.tril(np.ones((5, 6), bool), 1) == 0  # True = blocked (torch's module convention)
    pad = np.zeros((2, 6), bool)
    pad[1, 4:] = True
    xt, kt = Tensor(x, requires_grad=True), Tensor(kv, requires_grad=True)
    out, w = m(xt, kt, kt, key_padding_mask=Tensor(pad), attn_mask=Tensor(attn_mask), average_attn_weights=False)
    g = rnd(*out.shape, seed=3)
    (out * Tensor(g)).sum().backward()
    txt, tkt = torch.tensor(x, requires_grad=True), torch.tensor(kv, requires_grad=True)
    tout, tw = tm(txt, tkt, tkt, key_padding_mask=torch.tensor(pad), attn_mask=torch.tensor(attn_mask),
                  average_attn_weights=False)
    (tout * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(xt.grad.numpy(), txt.grad.numpy(), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(kt.grad.numpy(), tkt.grad.numpy(), rtol=1e-9, atol=1e-11)
    tparams = dict(tm.named_parameters())
    for k, t in get_state_dict(m).items():
        np.testing.assert_allclose(t.grad.numpy(), tparams[k].grad.numpy(), rtol=1e-9, atol=1e-11, err_msg=k)


def test_multihead_attention_unbatched_kdim_vdim_and_self_attention() -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    tm = torch.nn.MultiheadAttention(6, 2, kdim=4, vdim=3).double().eval()
    m = MultiheadAttention(6, 2, kdim=4, vdim=3)
    assert sorted(get_state_dict(m)) == sorted(tm.state_dict())
    load_state_dict(m, {k: v.numpy() for k, v in tm.state_dict().items()})
    _double(m)
    q, k, v = rnd(5, 6, seed=1), rnd(7, 4, seed=2), rnd(7, 3, seed=3)
    out, w = m(Tensor(q), Tensor(k), Tensor(v))
    tout, tw = tm(*(torch.tensor(a) for a in (q, k, v)))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-10, atol=1e-12)
    sa = MultiheadAttention(6, 3)
    x = rnd(4, 2, 6, seed=5)
    np.testing.assert_allclose(sa.forward(Tensor(x)).numpy(), sa(Tensor(x))[0].numpy(), rtol=1e-6)


def test_multihead_attention_dropout_in_training_only() -> None:
    Tensor.manual_seed(3)
    m = _double(MultiheadAttention(8, 2, dropout=0.5, batch_first=True))
    sd = _mha_state(m)
    x = rnd(4, 16, 8, seed=1)
    out, w = m(Tensor(x), Tensor(x), Tensor(x), average_attn_weights=False)
    w = w.numpy()  # (N, H, L, S), dropped and rescaled as torch returns them
    kept = w != 0
    assert 0.45 < kept.mean() < 0.55
    e = 8
    v = x @ sd["in_proj_weight"][2 * e:].T + sd["in_proj_bias"][2 * e:]
    vh = v.reshape(4, 16, 2, 4).transpose(0, 2, 1, 3)
    want = (w @ vh).transpose(0, 2, 1, 3).reshape(4, 16, 8) @ sd["out_proj.weight"].T + sd["out_proj.bias"]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-10, atol=1e-12)  # the output used those weights
    m.eval()
    out, w = m(Tensor(x), Tensor(x), Tensor(x))
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-12)  # no dropout in eval
    np.testing.assert_allclose(out.numpy(), ref.mha(x, x, x, sd["in_proj_weight"], sd["in_proj_bias"],
                                                    sd["out_proj.weight"], sd["out_proj.bias"], 2)[0], rtol=1e-10)


def test_layer_errors_name_the_layer_and_shapes() -> None:
    with pytest.raises(ShapeError, match=r"Conv1d: the input is \(2, 3, 5, 5\).*\(N, 4, L\)"):
        Conv1d(4, 2, 3)(Tensor(np.zeros((2, 3, 5, 5), np.float32)))
    with pytest.raises(ShapeError, match=r"ConvTranspose2d: the input is \(2, 3, 5\).*\(N, 4, H, W\)"):
        ConvTranspose2d(4, 2, 3)(Tensor(np.zeros((2, 3, 5), np.float32)))
    with pytest.raises(ShapeError, match="output_padding"):
        conv_transpose2d(Tensor(np.zeros((1, 2, 3, 3))), Tensor(np.zeros((2, 2, 3, 3))), stride=2, output_padding=2)
    with pytest.raises(ArgumentError, match="divisible by groups=4"):
        ConvTranspose2d(4, 6, 3, groups=4)
    with pytest.raises(ShapeError, match=r"BatchNorm1d: the input is \(2, 4\).*\(N, 3\)"):
        BatchNorm1d(3)(Tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(ShapeError, match=r"RMSNorm.*last axes must be \(4,\)"):
        RMSNorm(4)(Tensor(np.zeros((2, 5), np.float32)))
    with pytest.raises(ArgumentError, match="num_channels=6 must be divisible by num_groups=4"):
        GroupNorm(4, 6)
    with pytest.raises(ArgumentError, match="embed_dim=6 must be divisible by num_heads=4"):
        MultiheadAttention(6, 4)
    m = MultiheadAttention(8, 2)
    x = Tensor(np.zeros((3, 2, 8), np.float32))
    with pytest.raises(ShapeError, match=r"attn_mask \(2, 2\) must be \(3, 3\) or \(4, 3, 3\)"):
        m(x, x, x, attn_mask=Tensor(np.zeros((2, 2), bool)))
    with pytest.raises(ShapeError, match=r"query \(3, 2, 7\)"):
        m(Tensor(np.zeros((3, 2, 7), np.float32)))


def test_strided_conv_transpose2d_backward_from_a_plain_sum() -> None:
    """The loss's own gradient (a constant with no device of its own) flows into the strided transposed conv's
    VJP: each input element feeds k*k*Cout outputs, each weight element every input position."""
    x = Tensor(np.ones((1, 2, 3, 3), np.float32), requires_grad=True)
    w = Tensor(np.ones((2, 2, 2, 2), np.float32), requires_grad=True)
    conv_transpose2d(x, w, stride=2).sum().backward()
    assert x.grad is not None and w.grad is not None
    np.testing.assert_array_equal(x.grad.numpy(), np.full((1, 2, 3, 3), 8.0))
    np.testing.assert_array_equal(w.grad.numpy(), np.full((2, 2, 2, 2), 9.0))
