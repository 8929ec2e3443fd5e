"""A structural hash of a UOp graph that is stable across processes (for on-disk caches).

Python's own hash of a UOp is its identity; this one serializes the graph in toposort order (op name,
dtype, arg, and source positions), so structurally equal graphs hash equally in any process.
"""

from __future__ import annotations

import hashlib

from rewrite.uop import UOp


def _arg_text(arg: object) -> str:
    if isinstance(arg, float):
        return arg.hex()
    if isinstance(arg, tuple):
        return "(" + ",".join(_arg_text(a) for a in arg) + ")"
    return repr(arg)


def structural_hash(root: UOp) -> str:
    nodes = root.toposort()
    pos = {u: i for i, u in enumerate(nodes)}
    h = hashlib.sha256()
    for u in nodes:
        h.update(f"{u.op.name}|{u.dtype.name}|{_arg_text(u.arg)}|{_arg_text(u.tag)}|"
                 f"{','.join(str(pos[s]) for s in u.src)}\n".encode())
    return h.hexdigest()
