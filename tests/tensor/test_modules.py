"""tensor.modules and tensor.state: each layer's forward and gradients against torch.nn with the same weights
(numpy formulas where torch is missing), train/eval behaviour, BatchNorm's running statistics, state dicts and
safetensors round trips, and the errors for bad input.
"""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import DTypeError, ShapeError
from tensor import Tensor
from tensor.modules import (
    BatchNorm2d,
    Conv2d,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Sequential,
    cross_entropy,
    realize_pending,
)
from tensor.optim import SGD
from tensor.state import StateDictError, get_parameters, get_state_dict, load_state_dict, safe_load, safe_save


def rnd(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape)


def _grads_of(model, x: np.ndarray, w: np.ndarray):
    for t in get_parameters(model):
        t.grad = None
    xt = Tensor(x, requires_grad=True)
    out = model(xt)
    (out * Tensor(w)).sum().backward()
    return out.numpy(), xt.grad.numpy(), {k: t.grad.numpy() for k, t in get_state_dict(model).items()
                                         if t.requires_grad}


def _torch_check(ours, theirs, x, torch, tol=1e-10):
    """Copy our weights into the torch module, run both on x with a random output weighting, compare."""
    with torch.no_grad():
        for k, v in get_state_dict(ours).items():
            dict(theirs.named_parameters()).get(k, dict(theirs.named_buffers()).get(k)).copy_(torch.tensor(v.numpy()))
    out_shape = ours(Tensor(x)).shape
    w = rnd(*out_shape, seed=9)
    out, gx, gp = _grads_of(ours, x, w)
    tx = torch.tensor(x, requires_grad=True)
    tout = theirs(tx)
    (tout * torch.tensor(w)).sum().backward()
    np.testing.assert_allclose(out, tout.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=tol, atol=tol)
    for k, g in gp.items():
        np.testing.assert_allclose(g, dict(theirs.named_parameters())[k].grad.numpy(), rtol=tol, atol=tol,
                                   err_msg=k)


def _double(m):
    for t in get_state_dict(m).values():
        if t.dtype.is_float:
            t.uop = t.double().realize().uop
    return m


def _close(got: np.ndarray, want: np.ndarray, terms: np.ndarray) -> None:
    """`got` equals `want` up to float64 rounding of sums whose terms' magnitudes add up to `terms`."""
    err = np.abs(got - want)
    assert np.all(err <= 1e-12 * terms), f"max error {err.max():.3g} against terms {terms.flat[err.argmax()]:.3g}"


def test_linear_matches_formula_and_torch():
    lin = _double(Linear(5, 3))
    x, w = rnd(4, 5), rnd(4, 3, seed=1)
    W, b = lin.weight.numpy(), lin.bias.numpy()
    out, gx, gp = _grads_of(lin, x, w)
    # float64 rounding is relative to the terms summed, not to the sum: an entry whose terms cancel to near zero
    # differs by more than 1e-12 of itself when the summation order differs (Linear's init is not seeded)
    _close(out, x @ W.T + b, np.abs(x) @ np.abs(W.T) + np.abs(b))
    _close(gx, w @ W, np.abs(w) @ np.abs(W))
    _close(gp["weight"], w.T @ x, np.abs(w.T) @ np.abs(x))
    _close(gp["bias"], w.sum(0), np.abs(w).sum(0))
    assert np.all(np.abs(W) <= 1 / np.sqrt(5))  # torch's default init bound
    torch = pytest.importorskip("torch")
    _torch_check(lin, torch.nn.Linear(5, 3).double(), x, torch)


