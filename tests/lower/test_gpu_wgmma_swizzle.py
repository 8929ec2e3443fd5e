"""lower.tc_wgmma's two pipeline options, run by the python device's emulator: the 128-byte swizzle (tiles in
Swizzle<3,4,3> atoms of 8 rows x 128 bytes, copies placing each 16-byte chunk at its XORed slot, descriptors in
swizzle mode 1) and the overlap (one wgmma group left in flight by wait_group 1 each k step, the cp.async copies
one stage behind so that they never overwrite a stage an unretired group reads, wait_group 0 after the loop).
Checked: numpy's products, the ISA's canonical swizzled layouts, the barrier sequence, and the hazards (the
descriptor read unswizzled, the final wait dropped) failing."""

from __future__ import annotations

import numpy as np
import pytest

from devices.python_gpu import wgmma_descriptor, wgmma_element
from lower.optimize import Opt, OptOps
from rewrite import Ops, UOp
from rewrite.errors import DeviceError
from tests.lower.test_gpu import GPU, PY, run
from tests.lower.test_gpu_smem import HALF, _mm
from tests.lower.test_gpu_wgmma import BF16, _lowered, _wgmmas

# (nu, nk, nv, (n, tm, tn, wgu, wgv, bk, stages, swizzle, overlap), dtype)
CASES = [
    (64, 192, 64, (64, 1, 1, 1, 1, 64, 3, 1, 1), "float16"),  # both: 3 k steps through 3 stages, 1 copied ahead
    (100, 136, 136, (128, 1, 1, 2, 1, 64, 3, 1, 1), "bfloat16"),  # two warpgroups on m; ragged; n spans two atoms
    (64, 64, 256, (64, 1, 1, 1, 2, 64, 3, 1, 1), "float16"),  # two warpgroups on n: B's atoms from rv
    (70, 136, 72, (64, 1, 2, 1, 1, 64, 2, 1, 0), "float16"),  # swizzle alone; two wgmmas along n; k ragged
    (64, 256, 64, (64, 1, 1, 1, 1, 128, 2, 1, 0), "float16"),  # k steps of two 64-wide atoms
    (64, 96, 40, (8, 2, 1, 1, 1, 16, 3, 0, 1), "float16"),  # overlap alone on the plain core-matrix layout
    (64, 64, 264, (256, 1, 1, 1, 1, 64, 2, 1, 0), "float16"),  # m64n256k16: four atoms of B; columns ragged
]


@pytest.mark.parametrize("nu,nk,nv,cfg,dt", CASES)
def test_swizzled_and_overlapped_pipelines_match_numpy(nu: int, nk: int, nv: int, cfg: tuple, dt: str) -> None:
    out, ref = _mm(nu, nk, nv, dt)
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF if dt == "float16" else BF16, "wgmma", *cfg))])
    tol = 1e-5 if nk <= 128 else 1e-4  # exact products, float32 sums (more rounding over 256)
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    lin = lins[-1]
    _, tm, tn, _, _, bk, stages, swizzle, overlap = cfg
    ws = _wgmmas(lin)
    assert len(ws) == tm * tn * bk // 16
    lays = {w.arg[3:] for w in ws}  # type: ignore[index]
    assert lays == ({((16, 1024, 0, 1), (128 * bk, 1024, 1, 1))} if swizzle else  # SBO 8 rows of 128 bytes
                    {((128, 16 * bk, 0), (128, 16 * bk, 1))})
    lead = stages - 1 - overlap
    seq = [u.arg for u in lin.src if u.op is Ops.BARRIER]
    assert seq == ["cp.async.commit"] * lead + [("cp.async.wait", lead - 1, "proxy"), "cp.async.commit",
                                                 "wgmma.fence", "wgmma.commit", ("wgmma.wait", overlap)] + \
        [("wgmma.wait", 0)] * overlap
    if overlap:  # the loop closes between the in-loop wait and the final one
        pos = {u: i for i, u in enumerate(lin.src)}
        w1, w0 = (next(u for u in lin.src if u.arg == ("wgmma.wait", k)) for k in (1, 0))
        assert any(u.op is Ops.END and pos[w1] < pos[u] < pos[w0] for u in lin.src)


def _swizzled(at: int) -> int:
    """Swizzle<3,4,3> on a byte address: bits 9-7 XORed into bits 6-4."""
    return at ^ ((at & 0x380) >> 3)


