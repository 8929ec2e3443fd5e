"""CUDA C for LINEAR programs: the C renderer's scalar rules in the CUDA dialect, plus the GPU instructions.

One kernel is `extern "C" __global__ void __launch_bounds__(N) name(float* __restrict__ data0, ...,
const int n)`: GLOBAL buffers by slot (`const` when the kernel never writes them), then the int variables by
name. What is CUDA's own (the rules before devices.c_render.SCALAR_RULES):

  SPECIAL  "gidx0/1/2" is blockIdx.x/y/z, "lidx0/1/2" threadIdx.x/y/z, each declared once at the top of the
           body as an index value; N in __launch_bounds__ is the product of the lidx bounds (omitted when one of
           them is symbolic). The launcher sizes the grid and the block from the same bounds.
  index    32-bit where the bounds prove it exact: when every index value of the kernel (and every product a
           MULACC of indices forms) lies in int32 by rewrite.interval's min_max (over the variables' declared
           bounds), index values, loop counters and SPECIALs are `int` and an address is widened to 64 bits only
           where C adds it to the pointer (`data0[i]`); an index variable stays `long long` in the signature (the
           launcher's ABI) and is narrowed once at the top. Otherwise every index value is `long long`.
  BUFFER   addrspace LOCAL: `__shared__ T name[n];` (bfloat16 held as float, like a register).
  BARRIER  `__syncthreads();`
  ATOMICADD (INDEX, value): atomicAdd on the element (64-bit ints as unsigned long long, which wraps the same;
           bfloat16 through __nv_bfloat16, float16 through half).
  SHUFFLE  `__shfl_xor_sync(0xffffffffu, v, k)`, always a named value (inlined into a `?:` branch, only the
           lanes that take it would run it); a bfloat16 moves as the float register that holds it.

Everything else is the C text of devices.c_scalar in the CUDA dialect (`devices.c_scalar.Dialect`): `bool`,
`half` (cuda_fp16.h) with every op's result rounded back to half (a float -> half CAST is __float2half_rn /
__double2half: one rounding to nearest even), bfloat16 as float registers rounded after each
op and uint16 bits in memory, helpers as `__device__` functions. Exactness as in C: nvcc is run with
-fmad=false (no contraction into FMA), IEEE division and square root (nvcc's defaults, never --use_fast_math);
SQRT and MULACC use the correctly rounded intrinsics __fsqrt_rn / __fmaf_rn (and the double ones). EXP2, LOG2,
SIN and POW call CUDA's math library (exp2f: 2 ulp, log2f: 1 ulp, sinf: 2 ulp, powf: 4 ulp at most, per the
CUDA C Programming Guide), so float32 there may differ from the reference by a few ulp.

A 2-lane STORE of a tensor-core result pair (devices.cuda_memory.packed_store) is one float2 or uint32_t store.

cp.async and ldmatrix (lower.tc_async): a STORE arg "cp.async" of a LOAD of GLOBAL memory into LOCAL memory is
`cp.async.cg.shared.global` 16 bytes at a time (the LOAD itself is not rendered; its gate becomes the src-size,
0 zero-filling; the STORE's gate an `if`); BARRIER "cp.async.commit" is `cp.async.commit_group`, BARRIER
("cp.async.wait", n) `cp.async.wait_group n` then `__syncthreads()`; a LOAD ("ldmatrix", n, trans) is
`ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16` from this lane's row (lane 0 of its INDEX) into n .b32
registers that the WMMA takes as its packed fragment (a STACK of its lanes 2i.. takes registers i..: cuda_memory.
packed_regs). A LOCAL bfloat16 buffer only these two touch holds 16-bit bits (`uint16_t`) instead of floats.

TMA and mbarriers (lower.tc_tma, devices.tma): each distinct tensor map of the program's "tma.load" INS is a
`const __grid_constant__ uopc_tmap tmapN` parameter after the variables (a 64-aligned 128-byte struct defined
where a kernel has one: CUDA's CUtensorMap, which the launcher encodes); "mbarrier.init", "mbarrier.expect_tx"
and "tma.load" are the leader's `mbarrier.init`, `mbarrier.arrive.expect_tx` and
`cp.async.bulk.tensor.Nd...mbarrier::complete_tx::bytes` under `if (leader)`; "mbarrier.wait" is a
`mbarrier.try_wait.parity` loop; BARRIER "mbarrier.init.fence" is `fence.mbarrier_init` and `__syncthreads()`.

Vector values (shape (n,), devices/__init__.py) become n scalars, one C value per lane (`ctx.lanes`): a VCONST
is n literals, an INDEX of a buffer by a vector n lvalues (`acc0[0]`, ..., `data1[i+256]`; a REG buffer indexed
by constants stays a small array, which nvcc keeps in registers), a LOAD n declared scalars, an ALU, CAST or
BITCAST n values made by the scalar rules lane by lane (declared, or inlined into a single user in the same
block), a STORE n stores, a STACK its sources, INDEX(v, CONST k) lane k of v. A scalar operand of a vector op
is the same text in every lane.

  WMMA     inline PTX `mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32`, D read-modify-written
           in place of C ("+f"). Fragment elements are packed in pairs into .b32 registers, the even element in
           the low half (A: 8 values = 4 registers, B: 4 = 2); C and D are 4 float registers, in the lane layout
           of devices/__init__.py, which is PTX's own. A bfloat16 value is a float register holding a bfloat16
           value, so its bits are the float's upper 16 bits (exact). WMMA (16, 8, 8, float32, float32): the
           tf32 m16n8k8 mma, 4 A and 2 B elements a lane, each rounded by `cvt.rna.tf32.f32` into its register.
"""

