"""Template: a graph built once over placeholder inputs, rebuilt over other inputs by replaying its construction.

A graph that a program builds again and again over new inputs of the same shapes and dtypes (an optimizer's update
of each parameter at every step) costs the Tensor front end's bookkeeping per op each time: dtype promotion,
broadcasting, the Tensor objects. When the building code is a pure function of its inputs' shapes, dtypes and
devices, the nodes it makes are too, up to the inputs themselves: so it is run once over placeholders, and
from then on every node that depends on a placeholder is made again directly from its op, arg and rebuilt sources
(`UOp(op, src, arg, tag)`, about a microsecond each), and every node that does not is kept as built. UOps are
hash-consed, so the result is the very graph the building code would have made over the real inputs.

The caller decides when that purity holds (its key must name everything the building code branches on). A graph
that made a BUFFER of its own (host data, which may differ from call to call) is refused: `Template.of` returns
None, and the caller builds as before.

The first `shared` placeholders may stand for inputs that many calls in a row share (an optimizer's scalars, the
same for every parameter of a step): the nodes that depend on them alone are made once for such a run of calls
(the last call's are kept while its shared inputs are the same objects).
"""

from __future__ import annotations

from rewrite.dtype import DType
from rewrite.ops import Ops
from rewrite.uop import UOp


class Template:
    """`outs` built over the placeholders `params`: `template(values)` is `outs` with each placeholder replaced
    by the value in its position."""

    __slots__ = ("_base", "_last", "_outs", "_params", "_shared", "_steps")

    def __init__(self, outs: list[UOp], params: list[UOp], shared: int = 0) -> None:
        order = UOp.toposort_of([*outs, *params])
        at = {u: i for i, u in enumerate(order)}
        placeholder = set(params)
        on_shared: set[UOp] = set(params[:shared])  # nodes that depend on the shared placeholders alone
        varies: set[UOp] = set(params)
        base: list[UOp | None] = [None] * len(order)
        steps: tuple[list[Step], list[Step]] = ([], [])
        for i, u in enumerate(order):
            if u in placeholder:
                continue
            if varies.isdisjoint(u.src):
                base[i] = u  # made the same over any inputs: kept as built
                continue
            varies.add(u)
            alone = all(s in on_shared or s not in varies for s in u.src)
            if alone:
                on_shared.add(u)
            steps[0 if alone else 1].append((i, u.op, tuple(at[s] for s in u.src), u.arg, u.tag))
        self._base, self._steps = base, steps
        self._params = [at[p] for p in params]
        self._shared = shared
        self._outs = [at[o] for o in outs]
        self._last: tuple[list[UOp], list[UOp | None]] | None = None  # the last shared inputs and what they made

    @staticmethod
    def placeholder(k: int, dtype: DType, shape: tuple, device: str) -> UOp:
        """Placeholder k: a PARAM of slot -1 - k. A FUNCTION's body (a VjpUnit's, @function's) counts its PARAMs
        from 0, so a placeholder is never one of a body's own nodes (which a rebuild would then change)."""
        return UOp.param(-1 - k, dtype, shape, device)

    @staticmethod
    def of(outs: list[UOp], params: list[UOp], shared: int = 0) -> Template | None:
        """The template of `outs` over `params` (the first `shared` of them shared by runs of calls), or None when
        the graph holds a BUFFER of its own."""
        seen = set(params)
        if any(u.op is Ops.BUFFER and u not in seen for u in UOp.toposort_of(outs, skip=seen.__contains__)):
            return None
        return Template(outs, params, shared)

    def __call__(self, values: list[UOp]) -> list[UOp]:
        n = self._shared
        last = self._last
        if last is not None and all(a is b for a, b in zip(last[0], values[:n], strict=True)):
            vals = last[1].copy()
        else:
            vals = self._base.copy()
            for i, v in zip(self._params[:n], values, strict=False):
                vals[i] = v
            self._make(vals, self._steps[0])
            self._last = (values[:n], vals.copy())
        for i, v in zip(self._params[n:], values[n:], strict=True):
            vals[i] = v
        self._make(vals, self._steps[1])
        return [vals[i] for i in self._outs]  # type: ignore[misc]  # every output is a placeholder, kept or made

    @staticmethod
    def _make(vals: list[UOp | None], steps: list[Step]) -> None:
        for i, op, src, arg, tag in steps:
            vals[i] = UOp(op, tuple([vals[j] for j in src]), arg, tag)  # type: ignore[misc]  # sources made first


Step = tuple[int, Ops, tuple[int, ...], object, object]  # (position, op, sources' positions, arg, tag)


__all__ = ["Template"]
