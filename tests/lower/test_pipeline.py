"""End-to-end differential tests of the pipeline (schedule -> rangeify -> symbolic -> decompositions ->
linearize -> device): random tensor-level graphs realized on the python and cpu devices must equal the exact
reference evaluator (rewrite.evaluate.evaluate_graph) element for element."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lower import realize, schedule
from lower.buffers import lookup, new_buffer, store
from rewrite import Ops, UOp, dtypes
from rewrite.env import Context
from rewrite.evaluate import evaluate_graph

DEVICES = ["python", "cpu"]


def run(out: UOp, inputs: dict[UOp, np.ndarray], device: str, noopt: int = 1) -> np.ndarray:
    for b, v in inputs.items():
        store(b, np.ascontiguousarray(v).reshape(-1))
    with Context(DEVICE=device, NOOPT=noopt):
        res = realize([out])[out]
    return lookup(res).reshape(out.shape)


_APPROX = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN})  # the cpu device computes these by <= 1 ulp polynomials


def assert_matches(got: np.ndarray, ref: np.ndarray, out: UOp, dev: str) -> None:
    """Bit-exact, except that a graph with a transcendental op may differ by rounding on the cpu device."""
    if dev == "cpu" and any(u.op in _APPROX for u in out.toposort()):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, err_msg=f"device {dev}")
    else:
        np.testing.assert_array_equal(got, ref, err_msg=f"device {dev}")


def check(out: UOp, inputs: dict[UOp, np.ndarray], devices: list[str] = DEVICES) -> None:
    ref = evaluate_graph(out, inputs).astype(np.float64 if out.dtype.is_float else object)
    for dev in devices:
        got = run(out, inputs, dev)
        if out.dtype.is_float:
            assert_matches(got.astype(np.float64), ref, out, dev)
            # the optimized kernels may sum in another order (lanes, split reductions): equal up to rounding
            np.testing.assert_allclose(run(out, inputs, dev, noopt=0), ref, rtol=1e-5, atol=1e-5)
        else:
            assert got.tolist() == ref.tolist(), f"device {dev}"
            assert run(out, inputs, dev, noopt=0).tolist() == ref.tolist(), f"device {dev}, optimized"


def fbuf(shape: tuple[int, ...], seed: int = 0, dtype=dtypes.float32) -> tuple[UOp, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = new_buffer(dtype, shape, None)  # no device of its own: the Context's DEVICE decides where it runs
    if dtype.is_float:
        v = rng.standard_normal(shape).astype(dtype.name)
    else:
        v = rng.integers(-50, 50, shape).astype(dtype.name)
    return b, v


@pytest.mark.parametrize("dev", DEVICES)
def test_softmax_matches_reference(dev: str) -> None:
    a, av = fbuf((4, 8))
    m = a.max((1,)).expand((4, 8))
    e = (a - m).exp2()
    check(e / e.sum((1,)).expand((4, 8)), {a: av}, [dev])


def test_matmul_and_chained_matmul() -> None:
    a, av = fbuf((3, 5), 1)
    b, bv = fbuf((5, 4), 2)
    c, cv = fbuf((4, 2), 3)
    ab = (a.reshape((3, 5, 1)).expand((3, 5, 4)) * b.reshape((1, 5, 4)).expand((3, 5, 4))).sum((1,)).reshape((3, 4))
    abc = (ab.reshape((3, 4, 1)).expand((3, 4, 2)) * c.reshape((1, 4, 2)).expand((3, 4, 2))).sum((1,))
    check(abc, {a: av, b: bv, c: cv})


def test_integer_floor_division_and_modulo() -> None:
    a, av = fbuf((6, 5), 4, dtypes.int32)
    b, bv = fbuf((6, 5), 5, dtypes.int32)
    bv[bv == 0] = 3
    check(a // b + a % b * 100 + (a // -3), {a: av, b: bv})


def test_pad_shrink_flip_permute() -> None:
    a, av = fbuf((3, 4), 6)
    x = a.pad((1, 2), (2, 0)).flip((0,)).permute((1, 0)).shrink((1, 0), (6, 5))
    check(x.exp2() + 1.0, {a: av})


def test_arange_by_prefix_sum() -> None:
    n = 6
    one = UOp.const(1.0, dtypes.float32).reshape((1,)).expand((n,))
    x = one.pad((n - 1,), (0,)).reshape((1, 2 * n - 1)).expand((n + 1, 2 * n - 1)).reshape(((n + 1) * (2 * n - 1),))
    x = x.shrink((0,), (2 * n * n,)).reshape((n, 2 * n)).shrink((0, 0), (n, n))
    check(x.sum((1,)).reshape((n,)) - 1.0, {})


# -- random graphs --------------------------------------------------------------------------------------

_UNARY = ["exp2", "neg", "sqrt_abs", "recip_safe", "cast_int"]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[UOp, dict[UOp, np.ndarray]]:
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    a, av = fbuf(shape, draw(st.integers(0, 100)))
    b, bv = fbuf(shape, draw(st.integers(0, 100)))
    x: UOp = a
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["binary", "unary", "pad", "shrink", "flip", "permute", "reshape", "reduce",
                                     "expand"]))
        s = x.shape
        if kind == "binary" and s == b.shape:
            x = draw(st.sampled_from([x + b, x * b, x - b, x.maximum(b), (x < b).where(x, b)]))
        elif kind == "unary":
            u = draw(st.sampled_from(_UNARY))
            x = {"exp2": lambda: (x * 0.25).exp2(), "neg": lambda: -x, "sqrt_abs": lambda: (x * x).sqrt(),
                 "recip_safe": lambda: (x * x + 1.0).recip(),
                 "cast_int": lambda: (x * 4.0).cast(dtypes.int32).cast(dtypes.float32)}[u]()
        elif kind == "pad":
            before = tuple(draw(st.integers(0, 2)) for _ in s)
            after = tuple(draw(st.integers(0, 2)) for _ in s)
            x = x.pad(before, after)
        elif kind == "shrink":
            begin = tuple(draw(st.integers(0, d - 1)) for d in s)
            end = tuple(draw(st.integers(b0 + 1, d)) for b0, d in zip(begin, s, strict=True))
            x = x.shrink(begin, end)
        elif kind == "flip" and s:
            x = x.flip(tuple(draw(st.lists(st.integers(0, len(s) - 1), max_size=len(s), unique=True))))
        elif kind == "permute" and len(s) > 1:
            x = x.permute(tuple(draw(st.permutations(range(len(s))))))
        elif kind == "reshape":
            n = 1
            for d in s:
                n *= d
            divs = [d for d in range(1, n + 1) if n % d == 0]
            d0 = draw(st.sampled_from(divs))
            x = x.reshape((d0, n // d0))
        elif kind == "reduce" and s:
            axes = tuple(draw(st.lists(st.integers(0, len(s) - 1), min_size=1, max_size=len(s), unique=True)))
            x = x.sum(axes) if draw(st.booleans()) else x.max(axes)
        elif kind == "expand" and s:
            x = x.reshape((*s, 1)).expand((*s, draw(st.integers(1, 3))))
        if x.size > 400:
            break
    return x, {a: av, b: bv}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs())
def test_random_graphs_match_reference(g: tuple[UOp, dict[UOp, np.ndarray]]) -> None:
    out, inputs = g
    if out.op is Ops.BUFFER:
        return
    inputs = {b: v for b, v in inputs.items() if b in set(out.toposort())}
    ref = evaluate_graph(out, inputs).astype(np.float64)
    for dev in DEVICES:
        got = run(out, inputs, dev).astype(np.float64)
        # unoptimized, the devices accumulate in loop order like the reference: bit-exact (but transcendentals)
        assert_matches(got, ref, out, dev)
    np.testing.assert_allclose(run(out, inputs, "cpu", noopt=0).astype(np.float64), ref, rtol=1e-5, atol=1e-5)


def test_schedule_items_have_names_and_buffers() -> None:
    a, _ = fbuf((4, 4))
    items, outs = schedule([(a + 1.0).sum((0,))])
    assert len(items) == 1 and items[0].kind == "kernel" and items[0].name.startswith("r_")
    assert outs


def test_work_estimate_counts_flops_and_bytes_through_loops() -> None:
    from devices import get_device
    from lower.estimate import LazyEstimate, estimate
    from lower.stages import lower_kernel

    a, _ = fbuf((8, 16), 1)
    b, _ = fbuf((16, 4), 2)
    mm = (a.reshape((8, 16, 1)).expand((8, 16, 4)) * b.reshape((1, 16, 4)).expand((8, 16, 4))).sum((1,))
    items, _ = schedule([mm])
    linear = lower_kernel(items[0].ast, get_device("python"), opts=[])
    est = estimate(linear)
    assert est.flops == 2 * 8 * 16 * 4  # one multiply and one add per product
    assert est.mem_bytes == 4 * (2 * 8 * 16 * 4 + 8 * 4)  # two loads per product, one store per output
    lazy = LazyEstimate(linear)  # what lower.realize keeps: the same figures, counted when read
    assert (lazy.flops, lazy.mem_bytes, lazy.get()) == (est.flops, est.mem_bytes, est)
