"""The UOp IR as built: interning, lifetime, deep graphs, derived dtype/shape/device/axis, typed errors, operators."""

from __future__ import annotations

import gc
import math
import pickle
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewrite import uop as uop_module
from rewrite.dtype import AddrSpace, dtypes
from rewrite.errors import ArityError, CompilerError, DTypeError, ShapeError, UOpError
from rewrite.ops import AxisType, Ops
from rewrite.uop import BufferArg, UOp

f32, i32 = dtypes.float32, dtypes.int32


def buf(shape: tuple, dtype=f32, slot: int = 0, device: str | tuple | None = None) -> UOp:
    return UOp(Ops.BUFFER, (UOp.shape_operand(shape),), BufferArg(slot, dtype, device))


# ---------------------------------------------------------------- interning


def test_structurally_equal_nodes_are_one_object():
    a, b = buf((2, 3)), buf((2, 3), slot=1)
    assert buf((2, 3)) is a
    assert a + b is a + b
    assert UOp(Ops.ADD, (a, b)) is a + b
    assert UOp.const(3) is UOp.const(3)
    assert UOp.vconst([1, 2]) is UOp.shape_operand((1, 2))
    assert UOp.variable("n", 1, 8) is UOp.variable("n", 1, 8)


# fmt: off
DIFFERENT = [
    ("dtype", lambda: UOp.const(1, dtypes.int32), lambda: UOp.const(1, dtypes.int64)),
    ("value", lambda: UOp.const(1), lambda: UOp.const(2)),
    ("zero sign", lambda: UOp.const(0.0), lambda: UOp.const(-0.0)),
    ("int vs bool", lambda: UOp.const(1), lambda: UOp.const(True)),
    ("float vs bool", lambda: UOp.const(1.0), lambda: UOp.const(True)),
    # the key is type-aware: a raw CONST(True, int32) must not be handed back for const(1, int32)
    ("raw bool in int32", lambda: UOp(Ops.CONST, (), (True, dtypes.int32)), lambda: UOp.const(1, dtypes.int32)),
    ("raw int in float32", lambda: UOp(Ops.CONST, (), (1, dtypes.float32)), lambda: UOp.const(1.0, dtypes.float32)),
    ("vconst zero sign", lambda: UOp.vconst([0.0], f32), lambda: UOp.vconst([-0.0], f32)),
    # ParamArg and BufferArg are NamedTuples with equal fields: the arg's type is part of the node
    ("param vs buffer arg", lambda: UOp(Ops.PARAM, (UOp.shape_operand(()),), BufferArg(0, f32)),
     lambda: UOp.param(0, f32)),
    ("vconst order", lambda: UOp.vconst([1, 2]), lambda: UOp.vconst([2, 1])),
    ("buffer shape", lambda: buf((2, 3)), lambda: buf((3, 2))),
    ("buffer dtype", lambda: buf((2, 3)), lambda: buf((2, 3), i32)),
    ("variable bounds", lambda: UOp.variable("n", 1, 8), lambda: UOp.variable("n", 1, 9)),
    ("range id", lambda: UOp.range(4, 0), lambda: UOp.range(4, 1)),
    ("range type", lambda: UOp.range(4, 0), lambda: UOp.range(4, 0, AxisType.REDUCE)),
]
# fmt: on


@pytest.mark.parametrize("name, make_a, make_b", DIFFERENT, ids=[d[0] for d in DIFFERENT])
def test_different_nodes_are_different_objects(name, make_a, make_b):
    a, b = make_a(), make_b()
    assert a is not b
    assert make_a() is a and make_b() is b


def test_negative_zero_keeps_its_sign():
    assert math.copysign(1.0, UOp.const(-0.0).value) == -1.0
    assert math.copysign(1.0, UOp.const(0.0).value) == 1.0


def test_nan_interns_to_one_object():
    assert UOp.const(float("nan")) is UOp.const(math.nan)
    assert UOp.const(float("nan")) is UOp.const(float("inf") - float("inf"))
    assert UOp.const(float("nan"), dtypes.float16) is not UOp.const(float("nan"))
    assert UOp.vconst([float("nan")], f32) is UOp.vconst([math.nan], f32)


