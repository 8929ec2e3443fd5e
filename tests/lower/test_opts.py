"""OptOps: legal opts keep every kernel's result; illegal ones raise KernelOptError saying why."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devices import get_device
from devices.base import Target, cpu_target
from lower import schedule
from lower.buffers import new_buffer
from lower.opt_tiles import tile_shape, tile_shapes
from lower.optimize import Opt, OptOps, apply_opt, axes, hand_coded, size
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.env import Context
from rewrite.errors import KernelOptError
from tensor import Tensor


def _kernel(out: UOp):
    items, _ = schedule([out])
    (it,) = [i for i in items if i.kind == "kernel"]
    return it


def _run(it, device: str, opts: list[Opt] | None, arrays: dict[int, np.ndarray],
         target: Target | None = None, lowered_for: Target | None = None) -> np.ndarray:
    """The kernel lowered for `lowered_for` (default: the target it runs on) and run on `device`: the python
    reference given a cpu target's LINEAR interprets the very program that target runs."""
    dev = get_device(device)
    target = target or dev.default_target()
    k = dev.compile(lower_kernel(it.ast, lowered_for or target, opts=opts), it.name, target)
    bufs = {i: (np.zeros_like(arrays[1], shape=(it.bufs[0].shape[0],)) if i == 0 else arrays[i].copy())
            for i in range(len(it.bufs))}
    bufs[0] = np.zeros(int(np.prod(it.bufs[0].shape)), dtype=np.float32)
    k(bufs)
    return bufs[0]


def _cases() -> list[tuple[str, UOp]]:
    a, b = new_buffer(dtypes.float32, (8, 16), "cpu"), new_buffer(dtypes.float32, (16, 8), "cpu")
    mm = (a.reshape((8, 16, 1)).expand((8, 16, 8)) * b.reshape((1, 16, 8)).expand((8, 16, 8))).sum((1,))
    sm = (a - a.max((1,)).expand((8, 16))).exp2()
    c, d = new_buffer(dtypes.float32, (16, 32), "cpu"), new_buffer(dtypes.float32, (32, 64), "cpu")
    wide = (c.reshape((16, 32, 1)).expand((16, 32, 64)) * d.reshape((1, 32, 64)).expand((16, 32, 64))).sum((1,))
    return [("matmul", mm), ("matmul_wide", wide), ("softmaxish", sm / sm.sum((1,)).expand((8, 16))),
            ("rowsum", a.sum((1,)) * 2.0),
            ("elementwise", (a * 3.0 + 1.0).sqrt())]


def _inputs(it) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i: rng.standard_normal(int(np.prod(b.shape))).astype(np.float32) for i, b in enumerate(it.bufs) if i}


_TARGETS = [AxisType.LOOP, AxisType.THREAD, AxisType.REDUCE, AxisType.UPCAST, AxisType.UNROLL]


@st.composite
def opt_lists(draw: st.DrawFn, ast: UOp) -> list[Opt]:
    opts: list[Opt] = []
    for _ in range(draw(st.integers(0, 5))):
        rs = axes(ast)
        i = draw(st.integers(0, len(rs) - 1))
        kind = draw(st.integers(0, 5))
        if kind == 0:  # sometimes a loop swap
            o = Opt(OptOps.SWAP, i, draw(st.integers(0, len(rs) - 1)))
        elif kind == 1:  # or a pad to a multiple, masked or repeating the last iteration
            m = draw(st.sampled_from([3, 4, 16]))
            o = Opt(OptOps.PADTO, i, (m, "repeat") if draw(st.booleans()) else m)
        else:
            n = size(rs[i])
            divs = [d for d in (2, 4, 8, 16) if n % d == 0]
            if not divs:
                continue
            arg = (draw(st.sampled_from(divs)), draw(st.sampled_from(_TARGETS)), draw(st.booleans()))
            o = Opt(OptOps.SPLIT, i, arg)
        try:
            ast = apply_opt(ast, o)
        except KernelOptError:
            continue
        opts.append(o)
    return opts


