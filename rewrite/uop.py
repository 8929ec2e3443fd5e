"""UOp: a hash-consed immutable term (op, src, arg, tag).

Construction goes through one intern table, so structurally equal UOps are the same object and equality
is `is`; an entry leaves the table when its UOp is garbage. `dtype` and `shape` are derived and checked
when a node is built (rewrite.derive); `min_max`, `device`, `addrspace` and `axis` are derived on first use
and cached. Nothing here recurses on Python's stack.

Args by op (the spec's tables): CONST (value, dtype); VCONST (values, dtype); PARAM ParamArg; BUFFER
BufferArg; CAST/BITCAST dtype; PERMUTE axis order; FLIP one bool per axis; REDUCE (op, axes); RANGE
(id, AxisType); GETTUPLE index; COPY device; SPECIAL name; CUSTOM (fmt, dtype). The PARAM and BUFFER records,
constant normalization and the intern key live in rewrite.uop_args.

`simplify()` runs a plug-in: the symbolic rules live in rules/, above this layer, so they register themselves
(`rules` at import, or the package's `uopc.simplifier` entry point on first use); see `register_simplifier`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar, cast

from rewrite.derive import _DERIVE, derive, fmt_shape, shape_values
from rewrite.dtype import AddrSpace, DType, PtrDType, dtypes
from rewrite.errors import ArityError, DTypeError, PluginError
from rewrite.ops import AxisType, GroupOp, Ops
from rewrite.uop_args import BufferArg, ConstValue, ParamArg, intern_key, normalize_const

if TYPE_CHECKING:
    from collections.abc import Sequence

_T = TypeVar("_T")


_intern: dict[tuple, weakref.ref] = {}
_BROADCAST: dict[tuple, UOp] = {}  # UOp.const_broadcast's last results: (value type, value, dtype, shape, -0.0)
_SHAPES: dict[tuple, UOp] = {}  # UOp.shape_operand's last results of plain-int shapes
_BROADCAST_KEEP, _SHAPES_KEEP, _INT_ONLY = 2048, 4096, frozenset((int,))


def clear_caches() -> None:
    """Let go of the nodes kept for reuse (UOp.shape_operand's and UOp.const_broadcast's): after this, a node
    that nothing else references leaves the intern table."""
    _SHAPES.clear()
    _BROADCAST.clear()
_NOTSET = object()
_CONST, _INDEX = Ops.CONST, dtypes.index  # module globals: cheaper lookups
_VCONST, _PARAM, _BUFFER = Ops.VCONST, Ops.PARAM, Ops.BUFFER


class UOp:
    __slots__ = ("__weakref__", "_key", "_mm", "_props", "arg", "dtype", "op", "shape", "src", "tag")
    op: Ops
    src: tuple[UOp, ...]
    arg: object
    tag: object
    dtype: DType
    shape: tuple
    _mm: tuple | None
    _key: tuple
    _props: dict | None

    def __new__(cls, op: Ops, src: tuple[UOp, ...] = (), arg: object = None, tag: object = None) -> UOp:
        # the hot path written out: intern_key's plain case and the deriver's table (rewrite.derive.derive, which
        # words the errors, runs again when a deriver fails)
        key = intern_key(op, src, arg, tag) if op is _CONST or op is _VCONST or op is _PARAM or op is _BUFFER \
            else (op, src, arg, tag)
        if (ref := _intern.get(key)) is not None and (u := ref()) is not None:
            return u
        try:
            dtype, shape = _DERIVE[op](op, src, arg)
        except (AttributeError, TypeError, KeyError):
            dtype, shape = derive(op, src, arg)
        u = object.__new__(cls)
        u.op, u.src, u.arg, u.tag, u.dtype, u.shape, u._mm, u._props = op, src, arg, tag, dtype, shape, None, None
        u._key = key  # the intern table holds this tuple anyway; keeping it spares recomputing it in __del__
        _intern[key] = weakref.ref(u)
        return u

    def __del__(self) -> None:
        try:  # noqa: SIM105  # contextlib.suppress needs the contextlib global, which shutdown may have cleared
            _intern.pop(self._key, None)
        except (TypeError, AttributeError):  # interpreter shutdown: module globals (even contextlib) may be None
            pass

    def __reduce__(self) -> tuple:
        return (UOp, (self.op, self.src, self.arg, self.tag))

    def replace(self, *, op: Ops | None = None, src: tuple[UOp, ...] | None = None, arg: object = _NOTSET,
                tag: object = _NOTSET) -> UOp:
        return UOp(self.op if op is None else op, self.src if src is None else src,
                   self.arg if arg is _NOTSET else arg, self.tag if tag is _NOTSET else tag)

    # ------------------------------------------------------------------ construction helpers

    @staticmethod
    def const(value: ConstValue, dtype: DType | None = None) -> UOp:
        """A scalar CONST. Without a dtype: bool -> bool, int -> index, float -> float32."""
        if dtype is None:
            is_int = isinstance(value, int)
            dtype = dtypes.bool if isinstance(value, bool) else dtypes.index if is_int else dtypes.float32
        return UOp(_CONST, (), (normalize_const(value, dtype), dtype))

    def const_like(self, value: ConstValue) -> UOp:
        """A CONST of this node's dtype, broadcast to its shape."""
        return UOp.const_broadcast(value, self.dtype, self.shape)

    @staticmethod
    def const_broadcast(value: ConstValue, dtype: DType, shape: tuple) -> UOp:
        """UOp.const(value, dtype) reshaped to size-1 axes and expanded to `shape`. Every step builds the same few
        again, so the last _BROADCAST_KEEP stay alive (they hold no buffer) and come back from one lookup."""
        if shape == ():
            return UOp.const(value, dtype)
        t = type(value)
        # the value's type and a float zero's sign are part of the key, as in the intern table (1 == 1.0 == True)
        key = (t, value, dtype, shape, t is float and math.copysign(1.0, cast(float, value)) < 0)
        if (u := _BROADCAST.get(key)) is None:
            u = UOp.const(value, dtype).reshape((1,) * len(shape)).expand(shape)
            if len(_BROADCAST) >= _BROADCAST_KEEP:
                _BROADCAST.clear()
            _BROADCAST[key] = u
        return u

    @staticmethod
    def vconst(values: Sequence[ConstValue], dtype: DType = dtypes.index) -> UOp:
        vals = tuple(values)
        if dtype is _INDEX and all(type(v) is int for v in vals):  # lane coordinates: nothing to normalize
            return UOp(Ops.VCONST, (), (vals, dtype))
        if vals and all(v is vals[0] for v in vals):  # one value splat to every lane (an accumulator's identity)
            return UOp(Ops.VCONST, (), ((normalize_const(vals[0], dtype),) * len(vals), dtype))
        return UOp(Ops.VCONST, (), (tuple(normalize_const(v, dtype) for v in vals), dtype))

    @staticmethod
    def shape_operand(shape: Sequence[int | UOp]) -> UOp:
        """The (k,)-shaped index UOp that carries `shape` in a node's src. Those of plain-int shapes, rebuilt by every
        reshape and expand of every step, stay alive once built (the last _SHAPES_KEEP of them)."""
        key = shape if type(shape) is tuple else tuple(shape)
        # a hit must be all ints: (True,) and (1.0,) hash and compare like (1,) but are other constants
        if (u := _SHAPES.get(key)) is not None and set(map(type, key)) <= _INT_ONLY:
            return u
        if all(isinstance(d, int) for d in shape):
            u = UOp(Ops.VCONST, (), (key, dtypes.index))
            if set(map(type, key)) <= _INT_ONLY:
                if len(_SHAPES) >= _SHAPES_KEEP:
                    _SHAPES.clear()
                _SHAPES[key] = u
            return u
        return UOp(Ops.STACK, tuple(d if isinstance(d, UOp) else UOp.const(d) for d in shape))

    @staticmethod
    def variable(name: str, lo: int, hi: int, dtype: DType = dtypes.index) -> UOp:
        """A symbolic integer variable with inclusive bounds [lo, hi]."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"variable: name must be a non-empty str, got {name!r}")
        if lo > hi:
            raise ValueError(f"variable {name!r}: empty range [{lo}, {hi}]; need lo <= hi")
        if dtype is not dtypes.index and not (dtype.min <= lo and hi <= dtype.max):
            raise ValueError(f"variable {name!r}: [{lo}, {hi}] does not fit {dtype.name} "
                             f"[{dtype.min}, {dtype.max}]; widen the dtype or narrow the bounds")
        return UOp(Ops.PARAM, (UOp.shape_operand(()), UOp.const(lo, dtype), UOp.const(hi, dtype)),
                   ParamArg(name, dtype))

    def bind(self, value: int) -> UOp:
        """This variable bound to `value`: the same name and bounds, with the value in its tag. Shapes built from
        it stay symbolic (so graphs and kernels are shared across values); a realize passes the value on."""
        from rewrite.errors import VariableError

        if not self.is_variable:
            raise VariableError(f"bind: only a variable (UOp.variable) can be bound, got {self.short()}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise VariableError(f"bind: variable {self.buf_arg.slot!r} takes an int, got {value!r}")
        lo, hi = self.var_bounds
        if not lo <= value <= hi:
            raise VariableError(f"bind: variable {self.buf_arg.slot!r} = {value} is outside its range [{lo}, {hi}]")
        return self.replace(tag=("bind", int(value)))

    def unbind(self) -> tuple[UOp, int | None]:
        """A variable without its binding, and the bound value (None when it was not bound)."""
        t = self.tag
        if self.op is Ops.PARAM and isinstance(t, tuple) and len(t) == 2 and t[0] == "bind":
            return self.replace(tag=None), int(t[1])
        return self, None

    @property
    def is_variable(self) -> bool:
        """A symbolic int variable (a PARAM named by a string, as UOp.variable makes)."""
        return self.op is Ops.PARAM and isinstance(self.buf_arg.slot, str)

    @property
    def var_bounds(self) -> tuple[int, int]:
        """A variable's inclusive bounds [lo, hi]."""
        return int(self.src[1].value), int(self.src[2].value)

    @staticmethod
    def param(slot: int, dtype: DType, shape: Sequence[int | UOp] = (),
              device: str | tuple[str, ...] | None = None) -> UOp:
        return UOp(Ops.PARAM, (UOp.shape_operand(shape),), ParamArg(slot, dtype, device))

    @staticmethod
    def buffer(slot: int, dtype: DType, shape: Sequence[int | UOp], device: str | tuple[str, ...] | None = None,
               addrspace: AddrSpace = AddrSpace.GLOBAL) -> UOp:
        return UOp(Ops.BUFFER, (UOp.shape_operand(shape),), BufferArg(slot, dtype, device, addrspace))

    @staticmethod
    def range(bound: int | UOp, rid: int | tuple, axis_type: AxisType = AxisType.LOOP) -> UOp:
        """A loop index over [0, bound); `rid` makes distinct loops distinct nodes."""
        b = bound if isinstance(bound, UOp) else UOp.const(bound)
        return UOp(Ops.RANGE, (b,), (rid, axis_type))

    @staticmethod
    def sink(*srcs: UOp) -> UOp:
        return UOp(Ops.SINK, tuple(srcs))

    @staticmethod
    def group(*srcs: UOp) -> UOp:
        return UOp(Ops.GROUP, tuple(srcs))

    def alu(self, op: Ops, *srcs: UOp) -> UOp:
        return UOp(op, (self, *srcs))

    def _operand(self, x: UOp | ConstValue, opname: str) -> UOp:
        if isinstance(x, UOp):
            return x
        if type(x) is int and self.dtype is _INDEX and self.shape == ():  # index math: the hot path
            return UOp(_CONST, (), (x, _INDEX))
        if not isinstance(x, (int, float, bool)):
            raise TypeError(f"{opname}: cannot combine a UOp with {type(x).__name__}")
        dt = self.dtype.scalar
        if isinstance(x, float) and not dt.is_float and not x.is_integer():
            raise DTypeError(f"{opname}: {x!r} is not representable as {dt.name} (the other operand's dtype); "
                             f"cast the UOp to a float dtype first")
        return self.const_like(x) if dt.kind != "p" else UOp.const(x)

    def _bin(self, op: Ops, x: UOp | ConstValue, reverse: bool = False) -> UOp:
        y = self._operand(x, op.name)
        return UOp(op, (y, self) if reverse else (self, y))

    # Python operators build the op they name, one to one
    def __add__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.ADD, x)
    def __radd__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.ADD, x, True)
    def __sub__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.SUB, x)
    def __rsub__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.SUB, x, True)
    def __mul__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.MUL, x)
    def __rmul__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.MUL, x, True)
    def __floordiv__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.IDIV, x)
    def __rfloordiv__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.IDIV, x, True)
    def __mod__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.MOD, x)
    def __rmod__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.MOD, x, True)
    def __truediv__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.DIV, x)
    def __rtruediv__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.DIV, x, True)
    def __and__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.AND, x)
    def __rand__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.AND, x, True)
    def __or__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.OR, x)
    def __ror__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.OR, x, True)
    def __xor__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.XOR, x)
    def __rxor__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.XOR, x, True)
    def __lshift__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.SHL, x)
    def __rshift__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.SHR, x)
    def __lt__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.CMPLT, x)
    def __gt__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.CMPGT, x)
    def __le__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.CMPLE, x)
    def __ge__(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.CMPGE, x)
    def __neg__(self) -> UOp: return UOp(Ops.NEG, (self,))
    def __invert__(self) -> UOp: return UOp(Ops.NOT, (self,)) if self.dtype.scalar.is_bool else self ^ -1
    # equality stays identity (UOps are dict keys); use .eq / .ne to build comparisons
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def eq(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.CMPEQ, x)
    def ne(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.CMPNE, x)
    def maximum(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.MAX, x)
    def minimum(self, x: UOp | ConstValue) -> UOp:
        y = self._operand(x, "MIN")
        return (y < self).where(y, self)
    def recip(self) -> UOp: return UOp(Ops.RECIP, (self,))
    def trunc(self) -> UOp: return UOp(Ops.TRUNC, (self,))
    def sqrt(self) -> UOp: return UOp(Ops.SQRT, (self,))
    def exp2(self) -> UOp: return UOp(Ops.EXP2, (self,))
    def log2(self) -> UOp: return UOp(Ops.LOG2, (self,))
    def sin(self) -> UOp: return UOp(Ops.SIN, (self,))
    def pow(self, x: UOp | ConstValue) -> UOp: return self._bin(Ops.POW, x)

    def where(self, a: UOp | ConstValue, b: UOp | ConstValue) -> UOp:
        """WHERE(self, a, b): a where self is true, else b. A Python constant takes the other branch's dtype."""
        if not isinstance(a, UOp) and not isinstance(b, UOp):
            raise TypeError("where: at least one branch must be a UOp, so the result has a dtype")
        a2 = a if isinstance(a, UOp) else cast(UOp, b)._operand(a, "WHERE")  # b is the UOp: checked above
        b2 = b if isinstance(b, UOp) else a2._operand(b, "WHERE")
        return UOp(Ops.WHERE, (self, a2, b2))

    def cast(self, dtype: DType) -> UOp:
        return self if self.dtype is dtype else UOp(Ops.CAST, (self,), dtype)

    def bitcast(self, dtype: DType) -> UOp:
        return UOp(Ops.BITCAST, (self,), dtype)

    # ------------------------------------------------------------------ movement and reduce

    def reshape(self, shape: Sequence[int | UOp]) -> UOp:
        shape = tuple(shape)
        return self if shape == self.shape else UOp(Ops.RESHAPE, (self, UOp.shape_operand(shape)))

    def expand(self, shape: Sequence[int | UOp]) -> UOp:
        shape = tuple(shape)
        return self if shape == self.shape else UOp(Ops.EXPAND, (self, UOp.shape_operand(shape)))

    def permute(self, order: Sequence[int]) -> UOp:
        order = tuple(order)
        return self if order == tuple(range(len(self.shape))) else UOp(Ops.PERMUTE, (self,), order)

    def pad(self, before: Sequence[int | UOp], after: Sequence[int | UOp]) -> UOp:
        if all(isinstance(d, int) and d == 0 for d in (*before, *after)):
            return self
        return UOp(Ops.PAD, (self, UOp.shape_operand(tuple(before)), UOp.shape_operand(tuple(after))))

    def shrink(self, begin: Sequence[int | UOp], end: Sequence[int | UOp]) -> UOp:
        if tuple(begin) == (0,) * len(self.shape) and tuple(end) == self.shape:
            return self
        return UOp(Ops.SHRINK, (self, UOp.shape_operand(tuple(begin)), UOp.shape_operand(tuple(end))))

    def flip(self, axes: Sequence[int] | Sequence[bool]) -> UOp:
        """Reverse the given axes (ints), or the flagged ones (one bool per axis)."""
        axes = tuple(axes)
        flags = axes if axes and all(isinstance(a, bool) for a in axes) else \
            tuple(i in {a % len(self.shape) for a in axes} for i in range(len(self.shape)))
        return self if not any(flags) else UOp(Ops.FLIP, (self,), flags)

    def index(self, *idxs: UOp | int) -> UOp:
        return UOp(Ops.INDEX, (self, *(i if isinstance(i, UOp) else UOp.const(i) for i in idxs)))

    @staticmethod
    def stack(*srcs: UOp) -> UOp:
        return UOp(Ops.STACK, tuple(srcs))

    def reduce(self, op: Ops, axes: Sequence[int] | None = None) -> UOp:
        n = len(self.shape)
        ax = tuple(range(n)) if axes is None else tuple(sorted({a % n if n else a for a in axes}))
        return UOp(Ops.REDUCE, (self,), (op, ax))

    def sum(self, axes: Sequence[int] | None = None) -> UOp: return self.reduce(Ops.ADD, axes)
    def max(self, axes: Sequence[int] | None = None) -> UOp: return self.reduce(Ops.MAX, axes)
    def prod(self, axes: Sequence[int] | None = None) -> UOp: return self.reduce(Ops.MUL, axes)
    def contiguous(self) -> UOp: return UOp(Ops.CONTIGUOUS, (self,))
    def detach(self) -> UOp: return UOp(Ops.DETACH, (self,))
    def copy(self, device: str | tuple[str, ...]) -> UOp: return UOp(Ops.COPY, (self,), device)
    def replicated(self, *axes: int) -> UOp: return UOp(Ops.REPLICATED, (self,), tuple(axes))
    def store(self, val: UOp, gate: UOp | None = None) -> UOp:
        return UOp(Ops.STORE, (self, val) if gate is None else (self, val, gate))
    def load(self, *rest: UOp) -> UOp: return UOp(Ops.LOAD, (self, *rest))
    def after(self, *deps: UOp) -> UOp: return UOp(Ops.AFTER, (self, *deps))
    def end(self, *ranges: UOp) -> UOp: return UOp(Ops.END, (self, *ranges))

    # ------------------------------------------------------------------ derived properties

    @property
    def size(self) -> int | UOp:
        n: int | UOp = 1
        for d in self.shape:
            n = n * d
        return n

    @property
    def ndim(self) -> int:
        return len(self.shape)

    # typed views of `arg` for the ops that have one (the module docstring's table): `arg` is `object` because
    # its type depends on the op; these check the op and give the arg its type

    def _want(self, what: str, *ops: Ops) -> None:
        if self.op not in ops:
            raise ArityError(f"{what}: only {' or '.join(o.name for o in ops)} has one, this is {self.op.name}")

    @property
    def value(self) -> ConstValue:
        """The Python value of a CONST."""
        if self.op is not _CONST:
            raise TypeError(f"value: only a CONST has a value, this is {self.op.name}")
        return cast("tuple[ConstValue, DType]", self.arg)[0]

    @property
    def vconst_values(self) -> tuple[ConstValue, ...]:
        """The lane values of a VCONST."""
        self._want("vconst_values", Ops.VCONST)
        return cast("tuple[tuple[ConstValue, ...], DType]", self.arg)[0]

    @property
    def buf_arg(self) -> ParamArg | BufferArg:
        """A PARAM's ParamArg or a BUFFER's BufferArg (slot, dtype, device, addrspace)."""
        self._want("buf_arg", Ops.PARAM, Ops.BUFFER)
        return cast("ParamArg | BufferArg", self.arg)

    @property
    def range_id(self) -> int | tuple:
        """A RANGE's id (an int, or a tuple of ints for a split range)."""
        self._want("range_id", Ops.RANGE)
        return cast("tuple[int | tuple, AxisType]", self.arg)[0]

    @property
    def axis_type(self) -> AxisType:
        self._want("axis_type", Ops.RANGE)
        return cast("tuple[int | tuple, AxisType]", self.arg)[1]

    @property
    def reduce_op(self) -> Ops:
        """A REDUCE's combining op (ADD, MUL, MAX)."""
        self._want("reduce_op", Ops.REDUCE)
        return cast("tuple[Ops, tuple[int, ...]]", self.arg)[0]

    @property
    def reduce_axes(self) -> tuple[int, ...]:
        self._want("reduce_axes", Ops.REDUCE)
        return cast("tuple[Ops, tuple[int, ...]]", self.arg)[1]

    @property
    def int_tuple_arg(self) -> tuple[int, ...]:
        """The axis tuple of a PERMUTE (the order) or a REPLICATED (the replicated axes)."""
        self._want("int_tuple_arg", Ops.PERMUTE, Ops.REPLICATED)
        return cast("tuple[int, ...]", self.arg)

    @property
    def flip_flags(self) -> tuple[bool, ...]:
        """A FLIP's arg: one bool per axis, True where the axis is reversed."""
        self._want("flip_flags", Ops.FLIP)
        return cast("tuple[bool, ...]", self.arg)

    @property
    def min_max(self) -> tuple[ConstValue, ConstValue]:
        if (mm := self._mm) is None:
            mm = _compute_min_max()(self)
        return mm

    @property
    def vmin(self) -> ConstValue:
        return self.min_max[0]

    @property
    def vmax(self) -> ConstValue:
        return self.min_max[1]

    def _prop(self, name: str, fn: Callable[[UOp], _T]) -> _T:
        if self._props is None:
            self._props = {}
        if (v := self._props.get(name, _NOTSET)) is _NOTSET:
            v = self._props[name] = fn(self)
        return cast(_T, v)  # _props[name] is only ever set to fn's result

    @property
    def device(self) -> str | tuple[str, ...] | None:
        if (p := self._props) is not None and (v := p.get("device", _NOTSET)) is not _NOTSET:
            return cast("str | tuple[str, ...] | None", v)  # computed before: no import, no call
        from rewrite.props import device_of

        return self._prop("device", device_of)

    @property
    def addrspace(self) -> AddrSpace | None:
        if (p := self._props) is not None and (v := p.get("addrspace", _NOTSET)) is not _NOTSET:
            return cast("AddrSpace | None", v)  # computed before: no import, no call
        from rewrite.props import addrspace_of

        return self._prop("addrspace", addrspace_of)

    @property
    def axis(self) -> int | None:
        if (p := self._props) is not None and (v := p.get("axis", _NOTSET)) is not _NOTSET:
            return cast("int | None", v)  # computed before: no import, no call
        from rewrite.props import axis_of

        return self._prop("axis", axis_of)

    @property
    def shape_src(self) -> tuple:
        """For nodes that carry a shape operand, its dimensions."""
        return shape_values(self.src[0 if self.op in (Ops.PARAM, Ops.BUFFER) else 1])

    # ------------------------------------------------------------------ walks (iterative)

    def toposort(self) -> list[UOp]:
        """Every node reachable from self, children before parents."""
        return UOp.toposort_of((self,))

    @staticmethod
    def toposort_of(roots: Iterable[UOp], skip: Callable[[UOp], bool] | None = None) -> list[UOp]:
        """Every node reachable from any of `roots`, children before parents, each once: one walk for a graph
        with many roots (a training step's parameters, states and loss share most of theirs), where a walk per
        root would visit the shared part once per root. A node for which `skip` is true is left out together
        with everything reachable only through it."""
        # depth first from each root in turn, sources in order, a node placed after its sources; the stack holds
        # each open node with the iterator over its sources still to enter (a leaf is placed when met)
        out: list[UOp] = []
        seen: set[UOp] = set()
        for r in roots:
            if r in seen or (skip is not None and skip(r)):
                continue
            seen.add(r)
            stack = [(r, iter(r.src))]
            while stack:
                u, rest = stack[-1]
                for s in rest:
                    if s in seen or (skip is not None and skip(s)):
                        continue
                    seen.add(s)
                    if s.src:
                        stack.append((s, iter(s.src)))
                        break
                    out.append(s)
                else:
                    stack.pop()
                    out.append(u)
        return out

    def variables(self) -> list[UOp]:
        """Symbolic variables (named PARAMs) this node depends on, by name."""
        return sorted((u for u in self.toposort() if u.is_variable), key=lambda u: str(u.buf_arg.slot))

    def ranges(self) -> list[UOp]:
        return [u for u in self.toposort() if u.op is Ops.RANGE]

    def substitute(self, mapping: dict[UOp, UOp]) -> UOp:
        """Replace nodes by identity (each occurrence), rebuilding parents; one walk, no rules."""
        from rewrite.engine import substitute

        return substitute(self, mapping)

    # ------------------------------------------------------------------ index-language conveniences

    def simplify(self) -> UOp:
        """Fast symbolic rules, then e-graph saturation (the simplifier registered by the `rules` package)."""
        return _simplifier()(self)

    def render(self) -> str:
        from rewrite.render import render

        return render(self)

    def evaluate(self, env: dict[str, ConstValue] | None = None) -> ConstValue:
        """The exact Python value of a scalar expression, given values for its variables by name."""
        from rewrite.evaluate import evaluate

        return evaluate(self, env or {})

    def __repr__(self) -> str:
        from rewrite.render import pretty

        return pretty(self)

    def short(self) -> str:
        """One line: op, dtype, shape and arg."""
        sh = "" if self.shape == () else fmt_shape(self.shape)
        arg = "" if self.arg is None else f" {self.arg!r}"
        return f"{self.op.name}:{self.dtype.name}{sh}{arg}"


