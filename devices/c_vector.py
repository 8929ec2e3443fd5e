"""C text for vector values (shape (n,)): GCC vector extensions where an operator computes exactly what
rewrite.semantics gives lane by lane, and a loop over the lanes around the scalar text otherwise.

Types (devices.c_vtypes): one typedef per (dtype, lanes), named like `f32x16`, moved between memory and registers
by the `vload_` / `vstore_` helpers. float16 and bfloat16 vectors are `f32xN` registers holding 16-bit values,
rounded after each op: float16 lanes by `vf16_round_` (devices.c_half: VCVTPS2PH and back with F16C), bfloat16 lanes
by `vbf16_round_`, the scalar bf16_round written with integer vector ops; in memory they are halves (converted
by VCVTPH2PS / VCVTPS2PH) and uint16 bits.

Bool vectors are masks: `i8xN` whose lanes are -1 (every bit set) for true and 0 for false, not 0/1. That is
what a GCC vector comparison gives (at the compared width, narrowed with `__builtin_convertvector`); sign
extension widens it to the mask a bit-select needs; NOT is `~`, AND/OR/XOR/MAX are bit operators. Memory holds
one 0/1 `_Bool` byte per lane, and negation converts either way. Because true is -1, bools order the other
way round as masks: CMPLT on bools is `>` on the masks.

Native (one vector expression; lane for lane the scalar result):
  * ADD SUB MUL DIV NEG RECIP, and MULACC on ints: int lanes wrap at their own width (-fwrapv); float lanes are
    IEEE ops (no contraction under -ffp-contract=off); float16 and bfloat16 lanes compute in float32 and are
    rounded after each op, which is what the scalar text computes (devices.c_half says why that is exact).
  * comparisons, AND OR XOR NOT SHL SHR; MAX as a compare and a bit-select (nan wins, MAX(0, -0) is -0, as
    numpy.maximum); WHERE as a bit-select (C's ?: for a scalar condition); CDIV/CMOD by a scalar constant
    other than 0 and -1.
  * CAST except float -> int: `__builtin_convertvector` converts each lane as a C cast does (which is what the
    scalar text relies on); to bfloat16 through float32 and `vbf16_round_`, as the scalar text does; to float16
    the same way with `vf16_round_` (one rounding: a float32, float16, bfloat16 or int value is exact in float32
    or beyond float16's range), except from float64, which C converts to `_Float16` lanes directly.
  * BITCAST between same-size types other than bool and bfloat16: a vector cast reinterprets the bits (float16
    lanes as their half bits).
  * LOAD and STORE whose lanes are consecutive: one move of the whole vector, from `base + (0..n-1)` where
    the index is the VCONST itself or ADD(scalar, VCONST) (either order); a scalar gate guards the whole.
  * MULACC on floats: a fused multiply-add helper, one vector FMA instruction where the target has them; TRUNC
    and SQRT on float32/float64 vectors of 16, 32 or 64 bytes (and float16 lanes, rounded after): `vtrunc_`,
    `vsqrt_` (devices.c_vround), one x86 op.
Lane by lane (`({ ... for (int lane_l = 0; ...) lane_r[lane_l] = <scalar text>; lane_r; })`, operands bound
once): other TRUNC and SQRT, EXP2, LOG2, SIN and POW on floats, other CDIV/CMOD, CAST float -> int (the wrap helper),
BITCAST to or from bool and bfloat16, gathers and scatters (any other vector index), and loads or stores gated
per lane. A scatter writes lanes 0..n-1 in order, so a later lane wins an address two lanes share.
A scalar operand of a vector op is splat: a literal vector for a CONST, `splat_f32x16(x)` otherwise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import cast

from devices.c_bits import const_bits
from devices.c_half import half_bits, half_floats, half_vtype, load_half, round_half, store_half, unrounded
from devices.c_masked import all_lanes_helper, gate_all_true, masked_load_dtype_ok, masked_load_helper, select_helper
from devices.c_scalar import (
    CContext,
    bits_operand,
    bits_ref,
    const_text,
    ctype,
    render_alu,
    render_bitcast,
    render_cast,
    shift_amount,
    unparen,
)
from devices.c_stream import STREAM_FENCE, vstream
from devices.c_vfma import fma_helper
from devices.c_vround import has_vector_round, minmax_call, round_helper
from devices.c_vtypes import elem_type, reg_dtype, reg_size, vtype
from devices.linear import base_of, const_value, indexes_of, is_global, lanes, strided_start
from rewrite.dsl import Rule, RuleSet, op, var
from rewrite.dtype import DType, dtypes
from rewrite.interval import float_to_int_in_range
from rewrite.ops import GroupOp, Ops
from rewrite.props import contiguous_start as _contiguous_start
from rewrite.semantics import round_to
from rewrite.uop import ConstValue, UOp

_INT_OF_SIZE = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}
_ARITH = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.DIV: "/", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^",
          Ops.SHL: "<<", Ops.SHR: ">>", Ops.CDIV: "/", Ops.CMOD: "%"}
_COMPARE = {Ops.CMPLT: "<", Ops.CMPGT: ">", Ops.CMPLE: "<=", Ops.CMPGE: ">=", Ops.CMPEQ: "==", Ops.CMPNE: "!="}
# the same comparisons on bool masks, where true (-1) is below false (0)
_MASK_COMPARE = {Ops.CMPLT: ">", Ops.CMPGT: "<", Ops.CMPLE: ">=", Ops.CMPGE: "<=", Ops.CMPEQ: "==", Ops.CMPNE: "!="}
# results that are exact in every lane type, so never rounded to bfloat16 again
_EXACT = GroupOp.Comparison | frozenset({Ops.AND, Ops.OR, Ops.XOR, Ops.NOT, Ops.SHL, Ops.SHR, Ops.NEG})


# ---------------------------------------------------------------- types and operands


def contiguous_start(i: UOp) -> tuple[UOp | None, int] | None:
    """rewrite.props.contiguous_start of an index vector, kept on the node (a render asks it of one index for its
    value, its INDEX, LOAD and STORE)."""
    return i._prop("contiguous_start", _contiguous_start)


def value_type(u: UOp, ctx: CContext, bits: bool | None = None) -> str:
    """The C type that holds the value of `u`: its scalar type, or its vector type; uint16 bits for a 16-bit float
    held as bits (devices.c_bits), unless `bits` is False (the float view of a held LOAD)."""
    dt = dtypes.uint16 if (u in ctx.bits if bits is None else bits) else u.dtype
    return ctx.ctype(dt) if u.shape == () else vtype(dt, lanes(u), ctx)


def float_view(u: UOp, name: str, ctx: CContext) -> str:
    """The float text of the held LOAD u (devices.c_bits), from its bits `name`: what computing ops read of it."""
    if u.dtype is dtypes.float16:
        return f"{half_floats(lanes(u), ctx)}({name})" if u.shape != () else \
            f"{ctx.helper('bitcast_uint16_to_float16')}({name})"
    ctx.helper("bf16_round")  # defines bf16_to_f32 too
    if u.shape == ():
        return f"bf16_to_f32({name})"
    return f"(({vtype(dtypes.float32, lanes(u), ctx)})(__builtin_convertvector({name}, " \
        f"{vtype(dtypes.uint32, lanes(u), ctx)}) << 16))"


def _mask_type(dt: DType, n: int, ctx: CContext) -> str:
    """The signed int vector as wide as `dt`'s lanes: the bit view a bit-select works on."""
    return vtype(_INT_OF_SIZE[reg_size(dt)], n, ctx)


