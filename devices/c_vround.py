"""C text for TRUNC and SQRT on float vectors, and for a select that is a min or a max: one x86 instruction where the
target has it, the lane loop (the bit-select) elsewhere.

`vtrunc_T(a)` rounds every lane of a float32 or float64 vector toward zero, as truncf/trunc do lane by lane (nan
stays nan, -0.0 and the infinities stay what they are, and no lane raises an exception: the immediate is
_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC). x86 has it as ROUNDPS/ROUNDPD (SSE4.1, 16-byte vectors), VROUNDPS/VROUNDPD
(AVX, 32-byte vectors) and VRNDSCALEPS/PD (AVX-512, 64-byte vectors, scale 0: the same immediate). `vsqrt_T(a)` is
the correctly rounded square root of every lane, as sqrtf/sqrt (-fno-math-errno: no errno, nan for a negative
lane): SQRTPS/PD (SSE, SSE2), VSQRTPS/PD (AVX, AVX-512). Elsewhere (aarch64, plain x86-64, other widths, and clang
for the 512-bit and square-root forms, whose builtins it names otherwise) the helper is the lane loop of the libm
calls that devices.c_vector writes for the other per-lane ops.

Why a builtin rather than the lane loop: at -Og (the fast compile tier) gcc keeps a lane loop a loop (a store, 8 or
16 scalar rounds, a reload per vector), which cost about 4M compiler instructions per use and ran lane by lane; and
at -O2 gcc re-vectorizes it at its tuning's preferred width, which on the AVX-512 Intel cores is 256 bits (two ymm
halves and shuffles per 64-byte vector where a target did not say -mprefer-vector-width=512; tests/devices/
test_wide_vectors.py). The exp2/log2/sin decompositions (rules/transcendental.py) truncate once per value, so a
GELU or softmax kernel has a few of these; layernorm and RMS norm a square root.
"""

from __future__ import annotations

from devices.c_scalar import CContext
from devices.c_vtypes import reg_dtype
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

_TO_ZERO_NO_EXC = 11  # _MM_FROUND_TO_ZERO (3) | _MM_FROUND_NO_EXC (8)
_GCC = " && !defined(__clang__)"


def _forms() -> dict[tuple[Ops, DType, int], tuple[str, str, str]]:
    """(op, lane type, lanes) -> (the condition that has the instruction, gcc's builtin, its arguments after `a`).
    The 512-bit builtins take a pass-through vector, the lane mask (-1: all lanes) and the rounding (4: current)."""
    out: dict[tuple[Ops, DType, int], tuple[str, str, str]] = {}
    for dt, s, sse in ((dtypes.float32, "ps", "__SSE__"), (dtypes.float64, "pd", "__SSE2__")):
        n = 16 // dt.itemsize
        out[(Ops.TRUNC, dt, n)] = ("defined(__SSE4_1__)", f"__builtin_ia32_round{s}", f", {_TO_ZERO_NO_EXC}")
        out[(Ops.TRUNC, dt, 2 * n)] = ("defined(__AVX__)", f"__builtin_ia32_round{s}256", f", {_TO_ZERO_NO_EXC}")
        out[(Ops.TRUNC, dt, 4 * n)] = ("defined(__AVX512F__)" + _GCC, f"__builtin_ia32_rndscale{s}_mask",
                                       f", {_TO_ZERO_NO_EXC}, a, -1, 4")
        out[(Ops.SQRT, dt, n)] = (f"defined({sse})" + _GCC, f"__builtin_ia32_sqrt{s}", "")
        out[(Ops.SQRT, dt, 2 * n)] = ("defined(__AVX__)" + _GCC, f"__builtin_ia32_sqrt{s}256", "")
        out[(Ops.SQRT, dt, 4 * n)] = ("defined(__AVX512F__)" + _GCC, f"__builtin_ia32_sqrt{s}512_mask", ", a, -1, 4")
    return out


_X86 = _forms()


