"""Correctness on every cpu target: a sample of the suite's kernels lowered with each target's own heuristics
(its vector width, register count and FMA decide lanes and the register tile) and run there.

For each case (built with the Tensor API and split into kernels by the scheduler) and each target, every
kernel is lowered with `lower_kernel(ast, cpu_target(level))` and
  * run for the target: compiled and loaded on this host where it runs the target's instructions (x86-64-v2,
    v3, and v4 on an AVX-512 host); cross-compiled and run under qemu-user for aarch64 (devices.cpu_cross);
    for x86-64-v4 on a host without AVX-512, compiled only (gcc must accept the source);
  * compared element for element with the python reference device interpreting the very same LINEAR program
    (the same lanes, fused MULACCs and polynomial exp2, so the results must be equal, not close), each kernel
    fed the reference's outputs of the kernels before it; and the case's final result with numpy (close:
    lanes reorder sums, MULACC rounds once);
  * checked for the point of the Target: no accumulator or fused multiply-add wider than one of the
    target's vector registers, and the matmul's register tile as wide as one (f32x16 for AVX-512, f32x8 for
    AVX2, f32x4 for SSE and NEON), accumulating with fused multiply-adds where the target has FMA instructions
    and with a vector multiply and add where it has none (x86-64-v2: no fmaf call per lane); in the machine
    code, one vector FMA instruction per accumulator and no register wider than the target's.
The aarch64 tests skip, saying so, only where aarch64-linux-gnu-gcc or qemu-aarch64 is not installed; CI
installs both (.ci/run).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable

import numpy as np
import pytest

from devices import get_device
from devices.base import Target, cpu_target, host_arch
from devices.cpu import build_object
from devices.cpu_cross import compile_emulated, cross_compiler, emulator
from devices.memory import np_dtype
from lower import optimize
from lower.buffers import has_data, lookup
from lower.optimize import Opt, OptOps
from lower.schedule import ScheduleItem
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from tensor import Tensor

LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64")
_RNG_SEED = 7


def _rng(k: int) -> np.random.Generator:
    return np.random.default_rng(_RNG_SEED + k)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16 (nearest even), as float32."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


# ---------------------------------------------------------------- cases: (tensor to realize, numpy reference)


def _casts() -> tuple[Tensor, np.ndarray]:
    x = _rng(0).standard_normal(64).astype(np.float32) * 4
    t = Tensor(x)
    h = (t.half() * 3.0).float()
    b = t.cast(dtypes.bfloat16).float() * 0.5
    return h + b - t.int().float(), (x.astype(np.float16) * np.float16(3)).astype(np.float32) + \
        _bf16(x) * 0.5 - x.astype(np.int32).astype(np.float32)


def _rowsum() -> tuple[Tensor, np.ndarray]:
    x = _rng(1).standard_normal((8, 128)).astype(np.float32)
    return Tensor(x).sum(1) * 2.0, x.astype(np.float64).sum(1) * 2


def _softmax() -> tuple[Tensor, np.ndarray]:
    x = _rng(2).standard_normal((4, 32)).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return Tensor(x).softmax(-1), e / e.sum(1, keepdims=True)


def _matmul() -> tuple[Tensor, np.ndarray]:
    # 24 rows and 32 columns hold every target's full tile (AVX-512 12 x 2x16, AVX2 6 x 2x8, SSE 6 x 2x4, NEON 8 x 2x4)
    a = _rng(3).standard_normal((24, 8)).astype(np.float32)
    b = _rng(4).standard_normal((8, 32)).astype(np.float32)
    return Tensor(a) @ Tensor(b), a.astype(np.float64) @ b


def _conv() -> tuple[Tensor, np.ndarray]:
    # 16 columns and 8 output channels: a register tile on every target (rows over channels, lanes over columns)
    x = _rng(5).standard_normal((1, 2, 8, 16)).astype(np.float32)
    w = _rng(6).standard_normal((8, 2, 3, 3)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 8, 8, 16))
    for i in range(3):
        for j in range(3):
            want += np.einsum("bchw,oc->bohw", xp[:, :, i:i + 8, j:j + 16], w[:, :, i, j])
    return Tensor(x).conv2d(Tensor(w), padding=1), want


def _gather_pad_flip() -> tuple[Tensor, np.ndarray]:
    x = _rng(7).standard_normal((6, 8)).astype(np.float32)
    idx = _rng(8).integers(0, 8, (6, 5)).astype(np.int32)
    g = Tensor(x).gather(1, Tensor(idx))
    p = Tensor(x).pad(((1, 0), (0, 2)), value=1.5).flip(0)[:6, 3:8]
    want = np.take_along_axis(x, idx, 1) + np.flip(np.pad(x, ((1, 0), (0, 2)), constant_values=1.5), 0)[:6, 3:8]
    return g + p, want


def _ints() -> tuple[Tensor, np.ndarray]:
    a = _rng(9).integers(-1000, 1000, 64).astype(np.int32)
    b = _rng(10).integers(1, 30, 64).astype(np.int32) * np.where(np.arange(64) % 3 == 0, -1, 1).astype(np.int32)
    u = _rng(11).integers(0, 256, 64).astype(np.uint8)
    ta, tb, tu = Tensor(a), Tensor(b), Tensor(u)
    out = (ta // tb) + (ta % tb) * 7 ^ (ta << 3) + (tu + 200).int()
    want = (a // b) + (a % b) * 7 ^ (a << 3) + (u + np.uint8(200)).astype(np.int32)
    return out, want


def _threads() -> tuple[Tensor, np.ndarray]:
    x = _rng(12).standard_normal((16, 48)).astype(np.float32)
    return (Tensor(x) * 3.0 + 1.0).abs().sqrt().sum(1), np.sqrt(np.abs(x.astype(np.float64) * 3 + 1)).sum(1)


def _ragged() -> tuple[Tensor, np.ndarray]:
    # 37 columns, 37-long rows: no target's vector width divides them; the axes are padded and upcast, the last
    # vector's loads and stores masked (devices.c_masked: AVX, AVX-512 and the portable SSE / NEON forms)
    a = _rng(13).standard_normal((24, 8)).astype(np.float32)
    b = _rng(14).standard_normal((8, 37)).astype(np.float32)
    mm = Tensor(a) @ Tensor(b)
    return mm.exp() * 0.5 + mm.sum(1, keepdim=True), \
        np.exp(a.astype(np.float64) @ b) * 0.5 + (a.astype(np.float64) @ b).sum(1, keepdims=True)


def _balanced() -> tuple[Tensor, np.ndarray]:
    # the matmul tile on 2 cores with balancing ids (lower.optimize.balance_ids; thresholds lowered in _run_case):
    # 48 rows, 24 a core, and 64 columns, whole tiles on every target, their outermost loop split across ids
    a = _rng(15).standard_normal((48, 8)).astype(np.float32)
    b = _rng(16).standard_normal((8, 64)).astype(np.float32)
    return Tensor(a) @ Tensor(b), a.astype(np.float64) @ b


CASES: dict[str, Callable[[], tuple[Tensor, np.ndarray]]] = {
    "ragged_axes": _ragged, "balanced_tile": _balanced,
    "casts_f16_bf16": _casts, "rowsum_unrolled": _rowsum, "softmax": _softmax, "matmul_tile": _matmul,
    "conv2d": _conv, "gather_pad_flip": _gather_pad_flip, "int_ops": _ints, "threads_core_id": _threads,
}
# the heuristics leave elementwise loops to the C compiler's vectorizer; the casts also run as explicit vectors,
# two registers' worth of lanes upcast (so as copies of one register each): float16 and bfloat16 vector code
_OPTS: dict[str, Callable[[Target], list[Opt]]] = {
    "casts_f16_bf16": lambda t: [Opt(OptOps.SPLIT, 0, (2 * t.lanes(4), AxisType.UPCAST, False))],
}
# cases whose one kernel gets a register tile (of fused multiply-adds with FMA)
_TILED = ("matmul_tile", "conv2d", "balanced_tile")


# ---------------------------------------------------------------- running a case's kernels


def _skip_reason(target: Target) -> str | None:
    if target.runs_here:
        return None
    if target.arch != host_arch() and not target.compiler_prefix:
        return f"no cross compiler for {target.arch} is known on this {host_arch()} host"
    if target.arch == "x86_64":
        return None  # an x86-64 level this host lacks: compiled only, below
    if cross_compiler(target) is None:
        return f"{target.compiler_prefix}gcc is not installed (Debian: gcc-aarch64-linux-gnu)"
    if emulator(target) is None:
        return f"qemu-{target.arch} is not installed (Debian: qemu-user)"
    return None


def _target(level: str, case: str) -> Target:
    t = cpu_target(level)
    return t.with_(cores=4) if case == "threads_core_id" else t.with_(cores=2) if case == "balanced_tile" else t


def _kernels(t: Tensor) -> list[ScheduleItem]:
    items = t.schedule()
    assert items and all(i.kind == "kernel" for i in items), items
    return items


def _input(buf: UOp, env: dict[UOp, np.ndarray]) -> np.ndarray:
    if buf in env:
        return env[buf].copy()
    if has_data(buf):
        return np.array(lookup(buf)).reshape(-1).copy()
    n = int(np.prod(buf.shape))
    return np.zeros(n, dtype=np_dtype(buf.dtype))


def _check_widths(lin: UOp, src: str, target: Target, case: str) -> None:
    """No fused multiply-add, accumulator or float32 vector wider than one vector register of the target (index
    vectors, 8 bytes a lane, are address arithmetic and may be wider); a register tile's accumulators are
    exactly one register wide and accumulate with the vector FMA helper, no per-lane fallback."""
    where = f"{case} on {target.isa} ({target.vector_bytes}-byte registers)"
    fmas = [u for u in lin.src if u.op is Ops.MULACC and u.shape]
    for u in fmas:
        assert u.shape[0] * u.dtype.itemsize <= target.vector_bytes, (where, u.short())
    accs = re.findall(r"\b[a-z]+(\d+)x(\d+) acc\d+;", src)
    for bits, n in accs:
        assert int(bits) // 8 * int(n) <= target.vector_bytes, (where, f"{bits}-bit x{n} accumulator")
    for n in re.findall(r"\bf32x(\d+)\b", src):
        assert 4 * int(n) <= target.vector_bytes, (where, f"f32x{n}")
    if case in _TILED:
        lanes = target.lanes(4)
        assert accs and all((b, n) == ("32", str(lanes)) for b, n in accs), (where, accs)
        if target.fma:
            assert len(fmas) == len(accs) and src.count(f"vfma_f32x{lanes}(") == len(accs) + 1, (where, src)
        else:  # no FMA instructions (x86-64-v2): a fused multiply-add would be a libm call per lane, so each
            # accumulator adds a vector product, one multiply and one add instruction (lower.pipeline.fuses_mulacc)
            updates = [u for u in lin.src if u.op is Ops.STORE and u.src[0].src[0].op is Ops.BUFFER and
                       u.src[0].src[0].arg.addrspace is AddrSpace.REG and u.src[1].op is Ops.ADD and
                       u.src[1].shape == (lanes,) and any(s.op is Ops.MUL for s in u.src[1].src)]
            assert not any(u.op is Ops.MULACC for u in lin.src), where
            assert len(updates) == len(accs) and "vfma_" not in src and "fmaf" not in src, (where, src)


def _run_case(level: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target = _target(level, case)
    if (why := _skip_reason(target)) is not None:
        pytest.skip(f"{target.isa}: {why}")
    if case in ("threads_core_id", "balanced_tile"):  # small enough for the reference, yet split across cores
        monkeypatch.setattr(optimize, "MIN_WORK_PER_THREAD", 16)
    if case == "balanced_tile":  # and across balancing ids
        monkeypatch.setattr(optimize, "BALANCE_WORK", 1024)
    t, want = CASES[case]()
    items = _kernels(t)
    ref_dev, cpu = get_device("python"), get_device("cpu")
    env: dict[UOp, np.ndarray] = {}
    specials = 0
    for it in items:
        lin = lower_kernel(it.ast, target, opts=_OPTS[case](target) if case in _OPTS else None)
        specials += sum(u.op is Ops.SPECIAL for u in lin.src)
        src = cpu.render(lin, it.name)
        _check_widths(lin, src, target, case)
        ins = {i: _input(b, env) for i, b in enumerate(it.bufs)}
        ref = {i: a.copy() for i, a in ins.items()}
        ref_dev.compile(lin, it.name)(ref)
        env[it.bufs[0]] = ref[0]
        if target.runs_here:
            got = {i: a.copy() for i, a in ins.items()}
            cpu.compile(lin, it.name, target)(got)
        elif target.arch == "aarch64":
            k = compile_emulated(lin, it.name, target)
            got = {i: a.copy() for i, a in ins.items()}
            k(got)
        else:  # an x86-64 level this host lacks: the compiler must accept the code
            with tempfile.TemporaryDirectory() as d:
                build_object(src, os.path.join(d, "k.so"), target, f"kernel {it.name!r}")
            continue
        np.testing.assert_array_equal(got[0], ref[0], err_msg=f"{case} kernel {it.name} on {target.isa}")
    if case == "threads_core_id":
        assert specials, "the kernel was not split across cores"
    if case == "balanced_tile":
        assert specials == 2, "the tiled kernel did not get a core id and a balancing id"
    out = env[items[-1].bufs[0]]
    if t.dtype is dtypes.bfloat16:
        out = (out.astype(np.uint32) << 16).view(np.float32)
    got_final = out.astype(np.float64 if t.dtype.is_float else np.int64).reshape(want.shape)
    if t.dtype.is_float:
        np.testing.assert_allclose(got_final, want, rtol=2e-5, atol=2e-5, err_msg=case)
    else:
        assert got_final.tolist() == want.tolist(), case


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("level", LEVELS)
def test_kernels_on_target(level: str, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _run_case(level, case, monkeypatch)


def _assembly(src: str, target: Target) -> str:
    with tempfile.TemporaryDirectory() as d:
        build_object(src, os.path.join(d, "k.s"), target, "assembly", extra=("-S",))
        with open(os.path.join(d, "k.s")) as f:
            return f.read()


_VECTOR_FMA = {"x86_64": r"\bvfmadd\w*ps\b", "aarch64": r"\bfmla\s+v\d+\.4s"}
_X86_REGS = {16: "xmm", 32: "ymm", 64: "zmm"}


@pytest.mark.parametrize("level", [lv for lv in LEVELS if cpu_target(lv).fma])
def test_register_tile_is_vector_fma_in_registers_of_the_target(level: str) -> None:
    """The machine code of the matmul tile for a target with FMA: one vector FMA instruction per accumulator
    (gcc turns the vfma helper's lane loop into one), no fmaf call, and on x86-64 no register wider than the
    target's (no zmm for AVX2)."""
    target = cpu_target(level)
    if target.arch != host_arch() and not target.compiler_prefix:
        pytest.skip(f"no cross compiler for {target.arch} is known on this {host_arch()} host")
    if cross_compiler(target) is None:
        pytest.skip(f"{target.compiler_prefix}gcc is not installed (Debian: gcc-aarch64-linux-gnu)")
    t, _ = _matmul()
    (it,) = _kernels(t)
    lin = lower_kernel(it.ast, target)
    asm = _assembly(get_device("cpu").render(lin, it.name), target)
    accs = sum(u.op is Ops.MULACC for u in lin.src)
    assert accs and len(re.findall(_VECTOR_FMA[target.arch], asm)) >= accs, asm
    assert "fmaf" not in asm
    if target.arch == "x86_64":
        wider = [r for b, r in _X86_REGS.items() if b > target.vector_bytes]
        assert not any(f"%{r}" in asm for r in wider), (target.isa, wider)


@pytest.mark.parametrize("level", [lv for lv in LEVELS if cpu_target(lv).fma and cpu_target(lv).arch == "x86_64"])
def test_register_tile_loop_keeps_its_registers(level: str) -> None:
    """The k loop of the largest register tile the target's registers hold (lower.opt_tiles.tile_shapes: AVX-512
    12 x 2 vectors, AVX2 6 x 2) keeps its accumulators, column vectors and broadcast in registers: from the loop's
    first FMA to its last no access to the stack (a spill would be one). x86 only: aarch64's 8 x 2 tile, whose
    rows' values gcc holds in registers of their own, keeps one vector on the stack across its k loop."""
    from lower.opt_tiles import tile_shapes

    target = cpu_target(level)
    if target.arch != host_arch() and not target.compiler_prefix:
        pytest.skip(f"no cross compiler for {target.arch} is known on this {host_arch()} host")
    if cross_compiler(target) is None:
        pytest.skip(f"{target.compiler_prefix}gcc is not installed (Debian: gcc-aarch64-linux-gnu)")
    rows, vecs = tile_shapes(target)[0]
    lanes = target.lanes(4)
    a = Tensor(_rng(5).standard_normal((2 * rows, 256)).astype(np.float32))
    b = Tensor(_rng(6).standard_normal((256, vecs * lanes)).astype(np.float32))
    (it,) = _kernels(a @ b)
    lin = lower_kernel(it.ast, target, opts=optimize.hand_coded(it.ast, target, threads=1))
    assert sum(u.op is Ops.MULACC for u in lin.src) == rows * vecs
    lines = _assembly(get_device("cpu").render(lin, it.name), target).splitlines()
    fma_at = [i for i, line in enumerate(lines) if re.search(_VECTOR_FMA[target.arch], line)]
    assert len(fma_at) >= rows * vecs
    body = lines[fma_at[0]:fma_at[-1] + 1]
    stack = r"\(%[re]sp[,)]|\(%[re]bp[,)]"
    assert not [line for line in body if re.search(stack, line)], (target.isa, body)


def test_no_fused_multiply_add_where_the_target_has_no_fma_instructions() -> None:
    """Without FMA instructions (x86-64-v2) a fused multiply-add would be a libm fmaf call per lane: the
    reduction accumulates with a multiply and an add instead (lower.pipeline.fuses_mulacc)."""
    target = cpu_target("x86-64-v2")
    t, _ = _matmul()
    (it,) = _kernels(t)
    lin = lower_kernel(it.ast, target)
    assert not any(u.op is Ops.MULACC for u in lin.src)
    assert "fmaf" not in _assembly(get_device("cpu").render(lin, it.name), target)


def test_emulated_build_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the cross compiler or qemu-user, building for aarch64 raises DeviceError naming the package."""
    from devices import cpu_cross
    from rewrite.errors import DeviceError

    t, _ = _rowsum()
    (it,) = _kernels(t)
    target = cpu_target("aarch64")
    lin = lower_kernel(it.ast, target)
    monkeypatch.setattr(cpu_cross, "emulator", lambda target: None)
    monkeypatch.setattr(cpu_cross, "cross_compiler", lambda target: "gcc")
    with pytest.raises(DeviceError, match="qemu-user"):
        compile_emulated(lin, it.name, target)
    monkeypatch.setattr(cpu_cross, "cross_compiler", lambda target: None)
    with pytest.raises(DeviceError, match="gcc-aarch64-linux-gnu"):
        compile_emulated(lin, it.name, target)
