"""The lazy Tensor: one UOp graph plus the device it lives on; nothing runs until it is realized.

Ops build tensor-level UOp graphs from the spec's primitives (BUFFER, CONST, movement, elementwise ALU, REDUCE,
CAST/BITCAST, CONTIGUOUS, COPY) and never touch data. Input data is stored under a fresh BUFFER in the
lowering's buffer registry (`tensor.buffers` converts). `realize()` (and `numpy()`, `tolist()`, `item()`) hands
the graphs to `lower.realize`, which runs them and leaves each Tensor holding a BUFFER with its result.

A graph made only of constants (`Tensor.zeros(3)`, `Tensor.arange(5)`) has no BUFFER, so its UOps carry no
device; the Tensor keeps its device itself, and `Tensor.device` is the one to ask.

The ops themselves live in modules by idea (elementwise, movement, reduce, nn, random, creation); this class
binds them as methods, so `x.exp()`, `Tensor.exp(x)` and `tensor.elementwise.exp(x)` are the same function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes
from rewrite.engine import collector_paused
from rewrite.env import Context
from rewrite.errors import DTypeError, ShapeError, VariableError
from rewrite.ops import Ops
from rewrite.semantics import exec_cast
from rewrite.uop import UOp
from rewrite.viz import capture as viz_capture
from tensor import attention as _at
from tensor import autograd as _ag
from tensor import buffers
from tensor import checks as _chk
from tensor import creation as _cr
from tensor import einsum as _es
from tensor import elementwise as _ew
from tensor import indexing as _ix
from tensor import init as _wi
from tensor import inplace as _ip
from tensor import logic as _lg
from tensor import movement as _mv
from tensor import nn as _nn
from tensor import packed as _pk
from tensor import random as _rnd
from tensor import reduce as _rd
from tensor import scatter as _sc
from tensor import sorting as _so
from tensor.helpers import Device, canonical_device, norm_axis, np_dtype, to_dtype
from tensor.symbolic import unbind_graph


def _infer_dtype(a: np.ndarray, from_python: bool) -> DType:
    """The dtype of host data: numpy arrays keep theirs; Python lists use the defaults, as tinygrad and torch do."""
    k = a.dtype.kind
    if k == "b":
        return dtypes.bool
    if from_python and k in "iu":
        if a.size and (a.min() < dtypes.default_int.min or a.max() > dtypes.default_int.max):
            return dtypes.int64
        return dtypes.default_int
    if from_python and k == "f":
        return dtypes.default_float
    if k in "iuf" and a.dtype.name in {d.name for d in dtypes.all}:
        return getattr(dtypes, a.dtype.name)
    raise DTypeError(f"Tensor: cannot make a tensor from numpy {a.dtype} data; use bool, integer or float data")


def _scalar_const(v: int | float | bool | np.generic, dtype: DType | None) -> UOp:
    if isinstance(v, np.generic):
        src_dt, value = _infer_dtype(np.asarray(v), False), v.item()
    else:
        src_dt, value = _ew.scalar_dtype(v), v
    dt = dtype or src_dt
    return UOp.const(exec_cast(value, src_dt, dt), dt)


_view_base: Callable[[UOp], UOp | None] | None = None  # lower.multi.view_base, imported on first use (is_realized)


def _load_view_base() -> Callable[[UOp], UOp | None]:
    global _view_base
    from lower.multi import view_base

    _view_base = view_base
    return view_base


class Tensor:
    """A lazy n-dimensional array (see the module docstring)."""

    __slots__ = ("__weakref__", "_device", "_requires_grad", "grad", "uop")
    uop: UOp
    _device: Device
    grad: Tensor | None

    def __init__(self, data: object, dtype: object = None, device: Device | None = None,
                 requires_grad: bool = False) -> None:
        self.grad, self._requires_grad = None, False
        self._init(data, dtype, device)
        _ip.track(self)
        if (rec := viz_capture.ACTIVE) is not None:  # VIZ: which Tensor call made this graph's new nodes
            rec.created(self.uop)
        if requires_grad:
            self.requires_grad = True

    def _init(self, data: object, dtype: object, device: Device | None) -> None:
        dt = None if dtype is None else to_dtype(dtype, "Tensor")
        if isinstance(data, UOp):
            dev = canonical_device(device) if device is not None else canonical_device(data.device)
            if isinstance(dev, tuple):
                _ = data.axis  # as in _wrap
            self.uop, self._device = _ag.cut(data if dt is None else data.cast(dt)), dev
            return
        dev = canonical_device(device)
        if isinstance(dev, tuple) and isinstance(data, (list, tuple, np.ndarray)):  # on the first device, replicated
            from tensor.multi import replicate_uop

            self._init(data, dtype, dev[0])
            self.uop, self._device = replicate_uop(self.uop, dev), dev
            return
        if isinstance(data, Tensor):
            moved = data if data.device == dev else data.to(dev)
            self.uop, self._device = (moved.uop if dt is None else moved.uop.cast(dt)), dev
            return
        if isinstance(data, (bool, int, float, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
            self.uop, self._device = _scalar_const(data, dt), dev
            return
        if isinstance(data, (list, tuple, np.ndarray)):
            try:
                arr = np.asarray(data)
            except ValueError as e:  # ragged nested lists
                raise ShapeError(f"Tensor: nested lists must be rectangular: {e}") from None
            inferred = _infer_dtype(arr, not isinstance(data, np.ndarray))
            target = dt or inferred
            src = arr.astype(np_dtype(target)) if target is not dtypes.bfloat16 else arr.astype(np.float32)
            assert isinstance(dev, str)  # a device tuple was handled above
            self.uop, self._device = buffers.new_buffer(src, target, dev), dev
            return
        raise TypeError(f"Tensor: cannot make a tensor from {type(data).__name__}; use a number, a (nested) list, "
                        f"an ndarray or a Tensor")

    @staticmethod
    def _wrap(u: UOp, device: Device) -> Tensor:
        if isinstance(device, tuple):
            _ = u.axis  # a layout that cannot be (a reshape across the shard boundary) is reported at the call
        t = object.__new__(Tensor)
        t.uop, t._device, t.grad, t._requires_grad = _ag.cut(u), device, None, False
        _ip.track(t)
        if (rec := viz_capture.ACTIVE) is not None:
            rec.created(t.uop)
        return t

    # ------------------------------------------------------------------ autograd (tensor.autograd)

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        _ag.set_requires_grad(self, bool(flag))
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        self.requires_grad = requires_grad
        return self

    backward = _ag.backward
    gradient = _ag.gradient

    # ------------------------------------------------------------------ properties

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape

    @property
    def ndim(self) -> int:
        return len(self.uop.shape)

    @property
    def device(self) -> Device:
        """The device name, or the tuple of devices of a multi-device tensor (tensor.multi)."""
        return self._device

    def numel(self) -> int:
        return math.prod(self.shape)

    def size(self, dim: int | None = None) -> int | tuple[int, ...]:
        """The shape, or one axis of it (as torch)."""
        if dim is None:
            return self.shape
        return self.shape[norm_axis(dim, self.ndim, "size", self.shape)]

    def element_size(self) -> int:
        return self.dtype.itemsize

    def nbytes(self) -> int:
        return self.numel() * self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        if isinstance(self.shape[0], UOp):
            raise VariableError(f"len() needs a concrete size, axis 0 of {fmt_shape(self.shape)} is symbolic")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        """A realized tensor shows its values, as torch prints them (summarized past 1000 elements); an unrealized
        one shows its shape. Printing never realizes: that would run kernels as a side effect of looking, and a
        realized tensor is a buffer that later ops read instead of fusing its computation."""
        tail = f", device='{self.device}', dtype={self.dtype!r}{', requires_grad=True' if self.requires_grad else ''})"
        if self.is_realized or (self.uop.op is Ops.CONST and not self.shape):  # a number needs no kernel
            host = buffers.host_array(self.uop) if self.is_realized else np.array(self.uop.value, np_dtype(self.dtype))
            values = np.array2string(host, separator=", ", prefix="Tensor(", threshold=1000, edgeitems=3)
            symbolic = any(isinstance(d, UOp) for d in self.shape)
            return f"Tensor({values}{f', shape={fmt_shape(self.shape)}' if symbolic else ''}{tail}"
        return f"Tensor(<unrealized>, shape={fmt_shape(self.shape)}{tail}"

    # ------------------------------------------------------------------ realization

    @property
    def is_realized(self) -> bool:
        if isinstance(self._device, tuple):
            base = (_view_base or _load_view_base())(self.uop)  # a BUFFER on the tuple, or None
            return base is not None and buffers.registry.has_data(base)
        return buffers.has_data(self.uop)

    def realize(self, *others: Tensor) -> Tensor:
        """Run the graphs of self and `others` (one schedule for all); each then holds a BUFFER with its data."""
        if not others:  # the common call, without building a list
            if not self.is_realized:
                _realize([self])
            return self
        pending = [t for t in (self, *others) if not t.is_realized]
        if pending:
            _realize(pending)
        return self

    def schedule(self, *others: Tensor) -> list:
        """The kernels and copies (lower.ScheduleItem) that realizing self and `others` would run, in order."""
        import lower

        items: list = []
        for dev, group in _by_device([self, *others]).items():
            with Context(DEVICE=dev if isinstance(dev, str) else dev[0]):
                items += lower.schedule(list(dict.fromkeys(_root(t) for t in group)))[0]
        return items

    def numpy(self) -> np.ndarray:
        """The data as a new ndarray (bfloat16 comes back as float32); a multi-device tensor's is gathered. Under
        MPI, a tensor on ranks' devices (`cpu@r`) is gathered onto every rank: a collective that every rank calls."""
        self.realize()
        from devices import local_name, rank_of

        devs = self._device if isinstance(self._device, tuple) else (self._device,)
        if any(rank_of(d) is not None for d in devs):
            return self.to(local_name(devs[0])).numpy()
        if isinstance(self._device, tuple):
            return self.to(self._device[0]).numpy()
        return buffers.host_array(self.uop)

    def tolist(self) -> list | int | float | bool:
        return self.numpy().tolist()

    def item(self) -> int | float | bool:
        if isinstance(self.numel(), UOp):
            raise VariableError(f"item needs a concrete shape, got {fmt_shape(self.shape)}; reduce first")
        if self.numel() != 1:
            raise ShapeError(f"item: the tensor has {self.numel()} elements, shape {fmt_shape(self.shape)}; item() "
                             f"needs exactly one (index or reduce first)")
        return self.numpy().reshape(-1)[0].item()

    def __bool__(self) -> bool:
        if self.numel() != 1:
            raise ValueError(f"the truth value of a tensor with {self.numel()} elements is ambiguous; use .any() "
                             f"or .all()")
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def to(self, device: Device) -> Tensor:
        """The same data on another device (a COPY), or replicated on every device of a tuple; self when it is
        already there (tensor.multi)."""
        from tensor.multi import to

        return to(self, device)

    def shard(self, devices: Device, axis: int | None = 0) -> Tensor:
        """Split along `axis` over a device tuple (axis=None replicates); see tensor.multi."""
        from tensor.multi import shard

        return shard(self, devices, axis)

    def shard_like(self, y: Tensor) -> Tensor:
        """Laid out as y: y's devices and shard axis."""
        from tensor.multi import shard_like

        return shard_like(self, y)

    def copy(self, device: Device) -> Tensor:
        """The spec's COPY: to a device tuple it reshards with axis 0; to one device it gathers."""
        from tensor.multi import copy

        return copy(self, device)

    def replicated(self, *axes: int) -> Tensor:
        """The spec's REPLICATED (the axes, all equal, are dropped)."""
        from tensor.multi import replicated

        return replicated(self, *axes)

    def contiguous(self) -> Tensor:
        return Tensor._wrap(self.uop.contiguous(), self.device)

    def detach(self) -> Tensor:
        """The same value with no gradient through it (DETACH)."""
        return Tensor._wrap(self.uop.detach(), self.device)

    def contiguous_backward(self) -> Tensor:
        """The same value; the gradient flowing back through it is made contiguous (CONTIGUOUSBACKWARD)."""
        return Tensor._wrap(UOp(Ops.CONTIGUOUSBACKWARD, (self.uop,)), self.device)

    def clone(self) -> Tensor:
        """A copy with its own storage once realized."""
        return self.contiguous()

    # ------------------------------------------------------------------ creation (tensor.creation, tensor.random)

    # each takes requires_grad= as well (tensor.autograd.with_requires_grad)
    _g = _ag.with_requires_grad
    full = staticmethod(_g(_cr.full))
    zeros = staticmethod(_g(_cr.zeros))
    ones = staticmethod(_g(_cr.ones))
    empty = staticmethod(_g(_cr.empty))
    arange = staticmethod(_g(_cr.arange))
    linspace = staticmethod(_g(_cr.linspace))
    eye = staticmethod(_g(_cr.eye))
    full_like, zeros_like, ones_like, empty_like = (_g(_cr.full_like), _g(_cr.zeros_like), _g(_cr.ones_like),
                                                    _g(_cr.empty_like))
    manual_seed = staticmethod(_rnd.manual_seed)
    rand = staticmethod(_g(_rnd.rand))
    randn = staticmethod(_g(_rnd.randn))
    randint = staticmethod(_rnd.randint)
    uniform = staticmethod(_g(_rnd.uniform))
    normal = staticmethod(_g(_rnd.normal))
    rand_like, randn_like = _g(_rnd.rand_like), _g(_rnd.randn_like)
    kaiming_uniform, kaiming_normal = staticmethod(_g(_wi.kaiming_uniform)), staticmethod(_g(_wi.kaiming_normal))
    glorot_uniform, glorot_normal = staticmethod(_g(_wi.xavier_uniform)), staticmethod(_g(_wi.xavier_normal))
    del _g

    # ------------------------------------------------------------------ elementwise (tensor.elementwise, tensor.logic)

    add, sub, mul, div, floordiv, mod, pow = _ew.add, _ew.sub, _ew.mul, _ew.div, _ew.floordiv, _ew.mod, _ew.pow_
    remainder, floor_divide = _ew.mod, _ew.floordiv
    neg, maximum, minimum, where = _ew.neg, _ew.maximum, _ew.minimum, _ew.where
    lt, gt, le, ge, eq, ne = _lg.lt, _lg.gt, _lg.le, _lg.ge, _lg.eq, _lg.ne
    logical_not, logical_and, logical_or, logical_xor = (_lg.logical_not, _lg.logical_and, _lg.logical_or,
                                                         _lg.logical_xor)
    bitwise_and, bitwise_or, bitwise_xor, bitwise_not = (_lg.bitwise_and, _lg.bitwise_or, _lg.bitwise_xor,
                                                         _lg.bitwise_not)
    lshift, rshift = _lg.lshift, _lg.rshift
    cast, bitcast = _ew.cast, _ew.bitcast
    exp, exp2, log, log2, sin, cos, tan = _ew.exp, _ew.exp2, _ew.log, _ew.log2, _ew.sin, _ew.cos, _ew.tan
    sqrt, rsqrt, reciprocal, square, erf = _ew.sqrt, _ew.rsqrt, _ew.reciprocal, _ew.square, _ew.erf
    abs, sign, trunc, floor, ceil, round = _ew.abs_, _ew.sign, _ew.trunc, _ew.floor, _ew.ceil, _ew.round_
    isnan, isinf, isfinite = _lg.isnan, _lg.isinf, _lg.isfinite
    clamp = clip = _ix.clamp  # torch's keywords min=, max=; positional as numpy's clip

    def __add__(self, y: _ew.Operand) -> Tensor: return _ew.add(self, y)
    def __radd__(self, y: _ew.Operand) -> Tensor: return _ew.add(y, self)
    def __sub__(self, y: _ew.Operand) -> Tensor: return _ew.sub(self, y)
    def __rsub__(self, y: _ew.Operand) -> Tensor: return _ew.sub(y, self)
    def __mul__(self, y: _ew.Operand) -> Tensor: return _ew.mul(self, y)
    def __rmul__(self, y: _ew.Operand) -> Tensor: return _ew.mul(y, self)
    def __truediv__(self, y: _ew.Operand) -> Tensor: return _ew.div(self, y)
    def __rtruediv__(self, y: _ew.Operand) -> Tensor: return _ew.div(y, self)
    def __floordiv__(self, y: _ew.Operand) -> Tensor: return _ew.floordiv(self, y)
    def __rfloordiv__(self, y: _ew.Operand) -> Tensor: return _ew.floordiv(y, self)
    def __mod__(self, y: _ew.Operand) -> Tensor: return _ew.mod(self, y)
    def __rmod__(self, y: _ew.Operand) -> Tensor: return _ew.mod(y, self)
    def __pow__(self, y: _ew.Operand) -> Tensor: return _ew.pow_(self, y)
    def __rpow__(self, y: _ew.Operand) -> Tensor: return _ew.pow_(y, self)
    def __and__(self, y: _ew.Operand) -> Tensor: return _lg.bitwise_and(self, y)
    def __rand__(self, y: _ew.Operand) -> Tensor: return _lg.bitwise_and(y, self)
    def __or__(self, y: _ew.Operand) -> Tensor: return _lg.bitwise_or(self, y)
    def __ror__(self, y: _ew.Operand) -> Tensor: return _lg.bitwise_or(y, self)
    def __xor__(self, y: _ew.Operand) -> Tensor: return _lg.bitwise_xor(self, y)
    def __rxor__(self, y: _ew.Operand) -> Tensor: return _lg.bitwise_xor(y, self)
    def __lshift__(self, y: _ew.Operand) -> Tensor: return _lg.lshift(self, y)
    def __rshift__(self, y: _ew.Operand) -> Tensor: return _lg.rshift(self, y)
    # comparisons take `object`: typed with Operand they overlap numpy's and list's reflected comparisons
    def __lt__(self, y: object) -> Tensor: return _lg.lt(self, y)  # type: ignore[arg-type]  # checked at run time
    def __gt__(self, y: object) -> Tensor: return _lg.gt(self, y)  # type: ignore[arg-type]  # checked at run time
    def __le__(self, y: object) -> Tensor: return _lg.le(self, y)  # type: ignore[arg-type]  # checked at run time
    def __ge__(self, y: object) -> Tensor: return _lg.ge(self, y)  # type: ignore[arg-type]  # checked at run time
    def __eq__(self, y: _ew.Operand) -> Tensor: return _lg.eq(self, y)  # type: ignore[override]  # == compares elementwise, as in numpy
    def __ne__(self, y: _ew.Operand) -> Tensor: return _lg.ne(self, y)  # type: ignore[override]  # != compares elementwise, as in numpy
    def __neg__(self) -> Tensor: return _ew.neg(self)
    def __abs__(self) -> Tensor: return _ew.abs_(self)
    def __invert__(self) -> Tensor: return _lg.bitwise_not(self)
    def __matmul__(self, y: Tensor) -> Tensor: return _nn.matmul(self, y)
    def __rmatmul__(self, y: Tensor) -> Tensor: return _nn.matmul(Tensor(y, device=self.device), self)
    # in place (tensor.inplace): a realized tensor's buffer is written; torch's dtype rule
    assign = _ip.assign
    __iadd__, __isub__, __imul__, __itruediv__ = _ip.iadd, _ip.isub, _ip.imul, _ip.itruediv
    __ifloordiv__, __imod__, __ipow__ = _ip.ifloordiv, _ip.imod, _ip.ipow
    __iand__, __ior__, __ixor__, __ilshift__, __irshift__ = _ip.iand, _ip.ior, _ip.ixor, _ip.ilshift, _ip.irshift
    # == builds a Tensor, so hashing stays identity (Tensors are dict keys in @function and the schedule)
    __hash__ = object.__hash__
    # numpy arrays and scalars on the left defer to our reflected operators instead of iterating the Tensor
    __array_ufunc__ = None

    # ------------------------------------------------------------------ movement (tensor.movement)

    reshape, view, permute, expand, pad, shrink, shrink_to, flip = (_mv.reshape, _mv.reshape, _mv.permute,
                                                                    _mv.expand, _mv.pad, _mv.shrink, _mv.shrink_to,
                                                                    _mv.flip)
    transpose, squeeze, unsqueeze, flatten, unflatten = (_mv.transpose, _mv.squeeze, _mv.unsqueeze, _mv.flatten,
                                                         _mv.unflatten)
    cat, stack, repeat, split, chunk, gather = _mv.cat, _mv.stack, _mv.repeat, _mv.split, _mv.chunk, _mv.gather
    __getitem__ = _ix.getitem
    one_hot, masked_fill, tril, triu = _ix.one_hot, _ix.masked_fill, _ix.tril, _ix.triu
    sort, argsort, topk = _so.sort, _so.argsort, _so.topk
    scatter, scatter_reduce, scatter_add, __setitem__ = _sc.scatter, _sc.scatter_reduce, _sc.scatter_add, _sc.setitem
    einsum = staticmethod(_es.einsum)
    index_select = _mv.index_select

    @property
    def T(self) -> Tensor:
        return _mv.reverse_axes(self)

    # ------------------------------------------------------------------ reductions (tensor.reduce)

    sum, prod, max, min, mean, var, std = _rd.sum_, _rd.prod, _rd.max_, _rd.min_, _rd.mean, _rd.var, _rd.std
    any, all, argmax, argmin, cumsum = _rd.any_, _rd.all_, _rd.argmax, _rd.argmin, _rd.cumsum
    softmax, log_softmax, logsumexp = _rd.softmax, _rd.log_softmax, _rd.logsumexp

    # ------------------------------------------------------------------ nn (tensor.nn)

    matmul, dot, conv2d, max_pool2d, avg_pool2d = _nn.matmul, _nn.matmul, _nn.conv2d, _nn.max_pool2d, _nn.avg_pool2d
    relu, sigmoid, tanh, gelu, silu, swish, softplus = (_nn.relu, _nn.sigmoid, _nn.tanh, _nn.gelu, _nn.silu, _nn.silu,
                                                        _nn.softplus)
    leaky_relu, elu, relu6, hardtanh = _nn.leaky_relu, _nn.elu, _nn.relu6, _nn.hardtanh
    conv1d, conv_transpose2d = _nn.conv1d, _nn.conv_transpose2d
    scaled_dot_product_attention = _at.scaled_dot_product_attention

    # dtype shorthands last: inside this class body they shadow the builtins of the same names
    def float(self) -> Tensor: return _ew.cast(self, dtypes.float32)
    def half(self) -> Tensor: return _ew.cast(self, dtypes.float16)
    def double(self) -> Tensor: return _ew.cast(self, dtypes.float64)
    def int(self) -> Tensor: return _ew.cast(self, dtypes.int32)
    def long(self) -> Tensor: return _ew.cast(self, dtypes.int64)
    def bool(self) -> Tensor: return _ew.cast(self, dtypes.bool)


