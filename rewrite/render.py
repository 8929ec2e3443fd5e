"""Printing UOps: `render` gives a readable infix string for index expressions, `pretty` a graph listing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewrite.ops import Ops

if TYPE_CHECKING:
    from rewrite.uop import UOp

_INFIX = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%", Ops.DIV: "/", Ops.CMPLT: "<",
    Ops.CMPNE: "!=", Ops.CMPEQ: "==", Ops.CMPGT: ">", Ops.CMPGE: ">=", Ops.CMPLE: "<=", Ops.AND: "&", Ops.OR: "|",
    Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>",
}
_BOOL_WORD = {Ops.AND: " and ", Ops.OR: " or "}


def render(root: UOp) -> str:
    """Infix rendering, e.g. `((x*3)+y)`; bool and/or print as words, as in seed 002."""
    out: dict[UOp, str] = {}
    for u in root.toposort():
        s = [out[x] for x in u.src]
        op = u.op
        if op is Ops.CONST:
            v = u.value
            r = ("True" if v else "False") if isinstance(v, bool) else repr(v)
        elif op is Ops.PARAM:
            slot = u.buf_arg.slot
            r = slot if isinstance(slot, str) else f"param{slot}"
        elif op is Ops.RANGE:
            rid = u.range_id
            r = f"r{rid}" if not isinstance(rid, tuple) else "r" + "_".join(map(str, rid))
        elif op is Ops.SPECIAL:
            r = str(u.arg)
        elif op in _INFIX and len(s) == 2:
            sym = _BOOL_WORD[op] if op in _BOOL_WORD and u.dtype.scalar.is_bool else _INFIX[op]
            r = f"({s[0]}{sym}{s[1]})"
        elif op is Ops.NEG:
            r = f"(-{s[0]})"
        elif op is Ops.NOT:
            r = f"(not {s[0]})"
        elif op is Ops.WHERE:
            r = f"({s[0]} ? {s[1]} : {s[2]})"
        elif op is Ops.MAX:
            r = f"max({s[0]}, {s[1]})"
        elif op is Ops.CAST:
            r = f"{u.dtype.name}({s[0]})"
        elif op in (Ops.VCONST,):
            r = repr(list(u.vconst_values))
        else:
            r = f"{op.name.lower()}({', '.join(s)})"
        out[u] = r
    return out[root]


def pretty(root: UOp, limit: int = 60) -> str:
    """A listing with one line per node (children first), shared nodes printed once: `%3 = ADD:index(%1, %2)`."""
    nodes = root.toposort()
    if len(nodes) > limit:
        nodes = nodes[-limit:]
    names = {u: f"%{i}" for i, u in enumerate(nodes)}
    lines = []
    for u in nodes:
        args = ", ".join(names.get(s, "…") for s in u.src)
        extra = "" if u.arg is None else f" {u.arg!r}"
        sh = "" if u.shape == () else str(u.shape)
        lines.append(f"{names[u]} = {u.op.name}:{u.dtype.name}{sh}({args}){extra}")
    if len(lines) == 1:
        return f"<UOp {lines[0].split(' = ', 1)[1]}>"
    return "<UOp\n  " + "\n  ".join(lines) + ">"
