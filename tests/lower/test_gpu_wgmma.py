"""Warpgroup tensor cores (lower.tc_wgmma: wgmma.mma_async from shared-memory descriptors, fed by cp.async), run
by the python device's emulator (devices.python_wgmma), which builds each descriptor from the operand's byte
address, reads the operands back through the PTX ISA's no-swizzle canonical layouts, and lands results only at the
wait that retires them: numpy's products for several shapes (ragged edges, bfloat16, several warpgroups and
wgmmas a warpgroup), the descriptor fields and layouts against the ISA's own examples, the accumulator layout,
and the hazards (no fence, no wait, swapped strides) failing."""

from __future__ import annotations

import numpy as np
import pytest

from devices.python_gpu import wgmma_decode, wgmma_descriptor, wgmma_element, wgmma_m64nnk16, wgmma_place
from lower import schedule
from lower.gpu import gpu_opts
from lower.optimize import Opt, OptOps
from lower.stages import lower_kernel
from rewrite import Ops, UOp
from rewrite.env import Context
from rewrite.errors import DeviceError, KernelOptError
from tensor import Tensor
from tests.devices.builder import gpu_graphs
from tests.lower.test_gpu import GPU, PY, run
from tests.lower.test_gpu_smem import HALF, _mm

BF16 = "16x8x16 bfloat16->float"

# (nu, nk, nv, (n, tm, tn, wgu, wgv, bk, stages), dtype)
CASES = [
    (64, 32, 64, (64, 1, 1, 1, 1, 16, 2), "float16"),  # two k steps, double buffered
    (100, 80, 72, (32, 1, 2, 1, 1, 16, 3), "float16"),  # two wgmmas along n; rows, columns and k ragged
    (136, 48, 200, (64, 1, 1, 2, 1, 32, 3), "bfloat16"),  # two warpgroups; a k step of two slices
    (70, 96, 40, (8, 2, 1, 1, 1, 16, 4), "float16"),  # n 8, two wgmmas along m; 6 k steps through 4 stages
    (130, 128, 248, (128, 1, 2, 2, 1, 64, 4), "float16"),  # the heuristics' big config (ragged here): m64n128k16
]


def _wgmmas(lin: UOp) -> list[UOp]:
    return [u for u in lin.src if u.op is Ops.WMMA and isinstance(u.arg, tuple) and u.arg[0] == "wgmma"]


@pytest.mark.parametrize("nu,nk,nv,cfg,dt", CASES)
def test_wgmma_pipeline_matches_numpy(nu: int, nk: int, nv: int, cfg: tuple, dt: str) -> None:
    out, ref = _mm(nu, nk, nv, dt)
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF if dt == "float16" else BF16, "wgmma", *cfg))])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # exact products, float32 sums
    lin = lins[-1]
    n, tm, tn, _, _, bk, stages = cfg
    assert len(_wgmmas(lin)) == tm * tn * bk // 16  # per k step: a wgmma per (i, j) per slice of 16
    assert all(w.arg[1] == n and w.arg[3] == (128, 16 * bk, 0) and w.arg[4] == (128, 16 * bk, 1)  # type: ignore[index]
               for w in _wgmmas(lin))
    seq = [u.arg for u in lin.src if u.op is Ops.BARRIER]
    # the cp.async prologue, then each step: wait (+ the async-proxy fence), the next copies' commit, the wgmma
    # fence, the wgmmas, their commit and a wait for all of them
    assert seq == ["cp.async.commit"] * (stages - 1) + [("cp.async.wait", stages - 2, "proxy"), "cp.async.commit",
                                                         "wgmma.fence", "wgmma.commit", ("wgmma.wait", 0)]
    pos = {u: i for i, u in enumerate(lin.src)}
    fence = next(u for u in lin.src if u.arg == "wgmma.fence")
    commit = next(u for u in lin.src if u.arg == "wgmma.commit")
    assert all(pos[fence] < pos[w] < pos[commit] for w in _wgmmas(lin))


