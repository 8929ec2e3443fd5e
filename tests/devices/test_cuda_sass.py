"""The machine code (SASS) of the GPU benchmark's matmul kernels, read with cuobjdump (benchmarks.gpu_sass): no
spills, no local memory, and a hot loop of ldmatrix (LDSM), mma.sync (HMMA) and cp.async (LDGSTS), or wgmma (HGMMA),
with no more other instructions per unit of MMA work than measured (a small margin above). Needs nvcc or NVRTC to
compile (the cuda device's own compiler and flags) and the CUDA binary utilities (the test extra's
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels); no GPU. Skips only where nvcc is missing; a missing cuobjdump
or nvdisasm fails, saying what to install.

The parser's own tests run on hand-written SASS lines and need nothing."""

from __future__ import annotations

import functools
import shutil

import pytest

from benchmarks.gpu_sass import (
    Instr,
    KernelReport,
    analyze,
    hot_loop,
    klass,
    loops,
    mma_units,
    our_reports,
    parse_sass,
    smem_bytes,
    tool,
)
from rewrite.errors import CompileError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not installed")

# a cut of real `cuobjdump -sass` output (sm_90 mma.sync matmul's loop, shortened), encodings left in
SASS = """
	code for sm_90
		Function : k
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                          /* 0x00000a00ff017b82 */
                                                                                   /* 0x000fe20000000800 */
        /*0010*/                   DEPBAR.LE SB0, 0x1 ;                            /* 0x000080400000791a */
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                   /* 0x0000000000007b1d */
        /*0030*/              @!P2 IMAD.WIDE R36, R108, 0x2, R120 ;                /* 0x000000026c24a825 */
        /*0040*/              @!PT LDS RZ, [RZ] ;                                  /* 0x00000000fffff984 */
        /*0050*/              @!P2 LDGSTS.E.BYPASS.128 [R39], desc[UR6][R2.64] ;   /* 0x0000000002272fae */
        /*0060*/                   LDSM.16.MT88.2 R100, [R117+0xd800] ;            /* 0x00d800007564783b */
        /*0070*/                   LDSM.16.M88.4 R36, [R116] ;                     /* 0x000000007424783b */
        /*0080*/                   HMMA.16816.F32 R48, R36.reuse, R100, R48 ;      /* 0x000000642430723c */
        /*0090*/                   LDS.128 R4, [R2+0x10] ;                         /* 0x0000100002047984 */
        /*00a0*/                   UIADD3 UR4, UR4, 0x1, URZ ;                     /* 0x0000000104047890 */
        /*00b0*/                   HGMMA.64x256x16.F32 R24, gdesc[UR16].tnspB, R24, gsb0 ; /* 0x0 */
        /*00c0*/                   ISETP.NE.AND P0, PT, R106, 0x40, PT ;           /* 0x000000406a007c0c */
        /*00d0*/               @P0 BRA 0x10 ;                                      /* 0xfffffff400800947 */
        /*00e0*/                   EXIT ;                                          /* 0x000000000000794d */
        /*00f0*/                   BRA 0xf0;                                       /* 0xfffffffc00fc7947 */
"""


def test_parse_sass() -> None:
    ins = parse_sass(SASS)["k"]
    assert [(i.addr, i.pred, i.op) for i in ins[:4]] == [
        (0x00, "", "LDC"), (0x10, "", "DEPBAR.LE"), (0x20, "", "BAR.SYNC.DEFER_BLOCKING"), (0x30, "!P2", "IMAD.WIDE")]
    assert ins[11].op == "HGMMA.64x256x16.F32" and ins[11].args.endswith("gsb0")
    assert len(ins) == 16


