"""Comparisons, logical and bitwise ops, and the float classifiers (isnan, isinf, isfinite); operands are
promoted and broadcast as in `tensor.elementwise`, and every result here but the bitwise ops is bool."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import tensor.tensor as tt
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor.elementwise import Operand, as_tensor, binary, const_uop, need_kind, promoted_dtype, wrap

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def cmp(op: Ops, what: str) -> Callable[[Operand, Operand], Tensor]:
    def fn(x: Operand, y: Operand) -> Tensor:
        return binary(op, what, x, y)

    fn.__name__ = what
    fn.__doc__ = f"Elementwise {what} comparison (operands promoted, result bool)."
    return fn


Binary = Callable[[Operand, Operand], "Tensor"]
lt: Binary = cmp(Ops.CMPLT, "lt")
gt: Binary = cmp(Ops.CMPGT, "gt")
le: Binary = cmp(Ops.CMPLE, "le")
ge: Binary = cmp(Ops.CMPGE, "ge")
eq: Binary = cmp(Ops.CMPEQ, "eq")
ne: Binary = cmp(Ops.CMPNE, "ne")


def to_bool(x: Tensor) -> Tensor:
    return x if x.dtype.is_bool else ne(x, 0)


def logical_not(x: Tensor) -> Tensor:
    return wrap(UOp(Ops.NOT, (to_bool(x).uop,)), x.device)


def _logical(op: Ops, what: str) -> Callable[[Tensor, Operand], Tensor]:
    def fn(x: Tensor, y: Operand) -> Tensor:
        yt = as_tensor(y, x.device, what)
        yb = to_bool(yt) if isinstance(yt, tt.Tensor) else bool(yt)
        return binary(op, what, to_bool(x), yb, dtypes.bool)

    fn.__name__ = what
    return fn


logical_and: Callable[[Tensor, Operand], Tensor] = _logical(Ops.AND, "logical_and")
logical_or: Callable[[Tensor, Operand], Tensor] = _logical(Ops.OR, "logical_or")
logical_xor: Callable[[Tensor, Operand], Tensor] = _logical(Ops.XOR, "logical_xor")


def _bitwise(op: Ops, what: str, kinds: str = "iub") -> Callable[[Operand, Operand], Tensor]:
    words = "integer or bool" if "b" in kinds else "integer"

    def fn(x: Operand, y: Operand) -> Tensor:
        need_kind(what, promoted_dtype(x, y, what), kinds, words)
        return binary(op, what, x, y)

    fn.__name__ = what
    return fn


bitwise_and: Binary = _bitwise(Ops.AND, "bitwise_and")
bitwise_or: Binary = _bitwise(Ops.OR, "bitwise_or")
bitwise_xor: Binary = _bitwise(Ops.XOR, "bitwise_xor")
lshift: Binary = _bitwise(Ops.SHL, "lshift", "iu")
rshift: Binary = _bitwise(Ops.SHR, "rshift", "iu")


def bitwise_not(x: Tensor) -> Tensor:
    need_kind("bitwise_not", x.dtype, "iub", "integer or bool")
    return logical_not(x) if x.dtype.is_bool else wrap(x.uop ^ x.uop.const_like(-1), x.device)


# ---------------------------------------------------------------- float classes


def isnan(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return wrap(const_uop(False, dtypes.bool, x.shape), x.device)
    return wrap(x.uop.ne(x.uop), x.device)


def isinf(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return wrap(const_uop(False, dtypes.bool, x.shape), x.device)
    u = x.uop
    return wrap(u.eq(u.const_like(math.inf)) | u.eq(u.const_like(-math.inf)), x.device)


def isfinite(x: Tensor) -> Tensor:
    if not x.dtype.is_float:
        return wrap(const_uop(True, dtypes.bool, x.shape), x.device)
    u = x.uop
    return wrap(u.eq(u) & u.ne(u.const_like(math.inf)) & u.ne(u.const_like(-math.inf)), x.device)


__all__ = ["bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "eq", "ge", "gt", "isfinite", "isinf", "isnan",
           "le", "logical_and", "logical_not", "logical_or", "logical_xor", "lshift", "lt", "ne", "rshift", "to_bool"]