@pytest.mark.parametrize("values, dtype", [
    ([0.1] * 4, dtypes.float32), ([-0.0] * 2, dtypes.float32), ([float("nan")] * 3, dtypes.float16),
    ([300] * 4, dtypes.uint8), ([True, 1, 2], dtypes.index), ([0, 1, 2, 3], dtypes.index), ([1, 2.0], dtypes.int32),
    ([float("-inf"), 0.1, 0.1], dtypes.float32),
])
def test_vconst_lanes_normalize_as_each_const(values, dtype):
    """A VCONST's lanes are what a CONST of each value holds (the one-value splat and the index lanes that need no
    normalizing included), value types and float zero signs too."""
    v = UOp.vconst(values, dtype)
    want = tuple(UOp.const(x, dtype).value for x in values)
    got = v.vconst_values
    assert [(type(x), math.copysign(1.0, x) if isinstance(x, float) else x) for x in got] == \
        [(type(x), math.copysign(1.0, x) if isinstance(x, float) else x) for x in want]
    assert all(a is b or a == b for a, b in zip(got, want, strict=True))


def test_tag_makes_a_different_node():
    a = buf((2,))
    t = a.replace(tag="seen")
    assert t is not a and t.tag == "seen" and a.replace(tag="seen") is t
    assert t.replace(tag=None) is a


def test_const_values_are_normalized_to_the_dtype():
    assert UOp.const(300, dtypes.int8).value == 44
    assert UOp.const(-1, dtypes.uint8).value == 255
    assert UOp.const(1, dtypes.bool).value is True
    assert type(UOp.const(2, f32).value) is float
    assert UOp.const(3.0, i32).value == 3 and type(UOp.const(3.0, i32).value) is int
    with pytest.raises(DTypeError, match="int32"):
        UOp.const(3.5, i32)


def test_pickle_round_trip_is_the_same_object():
    a = buf((4, 3))
    u = (a * a).sum([1]).cast(dtypes.float64)
    assert pickle.loads(pickle.dumps(u)) is u


# ---------------------------------------------------------------- lifetime


def _unique_node() -> UOp:
    return UOp.const(987654321, dtypes.int64).reshape((1,)).expand((7,)) + buf((7,), dtypes.int64, slot=4242)


def test_unreferenced_nodes_leave_the_intern_table():
    # the shape operands and broadcast constants kept for reuse are referenced (by their caches) until cleared
    uop_module.clear_caches()
    gc.collect()
    before = len(uop_module._intern)
    u = _unique_node()
    ref = weakref.ref(u)
    assert len(uop_module._intern) > before
    del u
    uop_module.clear_caches()
    gc.collect()
    assert ref() is None
    assert len(uop_module._intern) == before


def test_kept_shape_operands_and_constants_are_the_interned_nodes():
    uop_module.clear_caches()
    s = UOp.shape_operand((3, 5))
    assert UOp.shape_operand([3, 5]) is s and UOp.shape_operand((3, 5)) is s
    assert s.op is Ops.VCONST and s.arg == ((3, 5), dtypes.index)
    # equal-comparing non-int entries are other constants: never the kept int node
    t = UOp.shape_operand((True, 5))
    assert t is not s and type(t.arg[0][0]) is bool
    assert UOp.shape_operand((3, 5)) is s
    c = UOp.const_broadcast(0.0, dtypes.float32, (2, 3))
    assert c is UOp.const_broadcast(0.0, dtypes.float32, (2, 3))
    assert c is UOp.const(0.0, dtypes.float32).reshape((1, 1)).expand((2, 3))
    neg = UOp.const_broadcast(-0.0, dtypes.float32, (2, 3))
    assert neg is not c and str(neg.src[0].src[0].value) == "-0.0"
    # a kept constant is the node built directly, for every value type (1, True and 1.0 are different keys)
    for dt in (dtypes.float32, dtypes.float16, dtypes.int32, dtypes.bool):
        for v in (0.0, -0.0, 1, True, 1.0, math.nan, -3):
            if math.isnan(v) and dt is dtypes.int32:
                with pytest.raises(DTypeError, match="not an integer"):
                    UOp.const_broadcast(v, dt, (4, 2))
                continue
            want = UOp.const(v, dt).reshape((1, 1)).expand((4, 2))
            assert UOp.const_broadcast(v, dt, (4, 2)) is want
            assert UOp.const_broadcast(v, dt, (4, 2)) is want  # and again, from the cache
    assert UOp.const_broadcast(2.5, dtypes.float32, ()) is UOp.const(2.5, dtypes.float32)
    # bounded: past the limit the kept nodes are let go
    for n in range(uop_module._SHAPES_KEEP + 1):
        UOp.shape_operand((n + 1, 7))
    assert len(uop_module._SHAPES) <= uop_module._SHAPES_KEEP


def test_a_parent_keeps_its_children_interned():
    parent = _unique_node()
    child = weakref.ref(parent.src[1])
    gc.collect()
    assert child() is parent.src[1]
    assert buf((7,), dtypes.int64, slot=4242) is child()