from __future__ import annotations

from typing import cast

from devices.c_render import SCALAR_RULES, render_instr
from devices.c_scalar import C_DIALECT, CContext, Dialect, const_text, is_reserved, render_range, unparen
from devices.cuda_memory import (
    _packed_store,
    _render_cp_async,
    _render_ldmatrix,
    _shared_addr,
    _wide_access,
    is_async_copy,
    is_ldmatrix,
    local_itemsize,
    packed_regs,
    raw_locals,
)
from devices.linear import Program, base_of, buffer_arg, const_value, is_global
from devices.python_wgmma import is_wgmma, swizzle_of
from devices.tma import EXPECT as TMA_EXPECT
from devices.tma import INIT as TMA_INIT
from devices.tma import INIT_FENCE, ins_kind, tensor_maps
from devices.tma import LOAD as TMA_LOAD
from devices.tma import WAIT as TMA_WAIT
from rewrite.dsl import Rule, RuleSet, op, var
from rewrite.dtype import AddrSpace, DType, dtypes
from rewrite.errors import CompileError
from rewrite.ops import GroupOp, Ops
from rewrite.uop import UOp

_MATH = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.POW: "pow", Ops.TRUNC: "trunc"}
CUDA_DIALECT = Dialect(
    "CUDA",
    types={**C_DIALECT.types, dtypes.bool: "bool", dtypes.float16: "half"},
    helper_prefix="static __device__ __forceinline__",
    fma=("__fmaf_rn", "__fma_rn"),
    math32={**{o: f + "f" for o, f in _MATH.items()}, Ops.SQRT: "__fsqrt_rn"},
    math64={**_MATH, Ops.SQRT: "__dsqrt_rn"},
    unroll="",
)
# the ops the CUDA renderer writes (the C renderer's scalar set: floor IDIV/MOD and THREEFRY are decomposed)
CUDA_ALU_OPS = GroupOp.ALU - {Ops.IDIV, Ops.MOD, Ops.THREEFRY}
SPECIAL_AXES = {"gidx": "blockIdx", "lidx": "threadIdx"}
_CXX_WORDS = frozenset({
    "bool", "true", "false", "class", "new", "delete", "template", "typename", "this", "namespace", "using",
    "operator", "private", "public", "protected", "virtual", "friend", "explicit", "mutable", "throw", "try",
    "catch", "nullptr", "constexpr", "decltype", "asm", "half", "nv_bfloat16", "__half", "__nv_bfloat16",
    "blockIdx", "threadIdx", "blockDim", "gridDim", "warpSize", "atomicAdd", "dim3",
})


def special_dim(name: str) -> tuple[str, int] | None:
    """("gidx", axis) or ("lidx", axis) for a GPU SPECIAL name, None for any other name."""
    kind, axis = name[:4], name[4:]
    if kind in SPECIAL_AXES and axis in ("0", "1", "2"):
        return kind, int(axis)
    return None


STATIC_SHARED_LIMIT = 48 << 10  # bytes of static __shared__ a block may declare; more must be dynamic


def swizzled(prog: Program) -> bool:
    """Does a wgmma read a swizzled operand? Then the LOCAL buffers are dynamic shared memory aligned to the
    swizzle's 1024-byte atoms (devices.python_gpu.wgmma_element XORs the absolute address bits)."""
    return any(u.op is Ops.WMMA and is_wgmma(u) and any(swizzle_of(lay) for lay in cast(tuple, u.arg)[3:])
               for u in prog.instrs)


