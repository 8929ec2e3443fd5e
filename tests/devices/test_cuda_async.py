"""The heuristics' cp.async tensor-core matmuls (lower.tc_async) rendered to CUDA and compiled by nvcc and NVRTC for
sm_80 and sm_90 (no GPU needed): 16-byte cp.async copies with zero fill at the edges, one commit per stage, one
wait_group a k step, ldmatrix x4 / x4.trans fragments fed to mma.sync as they are, and bfloat16 tiles kept as
16-bit bits in shared memory. What they compute is checked by the emulator (tests/lower/test_gpu_async.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from devices.base import gpu_target
from devices.cuda import DEVICE
from lower.schedule import schedule
from lower.stages import lower_kernel
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import Tensor
from tests.devices.builder import gpu_graphs, has_reduce
from tests.devices.test_cuda_compile import COMPILERS, SMS


def _kernel(nu: int, nk: int, nv: int, dt: str, sm: str) -> tuple[UOp, str]:
    with gpu_graphs(sm):
        a = Tensor(np.zeros((nu, nk), np.float32)).cast(dt).contiguous()
        b = Tensor(np.zeros((nk, nv), np.float32)).cast(dt).contiguous()
        items, _ = schedule([(a @ b).uop])
    name, ast = [(it.name, it.ast) for it in items
                     if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
    return lower_kernel(ast, gpu_target(sm), name=f"{name}_{dt}"), f"{name}_{dt}"


def _body(k: object) -> str:
    src: str = k.src  # type: ignore[attr-defined]
    src = src[src.index(f" {k.symbol}("):]  # type: ignore[attr-defined]
    return src[:src.index("\n}\n")]


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_async_tensor_core_matmuls_compile(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    progs = [_kernel(4096, 4096, 4096, "float16", sm), _kernel(1000, 520, 200, "float16", sm),
             _kernel(512, 512, 512, "bfloat16", sm)]
    for lin, _ in progs:
        assert any(u.op is Ops.STORE and u.arg == "cp.async" for u in lin.src)
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target(sm))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    big, odd, bf16 = ks
    b = _body(big)
    # 128 x 128 x 64 tiles (a long reduction), 256 threads: A and B 1024 chunks of 8 halves each, 4 + 4 copies a
    # thread, at the 2 prologue stages and once in the loop; 3 commits; one wait (3 stages: 1 group may stay in flight)
    assert b.count("cp.async.cg.shared.global [%0], [%1], 16") == 8 * 3
    assert b.count("cp.async.cg.shared.global [%0], [%1], 16;") == 8 * 2  # the prologue's: no edge, no zero fill
    assert b.count("cp.async.commit_group;") == 3 and b.count("cp.async.wait_group 1;") == 1
    assert b.count("__syncthreads();") == 1
    # per k step: 4 slices x (4 A fragments by ldmatrix.x4 + 4 B by 2 x4.trans), 64 mmas on their registers
    assert b.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 16
    assert b.count("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") == 8 and "x2.trans" not in b
    assert b.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 64 and "pack_f16x2(" not in b
    assert big.dynamic_shared == 3 * (128 * 72 + 64 * 136) * 2  # 3 stages of both tiles: over 48 KiB, dynamic
    assert "for (long long" not in b and "const int gidx0" in b  # 32-bit index arithmetic
    o = _body(odd)
    assert "16, %2;" in o and "? 16 : 0)" in o  # the edges' chunks zero-filled (src-size 0)
    bb = _body(bf16)
    assert "uint16_t* smem0 = (uint16_t*)(smem_dynamic" in bb or "__shared__ __align__(16) uint16_t smem0" in bb
    assert bb.count("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") == 16 and "pack_bf16x2(" not in bb


_OK, _WHY = DEVICE.available()


@pytest.mark.gpu
@pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("nu,nk,nv", [(200, 136, 264), (1000, 520, 200), (64, 16, 64)])
def test_async_tensor_cores_on_the_gpu(dt: str, nu: int, nk: int, nv: int) -> None:
    """The heuristics' cp.async kernels on the GPU (realized 16-bit operands: the async form) against float64 numpy
    of the rounded inputs: within one rounding of the result plus the float32 accumulation's error."""
    from tests.tensor.test_half_accumulation import _check, _got, _rounded

    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((nu, nk)), rng.standard_normal((nk, nv))
    ta, tb = (Tensor(v.astype(np.float32), device="cuda").cast(dt).contiguous() for v in (a, b))
    out = ta @ tb
    items, _ = schedule([out.uop])
    ast = [it.ast for it in items
           if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
    lin = lower_kernel(ast, DEVICE.default_target())
    assert any(u.op is Ops.STORE and u.arg == "cp.async" for u in lin.src)  # the async form is what runs
    _check(_got(out, dt), _rounded(a, dt) @ _rounded(b, dt), dt, 1e-3)
