"""matmul / @ / dot (batched, 1-D, dtypes), conv2d (stride, padding, dilation, groups), max/avg pooling and the
activations, against numpy and direct loop references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewrite.dtype import dtypes
from rewrite.errors import ShapeError
from tensor import Tensor
from tests.tensor.util import arrays, close

SET = settings(max_examples=20, deadline=None)


# ---------------------------------------------------------------- matmul


@SET
@given(st.data())
def test_matmul_batched_and_1d(data: st.DataObject) -> None:
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    ba = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    bb = tuple(1 if data.draw(st.booleans()) else d for d in ba)[data.draw(st.integers(0, len(ba))):]
    a_shape = (*ba, m, k) if data.draw(st.booleans()) else (k,)
    b_shape = (*bb, k, n) if data.draw(st.booleans()) else (k,)
    a = data.draw(arrays("float32", a_shape, lo=-3, hi=3))
    b = data.draw(arrays("float32", b_shape, lo=-3, hi=3))
    close(Tensor(a) @ Tensor(b), np.matmul(a, b), rtol=1e-5, atol=1e-5)
    close(Tensor(a).dot(Tensor(b)), np.matmul(a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", ["int32", "int8", "float16", "float64", "bool", "uint8"])
def test_matmul_dtypes(dt: str) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (3, 5)).astype(dt)
    b = rng.integers(-3, 4, (5, 2)).astype(dt)
    r = Tensor(a) @ Tensor(b)
    assert r.dtype.name == dt
    with np.errstate(over="ignore"):
        close(r, a @ b)


def test_matmul_mixed_dtypes_and_rmatmul() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.ones((3, 2), np.float32)
    assert (Tensor(a) @ Tensor(b)).dtype is dtypes.float32
    close(Tensor(a) @ Tensor(b), a @ b)
    close(a.tolist() @ Tensor(b), a @ b)


@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "float16"])
@pytest.mark.parametrize("case", ["plain", "batched", "transposed_b", "small_m", "ragged_n", "narrow_n",
                                  "many_rows", "many_rows_batched_a"])
def test_matmul_through_column_panels(case: str, dt: str) -> None:
    """Right operands with rows a page apart, or transposed, or reused by PANEL_ROWS rows of a or more (a's batch
    axes over an unbatched b count too), are read through a panel copy (tensor.nn._panels): an extra kernel where it
    pays, and the same values either way, for every layout of b, batched or not, and dtype."""
    from lower import schedule
    from tensor.nn import PANEL_ROWS, WIDEN_MIN_MACS

    rng = np.random.default_rng(3)
    shapes = {"plain": ((64, 96), (96, 1024)), "batched": ((2, 32, 80), (2, 80, 1024)),
              "transposed_b": ((48, 128), (256, 128)), "small_m": ((8, 96), (96, 256)),
              "ragged_n": ((64, 96), (96, 300)),
              "narrow_n": ((64, 96), (96, 128)), "many_rows": ((PANEL_ROWS, 64), (64, 96)),
              "many_rows_batched_a": ((4, PANEL_ROWS // 4, 64), (64, 96))}
    sa, sb = shapes[case]
    a = rng.integers(-3, 4, sa).astype(dt) if dt == "int32" else rng.standard_normal(sa).astype(dt)
    b = rng.integers(-3, 4, sb).astype(dt) if dt == "int32" else rng.standard_normal(sb).astype(dt)
    tb = Tensor(b).transpose(-1, -2) if case == "transposed_b" else Tensor(b)
    nb = b.swapaxes(-1, -2) if case == "transposed_b" else b
    out = Tensor(a) @ tb
    kernels = [it for it in schedule([out.uop])[0] if it.kind == "kernel"]
    k, n = nb.shape[-2], nb.shape[-1]
    rows = int(np.prod(sa[:-1])) // int(np.prod(sb[:-2]))  # rows of a reusing each panel of b
    # a half matmul of 16 or more along each axis reads float32 copies of both operands (tensor.nn._widened): b's
    # copy packed as below (panels of float32), or else row-major
    wide = dt == "float16" and min(rows, k, n) >= 16 and rows * k * n >= WIDEN_MIN_MACS
    size = 4 if wide else np.dtype(dt).itemsize
    panel = 128 // size
    # rows a page apart, b past an L2, a view, or many rows reusing each panel
    needed = n * size >= 4096 or k * n * size > (2 << 20) or case == "transposed_b" or rows >= PANEL_ROWS
    # a column count of no whole panels packs too (the copy padded with zero columns, read back shrunk): the
    # product masks its ragged last vector, so no copy drops extra columns (lower.opt_tiles.ragged_columns)
    packs = n > panel and rows >= 16 and k >= 64 and needed
    assert len(kernels) == (3 if wide else 2 if packs else 1), [it.name for it in kernels]
    tol = {"float16": 2e-2, "float32": 1e-4}.get(dt, 1e-9)
    # the compiled kernels' result (the panel copy is what is tested; the reference evaluator would spend minutes
    # on these sizes and never run the copy)
    close(out.numpy(), np.matmul(a.astype(np.float64), nb.astype(np.float64)).astype(dt), rtol=tol, atol=tol,
          dtype=out.dtype)


@pytest.mark.parametrize("level", ["native", "x86-64-v2"])
@pytest.mark.parametrize("shape", [(7, 13, 16), (97, 61, 32), (131, 67, 48), (1031, 64, 24), (5, 3, 8),
                                   (37, 29, 37), (2, 53, 31, 16), (3, 6, 64)])
def test_matmul_register_tile_awkward_sizes(level: str, shape: tuple[int, ...]) -> None:
    """Row counts that no register tile divides (primes, 7, 1031) are padded by repeating the last row
    (lower.optimize PADTO "repeat"), column counts of 3 or 6 vectors get 1-vector tiles, a prime column count no
    tile; the result equals numpy's for every target the host runs (SSE without FMA, and the host's own)."""
    from devices.base import cpu_target
    from rewrite.env import Context

    if not cpu_target(level).runs_here:
        pytest.skip(f"{level} code does not run on this host")
    *batch, m, k, n = shape
    rng = np.random.default_rng(m * n + k)
    a = rng.standard_normal((*batch, m, k)).astype(np.float32)
    b = rng.standard_normal((*batch, k, n)).astype(np.float32)
    with Context(CPU_TARGET=level):
        got = (Tensor(a) @ Tensor(b)).numpy()
    np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-4, atol=1e-4)


def test_matmul_errors() -> None:
    with pytest.raises(ShapeError, match=r"matmul: \(2, 3\) @ \(4, 5\): the inner dimensions differ \(3 vs 4\)"):
        Tensor.ones(2, 3) @ Tensor.ones(4, 5)
    with pytest.raises(ShapeError, match="at least one axis"):
        Tensor(2.0) @ Tensor.ones(2)
    with pytest.raises(ShapeError, match="matmul: cannot broadcast"):
        Tensor.ones(2, 2, 3) @ Tensor.ones(3, 3, 1)


# ---------------------------------------------------------------- convolution


def conv_reference(x: np.ndarray, w: np.ndarray, stride: tuple, padding: tuple, dilation: tuple,
                   groups: int) -> np.ndarray:
    """A direct loop over output positions and taps, in float64."""
    ns = w.ndim - 2
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(p, p) for p in padding])
    n, og, ks = x.shape[0], w.shape[0] // groups, w.shape[2:]
    cg = w.shape[1]
    outs = [(xp.shape[2 + i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(ns)]
    out = np.zeros((n, w.shape[0], *outs))
    for pos in np.ndindex(*outs):
        for tap in np.ndindex(*ks):
            at = tuple(pos[i] * stride[i] + tap[i] * dilation[i] for i in range(ns))
            xv = xp[(slice(None), slice(None), *at)]
            for g in range(groups):
                wv = w[(slice(g * og, (g + 1) * og), slice(None), *tap)].astype(np.float64)
                out[(slice(None), slice(g * og, (g + 1) * og), *pos)] += xv[:, g * cg:(g + 1) * cg] @ wv.T
    return out


@SET
@given(st.data())
def test_conv2d(data: st.DataObject) -> None:
    groups = data.draw(st.sampled_from([1, 1, 2]))
    cin, cout = groups * data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))
    ks = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    stride = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2)))
    dil = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    pad = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, 1)))
    hw = [max(dil[i] * (ks[i] - 1) + 1 - 2 * pad[i], 1) + data.draw(st.integers(0, 3)) for i in range(2)]
    x = data.draw(arrays("float32", (data.draw(st.integers(1, 2)), cin, *hw), lo=-2, hi=2))
    w = data.draw(arrays("float32", (cout, cin // groups, *ks), lo=-2, hi=2))
    b = data.draw(arrays("float32", (cout,), lo=-2, hi=2))
    got = Tensor(x).conv2d(Tensor(w), Tensor(b), stride=stride, padding=pad, dilation=dil, groups=groups)
    expected = conv_reference(x, w, stride, pad, dil, groups) + b.reshape(1, -1, 1, 1)
    close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups,cout,stride,pad,dt", [
    (1, 32, (1, 1), (1, 1), "float32"), (2, 64, (2, 1), (1, 0), "float32"),
    (1, 16, (1, 1), (0, 2), "float64"), (1, 24, (1, 1), (1, 1), "float32"), (1, 8, (1, 1), (1, 1), "float32")])
def test_conv2d_register_tile(groups: int, cout: int, stride: tuple, pad: tuple, dt: str) -> None:
    """Output channels innermost in a weight copy (tensor.conv._channels_last) where they fill vectors (or half
    vectors over a reduction at least as deep as the lanes), and the
    conv kernel then gets the register tile (lanes over output channels, rows over output columns)."""
    from devices import get_device
    from lower import schedule
    from lower.optimize import OptOps, hand_coded
    from lower.stages import _symbolic

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 8 * groups, 16, 24)).astype(dt)
    w = rng.standard_normal((cout, 8, 3, 3)).astype(dt)
    out = Tensor(x).conv2d(Tensor(w), stride=stride, padding=pad, groups=groups)
    kernels = [it for it in schedule([out.uop])[0] if it.kind == "kernel"]
    target = get_device("cpu").default_target()
    lanes, cout_g = target.lanes(np.dtype(dt).itemsize), cout // groups
    packs = cout_g % lanes == 0 or (cout_g % max(1, lanes // 2) == 0 and lanes <= 8 * 9)  # half vectors, deep enough
    assert len(kernels) == (2 if packs else 1)
    opts = hand_coded(_symbolic(kernels[-1].ast, target), target, threads=1)
    if packs:  # (without the copy a tile may still fit, with lanes along the output columns)
        assert any(o.op is OptOps.SPLIT and o.arg[1].name == "UPCAST" for o in opts), opts  # type: ignore[index]
    close(out, conv_reference(x, w, stride, pad, (1, 1), groups), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups,cin_g,cout_g,k", [(4, 16, 16, 3), (64, 1, 1, 3)])
def test_grouped_and_depthwise_conv_lanes(groups: int, cin_g: int, cout_g: int, k: int) -> None:
    """A grouped conv's register tile keeps its columns inside one group's output channels (the input's channel
    block moves at each group: lower.strides._steady), and a depthwise conv, whose only contiguous reduction is
    its k taps, gets its output columns in lanes (lower.optimize._column_reduction); both against numpy."""
    from devices import get_device
    from lower import schedule
    from lower.optimize import OptOps, hand_coded
    from lower.stages import _symbolic
    from rewrite import AxisType

    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, groups * cin_g, 6, 28)).astype(np.float32)  # rows of 28: more than a vector
    w = rng.standard_normal((groups * cout_g, cin_g, k, k)).astype(np.float32)
    out = Tensor(x).conv2d(Tensor(w), padding=1, groups=groups)
    target = get_device("cpu").default_target()
    ast = _symbolic([it for it in schedule([out.uop])[0] if it.kind == "kernel"][-1].ast, target)
    ups = [o.arg[0] for o in hand_coded(ast, target, threads=1)
           if o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST]  # type: ignore[index]
    lanes = target.lanes(4)
    if target.vector_bytes:
        assert ups, ups
        if cout_g >= lanes and 2 * lanes > cout_g:  # one vector of a group's channels, not two across groups
            assert ups.count(lanes) == 1 and 2 not in ups, ups
    close(out, conv_reference(x, w, (1, 1), (1, 1), (1, 1), groups), rtol=1e-4, atol=1e-4)


def test_conv1d_and_conv3d_through_conv2d() -> None:
    rng = np.random.default_rng(0)
    x1, w1 = rng.standard_normal((2, 3, 9)).astype(np.float32), rng.standard_normal((4, 3, 3)).astype(np.float32)
    close(Tensor(x1).conv2d(Tensor(w1), stride=2, padding=1), conv_reference(x1, w1, (2,), (1,), (1,), 1),
          rtol=1e-4, atol=1e-4)
    x3, w3 = rng.standard_normal((1, 2, 4, 3, 4)).astype(np.float32), rng.standard_normal((2, 2, 2, 2, 2))
    w3 = w3.astype(np.float32)
    close(Tensor(x3).conv2d(Tensor(w3)), conv_reference(x3, w3, (1, 1, 1), (0, 0, 0), (1, 1, 1), 1),
          rtol=1e-4, atol=1e-4)


def test_conv2d_padding_forms_and_int_inputs() -> None:
    x = np.arange(2 * 5 * 6, dtype=np.int32).reshape(1, 2, 5, 6) % 5
    w = np.ones((1, 2, 3, 3), np.int32)
    r = Tensor(x).conv2d(Tensor(w), padding=((1, 1), (1, 1)))
    assert r.dtype is dtypes.int32
    close(r, conv_reference(x, w, (1, 1), (1, 1), (1, 1), 1).astype(np.int32))
    close(Tensor(x).conv2d(Tensor(w), padding=[1, 1, 1, 1]), conv_reference(x, w, (1, 1), (1, 1), (1, 1), 1))
    close(Tensor(x).conv2d(Tensor(w), padding=(1, 0)), conv_reference(x, w, (1, 1), (1, 0), (1, 1), 1))


def test_conv2d_errors() -> None:
    with pytest.raises(ShapeError, match="conv2d: input has 3 channels"):
        Tensor.ones(1, 3, 5, 5).conv2d(Tensor.ones(2, 2, 3, 3))
    with pytest.raises(ShapeError, match="conv2d: the kernel spans 5 elements"):
        Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(1, 1, 5, 5))
    with pytest.raises(ShapeError, match=r"conv2d: input .* and weight .* do not fit"):
        Tensor.ones(3, 5, 5).conv2d(Tensor.ones(1, 3, 3, 3))
    with pytest.raises(ShapeError, match="bias must have shape"):
        Tensor.ones(1, 1, 4, 4).conv2d(Tensor.ones(2, 1, 3, 3), Tensor.ones(3))


# ---------------------------------------------------------------- pooling


def pool_reference(x: np.ndarray, k: tuple, s: tuple, p: tuple, d: tuple, ceil_mode: bool, kind: str,
                   count_include_pad: bool = True) -> np.ndarray:
    """torch's pooling rules, by a direct loop."""
    h, w = x.shape[-2:]
    outs = []
    for length, kk, ss, pp, dd in zip((h, w), k, s, p, d, strict=True):
        span = length + 2 * pp - dd * (kk - 1) - 1
        o = (-(-span // ss) if ceil_mode else span // ss) + 1
        if ceil_mode and (o - 1) * ss >= length + pp:
            o -= 1
        outs.append(o)
    out = np.zeros((*x.shape[:-2], *outs))
    for i in range(outs[0]):
        for j in range(outs[1]):
            vals, cnt = [], 0
            for a in range(k[0]):
                for b in range(k[1]):
                    r, c = i * s[0] + a * d[0] - p[0], j * s[1] + b * d[1] - p[1]
                    inside = 0 <= r < h and 0 <= c < w
                    in_padded = -p[0] <= r < h + p[0] and -p[1] <= c < w + p[1]
                    if inside:
                        vals.append(x[..., r, c].astype(np.float64))
                    cnt += inside or (count_include_pad and in_padded)
            if kind == "max":
                out[..., i, j] = np.max(vals, axis=0)
            else:
                out[..., i, j] = np.sum(vals, axis=0) / cnt
    return out


@SET
@given(st.data())
def test_max_and_avg_pool(data: st.DataObject) -> None:
    k = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    s = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    p = (data.draw(st.integers(0, k[0] // 2)), data.draw(st.integers(0, k[1] // 2)))
    d = (data.draw(st.integers(1, 2)), 1)
    ceil_mode = data.draw(st.booleans())
    hw = [d[i] * (k[i] - 1) + 1 + data.draw(st.integers(0, 4)) for i in range(2)]
    x = data.draw(arrays("float32", (data.draw(st.integers(1, 2)), 2, *hw), lo=-5, hi=5))
    close(Tensor(x).max_pool2d(k, s, p, d, ceil_mode), pool_reference(x, k, s, p, d, ceil_mode, "max"))
    cip = data.draw(st.booleans())
    close(Tensor(x).avg_pool2d(k, s, p, ceil_mode, cip, d), pool_reference(x, k, s, p, d, ceil_mode, "avg", cip),
          rtol=1e-5, atol=1e-5)


def test_pool_defaults_and_ints() -> None:
    x = np.arange(2 * 4 * 6, dtype=np.int32).reshape(1, 2, 4, 6)
    r = Tensor(x).max_pool2d()
    assert r.dtype is dtypes.int32 and r.shape == (1, 2, 2, 3)
    close(r, x.reshape(1, 2, 2, 2, 3, 2).max((3, 5)))
    a = Tensor(x).avg_pool2d(kernel_size=2)
    assert a.dtype is dtypes.float32
    close(a, x.reshape(1, 2, 2, 2, 3, 2).mean((3, 5)))
    close(Tensor(x).max_pool2d(3, stride=1, padding=1), pool_reference(x, (3, 3), (1, 1), (1, 1), (1, 1), False,
                                                                          "max"))


# ---------------------------------------------------------------- activations


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "silu": lambda x: x * _sigmoid(x),
    "softplus": lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0),
    "leaky_relu": lambda x: np.where(x < 0, 0.01 * x, x),
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "relu6": lambda x: np.clip(x, 0, 6),
    "hardtanh": lambda x: np.clip(x, -1, 1),
}


@SET
@given(st.sampled_from(sorted(ACTIVATIONS)), arrays("float32", lo=-30, hi=30))
def test_activations(name: str, a: np.ndarray) -> None:
    with np.errstate(over="ignore"):
        expected = ACTIVATIONS[name](a.astype(np.float64))
    close(getattr(Tensor(a), name)(), expected, rtol=1e-5, atol=2e-6)


def test_gelu_exact_and_relu_int() -> None:
    a = np.linspace(-4, 4, 17).astype(np.float32)
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in a.astype(np.float64)])
    close(Tensor(a).gelu(approximate="none"), exact, atol=1e-6)
    i = np.array([-3, 0, 5], dtype=np.int32)
    close(Tensor(i).relu(), np.maximum(i, 0), dtype=dtypes.int32)
    with pytest.raises(ValueError, match="approximate"):
        Tensor(a).gelu(approximate="fast")


def test_matmul_backward_reads_w_not_its_panels() -> None:
    """x @ w.T reads w through a panel copy (tensor.nn._panels), laid out for the forward's tile; the gradient of x
    (dY @ w) reads w itself (rules.gradients: a product's gradient reads through a layout copy), and both
    gradients equal numpy's."""
    from rewrite import Ops, UOp

    rng = np.random.default_rng(5)
    xa, wa = rng.standard_normal((32, 96)).astype(np.float32), rng.standard_normal((128, 96)).astype(np.float32)
    x, w = Tensor(xa, requires_grad=True), Tensor(wa, requires_grad=True)
    out = x @ w.T
    assert any(u.op is Ops.CONTIGUOUS for u in out.uop.toposort())  # the forward packs
    (out * out).sum().backward()
    assert x.grad is not None and w.grad is not None
    fwd = set(out.uop.toposort())

    def reads_copy(u: UOp) -> bool:
        while u.op in (Ops.EXPAND, Ops.RESHAPE, Ops.PERMUTE, Ops.CAST):
            u = u.src[0]
        return u.op is Ops.CONTIGUOUS

    products = [u for u in x.grad.uop.toposort() if u.op is Ops.MUL and u not in fwd]
    assert products and not any(reads_copy(s) for u in products for s in u.src)
    gy = 2 * (xa.astype(np.float64) @ wa.T.astype(np.float64))
    close(x.grad, (gy @ wa).astype(np.float32), rtol=1e-4, atol=1e-4)
    close(w.grad, (gy.T @ xa).astype(np.float32), rtol=1e-4, atol=1e-4)
