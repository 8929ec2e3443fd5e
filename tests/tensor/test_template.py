"""tensor.template and the optimizers' templates of their updates (tensor.optim `_updated`): a graph rebuilt from a
template is the very graph (the same hash-consed UOps) its building code makes over the real inputs; the
optimizers' templates are reused while the key holds (shapes, dtypes, device, the Python branches of `_update`)
and made anew when it changes, and the results match numpy references across such changes."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import Tensor
from tensor.optim import LAMB, SGD, Adam, AdamW
from tensor.template import Template
from tests.tensor.test_optim import CONFIGS, _loss_grad, _our_loss, _target, np_adam


def _param(k: int, shape: tuple) -> Tensor:
    return Tensor._wrap(Template.placeholder(k, dtypes.float32, shape, "cpu"), "cpu")


def _f(a: Tensor, b: Tensor, s: Tensor) -> list[Tensor]:
    t = a * (1.0 - s) + b.sqrt() / (s + 2.0)
    return [t, (t * t).sum(axis=0), -s]


@pytest.mark.parametrize("shared", [0, 1])
def test_rebuild_is_the_direct_build(shared: int) -> None:
    pa, pb, ps = _param(1, (3, 4)), _param(2, (3, 4)), _param(0, ())
    outs = _f(pa, pb, ps)
    params = [ps.uop, pa.uop, pb.uop] if shared else [pa.uop, pb.uop, ps.uop]
    t = Template.of([o.uop for o in outs], params, shared)
    assert t is not None
    rng = np.random.default_rng(0)
    for _ in range(3):  # new inputs each time (the shared one too)
        a, b, s = (Tensor(rng.uniform(0.5, 1, sh).astype(np.float32)) for sh in ((3, 4), (3, 4), ()))
        direct = [o.uop for o in _f(a, b, s)]
        values = [s.uop, a.uop, b.uop] if shared else [a.uop, b.uop, s.uop]
        got = t(values)
        assert all(x is y for x, y in zip(got, direct, strict=True))
        again = t(values)  # the shared part kept from the call before: the same nodes
        assert all(x is y for x, y in zip(again, direct, strict=True))
        an, bn, sn = a.numpy(), b.numpy(), s.numpy()
        np.testing.assert_allclose(Tensor._wrap(got[0], "cpu").numpy(), an * (1 - sn) + np.sqrt(bn) / (sn + 2),
                                   rtol=1e-6)


def test_a_graph_with_a_buffer_of_its_own_is_refused() -> None:
    pa = _param(0, (4,))
    made = pa * Tensor(np.arange(4, dtype=np.float32))  # host data: may differ from call to call
    assert Template.of([made.uop], [pa.uop]) is None
    assert Template.of([(pa * 2.0).uop], [pa.uop]) is not None


def _grads(opt, ps: list[Tensor], k: int) -> None:
    opt.zero_grad()
    _our_loss(ps, [t.astype(np.float32) for t in _target(k)]).backward()


@pytest.mark.parametrize("name,cls,ref,kwargs,torch_name", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_optimizer_update_from_template_is_the_direct_update(name, cls, ref, kwargs, torch_name) -> None:
    """Each parameter's new value and state, rebuilt from the template, are the UOps `_update` builds itself; one
    template per parameter shape and dtype."""
    rng = np.random.default_rng(1)
    shapes = [(3, 4), (4,), (), (3, 4)]
    ps = [Tensor(rng.uniform(-1, 1, s).astype(np.float32), requires_grad=True) for s in shapes]
    ps.append(Tensor(rng.uniform(-1, 1, (4,)), requires_grad=True))  # float64
    opt = cls(ps, lr=0.1, **kwargs)
    opt.zero_grad()
    total = None
    for p in ps:
        term = ((p - 0.25) ** 3).sum()
        total = term if total is None else total + term.cast(total.dtype)
    total.backward()
    c32 = {k: v.cast(ps[0].dtype) for k, v in opt._scalars("cpu").items()}
    c64 = {k: v.cast(ps[-1].dtype) for k, v in opt._scalars("cpu").items()}
    for i, p in enumerate(ps):
        c = c64 if p.dtype is not ps[0].dtype else c32
        g = p.grad
        assert g is not None
        direct, dstate = opt._update(i, p, g, opt.state[i], dict(c))
        built, bstate = opt._updated(i, p, g, opt.state[i], dict(c))
        assert built.uop is direct.uop
        assert list(bstate) == list(dstate) and all(bstate[k].uop is dstate[k].uop for k in dstate)
    assert len(opt._templates) == 4  # (3, 4), (4,), () float32 and (4,) float64
    assert all(t is not None for t, _ in opt._templates.values())


def test_templates_are_reused_and_made_anew_when_a_branch_changes() -> None:
    """Adam's L2 weight decay is a Python branch of its update: turned on after two steps, the update gets a new
    template (and the steps still match numpy's Adam); a new learning rate or beta is data, the same template."""
    rng = np.random.default_rng(2)
    data = [rng.uniform(-1, 1, s) for s in ((3, 4), (4,))]
    ps = [Tensor(d, requires_grad=True) for d in data]
    opt = Adam(ps, lr=0.1)
    ref = [d.copy() for d in data]
    states: list[dict] = [{} for _ in ps]
    for k, (lr, wd, b1) in enumerate([(0.1, 0.0, 0.9), (0.05, 0.0, 0.8), (0.02, 0.1, 0.8), (0.03, 0.2, 0.7)]):
        opt.lr, opt.weight_decay, opt.b1 = lr, wd, b1
        opt.zero_grad()
        _our_loss(ps, _target(k)[:2]).backward()
        opt.step()
        gs = _loss_grad(ref, _target(k)[:2])
        ref = [np_adam(p, g, st, k + 1, lr, betas=(b1, 0.999), weight_decay=wd) for p, g, st in
               zip(ref, gs, states, strict=True)]
        for a, b in zip(ps, ref, strict=True):
            np.testing.assert_allclose(a.numpy(), b, rtol=1e-10, atol=1e-12, err_msg=f"step {k}")
        assert len(opt._templates) == (2 if k < 2 else 4)  # two shapes; the wd branch adds two more


def test_subclass_update_is_called_every_step() -> None:
    """A subclass's `_update` may read anything: it is not templated."""
    calls: list[int] = []

    class Halved(SGD):
        def _update(self, i, p, g, s, c):
            calls.append(i)
            return p - c["lr"] * g * 0.5, {}

    w = Tensor(np.array([1.0, -2.0]), requires_grad=True)
    opt = Halved([w], lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    assert calls == [0, 0, 0] and not opt._templates
    np.testing.assert_allclose(w.numpy(), np.array([1.0, -2.0]) * 0.5 ** 3)  # w - 0.5 * (2w) * 0.5


@pytest.mark.parametrize("cls", [SGD, Adam, AdamW, LAMB])
def test_template_graph_has_no_detach_and_no_own_buffer(cls) -> None:
    """The update is built with gradients on (no DETACH per op) over the parameter's, gradient's, state's and
    scalars' nodes only."""
    w = Tensor(np.ones((2, 3), np.float32), requires_grad=True)
    opt = cls([w], lr=0.1, **({"momentum": 0.9} if cls is SGD else {}))
    (w * w).sum().backward()
    new = opt._assign_updates()
    graph = UOp.toposort_of([t.uop for t in new])
    assert sum(u.op is Ops.DETACH for u in graph) == 1  # the gradient's own (backward detaches it once)
    opt.step()  # realizes the pending assignments


# x shape, w shape, stride, padding, dilation, groups: the stem conv's g is the shape of the transposed conv's own
# PARAM 0 (a placeholder of the same slot would be taken for a node of that body)
CONVS = [((2, 3, 16, 16), (32, 3, 7, 7), 2, 3, 1, 1), ((2, 4, 9, 9), (8, 4, 3, 3), 1, 1, 1, 1),
         ((1, 4, 10, 10), (8, 2, 3, 3), 2, ((1, 0), (2, 1)), 1, 2), ((2, 6, 8, 8), (6, 1, 3, 3), 1, 1, 2, 6),
         ((3, 1, 8, 8), (8, 1, 3, 3), 1, 1, 1, 1)]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONVS)
def test_conv_vjp_from_template_is_the_direct_vjp(xs, ws, stride, padding, dilation, groups) -> None:
    from tensor import conv

    rng = np.random.default_rng(3)
    x = Tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=True)
    w = Tensor(rng.standard_normal(ws).astype(np.float32), requires_grad=True)
    y = x.conv2d(w, None, stride=stride, padding=padding, dilation=dilation, groups=groups)
    fn = y.uop
    while fn.op is not Ops.FUNCTION:
        fn = fn.src[0]
    g = Tensor(rng.standard_normal(y.shape).astype(np.float32)).uop
    direct = conv._conv_grads(g, fn.src[1:], fn.arg.params)
    before = conv._vjp_template.cache_info().currsize
    for _ in range(2):  # made, then reused
        built = conv._conv_vjp(g, fn.src[1:], fn.arg.params)
        assert all(a is b for a, b in zip(built, direct, strict=True))
    assert conv._vjp_template.cache_info().currsize <= before + 1
    assert conv._conv_body(x.uop, w.uop, x.dtype, fn.arg.params) is fn.src[0].src[0]  # the forward's body, kept
