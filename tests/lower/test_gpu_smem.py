"""Tensor-core matmuls staged through shared memory (lower.tc_smem), run by the python device's grid emulator
against numpy for sizes the block tile does not divide, and the structure the GPU needs: cooperative 8-lane
(128-bit) global loads where aligned, LOCAL tiles between two BARRIERs, fragments read from LOCAL memory."""

from __future__ import annotations

import numpy as np
import pytest

from devices.linear import base_of
from lower import schedule
from lower.gpu import gpu_opts
from lower.optimize import Opt, OptOps
from lower.tc_smem import apply_tc_staged, pad_for
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError
from tensor import Tensor
from tests.devices.builder import gpu_graphs
from tests.lower.test_gpu import GPU, run

rng = np.random.default_rng(1)
HALF = "16x8x16 half->float"


def _mm(nu: int, nk: int, nv: int, dt: str = "float16", batch: int = 0, realized: bool = True
        ) -> tuple[Tensor, np.ndarray]:
    """A (batch x) nu x nk @ nk x nv product of `dt` inputs summed in float32, and numpy's float64 product of the
    rounded inputs. `realized`: the inputs are buffers of `dt` (else the cast to `dt` is fused into the kernel)."""
    pre = (batch,) if batch else ()
    av = rng.standard_normal((*pre, nu, nk)).astype(np.float32)
    bv = rng.standard_normal((*pre, nk, nv)).astype(np.float32)
    a, b = Tensor(av, device="python").cast(dt), Tensor(bv, device="python").cast(dt)
    if realized:
        a, b = a.contiguous(), b.contiguous()
    out = (a.reshape((*pre, nu, nk, 1)) * b.reshape((*pre, 1, nk, nv))).cast(dtypes.float32).sum(len(pre) + 1)
    ra, rb = (run(x.cast(dtypes.float32), GPU)[0].astype(np.float64) for x in (a, b))
    return out, ra @ rb


def _globals(lin: UOp) -> list[UOp]:
    return [u for u in lin.src if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and
            u.src[0].src[0].op is Ops.BUFFER and u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL]  # type: ignore[union-attr]


# (nu, nk, nv, config (tm, tn, wu, wv, bk), batch, dtype): divisible and awkward sizes, both operand dtypes
CASES = [
    (64, 32, 64, (2, 4, 2, 2, 32), 0, "float16"),  # one block per 64 x 64, k in one step
    (100, 50, 70, (2, 4, 2, 2, 32), 0, "float16"),  # every edge gated, k padded 50 -> 64
    (37, 21, 45, (1, 2, 2, 2, 32), 0, "bfloat16"),  # nothing divides, not even by 8: scalar copies
    (72, 40, 80, (1, 2, 2, 2, 16), 2, "float16"),  # a batch, k 16 a step, rows not a multiple of the tile
    (130, 40, 136, (4, 4, 2, 4, 32), 0, "float16"),  # the 128 x 128 tile of 8 warps, one row and 8 columns over
]


