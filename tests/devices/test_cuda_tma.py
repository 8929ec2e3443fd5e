"""The TMA form of the warpgroup MMA matmuls (WGMMA=1 TMA=1: lower.tc_tma, devices.tma) rendered to CUDA and
compiled by nvcc and NVRTC for sm_90a (no GPU needed): tensor maps as `const __grid_constant__` parameters after
the buffers, the leader's mbarrier.init / arrive.expect_tx / cp.async.bulk.tensor, every thread's
try_wait.parity loop, no cp.async left; ptxas keeps the wgmma pipeline (no C751x) without spilling. What the
kernels compute is checked by the emulator (tests/lower/test_gpu_tma.py); on a GPU, by the gpu-marked tests here
(benchmarks/gpu_check.sh runs them)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

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
from tests.devices.builder import has_reduce
from tests.devices.test_cuda_async import _body
from tests.devices.test_cuda_compile import COMPILERS, needs_nvcc
from tests.devices.test_cuda_wgmma import check_ptxas


def _ast(nu: int, nk: int, nv: int, dt: str, batch: int = 0, device: str = "python") -> UOp:
    """The product's kernel as a GPU schedules it (operands read in place: python-device tensors, which the cpu
    device's column-panel packing does not touch)."""
    pre = (batch,) if batch else ()
    a = Tensor(np.zeros((*pre, nu, nk), np.float32), device=device).cast(dt).contiguous()
    b = Tensor(np.zeros((*pre, nk, nv), np.float32), device=device).cast(dt).contiguous()
    items, _ = schedule([(a @ b).uop])
    ast = [it.ast for it in items if it.kind == "kernel" and it.ast is not None and has_reduce(it.ast)][-1]
    assert ast is not None
    return ast


def _kernel(nu: int, nk: int, nv: int, dt: str, batch: int = 0) -> tuple[UOp, str]:
    name = f"tma_{nu}_{nk}_{nv}_{dt}" + (f"_b{batch}" if batch else "")
    with Context(WGMMA=True, TMA=True):
        return lower_kernel(_ast(nu, nk, nv, dt, batch), gpu_target("sm_90"), name=name), name


@pytest.mark.parametrize("compiler", COMPILERS)
def test_tma_matmuls_compile_for_sm90a(compiler: str, tmp_path: os.PathLike) -> None:
    progs = [_kernel(4096, 4096, 4096, "float16"), _kernel(1000, 520, 200, "float16"),
             _kernel(512, 512, 512, "bfloat16"), _kernel(256, 512, 256, "float16", batch=3)]
    for lin, _ in progs:
        assert any(u.op is Ops.INS and u.arg[0] == "tma.load" for u in lin.src)  # type: ignore[index]
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        ks = DEVICE.compile_batch(progs, gpu_target("sm_90"))
    assert all(k.cubin[:4] == b"\x7fELF" for k in ks)
    big, odd, bf16, batched = ks
    b = _body(big)
    assert "const __grid_constant__ uopc_tmap tmap0, const __grid_constant__ uopc_tmap tmap1)" in big.src
    assert big.src.count("struct __align__(64) uopc_tmap { uint64_t v[16]; };") == 1  # once a file
    assert "cp.async.cg" not in b and "cp.async.wait_group" not in b  # every tile by the TMA
    # 4 barriers initialized once; the prologue fills 2 stages (one wgmma group in flight); per step one expect_tx
    # and 1 box of A (64 k x 128 rows) + 4 boxes of B (64 columns x 64 k), then the wait loop
    assert b.count("mbarrier.init.shared::cta.b64") == 4 and b.count("fence.mbarrier_init.release.cluster;") == 1
    assert b.count("mbarrier.arrive.expect_tx.shared::cta.b64") == 3 and b.count('"r"(49152)') == 3
    assert b.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 15
    assert b.count("mbarrier.try_wait.parity.shared::cta.b64") == 1
    assert b.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16") == 4
    assert big.tmaps[0].dims == (4096, 4096) and big.tmaps[0].box == (64, 128)
    assert big.tmaps[1].dims == (4096, 4096) and big.tmaps[1].box == (64, 64)
    assert "cp.async.bulk.tensor" in _body(odd) and len(odd.tmaps) == 2
    assert "m64n256k16.f32.bf16.bf16" in _body(bf16) and bf16.tmaps[0].dtype.name == "bfloat16"
    assert "cp.async.bulk.tensor.3d" in _body(batched) and [len(m.dims) for m in batched.tmaps] == [3, 3]


@needs_nvcc
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_ptxas_keeps_the_tma_pipeline(dt: str, tmp_path: os.PathLike) -> None:
    """ptxas compiles the 4096 TMA kernel without serializing its wgmmas (C7514/C7515) and without spilling."""
    check_ptxas(*_kernel(4096, 4096, 4096, dt), tmp_path)


_OK, _WHY = DEVICE.available()


@pytest.mark.gpu
@pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")
@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("nu,nk,nv,batch", [(256, 512, 512, 0), (1000, 520, 200, 0), (200, 136, 264, 0),
                                            (128, 256, 256, 3)])
def test_tma_on_the_gpu(dt: str, nu: int, nk: int, nv: int, batch: int) -> None:
    """WGMMA=1 TMA=1 kernels on an sm_90 GPU (tensor maps encoded at launch) against float64 numpy of the rounded
    inputs: square, ragged (zero-filled boxes past the matrix) and batched (rank-3 maps). Each runs in a child
    process with a 60 s limit (under the gpu_check step's): a TMA copy that never completes its mbarrier phase
    hangs the kernel (a timeout in the wait loop would make ptxas serialize the wgmmas, C7517), and a hang must
    fail this case, not the run."""
    if DEVICE.default_target().isa != "sm_90":
        pytest.skip(f"the TMA needs an sm_90 GPU, not {DEVICE.default_target().isa}")
    code = ("import numpy as np\n"
            "from rewrite.ops import Ops\n"
            "from tests.devices.test_cuda_wgmma import product_on_sm90\n"
            f"rng = np.random.default_rng(11)\npre = {(batch,) if batch else ()}\n"
            f"product_on_sm90(rng.standard_normal((*pre, {nu}, {nk})), rng.standard_normal((*pre, {nk}, {nv})), "
            f"{dt!r}, {{'WGMMA': True, 'TMA': True}}, lambda u: u.op is Ops.INS and u.arg[0] == 'tma.load')\n")
    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    try:
        out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                             timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the TMA matmul {nu}x{nk}x{nv} {dt} (batch {batch}) did not finish in 60 s: a hung mbarrier "
                    f"wait (a copy that never landed or a wrong expect_tx byte count)")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
