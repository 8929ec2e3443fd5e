"""AVX-512 kernels stay 512 bits wide under gcc's tuning for Intel cores, compiled only (any x86-64 host with gcc).

gcc's tuning for the AVX-512 Intel cores (Skylake-X to Sapphire Rapids; what `-march=native` picks on them) prefers
256-bit vectors: whatever gcc vectorizes itself, such as a lane loop of the renderer's 16-lane helpers, becomes ymm
halves joined by vinsert/vextract shuffles. On such a host the matmul tile's FMA lane loop did, and a 1024 matmul
ran at 9 GFLOP/s instead of ~200. The x86-64-v4 Target says 512 (`-mprefer-vector-width=512`) and the helpers name
gcc's 512-bit builtins; this test compiles the kernels for the x86-64-v4 Target with that Intel tuning added after
the Target's own flags, at both compile tiers (-O2; -Og, where gcc vectorizes no lane loop at all), and reads the
assembly: in every innermost loop that does vector work, every vector instruction is zmm (no ymm half, no
vinsert/vextract/permute between halves), no scalar float arithmetic (a lane loop left lane by lane), and the
matmul's loop has one zmm FMA per accumulator. Kernels: a matmul register tile (whole, and ragged: masked loads),
a softmax (exp's polynomial of FMAs and its TRUNC), a row sum, and 16-lane float32 / 8-lane float64 TRUNC, SQRT,
WHERE, MAX and casts. The same kernels for x86-64-v3 (with the Zen 3 tuning of the AVX2 hosts) must be ymm
throughout and never zmm: the AVX2 path keeps its full width too. On the code before the fix the v4 matmul,
softmax, TRUNC, SQRT and float16 cases fail; before devices.c_masked's one-instruction masks, the ragged matmul at
-Og on both levels.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable

import numpy as np
import pytest

from devices.base import Target, cpu_target, host_arch
from devices.cpu import DEVICE as CPU
from lower.stages import lower_kernel
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import Tensor
from tests.devices.builder import vector_multi_output

# the tuning added per level: for AVX-512 gcc's tuning of an Intel server core (it sets -mprefer-vector-width=256
# unless the command line says otherwise); for AVX2 the AMD Zen 3 the earlier sessions measured on
TUNES = {"x86-64-v4": "-mtune=sapphirerapids", "x86-64-v3": "-mtune=znver3"}
TIERS = ("opt", "fast")
LEVELS = tuple(TUNES)
# a level's register names: its full width, and the one half as wide (float16 lanes of a full float32 vector)
_REGS = {64: ("zmm", "ymm"), 32: ("ymm", "xmm")}

pytestmark = pytest.mark.skipif(host_arch() != "x86_64", reason="compiles x86-64 assembly with the host's gcc")


def _target(level: str) -> Target:
    target = cpu_target(level)
    cc = CPU.compiler_for(target).cc
    probe = subprocess.run([cc, "-x", "c", "-", "-S", "-o", os.devnull, *target.compile_flags, TUNES[level]],
                           input="", capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"{cc} does not accept {TUNES[level]}: {probe.stderr.strip()[:200]}")
    return target


def _assembly(src: str, target: Target, tier: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "k.s")
        CPU.compiler_for(target)._run(src, out, "assembly", target, ("-S", TUNES[target.name]), tier=tier)
        with open(out) as f:
            return f.read()


def _function(asm: str) -> list[str]:
    """The body of the file's one global function: its labels and instructions, no directives."""
    lines = [x.strip() for x in asm.splitlines()]
    name = next(x.split()[1] for x in lines if x.startswith(".globl"))
    out: list[str] = []
    for line in lines[lines.index(f"{name}:") + 1:]:
        if line.startswith(".size") or line.startswith(".LFE"):
            break
        if line and not (line.startswith(".") and not line.endswith(":")):
            out.append(line)
    return out


def _blocks(body: list[str]) -> tuple[list[list[str]], list[list[int]]]:
    """Basic blocks (each a label's or a jump's successor onwards) and each one's successors."""
    blocks: list[list[str]] = [[]]
    for line in body:
        if line.endswith(":") and blocks[-1]:
            blocks.append([])
        blocks[-1].append(line)
        if re.match(r"(j\w+|ret)\b", line):
            blocks.append([])
    blocks = [b for b in blocks if b]
    at = {b[0][:-1]: k for k, b in enumerate(blocks) if b[0].endswith(":")}
    succ: list[list[int]] = []
    for k, b in enumerate(blocks):
        last, nxt = b[-1].split(), [k + 1] if k + 1 < len(blocks) else []
        if last[0] == "ret":
            succ.append([])
        elif last[0].startswith("j"):
            target = [at[last[1]]] if len(last) > 1 and last[1] in at else []
            succ.append(target if last[0] == "jmp" else target + nxt)
        else:
            succ.append(nxt)
    return blocks, succ


