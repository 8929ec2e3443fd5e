"""C text for vector loads and stores of consecutive lanes gated lane by lane: the ragged edge of an upcast axis.

An axis whose size is no multiple of the vector width is padded (lower.opt_apply's PADTO) and upcast all the same:
its last vector holds lanes past the end, and the loads and stores that move with it are gated by `lane < n`, a
bool vector that differs per lane. Every other vector of the axis has a gate that is true in every lane; the
symbolic stage proves that for the vectors it can (a VCONST of trues, rendered here as no gate), and the rest are
tested at run time. The helpers, each emitted once per file:

  * `vall_i8xN(g)`: whether every lane of the mask g is true (its bytes compared with all ones, 8 at a time).
  * `vmload_T(p, g)`: the lanes of T at p where g is true, 0 elsewhere; a lane where g is false is not read (it may
    lie past the end of the buffer). On x86 with AVX one masked move (vmaskmovps/pd: 16- and 32-byte vectors of
    4- or 8-byte lanes), with AVX-512 one masked load (64-byte vectors; its lane mask one vpmovb2m from the bool
    mask where AVX512BW and VL are there, as on x86-64-v4), neither faulting on a lane it skips;
    elsewhere (SSE-only x86-64-v2, aarch64 NEON, 1- and 2-byte lanes) a whole vector load when every lane is
    true and a lane loop otherwise. The mask is loop-invariant where the gate is (matmul's column gate moves
    only with the column block), so the compiler computes its widened form once outside the loop.
  * stores: a whole vector store when every lane is true, a lane loop otherwise (AMD's masked stores are
    microcoded: slower than the branch, which the vectors before the edge predict).

Lanes of a vector that the gate turns off get the LOAD's alt (a blend where alt is not the constant 0).
"""

from __future__ import annotations

from devices.c_scalar import CContext, ctype
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp


def gate_all_true(g: UOp) -> bool:
    """A per-lane gate that is true in every lane (a VCONST of trues): the access needs no gate."""
    return g.op is Ops.VCONST and all(bool(v) for v in g.arg[0])  # type: ignore[index]  # VCONST's arg: (values,)


def all_lanes_helper(m: str, n: int, ctx: CContext) -> str:
    """The name of `vall_i8xN`: 1 when every lane of the n-lane bool mask type `m` is true (-1)."""
    fn = f"vall_{m}"
    if n <= 8:
        bits = {1: 8, 2: 16, 4: 32, 8: 64}[n]
        body = f"uint{bits}_t b; memcpy(&b, &g, {n}); return b == (uint{bits}_t)~(uint{bits}_t)0;"
    else:
        body = (f"int r = 1; for (int i = 0; i < {n}; i += 8) {{ uint64_t b; memcpy(&b, (const char*)&g + i, 8); "
                f"r &= b == ~(uint64_t)0; }} return r;")
    return ctx.define(fn, f"static inline int {fn}({m} g) {{ {body} }}")


# the x86 masked moves by vector size and lane size: (the macro that has them, builtin, its vector element type)
_AVX = {(16, 4): "maskloadps", (16, 8): "maskloadpd", (32, 4): "maskloadps256", (32, 8): "maskloadpd256"}
_AVX512 = {4: ("loadups512_mask", "float", "unsigned short"), 8: ("loadupd512_mask", "double", "unsigned char")}


_TYPES16 = "".join(f"  typedef {e} {n} __attribute__((vector_size(16)));\n"
                   for e, n in (("char", "b16"), ("short", "s8"), ("int", "i4"), ("long long", "l2")))
# n bool lanes (n bytes) as the low bytes of a b16 vector, the rest 0 (a vector casts to the integer of its size)
_BYTES16 = {2: "(b16)(s8){(short)g}", 4: "(b16)(i4){(int)g}", 8: "(b16)(l2){(long long)g}", 16: "(b16)g"}


