"""TRUNC and SQRT on float vectors (devices.c_vround): the x86 builtin where the vector is 16, 32 or 64 bytes of
float32 or float64 lanes, the lane loop otherwise; bit for bit numpy.trunc / numpy.sqrt either way, on the host and
on the cpu targets with and without AVX (and AVX-512 where the host has it)."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from devices.base import cpu_target
from devices.cpu import DEVICE as CPU
from devices.python import DEVICE as PY
from rewrite.dtype import DType, dtypes
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import assert_same, vector_multi_output

VALUES = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.5, -0.5, 0.75, 8388608.5, -8388609.0, 1e30, -1e-30, 2.999999,
          -7.25, 123456.789, 2.0, 1e-40, 3.4e38, 0.1, -1.0, 7.0, 1e-3, 65504.0, 0.333, 9.0, 1e10, 4.0, -3.0, 0.5, 25.0,
          1e-20]
_NP = {Ops.TRUNC: np.trunc, Ops.SQRT: np.sqrt}
_NAME = {Ops.TRUNC: "trunc", Ops.SQRT: "sqrt"}


def _kernel(o: Ops, dt: DType, lanes: int) -> UOp:
    return vector_multi_output([lambda v, s: UOp(o, (v[0],))], [dt], [dt], lanes, len(VALUES) // lanes)


def _np(dt: DType) -> type:
    return np.float32 if dt is dtypes.float32 else np.float64


def _run(k: object, dt: DType) -> np.ndarray:
    bufs = {100: np.array(VALUES, _np(dt)), 0: np.zeros(len(VALUES), _np(dt))}
    k(bufs)  # type: ignore[operator]
    return bufs[0]


def _want(o: Ops, dt: DType) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return _NP[o](np.array(VALUES, _np(dt)))


# by (op, vector bytes), for float32 lanes (float64: "pd" for "ps")
_BUILTINS = {(Ops.TRUNC, 16): "__builtin_ia32_roundps(", (Ops.TRUNC, 32): "__builtin_ia32_roundps256(",
             (Ops.TRUNC, 64): "__builtin_ia32_rndscaleps_mask(", (Ops.SQRT, 16): "__builtin_ia32_sqrtps(",
             (Ops.SQRT, 32): "__builtin_ia32_sqrtps256(", (Ops.SQRT, 64): "__builtin_ia32_sqrtps512_mask("}


@pytest.mark.parametrize("o", [Ops.TRUNC, Ops.SQRT])
@pytest.mark.parametrize(("dt", "lanes"), [(dtypes.float32, 4), (dtypes.float32, 8), (dtypes.float32, 16),
                                           (dtypes.float64, 2), (dtypes.float64, 4), (dtypes.float64, 8),
                                           (dtypes.float32, 32)])
def test_vector_round_is_numpy(o: Ops, dt: DType, lanes: int) -> None:
    prog = _kernel(o, dt, lanes)
    name = f"{_NAME[o]}_{lanes}"
    src = CPU.render(prog, name)
    helper = f"v{_NAME[o]}_{'f32' if dt is dtypes.float32 else 'f64'}x{lanes}("
    if lanes * dt.itemsize > 64:  # wider than any register: the lane loop of the libm calls
        assert helper not in src and "lane_l" in src, src
    else:
        builtin = _BUILTINS[(o, lanes * dt.itemsize)]
        assert (builtin if dt is dtypes.float32 else builtin.replace("ps", "pd")) in src and helper in src, src
        assert "lane_l" not in src.split("#else")[-1].split("\nvoid ")[-1], src  # no lane loop in the kernel itself
    want = _want(o, dt)
    got = _run(CPU.compile(prog, name), dt)
    assert_same(got, want, dt, f"cpu {_NAME[o]} {dt.name} x{lanes}")
    assert_same(_run(PY.compile(prog), dt), want, dt, f"python {_NAME[o]} {dt.name} x{lanes}")
    if o is Ops.TRUNC:
        assert np.signbit(got[VALUES.index(-0.5)])  # -0.5 truncates to -0.0


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction-set levels")
@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_vector_round_on_x86_levels(level: str) -> None:
    """x86-64-v2 has SSE4.1 but not AVX: its 32- and 64-byte vectors take the lane loop inside the helper, the
    16-byte ones the builtin; x86-64-v3 has all but the 64-byte ones, x86-64-v4 all three (run where the host has
    AVX-512). Either way the result is numpy's."""
    if not cpu_target(level).runs_here:
        pytest.skip(f"this host does not run {level}")
    with Context(CPU_TARGET=level):
        for o in (Ops.TRUNC, Ops.SQRT):
            for dt, lanes in ((dtypes.float32, 16), (dtypes.float32, 8), (dtypes.float32, 4), (dtypes.float64, 4),
                              (dtypes.float64, 8)):
                prog = _kernel(o, dt, lanes)
                got = _run(CPU.compile(prog, f"{_NAME[o]}_{level}_{lanes}".replace("-", "_")), dt)
                assert_same(got, _want(o, dt), dt, f"{level} {_NAME[o]} {dt.name} x{lanes}")


HALF_VALUES = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0, -2.5, 65504.0, 65519.0, 65520.0, -70000.0, 6e-8, 3e-8, -1e-7,
               6.1e-5, 1.0009765625, 1.00048828125, 1.00146484375, 0.1, -0.3, 2049.0, 2051.0, 1e30, -1e-30, 3.14159,
               1e-4, 5e-5, 12345.678, -0.00001, 7.0, 0.5, 33.3]


@pytest.mark.parametrize("level", ["native", "x86-64-v2", "x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_vector_half_casts_are_numpy(level: str, lanes: int) -> None:
    """float32 -> float16 -> float32 lanes: float16 lanes are float32 registers, so the cast is `vf16_round_` and
    the float16 store `vstore_f16_` (devices.c_half: VCVTPS2PH / VCVTPH2PS with F16C or AVX-512, the generic
    conversion elsewhere): numpy's rounding (nearest even, overflow to inf, subnormal halves), nan kept."""
    if level != "native" and not cpu_target(level).runs_here:
        pytest.skip(f"this host does not run {level}")
    f16 = dtypes.float16
    prog = vector_multi_output([lambda v, s: v[0].cast(f16), lambda v, s: v[0].cast(f16).cast(dtypes.float32)],
                               [f16, dtypes.float32], [dtypes.float32], lanes, len(HALF_VALUES) // lanes)
    src = CPU.render(prog, f"half_{lanes}")
    assert f"vf16_round_f32x{lanes}(" in src and f"vstore_f16_f32x{lanes}(" in src, src
    assert "__builtin_ia32_vcvtps2ph" in src and "__builtin_ia32_vcvtph2ps" in src, src
    x = np.array(HALF_VALUES, np.float32)
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16)
    for dev in ("cpu", "python"):
        bufs = {100: x.copy(), 0: np.zeros(len(x), np.float16), 1: np.zeros(len(x), np.float32)}
        if dev == "cpu":
            with Context(CPU_TARGET=level):
                CPU.compile(prog, f"half_{level}_{lanes}".replace("-", "_"))(bufs)
        else:
            PY.compile(prog)(bufs)
        assert_same(bufs[0], want16, f16, f"{dev} {level} float32 -> float16 x{lanes}")
        assert_same(bufs[1], want16.astype(np.float32), dtypes.float32, f"{dev} {level} float16 -> float32 x{lanes}")