@pytest.mark.parametrize(("line", "cls"), [
    ("HMMA.16816.F32", "mma"), ("HGMMA.64x256x16.F32", "mma"), ("LDSM.16.MT88.2", "ldsm"), ("LDS.128", "lds"),
    ("LDGSTS.E.BYPASS.128", "ldgsts"), ("UTMALDG.2D", "tma"), ("SYNCS.ARRIVE.TRANS64", "tma"), ("STL.64", "local"),
    ("BAR.SYNC.DEFER_BLOCKING", "bar"), ("WARPGROUP.ARRIVE", "bar"), ("IMAD.WIDE", "int"), ("LOP3.LUT", "int"),
    ("UIADD3", "uniform"), ("R2UR", "uniform"), ("FFMA", "fp"), ("S2R", "other"), ("NOP", "nop")])
def test_klass(line: str, cls: str) -> None:
    assert klass(Instr(0, "", line, "")) == cls


def test_never_executed_filler_is_nop() -> None:
    assert klass(Instr(0, "!PT", "LDS", "RZ, [RZ]")) == "nop"
    assert smem_bytes(Instr(0, "!PT", "LDS", "RZ, [RZ]")) == 0


@pytest.mark.parametrize(("op", "units"), [
    ("HMMA.16816.F32", 1.0), ("HMMA.16816.F32.BF16", 1.0), ("HMMA.1688.F32.TF32", 0.5), ("HMMA.1684.F32.TF32", 0.25),
    ("HGMMA.64x256x16.F32", 32.0), ("HGMMA.64x128x16.F32", 16.0), ("HGMMA.64x64x8.F32.TF32", 4.0), ("FFMA", 0.0)])
def test_mma_units(op: str, units: float) -> None:
    assert mma_units(Instr(0, "", op, "")) == units


@pytest.mark.parametrize(("op", "nbytes"), [
    ("LDSM.16.M88.4", 512), ("LDSM.16.MT88.2", 256), ("LDSM.16.M88", 128), ("LDS", 128), ("LDS.64", 256),
    ("LDS.128", 512), ("LDS.U16", 64), ("LDS.U8", 32), ("LDG.E.128", 0)])
def test_smem_bytes(op: str, nbytes: int) -> None:
    assert smem_bytes(Instr(0, "", op, "")) == nbytes


def test_hot_loop_and_mix() -> None:
    ins = parse_sass(SASS)["k"]
    assert loops(ins) == [(1, 13)]  # 0xf0's branch to itself is the trailing trap, not a loop
    assert hot_loop(ins) == ("MMA", (1, 13))
    r = analyze("k", ins, {"REG": 124, "LOCAL": 0})
    assert r.loop_instrs == 13 and r.mix["mma"] == 2 and r.mix["ldsm"] == 2 and r.mix["lds"] == 1
    assert r.mix["nop"] == 1 and r.mix["uniform"] == 1 and r.guarded_loads == 1
    assert r.mma_units == 33.0 and r.smem_read == 256 + 512 + 512
    assert r.other_per_key == 11 / 2


def test_hot_loop_ffma_and_none() -> None:
    simt = [Instr(0, "", "LDS.128", ""), *(Instr(16 * i, "", "FFMA", "") for i in range(1, 4)),
            Instr(64, "P0", "BRA", "0x0")]
    assert hot_loop(simt) == ("FFMA", (0, 4))
    few = [Instr(16 * i, "", "FADD" if i != 2 else "FFMA", "") for i in range(9)] + [Instr(144, "P0", "BRA", "0x0")]
    assert hot_loop(few) == ("none", (0, 9))  # an exp's lone FFMA does not make a SIMT loop
    assert hot_loop([Instr(0, "", "EXIT", "")]) == ("none", None)


@functools.cache
def report(sm: str, case: str, knobs: tuple[tuple[str, str], ...] = ()) -> KernelReport:
    try:
        tool("cuobjdump")
        tool("nvdisasm")
    except CompileError as e:
        pytest.fail(f"{e} (the test extra installs both)")
    reps = our_reports(sm, [case], dict(knobs))
    assert len(reps) == 1, [r.name for r in reps]
    return reps[0]