@pytest.mark.parametrize("nu,nk,nv,cfg,batch,dt", CASES)
def test_staged_tensor_cores_match_numpy(nu: int, nk: int, nv: int, cfg: tuple, batch: int, dt: str) -> None:
    out, ref = _mm(nu, nk, nv, dt, batch)
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF if dt == "float16" else "16x8x16 bfloat16->float", *cfg))])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # exact products, float32 sums
    lin = lins[-1]
    tm, tn, wu, wv, bk = cfg
    wmma = [u for u in lin.src if u.op is Ops.WMMA]
    assert len(wmma) == tm * tn * bk // 16
    # every fragment element is a load from a LOCAL tile, read after the BARRIER that ends the copy
    for w in wmma:
        for frag in w.src[:2]:
            for e in frag.src:
                assert e.op is Ops.LOAD and e.src[0].src[0].op is Ops.AFTER and \
                    e.src[0].src[0].src[1].op is Ops.BARRIER, e
                assert e.src[0].src[0].src[0].arg.addrspace is AddrSpace.LOCAL  # type: ignore[union-attr]
    locals_ = [u for u in lin.src if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL]  # type: ignore[union-attr]
    pad = pad_for(getattr(dtypes, dt))
    assert sorted(u.shape[0] for u in locals_) == sorted([16 * tm * wu * (bk + pad), bk * (8 * tn * wv + pad)])
    # one k step: copy, BARRIER, mmas, BARRIER; more: the first copy and a BARRIER before the loop, then per step
    # the next tiles' loads first, the mmas, a BARRIER, the next tiles' stores, a BARRIER
    steps = -(-nk // bk)
    assert sum(u.op is Ops.BARRIER for u in lin.src) == (2 if steps == 1 else 3)
    if steps > 1:
        first_mma = lin.src.index(wmma[0])
        loop = next(i for i, u in enumerate(lin.src) if u.op is Ops.RANGE and i < first_mma and
                    lin.src[i].arg[1] is AxisType.REDUCE)  # type: ignore[index]
        ahead = [i for i, u in enumerate(lin.src) if i > loop and u in _globals(lin)]
        assert ahead and max(ahead) < first_mma  # the next step's global loads are issued before the mmas
    specials = {u.arg: u.src[0].arg[0] for u in lin.src if u.op is Ops.SPECIAL}  # type: ignore[index]
    assert specials["lidx0"] == 32 and specials.get("lidx1", 1) * specials.get("lidx2", 1) == wu * wv
    # no global load of an operand is in the mma's k slices: each element is read from memory once per block
    assert all(not (set(g.toposort()) & set(wmma)) for g in _globals(lin))


def test_aligned_operands_copy_in_128_bit_chunks() -> None:
    """Rows of a multiple of 8 halves: each chunk of the copy is one 8-lane load (16 bytes) and one 8-lane store
    to the LOCAL tile. A of 21 columns (rows not 16-byte aligned) is copied element by element, while B (21 rows
    of 64) still goes in chunks."""
    for nk in (48, 21):
        out, ref = _mm(64, nk, 64)
        got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 32))])
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        shapes = {slot: sorted(ld.shape for ld in _globals(lins[-1]) if ld.src[0].src[0].arg.slot == slot)  # type: ignore[union-attr]
                  for slot in (1, 2)}
        # A: 64 x 32 halves, B: 32 x 64, 128 threads: 2 chunks each of either, 8 scalar copies per chunk otherwise;
        # 48: two k steps (the first tiles before the loop, the second inside), 21: one
        assert shapes == ({1: [(8,)] * 4, 2: [(8,)] * 4} if nk == 48 else {1: [()] * 16, 2: [(8,)] * 2}), shapes
        stores = [u for u in lins[-1].src if u.op is Ops.STORE and base_of(u.src[0].src[0]).op is Ops.BUFFER and
                  base_of(u.src[0].src[0]).arg.addrspace is AddrSpace.LOCAL]  # type: ignore[union-attr]
        assert sum(st.src[1].shape == (8,) for st in stores) == (8 if nk == 48 else 2)


def test_a_fused_cast_still_copies_in_chunks() -> None:
    """float32 inputs cast to half inside the kernel: the chunk is an 8-lane float32 load, cast lane by lane."""
    out, ref = _mm(64, 32, 64, realized=False)
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 32))])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert [ld.shape for ld in _globals(lins[-1])] == [(8,)] * 4  # one k step: no loads ahead
    assert all(ld.dtype is dtypes.float32 for ld in _globals(lins[-1]))


