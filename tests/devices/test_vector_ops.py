"""Vector ALU ops, casts and bitcasts on every dtype: the python device lane by lane against rewrite.semantics,
and the cpu device's vector C exactly equal to the python device.

Every op runs in three operand forms: all vectors (`vv`), a vector first and scalars after (`vs`, the scalars
broadcast), and a scalar first (`sv`). Input B is read as a gather (its lanes in reverse order), the others as
consecutive vectors, so every dtype also goes through both kinds of vector load.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devices.cpu import DEVICE as CPU
from devices.python import DEVICE as PY
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.semantics import exec_alu, exec_bitcast, exec_cast
from rewrite.uop import UOp
from tests.devices.builder import (
    ALL_DTYPES,
    TRANSCENDENTAL,
    UNARY,
    _operands,
    alu_ops,
    assert_same,
    python_values,
    storage,
    value_strategy,
    vconst,
    vector_multi_output,
)

L, BLOCKS = 8, 2
N = L * BLOCKS
GATHERED = frozenset({1})  # input B
IN = 6  # inputs a, b, c, d (nonzero), s (shift), g (bool), as in builder.alu_kernel

# an output: (label, fn(vectors, scalars) -> UOp, oracle(lane operands) -> value, operand picks)
# a pick is (input j, "v" | "s"): the lane value of a vector operand or the block's scalar
Pick = tuple[int, str]
Case = tuple[str, Callable[[list[UOp], list[UOp]], UOp], Callable[..., object], list[Pick]]
_SLOTS = {"a": 0, "b": 1, "c": 2, "d": 3, "s": 4, "g": 5}


def _slots(op: Ops) -> list[int]:
    return [_SLOTS[n] for n in _operands(op, "a", "b", "c", "d", "s", "g")]  # type: ignore[arg-type]


def _op_cases(dtype: DType) -> list[Case]:
    cases: list[Case] = []
    for o in alu_ops(dtype, CPU.supported_ops):
        slots = _slots(o)
        forms = ["vv"] if o in UNARY else ["vv", "vs", "sv"]
        for form in forms:
            picks = [(j, "v" if form == "vv" or (form == "vs") == (k == 0) else "s") for k, j in enumerate(slots)]
            fn = (lambda v, s, o=o, picks=picks: UOp(o, tuple(v[j] if w == "v" else s[j] for j, w in picks)))
            cases.append((f"{o.name}-{form}", fn, lambda *x, o=o: exec_alu(o, dtype, *x), picks))
    consts = [3, 5, 7, 11, 13, 17, 19, 23]
    if dtype is dtypes.bool:
        bools = [True, False, True, True, False, False, True, False]
        cases.append(("xor-vconst", lambda v, s: v[5] ^ vconst(bools, dtypes.bool),
                      lambda g, lane: g != bools[lane], [(5, "v"), (-1, "lane")]))
        return cases
    cases.append(("add-vconst", lambda v, s: v[0] + vconst(consts, dtype),
                  lambda a, lane: exec_alu(Ops.ADD, dtype, a, exec_cast(consts[lane], dtypes.int32, dtype)),
                  [(0, "v"), (-1, "lane")]))
    three = exec_cast(3, dtypes.int32, dtype)
    cases.append(("mul-const", lambda v, s: v[0] * UOp.const(3, dtype), lambda a: exec_alu(Ops.MUL, dtype, a, three),
                  [(0, "v")]))
    if dtype.is_int:  # constant divisors: C's / and % for most, the trap-free helper for -1
        for c in ([3, -3, -1, 2] if dtype.kind != "u" else [3, 2]):
            for o in (Ops.CDIV, Ops.CMOD):
                cases.append((f"{o.name}-by-{c}", lambda v, s, o=o, c=c: UOp(o, (v[0], UOp.const(c, dtype))),
                              lambda a, o=o, c=c: exec_alu(o, dtype, a, c), [(0, "v")]))
    return cases


def _cast_cases(src: DType) -> list[Case]:
    dsts = [d for d in ALL_DTYPES if not (d is dtypes.index and (src.is_float or src is dtypes.uint64))]
    return [(f"cast-{d.name}", lambda v, s, d=d: v[0].cast(d), lambda a, d=d: exec_cast(a, src, d), [(0, "v")])
            for d in dsts]


def _bitcast_cases(src: DType) -> list[Case]:
    return [(f"bitcast-{d.name}", lambda v, s, d=d: v[0].bitcast(d), lambda a, d=d: exec_bitcast(a, src, d),
             [(0, "v")]) for d in ALL_DTYPES if d.itemsize == src.itemsize and d is not dtypes.index]


def _chain_cases(dtype: DType) -> list[Case]:
    """Each op result feeds another op, so a missing rounding or wrap between vector ops shows."""
    wide = dtypes.float64 if dtype.is_float else dtypes.int64
    f = lambda o, *x: exec_alu(o, dtype, *x)
    w = lambda x: exec_cast(x, dtype, wide)
    abc = [(0, "v"), (1, "v"), (2, "v")]
    cases: list[Case] = [
        ("(a+b)*c", lambda v, s: ((v[0] + v[1]) * v[2]).cast(wide), lambda a, b, c: w(f(Ops.MUL, f(Ops.ADD, a, b), c)),
         abc),
        ("a*b<c", lambda v, s: (v[0] * v[1]) < v[2], lambda a, b, c: f(Ops.CMPLT, f(Ops.MUL, a, b), c), abc),
        ("max(a-b,c)", lambda v, s: (v[0] - v[1]).maximum(v[2]).cast(wide),
         lambda a, b, c: w(f(Ops.MAX, f(Ops.SUB, a, b), c)), abc),
        ("mulacc", lambda v, s: UOp(Ops.MULACC, (v[0], v[1], v[2])).cast(wide),
         lambda a, b, c: w(f(Ops.MULACC, a, b, c)), abc),
        ("-(a*s)", lambda v, s: (-(v[0] * s[2])).cast(wide), lambda a, c: w(f(Ops.NEG, f(Ops.MUL, a, c))),
         [(0, "v"), (2, "s")]),
    ]
    if dtype.is_float:
        cases.append(("a/b+c", lambda v, s: (v[0] / v[1] + v[2]).cast(wide),
                      lambda a, b, c: w(f(Ops.ADD, f(Ops.DIV, a, b), c)), abc))
    return cases


def _kernel(cases: list[Case], dtype: DType, outs: list[DType]) -> UOp:
    return vector_multi_output([c[1] for c in cases], outs, [dtype] * 5 + [dtypes.bool], L, BLOCKS, GATHERED)


def _out_dtypes(cases: list[Case], dtype: DType) -> list[DType]:
    ins = [UOp.const(0.0 if dtype.is_float else 0, dtype)] * 5 + [UOp.const(True)]
    return [c[1](ins, ins).dtype for c in cases]


KINDS: dict[str, Callable[[DType], list[Case]]] = {"ops": _op_cases, "casts": _cast_cases,
                                                  "bitcasts": _bitcast_cases, "chains": _chain_cases}


def _suite() -> dict[str, tuple[list[Case], DType, list[DType], UOp]]:
    out = {}
    for kind, make in KINDS.items():
        # index has no memory image to bitcast, and the chains need a wider dtype of the same kind
        skip = {"chains": {dtypes.bool, dtypes.index}, "bitcasts": {dtypes.index}}.get(kind, set())
        for dt in (d for d in ALL_DTYPES if d not in skip):
            cases = make(dt)
            outs = _out_dtypes(cases, dt)
            out[f"{kind}_{dt.name}"] = (cases, dt, outs, _kernel(cases, dt, outs))
    return out


SUITE = _suite()


@pytest.fixture(scope="module")
def kernels() -> dict[str, tuple]:
    """name -> (cpu kernel, python kernel), every kernel compiled in one C file."""
    ks = CPU.compile_batch([(p, name) for name, (_, _, _, p) in SUITE.items()])
    return {name: (k, PY.compile(SUITE[name][3], name)) for k, name in zip(ks, SUITE, strict=True)}


def _inputs(data: st.DataObject, dtype: DType, kind: str) -> dict[int, np.ndarray]:
    def draw(strat: st.SearchStrategy) -> np.ndarray:
        return storage(data.draw(st.lists(strat, min_size=N, max_size=N)), dtype)
    vals = value_strategy(dtype)
    if kind == "bitcasts" and dtype.is_float:  # the reference does not keep nan payloads through BITCAST
        vals = vals.map(lambda v: 0.0 if v != v else v)
    arrays = {100 + j: draw(vals) for j in range(3)}
    arrays[103] = draw(vals.filter(lambda v: v != 0) if dtype.is_int else vals)
    bits = 8 if dtype is dtypes.index else max(dtype.bits, 1)
    arrays[104] = draw(st.integers(0, bits - 1) if dtype.is_int else vals)
    arrays[105] = storage(data.draw(st.lists(st.booleans(), min_size=N, max_size=N)), dtypes.bool)
    if dtype is dtypes.index:  # index never wraps in the reference; keep products inside int64
        arrays[100] = arrays[100] >> 12
    return arrays


def _expected(case: Case, arrays: dict[int, np.ndarray], dtype: DType) -> list:
    vals = {j: python_values(arrays[100 + j], dtypes.bool if j == 5 else dtype) for j in range(IN)}
    out = []
    for i in range(N):
        r, lane = divmod(i, L)
        args = []
        for j, kind in case[3]:
            if kind == "lane":
                args.append(lane)
            elif kind == "s":
                args.append(vals[j][r * L])
            else:
                args.append(vals[j][r * L + (L - 1 - lane if j in GATHERED else lane)])
        out.append(case[2](*args))
    return out


def _ulps(label: str, dtype: DType) -> int:
    transcendental = any(label.startswith(o.name + "-") for o in TRANSCENDENTAL)
    return 1 if transcendental and dtype is not dtypes.float64 else 0


@pytest.mark.parametrize("name", list(SUITE), ids=list(SUITE))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_vector_ops_match_semantics_and_cpu(kernels: dict, name: str, data: st.DataObject) -> None:
    cases, dtype, outs, _ = SUITE[name]
    arrays = _inputs(data, dtype, name.split("_")[0])
    got = {}
    for dev, k in zip(("cpu", "python"), kernels[name], strict=True):
        bufs = {**{s: a.copy() for s, a in arrays.items()}, **{i: np.zeros(N, storage([], d).dtype)
                                                               for i, d in enumerate(outs)}}
        k(bufs)
        got[dev] = bufs
    for i, (case, od) in enumerate(zip(cases, outs, strict=True)):
        assert_same(got["python"][i], storage(_expected(case, arrays, dtype), od), od, f"python {case[0]}")
        assert_same(got["cpu"][i], got["python"][i], od, f"cpu {case[0]}", ulps=_ulps(case[0], dtype))


def test_special_values_lane_by_lane() -> None:
    """nan, infinities, signed zeros and extreme ints through the native vector forms (MAX, WHERE, casts)."""
    f = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.5, -2.5, 65504.0]
    g = [1.0, 0.0, -0.0, np.nan, -np.inf, np.nan, 3.0, 1e30]
    cases = [lambda v, s: v[0].maximum(v[1]), lambda v, s: v[1].maximum(v[0]), lambda v, s: (v[0] < v[1]),
             lambda v, s: (v[0].ne(v[1])).where(v[0], v[1]), lambda v, s: (v[0] < v[1]).where(v[1], v[0]),
             lambda v, s: v[0].eq(v[1]).where(v[0], -v[1]), lambda v, s: v[0].cast(dtypes.int32),
             lambda v, s: v[0].cast(dtypes.bool), lambda v, s: v[0].cast(dtypes.float16),
             lambda v, s: v[0].cast(dtypes.bfloat16), lambda v, s: -v[0]]
    ins = [UOp.const(0.0)] * 2
    outs = [c(ins, ins).dtype for c in cases]
    prog = vector_multi_output(cases, outs, [dtypes.float32] * 2, L, 1)
    arrays = {100: np.float32(f), 101: np.float32(g)}
    res = []
    for k in (CPU.compile(prog, "special_values"), PY.compile(prog)):
        bufs = {**{s: a.copy() for s, a in arrays.items()}, **{i: np.zeros(L, storage([], d).dtype)
                                                               for i, d in enumerate(outs)}}
        k(bufs)
        res.append(bufs)
    for i, od in enumerate(outs):
        assert_same(res[0][i], res[1][i], od, f"case {i}")
    assert_same(res[0][0], np.maximum(np.float32(f), np.float32(g)), dtypes.float32, "numpy.maximum")
    assert res[0][6].tolist()[:5] == [0, 0, 0, 0, 0]  # nan, -0, 0, inf, -inf -> 0
