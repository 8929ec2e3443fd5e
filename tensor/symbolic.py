"""Symbolic shapes in the front end: dimensions that are bound variables, so one kernel serves every value.

`Variable("n", 1, 1024).bind(37)` (the same as `UOp.variable(...).bind(37)`) is a dimension: `Tensor.ones(n)`,
`x[:n]`, `x.shrink(((0, n),))` and `x.reshape(n * 4)` make tensors whose shapes hold it. The graph keeps the
binding in the variable's tag; a realize strips every binding (so the schedule and kernel caches see the
unbound graph, the same for every value), checks that each variable has exactly one value, and passes the
values to the kernels. Results come back with their shapes bound, and `numpy()` gives the array of the bound
size.
"""

from __future__ import annotations

from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes
from rewrite.errors import VariableError
from rewrite.ops import Ops
from rewrite.uop import UOp


def Variable(name: str, lo: int, hi: int, dtype: DType = dtypes.index) -> UOp:  # named as a type, as in tinygrad
    """A symbolic integer variable with inclusive bounds [lo, hi]; `.bind(value)` makes it a dimension."""
    return UOp.variable(name, lo, hi, dtype)


def bound_value(d: int | UOp, what: str) -> int:
    """A dimension's value: an int as is, a symbolic one evaluated with its variables' bound values."""
    if isinstance(d, int):
        return d
    env: dict[str, int | float | bool] = {}
    for v in d.variables():
        val = v.unbind()[1]
        if val is None:
            name = v.buf_arg.slot
            raise VariableError(f"{what}: variable {name!r} is unbound; bind it: "
                                f"UOp.variable({name!r}, lo, hi).bind(value)")
        env[str(v.buf_arg.slot)] = val
    return int(d.evaluate(env))


def concrete_shape(shape: tuple, what: str) -> tuple[int, ...]:
    return tuple(bound_value(d, what) for d in shape)


def need_concrete(shape: tuple, what: str) -> tuple[int, ...]:
    """`shape` when every dimension is an int; else a VariableError saying that `what` needs a concrete shape."""
    if all(isinstance(d, int) for d in shape):
        return shape
    raise VariableError(f"{what} needs a concrete shape, got the symbolic {fmt_shape(shape)}; shrink or reshape to "
                        f"concrete sizes first")


def unbind_graph(roots: list[UOp], order: list[UOp] | None = None
                 ) -> tuple[list[UOp], dict[str, int], dict[UOp, UOp]]:
    """The roots with every bound variable replaced by the unbound one, the values by name, and for each buffer
    whose shape changed its original (so results that are inputs map back). Typed errors for an unbound
    variable and for two values of one variable. `order`: the graph's nodes (UOp.toposort_of(roots)), when the
    caller has them."""
    vals: dict[str, int] = {}
    mapping: dict[UOp, UOp] = {}
    buffers: list[UOp] = []
    param, buffer = Ops.PARAM, Ops.BUFFER
    # only PARAMs (variables) and BUFFERs (symbolic shapes) matter: picked out first, in one pass at C speed
    for u in [u for u in (UOp.toposort_of(roots) if order is None else order) if u.op is param or u.op is buffer]:
        if u.op is buffer and not all(isinstance(d, int) for d in u.shape):
            buffers.append(u)
        if not u.is_variable:
            continue
        var, val = u.unbind()
        name = str(var.buf_arg.slot)
        if val is None:
            raise VariableError(f"realize: variable {name!r} is unbound; bind it to a value: "
                                f"UOp.variable({name!r}, lo, hi).bind(value)")
        if vals.setdefault(name, val) != val:
            raise VariableError(f"realize: variable {name!r} is bound to two values, {vals[name]} and {val}, in "
                                f"one realize; realize them separately")
        mapping[u] = var
    if not mapping:
        return roots, {}, {}
    back = {b.substitute(mapping): b for b in buffers}
    return [r.substitute(mapping) for r in roots], vals, back


__all__ = ["Variable", "bound_value", "concrete_shape", "need_concrete", "unbind_graph"]
