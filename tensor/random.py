"""Random tensors from the counter-based THREEFRY op: rand, randn, randint, uniform, normal and the *_like forms.

Each call draws THREEFRY(counter, key) per element: the counter is the element's flat position (an arange in
uint64), the key packs the seed (low word) and a per-call number (high word) that `manual_seed` resets. So a
seed fixes every later draw, and two calls never share a stream. No state lives on a device.

Bits to floats: the top mantissa bits of a random word, or-ed with the exponent of 1.0 and bitcast, are a float
uniform in [1, 2); minus 1 gives [0, 1) exactly (no rounding up to 1.0). float16 and bfloat16 keep only as many
bits as their mantissa holds, so the cast down is exact too. randn is Box-Muller on two uniforms.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import tensor.tensor as tt
from rewrite.dtype import DType, dtypes
from rewrite.errors import ArgumentError, DTypeError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor.elementwise import const_uop
from tensor.helpers import Device, canonical_device, check_shape, shape_arg, to_dtype
from tensor.reduce import arange_uop
from tensor.symbolic import need_concrete

if TYPE_CHECKING:
    from tensor.tensor import Tensor

_M32 = 0xFFFFFFFF
_state = {"seed": int(time.time()) & _M32, "calls": 0}
_MANTISSA = {dtypes.float16: 10, dtypes.bfloat16: 7, dtypes.float32: 23}


def manual_seed(seed: int = 0) -> None:
    """Fix the random stream: the same seed gives the same sequence of draws."""
    if not isinstance(seed, int):
        raise TypeError(f"manual_seed: seed must be an int, got {type(seed).__name__}")
    _state["seed"], _state["calls"] = seed & _M32, 0


def _bits(shape: tuple[int, ...]) -> UOp:
    """One uint64 THREEFRY output per element."""
    n = math.prod(shape)
    key = _state["seed"] | (_state["calls"] & _M32) << 32
    _state["calls"] += 1
    ctr = arange_uop(n, dtypes.uint64)
    return UOp(Ops.THREEFRY, (ctr, const_uop(key, dtypes.uint64, (n,)))).reshape(shape)


def _float_dtype(dtype: object, what: str) -> DType:
    dt = dtypes.default_float if dtype is None else to_dtype(dtype, what)
    if not dt.is_float:
        raise DTypeError(f"{what}: needs a float dtype, got {dt.name}")
    return dt


def _uniform01(shape: tuple[int, ...], dt: DType) -> UOp:
    bits = _bits(shape)
    if dt is dtypes.float64:
        one = bits.const_like(0x3FF0000000000000)
        return ((bits >> bits.const_like(12)) | one).bitcast(dtypes.float64) - 1.0
    w = bits.cast(dtypes.uint32)  # the low word
    mant = w >> w.const_like(9)
    if (keep := _MANTISSA[dt]) < 23:
        mant = mant & mant.const_like(_M32 ^ ((1 << (23 - keep)) - 1))
    return ((mant | mant.const_like(0x3F800000)).bitcast(dtypes.float32) - 1.0).cast(dt)


def _shape(shape: tuple, what: str) -> tuple[int, ...]:
    return need_concrete(check_shape(shape_arg(shape, what), what), what)


def rand(*shape: int, dtype: object = None, device: Device | None = None) -> Tensor:
    """Uniform in [0, 1)."""
    dt = _float_dtype(dtype, "rand")
    return tt.Tensor._wrap(_uniform01(_shape(shape, "rand"), dt), canonical_device(device))


def randn(*shape: int, dtype: object = None, device: Device | None = None) -> Tensor:
    """Standard normal: sqrt(-2 ln(1 - u1)) * cos(2 pi u2), computed in float32 (float64 for float64)."""
    dt = _float_dtype(dtype, "randn")
    sh = _shape(shape, "randn")
    work = dtypes.float64 if dt is dtypes.float64 else dtypes.float32
    u = tt.Tensor._wrap(_uniform01((2, *sh), work), canonical_device(device))
    u1, u2 = u[0], u[1]
    r = ((1.0 - u1).log() * -2.0).sqrt()
    return (r * (u2 * (2 * math.pi)).cos()).cast(dt)


def randint(*shape: int, low: int = 0, high: int = 10, dtype: object = dtypes.int32,
            device: Device | None = None) -> Tensor:
    """Uniform integers in [low, high) (tinygrad's signature): 64 random bits modulo the range, so the bias is
    below range / 2**64."""
    dt = to_dtype(dtype, "randint")
    if not dt.is_int:
        raise DTypeError(f"randint: needs an integer dtype, got {dt.name}")
    if not isinstance(low, int) or not isinstance(high, int) or high <= low:
        raise ValueError(f"randint: need ints low < high, got low={low!r}, high={high!r}")
    bits = _bits(_shape(shape, "randint"))
    r = (bits % bits.const_like(high - low)).cast(dtypes.int64) + low
    return tt.Tensor._wrap(r.cast(dt), canonical_device(device))


def uniform(*shape: int, low: float = 0.0, high: float = 1.0, dtype: object = None,
            device: Device | None = None) -> Tensor:
    if not (isinstance(low, (int, float)) and isinstance(high, (int, float)) and math.isfinite(low)
            and math.isfinite(high) and low <= high):
        raise ArgumentError(f"uniform: need finite numbers low <= high, got low={low!r}, high={high!r}")
    return rand(*shape, dtype=dtype, device=device) * (high - low) + low


def normal(*shape: int, mean: float = 0.0, std: float = 1.0, dtype: object = None,
           device: Device | None = None) -> Tensor:
    if not (isinstance(mean, (int, float)) and isinstance(std, (int, float)) and math.isfinite(mean)
            and math.isfinite(std) and std >= 0):
        raise ArgumentError(f"normal: need a finite mean and a finite std >= 0, got mean={mean!r}, std={std!r}")
    return randn(*shape, dtype=dtype, device=device) * std + mean


def rand_like(x: Tensor, dtype: object = None, device: Device | None = None) -> Tensor:
    return rand(*x.shape, dtype=dtype or (x.dtype if x.dtype.is_float else None), device=device or x.device)


def randn_like(x: Tensor, dtype: object = None, device: Device | None = None) -> Tensor:
    return randn(*x.shape, dtype=dtype or (x.dtype if x.dtype.is_float else None), device=device or x.device)


__all__ = ["manual_seed", "normal", "rand", "rand_like", "randint", "randn", "randn_like", "uniform"]
