"""BEAM for GPU targets (lower.search_gpu): on a GPU, candidates around the heuristics are timed with CUDA events
and the kept opts compute the same result no slower (tests marked `gpu`, skipped only without a GPU); without
one, a BEAM search for a cuda target says so (DeviceError), and the candidate generator's opt lists lower or are
refused with a typed error."""

from __future__ import annotations

import numpy as np
import pytest

from devices.base import Target, gpu_target
from devices.cuda import DEVICE
from lower.gpu import gpu_opts
from lower.optimize import Opt, OptOps
from lower.schedule import schedule
from lower.search import beam_search
from lower.search_gpu import neighbours
from lower.stages import lower_kernel
from rewrite.env import Context
from rewrite.errors import CompilerError, DeviceError
from rewrite.uop import UOp
from tensor import Tensor
from tests.devices.builder import gpu_graphs

_OK, _WHY = DEVICE.available()


def _kernel(kind: str, n: int = 512, dt: str = "float16") -> tuple[UOp, tuple[UOp, ...]]:
    with gpu_graphs():
        a = Tensor(np.zeros((n, n), np.float32)).cast(dt).contiguous()
        b = Tensor(np.zeros((n, n), np.float32)).cast(dt).contiguous()
        out = a @ b if kind == "matmul" else (a.float().softmax(-1) if kind == "softmax" else a + b)
        items, _ = schedule([out.uop])
    it = [i for i in items if i.kind == "kernel" and i.ast is not None][-1]
    return it.ast, tuple(it.bufs)  # type: ignore[return-value]


def test_beam_for_a_cuda_target_without_a_gpu_says_so() -> None:
    if _OK:
        pytest.skip("a GPU is present: the gpu tests below run the search")
    ast, bufs = _kernel("add", 64)
    with Context(CACHE=0), pytest.raises(DeviceError, match="BEAM for sm_90: candidates are timed on a CUDA GPU"):
        beam_search(ast, bufs, gpu_target("sm_90"), 2)


def _most_lower(ast: UOp, target: Target, cands: list[list[Opt]]) -> None:
    """Each candidate lowers or raises a CompilerError (which the search skips); at least half of them lower."""
    lowered = 0
    for c in cands:
        try:
            lower_kernel(ast, target, opts=c)
            lowered += 1
        except CompilerError:
            pass
    assert lowered >= len(cands) // 2, (lowered, len(cands))


@pytest.mark.parametrize("kind", ["matmul", "softmax", "add", "matmul_float32"])
def test_gpu_candidates_lower_or_are_refused(kind: str) -> None:
    """Every neighbour of the heuristics' opts lowers for sm_90 or raises a CompilerError (which the search skips);
    a tensor-core kernel's include the other cp.async depths and the register pipeline, a staged SIMT kernel's
    other tiles and k steps and the unstaged register tile, softmax's block other thread counts for its rows, the
    others an UPCAST or a different block size."""
    ast, _ = _kernel(kind.split("_")[0], 256, "float32" if kind.endswith("float32") else "float16")
    target = gpu_target("sm_90")
    base = gpu_opts(ast, target)
    cands = neighbours(ast, base)
    assert cands and all(c != base for c in cands)
    _most_lower(ast, target, cands)
    if kind == "matmul":
        args = [c[0].arg for c in cands if c and c[0].op is OptOps.TC]
        assert any(len(a) == 7 and a[6] == 2 for a in args) and any(len(a) == 6 for a in args)  # type: ignore[arg-type]
    if kind == "softmax":  # 256-wide rows: 64 threads a row; the block's splits resized together
        sizes = {tuple(o.arg[0] for o in c if o.op is OptOps.SPLIT) for c in cands}  # type: ignore[index]
        assert {(k, k, k) for k in (32, 128, 256)} <= sizes, sizes
    if kind == "matmul_float32":
        assert base[0].op is OptOps.SIMT
        args = [c[0].arg for c in cands if c and c[0].op is OptOps.SIMT]
        assert len(args) == 8 and (4, 4, 16, 16, 16) in args and (8, 4, 16, 16, 32) in args, args
        assert any(all(o.op is OptOps.SPLIT for o in c) for c in cands)  # lower.gpu's register tile


def test_wgmma_candidates_lower_or_are_refused() -> None:
    """With WGMMA=1 the neighbours of a 4096 half matmul's wgmma opt change one knob of its 12-element arg
    (swizzle, overlap and tma among them) and include the mma.sync heuristics' opts; each lowers or is refused."""
    with gpu_graphs():
        a = Tensor(np.zeros((4096, 4096), np.float32)).cast("float16").contiguous()
        items, _ = schedule([(a @ a).uop])
    ast = [i for i in items if i.kind == "kernel" and i.ast is not None][-1].ast
    assert ast is not None
    target = gpu_target("sm_90")
    with Context(WGMMA=True):
        base = gpu_opts(ast, target)
        cands = neighbours(ast, base, target)
    assert base[0].arg[1:] == ("wgmma", 256, 1, 1, 2, 1, 64, 4, 1, 1)  # type: ignore[index]
    args = [c[0].arg for c in cands]
    assert (*base[0].arg[:9], 0, 1, 0) in args and (*base[0].arg[:10], 0, 0) in args  # type: ignore[index]
    assert (*base[0].arg, 1) in args  # type: ignore[index]  # the TMA copies
    assert any(a[1] != "wgmma" for a in args)  # type: ignore[index]  # the mma.sync form
    _most_lower(ast, target, cands)


@pytest.mark.gpu
@pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")
@pytest.mark.parametrize("kind", ["matmul", "add"])
def test_beam_on_the_gpu_is_no_slower_than_the_heuristics(kind: str) -> None:
    from lower.search_gpu import _device_buffers, beam_search_gpu, time_on_gpu

    ast, bufs = _kernel(kind, 512)
    target = DEVICE.default_target()
    opts = beam_search_gpu(ast, bufs, target, width=2, max_rounds=1, name=f"test_{kind}")
    dev = _device_buffers(bufs, DEVICE)
    try:
        th, out = time_on_gpu(ast, dev, target, gpu_opts(ast, target), "heuristics", reps=20)
        tb, _ = time_on_gpu(ast, dev, target, opts, "beam", expect=out, reps=20)  # WrongResult if it differs
    finally:
        for b in dev.values():
            DEVICE.free(b)
    # the search kept it as no slower; the margin is timing noise (under xdist other tests share the GPU)
    assert tb <= th * 1.5, (opts, tb, th)


@pytest.mark.gpu
@pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")
def test_beam_knob_realizes_on_the_gpu() -> None:
    """BEAM=2 is the only change: a cuda realize searches each kernel and the result is numpy's."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((256, 256)).astype(np.float32), rng.standard_normal((256, 256)).astype(np.float32)
    with Context(BEAM=2, CACHE=0):
        got = (Tensor(x, device="cuda") * Tensor(y, device="cuda") + 1).numpy()
    np.testing.assert_allclose(got, x * y + 1, rtol=1e-6)
