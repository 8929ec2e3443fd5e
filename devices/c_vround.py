"""C text for TRUNC on float vectors: one x86 rounding instruction where the target has it, the lane loop elsewhere.

`vtrunc_T(a)` rounds every lane of a float32 or float64 vector toward zero, as truncf/trunc do lane by lane (nan
stays nan, -0.0 and the infinities stay what they are, and no lane raises an exception: the immediate is
_MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC). x86 has it as ROUNDPS/ROUNDPD (SSE4.1, 16-byte vectors) and VROUNDPS/
VROUNDPD (AVX, 32-byte vectors); elsewhere (aarch64, plain x86-64, other widths) the helper is the lane loop of
truncf/trunc calls that devices.c_vector writes for the other per-lane ops. The exp2/log2/sin decompositions
(rules/transcendental.py) truncate once per value, so a GELU or softmax kernel has a few of these; at -Og the lane
loop stays a loop (a store, 8 calls or scalar rounds, a reload per vector), which cost gcc about 4M instructions
to compile per use and ran scalar; -O2 vectorizes the loop into the same instruction the builtin names.
"""

from __future__ import annotations

from devices.c_scalar import CContext
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops

# (lane type, lanes) -> (the macro that has the instruction, gcc's builtin)
_X86_ROUND = {(dtypes.float32, 4): ("__SSE4_1__", "__builtin_ia32_roundps"),
              (dtypes.float32, 8): ("__AVX__", "__builtin_ia32_roundps256"),
              (dtypes.float64, 2): ("__SSE4_1__", "__builtin_ia32_roundpd"),
              (dtypes.float64, 4): ("__AVX__", "__builtin_ia32_roundpd256")}
_TO_ZERO_NO_EXC = 11  # _MM_FROUND_TO_ZERO (3) | _MM_FROUND_NO_EXC (8)


def has_vector_trunc(dt: DType, n: int) -> bool:
    """Whether n lanes of `dt` truncate through vtrunc_ (float32 and float64 vectors of 16 or 32 bytes)."""
    return (dt, n) in _X86_ROUND


def trunc_helper(dt: DType, n: int, t: str, ctx: CContext) -> str:
    """The name of `vtrunc_T` for the vector type `t` of n lanes of `dt` (has_vector_trunc), defined once per
    file."""
    macro, builtin = _X86_ROUND[(dt, n)]
    fn = f"vtrunc_{t}"
    scalar = ctx.dialect.math64 if dt is dtypes.float64 else ctx.dialect.math32
    loop = f"{t} r; for (int l = 0; l < {n}; l++) r[l] = {scalar[Ops.TRUNC]}(a[l]); return r;"
    return ctx.define(fn, f"static inline {t} {fn}({t} a) {{\n"
                          f"#if defined({macro}) && (defined(__x86_64__) || defined(__i386__))\n"
                          f"  return {builtin}(a, {_TO_ZERO_NO_EXC});\n"
                          f"#else\n  {loop}\n#endif\n}}")


__all__ = ["has_vector_trunc", "trunc_helper"]