@pytest.mark.parametrize("name", [c[0] for c in _cases()])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_opts_keep_results(name: str, data: st.DataObject) -> None:
    it = _kernel(dict(_cases())[name])
    opts = data.draw(opt_lists(it.ast))
    arrays = _inputs(it)
    ref = _run(it, "python", [], arrays)
    try:
        got_py = _run(it, "python", opts, arrays)
    except KernelOptError:
        return
    # lanes can change the order of a reduction's additions: equal up to rounding, then cpu == python exactly
    np.testing.assert_allclose(got_py, ref, rtol=1e-5, atol=1e-5)
    try:
        got_cpu = _run(it, "cpu", opts, arrays)
    except KernelOptError as e:  # the cpu target bounds the copies of the body that lanes past a register make
        assert "copies of the kernel body" in str(e), e
        return
    np.testing.assert_array_equal(got_cpu, got_py)


def _matmul(m: int, k: int, n: int) -> UOp:
    a, b = new_buffer(dtypes.float32, (m, k), "cpu"), new_buffer(dtypes.float32, (k, n), "cpu")
    return (a.reshape((m, k, 1)).expand((m, k, n)) * b.reshape((1, k, n)).expand((m, k, n))).sum((1,))


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64"])
def test_hand_coded_register_tile(level: str) -> None:
    """A matmul gets a register tile sized by the target: columns upcast to 2 vectors of one register's lanes,
    rows to as many copies as the registers hold accumulators for (AVX-512: 12 rows x 2 vectors of 16 lanes;
    AVX2: 6 x 2 of 8; both pad the 32 rows to 36 by repeating the last), the column loop outside the row loop; it
    accumulates in rows x vecs vector registers, with fused MULACCs where the target has FMA instructions and
    with a vector multiply and add where it has none (x86-64-v2: a fused one would be a libm fmaf call per
    lane), and where the host runs the target, cpu == python interpreting the same program."""
    target = cpu_target(level)
    lanes = target.lanes(4)
    it = _kernel(_matmul(32, 24, 64))
    opts = hand_coded(it.ast, target, threads=1)
    rows, vecs = tile_shape(32, 64, lanes, target)
    assert rows * vecs <= target.vector_registers - 4
    # never fewer useful accumulators than the best tile that divides the rows exactly (32 rows padded to a
    # multiple of 6 leave 32/36 of a 6x2 tile's 12 accumulators useful: 10.7, more than an exact 4x2's 8)
    exact = max(r * v for r, v in tile_shapes(target) if 32 % r == 0 and 64 % (v * lanes) == 0)
    assert rows * vecs * 32 / (-(-32 // rows) * rows) >= exact
    ups = [o.arg[0] for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.UPCAST]  # type: ignore[index]
    assert sorted(ups) == sorted([vecs, rows, lanes]) and any(o.op is OptOps.SWAP for o in opts), opts
    pads = [o for o in opts if o.op is OptOps.PADTO]
    assert pads == ([Opt(OptOps.PADTO, 0, (rows, "repeat"))] if 32 % rows else []), opts
    lin = lower_kernel(it.ast, target, opts=opts)
    fmas = [u for u in lin.src if u.op is Ops.MULACC]
    src = get_device("cpu").render(lin, "tile")
    assert "lane_l" not in src and f"f32x{lanes} acc{rows * vecs - 1};" in src and f"acc{rows * vecs};" not in src
    if target.fma:
        assert len(fmas) == rows * vecs and all(u.shape == (lanes,) for u in fmas)
        assert f"vfma_f32x{lanes}(" in src
    else:
        adds = [u for u in lin.src if u.op is Ops.STORE and u.src[1].op is Ops.ADD and u.src[1].shape == (lanes,)
                and any(x.op is Ops.MUL for x in u.src[1].src)]
        assert not fmas and len(adds) == rows * vecs and "vfma_" not in src and "fmaf" not in src
    if not target.runs_here:
        return
    arrays = _inputs(it)
    got = _run(it, "cpu", opts, arrays, target)
    np.testing.assert_array_equal(got, _run(it, "python", opts, arrays, lowered_for=target))
    if target.fma:  # the reference's own lowering fuses too: the same roundings
        np.testing.assert_array_equal(got, _run(it, "python", opts, arrays))
    want = arrays[1].reshape(32, 24).astype(np.float64) @ arrays[2].reshape(24, 64)
    np.testing.assert_allclose(got.reshape(32, 64), want, rtol=1e-5, atol=1e-5)


def test_register_tile_grows_with_the_registers() -> None:
    """The largest register tile follows the target's vector registers (lower.opt_tiles.tile_shapes): 32 AVX-512
    registers hold a 12 x 2 tile (24 accumulators, the column vectors and a broadcast), AVX2's 16 a 6 x 2; NEON's
    32 an 8 x 2, its rows' values held in registers of their own. Every tile leaves TILE_SPARE registers and no
    more than TILE_ACCUMULATORS accumulators, and a matmul of 1024 rows picks the largest, padded to whole tiles."""
    from lower.opt_tiles import TILE_ACCUMULATORS, TILE_SPARE

    first = {lv: tile_shapes(cpu_target(lv))[0] for lv in ("x86-64-v3", "x86-64-v4", "aarch64")}
    assert first == {"x86-64-v3": (6, 2), "x86-64-v4": (12, 2), "aarch64": (8, 2)}
    for lv in first:
        target = cpu_target(lv)
        assert all(r * v <= min(TILE_ACCUMULATORS, target.vector_registers - TILE_SPARE)
                   for r, v in tile_shapes(target))
        assert tile_shape(1024, 1024, target.lanes(4), target) == first[lv]


def test_unoptimized_sums_of_products_do_not_fuse() -> None:
    """MULACC rounds once, so it is an optimization: NOOPT keeps the multiply and the add."""
    it = _kernel(_matmul(4, 8, 4))
    with Context(NOOPT=1):
        lin = lower_kernel(it.ast, get_device("cpu"))
    assert not any(u.op is Ops.MULACC for u in lin.src)
    fma = cpu_target("x86-64-v3")  # a target with FMA instructions: there (only) an optimized sum fuses
    assert any(u.op is Ops.MULACC for u in lower_kernel(it.ast, fma, opts=[]).src)


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
def test_upcast_beyond_a_register_becomes_copies(level: str) -> None:
    """64 float32 lanes along the output: one register's lanes (16 with AVX-512, 8 with AVX2, 4 with SSE),
    replicated to cover the rest (4, 8 or 16 stores of one vector each). The result equals the python reference
    interpreting the same program, and where the target fuses multiply-adds as the reference does (FMA), the
    reference's own lowering; x86-64-v2 has no FMA and rounds the product and the sum apart."""
    target = cpu_target(level)
    lanes = target.lanes(4)
    it = _kernel(_matmul(4, 8, 64))
    opts = [Opt(OptOps.SPLIT, 1, (64, AxisType.UPCAST, False))]
    lin = lower_kernel(it.ast, target, opts=opts)
    stores = [u for u in lin.src if u.op is Ops.STORE and u.src[0].src[0].op is Ops.BUFFER and
              u.src[0].src[0].arg.addrspace.name == "GLOBAL"]
    assert len(stores) == 64 // lanes and all(u.src[1].shape == (lanes,) for u in stores)
    arrays = _inputs(it)
    if target.runs_here:
        got = _run(it, "cpu", opts, arrays, target)
        np.testing.assert_array_equal(got, _run(it, "python", opts, arrays, lowered_for=target))
        if target.fma:
            np.testing.assert_array_equal(got, _run(it, "python", opts, arrays))
    big = _kernel(_matmul(32, 8, 64))  # 32 rows x 4 register copies: more copies than the limit
    with pytest.raises(KernelOptError, match="copies"):
        lower_kernel(big.ast, get_device("cpu"), opts=[Opt(OptOps.SPLIT, 1, (64, AxisType.UPCAST, False)),
                                                       Opt(OptOps.SPLIT, 0, (32, AxisType.UPCAST, False))])


def test_illegal_opts_say_why() -> None:
    it = _kernel(dict(_cases())["rowsum"])  # axes (8 loop, 16 reduce)
    with pytest.raises(KernelOptError, match="does not divide"):
        apply_opt(it.ast, Opt(OptOps.SPLIT, 0, (3, AxisType.UPCAST, False)))
    with pytest.raises(KernelOptError, match="cannot be split from a REDUCE"):
        apply_opt(it.ast, Opt(OptOps.SPLIT, 1, (4, AxisType.UPCAST, False)))
    with pytest.raises(KernelOptError, match="axis out of range"):
        apply_opt(it.ast, Opt(OptOps.SPLIT, 7, (2, AxisType.LOOP, False)))
    with pytest.raises(KernelOptError, match="tensor cores"):
        apply_opt(it.ast, Opt(OptOps.TC, 0, None))
    with pytest.raises(KernelOptError, match="positive int"):
        apply_opt(it.ast, Opt(OptOps.PADTO, 0, 0))


def _matmul_6x10x7_with(opts: list[Opt]) -> Any:
    """A 6x10 @ 10x7 matmul kernel run with `opts` on cpu: equal to the python device and to numpy."""
    it = _kernel(_matmul(6, 10, 7))
    arrays = _inputs(it)
    want = arrays[1].reshape(6, 10).astype(np.float64) @ arrays[2].reshape(10, 7)
    got = _run(it, "cpu", opts, arrays)
    np.testing.assert_array_equal(got, _run(it, "python", opts, arrays))
    np.testing.assert_allclose(got.reshape(6, 7), want, rtol=1e-5, atol=1e-5)
    return it


@pytest.mark.parametrize("opts", [
    [Opt(OptOps.PADTO, 2, 16)],  # the reduction: the padded steps add 0
    [Opt(OptOps.PADTO, 1, 16), Opt(OptOps.SPLIT, 1, (16, AxisType.UPCAST, False))],  # gated lanes
    [Opt(OptOps.PADTO, 0, 8), Opt(OptOps.SPLIT, 0, (8, AxisType.UPCAST, False)),  # copies, and unrolled lanes
     Opt(OptOps.PADTO, 3, 4), Opt(OptOps.SPLIT, 3, (4, AxisType.UNROLL, False))]])
def test_padto_masks_the_extra_iterations(opts: list[Opt]) -> None:
    _matmul_6x10x7_with(opts)
    maxed = _kernel(new_buffer(dtypes.float32, (6, 10), "cpu").max((1,)))  # MAX's identity is -inf, not 0
    neg = {1: -np.abs(_inputs(maxed)[1]) - 1.0}
    got = _run(maxed, "cpu", [Opt(OptOps.PADTO, 1, 16)], neg)
    np.testing.assert_array_equal(got, neg[1].reshape(6, 10).max(1))


@pytest.mark.parametrize("opts", [
    [Opt(OptOps.PADTO, 0, (4, "repeat"))],  # 6 rows run as 8, the last two repeating row 5
    [Opt(OptOps.PADTO, 0, (4, "repeat")), Opt(OptOps.SPLIT, 0, (4, AxisType.UPCAST, False))],  # row copies
    [Opt(OptOps.PADTO, 1, (8, "repeat")), Opt(OptOps.SPLIT, 1, (8, AxisType.UPCAST, False))],  # gated lanes
    [Opt(OptOps.PADTO, 0, (5, "repeat")), Opt(OptOps.PADTO, 1, (3, "repeat"))]])
def test_padto_repeat_stores_only_the_real_iterations(opts: list[Opt]) -> None:
    """PADTO (m, "repeat") on output axes: the extra iterations recompute the last real one (their loads clamp to
    it, ungated) and store nothing, so the result is exact and cpu == python running the same program."""
    it = _matmul_6x10x7_with(opts)
    lin = lower_kernel(it.ast, cpu_target("native"), opts=opts)
    assert not [u for u in lin.src if u.op is Ops.LOAD and len(u.src) >= 3], "a repeating pad gates no load"


def test_padto_repeat_in_place_update_runs_once() -> None:
    """An in-place read-modify-write (x += 1 on a realized buffer, 7 elements padded to 8): the repeated last
    iteration stores nothing, so element 6 is incremented once, not twice."""
    x = Tensor(np.arange(7, dtype=np.float32)).realize()
    (it,) = [i for i in x.assign(x + 1.0).schedule() if i.kind == "kernel"]
    opts = [Opt(OptOps.PADTO, 0, (8, "repeat"))]
    k = get_device("cpu").compile(lower_kernel(it.ast, cpu_target("native"), opts=opts), it.name)
    bufs = {0: np.arange(7, dtype=np.float32)}
    k(bufs)
    np.testing.assert_array_equal(bufs[0], np.arange(7, dtype=np.float32) + 1)


def test_padto_repeat_refuses_a_reduction() -> None:
    it = _kernel(dict(_cases())["rowsum"])  # axes (8 loop, 16 reduce)
    with pytest.raises(KernelOptError, match=r"only output .*REDUCE"):
        apply_opt(it.ast, Opt(OptOps.PADTO, 1, (5, "repeat")))
    with pytest.raises(KernelOptError, match="positive int"):
        apply_opt(it.ast, Opt(OptOps.PADTO, 0, (0, "repeat")))


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_sum_of_exp_unrolls_into_lanes(level: str) -> None:
    """exp's exponent k comes from the bits of x*log2(e) + 1.5 * 2**23 (tensor.transcendental.exp_parts), with no
    float-to-int conversion at all (a cast that interval analysis could not bound was the per-lane wrapping helper:
    softmax 4096^2 was a scalar loop calling f2i_wrap per element, 711 ms), and a reduction over exp still unrolls
    into vector lanes. NaN inputs still give exp(nan) = nan; cpu == python running the same program."""
    from tensor.transcendental import exp_uop

    target = cpu_target(level)
    lanes = target.lanes(4)
    a = new_buffer(dtypes.float32, (4, 64), "cpu")
    it = _kernel(exp_uop(a).sum((1,)))
    opts = hand_coded(it.ast, target, threads=1)
    assert any(o.op is OptOps.SPLIT and o.arg[1] is AxisType.UNROLL for o in opts), opts  # type: ignore[index]
    src = get_device("cpu").render(lower_kernel(it.ast, target, opts=opts), "sumexp")
    assert "f2i_wrap" not in src and "__builtin_convertvector" not in src and f"i32x{lanes}" in src
    if not target.runs_here:
        return
    arrays = _inputs(it)
    arrays[1][:8] = [np.nan, np.inf, -np.inf, 88.0, 89.0, -100.0, -104.0, 0.0]
    arrays[1][64:] *= 30.0
    got = _run(it, "cpu", opts, arrays, target)
    np.testing.assert_array_equal(got, _run(it, "python", opts, arrays, lowered_for=target))
    want = np.exp(arrays[1].astype(np.float64)).reshape(4, 64).sum(1)
    assert np.isnan(got[0]) and np.isinf(got[3])
    np.testing.assert_allclose(got[1:3], want[1:3], rtol=1e-5)


def test_padded_upcast_with_unrolled_reduce_keeps_gate_lanes() -> None:
    """Found by test_random_opts_keep_results: after expand a padded axis's gate is a lane vector whose lanes
    come only from terms lt-linear may drop; the rewrite must keep the comparison a vector (it made a scalar,
    and the lane picks of it failed with a ShapeError)."""
    it = _kernel(dict(_cases())["matmul_wide"])
    opts = [Opt(OptOps.PADTO, 1, 3), Opt(OptOps.SPLIT, 1, (2, AxisType.UPCAST, False)),
            Opt(OptOps.SPLIT, 3, (16, AxisType.UNROLL, False))]
    arrays = _inputs(it)
    ref = _run(it, "python", [], arrays)
    got = _run(it, "python", opts, arrays)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_run(it, "cpu", opts, arrays), got)


def _evaluated_stride(idx: UOp, r: UOp) -> int | None:
    """The stride the reference evaluator gives: idx at r = 0, 1, 2 (other ranges 0), when it steps evenly; for a
    range of 2, its one step (r = 0, 1: it has no third value to step unevenly to)."""
    from rewrite.errors import EvalError
    from rewrite.render import render

    names = {render(q): q for q in idx.toposort() if q.op is Ops.RANGE}
    two = r.src[0].op is Ops.CONST and r.src[0].arg[0] == 2
    try:
        at = [idx.evaluate({n: (k if q is r else 0) for n, q in names.items()}) for k in ((0, 1) if two else (0, 1, 2))]
    except EvalError:
        return None
    return int(at[1] - at[0]) if two or at[2] - at[1] == at[1] - at[0] else None


_R0, _R1, _R2 = UOp.range(16, 1), UOp.range(8, 2), UOp.range(2, 3)
_N = UOp.variable("n", 1, 32)


@pytest.mark.parametrize("idx", [
    _R0 * 4 + _R1, _R1 * 16 + _R0 * 2 + 5, (_R0 * 4 + _R1) // 4, (_R0 * 3 + 1) % 5, _R0 // 3, (_R0 + 7) % 8,
    _R0 * _R1 + _R0, _R2 * 4 + _R0, _R0 // (_R1 * 0 + 0) + 1, _R0 * _N, _R0 + _N, UOp.const(3) + _R1 * 0,
    (_R0 * -2 + 30) // 4, _R0 % 3 * 7 + _R1,
], ids=lambda u: u.render())
def test_stride_matches_the_evaluator(idx: UOp) -> None:
    """lower.optimize's stride of an address along each of its ranges (a one-walk fast path for plain index math)
    is what the reference evaluator gives, None included (uneven steps, a division by zero, a free variable); a
    range of 2 steps once."""
    from lower.strides import _stride_of

    for r in (_R0, _R1, _R2):
        want = _evaluated_stride(idx, r) if r in idx.toposort() else 0
        assert _stride_of(idx, r) == want