def _atom(text: str) -> str:
    """`text` safe to subscript or negate: names and fully parenthesized text as they are."""
    whole = text.startswith("({") or (text.startswith("(") and unparen(text) != text)
    return text if whole or re.fullmatch(r"\w+", text) else f"({text})"


def _lane_const(v: ConstValue, dt: DType) -> str:
    """One lane's C literal, as the register holds it (a float16 lane is a float: the float16 value's literal)."""
    if dt is dtypes.float16:
        return const_text(round_to(dt, v), dtypes.float32)
    return ("-1" if v else "0") if dt is dtypes.bool else const_text(v, dt)


def _splat(s: UOp, n: int, ctx: CContext, bits: bool = False) -> str:
    """A scalar operand as a vector of n equal lanes (`bits`: of a value held as bits, devices.c_bits)."""
    dt = dtypes.uint16 if bits else s.dtype
    t = vtype(dt, n, ctx)
    if s.op is Ops.CONST:
        return f"(({t}){{{', '.join([_lane_const(const_value(s), s.dtype)] * n)}}})"
    elem = elem_type(dt)
    lanes_ = ", ".join(["x"] * n)
    fn = ctx.define(f"splat_{t}", f"static inline {t} splat_{t}({elem} x) {{ return ({t}){{{lanes_}}}; }}")
    text = ctx.bits_of(s) if bits else ctx[s]
    return f"{fn}({'-' + _atom(text) if s.dtype is dtypes.bool else unparen(text)})"


def _vec(s: UOp, n: int, ctx: CContext, bits: bool = False) -> str:
    """Operand s of n lanes; `bits`: read by a value held as bits (devices.c_bits), a constant as its bits."""
    if bits and s.op in (Ops.CONST, Ops.VCONST):
        vals = cast(tuple, cast(tuple, s.arg)[0]) if s.op is Ops.VCONST else (const_value(s),) * n
        return f"(({vtype(dtypes.uint16, n, ctx)}){{{', '.join(f'{const_bits(v, s.dtype):#06x}' for v in vals)}}})"
    if s.shape != () or s in ctx.broadcast:
        return ctx.bits_of(s) if bits else ctx[s]
    return _splat(s, n, ctx, bits)