def shared_layout(prog: Program) -> tuple[dict[UOp, int], int]:
    """Each LOCAL buffer's byte offset in the block's shared memory (16-byte aligned, 1024 where `swizzled`), and
    the total bytes."""
    offsets: dict[UOp, int] = {}
    total = 0
    raw = raw_locals(prog)
    align = 1024 if swizzled(prog) else 16
    for u in prog.instrs:
        if u.op is Ops.BUFFER and buffer_arg(u).addrspace is AddrSpace.LOCAL:
            offsets[u] = total
            total += -(-int(u.shape[0]) * local_itemsize(u, raw) // align) * align
    return offsets, total


def dynamic_shared(prog: Program) -> int:
    """The bytes of dynamic shared memory a launch of `prog` needs: its LOCAL buffers past the static limit or
    read swizzled by wgmma (the dynamic array's alignment is the one we declare), else 0."""
    total = shared_layout(prog)[1]
    return total if total > STATIC_SHARED_LIMIT or (total and swizzled(prog)) else 0


INT32 = (-(1 << 31), (1 << 31) - 1)


def _fits_int32(u: UOp) -> bool:
    lo, hi = u.min_max
    if not INT32[0] <= int(lo) <= int(hi) <= INT32[1]:
        return False
    if u.op is Ops.MULACC:  # C computes a*b before adding c: the product must fit too
        (a0, a1), (b0, b1) = u.src[0].min_max, u.src[1].min_max
        prods = [int(x) * int(y) for x in (a0, a1) for y in (b0, b1)]
        return INT32[0] <= min(prods) and max(prods) <= INT32[1]
    return True


def index_fits_int32(prog: Program) -> bool:
    """Whether every index value of the program is proven to lie in int32 (module docstring, `index`)."""
    return all(_fits_int32(u) for u in prog.instrs
               if u.dtype.scalar is dtypes.index and u.op is not Ops.BUFFER and
               (u.op not in (Ops.VCONST, Ops.STACK) or u in prog.uses))


class CudaContext(CContext):
    """The C rendering state in the CUDA dialect; names also stay clear of C++ words and CUDA built-ins. With
    more than 48 KiB of LOCAL buffers, they are slices of the dynamic shared memory (`dynamic` holds offsets).
    `index32`: index values are C ints (module docstring)."""

    def __init__(self, prog: Program, helpers: dict[str, str] | None = None) -> None:
        super().__init__(prog, helpers, CUDA_DIALECT)
        self.index32 = index_fits_int32(prog)
        self.dynamic: dict[UOp, int] | None = shared_layout(prog)[0] if dynamic_shared(prog) else None
        self.align = 1024 if swizzled(prog) else 16
        # wgmma groups left in flight across k steps (lower.tc_wgmma's overlap): ptxas serializes every wgmma
        # (C7514) when the results' float -> half conversions (F2FP pack instructions) read the accumulator
        # registers themselves, so those conversions read x + -0.0 (the same value, a register of its own)
        self.wgmma_in_flight = any(u.op is Ops.BARRIER and isinstance(u.arg, tuple) and u.arg[0] == "wgmma.wait"
                                   and u.arg[1] for u in prog.instrs)
        self.lanes: dict[UOp, list[str]] = {}  # the per-lane C text of each vector value
        self.wide: dict[UOp, tuple[str, str]] = {}  # a vector LOAD held in a 16-aligned array: (name, C type)
        self.raw = raw_locals(prog)  # LOCAL bfloat16 buffers of bits (raw_locals)
        self.packed: dict[UOp, list[str]] = {}  # an ldmatrix result: its .b32 registers (element pairs)
        self.tmaps, self.tmap_of = tensor_maps(prog.instrs)  # the TMA copies' tensor maps (parameters tmap0, ...)

    def ctype(self, dtype: DType) -> str:
        return "int" if self.index32 and dtype.scalar is dtypes.index else super().ctype(dtype)

    def lane(self, u: UOp, k: int) -> str:
        """Lane k of u: its own text for a vector value, the same scalar for every lane otherwise."""
        return self.lanes[u][k] if u in self.lanes else self.names[u]

    def take(self, want: str) -> str:
        name = super().take(want)
        if name in _CXX_WORDS:
            self.taken.discard(name)
            name = self.fresh(f"v_{name}_")
        return name


def _render_local(x: UOp, ctx: CudaContext) -> str:
    name = ctx.names[x] = ctx.fresh("smem")
    t = "uint16_t" if x in ctx.raw else ctx.ctype(x.dtype)
    if ctx.dynamic is not None:
        return f"{t}* {name} = ({t}*)(smem_dynamic + {ctx.dynamic[x]});"
    return f"__shared__ __align__(16) {t} {name}[{x.shape[0]}];"


def _render_atomic_add(idx: UOp, val: UOp, ctx: CContext) -> str:
    buf = base_of(base_of(idx).src[0])
    dt, addr, v = buf.dtype, f"&{ctx[idx]}", unparen(ctx[val])
    if dt is dtypes.bfloat16 and is_global(buf):
        ctx.define("#bf16", "#include <cuda_bf16.h>")
        return f"atomicAdd((__nv_bfloat16*){addr}, __float2bfloat16_rn({v}));"
    if dt in (dtypes.int64, dtypes.uint64, dtypes.index):
        return f"atomicAdd((unsigned long long*){addr}, (unsigned long long)({v}));"
    if dt in (dtypes.int32, dtypes.uint32, dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16):
        return f"atomicAdd({addr}, {v});"
    raise CompileError(f"{ctx.prog.where(idx)}: CUDA has no atomicAdd for {dt.name}; accumulate in a wider type")


def _render_cast_half(x: UOp, y: UOp, ctx: CContext) -> str:
    """A float -> float16 CAST rounds once, to nearest even, from the source's own precision (rewrite.semantics):
    __float2half_rn for float32 and bfloat16 (a float register), __double2half for float64."""
    ctx.define("#fp16", "#include <cuda_fp16.h>")
    fn = "__double2half" if y.dtype is dtypes.float64 else "__float2half_rn"
    if y.dtype is dtypes.float32 and isinstance(ctx, CudaContext) and ctx.wgmma_in_flight:
        return f"{fn}(__fadd_rn({unparen(ctx[y])}, -0.0f))"  # see CudaContext.wgmma_in_flight
    return f"{fn}({unparen(ctx[y])})"


def _render_range(x: UOp, b: UOp, ctx: CContext) -> str:
    text = render_range(x, b, ctx)
    return text.replace("for (long long ", "for (int ", 1) if isinstance(ctx, CudaContext) and ctx.index32 else text


def _render_barrier(x: UOp) -> str:
    """__syncthreads(); BARRIER "cp.async.commit" closes this thread's group of copies; ("cp.async.wait", n) waits
    until at most n of its groups are in flight, then __syncthreads() (with "proxy": a fence.proxy.async between,
    so the landed tiles are visible to wgmma's async proxy); "wgmma.fence", "wgmma.commit", ("wgmma.wait", n):
    wgmma.fence / commit_group / wait_group n."""
    if x.arg is None:
        return "__syncthreads();"
    if x.arg == "cp.async.commit":
        return 'asm volatile("cp.async.commit_group;\\n" ::);'
    if isinstance(x.arg, tuple) and len(x.arg) in (2, 3) and x.arg[0] == "cp.async.wait" and \
            isinstance(x.arg[1], int):
        proxy = ' asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");' if x.arg[2:] == ("proxy",) else ""
        return f'asm volatile("cp.async.wait_group {x.arg[1]};\\n" ::: "memory");{proxy}\n__syncthreads();'
    if x.arg in _WGMMA_BARRIERS:
        return f'asm volatile("{_WGMMA_BARRIERS[x.arg]}\\n" ::: "memory");'
    if isinstance(x.arg, tuple) and len(x.arg) == 2 and x.arg[0] == "wgmma.wait" and isinstance(x.arg[1], int):
        return f'asm volatile("wgmma.wait_group.sync.aligned {x.arg[1]};\\n" ::: "memory");'
    if x.arg == INIT_FENCE:
        return 'asm volatile("fence.mbarrier_init.release.cluster;\\n" ::: "memory");\n__syncthreads();'
    raise CompileError(f"BARRIER arg {x.arg!r}: the CUDA renderer knows None, 'cp.async.commit', "
                       f"('cp.async.wait', n[, 'proxy']), 'wgmma.fence', 'wgmma.commit', ('wgmma.wait', n) and "
                       f"{INIT_FENCE!r}")


def _render_ins(x: UOp, ctx: CudaContext) -> str:
    """The TMA and mbarrier INS of devices.tma: mbarrier.init / arrive.expect_tx and cp.async.bulk.tensor by the
    leader thread, mbarrier.try_wait.parity in a loop by every thread."""
    kind = ins_kind(x)
    bar = _shared_addr(ctx[x.src[0] if kind != TMA_LOAD else x.src[2]])
    if kind == TMA_WAIT:
        return (f'{{\nuint32_t ready = 0;\nwhile (!ready) {{\nasm volatile("{{\\n.reg .pred p;\\n'
                f'mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\nselp.u32 %0, 1, 0, p;\\n}}\\n" '
                f': "=r"(ready) : "r"({bar}), "r"((uint32_t)({unparen(ctx[x.src[1]])})) : "memory");\n}}\n}}')
    if kind == TMA_INIT:
        ins, ops = "mbarrier.init.shared::cta.b64 [%0], %1;", f'"r"({bar}), "r"({cast(tuple, x.arg)[1]})'
    elif kind == TMA_EXPECT:
        ins = "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
        ops = f'"r"({bar}), "r"({cast(tuple, x.arg)[1]})'
    elif kind == TMA_LOAD:
        rank = len(cast(tuple, x.arg)[1])
        coords = ", ".join(f"%{2 + i}" for i in range(rank))
        ins = (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], "
               f"[%1, {{{coords}}}], [%{2 + rank}];")
        cs = "".join(f', "r"((int)({unparen(ctx[c])}))' for c in x.src[4:4 + rank])
        ops = f'"r"({_shared_addr(ctx[x.src[0]])}), "l"((uint64_t)&tmap{ctx.tmap_of[x]}){cs}, "r"({bar})'
    else:
        raise CompileError(f"{ctx.prog.where(x)}: INS {x.arg!r}: the CUDA renderer knows devices.tma's")
    leader = x.src[1] if kind != TMA_LOAD else x.src[3]
    return f'if ({unparen(ctx[leader])}) asm volatile("{ins}\\n" :: {ops} : "memory");'


