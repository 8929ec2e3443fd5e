"""Vector axes whose size is no multiple of the vector lanes (issue 9's cliff: matmul 1021 or 1023 ran as a scalar
loop at 1.1 GFLOP/s). The optimizer pads such an axis (PADTO) and upcasts it all the same: the register tile of a
sum of products (lower.opt_tiles.ragged_columns), an output computed with a transcendental and a reduction
(lower.optimize.hand_coded); the ragged last vector's loads and stores are masked (devices.c_masked). Checked:
the opts and the generated C (vector FMAs, no lane-by-lane loads), and the results against numpy and the python
reference device, on the host's target and on x86-64-v2 (SSE: the portable masked forms)."""

from __future__ import annotations

import numpy as np
import pytest

from devices import get_device
from devices.base import CPU_TARGET_NAMES, cpu_target
from lower import schedule
from lower.opt_tiles import RAGGED_WASTE, ragged_columns, tile_shape
from lower.optimize import Opt, OptOps, hand_coded
from lower.stages import lower_kernel
from rewrite import AxisType
from rewrite.env import Context
from tensor import Tensor

LEVELS = ["native", "x86-64-v2"]


@pytest.mark.parametrize("level", CPU_TARGET_NAMES)
def test_ragged_columns_whole_tiles(level: str) -> None:
    """A column count the tile divides is left alone; one that is no multiple of the lanes is padded to whole
    tiles; one of whole vectors only where the padding is small; every tile shape the target has fits."""
    target = cpu_target(level)
    for width in {target.lanes(s) for s in (2, 4, 8)}:
        for vecs in (1, 2):
            cols = vecs * width
            for n in range(1, 6 * cols + 2):
                got = ragged_columns(n, width, vecs)
                padded = -(-n // cols) * cols
                if n % cols == 0:
                    assert got == n
                elif n % width:
                    assert got == padded, (level, width, vecs, n, got)
                else:
                    assert got == (padded if (padded - n) * RAGGED_WASTE <= padded else None)
        for n in range(2, 200):
            assert tile_shape(64, n, width, target) is not None, (level, width, n)


def _product(out: Tensor):
    items, _ = schedule([out.uop])
    (it,) = [i for i in items if i.kind == "kernel" and i.name.startswith("r_")]
    return it


def _source(it, target, opts: list[Opt]) -> str:
    return get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "k", target)


def _check_vector_tile(it, target, ragged: bool) -> None:
    """The product kernel gets a register tile (UPCAST splits; a PADTO of its columns where they are ragged) and
    its C multiplies whole vectors: vector accumulators, no load gathered lane by lane."""
    opts = hand_coded(it.ast, target)
    assert any(o.op is OptOps.SPLIT and o.split_arg[1] is AxisType.UPCAST for o in opts), opts
    assert any(o.op is OptOps.PADTO and isinstance(o.arg, int) for o in opts) == ragged, opts
    src = _source(it, target, opts)
    width = target.lanes(4)
    assert f"f32x{width} acc0;" in src and f"f32x{width} acc3;" in src, src[-3000:]  # vector accumulators
    assert "lane_a" not in src and "lane_i" not in src, src[-3000:]  # no load gated or gathered lane by lane


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("shape", [(64, 96, 1021), (40, 70, 513), (33, 65, 7), (37, 64, 33), (16, 200, 1000)])
def test_ragged_matmul_vectorized_and_numpy(level: str, shape: tuple[int, int, int]) -> None:
    target = cpu_target(level)
    m, k, n = shape
    rng = np.random.default_rng(n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    with Context(CPU_TARGET=level):
        out = Tensor(a) @ Tensor(b)
        _check_vector_tile(_product(out), target, ragged=n % target.lanes(4) != 0)
        if not target.runs_here:
            pytest.skip(f"{level} code does not run on this host")
        got = out.numpy()
        kernels = [i for i in schedule([out.uop])[0] if i.kind == "kernel"]
    assert len(kernels) <= 2, [i.name for i in kernels]  # the product, and b's panel copy where it pays
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", LEVELS)
def test_ragged_packed_matmul_reads_panels_unmasked(level: str) -> None:
    """b packed into panels padded with zero columns: the tile's loads stay inside the copy, so PADTO reads them
    ungated (no masked move in the inner loop); only the stores of the last vector are masked."""
    target = cpu_target(level)
    rng = np.random.default_rng(1)
    # rows of 1029 floats (over 4 KiB) are packed on any host; narrower ones only past its L2 (tensor.nn._panels)
    a, b = rng.standard_normal((64, 300)).astype(np.float32), rng.standard_normal((300, 1029)).astype(np.float32)
    with Context(CPU_TARGET=level):
        out = Tensor(a) @ Tensor(b)
        kernels = [i for i in schedule([out.uop])[0] if i.kind == "kernel"]
        assert len(kernels) == 2, [i.name for i in kernels]  # the panel copy, the product
        it = _product(out)
        src = _source(it, target, hand_coded(it.ast, target))
        assert "vmload_" not in src.split("void k(")[1] and "vall_" in src
        if not target.runs_here:
            pytest.skip(f"{level} code does not run on this host")
        got = out.numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(16, 64, 17), (17, 65, 19), (20, 70, 33)])