def test_million_node_chain():
    gc.collect()
    before = len(uop_module._intern)
    x = UOp.variable("chain_x", 0, 10)
    # the cyclic collector's full passes over a million live objects would double the build time; UOps make
    # no cycles, so reference counting alone frees them (checked below)
    gc.disable()
    try:
        for _ in range(1_000_000):
            x = x + 1
        topo = x.toposort()  # iterative: no RecursionError
    finally:
        gc.enable()
    assert len(topo) == 1_000_000 + 5  # the ADDs, the one shared CONST 1, and the variable with its 3 sources
    assert topo[-1] is x and topo[0].op is not Ops.ADD
    assert x.src[0].src[0].op is Ops.ADD
    del topo, x  # freeing a 1M-deep chain must not overflow the C stack
    assert len(uop_module._intern) == before  # freed by reference counting, before any collection


# ---------------------------------------------------------------- derived dtype and shape, per op group

n_var = UOp.variable("n", 1, 16)
A, B = buf((4, 3)), buf((3,), slot=1)
IB, Bo = buf((4,), i32, slot=2), buf((4,), dtypes.bool, slot=3)
U64 = buf((2,), dtypes.uint64, slot=4)
TUP = UOp(Ops.TUPLE, (A, IB))
FN = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (UOp.param(0, f32, (4, 3)) * 2,)), A))
R0 = UOp.range(4, 0)
ST = UOp.buffer(9, f32, (4, 3)).store(A)