_WGMMA_BARRIERS = {"wgmma.fence": "wgmma.fence.sync.aligned;", "wgmma.commit": "wgmma.commit_group.sync.aligned;"}


# CUDA's own instructions first; SCALAR_RULES takes the rest (SPECIALs are named by the signature)
CUDA_RULES = RuleSet("cuda-render", [
    Rule("cuda-buffer-local", op.BUFFER(name="x", rest=True), _render_local,
         when=lambda x: buffer_arg(x).addrspace == AddrSpace.LOCAL),
    Rule("cuda-cast-half", op.CAST(var("y"), name="x"), _render_cast_half,
         when=lambda x, y: x.dtype is dtypes.float16 and y.dtype in (dtypes.float32, dtypes.float64, dtypes.bfloat16)),
    Rule("cuda-range", op.RANGE(var("b"), name="x"), _render_range),
    Rule("cuda-barrier", op.BARRIER(name="x", rest=True), lambda x: _render_barrier(x)),
    Rule("cuda-ins", op.INS(name="x", rest=True), lambda x, ctx: _render_ins(x, ctx)),
    Rule("cuda-atomic-add", op.ATOMICADD(var("idx"), var("val")), _render_atomic_add),
    Rule("cuda-shuffle", op.SHUFFLE(var("v"), name="x"),
         lambda x, v, ctx: f"__shfl_xor_sync(0xffffffffu, {unparen(ctx[v])}, {x.arg})"),
]) + SCALAR_RULES


