"""The cuda device on a GPU: hand-built GPU-shaped programs and Tensor graphs (elementwise, reductions, matmul,
softmax, conv2d, half/bfloat16, cross-device COPY, random shapes) checked against numpy. Every test is marked
`gpu` and skips only when no GPU is usable (no driver library, or the driver sees no device), with that reason.

Tensor tests run twice: under NOOPT (scalar kernels, one thread: the renderer and runtime alone) and with the
lowering's own choices for the GPU target (grid and block axes, shared memory)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.cuda import DEVICE, CudaBuffer
from devices.memory import from_bfloat16_bits, to_bfloat16_bits
from rewrite.dtype import dtypes
from rewrite.env import Context
from rewrite.errors import CudaError
from tensor import Tensor
from tests.devices.cuda_programs import big_shared, big_shared_expected, block_sum, grid_elementwise

_OK, _WHY = DEVICE.available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _OK, reason=f"no GPU: {_WHY}")]
LOWERINGS = ["noopt", "default"]


@pytest.fixture(params=LOWERINGS)
def lowering(request: pytest.FixtureRequest) -> Iterator[str]:
    with Context(NOOPT=int(request.param == "noopt")):
        yield request.param


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# ---------------------------------------------------------------- the device itself


def test_target_comes_from_the_driver() -> None:
    t = DEVICE.default_target()
    major, minor = DEVICE.driver.compute_capability()
    assert t.isa == f"sm_{major}{minor}" and t.cores == DEVICE.driver.attribute(16) and t.warp_size == 32


def test_a_failing_driver_call_names_the_call_and_the_error() -> None:
    with pytest.raises(CudaError, match=r"cuda: cuMemFree_v2 failed: CUDA_ERROR_\w+ \(\d+\)") as e:
        DEVICE.driver.free(8)  # not an allocation
    assert e.value.call == "cuMemFree_v2" and e.value.name.startswith("CUDA_ERROR_") and e.value.code > 0


def test_a_launch_beyond_the_block_limit_is_a_cuda_error() -> None:
    k = DEVICE.compile(grid_elementwise(4096, 2048), "too_wide")
    with pytest.raises(CudaError, match="cuLaunchKernel"):
        k({0: np.zeros(4096, np.float32), 1: np.ones(4096, np.float32), 2: np.ones(4096, np.float32)})


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64, dtypes.float16,
                                   dtypes.bfloat16])
def test_block_sum_with_shared_memory_barrier_and_atomics(dtype: object) -> None:
    blocks, threads = 6, 64
    k = DEVICE.compile(block_sum(blocks, threads, dtype), "block_sum")  # type: ignore[arg-type]
    x = rng().integers(-4, 5, blocks * threads)
    if dtype is dtypes.bfloat16:
        inp, total = to_bfloat16_bits(x.astype(np.float32)), to_bfloat16_bits(np.zeros(1, np.float32))
    else:
        npdt = DEVICE.np_dtype(dtype)  # type: ignore[arg-type]
        inp, total = x.astype(npdt), np.zeros(1, npdt)
    out = np.zeros(blocks, inp.dtype)
    k({0: out, 1: inp, 2: total})
    got = from_bfloat16_bits(out) if dtype is dtypes.bfloat16 else out
    gtot = from_bfloat16_bits(total) if dtype is dtypes.bfloat16 else total
    want = x.reshape(blocks, threads).sum(1)
    np.testing.assert_array_equal(got.astype(np.float64), want)  # small integers: exact in every dtype
    assert float(gtot[0]) == float(want.sum())


def test_grid_elementwise_on_device_buffers() -> None:
    n = 10_000
    k = DEVICE.compile(grid_elementwise(n, 128), "grid_ew")
    a, b = rng(1).standard_normal(n).astype(np.float32), rng(2).standard_normal(n).astype(np.float32)
    bufs = [DEVICE.alloc(n, dtypes.float32) for _ in range(3)]
    bufs[1][:] = a
    bufs[2][:] = b
    k(dict(enumerate(bufs)))
    np.testing.assert_array_equal(np.asarray(bufs[0]), a * b + a)
    assert k.time(dict(enumerate(bufs)), reps=3) > 0


def test_more_than_48k_of_shared_memory() -> None:
    k = DEVICE.compile(big_shared(), "big_shared")
    out = np.zeros(256, np.float32)
    k({0: out})
    np.testing.assert_array_equal(out, big_shared_expected())


# ---------------------------------------------------------------- Tensor on cuda


def test_tensor_moves_between_devices() -> None:
    x = rng().standard_normal((5, 7)).astype(np.float32)
    t = Tensor(x, device="cuda")
    assert t.device == "cuda"
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(Tensor(x).to("cuda").to("cpu").numpy(), x)
    np.testing.assert_array_equal((Tensor(x).to("cuda") + 1).to("cpu").numpy(), x + 1)


def test_elementwise(lowering: str) -> None:
    a, b, c = (rng(i).standard_normal((257, 129)).astype(np.float32) for i in range(3))
    ta, tb, tc = (Tensor(v, device="cuda") for v in (a, b, c))
    got = (((ta * tb + tc) * 0.5 - ta).relu() * tb + tc).numpy()
    want = np.maximum((a * b + c) * np.float32(0.5) - a, 0) * b + c
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ta.exp().numpy(), np.exp(a), rtol=1e-5)
    np.testing.assert_allclose(ta.abs().sqrt().numpy(), np.sqrt(np.abs(a)), rtol=1e-6)


def test_reductions(lowering: str) -> None:
    x = rng().standard_normal((300, 517)).astype(np.float32)
    t = Tensor(x, device="cuda")
    np.testing.assert_allclose(t.sum().numpy(), x.sum(dtype=np.float64), rtol=1e-4)
    np.testing.assert_allclose(t.sum(axis=1).numpy(), x.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(t.sum(axis=0).numpy(), x.sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(t.max(axis=1).numpy(), x.max(1))
    big = rng(3).standard_normal(1 << 20).astype(np.float32)
    np.testing.assert_allclose(Tensor(big, device="cuda").sum().numpy(), big.sum(dtype=np.float64), rtol=1e-4)


@pytest.mark.parametrize("n", [64, 129])
def test_matmul(lowering: str, n: int) -> None:
    a, b = rng(1).standard_normal((n, n + 3)).astype(np.float32), rng(2).standard_normal((n + 3, n)).astype(np.float32)
    got = (Tensor(a, device="cuda") @ Tensor(b, device="cuda")).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_softmax(lowering: str) -> None:
    x = rng().standard_normal((33, 1000)).astype(np.float32) * 4
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(Tensor(x, device="cuda").softmax(-1).numpy(), e / e.sum(-1, keepdims=True),
                               rtol=1e-5, atol=1e-7)


def test_conv2d(lowering: str) -> None:
    x, w = rng(1).standard_normal((2, 3, 12, 12)).astype(np.float32), rng(2).standard_normal((4, 3, 3, 3)).astype(
        np.float32)
    got = Tensor(x, device="cuda").conv2d(Tensor(w, device="cuda"), padding=1).numpy()
    want = Tensor(x).conv2d(Tensor(w), padding=1).numpy()  # the cpu device
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv2d_benchmark_shape(lowering: str) -> None:
    """conv2d (8,64,56,56) x (64,64,3,3), padding 1: the benchmark's case (blocks of 56 x 2 threads), against a
    float64 oracle; the cpu device's kernel for the same graph too."""
    x = rng(1).standard_normal((8, 64, 56, 56)).astype(np.float32)
    w = rng(2).standard_normal((64, 64, 3, 3)).astype(np.float32)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = sum(np.einsum("nchw,oc->nohw", xp[:, :, i:i + 56, j:j + 56], w[:, :, i, j].astype(np.float64))
               for i in range(3) for j in range(3))
    got = Tensor(x, device="cuda").conv2d(Tensor(w, device="cuda"), padding=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(Tensor(x).conv2d(Tensor(w), padding=1).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("groups", [1, 2])
def test_16_bit_convolutions_on_tensor_cores(dtype: str, groups: int) -> None:
    """A half / bfloat16 conv2d (and a grouped one) as the heuristics lower it, on the tensor cores as an implicit
    GEMM (lower.wmma.tc_flatten: 392 rows of n x ho x wo, k = 64 x 3 x 3 / groups), bit for bit against the exact
    oracle: the values are quarters, so every product and float32 sum is exact and only the output rounds."""
    from tests.tensor.fuzz_tc import _env

    r = rng(5)
    x = (r.integers(-8, 9, (2, 64, 14, 14)) / 4).astype(np.float32)
    w = (r.integers(-8, 9, (128, 64 // groups, 3, 3)) / 4).astype(np.float32)
    env = _env(dtype)
    want = env["R"](env["conv"](x.astype(np.float64), w.astype(np.float64), 1, 1, 1, groups)).astype(np.float32)
    xt, wt = (Tensor(v, device="cuda").cast(dtype) for v in (x, w))
    got = xt.conv2d(wt, padding=1, groups=groups).cast("float32").numpy()
    assert np.array_equal(got, want), f"{int((got != want).sum())} of {want.size} elements differ"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_floats_accumulate_in_float32(lowering: str, dtype: str) -> None:
    """matmul with K = 4096 and sums of 4096 values in float16/bfloat16: products and sums in float32, one rounding
    at the end, against a float64 oracle (benchmark: matmul 4096 had 16-bit products, an error of 0.05 / 0.43)."""
    from tests.tensor.test_half_accumulation import _check, _got, _rounded

    a, b = rng(1).standard_normal((64, 4096)), rng(2).standard_normal((4096, 64))
    ta, tb = (Tensor(v.astype(np.float32), device="cuda").cast(dtype) for v in (a, b))
    _check(_got(ta @ tb, dtype), _rounded(a, dtype) @ _rounded(b, dtype), dtype, 1e-3)
    u = rng(3).random((8, 4096))
    _check(_got(Tensor(u.astype(np.float32), device="cuda").cast(dtype).sum(1), dtype), _rounded(u, dtype).sum(1),
           dtype, 1e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_and_bfloat16(lowering: str, dtype: str) -> None:
    a, b = rng(1).standard_normal((48, 40)).astype(np.float32), rng(2).standard_normal((40, 24)).astype(np.float32)
    on = {d: (Tensor(a, device=d).cast(dtype), Tensor(b, device=d).cast(dtype)) for d in ("cuda", "cpu")}
    for f in (lambda x, y: x @ y, lambda x, y: (x[:40, :24] * y + 1).exp()):
        got, want = (f(*on[d]).cast("float32").numpy() for d in ("cuda", "cpu"))
        np.testing.assert_allclose(got, want, rtol=2e-2 if dtype == "bfloat16" else 2e-3, atol=1e-2)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 70), st.integers(1, 70), st.sampled_from(["sum0", "sum1", "add", "max1"]))
def test_random_shapes(r: int, c: int, op: str) -> None:
    x = rng(r * 100 + c).standard_normal((r, c)).astype(np.float32)
    y = rng(c).standard_normal((1, c)).astype(np.float32)
    t = Tensor(x, device="cuda")
    got = {"sum0": lambda: t.sum(0), "sum1": lambda: t.sum(1), "add": lambda: t + Tensor(y, device="cuda"),
           "max1": lambda: t.max(axis=1)}[op]().numpy()
    want = {"sum0": lambda: x.sum(0), "sum1": lambda: x.sum(1), "add": lambda: x + y, "max1": lambda: x.max(1)}[op]()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_device_buffers_are_cuda_buffers() -> None:
    t = (Tensor(np.ones(8, np.float32), device="cuda") * 3).realize()
    from lower import buffers

    raw = buffers.lookup(t.uop)
    assert isinstance(raw, CudaBuffer) and raw.nbytes == 32
    np.testing.assert_array_equal(t.numpy(), np.full(8, 3, np.float32))
