"""The spec checker: well-formed graphs pass at their stage, and each kind of violation is reported."""

from __future__ import annotations

import math

import pytest

from rewrite import spec
from rewrite.dtype import AddrSpace, dtypes
from rewrite.errors import SpecViolation
from rewrite.ops import AxisType, Ops
from rewrite.spec import check, violations
from rewrite.uop import BufferArg, ParamArg, UOp

f32, i32, idx = dtypes.float32, dtypes.int32, dtypes.index


_slots: dict[tuple, int] = {}


def buf(shape: tuple, dtype=f32, slot: int | None = None, device: str | tuple | None = None) -> UOp:
    """A BUFFER; without a slot, one per (shape, dtype, device), so that test graphs never define a slot twice."""
    if slot is None:
        slot = _slots.setdefault((shape, dtype, device), 100 + len(_slots))
    return UOp(Ops.BUFFER, (UOp.shape_operand(shape),), BufferArg(slot, dtype, device))


def forge(op: Ops, src: tuple, arg: object, dtype, shape: tuple) -> UOp:
    """A node built around the constructor, as a buggy pass that edits nodes in place could leave one."""
    u = object.__new__(UOp)
    u.op, u.src, u.arg, u.tag, u.dtype, u.shape, u._mm, u._props = op, src, arg, None, dtype, shape, None, None
    return u


# ---------------------------------------------------------------- well-formed graphs


def tensor_graph() -> UOp:
    a, b, out = buf((4, 3)), buf((3,), slot=1), buf((4, 1), slot=2)
    y = (a * b.reshape((1, 3)).expand((4, 3))).sum([1])
    z = (y > 0).where(y, y * 0.5).cast(dtypes.float16).cast(f32)
    return UOp.sink(out.store(z.contiguous()))


def function_graph() -> UOp:
    p0, p1 = UOp.param(0, f32, (4, 3)), UOp.param(1, f32, (3,))
    fn = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (p0 + p1, p0.sum([0]))), buf((4, 3)), buf((3,), slot=1)))
    return UOp.sink(buf((4, 3), slot=2).store(UOp(Ops.GETTUPLE, (fn,), 0)))


def kernel_graph() -> UOp:
    r0, r1 = UOp.range(4, 0), UOp.range(3, 1, AxisType.REDUCE)
    a, b, out = UOp.param(0, f32, (12,)), UOp.param(1, f32, (3,)), UOp.param(2, f32, (4,))
    prod = a.index(r0 * 3 + r1).load() * b.index(r1).load()
    acc = UOp(Ops.REDUCE, (prod, r1), (Ops.ADD, ()))
    return UOp.sink(out.index(r0).store(acc).end(r0))


def linear_graph() -> UOp:
    return UOp(Ops.LINEAR, tuple(kernel_graph().toposort()))


def symbolic_graph() -> UOp:
    n = UOp.variable("n", 1, 32)
    x = UOp.param(0, f32, (n, 4))
    return UOp.sink(UOp.param(1, f32, (n, 1)).store(x.sum([1])))


def multi_device_graph() -> UOp:
    devs = ("CPU:0", "CPU:1")
    t = buf((8,), device="CPU:0")
    scattered = t.copy(devs)
    gathered = scattered.reshape((2, 4)).sum([0]).copy("CPU:0")
    return UOp.sink(buf((1, 4), slot=1, device="CPU:0").store(gathered))


