"""float16 vector lanes as float32 registers (devices.c_vtypes): the conversions between them and the 16-bit
halves in memory, and the rounding after each op.

Why exact: the lanes hold float16 values, each op computes in float32 and is rounded to float16 right after
(`vf16_round_`, devices.c_vector). For + - * / and the square root of float16 operands the float32 result rounded
once to float16 is the correctly rounded float16 result (float32's 24 bits are at least 2 * 11 + 2), which is what
the scalar text's `(_Float16)(a op b)` gives under -fexcess-precision=standard; the fused multiply-add, EXP2,
LOG2, SIN and POW are float32 math rounded once to float16 in both texts (rewrite.semantics), and MAX, WHERE, the
comparisons, NEG and the casts to wider types are exact on the float32 values. Infinities, -0.0 and the
subnormals of float16 are float32 normal values, converted exactly both ways, all but the signaling NaNs:
VCVTPH2PS quiets one (0x7c01 loads as the float of 0x7e01), as the scalar text's F16C conversions do. So a half
that is only moved (copied, selected, bitcast) never becomes a float lane: devices.c_bits keeps it as its uint16
bits, and an op that computes reads a loaded half converted (`vh2f_`). What still quiets: a select or bitcast whose
result is both stored and computed with in one kernel moves through float lanes (devices.c_bits).

Helpers, per float32 vector type `f32xN` (and its uint16 bits `u16xN`), each emitted once per file:
  * `vh2f_f32xN(u16xN)`, `vf2h_f32xN(f32xN)`: halves' bits to floats and back (round to nearest even). On x86,
    VCVTPH2PS / VCVTPS2PH: F16C for 4 and 8 lanes, AVX-512 for 16 (F16C: two 8-lane halves), wider vectors in
    halves; elsewhere (aarch64, x86 without F16C, clang) C's conversion of a `_Float16` vector (`f16xN`), which
    gcc 12 does lane by lane on x86 and as FCVTL / FCVTN vectors on aarch64.
  * `vf16_round_f32xN(f)`: f rounded to float16 (one conversion each way).
  * `vload_f16_f32xN(p)`, `vstore_f16_f32xN(p, v)`: n halves at p (any alignment) as float lanes, and back. A
    value rounded just before it is stored (a CAST to float16, an op's result) is stored unrounded: the store's
    conversion rounds it once, where the rounding and the store were three conversions.
"""

from __future__ import annotations

from devices.c_scalar import CContext, unparen
from devices.c_vtypes import vtype
from rewrite.dtype import dtypes

_X86_GCC = " && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))"
_TYPES = ("  typedef short h8 __attribute__((vector_size(16)));\n"
          "  typedef short h16 __attribute__((vector_size(32)));\n"
          "  typedef long long l2 __attribute__((vector_size(16)));\n")
# lanes -> (the condition that has the instruction, bits -> floats, floats -> bits) over the argument `a`; F: the
# float vector type, U: the bits' vector type. Immediate 4: the current rounding mode (nearest even).
_ONE = {4: ("defined(__F16C__)", "__builtin_ia32_vcvtph2ps((h8)(l2){(long long)a, 0})",
            "(U)((l2)__builtin_ia32_vcvtps2ph(a, 4))[0]"),
        8: ("defined(__F16C__)", "__builtin_ia32_vcvtph2ps256((h8)a)", "(U)__builtin_ia32_vcvtps2ph256(a, 4)"),
        16: ("defined(__AVX512F__)", "__builtin_ia32_vcvtph2ps512_mask((h16)a, (F){0}, -1, 4)",
             "(U)__builtin_ia32_vcvtps2ph512_mask(a, 4, (h16){0}, -1)")}


def half_vtype(n: int, ctx: CContext) -> str:
    """The `_Float16` vector of n lanes (`f16xN`), for the conversions only C's own can do (float64 -> float16)."""
    name = f"f16x{n}"
    ctx.define(f"typedef {name}", f"typedef _Float16 {name} __attribute__((vector_size({2 * n}), aligned(2)));")
    return name


def _shuffle(a: str, b: str, idx: range) -> str:
    return f"__builtin_shufflevector({a}, {b}, {', '.join(map(str, idx))})"