def masked_load_helper(dt: DType, n: int, types: tuple[str, str, str], ctx: CContext) -> str:
    """The name of `vmload_T(p, g)` for n lanes of dt (see the module docstring); `types`: the C names of the
    vector type T, of its bool mask, and of its may_alias memory twin (devices.c_vector)."""
    t, m, mem = types
    fn = f"vmload_{t}"
    if fn in ctx.helpers:
        return fn
    elem, size = ctype(dt), dt.itemsize
    vall = all_lanes_helper(m, n, ctx)
    portable = (f"if ({vall}(g)) return *(const {mem}*)p;\n  {t} r = {{0}};\n"
                f"  for (int l = 0; l < {n}; l++) if (g[l]) r[l] = ((const {elem}*)p)[l];\n  return r;")
    fe = "double" if size == 8 else "float"
    ie = "long long" if size == 8 else "int"
    arms: list[str] = []
    # the bool mask's n bytes in the low bytes of a 16-byte vector, for the x86 instructions that widen or test them
    # (only the 4- and 8-byte lanes below have them, 16 lanes at most; 32 half lanes keep the portable loop)
    g16 = _BYTES16.get(n, "")
    if (b := _AVX.get((n * size, size))) is not None:
        vb = n * size
        # the mask widened to the lanes' width: one sign extension (vpmovsxbd/bq; AVX2 for 32 bytes) where gcc has
        # it, else the generic conversion (gcc 12 at -Og: a byte at a time through general registers, per load)
        ext = f"__builtin_ia32_pmovsxb{'d' if size == 4 else 'q'}{vb * 8}"
        arms.append(f"#if defined(__AVX__)\n"
                    f"  typedef {fe} mv_f __attribute__((vector_size({vb})));\n"
                    f"  typedef {ie} mv_i __attribute__((vector_size({vb})));\n"
                    f"#if {'defined(__AVX2__)' if vb == 32 else '1'} && !defined(__clang__)\n{_TYPES16}"
                    f"  mv_i gi = (mv_i){ext}({g16});\n"
                    f"#else\n  mv_i gi = __builtin_convertvector(g, mv_i);\n#endif\n"
                    f"  return ({t})__builtin_ia32_{b}((const mv_f*)p, gi);")
    if n * size == 64 and size in _AVX512:
        b, fe, k = _AVX512[size]
        # the lane mask from the bool mask's sign bits: one vpmovb2m with AVX512BW+VL (x86-64-v4); else a lane loop
        # (at -Og a loop of 8 or 16 steps per load, in the k loop of a ragged matmul)
        arms.append(f"#{'el' if arms else ''}if defined(__AVX512F__)\n"
                    f"  typedef {fe} mv_f __attribute__((vector_size(64)));\n"
                    f"#if defined(__AVX512BW__) && defined(__AVX512VL__) && !defined(__clang__)\n{_TYPES16}"
                    f"  {k} k = ({k})__builtin_ia32_cvtb2mask128({g16});\n"
                    f"#else\n"
                    f"  {k} k = 0; for (int l = 0; l < {n}; l++) k |= ({k})((g[l] & 1) << l);\n"
                    f"#endif\n"
                    f"  return ({t})__builtin_ia32_{b}((const {fe}*)p, (mv_f){{0}}, k);")
    text = "\n".join(arms) + ("\n#else\n  " + portable + "\n#endif" if arms else "\n  " + portable)
    return ctx.define(fn, f"static inline {t} {fn}(const void* p, {m} g) {{\n{text}\n}}")


def masked_load_dtype_ok(dt: DType) -> bool:
    """Lanes the masked load helper moves as they are in memory (bool lanes are 0/1 bytes, not masks, and
    bfloat16 lanes are uint16 bits widened: those keep the lane loop)."""
    return dt not in (dtypes.bool, dtypes.bfloat16)


def select_helper(kind: str, t: str, m: str, cond: str, ctx: CContext, head: str) -> str:
    """The name of `KIND_T(head)`: the lanes of a where the mask `cond` (of the int vector type m, from the
    arguments in `head`) is set, of b elsewhere, as a bit-select (WHERE, MAX, a gated load's alt)."""
    fn = f"{kind}_{t}"
    return ctx.define(fn, f"static inline {t} {fn}({head}) {{ {m} m = {cond}; "
                          f"return ({t})((({m})a & m) | (({m})b & ~m)); }}")