# fmt: off
GOOD = [
    ("tensor", tensor_graph, "tensor"),
    ("tensor any", tensor_graph, "any"),
    ("function", function_graph, "tensor"),
    ("symbolic", symbolic_graph, "tensor"),
    ("multi-device", multi_device_graph, "tensor"),
    ("kernel", kernel_graph, "kernel"),
    ("kernel any", kernel_graph, "any"),
    ("linear", linear_graph, "linear"),
    ("consts", lambda: UOp.sink(UOp.const(-0.0), UOp.const(math.nan), UOp.const(float("inf"), dtypes.float16),
                                UOp.const(-128, dtypes.int8), UOp.const(2**64 - 1, dtypes.uint64),
                                UOp.const(2**80), UOp.vconst([True, False], dtypes.bool)), "tensor"),
    ("codegen", lambda: UOp.sink(UOp(Ops.SPECIAL, (UOp.const(32),), "gidx0"), UOp(Ops.BARRIER, ()),
                                 UOp(Ops.CUSTOM, (UOp.const(1.0),), ("sin({0})", f32))), "kernel"),
    ("program", lambda: UOp(Ops.PROGRAM, (linear_graph(), UOp(Ops.SOURCE, (), "void k() {}"),
                                          UOp(Ops.BINARY, (), b"\x7fELF")), "k"), "any"),
    ("pipeline program", lambda: UOp(Ops.PROGRAM, (kernel_graph(), linear_graph()), "k"), "program"),
    ("rendered program", lambda: UOp(Ops.PROGRAM, (kernel_graph(), linear_graph(), UOp(Ops.SOURCE, (), "void k() {}")),
                                     "k"), "program"),
    ("compiled program", lambda: UOp(Ops.PROGRAM, (kernel_graph(), linear_graph(), UOp(Ops.SOURCE, (), "void k() {}"),
                                                   UOp(Ops.BINARY, (), b"\x7fELF")), "k"), "program"),
    ("bufferview", lambda: UOp(Ops.BUFFERVIEW, (buf((16,)),), (4, f32, 48)).load(), "tensor"),
    ("assign", lambda: buf((3,)).after(buf((3,)).store(buf((3,), slot=1))), "tensor"),
    ("load to an address space", lambda: UOp(Ops.LOAD, (buf((4,)),), ("CPU", AddrSpace.LOCAL)), "tensor"),
    ("symbolic bufferview", lambda: UOp(Ops.BUFFERVIEW, (buf((UOp.variable("n", 1, 9),)),), (4, f32, 0)), "any"),
    ("store into a view", lambda: buf((4, 3)).shrink((1, 0), (3, 3)).store(buf((2, 3), slot=1)), "tensor"),
]
# fmt: on


@pytest.mark.parametrize("name, make, stage", GOOD, ids=[g[0] for g in GOOD])
def test_good_graphs_pass(name, make, stage):
    assert violations(make(), stage) == []
    check(make(), stage)


def test_every_op_has_a_rule():
    assert set(Ops) <= set(spec._RULES)


def test_unknown_stage():
    with pytest.raises(ValueError, match="rangeify"):
        violations(UOp.const(1), "rangeify")


# ---------------------------------------------------------------- one kind of violation at a time

A = buf((4, 3))
RNG = UOp.range(4, 0)
STORE = buf((3,)).store(buf((3,), slot=1))
IF_NODE = UOp(Ops.IF, (UOp.const(True),))

