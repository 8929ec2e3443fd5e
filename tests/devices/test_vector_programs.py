"""Vector programs on both devices: memory access forms, accumulators, a matmul tile, lanes and STACK, the C
they render to, and the programs the LINEAR checker refuses. cpu results must equal the python device's."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.cpu import DEVICE as CPU
from devices.python import DEVICE as PY
from rewrite.dtype import DType, dtypes
from rewrite.errors import CompileError, DeviceError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import (
    ALL_DTYPES,
    assert_same,
    block_positions,
    buf,
    end,
    linear,
    matmul_tile,
    matmul_tile_scalar,
    reg,
    storage,
    value_strategy,
    vconst,
)

F32, I32, BOOL = dtypes.float32, dtypes.int32, dtypes.bool


def run_both(prog: UOp, arrays: dict[int, np.ndarray], name: str = "k") -> tuple[dict, dict]:
    """Run `prog` on the cpu and the python device, each on its own copy of `arrays`."""
    out = []
    for k in (CPU.compile(prog, name), PY.compile(prog, name)):
        bufs = {s: a.copy() for s, a in arrays.items()}
        k(bufs)
        out.append(bufs)
    return out[0], out[1]


def assert_both_same(got: dict, want: dict, dtypes_: dict[int, DType], what: str) -> None:
    for s, dt in dtypes_.items():
        assert_same(got[s], want[s], dt, f"{what} slot {s}")


# ---------------------------------------------------------------- memory: every access form on every dtype


L, BLOCKS = 8, 3
N = L * BLOCKS


def memory_forms(dt: DType) -> UOp:
    """Each output reads input x (slot 10) and writes in another form; g (slot 11) is a bool per element,
    y (slot 12) gives alt values."""
    x, g, y = buf(10, dt, N), buf(11, BOOL, N), buf(12, dt, N)
    outs = [buf(k, dt, N) for k in range(7)]
    r = UOp.range(BLOCKS, 0)
    cont, rev = block_positions(r, L), block_positions(r, L, reverse=True)
    gv, gs = g.index(cont).load(), g.index(r * L).load()  # a gate per lane; one for the block
    xv, yv = x.index(cont).load(), y.index(cont).load()
    alt = y.index(r * L).load()
    stores = [
        outs[0].index(rev).store(xv),  # scatter
        outs[1].index(cont).store(x.index(rev).load()),  # gather
        outs[2].index(cont).store(x.index(cont).load(yv, gv)),  # consecutive, gated per lane, vector alt
        outs[3].index(cont).store(x.index(rev).load(alt, gs)),  # gather under a scalar gate, scalar alt
        outs[4].index(cont).store(x.index(cont).load(yv, gs), gs),  # whole vector under a scalar gate
        outs[5].index(rev).store(xv, gv),  # scatter gated per lane
        outs[6].index(cont).store(yv, gv),  # consecutive store gated per lane
    ]
    return linear(*outs, x, g, y, r, gv, gs, xv, yv, alt, *stores, end(stores[-1], r))


@pytest.mark.parametrize("dt", ALL_DTYPES, ids=lambda d: d.name)
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_memory_forms_match(dt: DType, data: st.DataObject) -> None:
    vals = st.lists(value_strategy(dt), min_size=N, max_size=N)
    x, y = storage(data.draw(vals), dt), storage(data.draw(vals), dt)
    g = np.array(data.draw(st.lists(st.booleans(), min_size=N, max_size=N)), np.bool_)
    fill = storage(data.draw(vals), dt)  # outputs start non-zero: gated-off lanes must keep it
    arrays = {10: x, 11: g, 12: y, **{k: fill.copy() for k in range(7)}}
    got, want = run_both(memory_forms(dt), arrays, f"memory_{dt.name}")
    assert_both_same(got, want, dict.fromkeys(range(7), dt), f"memory forms {dt.name}")
    blocks = np.arange(N).reshape(BLOCKS, L)
    rev = blocks[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(want[0][rev], x)  # the oracle itself, on the plain forms
    np.testing.assert_array_equal(want[1], x[rev])
    np.testing.assert_array_equal(want[6], np.where(g, y, fill))


def test_gated_lanes_never_touch_memory_out_of_bounds() -> None:
    """out[i] = x[i - 3] where 3 <= i < 11, else -1: the off lanes' positions are outside x."""
    x, out = buf(1, F32, 8), buf(0, F32, 16)
    r = UOp.range(2, 0)
    pos = block_positions(r, 8)
    three, eleven = UOp.const(3), UOp.const(11)
    ld = x.index(pos - three).load(UOp.const(-1.0, F32), (pos >= three) & (pos < eleven))
    s = out.index(pos).store(ld)
    a = np.arange(1, 9, dtype=np.float32)
    got, want = run_both(linear(out, x, r, s, end(s, r)), {0: np.zeros(16, np.float32), 1: a})
    np.testing.assert_array_equal(want[0], np.concatenate([[-1] * 3, a, [-1] * 5]))
    np.testing.assert_array_equal(got[0], want[0])


