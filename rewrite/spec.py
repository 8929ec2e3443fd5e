"""The spec checker: validates a whole graph against the spec tables (seed 001, plus what seed 000 adds).

`check(root, stage)` raises SpecViolation listing every violation found; `violations(root, stage)` returns them
as strings `"OP: <node.short()>: what is wrong"`. Construction (rewrite.derive) already rejects a node whose
dtype or shape cannot be derived, so this module checks what a single constructor call cannot see:

- per node (the `_RULES` table): the number and kinds of sources, args that derive ignores (an ADD with an arg,
  a RANGE without an AxisType), constant values that their dtype cannot hold, leftover `tag`s;
- per graph: FUNCTION parameters against the FUNCTION's arguments, and one definition per variable name, RANGE
  id and BUFFER slot;
- per stage (the `_STAGES` table):
    any     the rules above, nothing more
    tensor  the Tensor graph: no codegen ops, no RANGE / END / LINEAR, no device-only integer division
    kernel  after Rangeify: no movement ops but INDEX / STACK / BITCAST, no FUNCTION or gradient markers,
            every value ()-shaped, every REDUCE over RANGEs
    linear  after Linearize: the root is LINEAR, each listed node once and after all of its sources, RANGE/END
            (or REDUCE) and IF/ENDIF properly nested, no RANGE used after its END
    program after Render / Compile: the root is PROGRAM(SINK, LINEAR[, SOURCE[, BINARY]]), its LINEAR as for
            `linear`, nothing but kernel ops in it

Every walk is iterative (toposort), so million-node graphs are fine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple, cast

from rewrite.dtype import DType, PtrDType, dtypes
from rewrite.errors import SpecViolation
from rewrite.ops import GroupOp, Ops
from rewrite.spec_args import (
    ArgCheck,
    _any_arg,
    _barrier_arg,
    _buffer_arg,
    _bufferview_arg,
    _const_arg,
    _copy_arg,
    _custom_arg,
    _dtype_arg,
    _flip_arg,
    _gettuple_arg,
    _is_int,
    _load_arg,
    _no_arg,
    _param_arg,
    _permute_arg,
    _range_arg,
    _reduce_arg,
    _replicated_arg,
    _shuffle_arg,
    _store_arg,
    _type_arg,
    _vconst_arg,
)
from rewrite.uop import BufferArg, ParamArg, UOp

__all__ = ["STAGES", "check", "violations"]

# ---------------------------------------------------------------- source kinds


class Kind(NamedTuple):
    """What a source must be: a test and the words for the error message."""

    test: Callable[[UOp], bool]
    what: str


def _is_shape_operand(s: UOp) -> bool:
    if s.op not in (Ops.VCONST, Ops.STACK) or s.dtype is not dtypes.index or len(s.shape) != 1:
        return False
    return s.op is Ops.VCONST or all(x.shape == () for x in s.src)


# writes may go through views that keep a one-to-one element mapping (not EXPAND, which aliases, nor PAD)
_WRITABLE_VIEWS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.BITCAST})
_BUFFER_OPS = frozenset({Ops.BUFFER, Ops.PARAM, Ops.INDEX, Ops.AFTER, Ops.BUFFERVIEW, Ops.GETADDR})


def _is_buffer_like(s: UOp) -> bool:
    while s.op in _WRITABLE_VIEWS and s.src:
        s = s.src[0]
    return s.op in _BUFFER_OPS


SHAPE = Kind(_is_shape_operand, "a (k,)-shaped index VCONST or a STACK of index scalars")
INDEX_SCALAR = Kind(lambda s: s.dtype is dtypes.index and s.shape == (), "a ()-shaped index")
INT_INDEX = Kind(lambda s: s.dtype.scalar.is_int and len(s.shape) <= 1, "an integer index of shape () or (k,)")
BOOL = Kind(lambda s: s.dtype.scalar is dtypes.bool, "bool")
RANGE = Kind(lambda s: s.op is Ops.RANGE, "a RANGE")
TUPLE = Kind(lambda s: s.op is Ops.TUPLE, "a TUPLE")
IF = Kind(lambda s: s.op is Ops.IF, "an IF")
VOID = Kind(lambda s: s.dtype is dtypes.void, "a void node (a side effect: STORE, END, GROUP, ...)")
BUFFER_LIKE = Kind(_is_buffer_like, "buffer-like (BUFFER, PARAM, INDEX, AFTER, BUFFERVIEW, or a view of one)")
BUFFER_SRC = Kind(lambda s: s.op in (Ops.BUFFER, Ops.BUFFERVIEW), "a BUFFER or BUFFERVIEW")
TUPLE_HOLDER = Kind(
    lambda s: s.op is Ops.TUPLE or (s.op in (Ops.FUNCTION, Ops.CALL) and bool(s.src) and s.src[0].op is Ops.TUPLE),
    "a TUPLE, or a FUNCTION/CALL whose body is a TUPLE",
)


def _op_kind(op: Ops) -> Kind:
    return Kind(lambda s: s.op is op, f"a {op.name}")



# ---------------------------------------------------------------- cross-source checks


def _param_bounds(u: UOp) -> str | None:
    if len(u.src) == 2:
        return "takes (shape,) or (shape, min, max), got 2 sources"
    if len(u.src) == 3:
        lo, hi = u.src[1], u.src[2]
        if lo.shape != () or hi.shape != () or lo.dtype is not u.dtype or hi.dtype is not u.dtype:
            return f"min and max must be ()-shaped {u.dtype.name} values, got {lo.short()} and {hi.short()}"
        if lo.op is Ops.CONST and hi.op is Ops.CONST and lo.value > hi.value:
            return f"empty range: min {lo.value} > max {hi.value}"
    return None


def _stored_dtype(u: UOp) -> str | None:
    buf, val = u.src[0], u.src[1]
    bdt = buf.dtype.base if isinstance(buf.dtype, PtrDType) else buf.dtype
    if bdt.scalar is not val.dtype.scalar:
        return f"value dtype {val.dtype.name} does not match the buffer's {bdt.name}"
    return None


def _bufferview_fits(u: UOp) -> str | None:
    size, dt, offset = cast("tuple[int, DType, int]", u.arg)
    buf = u.src[0]
    if not all(isinstance(d, int) for d in buf.shape):
        return None
    nbytes = buf.dtype.itemsize
    for d in buf.shape:
        nbytes *= d
    # read as a byte offset; an element offset that fits also passes this, so neither reading is rejected wrongly
    if offset + size * dt.itemsize > nbytes:
        return f"view of {size} x {dt.name} at offset {offset} runs past the {nbytes}-byte buffer"
    return None


_SEED_PROGRAM = (Ops.LINEAR, Ops.SOURCE, Ops.BINARY)
_PIPELINE_PROGRAM = (Ops.SINK, Ops.LINEAR, Ops.SOURCE, Ops.BINARY)


def _program_sources(u: UOp) -> str | None:
    """A PROGRAM is `PROGRAM(LINEAR, SOURCE, BINARY)` (seed 001) or the pipeline's `PROGRAM(SINK, LINEAR)`, which
    render and compile grow by a SOURCE and then a BINARY (lower.pipeline)."""
    ops = tuple(s.op for s in u.src)
    if ops == _SEED_PROGRAM or (len(ops) >= 2 and ops == _PIPELINE_PROGRAM[: len(ops)]):
        return None
    got = ", ".join(o.name for o in ops)
    return (f"sources must be a LINEAR, a SOURCE and a BINARY, or a SINK and a LINEAR followed by the SOURCE and "
            f"BINARY that render and compile add; got {got}")


# ---------------------------------------------------------------- the per-op table


class Rule(NamedTuple):
    """How a node of one op must look: source count, source kinds, arg, and extra cross-source checks."""

    arity: tuple[int, int | None]  # (min, max) sources; max None means unbounded
    srcs: tuple[Kind | None, ...] = ()  # kind of src[i]; None means any
    rest: Kind | None = None  # kind of each source past `srcs`
    arg: ArgCheck = _no_arg
    extra: tuple[ArgCheck, ...] = ()


def _alu_rule(n: int) -> Rule:
    return Rule((n, n))


# fmt: off
_RULES: dict[Ops, Rule] = {
    **{o: _alu_rule(1) for o in GroupOp.UnaryALU},
    **{o: _alu_rule(2) for o in GroupOp.BinaryALU},
    Ops.MULACC: _alu_rule(3),
    Ops.WHERE: Rule((3, 3), (BOOL, None, None)),
    Ops.THREEFRY: _alu_rule(2),
    Ops.CAST: Rule((1, 1), arg=_dtype_arg),
    Ops.BITCAST: Rule((1, 1), arg=_dtype_arg),
    # -- source --
    Ops.PARAM: Rule((1, 3), (SHAPE,), arg=_param_arg, extra=(_param_bounds,)),
    Ops.BUFFER: Rule((1, 1), (SHAPE,), arg=_buffer_arg),
    Ops.BUFFERVIEW: Rule((1, 1), (BUFFER_SRC,), arg=_bufferview_arg, extra=(_bufferview_fits,)),
    Ops.CONST: Rule((0, 0), arg=_const_arg),
    Ops.VCONST: Rule((0, 0), arg=_vconst_arg),
    Ops.BINARY: Rule((0, 0), arg=_type_arg(bytes, "bytes")),
    # -- movement --
    Ops.RESHAPE: Rule((2, 2), (None, SHAPE)),
    Ops.EXPAND: Rule((2, 2), (None, SHAPE)),
    Ops.PAD: Rule((3, 3), (None, SHAPE, SHAPE)),
    Ops.SHRINK: Rule((3, 3), (None, SHAPE, SHAPE)),
    Ops.PERMUTE: Rule((1, 1), arg=_permute_arg),
    Ops.FLIP: Rule((1, 1), arg=_flip_arg),
    Ops.INDEX: Rule((1, None), (None,), rest=INT_INDEX),
    Ops.STACK: Rule((1, None)),
    Ops.REPLICATED: Rule((1, 1), arg=_replicated_arg),
    # -- reduce, call --
    Ops.REDUCE: Rule((1, None), (None,), rest=RANGE, arg=_reduce_arg),
    Ops.FUNCTION: Rule((1, None), (TUPLE,), arg=_any_arg),
    Ops.CALL: Rule((1, None), arg=_any_arg),
    Ops.TUPLE: Rule((0, None)),
    Ops.GETTUPLE: Rule((1, 1), (TUPLE_HOLDER,), arg=_gettuple_arg),
    # -- load / store / copy --
    Ops.LOAD: Rule((1, 3), (BUFFER_LIKE, None, BOOL), arg=_load_arg),
    Ops.STORE: Rule((2, 3), (BUFFER_LIKE, None, BOOL), arg=_store_arg, extra=(_stored_dtype,)),
    Ops.COPY: Rule((1, 1), arg=_copy_arg),
    # -- ordering --
    Ops.RANGE: Rule((1, 1), (INDEX_SCALAR,), arg=_range_arg),
    Ops.END: Rule((2, None), (None,), rest=RANGE),
    Ops.AFTER: Rule((1, None)),
    Ops.GROUP: Rule((0, None), rest=VOID),
    Ops.SINK: Rule((0, None), arg=_any_arg),
    Ops.LINEAR: Rule((0, None)),
    # -- markers --
    Ops.CONTIGUOUS: Rule((1, 1)),
    Ops.CONTIGUOUSBACKWARD: Rule((1, 1)),
    Ops.DETACH: Rule((1, 1)),
    # -- codegen --
    Ops.BARRIER: Rule((0, None), arg=_barrier_arg),
    Ops.INS: Rule((0, None), arg=_any_arg),
    Ops.GETADDR: Rule((1, 2), arg=_any_arg),
    Ops.SPECIAL: Rule((1, 1), (INDEX_SCALAR,), arg=_type_arg(str, "a name (str)")),
    Ops.IF: Rule((1, None), (BOOL,)),
    Ops.ENDIF: Rule((1, 1), (IF,)),
    Ops.WMMA: Rule((3, 3), arg=_any_arg),
    Ops.CUSTOM: Rule((0, None), arg=_custom_arg),
    Ops.ATOMICADD: Rule((2, 2)),
    Ops.CUSTOMFUNCTION: Rule((0, None), arg=_any_arg),
    Ops.PROGRAM: Rule((2, 4), arg=_any_arg, extra=(_program_sources,)),
    Ops.SOURCE: Rule((0, 0), arg=_type_arg(str, "the source text (str)")),
    Ops.SHUFFLE: Rule((1, 1), arg=_shuffle_arg),
}
# fmt: on

if _missing := set(Ops) - set(_RULES):
    raise AssertionError(f"rewrite.spec: no rule for {sorted(o.name for o in _missing)}")


def _node_problems(u: UOp, rule: Rule, allow_tags: bool) -> Iterator[str]:
    lo, hi = rule.arity
    n = len(u.src)
    if n < lo or (hi is not None and n > hi):
        want = str(lo) if lo == hi else f"at least {lo}" if hi is None else f"{lo} to {hi}"
        yield f"takes {want} sources, got {n}"
        return  # the other checks read sources by position
    for i, s in enumerate(u.src):
        kind = rule.srcs[i] if i < len(rule.srcs) else rule.rest
        if kind is not None and not kind.test(s):
            yield f"source {i} must be {kind.what}, got {_short(s)}"
    if (p := rule.arg(u)) is not None:
        yield p
    for extra in rule.extra:
        if (p := extra(u)) is not None:
            yield p
    if u.tag is not None and not allow_tags:
        yield f"carries tag {u.tag!r}; tags are for the duration of one rewrite pass and must be cleared after it"


# ---------------------------------------------------------------- graph rules


def _body_params(body: UOp) -> list[UOp]:
    """The positional PARAMs a FUNCTION body binds: not those under a nested FUNCTION/CALL body, which bind theirs."""
    out, seen, todo = [], {body}, [body]
    while todo:
        u = todo.pop()
        if u.op is Ops.PARAM and isinstance(u.arg, ParamArg) and _is_int(u.arg.slot):
            out.append(u)
        nested = u.op in (Ops.FUNCTION, Ops.CALL) and u is not body
        for s in u.src[1:] if nested else u.src:
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return out


def _function_params(nodes: list[UOp]) -> Iterator[tuple[UOp, str]]:
    for f in nodes:
        if f.op is not Ops.FUNCTION or not f.src or f.src[0].op is not Ops.TUPLE:
            continue
        args = f.src[1:]
        for p in sorted(_body_params(f.src[0]), key=lambda p: cast(ParamArg, p.arg).slot):
            k = cast(int, cast(ParamArg, p.arg).slot)
            if k >= len(args):
                yield f, f"the body uses PARAM {k} but the FUNCTION passes {len(args)} argument(s)"
                continue
            a = args[k]
            if a.dtype is not p.dtype:
                yield f, f"argument {k} is {a.dtype.name} but PARAM {k} is {p.dtype.name}"
            concrete = all(isinstance(d, int) for d in (*a.shape, *p.shape))
            if concrete and a.shape != p.shape:
                yield f, f"argument {k} has shape {a.shape} but PARAM {k} has shape {p.shape}"


def _definition_key(u: UOp) -> tuple | None:
    if u.op is Ops.PARAM and isinstance(u.arg, ParamArg) and isinstance(u.arg.slot, str):
        return ("variable", u.arg.slot)
    if u.op is Ops.RANGE and isinstance(u.arg, tuple) and u.arg:
        return ("RANGE id", u.arg[0])
    if u.op is Ops.BUFFER and isinstance(u.arg, BufferArg):  # each address space numbers its own slots
        return (f"{getattr(u.arg.addrspace, 'name', u.arg.addrspace)} BUFFER slot", u.arg.slot)
    return None


def _one_definition(nodes: list[UOp]) -> Iterator[tuple[UOp, str]]:
    """A variable name, RANGE id or BUFFER slot names one thing; two different nodes for it are a conflict."""
    first: dict[tuple, UOp] = {}
    for u in nodes:
        if (key := _definition_key(u)) is None:
            continue
        if (v := first.setdefault(key, u)) is not u and (v.src, v.arg) != (
            u.src,
            u.arg,
        ):  # a tag alone is not a conflict
            yield u, f"{key[0]} {key[1]!r} is defined twice, differently: also as {_short(v)}"


_GRAPH_RULES: tuple[Callable[[list[UOp]], Iterator[tuple[UOp, str]]], ...] = (_function_params, _one_definition)

# ---------------------------------------------------------------- stages


def _scalar_value(u: UOp) -> str | None:
    if u.op in _KERNEL_VALUES and u.shape != ():
        return f"has shape {u.shape}; after Rangeify every value is ()-shaped (index buffers down to one element)"
    return None


def _reduce_over_ranges(u: UOp) -> str | None:
    if u.op is Ops.REDUCE and len(u.src) == 1:
        return "reduces over no RANGE; after Rangeify a REDUCE names the RANGEs it closes"
    return None


def _linear_order(root: UOp) -> Iterator[tuple[UOp, str]]:
    if root.op is not Ops.LINEAR:
        yield root, "stage 'linear' needs a LINEAR root"
        return
    pos: dict[UOp, int] = {}
    open_blocks: list[UOp] = []
    closed: set[UOp] = set()
    for i, u in enumerate(root.src):
        if u in pos:
            yield u, f"listed twice, at {pos[u]} and {i}"
            continue
        if u.op is Ops.LINEAR:
            yield u, f"a LINEAR inside the LINEAR list (position {i}); the list must be flat"
        for j, s in enumerate(u.src):
            if s not in pos:
                yield u, f"source {j} ({_short(s)}) is not listed before it (position {i})"
            elif s in closed:
                yield u, f"uses {_short(s)} after its block was closed"
        pos[u] = i
        if u.op in _CLOSERS:
            targets = _CLOSERS[u.op](u)
            top = open_blocks[len(open_blocks) - len(targets) :] if targets else []
            if set(top) != set(targets):
                innermost = ", ".join(_short(b) for b in top) or "none"
                yield u, f"closes {', '.join(_short(t) for t in targets)} but the innermost open block(s): {innermost}"
            open_blocks = [b for b in open_blocks if b not in targets]
            closed.update(targets)
        if u.op in _OPENERS:
            open_blocks.append(u)
    for b in open_blocks:
        yield b, f"is never closed (no {_OPENERS[b.op].name} for it in the list)"


_OPENERS = {Ops.RANGE: Ops.END, Ops.IF: Ops.ENDIF}
# a REDUCE over RANGEs closes them as END does (its value is complete once the loop is)
_CLOSERS: dict[Ops, Callable[[UOp], tuple[UOp, ...]]] = {
    Ops.END: lambda u: u.src[1:],
    Ops.REDUCE: lambda u: u.src[1:],
    Ops.ENDIF: lambda u: u.src[:1],
}
def _program_parts(root: UOp) -> Iterator[tuple[UOp, str]]:
    if root.op is not Ops.PROGRAM:
        yield root, "stage 'program' needs a PROGRAM root"
        return
    linear = root.src[1] if root.src[0].op is Ops.SINK else root.src[0]
    yield from _linear_order(linear)


_KERNEL_VALUES = GroupOp.Elementwise | frozenset({Ops.REDUCE, Ops.LOAD, Ops.BITCAST, Ops.CONST})


class Stage(NamedTuple):
    forbidden: frozenset[Ops]
    why: str  # said with each forbidden op
    node_rules: tuple[ArgCheck, ...] = ()
    root_rules: tuple[Callable[[UOp], Iterator[tuple[UOp, str]]], ...] = ()


_NOT_IN_KERNELS = (
    GroupOp.Movement - {Ops.INDEX, Ops.STACK, Ops.BITCAST}
    | GroupOp.Marker
    | {Ops.FUNCTION, Ops.TUPLE, Ops.GETTUPLE, Ops.COPY}
)
# fmt: off
_STAGES: dict[str, Stage] = {
    "any": Stage(frozenset(), ""),
    "tensor": Stage(GroupOp.Codegen | GroupOp.DeviceALU | {Ops.RANGE, Ops.END, Ops.LINEAR},
                    "codegen, loops and device integer division come in with lowering"),
    "kernel": Stage(_NOT_IN_KERNELS | {Ops.LINEAR, Ops.PROGRAM},
                    "Rangeify turns movement into index math and resolves FUNCTIONs, copies and markers",
                    (_scalar_value, _reduce_over_ranges)),
    "linear": Stage(_NOT_IN_KERNELS, "a linearized kernel holds only kernel ops", (), (_linear_order,)),
    "program": Stage(_NOT_IN_KERNELS, "a program's kernel and LINEAR hold only kernel ops", (), (_program_parts,)),
}
# fmt: on
STAGES: tuple[str, ...] = tuple(_STAGES)

# ---------------------------------------------------------------- entry points


def _short(u: UOp, limit: int = 100) -> str:
    s = u.short()
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _collect(found: list[tuple[UOp, str]], root: UOp, rule: Callable, arg: object) -> None:
    try:
        found.extend(rule(arg))
    except Exception as e:  # as for node rules: a malformed graph is reported, not raised
        found.append((root, f"malformed graph: {rule.__name__} failed ({type(e).__name__}: {e})"))


def violations(root: UOp, stage: str = "any", *, allow_tags: bool = False) -> list[str]:
    """Every spec violation in the graph under `root`, each as `"OP: <node.short()>: what is wrong"`."""
    if (st := _STAGES.get(stage)) is None:
        raise ValueError(f"unknown stage {stage!r}; known stages: {', '.join(STAGES)}")
    nodes = root.toposort()
    found: list[tuple[UOp, str]] = []
    for u in nodes:
        try:
            found.extend((u, p) for p in _node_problems(u, _RULES[u.op], allow_tags))
            if u.op in st.forbidden:
                found.append((u, f"is not allowed at stage {stage!r}: {st.why}"))
            found.extend((u, p) for rule in st.node_rules if (p := rule(u)) is not None)
        except Exception as e:  # a malformed node can trip a check; report it rather than abort the listing
            found.append((u, f"malformed node ({type(e).__name__}: {e})"))
    for graph_rule in _GRAPH_RULES:
        _collect(found, root, graph_rule, nodes)
    for root_rule in st.root_rules:
        _collect(found, root, root_rule, root)
    return [f"{u.op.name}: {_short(u)}: {msg}" for u, msg in found]


def check(root: UOp, stage: str = "any", *, allow_tags: bool = False) -> None:
    """Raise SpecViolation listing every violation in the graph under `root` (see the module docstring for stages)."""
    if found := violations(root, stage, allow_tags=allow_tags):
        raise SpecViolation(f"{len(found)} spec violation(s) at stage {stage!r}:\n  " + "\n  ".join(found), found)
