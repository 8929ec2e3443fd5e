"""16-bit float matmuls and convolutions on a CPU read float32 copies of their operands (tensor.nn._widened): the
products were float32 already, but a half or bfloat16 load converted inside the product loop kept the kernel off
vector registers (matmul 1024 ran at 4.5 GFLOP/s in half, 350 after, on a 2-core AVX-512 Xeon). The results
must be what they were: bit for bit against an exact oracle (values in quarters: every product and float32 sum is
exact, only the output rounds). A matrix-vector product, which is memory-bound, and GPU targets (whose tensor
cores take 16-bit operands) keep reading the 16-bit operands."""

from __future__ import annotations

import numpy as np
import pytest

from lower.schedule import schedule
from rewrite import Ops
from rewrite.env import Context
from tensor import Tensor
from tests.tensor.fuzz_tc import _env


def _quarters(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(-8, 9, shape) / 4).astype(np.float32)


def _product_reads(items: list) -> list[str]:
    """The dtypes of the buffers the reduce kernel reads."""
    (red,) = [it for it in items if it.kind == "kernel" and any(u.op is Ops.REDUCE for u in it.ast.toposort())]
    return [b.dtype.name for b in red.bufs[1:]]


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(64, 96, 80), (3, 40, 72, 48), (130, 33, 70)])
def test_matmul_reads_float32_copies_and_is_exact(dt: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    *batch, m, k, n = shape
    av, bv = _quarters(rng, (*batch, m, k)), _quarters(rng, (k, n))
    a, b = Tensor(av).cast(dt).realize(), Tensor(bv).cast(dt).realize()
    out = a @ b
    items, _ = schedule([out.uop])
    assert set(_product_reads(items)) == {"float32"}
    want = _env(dt)["R"](av.astype(np.float64) @ bv).astype(np.float32)
    assert np.array_equal(out.cast("float32").numpy(), want)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("groups", [1, 2])
def test_conv_reads_float32_copies_and_is_exact(dt: str, groups: int) -> None:
    rng = np.random.default_rng(groups)
    xv, wv = _quarters(rng, (2, 16, 12, 12)), _quarters(rng, (32, 16 // groups, 3, 3))
    x, w = Tensor(xv).cast(dt).realize(), Tensor(wv).cast(dt).realize()
    out = x.conv2d(w, padding=1, groups=groups)
    items, _ = schedule([out.uop])
    assert set(_product_reads(items)) == {"float32"}
    env = _env(dt)
    want = env["R"](env["conv"](xv.astype(np.float64), wv.astype(np.float64), 1, 1, 1, groups)).astype(np.float32)
    assert np.array_equal(out.cast("float32").numpy(), want)


def test_gradients_through_the_copies() -> None:
    """The copies are casts and CONTIGUOUS: gradients flow through them to the 16-bit leaves, in their dtype."""
    rng = np.random.default_rng(3)
    av, bv, gv = _quarters(rng, (32, 48)), _quarters(rng, (48, 40)), _quarters(rng, (32, 40))
    a = Tensor(av).cast("bfloat16").realize().requires_grad_()
    b = Tensor(bv).cast("bfloat16").realize().requires_grad_()
    (a @ b).backward(Tensor(gv).cast("bfloat16"))
    r = _env("bfloat16")["R"]
    assert a.grad is not None and b.grad is not None and a.grad.dtype.name == "bfloat16"
    assert np.array_equal(a.grad.cast("float32").numpy(), r(gv.astype(np.float64) @ bv.T).astype(np.float32))
    assert np.array_equal(b.grad.cast("float32").numpy(), r(av.astype(np.float64).T @ gv).astype(np.float32))


def test_a_matrix_vector_product_and_gpu_targets_read_16_bit_operands() -> None:
    rng = np.random.default_rng(4)
    a = Tensor(_quarters(rng, (1, 512))).cast("float16").realize()
    b = Tensor(_quarters(rng, (512, 256))).cast("float16").realize()
    items, _ = schedule([(a @ b).uop])
    assert "float16" in _product_reads(items)
    with Context(PYTHON_TARGET="sm_90"):
        a2 = Tensor.empty(128, 128, dtype="float16", device="python").realize()
        b2 = Tensor.empty(128, 128, dtype="float16", device="python").realize()
        items, _ = schedule([(a2 @ b2).uop])
    assert set(_product_reads(items)) == {"float16"}


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_softmax_of_16_bit_floats_is_float32_math_rounded_once(dt: str) -> None:
    """softmax and log_softmax of half / bfloat16 compute in float32 and round once (torch's CPU and CUDA kernels
    do the same): within one ulp of the float64 result of the 16-bit inputs; and the cpu kernel converts whole
    vectors (F16C's vcvt into float16's float32 lanes, bfloat16's float32 lanes) instead of running lane by lane."""
    from devices import get_device
    from lower.stages import lower_kernel

    rng = np.random.default_rng(5)
    xv = (rng.standard_normal((6, 700)) * 4).astype(np.float32)
    x = Tensor(xv).cast(dt).realize()
    r = _env(dt)["R"]
    xs = r(xv.astype(np.float64))
    e = np.exp(xs - xs.max(-1, keepdims=True))
    for got_t, want in ((x.softmax(-1), e / e.sum(-1, keepdims=True)),
                        (x.log_softmax(-1), np.log(e / e.sum(-1, keepdims=True)))):
        assert got_t.dtype.name == dt
        got = got_t.cast("float32").numpy().astype(np.float64)
        ulp = 2.0 ** (-10 if dt == "float16" else -7)
        assert np.all(np.abs(got - want) <= ulp * np.abs(want) + 2.0 ** -24), float(np.abs(got - want).max())
    dev = get_device("cpu")
    items, _ = schedule([x.softmax(-1).uop])
    (it,) = [i for i in items if i.kind == "kernel"]
    src = dev.render(lower_kernel(it.ast, dev.default_target(), name=it.name), it.name, dev.default_target())
    assert ("vload_f16_" in src) if dt == "float16" else ("vload_bf16" in src), src[:2000]