def launch_bounds(prog: Program) -> int | None:
    """Threads per block when every lidx bound is a constant (1 with no lidx), else None."""
    n = 1
    for name, sp in prog.specials.items():
        dim = special_dim(name)
        if dim is not None and dim[0] == "lidx":
            if sp.src[0].op is not Ops.CONST:
                return None
            n *= int(const_value(sp.src[0]))
    return n


def _signature(prog: Program, name: str, ctx: CContext) -> list[str]:
    params = []
    for s, b in prog.buffers.items():
        const = "" if s in prog.stored else "const "
        params.append(f"{const}{CUDA_DIALECT.storage(b.dtype)}* __restrict__ data{s}")
        ctx.taken.add(f"data{s}")
    narrow = []  # index variables passed as 64-bit and narrowed at the top (the launcher's ABI is fixed)
    for vname, p in prog.variables.items():
        ctx.names[p] = ctx.take(vname)
        if ctx.ctype(p.dtype) != CUDA_DIALECT.ctype(p.dtype):
            wide = ctx.fresh(f"{ctx.names[p]}_arg")
            params.append(f"const {CUDA_DIALECT.ctype(p.dtype)} {wide}")
            narrow.append(f"  const {ctx.ctype(p.dtype)} {ctx.names[p]} = ({ctx.ctype(p.dtype)}){wide};")
        else:
            params.append(f"const {ctx.ctype(p.dtype)} {ctx.names[p]}")
    if isinstance(ctx, CudaContext) and ctx.tmaps:
        ctx.define("uopc_tmap", "struct __align__(64) uopc_tmap { uint64_t v[16]; };  // CUDA's CUtensorMap")
        for i in range(len(ctx.tmaps)):
            params.append(f"const __grid_constant__ uopc_tmap tmap{i}")
            ctx.taken.add(f"tmap{i}")
    n = launch_bounds(prog)
    bounds = f"__launch_bounds__({n}) " if n is not None else ""
    lines = [f'extern "C" __global__ void {bounds}{name}({", ".join(params)}) {{']
    if isinstance(ctx, CudaContext) and ctx.dynamic is not None:
        lines.append(f"  extern __shared__ __align__({ctx.align}) unsigned char smem_dynamic[];")
        if ctx.align >= 1024:  # the 128-byte swizzle XORs address bits 9-7: tiles off a 1024-byte atom would be
            # read wrong without a word, so a block whose dynamic shared memory is not so aligned traps instead
            lines.append("  if ((unsigned)__cvta_generic_to_shared(smem_dynamic) & 1023u) __trap();")
    lines += narrow
    for sname, sp in prog.specials.items():
        dim = special_dim(sname)
        if dim is None:
            raise CompileError(f"{prog.where(sp)}: the CUDA renderer knows the SPECIALs gidx0..2 (blockIdx) and "
                               f"lidx0..2 (threadIdx), not {sname!r}; lower for a GPU target")
        ctx.names[sp] = ctx.take(sname)
        lines.append(f"  const {ctx.ctype(sp.dtype)} {ctx.names[sp]} = {SPECIAL_AXES[dim[0]]}.{'xyz'[dim[1]]};")
    return lines