_MIN_MAX: list[Callable[[UOp], tuple]] = []


def _compute_min_max() -> Callable[[UOp], tuple]:
    if not _MIN_MAX:  # rewrite.interval imports this module, so it is bound on first use
        from rewrite.interval import compute_min_max

        _MIN_MAX.append(compute_min_max)
    return _MIN_MAX[0]


# UOp.simplify is the symbolic rule set, which lives in rules/, a layer above this one. So the engine does not
# import it: the simplifier is a plug-in. `rules` registers its `simplify` here when it is imported (and lower/
# and tensor/, the entry points users start from, import rules). A user of the bare engine
# (`from rewrite import UOp`) gets it through the package's entry point: pyproject.toml declares
# `[project.entry-points."uopc.simplifier"] symbolic = "rules:simplify"`, and the first `simplify()` call
# with nothing registered loads it through importlib.metadata (which imports rules, which registers).
# The engine names a plug-in group, never a module of ours; another simplifier plugs in the same way.
SIMPLIFIER_GROUP = "uopc.simplifier"
_SIMPLIFIER: list[Callable[[UOp], UOp]] = []


def register_simplifier(fn: Callable[[UOp], UOp]) -> None:
    """Install what UOp.simplify() runs (`rules` installs its `simplify` at import)."""
    _SIMPLIFIER[:] = [fn]


def _simplifier() -> Callable[[UOp], UOp]:
    if not _SIMPLIFIER:
        from importlib.metadata import entry_points

        for ep in sorted(entry_points(group=SIMPLIFIER_GROUP), key=lambda e: e.name):
            register_simplifier(ep.load())
            break
    if not _SIMPLIFIER:
        raise PluginError(
            f"UOp.simplify: no simplifier is registered and no {SIMPLIFIER_GROUP!r} entry point is installed; "
            "`import rules` registers the symbolic rules (or install the package, `pip install -e .`, whose "
            "entry point loads them)"
        )
    return _SIMPLIFIER[0]


__all__ = [
    "SIMPLIFIER_GROUP", "BufferArg", "ConstValue", "GroupOp", "ParamArg", "PtrDType", "UOp", "register_simplifier",
]