def test_scatter_lanes_write_in_order() -> None:
    """Two lanes with one address: the later lane's value stays, on both devices."""
    out = buf(0, I32, 2)
    s = out.index(vconst([0, 0, 1, 1])).store(vconst([1, 2, 3, 4], I32))
    got, want = run_both(linear(out, s), {0: np.zeros(2, np.int32)})
    assert want[0].tolist() == got[0].tolist() == [2, 4]


# ---------------------------------------------------------------- accumulators, a matmul tile


def strided_sum(n: int, lanes: int = 16, dt: DType = F32) -> UOp:
    """out[0] = sum(a): a REG of `lanes` accumulates a[r*lanes + l] in lane l, then the lanes are added one by
    one through lane INDEX extractions (a horizontal sum)."""
    a, out, acc = buf(1, dt, n), buf(0, dt, 1), reg(100, dt, lanes)
    r = UOp.range(n // lanes, 0)
    vec = acc.index(vconst(list(range(lanes))))
    init = vec.store(vconst([0] * lanes, dt))
    upd = vec.store(vec.load() + a.index(block_positions(r, lanes)).load())
    e = end(upd, r)
    total = vec.after(e).load()
    s = total.index(0)
    for k in range(1, lanes):
        s = s + total.index(k)
    st_out = out.index(0).store(s)
    return linear(out, a, acc, init, r, upd, e, st_out)


@pytest.mark.parametrize("dt", [F32, I32, dtypes.bfloat16, dtypes.float16], ids=lambda d: d.name)
def test_vector_accumulator_and_horizontal_sum(dt: DType) -> None:
    rng = np.random.default_rng(3)
    vals = (rng.integers(-2**31, 2**31, 256) if dt is I32 else rng.standard_normal(256) * 100).tolist()
    a = storage(vals, dt)
    got, want = run_both(strided_sum(256, 16, dt), {0: storage([0], dt), 1: a}, f"hsum_{dt.name}")
    assert_same(got[0], want[0], dt, "horizontal sum")
    if dt in (F32, I32):  # the order: lane l adds a[l], a[16 + l], ... then lanes 0..15 left to right
        np_dt = np.float32 if dt is F32 else np.int32
        lanes_ = np.zeros(16, np_dt)
        with np.errstate(over="ignore"):
            for row in a.reshape(-1, 16):
                lanes_ = (lanes_ + row).astype(np_dt)
            total = lanes_[0]
            for v in lanes_[1:]:
                total = np_dt(total + v)
        assert want[0][0] == total


def test_matmul_register_tile() -> None:
    m, n, k = 8, 32, 12
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(m * k).astype(np.float32), rng.standard_normal(k * n).astype(np.float32)
    arrays = {0: np.zeros(m * n, np.float32), 1: a, 2: b}
    got, want = run_both(matmul_tile(m, n, k), arrays, "tile")
    np.testing.assert_array_equal(got[0], want[0])
    scalar = run_both(matmul_tile_scalar(m, n, k), arrays, "tile_scalar")
    np.testing.assert_array_equal(scalar[0][0], want[0])  # the same adds in the same order, one lane at a time
    np.testing.assert_array_equal(scalar[1][0], want[0])
    np.testing.assert_allclose(want[0], (a.reshape(m, k) @ b.reshape(k, n)).reshape(-1), rtol=1e-5, atol=1e-5)
    src = CPU.render(matmul_tile(m, n, k), "tile")
    loop = src[src.index("ridx2 = 0"):src.index("}", src.index("ridx2 = 0"))]
    assert "lane_l" not in loop and re.search(r"vloadr?_f32x16\(data2\+", loop) and "splat_f32x16(" in loop



@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_matmul_tile_pins_the_shared_column_load(lanes: int) -> None:
    """The tile's column vector of b, read by one multiply per row, is loaded through the pinning helper (kept in
    a register, not folded into each multiply as a memory operand); the accumulators' loads, read once, are plain
    vector loads. A pin is a no-op where no register is that wide (16 float lanes on AVX2), so every width
    compiles and equals the reference on every host."""
    m, n, k = 8, 2 * lanes, 5
    rng = np.random.default_rng(lanes)
    a, b = rng.standard_normal(m * k).astype(np.float32), rng.standard_normal(k * n).astype(np.float32)
    arrays = {0: np.zeros(m * n, np.float32), 1: a, 2: b}
    prog = matmul_tile(m, n, k, lanes=lanes)
    got, want = run_both(prog, arrays, f"tile{lanes}")
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[0], (a.reshape(m, k) @ b.reshape(k, n)).reshape(-1), rtol=1e-5, atol=1e-5)
    src = CPU.render(prog, f"tile{lanes}")
    loop = src[src.index("ridx2 = 0"):src.index("}", src.index("ridx2 = 0"))]
    assert len(re.findall(rf"vloadr_f32x{lanes}\(data2\+", loop)) == 1, loop
    assert f"vload_f32x{lanes}(acc0+" in loop and f"vloadr_f32x{lanes}(acc0" not in loop, loop
    assert f"VPIN{4 * lanes}(v)" in src