def test_ragged_matmul_matches_python_device(shape: tuple[int, int, int]) -> None:
    """The cpu product with its masked edge equals the python reference device's, for integers exactly, and the
    same lowered program (opts included) gives the same numbers on both devices."""
    m, k, n = shape
    rng = np.random.default_rng(m * k * n)
    a = rng.integers(-4, 5, (m, k)).astype(np.int32)
    b = rng.integers(-4, 5, (k, n)).astype(np.int32)
    got = (Tensor(a) @ Tensor(b)).numpy()
    ref = (Tensor(a, device="python") @ Tensor(b, device="python")).numpy()
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    af = rng.standard_normal((m, k)).astype(np.float32)
    bf = rng.standard_normal((k, n)).astype(np.float32)
    it = _product(Tensor(af) @ Tensor(bf))
    target = cpu_target("native")
    opts = hand_coded(it.ast, target)
    assert any(o.op is OptOps.PADTO and isinstance(o.arg, int) for o in opts), opts
    outs = {}
    for device in ("cpu", "python"):
        dev = get_device(device)
        kern = dev.compile(lower_kernel(it.ast, target, opts=opts), it.name,
                           target if device == "cpu" else dev.default_target())
        out = np.full(m * n, 7.0, np.float32)
        kern({0: out, 1: af.reshape(-1).copy(), 2: bf.reshape(-1).copy()})
        outs[device] = out
    np.testing.assert_allclose(outs["cpu"], outs["python"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs["cpu"].reshape(m, n), af.astype(np.float64) @ bf, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("level", LEVELS)
def test_ragged_hand_written_sum(level: str) -> None:
    """(a[:, :, None] * b[None]).sum(1) with 1021 columns: the same register tile as matmul's, masked at the edge
    (it ran as a scalar loop: 1.5 GFLOP/s against ~40 now for 256x256x1021)."""
    target = cpu_target(level)
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((64, 1021)).astype(np.float32)
    with Context(CPU_TARGET=level):
        out = (Tensor(a)[:, :, None] * Tensor(b)[None]).sum(1)
        _check_vector_tile(_product(out), target, ragged=True)
        if not target.runs_here:
            pytest.skip(f"{level} code does not run on this host")
        got = out.numpy()
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def _only_kernel(out: Tensor):
    (it,) = [i for i in schedule([out.uop])[0] if i.kind == "kernel"]
    return it


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("cols", ["1021", "one vector and 5"])
def test_ragged_elementwise_and_reduction(level: str, cols: str) -> None:
    """exp over (33, n) (an output with a transcendental: upcast into lanes) and a row sum over n (a reduction
    unrolled into lanes): the ragged axis padded and upcast, masked vector moves at its edge, no lane loop; the
    results equal numpy's and the python device's. (An axis shorter than one vector is not padded.)"""
    target = cpu_target(level)
    lanes = target.lanes(4)
    n = 1021 if cols == "1021" else lanes + 5
    rng = np.random.default_rng(n)
    x = rng.standard_normal((33, n)).astype(np.float32)
    for f, want, kind in ((lambda t: t.exp(), np.exp(x.astype(np.float64)), AxisType.UPCAST),
                          (lambda t: t.sum(1), x.astype(np.float64).sum(1), AxisType.UNROLL)):
        with Context(CPU_TARGET=level):
            out = f(Tensor(x))
            it = _only_kernel(out)
            opts = hand_coded(it.ast, target)
            assert Opt(OptOps.PADTO, 1, lanes) in opts and \
                any(o.op is OptOps.SPLIT and o.split_arg[1] is kind for o in opts), opts
            src = _source(it, target, opts)
            assert "vmload_" in src and "lane_a" not in src and f"f32x{lanes}" in src, src[-3000:]
            if not target.runs_here:
                continue
            got = out.numpy()
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)
        np.testing.assert_allclose(got, f(Tensor(x, device="python")).numpy(), rtol=2e-5, atol=1e-5)


def test_ragged_columns_gradient() -> None:
    """A ragged b read through its padded panel copy is differentiable: the gradients are numpy's, and the
    gradient of a reads b itself, not the copy (rules.gradients sees through the pad and the shrink)."""
    from rewrite import Ops

    rng = np.random.default_rng(7)
    a = rng.standard_normal((32, 96)).astype(np.float32)
    b = rng.standard_normal((1021, 96)).astype(np.float32)
    g = rng.standard_normal((32, 1021)).astype(np.float32)
    ta, tb = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    out = ta @ tb.T
    assert any(u.op is Ops.CONTIGUOUS for u in out.uop.toposort())  # the forward packs
    (out * Tensor(g)).sum().backward()
    assert ta.grad is not None and tb.grad is not None
    fwd = set(out.uop.toposort())

    def reads_copy(u) -> bool:
        while u.op in (Ops.EXPAND, Ops.RESHAPE, Ops.PERMUTE, Ops.CAST, Ops.SHRINK):
            u = u.src[0]
        return u.op is Ops.CONTIGUOUS

    products = [u for u in ta.grad.uop.toposort() if u.op is Ops.MUL and u not in fwd]
    assert products and not any(reads_copy(s) for u in products for s in u.src)
    np.testing.assert_allclose(ta.grad.numpy(), g @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tb.grad.numpy(), (a.T @ g).T, rtol=1e-4, atol=1e-4)