def _convert(to_float: bool, n: int, ctx: CContext) -> str:
    """The name of `vh2f_f32xN` (to_float) or `vf2h_f32xN`, defined once per file (see the module docstring)."""
    f, u = vtype(dtypes.float32, n, ctx), vtype(dtypes.uint16, n, ctx)
    fn = f"v{'h2f' if to_float else 'f2h'}_{f}"
    if fn in ctx.helpers:
        return fn
    head = f"static inline {f} {fn}({u} a)" if to_float else f"static inline {u} {fn}({f} a)"
    if n > 16 and n % 2 == 0:  # wider than any register: two halves, each converted by the helper of n/2 lanes
        return ctx.define(fn, f"{head} {{\n{_halves(to_float, n, ctx)}\n}}")
    arms: list[tuple[str, str]] = []  # (condition, body)
    if n in _ONE:
        when, h2f, f2h = _ONE[n]
        e = (h2f if to_float else f2h).replace("(F)", f"({f})").replace("(U)", f"({u})")
        arms.append((when, f"{_TYPES}  return {e};"))
    if n == 16:  # F16C without AVX-512: two 8-lane halves
        arms.append(("defined(__F16C__)", _halves(to_float, n, ctx)))
    hv = half_vtype(n, ctx)
    generic = f"  return __builtin_convertvector(({hv})a, {f});" if to_float else \
        f"  return ({u})__builtin_convertvector(a, {hv});"
    text = "".join(f"#{'el' if i else ''}if {when}{_X86_GCC}\n{body}\n" for i, (when, body) in enumerate(arms))
    text += f"#else\n{generic}\n#endif" if arms else generic
    return ctx.define(fn, f"{head} {{\n{text}\n}}")


def _halves(to_float: bool, n: int, ctx: CContext) -> str:
    """The body that converts the two halves of n lanes (argument `a`) by the helper of n/2 lanes, and joins them."""
    m, half = n // 2, _convert(to_float, n // 2, ctx)
    t = vtype(dtypes.uint16 if to_float else dtypes.float32, m, ctx)
    return (f"  {t} lo = {_shuffle('a', 'a', range(m))}, hi = {_shuffle('a', 'a', range(m, n))};\n"
            f"  return {_shuffle(f'{half}(lo)', f'{half}(hi)', range(n))};")


def round_half(n: int, ctx: CContext) -> str:
    """The name of `vf16_round_f32xN`: every lane rounded to float16 (to nearest even; nan stays nan)."""
    f = vtype(dtypes.float32, n, ctx)
    to_h, to_f = _convert(False, n, ctx), _convert(True, n, ctx)
    fn = f"vf16_round_{f}"
    return ctx.define(fn, f"static inline {f} {fn}({f} a) {{ return {to_f}({to_h}(a)); }}")


def unrounded(text: str, n: int) -> str:
    """The value `text` without its outer `vf16_round_f32xN(...)`, for a conversion to halves, which rounds the same
    way (rounding twice to float16 is rounding once)."""
    fn = f"vf16_round_f32x{n}"
    rest = text[len(fn):]
    return unparen(rest) if text.startswith(fn + "(") and unparen(rest) != rest else text


def half_bits(n: int, ctx: CContext) -> str:
    """The name of `vf2h_f32xN`: the float16 bits (u16xN) of float lanes that hold float16 values."""
    return _convert(False, n, ctx)


def half_floats(n: int, ctx: CContext) -> str:
    """The name of `vh2f_f32xN`: float16 bits (u16xN) as float lanes."""
    return _convert(True, n, ctx)


def load_half(n: int, ctx: CContext) -> str:
    """The name of `vload_f16_f32xN(const void* p)`: n halves at p as float lanes."""
    f, m, to_f = vtype(dtypes.float32, n, ctx), vtype(dtypes.uint16, n, ctx, may_alias=True), half_floats(n, ctx)
    fn = f"vload_f16_{f}"
    return ctx.define(fn, f"static inline {f} {fn}(const void* p) {{ return {to_f}(*(const {m}*)p); }}")


def store_half(n: int, ctx: CContext) -> str:
    """The name of `vstore_f16_f32xN(void* p, f32xN v)`: float lanes holding float16 values stored as halves."""
    f, m, to_h = vtype(dtypes.float32, n, ctx), vtype(dtypes.uint16, n, ctx, may_alias=True), half_bits(n, ctx)
    fn = f"vstore_f16_{f}"
    return ctx.define(fn, f"static inline void {fn}(void* p, {f} v) {{ *({m}*)p = {to_h}(v); }}")


__all__ = ["half_bits", "half_floats", "half_vtype", "load_half", "round_half", "store_half", "unrounded"]