def _round(dt: DType, e: str, n: int, ctx: CContext) -> str:
    """Round an op's float32 lanes back to bfloat16 or float16 (other lane types compute in their own type)."""
    if dt is dtypes.float16:
        return f"{round_half(n, ctx)}({unparen(e)})"
    return f"{_bf16_round(n, ctx)}({unparen(e)})" if dt is dtypes.bfloat16 else e


def _bf16_bits(n: int, ctx: CContext) -> str:
    """The helper that gives the bfloat16 bits (in the low half of each u32 lane) of float lanes: the scalar
    f32_to_bf16 (round to nearest even, nan kept quiet) in integer vector ops."""
    f, u = vtype(dtypes.float32, n, ctx), vtype(dtypes.uint32, n, ctx)
    fn = f"vbf16_bits_{f}"
    return ctx.define(fn, (
        f"static inline {u} {fn}({f} f) {{\n  {u} u = ({u})f;\n  {u} nan = ({u})((u & 0x7fffffffu) > 0x7f800000u);\n"
        f"  return (nan & ((u >> 16) | 0x40u)) | (~nan & ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16));\n}}"))


def _bf16_round(n: int, ctx: CContext) -> str:
    f, bits = vtype(dtypes.float32, n, ctx), _bf16_bits(n, ctx)
    fn = f"vbf16_round_{f}"
    return ctx.define(fn, f"static inline {f} {fn}({f} f) {{ return ({f})({bits}(f) << 16); }}")


# ---------------------------------------------------------------- values


def render_vconst(x: UOp, ctx: CContext) -> str:
    return f"(({vtype(x.dtype, len(cast(tuple, x.arg)[0]), ctx)}){{{x._prop('c_lanes', _lane_consts)}}})"


def _lane_consts(x: UOp) -> str:
    """A VCONST's lanes as C literals (kept on the node: a VCONST is shared by many kernels)."""
    return ", ".join(_lane_const(v, x.dtype) for v in cast(tuple, x.arg)[0])


def render_stack(x: UOp, ctx: CContext) -> str:
    if x in ctx.bits:
        return f"(({vtype(dtypes.uint16, len(x.src), ctx)}){{{', '.join(bits_operand(s, ctx) for s in x.src)}}})"
    lanes_ = [f"-{_atom(ctx[s])}" if x.dtype is dtypes.bool else unparen(ctx[s]) for s in x.src]
    return f"(({vtype(x.dtype, len(x.src), ctx)}){{{', '.join(lanes_)}}})"


def render_lane(x: UOp, v: UOp, k: UOp, ctx: CContext) -> str:
    e = f"{_atom(ctx.bits_of(v) if x in ctx.bits else ctx[v])}[{const_value(k)}]"
    return f"({e}!=0)" if x.dtype is dtypes.bool else e


def render_vector_index(buf: UOp, ctx: CContext) -> str:
    return ctx[buf]  # no C value: LOAD and STORE read the buffer and the positions from the INDEX itself


def _per_lane(x: UOp, ctx: CContext, scalar: Callable[[CContext], str]) -> str:
    """`x` computed lane by lane: each operand bound once, `scalar` renders one lane from lane names."""
    n, lc = lanes(x), CContext(ctx.prog, ctx.helpers)
    binds = []
    for j, s in enumerate(dict.fromkeys(x.src)):
        binds.append(f"{value_type(s, ctx, False)} lane_{j} = {unparen(ctx[s])};")
        elem = f"lane_{j}[lane_l]" if s.shape != () else f"lane_{j}"
        lc.names[s] = f"({elem}!=0)" if s.dtype is dtypes.bool and s.shape != () else elem
    body = unparen(scalar(lc))
    return _lane_loop(value_type(x, ctx), n, binds, f"-{_atom(body)}" if x.dtype is dtypes.bool else body)


def _lane_loop(t: str, n: int, binds: list[str], body: str) -> str:
    return (f"({{ {' '.join(binds)} {t} lane_r; for (int lane_l = 0; lane_l < {n}; lane_l++) "
            f"lane_r[lane_l] = {body}; lane_r; }})")