# fmt: off
BAD = [
    # constants whose value the dtype cannot hold (construction takes any (value, dtype) pair)
    ("float in int const", lambda: UOp(Ops.CONST, (), (1.5, i32)), "CONST", "must hold an int"),
    ("int const out of range", lambda: UOp(Ops.CONST, (), (300, dtypes.int8)), "CONST", "outside the int8 range"),
    ("negative unsigned", lambda: UOp(Ops.CONST, (), (-1, dtypes.uint32)), "CONST", "outside the uint32 range"),
    ("bool in int const", lambda: UOp(Ops.CONST, (), (True, i32)), "CONST", "must hold an int, got bool"),
    ("int in bool const", lambda: UOp(Ops.CONST, (), (1, dtypes.bool)), "CONST", "True or False"),
    ("int in float const", lambda: UOp(Ops.CONST, (), (1, f32)), "CONST", "must hold a float, got int"),
    ("non-canonical NaN", lambda: UOp(Ops.CONST, (), (float("nan"), f32)), "CONST", "math.nan"),
    ("float16 overflow", lambda: UOp(Ops.CONST, (), (1e6, dtypes.float16)), "CONST", "overflows float16"),
    ("float32 overflow", lambda: UOp(Ops.CONST, (), (1e39, f32)), "CONST", "overflows float32"),
    ("bfloat16 overflow", lambda: UOp(Ops.CONST, (), (3.4e38, dtypes.bfloat16)), "CONST", "overflows bfloat16"),
    ("vector const", lambda: UOp(Ops.CONST, (), (1.0, f32.vec(4))), "CONST", "scalar"),
    ("void const", lambda: UOp(Ops.CONST, (), (0, dtypes.void)), "CONST", "cannot hold a constant"),
    ("vconst values", lambda: UOp(Ops.VCONST, (), ((1, 2.5), idx)), "VCONST", "value 1"),
    ("vconst vector dtype", lambda: UOp(Ops.VCONST, (), ((1.0,), f32.vec(2))), "VCONST", "scalar"),
    # args that construction ignores
    ("arg on ALU", lambda: UOp(Ops.ADD, (A, A), 5), "ADD", "takes no arg"),
    ("arg on RESHAPE", lambda: UOp(Ops.RESHAPE, (A, UOp.shape_operand((12,))), "x"), "RESHAPE", "takes no arg"),
    ("cast to void", lambda: UOp(Ops.CAST, (A,), dtypes.void), "CAST", "value DType"),
    ("range arg", lambda: UOp(Ops.RANGE, (UOp.const(4),), 7), "RANGE", "(id, AxisType)"),
    ("range axis type", lambda: UOp(Ops.RANGE, (UOp.const(4),), (0, "LOOP")), "RANGE", "(id, AxisType)"),
    # an odd bound keeps this node from interning to an existing RANGE with id 1 (True == 1 in a tuple key)
    ("range bool id", lambda: UOp(Ops.RANGE, (UOp.const(997),), (True, AxisType.LOOP)), "RANGE", "(id, AxisType)"),
    ("reduce axes unsorted", lambda: UOp(Ops.REDUCE, (A,), (Ops.ADD, (1, 0))), "REDUCE", "sorted"),
    ("reduce axes repeat", lambda: UOp(Ops.REDUCE, (A,), (Ops.ADD, (0, 0))), "REDUCE", "repeat"),
    ("reduce bool sum", lambda: buf((3,), dtypes.bool).sum(), "REDUCE", "does not accept bool"),
    ("replicated repeat", lambda: A.replicated(0, 0), "REPLICATED", "repeat"),
    ("copy without device", lambda: UOp(Ops.COPY, (A,), None), "COPY", "target device"),
    ("copy bad device", lambda: UOp(Ops.COPY, (A,), ("CPU", 3)), "COPY", "device"),
    ("load bad device", lambda: UOp(Ops.LOAD, (A,), 5), "LOAD", "device"),
    ("special name", lambda: UOp(Ops.SPECIAL, (UOp.const(4),), 0), "SPECIAL", "name"),
    ("custom fmt", lambda: UOp(Ops.CUSTOM, (), 42), "CUSTOM", "format string"),
    ("source text", lambda: UOp(Ops.SOURCE, (), b"x"), "SOURCE", "str"),
    ("buffer slot", lambda: UOp(Ops.BUFFER, (UOp.shape_operand((2,)),), BufferArg(-1, f32)), "BUFFER", "slot"),
    ("buffer device", lambda: UOp(Ops.BUFFER, (UOp.shape_operand((2,)),), BufferArg(0, f32, "")), "BUFFER", "device"),
    # 7, not an AddrSpace's value: BufferArg(0, f32, None, 1) equals (and is interned as) a LOCAL buffer of the
    # same shape that an earlier test of the process left alive (AddrSpace is an IntEnum), which has no violation
    ("buffer addrspace", lambda: UOp(Ops.BUFFER, (UOp.shape_operand((2,)),), BufferArg(0, f32, None, 7)),  # type: ignore[arg-type]
     "BUFFER", "AddrSpace"),
    ("buffer ptr dtype", lambda: UOp(Ops.BUFFER, (UOp.shape_operand((2,)),), BufferArg(0, f32.ptr())), "BUFFER",
     "value dtype"),
    ("param arg type", lambda: UOp(Ops.PARAM, (UOp.shape_operand(()),), BufferArg(0, f32)), "PARAM", "ParamArg"),
    ("param slot", lambda: UOp(Ops.PARAM, (UOp.shape_operand(()),), ParamArg(1.5, f32)), "PARAM", "slot"),  # type: ignore[arg-type]
    ("bufferview arg", lambda: UOp(Ops.BUFFERVIEW, (buf((4,)),), (-1, f32, 0)), "BUFFERVIEW", "size >= 0"),
    ("bufferview past end", lambda: UOp(Ops.BUFFERVIEW, (buf((4,)),), (4, f32, 4)), "BUFFERVIEW", "runs past"),
    ("flip non-bools", lambda: forge(Ops.FLIP, (A,), (1, 0), f32, (4, 3)), "FLIP", "bools"),
    ("replicated axes", lambda: forge(Ops.REPLICATED, (A,), (5,), f32, (4, 3)), "REPLICATED", "axes must be"),
    ("reduce op", lambda: forge(Ops.REDUCE, (A,), (Ops.SUB, (0,)), f32, (1, 3)), "REDUCE", "Ops.ADD | Ops.MAX"),
    ("store dtype", lambda: forge(Ops.STORE, (buf((3,)), buf((3,), i32)), None, dtypes.void, ()), "STORE",
     "does not match"),
    ("gettuple index", lambda: forge(Ops.GETTUPLE, (UOp(Ops.TUPLE, (A,)),), 1, f32, ()), "GETTUPLE", "out of range"),
    # sources of the wrong kind or number
    ("param bounds arity", lambda: UOp(Ops.PARAM, (UOp.shape_operand(()), UOp.const(0)), ParamArg("k", idx)),
     "PARAM", "2 sources"),
    ("param empty range", lambda: UOp(Ops.PARAM, (UOp.shape_operand(()), UOp.const(5), UOp.const(1)),
                                      ParamArg("k", idx)), "PARAM", "empty range"),
    ("param bound dtype", lambda: UOp(Ops.PARAM, (UOp.shape_operand(()), UOp.const(0, i32), UOp.const(4, i32)),
                                      ParamArg("k", idx)), "PARAM", "index values"),
    ("store into a value", lambda: (A + A).store(A), "STORE", "buffer-like"),
    ("store into an expand", lambda: buf((1, 3)).expand((4, 3)).store(A), "STORE", "buffer-like"),
    ("store gate", lambda: UOp(Ops.STORE, (A, A, A)), "STORE", "source 2 must be bool"),
    ("load gate", lambda: UOp(Ops.LOAD, (A, A, A)), "LOAD", "source 2 must be bool"),
    ("load of a value", lambda: (A + A).load(), "LOAD", "buffer-like"),
    ("end arity", lambda: UOp(Ops.END, (STORE,)), "END", "at least 2 sources"),
    ("end non-range", lambda: UOp(Ops.END, (STORE, A)), "END", "source 1 must be a RANGE"),
    ("function body", lambda: UOp(Ops.FUNCTION, (A + A, A)), "FUNCTION", "must be a TUPLE"),
    ("group of values", lambda: UOp.group(STORE, A), "GROUP", "void"),
    ("if condition", lambda: UOp(Ops.IF, (UOp.const(1),)), "IF", "bool"),
    ("endif source", lambda: UOp(Ops.ENDIF, (STORE,)), "ENDIF", "an IF"),
    ("program sources", lambda: UOp(Ops.PROGRAM, (A, A, A)), "PROGRAM", "a LINEAR"),
    ("program order", lambda: UOp(Ops.PROGRAM, (linear_graph(), kernel_graph())), "PROGRAM", "a SINK and a LINEAR"),
    ("bufferview source", lambda: UOp(Ops.BUFFERVIEW, (A + A,), (4, f32, 0)), "BUFFERVIEW", "BUFFER"),
    ("shape operand", lambda: forge(Ops.RESHAPE, (A, UOp.vconst([12.0], f32)), None, f32, (12,)), "RESHAPE",
     "index VCONST"),
    ("range bound", lambda: forge(Ops.RANGE, (UOp.const(4.0),), (0, AxisType.LOOP), idx, ()), "RANGE",
     "()-shaped index"),
    ("where condition", lambda: forge(Ops.WHERE, (A, A, A), None, f32, (4, 3)), "WHERE", "source 0 must be bool"),
    ("reduce range", lambda: forge(Ops.REDUCE, (A, A), (Ops.ADD, (0,)), f32, (1, 3)), "REDUCE", "a RANGE"),
    ("alu arity", lambda: forge(Ops.ADD, (A,), None, f32, (4, 3)), "ADD", "takes 2 sources, got 1"),
    # leftovers of a rewrite pass
    ("tag", lambda: A.replace(tag=1), "BUFFER", "tag"),
]
# fmt: on