def test_heuristics_stage_large_matmuls() -> None:
    """128 x 128 tiles of 8 warps where they fill the GPU's multiprocessors (4096 on sm_90's 132), else 64 x 64 of
    4 warps (any size from 64 on, edges gated); under 64 x 64 the direct form of lower.wmma."""
    def opts(nu: int, nk: int, nv: int) -> list[Opt]:
        with gpu_graphs():
            a = Tensor(np.zeros((nu, nk), np.float32)).cast(dtypes.float16).contiguous()
            b = Tensor(np.zeros((nk, nv), np.float32)).cast(dtypes.float16).contiguous()
            items, _ = schedule([(a @ b).uop])
        return gpu_opts([it for it in items if it.kind == "kernel"][-1].ast, GPU)

    # aligned operands go through the cp.async pipeline (lower.tc_async, 3 stages); k = 10 is not a multiple of
    # the 8-element chunks: the register-pipelined form (6 elements); a long reduction in 128 x 128 tiles steps k
    # 64 at a time
    assert opts(4096, 4096, 4096) == [Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 64, 3))]
    assert opts(1024, 1024, 1024) == [Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 32, 3))]
    assert opts(100, 10, 70) == [Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 16))]
    assert opts(64, 48, 32)[0] == Opt(OptOps.TC, None, (HALF, 1, 1))


def test_staged_shapes_that_cannot_be_built_say_why() -> None:
    out, _ = _mm(64, 32, 64)
    items, _ = schedule([out.uop])
    ast = [it for it in items if it.kind == "kernel"][-1].ast
    with pytest.raises(KernelOptError, match="bk must be a multiple of 16"):
        apply_tc_staged(ast, HALF, 2, 4, 2, 2, 24)
    with pytest.raises(KernelOptError, match="at most 1024"):
        apply_tc_staged(ast, HALF, 1, 1, 8, 8, 32)
    with pytest.raises(KernelOptError, match="does not fit products of float16"):
        apply_tc_staged(ast, "16x8x16 bfloat16->float", 2, 4, 2, 2, 32)


# ---------------------------------------------------------------- tf32