def _native_alu(x: UOp, dt: DType, n: int, ctx: CContext) -> str | None:
    o, src = x.op, x.src
    if o is Ops.TRUNC and dt.is_int:
        return _vec(src[0], n, ctx)
    if o in (Ops.CDIV, Ops.CMOD) and not (src[1].op is Ops.CONST and const_value(src[1]) not in (0, -1)):
        return None  # a zero or -1 divisor lane needs the scalar helper (x86 traps on INT_MIN / -1)
    if o in (Ops.TRUNC, Ops.SQRT) and has_vector_round(o, r := reg_dtype(dt), n):
        # 16-bit lanes: float32's square root rounded once is theirs (devices.c_half); a truncated value is exact
        e = f"{round_helper(o, r, n, vtype(r, n, ctx), ctx)}({unparen(ctx[src[0]])})"
        return _round(dt, e, n, ctx) if o is Ops.SQRT else e
    if o in (Ops.TRUNC, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW, Ops.THREEFRY):
        return None
    a = [_vec(s, n, ctx) for s in src]
    if o in (Ops.SHL, Ops.SHR) and dt is not dtypes.index:
        a[1] = shift_amount(src[1], a[1], dt)
    if o in _COMPARE:
        if dt is dtypes.bool:
            return f"({a[0]}{_MASK_COMPARE[o]}{a[1]})"
        return f"__builtin_convertvector(({a[0]}{_COMPARE[o]}{a[1]}), {vtype(dtypes.bool, n, ctx)})"
    if o in _ARITH:
        e = f"({a[0]}{_ARITH[o]}{a[1]})"
    elif o is Ops.NEG:
        e = f"(-{_atom(a[0])})"
    elif o is Ops.NOT:
        e = f"(~{_atom(a[0])})"
    elif o is Ops.RECIP:
        one = vtype(dt, n, ctx)
        e = f"((({one}){{{', '.join([_lane_const(1.0, dt)] * n)}}})/{a[0]})"
    elif o is Ops.MULACC and dt.is_float:
        e = f"{fma_helper(dt, n, ctx)}({', '.join(unparen(v) for v in a)})"
    elif o is Ops.MULACC:
        e = f"({_round(dt, f'({a[0]}*{a[1]})', n, ctx)}+{a[2]})"
    elif o is Ops.MAX and dt is dtypes.bool:
        e = f"({a[0]}|{a[1]})"
    elif o is Ops.MAX:
        t, m = vtype(dt, n, ctx), _mask_type(dt, n, ctx)
        cond = f"({m})((a > b) | (a != a))" if dt.is_float else f"({m})(a > b)"  # nan wins, as numpy.maximum
        e = f"{select_helper('vmax', t, m, cond, ctx, f'{t} a, {t} b')}({unparen(a[0])}, {unparen(a[1])})"
    else:
        return None
    return e if o in _EXACT or o is Ops.MAX else _round(dt, e, n, ctx)


def render_vector_alu(x: UOp, ctx: CContext) -> str:
    n = lanes(x)
    if x.op is Ops.WHERE:
        c, a, b = x.src
        bits = x in ctx.bits  # a select of 16-bit floats that are only moved: of their bits (devices.c_bits)
        va, vb = _vec(a, n, ctx, bits), _vec(b, n, ctx, bits)
        if c.shape == ():
            return f"({unparen(ctx[c])} ? {va} : {vb})"
        held = dtypes.uint16 if bits else x.dtype
        t, m, i8 = vtype(held, n, ctx), _mask_type(held, n, ctx), vtype(dtypes.bool, n, ctx)
        if not bits and (fn := minmax_call(x, n, (t, m), ctx)) is not None:  # a min or max: one x86 instruction
            return f"{fn}({va}, {vb})"
        if c.op in _COMPARE and c.src[0].dtype is not dtypes.bool and reg_size(c.src[0].dtype) == reg_size(held):
            # the comparison's own mask is already as wide as the lanes: select with it directly (narrowing it to
            # the i8 bool mask and widening it back, GCC moves lane by lane through scalar registers)
            mask = f"({m})({_vec(c.src[0], n, ctx)}{_COMPARE[c.op]}{_vec(c.src[1], n, ctx)})"
            fn = select_helper("vsel", t, m, "c", ctx, f"{m} c, {t} a, {t} b")
            return f"{fn}({mask}, {va}, {vb})"
        fn = select_helper("vwhere", t, m, f"__builtin_convertvector(c, {m})", ctx, f"{i8} c, {t} a, {t} b")
        return f"{fn}({unparen(ctx[c])}, {va}, {vb})"
    native = _native_alu(x, x.src[0].dtype, n, ctx)
    return native if native is not None else _per_lane(x, ctx, lambda lc: render_alu(x, lc))


_FLOAT_BITS = {dtypes.float32: dtypes.int32, dtypes.float64: dtypes.int64}