def has_vector_round(o: Ops, dt: DType, n: int) -> bool:
    """Whether n lanes of `dt` go through a helper for `o` (TRUNC, SQRT: float32 and float64 vectors of 16, 32 or
    64 bytes)."""
    return (o, dt, n) in _X86


def round_helper(o: Ops, dt: DType, n: int, t: str, ctx: CContext) -> str:
    """The name of `vtrunc_T` / `vsqrt_T` for the vector type `t` of n lanes of `dt` (has_vector_round), defined once
    per file."""
    when, builtin, args = _X86[(o, dt, n)]
    fn = f"v{'trunc' if o is Ops.TRUNC else 'sqrt'}_{t}"
    scalar = ctx.dialect.math64 if dt is dtypes.float64 else ctx.dialect.math32
    loop = f"{t} r; for (int l = 0; l < {n}; l++) r[l] = {scalar[o]}(a[l]); return r;"
    return ctx.define(fn, f"static inline {t} {fn}({t} a) {{\n"
                          f"#if {when} && (defined(__x86_64__) || defined(__i386__))\n"
                          f"  return {builtin}(a{args});\n"
                          f"#else\n  {loop}\n#endif\n}}")



# x86's MINPS/MAXPS (MINPD/MAXPD) are selects: min(a, b) = a < b ? a : b and max(a, b) = a > b ? a : b in every
# lane, b where either is nan and for +0 against -0. So WHERE(p < q, p, q) is min(p, q) and WHERE(p < q, q, p) is
# max(q, p) bit for bit (a clamp, as exp's, is two of them): one instruction where gcc's bit-select of the mask is
# three (a compare, then a masked and a plain xor), and gcc does not see the min in the select. (lane type, lanes)
# -> (the condition that has the instruction, gcc's builtin with {k} for min or max, its arguments after `a, b`)
_MINMAX = {(dt, m * 16 // dt.itemsize): (when, f"__builtin_ia32_{{k}}{s}{suffix}", args)
           for dt, s, sse in ((dtypes.float32, "ps", "__SSE__"), (dtypes.float64, "pd", "__SSE2__"))
           for m, when, suffix, args in ((1, f"defined({sse})", "", ""), (2, "defined(__AVX__)", "256", ""),
                                         (4, "defined(__AVX512F__)", "512_mask", ", a, -1, 4"))}


def minmax_call(x: UOp, n: int, types: tuple[str, str], ctx: CContext) -> str | None:
    """For a WHERE `x` of n lanes that is a min or a max (WHERE(p < q, p, q) or WHERE(p < q, q, p) on float32 or
    float64 registers of 16, 32 or 64 bytes), the name of `vminsel_T` / `vmaxsel_T` to call on its two branches, else
    None. The helper is a < b ? a : b (a > b ? a : b) in each lane as one x86 instruction, the bit-select of the
    comparison's mask elsewhere. `types`: the vector type and its int mask type."""
    c, a, b = x.src
    r = reg_dtype(x.dtype)  # float16 and bfloat16 lanes are float32 registers: the min is one of the two values
    if c.op is not Ops.CMPLT or (r, n) not in _MINMAX or c.src[0].dtype.scalar is not x.dtype.scalar:
        return None
    p, q = c.src
    kind = "min" if (a is p and b is q) else "max" if (a is q and b is p) else None
    if kind is None:
        return None
    t, m = types
    when, builtin, args = _MINMAX[(r, n)]
    fn = f"v{kind}sel_{t}"
    cond = "a < b" if kind == "min" else "a > b"
    return ctx.define(fn, f"static inline {t} {fn}({t} a, {t} b) {{\n"
                          f"#if {when}{_GCC} && (defined(__x86_64__) || defined(__i386__))\n"
                          f"  return {builtin.format(k=kind)}(a, b{args});\n"
                          f"#else\n  {m} m = ({m})({cond}); return ({t})((({m})a & m) | (({m})b & ~m));\n#endif\n}}")


__all__ = ["has_vector_round", "minmax_call", "round_helper"]