def is_vector(u: UOp) -> bool:
    """A value of several lanes (a BUFFER, or an AFTER of one, is memory, not a value)."""
    return u.shape != () and base_of(u).op is not Ops.BUFFER


# the vector instructions rendered lane by lane with the scalar rules
_LANEWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.LOAD, Ops.INDEX, Ops.STORE}
_MMA_TYPE = {dtypes.float16: "f16", dtypes.bfloat16: "bf16", dtypes.float32: "tf32"}
_PACK = {
    dtypes.float16: "static __device__ __forceinline__ uint32_t pack_f16x2(half lo, half hi) {\n"
                    "  return (uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16);\n}",
    dtypes.bfloat16: "static __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {\n"
                     "  return (__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u);\n}",
}


_TF32 = ("static __device__ __forceinline__ uint32_t to_tf32(float x) {\n"
         "  uint32_t r; asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(r) : \"f\"(x)); return r;\n}")


def _render_wmma(u: UOp, ctx: CudaContext, lines: list[str], pad: str) -> None:
    a, b, c = u.src
    arg = cast(tuple, u.arg)
    dt = arg[3]
    shapes = ((8,), (4,)) if arg[2] == 16 else ((4,), (2,))
    if dt not in _MMA_TYPE or (arg[2] == 8) != (dt is dtypes.float32) or (a.shape, b.shape) != shapes or \
            c.shape != (4,) or u.dtype is not dtypes.float32:
        raise CompileError(f"{ctx.prog.where(u)}: the CUDA renderer makes WMMA m16n8k16 of float16 or bfloat16 "
                           f"fragments (8, 4) and m16n8k8 of float32 (tf32) fragments (4, 2) into float32 (4), not "
                           f"{u.arg} with {a.shape}, {b.shape}, {c.shape}")
    d = [ctx.fresh("wmma") for _ in range(4)]
    ctx.lanes[u] = d
    lines.append(pad + "float " + ", ".join(f"{n} = {unparen(ctx.lane(c, e))}" for e, n in enumerate(d)) + ";")
    t = _MMA_TYPE[dt]
    if dt is dtypes.float32:  # each element rounded to tf32 (to nearest, ties away), one per register
        fn = ctx.define("to_tf32", _TF32)
        regs = [f"{fn}({unparen(ctx.lane(x, i))})" for x, n in ((a, 4), (b, 2)) for i in range(n)]
        shape = "m16n8k8"
    else:
        pack = ctx.define(f"pack_{t}x2", _PACK[dt]) if dt is dtypes.bfloat16 else "pack_f16x2"
        if dt is dtypes.float16:
            ctx.define("#fp16", "#include <cuda_fp16.h>")
            ctx.define(pack, _PACK[dt])
        regs = [ctx.packed[x][i] if x in ctx.packed else
                f"{pack}({unparen(ctx.lane(x, 2 * i))}, {unparen(ctx.lane(x, 2 * i + 1))})"
                for x, n in ((a, 4), (b, 2)) for i in range(n)]
        shape = "m16n8k16"
    lines.append(pad + f'asm volatile("mma.sync.aligned.{shape}.row.col.f32.{t}.{t}.f32 {{%0, %1, %2, %3}}, '
                 f'{{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"')
    lines.append(pad + "    : " + ", ".join(f'"+f"({n})' for n in d))
    lines.append(pad + "    : " + ", ".join(f'"r"({r})' for r in regs) + ");")


