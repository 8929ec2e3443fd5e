"""The cuda device without a GPU: CUDA C rendered from LINEAR and compiled by nvcc and by NVRTC for sm_80 and
sm_90 (the kernel suite's kernels and hand-built GPU-shaped programs), the cubin disk cache, and the typed errors. Each
compiler's tests skip only where it is absent; needs no GPU."""

from __future__ import annotations

import math
import os
import shutil

import numpy as np
import pytest

from benchmarks.kernel_cases import Case, tensor_graph
from devices import get_device, objcache
from devices.base import gpu_target
from devices.cuda import DEVICE, NVCC
from devices.cuda_compile import nvrtc_available
from lower.pipeline import lower_kernel
from lower.schedule import schedule
from rewrite.dtype import dtypes
from rewrite.env import Context
from rewrite.errors import CompileError, DeviceError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import Tensor
from tests.devices.builder import ALL_DTYPES, buf, elementwise, gpu_graphs, has_reduce, linear, reg
from tests.devices.cuda_programs import big_shared, big_shared_expected, block_sum, grid_elementwise, special

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available()[0], reason="NVRTC is not installed (pip install uopc[gpu]: "
                                 "the nvidia-cuda-nvrtc and nvidia-cuda-runtime wheels)")
# every compile test runs with both compilers; each skips only where its compiler is missing
COMPILERS = [pytest.param("nvcc", marks=needs_nvcc), pytest.param("nvrtc", marks=needs_nvrtc)]
SMS = ("sm_80", "sm_90")

# the kernel suite's computations at small sizes, plus half/bfloat16 variants
SUITE = [Case("add", "add", "add", (1000,)), Case("chain", "chain", "chain", (1000,)),
         Case("sum", "sum", "sum", (4096,)), Case("softmax", "softmax", "softmax", (16, 33)),
         Case("layernorm", "layernorm", "layernorm", (8, 64)), Case("matmul", "matmul", "matmul", (24,)),
         Case("conv", "conv", "conv", (1, 3, 8, 8, 4)), Case("attention", "attention", "attention", (1, 2, 8, 4))]


def suite_kernels(dtype: str = "float32") -> list[tuple[str, UOp]]:
    """(name, AST) of every kernel the suite's graphs schedule (inputs on the cpu: only the ASTs are used)."""
    rng = np.random.default_rng(0)
    out: list[tuple[str, UOp]] = []
    for case in SUITE:
        xs = [Tensor(rng.standard_normal(s).astype(np.float32)).cast(dtype) for s in case.shapes()]
        items, _ = schedule([tensor_graph(case, xs).uop])
        out += [(f"{case.key}_{dtype}_{it.name}", it.ast) for it in items if it.kind == "kernel" and it.ast is not None]
    return out


def lowered(kernels: list[tuple[str, UOp]], sm: str, lowering: str) -> list[tuple[UOp, str]]:
    """LINEAR programs for `sm`: the GPU heuristics' choice (grid and block axes, shared memory), or no OptOps at
    all (scalar kernels, one thread)."""
    opts = [] if lowering == "noopt" else None
    return [(lower_kernel(ast, gpu_target(sm), opts=opts, name=name), name) for name, ast in kernels]


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("lowering", ["gpu", "noopt"])
def test_the_kernel_suite_compiles_for_the_gpu(compiler: str, tmp_path: os.PathLike, sm: str, dtype: str,
                                               lowering: str) -> None:
    progs = lowered(suite_kernels(dtype), sm, lowering)
    assert len(progs) >= len(SUITE)
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert len(ks) == len(progs) and all(k.cubin[:4] == b"\x7fELF" for k in ks)
    threads = [math.prod(k.launch_dims({})[1]) for k in ks]
    if lowering == "noopt":
        assert threads == [1] * len(ks)
        assert all(f"__global__ void __launch_bounds__(1) {k.symbol}(" in k.src for k in ks)
    else:  # every kernel of the suite is spread over the threads of a block
        assert min(threads) >= 32 and all(f"__launch_bounds__({t}) {k.symbol}(" in k.src for t, k in zip(
            threads, ks, strict=True))
        assert "__syncthreads();" in next(k.src for k in ks if k.name.startswith("sum_"))
    if dtype == "float16":
        assert "#include <cuda_fp16.h>" in ks[0].src and "half" in ks[0].src
    for k in ks:  # the suite's indices fit int32 (their bounds say so): 32-bit index arithmetic throughout
        assert "for (long long" not in k.src and "const long long" not in k.src, k.name


