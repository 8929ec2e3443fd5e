"""Warpgroup MMA matmuls (lower.tc_wgmma, the WGMMA knob) rendered to CUDA and compiled by nvcc and NVRTC for
sm_90a (no GPU needed): one wgmma.mma_async per (tile, k slice) on the accumulators in place, descriptors made
from shared addresses with the layouts' strides, fence / commit_group / wait_group around them, the async-proxy
fence after the cp.async wait, bfloat16 tiles as 16-bit bits. What they compute is checked by the emulator
(tests/lower/test_gpu_wgmma.py); on a GPU, by the gpu-marked test here (benchmarks/gpu_check.sh runs it)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import numpy as np
import pytest

from devices.base import gpu_target
from devices.cuda import DEVICE
from devices.cuda_compile import NVCC, arch_for
from lower.schedule import schedule
from lower.stages import lower_kernel
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import Tensor
from tests.devices.builder import gpu_graphs, has_reduce
from tests.devices.test_cuda_async import _body
from tests.devices.test_cuda_compile import COMPILERS, needs_nvcc


def _kernel(nu: int, nk: int, nv: int, dt: str) -> tuple[UOp, str]:
    with gpu_graphs():
        a = Tensor(np.zeros((nu, nk), np.float32)).cast(dt).contiguous()
        b = Tensor(np.zeros((nk, nv), np.float32)).cast(dt).contiguous()
        items, _ = schedule([(a @ b).uop])
    name, ast = [(it.name, it.ast) for it in items
                 if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
    with Context(WGMMA=True):
        return lower_kernel(ast, gpu_target("sm_90"), name=f"{name}_{dt}"), f"{name}_{dt}"


@pytest.mark.parametrize("compiler", COMPILERS)
def test_wgmma_matmuls_compile_for_sm90a(compiler: str, tmp_path: os.PathLike) -> None:
    progs = [_kernel(4096, 4096, 4096, "float16"), _kernel(1000, 520, 200, "float16"),
             _kernel(512, 512, 512, "bfloat16")]
    for lin, _ in progs:
        assert any(u.op is Ops.WMMA and u.arg[0] == "wgmma" for u in lin.src)  # type: ignore[index]
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target("sm_90"))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    big, odd, bf16 = ks
    b = _body(big)
    # 128 x 256 block tiles of 2 warpgroups (256 threads), k 64 a step: per step 4 slices x 1 m64n256k16 wgmma
    assert b.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    assert b.count("wgmma.fence.sync.aligned;") == 1 and b.count("wgmma.commit_group.sync.aligned;") == 1
    # one group left in flight each step, none after the loop; the copies run 2 steps ahead of 4 stages
    assert b.count("wgmma.wait_group.sync.aligned 1;") == 1 and b.count("wgmma.wait_group.sync.aligned 0;") == 1
    assert b.count("fence.proxy.async.shared::cta;") == 1 and b.count("cp.async.wait_group 1;") == 1
    # 128-byte swizzle: A's SBO 8 rows of 128 bytes (LBO unused, 1), B's LBO 64-column atoms of 64 k rows
    assert b.count("wgmma_desc(&smem0[") == 4 and b.count("16u, 1024u, 1u)") == 4 and \
        b.count("8192u, 1024u, 1u)") == 4
    assert ", p, 1, 1, 0, 1;" in b  # A K-major, B MN-major (transposed)
    assert "__launch_bounds__(256)" in big.src and "mma.sync" not in b and "ldmatrix" not in b
    assert "extern __shared__ __align__(1024) unsigned char smem_dynamic[];" in big.src  # the atoms' alignment
    # checked where it runs: a base off an atom would swizzle every tile wrong, so it traps instead
    assert "if ((unsigned)__cvta_generic_to_shared(smem_dynamic) & 1023u) __trap();" in big.src
    assert big.dynamic_shared == 4 * (128 * 64 + 64 * 256) * 2  # 4 stages of both tiles, no padding
    assert "? 16 : 0)" in _body(odd)  # the ragged edges' chunks zero-filled
    bb = _body(bf16)
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in bb and "uint16_t" in bb


@needs_nvcc
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_ptxas_keeps_the_wgmma_pipeline(dt: str, tmp_path: os.PathLike) -> None:
    """ptxas (nvcc -Xptxas -v, the device's own flags) compiles the heuristics' 4096 kernel without serializing its
    wgmmas (C7514/C7515 "Potential Performance Loss": a wait inserted after each, as when a non-wgmma instruction
    reads an accumulator before the group retires; the half/bfloat16 output conversions did until they read
    x + -0.0) and without spilling."""
    check_ptxas(*_kernel(4096, 4096, 4096, dt), tmp_path)


def check_ptxas(lin: UOp, name: str, tmp_path: os.PathLike) -> None:
    """nvcc -Xptxas -v with the device's sm_90a flags compiles the kernel without a C7514/C7515 (wgmmas
    serialized) and without spilling."""
    target = gpu_target("sm_90")
    src = DEVICE.render(lin, name, target)
    cu = os.path.join(tmp_path, "k.cu")
    with open(cu, "w") as f:
        f.write(src)
    flags = NVCC().flags(target, src)
    assert "-arch=sm_90a" in flags
    out = subprocess.run(["nvcc", *flags, "-Xptxas", "-v", "-o", os.path.join(tmp_path, "k.cubin"), cu],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Potential Performance Loss" not in out.stderr and "C751" not in out.stderr, out.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in out.stderr, out.stderr


def test_only_wgmma_sources_take_sm90a() -> None:
    t = gpu_target("sm_90")
    assert arch_for(t, 'asm volatile("wgmma.fence.sync.aligned;")') == "sm_90a"
    assert arch_for(t, "mma.sync.aligned") == "sm_90" and arch_for(gpu_target("sm_80"), "wgmma.") == "sm_80"


_OK, _WHY = DEVICE.available()


@pytest.mark.gpu
@pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("nu,nk,nv", [(200, 136, 264), (1000, 520, 200), (256, 512, 512)])
def test_wgmma_on_the_gpu(dt: str, nu: int, nk: int, nv: int) -> None:
    """WGMMA=1 kernels on an sm_90 GPU against float64 numpy of the rounded inputs (as the mma.sync ones)."""
    rng = np.random.default_rng(5)
    product_on_sm90(rng.standard_normal((nu, nk)), rng.standard_normal((nk, nv)), dt, {"WGMMA": True},
                    lambda u: u.op is Ops.WMMA and u.arg[0] == "wgmma")  # type: ignore[index]


def product_on_sm90(a: np.ndarray, b: np.ndarray, dt: str, knobs: dict, uses: Callable[[UOp], bool]) -> None:
    """a @ b in `dt` on the sm_90 GPU under `knobs`: its product kernel has an instruction `uses` accepts, and the
    result is float64 numpy's of the rounded inputs (tests.tensor.test_half_accumulation's check)."""
    from tests.tensor.test_half_accumulation import _check, _got, _rounded

    if DEVICE.default_target().isa != "sm_90":
        pytest.skip(f"wgmma and the TMA need an sm_90 GPU, not {DEVICE.default_target().isa}")
    with Context(**knobs):
        ta, tb = (Tensor(v.astype(np.float32), device="cuda").cast(dt).contiguous() for v in (a, b))
        out = ta @ tb
        items, _ = schedule([out.uop])
        ast = [it.ast for it in items if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
        lin = lower_kernel(ast, DEVICE.default_target())
        assert any(uses(u) for u in lin.src)
        _check(_got(out, dt), _rounded(a, dt) @ _rounded(b, dt), dt, 1e-3)


@pytest.mark.gpu
@pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")
@pytest.mark.parametrize("swizzle,overlap", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_wgmma_forms_on_the_gpu(swizzle: int, overlap: int) -> None:
    """Each pipeline form of the heuristics' 128 x 256 tile on its own (explicit TC opts, so a failure names the
    form: the 128-byte swizzle, the group left in flight, both or neither) against float64 numpy of the inputs."""
    from lower.optimize import Opt, OptOps
    from rewrite.dtype import dtypes

    if DEVICE.default_target().isa != "sm_90":
        pytest.skip(f"wgmma needs an sm_90 GPU, not {DEVICE.default_target().isa}")
    nu, nk, nv = 256, 512, 512
    a = Tensor(np.zeros((nu, nk), np.float32)).cast("float16").contiguous()
    b = Tensor(np.zeros((nk, nv), np.float32)).cast("float16").contiguous()
    items, _ = schedule([(a @ b).uop])
    ast = [it.ast for it in items if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
    opt = Opt(OptOps.TC, None, ("16x8x16 half->float", "wgmma", 256, 1, 1, 2, 1, 64, 4, swizzle, overlap))
    k = DEVICE.compile(lower_kernel(ast, DEVICE.default_target(), opts=[opt]), f"wgmma_form_{swizzle}{overlap}")
    rng = np.random.default_rng(7)
    av, bv = rng.standard_normal((nu, nk)).astype(np.float16), rng.standard_normal((nk, nv)).astype(np.float16)
    bufs = [DEVICE.alloc(nu * nv, dtypes.float16), DEVICE.alloc(nu * nk, dtypes.float16),
            DEVICE.alloc(nk * nv, dtypes.float16)]
    bufs[1][:], bufs[2][:] = av.reshape(-1), bv.reshape(-1)
    k(dict(enumerate(bufs)))
    got = np.asarray(bufs[0]).astype(np.float64).reshape(nu, nv)
    want = av.astype(np.float64) @ bv.astype(np.float64)
    assert np.abs(got - want).max() <= 2e-3 * np.abs(want).max() + 1e-2, np.abs(got - want).max()