def inner_loops(asm: str) -> list[list[str]]:
    """The instructions of each innermost natural loop of the file's function (control flow graph, dominators,
    back edges; loops of one header merged; innermost: holding no other loop's header)."""
    blocks, succ = _blocks(_function(asm))
    n = len(blocks)
    pred: list[list[int]] = [[] for _ in range(n)]
    for k, ss in enumerate(succ):
        for s in ss:
            pred[s].append(k)
    dom = [set(range(n)) for _ in range(n)]
    dom[0] = {0}
    changed = True
    while changed:
        changed = False
        for k in range(1, n):
            new = {k} | (set.intersection(*(dom[p] for p in pred[k])) if pred[k] else set())
            if new != dom[k]:
                dom[k], changed = new, True
    loops: dict[int, set[int]] = {}
    for u in range(n):
        for h in succ[u]:
            if h in dom[u]:  # a back edge u -> h: the blocks that reach u without passing h
                body, todo = loops.setdefault(h, {h}), [u]
                while todo:
                    x = todo.pop()
                    if x not in body:
                        body.add(x)
                        todo.extend(pred[x])
    inner = [h for h, b in loops.items() if not any(g != h and g in b for g in loops)]
    return [[x for k in sorted(loops[h]) for x in blocks[k] if not x.endswith(":")] for h in sorted(inner)]


_VECTOR = re.compile(r"%[xyz]mm\d+")
# narrow sources of a full-width value: a scalar moved into a vector register and broadcast (AVX2 broadcasts from
# an xmm register, not a general one), a ragged edge's bool mask bytes sign-extended to the lanes' width
_SPLAT = re.compile(r"^(vmov[dq]|v\w*broadcast\w*|vpmovsx\w+)\s")
_SHUFFLE = re.compile(r"^v(insert|extract|perm|shuf)\w*")
# scalar float arithmetic: a lane loop doing the lanes one at a time (moves and broadcasts are not arithmetic)
_SCALAR_MATH = re.compile(r"^v(add|sub|mul|div|sqrt|rndscale|round|fmadd\w*|fnmadd\w*|max|min|cvt\w+)s[sd]\b")


def check_wide(asm: str, what: str, halves: bool = False, width: int = 64) -> list[list[str]]:
    """Every innermost loop with vector work: registers of `width` bytes only (zmm; ymm for AVX2), none wider, no
    shuffles between halves, no scalar float math. Returns those loops (there must be one). `halves`: float16 lanes
    of a full float32 vector fill half a register, which moves and converts may name."""
    full, half = _REGS[width]
    hot = [lp for lp in inner_loops(asm) if any(f"%{full}" in x for x in lp)]
    assert hot, f"{what}: no {full} loop in\n{asm}"
    for lp in hot:
        text = "\n".join(lp)
        narrow = [x for x in lp if f"%{half}" in x and not _SPLAT.match(x) and
                  not (halves and re.match(r"(vmov\w+|vcvtp[sh]2p[hs])\s", x))]
        assert not narrow, f"{what}: {half} halves in a hot loop:\n{text}"
        assert width == 64 or "%zmm" not in text, f"{what}: zmm registers on an AVX2 target:\n{text}"
        assert not any(_SHUFFLE.match(x) for x in lp), f"{what}: shuffles between halves in a hot loop:\n{text}"
        assert not any(_SCALAR_MATH.match(x) for x in lp), f"{what}: lane-by-lane float math in a hot loop:\n{text}"
    return hot


def _kernels(t: Tensor, target: Target) -> list[tuple[str, UOp]]:
    items = [i for i in t.schedule() if i.kind == "kernel"]
    assert items
    return [(i.name, lower_kernel(i.ast, target)) for i in items]