def test_conv2d_batchnorm_layernorm_embedding_match_torch():
    torch = pytest.importorskip("torch")
    x = rnd(2, 4, 6, 6, seed=3)
    _torch_check(_double(Conv2d(4, 6, 3, stride=2, padding=1, groups=2)),
                 torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2).double(), x, torch)
    _torch_check(_double(BatchNorm2d(4)), torch.nn.BatchNorm2d(4).double(), x, torch)
    _torch_check(_double(LayerNorm((6, 6))), torch.nn.LayerNorm((6, 6)).double(), x, torch)
    emb = _double(Embedding(7, 3))
    temb = torch.nn.Embedding(7, 3).double()
    with torch.no_grad():
        temb.weight.copy_(torch.tensor(emb.weight.numpy()))
    idx = np.array([[0, 6, 2], [2, 2, 5]])
    (emb(Tensor(idx.astype(np.int32))) * Tensor(rnd(2, 3, 3, seed=4))).sum().backward()
    (temb(torch.tensor(idx)) * torch.tensor(rnd(2, 3, 3, seed=4))).sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy(), temb.weight.grad.numpy(), rtol=1e-12)


def test_batchnorm_running_statistics_and_eval():
    bn = _double(BatchNorm2d(3, momentum=0.2))
    xs = [rnd(4, 3, 2, 2, seed=s) * (s + 1) + s for s in range(3)]
    rm, rv = np.zeros(3), np.ones(3)
    for x in xs:
        bn(Tensor(x))
        realize_pending()
        n = x.size // 3
        rm = 0.8 * rm + 0.2 * x.mean((0, 2, 3))
        rv = 0.8 * rv + 0.2 * x.var((0, 2, 3)) * n / (n - 1)
    np.testing.assert_allclose(bn.running_mean.numpy(), rm, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), rv, rtol=1e-12)
    assert bn.num_batches_tracked.item() == 3
    bn.eval()
    x = rnd(2, 3, 2, 2, seed=7)
    want = (x - rm.reshape(1, 3, 1, 1)) / np.sqrt(rv.reshape(1, 3, 1, 1) + 1e-5)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), want, rtol=1e-12)


def test_dropout_train_and_eval():
    Tensor.manual_seed(1)
    d = Dropout(0.25)
    x = Tensor(np.ones((200, 100)))
    y = d(x).numpy()
    kept = y != 0
    assert 0.7 < kept.mean() < 0.8
    np.testing.assert_allclose(y[kept], 1 / 0.75)
    seq = Sequential(d)
    seq.eval()
    assert d.training is False
    np.testing.assert_array_equal(seq(x).numpy(), x.numpy())
    with pytest.raises(ValueError, match=r"p=1\.5"):
        Dropout(1.5)


def test_state_dict_names_load_and_safetensors_round_trip(tmp_path):
    pytest.importorskip("safetensors")
    Tensor.manual_seed(0)
    m = Sequential(Linear(3, 4), Tensor.relu, BatchNorm2d(2), Linear(4, 2, bias=False))
    sd = m.state_dict()
    assert list(sd) == ["0.weight", "0.bias", "2.weight", "2.bias",
                        "2.running_mean", "2.running_var", "2.num_batches_tracked",
                        "3.weight"]
    assert [id(p) for p in get_parameters(m)] == [id(sd[k]) for k in sd if "running" not in k and "num" not in k]
    path = tmp_path / "m.safetensors"
    safe_save(sd, path)
    Tensor.manual_seed(5)
    m2 = Sequential(Linear(3, 4), Tensor.relu, BatchNorm2d(2), Linear(4, 2, bias=False))
    p2 = get_parameters(m2)
    assert not np.array_equal(m2.layers[0].weight.numpy(), sd["0.weight"].numpy())
    m2.load_state_dict(safe_load(path))
    for k, v in m2.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy(), err_msg=k)
        assert v.dtype == sd[k].dtype
    assert get_parameters(m2)[0] is p2[0]  # the same Tensor objects, rebound
    with pytest.raises(StateDictError, match=r"missing keys \['3.weight'\]"):
        load_state_dict(m2, {k: v for k, v in sd.items() if k != "3.weight"})
    with pytest.raises(ShapeError, match=r"0.bias.*\(5,\).*\(4,\)"):
        load_state_dict(m2, {**sd, "0.bias": np.zeros(5, np.float32)})
    load_state_dict(m2, {"0.bias": np.full(4, 2.0)}, strict=False)
    np.testing.assert_array_equal(m2.layers[0].bias.numpy(), np.full(4, 2.0, np.float32))


