"""TRUNC on float vectors (devices.c_vround): the x86 rounding builtin where the vector is 16 or 32 bytes of float32
or float64 lanes, the lane loop otherwise; bit for bit numpy.trunc either way, on the host and on the cpu targets
with and without AVX."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from devices.cpu import DEVICE as CPU
from devices.python import DEVICE as PY
from rewrite.dtype import DType, dtypes
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import assert_same, vector_multi_output

VALUES = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.5, -0.5, 0.75, 8388608.5, -8388609.0, 1e30, -1e-30, 2.999999,
          -7.25, 123456.789]


def _trunc_kernel(dt: DType, lanes: int) -> UOp:
    return vector_multi_output([lambda v, s: UOp(Ops.TRUNC, (v[0],))], [dt], [dt], lanes, len(VALUES) // lanes)


def _run(k: object, dt: DType) -> np.ndarray:
    npdt = np.float32 if dt is dtypes.float32 else np.float64
    bufs = {100: np.array(VALUES, npdt), 0: np.zeros(len(VALUES), npdt)}
    k(bufs)  # type: ignore[operator]
    return bufs[0]


@pytest.mark.parametrize(("dt", "lanes", "builtin"), [
    (dtypes.float32, 4, "__builtin_ia32_roundps("), (dtypes.float32, 8, "__builtin_ia32_roundps256("),
    (dtypes.float64, 2, "__builtin_ia32_roundpd("), (dtypes.float64, 4, "__builtin_ia32_roundpd256("),
    (dtypes.float32, 16, None), (dtypes.float64, 8, None)])
def test_vector_trunc_is_numpy_trunc(dt: DType, lanes: int, builtin: str | None) -> None:
    prog = _trunc_kernel(dt, lanes)
    src = CPU.render(prog, f"trunc_{lanes}")
    if builtin is None:  # wider than a register: the lane loop of truncf/trunc calls
        assert "vtrunc_" not in src and "lane_l" in src, src
    else:
        assert builtin in src and f"vtrunc_{'f32' if dt is dtypes.float32 else 'f64'}x{lanes}(" in src, src
        assert "lane_l" not in src.split("#else")[-1].split("\nvoid ")[-1], src  # no lane loop in the kernel itself
    want = np.trunc(np.array(VALUES, np.float32 if dt is dtypes.float32 else np.float64))
    got = _run(CPU.compile(prog, f"trunc_{lanes}"), dt)
    assert_same(got, want, dt, f"cpu trunc {dt.name} x{lanes}")
    assert_same(_run(PY.compile(prog), dt), want, dt, f"python trunc {dt.name} x{lanes}")
    assert np.signbit(got[VALUES.index(-0.5)])  # -0.5 truncates to -0.0


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction-set levels")
@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_vector_trunc_on_x86_levels(level: str) -> None:
    """x86-64-v2 has SSE4.1 but not AVX: its 32-byte vectors take the lane loop inside the helper, the 16-byte ones
    the builtin; x86-64-v3 has both. Either way the result is numpy.trunc."""
    with Context(CPU_TARGET=level):
        for dt, lanes in ((dtypes.float32, 8), (dtypes.float32, 4), (dtypes.float64, 4)):
            prog = _trunc_kernel(dt, lanes)
            want = np.trunc(np.array(VALUES, np.float32 if dt is dtypes.float32 else np.float64))
            assert_same(_run(CPU.compile(prog, f"trunc_{level}_{lanes}".replace("-", "_")), dt), want, dt, level)
