"""The fused multiply-add of float vector lanes (devices.c_vector's MULACC on floats): one helper per vector type,
one vector FMA instruction where the target has them."""

from __future__ import annotations

from devices.c_scalar import CContext
from devices.c_vtypes import reg_dtype, vtype
from rewrite.dtype import DType, dtypes


def fma_helper(dt: DType, n: int, ctx: CContext) -> str:
    """Fused multiply-add of n lanes (rewrite.semantics: one rounding; float16 and bfloat16 lanes are float32
    registers, fused there and rounded by the caller). GCC turns the lane loop of fma calls into one vector FMA;
    clang contracts a*b+c into one under its pragma where the target has FMA (else fmaf lanes)."""
    dt = reg_dtype(dt)
    t = vtype(dt, n, ctx)
    fn = f"vfma_{t}"
    scalar = "__builtin_fma" if dt is dtypes.float64 else "__builtin_fmaf"
    body = f"{t} r; for (int l = 0; l < {n}; l++) r[l] = {scalar}(a[l], b[l], c[l]); return r;"
    # gcc on x86 with FMA: its one-instruction builtin (the lane loop is re-vectorized at every inlined copy: the
    # builtin cut gcc's CPU on the transformer training step by 17%, and spares 512-bit tiles gcc's ymm split)
    builtin = _X86_FMA.get((dt, n))
    wide = n * dt.itemsize == 64  # the 512-bit builtins: AVX-512's lane mask (-1: all) and rounding (4: current)
    native = "" if builtin is None else f"#elif defined({'__AVX512F__' if wide else '__FMA__'}) && " \
        f"defined(__x86_64__)\n  return {builtin}(a, b, c{', -1, 4' if wide else ''});\n"
    return ctx.define(fn, f"static inline {t} {fn}({t} a, {t} b, {t} c) {{\n"
                          f"#if defined(__clang__) && defined(__FMA__)\n"
                          f"  _Pragma(\"clang fp contract(fast)\") return a * b + c;\n"
                          f"{native}#else\n  {body}\n#endif\n}}")


# gcc's x86 FMA builtins by (lane type, lanes), one instruction each
_X86_FMA = {(dt, n): f"__builtin_ia32_vfmadd{s}{b}" for dt, s, n0 in ((dtypes.float32, "ps", 4),
                                                                      (dtypes.float64, "pd", 2))
            for n, b in ((n0, ""), (2 * n0, "256"), (4 * n0, "512_mask"))}


__all__ = ["fma_helper"]
