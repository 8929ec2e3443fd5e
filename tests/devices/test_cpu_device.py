"""The CPU device: generated C must compute exactly what the reference (python) device computes.

Every kernel is compiled in one batch (one compiler run) by the `cpu` fixture, then run on both devices.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices import get_device
from devices.c_render import PRELUDE
from devices.cpu import DEVICE, CPUKernel
from devices.python import DEVICE as PY
from rewrite.dtype import DType, dtypes
from rewrite.env import Context
from rewrite.errors import CompileError, DeviceError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import (
    ALL_DTYPES,
    TRANSCENDENTAL,
    alu_kernel,
    alu_ops,
    assert_same,
    buf,
    elementwise,
    end,
    linear,
    multi_output,
    storage,
    value_strategy,
)
from tests.devices.test_python_device import (
    if_block,
    matmul,
    padded,
    reduction,
    special_kernel,
    two_ranges_one_end,
    variable_kernel,
)

F32, I32 = dtypes.float32, dtypes.int32
N = 6


def _casts(src: DType) -> tuple[UOp, list[DType]]:
    # float -> index of nan/inf and values past int64 have no index value; tested apart below
    dsts = [d for d in ALL_DTYPES if not (d is dtypes.index and (src.is_float or src is dtypes.uint64))]
    return multi_output([lambda a, d=d: a.cast(d) for d in dsts], dsts, [src], N), dsts


def _bitcasts(src: DType) -> tuple[UOp, list[DType]]:
    dsts = [d for d in ALL_DTYPES if d.itemsize == src.itemsize and dtypes.index not in (src, d)]
    return multi_output([lambda a, d=d: a.bitcast(d) for d in dsts], dsts, [src], N), dsts


def _structured() -> dict[str, UOp]:
    return {"reduction": reduction(), "matmul": matmul(), "padded": padded(), "if_block": if_block(),
            "two_ranges": two_ranges_one_end(), "variable": variable_kernel(), "special": special_kernel(),
            "special_big": special_kernel(4, 5000)}


@pytest.fixture(scope="module")
def cpu() -> dict[str, tuple[CPUKernel, object, list[DType]]]:
    """name -> (cpu kernel, python kernel, output dtypes) for every kernel of this file, compiled at once."""
    progs: dict[str, tuple[UOp, list[DType]]] = {}
    for dt in ALL_DTYPES:
        progs[f"alu_{dt.name}"] = alu_kernel(dt, alu_ops(dt, DEVICE.supported_ops), N)
        progs[f"cast_{dt.name}"] = _casts(dt)
        if dt is not dtypes.index:
            progs[f"bitcast_{dt.name}"] = _bitcasts(dt)
        if dt in NUMERIC:
            progs[f"chain_{dt.name}"] = _chained(dt)
    progs |= {k: (v, []) for k, v in _structured().items()}
    ks = DEVICE.compile_batch([(p, name) for name, (p, _) in progs.items()])
    return {name: (k, PY.compile(p, name), dts) for k, (name, (p, dts)) in zip(ks, progs.items(), strict=True)}


def both(kernels: tuple, arrays: dict[int, np.ndarray], var_vals: dict[str, int] | None = None) -> tuple[dict, dict]:
    """Run the cpu and the python kernel on their own copies of `arrays` (inputs and zeroed outputs)."""
    res = []
    for k in kernels[:2]:
        bufs = {s: a.copy() for s, a in arrays.items()}
        k(bufs, var_vals)
        res.append(bufs)
    return res[0], res[1]


def zeros(dts: list[DType], n: int = N) -> dict[int, np.ndarray]:
    return {i: np.zeros(n, storage([], d).dtype) for i, d in enumerate(dts)}


# ---------------------------------------------------------------- every op, cast and bitcast: cpu == python


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_alu_op_matches_reference(cpu: dict, dtype: DType, data: st.DataObject) -> None:
    ck, pk, out_dts = cpu[f"alu_{dtype.name}"]
    ops = alu_ops(dtype, DEVICE.supported_ops)
    vals = st.lists(value_strategy(dtype), min_size=N, max_size=N)
    arrays = {s: storage(data.draw(vals), dtype) for s in (100, 101, 102)}
    divisor = value_strategy(dtype).filter(lambda v: v != 0) if dtype.is_int else value_strategy(dtype)
    arrays[103] = storage(data.draw(st.lists(divisor, min_size=N, max_size=N)), dtype)
    shifts = st.integers(0, (8 if dtype is dtypes.index else dtype.bits) - 1) if dtype.is_int else \
        value_strategy(dtype)
    arrays[104] = storage(data.draw(st.lists(shifts, min_size=N, max_size=N)), dtype)
    arrays[105] = storage(data.draw(st.lists(st.booleans(), min_size=N, max_size=N)), dtypes.bool)
    if dtype is dtypes.index:  # index does not wrap in the reference; keep results inside int64
        arrays[100] = arrays[100] >> 12
    got, want = both((ck, pk), {**arrays, **zeros(out_dts)})
    for i, (op, od) in enumerate(zip(ops, out_dts, strict=True)):
        # libm float functions vs the reference's rounded double result: an ulp apart at most
        ulps = 1 if op in TRANSCENDENTAL and dtype is not dtypes.float64 else 0
        assert_same(got[i], want[i], od, f"{op.name}", ulps=ulps)


@pytest.mark.parametrize("src", ALL_DTYPES, ids=lambda d: d.name)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_casts_and_bitcasts_match_reference(cpu: dict, src: DType, data: st.DataObject) -> None:
    vals = data.draw(st.lists(value_strategy(src), min_size=N, max_size=N))
    ck, pk, dsts = cpu[f"cast_{src.name}"]
    got, want = both((ck, pk), {100: storage(vals, src), **zeros(dsts)})
    for i, d in enumerate(dsts):
        assert_same(got[i], want[i], d, f"cast {src.name} ->")
    if src is dtypes.index:
        return
    ck, pk, dsts = cpu[f"bitcast_{src.name}"]
    # the reference does not keep nan payloads through BITCAST, so bitcast no nan
    vals = [0.0 if v != v else v for v in vals]
    got, want = both((ck, pk), {100: storage(vals, src), **zeros(dsts)})
    for i, d in enumerate(dsts):
        assert_same(got[i], want[i], d, f"bitcast {src.name} ->")


def _chained(dtype: DType) -> tuple[UOp, list[DType]]:
    """Each result of an op feeds another op or a widening cast, so a missing wrap or rounding step shows."""
    wide = dtypes.float64 if dtype.is_float else dtypes.int64
    fns = [lambda a, b, c: ((a + b) * c).cast(wide), lambda a, b, c: (a * b) < c,
           lambda a, b, c: (a - b).maximum(c).cast(wide), lambda a, b, c: (-(a * b)).cast(wide),
           lambda a, b, c: UOp(Ops.MULACC, (a, b, c)).cast(wide), lambda a, b, c: ((a + b).cast(wide) + c.cast(wide))]
    if dtype.is_float:
        fns += [lambda a, b, c: (a / b + c).cast(wide), lambda a, b, c: (a.sqrt() * b).cast(wide)]
    else:
        fns += [lambda a, b, c: ((a + b) >> (c & 3)).cast(wide), lambda a, b, c: ((a * b) ^ c).cast(wide)]
    x = UOp.const(0.0 if dtype.is_float else 0, dtype)
    outs = [fn(x, x, x).dtype for fn in fns]
    return multi_output(fns, outs, [dtype] * 3, N), outs


NUMERIC = [d for d in ALL_DTYPES if d not in (dtypes.bool, dtypes.index)]


@pytest.mark.parametrize("dtype", NUMERIC, ids=lambda d: d.name)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_chained_ops_wrap_and_round_every_step(cpu: dict, dtype: DType, data: st.DataObject) -> None:
    ck, pk, out_dts = cpu[f"chain_{dtype.name}"]
    vals = st.lists(value_strategy(dtype), min_size=N, max_size=N)
    got, want = both((ck, pk), {100 + i: storage(data.draw(vals), dtype) for i in range(3)} | zeros(out_dts))
    for i, od in enumerate(out_dts):
        assert_same(got[i], want[i], od, f"chain {i} on {dtype.name}")


def test_float_to_int_casts_out_of_range() -> None:
    srcs = [math.nan, math.inf, -math.inf, -0.7, 3e9, -3e9, 1e20, -1e300, 2.0**63, 300.7, -2.0**64 - 2**12]
    dsts = [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.bool]
    prog = multi_output([lambda a, d=d: a.cast(d) for d in dsts], dsts, [dtypes.float64], len(srcs))
    k = DEVICE.compile(prog, "f2i")
    arrays = {100: np.array(srcs), **zeros(dsts, len(srcs))}
    got, want = both((k, PY.compile(prog)), arrays)
    for i, d in enumerate(dsts):
        assert_same(got[i], want[i], d, "cast float64 ->")
    assert got[2].tolist()[:6] == [0, 0, 0, 0, -1294967296, 1294967296]  # nan, inf -> 0; 3e9 wraps
    assert got[1][9] == 44  # 300.7 truncates to 300, wraps to 44


@given(st.lists(st.floats(-2.0**62, 2.0**62), min_size=4, max_size=4))
@settings(max_examples=20, deadline=None)
def test_float_to_index_casts(vals: list[float]) -> None:
    prog = elementwise(lambda a: a.cast(dtypes.index), dtypes.index, [dtypes.float64], 4)
    got, want = both((DEVICE.compile(prog, "f2idx"), PY.compile(prog)), {0: np.zeros(4, np.int64), 1: np.array(vals)})
    np.testing.assert_array_equal(got[0], want[0])


# ---------------------------------------------------------------- structured kernels: cpu == python


def test_structured_kernels_match_reference(cpu: dict) -> None:
    rng = np.random.default_rng(5)
    f = lambda n: rng.standard_normal(n).astype(np.float32)
    i32 = lambda n: rng.integers(-50, 50, n).astype(np.int32)
    cases = {
        "reduction": {0: np.zeros(1, np.float32), 1: f(16)},
        "matmul": {0: np.zeros(16, np.float32), 1: f(16), 2: f(16)},
        "padded": {0: np.zeros(12, np.float32), 1: f(8)},
        "if_block": {0: np.zeros(8, np.int32), 1: i32(8)},
        "two_ranges": {0: np.zeros(6, np.int32)},
        "special": {0: np.zeros(12, np.int32), 1: i32(12)},
        "special_big": {0: np.zeros(20000, np.int32), 1: i32(20000)},
    }
    for name, arrays in cases.items():
        got, want = both(cpu[name], arrays)
        for s in arrays:
            np.testing.assert_array_equal(got[s], want[s], err_msg=name)
        assert any(got[0]), name
    for n in (1, 7, 10):
        got, want = both(cpu["variable"], {0: np.full(10, -1, np.int64), 1: np.arange(10, dtype=np.int64)}, {"n": n})
        np.testing.assert_array_equal(got[0], want[0])


def test_int_wraparound_and_truncating_division() -> None:
    ops = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b, lambda a, b: -a, lambda a, b: a << (b & 7),
           lambda a, b: UOp(Ops.CDIV, (a, b)), lambda a, b: UOp(Ops.CMOD, (a, b)),
           # constant divisors: -1 goes through the trap-free helper, others are C's / and %
           lambda a, b: UOp(Ops.CDIV, (a, UOp.const(-1, a.dtype))),
           lambda a, b: UOp(Ops.CDIV, (a, UOp.const(2, a.dtype))),
           lambda a, b: UOp(Ops.CMOD, (a, UOp.const(-3, a.dtype)))]
    for dt, a, b in [(I32, [2**31 - 1, -(2**31), -7, 7, -(2**31)], [1, -1, 2, -2, 3]),
                     (dtypes.int8, [127, -128, -7, 7, 100], [1, -1, 2, -2, 3]),
                     (dtypes.uint16, [65535, 0, 7, 40000, 3], [1, 3, 2, 2, 5]),
                     (dtypes.int64, [2**63 - 1, -(2**63), -7, 7, 5], [1, -1, 2, -2, 3])]:
        prog = multi_output(ops, [dt] * len(ops), [dt, dt], len(a))
        got, want = both((DEVICE.compile(prog, "wrap"), PY.compile(prog)),
                         {100: storage(a, dt), 101: storage(b, dt), **zeros([dt] * len(ops), len(a))})
        for i in range(len(ops)):
            np.testing.assert_array_equal(got[i], want[i], err_msg=f"{dt.name} op {i}")
    # int32: INT_MAX + 1 wraps, INT_MIN / -1 is INT_MIN (no trap), -7 / 2 truncates to -3, -7 % 2 is -1
    assert got is not None


def test_max_propagates_nan_and_keeps_signed_zero() -> None:
    a = np.array([np.nan, 1.0, 0.0, -0.0, -np.inf, 2.0], np.float32)
    b = np.array([1.0, np.nan, -0.0, 0.0, np.nan, 2.0], np.float32)
    prog = elementwise(lambda x, y: x.maximum(y), F32, [F32, F32], 6)
    got, want = both((DEVICE.compile(prog, "max"), PY.compile(prog)), {0: np.zeros(6, np.float32), 1: a, 2: b})
    assert_same(got[0], want[0], F32)
    assert_same(got[0], np.maximum(a, b), F32, "numpy.maximum")


def test_constants_render_exactly() -> None:
    tiny = float.fromhex("0x1p-149")  # the smallest float32 subnormal
    consts = [UOp.const(v, dt) for v, dt in [
        (0.1, F32), (-0.0, F32), (tiny, F32), (math.nan, F32), (-math.inf, F32), (0.1, dtypes.float64),
        (1 / 3, dtypes.float16), (65504.0, dtypes.float16), (1 / 3, dtypes.bfloat16), (-(2**63), dtypes.int64),
        (2**64 - 1, dtypes.uint64), (-(2**31), I32), (2**32 - 1, dtypes.uint32), (-128, dtypes.int8),
        (True, dtypes.bool), (-(2**40), dtypes.index)]]
    outs = [buf(i, c.dtype, 1) for i, c in enumerate(consts)]
    prog = linear(*outs, *(o.index(0).store(c) for o, c in zip(outs, consts, strict=True)))
    arrays = {i: np.zeros(1, storage([], c.dtype).dtype) for i, c in enumerate(consts)}
    got, want = both((DEVICE.compile(prog, "consts"), PY.compile(prog)), arrays)
    for i, c in enumerate(consts):
        assert_same(got[i], want[i], c.dtype, f"const {c.arg}")


# ---------------------------------------------------------------- the generated source


def test_source_style() -> None:
    src = DEVICE.render(reduction(), "r")
    assert src.startswith(PRELUDE) and "#include" not in src  # no system header to parse (devices.c_render)
    assert "void r(float* restrict data0, float* restrict data1) {" in src
    for piece in ["float acc0[1];", "acc0[0] = 0.0f;", "for (long long ridx0 = 0; ridx0 < 16; ridx0++) {",
                  "float val0 = acc0[0];", "float val1 = data1[ridx0];", "acc0[0] = val0+val1;", "data0[0] = val2;"]:
        assert piece in src, piece
    # a value used twice is named once; one used once is inlined
    x, o = buf(1, I32, 4), buf(0, I32, 4)
    r = UOp.range(4, 0)
    v = x.index(r).load()
    twice = v * 3
    s1 = o.index(r).store(twice * twice + 1)
    src = DEVICE.render(linear(o, x, r, s1, end(s1, r)), "k")
    assert "int32_t alu0 = val0*3;" in src and "data0[ridx0] = (alu0*alu0)+1;" in src
    n = UOp.variable("n", 0, 9)
    src = DEVICE.render(linear(buf(0, I32, 4), n, UOp(Ops.SPECIAL, (UOp.const(4),), "core_id")), "v")
    assert "void v(int32_t* restrict data0, const long long n, const long long core_id)" in src


def test_debug_4_prints_source(capsys: pytest.CaptureFixture) -> None:
    with Context(DEBUG=4):
        DEVICE.compile(elementwise(lambda a: a + 1, I32, [I32], 3), "dbg")
    assert "void dbg(int32_t* restrict data0, int32_t* restrict data1)" in capsys.readouterr().err


def test_kernels_in_one_batch_get_unique_names() -> None:
    p1, p2 = elementwise(lambda a: a + 1, I32, [I32], 3), elementwise(lambda a: a * 2, I32, [I32], 3)
    k1, k2 = DEVICE.compile_batch([(p1, "same"), (p2, "same")])
    assert k1.lib is k2.lib and {k1.symbol, k2.symbol} == {"same", "same_1"}
    out = np.zeros(3, np.int32)
    k2({0: out, 1: np.array([1, 2, 3], np.int32)})
    assert out.tolist() == [2, 4, 6]


def test_chunks_balance_source_and_keep_every_kernel_once() -> None:
    from devices.cpu import MIN_CHUNK_CHARS, _chunks

    sizes = [9000, 100, 30000, 5000, 5000, 20000, 700, 12000]
    for workers in (1, 2, 3, 16):
        groups = _chunks(sizes, workers)
        assert sorted(i for g in groups for i in g) == list(range(len(sizes)))
        assert all(g == sorted(g) for g in groups) and len(groups) <= workers
        loads = [sum(sizes[i] for i in g) for g in groups]
        assert max(loads) - min(loads) <= max(sizes)  # the greedy's bound
    assert len(_chunks(sizes, 2)) == 2
    assert len(_chunks([100] * 10, 16)) == 1  # too little source to be worth a second compiler start
    assert len(_chunks([MIN_CHUNK_CHARS] * 3, 16)) == 3


def test_chunks_leave_less_to_a_busy_worker() -> None:
    # a worker still compiling a file of compile_ahead (40 units left) gets the smaller group, so both finish
    # together; one with more left than all the rest gets none; a free worker is always left
    from devices.cpu import MIN_CHUNK_CHARS, _chunks

    sizes = [MIN_CHUNK_CHARS] * 10
    groups = _chunks(sizes, 2, [4 * MIN_CHUNK_CHARS])
    assert sorted(len(g) for g in groups) == [3, 7] and sorted(i for g in groups for i in g) == list(range(10))
    assert [len(g) for g in _chunks(sizes, 2, [100 * MIN_CHUNK_CHARS])] == [10]
    assert len(_chunks(sizes, 3, [100 * MIN_CHUNK_CHARS] * 5)) == 1
    assert _chunks(sizes, 2, []) == _chunks(sizes, 2)


def test_a_batch_split_across_compiler_runs_runs_every_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import devices.cpu as cpu_mod

    monkeypatch.setattr(cpu_mod, "MIN_CHUNK_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "_compile_workers", lambda: 3)
    progs = [(elementwise(lambda a, k=k: a * k + 1, I32, [I32], 5), "same") for k in range(7)]
    with Context(CACHE=0):
        ks = DEVICE.compile_batch(progs)
    assert len({id(k.lib) for k in ks}) == 3
    x = np.arange(5, dtype=np.int32)
    for k, kern in enumerate(ks):
        out = np.zeros(5, np.int32)
        kern({0: out, 1: x})
        assert out.tolist() == (x * k + 1).tolist()


def test_custom_code_is_pasted_in() -> None:
    x, o = buf(1, I32, 3), buf(0, I32, 3)
    r = UOp.range(3, 0)
    v = x.index(r).load()
    s1 = o.index(r).store(UOp(Ops.CUSTOM, (v,), ("({0} * 10 + 1)", I32)))
    out = np.zeros(3, np.int32)
    DEVICE.compile(linear(o, x, r, s1, end(s1, r)), "custom")({0: out, 1: np.array([1, 2, 3], np.int32)})
    assert out.tolist() == [11, 21, 31]


# ---------------------------------------------------------------- errors


def test_compile_error_shows_source_and_process_continues() -> None:
    o = buf(0, I32, 1)
    bad = UOp(Ops.CUSTOM, (), ("this is not C", I32))
    with Context(CACHE=0), pytest.raises(CompileError) as e:
        DEVICE.compile(linear(o, o.index(0).store(bad)), "broken")
    msg = str(e.value)
    assert "error" in msg and "   1 | typedef __INT8_TYPE__ int8_t;" in msg and "this is not C" in msg
    out = np.zeros(3, np.int32)  # the compiler failed, this process did not
    DEVICE.compile(elementwise(lambda a: a + 1, I32, [I32], 3), "after_error")({0: out, 1: np.ones(3, np.int32)})
    assert out.tolist() == [2, 2, 2]


def test_unsupported_ops_and_bad_programs() -> None:
    for fn, name in [(lambda a: a // 2, "IDIV"), (lambda a: a % 2, "MOD")]:
        with pytest.raises(CompileError, match=f"does not support {name}"):
            DEVICE.compile(elementwise(fn, I32, [I32], 3))
    with pytest.raises(CompileError, match="does not support THREEFRY"):
        DEVICE.compile(elementwise(lambda a: UOp(Ops.THREEFRY, (a, a)), dtypes.uint64, [dtypes.uint64], 3))
    o, r = buf(0, F32, 4), UOp.range(4, 0)
    s1 = o.index(r).store(UOp.const(1.0, F32))
    with pytest.raises(CompileError, match="is never closed"):
        DEVICE.compile(linear(o, r, s1))


def test_buffer_mismatch_raises_device_error() -> None:
    k = DEVICE.compile(elementwise(lambda a: a + 1, I32, [I32], 8), "mismatch")
    with pytest.raises(DeviceError, match="slot 1 has dtype int64"):
        k({0: np.zeros(8, np.int32), 1: np.zeros(8, np.int64)})
    with pytest.raises(DeviceError, match="slot 0 has 4 elements, the kernel needs 8"):
        k({0: np.zeros(4, np.int32), 1: np.zeros(8, np.int32)})
    with pytest.raises(DeviceError, match="no array for buffer slot 1"):
        k({0: np.zeros(8, np.int32)})


# ---------------------------------------------------------------- the compile cache


def test_disk_cache_is_used_by_a_fresh_process(tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    prog = elementwise(lambda a: a * 7 + 3, I32, [I32], 5)
    with Context(CACHEDIR=str(tmp_path)):
        DEVICE.compile(prog, "cached")
        files = os.listdir(os.path.join(tmp_path, "cpu"))
        assert len(files) == 1 and files[0].endswith(".so")
        # the in-memory cache dropped, a second compile must come from disk: the compiler may not run
        DEVICE.compiler.forget()
        monkeypatch.setattr(DEVICE.compiler, "_run", lambda *a: pytest.fail("compiled again"))
        out = np.zeros(5, np.int32)
        DEVICE.compile(prog, "cached")({0: out, 1: np.arange(5, dtype=np.int32)})
        assert out.tolist() == [3, 10, 17, 24, 31]
    code = textwrap.dedent("""
        from devices.cpu import DEVICE
        from rewrite.dtype import dtypes
        from tests.devices.builder import elementwise
        DEVICE.compile(elementwise(lambda a: a * 7 + 3, dtypes.int32, [dtypes.int32], 5), "cached")
    """)
    env = {**os.environ, "CACHEDIR": str(tmp_path), "DEBUG": "3"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "disk cache hit" in r.stderr


def test_cache_off_writes_nothing(tmp_path: os.PathLike) -> None:
    with Context(CACHEDIR=str(tmp_path), CACHE=0):
        DEVICE.compile(elementwise(lambda a: a - 9, I32, [I32], 5), "uncached")
    assert not os.path.exists(os.path.join(tmp_path, "cpu")) or not os.listdir(os.path.join(tmp_path, "cpu"))


def test_registry() -> None:
    assert get_device("cpu") is DEVICE and DEVICE.name == "cpu"
    assert not {Ops.IDIV, Ops.MOD, Ops.THREEFRY} & DEVICE.supported_ops
    assert {Ops.CDIV, Ops.CMOD, Ops.MULACC, Ops.EXP2, Ops.CAST, Ops.BITCAST, Ops.CMPEQ} <= DEVICE.supported_ops
    a = DEVICE.alloc(10, F32)
    assert a.ctypes.data % 64 == 0
