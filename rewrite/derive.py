"""Derived dtype and shape of a node (the spec's Derived Properties table), checked at construction.

`derive(op, src, arg)` returns `(dtype, shape)` or raises a typed error that names the op, the operands'
shapes and dtypes, and what would be valid. A shape is a tuple whose entries are ints or scalar index
UOps (symbolic dimensions). Shapes are carried in `src` as (k,)-shaped index UOps: a VCONST when every
dimension is a number, a STACK of scalar index UOps otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rewrite.dtype import DType, PtrDType, dtypes
from rewrite.errors import ArityError, DTypeError, ShapeError
from rewrite.ops import GroupOp, Ops

if TYPE_CHECKING:
    from rewrite.uop import UOp

Dim = "int | UOp"
Shape = tuple


def shape_values(s: UOp) -> tuple:
    """The dimensions held by a shape operand (a (k,)-shaped index VCONST or STACK)."""
    if s.op not in (Ops.VCONST, Ops.STACK) or s.dtype is not dtypes.index or len(s.shape) != 1:
        raise ArityError(
            f"a shape operand must be a (k,)-shaped index VCONST or a STACK of index scalars, got "
            f"{s.op.name}{fmt_shape(s.shape)}:{s.dtype.name}; build it with UOp.shape_operand"
        )
    if s.op is Ops.VCONST:
        return s.arg[0]  # type: ignore[index]  # hot path (every shape operand): a VCONST's arg is (values, dtype)
    return tuple(x.arg[0] if x.op is Ops.CONST else x for x in s.src)  # type: ignore[index]  # hot path: (value, dtype)


def fmt_shape(shape: tuple) -> str:
    inner = ", ".join(str(d) if isinstance(d, int) else d.render() for d in shape)
    return f"({inner},)" if len(shape) == 1 else f"({inner})"


def _dim(d: int | UOp) -> str:
    return str(d) if isinstance(d, int) else d.render()


def _desc(u: UOp) -> str:
    return f"{u.op.name}{fmt_shape(u.shape)}:{u.dtype.name}"


def _dim_eq(a: object, b: object) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


def broadcast(op: Ops, shapes: list[tuple]) -> tuple:
    """Right-align the shapes and take the element-wise max; every axis must be equal or 1."""
    first = shapes[0]
    # tuple equality is _dim_eq per axis: ints compare by value, UOp dims by identity (UOp.__eq__ is `is`)
    if all(s == first for s in shapes[1:]):
        return first
    n = max(len(s) for s in shapes)
    out = []
    for i in range(n):
        dim: object = 1
        for s in shapes:
            d = s[i - n + len(s)] if i - n + len(s) >= 0 else 1
            if _dim_eq(d, 1) or _dim_eq(d, dim):
                continue
            if _dim_eq(dim, 1):
                dim = d
                continue
            raise ShapeError(
                f"{op.name}: cannot broadcast shapes {', '.join(fmt_shape(s) for s in shapes)}: axis {i - n} has "
                f"{dim} vs {d}; after right-aligning, each axis must be equal or 1 (reshape or expand an operand)"
            )
        out.append(dim)
    return tuple(out)


def prod(dims: tuple) -> object:
    """Product of dimensions: an int when all are ints, else (int part, sorted symbolic factors); a symbolic
    dimension that is a product (`n * 4`) counts as its factors, so (n, 4) and (n * 4,) hold as many elements."""
    n = 1
    for d in dims:  # all ints: the common case, one pass
        if type(d) is not int:
            break
        n *= d
    else:
        return n
    n, sym = 1, []
    stack = list(dims)
    while stack:
        d = stack.pop()
        if isinstance(d, int):
            n *= d
        elif d.op is Ops.MUL:
            stack.extend(d.src)
        elif d.op is Ops.CONST and isinstance(d.arg[0], int):
            n *= d.arg[0]
        else:
            sym.append(d)
    return n if not sym else (n, tuple(sorted(sym, key=id)))


# ---------------------------------------------------------------- dtype helpers


def _same_dtype(op: Ops, src: tuple) -> DType:
    dt = src[0].dtype
    for s in src[1:]:
        if s.dtype is not dt:
            raise DTypeError(
                f"{op.name}: operand dtypes differ ({', '.join(_desc(s) for s in src)}); cast one operand so both "
                f"have the same dtype (the Tensor front end promotes automatically)"
            )
    return dt


# accepted scalar dtype kinds per ALU op (DType.kind: b bool, i signed, u unsigned, x index, f float); kind
# strings rather than predicates because this runs for every ALU node built
_INT = ("iux", "integer (or index)")
_INT_BOOL = ("iuxb", "integer or bool")
_FLOAT = ("f", "floating-point")
_NUM = ("iuxf", "numeric (int, index or float)")
_NUM_BOOL = ("iuxfb", "value (not void or pointer)")
_BOOL = ("b", "bool")

_ALU_DTYPE_RULE = {
    Ops.ADD: _NUM, Ops.SUB: _NUM, Ops.MUL: _NUM, Ops.MAX: _NUM_BOOL, Ops.NEG: _NUM, Ops.MULACC: _NUM,
    Ops.MOD: _INT, Ops.IDIV: _INT, Ops.CDIV: _INT, Ops.CMOD: _INT, Ops.SHL: _INT, Ops.SHR: _INT,
    Ops.XOR: _INT_BOOL, Ops.OR: _INT_BOOL, Ops.AND: _INT_BOOL, Ops.NOT: _BOOL,
    Ops.RECIP: _FLOAT, Ops.DIV: _FLOAT, Ops.EXP2: _FLOAT, Ops.LOG2: _FLOAT, Ops.SIN: _FLOAT, Ops.SQRT: _FLOAT,
    Ops.POW: _FLOAT, Ops.TRUNC: _NUM,
    Ops.CMPLT: _NUM_BOOL, Ops.CMPNE: _NUM_BOOL, Ops.CMPGT: _NUM_BOOL, Ops.CMPGE: _NUM_BOOL, Ops.CMPLE: _NUM_BOOL,
    Ops.CMPEQ: _NUM_BOOL,
}
_ARITY = {**{o: 1 for o in GroupOp.UnaryALU}, **{o: 2 for o in GroupOp.BinaryALU}, **{o: 3 for o in GroupOp.TernaryALU}}


def _arity(op: Ops, src: tuple, n: int | tuple[int, int]) -> None:
    lo, hi = (n, n) if isinstance(n, int) else n
    if not lo <= len(src) <= hi:
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        raise ArityError(f"{op.name}: takes {want} sources, got {len(src)}")


def _alu(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if len(src) != _ARITY[op]:
        _arity(op, src, _ARITY[op])
    shape = src[0].shape
    for s in src[1:]:
        # equal shapes are the common case; tuple != compares int dims by value and UOp dims by identity
        if s.shape != shape:
            shape = broadcast(op, [s.shape for s in src])
            break
    if op is Ops.WHERE:
        if not src[0].dtype.scalar.is_bool:
            raise DTypeError(f"WHERE: the condition must be bool, got {_desc(src[0])}; compare it (x != 0) first")
        return _same_dtype(op, src[1:]), shape
    dt = src[0].dtype
    for s in src[1:]:
        if s.dtype is not dt:
            _same_dtype(op, src)
    kinds, what = _ALU_DTYPE_RULE.get(op, _NUM)
    if dt.scalar.kind not in kinds:
        raise DTypeError(
            f"{op.name}: needs {what} operands, got {', '.join(_desc(s) for s in src)}; cast to a dtype the op accepts"
        )
    if op in GroupOp.Comparison:
        return dtypes.bool.vec(dt.count), shape
    return dt, shape


def _threefry(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 2)
    dt = _same_dtype(op, src)
    if dt.scalar is not dtypes.uint64:
        raise DTypeError(f"THREEFRY: operands must be uint64 (two packed 32-bit words), got {dt.name}")
    return dt, broadcast(op, [s.shape for s in src])


def _cast(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    if not isinstance(arg, DType):
        raise ArityError(f"{op.name}: arg must be the target DType, got {arg!r}")
    if op is Ops.BITCAST:
        a, b = src[0].dtype, arg
        shape = src[0].shape
        if a.itemsize != b.itemsize:
            if not shape or not isinstance(shape[-1], int) or (shape[-1] * a.itemsize) % b.itemsize:
                raise ShapeError(
                    f"BITCAST: {_desc(src[0])} to {b.name} must preserve total bytes; the last axis times "
                    f"{a.itemsize} bytes must be a multiple of {b.itemsize}"
                )
            shape = (*shape[:-1], shape[-1] * a.itemsize // b.itemsize)
        return b, shape
    return arg, src[0].shape


def _const(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 0)
    if not (isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], DType)):
        raise ArityError(f"{op.name}: arg must be (value, dtype), got {arg!r}")
    if op is Ops.VCONST:
        if not isinstance(arg[0], tuple):
            raise ArityError(f"VCONST: arg must be (tuple of values, dtype), got {arg!r}")
        return arg[1], (len(arg[0]),)
    return arg[1], ()


def _buffer(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if op is Ops.PARAM:
        _arity(op, src, (1, 3))
    else:
        _arity(op, src, 1)
    dt = getattr(arg, "dtype", None)
    if not isinstance(dt, DType):
        raise ArityError(f"{op.name}: arg must carry a dtype (ParamArg / BufferArg), got {arg!r}")
    return dt, shape_values(src[0])


def _bufferview(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    if not (isinstance(arg, tuple) and len(arg) == 3 and isinstance(arg[1], DType)):
        raise ArityError(f"BUFFERVIEW: arg must be (size, dtype, offset), got {arg!r}")
    return arg[1], (arg[0],)


def _binary(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 0)
    if not isinstance(arg, bytes):
        raise ArityError(f"BINARY: arg must be bytes, got {type(arg).__name__}")
    return dtypes.uint8, (len(arg),)


def _void(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    return dtypes.void, ()


def _passthrough(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if not src:
        raise ArityError(f"{op.name}: needs at least one source")
    return src[0].dtype, src[0].shape


def _index_scalar(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    b = src[0]
    if b.dtype is not dtypes.index or b.shape != ():
        raise DTypeError(f"{op.name}: the bound must be a scalar index, got {_desc(b)}")
    return dtypes.index, ()


def _reshape(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if len(src) != 2:
        _arity(op, src, 2)
    x, new = src[0], shape_values(src[1])
    n = 1
    for d in new:  # the common case in one pass: int dims, none negative, as many elements
        if type(d) is not int or d < 0:
            break
        n *= d
    else:
        if prod(x.shape) == n:
            return x.dtype, new
    if prod(x.shape) != prod(new):
        raise ShapeError(
            f"RESHAPE: cannot reshape {fmt_shape(x.shape)} to {fmt_shape(new)}: element counts differ "
            f"({prod(x.shape)} vs {prod(new)}); the new shape must hold the same number of elements"
        )
    if any(isinstance(d, int) and d < 0 for d in new):
        raise ShapeError(f"RESHAPE: negative dimension in {fmt_shape(new)}")
    return x.dtype, new


def _expand(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if len(src) != 2:
        _arity(op, src, 2)
    x, new = src[0], shape_values(src[1])
    old = x.shape
    if len(new) == len(old):  # the common case, checked in one pass: every axis equal or grown from 1
        for a, b in zip(old, new, strict=True):
            # anything else (a symbolic dimension grown from 1, a bad one) takes the checks below
            if not (a is b or (type(b) is int and b >= 0 and type(a) is int and (a == b or a == 1))):
                break
        else:
            return x.dtype, new
    if any(isinstance(d, int) and d < 0 for d in new):
        raise ShapeError(f"EXPAND: negative dimension in {fmt_shape(new)} (expanding {fmt_shape(x.shape)})")
    if len(new) != len(x.shape) or not all(_dim_eq(a, b) or _dim_eq(a, 1) for a, b in zip(x.shape, new, strict=True)):
        raise ShapeError(
            f"EXPAND: cannot expand {fmt_shape(x.shape)} to {fmt_shape(new)}: only axes of size 1 can grow and the "
            f"rank must match (reshape to add size-1 axes first)"
        )
    return x.dtype, new


def _pad_shrink(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 3)
    x, b, e = src[0], shape_values(src[1]), shape_values(src[2])
    n = len(x.shape)
    if len(b) != n or len(e) != n:
        raise ShapeError(f"{op.name}: {fmt_shape(x.shape)} has {n} axes but got {len(b)} begins and {len(e)} ends")
    out = []
    for i, (d, lo, hi) in enumerate(zip(x.shape, b, e, strict=True)):
        if op is Ops.PAD:
            if isinstance(lo, int) and isinstance(hi, int):
                if lo < 0 or hi < 0:
                    raise ShapeError(f"PAD: pad amounts must be >= 0, got ({lo}, {hi}) on axis {i}")
                out.append(d + lo + hi if isinstance(d, int) else (d + lo + hi if lo or hi else d))
            else:
                out.append(d + lo + hi)
        else:
            # a symbolic size still bounds nothing, but the begin/end pair itself must be ordered and non-negative
            if isinstance(lo, int) and isinstance(hi, int) and not 0 <= lo <= hi <= (d if isinstance(d, int) else hi):
                raise ShapeError(
                    f"SHRINK: range [{lo}, {hi}) on axis {i} is not inside [0, {_dim(d)}] of {fmt_shape(x.shape)}; "
                    f"need 0 <= begin <= end <= size"
                )
            out.append(hi - lo if isinstance(lo, int) and isinstance(hi, int) else (hi if _dim_eq(lo, 0) else hi - lo))
    return x.dtype, tuple(out)


def _permute(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if len(src) != 1:
        _arity(op, src, 1)
    x = src[0]
    if (not isinstance(arg, tuple) or not all(type(a) is int for a in arg)
            or sorted(arg) != list(range(len(x.shape)))):
        raise ShapeError(f"PERMUTE: {arg!r} is not a permutation of the {len(x.shape)} axes of {fmt_shape(x.shape)}")
    return x.dtype, tuple(x.shape[i] for i in arg)


def _flip(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    x = src[0]
    if not isinstance(arg, tuple) or len(arg) != len(x.shape) or not all(isinstance(f, bool) for f in arg):
        raise ShapeError(f"FLIP: arg must be one bool per axis of {fmt_shape(x.shape)}, got {arg!r}")
    return x.dtype, x.shape


def _index(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if not src:
        raise ArityError("INDEX: needs a source to index")
    x, idxs = src[0], src[1:]
    if len(idxs) > len(x.shape):
        raise ShapeError(f"INDEX: {len(idxs)} indices for {fmt_shape(x.shape)}, which has {len(x.shape)} axes")
    out: list = []
    for i in idxs:
        if not i.dtype.scalar.is_int:
            raise DTypeError(f"INDEX: indices must be integers, got {_desc(i)}")
        if len(i.shape) > 1:
            raise ShapeError(f"INDEX: an index must be ()-shaped or (k,)-shaped, got {fmt_shape(i.shape)}")
        out.extend(i.shape)
    dt = x.dtype.base if isinstance(x.dtype, PtrDType) else x.dtype
    return dt, (*out, *x.shape[len(idxs) :])


def _stack(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if not src:
        raise ArityError("STACK: needs at least one source")
    dt = _same_dtype(op, src)
    first = src[0].shape
    for s in src[1:]:
        if len(s.shape) != len(first) or not all(_dim_eq(a, b) for a, b in zip(s.shape, first, strict=True)):
            raise ShapeError(f"STACK: all shapes must match, got {', '.join(fmt_shape(s.shape) for s in src)}")
    return dt, (len(src), *first)


def _replicated(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    x = src[0]
    axes = _axes(op, arg, len(x.shape), x.shape)
    return x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _axes(op: Ops, axes: object, n: int, shape: tuple) -> tuple[int, ...]:
    if not isinstance(axes, tuple) or not all(isinstance(a, int) and 0 <= a < n for a in axes):
        raise ShapeError(f"{op.name}: axes {axes!r} out of range for {fmt_shape(shape)} (need 0 <= axis < {n})")
    return axes


def _reduce(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if not src:
        raise ArityError("REDUCE: needs a source")
    if not (isinstance(arg, tuple) and len(arg) == 2 and arg[0] in (Ops.ADD, Ops.MAX, Ops.MUL)):
        raise ArityError(f"REDUCE: arg must be (Ops.ADD | Ops.MAX | Ops.MUL, axes), got {arg!r}")
    x = src[0]
    for r in src[1:]:
        if r.op is not Ops.RANGE:
            raise ArityError(f"REDUCE: sources after the value must be RANGEs, got {r.op.name}")
    axes = _axes(op, arg[1], len(x.shape), x.shape)
    return x.dtype, tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _tuple_elem(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    t = src[0]
    body = t.src[0] if t.op in (Ops.FUNCTION, Ops.CALL) else t
    if body.op is not Ops.TUPLE:
        raise ArityError(f"GETTUPLE: source must be a TUPLE or a FUNCTION/CALL whose body is a TUPLE, got {t.op.name}")
    if not isinstance(arg, int) or not 0 <= arg < len(body.src):
        raise ArityError(f"GETTUPLE: index {arg!r} out of range for a tuple of {len(body.src)}")
    return body.src[arg].dtype, body.src[arg].shape


def _call(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    if not src:
        raise ArityError(f"{op.name}: needs a body")
    return src[0].dtype, src[0].shape


def _load(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, (1, 3))
    b = src[0]
    return (b.dtype.base if isinstance(b.dtype, PtrDType) else b.dtype), b.shape


def _store(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, (2, 3))
    buf, val = src[0], src[1]
    if len(buf.shape) != len(val.shape) or not all(_dim_eq(a, b) for a, b in zip(buf.shape, val.shape, strict=True)):
        raise ShapeError(f"STORE: buffer shape {fmt_shape(buf.shape)} and value shape {fmt_shape(val.shape)} differ")
    bdt = buf.dtype.base if isinstance(buf.dtype, PtrDType) else buf.dtype
    if bdt.scalar is not val.dtype.scalar:
        raise DTypeError(f"STORE: value {_desc(val)} does not match buffer dtype {bdt.name}; cast the value")
    return dtypes.void, ()


def _custom(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    dt = arg[1] if isinstance(arg, tuple) and len(arg) >= 2 and isinstance(arg[1], DType) else dtypes.void
    return dt, ()


def _shuffle(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 1)
    return src[0].dtype, src[0].shape


def _wmma(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    _arity(op, src, 3)
    return src[2].dtype, src[2].shape


_DERIVE: dict[Ops, Callable[[Ops, tuple, object], tuple[DType, tuple]]] = {
    **{o: _alu for o in GroupOp.ALU - {Ops.THREEFRY}},
    Ops.THREEFRY: _threefry,
    Ops.CAST: _cast, Ops.BITCAST: _cast,
    Ops.CONST: _const, Ops.VCONST: _const, Ops.PARAM: _buffer, Ops.BUFFER: _buffer, Ops.BUFFERVIEW: _bufferview,
    Ops.BINARY: _binary,
    Ops.RESHAPE: _reshape, Ops.EXPAND: _expand, Ops.PAD: _pad_shrink, Ops.SHRINK: _pad_shrink, Ops.PERMUTE: _permute,
    Ops.FLIP: _flip, Ops.INDEX: _index, Ops.STACK: _stack, Ops.REPLICATED: _replicated, Ops.REDUCE: _reduce,
    Ops.FUNCTION: _call, Ops.CALL: _call, Ops.TUPLE: _void, Ops.GETTUPLE: _tuple_elem,
    Ops.LOAD: _load, Ops.STORE: _store, Ops.COPY: _passthrough,
    Ops.RANGE: _index_scalar, Ops.SPECIAL: _index_scalar, Ops.END: _void, Ops.AFTER: _passthrough, Ops.GROUP: _void,
    Ops.SINK: _void, Ops.LINEAR: _void,
    Ops.CONTIGUOUS: _passthrough, Ops.CONTIGUOUSBACKWARD: _passthrough, Ops.DETACH: _passthrough,
    Ops.BARRIER: _void, Ops.INS: _custom, Ops.GETADDR: _passthrough, Ops.IF: _void, Ops.ENDIF: _void,
    Ops.WMMA: _wmma, Ops.CUSTOM: _custom, Ops.ATOMICADD: _void, Ops.CUSTOMFUNCTION: _custom, Ops.PROGRAM: _void,
    Ops.SOURCE: _void, Ops.SHUFFLE: _shuffle,
}


def derive(op: Ops, src: tuple, arg: object) -> tuple[DType, tuple]:
    try:
        return _DERIVE[op](op, src, arg)
    except (AttributeError, TypeError) as e:
        # a non-UOp source surfaces as a bare AttributeError deep in a deriver; name it instead (this costs
        # nothing on the success path)
        if not isinstance(src, tuple):
            raise ArityError(f"{op.name}: src must be a tuple of UOps, got {type(src).__name__}") from e
        bad = [s for s in src if not hasattr(s, "op") or not hasattr(s, "shape")]
        if bad:
            raise ArityError(
                f"{op.name}: every source must be a UOp, got {type(bad[0]).__name__} {bad[0]!r}; wrap Python "
                f"numbers with UOp.const"
            ) from e
        raise