GPU_PROGRAMS = {
    "block_sum": lambda: block_sum(8, 128),
    "block_sum_int": lambda: block_sum(4, 64, dtypes.int32),
    "block_sum_half": lambda: block_sum(4, 32, dtypes.float16),
    "block_sum_bf16": lambda: block_sum(4, 32, dtypes.bfloat16),
    "block_sum_double": lambda: block_sum(4, 32, dtypes.float64),
    "block_sum_int64": lambda: block_sum(4, 32, dtypes.int64),
    "grid_elementwise": lambda: grid_elementwise(1000, 128),
    "big_shared": lambda: big_shared(),
}


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_gpu_shaped_programs_compile(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch([(mk(), name) for name, mk in GPU_PROGRAMS.items()], gpu_target(sm))
    by = {k.name: k for k in ks}
    src = by["block_sum"].src
    for text in ("__launch_bounds__(128) block_sum(", "const int gidx0 = blockIdx.x;",
                 "const int lidx0 = threadIdx.x;", "for (int ridx0 = 0; ridx0 < 128; ridx0++)",
                 "__shared__ __align__(16) float smem0[128];",
                 "__syncthreads();",
                 "atomicAdd(&data2[0], ", "const float* __restrict__ data1", "float* __restrict__ data0"):
        assert text in src, text
    assert "atomicAdd((unsigned long long*)&data2[0]" in src
    assert "atomicAdd((__nv_bfloat16*)&data2[0], __float2bfloat16_rn(" in src
    assert by["block_sum"].launch_dims({}) == ((8, 1, 1), (128, 1, 1))
    assert by["grid_elementwise"].launch_dims({}) == ((8, 1, 1), (128, 1, 1))
    big = by["big_shared"]
    assert big.dynamic_shared == 65536 and "extern __shared__ __align__(16) unsigned char smem_dynamic[];" in big.src


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("dt", [d for d in ALL_DTYPES if d is not dtypes.bool])
def test_every_dtype_renders_and_compiles(compiler: str, tmp_path: os.PathLike, dt: object) -> None:
    """Arithmetic, comparison, cast and max on every dtype: the CUDA dialect's types and helpers compile."""
    progs = [(elementwise(lambda a, b: (a + b) * a - b, dt, [dt, dt]), "arith"),  # type: ignore[arg-type]
             (elementwise(lambda a, b: a.maximum(b), dt, [dt, dt]), "maximum"),  # type: ignore[arg-type]
             (elementwise(lambda a: (a < a * 2).where(a, a.cast(dtypes.float32).cast(a.dtype)), dt, [dt]),  # type: ignore[arg-type]
              "where_cast")]
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target("sm_80"))
    assert [k.symbol for k in ks] == ["arith", "maximum", "where_cast"]


# ---------------------------------------------------------------- the cubin cache


@needs_nvcc
def test_cubin_cache_hits_and_rebuilds_a_damaged_entry(tmp_path: os.PathLike) -> None:
    src = DEVICE.render(grid_elementwise(100, 32), "k")
    nv = NVCC()
    with Context(CACHEDIR=str(tmp_path)):
        first = nv.cubin(src, gpu_target("sm_90"))
        d = os.path.join(str(tmp_path), "cuda")
        (name,) = os.listdir(d)
        path = os.path.join(d, name)
        assert name.endswith(".cubin") and objcache.verify(path, nv.key(src, gpu_target("sm_90")))
        assert nv.cubin(src, gpu_target("sm_90")) == first  # a hit
        with open(path, "r+b") as f:  # damage one byte of the image: the footer no longer matches
            f.seek(100)
            b = f.read(1)
            f.seek(100)
            f.write(bytes([b[0] ^ 0xFF]))
        assert not objcache.verify(path, nv.key(src, gpu_target("sm_90")))
        assert nv.cubin(src, gpu_target("sm_90")) == first  # compiled again and replaced
        assert objcache.verify(path, nv.key(src, gpu_target("sm_90")))
        with open(path, "r+b") as f:  # truncated
            f.truncate(64)
        assert nv.cubin(src, gpu_target("sm_90")) == first
        other = nv.cubin(src, gpu_target("sm_80"))
        assert other != first and len(os.listdir(d)) == 2  # the target is part of the key
    assert nv.key(src, gpu_target("sm_80")) != nv.key(src, gpu_target("sm_90"))
    assert nv.key(src, gpu_target("sm_90")) != nv.key(src + " ", gpu_target("sm_90"))


