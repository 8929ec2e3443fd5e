"""Tensor cores fed by the cp.async pipeline (lower.tc_async), run by the python device's grid emulator, which
lands each cp.async group only at the wait that retires it and gathers ldmatrix's rows across the warp's lanes:
numpy's products for sizes the tiles do not divide, every stage count, half, bfloat16 and tf32; a wait that lets
one group too many stay in flight fails; ldmatrix's lane layout is the mma's fragment layout; the fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

from devices.python_gpu import ldmatrix
from lower import schedule
from lower.gpu import gpu_opts
from lower.optimize import Opt, OptOps
from lower.stages import lower_kernel
from lower.wmma import LAYOUTS
from rewrite import Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import DeviceError, KernelOptError
from tensor import Tensor
from tests.devices.builder import gpu_graphs
from tests.lower.test_gpu import GPU, PY, run
from tests.lower.test_gpu_smem import HALF, _mm, _tf32_np

rng = np.random.default_rng(7)
BF16 = "16x8x16 bfloat16->float"
TF32 = "16x8x8 tf32->float"

# (nu, nk, nv, (tm, tn, wu, wv, bk), stages, batch, dtype)
CASES = [
    (64, 64, 64, (2, 4, 2, 2, 16), 3, 0, "float16"),  # 4 k steps through 3 stages
    (100, 80, 72, (2, 4, 2, 2, 16), 2, 0, "float16"),  # double buffering; rows and columns gated at the edges
    (70, 96, 40, (1, 1, 2, 2, 16), 4, 0, "float16"),  # 6 k steps, 4 stages: the stage index wraps
    (72, 16, 40, (1, 2, 2, 2, 16), 4, 0, "bfloat16"),  # one k step, 4 stages: two of the prologue groups empty
    (40, 48, 136, (1, 8, 2, 1, 32), 3, 0, "float16"),  # tn 8 (BEAM's 64-wide warp tile), bk 32, a ragged block
    (64, 32, 48, (1, 3, 2, 2, 16), 2, 0, "bfloat16"),  # tn 3: B by one x4.trans and one x2.trans a slice
]


def _counts(lin: UOp) -> dict[str, int]:
    us = lin.src
    return {"copies": sum(u.op is Ops.STORE and u.arg == "cp.async" for u in us),
            "commits": sum(u.op is Ops.BARRIER and u.arg == "cp.async.commit" for u in us),
            "waits": sum(u.op is Ops.BARRIER and isinstance(u.arg, tuple) for u in us),
            "barriers": sum(u.op is Ops.BARRIER and u.arg is None for u in us),
            "ldmatrix": sum(u.op is Ops.LOAD and isinstance(u.arg, tuple) and u.arg[0] == "ldmatrix" for u in us)}


@pytest.mark.parametrize("nu,nk,nv,cfg,stages,batch,dt", CASES)
def test_async_pipeline_matches_numpy(nu: int, nk: int, nv: int, cfg: tuple, stages: int, batch: int,
                                      dt: str) -> None:
    out, ref = _mm(nu, nk, nv, dt, batch)
    shape = HALF if dt == "float16" else BF16
    got, lins = run(out, GPU, [Opt(OptOps.TC, None, (shape, *cfg, stages))])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)  # exact products, float32 sums
    lin = lins[-1]
    tm, tn, wu, wv, bk = cfg
    c = _counts(lin)
    # the prologue's stages-1 groups and the loop's one; one wait, the only full barrier
    assert (c["commits"], c["waits"], c["barriers"]) == (stages, 1, 0), c
    wait = next(u for u in lin.src if u.op is Ops.BARRIER and isinstance(u.arg, tuple))
    assert wait.arg == ("cp.async.wait", stages - 2)
    # a k slice: one x4 per A fragment, one x4.trans per 2 B fragments (an odd last one x2.trans)
    assert c["ldmatrix"] == (tm + (tn + 1) // 2) * bk // 16
    for w in (u for u in lin.src if u.op is Ops.WMMA):  # the mma reads ldmatrix's registers as they are
        fb = w.src[1]
        assert w.src[0].arg[:3] == ("ldmatrix", 4, False)  # type: ignore[index]
        assert fb.arg[:3] == ("ldmatrix", 2, True) if fb.op is Ops.LOAD else \
            (fb.op is Ops.STACK and {s.src[0].arg[:3] for s in fb.src} == {("ldmatrix", 4, True)} and  # type: ignore[index]
             [s.src[1].arg[0] for s in fb.src] in ([0, 1, 2, 3], [4, 5, 6, 7]))  # type: ignore[index]
    locals_ = sorted(u.shape[0] for u in lin.src if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL)  # type: ignore[union-attr]
    assert locals_ == sorted([stages * 16 * tm * wu * (bk + 8), stages * bk * (8 * tn * wv + 8)])
    # the copies of step ko + stages - 1 are issued before step ko's first ldmatrix
    first_ldm = next(i for i, u in enumerate(lin.src) if u.op is Ops.LOAD and isinstance(u.arg, tuple))
    loop_copies = [i for i, u in enumerate(lin.src) if u.op is Ops.STORE and u.arg == "cp.async" and
                   lin.src.index(wait) < i]
    assert loop_copies and max(loop_copies) < first_ldm


def test_tf32_through_the_async_pipeline() -> None:
    """float32 chunks are copied by cp.async too (fragments read element by element: no ldmatrix for 32 bits)."""
    from devices.base import gpu_target

    tf32 = gpu_target(tf32=True).with_(device="python")
    av, bv = rng.standard_normal((40, 24)).astype(np.float32), rng.standard_normal((24, 48)).astype(np.float32)
    a, b = Tensor(av, device="python").contiguous(), Tensor(bv, device="python").contiguous()
    got, lins = run(a @ b, tf32, [Opt(OptOps.TC, None, (TF32, 1, 2, 2, 2, 16, 3))])
    np.testing.assert_allclose(got, _tf32_np(av).astype(np.float64) @ _tf32_np(bv).astype(np.float64), rtol=1e-5,
                               atol=1e-5)
    c = _counts(lins[-1])
    assert c["copies"] > 0 and c["ldmatrix"] == 0 and c["commits"] == 3


def _lowered(nu: int, nk: int, nv: int, opt: Opt) -> UOp:
    out, _ = _mm(nu, nk, nv, "float16")
    items, _ = schedule([out.uop])
    return lower_kernel([i for i in items if i.kind == "kernel"][-1].ast, GPU, opts=[opt])  # type: ignore[arg-type]


def test_a_wait_that_retires_too_little_is_caught() -> None:
    """The same program with the wait keeping one group more in flight reads a stage before its copy lands: the
    emulator (copies land only at their wait) reports the unwritten LOCAL element instead of a result."""
    opt = Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 16, 3))
    lin = _lowered(64, 64, 64, opt)
    wait = next(u for u in lin.src if u.op is Ops.BARRIER and isinstance(u.arg, tuple))
    bad = lin.substitute({wait: UOp(Ops.BARRIER, wait.src, ("cp.async.wait", 2))})
    arrays = {0: np.zeros(64 * 64, np.float32), 1: np.ones(64 * 64, np.float16), 2: np.ones(64 * 64, np.float16)}
    PY.compile(lin, "good")(arrays)
    assert (arrays[0] == 64).all()
    with pytest.raises(DeviceError, match="LOCAL buffer"):
        PY.compile(bad, "bad")(arrays)


def test_ldmatrix_lanes_are_the_mma_fragment_layout() -> None:
    """ldmatrix.x4 over a 16 x 16 A tile (lane l points at row l % 16, column 8 (l // 16)) gives every lane the
    A fragment of the m16n8k16 layout (lower.wmma.LAYOUTS), x2.trans over a 16 x 8 B tile (k rows, lane l at
    row l % 16) the B fragment, and x4.trans over two neighbouring B tiles both fragments (elements 0-3, 4-7):
    element for element, at any row stride."""
    lay = LAYOUTS[HALF]
    for stride in (16, 24, 40):
        a = {r * stride + c: 1000 * r + c for r in range(16) for c in range(16)}
        got = ldmatrix(a.__getitem__, [(ln % 16) * stride + 8 * (ln // 16) for ln in range(32)], 4, False)
        want = [tuple(1000 * int(r) + int(c) for r, c in (lay.a(e, ln // 4, ln % 4) for e in range(8)))  # type: ignore[call-overload]
                for ln in range(32)]
        assert got == want
        b = {k * stride + n: 1000 * k + n for k in range(16) for n in range(8)}
        got = ldmatrix(b.__getitem__, [(ln % 16) * stride for ln in range(32)], 2, True)
        want = [tuple(1000 * int(k) + int(n) for k, n in (lay.b(e, ln // 4, ln % 4) for e in range(4)))  # type: ignore[call-overload]
                for ln in range(32)]
        assert got == want
        # x4.trans over two neighbouring 16 x 8 B tiles (lanes 16-31 at column 8): each tile's fragment in turn
        b2 = {k * stride + n: 1000 * k + n for k in range(16) for n in range(16)}
        got = ldmatrix(b2.__getitem__, [(ln % 16) * stride + 8 * (ln // 16) for ln in range(32)], 4, True)
        want = [tuple(1000 * int(k) + int(n) + 8 * h for h in (0, 1)
                      for k, n in (lay.b(e, ln // 4, ln % 4) for e in range(4)))  # type: ignore[call-overload]
                for ln in range(32)]
        assert got == want


def test_fallbacks_to_the_register_pipeline() -> None:
    """Operands cp.async cannot copy (a cast fused into the kernel; k not a multiple of 8) keep the register form,
    and asking for the async form there says why; a target with too little shared memory gets fewer stages."""
    def ast_of(nu: int, nk: int, nv: int, realized: bool = True) -> UOp:
        with gpu_graphs():
            a = Tensor(np.zeros((nu, nk), np.float32)).cast(dtypes.float16)
            b = Tensor(np.zeros((nk, nv), np.float32)).cast(dtypes.float16)
            if realized:
                a, b = a.contiguous(), b.contiguous()
            items, _ = schedule([(a @ b).uop])
        return [i for i in items if i.kind == "kernel"][-1].ast  # type: ignore[return-value]

    fused = ast_of(128, 64, 128, realized=False)
    assert gpu_opts(fused, GPU) == [Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 32))]
    with pytest.raises(KernelOptError, match="TC async: the operands are not plain loads"):
        lower_kernel(fused, GPU, opts=[Opt(OptOps.TC, None, (HALF, 2, 4, 2, 2, 32, 3))])
    big = ast_of(4096, 4096, 4096)
    # 64-wide k steps where 3 stages of them fit (the sm_90 target's shared memory)
    assert gpu_opts(big, GPU) == [Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 64, 3))]
    assert gpu_opts(ast_of(4096, 128, 4096), GPU) == [Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 32, 3))]  # k short
    # a stage of the 128 x 128 x 32 tiles is 18944 bytes of half (of 64-wide ones 35840: 3 no longer fit in 100000)
    assert gpu_opts(big, GPU.with_(local_memory_bytes=100000)) == [Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 32, 3))]
    assert gpu_opts(big, GPU.with_(local_memory_bytes=40000)) == [Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 32, 2))]
    assert gpu_opts(big, GPU.with_(local_memory_bytes=30000)) == [Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 32))]
    with pytest.raises(KernelOptError, match=r"stages 0 or 2\.\.8"):
        lower_kernel(big, GPU, opts=[Opt(OptOps.TC, None, (HALF, 4, 4, 2, 4, 32, 1))])


def test_spec_accepts_the_async_args_and_refuses_others() -> None:
    from rewrite.spec_args import _barrier_arg, _load_arg, _store_arg

    idx = UOp.buffer(0, dtypes.float16, (8,), addrspace=AddrSpace.LOCAL).index(UOp.const(0, dtypes.index))
    assert _store_arg(UOp(Ops.STORE, (idx, UOp.const(0.0, dtypes.float16)), "cp.async")) is None
    assert "cp.async" in str(_store_arg(UOp(Ops.STORE, (idx, UOp.const(0.0, dtypes.float16)), "async")))
    assert _barrier_arg(UOp(Ops.BARRIER, (), ("cp.async.wait", 1))) is None
    assert _barrier_arg(UOp(Ops.BARRIER, (), "cp.async.commit")) is None
    assert _barrier_arg(UOp(Ops.BARRIER, (), ("cp.async.wait", -1))) is not None
    assert _load_arg(UOp(Ops.LOAD, (idx,), ("ldmatrix", 4, False))) is None
    assert _load_arg(UOp(Ops.LOAD, (idx,), ("ldmatrix", 3, False))) is not None
