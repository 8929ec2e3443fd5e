"""Optimizers: SGD (momentum, dampening, nesterov, weight decay), Adam, AdamW and LAMB, with torch's semantics.

A step builds each parameter's update (and its state's: momentum buffers, moments) as one lazy graph under
no_grad() and assigns it (tensor.inplace): one realize writes every parameter's and state's new value into its
own buffer, so a step allocates no parameter-sized memory, and the scheduler fuses the elementwise updates. The
gradients are realized in the same realize (they read the old parameters, so they are computed before the
stores overwrite them).

Scalars never reach a kernel as constants: the learning rate, the betas, epsilon, weight decay and the
per-step bias corrections are read from one small host buffer uploaded at every step. A kernel is compiled for
the structure of the step, and a graph with the same structure replays the cached plan, so changing the
learning rate (a schedule) or any other hyperparameter between steps compiles nothing. The scalars are kept in
the widest float dtype of the parameters, so float64 training is exact to float64. For parameters on a device
tuple (data-parallel) the host buffer is a replicated BUFFER on the tuple, each device's shard filled directly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import cast

import numpy as np

import tensor.tensor as tt
from rewrite import DType, dtypes
from rewrite.engine import collector_paused
from rewrite.errors import DTypeError, GradientError
from rewrite.uop import UOp
from tensor import jit
from tensor.autograd import no_grad
from tensor.helpers import Device
from tensor.template import Template

Tensor = tt.Tensor


def _check_params(params: Iterable[Tensor], what: str) -> list[Tensor]:
    ps = list(dict.fromkeys(params))  # a parameter listed twice is updated once
    if not ps:
        raise ValueError(f"{what}: got an empty parameter list; pass the model's parameters "
                         f"(tensor.state.get_parameters(model))")
    for i, p in enumerate(ps):
        if not isinstance(p, Tensor):
            raise TypeError(f"{what}: parameter {i} is a {type(p).__name__}, not a Tensor")
        if not p.dtype.is_float:
            raise DTypeError(f"{what}: parameter {i} is {p.dtype.name} {list(p.shape)}; only floating-point "
                             f"tensors can be optimized")
        if not p.requires_grad:
            p.requires_grad = True
    return ps


def _check_range(what: str, name: str, value: float, lo: float, hi: float, hi_open: bool = False) -> None:
    ok = lo <= value < hi if hi_open else lo <= value <= hi
    if not ok or math.isnan(value):
        bound = f"[{lo}, {hi})" if hi_open else f"[{lo}, {hi}]"
        raise ValueError(f"{what}: {name}={value} is outside {bound}")


class Optimizer:
    """The base: `params`, `zero_grad()`, `step()`; subclasses name their scalars (`_SCALARS`) and build the
    update of one parameter from its gradient, its state and the scalars (`_update`)."""

    _SCALARS: tuple[str, ...] = ("lr",)
    _STATE: tuple[str, ...] = ()

    def __init__(self, params: Iterable[Tensor], lr: float) -> None:
        what = type(self).__name__
        self.params = _check_params(params, what)
        self.lr = lr
        self.steps = 0  # completed steps (Adam's t - 1)
        self.dtype: DType = max((p.dtype for p in self.params), key=lambda d: d.itemsize)
        if self.dtype.itemsize < 4:
            self.dtype = dtypes.float32
        # tensor.template's of `_update` by key (`_updated`), and the scalars' placeholders they are built over
        self._templates: dict[tuple, tuple[Template | None, tuple[str, ...]]] = {}
        self._stand_ins: dict[tuple, dict[str, UOp]] = {}
        self.state: list[dict[str, Tensor]] = [
            {k: Tensor.zeros(*p.shape, dtype=p.dtype, device=p.device).realize() for k in self._STATE}
            for p in self.params]

    def zero_grad(self) -> None:
        """Forget the accumulated gradients (each parameter's .grad becomes None)."""
        for p in self.params:
            p.grad = None

    def _scalar_values(self) -> dict[str, float]:
        return {k: float(getattr(self, k)) for k in self._SCALARS}

    def _scalar_array(self) -> np.ndarray:
        vals = self._scalar_values()
        for k, v in vals.items():
            if not math.isfinite(v):
                raise ValueError(f"{type(self).__name__}: {k}={v} is not finite")
        return np.array(list(vals.values()), dtype=_np_dtype(self.dtype))

    def _scalars(self, device: Device) -> dict[str, Tensor]:
        """This step's scalars as 0-d tensors, all read from one host buffer (new data, same structure). Under a
        tensor.jit capture the buffer is a host input: each replay stores the scalars of its step there."""
        arr = self._scalar_array()
        buf = _replicated_host(arr, device) if isinstance(device, tuple) else Tensor(arr, device=device)
        jit.host_input(buf, self._scalar_array)
        return {k: buf[i] for i, k in enumerate(self._SCALARS)}

    def _update(self, i: int, p: Tensor, g: Tensor, s: dict[str, Tensor], c: dict[str, Tensor]
                ) -> tuple[Tensor, dict[str, Tensor]]:
        raise NotImplementedError

    @staticmethod
    def _once(c: dict[str, Tensor], key: str, make: Callable[[], Tensor]) -> Tensor:
        """A value computed from the scalars `c` alone (`1 - b1`), kept in `c` under `key`: the parameters of one
        device and dtype share `c`, so it is built once per step."""
        if (v := c.get(key)) is None:
            v = c[key] = make()
        return v

    def _branches(self) -> tuple:
        """What `_update` decides in Python from the hyperparameters (their values reach the graph through the
        scalars' buffer, but `if self.weight_decay:` changes its structure): part of its templates' key."""
        return ()

    def _updated(self, i: int, p: Tensor, g: Tensor, s: dict[str, Tensor], c: dict[str, Tensor]
                 ) -> tuple[Tensor, dict[str, Tensor]]:
        """`_update(i, p, g, s, c)`. For the optimizers of this module, whose `_update` branches on nothing but
        `_branches()` and its inputs' shapes, dtypes and device, it is built once per such key over placeholders
        and rebuilt from that template (tensor.template) at every step: the same graph, a few times faster than
        its Tensor ops (the step's largest part of building after the model's own). A subclass's `_update` may
        read anything, so it is called every time (as are updates on a device tuple)."""
        if type(self) not in _TEMPLATED or not isinstance(p.device, str):
            return self._update(i, p, g, s, c)
        scalars = tuple((k, c[k].dtype) for k in self._SCALARS)
        key = (self._branches(), p.shape, p.dtype, p.device, g.shape, g.dtype,
               tuple((k, t.shape, t.dtype, t.device) for k, t in s.items()), scalars)
        if (made := self._templates.get(key)) is None:
            if len(self._templates) >= _MAX_TEMPLATES:
                self._templates.clear()
            made = self._templates[key] = self._template(i, p, g, s, scalars)
        t, keys = made
        if t is None:
            return self._update(i, p, g, s, c)
        out = t([*(c[k].uop for k in self._SCALARS), p.uop, g.uop, *(v.uop for v in s.values())])
        return Tensor._wrap(out[0], p.device), {k: Tensor._wrap(u, p.device) for k, u in zip(keys, out[1:],
                                                                                            strict=True)}

    def _template(self, i: int, p: Tensor, g: Tensor, s: dict[str, Tensor], scalars: tuple
                  ) -> tuple[Template | None, tuple[str, ...]]:
        """`_update` traced over placeholders: the scalars' (one dict per device and dtypes, so what `_once` makes
        of them is shared by every template, as by every parameter), then p, g and the state's."""
        dev = cast(str, p.device)
        if (known := self._stand_ins.get((dev, scalars))) is None:
            known = self._stand_ins[(dev, scalars)] = {k: Template.placeholder(j, dt, (), dev)
                                                       for j, (k, dt) in enumerate(scalars)}
        cs = {k: Tensor._wrap(u, dev) for k, u in known.items()}
        n = len(scalars)
        ph = [Tensor._wrap(Template.placeholder(n + j, t.dtype, t.shape, dev), dev)
              for j, t in enumerate((p, g, *s.values()))]
        ps = dict(zip(s, ph[2:], strict=True))
        np_, ns = self._update(i, ph[0], ph[1], ps, cs)
        known.update((k, t.uop) for k, t in cs.items())  # with what `_once` made: the next trace's too
        params = [known[k] for k, _ in scalars] + [t.uop for t in ph]
        return Template.of([np_.uop, *(v.uop for v in ns.values())], params, shared=n), tuple(ns)

    def _assign_updates(self) -> list[Tensor]:
        """Assign every parameter's and state's new value (lazy); returns the assigned tensors. The values'
        graphs live only in the assignments: no lazy tensor of this step outlives it to read the old buffers."""
        new: list[tuple[Tensor, Tensor]] = []
        # the values are built with gradients on: no gradient is ever taken of them (they only feed the
        # assignments), and under no_grad() every op's result would be one more DETACH node, which the graph's
        # walks (backward's, the realize's key) then pay for at every step
        scal: dict[Device, dict[str, Tensor]] = {}
        # the scalars in a parameter's dtype, one dict per device and dtype: what `_once` makes of them alone
        # is then made once per step, not once per parameter (the same graph either way: UOps are hash-consed)
        typed: dict[tuple[Device, DType], dict[str, Tensor]] = {}
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            c = scal.get(p.device)
            if c is None:
                c = scal[p.device] = self._scalars(p.device)
            if (cp := typed.get((p.device, p.dtype))) is None:
                cp = typed[(p.device, p.dtype)] = {k: v.cast(p.dtype) if v.dtype is not p.dtype else v
                                                   for k, v in c.items()}
            g = p.grad if p.grad.dtype is p.dtype else p.grad.cast(p.dtype)
            np_, ns = self._updated(i, p, g, self.state[i], cp)
            new.append((p, np_))
            new.extend((self.state[i][k], v) for k, v in ns.items())
        with no_grad():  # in place: each parameter's and state's buffer is overwritten, none allocated
            for t, v in new:
                t.assign(v)
        return [t for t, _ in new]

    def step(self, *also: Tensor) -> None:
        """Apply one update to every parameter that has a gradient, realizing the new parameters and state, `also`
        (e.g. the loss) and the modules' pending buffers (BatchNorm's running statistics) in one realize."""
        what = type(self).__name__
        missing = [i for i, p in enumerate(self.params) if p.grad is None]
        if len(missing) == len(self.params):
            raise GradientError(f"{what}.step: no parameter has a gradient; call loss.backward() first")
        from tensor.modules import pending_buffers

        # the update's graph and the realize make no reference cycles: the collector is kept from traversing the
        # step's whole graph (the forward's and backward's too) at each young collection (as in graph_rewrite)
        with collector_paused():
            targets = self._assign_updates()
            # the gradients are realized too: they read the old parameters, and a lazy reader of a buffer that is
            # overwritten would get a snapshot copy of it (tensor.inplace)
            grads = [p.grad for p in self.params if p.grad is not None and not p.grad.is_realized]
            Tensor.realize(*targets, *grads, *also, *pending_buffers(clear=True))
        self.steps += 1
        jit.on_replay(self._count_step)

    def _count_step(self) -> None:
        self.steps += 1


def _replicated_host(arr: np.ndarray, devs: tuple[str, ...]) -> Tensor:
    """`arr` replicated on every device of `devs` as a realized BUFFER on the tuple whose shards each hold it
    (under MPI, this rank's shards: every rank computes the same scalars), with no kernel or copy to make it: a
    plain host input that a tensor.jit replay refills shard by shard."""
    from devices import rank_of
    from devices.mpi import rank_and_size
    from lower import buffers as registry
    from lower.multi import buffer_view, storage_shape
    from tensor.buffers import new_buffer

    rank, dt = rank_and_size()[0], dtypes.float64 if arr.dtype == np.float64 else dtypes.float32
    parts = tuple(new_buffer(arr, dt, d) if rank_of(d) in (None, rank) else registry.new_buffer(dt, arr.shape, d)
                  for d in devs)
    buf = registry.new_buffer(dt, storage_shape(arr.shape, None, len(devs)), devs)
    registry.store_shards(buf, parts)
    t = Tensor._wrap(buffer_view(buf, arr.shape, None), devs)
    t.uop = buffer_view(buf, arr.shape, None)  # the view itself, not detached (under no_grad): realized data
    return t


def _np_dtype(dt: DType) -> np.dtype:
    return np.dtype({dtypes.float64: np.float64, dtypes.float32: np.float32}.get(dt, np.float32))


class SGD(Optimizer):
    """torch.optim.SGD: g += wd*p; b = momentum*b + (1 - dampening)*g (b = g at the first step); g = g +
    momentum*b with nesterov, else b; p -= lr*g."""

    _SCALARS = ("lr", "momentum", "_damp", "weight_decay")

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False) -> None:
        _check_range("SGD", "lr", lr, 0.0, math.inf)
        _check_range("SGD", "momentum", momentum, 0.0, math.inf)
        _check_range("SGD", "weight_decay", weight_decay, 0.0, math.inf)
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError(f"SGD: nesterov needs momentum > 0 and dampening = 0, got momentum={momentum}, "
                             f"dampening={dampening}")
        self._STATE = ("momentum_buffer",) if momentum else ()
        super().__init__(params, lr)
        self.momentum, self.dampening, self.weight_decay, self.nesterov = momentum, dampening, weight_decay, nesterov

    @property
    def _damp(self) -> float:
        # the buffer starts at 0, so the first step's b = momentum*0 + (1 - 0)*g = g, as torch sets it
        return self.dampening if self.steps else 0.0

    def _branches(self) -> tuple:
        return bool(self.weight_decay), bool(self.momentum), bool(self.nesterov)

    def _update(self, i: int, p: Tensor, g: Tensor, s: dict[str, Tensor], c: dict[str, Tensor]
                ) -> tuple[Tensor, dict[str, Tensor]]:
        if self.weight_decay:
            g = g + c["weight_decay"] * p
        if not self.momentum:
            return p - c["lr"] * g, {}
        b = c["momentum"] * s["momentum_buffer"] + self._once(c, " 1-damp", lambda: 1.0 - c["_damp"]) * g
        step = g + c["momentum"] * b if self.nesterov else b
        return p - c["lr"] * step, {"momentum_buffer": b}


