"""Regression tests for wrong or failing results found by attacking the front end (issue 13): each program is
checked against numpy on the default cpu path, with NOOPT=1 and on the python reference device."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.env import Context
from tensor import Tensor

MODES = [pytest.param({}, id="cpu"), pytest.param({"NOOPT": 1}, id="noopt"), pytest.param({"DEVICE": "python"},
                                                                                        id="python")]


def run(build, knobs: dict) -> np.ndarray:
    with Context(**knobs):
        return build().numpy()


@pytest.mark.parametrize("knobs", MODES)
def test_padded_upcast_axis_with_lane_invariant_address(knobs: dict) -> None:
    """The pad's validity differs per upcast lane while the address does not (the padded axis has size 1): the
    load must be gated per lane (was a CompileError: the LOAD gate has shape (4,), the index ())."""
    a = np.arange(11 * 5, dtype=np.float32).reshape(11, 1, 5)
    c = np.ones((3, 4, 1), np.float32)
    got = run(lambda: Tensor(a)[0:11:5, :, 4:5].pad([(0, 0), (0, 2), (3, 0)]) @ Tensor(c), knobs)
    np.testing.assert_array_equal(got, np.pad(a[0:11:5, :, 4:5], [(0, 0), (0, 2), (3, 0)]) @ c)


@pytest.mark.parametrize("knobs", MODES)
def test_cat_keeps_negative_zero_and_nan(knobs: dict) -> None:
    """cat selects each piece where it lies (was a sum of zero-padded pieces: -0.0 + 0.0 = +0.0)."""
    a = np.array([[-0.0, 1.0], [np.nan, -0.0]], np.float32)
    b = np.array([[-0.0, -np.inf]], np.float32)
    for dim in (0, 1):
        other = b if dim == 0 else b.T[:1].repeat(2, 0)
        got = run(lambda: Tensor(a).cat(Tensor(other), dim=dim), knobs)
        want = np.concatenate([a, other], axis=dim)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    got = run(lambda: 1 / Tensor(np.array([-0.0], np.float32)).cat(Tensor(np.array([-0.0], np.float32))), knobs)
    assert np.all(got == -np.inf), got


@pytest.mark.parametrize("knobs", MODES)
def test_cat_bool_and_int(knobs: dict) -> None:
    a, b = np.array([True, False]), np.array([False, True, True])
    np.testing.assert_array_equal(run(lambda: Tensor(a).cat(Tensor(b)), knobs), np.concatenate([a, b]))
    c = np.array([-(2 ** 31), 5], np.int32)
    got = run(lambda: Tensor(c).cat(Tensor(c[::-1].copy())), knobs)
    np.testing.assert_array_equal(got, np.concatenate([c, c[::-1]]))


INT_DTYPES = ["int8", "uint8", "int16", "int32", "uint32", "int64", "uint64"]


def _edge_ints(dt: np.dtype, n: int, rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dt)
    edges = [0, 1, 2, 3, info.bits - 1, info.bits, info.bits + 1, 40, 63, 64, 65, info.max, info.max - 1]
    if info.min < 0:
        edges += [-1, -2, -(info.bits - 1), -info.bits, -40, info.min, info.min + 1]
    edges = [e for e in edges if info.min <= e <= info.max]
    rand = rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
    return np.concatenate([np.array(edges, dtype=dt), rand])


@pytest.mark.parametrize("dt", INT_DTYPES)
@pytest.mark.parametrize("opname", ["lshift", "rshift", "floordiv", "mod"])
def test_int_ops_one_semantics_on_every_device(dt: str, opname: str) -> None:
    """Out-of-range shifts and division/modulo by zero: the cpu device (C), the python device and
    rewrite.semantics agree bit for bit (shift amount masked to the width; x // 0 == x % 0 == 0)."""
    from rewrite.dtype import dtypes
    from rewrite.ops import Ops
    from rewrite.semantics import exec_alu

    rng = np.random.default_rng(abs(hash((dt, opname))) % 2 ** 32)
    ndt = np.dtype(dt)
    a0, b0 = _edge_ints(ndt, 60, rng), _edge_ints(ndt, 60, rng)
    a, b = np.repeat(a0, len(b0)), np.tile(b0, len(a0))  # every pair of the edges and random values
    op = {"lshift": Ops.SHL, "rshift": Ops.SHR, "floordiv": Ops.IDIV, "mod": Ops.MOD}[opname]
    fn = {"lshift": Tensor.lshift, "rshift": Tensor.rshift, "floordiv": Tensor.__floordiv__,
          "mod": Tensor.__mod__}[opname]
    want = np.array([exec_alu(op, dtypes.from_name(dt), int(x), int(y)) for x, y in zip(a, b, strict=True)],
                    dtype=object).astype(ndt)
    for knobs in ({}, {"NOOPT": 1}, {"DEVICE": "python"}):
        sel = slice(None) if knobs.get("DEVICE") != "python" else slice(0, len(a), 7)
        got = run(lambda: fn(Tensor(a[sel]), Tensor(b[sel])), knobs)
        np.testing.assert_array_equal(got, want[sel], err_msg=f"{opname} {dt} {knobs}")


def test_semantics_examples() -> None:
    """The documented choices, as a table."""
    from rewrite.dtype import dtypes
    from rewrite.ops import Ops
    from rewrite.semantics import exec_alu

    i32, u8 = dtypes.int32, dtypes.uint8
    table = [(Ops.SHL, i32, 1, 40, 256), (Ops.SHL, i32, 3, 31, -(2 ** 31)), (Ops.SHL, i32, 1, -1, -(2 ** 31)),
             (Ops.SHR, i32, -8, 33, -4), (Ops.SHR, u8, 128, 9, 64), (Ops.IDIV, i32, 7, 0, 0), (Ops.MOD, i32, -7, 0, 0),
             (Ops.CDIV, u8, 5, 0, 0), (Ops.CMOD, i32, 5, 0, 0), (Ops.IDIV, i32, -(2 ** 31), -1, -(2 ** 31))]
    for op, dt, x, y, want in table:
        assert exec_alu(op, dt, x, y) == want, (op, dt, x, y)


@pytest.mark.parametrize("knobs", MODES)
def test_unrolled_reduce_of_a_constant_counts_every_lane(knobs: dict) -> None:
    """Found by the program fuzzer: a sum over a window lying wholly in a pad is a sum of a constant; with the
    reduce axis unrolled into 4 lanes the constant was folded once instead of 4 times (gave 1.0, not 4.0)."""
    a = np.zeros(3)
    got = run(lambda: (Tensor(a).pad([(0, 4)])[3:7] + 1).sum(), knobs)
    assert got == 4.0, got
    b = np.zeros((1, 3))
    got = run(lambda: (Tensor(b).pad([(0, 2), (0, 1)])[2:3] + 1).sum(1), knobs)
    np.testing.assert_array_equal(got, [4.0])


@pytest.mark.parametrize("knobs", MODES)
def test_register_tile_row_of_padding_restarts_each_batch(knobs: dict) -> None:
    """Found by the program fuzzer (seed 33033764, a silently wrong result): in a batched matmul whose first row of
    each batch is all padding, that row's product is the same in every batch, so its accumulator's init was
    hoisted out of the batch loop while its tile-mate's sum kept the shared reduction loop inside it: the row
    summed every batch's products (8, 16, 24, ... instead of 8)."""
    a = np.arange(25, dtype=np.float64).reshape(5, 1, 5) / 8

    def build() -> Tensor:
        v0 = Tensor(a)
        return v0.pad([(0, 2), (1, 0), (2, 1)], value=1) @ v0.max(axis=1).pad([(2, 1), (0, 1)], value=1)

    want = np.pad(a, [(0, 2), (1, 0), (2, 1)], constant_values=1) @ np.pad(a.max(1), [(2, 1), (0, 1)],
                                                                          constant_values=1)
    np.testing.assert_allclose(run(build, knobs), want, rtol=1e-12)


@pytest.mark.parametrize("knobs", MODES)
def test_lane_invariant_quotient_keeps_its_lanes(knobs: dict) -> None:
    """Found by the program fuzzer (seeds 33039280 and 33015926): (r*4 + lanes) // 4 is r in every lane, and the
    rule that says so returned the scalar r for a vector of 4 lanes, leaving a LOAD with a scalar address and a
    gate of 4 lanes (a CompileError) or a lane read of a scalar (a ShapeError). A template now keeps the node's
    shape."""
    got = run(lambda: Tensor(np.zeros(5)).reshape(5, 1, 1).softmax(1).pad([(0, 0), (1, 2), (0, 0)]).reshape(1, 20),
              knobs)
    np.testing.assert_array_equal(got, np.pad(np.ones((5, 1, 1)), [(0, 0), (1, 2), (0, 0)]).reshape(1, 20))
    x = np.arange(14, dtype=np.float64).reshape(1, 2, 7, 1)
    got = run(lambda: Tensor(x).pad([(1, 0), (0, 2), (2, 0), (0, 2)]).cumsum(2)[0:2:1, 3:4:1, 7:4:-2, 2:3:2], knobs)
    want = np.cumsum(np.pad(x, [(1, 0), (0, 2), (2, 0), (0, 2)]), axis=2)[0:2:1, 3:4:1, 7:4:-2, 2:3:2]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("knobs", MODES)
def test_gated_sums_in_an_outer_loop_survive_gcc_vectorizer(knobs: dict) -> None:
    """Found by the program fuzzer (seed 35011765, NOOPT=1): the cat of a row mean with itself is one kernel whose
    rows sum `gate ? x[i] : 0` in two unrolled loops; gcc 12.2 vectorized the row loop with masked loads and
    computed wrong lanes (4.9e28 for -0.75). The cpu device now compiles with -fno-tree-loop-if-convert under gcc
    (devices.cpu_compiler.GCC_EXACT_FLAGS); clang was right all along."""
    a = np.array([1.5, -3.5, -1.0, 0.25, 0.75, 1.75, 2.5, -2.75, -1.0, 0.75, 3.0, -1.0, 2.5, -2.0, 3.0, -1.75, 3.0,
                  1.0], dtype=np.float32).reshape(2, 3, 3)

    def build() -> Tensor:
        m = (-Tensor(a).relu().mean(axis=1)).mean(axis=1, keepdim=True).expand(2, 2)
        return m.cat(m, dim=0)

    m = (-np.maximum(a.astype(np.float64), 0).mean(1)).mean(1, keepdims=True)
    want = np.concatenate([np.broadcast_to(m, (2, 2))] * 2, 0)
    np.testing.assert_allclose(run(build, knobs), want, rtol=1e-6)
