"""tensor.optim against torch.optim (where torch is installed) and against numpy references written here (always):
each step's parameters and state, for SGD (momentum, dampening, nesterov, weight decay), Adam (L2 weight decay),
AdamW and LAMB (numpy only: torch has none). The scalars (learning rate, betas, ...) change between steps
without compiling a kernel: counted in the lowering's kernel cache.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from rewrite.errors import DTypeError, GradientError
from tensor import Tensor
from tensor.optim import LAMB, SGD, Adam, AdamW

SHAPES = [(3, 4), (4,), ()]
_kernels = importlib.import_module("lower.realize")._compiled  # the module: `lower.realize` is also a function


def _data(seed: int, dtype=np.float64) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype(dtype) for s in SHAPES]


def _target(seed: int) -> list[np.ndarray]:
    return _data(seed + 100)


def _loss_grad(p: list[np.ndarray], tgt: list[np.ndarray]) -> list[np.ndarray]:
    """The gradient of sum((p - tgt)**3 + p**2) per parameter (so gradients change sign and size over steps)."""
    return [3 * (a - t) ** 2 + 2 * a for a, t in zip(p, tgt, strict=True)]


def _our_loss(ps: list[Tensor], tgt: list[np.ndarray]) -> Tensor:
    total = None
    for p, t in zip(ps, tgt, strict=True):
        term = ((p - Tensor(t)) ** 3 + p * p).sum()
        total = term if total is None else total + term
    return total


# ---------------------------------------------------------------- numpy references (torch's documented algorithms)


def np_sgd(p, g, st, t, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        b = g.copy() if t == 1 else momentum * st["b"] + (1 - dampening) * g
        st["b"] = b
        g = g + momentum * b if nesterov else b
    return p - lr * g


def np_adam(p, g, st, t, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    b1, b2 = betas
    if decoupled:
        p = p * (1 - lr * weight_decay)
    elif weight_decay:
        g = g + weight_decay * p
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    mh, vh = st["m"] / (1 - b1**t), st["v"] / (1 - b2**t)
    return p - lr * mh / (np.sqrt(vh) + eps)


def np_lamb(p, g, st, t, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
    b1, b2 = betas
    st["m"] = b1 * st.get("m", 0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0) + (1 - b2) * g * g
    r = (st["m"] / (1 - b1**t)) / (np.sqrt(st["v"] / (1 - b2**t)) + eps) + weight_decay * p
    pn, rn = np.linalg.norm(p), np.linalg.norm(r)
    trust = pn / rn if pn > 0 and rn > 0 else 1.0
    return p - lr * trust * r


# name, our class, numpy reference, kwargs, torch class name (None: no torch counterpart)
CONFIGS = [
    ("sgd", SGD, np_sgd, {}, "SGD"),
    ("sgd-wd", SGD, np_sgd, {"weight_decay": 0.1}, "SGD"),
    ("sgd-momentum-dampening", SGD, np_sgd, {"momentum": 0.9, "dampening": 0.3}, "SGD"),
    ("sgd-nesterov-wd", SGD, np_sgd, {"momentum": 0.8, "nesterov": True, "weight_decay": 0.05}, "SGD"),
    ("adam", Adam, np_adam, {}, "Adam"),
    ("adam-l2", Adam, np_adam, {"betas": (0.8, 0.99), "eps": 1e-6, "weight_decay": 0.1}, "Adam"),
    ("adamw", AdamW, lambda *a, **k: np_adam(*a, decoupled=True, **{"weight_decay": 0.01, **k}), {}, "AdamW"),
    ("adamw-wd", AdamW, lambda *a, **k: np_adam(*a, decoupled=True, **k), {"weight_decay": 0.2}, "AdamW"),
    ("lamb", LAMB, np_lamb, {"weight_decay": 0.05}, None),
]
LRS = [0.1, 0.05, 0.02, 0.2]  # a schedule: changes at every step


def _run_ours(cls, kwargs, dtype=np.float64, lrs=LRS):
    ps = [Tensor(d, requires_grad=True) for d in _data(1, dtype)]
    opt = cls(ps, lr=lrs[0], **kwargs)
    history = []
    for k, lr in enumerate(lrs):
        opt.lr = lr
        opt.zero_grad()
        _our_loss(ps, [t.astype(dtype) for t in _target(k)]).backward()
        opt.step()
        history.append([p.numpy() for p in ps])
    return history, opt


def _run_numpy(ref, kwargs):
    ps = _data(1)
    states = [{} for _ in ps]
    history = []
    for k, lr in enumerate(LRS):
        gs = _loss_grad(ps, _target(k))
        ps = [ref(p, g, st, k + 1, lr, **kwargs) for p, g, st in zip(ps, gs, states, strict=True)]
        history.append(ps)
    return history


@pytest.mark.parametrize("name,cls,ref,kwargs,torch_name", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_steps_match_numpy_reference(name, cls, ref, kwargs, torch_name):
    ours, _ = _run_ours(cls, kwargs)
    want = _run_numpy(ref, kwargs)
    for k, (o, w) in enumerate(zip(ours, want, strict=True)):
        for a, b in zip(o, w, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=f"{name} step {k}")


@pytest.mark.parametrize("name,cls,ref,kwargs,torch_name", [c for c in CONFIGS if c[4]],
                         ids=[c[0] for c in CONFIGS if c[4]])
@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_steps_match_torch(name, cls, ref, kwargs, torch_name, dtype, tol):
    torch = pytest.importorskip("torch")
    ours, _ = _run_ours(cls, kwargs, dtype)
    tps = [torch.tensor(d, requires_grad=True) for d in _data(1, dtype)]
    opt = getattr(torch.optim, torch_name)(tps, lr=LRS[0], **kwargs)
    for k, lr in enumerate(LRS):
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        loss = sum(((p - torch.tensor(t.astype(dtype))) ** 3 + p * p).sum() for p, t in zip(tps, _target(k),
                                                                                        strict=True))
        loss.backward()
        opt.step()
        for a, p in zip(ours[k], tps, strict=True):
            np.testing.assert_allclose(a, p.detach().numpy(), rtol=tol, atol=tol, err_msg=f"{name} step {k}")


@pytest.mark.parametrize("cls,kwargs", [(SGD, {"momentum": 0.9, "nesterov": True}), (AdamW, {}), (LAMB, {})])
def test_changing_scalars_compiles_nothing(cls, kwargs):
    """After two steps (the first SGD step has its own dampening, all steps share one structure), new learning
    rates, betas and weight decay compile no kernel."""
    ps = [Tensor(d.astype(np.float32), requires_grad=True) for d in _data(3)]
    opt = cls(ps, lr=0.1, **kwargs)
    counts = []
    for k, lr in enumerate([0.1, 0.01, 0.3, 0.003, 0.07]):
        opt.lr = lr
        if isinstance(opt, Adam):
            opt.b1, opt.weight_decay = 0.9 - 0.1 * k, 0.01 * k
        else:
            opt.momentum = 0.9 - 0.1 * k
        opt.zero_grad()
        _our_loss(ps, [t.astype(np.float32) for t in _target(k)]).backward()
        opt.step()
        counts.append(len(_kernels))
    assert counts[1] > 0
    assert counts[-1] == counts[1], counts


@pytest.mark.parametrize("cls,kwargs", [(AdamW, {}), (Adam, {"weight_decay": 0.1}),
                                        (SGD, {"momentum": 0.9, "dampening": 0.1})])
def test_scalar_only_values_built_once_per_step(cls, kwargs, monkeypatch):
    """What an update computes from the scalars alone (`1 - b1`, `1 - lr*wd`) is built once per step and dtype, not
    once per parameter; the update graphs are the ones built per parameter (the same UOps)."""
    from tensor.optim import Optimizer

    made: list[str] = []
    real = Optimizer._once

    def counting(c, key, make):
        def spy():
            made.append(key)
            return make()
        return real(c, key, spy)

    monkeypatch.setattr(Optimizer, "_once", staticmethod(counting))
    ps = [Tensor(d.astype(np.float32), requires_grad=True) for d in _data(4)]
    ps.append(Tensor(_data(5)[0], requires_grad=True))  # float64: its own dtype, its own values
    opt = cls(ps, lr=0.1, **kwargs)
    _our_loss(ps, [t.astype(np.float32) for t in _target(4)[:3]] + [_target(5)[0]]).backward()
    new = opt._assign_updates()
    assert made and len(made) == 2 * len(set(made))  # each key once per dtype (float32, float64)
    assert len(new) == len(ps) * (1 + len(opt._STATE))
    # sharing them builds the very nodes (UOps are hash-consed) that each parameter building its own would
    c = {k: v.cast(ps[0].dtype) for k, v in opt._scalars(ps[0].device).items()}
    shared = dict(c)
    for i in range(3):
        g = ps[i].grad
        assert g is not None
        alone, _ = opt._update(i, ps[i], g, opt.state[i], dict(c))
        together, _ = opt._update(i, ps[i], g, opt.state[i], shared)
        assert together.uop is alone.uop


def test_step_realizes_loss_too_and_params_keep_identity():
    w = Tensor(np.array([1.0, -2.0]), requires_grad=True)
    opt = SGD([w], lr=0.5)
    loss = (w * w).sum()
    loss.backward()
    opt.step(loss)
    assert loss.is_realized and loss.item() == 5.0
    np.testing.assert_allclose(w.numpy(), [0.0, 0.0])  # w - 0.5 * 2w
    assert opt.params[0] is w and w.requires_grad


def test_bad_arguments_raise_clear_errors():
    w = Tensor(np.zeros(2), requires_grad=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        SGD([], lr=0.1)
    with pytest.raises(DTypeError, match="int32"):
        SGD([Tensor(np.zeros(2, np.int32))], lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match=r"betas\[1\]=1.0"):
        Adam([w], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr=-1"):
        AdamW([w], lr=-1)
    with pytest.raises(GradientError, match="backward"):
        Adam([w]).step()
    opt = SGD([w], lr=0.1)
    opt.lr = float("nan")
    (w * w).sum().backward()
    with pytest.raises(ValueError, match="lr=nan"):
        opt.step()
