"""The reference device: hand-built LINEAR programs against numpy, sequential Python and rewrite.semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices import get_device
from devices.memory import from_bfloat16_bits, to_bfloat16_bits
from devices.python import DEVICE
from rewrite.dtype import DType, dtypes
from rewrite.errors import CompileError, DeviceError
from rewrite.ops import Ops
from rewrite.semantics import exec_alu, exec_bitcast, exec_cast, threefry2x32
from rewrite.uop import UOp
from tests.devices.builder import (
    ALL_DTYPES,
    alu_kernel,
    alu_ops,
    assert_same,
    buf,
    elementwise,
    end,
    linear,
    multi_output,
    operand_inputs,
    python_values,
    reg,
    storage,
    value_strategy,
)

F32 = dtypes.float32


def run(prog: UOp, bufs: dict[int, np.ndarray], var_vals: dict[str, int] | None = None) -> None:
    DEVICE.compile(prog, "test")(bufs, var_vals)


# ---------------------------------------------------------------- kernels with structure


def test_registry_and_ops() -> None:
    assert get_device("python") is DEVICE and DEVICE.name == "python"
    assert {Ops.IDIV, Ops.MOD, Ops.THREEFRY, Ops.EXP2, Ops.CAST, Ops.BITCAST, Ops.CDIV} <= DEVICE.supported_ops


def test_elementwise_add() -> None:
    a, b, out = np.arange(8, dtype=np.float32) * 0.1, np.full(8, 1.5, np.float32), np.zeros(8, np.float32)
    run(elementwise(lambda x, y: x + y, F32, [F32, F32]), {0: out, 1: a, 2: b})
    np.testing.assert_array_equal(out, a + b)


def reduction(n: int = 16) -> UOp:
    """out[0] = sum(a) with a REG accumulator: identity stored before the loop, read after its END."""
    a, out, acc = buf(1, F32, n), buf(0, F32, 1), reg(100, F32, 1)
    r = UOp.range(n, 0)
    acc_i = acc.index(0)
    init = acc_i.store(UOp.const(0.0, F32))
    upd = acc_i.store(acc_i.load() + a.index(r).load())
    e = end(upd, r)
    st_out = out.index(0).store(acc_i.after(e).load())
    return linear(out, a, acc, init, r, upd, e, st_out)


def test_reduction_with_register_accumulator() -> None:
    a = (np.arange(16, dtype=np.float32) - 7.3) * np.float32(0.37)
    out = np.zeros(1, np.float32)
    run(reduction(), {0: out, 1: a})
    want = np.float32(0)
    for x in a:  # the order the loop adds in, each step rounded to float32
        want = np.float32(want + x)
    assert out[0] == want


def matmul(n: int = 4) -> UOp:
    """c[i*n+j] = sum_k a[i*n+k] * b[k*n+j]: two outer loops, an inner reduce loop, a REG accumulator."""
    a, b, c, acc = buf(1, F32, n * n), buf(2, F32, n * n), buf(0, F32, n * n), reg(100, F32, 1)
    i, j, k = UOp.range(n, 0), UOp.range(n, 1), UOp.range(n, 2)
    acc_i = acc.index(0)
    init = acc_i.store(UOp.const(0.0, F32))
    prod = a.index(i * n + k).load() * b.index(k * n + j).load()
    upd = acc_i.store(acc_i.load() + prod)
    ek = end(upd, k)
    st_c = c.index(i * n + j).store(acc_i.after(ek).load())
    ej = end(st_c, j)
    # i*n is used inside the k loop and after it, so it is listed before the k loop opens
    return linear(c, a, b, i, i * n, j, acc, init, k, upd, ek, st_c, ej, end(ej, i))


def test_matmul_nested_loops() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    out = np.zeros(16, np.float32)
    run(matmul(), {0: out, 1: a, 2: b})
    want = np.zeros(16, np.float32)
    for i in range(4):
        for j in range(4):
            s = np.float32(0)
            for k in range(4):
                s = np.float32(s + np.float32(a[i * 4 + k] * b[k * 4 + j]))
            want[i * 4 + j] = s
    np.testing.assert_array_equal(out, want)
    np.testing.assert_allclose(out, (a.reshape(4, 4) @ b.reshape(4, 4)).reshape(-1), rtol=1e-5)


def padded(n: int = 8, pad: int = 2) -> UOp:
    """out[i] = a[i - pad] inside, -1 in the padding: a gated load whose index is out of bounds when off."""
    a, out = buf(1, F32, n), buf(0, F32, n + 2 * pad)
    r = UOp.range(n + 2 * pad, 0)
    gate = (r >= pad) & (r < n + pad)
    ld = a.index(r - pad).load(UOp.const(-1.0, F32), gate)
    st_ = out.index(r).store(ld)
    return linear(out, a, r, st_, end(st_, r))


def test_gated_load_padding() -> None:
    a, out = np.arange(1, 9, dtype=np.float32), np.zeros(12, np.float32)
    run(padded(), {0: out, 1: a})
    np.testing.assert_array_equal(out, np.pad(a, 2, constant_values=-1))


def test_where_and_gated_store() -> None:
    a, out = np.array([-2, 5, 0, 7, -1, 3, 9, -8], np.int32), np.full(8, 42, np.int32)
    x, o = buf(1, dtypes.int32, 8), buf(0, dtypes.int32, 8)
    r = UOp.range(8, 0)
    v = x.index(r).load()
    s1 = o.index(r).store((v < 0).where(-v, v * 2), v.ne(0))  # a gated STORE: index 2 keeps its 42
    run(linear(o, x, r, s1, end(s1, r)), {0: out, 1: a})
    np.testing.assert_array_equal(out, [2, 10, 42, 14, 1, 6, 18, 8])


def if_block() -> UOp:
    """out[i] = a[i] * 3 where a[i] > 0, inside an IF block; other elements untouched."""
    x, o = buf(1, dtypes.int32, 8), buf(0, dtypes.int32, 8)
    r = UOp.range(8, 0)
    v = x.index(r).load()
    blk = UOp(Ops.IF, (v > 0,))
    s1 = o.index(r).store(v * 3)
    eif = UOp(Ops.ENDIF, (blk,))
    return linear(o, x, r, v, blk, s1, eif, end(eif, r))


def test_if_block() -> None:
    a, out = np.array([1, -2, 3, 0, 5, -6, 7, 8], np.int32), np.zeros(8, np.int32)
    run(if_block(), {0: out, 1: a})
    np.testing.assert_array_equal(out, np.where(a > 0, a * 3, 0))


def two_ranges_one_end() -> UOp:
    """out[i*3+j] = i*10+j, both loops closed by a single END."""
    o = buf(0, dtypes.int32, 6)
    i, j = UOp.range(2, 0), UOp.range(3, 1)
    s1 = o.index(i * 3 + j).store((i * 10 + j).cast(dtypes.int32))
    return linear(o, i, j, s1, end(s1, j, i))


def test_one_end_closes_two_ranges() -> None:
    out = np.zeros(6, np.int32)
    run(two_ranges_one_end(), {0: out})
    np.testing.assert_array_equal(out, [0, 1, 2, 10, 11, 12])


def variable_kernel() -> UOp:
    """out[i] = a[i] + n for i < n, with n a kernel variable and the buffers sized n."""
    n = UOp.variable("n", 1, 32)
    a, o = buf(1, dtypes.int64, n), buf(0, dtypes.int64, n)
    r = UOp.range(n, 0)
    s1 = o.index(r).store(a.index(r).load() + n.cast(dtypes.int64))
    return linear(o, a, n, r, s1, end(s1, r))


def test_variables_as_kernel_params() -> None:
    k = DEVICE.compile(variable_kernel(), "var")
    for n in (1, 5, 10):
        a, out = np.arange(10, dtype=np.int64), np.full(10, -1, np.int64)
        k({0: out, 1: a}, {"n": n})
        np.testing.assert_array_equal(out[:n], a[:n] + n)
        assert (out[n:] == -1).all()
    with pytest.raises(DeviceError, match="'n' has no value"):
        k({0: out, 1: a})
    with pytest.raises(DeviceError, match="outside its range"):
        k({0: out, 1: a}, {"n": 40})
    with pytest.raises(DeviceError, match="has 10 elements, the kernel needs 20"):
        k({0: out, 1: np.arange(10, dtype=np.int64)}, {"n": 20})


def special_kernel(cores: int = 4, per: int = 3) -> UOp:
    """out[core_id*per + r] = a[...] * 2 + core_id: the body runs once per core_id value."""
    a, o = buf(1, dtypes.int32, cores * per), buf(0, dtypes.int32, cores * per)
    core = UOp(Ops.SPECIAL, (UOp.const(cores),), "core_id")
    r = UOp.range(per, 0)
    i = core * per + r
    s1 = o.index(i).store(a.index(i).load() * 2 + core.cast(dtypes.int32))
    return linear(o, a, core, r, s1, end(s1, r))


def test_special_core_id_runs_each_value() -> None:
    a, out = np.arange(12, dtype=np.int32), np.zeros(12, np.int32)
    run(special_kernel(), {0: out, 1: a})
    np.testing.assert_array_equal(out, a * 2 + np.repeat(np.arange(4), 3))


def test_zero_trip_loop_skips_its_body() -> None:
    n = UOp.variable("n", 0, 8)
    o = buf(0, dtypes.int32, 8)
    r = UOp.range(n, 0)
    s1 = o.index(r).store(UOp.const(7, dtypes.int32))
    k = DEVICE.compile(linear(o, n, r, s1, end(s1, r)))
    out = np.zeros(8, np.int32)
    k({0: out}, {"n": 0})
    assert not out.any()
    k({0: out}, {"n": 3})
    np.testing.assert_array_equal(out, [7, 7, 7, 0, 0, 0, 0, 0])


# ---------------------------------------------------------------- exact op meaning, against rewrite.semantics


def _expected(op: Ops, dtype: DType, ins: list[list], out_dtype: DType) -> np.ndarray:
    operand_dt = dtype
    return storage([exec_alu(op, operand_dt, *vals) for vals in zip(*ins, strict=True)], out_dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_alu_op_matches_semantics(dtype: DType, data: st.DataObject) -> None:
    ops = alu_ops(dtype, DEVICE.supported_ops)
    _, out_dtypes = alu_kernel(dtype, ops, n=4)
    k = _compiled(dtype)
    vals = st.lists(value_strategy(dtype), min_size=4, max_size=4)
    arrays = {s: storage(data.draw(vals), dtype) for s in (100, 101, 102)}
    divisor = value_strategy(dtype).filter(lambda v: v != 0) if not dtype.is_float else value_strategy(dtype)
    arrays[103] = storage(data.draw(st.lists(divisor, min_size=4, max_size=4)), dtype)
    bits = 8 if dtype is dtypes.index else max(dtype.bits, 1)
    shifts = st.integers(0, bits - 1) if dtype.is_int else value_strategy(dtype)
    arrays[104] = storage(data.draw(st.lists(shifts, min_size=4, max_size=4)), dtype)
    arrays[105] = storage(data.draw(st.lists(st.booleans(), min_size=4, max_size=4)), dtypes.bool)
    if dtype is dtypes.index:  # index never wraps; keep shifted values inside the int64 buffer
        arrays[100] = arrays[100] >> 12
    outs = {i: np.zeros(4, storage([], d).dtype) for i, d in enumerate(out_dtypes)}
    k({**arrays, **outs})
    for i, (op, od) in enumerate(zip(ops, out_dtypes, strict=True)):
        ins = [python_values(x, dtypes.bool if x.dtype == np.bool_ else dtype) for x in operand_inputs(op, arrays)]
        assert_same(outs[i], _expected(op, dtype, ins, od), od, f"{op.name}")


_KERNELS: dict[DType, object] = {}


def _compiled(dtype: DType):
    if dtype not in _KERNELS:
        _KERNELS[dtype] = DEVICE.compile(alu_kernel(dtype, alu_ops(dtype, DEVICE.supported_ops), n=4)[0], "alu")
    return _KERNELS[dtype]


def test_floor_division_and_truncation() -> None:
    prog = multi_output([lambda a, b: a // b, lambda a, b: a % b, lambda a, b: UOp(Ops.CDIV, (a, b)),
                         lambda a, b: UOp(Ops.CMOD, (a, b))], [dtypes.int32] * 4, [dtypes.int32] * 2, 4)
    a, b = np.array([-7, 7, -7, -(2**31)], np.int32), np.array([2, -2, -2, -1], np.int32)
    outs = {i: np.zeros(4, np.int32) for i in range(4)}
    run(prog, {100: a, 101: b, **outs})
    np.testing.assert_array_equal(outs[0], [-4, -4, 3, -(2**31)])  # floor, and INT_MIN // -1 wraps
    np.testing.assert_array_equal(outs[1], [1, -1, -1, 0])
    np.testing.assert_array_equal(outs[2], [-3, -3, 3, -(2**31)])  # C truncation
    np.testing.assert_array_equal(outs[3], [-1, 1, -1, 0])


def test_int_overflow_wraps() -> None:
    prog = multi_output([lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b], [dtypes.int8] * 3,
                        [dtypes.int8] * 2, 3)
    outs = {i: np.zeros(3, np.int8) for i in range(3)}
    run(prog, {100: np.array([127, -128, 100], np.int8), 101: np.array([1, -1, 3], np.int8), **outs})
    np.testing.assert_array_equal(outs[0], [-128, 127, 103])
    np.testing.assert_array_equal(outs[1], [127, -128, 44])
    np.testing.assert_array_equal(outs[2], [126, -127, 97])


def test_threefry() -> None:
    x, key = np.array([0, 1, 2**63 + 5], np.uint64), np.array([0, 7, 2**40], np.uint64)
    out = np.zeros(3, np.uint64)
    run(elementwise(lambda a, b: UOp(Ops.THREEFRY, (a, b)), dtypes.uint64, [dtypes.uint64] * 2, 3),
        {0: out, 1: x, 2: key})
    assert out.tolist() == [threefry2x32(int(a), int(b)) for a, b in zip(x, key, strict=True)]


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.name)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_casts_and_bitcasts_match_semantics(src: DType, data: st.DataObject) -> None:
    casts = [d for d in ALL_DTYPES if not (d is dtypes.index and (src.is_float or src is dtypes.uint64))]
    bitcasts = [d for d in ALL_DTYPES if d.itemsize == src.itemsize and dtypes.index not in (src, d)]
    fns = [lambda a, d=d: a.cast(d) for d in casts] + [lambda a, d=d: a.bitcast(d) for d in bitcasts]
    prog = multi_output(fns, casts + bitcasts, [src], 4)
    vals = data.draw(st.lists(value_strategy(src), min_size=4, max_size=4))
    if src.is_float:  # nan payloads are not kept by BITCAST (rewrite.semantics), so bitcast no nan
        vals = [0.0 if v != v else v for v in vals] if bitcasts else vals
    x = storage(vals, src)
    outs = {i: np.zeros(4, storage([], d).dtype) for i, d in enumerate(casts + bitcasts)}
    run(prog, {100: x, **outs})
    pv = python_values(x, src)
    for i, d in enumerate(casts):
        assert_same(outs[i], storage([exec_cast(v, src, d) for v in pv], d), d, f"cast {src.name}")
    for i, d in enumerate(bitcasts, len(casts)):
        assert_same(outs[i], storage([exec_bitcast(v, src, d) for v in pv], d), d, f"bitcast {src.name}")


def test_constants_are_the_values_of_their_dtype() -> None:
    consts = [UOp.const(0.1, F32), UOp.const(-0.0, F32), UOp.const(math.inf, dtypes.float16),
              UOp.const(1 / 3, dtypes.bfloat16), UOp.const(-(2**63), dtypes.int64), UOp.const(2**64 - 1, dtypes.uint64)]
    outs = [buf(i, c.dtype, 1) for i, c in enumerate(consts)]
    stores = [o.index(0).store(c) for o, c in zip(outs, consts, strict=True)]
    arrays = {i: np.zeros(1, storage([], c.dtype).dtype) for i, c in enumerate(consts)}
    run(linear(*outs, *stores), arrays)
    assert arrays[0][0] == np.float32(0.1) and math.copysign(1, arrays[1][0]) == -1 and arrays[2][0] == np.inf
    assert from_bfloat16_bits(arrays[3])[0] == from_bfloat16_bits(to_bfloat16_bits(np.float32([1 / 3])))[0]
    assert arrays[4][0] == -(2**63) and arrays[5][0] == 2**64 - 1


# ---------------------------------------------------------------- errors


def test_out_of_bounds_index_names_slot_index_and_size() -> None:
    a, o = buf(1, F32, 4), buf(0, F32, 5)
    r = UOp.range(5, 0)
    s1 = o.index(r).store(a.index(r).load())
    k = DEVICE.compile(linear(o, a, r, s1, end(s1, r)))
    with pytest.raises(DeviceError, match=r"buffer slot 1: index 4 is out of bounds for size 4"):
        k({0: np.zeros(5, np.float32), 1: np.zeros(4, np.float32)})
    neg = o.index(r - 1).store(UOp.const(1.0, F32))
    with pytest.raises(DeviceError, match=r"buffer slot 0: index -1 is out of bounds"):
        run(linear(o, r, neg, end(neg, r)), {0: np.zeros(5, np.float32)})


def test_register_read_before_write_and_runtime_errors() -> None:
    acc, o = reg(7, F32, 2), buf(0, F32, 1)
    s1 = o.index(0).store(acc.index(1).load())
    with pytest.raises(DeviceError, match=r"REG buffer \(slot 7\): element 1 is read before any STORE"):
        run(linear(o, acc, s1), {0: np.zeros(1, np.float32)})
    prog = elementwise(lambda a, b: a // b, dtypes.int32, [dtypes.int32] * 2, 2)
    bufs = {0: np.zeros(2, np.int32), 1: np.ones(2, np.int32), 2: np.array([1, 0], np.int32)}
    run(prog, bufs)
    assert bufs[0].tolist() == [1, 0]  # x // 0 is 0 (rewrite.semantics), as on the cpu device


def test_buffer_mismatches_raise_device_error() -> None:
    k = DEVICE.compile(elementwise(lambda a: a, F32, [F32], 8))
    good = np.zeros(8, np.float32)
    for bufs, msg in [
        ({0: good, 1: np.zeros(8, np.float64)}, "slot 1 has dtype float64"),
        ({0: good, 1: np.zeros(7, np.float32)}, "slot 1 has 7 elements, the kernel needs 8"),
        ({0: good}, "no array for buffer slot 1"),
        ({0: good, 1: np.zeros(16, np.float32)[::2]}, "C-contiguous"),
        ({0: good, 1: good}, "same memory"),
        ({0: np.zeros(8, np.float32), 1: [0.0] * 8}, "must be a numpy array"),
    ]:
        with pytest.raises(DeviceError, match=msg):
            k(bufs)
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    with pytest.raises(DeviceError, match="read-only"):
        k({0: ro, 1: good})


def _bad_programs() -> list[tuple[str, UOp, str]]:
    o = buf(0, F32, 4)
    r, r2 = UOp.range(4, 0), UOp.range(4, 1)
    c = UOp.const(1.0, F32)
    s1 = o.index(r).store(c)
    inner = o.index(r).load() + c  # made inside the loop
    s2 = o.index(0).store(inner)
    return [
        ("not-linear", s1, "takes a LINEAR"),
        ("source-after-use", UOp(Ops.LINEAR, (o, r, o.index(r), s1, c, end(s1, r))), "is not listed before it"),
        ("never-closed", linear(o, r, s1), "is never closed"),
        ("wrong-end", linear(o, r, r2, s1, end(s1, r), end(s1, r2)), "not the innermost open one"),
        ("listed-twice", UOp(Ops.LINEAR, (*linear(o, r, s1, end(s1, r)).src, o)), "listed twice"),
        ("use-after-block", linear(o, r, inner, s1, end(s1, r), s2), "after the block it was made in"),
        ("vector-dtype", linear(UOp.const(1.0, F32.vec(2))), "is a vector dtype"),
        ("vector-param", UOp(Ops.LINEAR, (UOp.param(0, dtypes.int32, (4,)),)), "PARAM must be a scalar"),
        ("movement-op", linear(UOp.const(1.0, F32).reshape((1,))), "not a LINEAR instruction"),
        ("custom", linear(UOp(Ops.CUSTOM, (), ("x", F32))), "cannot run CUSTOM"),
    ]


@pytest.mark.parametrize("name,prog,msg", _bad_programs(), ids=[p[0] for p in _bad_programs()])
def test_invalid_programs_raise_compile_error(name: str, prog: UOp, msg: str) -> None:
    with pytest.raises(CompileError, match=msg):
        DEVICE.compile(prog, name)


# ---------------------------------------------------------------- allocator


def test_allocator_aligns_pools_and_copies() -> None:
    a = DEVICE.alloc(100, F32)
    assert a.dtype == np.float32 and a.size == 100 and a.ctypes.data % 64 == 0
    DEVICE.copyin(a, np.arange(100, dtype=np.float32).reshape(10, 10))
    out = DEVICE.copyout(a)
    np.testing.assert_array_equal(out, np.arange(100, dtype=np.float32))
    addr = a.ctypes.data
    DEVICE.free(a)
    del a  # a freed array's memory is reused only once nothing references it (tests/devices/test_allocator.py)
    b = DEVICE.alloc(400, dtypes.uint8)  # the same 400 bytes come back, as another dtype
    assert b.ctypes.data == addr and b.dtype == np.uint8
    np.testing.assert_array_equal(out, np.arange(100, dtype=np.float32))  # copyout was a copy
    assert DEVICE.alloc(3, dtypes.bfloat16).dtype == np.uint16
    with pytest.raises(DeviceError, match="did not come from alloc"):
        DEVICE.free(np.zeros(3))
    with pytest.raises(DeviceError, match="does not fit"):
        DEVICE.copyin(b, np.zeros(3, np.float32))


def test_assert_same_is_strict() -> None:
    assert_same(np.float32([np.nan, -0.0, 1.0]), np.float32([np.nan, -0.0, 1.0]), F32)
    for got, want in [([-0.0], [0.0]), ([np.nan], [1.0]), ([1.0], [np.nextafter(np.float32(1), 2)])]:
        with pytest.raises(AssertionError):
            assert_same(np.float32(got), np.float32(want), F32)
    assert_same(np.float32([1.0]), np.float32([np.nextafter(np.float32(1), 2)]), F32, ulps=1)
    with pytest.raises(AssertionError):
        assert_same(np.uint16([0x3F80]), np.uint16([0x3F81]), dtypes.bfloat16)