def render_vector_cast(x: UOp, y: UOp, ctx: CContext) -> str:
    src, dst, n, a = y.dtype, x.dtype, lanes(x), ctx[y]
    if src is dst or (reg_dtype(src) is dtypes.float32 and dst is dtypes.float32):
        return a  # float16 and bfloat16 lanes are float32 registers already
    if dst is dtypes.bool:
        zero = f"(({vtype(src, n, ctx)}){{0}})"
        return f"__builtin_convertvector(({a}!={zero}), {vtype(dtypes.bool, n, ctx)})"
    if src is dtypes.bool:  # masks are -1 for true; negated they are the 0/1 a C cast of a _Bool gives
        return f"__builtin_convertvector(-{_atom(a)}, {vtype(dst, n, ctx)})"
    if src.is_float and dst.is_int and reg_dtype(src) in _FLOAT_BITS and float_to_int_in_range(x):
        # finite and in range where not NaN: one conversion, NaN lanes zeroed first (they give 0)
        bits = vtype(_FLOAT_BITS[reg_dtype(src)], n, ctx)
        keep = f"(({vtype(src, n, ctx)})(({bits}){_atom(a)} & ({bits})({_atom(a)}=={_atom(a)})))"
        return f"__builtin_convertvector({keep}, {vtype(dst, n, ctx)})"
    if src.is_float and dst.is_int:  # out of range and nan lanes are undefined in C; the helper wraps them
        return _per_lane(x, ctx, lambda lc: render_cast(x, y, lc))
    f = vtype(dtypes.float32, n, ctx)
    if dst is dtypes.float16 and src is dtypes.float64:  # one rounding from double: C's conversion to halves
        return f"__builtin_convertvector(__builtin_convertvector({unparen(a)}, {half_vtype(n, ctx)}), {f})"
    e = a if reg_dtype(src) is reg_dtype(dst) else f"__builtin_convertvector({unparen(a)}, {vtype(dst, n, ctx)})"
    return _round(dst, e, n, ctx)


def render_vector_bitcast(x: UOp, y: UOp, ctx: CContext) -> str:
    src, dst, n = y.dtype, x.dtype, lanes(x)
    if src is dst:
        return ctx[y]
    if x in ctx.bits or y in ctx.bits:  # 16-bit ints and floats held as bits (devices.c_bits): the same bits
        return f"(({value_type(x, ctx)}){_atom(ctx.bits_of(y))})"
    if dtypes.bool in (src, dst) or dtypes.bfloat16 in (src, dst):  # not the same bits in a register
        return _per_lane(x, ctx, lambda lc: render_bitcast(x, y, lc))
    if src is dtypes.float16:  # float lanes holding halves: their half bits
        return f"(({vtype(dst, n, ctx)}){half_bits(n, ctx)}({unparen(ctx[y])}))"
    if dst is dtypes.float16:
        return f"{half_floats(n, ctx)}(({vtype(dtypes.uint16, n, ctx)}){_atom(ctx[y])})"
    return f"(({vtype(dst, n, ctx)}){_atom(ctx[y])})"


# ---------------------------------------------------------------- memory


def _access(idx: UOp, ctx: CContext) -> tuple[str, UOp, UOp, str | None]:
    """The buffer's C name, the buffer, the index vector, and the first element's position if the lanes are
    consecutive."""
    index = base_of(idx)
    buf, i = base_of(index.src[0]), index.src[1]
    start = contiguous_start(i)
    if start is None:
        return ctx[buf], buf, i, None
    s, k = start
    pos = str(k) if s is None else ctx[s] if k == 0 else f"{_atom(ctx[s])}+{k}"
    return ctx[buf], buf, i, pos


def _bits16(buf: UOp) -> bool:
    return is_global(buf) and buf.dtype is dtypes.bfloat16


def _mem_type(dt: DType, n: int, ctx: CContext) -> str:
    """The vector type that moves n lanes between registers and memory: `vtype` marked may_alias, element
    aligned. A dereference of it is one unaligned vector move at the register's full width; a memcpy of the same
    bytes is not on every tuning (GCC 12 copies 32 bytes in 16-byte pieces through the stack unless tuning for an
    AVX-512 Intel core, which spilled every accumulator of matmul's register tile on an AVX2 EPYC)."""
    return vtype(dt, n, ctx, may_alias=True)


# The register pin of a vector load read by several instructions (matmul's column vector, one per FMA of the tile's
# rows): an empty asm statement that says it changes the value in a vector register, so the compiler keeps the
# loaded vector in that register. Without it GCC folds the load into every FMA that reads it as a memory operand:
# the 4x2 tile's step became 12 loads for 8 FMAs and ran at 56 instead of 79 GFLOP/s on one AVX2 core, bound by
# the loads. The pin needs a register as wide as the vector, which the compiler's own predefined macros say: x86
# "v" (xmm/ymm/zmm: SSE 16 bytes, AVX 32, AVX-512 64), aarch64 "w" (NEON: 16 bytes); elsewhere no pin.
_PIN_WHEN = {16: "defined(__SSE2__) || defined(__aarch64__)", 32: "defined(__AVX__)", 64: "defined(__AVX512F__)"}