def test_descriptor_fields_are_the_isa_s() -> None:
    """The 64-bit descriptor: start address, LBO and SBO as (x & 0x3FFFF) >> 4 in bits 13-0, 29-16, 45-32, the
    swizzle mode in 63-62 (the PTX ISA's "Matrix Descriptor Format"); its MN-major bf16 example encodes LBO 256
    bytes as 16 and SBO 128 as 8."""
    d = wgmma_descriptor(0x1230, 128 * 2, 64 * 2)
    assert d & 0x3FFF == 0x123 and (d >> 16) & 0x3FFF == 16 and (d >> 32) & 0x3FFF == 8 and d >> 62 == 0
    assert wgmma_decode(d) == (0x1230, 256, 128, 0)
    assert wgmma_decode(wgmma_descriptor(0x40000 + 0x50, 16, 4096, 1)) == (0x50, 16, 4096, 1)  # 18 address bits
    with pytest.raises(DeviceError, match="swizzle mode 2"):  # 64-byte swizzle: not emulated
        wgmma_element(wgmma_descriptor(0, 16, 1024, 2), 0, 0, False, 2)
    with pytest.raises(DeviceError, match="base offset"):  # a swizzled start inside an atom's second row
        wgmma_element(wgmma_descriptor(1024 + 128, 16, 1024, 1), 0, 0, False, 2)


