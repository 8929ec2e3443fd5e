"""The `symbolic` suite's peer: tinygrad 0.14's `symbolic` matcher on our expressions translated node for node,
and a small evaluator of tinygrad index expressions for the equivalence check."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

from benchmarks.symbolic_workloads import var_name

# the project is imported inside functions: the cold-start child process (benchmarks.symbolic_cold) imports
# this module before it starts its clock and must not have the compiler loaded by then
if TYPE_CHECKING:
    from rewrite import UOp


# ---------------------------------------------------------------------------------------------- tinygrad


class Untranslatable(Exception):
    pass


def tinygrad_version() -> str | None:
    import importlib.util

    if importlib.util.find_spec("tinygrad") is None:
        return None
    from importlib import metadata

    return metadata.version("tinygrad")


def to_tinygrad(exprs: Sequence[UOp]) -> tuple[list[Any], dict[Any, Any]]:
    """Our expressions as tinygrad UOps, node for node with tinygrad's plain constructor (no operator sugar,
    which could fold while building), and the map from our leaves to theirs."""
    from tinygrad.dtype import dtypes as tdt
    from tinygrad.uop.ops import AxisType as TAxis
    from tinygrad.uop.ops import Ops as T
    from tinygrad.uop.ops import UOp as TUOp

    from rewrite import Ops

    same = {Ops.ADD: T.ADD, Ops.MUL: T.MUL, Ops.IDIV: T.FLOORDIV, Ops.MOD: T.FLOORMOD, Ops.MAX: T.MAX,
            Ops.CMPLT: T.CMPLT, Ops.CMPNE: T.CMPNE, Ops.CMPEQ: T.CMPEQ, Ops.AND: T.AND, Ops.OR: T.OR,
            Ops.XOR: T.XOR, Ops.WHERE: T.WHERE}
    out: dict[UOp, Any] = {}
    leaves: dict[Any, Any] = {}
    for e in exprs:
        for u in e.toposort():
            if u in out:
                continue
            if u.op is Ops.CONST:
                v = u.arg[0]  # type: ignore[index]
                t = TUOp.const(v, tdt.bool if isinstance(v, bool) else tdt.weakint)
            elif u.op is Ops.PARAM and (name := var_name(u)) is not None:
                t = leaves[u] = TUOp.variable(name, int(u.vmin), int(u.vmax))
            elif u.op is Ops.RANGE:
                rid, axis = cast(tuple, u.arg)
                t = leaves[u] = TUOp.range(int(u.vmax) + 1, rid, TAxis[axis.name])
            elif u.op is Ops.NOT:  # tinygrad has no NOT: its logical_not is x != True
                t = TUOp(T.CMPNE, tdt.bool, (out[u.src[0]], TUOp.const(True, tdt.bool)))
            elif u.op is Ops.CMPGT:  # tinygrad has no CMPGT: a > b is b < a
                t = TUOp(T.CMPLT, tdt.bool, (out[u.src[1]], out[u.src[0]]))
            elif u.op in same:
                o = same[u.op]
                dt = tdt.bool if u.dtype.scalar.is_bool else tdt.weakint
                t = TUOp(o, dt, tuple(out[s] for s in u.src))
            elif u.op is Ops.VCONST:  # the shape operand of a variable: not part of the expression
                continue
            else:
                raise Untranslatable(u.op.name)
            out[u] = t
    return [out[e] for e in exprs], leaves


def tinygrad_batch(texprs: Sequence[Any]) -> Any:
    from tinygrad.uop.ops import UOp as TUOp
    from tinygrad.uop.ops import graph_rewrite
    from tinygrad.uop.symbolic import symbolic

    return graph_rewrite(TUOp.sink(*texprs), symbolic, name="simplify").src


def tinygrad_each(texprs: Sequence[Any]) -> list[Any]:
    return [t.simplify() for t in texprs]


_TG_EVAL: dict[str, Callable[..., Any]] = {
    "ADD": lambda a, b: a + b, "SUB": lambda a, b: a - b, "MUL": lambda a, b: a * b, "NEG": lambda a: -a,
    "FLOORDIV": lambda a, b: a // b, "FLOORMOD": lambda a, b: a % b, "MAX": max, "CMPLT": lambda a, b: a < b,
    "CMPNE": lambda a, b: a != b, "CMPEQ": lambda a, b: a == b, "AND": lambda a, b: a and b if isinstance(a, bool)
    else a & b, "OR": lambda a, b: a or b if isinstance(a, bool) else a | b, "XOR": lambda a, b: a ^ b,
    "WHERE": lambda c, a, b: a if c else b, "CAST": lambda a: a,
}


def tinygrad_eval(t: Any, env: dict[Any, int]) -> Any:
    """A tinygrad index expression's value (floor // and %, as weakint has them). The walk stops at the
    leaves in `env`: a tinygrad variable is a BUFFER whose source is its (empty) shape."""
    vals: dict[int, Any] = {}
    stack: list[tuple[Any, bool]] = [(t, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in vals:
            continue
        name = n.op.name
        if name == "CONST":
            vals[id(n)] = n.arg
        elif n in env:
            vals[id(n)] = env[n]
        elif name not in _TG_EVAL:
            raise Untranslatable(name)
        elif ready:
            vals[id(n)] = _TG_EVAL[name](*(vals[id(s)] for s in n.src))
        else:
            stack.append((n, True))
            stack.extend((s, False) for s in n.src)
    return vals[id(t)]