# ---------------------------------------------------------------- lanes and STACK


def test_lanes_and_stack() -> None:
    """Reverse a vector with STACK of lane extractions, STACK scalar loads, extract bool lanes."""
    x, o_rev, o_stack, o_bool, o_sum = buf(1, F32, 16), buf(0, F32, 16), buf(2, F32, 16), buf(3, BOOL, 16), \
        buf(4, F32, 2)
    r = UOp.range(2, 0)
    cont = block_positions(r, 8)
    v = x.index(cont).load()
    rev = UOp.stack(*(v.index(7 - j) for j in range(8)))
    picks = UOp.stack(*(x.index(r * 8 + (j * 3) % 8).load() for j in range(8)))
    mask = v > UOp.const(0.0, F32)
    bools = UOp.stack(*(mask.index(j) ^ UOp.const(j % 3 == 0) for j in range(8)))
    first_last = v.index(0) + v.index(7)
    stores = [o_rev.index(cont).store(rev), o_stack.index(cont).store(picks), o_bool.index(cont).store(bools),
              o_sum.index(r).store(first_last)]
    prog = linear(o_rev, o_stack, o_bool, o_sum, x, r, v, mask, *stores, end(stores[-1], r))
    xs = np.float32([3, -1, 0, 5, -2, 8, 1, -7, 2, 2, -3, 4, 0, -1, 6, 9])
    got, want = run_both(prog, {0: np.zeros(16, np.float32), 1: xs, 2: np.zeros(16, np.float32),
                                3: np.zeros(16, np.bool_), 4: np.zeros(2, np.float32)})
    assert_both_same(got, want, {0: F32, 2: F32, 3: BOOL, 4: F32}, "lanes")
    np.testing.assert_array_equal(want[0], xs.reshape(2, 8)[:, ::-1].reshape(-1))
    np.testing.assert_array_equal(want[2], xs.reshape(2, 8)[:, [(j * 3) % 8 for j in range(8)]].reshape(-1))
    np.testing.assert_array_equal(want[3], (xs > 0) ^ np.tile([j % 3 == 0 for j in range(8)], 2))
    np.testing.assert_array_equal(want[4], [xs[0] + xs[7], xs[8] + xs[15]])


# ---------------------------------------------------------------- the C text


def test_vector_source_shapes() -> None:
    x, o = buf(1, F32, 32), buf(0, F32, 32)
    r = UOp.range(2, 0)
    cont = block_positions(r, 16)
    s = o.index(cont).store(x.index(cont).load() + x.index(block_positions(r, 16, reverse=True)).load())
    src = CPU.render(linear(o, x, r, s, end(s, r)), "v")
    assert "typedef float f32x16 __attribute__((vector_size(64), aligned(4)));" in src
    assert "return *(const f32x16_m*)p;" in src and "vload_f32x16(data1+alu0)" in src
    assert "vstore_f32x16(data0+alu0, val0+val1);" in src  # a native vector add
    assert src.count("for (int lane_l") == 1  # only the gather goes lane by lane
    v = x.index(cont).load()
    m = v < UOp.const(1.0, F32)  # a comparison selecting lanes of its own width: its mask, a bit-select
    s2 = o.index(cont).store(m.where(UOp.const(1.0, F32), UOp.const(2.0, F32)))
    src = CPU.render(linear(o, x, r, s2, end(s2, r)), "w")
    assert "vsel_f32x16((i32x16)(val0<" in src and "__builtin_convertvector" not in src and "lane_l" not in src
    both = m & (v > UOp.const(-1.0, F32))  # any other bool vector: an i8 mask, widened for the select
    s3 = o.index(cont).store(both.where(UOp.const(1.0, F32), UOp.const(2.0, F32)))
    src = CPU.render(linear(o, x, r, s3, end(s3, r)), "w")
    assert "__builtin_convertvector((val0<" in src and "vwhere_f32x16(" in src and "lane_l" not in src


# ---------------------------------------------------------------- the checker


