"""GCC vector types of the C renderer (devices.c_vector): one typedef per (dtype, lanes), named like `f32x16`:
    typedef float f32x16 __attribute__((vector_size(64), aligned(4)));
The element alignment lets a vector live at any element address; vectors move between memory and registers
through a may_alias twin of the type (`f32x16_m`): one unaligned vector move.

A lane's register type is not always its memory type. index lanes are `long long` (`llx16`), as scalar index
values are; bool lanes are int8_t masks (devices.c_vector). float16 and bfloat16 lanes are float32 registers
(`f32xN`) holding 16-bit values, rounded back after each op (devices.c_half for float16, devices.c_vector's
`vbf16_round_` for bfloat16), and moved to and from their 16-bit memory by conversions: x86 has no vector
arithmetic on halves short of AVX512-FP16, so gcc computes a `_Float16` vector one lane at a time (convert, op,
convert back, lane by lane), while a float32 register and one VCVTPS2PH / VCVTPH2PS pair per op (F16C) is a vector.
A 16-bit float that a kernel only moves is held as its bits instead (`u16xN`, `uint16_t`; devices.c_bits): the
conversions would quiet a signaling nan.
"""

from __future__ import annotations

from devices.c_scalar import CContext, ctype
from rewrite.dtype import DType, dtypes

_SHORT = {
    dtypes.bool: "i8", dtypes.int8: "i8", dtypes.uint8: "u8", dtypes.int16: "i16", dtypes.uint16: "u16",
    dtypes.int32: "i32", dtypes.uint32: "u32", dtypes.int64: "i64", dtypes.uint64: "u64", dtypes.index: "ll",
    dtypes.float16: "f32", dtypes.bfloat16: "f32", dtypes.float32: "f32", dtypes.float64: "f64",
}
# lane types whose registers are float32 lanes
FLOAT32_LANES = frozenset({dtypes.float16, dtypes.bfloat16})


def reg_dtype(dt: DType) -> DType:
    """The dtype a vector register of `dt` lanes holds: float32 for float16 and bfloat16, else `dt` itself."""
    return dtypes.float32 if dt.scalar in FLOAT32_LANES else dt.scalar


def reg_size(dt: DType) -> int:
    """Bytes per lane in a register (float16 and bfloat16 lanes are floats)."""
    return 4 if dt.scalar in FLOAT32_LANES else dt.itemsize


def elem_type(dt: DType) -> str:
    """The C type of one lane in a register (a bool lane is an int8_t mask)."""
    return "int8_t" if dt is dtypes.bool else ctype(reg_dtype(dt))


def vtype(dt: DType, n: int, ctx: CContext, may_alias: bool = False) -> str:
    """The vector type of n lanes of `dt`, its typedef added to the file once; `may_alias` gives its twin that
    moves lanes between registers and memory (devices.c_vector's _mem_type)."""
    if (made := _VTYPES.get((dt, n, may_alias))) is None:
        name = f"{_SHORT[dt.scalar]}x{n}" + ("_m" if may_alias else "")
        size = reg_size(dt)
        attrs = f"vector_size({n * size}), aligned({size}){', may_alias' if may_alias else ''}"
        made = (name, f"typedef {name}", f"typedef {elem_type(dt)} {name} __attribute__(({attrs}));")
        _VTYPES[(dt, n, may_alias)] = made
    ctx.define(made[1], made[2])
    return made[0]


_VTYPES: dict[tuple[DType, int, bool], tuple[str, str, str]] = {}  # (dtype, lanes, may_alias) -> vtype's texts


__all__ = ["FLOAT32_LANES", "elem_type", "reg_dtype", "reg_size", "vtype"]