def _rand(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("cols", [64, 37])
@pytest.mark.parametrize("level", LEVELS)
def test_matmul_tile_is_full_width_fma(level: str, cols: int, tier: str) -> None:
    """The matmul tile, of whole vectors and with a ragged last vector (37 columns: its loads masked, the lane mask
    made from the bool mask in the k loop at -Og: one instruction, not a lane loop)."""
    target = _target(level)
    ((name, lin),) = _kernels(_rand(64, 128) @ _rand(128, cols), target)
    accs = sum(u.op is Ops.MULACC for u in lin.src)
    assert accs >= 8, f"the {level} matmul has no register tile of fused multiply-adds ({accs})"
    asm = _assembly(CPU.render(lin, name), target, tier)
    reg = _REGS[target.vector_bytes][0]
    fmas = max(sum(bool(re.match(rf"vfmadd\w+ps\s.*%{reg}", x)) for x in lp)
               for lp in check_wide(asm, f"matmul {level}", width=target.vector_bytes))
    assert fmas >= accs, f"matmul {level} ({tier}): {fmas} {reg} FMAs in the hot loop for {accs} accumulators\n{asm}"


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", ["softmax", "row_sum"])
@pytest.mark.parametrize("level", LEVELS)
def test_tensor_kernels_are_full_width(level: str, case: str, tier: str) -> None:
    target = _target(level)
    t = _rand(16, 512).softmax(-1) if case == "softmax" else _rand(32, 4096).sum(1)
    for name, lin in _kernels(t, target):
        check_wide(_assembly(CPU.render(lin, name), target, tier), f"{case} kernel {name} {level} ({tier})",
                   width=target.vector_bytes)


f32, f64 = dtypes.float32, dtypes.float64
_OPS: dict[str, tuple[Callable[[list[UOp], list[UOp]], UOp], DType, list[DType]]] = {
    "trunc_f32": (lambda v, s: UOp(Ops.TRUNC, (v[0],)), f32, [f32]),
    "trunc_f64": (lambda v, s: UOp(Ops.TRUNC, (v[0],)), f64, [f64]),
    "sqrt_f32": (lambda v, s: UOp(Ops.SQRT, (v[0],)), f32, [f32]),
    "sqrt_f64": (lambda v, s: UOp(Ops.SQRT, (v[0],)), f64, [f64]),
    "where_f32": (lambda v, s: (v[0] < v[1]).where(v[0], -v[1]), f32, [f32, f32]),
    "max_f32": (lambda v, s: UOp(Ops.MAX, (v[0], v[1])), f32, [f32, f32]),
    "int_to_float": (lambda v, s: v[0].cast(f32), f32, [dtypes.int32]),
    "float_to_half": (lambda v, s: v[0].cast(dtypes.float16), dtypes.float16, [f32]),
    "half_to_float": (lambda v, s: v[0].cast(f32), f32, [dtypes.float16]),
}


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("case", list(_OPS))
@pytest.mark.parametrize("level", LEVELS)
def test_register_wide_ops_are_full_width(level: str, case: str, tier: str) -> None:
    """One register of lanes per op (AVX-512: 16 float32, 8 float64; AVX2 half that) over 64 blocks: the block
    loop is the hot loop."""
    target = _target(level)
    fn, out, ins = _OPS[case]
    lanes = target.vector_bytes // max(dt.itemsize for dt in (out, *ins))
    prog = vector_multi_output([fn], [out], ins, lanes, 64)
    check_wide(_assembly(CPU.render(prog, case), target, tier), f"{case} x{lanes} {level} ({tier})",
               halves=dtypes.float16 in (out, *ins), width=target.vector_bytes)


def test_inner_loops_finds_the_innermost() -> None:
    """The loop finder itself, on gcc's -Og layout (a loop's test after its body, entered by a jump to it): two
    nested loops and a loop after them; the inner one and the last are innermost, the outer one's reduction is not
    in a hot loop, and lane-by-lane math in one is found."""
    asm = "\n".join(["\t.globl k", "k:", "\tmovl $0, %eax", ".L2:", "\tmovl $0, %ecx", "\tjmp .L3", ".L4:",
                     "\tvaddps %zmm1, %zmm0, %zmm0", "\tincl %ecx", ".L3:", "\tcmpl $4, %ecx", "\tjle .L4",
                     "\tvextractf32x8 $1, %zmm0, %ymm2", "\tincl %eax", "\tcmpl $9, %eax", "\tjne .L2", ".L5:",
                     "\tvaddss %xmm1, %xmm0, %xmm0", "\tjne .L5", "\tret", "\t.size k, .-k"])
    assert inner_loops(asm) == [["vaddps %zmm1, %zmm0, %zmm0", "incl %ecx", "cmpl $4, %ecx", "jle .L4"],
                                ["vaddss %xmm1, %xmm0, %xmm0", "jne .L5"]]
    with pytest.raises(AssertionError, match="lane-by-lane"):
        check_wide(asm.replace("%xmm", "%zmm"), "x")
    check_wide(asm.replace("vaddss", "vaddps").replace("%xmm", "%zmm"), "x")