_WGMMA_DESC = (
    "static __device__ __forceinline__ uint64_t wgmma_desc(const void* p, uint32_t lbo, uint32_t sbo,\n"
    "                                                      uint32_t swizzle) {\n"
    "  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);\n"
    "  return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |\n"
    "         ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | ((uint64_t)(swizzle & 3u) << 62);\n}")


def _render_wgmma(u: UOp, ctx: CudaContext, lines: list[str], pad: str) -> None:
    """WMMA ("wgmma", n, dtype, (lbo, sbo, mn_major[, swizzle]) of A, of B): the descriptors (devices.python_gpu.
    wgmma_descriptor's fields: the shared address of the operand's first element, LBO, SBO, swizzle mode) and one
    `wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t}` on the n / 2 accumulators in place ("+f"), scale-d 1,
    the transpose immediates from the layouts' mn_major."""
    a, b, c = u.src
    _, n, dt, lay_a, lay_b = cast(tuple, u.arg)
    for x in (a, b):
        buf = base_of(base_of(x).src[0])
        if dt is dtypes.bfloat16 and buf not in ctx.raw:
            raise CompileError(f"{ctx.prog.where(u)}: wgmma reads 16-bit elements: a bfloat16 operand buffer must "
                               f"be written by cp.async copies only (devices.cuda_memory.raw_locals)")
    fn = ctx.define("wgmma_desc", _WGMMA_DESC)
    descs = [ctx.fresh("wgdesc") for _ in range(2)]
    for name, x, lay in zip(descs, (a, b), (lay_a, lay_b), strict=True):
        lines.append(f"{pad}const uint64_t {name} = {fn}(&{ctx[x]}, {lay[0]}u, {lay[1]}u, {swizzle_of(lay)}u);")
    half = int(n) // 2
    d = [ctx.fresh("wgacc") for _ in range(half)]
    ctx.lanes[u] = d
    lines.append(pad + "float " + ", ".join(f"{nm} = {unparen(ctx.lane(c, e))}" for e, nm in enumerate(d)) + ";")
    t = _MMA_TYPE[dt]
    regs = ", ".join(f"%{i}" for i in range(half))
    lines.append(pad + f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{half + 2}, 0;\\n"')
    lines.append(pad + f'    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}.{t} {{{regs}}}, %{half}, %{half + 1}, p, '
                 f'1, 1, {int(lay_a[2])}, {int(lay_b[2])};\\n}}\\n"')
    lines.append(pad + "    : " + ", ".join(f'"+f"({nm})' for nm in d))
    lines.append(pad + f'    : "l"({descs[0]}), "l"({descs[1]}), "r"(1) : "memory");')


def _inlined(u: UOp, ctx: CudaContext) -> bool:
    """Is this vector ALU value written into its one user's lanes (as the C renderer inlines a scalar)?"""
    users = ctx.prog.users.get(u, [])
    depth = 1 + max((ctx.depth.get(s, 0) for s in u.src), default=0)
    return len(users) == 1 and ctx.prog.block[ctx.prog.pos[users[0]]] == ctx.prog.block[ctx.prog.pos[u]] and depth <= 48


def _render_vector(u: UOp, ctx: CudaContext, lines: list[str], indent: int) -> None:
    """A vector instruction (or a lane read of one) as per-lane scalars; see the module docstring."""
    pad = "  " * indent
    if u.op is Ops.INDEX and is_vector(u.src[0]) and not is_vector(u):
        sel = u.src[1]
        if sel.op is not Ops.CONST:
            raise CompileError(f"{ctx.prog.where(u)}: a lane of a vector is read by a constant INDEX")
        k = int(cast(int, const_value(sel)))
        # a lane of an ldmatrix's registers: only a STACK passing whole registers to a WMMA reads it
        ctx.names[u] = f"{ctx.packed[u.src[0]][k // 2]}_lane{k}" if u.src[0] in ctx.packed else ctx.lane(u.src[0], k)
        return
    if u.op is Ops.WMMA:
        (_render_wgmma if is_wgmma(u) else _render_wmma)(u, ctx, lines, pad)
        return
    if is_ldmatrix(u):
        _render_ldmatrix(u, ctx, lines, pad)
        return
    if is_async_copy(u):
        _render_cp_async(u, ctx, lines, pad)
        return
    if u.op is Ops.LOAD and (users := ctx.prog.users.get(u, [])) and all(is_async_copy(x) for x in users):
        return  # the source of cp.async copies: the copy reads it
    n = int(u.shape[0]) if u.shape else max(int(s.shape[0]) for s in u.src if is_vector(s))
    if u.op is Ops.VCONST:
        ctx.lanes[u] = [const_text(v, u.dtype, "half") for v in cast(tuple, u.arg)[0]]
    elif u.op is Ops.STACK:
        ctx.lanes[u] = [ctx[s] for s in u.src]
        if (regs := packed_regs(u, ctx)) is not None:
            ctx.packed[u] = regs
    elif u.op is Ops.AFTER:
        ctx.lanes[u] = ctx.lanes[u.src[0]]
    elif _wide_access(u, ctx, lines, pad) or _packed_store(u, ctx, lines, pad):
        return
    elif u.op in _LANEWISE:
        fn = CUDA_RULES.matcher(u.op)
        saved = {s: ctx.names[s] for s in u.src if s in ctx.names}
        out: list[str] = []
        for k in range(n):
            for s in u.src:
                ctx.names[s] = ctx.lane(s, k)
            hit = fn(u, ctx) if fn is not None else None
            if hit is None:
                raise CompileError(f"{ctx.prog.where(u)}: the CUDA renderer has no rule for {u.op.name} here")
            out.append(cast(str, cast(tuple, hit)[0]))
        for s in u.src:
            if s in saved:
                ctx.names[s] = saved[s]
            else:
                ctx.names.pop(s, None)
        if u.op is Ops.STORE:
            lines.extend(pad + t for t in out)
        elif u.op is Ops.INDEX:
            ctx.lanes[u] = out
        elif u.op is not Ops.LOAD and _inlined(u, ctx):
            ctx.lanes[u] = out
            ctx.depth[u] = 1 + max((ctx.depth.get(s, 0) for s in u.src), default=0)
            return
        else:
            names = [ctx.fresh("val" if u.op is Ops.LOAD else "alu") for _ in range(n)]
            lines.extend(f"{pad}{ctx.ctype(u.dtype)} {nm} = {unparen(t)};" for nm, t in zip(names, out, strict=True))
            ctx.lanes[u] = names
    else:
        raise CompileError(f"{ctx.prog.where(u)}: the CUDA renderer has no vector form of {u.op.name} "
                           f"(shape {u.shape})")
    ctx.depth[u] = 0


def _vector_instr(u: UOp, prog: Program) -> bool:
    if u.op in (Ops.VCONST, Ops.STACK) and u not in prog.uses:
        return False  # a BUFFER's shape operand
    return u.op is Ops.WMMA or is_vector(u) or (u.op in (Ops.STORE, Ops.INDEX) and is_vector(u.src[0]))


def render_kernel(prog: Program, name: str, helpers: dict[str, str]) -> str:
    """One CUDA kernel for a checked program; helpers (and headers) it needs are added to `helpers`."""
    ctx = CudaContext(prog, helpers)
    lines = _signature(prog, name, ctx)
    indent = 1
    for u in prog.instrs:
        if _vector_instr(u, prog):
            _render_vector(u, ctx, lines, indent)
        else:
            indent = render_instr(u, prog, ctx, CUDA_RULES, lines, indent)
    lines.append("}")
    if any(u.dtype.scalar is dtypes.float16 for u in prog.instrs):
        helpers.setdefault("#fp16", "#include <cuda_fp16.h>")
    return "\n".join(lines)


# What the C library headers would give, written inline: NVRTC has no libc headers (nvcc's do no harm: these
# typedefs are the LP64 ones stdint.h makes, which C++ allows twice, and the constants are only defined once).
# CUDA's math functions (exp2f, fabs, fmod, trunc, ...) and memcpy are built into both compilers.
PRELUDE = """typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fc00000)
#endif
"""


def render_cuda_source(kernels: list[str], helpers: dict[str, str]) -> str:
    """A .cu file: the PRELUDE, then the CUDA headers and helpers the kernels use, then the kernels."""
    head = PRELUDE
    includes = [h for k, h in helpers.items() if k.startswith("#")]
    rest = [h for k, h in helpers.items() if not k.startswith("#")]
    return head + "".join(h + "\n" for h in includes + rest) + "\n" + "\n\n".join(kernels) + "\n"


def kernel_symbol(name: str) -> str:
    """A CUDA function name for a kernel name: clear of C and C++ words and the renderer's own names."""
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "kernel"
    return "k_" + s if s[0].isdigit() or is_reserved(s) or s in _CXX_WORDS else s


__all__ = [
    "CUDA_ALU_OPS",
    "CUDA_DIALECT",
    "CUDA_RULES",
    "STATIC_SHARED_LIMIT",
    "CudaContext",
    "dynamic_shared",
    "index_fits_int32",
    "is_async_copy",
    "is_ldmatrix",
    "kernel_symbol",
    "launch_bounds",
    "local_itemsize",
    "raw_locals",
    "render_cuda_source",
    "render_kernel",
    "shared_layout",
    "special_dim",
]
