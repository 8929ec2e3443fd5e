"""The CUDA renderer's memory instructions (devices.cuda_render's docstring): 16-byte vector accesses of global
and shared memory, cp.async copies and ldmatrix loads, and the LOCAL buffers' element sizes in shared memory."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from devices.c_scalar import unparen
from devices.linear import Program, base_of, buffer_arg, const_value, is_global
from devices.python_wgmma import is_wgmma
from devices.tma import LOAD as TMA_LOAD
from devices.tma import ins_kind
from rewrite.dtype import AddrSpace, dtypes
from rewrite.errors import CompileError
from rewrite.ops import Ops
from rewrite.uop import UOp

if TYPE_CHECKING:
    from devices.cuda_render import CudaContext

# bytes per element of a LOCAL buffer (bfloat16 is held as float there)
_LOCAL_ITEMSIZE = {dtypes.bfloat16: 4, dtypes.bool: 1}
def is_async_copy(u: UOp) -> bool:
    return u.op is Ops.STORE and u.arg == "cp.async"


def is_ldmatrix(u: UOp) -> bool:
    return u.op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg[0] == "ldmatrix"


def _reads_wgmma(y: UOp, x: UOp) -> bool:
    """Is y a wgmma WMMA reading operand x (an INDEX of its first element) from shared memory?"""
    return y.op is Ops.WMMA and is_wgmma(y) and x in y.src[:2]


def raw_locals(prog: Program) -> set[UOp]:
    """The LOCAL bfloat16 buffers only cp.async or TMA copies write and only ldmatrix or wgmma read: they hold bfloat16
    bits (2 bytes an element) instead of floats, since these instructions move 16-bit elements as they are."""
    out = set()
    for b in prog.locals:
        if b.dtype.scalar is not dtypes.bfloat16:
            continue
        uses = [x for x in prog.instrs if x.op is Ops.INDEX and x.src and base_of(x.src[0]) is b]
        if uses and all(all((is_async_copy(y) and y.src[0] is x) or is_ldmatrix(y) or _reads_wgmma(y, x) or
                            (ins_kind(y) == TMA_LOAD and y.src[0] is x) for y in prog.users.get(x, []))
                        for x in uses):
            out.add(b)
    return out


def local_itemsize(b: UOp, raw: set[UOp]) -> int:
    """Bytes per element of a LOCAL buffer in shared memory."""
    return 2 if b in raw else _LOCAL_ITEMSIZE.get(b.dtype.scalar, b.dtype.itemsize)


def _shared_addr(lvalue: str) -> str:
    return f"(uint32_t)__cvta_generic_to_shared(&{lvalue})"


def _render_ldmatrix(u: UOp, ctx: CudaContext, lines: list[str], pad: str) -> None:
    """LOAD ("ldmatrix", n, trans): n .b32 registers from `ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16`,
    this lane's row at lane 0 of the INDEX; the registers feed a WMMA as they are (ctx.packed)."""
    _, n, trans = cast(tuple, u.arg)
    idx = u.src[0]
    buf = base_of(base_of(idx).src[0])
    if u.dtype.itemsize != 2 or buffer_arg(buf).addrspace is not AddrSpace.LOCAL or n not in (1, 2, 4) or \
            any(x.op is not Ops.WMMA and not (x.op is Ops.INDEX and x.src[1].op is Ops.CONST)
                for x in ctx.prog.users.get(u, [])):
        raise CompileError(f"{ctx.prog.where(u)}: ldmatrix reads 1, 2 or 4 matrices of 16-bit elements of a LOCAL "
                           f"buffer into a WMMA's fragment, or into lanes that STACKs of whole registers pass to one "
                           f"(got {u.dtype.name}, {n}, a {buffer_arg(buf).addrspace.name} buffer)")
    regs = [ctx.fresh("lm") for _ in range(n)]
    ctx.packed[u] = regs
    outs = ", ".join(f"%{i}" for i in range(n))
    lines.append(f"{pad}uint32_t {', '.join(regs)};")
    op_name = f"ldmatrix.sync.aligned.m8n8.x{n}{'.trans' if trans else ''}.shared.b16"
    lines.append(f'{pad}asm volatile("{op_name} {{{outs}}}, [%{n}];\\n"')
    outs_c = ", ".join(f'"=r"({r})' for r in regs)
    lines.append(f'{pad}    : {outs_c} : "r"({_shared_addr(ctx.lane(idx, 0))}));')


