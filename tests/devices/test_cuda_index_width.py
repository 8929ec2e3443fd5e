"""32-bit index arithmetic in CUDA kernels (devices.cuda_render.index_fits_int32): C ints where rewrite.interval
proves every index value fits int32, 64-bit otherwise, both compiled by nvcc and NVRTC for sm_80 and sm_90; and the
emulator's bounds check (devices.python.check_index_bounds) that witnesses those bounds."""

from __future__ import annotations

import os

import numpy as np
import pytest

from devices import get_device
from devices.base import gpu_target
from devices.cuda import DEVICE
from rewrite.dtype import dtypes
from rewrite.env import Context
from rewrite.errors import DeviceError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import buf, linear
from tests.devices.test_cuda_compile import COMPILERS, SMS


def _strided_copy(n_hi: int) -> UOp:
    """out[i] = inp[3 i + 1] for i < n, a variable in [1, n_hi] (inp 3 n + 1 long)."""
    n = UOp.variable("n", 1, n_hi)
    out, inp = buf(0, dtypes.float32, n), buf(1, dtypes.float32, n * 3 + 1)
    r = UOp.range(n, 0)
    st = out.index(r).store(inp.index(r * 3 + 1).load())
    return linear(out, inp, r, st, UOp(Ops.END, (st, r)))


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_index_arithmetic_is_32_bit_where_the_bounds_prove_it(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """Index values are C ints when every one is proven (rewrite.interval) to fit int32: the variable stays 64-bit
    in the signature and is narrowed once; one bound past int32 keeps the whole kernel 64-bit. Both compile, and
    the emulator (every index value checked against its bounds) computes numpy's result."""
    from devices.cuda_render import CUDA_ALU_OPS, index_fits_int32
    from devices.linear import analyze
    from devices.python import check_index_bounds

    small, big = _strided_copy(1 << 20), _strided_copy(1 << 30)  # 3 * 2**30 + 1 > 2**31 - 1
    assert index_fits_int32(analyze(small, "cuda", CUDA_ALU_OPS))
    assert not index_fits_int32(analyze(big, "cuda", CUDA_ALU_OPS))
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        k32, k64 = (DEVICE.compile(lin, name, gpu_target(sm)) for lin, name in ((small, "copy32"), (big, "copy64")))
    assert "const long long n_arg0)" in k32.src and "const int n = (int)n_arg0;" in k32.src
    assert "for (int ridx0 = 0; ridx0 < n; ridx0++)" in k32.src and k32.src.count("long long") == 1
    assert "for (long long ridx0 = 0; ridx0 < n; ridx0++)" in k64.src and "const long long n)" in k64.src
    assert "(int)" not in k64.src
    inp, out = np.arange(3 * 1000 + 1, dtype=np.float32), np.zeros(1000, np.float32)
    check_index_bounds(get_device("python").compile(small, "copy32"))({0: out, 1: inp}, {"n": 1000})
    np.testing.assert_array_equal(out, inp[1::3])


def test_the_emulators_bounds_check_catches_a_wrong_bound() -> None:
    """check_index_bounds is a real witness: an index node whose cached interval is made too small fails."""
    from devices.python import check_index_bounds

    lin = _strided_copy(64)
    k = get_device("python").compile(lin, "copy")
    mul = next(u for u in k.instrs if u.op is Ops.MUL)
    mul._mm = (0, 10)  # a wrong claim: 3 i reaches 189
    try:
        with pytest.raises(DeviceError, match=r"MUL took 12, outside its bounds \[0, 10\]"):
            check_index_bounds(k)({0: np.zeros(64, np.float32), 1: np.zeros(193, np.float32)}, {"n": 64})
    finally:
        mul._mm = None