def _bad_vector_programs() -> list[tuple[str, UOp, str]]:
    o, g = buf(0, F32, 64), buf(1, BOOL, 64)
    v4 = vconst([0, 1, 2, 3])
    ld4 = o.index(v4).load()
    gate8 = g.index(vconst(list(range(8)))).load()
    return [
        ("vector-dtype", linear(UOp.const(1.0, F32.vec(2))), "vector dtype"),
        ("three-lanes", linear(o, o.index(vconst([0, 1, 2])).load()), "power of two"),
        ("128-lanes", linear(o, o.index(vconst(list(range(128)))).load()), "power of two"),
        ("one-lane", linear(o, o.index(vconst([5])).load()), "power of two"),
        ("gate-lanes", linear(o, g, gate8, o.index(v4).store(vconst([1.0] * 4, F32), gate8)), "the index's lanes"),
        ("lane-out-of-range", linear(o, ld4, ld4.index(4)), "0 <= k < 4"),
        ("lane-not-const", linear(o, ld4, ld4.index(UOp.variable("k", 0, 3))), "CONST k"),
        ("vector-if", linear(o, ld4, UOp(Ops.IF, (ld4 < UOp.const(1.0, F32),))), "scalar bool"),
        ("bitcast-resize", linear(o, ld4, ld4.bitcast(dtypes.float16)), "keep the element size"),
        ("load-of-lane", linear(o, ld4, ld4.index(1), UOp(Ops.LOAD, (ld4.index(1),))), "INDEX of a buffer"),
    ]


@pytest.mark.parametrize("name,prog,msg", _bad_vector_programs(), ids=[p[0] for p in _bad_vector_programs()])
def test_checker_refuses_bad_vectors(name: str, prog: UOp, msg: str) -> None:
    for dev in (PY, CPU):
        with pytest.raises(CompileError, match=msg):
            dev.compile(prog, name)


def test_shape_operands_listed_but_unread_are_fine() -> None:
    """A linearizer lists a BUFFER's shape VCONST ((5,), one lane); nothing reads it, so it is no value."""
    o = buf(0, I32, 5)
    prog = UOp(Ops.LINEAR, (o.src[0], *linear(o, o.index(2).store(UOp.const(7, I32))).src))
    got, want = run_both(prog, {0: np.zeros(5, np.int32)})
    assert got[0].tolist() == want[0].tolist() == [0, 0, 7, 0, 0]


@pytest.mark.parametrize("lanes", [2, 64])
@pytest.mark.parametrize("dt", [F32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.uint64, BOOL],
                         ids=lambda d: d.name)
def test_narrowest_and_widest_vectors(dt: DType, lanes: int) -> None:
    """A few ops at 2 and 64 lanes: arithmetic, MAX, a compare into WHERE, a cast, a gather."""
    x, y, o1, o2, o3 = buf(1, dt, 2 * lanes), buf(2, dt, 2 * lanes), buf(0, dt, 2 * lanes), buf(3, dt, 2 * lanes), \
        buf(4, F32, 2 * lanes)
    r = UOp.range(2, 0)
    cont, rev = block_positions(r, lanes), block_positions(r, lanes, reverse=True)
    a, b = x.index(cont).load(), y.index(rev).load()
    arith = (a ^ b) if dt is BOOL else (a * b + a)
    stores = [o1.index(cont).store(arith.maximum(b)), o2.index(rev).store((a < b).where(a, b)),
              o3.index(cont).store(a.cast(F32))]
    prog = linear(o1, o2, o3, x, y, r, a, b, *stores, end(stores[-1], r))
    rng = np.random.default_rng(lanes)
    n = 2 * lanes
    if dt is BOOL:
        vals = rng.integers(0, 2, n).astype(bool).tolist()
    else:
        lo = -100 if dt.kind == "i" else 0
        vals = (rng.integers(lo, 100, n) if dt.is_int else rng.standard_normal(n) * 10).tolist()
    arrays = {1: storage(vals, dt), 2: storage(vals[::-1], dt), 0: storage([0] * n, dt), 3: storage([0] * n, dt),
              4: np.zeros(n, np.float32)}
    got, want = run_both(prog, arrays, f"w{lanes}_{dt.name}")
    assert_both_same(got, want, {0: dt, 3: dt, 4: F32}, f"{lanes} lanes")


def test_unwritten_register_lanes_are_an_error_on_the_reference() -> None:
    acc, o = reg(5, F32, 4), buf(0, F32, 4)
    part = acc.index(vconst([0, 1])).store(vconst([1.0, 2.0], F32))
    whole = o.index(vconst([0, 1, 2, 3])).store(acc.index(vconst([0, 1, 2, 3])).load())
    with pytest.raises(DeviceError, match=r"REG buffer \(slot 5\): element 2 is read before any STORE"):
        PY.compile(linear(o, acc, part, whole))({0: np.zeros(4, np.float32)})
