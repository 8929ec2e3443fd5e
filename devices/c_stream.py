"""Streaming (non-temporal) stores of a whole vector register for devices.c_vector."""

from __future__ import annotations

from devices.c_half import half_bits, unrounded
from devices.c_scalar import CContext, unparen
from devices.c_vtypes import reg_size, vtype
from devices.linear import is_global
from rewrite.dtype import dtypes
from rewrite.uop import UOp

# Streaming (non-temporal) stores of a whole register (rules.streaming marks the STORE "stream"): x86's vector move
# around the caches, by the register width the compiler's own macros say the code may use (SSE2 16 bytes, AVX 32,
# AVX-512 64); clang spells it as its generic builtin on a naturally aligned type. The move faults on an unaligned
# address, so the helper tests the address (buffers are 64-byte aligned; a view may not be) and stores plainly
# otherwise, and anywhere no such move exists (aarch64 here, or a width the code may not use).
_STREAM_WHEN = {16: "defined(__SSE2__)", 32: "defined(__AVX__)", 64: "defined(__AVX512F__)"}
STREAM_FENCE = ("#if defined(__x86_64__) && defined(__SSE__)\n#define STREAM_FENCE() __builtin_ia32_sfence()\n"
                "#else\n#define STREAM_FENCE() ((void)0)\n#endif")


def vstream(buf: UOp, ptr: str, val: str, n: int, ctx: CContext, bits: bool = False) -> str | None:
    """A streaming store of the whole vector (None: not for this dtype or width; a plain store then)."""
    dt = dtypes.uint16 if bits else buf.dtype  # `bits`: 16-bit floats held as their bits (devices.c_bits)
    if dt is dtypes.float16:  # streamed as its half bits
        dt, val = dtypes.uint16, f"{half_bits(n, ctx)}({unparen(unrounded(val, n))})"
    size = n * reg_size(dt)
    bf16 = is_global(buf) and buf.dtype is dtypes.bfloat16 and not bits  # float lanes, not bits: no one move
    if bf16 or dt is dtypes.bool or (when := _STREAM_WHEN.get(size)) is None:
        return None
    t, m = vtype(dt, n, ctx), vtype(dt, n, ctx, may_alias=True)
    w = size // 8
    gcc = {16: "__builtin_ia32_movntdq", 32: "__builtin_ia32_movntdq256", 64: "__builtin_ia32_movntdq512"}[size]
    ctx.define(f"typedef i64n{w}", f"typedef long long i64n{w} __attribute__((vector_size({size})));")
    fn = ctx.define(f"vstream_{t}", f"""static inline void vstream_{t}(void* p, {t} v) {{
#if defined(__x86_64__) && ({when})
  if (!((intptr_t)p & {size - 1})) {{
#if defined(__clang__)
    __builtin_nontemporal_store((i64n{w})v, (i64n{w}*)p);
#else
    {gcc}((i64n{w}*)p, (i64n{w})v);
#endif
    return;
  }}
#endif
  *({m}*)p = v;
}}""")
    return f"{fn}({ptr}, {unparen(val)});"


__all__ = ["STREAM_FENCE", "vstream"]