@needs_nvcc
@needs_nvrtc
def test_nvrtc_source_needs_no_libc_and_the_cache_key_names_the_compiler(tmp_path: os.PathLike,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """NVRTC has no C library headers: the source includes none (only cuda_fp16.h / cuda_bf16.h, from the include
    folder NVRTC is given). The compiler's name, version and flags are part of the cache key: NVRTC and nvcc never
    share an entry, and a new NVRTC version compiles again."""
    from devices.cuda_compile import NVRTC, cuda_compiler

    src = DEVICE.render(block_sum(4, 32, dtypes.float16), "k")
    includes = [ln for ln in src.splitlines() if ln.startswith("#include")]
    assert includes == ["#include <cuda_fp16.h>"], includes
    assert "typedef long int64_t;" in src
    nv, rtc = NVCC(), NVRTC()
    assert rtc.key(src, gpu_target("sm_90")) != nv.key(src, gpu_target("sm_90"))
    assert rtc.key(src, gpu_target("sm_90")) != rtc.key(src, gpu_target("sm_80"))
    flags = rtc.flags(gpu_target("sm_80"))
    assert "--gpu-architecture=sm_80" in flags and "-fmad=false" in flags
    with Context(CACHEDIR=str(tmp_path)):
        first = rtc.cubin(src, gpu_target("sm_90"))
        assert first[:4] == b"\x7fELF" and len(os.listdir(os.path.join(str(tmp_path), "cuda"))) == 1
        monkeypatch.setattr(rtc, "_version", "99.0")
        assert rtc.cubin(src, gpu_target("sm_90")) == first  # the same bytes, compiled again under a new key
        assert len(os.listdir(os.path.join(str(tmp_path), "cuda"))) == 2
        assert type(cuda_compiler()).__name__ == "NVRTC"  # the default where it loads
    with Context(CUDA_COMPILER="nvcc"):
        assert type(cuda_compiler()).__name__ == "NVCC" and type(DEVICE.compiler).__name__ == "NVCC"
    bad = src.replace("__syncthreads();", "__syncthreads() oops;")
    with pytest.raises(CompileError, match=r"NVRTC .* failed on kernel for sm_90:\n.*error"), Context(CACHE=0):
        rtc.cubin(bad, gpu_target("sm_90"))
    monkeypatch.setattr(rtc, "_include", None)
    with pytest.raises(CompileError, match=r"needs cuda_fp16\.h"), Context(CACHE=0):
        rtc.cubin(src, gpu_target("sm_90"))


def test_cache_off_still_compiles(tmp_path: os.PathLike) -> None:
    with Context(CACHEDIR=str(tmp_path), CACHE=0):
        k = DEVICE.compile(grid_elementwise(64, 32), "nocache", gpu_target("sm_80"))
    assert k.cubin[:4] == b"\x7fELF" and not os.path.exists(os.path.join(str(tmp_path), "cuda"))


# ---------------------------------------------------------------- errors


def test_vector_lanes_render_as_per_lane_scalars() -> None:
    """A gather of 4 lanes, an ADD with a broadcast scalar and a scatter: 4 loads, 4 sums, 4 stores, and a REG
    vector accumulator indexed by a VCONST is a small array indexed by constants."""
    out, x, acc = buf(0, dtypes.int32, 4), buf(1, dtypes.int32, 4), reg(2, dtypes.int32, 4)
    lanes, back = UOp.vconst([0, 1, 2, 3]), UOp.vconst([3, 2, 1, 0])
    held = acc.index(lanes)
    put = held.store(x.index(back).load() + UOp.const(7, dtypes.int32))
    got = UOp(Ops.AFTER, (held, put)).load()
    lin = linear(out, out.index(back).store(got))
    src = DEVICE.render(lin, "vec")
    for text in ("int32_t acc0[4];", "int32_t val0 = data1[3];", "int32_t val3 = data1[0];", "acc0[0] = val0+7;",
                 "acc0[3] = val3+7;", "int32_t val4 = acc0[0];", "data0[0] = val7;"):
        assert text in src, (text, src)


@pytest.mark.parametrize("at,wide", [(0, True), (8, True), (2, False)])
def test_vector_store_of_consecutive_lanes_is_16_bytes(at: int, wide: bool) -> None:
    """A store of 4 computed int32 lanes (a STACK) to 4 consecutive elements starting 16-byte aligned is one
    16-byte store of the lanes gathered into an aligned array (lower.simt_smem's output stores); starting at
    element 2 it is 4 stores."""
    out, x = buf(0, dtypes.int32, 16), buf(1, dtypes.int32, 4)
    vals = [x.index(UOp.const(k)).load() + UOp.const(k, dtypes.int32) for k in range(4)]
    lin = linear(out, out.index(UOp.const(at) + UOp.vconst([0, 1, 2, 3])).store(UOp(Ops.STACK, tuple(vals))))
    src = DEVICE.render(lin, "vec")
    if wide:
        assert "[4] = {val0+0, val1+1, val2+2, val3+3};" in src and f"*(uint4*)&data0[{at}] = " in src, src
    else:
        assert "uint4" not in src and all(f"data0[{at}+{k}] = val{k}+{k};" in src for k in range(4)), src


def _mma_program(dt: object) -> UOp:
    """One warp's m16n8k16 WMMA with fragments loaded lane by lane: A from data1, B data2, C data3, D to data0."""
    lane = special("lidx0", 32)
    out, a, b, c = buf(0, dtypes.float32, 128), buf(1, dt, 256), buf(2, dt, 128), buf(3, dtypes.float32, 128)  # type: ignore[arg-type]
    frag = [UOp(Ops.STACK, tuple(x.index(lane * n + e).load() for e in range(n))) for x, n in ((a, 8), (b, 4), (c, 4))]
    mma = UOp(Ops.WMMA, tuple(frag), (16, 8, 16, dt, dtypes.float32))
    return linear(out, *(out.index(lane * 4 + e).store(UOp(Ops.INDEX, (mma, UOp.const(e)))) for e in range(4)))


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("dt,ptx", [(dtypes.float16, "f16"), (dtypes.bfloat16, "bf16")])
def test_wmma_is_inline_ptx_with_the_documented_packing(compiler: str, tmp_path: os.PathLike, dt: object,
                                                        ptx: str) -> None:
    """A's 8 elements are 4 .b32 registers {a0,a1} {a2,a3} {a4,a5} {a6,a7}, B's 4 are 2, the even element in the
    low half; C is D's 4 floats in place, and D's lane e is what INDEX(wmma, e) reads."""
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = [DEVICE.compile(_mma_program(dt), "mma", gpu_target(sm)) for sm in SMS]
    src = ks[0].src
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    assert f'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{ptx}.{ptx}.f32 {{%0, %1, %2, %3}}, ' \
           '{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"' in src
    pack = f"pack_{ptx}x2"
    regs = ", ".join(f'"r"({pack}(val{2 * i}, val{2 * i + 1}))' for i in range(6))
    assert f": {regs});" in src  # val0..7 are A's elements 0..7 (data1[8 lane + e]), val8..11 B's
    assert "float wmma0 = val12, wmma1 = val13, wmma2 = val14, wmma3 = val15;" in src
    assert ': "+f"(wmma0), "+f"(wmma1), "+f"(wmma2), "+f"(wmma3)' in src
    assert [f"data0[{i}] = wmma{e};" for e, i in enumerate(("alu1", "alu3", "alu4", "alu5"))] == \
        [ln.strip() for ln in src.splitlines() if ln.strip().startswith("data0[")]
    # the even element is the low half of the register
    lo_hi = {"f16": "(uint32_t)__half_as_ushort(lo) | ((uint32_t)__half_as_ushort(hi) << 16)",
             "bf16": "(__float_as_uint(lo) >> 16) | (__float_as_uint(hi) & 0xffff0000u)"}[ptx]
    assert lo_hi in src


def _vector_kernels() -> list[tuple[str, UOp]]:
    """The kernels whose GPU lowering makes vector values: a float32 matmul with the register tile (a REG
    accumulator indexed by a VCONST; 32: under lower.simt_smem's sizes), attention (staged, lower.simt_smem: 4-lane
    shared-memory reads), and half/bfloat16 matmuls on the tensor cores (WMMA)."""
    rng = np.random.default_rng(0)
    out: list[tuple[str, UOp]] = []
    for case, dtype in ((Case("matmul", "matmul", "matmul", (32,)), "float32"),
                        (Case("attention", "attention", "attention", (1, 2, 64, 64)), "float32"),
                        (Case("matmul", "matmul", "matmul", (64,)), "float16"),
                        (Case("matmul", "matmul", "matmul", (64,)), "bfloat16")):
        with gpu_graphs():
            xs = [Tensor(rng.standard_normal(s).astype(np.float32)).cast(dtype) for s in case.shapes()]
            items, _ = schedule([tensor_graph(case, xs).uop])
        out += [(f"{case.key}_{dtype}_{it.name}", it.ast) for it in items if it.kind == "kernel" and it.ast is not None]
    return out


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_register_tiles_attention_and_tensor_cores_compile(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """The GPU heuristics' kernels with vector values (the benchmark's ERRORs before the vector renderer)."""
    progs = lowered(_vector_kernels(), sm, "gpu")
    vector = [name for lin, name in progs if any(u.shape != () and u.op is Ops.VCONST and u.arg[0] == (0, 1, 2, 3)  # type: ignore[index]
                                               for u in lin.src)]
    assert any(n.startswith("matmul_float32") for n in vector) and any(n.startswith("attention") for n in vector)
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert len(ks) == len(progs) and all(k.cubin[:4] == b"\x7fELF" for k in ks)
    src = "".join(dict.fromkeys(k.src for k in ks))  # the batch's .cu files (one per group, devices.cuda)
    for t in ("f16", "bf16"):
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32" in src
    by = {k.name: k.src for k in ks}
    tile = next(by[n] for n in vector if n.startswith("matmul_float32"))
    assert "float acc" in tile and "[4];" in tile


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_tensor_core_warp_tiles_compile(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """A 4096 half matmul on the heuristics' staged tensor cores in the register-pipelined form (lower.tc_smem:
    128 x 128 block tiles of 8 warps, 4 x 4 mmas a warp, k 32 a step; the heuristics' cp.async form, dropped here,
    is tests/devices/test_cuda_async.py), and the awkward-size and bfloat16 forms: every operand chunk of the
    aligned ones one 128-bit load and one 128-bit shared store, 32 inline mma.sync a k step, two barriers."""
    from lower.gpu import gpu_opts
    from lower.optimize import Opt, OptOps

    def register_path(ast: UOp) -> list[Opt]:
        # the register pipeline of the heuristics' tiles, with 32-wide k steps (the heuristics take 64 only for
        # the cp.async pipeline)
        return [Opt(o.op, o.axis, (*o.arg[:5], min(o.arg[5], 32))) if o.op is OptOps.TC and isinstance(o.arg, tuple)
                else o for o in gpu_opts(ast, gpu_target(sm))]

    def kernel(nu: int, nk: int, nv: int, dt: str) -> tuple[str, UOp]:
        with gpu_graphs(sm):
            a = Tensor(np.zeros((nu, nk), np.float32)).cast(dt).contiguous()
            b = Tensor(np.zeros((nk, nv), np.float32)).cast(dt).contiguous()
            items, _ = schedule([(a @ b).uop])
        name, ast = [(it.name, it.ast) for it in items
                     if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
        return f"{name}_{dt}", ast

    progs = [(lower_kernel(ast, gpu_target(sm), opts=register_path(ast), name=name), name) for name, ast in
             (kernel(4096, 4096, 4096, "float16"), kernel(1000, 200, 520, "float16"), kernel(100, 37, 70, "float16"),
              kernel(512, 512, 512, "bfloat16"))]
    assert sum(u.op is Ops.WMMA for u in progs[0][0].src) == 32
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    big, odd, scalar, bf16 = ks

    def body(k: object) -> str:
        src = k.src[k.src.index(f" {k.symbol}("):]  # type: ignore[attr-defined]
        return src[:src.index("\n}\n")]

    assert big.launch_dims({}) == ((32, 32, 1), (32, 4, 2))
    for k, mmas in ((big, 32), (odd, 16), (scalar, 16)):
        b = body(k)
        assert b.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == mmas
        assert b.count("__syncthreads();") == 3 and b.count("__shared__ __align__(16) half smem") == 2
    # A (128 x 32) and B (32 x 128): 512 chunks of 8 halves each, 2 per thread: 4 loads and 4 stores of 16 bytes,
    # before the loop (the first k step) and in it (the next step's, loaded before the mmas, stored after them)
    assert body(big).count("*(const uint4*)&data") == 8 and body(big).count("*(uint4*)&smem") == 8
    assert body(big).count("? *(const uint4*)&data") == 4  # the loads ahead: none after the last step
    assert "? *(const uint4*)&data" in body(odd)  # gated chunks at the edges
    # A's rows of 37 halves are not 16-byte aligned: element copies; B's 70 neither
    assert "uint4" not in body(scalar)
    assert body(bf16).count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 16
    assert body(bf16).count("*(const uint4*)&data") == 8  # bfloat16 bits in 16-byte chunks, widened per lane
    # the results: columns 2t, 2t + 1 of the mma's C layout as one 4-byte store of two 16-bit elements (rows of an
    # even number of elements), 2 of each mma tile's 4; gated at the ragged edges
    assert body(big).count("*(uint32_t*)&data0[") == 32 and " data0[" not in body(big)  # no one-element store
    assert body(odd).count("if (") > body(big).count("if (") and body(odd).count("*(uint32_t*)&data0[") == 16
    assert body(scalar).count("*(uint32_t*)&data0[") == 16
    assert body(bf16).count(") | ((uint32_t)f32_to_bf16(") == 16


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_staged_simt_kernels_compile(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """The heuristics' float32 sums of products staged through shared memory (lower.simt_smem): matmul 4096
    (128 x 128 tiles of 16 x 16 threads, 8 x 8 each), attention's QK^T and PV, conv (8,64,56,56)->64, a ragged
    matmul and a float64 one: 16-byte global chunks and shared reads, fused multiply-adds, three barriers."""
    from lower.gpu import gpu_opts
    from lower.optimize import OptOps

    def zeros(*shape: int, dt: type = np.float32) -> Tensor:
        return Tensor(np.zeros(shape, dt), device="python").contiguous()

    def kernels(out: Tensor, key: str) -> list[tuple[str, UOp]]:
        items, _ = schedule([out.uop])
        return [(f"{key}_{it.name}", it.ast) for it in items
                if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)]

    q, k, v = zeros(8, 8, 512, 64), zeros(8, 8, 512, 64), zeros(8, 8, 512, 64)
    attn = kernels((q @ k.transpose(-1, -2) * 0.125).softmax(-1) @ v, "attention")
    asts = [*kernels(zeros(4096, 4096) @ zeros(4096, 4096), "matmul"), attn[0], attn[-1],
            *kernels(zeros(8, 64, 56, 56).conv2d(zeros(64, 64, 3, 3), padding=1), "conv"),
            *kernels(zeros(1000, 200) @ zeros(200, 520), "odd"),
            *kernels(zeros(256, 256, dt=np.float64) @ zeros(256, 256, dt=np.float64), "f64")]
    assert all(gpu_opts(ast, gpu_target(sm))[0].op is OptOps.SIMT for _, ast in asts)
    progs = [(lower_kernel(ast, gpu_target(sm), name=name), name) for name, ast in asts]
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    big, qk, pv, conv, odd, f64 = ks

    def body(k: object) -> str:
        src = k.src[k.src.index(f" {k.symbol}("):]  # type: ignore[attr-defined]
        return src[:src.index("\n}\n")]

    assert big.launch_dims({}) == ((32, 32, 1), (16, 16, 1)) and qk.launch_dims({}) == ((4, 4, 64), (16, 16, 1))
    assert pv.launch_dims({}) == ((8, 8, 8), (16, 16, 1)) and conv.launch_dims({}) == ((392, 1, 1), (16, 16, 1))
    for kern, fmas in ((big, 64 * 16), (qk, 64 * 16), (pv, 16 * 32), (conv, 16 * 32), (odd, 16 * 32)):
        b = body(kern)
        assert b.count("__fmaf_rn(") == fmas and b.count("__syncthreads();") == 3
        assert b.count("__shared__ __align__(16) float smem") == 2
        # each k: the thread's tm A and tn B values as 16-byte shared reads of 4 floats (16 x (8 + 8) / 4, or
        # 32 x (4 + 4) / 4)
        assert b.count("= *(const uint4*)&smem") == 64, kern.name
    # matmul: A (128 x 16) and B (16 x 128) are 256 chunks of 8 floats each, one a thread of either: two 16-byte
    # loads a chunk, before the loop and in it (gated off at the last step); B's chunks stored as they are
    assert body(big).count("*(const uint4*)&data") == 8 and body(big).count("? *(const uint4*)&data") == 4
    assert body(big).count("*(uint4*)&smem") == 4
    assert "*(const uint4*)&data" not in body(conv)  # conv's operands are gathers (padded, 3-wide k rows): by element
    assert body(f64).count("__fma_rn(") == 16 * 32 and "double smem" in body(f64)


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_tf32_tensor_cores_compile(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """float32 matmuls on a target with tf32 (ALLOW_TF32=1): staged (2048) and direct (32 x 16 x 24), every A
    and B element rounded by cvt.rna.tf32.f32 into the m16n8k8 mma's registers."""
    def kernel(nu: int, nk: int, nv: int) -> tuple[UOp, str]:
        a = Tensor(np.zeros((nu, nk), np.float32)).contiguous()
        b = Tensor(np.zeros((nk, nv), np.float32)).contiguous()
        items, _ = schedule([(a @ b).uop])
        name, ast = [(it.name, it.ast) for it in items
                     if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
        return lower_kernel(ast, gpu_target(sm, tf32=True), name=name), name

    progs = [kernel(2048, 2048, 2048), kernel(32, 24, 16)]
    assert [sum(u.op is Ops.WMMA for u in lin.src) for lin, _ in progs] == [4 * 4 * 4, 1]
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm, tf32=True))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    files = list(dict.fromkeys(k.src for k in ks))  # one .cu file per group of the batch (devices.cuda)
    src = "".join(files)
    assert src.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 64 + 1
    assert all('asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));' in f for f in files)
    # the helper in each file, then each mma its 4 A and 2 B registers (not volatile: the compiler may share them)
    assert src.count("to_tf32(") == len(files) + 6 * (64 + 1)
    # the 2048 one through the 3-stage cp.async pipeline: 2 chunks of A and 2 of B a thread, 8 floats a chunk as
    # two 16-byte copies, at 3 places (2 prologue stages, 1 in the loop)
    assert src.count("cp.async.cg.shared.global") == (2 + 2) * 2 * 3


def test_float_to_half_rounds_to_nearest_even_and_products_are_float32() -> None:
    """The noopt half matmul: operands converted with __float2half_rn, multiplied and summed in float32 (fmaf), the
    result rounded once with __float2half_rn; never a C cast from float to half, never a half product."""
    a, b = np.ones((64, 256), np.float32), np.ones((256, 64), np.float32)
    with gpu_graphs():
        items, _ = schedule([(Tensor(a).cast("float16") @ Tensor(b).cast("float16")).uop])
    ((name, ast),) = [(it.name, it.ast) for it in items if it.kind == "kernel" and it.ast is not None]
    (lin, _), = lowered([(name, ast)], "sm_90", "noopt")
    src = DEVICE.render(lin, name)
    assert "acc0[0] = __fmaf_rn((float)__float2half_rn(val0), (float)__float2half_rn(val1), val2);" in src
    assert "= __float2half_rn(val3);" in src and "(half)" not in src
    lin64 = linear(buf(0, dtypes.float16, 8), buf(0, dtypes.float16, 8).index(UOp.const(0)).store(
        buf(1, dtypes.float64, 8).index(UOp.const(0)).load().cast(dtypes.float16)))
    assert "data0[0] = __double2half(val0);" in DEVICE.render(lin64, "d2h")


def test_cpu_specials_are_refused_on_the_gpu() -> None:
    out = buf(0, dtypes.int32, 4)
    c = special("core_id", 4)
    lin = linear(out, c, out.index(c).store(c.cast(dtypes.int32)))
    with pytest.raises(CompileError, match=r"gidx0..2 \(blockIdx\) and lidx0..2"):
        DEVICE.render(lin, "k")


def test_atomic_add_of_a_type_cuda_lacks_is_a_compile_error() -> None:
    with pytest.raises(CompileError, match="no atomicAdd for int8"):
        DEVICE.render(block_sum(2, 32, dtypes.int8), "k")


def test_cpu_targets_are_refused_by_nvcc() -> None:
    from devices.base import cpu_target

    with pytest.raises(CompileError, match="cannot compile for the cpu target"):
        NVCC().flags(cpu_target("x86-64-v2"))


def test_names_clear_of_cuda_and_cxx_words() -> None:
    from devices.cuda_render import kernel_symbol

    assert kernel_symbol("class") == "k_class" and kernel_symbol("atomicAdd") == "k_atomicAdd"
    assert kernel_symbol("E_4_4") == "E_4_4" and kernel_symbol("2x") == "k_2x"
    v = UOp.variable("new", 1, 8)
    out = buf(0, dtypes.int32, 8)
    r = UOp.range(v, 0)
    lin = linear(out, r, st := out.index(r).store(v.cast(dtypes.int32)), UOp(Ops.END, (st, r)))
    src = DEVICE.render(lin, "k")
    assert "const long long new" not in src and "v_new_" in src


def test_no_gpu_is_a_device_error_not_a_crash() -> None:
    dev = get_device("cuda")
    ok, why = dev.available()
    if ok:
        assert dev.default_target().arch == "cuda"
        return
    assert "cuda: " in why
    with pytest.raises(DeviceError, match="cuda: "):
        dev.alloc(4, dtypes.float32)
    with pytest.raises(DeviceError, match="cuda: "):
        dev.default_target()


def test_the_gpu_tests_programs_on_the_emulator() -> None:
    """The hand-built programs tests/devices/test_cuda.py runs on the GPU, run by the python device's grid emulator
    against the same expectations (so a GPU failure points at the cuda device, not at the program)."""
    py = get_device("python")
    x = np.arange(6 * 64).astype(np.float32)
    out, total = np.zeros(6, np.float32), np.zeros(1, np.float32)
    py.compile(block_sum(6, 64), "block_sum")({0: out, 1: x, 2: total})
    np.testing.assert_array_equal(out, x.reshape(6, 64).sum(1))
    assert total[0] == x.sum()
    o = np.zeros(256, np.float32)
    py.compile(big_shared(), "big_shared")({0: o})
    np.testing.assert_array_equal(o, big_shared_expected())
    a, b, o = np.arange(1000, dtype=np.float32), np.full(1000, 3, np.float32), np.zeros(1000, np.float32)
    py.compile(grid_elementwise(1000, 128), "grid_ew")({0: o, 1: a, 2: b})
    np.testing.assert_array_equal(o, a * b + a)


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_scatter_add_compiles_to_atomic_add(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """A scatter-add on a GPU target: every (position, column) pair a thread adding with atomicAdd (lower.atomics),
    no loop over the positions; float16 keeps the serial loop (no atomicAdd)."""
    from rewrite.stores import scatter_add

    idx = Tensor(np.array([3, 0, 3, 3, 9, -1], np.int32))
    progs = []
    for dt in ("float32", "int32", "float16"):
        src = Tensor(np.ones((6, 40), np.float32)).cast(dt)
        zero = UOp.const(0, src.dtype).reshape((1, 1)).expand((10, 40))
        items, _ = schedule([scatter_add(zero, idx.uop, src.uop)])
        progs += [(lower_kernel(it.ast, gpu_target(sm), name=f"{dt}_{it.name}"), f"{dt}_{it.name}") for it in items
                  if it.kind == "kernel" and it.ast is not None]
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    atomic = [name for lin, name in progs if any(u.op is Ops.ATOMICADD for u in lin.src)]
    assert sorted(n.split("_")[0] for n in atomic) == ["float32", "int32"]
    assert all(not any(u.op is Ops.RANGE for u in lin.src) for lin, name in progs if name in atomic)
    half = [lin for lin, name in progs if name.startswith("float16") and any(u.op is Ops.LOAD for u in lin.src)]
    assert any(any(u.op is Ops.RANGE for u in lin.src) for lin in half)  # the serial loop over positions
    src = "\n".join(k.src for k in ks)
    assert "atomicAdd(&data0[" in src and "(-0.0f));" in src