def no_spills(r: KernelReport) -> None:
    assert (r.stl, r.ldl, r.local, r.stack) == (0, 0, 0, 0), f"{r.name}: spills or local memory: {r.row()}"


# measured with NVRTC 13.5 (nvcc 13.0: 151 instructions for 152): the mma.sync hot loop is one 64-wide k step of
# a 128x128 block tile, 8 warps of 64x32: 64 HMMA.16816, 16 LDSM.x4 (A) + 8 LDSM.x4.trans (B, two n8 tiles each;
# 16 x2.trans before: 160 instructions, 1.50 a unit), 8 LDGSTS, 88 other instructions (1.38 a unit), 192 shared
# bytes a unit; sm_80's the same but for scheduling (150, 1.34)
MMA_SYNC_OTHER_PER_UNIT = 1.38


@needs_nvcc
@pytest.mark.parametrize("sm", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case", ["matmul_4096_fp16", "matmul_4096_bf16"])
def test_mma_sync_matmul_sass(sm: str, case: str) -> None:
    r = report(sm, case)
    no_spills(r)
    assert r.key == "MMA" and r.mix["mma"] == 64 and r.mma_units == 64
    assert r.mix["ldsm"] == 24 and r.mix["lds"] == 0, r.row()  # every fragment read is an ldmatrix
    assert r.mix["ldgsts"] == 8 and r.mix["ldg"] == 0 and r.mix["sts"] == 0, r.row()  # the cp.async pipeline
    assert r.smem_per_unit <= 192, r.row()
    assert r.other_per_unit <= MMA_SYNC_OTHER_PER_UNIT * 1.1, r.row()


@needs_nvcc
@pytest.mark.parametrize("knobs", [(("WGMMA", "1"),), (("WGMMA", "1"), ("TMA", "1"))], ids=["wgmma", "wgmma-tma"])
def test_wgmma_matmul_sass(knobs: tuple[tuple[str, str], ...]) -> None:
    """sm_90 WGMMA=1 (TMA=1): 4 HGMMA.64x256x16 a 64-wide k step (128 units a warp), about 1.1 other
    instructions a unit (measured 1.10 with cp.async, 1.12 with the TMA), one wait for the group before."""
    r = report("sm_90", "matmul_4096_fp16", knobs)
    no_spills(r)
    assert r.key == "MMA" and r.mix["mma"] == 4 and r.mma_units == 128, r.row()
    assert r.mix["ldsm"] == r.mix["lds"] == 0, r.row()  # wgmma reads shared memory through its descriptors
    assert (r.mix["tma"] > 0) == (("TMA", "1") in knobs) and (r.mix["ldgsts"] > 0) != (("TMA", "1") in knobs)
    assert r.other_per_unit <= 1.25, r.row()


@needs_nvcc
def test_tf32_and_simt_matmul_sass() -> None:
    """tf32 (ALLOW_TF32 in benchmarks.gpu): 64 HMMA.1688 (32 units), 96 LDS.32 fragment reads and 96 tf32 roundings
    of two instructions each in the loop (measured 10.84 other a unit); float32 without tf32: the SIMT tile, 1024
    FFMAs a 16-deep k step fed by 64 16-byte shared loads (measured 109 other instructions, 0.106 an FFMA; 32
    shared bytes an FFMA), the next tiles' copies 4 16-byte global loads and 2 16-byte (B) + 8 float (A, along k
    into the k-major tile) shared stores."""
    r = report("sm_90", "matmul_4096_tf32")
    no_spills(r)
    assert r.key == "MMA" and r.mma_units == 32 and r.other_per_unit <= 10.84 * 1.1, r.row()
    s = report("sm_90", "matmul_4096")
    no_spills(s)
    assert s.key == "FFMA" and s.mix["ffma"] == 1024 and s.other_per_unit <= 0.10 * 1.2, s.row()
    assert s.mix["lds"] == 64 and s.mix["ldg"] == 4 and s.mix["sts"] == 10, s.row()
    assert s.smem_per_unit <= 32, s.row()