def _root(t: Tensor) -> UOp:
    """The graph to realize for t: a device-less graph (constants) on a device tuple is replicated there."""
    if isinstance(t.device, tuple) and not isinstance(t.uop.device, tuple):
        from tensor.multi import replicate_uop

        return replicate_uop(t.uop, t.device)
    return t.uop


def _by_device(tensors: list[Tensor]) -> dict[Device, list[Tensor]]:
    groups: dict[Device, list[Tensor]] = {}
    for t in tensors:
        groups.setdefault(t.device, []).append(t)
    return groups


def _realize(tensors: list[Tensor]) -> None:
    """Run the graphs through the lowering. A graph of constants only has no device of its own, so each device's
    tensors are realized with that device as the default. The walks over the graphs (the assignments', the plan's
    key) allocate a tuple or two per node and make no reference cycles: the collector is paused meanwhile, as in
    graph_rewrite, so its young collections do not traverse the whole live graph again and promote it to the
    generations whose collections traverse it once more."""
    with collector_paused():
        _realize_paused(tensors)


def _realize_paused(tensors: list[Tensor]) -> None:
    import lower

    checks = _chk.pending(t.uop for t in tensors)  # run-time checks of the values computed (tensor.checks)
    if checks:
        tensors = tensors + [c.bad for c in checks if not c.bad.is_realized]
    # weights' panel copies that these graphs pack for the first time: realized along, to be kept (tensor.packed)
    packs = [(k, g, Tensor._wrap(g, d)) for k, g, d in _pk.along([t.uop for t in tensors])]
    tensors = tensors + [t for _, _, t in packs] if packs else tensors
    assigns = _ip.assignments(tensors)
    if assigns is not None:
        tensors = tensors + assigns.extra()
    for dev, group in _by_device(tensors).items():
        keys = [_root(t) for t in group]  # taken before any t.uop changes: a tensor may be listed twice
        roots = list(dict.fromkeys(keys))
        # walked once, for the variables and the plan's key (or already, for the assignments' bookkeeping)
        order = (assigns is not None and assigns.order_of(roots)) or UOp.toposort_of(roots)
        stripped, var_vals, back = unbind_graph(roots, order)
        with Context(DEVICE=dev if isinstance(dev, str) else dev[0]):
            outs = lower.realize(stripped, var_vals) if var_vals else lower.realize(roots, order=order)
        by_root = {r: outs[s] for r, s in zip(roots, stripped, strict=True)}
        for t, key in zip(group, keys, strict=True):
            res = by_root[key]
            t.uop = back.get(res, res)
    if assigns is not None:
        assigns.finish()
    if packs:
        _pk.settle([(k, g, t.uop) for k, g, t in packs])
    if checks:
        _chk.verify(checks)


def reference_numpy(t: Tensor) -> np.ndarray:
    """The tensor's exact value from the reference evaluator (rewrite.evaluate): slow, but independent of the
    lowering, so it is the oracle for what the front end's graphs mean. Nothing is realized or changed."""
    from lower.callify import callify
    from rewrite.evaluate import evaluate_graph

    u = callify([t.uop])[0]
    return evaluate_graph(u, buffers.inputs_of(u))


__all__ = ["Tensor", "reference_numpy"]