def _pin_macro(size: int, ctx: CContext) -> str | None:
    """The name of the macro that pins a vector of `size` bytes in a register (None: no register that wide on any
    target we compile for)."""
    when = _PIN_WHEN.get(size)
    if when is None:
        return None
    name = f"VPIN{size}"
    return ctx.define(name, f"#if ({when}) && (defined(__x86_64__) || defined(__i386__))\n"
                            f"#define {name}(v) __asm__(\"\" : \"+v\"(v))\n"
                            f"#elif ({when}) && defined(__aarch64__)\n#define {name}(v) __asm__(\"\" : \"+w\"(v))\n"
                            f"#else\n#define {name}(v) ((void)0)\n#endif")


def _vload(buf: UOp, ptr: str, n: int, ctx: CContext, pin: bool = False, bits: bool = False) -> str:
    dt = dtypes.uint16 if bits else buf.dtype  # `bits`: 16-bit floats as they are in memory (devices.c_bits)
    t = vtype(dt, n, ctx)
    if dt is dtypes.float16:  # halves in memory (any buffer), float lanes in registers (devices.c_half)
        return f"{load_half(n, ctx)}({ptr})"
    bf16 = _bits16(buf) and not bits
    if pin and not bf16 and dt is not dtypes.bool and (mac := _pin_macro(n * reg_size(dt), ctx)) is not None:
        m = _mem_type(dt, n, ctx)
        return ctx.define(f"vloadr_{t}", f"static inline {t} vloadr_{t}(const void* p) {{ {t} v = *(const {m}*)p; "
                                         f"{mac}(v); return v; }}") + f"({ptr})"
    if bf16:
        u16, u32 = _mem_type(dtypes.uint16, n, ctx), vtype(dtypes.uint32, n, ctx)
        fn = ctx.define(f"vload_bf16_{t}", f"static inline {t} vload_bf16_{t}(const void* p) {{ return ({t})"
                        f"(__builtin_convertvector(*(const {u16}*)p, {u32}) << 16); }}")
    else:
        m = _mem_type(dt, n, ctx)
        fn = ctx.define(f"vload_{t}", f"static inline {t} vload_{t}(const void* p) {{ return *(const {m}*)p; }}")
    return f"(-{fn}({ptr}))" if dt is dtypes.bool else f"{fn}({ptr})"  # 0/1 bytes <-> masks


def _vstore(buf: UOp, ptr: str, val: str, n: int, ctx: CContext, bits: bool = False) -> str:
    dt = dtypes.uint16 if bits else buf.dtype  # `bits`: 16-bit floats as they are in memory (devices.c_bits)
    t = vtype(dt, n, ctx)
    if dt is dtypes.float16:
        return f"{store_half(n, ctx)}({ptr}, {unparen(unrounded(val, n))});"
    if _bits16(buf) and not bits:
        u16, m16, to_bits = vtype(dtypes.uint16, n, ctx), _mem_type(dtypes.uint16, n, ctx), _bf16_bits(n, ctx)
        fn = ctx.define(f"vstore_bf16_{t}", f"static inline void vstore_bf16_{t}(void* p, {t} v) {{ *({m16}*)p = "
                        f"__builtin_convertvector({to_bits}(v), {u16}); }}")
    else:
        m = _mem_type(dt, n, ctx)
        fn = ctx.define(f"vstore_{t}", f"static inline void vstore_{t}(void* p, {t} v) {{ *({m}*)p = v; }}")
    return f"{fn}({ptr}, {'-' + _atom(val) if dt is dtypes.bool else unparen(val)});"


def render_vector_store_stream(idx: UOp, val: UOp, ctx: CContext) -> str:
    """STORE "stream": a whole vector of consecutive elements streamed (_vstream); anything else as a STORE."""
    ptr, buf, _, start = _access(idx, ctx)
    if start is not None and \
            (text := vstream(buf, f"{ptr}+{_atom(start)}", ctx.bits_of(val) if val in ctx.bits else ctx[val],
                             lanes(val), ctx, val in ctx.bits)):
        return text
    return _store(idx, val, ctx)


def _element(buf: UOp, ptr: str, addr: str, ctx: CContext, bits: bool = False) -> str:
    """One lane read from memory, as the lane holds it (`bits`: a 16-bit float's bits, devices.c_bits)."""
    if bits:
        return bits_ref(f"{ptr}[{addr}]", buf.dtype, ctx)
    if _bits16(buf):
        ctx.helper("bf16_round")  # defines bf16_to_f32 too
        return f"bf16_to_f32({ptr}[{addr}])"
    return f"-{ptr}[{addr}]" if buf.dtype is dtypes.bool else f"{ptr}[{addr}]"


