"""Broadcast loads: a scalar read from memory that only fused multiply-adds of n lanes read (a register tile's row
value: matmul's element of A, conv's input pixel) is loaded straight into a vector of n equal lanes, as its own
named vector, instead of a scalar that each FMA splats.

On x86 with AVX but not AVX-512 the load is an opaque `vbroadcastss`/`vbroadcastsd` (a volatile asm statement),
one per LOAD of the program, so the C compiler neither merges it with another load of the same address nor
moves it: the value lives from its load to the row's last FMA, and the tile needs rows x vecs accumulators, vecs
column vectors and one broadcast register. Without it GCC merges the overlapping reads of a window's unrolled
taps (conv's output column x at tap k reads input x + k, which column x + 1 reads at tap k - 1;
devices.c_scalar.SHORT_REDUCE) and keeps each merged value live across the taps: a 6x2 tile in AVX2's 16
registers then needs 12 + 2 + 8, and its step spilled accumulators to the stack (22 stack accesses per 36 FMAs).
Elsewhere (no AVX, AVX-512, or another dialect) the helper is a plain load and a splat, what the FMAs did before.
"""

from __future__ import annotations

from devices.c_scalar import CContext
from devices.c_vector import vtype
from devices.linear import Program, base_of, const_value, is_global, lanes
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

# the asm mnemonic per element type, and the predefined macro that says the vector width is the code's to use
_MNEMONIC = {dtypes.float32: "vbroadcastss", dtypes.float64: "vbroadcastsd"}
# AVX's 16 vector registers without AVX-512's 32: with 32 the merged taps of the tiles made there fit (an 8x2 tile,
# 16 + 2 + 10; measured: the opaque load made that kernel ~4% slower), and the merge saves loads
_WHEN = {32: "defined(__AVX__) && !defined(__AVX512F__)"}


def _width(u: UOp, prog: Program) -> int | None:
    """The lanes of the FMAs that read the scalar LOAD u, where every reader is such an FMA (as its multiplicand,
    not its accumulator) of one width; None otherwise."""
    users = prog.users.get(u, ())
    if not users or any(x.op is not Ops.MULACC or x.shape == () or x.src[2] is u for x in users):
        return None
    ns = {lanes(x) for x in users}
    return ns.pop() if len(ns) == 1 else None


def broadcast_load(u: UOp, prog: Program, ctx: CContext) -> tuple[str, str] | None:
    """(C type, expression) of the scalar LOAD u loaded as a broadcast vector, where every reader of u is an FMA of
    n lanes (see the module docstring); None where it is not such a load (a gated one reads through its gate)."""
    if u.op is not Ops.LOAD or u.shape != () or u.dtype not in _MNEMONIC or ctx.dialect.name != "C":
        return None
    if len(u.src) >= 3 and not (u.src[2].op is Ops.CONST and const_value(u.src[2]) is True):
        return None  # gated: the gate decides whether the address may be read at all
    idx = u.src[0]
    if idx.op is not Ops.INDEX or not is_global(base_of(base_of(idx).src[0])) or (n := _width(u, prog)) is None:
        return None
    size = n * u.dtype.itemsize
    if size not in _WHEN:
        return None
    t, elem = vtype(u.dtype, n, ctx), ctx.ctype(u.dtype)
    lanes_ = ", ".join(["*p"] * n)
    head = f"static inline {t} vbload_{t}(const {elem}* p) {{"
    fn = ctx.define(f"vbload_{t}", f"#if {_WHEN[size]} && (defined(__x86_64__) || defined(__i386__))\n"
                                   f"{head} {t} v; __asm__ volatile(\"{_MNEMONIC[u.dtype]} %1, %0\" : \"=v\"(v) : "
                                   f"\"m\"(*p)); return v; }}\n#else\n{head} return ({t}){{{lanes_}}}; }}\n#endif")
    ctx.broadcast.add(u)
    return t, f"{fn}(&{ctx[idx]})"