def test_swizzled_layouts_are_the_isa_s() -> None:
    """wgmma_element under swizzle mode 1 is the ISA's canonical 128-byte layouts composed with Swizzle<3,4,3>,
    element for element (16-bit, T = 8): K-major ((8,m),(T,2k)):((8T,SBO),(1,T)) and MN-major ((T,8,m),(8,k)):
    ((1,T,LBO),(8T,SBO)), at a start advanced into the atom's first row by whole 16-element k slices."""
    for start in (0, 2048, 2048 + 32, 2048 + 96):
        d = wgmma_descriptor(start, 16, 1024, 1)
        for m in range(64):
            for k in range(16):
                want = (m % 8) * 64 + (m // 8) * 512 + k  # elements; SBO 1024 bytes
                assert wgmma_element(d, m, k, False, 2) == _swizzled(start + 2 * want)
    d = wgmma_descriptor(4096, 8192, 1024, 1)
    for j in range(128):
        for k in range(16):
            want = (j % 64) + (j // 64) * 4096 + (k % 8) * 64 + (k // 8) * 512  # LBO 8192, SBO 1024 bytes
            assert wgmma_element(d, j, k, True, 2) == _swizzled(4096 + 2 * want)
    # every 16-byte chunk of an atom lands once: the swizzle permutes chunks within each 128-byte row
    d = wgmma_descriptor(0, 16, 1024, 1)
    chunks = {wgmma_element(d, m, 8 * c, False, 2) // 16 for m in range(8) for c in range(2)}
    assert len(chunks) == 16 and all(x // 8 == m for m in range(8) for x in chunks if x // 8 == m)


def test_hazards_of_the_swizzled_overlapped_pipeline() -> None:
    """The same kernel reading its swizzled tiles through no-swizzle descriptors, or storing before the final
    wait_group 0, fails: other elements or shared memory no copy wrote are read, and a result still in flight
    reaches global memory."""
    lin = _lowered(64, 128, 64, (64, 1, 1, 1, 1, 64, 3, 1, 1))
    rng = np.random.default_rng(2)
    av, bv = rng.standard_normal(64 * 128).astype(np.float16), rng.standard_normal(128 * 64).astype(np.float16)

    def arrays() -> dict[int, np.ndarray]:
        return {0: np.zeros(64 * 64, np.float32), 1: av.copy(), 2: bv.copy()}

    good = arrays()
    PY.compile(lin, "good")(good)
    ref = av.astype(np.float64).reshape(64, 128) @ bv.astype(np.float64).reshape(128, 64)
    np.testing.assert_allclose(good[0].reshape(64, 64), ref, rtol=1e-4, atol=1e-4)
    w = _wgmmas(lin)[0]  # the first k slice read through no-swizzle descriptors
    plain = UOp(Ops.WMMA, w.src, (*w.arg[:3], (*w.arg[3][:3], 0), (*w.arg[4][:3], 0)))  # type: ignore[index]
    with pytest.raises(DeviceError, match="before any STORE wrote it"):  # B's LBO read as k-group strides
        PY.compile(lin.substitute({w: plain}), "plain")(arrays())
    a_plain = UOp(Ops.WMMA, w.src, (*w.arg[:3], (*w.arg[3][:3], 0), w.arg[4]))  # type: ignore[index]
    bad = arrays()
    PY.compile(lin.substitute({w: a_plain}), "a_plain")(bad)  # A's rows read unswizzled: other elements
    assert not np.allclose(good[0], bad[0])
    last = next(u for u in lin.src if u.arg == ("wgmma.wait", 0))
    early = lin.substitute({last: UOp(Ops.BARRIER, last.src, "wgmma.fence")})
    with pytest.raises(DeviceError, match=r"read before its wgmma\.wait_group"):
        PY.compile(early, "early")(arrays())


def test_batched_swizzled_overlapped_matmul() -> None:
    """A batch axis stays a grid axis around the swizzled, overlapped pipeline: each batch's product is numpy's."""
    out, ref = _mm(64, 136, 128, "float16", batch=2)
    got, _ = run(out, GPU, [Opt(OptOps.TC, None, (HALF, "wgmma", 128, 1, 1, 1, 1, 64, 3, 1, 1))])
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