# A store whose lanes step by a constant d > 1 (a register tile's accumulator of output channels, stored into
# channel-major rows) is one scalar store per lane at lane_s + lane_l * d: gcc made the index vector's stores AVX-512
# scatters (4 vscatterqps of 4 lanes each, their 64-bit index halves extracted and masks reset per vector), which took
# about 20% of conv2d's (8,64,56,56) x86-64-v4 kernel on one thread under load 10 (5% on x86-64-v3's lane loop).
def _lane_address(i: UOp, start: str | None, ctx: CContext, binds: list[str], stores: bool = False) -> str:
    if start is not None:
        binds.append(f"long long lane_s = {unparen(start)};")
        return "lane_s+lane_l"
    if stores and (skd := strided_start(i)) is not None:
        s, k, d = skd
        binds.append(f"long long lane_s = {k if s is None else ctx[s] if k == 0 else f'{_atom(ctx[s])}+{k}'};")
        return f"lane_s+lane_l*{d}"
    binds.append(f"{value_type(i, ctx)} lane_i = {unparen(ctx[i])};")
    return "lane_i[lane_l]"


def _load(x: UOp, idx: UOp, ctx: CContext, alt: UOp | None = None, gate: UOp | None = None) -> str:
    ptr, buf, i, start = _access(idx, ctx)
    if gate is None and buf in ctx.vector_regs and _all_lanes(buf, i):
        return ptr
    bits = x in ctx.bits  # a 16-bit float that is only moved: its bits as they are (devices.c_bits)
    held = dtypes.uint16 if bits else x.dtype
    n, t = lanes(x), vtype(held, lanes(x), ctx)
    if gate is not None and gate.shape != () and gate_all_true(gate):
        gate = None  # a per-lane gate true in every lane: the vectors before a padded axis's ragged edge
    if gate is not None and gate.shape != () and start is not None and masked_load_dtype_ok(buf.dtype if not bits
                                                                                            else held):
        mdt = dtypes.uint16 if bits or buf.dtype is dtypes.float16 else buf.dtype  # halves: bits, then converted
        types = (vtype(mdt, n, ctx), vtype(dtypes.bool, n, ctx), _mem_type(mdt, n, ctx))
        got = f"{masked_load_helper(mdt, n, types, ctx)}({ptr}+{_atom(start)}, {unparen(ctx[gate])})"
        if not bits and mdt is not buf.dtype:
            got = f"{half_floats(n, ctx)}({got})"
        if alt is None or (alt.op is Ops.CONST and not const_value(alt) and math.copysign(1, const_value(alt)) > 0):
            return got  # the helper's lanes off are 0 already (bits 0: not -0.0)
        m = _mask_type(held, n, ctx)
        fn = select_helper("vwhere", t, m, f"__builtin_convertvector(c, {m})", ctx, f"{types[1]} c, {t} a, {t} b")
        return f"{fn}({unparen(ctx[gate])}, {got}, {_vec(alt, n, ctx, bits)})"
    if gate is None or gate.shape == ():
        if start is not None:  # a load that several instructions read is pinned in its register (see _pin_macro)
            whole = _vload(buf, f"{ptr}+{_atom(start)}", n, ctx, len(ctx.prog.users.get(x, ())) > 1, bits)
        else:
            binds: list[str] = []
            whole = _lane_loop(t, n, binds, _element(buf, ptr, _lane_address(i, None, ctx, binds), ctx, bits))
        if gate is None or alt is None:
            return whole
        return f"({unparen(ctx[gate])} ? {whole} : {_vec(alt, n, ctx, bits)})"
    binds = [f"{t} lane_a = {_vec(alt, n, ctx, bits) if alt is not None else 0};",
             f"{vtype(dtypes.bool, n, ctx)} lane_g = {unparen(ctx[gate])};"]
    addr = _lane_address(i, start, ctx, binds)
    return _lane_loop(t, n, binds, f"lane_g[lane_l] ? {_element(buf, ptr, addr, ctx, bits)} : lane_a[lane_l]")


def render_vector_load(x: UOp, idx: UOp, ctx: CContext) -> str:
    return _load(x, idx, ctx)


def render_vector_load_gated(x: UOp, idx: UOp, alt: UOp, gate: UOp, ctx: CContext) -> str:
    return _load(x, idx, ctx, alt, gate)


