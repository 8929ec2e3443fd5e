"""The spec checker's per-op arg checks (rewrite.spec): each takes a node and returns a message, or None when its
arg is fine."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from typing import TypeGuard, cast

from rewrite.dtype import AddrSpace, DType, PtrDType, dtypes
from rewrite.ops import AxisType, Ops
from rewrite.uop import BufferArg, ParamArg, UOp

# ---------------------------------------------------------------- arg checks: a message, or None when fine

ArgCheck = Callable[[UOp], "str | None"]


def _no_arg(u: UOp) -> str | None:
    return None if u.arg is None else f"takes no arg, got {u.arg!r} (an arg makes it a different node to the rules)"


def _any_arg(u: UOp) -> str | None:
    return None


def _is_int(x: object) -> TypeGuard[int]:
    return type(x) is int  # bool is an int subclass, and never a count or an axis


def _device_problem(d: object) -> str | None:
    if d is None or (isinstance(d, str) and d):
        return None
    if isinstance(d, tuple) and d and all(isinstance(x, str) and x for x in d):
        return None
    return f"a device must be a name or a non-empty tuple of names, got {d!r}"


_BF16_OVERFLOW = (2 - 2**-8) * 2.0**127  # the first value that rounds to inf in bfloat16


def _float_fits(v: float, dt: DType) -> bool:
    if not math.isfinite(v) or dt is dtypes.float64:
        return True
    if dt is dtypes.bfloat16:
        return abs(v) < _BF16_OVERFLOW
    try:
        struct.pack(f"<{dt.fmt}", v)  # struct rounds first, so it overflows exactly when the dtype would
    except OverflowError:
        return False
    return True


def _value_problem(v: object, dt: DType) -> str | None:
    """Why `v` is not the canonical value of a `dt` constant (as UOp.const would store it), or None."""
    k = dt.kind
    if k == "b":
        return None if type(v) is bool else f"a bool constant must hold True or False, got {v!r}"
    if k in ("i", "u", "x"):
        if type(v) is not int:
            return f"a constant of dtype {dt.name} must hold an int, got {type(v).__name__} {v!r}"
        if k != "x" and not dt.min <= v <= dt.max:
            return f"{v} is outside the {dt.name} range [{dt.min}, {dt.max}]"
        return None
    if k == "f":
        if type(v) is not float:
            return f"a constant of dtype {dt.name} must hold a float, got {type(v).__name__} {v!r}"
        if v != v and v is not math.nan:
            return "a NaN constant must hold math.nan, the one canonical NaN, so that NaN constants intern as one"
        if not _float_fits(v, dt):
            return f"{v!r} overflows {dt.name}"
        return None
    return f"dtype {dt.name} cannot hold a constant (only bool, integer and float dtypes hold values)"


def _const_arg(u: UOp) -> str | None:
    value, dt = cast("tuple[object, DType]", u.arg)  # derive has checked the (value, dtype) form
    if dt.count != 1 or isinstance(dt, PtrDType):
        return f"dtype must be a scalar, got {dt.name}; build vectors with STACK or VCONST"
    return _value_problem(value, dt)


def _vconst_arg(u: UOp) -> str | None:
    values, dt = cast("tuple[tuple[object, ...], DType]", u.arg)
    if dt.count != 1 or isinstance(dt, PtrDType):
        return f"dtype must be a scalar (the values make the vector), got {dt.name}"
    problems = [f"value {i}: {p}" for i, v in enumerate(values) if (p := _value_problem(v, dt))]
    return "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "") if problems else None


def _storage_arg(cls: type[ParamArg] | type[BufferArg], slot_ok: Callable[[object], bool], slot_what: str) -> ArgCheck:
    def check(u: UOp) -> str | None:
        a = u.arg
        if not isinstance(a, cls):
            return f"arg must be a {cls.__name__}, got {a!r}"
        if not slot_ok(a.slot):
            return f"slot must be {slot_what}, got {a.slot!r}"
        if isinstance(a.dtype, PtrDType) or a.dtype.kind == "v":
            return f"dtype must be a value dtype, got {a.dtype!r}"
        if not isinstance(a.addrspace, AddrSpace):
            return f"addrspace must be an AddrSpace, got {a.addrspace!r}"
        return _device_problem(a.device)

    return check


_param_arg = _storage_arg(
    ParamArg, lambda s: (_is_int(s) and s >= 0) or (isinstance(s, str) and bool(s)), "an int >= 0 or a variable name"
)
_buffer_arg = _storage_arg(BufferArg, lambda s: _is_int(s) and s >= 0, "an int >= 0")


def _bufferview_arg(u: UOp) -> str | None:
    size, _dt, offset = cast("tuple[object, DType, object]", u.arg)
    if not (_is_int(size) and size >= 0 and _is_int(offset) and offset >= 0):
        return f"arg must be (size >= 0, dtype, offset >= 0) with int size and offset, got {u.arg!r}"
    return None


SHUFFLE_MASKS = (1, 2, 4, 8, 16)  # the lane XOR masks of a SHUFFLE: within a warp of 32


def _shuffle_arg(u: UOp) -> str | None:
    if _is_int(u.arg) and u.arg in SHUFFLE_MASKS:
        return None
    return f"arg must be the lane mask a warp's lanes exchange by (lane XOR arg), one of {SHUFFLE_MASKS}, got {u.arg!r}"


def _type_arg(t: type, what: str) -> ArgCheck:
    return lambda u: None if isinstance(u.arg, t) else f"arg must be {what}, got {u.arg!r}"


def _dtype_arg(u: UOp) -> str | None:
    return None if isinstance(u.arg, DType) and u.arg.kind != "v" else f"arg must be a value DType, got {u.arg!r}"


def _axes_problem(axes: object, n: int) -> str | None:
    if not isinstance(axes, tuple) or not all(_is_int(a) and 0 <= a < n for a in axes):
        return f"axes must be a tuple of ints in [0, {n}), got {axes!r}"
    if len(set(axes)) != len(axes):
        return f"axes {axes!r} repeat an axis"
    return None


def _permute_arg(u: UOp) -> str | None:
    n = len(u.src[0].shape)
    ok = isinstance(u.arg, tuple) and all(_is_int(a) for a in u.arg) and sorted(u.arg) == list(range(n))
    return None if ok else f"arg must be a permutation of range({n}), got {u.arg!r}"


def _flip_arg(u: UOp) -> str | None:
    n = len(u.src[0].shape)
    ok = isinstance(u.arg, tuple) and len(u.arg) == n and all(type(f) is bool for f in u.arg)
    return None if ok else f"arg must be {n} bools (one per axis), got {u.arg!r}"


def _replicated_arg(u: UOp) -> str | None:
    return _axes_problem(u.arg, len(u.src[0].shape))


# the dtype kinds each reduce op accepts, as its ALU op does (ADD and MUL over bool would silently become OR/AND)
_REDUCE_KINDS = {Ops.ADD: "iuxf", Ops.MUL: "iuxf", Ops.MAX: "iuxfb"}


def _reduce_arg(u: UOp) -> str | None:
    a = u.arg
    if not (isinstance(a, tuple) and len(a) == 2 and a[0] in _REDUCE_KINDS):
        return f"arg must be (Ops.ADD | Ops.MAX | Ops.MUL, axes), got {a!r}"
    if (p := _axes_problem(a[1], len(u.src[0].shape))) is not None:
        return p
    if tuple(sorted(a[1])) != a[1]:
        return f"axes {a[1]!r} must be sorted, so that equal reductions are one node"
    if u.src[0].dtype.scalar.kind not in _REDUCE_KINDS[a[0]]:
        return f"REDUCE {a[0].name} does not accept {u.src[0].dtype.name} values; cast them first"
    return None


def _gettuple_arg(u: UOp) -> str | None:
    t = u.src[0]
    body = t.src[0] if t.op in (Ops.FUNCTION, Ops.CALL) else t
    ok = _is_int(u.arg) and 0 <= u.arg < len(body.src)
    return None if ok else f"index {u.arg!r} is out of range for a tuple of {len(body.src)}"


def _copy_arg(u: UOp) -> str | None:
    if u.arg is None:
        return "arg must be the target device, got None"
    return _device_problem(u.arg)


def _load_arg(u: UOp) -> str | None:
    a = u.arg
    if isinstance(a, tuple) and len(a) == 3 and a[0] == "ldmatrix":  # a warp's ldmatrix (lower.tc_async)
        ok = a[1] in (1, 2, 4) and isinstance(a[2], bool)
        return None if ok else f"ldmatrix arg is ('ldmatrix', 1|2|4, trans), got {a!r}"
    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], AddrSpace):
        return _device_problem(a[0])
    return _device_problem(a)


def _store_arg(u: UOp) -> str | None:
    return None if u.arg in (None, "cp.async", "stream") else \
        f"arg must be None, 'cp.async' (lower.tc_async) or 'stream' (rules.streaming), got {u.arg!r}"


def _barrier_arg(u: UOp) -> str | None:
    a = u.arg
    ok = a in (None, "cp.async.commit", "wgmma.fence", "wgmma.commit") or (
        isinstance(a, tuple) and a[:1] in (("cp.async.wait",), ("wgmma.wait",)) and len(a) >= 2 and _is_int(a[1])
        and a[1] >= 0 and (len(a) == 2 or (a[0] == "cp.async.wait" and a[2:] == ("proxy",))))
    return None if ok else (f"arg must be None, 'cp.async.commit', ('cp.async.wait', n >= 0[, 'proxy']), "
                            f"'wgmma.fence', 'wgmma.commit' or ('wgmma.wait', n >= 0), got {a!r}")


def _range_arg(u: UOp) -> str | None:
    a = u.arg
    ok = isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], AxisType)
    if ok and isinstance(a, tuple):
        ok = _is_int(a[0]) or (isinstance(a[0], tuple) and all(_is_int(x) for x in a[0]))
    return None if ok else f"arg must be (id, AxisType) with an int or tuple-of-ints id, got {a!r}"


def _custom_arg(u: UOp) -> str | None:
    a = u.arg
    ok = isinstance(a, str) or (isinstance(a, tuple) and bool(a) and isinstance(a[0], str))
    return None if ok else f"arg must be a format string, or a tuple starting with one, got {a!r}"