class Adam(Optimizer):
    """torch.optim.Adam (decoupled=False: L2 weight decay added to the gradient) and AdamW (decoupled=True:
    p *= 1 - lr*wd before the update): m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g*g,
    p -= lr/(1-b1**t) * m / (sqrt(v)/sqrt(1-b2**t) + eps)."""

    _SCALARS = ("lr", "b1", "b2", "eps", "weight_decay", "_step_size", "_sqrt_bc2")
    _STATE = ("m", "v")
    decoupled = False

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: Sequence[float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        what = type(self).__name__
        _check_range(what, "lr", lr, 0.0, math.inf)
        _check_range(what, "betas[0]", betas[0], 0.0, 1.0, hi_open=True)
        _check_range(what, "betas[1]", betas[1], 0.0, 1.0, hi_open=True)
        _check_range(what, "eps", eps, 0.0, math.inf)
        _check_range(what, "weight_decay", weight_decay, 0.0, math.inf)
        super().__init__(params, lr)
        self.b1, self.b2, self.eps, self.weight_decay = float(betas[0]), float(betas[1]), eps, weight_decay

    @property
    def _step_size(self) -> float:
        return float(self.lr) / (1.0 - self.b1 ** (self.steps + 1))

    @property
    def _sqrt_bc2(self) -> float:
        return math.sqrt(1.0 - self.b2 ** (self.steps + 1))

    def _moments(self, g: Tensor, s: dict[str, Tensor], c: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        m = c["b1"] * s["m"] + self._once(c, " 1-b1", lambda: 1.0 - c["b1"]) * g
        v = c["b2"] * s["v"] + self._once(c, " 1-b2", lambda: 1.0 - c["b2"]) * (g * g)
        return m, v

    def _update(self, i: int, p: Tensor, g: Tensor, s: dict[str, Tensor], c: dict[str, Tensor]
                ) -> tuple[Tensor, dict[str, Tensor]]:
        if self.decoupled:
            p = p * self._once(c, " 1-lr*wd", lambda: 1.0 - c["lr"] * c["weight_decay"])
        elif self.weight_decay:
            g = g + c["weight_decay"] * p
        m, v = self._moments(g, s, c)
        return p - c["_step_size"] * (m / (v.sqrt() / c["_sqrt_bc2"] + c["eps"])), {"m": m, "v": v}


    def _branches(self) -> tuple:
        return self.decoupled, bool(self.weight_decay)


class AdamW(Adam):
    """torch.optim.AdamW: Adam with decoupled weight decay (default 0.01)."""

    decoupled = True

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: Sequence[float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.01) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)


class LAMB(Adam):
    """LAMB (You et al. 2019, as tinygrad's): r = m_hat / (sqrt(v_hat) + eps) + wd*p, then
    p -= lr * trust * r with trust = |p| / |r| (1 where either norm is 0)."""

    _SCALARS = ("lr", "b1", "b2", "eps", "weight_decay", "_bc1", "_bc2")

    def __init__(self, params: Iterable[Tensor], lr: float = 1e-3, betas: Sequence[float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr, betas, eps, weight_decay)

    @property
    def _bc1(self) -> float:
        return 1.0 - self.b1 ** (self.steps + 1)

    @property
    def _bc2(self) -> float:
        return 1.0 - self.b2 ** (self.steps + 1)

    def _update(self, i: int, p: Tensor, g: Tensor, s: dict[str, Tensor], c: dict[str, Tensor]
                ) -> tuple[Tensor, dict[str, Tensor]]:
        m, v = self._moments(g, s, c)
        r = (m / c["_bc1"]) / ((v / c["_bc2"]).sqrt() + c["eps"]) + c["weight_decay"] * p
        pn, rn = (p * p).sum().sqrt(), (r * r).sum().sqrt()
        trust = ((pn > 0) & (rn > 0)).where(pn / rn, 1.0)
        return p - c["lr"] * trust * r, {"m": m, "v": v}


_TEMPLATED = frozenset({SGD, Adam, AdamW, LAMB})  # whose `_update` branches on `_branches()` alone
_MAX_TEMPLATES = 256  # per optimizer: one per parameter shape and dtype in practice

__all__ = ["LAMB", "SGD", "Adam", "AdamW", "Optimizer"]
