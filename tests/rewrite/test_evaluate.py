"""The reference evaluators against Python arithmetic and numpy."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewrite.dtype import DType, dtypes
from rewrite.errors import EvalError
from rewrite.evaluate import evaluate, evaluate_graph
from rewrite.ops import Ops
from rewrite.semantics import threefry2x32
from rewrite.uop import UOp

X, Y, Z = UOp.variable("x", -20, 20), UOp.variable("y", -20, 20), UOp.variable("z", 0, 7)

# ---------------------------------------------------------------- scalar expressions

# fmt: off
SCALAR_TABLE: list[tuple[str, UOp, Callable[[int, int, int], object]]] = [
    ("affine-floordiv", (X * 3 + 1) // 2, lambda x, y, z: (x * 3 + 1) // 2),
    ("mod-negative", X % 4 + Y % -3, lambda x, y, z: x % 4 + y % -3),
    ("nested-div", (X // 3) // (Z + 1), lambda x, y, z: (x // 3) // (z + 1)),
    ("max-min", X.maximum(Y) - X.minimum(Y), lambda x, y, z: max(x, y) - min(x, y)),
    ("where", (X < Y).where(X * Y, Z - X), lambda x, y, z: x * y if x < y else z - x),
    ("compare-chain", (X <= Y) & (Y.ne(Z)), lambda x, y, z: x <= y and y != z),
    ("bool-or-not", ~((X > 0) | (Y >= 3)), lambda x, y, z: not (x > 0 or y >= 3)),
    ("shifts", (Z << 3) + ((X + 20) >> 2), lambda x, y, z: (z << 3) + ((x + 20) >> 2)),
    ("bitwise", (X & 6) ^ (Y | Z), lambda x, y, z: (x & 6) ^ (y | z)),
    ("eq-cast", X.eq(Y).cast(dtypes.index) * 5, lambda x, y, z: 5 * (x == y)),
    ("neg-sub", -(X - Y) * -1, lambda x, y, z: x - y),
    ("guarded-div", Z.ne(0).where(X // Z, 100), lambda x, y, z: x // z if z else 100),
]
# fmt: on


@pytest.mark.parametrize("name,expr,ref", SCALAR_TABLE, ids=[r[0] for r in SCALAR_TABLE])
def test_scalar_table_exhaustive(name: str, expr: UOp, ref: Callable[[int, int, int], object]) -> None:
    for x, y, z in itertools.product(range(-20, 21, 3), range(-20, 21, 4), range(8)):
        assert evaluate(expr, {"x": x, "y": y, "z": z}) == ref(x, y, z), (x, y, z)


Expr = tuple[UOp, Callable[[dict[str, int]], int]]
_LEAVES: list[Expr] = [(X, lambda e: e["x"]), (Y, lambda e: e["y"]), (Z, lambda e: e["z"])]


@st.composite
def index_exprs(draw: st.DrawFn, depth: int = 4) -> Expr:
    """A random index expression and a Python oracle for it (WHERE evaluates only the branch it picks)."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return draw(st.sampled_from(_LEAVES))
        c = draw(st.integers(-9, 9))
        return UOp.const(c), lambda e: c
    kind = draw(st.sampled_from(["+", "-", "*", "//", "%", "max", "where"]))
    (a, fa), (b, fb) = draw(index_exprs(depth - 1)), draw(index_exprs(depth - 1))
    if kind == "where":
        (c, fc), (d, fd) = draw(index_exprs(depth - 1)), draw(index_exprs(depth - 1))
        return (a < b).where(c, d), lambda e: fc(e) if fa(e) < fb(e) else fd(e)
    ops: dict[str, tuple[Callable[[UOp, UOp], UOp], Callable[[int, int], int]]] = {
        "+": (lambda p, q: p + q, lambda p, q: p + q),
        "-": (lambda p, q: p - q, lambda p, q: p - q),
        "*": (lambda p, q: p * q, lambda p, q: p * q),
        "//": (lambda p, q: p // q, lambda p, q: p // q),
        "%": (lambda p, q: p % q, lambda p, q: p % q),
        "max": (lambda p, q: p.maximum(q), max),
    }
    mk, fn = ops[kind]
    return mk(a, b), lambda e: fn(fa(e), fb(e))


@settings(max_examples=300, deadline=None)
@given(expr=index_exprs(), x=st.integers(-20, 20), y=st.integers(-20, 20), z=st.integers(0, 7))
def test_random_index_expressions_match_python(expr: Expr, x: int, y: int, z: int) -> None:
    u, ref = expr
    env = {"x": x, "y": y, "z": z}
    try:
        want = ref(env)
    except ZeroDivisionError:
        with pytest.raises(EvalError, match="division by zero"):
            evaluate(u, env)
        return
    assert evaluate(u, env) == want


@pytest.mark.parametrize(
    "expr,env,expected",
    [
        (UOp.const(2**31 - 1, dtypes.int32) + 1, {}, -(2**31)),
        (UOp.const(200, dtypes.uint8) * 2, {}, 144),
        (UOp.const(-7, dtypes.int32).alu(Ops.CDIV, UOp.const(2, dtypes.int32)), {}, -3),
        (UOp.const(-7, dtypes.int32) // 2, {}, -4),
        (UOp.variable("n", 0, 300, dtypes.int32).cast(dtypes.uint8), {"n": 300}, 44),
        (UOp.const(-1, dtypes.int32).bitcast(dtypes.uint32), {}, 2**32 - 1),
        (UOp.const(1.0, dtypes.float32).bitcast(dtypes.int32), {}, 0x3F800000),
        (UOp.const(0.1, dtypes.float32) + 0.2, {}, float(np.float32(np.float32(0.1) + np.float32(0.2)))),
        (UOp.const(0.1, dtypes.float32), {}, float(np.float32(0.1))),
        (UOp.const(1.0, dtypes.float16) / 3.0, {}, float(np.float16(1 / 3))),
        (UOp.const(2.5, dtypes.float32).cast(dtypes.int8), {}, 2),
        (UOp.const(1.0, dtypes.float32) / 0.0, {}, float("inf")),
        (UOp.range(8, 3) * 2 + UOp.range(4, (1, 2)), {"r3": 5, "r1_2": 3}, 13),
        (UOp.const(3, dtypes.uint64).alu(Ops.THREEFRY, UOp.const(5, dtypes.uint64)), {}, threefry2x32(3, 5)),
    ],
)
def test_scalar_dtypes(expr: UOp, env: dict, expected: object) -> None:
    r = evaluate(expr, env)
    assert type(r) is type(expected) and r == expected


def test_uop_evaluate_method() -> None:
    assert ((X * 3 + 1) // 2).evaluate({"x": -3}) == -4


def test_deep_chain_evaluates_without_recursion() -> None:
    e = X
    for i in range(200_000):
        e = e + 1 if i % 2 else e * 1
    assert evaluate(e, {"x": 3}) == 100_003


def test_shared_subgraphs_are_evaluated_once() -> None:
    e = X
    for _ in range(64):
        e = e + e  # 2**64 paths through a 65-node DAG
    assert evaluate(e, {"x": 1}) == 2**64


def test_unbound_variable_is_named() -> None:
    with pytest.raises(EvalError, match="unbound variable 'y'"):
        evaluate(X + Y, {"x": 1})
    with pytest.raises(EvalError, match="unbound variable 'r7'"):
        evaluate(UOp.range(4, 7) + 1, {})


@pytest.mark.parametrize(
    "expr,env,match",
    [
        (X + 1, {"x": 21}, r"'x' = 21 is outside its range \[-20, 20\]"),
        (Z * 2, {"z": -1}, "outside its range"),
        (UOp.range(4, 0), {"r0": 4}, r"outside \[0, 4\)"),
        (X + 1, {"x": 1.5}, "not a valid index value"),
        (X + 1, {"x": True}, "not a valid index value"),
    ],
)
def test_variable_values_are_checked(expr: UOp, env: dict, match: str) -> None:
    with pytest.raises(EvalError, match=match):
        evaluate(expr, env)


def test_numpy_integers_are_accepted() -> None:
    assert evaluate(X * 2, {"x": np.int64(4)}) == 8


def test_division_by_zero_is_an_error_unless_where_drops_it() -> None:
    with pytest.raises(EvalError, match=r"IDIV\(5, 0\)"):
        evaluate(X // Z, {"x": 5, "z": 0})
    with pytest.raises(EvalError, match="MOD"):
        evaluate((X % Z) * 0, {"x": 5, "z": 0})  # poison passes through every op but WHERE
    guarded = Z.ne(0).where(X // Z, -1)
    assert evaluate(guarded, {"x": 5, "z": 0}) == -1
    assert evaluate(guarded, {"x": 5, "z": 2}) == 2
    with pytest.raises(EvalError, match="IDIV"):
        evaluate((X // Z > 0).where(UOp.const(1), 2), {"x": 5, "z": 0})  # a poisoned condition poisons the result


def test_non_scalar_and_unknown_ops_raise() -> None:
    with pytest.raises(EvalError, match="evaluate_graph"):
        evaluate(UOp.buffer(0, dtypes.float32, (3,)), {})
    with pytest.raises(EvalError, match="cannot evaluate SINK"):
        evaluate(UOp.sink(X), {"x": 1})


# ---------------------------------------------------------------- tensor graphs

A = UOp.buffer(0, dtypes.float32, (3, 4))
B = UOp.buffer(1, dtypes.float32, (4,))
IB = UOp.buffer(2, dtypes.int32, (2, 3))
RNG = np.random.default_rng(0)
a_np = RNG.standard_normal((3, 4)).astype(np.float32)
b_np = RNG.standard_normal(4).astype(np.float32)
i_np = RNG.integers(-(2**31), 2**31, (2, 3)).astype(np.int32)
INPUTS = {A: a_np, B: b_np, IB: i_np}

# fmt: off
GRAPHS: list[tuple[str, UOp, Callable[[], np.ndarray]]] = [
    ("reshape", A.reshape((2, 6)), lambda: a_np.reshape(2, 6)),
    ("permute", A.permute((1, 0)), lambda: a_np.T),
    ("expand", A.reshape((3, 1, 4)).expand((3, 5, 4)), lambda: np.broadcast_to(a_np[:, None], (3, 5, 4))),
    ("pad", A.pad((1, 0), (2, 3)), lambda: np.pad(a_np, ((1, 2), (0, 3)))),
    ("shrink", A.shrink((1, 1), (3, 3)), lambda: a_np[1:3, 1:3]),
    ("flip", A.flip((1,)), lambda: a_np[:, ::-1]),
    ("flip-both", A.flip((0, 1)), lambda: a_np[::-1, ::-1]),
    ("broadcast", A + B, lambda: a_np + b_np),
    ("broadcast-2", A.reshape((3, 1, 4)) * B.reshape((4, 1)), lambda: a_np[:, None, :] * b_np[:, None]),
    ("const", A * 2.5 - 1.0, lambda: a_np * np.float32(2.5) - np.float32(1)),
    ("compare", (A < B).where(A, B), lambda: np.where(a_np < b_np, a_np, b_np)),
    ("max", A.maximum(B), lambda: np.maximum(a_np, b_np)),
    ("sqrt-recip", (A * A + 1.0).sqrt().recip(), lambda: np.reciprocal(np.sqrt(a_np * a_np + 1))),
    ("sum-1", A.sum((1,)), lambda: a_np.sum(1, keepdims=True)),
    ("sum-all", A.sum(), lambda: a_np.sum(keepdims=True)),
    ("max-0", A.max((0,)), lambda: a_np.max(0, keepdims=True)),
    ("prod-1", A.prod((1,)), lambda: a_np.prod(1, keepdims=True)),
    ("int-wrap", IB + IB, lambda: i_np + i_np),
    ("int-sum", IB.sum((0,)), lambda: i_np.sum(0, keepdims=True, dtype=np.int32)),
    ("int-floor", IB // UOp.const(7, dtypes.int32).reshape((1,)).expand((3,)), lambda: i_np // np.int32(7)),
    ("cast", A.cast(dtypes.int32), lambda: a_np.astype(np.int32)),
    ("cast-half", A.cast(dtypes.float16) * 3.0, lambda: a_np.astype(np.float16) * np.float16(3)),
    ("bitcast", A.bitcast(dtypes.uint32), lambda: a_np.view(np.uint32)),
    ("bitcast-u8", A.bitcast(dtypes.uint8), lambda: a_np.view(np.uint8)),
    ("bitcast-u64", A.bitcast(dtypes.uint64), lambda: a_np.view(np.uint64)),
    ("index-1", A.index(UOp.const(2)), lambda: a_np[2]),
    ("index-2", A.index(UOp.const(2), UOp.const(1)), lambda: a_np[2, 1]),
    ("index-vec", A.index(UOp.vconst([2, 0, 2, 1])), lambda: a_np[[2, 0, 2, 1]]),
    ("index-outer", A.index(UOp.vconst([1, 0]), UOp.vconst([3, 3, 0])), lambda: a_np[np.ix_([1, 0], [3, 3, 0])]),
    ("index-mixed", A.index(UOp.const(1), UOp.vconst([3, 0])), lambda: a_np[1, [3, 0]]),
    ("stack", UOp.stack(B, B * 2.0, B.flip((0,))), lambda: np.stack([b_np, b_np * 2, b_np[::-1]])),
    ("vconst", UOp.vconst([1.5, -2.0, 0.0, 3.0], dtypes.float32) + B, lambda: np.float32([1.5, -2, 0, 3]) + b_np),
    ("markers", A.contiguous().detach().copy("CPU").after(B), lambda: a_np),
    ("scalar", A.sum().reshape(()) * 0.5, lambda: a_np.sum() * np.float32(0.5)),
]
# fmt: on


@pytest.mark.parametrize("name,graph,ref", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_tensor_graphs_match_numpy(name: str, graph: UOp, ref: Callable[[], np.ndarray]) -> None:
    with np.errstate(all="ignore"):
        want = np.asarray(ref())
    got = evaluate_graph(graph, INPUTS)
    assert got.shape == graph.shape == want.shape
    assert got.dtype == want.dtype
    if name.startswith(("sum", "prod", "scalar")):  # numpy sums pairwise, the reference in index order
        np.testing.assert_allclose(got, want, rtol=1e-6)
    else:
        np.testing.assert_array_equal(got, want)


def test_float32_reduce_accumulates_in_index_order() -> None:
    v = UOp.buffer(0, dtypes.float32, (4,))
    data = np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32)
    acc = np.float32(0)
    for x in data:
        acc = np.float32(acc + x)
    got = evaluate_graph(v.sum(), {v: data})
    assert got.tolist() == [acc] == [1.0]  # pairwise or exact summation would give 2.0


def test_reduce_starts_from_the_identity() -> None:
    v = UOp.buffer(0, dtypes.float32, (1,))
    assert not np.signbit(evaluate_graph(v.sum(), {v: np.float32([-0.0])})[0])  # 0.0 + -0.0, as a device loop
    e = UOp.buffer(0, dtypes.float32, (2, 0))
    assert evaluate_graph(e.sum((1,)), {e: np.zeros((2, 0), np.float32)}).tolist() == [[0.0], [0.0]]
    assert evaluate_graph(e.max((1,)), {e: np.zeros((2, 0), np.float32)}).tolist() == [[-np.inf], [-np.inf]]
    w = UOp.buffer(0, dtypes.int8, (3,))
    assert evaluate_graph(w.max(), {w: np.int8([-128, -128, -128])}).tolist() == [-128]
    assert evaluate_graph(w.sum(), {w: np.int8([100, 100, 100])}).tolist() == [44]


def test_bfloat16_graphs_round_and_return_float32() -> None:
    h = UOp.buffer(0, dtypes.bfloat16, (3,))
    data = np.float32([1.0 + 2**-8, 1.0 + 3 * 2**-8, 3.0])
    got = evaluate_graph(h * 1.0, {h: data})
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, 1.0 + 2**-6, 3.0]
    assert evaluate_graph(h.bitcast(dtypes.uint16), {h: data}).tolist() == [0x3F80, 0x3F82, 0x4040]


def test_where_drops_poison_per_element() -> None:
    n, d = UOp.buffer(0, dtypes.int32, (4,)), UOp.buffer(1, dtypes.int32, (4,))
    nv, dv = np.int32([7, -7, 5, 9]), np.int32([2, 0, -3, 0])
    zero = UOp.const(0, dtypes.int32).reshape((1,)).expand((4,))
    safe = d.ne(zero).where(n // d, zero)
    assert evaluate_graph(safe, {n: nv, d: dv}).tolist() == [3, 0, -2, 0]
    assert evaluate_graph(n // d, {n: nv, d: dv}).tolist() == [3, 0, -2, 0]  # x // 0 is 0 on sized ints


@pytest.mark.parametrize(
    "inputs,match",
    [
        ({}, "no input for BUFFER slot 0"),
        ({A: np.zeros((4, 3), np.float32)}, "shape"),
        ({A: np.zeros((3, 4), np.float64)}, "numpy dtype float64"),
    ],
)
def test_bad_inputs_raise(inputs: dict, match: str) -> None:
    with pytest.raises(EvalError, match=match):
        evaluate_graph(A + 1.0, inputs)


def test_index_out_of_range_raises() -> None:
    with pytest.raises(EvalError, match="out of range"):
        evaluate_graph(A.index(UOp.vconst([0, 3])), INPUTS)


def test_index_dtype_results_do_not_wrap() -> None:
    v = UOp.buffer(0, dtypes.index, (2,))
    got = evaluate_graph(v * (2**40), {v: np.array([2**30, -3], dtype=np.int64)})
    assert got.dtype == object and got.tolist() == [2**70, -3 * 2**40]
    assert evaluate_graph(v + 1, {v: np.int64([1, 2])}).dtype == np.int64


MOVES = ["reshape", "permute", "pad", "shrink", "flip", "expand"]


@st.composite
def movement_chains(draw: st.DrawFn) -> list[tuple[str, tuple]]:
    shape, steps = (2, 3, 4), []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(MOVES))
        n = len(shape)
        if kind == "reshape":
            shape = (int(np.prod(shape)),) if n > 1 else (shape[0] // 2, 2) if shape[0] % 2 == 0 else shape
            steps.append((kind, (shape,)))
        elif kind == "permute":
            steps.append((kind, (tuple(draw(st.permutations(range(n)))),)))
            shape = tuple(shape[i] for i in steps[-1][1][0])
        elif kind == "pad":
            lo, hi = tuple(draw(st.integers(0, 2)) for _ in shape), tuple(draw(st.integers(0, 2)) for _ in shape)
            steps.append((kind, (lo, hi)))
            shape = tuple(d + a + b for d, a, b in zip(shape, lo, hi, strict=True))
        elif kind == "shrink":
            b = tuple(draw(st.integers(0, d)) for d in shape)
            e = tuple(draw(st.integers(x, d)) for x, d in zip(b, shape, strict=True))
            steps.append((kind, (b, e)))
            shape = tuple(y - x for x, y in zip(b, e, strict=True))
        elif kind == "flip":
            steps.append((kind, (tuple(draw(st.booleans()) for _ in shape),)))
        else:
            steps.append(("reshape", ((*shape, 1),)))
            steps.append((kind, (((*shape, 3)),)))
            shape = (*shape, 3)
    return steps


def _apply_np(x: np.ndarray, kind: str, args: tuple) -> np.ndarray:
    if kind == "reshape":
        return x.reshape(args[0])
    if kind == "permute":
        return x.transpose(args[0])
    if kind == "pad":
        return np.pad(x, list(zip(args[0], args[1], strict=True)))
    if kind == "shrink":
        return x[tuple(slice(b, e) for b, e in zip(args[0], args[1], strict=True))]
    if kind == "flip":
        return x[tuple(slice(None, None, -1) if f else slice(None) for f in args[0])]
    return np.broadcast_to(x, args[0])


@settings(max_examples=60, deadline=None)
@given(steps=movement_chains())
def test_random_movement_chains_match_numpy(steps: list[tuple[str, tuple]]) -> None:
    src = UOp.buffer(0, dtypes.int16, (2, 3, 4))
    data = np.arange(24, dtype=np.int16).reshape(2, 3, 4) - 7
    u, want = src, data
    for kind, args in steps:
        u = getattr(u, kind)(*args)
        want = _apply_np(want, kind, args)
    got = evaluate_graph(u + 1, {src: data})
    np.testing.assert_array_equal(got, want + np.int16(1))
    assert got.dtype == np.int16


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint16, dtypes.float16, dtypes.float64, dtypes.bool])
def test_input_dtypes_roundtrip(dt: DType) -> None:
    v = UOp.buffer(0, dt, (5,))
    data = np.array([0, 1, 1, 0, 1], dtype=dt.name)
    got = evaluate_graph(v.contiguous(), {v: data})
    assert got.dtype == data.dtype and got.tolist() == data.tolist()