@pytest.mark.parametrize("name, make, op, words", BAD, ids=[b[0] for b in BAD])
def test_each_violation_is_reported(name, make, op, words):
    found = violations(make())
    assert found and all(v.startswith(f"{op}: ") for v in found), found  # no collateral findings
    assert any(words in v for v in found), found


def test_tags_can_be_allowed():
    tagged = UOp.sink(buf((3,)).store(buf((3,), slot=1)).replace(tag="pass-local"))
    assert violations(tagged) and violations(tagged, allow_tags=True) == []


def test_violation_names_op_and_node():
    bad = UOp(Ops.ADD, (A, A), 5)
    [v] = violations(bad)
    assert v.startswith("ADD: " + bad.short() + ": ")


def test_check_lists_every_violation():
    bad = UOp.sink(UOp(Ops.CONST, (), (1.5, i32)), UOp(Ops.ADD, (A, A), 5), UOp(Ops.COPY, (A,), None))
    with pytest.raises(SpecViolation) as info:
        check(bad)
    msg = str(info.value)
    assert "3 spec violation(s)" in msg and "CONST" in msg and "ADD" in msg and "COPY" in msg
    assert len(info.value.violations) == 3
    assert check(tensor_graph()) is None


def test_a_checker_crash_is_reported_not_raised():
    odd = forge(Ops.BUFFERVIEW, (buf((4,)),), (4, f32, None), f32, (4,))  # offset None trips the size check
    assert any("BUFFERVIEW" in v for v in violations(odd))


