"""A select that is a min or a max (WHERE(p < q, p, q), WHERE(p < q, q, p)) on float vectors: one x86 MINPS/MAXPS
(devices.c_vround.minmax_helper) where the vector is 16, 32 or 64 bytes of float32 or float64 lanes, the bit-select
elsewhere; bit for bit the select (numpy.where of the comparison) either way, nan lanes and +-0 included, on the
host, on the cpu targets with and without AVX (and AVX-512 where the host has it), and on the python device."""

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

NAN, INF = np.nan, np.inf
PAIRS = [(NAN, 1.0), (1.0, NAN), (NAN, NAN), (-0.0, 0.0), (0.0, -0.0), (INF, -INF), (-INF, 2.0), (3.0, 3.0),
         (1.5, -2.5), (-7.25, 0.75), (1e30, 1e-30), (0.5, 0.25), (0.25, 0.5), (-1.0, -2.0), (2.0, 9.0), (1e-40, 0.0)]
A = [a for a, _ in PAIRS] * 2
B = [b for _, b in PAIRS] * 2
CLAMP = 0.5


def _fns(dt: DType) -> list:
    c = UOp.const(CLAMP, dt)  # one node: the comparison's operand and the select's
    two = UOp.const(2.0, dt)
    return [lambda v, s: (v[0] < v[1]).where(v[0], v[1]),  # min
            lambda v, s: (v[0] < v[1]).where(v[1], v[0]),  # max
            lambda v, s: UOp(Ops.WHERE, (UOp(Ops.CMPLT, (v[0], c)), c, v[0])),  # clamp below at 0.5: max
            lambda v, s: UOp(Ops.WHERE, (UOp(Ops.CMPLT, (c, v[0])), c, v[0])),  # clamp above at 0.5: min
            lambda v, s: (v[0] < v[1]).where(v[0], UOp(Ops.MUL, (v[0], two)))]  # not a min or max: a plain select


def _kernel(dt: DType, lanes: int) -> UOp:
    return vector_multi_output(_fns(dt), [dt] * 5, [dt, dt], lanes, len(A) // lanes)


def _np(dt: DType) -> type:
    return np.float32 if dt is dtypes.float32 else np.float64


def _want(dt: DType) -> list[np.ndarray]:
    a, b = np.array(A, _np(dt)), np.array(B, _np(dt))
    c = _np(dt)(CLAMP)
    with np.errstate(invalid="ignore"):
        return [np.where(a < b, a, b), np.where(a < b, b, a), np.where(a < c, c, a), np.where(c < a, c, a),
                np.where(a < b, a, a * 2)]


def _run(k: object, dt: DType) -> list[np.ndarray]:
    bufs = {100: np.array(A, _np(dt)), 101: np.array(B, _np(dt)), **{i: np.zeros(len(A), _np(dt)) for i in range(5)}}
    k(bufs)  # type: ignore[operator]
    return [bufs[i] for i in range(5)]


def _check(got: list[np.ndarray], dt: DType, what: str) -> None:
    for i, (g, w) in enumerate(zip(got, _want(dt), strict=True)):
        assert_same(g, w, dt, f"{what} output {i}")
        assert (np.signbit(g) == np.signbit(w)).all(), f"{what} output {i}: the sign of a zero differs"


@pytest.mark.parametrize(("dt", "lanes"), [(dtypes.float32, 4), (dtypes.float32, 8), (dtypes.float32, 16),
                                           (dtypes.float64, 2), (dtypes.float64, 4), (dtypes.float64, 8),
                                           (dtypes.float32, 32)])
def test_minmax_select_is_the_select(dt: DType, lanes: int) -> None:
    prog = _kernel(dt, lanes)
    name = f"minmax_{dt.name}_{lanes}"
    src = CPU.render(prog, name)
    t = f"{'f32' if dt is dtypes.float32 else 'f64'}x{lanes}"
    body = src.split("\nvoid ")[-1]
    if lanes * dt.itemsize > 64:  # wider than any register: the plain bit-select
        assert "vminsel_" not in src and "vmaxsel_" not in src, src
    else:
        assert body.count(f"vminsel_{t}(") == 2 and body.count(f"vmaxsel_{t}(") == 2, src
        assert body.count(f"vsel_{t}(") == 1, src  # the select that is neither
        s = "ps" if dt is dtypes.float32 else "pd"
        size = {16: "", 32: "256", 64: "512_mask"}[lanes * dt.itemsize]
        assert f"__builtin_ia32_min{s}{size}(" in src and f"__builtin_ia32_max{s}{size}(" in src, src
    _check(_run(CPU.compile(prog, name), dt), dt, f"cpu {name}")
    _check(_run(PY.compile(prog), dt), dt, f"python {name}")


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction-set levels")
@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_minmax_select_on_x86_levels(level: str) -> None:
    """x86-64-v2 has SSE but not AVX: its 32- and 64-byte vectors take the bit-select inside the helper, the 16-byte
    ones the builtin; x86-64-v3 has all but the 64-byte ones, x86-64-v4 all three. Either way the select's result."""
    if not cpu_target(level).runs_here:
        pytest.skip(f"this host does not run {level}")
    with Context(CPU_TARGET=level):
        for dt, lanes in ((dtypes.float32, 16), (dtypes.float32, 8), (dtypes.float32, 4), (dtypes.float64, 4),
                          (dtypes.float64, 8), (dtypes.float64, 2)):
            name = f"minmax_{level}_{dt.name}_{lanes}".replace("-", "_")
            _check(_run(CPU.compile(_kernel(dt, lanes), name), dt), dt, name)