# fmt: off
DERIVED = [
    # source
    ("PARAM", lambda: UOp.param(0, f32, (2, n_var)), f32, (2, n_var)),
    ("variable", lambda: n_var, dtypes.index, ()),
    ("BUFFER", lambda: A, f32, (4, 3)),
    ("BUFFERVIEW", lambda: UOp(Ops.BUFFERVIEW, (A,), (6, i32, 0)), i32, (6,)),
    ("CONST", lambda: UOp.const(1.5), f32, ()),
    ("VCONST", lambda: UOp.vconst([1, 2, 3]), dtypes.index, (3,)),
    ("BINARY", lambda: UOp(Ops.BINARY, (), b"\x00\x01\x02"), dtypes.uint8, (3,)),
    # movement
    ("RESHAPE", lambda: A.reshape((2, 6)), f32, (2, 6)),
    ("RESHAPE sym", lambda: UOp.param(0, f32, (n_var, 2)).reshape((2, n_var)), f32, (2, n_var)),
    ("PERMUTE", lambda: A.permute((1, 0)), f32, (3, 4)),
    ("EXPAND", lambda: B.reshape((1, 3)).expand((5, 3)), f32, (5, 3)),
    ("PAD", lambda: A.pad((1, 0), (2, 3)), f32, (7, 6)),
    ("SHRINK", lambda: A.shrink((1, 0), (3, 2)), f32, (2, 2)),
    ("FLIP", lambda: A.flip([0]), f32, (4, 3)),
    ("INDEX scalar", lambda: A.index(1), f32, (3,)),
    ("INDEX vector", lambda: A.index(UOp.vconst([0, 2])), f32, (2, 3)),
    ("INDEX full", lambda: A.index(1, 2), f32, ()),
    ("STACK", lambda: UOp.stack(B, B), f32, (2, 3)),
    ("REPLICATED", lambda: A.replicated(0), f32, (1, 3)),
    ("BITCAST same size", lambda: A.bitcast(i32), i32, (4, 3)),
    ("BITCAST narrower", lambda: A.bitcast(dtypes.uint8), dtypes.uint8, (4, 12)),
    # reduce
    ("REDUCE", lambda: A.sum([1]), f32, (4, 1)),
    ("REDUCE all", lambda: A.max(), f32, (1, 1)),
    ("REDUCE ranges", lambda: UOp(Ops.REDUCE, (UOp.const(1.0), R0), (Ops.ADD, ())), f32, ()),
    # call
    ("TUPLE", lambda: TUP, dtypes.void, ()),
    ("GETTUPLE", lambda: UOp(Ops.GETTUPLE, (TUP,), 1), i32, (4,)),
    ("FUNCTION", lambda: FN, dtypes.void, ()),
    ("GETTUPLE of FUNCTION", lambda: UOp(Ops.GETTUPLE, (FN,), 0), f32, (4, 3)),
    # load / store / copy
    ("LOAD", lambda: A.load(), f32, (4, 3)),
    ("STORE", lambda: ST, dtypes.void, ()),
    ("COPY", lambda: A.copy("CPU:1"), f32, (4, 3)),
    # ordering
    ("RANGE", lambda: R0, dtypes.index, ()),
    ("END", lambda: UOp.param(0, f32, (4,)).index(R0).store(UOp.const(0.0)).end(R0), dtypes.void, ()),
    ("AFTER", lambda: A.after(ST), f32, (4, 3)),
    ("GROUP", lambda: UOp.group(ST, ST), dtypes.void, ()),
    ("SINK", lambda: UOp.sink(ST), dtypes.void, ()),
    ("LINEAR", lambda: UOp(Ops.LINEAR, (R0,)), dtypes.void, ()),
    # elementwise
    ("unary", lambda: A.sqrt(), f32, (4, 3)),
    ("RECIP", lambda: A.recip(), f32, (4, 3)),
    ("TRUNC int", lambda: IB.trunc(), i32, (4,)),
    ("CAST", lambda: A.cast(dtypes.float16), dtypes.float16, (4, 3)),
    ("binary broadcast", lambda: A + B.reshape((1, 3)), f32, (4, 3)),
    ("binary rank broadcast", lambda: A + B, f32, (4, 3)),
    ("IDIV", lambda: IB // IB, i32, (4,)),
    ("CMPLT", lambda: A < B, dtypes.bool, (4, 3)),
    ("CMPEQ", lambda: IB.eq(IB), dtypes.bool, (4,)),
    ("CMP vector dtype", lambda: UOp(Ops.CMPNE, (UOp.const(1.0), UOp.const(2.0))), dtypes.bool, ()),
    ("AND bool", lambda: Bo & Bo, dtypes.bool, (4,)),
    ("WHERE", lambda: Bo.where(IB, IB), i32, (4,)),
    ("WHERE broadcast", lambda: (A < 0).where(A, B.reshape((1, 3))), f32, (4, 3)),
    ("MULACC", lambda: UOp(Ops.MULACC, (A, A, A)), f32, (4, 3)),
    ("THREEFRY", lambda: UOp(Ops.THREEFRY, (U64, U64)), dtypes.uint64, (2,)),
    ("CDIV", lambda: UOp(Ops.CDIV, (IB, IB)), i32, (4,)),
    # markers
    ("CONTIGUOUS", lambda: A.contiguous(), f32, (4, 3)),
    ("DETACH", lambda: A.detach(), f32, (4, 3)),
    ("CONTIGUOUSBACKWARD", lambda: UOp(Ops.CONTIGUOUSBACKWARD, (A,)), f32, (4, 3)),
    # codegen
    ("SPECIAL", lambda: UOp(Ops.SPECIAL, (UOp.const(32),), "gidx0"), dtypes.index, ()),
    ("WMMA", lambda: UOp(Ops.WMMA, (A, A, A), "tc"), f32, (4, 3)),
    ("CUSTOM", lambda: UOp(Ops.CUSTOM, (A,), ("foo({0})", f32)), f32, ()),
    ("SOURCE", lambda: UOp(Ops.SOURCE, (), "int main(){}"), dtypes.void, ()),
]
# fmt: on


@pytest.mark.parametrize("name, make, dtype, shape", DERIVED, ids=[d[0] for d in DERIVED])
def test_derived_dtype_and_shape(name, make, dtype, shape):
    u = make()
    assert u.dtype is dtype
    assert len(u.shape) == len(shape) and all(a is b or a == b for a, b in zip(u.shape, shape, strict=True))


def test_every_op_group_is_covered_by_the_derived_table():
    built = {make().op for _, make, _, _ in DERIVED}
    missing = {Ops.PARAM, Ops.BUFFER, Ops.RESHAPE, Ops.REDUCE, Ops.FUNCTION, Ops.STORE, Ops.RANGE, Ops.WHERE} - built
    assert not missing


def test_symbolic_pad_and_shrink_shapes():
    x = UOp.param(0, f32, (n_var,))
    assert x.pad((1,), (2,)).shape[0].op is Ops.ADD
    s = x.shrink((0,), (n_var,))
    assert s is x  # the identity shrink is no node at all


# ---------------------------------------------------------------- shapes against numpy (hypothesis)

dims = st.integers(0, 4)
shapes = st.lists(dims, min_size=0, max_size=4).map(tuple)


def _np_shape(fn):
    """(shape, None) from numpy, or (None, the exception) when numpy refuses."""
    try:
        return fn().shape, None
    except (ValueError, IndexError) as e:
        return None, e


def _ours(fn):
    try:
        return fn().shape, None
    except ShapeError as e:
        return None, e


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_reshape_matches_numpy(shape, data):
    regroup = st.permutations(list(shape) + [1] * data.draw(st.integers(0, 2))).map(tuple)
    new = data.draw(st.one_of(shapes, regroup))
    want, np_err = _np_shape(lambda: np.empty(shape).reshape(new))
    got, err = _ours(lambda: buf(shape).reshape(new))
    assert (np_err is None) == (err is None), (shape, new, np_err, err)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_permute_matches_numpy(shape, data):
    n = len(shape)
    order = data.draw(st.one_of(st.permutations(range(n)).map(tuple), st.lists(st.integers(0, n), max_size=n + 1)))
    want, np_err = _np_shape(lambda: np.transpose(np.empty(shape), tuple(order)))
    got, err = _ours(lambda: buf(shape).permute(order))
    assert (np_err is None) == (err is None), (shape, order, np_err, err)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_expand_matches_numpy(shape, data):
    new = tuple(data.draw(st.sampled_from([d, 1, 0, 3])) for d in shape)
    want, np_err = _np_shape(lambda: np.broadcast_to(np.empty(shape), new))
    got, err = _ours(lambda: buf(shape).expand(new))
    assert (np_err is None) == (err is None), (shape, new, np_err, err)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_pad_matches_numpy(shape, data):
    amounts = st.lists(st.integers(-1, 3), min_size=len(shape), max_size=len(shape))
    before, after = data.draw(amounts), data.draw(amounts)
    pads = list(zip(before, after, strict=True))
    want, np_err = _np_shape(lambda: np.pad(np.empty(shape), pads) if shape else np.empty(()))  # no 0-d np.pad
    got, err = _ours(lambda: buf(shape).pad(before, after))
    assert (np_err is None) == (err is None), (shape, before, after, np_err, err)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_shrink_matches_numpy_slicing(shape, data):
    begin = [data.draw(st.integers(-1, d + 1)) for d in shape]
    end = [data.draw(st.integers(-1, d + 1)) for d in shape]
    valid = all(0 <= b <= e <= d for b, e, d in zip(begin, end, shape, strict=True))
    got, err = _ours(lambda: buf(shape).shrink(begin, end))
    # numpy slicing clamps instead of raising, so compare only the valid windows and require ours to refuse the rest
    assert (err is None) == valid, (shape, begin, end, err)
    if valid:
        assert got == np.empty(shape)[tuple(slice(b, e) for b, e in zip(begin, end, strict=True))].shape


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_flip_matches_numpy(shape, data):
    axes = data.draw(st.lists(st.integers(0, max(len(shape) - 1, 0)), max_size=len(shape), unique=True))
    if not shape:
        axes = []
    assert buf(shape).flip(axes).shape == np.flip(np.empty(shape), axis=tuple(axes)).shape


@settings(max_examples=200, deadline=None)
@given(shapes, st.data())
def test_broadcasting_add_matches_numpy(shape, data):
    # half the time derive the second shape from the first, so that compatible pairs are common
    similar = st.lists(st.sampled_from([1, 2, 3]), max_size=2).map(
        lambda pre: tuple(pre) + tuple(data.draw(st.sampled_from([d, 1])) for d in shape)
    )
    other = data.draw(st.one_of(shapes, similar))
    want, np_err = _np_shape(lambda: np.empty(shape) + np.empty(other))
    got, err = _ours(lambda: buf(shape) + buf(other, slot=1))
    assert (np_err is None) == (err is None), (shape, other, np_err, err)
    assert got == want


# ---------------------------------------------------------------- typed errors and their messages

# fmt: off
ERRORS = [
    ("broadcast", lambda: buf((3,)) + buf((4,), slot=1), ShapeError, ["ADD", "(3,)", "(4,)"]),
    ("broadcast 2d", lambda: buf((2, 3)) * buf((3, 2), slot=1), ShapeError, ["MUL", "(2, 3)", "(3, 2)"]),
    ("reshape", lambda: buf((2, 3)).reshape((4,)), ShapeError, ["RESHAPE", "(2, 3)", "(4,)"]),
    ("reshape negative", lambda: buf((2,)).reshape((-1, -2)), ShapeError, ["RESHAPE", "negative"]),
    ("expand non-1", lambda: buf((2,)).expand((3,)), ShapeError, ["EXPAND", "(2,)", "(3,)"]),
    ("expand rank", lambda: buf((2,)).expand((2, 2)), ShapeError, ["EXPAND", "(2,)", "(2, 2)"]),
    ("expand negative", lambda: buf((1,)).expand((-1,)), ShapeError, ["EXPAND", "(-1,)"]),
    ("permute dup", lambda: buf((2, 3)).permute((0, 0)), ShapeError, ["PERMUTE", "(0, 0)", "(2, 3)"]),
    ("permute bools", lambda: UOp(Ops.PERMUTE, (buf((2, 3)),), (True, False)), ShapeError,
     ["PERMUTE", "(True, False)"]),
    ("shrink", lambda: buf((3,)).shrink((0,), (5,)), ShapeError, ["SHRINK", "(3,)", "[0, 5)"]),
    ("shrink reversed sym", lambda: UOp.param(0, f32, (n_var,)).shrink((3,), (1,)), ShapeError, ["SHRINK", "[3, 1)"]),
    ("pad negative", lambda: buf((3,)).pad((-1,), (0,)), ShapeError, ["PAD", "-1"]),
    ("pad rank", lambda: buf((3,)).pad((1, 1), (0, 0)), ShapeError, ["PAD", "(3,)"]),
    ("reduce axis", lambda: UOp(Ops.REDUCE, (buf((3,)),), (Ops.ADD, (1,))), ShapeError, ["REDUCE", "(3,)"]),
    ("replicated axis", lambda: buf((3,)).replicated(2), ShapeError, ["REPLICATED", "(3,)"]),
    ("flip arity", lambda: UOp(Ops.FLIP, (buf((3, 2)),), (True,)), ShapeError, ["FLIP", "(3, 2)"]),
    ("stack shapes", lambda: UOp.stack(buf((3,)), buf((2,), slot=1)), ShapeError, ["STACK", "(3,)", "(2,)"]),
    ("store shape", lambda: buf((3,)).store(buf((2,), slot=1)), ShapeError, ["STORE", "(3,)", "(2,)"]),
    ("bitcast bytes", lambda: buf((3,), dtypes.uint8).bitcast(f32), ShapeError, ["BITCAST", "uint8", "float32"]),
    ("index rank", lambda: buf((3,)).index(0, 0), ShapeError, ["INDEX", "(3,)"]),
    ("mixed dtypes", lambda: buf((3,)) + buf((3,), i32, slot=1), DTypeError, ["ADD", "float32", "int32", "(3,)"]),
    ("float op on ints", lambda: buf((3,), i32).recip(), DTypeError, ["RECIP", "int32", "floating-point"]),
    ("sqrt on ints", lambda: buf((3,), i32).sqrt(), DTypeError, ["SQRT", "int32"]),
    ("int op on floats", lambda: buf((3,)) % buf((3,), slot=1), DTypeError, ["MOD", "float32", "integer"]),
    ("xor on floats", lambda: buf((3,)) ^ buf((3,), slot=1), DTypeError, ["XOR", "float32"]),
    ("neg on bool", lambda: -buf((3,), dtypes.bool), DTypeError, ["NEG", "bool"]),
    ("where condition", lambda: buf((3,)).where(buf((3,), slot=1), buf((3,), slot=2)), DTypeError,
     ["WHERE", "bool", "float32"]),
    ("where branches", lambda: buf((3,), dtypes.bool).where(buf((3,)), buf((3,), i32, slot=1)), DTypeError,
     ["WHERE", "float32", "int32"]),
    ("store dtype", lambda: buf((3,)).store(buf((3,), i32, slot=1)), DTypeError, ["STORE", "int32", "float32"]),
    ("index dtype", lambda: buf((3,)).index(UOp.const(1.0)), DTypeError, ["INDEX", "float32"]),
    ("range bound", lambda: UOp.range(UOp.const(4.0), 0), DTypeError, ["RANGE", "float32"]),
    ("threefry dtype", lambda: UOp(Ops.THREEFRY, (buf((2,)), buf((2,)))), DTypeError, ["THREEFRY", "float32"]),
    ("python float to int", lambda: buf((3,), i32) + 1.5, DTypeError, ["ADD", "1.5", "int32"]),
    ("const float to int", lambda: UOp.const(1.5, i32), DTypeError, ["1.5", "int32"]),
    ("arity binary", lambda: UOp(Ops.ADD, (buf((3,)),)), ArityError, ["ADD", "2", "1"]),
    ("arity unary", lambda: UOp(Ops.SQRT, (buf((3,)), buf((3,)))), ArityError, ["SQRT", "1", "2"]),
    ("arity where", lambda: UOp(Ops.WHERE, (buf((3,), dtypes.bool), buf((3,)))), ArityError, ["WHERE", "3", "2"]),
    ("arity reshape", lambda: UOp(Ops.RESHAPE, (buf((3,)),)), ArityError, ["RESHAPE", "2", "1"]),
    ("arity binary data", lambda: UOp(Ops.BINARY, (buf((3,)),), b"x"), ArityError, ["BINARY", "0", "1"]),
    ("source not a UOp", lambda: UOp(Ops.ADD, (buf((3,)), 1)), ArityError, ["ADD", "int", "UOp.const"]),
    ("shape operand dtype", lambda: UOp(Ops.RESHAPE, (buf((2,)), UOp.vconst([2.0], f32))), ArityError,
     ["VCONST", "float32", "shape operand"]),
    ("shape operand rank", lambda: UOp(Ops.EXPAND, (buf((1, 1)), UOp.stack(UOp.vconst([1]), UOp.vconst([1])))),
     ArityError, ["STACK", "(2, 1)"]),
    ("cast arg", lambda: UOp(Ops.CAST, (buf((3,)),), "float16"), ArityError, ["CAST", "DType", "float16"]),
    ("reduce op", lambda: UOp(Ops.REDUCE, (buf((3,)),), (Ops.SUB, (0,))), ArityError, ["REDUCE", "Ops.SUB"]),
    ("reduce range src", lambda: UOp(Ops.REDUCE, (buf((3,)), buf((3,))), (Ops.ADD, (0,))), ArityError,
     ["REDUCE", "RANGE", "BUFFER"]),
    ("gettuple range", lambda: UOp(Ops.GETTUPLE, (TUP,), 2), ArityError, ["GETTUPLE", "2"]),
    ("gettuple source", lambda: UOp(Ops.GETTUPLE, (A,), 0), ArityError, ["GETTUPLE", "BUFFER"]),
    ("const arg", lambda: UOp(Ops.CONST, (), 5), ArityError, ["CONST", "(value, dtype)"]),
    ("vconst arg", lambda: UOp(Ops.VCONST, (), (5, dtypes.index)), ArityError, ["VCONST", "tuple"]),
    ("bufferview arg", lambda: UOp(Ops.BUFFERVIEW, (A,), None), ArityError, ["BUFFERVIEW", "(size, dtype, offset)"]),
    ("buffer arg", lambda: UOp(Ops.BUFFER, (UOp.shape_operand((2,)),), (0, f32)), ArityError, ["BUFFER", "dtype"]),
]
# fmt: on


@pytest.mark.parametrize("name, make, error, words", ERRORS, ids=[e[0] for e in ERRORS])
def test_typed_errors_name_the_op_and_operands(name, make, error, words):
    with pytest.raises(error) as info:
        make()
    for w in words:
        assert w in str(info.value), f"{w!r} not in {str(info.value)!r}"


def test_error_hierarchy():
    assert issubclass(ShapeError, UOpError) and issubclass(ShapeError, ValueError)
    assert issubclass(DTypeError, UOpError) and issubclass(DTypeError, TypeError)
    assert issubclass(ArityError, UOpError) and issubclass(UOpError, CompilerError)


def test_combining_with_a_non_number_is_a_type_error():
    with pytest.raises(TypeError, match="str"):
        buf((3,)) + "1"  # type: ignore[operator]


def test_failed_construction_interns_nothing():
    a, b = buf((3,), slot=77), buf((4,), slot=78)
    gc.collect()
    before = len(uop_module._intern)
    with pytest.raises(ShapeError):
        a + b
    with pytest.raises(DTypeError):
        a + buf((3,), i32, slot=77)
    gc.collect()
    assert len(uop_module._intern) == before


# ---------------------------------------------------------------- device, addrspace, axis

D = ("CPU:0", "CPU:1")


def test_device_follows_the_table():
    a = buf((4, 3), device="CPU")
    assert a.device == "CPU"
    assert UOp.const(1.0).device is None and UOp.range(4, 0).device is None
    assert (a + 1.0).device == "CPU"  # the constant has none, so the buffer's wins
    assert a.copy("GPU").device == "GPU"
    assert a.reshape((12,)).sum().device == "CPU"
    assert buf((4, 3), device=D).device == D


def test_addrspace():
    loc = UOp.buffer(0, f32, (4,), addrspace=AddrSpace.LOCAL)
    assert loc.addrspace is AddrSpace.LOCAL
    assert loc.reshape((2, 2)).addrspace is AddrSpace.LOCAL
    assert buf((4,)).addrspace is AddrSpace.GLOBAL
    assert UOp.const(1).addrspace is None


def test_sharding_axis():
    x = buf((4, 3), device=D)
    assert x.axis == 0
    assert buf((4, 3)).axis is None
    assert x.permute((1, 0)).axis == 1
    assert x.sum([0]).axis is None  # reducing the shard axis
    assert x.sum([1]).axis == 0
    assert x.permute((1, 0)).sum([0]).axis == 1  # the permuted shard axis survives a reduce elsewhere
    assert x.permute((1, 0)).sum([1]).axis is None
    assert x.copy("CPU:0").axis is None
    assert x.replicated(0).axis is None
    assert x.replicated(1).axis == 0
    assert (x + x).axis == 0
    assert (buf((4, 3), slot=1) * x).axis == 0  # ALU ops inherit from whichever source has one
    assert x.reshape((12,)).axis == 0
    assert x.reshape((1, 4, 3)).axis == 1
    assert x.flip([1]).axis == 0


# ---------------------------------------------------------------- operators and equality

X, Y = buf((3,), slot=10), buf((3,), slot=11)
XI, YI = buf((3,), i32, slot=12), buf((3,), i32, slot=13)
XB = buf((3,), dtypes.bool, slot=14)

# fmt: off
OPERATORS = [
    (lambda: X + Y, Ops.ADD, (X, Y)), (lambda: X - Y, Ops.SUB, (X, Y)), (lambda: X * Y, Ops.MUL, (X, Y)),
    (lambda: X / Y, Ops.DIV, (X, Y)), (lambda: XI // YI, Ops.IDIV, (XI, YI)), (lambda: XI % YI, Ops.MOD, (XI, YI)),
    (lambda: XI & YI, Ops.AND, (XI, YI)), (lambda: XI | YI, Ops.OR, (XI, YI)), (lambda: XI ^ YI, Ops.XOR, (XI, YI)),
    (lambda: XI << YI, Ops.SHL, (XI, YI)), (lambda: XI >> YI, Ops.SHR, (XI, YI)),
    (lambda: X < Y, Ops.CMPLT, (X, Y)), (lambda: X > Y, Ops.CMPGT, (X, Y)), (lambda: X <= Y, Ops.CMPLE, (X, Y)),
    (lambda: X >= Y, Ops.CMPGE, (X, Y)), (lambda: X.eq(Y), Ops.CMPEQ, (X, Y)), (lambda: X.ne(Y), Ops.CMPNE, (X, Y)),
    (lambda: X.maximum(Y), Ops.MAX, (X, Y)), (lambda: X.pow(Y), Ops.POW, (X, Y)),
    (lambda: -X, Ops.NEG, (X,)), (lambda: ~XB, Ops.NOT, (XB,)), (lambda: X.recip(), Ops.RECIP, (X,)),
    (lambda: X.sqrt(), Ops.SQRT, (X,)), (lambda: X.exp2(), Ops.EXP2, (X,)), (lambda: X.log2(), Ops.LOG2, (X,)),
    (lambda: X.sin(), Ops.SIN, (X,)), (lambda: X.trunc(), Ops.TRUNC, (X,)),
    (lambda: XB.where(X, Y), Ops.WHERE, (XB, X, Y)),
    (lambda: X.cast(i32), Ops.CAST, (X,)), (lambda: X.bitcast(i32), Ops.BITCAST, (X,)),
]
# fmt: on


@pytest.mark.parametrize("make, op, src", OPERATORS, ids=[o[1].name for o in OPERATORS])
def test_python_operators_build_the_op_they_name(make, op, src):
    u = make()
    assert u.op is op and u.src == src


def test_reflected_operators_keep_operand_order():
    x = UOp.const(2.0)
    r = 1 - x
    assert r.op is Ops.SUB and r.src[1] is x and r.src[0] is UOp.const(1.0)
    assert (3 / x).src == (UOp.const(3.0), x)
    assert (x + 1).src == (x, UOp.const(1.0))  # the Python number takes the UOp's dtype
    assert (2 * XI).src[1] is XI and (2 * XI).src[0].dtype is i32


def test_invert_on_ints_is_xor_minus_one():
    u = ~UOp.const(5, i32)
    assert u.op is Ops.XOR and u.src[1] is UOp.const(-1, i32)


def test_equality_is_identity():
    x, y = UOp.const(1), UOp.const(2)
    assert (x == y) is False and (x == x) is True
    assert (x != y) is True and (x != x) is False
    assert (x == 1) is False  # never builds a comparison
    assert {x: "a", y: "b"}[UOp.const(1)] == "a"
    assert hash(x) == hash(UOp.const(1))