def test_operand_layouts_are_the_isa_examples() -> None:
    """wgmma_element reproduces the ISA's worked no-swizzle examples element for element: K-major tf32
    ((8,2),(4,4)):((4,32),(1,64)) with LBO 64 and SBO 32 elements, and MN-major bf16 ((8,1,2),(8,2)):((1,8,64),
    (8,128)) with LBO 128 and SBO 64."""
    d = wgmma_descriptor(0, 64 * 4, 32 * 4)
    for m in range(16):
        for k in range(16):
            want = (m % 8) * 4 + (m // 8) * 32 + (k % 4) + (k // 4) * 64
            assert wgmma_element(d, m, k, False, 4) == 4 * want
    d = wgmma_descriptor(0, 128 * 2, 64 * 2)
    for mn in range(16):
        for k in range(16):
            want = (mn % 8) + (mn // 8) * 64 + (k % 8) * 8 + (k // 8) * 128
            assert wgmma_element(d, mn, k, True, 2) == 2 * want


def test_accumulator_layout() -> None:
    """The m64nN f32 accumulators as CUTLASS's SM90 64xN C layout states them (column-major 64 x N offsets:
    thread strides (128, 1, 16) over (4, 8, 4), value strides (64, 8, 512) over (2, 2, N / 8)): wgmma_place and
    wgmma_m64nnk16's results both follow it."""
    n = 24
    rng = np.random.default_rng(3)
    a, b = rng.integers(-4, 5, (64, 16)).astype(float), rng.integers(-4, 5, (16, n)).astype(float)
    c = [tuple(float(t * 100 + i) for i in range(n // 2)) for t in range(128)]
    def read(w: int, r: int, k: int) -> float:
        return float(a[r, k] if w == 0 else b[r, k])

    got = wgmma_m64nnk16(read, n, c, lambda x: x)
    ref = a @ b
    for t in range(128):
        for i in range(n // 2):
            off = (t % 4) * 128 + (t // 4 % 8) + (t // 32) * 16 + (i % 2) * 64 + (i // 2 % 2) * 8 + (i // 4) * 512
            assert wgmma_place(t, i) == (off % 64, off // 64)
            assert got[t][i] == ref[off % 64, off // 64] + c[t][i]


def _lowered(nu: int, nk: int, nv: int, cfg: tuple) -> UOp:
    out, _ = _mm(nu, nk, nv, "float16")
    items, _ = schedule([out.uop])
    return lower_kernel([i for i in items if i.kind == "kernel"][-1].ast, GPU,  # type: ignore[arg-type]
                        opts=[Opt(OptOps.TC, None, (HALF, "wgmma", *cfg))])


def _arrays() -> dict[int, np.ndarray]:
    return {0: np.zeros(64 * 64, np.float32), 1: np.ones(64 * 64, np.float16), 2: np.ones(64 * 64, np.float16)}


def test_hazards_fail_in_the_emulator() -> None:
    """The same kernel without its wgmma.fence, with a wait that leaves the group in flight, or with A's strides
    swapped does not compute the product: the emulator reports the missing fence and the result used before its
    wait (the race check, devices.python_mem, first: the group in flight reads a stage being copied into), and the
    swapped descriptor reads other elements."""
    lin = _lowered(64, 64, 64, (64, 1, 1, 1, 1, 16, 2))
    arrays = _arrays()
    PY.compile(lin, "good")(arrays)
    assert (arrays[0] == 64).all()
    fence = next(u for u in lin.src if u.arg == "wgmma.fence")
    nofence = lin.substitute({fence: UOp(Ops.BARRIER, fence.src, "wgmma.commit")})
    with pytest.raises(DeviceError, match=r"without a wgmma\.fence"):
        PY.compile(nofence, "nofence")(_arrays())
    wait = next(u for u in lin.src if u.arg == ("wgmma.wait", 0))
    late = lin.substitute({wait: UOp(Ops.BARRIER, wait.src, ("wgmma.wait", 1))})
    with Context(RACECHECK=0), pytest.raises(DeviceError, match=r"read before its wgmma\.wait_group"):
        PY.compile(late, "late")(_arrays())
    # the race check sees it first: the group still in flight reads a stage the next copies are landing in
    with pytest.raises(DeviceError, match=r"data race.*read by a warp instruction.*cp\.async copy into it"):
        PY.compile(late, "late")(_arrays())
    w = _wgmmas(lin)[0]
    swapped = (*w.arg[:3], (w.arg[3][1], w.arg[3][0], 0), w.arg[4])  # type: ignore[index]
    bad = lin.substitute({w: UOp(Ops.WMMA, w.src, swapped)})
    av = np.random.default_rng(1).standard_normal(64 * 64).astype(np.float16)
    good_out, bad_out = _arrays(), _arrays()
    good_out[1], bad_out[1] = av, av.copy()
    PY.compile(lin, "good")(good_out)
    try:
        PY.compile(bad, "bad")(bad_out)
    except DeviceError:
        return  # reading outside the tile is caught too
    assert not np.allclose(good_out[0], bad_out[0])


def _ast(nu: int, nk: int, nv: int, realized: bool = True) -> UOp:
    with gpu_graphs():
        a = Tensor(np.zeros((nu, nk), np.float32)).cast("float16")
        b = Tensor(np.zeros((nk, nv), np.float32)).cast("float16")
        if realized:
            a, b = a.contiguous(), b.contiguous()
        items, _ = schedule([(a @ b).uop])
    return [i for i in items if i.kind == "kernel"][-1].ast  # type: ignore[return-value]


def test_opt_in_knob_and_fallbacks() -> None:
    """The heuristics pick wgmma only with WGMMA=1 on an sm_90 target for operands cp.async copies; otherwise the
    mma.sync forms stay. Asking for it elsewhere says why."""
    from devices.base import gpu_target

    big = _ast(4096, 4096, 4096)
    default = gpu_opts(big, GPU)
    assert all(o.arg[1] != "wgmma" for o in default)  # type: ignore[index]
    with Context(WGMMA=True):
        # 128-byte swizzled tiles (64-wide k steps), one wgmma group in flight (4 stages)
        assert gpu_opts(big, GPU) == [Opt(OptOps.TC, None, (HALF, "wgmma", 256, 1, 1, 2, 1, 64, 4, 1, 1))]
        assert gpu_opts(_ast(64, 512, 128), GPU) == [Opt(OptOps.TC, None,
                                                         (HALF, "wgmma", 128, 1, 1, 1, 1, 64, 4, 1, 1))]
        assert gpu_opts(_ast(64, 32, 128), GPU) == [Opt(OptOps.TC, None,  # a 32-wide k step: no swizzle
                                                        (HALF, "wgmma", 128, 1, 1, 1, 1, 32, 4, 0, 1))]
        sm80 = gpu_target("sm_80").with_(device="python")
        assert all(o.arg[1] != "wgmma" for o in gpu_opts(big, sm80))  # type: ignore[index]
        assert all(o.arg[1] != "wgmma" for o in gpu_opts(_ast(128, 64, 128, realized=False), GPU))  # type: ignore[index]
    with pytest.raises(KernelOptError, match="sm_90"):
        lower_kernel(big, gpu_target("sm_80"), opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 2, 2, 1, 64, 4))])
    with pytest.raises(KernelOptError, match=r"multiple of 8 in 8\.\.256"):
        lower_kernel(big, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 264, 1, 1, 2, 1, 64, 4))])
    with pytest.raises(KernelOptError, match="swizzle"):
        lower_kernel(big, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 2, 2, 1, 32, 4, 1, 0))])
    with pytest.raises(KernelOptError, match="overlap"):
        lower_kernel(big, GPU, opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 2, 2, 1, 64, 2, 0, 1))])
    with pytest.raises(KernelOptError, match="not plain loads"):
        lower_kernel(_ast(128, 64, 128, realized=False), GPU,
                     opts=[Opt(OptOps.TC, None, (HALF, "wgmma", 64, 1, 1, 1, 1, 32, 2))])