def _tf32_np(x: np.ndarray) -> np.ndarray:
    """numpy's tf32 rounding: to nearest on the 13 dropped bits, ties away from zero (sign-magnitude bits)."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    special = (bits & 0x7F800000) == 0x7F800000
    out = ((bits + 0x1000) & 0xFFFFE000).astype(np.uint32).view(np.float32)
    return np.where(special, x.astype(np.float32), out)


def test_tf32_rounding_is_to_nearest_ties_away() -> None:
    from devices.python import tf32_round

    ulp = 2.0 ** -10
    assert tf32_round(1.0 + ulp / 2) == 1.0 + ulp  # a tie goes away from zero
    assert tf32_round(-(1.0 + ulp / 2)) == -(1.0 + ulp)
    assert tf32_round(1.0 + ulp / 2 - 2.0 ** -23) == 1.0  # just under the tie: down
    assert tf32_round(float(np.finfo(np.float32).max)) == float("inf")  # the carry leaves the finite range
    assert np.isnan(tf32_round(float("nan"))) and tf32_round(float("-inf")) == float("-inf")
    xs = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 10.0 ** rng.integers(-40, 38, 2000),
                         np.float32([0.0, -0.0, 1e-45, -3e-39])]).astype(np.float32)
    got = np.array([tf32_round(float(x)) for x in xs], np.float32)
    np.testing.assert_array_equal(got, _tf32_np(xs))
    assert all(int(b) & 0x1FFF == 0 for b in got.view(np.uint32))  # 10 mantissa bits left


def test_tf32_tensor_cores_are_opt_in() -> None:
    """float32 matmuls run on tf32 tensor cores only where the target was made with tf32 (gpu_target(tf32=True),
    or ALLOW_TF32=1 when the device makes its target): float32 stays float32 by default."""
    from devices.base import gpu_target
    from rewrite.env import Context

    assert not any("tf32" in s for s in gpu_target().tensor_cores)
    with Context(ALLOW_TF32=True):
        assert "16x8x8 tf32->float" in gpu_target("sm_80").tensor_cores
    a = Tensor(np.zeros((256, 256), np.float32))
    items, _ = schedule([(a.contiguous() @ a.contiguous()).uop])
    ast = [it for it in items if it.kind == "kernel"][-1].ast
    assert all(o.op is not OptOps.TC for o in gpu_opts(ast, GPU))
    assert gpu_opts(ast, gpu_target(tf32=True).with_(device="python")) == \
        [Opt(OptOps.TC, None, ("16x8x8 tf32->float", 2, 4, 2, 2, 32, 3))]  # float32 chunks by cp.async too


@pytest.mark.parametrize("nu,nk,nv,staged", [(72, 40, 80, True), (32, 24, 16, False), (48, 13, 21, True)])
def test_tf32_tensor_cores_match_numpy_of_rounded_inputs(nu: int, nk: int, nv: int, staged: bool) -> None:
    """m16n8k8 tf32 mmas, staged through shared memory (any sizes) or direct: exactly numpy's product of the
    tf32-rounded inputs summed in float32 (to the last bits of the sum's order), not the float32 product."""
    from devices.base import gpu_target

    tf32 = gpu_target(tf32=True).with_(device="python")
    av, bv = rng.standard_normal((nu, nk)).astype(np.float32), rng.standard_normal((nk, nv)).astype(np.float32)
    a, b = Tensor(av, device="python").contiguous(), Tensor(bv, device="python").contiguous()
    opt = Opt(OptOps.TC, None, ("16x8x8 tf32->float", 1, 2, 2, 2, 16) if staged else "16x8x8 tf32->float")
    got, lins = run(a @ b, tf32, [opt])
    wmma = [u for u in lins[-1].src if u.op is Ops.WMMA]
    assert wmma and all(w.arg[:4] == (16, 8, 8, dtypes.float32) for w in wmma)  # type: ignore[index]
    assert len(wmma) == (1 * 2 * 2 if staged else 1)
    ref = _tf32_np(av).astype(np.float64) @ _tf32_np(bv).astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert np.abs(got - av.astype(np.float64) @ bv).max() > 1e-4  # tf32, not float32


# ---------------------------------------------------------------- paired result stores

PAIRED_FORMS = {"direct": (HALF, 2, 2), "staged": (HALF, 2, 4, 2, 2, 16), "async": (HALF, 2, 4, 2, 2, 32, 3),
                "wgmma": (HALF, "wgmma", 64, 1, 1, 1, 1, 32, 3)}


@pytest.mark.parametrize("form", list(PAIRED_FORMS))
@pytest.mark.parametrize("epilogue,nv,paired", [("bias_relu_half", 64, True), ("transposed", 64, False),
                                                ("plain", 72, True), ("plain", 66, True)])
def test_result_pairs_are_one_store_where_the_output_allows(form: str, epilogue: str, nv: int, paired: bool) -> None:
    """The mma C layout's columns 2t, 2t + 1 go out as one 2-lane STORE (lower.tc_smem.store_results' pairs,
    devices.cuda_memory.packed_store: one 4- or 8-byte store on the GPU) where the output moves by 1 along its
    columns from an even element: through an epilogue (a bias along the columns, relu, a cast to half), at ragged
    column edges (66 and 72 columns: the gates of a pair agree, both columns even); a transposed output (columns
    64 elements apart) keeps one store a column. Numpy's answer either way."""
    from devices.cuda_memory import packed_store

    if form in ("async", "wgmma") and nv % 8:
        pytest.skip("cp.async copies whole 8-column chunks (the ragged edges' gates are those of the other forms)")
    out, ref = _mm(64, 32, nv)
    if epilogue == "bias_relu_half":
        bv = rng.standard_normal(nv).astype(np.float32)
        out = (out + Tensor(bv, device="python")).relu().cast(dtypes.float16)
        ref = np.maximum(ref + bv, 0).astype(np.float16).astype(np.float64)
    elif epilogue == "transposed":
        out, ref = out.permute(1, 0).contiguous(), ref.T
    res, lins = run(out, GPU, [Opt(OptOps.TC, None, PAIRED_FORMS[form])])
    np.testing.assert_allclose(res.astype(np.float64), ref, rtol=1e-3 if epilogue == "bias_relu_half" else 1e-5,
                               atol=1e-3 if epilogue == "bias_relu_half" else 1e-5)
    stores = [u for u in lins[-1].src if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and
              u.src[0].src[0].op is Ops.BUFFER and u.src[0].src[0].arg.addrspace is AddrSpace.GLOBAL]  # type: ignore[union-attr]
    assert stores and all((packed_store(u) is not None) == paired for u in stores)