def _store(idx: UOp, val: UOp, ctx: CContext, gate: UOp | None = None, lanewise: bool = False) -> str:
    ptr, buf, i, start = _access(idx, ctx)
    if gate is None and buf in ctx.vector_regs and _all_lanes(buf, i):
        return f"{ptr} = {unparen(ctx[val])};"
    n, bits = lanes(val), val in ctx.bits  # bits: a 16-bit float's bits, stored as they are (devices.c_bits)
    v_text = ctx.bits_of(val) if bits else ctx[val]
    if gate is not None and gate.shape != () and gate_all_true(gate):
        gate = None
    guard = f"if ({unparen(ctx[gate])}) " if gate is not None and gate.shape == () else ""
    if gate is not None and gate.shape != () and start is not None and not lanewise:
        # a ragged edge's gate (see devices.c_masked): the whole vector where every lane is on, else lane by lane
        whole = _vstore(buf, f"{ptr}+{_atom(start)}", v_text, n, ctx, bits)
        every = all_lanes_helper(vtype(dtypes.bool, n, ctx), n, ctx)
        return f"if ({every}({unparen(ctx[gate])})) {whole} else {_store(idx, val, ctx, gate, lanewise=True)}"
    if start is not None and (gate is None or gate.shape == ()):
        return guard + _vstore(buf, f"{ptr}+{_atom(start)}", v_text, n, ctx, bits)
    binds = [f"{value_type(val, ctx)} lane_v = {unparen(v_text)};"]
    if gate is not None and gate.shape != ():
        binds.append(f"{vtype(dtypes.bool, n, ctx)} lane_g = {unparen(ctx[gate])};")
        guard_lane = "if (lane_g[lane_l]) "
    else:
        guard_lane = ""
    addr = _lane_address(i, start, ctx, binds, stores=True)
    v, dst = "lane_v[lane_l]", f"{ptr}[{addr}]"
    if bits:
        dst = bits_ref(dst, buf.dtype, ctx)
    elif _bits16(buf):
        ctx.helper("bf16_round")  # defines f32_to_bf16 too
        v = f"f32_to_bf16({v})"
    # a mask lane (-1) stored to a _Bool becomes 1: C converts to _Bool by comparing with 0
    return (f"{guard}{{ {' '.join(binds)} for (int lane_l = 0; lane_l < {n}; lane_l++) {guard_lane}"
            f"{dst} = {v}; }}")


def render_vector_store(idx: UOp, val: UOp, ctx: CContext) -> str:
    return _store(idx, val, ctx)


def render_vector_store_gated(idx: UOp, val: UOp, gate: UOp, ctx: CContext) -> str:
    return _store(idx, val, ctx, gate)


def _is_vector(x: UOp) -> bool:
    return x.shape != ()


def _is_lane(v: UOp) -> bool:
    return base_of(v).op is not Ops.BUFFER


def _all_lanes(buf: UOp, i: UOp) -> bool:
    """An index reading or writing every lane of an n-lane REG buffer, in order (positions 0..n-1)."""
    return i.op is Ops.VCONST and list(i.arg[0]) == list(range(buf.shape[0]))  # type: ignore[index]


def render_vector_reg(x: UOp, ctx: CContext) -> str:
    """A REG accumulator of n lanes that every access reads or writes whole is a vector variable, which the C
    compiler keeps in a register (an array accessed by memcpy it copies between registers every step)."""
    name = ctx.names[x] = ctx.fresh("acc")
    if not all(_all_lanes(x, u.src[1]) for u in indexes_of(x, ctx.prog)):
        return f"{ctype(x.dtype)} {name}[{x.shape[0]}];"
    ctx.vector_regs.add(x)
    return f"{vtype(x.dtype, x.shape[0], ctx)} {name};"


VECTOR_RULES = RuleSet("c-vector", [
    Rule("c-vector-reg", op.BUFFER(name="x", rest=True), render_vector_reg,
         when=lambda x: not is_global(x) and len(x.shape) == 1 and isinstance(x.shape[0], int) and x.shape[0] > 1),
    Rule("c-vconst", op.VCONST(name="x"), render_vconst),
    Rule("c-stack", op.STACK(name="x", rest=True), render_stack),
    Rule("c-lane", op.INDEX(var("v"), var("k"), name="x"), render_lane, when=_is_lane),
    Rule("c-vector-index", op.INDEX(var("buf"), var("i"), name="x"), render_vector_index, when=_is_vector),
    Rule("c-vector-load-gated", op.LOAD(var("idx"), var("alt"), var("gate"), name="x"), render_vector_load_gated,
         when=_is_vector),
    Rule("c-vector-load", op.LOAD(var("idx"), name="x"), render_vector_load, when=_is_vector),
    Rule("c-vector-cast", op.CAST(var("y"), name="x"), render_vector_cast, when=_is_vector),
    Rule("c-vector-bitcast", op.BITCAST(var("y"), name="x"), render_vector_bitcast, when=_is_vector),
    Rule("c-vector-alu", op[GroupOp.ALU](name="x", rest=True), render_vector_alu, when=_is_vector),
    Rule("c-vector-store-gated", op.STORE(var("idx"), var("val"), var("gate")), render_vector_store_gated,
         when=lambda val: val.shape != ()),
    Rule("c-vector-store-stream", op.STORE(var("idx"), var("val"), arg="stream"), render_vector_store_stream,
         when=lambda val: val.shape != ()),
    Rule("c-vector-store", op.STORE(var("idx"), var("val")), render_vector_store, when=lambda val: val.shape != ()),
])

__all__ = ["STREAM_FENCE", "VECTOR_RULES", "contiguous_start", "float_view", "value_type", "vtype"]