# ---------------------------------------------------------------- graph rules


def test_a_graph_rule_crash_is_reported_not_raised(monkeypatch):
    def broken(nodes: list[UOp]) -> list[tuple[UOp, str]]:
        raise KeyError("boom")

    monkeypatch.setattr(spec, "_GRAPH_RULES", (broken,))
    [v] = violations(A)
    assert "malformed graph: broken failed (KeyError" in v


def test_function_parameter_out_of_range():
    p = UOp.param(1, f32, (3,))
    fn = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (p * 2,)), buf((3,))))
    assert any("uses PARAM 1" in v and "1 argument" in v for v in violations(fn))


def test_function_parameter_dtype_and_shape():
    fn = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (UOp.param(0, f32, (3,)),)), buf((3,), i32)))
    assert any("argument 0 is int32 but PARAM 0 is float32" in v for v in violations(fn))
    fn = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (UOp.param(0, f32, (3,)),)), buf((4,))))
    assert any("shape (4,)" in v for v in violations(fn))


def test_nested_function_binds_its_own_params():
    inner = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (UOp.param(1, f32, (3,)),)), UOp.param(0, f32, (3,)), buf((3,))))
    outer = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (UOp(Ops.GETTUPLE, (inner,), 0),)), buf((3,), slot=1)))
    # the inner PARAM 1 is bound by the inner FUNCTION (2 args); the outer sees only PARAM 0 through inner's args
    assert violations(outer) == []


def test_one_definition_per_name():
    v1 = UOp.variable("n", 1, 8)
    v2 = UOp.variable("n", 1, 9)
    assert any("variable 'n' is defined twice" in v for v in violations(UOp.sink(v1, v2)))
    r1, r2 = UOp.range(4, 0), UOp.range(5, 0)
    assert any("RANGE id 0 is defined twice" in v for v in violations(UOp.sink(r1, r2)))
    b1, b2 = buf((4,), slot=3), buf((5,), slot=3)
    assert any("GLOBAL BUFFER slot 3 is defined twice" in v for v in violations(UOp.sink(b1, b2)))
    reg = UOp.buffer(3, f32, (1,), addrspace=AddrSpace.REG)  # an accumulator: slots count per address space
    assert violations(UOp.sink(b1, reg)) == []
    assert violations(UOp.sink(v1, v1 + 1, r1, r1 * 2, b1, b1.reshape((2, 2)))) == []


# ---------------------------------------------------------------- stages


@pytest.mark.parametrize(
    "make, op",
    [
        (lambda: UOp.range(4, 0), "RANGE"),
        (lambda: UOp(Ops.SPECIAL, (UOp.const(4),), "gidx0"), "SPECIAL"),
        (lambda: UOp(Ops.CDIV, (buf((3,), i32), buf((3,), i32))), "CDIV"),
        (lambda: UOp(Ops.LINEAR, ()), "LINEAR"),
        (lambda: UOp(Ops.BARRIER, ()), "BARRIER"),
    ],
)
def test_tensor_stage_rejects_lowering_ops(make, op):
    found = violations(UOp.sink(make()), "tensor")
    assert any(v.startswith(f"{op}: ") and "not allowed at stage 'tensor'" in v for v in found), found
    assert violations(UOp.sink(make()), "any") == []


