"""float16 vector lanes as float32 registers (devices.c_half): every op bit for bit what per-op float16 arithmetic
gives, on the x86 levels the host runs (x86-64-v4: AVX-512's 16-lane conversions; v3: F16C's 8-lane ones; v2: C's
generic conversion), at 8, 16 and 32 lanes (32: two halves of 16).

Oracles: numpy's float16 arithmetic for + - * / sqrt, the reciprocal, negation, comparisons and the min select
(each computed in float32 and rounded once, the correctly rounded float16 result), numpy's conversions for the
casts; the same op in scalar C (`_Float16`, rounded by the cast after each op) for MAX, the fused multiply-add,
EXP2, LOG2, SIN and TRUNC. Inputs: every float16 bit pattern (nan, infinities, -0.0 and the subnormals among them)
against a shuffled copy, after the cross product of 64 special values."""

from __future__ import annotations

import platform
from collections.abc import Callable

import numpy as np
import pytest

from devices.base import cpu_target
from devices.cpu import DEVICE as CPU
from rewrite.dtype import DType, dtypes
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import assert_same, multi_output, storage, vector_multi_output

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction-set levels")

F16, F32 = dtypes.float16, dtypes.float32
N = 1 << 16
_SPECIAL = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x0001, 0x8001, 0x0002, 0x03FF, 0x83FF, 0x0400, 0x8400,
            0x0401, 0x7BFF, 0xFBFF, 0x7BFE, 0x3C00, 0xBC00, 0x3C01, 0x3BFF, 0x4000, 0xC000, 0x3800, 0x3555, 0x4248,
            0x5BFF, 0x6800, 0x6801, 0x7800, 0x1400, 0x0200, 0x8200, 0x0155, 0x2E66, 0xAE66, 0x4900, 0x5640, 0x7A00,
            0x3E00, 0x3A00, 0x1001, 0x0C00, 0x00FF, 0x3C02, 0x4001, 0x57FF, 0x5800, 0x6BFF, 0x2000, 0x2001, 0x1FFF,
            0x3BFE, 0x4200, 0xC200, 0x4400, 0x4A00, 0x5000, 0x7000, 0x7001, 0x0800, 0x8800, 0x3555, 0xB555]
_SNAN = (np.arange(N) & 0x7E00 == 0x7C00) & (np.arange(N) & 0x01FF != 0)  # signaling nans (see devices.c_half)


def _halves() -> tuple[np.ndarray, np.ndarray]:
    """(a, b): the 64 x 64 special pairs, then every bit pattern against a shuffled one."""
    rng = np.random.default_rng(16)
    sp = np.array(_SPECIAL, np.uint16)
    a = np.arange(N, dtype=np.uint16)
    b = rng.permutation(a)
    a[:4096], b[:4096] = np.repeat(sp, 64), np.tile(sp, 64)
    return a.view(np.float16), b.view(np.float16)


A, B = _halves()
_LEVELS = ["x86-64-v2", "x86-64-v3", "x86-64-v4"]


def _runs(level: str) -> None:
    if not cpu_target(level).runs_here:
        pytest.skip(f"this host does not run {level}")


def _run(prog: UOp, name: str, level: str, ins: list[np.ndarray], outs: list[DType]) -> list[np.ndarray]:
    bufs = {100 + j: x.copy() for j, x in enumerate(ins)}
    bufs.update({k: np.zeros(N, storage([], d).dtype) for k, d in enumerate(outs)})
    with Context(CPU_TARGET=level):
        CPU.compile(prog, f"{name}_{level}".replace("-", "_"))(bufs)
    return [bufs[k] for k in range(len(outs))]


def _kernel_text(src: str) -> str:
    return src.split("\nvoid ")[-1]


