"""What a node's kernel would fuse, for the kernel split's rules (lower.split_build): its region (everything below
it down to realized nodes and buffers), the region's shape (what its build depends on, for the build memo), and
the cut that keeps a kernel within its Target's limits."""

from __future__ import annotations

from lower.rangeify import _ELEMENTWISE, EXPENSIVE
from rewrite import Ops, UOp
from rewrite.uop_args import intern_key

_COUNTED = _ELEMENTWISE | {Ops.CAST, Ops.BITCAST, Ops.REDUCE}
_SPELLED = frozenset({Ops.CONST, Ops.VCONST, Ops.PARAM, Ops.BUFFER})

_WEIGHT = {o: 16 if o in EXPENSIVE else 1 if o in _COUNTED else 0 for o in Ops}  # op -> what it weighs in a kernel


def region(node: UOp, realized: dict[UOp, UOp]) -> list[UOp]:
    """The nodes that fuse into `node`'s kernel, sources before users: everything below it down to (and
    including, as leaves) realized nodes and buffers."""
    # a depth-first walk that enters a node's sources last to first (the order of the stack-of-pairs walk it
    # replaces, whose first pop of a node won); a realized leaf is placed when met, without a stack entry
    order: list[UOp] = []
    seen: set[UOp] = {node}
    stack = [(node, reversed(node.src))]
    while stack:
        u, rest = stack[-1]
        for s in rest:
            if s in seen:
                continue
            seen.add(s)
            if s in realized:
                order.append(s)
                continue
            stack.append((s, reversed(s.src)))
            break
        else:
            stack.pop()
            order.append(u)
    return order


def region_shape(node: UOp, order: list[UOp], realized: dict[UOp, UOp], flat: dict[UOp, UOp]
                 ) -> tuple[tuple, list[UOp], dict[UOp, int]]:
    """What `node`'s kernel build depends on, given its region `order` (`region(node, realized)`): each node of the
    region by its op, arg and tag and its sources' positions in the region (a node without sources by itself), each
    realized leaf by its op, dtype and shape and its 1-D buffer's dtype, size, device and address space, and which
    leaves (and the output) share a buffer. Two regions of one shape build the same kernel but for the buffers it
    names: returns (the shape, those buffers in the order of first use, the output's last, each node's position)."""
    pos = dict(zip(order, range(len(order)), strict=True))
    at = pos.__getitem__
    bufs: dict[UOp, int] = {}
    parts: list[object] = []
    add = parts.append
    for u in order:
        if (src := u.src) and u is not node and u not in realized:
            # intern_key only where a constant's value or an arg's type needs spelling out (CONST, VCONST, PARAM,
            # BUFFER): elsewhere (op, sources, arg, tag) is what it adds up to
            add(intern_key(u.op, tuple(map(at, src)), u.arg, u.tag) if u.op in _SPELLED else
                (u.op, tuple(map(at, src)), u.arg, u.tag))
        elif u in realized and u is not node:
            b = flat[u]
            add((None, u.op, u.dtype, u.shape, b.src, b.arg[1:], bufs.setdefault(b, len(bufs))))
        elif src:
            add(intern_key(u.op, tuple(map(at, src)), u.arg, u.tag))
        else:
            add(u)
    add(bufs.setdefault(flat[node], len(bufs)))
    return tuple(parts), list(bufs), pos


def split_point(node: UOp, realized: dict[UOp, UOp], max_args: int, max_ops: int,
                order: list[UOp] | None = None) -> UOp | None:
    """A node to realize first when `node`'s kernel would exceed the device's limits (more than `max_args`
    buffers counting its output, or ops weighing more than `max_ops`), else None. It is the heaviest source of
    the first node (sources first) whose fused subgraph goes over a limit, so the cut leaves kernels near the
    limits; the kernel for `node` is then built again reading it, and cut again if still too big. `order`, when
    given, is `region(node, realized)`."""
    order = region(node, realized) if order is None else order
    leaves = [u for u in order if u in realized and u is not node]
    if len(leaves) + 1 <= max_args and sum([_WEIGHT[u.op] for u in order]) <= max_ops:
        return None
    # per node: the buffers it reads (capped just over the limit) and its ops counted along every path (an
    # overestimate where subgraphs are shared, only used to place the cut)
    bufs: dict[UOp, frozenset[UOp]] = {}
    ops: dict[UOp, int] = {}
    for u in order:
        if u in realized and u is not node:
            bufs[u], ops[u] = frozenset((u,)), 0
            continue
        b: frozenset[UOp] = frozenset()
        n = _WEIGHT[u.op]
        for s in u.src:
            if len(b) <= max_args:
                b = b | bufs[s]
            n = min(n + ops[s], max_ops + 1)
        bufs[u], ops[u] = b, n
        if len(b) + 1 > max_args or n > max_ops:
            inner = [s for s in u.src if s not in realized and s is not node and (ops[s] or bufs[s])]
            if not inner:
                return None  # one op over too many buffers directly: nothing to cut
            cut = max(inner, key=lambda s: (len(bufs[s]) / max_args) + ops[s] / max_ops)
            while cut.op is Ops.EXPAND and cut.src[0] not in realized:  # realize the smaller tensor
                cut = cut.src[0]
            return cut
    return None


__all__ = ["region", "region_shape", "split_point"]