@pytest.mark.parametrize(
    "make, op, words",
    [
        (lambda: buf((4, 3)).reshape((12,)), "RESHAPE", "not allowed at stage 'kernel'"),
        (lambda: buf((4, 3)).permute((1, 0)), "PERMUTE", "not allowed"),
        (lambda: buf((4,)).contiguous(), "CONTIGUOUS", "not allowed"),
        (lambda: function_graph(), "FUNCTION", "not allowed"),
        (lambda: buf((4,)).copy("CPU"), "COPY", "not allowed"),
        (lambda: buf((4,)) + buf((4,), slot=1), "ADD", "()-shaped"),
        (lambda: buf((4,)).load(), "LOAD", "()-shaped"),
        (lambda: UOp(Ops.REDUCE, (UOp.const(1.0),), (Ops.ADD, ())), "REDUCE", "no RANGE"),
        (lambda: UOp(Ops.LINEAR, ()), "LINEAR", "not allowed"),
    ],
)
def test_kernel_stage_rules(make, op, words):
    found = violations(UOp.sink(make()), "kernel")
    assert any(v.startswith(f"{op}: ") and words in v for v in found), found


def _lin(*nodes: UOp) -> UOp:
    return UOp(Ops.LINEAR, nodes)


def test_linear_stage_rules():
    c4, c3, c0 = UOp.const(4), UOp.const(3), UOp.const(0.0)
    out = UOp.param(0, f32, (4,))
    shp = out.src[0]
    r0, r1 = UOp.range(c4, 0), UOp.range(c3, 1)
    st = out.index(r0).store(c0)
    e0 = st.end(r0)
    good = _lin(shp, out, c4, r0, c0, out.index(r0), st, e0)
    assert violations(good, "linear") == []

    def problems(lin: UOp) -> str:
        return "\n".join(violations(lin, "linear"))

    assert "needs a LINEAR root" in problems(UOp.sink(e0))
    assert "not listed before it" in problems(_lin(shp, out, r0, c4, c0, out.index(r0), st, e0))
    assert "listed twice" in problems(_lin(shp, out, c4, r0, c4, c0, out.index(r0), st, e0))
    assert "never closed" in problems(_lin(shp, out, c4, r0, c0, out.index(r0), st))
    # END of the outer loop while the inner one is open
    st2 = out.index(r0).store(r1.cast(f32))
    bad_nest = _lin(shp, out, c4, c3, r0, r1, out.index(r0), st2, st2.end(r0), UOp(Ops.END, (st2.end(r0), r1)))
    assert "innermost open block" in problems(bad_nest)
    use_after = _lin(shp, out, c4, r0, c0, out.index(r0), st, e0, r0 * 2)
    assert "after its block was closed" in problems(use_after)
    assert "inside the LINEAR" in problems(_lin(_lin()))
    iff = UOp(Ops.IF, (UOp.const(True),))
    assert "never closed" in problems(_lin(UOp.const(True), iff))
    assert problems(_lin(UOp.const(True), iff, UOp(Ops.ENDIF, (iff,)))) == ""


def test_linear_stage_accepts_reduce_as_a_loop_closer():
    assert violations(linear_graph(), "linear") == []
    assert violations(linear_graph(), "kernel") != []  # a LINEAR root is not a kernel graph


def test_large_graph_is_checked_without_recursion():
    x = UOp.variable("deep", 0, 10)
    for _ in range(100_000):
        x = x + 1
    assert violations(x, "tensor") == []


def test_local_buffer_in_kernel():
    loc = UOp.buffer(5, f32, (16,), addrspace=AddrSpace.LOCAL)
    r = UOp.range(16, 0)
    k = UOp.sink(loc.index(r).store(UOp.const(0.0)).end(r))
    assert violations(k, "kernel") == []


def test_program_stage_checks_the_root_and_its_kernel():
    prog = UOp(Ops.PROGRAM, (kernel_graph(), linear_graph()), "k")
    assert violations(prog, "program") == []
    assert any("needs a PROGRAM root" in v for v in violations(prog.src[1], "program"))
    moved = UOp.sink(*prog.src[0].src, UOp.const(1.0).reshape((1,)).expand((4,)))
    found = violations(UOp(Ops.PROGRAM, (moved, prog.src[1]), "k"), "program")
    assert any(v.startswith("EXPAND: ") and "kernel ops" in v for v in found), found