def test_bad_inputs_name_the_layer_and_shapes():
    with pytest.raises(ShapeError, match=r"Linear: the input is \(2, 4\).*3 features"):
        Linear(3, 2)(Tensor(np.zeros((2, 4), np.float32)))
    with pytest.raises(DTypeError, match=r"Linear.*int32"):
        Linear(3, 2)(Tensor(np.zeros((2, 3), np.int32)))
    with pytest.raises(ShapeError, match=r"Conv2d.*\(N, 2, H, W\)"):
        Conv2d(2, 2, 3)(Tensor(np.zeros((1, 3, 5, 5), np.float32)))
    with pytest.raises(DTypeError, match="Embedding: indices must be an integer"):
        Embedding(3, 2)(Tensor(np.zeros(2, np.float32)))
    with pytest.raises(ShapeError, match="cross_entropy"):
        cross_entropy(Tensor(np.zeros((2, 3), np.float32)), Tensor(np.zeros(3, np.int32)))


def test_cross_entropy_matches_torch_with_label_smoothing():
    logits, target = rnd(5, 4, seed=2), np.array([0, 3, 1, 1, 2])
    lt = Tensor(logits, requires_grad=True)
    loss = cross_entropy(lt, Tensor(target.astype(np.int32)), label_smoothing=0.1)
    loss.backward()
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    q = np.eye(4)[target] * 0.9 + 0.1 / 4
    np.testing.assert_allclose(loss.item(), -(q * logp).sum() / 5, rtol=1e-12)
    torch = pytest.importorskip("torch")
    tl = torch.tensor(logits, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tl, torch.tensor(target), label_smoothing=0.1)
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(lt.grad.numpy(), tl.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("ignore", [None, -100, 3])
def test_cross_entropy_matches_torch_float32_with_ignore_index(smoothing: float, ignore: int | None):
    torch = pytest.importorskip("torch")
    n, c = 256, 10
    logits = rnd(n, c, seed=4).astype(np.float32) * 3
    target = np.random.default_rng(5).integers(0, c, n)
    if ignore is not None:
        target[::7] = ignore  # every 7th row ignored (for ignore=3, also the rows whose class is 3)
    kw = {} if ignore is None else {"ignore_index": ignore}
    lt = Tensor(logits, requires_grad=True)
    loss = cross_entropy(lt, Tensor(target.astype(np.int32)), label_smoothing=smoothing, **kw)
    loss.backward()
    tl = torch.tensor(logits, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tl, torch.tensor(target), label_smoothing=smoothing, **kw)
    tloss.backward()
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    assert lt.grad is not None
    np.testing.assert_allclose(lt.grad.numpy(), tl.grad.numpy(), rtol=1e-4, atol=1e-7)


def test_cross_entropy_reads_one_logit_per_row():
    """The target's log-probability is a gather: no kernel of N x C work (forward or backward) reads the target,
    as a one-hot mask (target == arange(C)) contraction would; those kernels are log_softmax's and its gradient's."""
    from lower import schedule
    from lower.optimize import axes

    n, c = 64, 3000
    t = Tensor(np.random.default_rng(0).integers(0, c, n).astype(np.int32)).realize()
    x = Tensor(rnd(n, c, seed=1).astype(np.float32), requires_grad=True)
    loss = cross_entropy(x, t)
    loss.backward()
    assert x.grad is not None
    slot = t.uop.buf_arg.slot
    items, _ = schedule([loss.uop, x.grad.uop])
    big = [it for it in items if it.ast is not None and np.prod([int(r.src[0].value) for r in axes(it.ast)]) >= n * c]
    assert big
    for it in big:
        assert all(b.buf_arg.slot != slot for b in it.bufs), it.name


def test_optimizer_step_realizes_batchnorm_statistics():
    bn = BatchNorm2d(2)
    x = Tensor(rnd(3, 2, 2, 2, seed=1).astype(np.float32))
    opt = SGD(bn.parameters(), lr=0.1)
    bn(x).sum().backward()
    assert not bn.running_mean.is_realized
    opt.step()
    assert bn.running_mean.is_realized and bn.num_batches_tracked.is_realized
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.numpy().mean((0, 2, 3)), rtol=1e-6)