def packed_regs(u: UOp, ctx: CudaContext) -> list[str] | None:
    """The .b32 registers of a STACK of lanes 2 i .. 2 i + 2 m - 1 (in order) of one ldmatrix (its registers i ..
    i + m - 1: lower.tc_async's x4.trans of two B fragments); None for any other STACK."""
    src = u.src
    if not src or any(s.op is not Ops.INDEX or s.src[1].op is not Ops.CONST or s.src[0] is not src[0].src[0]
                      for s in src) or src[0].src[0] not in ctx.packed or len(src) % 2:
        return None
    first = int(cast(int, const_value(src[0].src[1])))
    if first % 2 or [int(cast(int, const_value(s.src[1]))) for s in src] != list(range(first, first + len(src))):
        return None
    return ctx.packed[src[0].src[0]][first // 2:(first + len(src)) // 2]


def _render_cp_async(u: UOp, ctx: CudaContext, lines: list[str], pad: str) -> None:
    """STORE "cp.async" of a vector LOAD of a GLOBAL buffer into a LOCAL one: `cp.async.cg.shared.global`, 16
    bytes a copy; the LOAD's gate (its alt value 0) is the copy's src-size (0: the 16 bytes are zero-filled), the
    STORE's gate skips the copy."""
    dst, val = u.src[0], u.src[1]
    ok = val.op is Ops.LOAD and not is_ldmatrix(val) and (len(val.src) == 1 or (
        val.src[2].shape == () and val.src[1].op is Ops.CONST and const_value(val.src[1]) == 0))
    dp = _wide_place(dst, ctx) if ok else None
    sp = _wide_place(val.src[0], ctx) if ok else None
    if dp is None or sp is None or dp[2] != sp[2] or not is_global(base_of(base_of(val.src[0]).src[0])):
        raise CompileError(f"{ctx.prog.where(u)}: a cp.async copy is a STORE to LOCAL memory of a LOAD of GLOBAL "
                           f"memory (gated with 0), both 16-byte aligned runs of elements of one size")
    (db, dfirst, size), (sb, sfirst, _) = dp, sp
    size_op, size_in = (", %2", f', "r"({unparen(ctx[val.src[2]])} ? 16 : 0)') if len(val.src) == 3 else ("", "")
    inner = pad + ("  " if len(u.src) == 3 else "")
    if len(u.src) == 3:
        lines.append(f"{pad}if ({unparen(ctx[u.src[2]])}) {{")
    for j in range(0, int(dst.shape[0]), _WIDE // size):
        d, s_ = (f"{dfirst}+{j}", f"{sfirst}+{j}") if j else (dfirst, sfirst)
        lines.append(f'{inner}asm volatile("cp.async.cg.shared.global [%0], [%1], 16{size_op};\\n" :: '
                     f'"r"({_shared_addr(f"{db}[{d}]")}), "l"(&{sb}[{s_}]){size_in});')
    if len(u.src) == 3:
        lines.append(f"{pad}}}")


def _pow2(u: UOp) -> int:
    """log2 of a power of two the int value of u is known to be a multiple of (0: nothing known). Only the low
    bits are reasoned about, which wrap-around arithmetic keeps, so it holds for any int width."""
    if u.op is Ops.CONST:
        v = int(cast(int, const_value(u)))
        return 64 if v == 0 else (v & -v).bit_length() - 1
    if u.op is Ops.MUL:
        return min(64, sum(_pow2(s) for s in u.src))
    if u.op in (Ops.ADD, Ops.SUB):
        return min(_pow2(s) for s in u.src)
    if u.op is Ops.SHL and u.src[1].op is Ops.CONST:
        return min(64, _pow2(u.src[0]) + int(cast(int, const_value(u.src[1]))))
    if u.op is Ops.AND:
        return max(_pow2(s) for s in u.src)
    return 0


_WIDE = 16  # bytes of one vector access (uint4)


def element_bytes(buf: UOp, raw: set[UOp]) -> int:
    """Bytes per element of a GLOBAL or LOCAL buffer as the CUDA code holds it (bfloat16: 2 in global memory,
    `local_itemsize` in shared memory)."""
    if is_global(buf):
        return 2 if buf.dtype is dtypes.bfloat16 else buf.dtype.itemsize
    return local_itemsize(buf, raw)


def wide_run(index: UOp, size: int) -> tuple[UOp | None, int] | None:
    """(symbolic start, constant offset) when the vector INDEX `index` names n consecutive elements of `size` bytes
    starting at a 16-byte aligned one and n elements are whole 16-byte accesses (cudaMalloc'd GLOBAL buffers and
    LOCAL arrays are 16-aligned): what the renderer moves 16 bytes at a time; None otherwise."""
    from devices.c_vector import contiguous_start

    start = contiguous_start(index.src[1])
    n = int(index.src[1].shape[0])
    if start is None or (n * size) % _WIDE:
        return None
    s, k = start
    if (k * size) % _WIDE or (s is not None and (1 << min(_pow2(s), 8)) * size % _WIDE):
        return None
    return s, k


_PACKED = (dtypes.float32, dtypes.float16, dtypes.bfloat16)  # element types of a 2-lane store in one access


def packed_store(u: UOp) -> tuple[UOp | None, int] | None:
    """(symbolic start, constant offset) of the 2 elements when `u` is a STORE (ungated, or with a scalar gate) of a
    2-lane value to 2 consecutive float32, float16 or bfloat16 elements of a GLOBAL buffer starting at an even
    element (so aligned to their 8 or 4 bytes: lower.tc_smem's paired tensor-core results), which the renderer
    writes as one access (`_packed_store`); None otherwise."""
    from devices.c_vector import contiguous_start

    if u.op is not Ops.STORE or u.arg is not None or len(u.src) not in (2, 3) or u.src[1].shape != (2,) or \
            (len(u.src) == 3 and u.src[2].shape != ()):
        return None
    index = base_of(u.src[0])
    if index.op is not Ops.INDEX or index.src[1].shape != (2,):
        return None
    buf = base_of(index.src[0])
    if buf.op is not Ops.BUFFER or not is_global(buf) or buf.dtype.scalar not in _PACKED:
        return None
    start = contiguous_start(index.src[1])
    if start is None or start[1] % 2 or (start[0] is not None and _pow2(start[0]) < 1):
        return None
    return start


def _packed_store(u: UOp, ctx: CudaContext, lines: list[str], pad: str) -> bool:
    """A `packed_store` as one access: `*(float2*)&b[i] = make_float2(lo, hi)` for float32, the two 16-bit
    elements' bits packed into one uint32_t store for float16 and bfloat16; False (nothing written) otherwise."""
    start = packed_store(u)
    if start is None or u.src[1] in ctx.wide:
        return False
    buf = base_of(base_of(u.src[0]).src[0])
    s, k = start
    first = str(k) if s is None else unparen(ctx[s]) if k == 0 else f"{ctx[s]}+{k}"
    lo, hi = (unparen(ctx.lane(u.src[1], j)) for j in range(2))
    dt = buf.dtype.scalar
    if dt is dtypes.float32:
        text = f"*(float2*)&{ctx[buf]}[{first}] = make_float2({lo}, {hi});"
    elif dt is dtypes.float16:
        ctx.define("#fp16", "#include <cuda_fp16.h>")
        text = f"*(uint32_t*)&{ctx[buf]}[{first}] = (uint32_t)__half_as_ushort({lo}) | " \
            f"((uint32_t)__half_as_ushort({hi}) << 16);"
    else:
        ctx.helper("bf16_round")  # defines f32_to_bf16 too
        text = f"*(uint32_t*)&{ctx[buf]}[{first}] = (uint32_t)f32_to_bf16({lo}) | ((uint32_t)f32_to_bf16({hi}) << 16);"
    gate = f"if ({unparen(ctx[u.src[2]])}) " if len(u.src) == 3 else ""
    lines.append(f"{pad}{gate}{text}")
    return True


def _wide_place(idx: UOp, ctx: CudaContext) -> tuple[str, str, int] | None:
    """(buffer text, first element text, element bytes) when the vector INDEX `idx` is a `wide_run`."""
    index = base_of(idx)
    if index.op is not Ops.INDEX:
        return None
    buf = base_of(index.src[0])
    if buf.op is not Ops.BUFFER or buffer_arg(buf).addrspace not in (AddrSpace.GLOBAL, AddrSpace.LOCAL):
        return None
    size = element_bytes(buf, ctx.raw)
    run = wide_run(index, size)
    if run is None:
        return None
    s, k = run
    first = str(k) if s is None else unparen(ctx[s]) if k == 0 else f"{ctx[s]}+{k}"
    return ctx[buf], first, size


def _wide_access(u: UOp, ctx: CudaContext, lines: list[str], pad: str) -> bool:
    """A vector LOAD (ungated, or gated with a scalar gate and 0 for the off value) or STORE of consecutive
    aligned elements as 16-byte accesses: a load fills a 16-aligned register array `vl[n]` (its lanes are the
    vector's values; bfloat16 in global memory is converted per lane), a store of such a loaded array copies it
    16 bytes at a time, and a store of other lanes (not bfloat16) gathers them into such an array first (nvcc
    keeps it in registers: one STG.128 / STS.128 per 16 bytes). False (nothing written) for any other access:
    the lanes go one by one."""
    if u.op is Ops.LOAD and u.shape:
        if len(u.src) == 3 and (u.src[2].shape != () or u.src[1].op is not Ops.CONST or const_value(u.src[1]) != 0):
            return False
        place = _wide_place(u.src[0], ctx)
        if place is None:
            return False
        b, first, size = place
        buf = base_of(base_of(u.src[0]).src[0])
        n = int(u.shape[0])
        stype = "uint16_t" if buf.dtype is dtypes.bfloat16 and is_global(buf) else ctx.ctype(buf.dtype.scalar)
        arr = ctx.fresh("vl")
        lines.append(f"{pad}__align__(16) {stype} {arr}[{n}];")
        per = _WIDE // size
        for j in range(0, n, per):
            src = f"*(const uint4*)&{b}[{first}+{j}]" if j else f"*(const uint4*)&{b}[{first}]"
            if len(u.src) == 3:
                src = f"{ctx[u.src[2]]} ? {src} : uint4{{0u, 0u, 0u, 0u}}"
            lines.append(f"{pad}*(uint4*)&{arr}[{j}] = {src};")
        if buf.dtype is dtypes.bfloat16 and is_global(buf):
            ctx.helper("bf16_round")
            ctx.lanes[u] = [f"bf16_to_f32({arr}[{k}])" for k in range(n)]
        else:
            ctx.lanes[u] = [f"{arr}[{k}]" for k in range(n)]
        ctx.wide[u] = (arr, stype)
        ctx.depth[u] = 0
        return True
    if u.op is Ops.STORE and len(u.src) in (2, 3) and u.src[1].shape != ():
        if len(u.src) == 3 and u.src[2].shape != ():
            return False
        place = _wide_place(u.src[0], ctx)
        dst = base_of(base_of(u.src[0]).src[0])
        dtype = "uint16_t" if dst.dtype is dtypes.bfloat16 and is_global(dst) else ctx.ctype(dst.dtype.scalar)
        if u.src[1] in ctx.wide:
            arr, stype = ctx.wide[u.src[1]]
        elif place is not None and dst.dtype.scalar is not dtypes.bfloat16:
            # computed lanes (a STACK of results): gathered into a 16-aligned array first, then stored as above
            arr, stype = ctx.fresh("vs"), dtype
            lanes = ", ".join(unparen(ctx.lane(u.src[1], k)) for k in range(int(u.src[1].shape[0])))
            lines.append(f"{pad}__align__(16) {dtype} {arr}[{int(u.src[1].shape[0])}] = {{{lanes}}};")
        else:
            return False
        if place is None or dtype != stype:
            return False
        b, first, size = place
        gate = f"if ({unparen(ctx[u.src[2]])}) " if len(u.src) == 3 else ""
        for j in range(0, int(u.src[1].shape[0]), _WIDE // size):
            at = f"{first}+{j}" if j else first
            lines.append(f"{pad}{gate}*(uint4*)&{b}[{at}] = *(const uint4*)&{arr}[{j}];")
        return True
    return False



__all__ = ["element_bytes", "is_async_copy", "is_ldmatrix", "local_itemsize", "packed_regs", "packed_store",
           "raw_locals", "wide_run"]