# (name, fn of the two operand vectors, output dtype, numpy oracle)
_NUMPY: list[tuple[str, Callable[[UOp, UOp], UOp], DType, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = [
    ("add", lambda a, b: a + b, F16, lambda a, b: a + b),
    ("sub", lambda a, b: a - b, F16, lambda a, b: a - b),
    ("mul", lambda a, b: a * b, F16, lambda a, b: a * b),
    ("div", lambda a, b: a / b, F16, lambda a, b: a / b),
    ("sqrt", lambda a, b: UOp(Ops.SQRT, (a,)), F16, lambda a, b: np.sqrt(a)),
    ("recip", lambda a, b: UOp(Ops.RECIP, (a,)), F16, lambda a, b: np.float16(1) / a),
    ("neg", lambda a, b: -a, F16, lambda a, b: -a),
    ("lt", lambda a, b: a < b, dtypes.bool, lambda a, b: a < b),
    ("eq", lambda a, b: a.eq(b), dtypes.bool, lambda a, b: a == b),
    ("min", lambda a, b: (a < b).where(a, b), F16, lambda a, b: np.where(a < b, a, b)),
    ("where", lambda a, b: (b < a).where(a * b, a + b), F16, lambda a, b: np.where(b < a, a * b, a + b)),
    ("to_f32", lambda a, b: a.cast(F32), F32, lambda a, b: a.astype(np.float32)),
    ("to_f64", lambda a, b: a.cast(dtypes.float64), dtypes.float64, lambda a, b: a.astype(np.float64)),
    ("to_bool", lambda a, b: a.cast(dtypes.bool), dtypes.bool, lambda a, b: a != 0),
    ("to_i32", lambda a, b: a.cast(dtypes.int32), dtypes.int32,
     lambda a, b: np.where(np.isfinite(a), np.trunc(np.where(np.isfinite(a), a, 0)), 0).astype(np.int32)),
    ("to_i16", lambda a, b: a.cast(dtypes.int16), dtypes.int16,
     lambda a, b: np.where(np.isfinite(a), np.trunc(np.where(np.isfinite(a), a, 0)), 0).astype(np.int64)
     .astype(np.int16)),
    ("bits", lambda a, b: a.bitcast(dtypes.int16),
     dtypes.int16, lambda a, b: a.view(np.int16)),
]


@pytest.mark.parametrize("level", _LEVELS)
@pytest.mark.parametrize("lanes", [8, 16, 32])
def test_half_lanes_are_numpy_float16(level: str, lanes: int) -> None:
    """Each op's float16 lanes bit for bit numpy's float16 result (any nan for a nan), on float32 registers: the
    kernel computes in float32 lanes rounded by `vf16_round_`, never a `_Float16` vector nor a lane loop."""
    _runs(level)
    prog = vector_multi_output([lambda v, s, f=f: f(v[0], v[1]) for _, f, _, _ in _NUMPY], [o for _, _, o, _ in _NUMPY],
                               [F16, F16], lanes, N // lanes)
    src = CPU.render(prog, f"half_ops_{lanes}")
    body = _kernel_text(src)
    # both operands are moved too (the min's select and the bitcast read their bits, devices.c_bits): loaded as
    # half bits, which the ops that compute read converted to float lanes
    assert f"vf16_round_f32x{lanes}(" in body and f"vh2f_f32x{lanes}(val" in body, body
    assert f"u16x{lanes} val0 = vload" in body and f"vload_f16_f32x{lanes}(" not in body, body
    # lane by lane only where float32 lanes are too: a float -> int cast that may leave the int's range (f2i_wrap),
    # and the square root of 32 lanes (no one x86 op: devices.c_vround)
    wraps = {f"data{k}+" for k, (name, _, _, _) in enumerate(_NUMPY)
             if name.startswith("to_i") or (name == "sqrt" and lanes > 16)}
    assert all(any(w in ln for w in wraps) for ln in body.split("\n") if "lane_l" in ln), body
    assert "_Float16 f16x" not in src.split("static inline")[0]  # no half vector type but the conversions' own
    if lanes <= 16:
        assert f"vh2f_f32x{lanes}(" in src and "__builtin_ia32_vcvtph2ps" in src, src
    got = _run(prog, f"half_ops_{lanes}", level, [A, B], [o for _, _, o, _ in _NUMPY])
    with np.errstate(all="ignore"):
        for (name, _, od, oracle), g in zip(_NUMPY, got, strict=True):
            want = np.asarray(oracle(A, B))
            if name == "bits":  # every pattern as it is, signaling nans included (devices.c_bits), beside math
                assert _SNAN[A.view(np.uint16)].sum() > 900  # the inputs hold signaling nans
                assert np.array_equal(g.view(np.uint16), want.view(np.uint16)), f"bits {level} x{lanes}"
                continue
            assert_same(g, want.astype(storage([], od).dtype), od, f"{name} {level} x{lanes}")


# ops whose oracle is the same op in scalar C (`_Float16` values, each result cast back)
_SCALAR: list[tuple[str, Callable[[UOp, UOp], UOp]]] = [
    ("max", lambda a, b: a.maximum(b)),
    ("fma", lambda a, b: UOp(Ops.MULACC, (a, b, a))),
    ("fma2", lambda a, b: UOp(Ops.MULACC, (b, b, a))),
    ("exp2", lambda a, b: UOp(Ops.EXP2, (a,))),
    ("log2", lambda a, b: UOp(Ops.LOG2, (a,))),
    ("sin", lambda a, b: UOp(Ops.SIN, (a,))),
    ("trunc", lambda a, b: UOp(Ops.TRUNC, (a,))),
    ("chain", lambda a, b: (a * b + a) * (b - a) / (a + b)),
]


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("lanes", [8, 16])
def test_half_lanes_are_the_scalar_text(level: str, lanes: int) -> None:
    """MAX, the fused multiply-add, the transcendentals (lane by lane on the float lanes), TRUNC and a chain of ops
    bit for bit what the scalar text's `_Float16` arithmetic gives."""
    _runs(level)
    fns, outs = [f for _, f in _SCALAR], [F16] * len(_SCALAR)
    vec = _run(vector_multi_output([lambda v, s, f=f: f(v[0], v[1]) for f in fns], outs, [F16, F16], lanes,
                                   N // lanes), f"half_vs_{lanes}", level, [A, B], outs)
    sca = _run(multi_output(list(fns), outs, [F16, F16], N), "half_scalar", level, [A, B], outs)
    for (name, _), v, s in zip(_SCALAR, vec, sca, strict=True):
        assert_same(v, s, F16, f"{name} {level} x{lanes}")


def _f32_values() -> np.ndarray:
    """float32 values around float16's rounding points: ties to even, the subnormal range, the overflow boundary."""
    rng = np.random.default_rng(32)
    h = A[np.isfinite(A) & (np.abs(A) < 65504)].astype(np.float32)
    ulp = np.spacing(h.astype(np.float16)).astype(np.float32)
    near = np.concatenate([h + ulp / 2, h - ulp / 2, h + ulp / 3, h + np.float32(0.5) * ulp * np.float32(1 + 2 ** -20)])
    extra = np.array([65519.0, 65520.0, 65519.996, 1e30, -1e30, 2.0 ** -25, 2.0 ** -25 * 1.0001, 2.0 ** -26, 3e-8],
                     np.float32)
    x = np.concatenate([extra, near, rng.standard_normal(N).astype(np.float32) * 1000])[:N]
    return x.astype(np.float32)


@pytest.mark.parametrize("level", _LEVELS)
def test_casts_to_half_lanes_round_once(level: str) -> None:
    """float32, float64, int32, int16, bfloat16 and bool to float16 lanes: numpy's conversion (nearest even, overflow
    to inf), float64 in one rounding (x = 1 + 2**-11 + 2**-40 rounds up; through float32 it would tie down to 1)."""
    _runs(level)
    x32 = _f32_values()
    rng = np.random.default_rng(64)
    x64 = x32.astype(np.float64) * (1 + np.where(rng.random(N) < 0.5, 2.0 ** -40, -(2.0 ** -40)))
    x64[:4] = [1 + 2 ** -11 + 2 ** -40, 1 + 2 ** -11 - 2 ** -40, -(1 + 2 ** -11 + 2 ** -40), 65520.0 - 2 ** -30]
    i32 = rng.integers(-70000, 70000, N).astype(np.int32)
    i32[:6] = [65519, 65520, 2049, 2051, 4097, -65520]
    i16 = np.arange(N, dtype=np.uint16).view(np.int16)
    srcs = [F32, dtypes.float64, dtypes.int32, dtypes.int16, dtypes.bfloat16, dtypes.bool]
    boolv = (np.arange(N) % 3 == 0)
    ins = [x32, x64, i32, i16, storage(list(x32), dtypes.bfloat16), boolv]
    prog = vector_multi_output([lambda v, s, j=j: v[j].cast(F16) for j in range(len(srcs))] +
                               [lambda v, s: (v[0].cast(F16) * v[0].cast(F16)).cast(dtypes.bfloat16)],
                               [F16] * len(srcs) + [dtypes.bfloat16], srcs, 16, N // 16)
    body = _kernel_text(CPU.render(prog, "casts_to_half"))
    assert "lane_l" not in body, body
    # a cast stored at once is rounded by the store's own conversion, not rounded and then converted again
    assert "vstore_f16_f32x16(data2+alu0, __builtin_convertvector(val2, f32x16));" in body, body
    got = _run(prog, "casts_to_half", level, ins, [F16] * len(srcs) + [dtypes.bfloat16])
    bf = storage(list(x32), dtypes.bfloat16).astype(np.uint32) << 16
    with np.errstate(over="ignore"):
        wants = [x32.astype(np.float16), x64.astype(np.float16), i32.astype(np.float16), i16.astype(np.float16),
                 bf.view(np.float32).astype(np.float16), boolv.astype(np.float16)]
        sq = x32.astype(np.float16) * x32.astype(np.float16)
    assert wants[1][0] == np.float16(1 + 2 ** -10)
    for src, g, w in zip(srcs, got[:-1], wants, strict=True):
        assert_same(g, w, F16, f"{src.name} -> float16 {level}")
    assert_same(got[-1], storage(list(sq.astype(np.float32)), dtypes.bfloat16), dtypes.bfloat16, "float16 -> bf16")


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4"])
def test_half_elementwise_kernel_takes_lanes(level: str) -> None:
    """(x * y + z).relu() in float16 through the whole pipeline: the cpu kernel is upcast into float32 lanes
    (lower.optimize._sixteen_bit_math), a register's worth (lower.optimize._vector_lanes), and its result is numpy's
    float16 arithmetic op by op."""
    from devices import get_device
    from lower.schedule import schedule
    from lower.stages import lower_kernel
    from tensor import Tensor

    _runs(level)
    n = 4096 + 5  # a ragged end: the last vector's lanes are gated
    x, y, z = A[:n], B[:n], A[::-1][:n].copy()
    with Context(CPU_TARGET=level):
        ins = [Tensor(v).realize() for v in (x, y, z)]
        t = (ins[0] * ins[1] + ins[2]).relu()
        dev = get_device("cpu")
        items, _ = schedule([t.uop])
        (it,) = [i for i in items if i.kind == "kernel"]
        target = dev.default_target()
        assert it.ast is not None
        src = dev.render(lower_kernel(it.ast, target, name=it.name), it.name, target)
        got = t.numpy()
    assert t.dtype is F16
    # a register of float32 lanes: 16 with AVX-512, 8 with AVX2 (16 there were two ymm registers that gcc split)
    lanes = 16 if level == "x86-64-v4" else 8
    assert "vh2f_f32x" in src and "vf16_round_f32x" in src and f"f32x{2 * lanes}" not in src, src[-3000:]
    with np.errstate(all="ignore"):
        s = x * y + z
        want = np.where(s <= 0, np.float16(0), s)
    assert_same(got, want, F16, f"(x*y+z).relu() {level}")


@pytest.mark.parametrize("level", ["x86-64-v3", "x86-64-v4", "aarch64"])
def test_streamed_half_output_and_aarch64(level: str) -> None:
    """A big float16 output streams its half bits (the store's conversion, then the non-temporal move of the
    uint16 vector); on aarch64 (C's conversions of `_Float16` vectors, run under qemu where installed) the lanes
    compute the same bits."""
    from devices import get_device
    from devices.cpu_cross import compile_emulated, cross_compiler, emulator
    from lower.stages import lower_kernel
    from tensor import Tensor

    target = cpu_target(level).with_(stream_bytes=4096, cores=2)  # a 4,096-half output streams
    if level == "aarch64":
        if cross_compiler(target) is None or emulator(target) is None:
            pytest.skip("gcc-aarch64-linux-gnu or qemu-user is not installed")
    else:
        _runs(level)
    n = 4096
    x, y, z = A[4096:4096 + n], B[4096:4096 + n], B[:n].copy()
    ins = [Tensor(v).realize() for v in (x, y, z)]
    items = [i for i in (ins[0] * ins[1] + ins[2]).schedule() if i.kind == "kernel"]
    (it,) = items
    assert it.ast is not None
    lin = lower_kernel(it.ast, target)
    src = get_device("cpu").render(lin, it.name)
    assert "vf16_round_f32x" in src and ("vstream_u16x" in src) == (level != "aarch64"), src[-2000:]
    bufs = {0: np.zeros(n, np.float16), **{k + 1: v.copy() for k, v in enumerate((x, y, z))}}
    if level == "aarch64":
        compile_emulated(lin, it.name, target)(bufs)
    else:
        get_device("cpu").compile(lin, it.name, target)(bufs)
    with np.errstate(all="ignore"):
        assert_same(bufs[0], x * y + z, F16, f"x*y+z {level}")
