"""Scheduling: split a tensor graph into kernels and copies, in dependency order.

Realized nodes (each gets a buffer and a kernel that fills it; every decision is a named rule, lower.split):
the roots asked for, CONTIGUOUS nodes, the sources and results of COPY, assignments' stores and the source of a
resizing BITCAST (these first, by `lower.split.realize_rules` over the whole graph); then, found by the worklist
here as kernels are built, any node a realize-point rule of rangeify decides (rules.rangeify: a REDUCE that
would be recomputed inside another reduction's loop, an expensive broadcast, a resizing bitcast's source),
any node where a kernel would exceed its device's limits (`max_args` buffers, `max_kernel_ops` ops:
`split_point`), and any REDUCE that more than one kernel would compute inline (a LayerNorm's statistics read by
the next layer's matmuls and by the next LayerNorm: fused, every later kernel would recompute every earlier
one's, a cost quadratic in depth); such a REDUCE is realized once and the kernels that fused it are rebuilt to
read it. The same holds, one level up, for an elementwise node that combines such a statistic with other values
and that several kernels compute (the LayerNorm's centred input), so no kernel reads a chain of earlier layers'
buffers. Everything else fuses into the kernels that consume it. Each kernel's buffers are
renumbered to local slots (0 is the output, then inputs in order of first use), so kernels that differ only
in which buffers they touch are the same UOp and share their compiled code.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from devices import target_for
from lower.buffers import new_buffer
from lower.copyview import View, concat_parts, copy_source
from lower.rangeify import _ELEMENTWISE, EXPENSIVE, RealizePoint, build_kernel, build_store_kernel
from lower.split import ASSIGN_CYCLE, OVER_LIMITS, SHARED_REDUCTION, STORE_VALUE, SplitContext, decide
from rewrite import Ops, UOp
from rewrite.dtype import AddrSpace
from rewrite.errors import CompilerError
from rewrite.stores import indexed_store
from rewrite.viz import capture as viz_capture

if TYPE_CHECKING:
    from lower.pipeline import Lowering

_COUNTED = _ELEMENTWISE | {Ops.CAST, Ops.BITCAST, Ops.REDUCE}


@dataclass(frozen=True)
class ScheduleItem:
    """A kernel (`ast` is a SINK over local slots, `bufs[i]` the global BUFFER for local slot i) or a copy
    (`bufs` = (destination, source); `view`, when set, the window of the source's flat buffer it copies, else
    all of it; `dst_view`, when set, the window of the destination it fills, else all of it)."""

    kind: str
    bufs: tuple[UOp, ...]
    ast: UOp | None = None
    name: str = ""
    view: View | None = None
    dst_view: View | None = None  # a copy into a window of its destination (one part of a concatenation)

    def __repr__(self) -> str:
        return f"ScheduleItem({self.kind} {self.name}, {len(self.bufs)} buffers)"


def _size(shape: tuple) -> int | UOp:
    """The element count of `shape`: an int, or an index expression over its variables."""
    n: int | UOp = 1
    for d in shape:
        n = d * n if isinstance(d, UOp) else n * d
    return n


def _flat(buf: UOp) -> UOp:
    """The 1-D view of a BUFFER that kernels index."""
    if len(buf.shape) == 1:
        return buf
    return UOp(Ops.BUFFER, (UOp.shape_operand((_size(buf.shape),)),), buf.buf_arg)


def default_device(roots: list[UOp]) -> str:
    for r in roots:
        d = r.device
        if isinstance(d, str):
            return d
    from rewrite.env import getenv

    return str(getenv("DEVICE"))


def schedule(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """The items that realize `roots`, and for each root the BUFFER (of the root's shape) that holds it: the
    pipeline's graph stages (lower.pipeline.PIPELINE) up to the kernel split, then the split itself."""
    from lower.multi import flat_roots

    ctx, graph = _graph_stages(roots)

    if (rec := viz_capture.ACTIVE) is not None:  # the kernel split is the rangeify stage: the viewer shows it as one
        begun = rec.stage_begin()
        items, outs = schedule_split(flat_roots(list(graph.src)))
        asts = UOp.sink(*(it.ast for it in items if it.kind == "kernel" and it.ast is not None))
        rec.stage_end(begun, "rangeify", "graph", "", graph, asts)
    else:
        items, outs = schedule_split(flat_roots(list(graph.src)))
    if ctx.spec:
        from rewrite.spec import check

        for it in items:
            if it.ast is not None:
                check(it.ast, "kernel")
    return items, {g: outs[r] if r.op is not Ops.TUPLE else assemble(r, outs)
                   for g, r in zip(roots, graph.src, strict=True)}


def _graph_stages(roots: list[UOp]) -> tuple[Lowering, UOp]:
    """The pipeline's graph stages before the kernel split, on the SINK of `roots`, and the context they ran in."""
    from lower.pipeline import PIPELINE, Lowering, _run_stage

    ctx = Lowering.from_env(target_for(default_device(roots)))
    graph = UOp.sink(*roots)
    for st in PIPELINE:
        if st.name == "rangeify":
            break
        graph = _run_stage(st, graph, ctx)
    return ctx, graph


def assemble(pieces: UOp, outs: dict[UOp, UOp]) -> UOp:
    """The result of a root on a device tuple, `TUPLE(root, piece...)` (lower.multi): a BUFFER on
    the tuple whose shards are the pieces' buffers, seen through `lower.multi.buffer_view` (so the result has
    the root's shape and axis)."""
    from lower import buffers
    from lower.multi import buffer_view, local_shape, storage_shape

    root, parts = pieces.src[0], pieces.src[1:]
    axis, devs, shape = root.axis, cast("tuple[str, ...]", root.device), root.shape
    n = len(devs)
    buf = new_buffer(root.dtype, storage_shape(shape, axis, n), devs)
    buffers.store_shards(buf, tuple(outs[p] for p in parts))
    assert all(local_shape(shape, axis, n) == p.shape for p in parts)
    return buffer_view(buf, shape, axis)


def schedule_split(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
    """The kernel split (the pipeline's rangeify stage) of graph stages' output `roots`: the items in dependency
    order, and for each root its BUFFER."""
    items, outs, _ = _schedule_split(roots)
    return items, outs


def split_decisions(roots: list[UOp]) -> dict[UOp, str]:
    """The nodes the kernel split of `roots` realizes, each with the name of the rule that decided it (lower.split):
    what the split did and why, for tests and tools. The graph stages (callify, multi, split-reduce) run first,
    as in `schedule`."""
    from lower.multi import flat_roots

    _, graph = _graph_stages(roots)
    return _schedule_split(flat_roots(list(graph.src)))[2].decided


def _schedule_split(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], SplitContext]:
    given = roots
    roots = _own_buffers(roots)
    topo_index: dict[UOp, int] = {}
    for r in roots:
        for u in r.toposort():
            topo_index.setdefault(u, len(topo_index))
    split = decide(roots, topo_index)  # the decisions the nodes themselves settle: lower.split.realize_rules
    out_of = split.out_of  # realized node -> its BUFFER (node's shape); BUFFER leaves and assignment aliases
    stores = split.stores  # STORE -> the BUFFER it writes in place (AFTER nodes alias it)
    pending = split.initial()
    users: dict[UOp, int] = {}
    for u in topo_index:
        for x in u.src:
            users[x] = users.get(x, 0) + 1
    parts = Concats(users, enabled=not stores)  # assignments order kernels by what they read: no absorbed COPYs
    kernels: dict[UOp, ScheduleItem] = {}
    inline: dict[UOp, dict[UOp, None]] = {}  # realized node -> what its kernel computes inline (build_kernel)
    shared_nodes: dict[UOp, None] = {}  # nodes realized because several kernels would compute them
    device = default_device(roots)
    for node in pending:  # every node known to be realized has its buffer before any consumer is built
        if node not in out_of:
            out_of[node] = new_buffer(node.dtype, node.shape, node.device if isinstance(node.device, str) else device)
    while True:
        _split(pending, kernels, inline, shared_nodes, split, device, parts)
        if not stores:
            order = sorted(kernels, key=lambda k: topo_index.get(k, -1))
            break
        order, stuck = _order_with_stores(kernels, stores, out_of, topo_index)
        free = [s for s in stuck if s.src[1] not in out_of]
        if not stuck:
            break
        if not free:
            raise CompilerError("assign: a kernel reads a buffer both before and after an assignment to it, so no "
                                "order of the kernels is right; realize one of the two values first "
                                "(x.contiguous().realize())")
        # the cycle is broken by computing one store's value into a temporary first: the store then only copies
        s = min(free, key=lambda u: topo_index.get(u, -1))
        del kernels[s]
        v = s.src[1]
        out_of[v] = new_buffer(v.dtype, v.shape, v.device if isinstance(v.device, str) else device)
        split.mark(v, ASSIGN_CYCLE)
        pending += [s, s.src[1]]
    return ([it for k in order for it in (*parts.before.get(k, ()), kernels[k])],
            {g: out_of[r] for g, r in zip(given, roots, strict=True)}, split)


def _own_buffers(roots: list[UOp]) -> list[UOp]:
    """`roots` with each store into a lazy value (rewrite.stores: AFTER(t, STORE(INDEX(t, i), ...)) with t not
    a BUFFER) given a fresh buffer: AFTER(B', STORE(INDEX(B', i), ...)) with B' = AFTER(B, STORE(B, t)), the
    copy of t that the stores then update in place."""
    if not any(u.op is Ops.AFTER for r in roots for u in r.toposort()):
        return roots
    new: dict[UOp, UOp] = {}
    for u in UOp.sink(*roots).toposort():
        src = tuple(new.get(s, s) for s in u.src)
        if u.op is Ops.AFTER and src[0].op not in (Ops.BUFFER, Ops.AFTER):
            t = src[0]
            b = new_buffer(t.dtype, t.shape, t.device if isinstance(t.device, str) else default_device(roots))
            base = UOp(Ops.AFTER, (b, UOp(Ops.STORE, (b, t))))
            stores = []
            for s in src[1:]:
                st = indexed_store(s) if s.op is Ops.STORE else None
                if st is None:
                    raise CompilerError(f"assign: an AFTER on a lazy value must store through an INDEX of it (a "
                                        f"scatter), got {s.short()}; realize the target before assigning to it")
                view = UOp(Ops.INDEX, (base, st.index))
                stores.append(UOp(Ops.STORE, (view, view + st.value if st.accumulate else st.value)))
            new[u] = UOp(Ops.AFTER, (base, *stores), u.arg, u.tag)
        elif src != u.src:
            new[u] = UOp(u.op, src, u.arg, u.tag)
    return [new.get(r, r) for r in roots]


def _split(pending: list[UOp], kernels: dict[UOp, ScheduleItem], inline: dict[UOp, dict[UOp, None]],
           shared_nodes: dict[UOp, None], split: SplitContext, device: str, parts: Concats) -> None:
    """The worklist of schedule_split: a kernel (or copy) for every node in `pending` and for every node found
    to need its own buffer on the way (each such decision recorded in `split.decided` under its rule's name,
    lower.split). A concatenation is copies (`parts`, lower.copyview.concat_parts)."""
    out_of = split.out_of
    flats: dict[UOp, UOp] = {}  # each buffer's 1-D view, made once (every kernel's build reads all of them)

    def flat_of(b: UOp) -> UOp:
        if (f := flats.get(b)) is None:
            f = flats[b] = _flat(b)
        return f

    while pending:
        node = pending.pop()
        if node in kernels or node in parts.absorbed:
            continue
        if node not in out_of:
            dev = node.device if isinstance(node.device, str) else device
            out_of[node] = new_buffer(node.dtype, node.shape, dev)
        if node.op is Ops.COPY:
            src, view = copy_source(node)
            if src not in out_of:
                split.mark(src, "realize-copy-source")
                pending += [node, src]
                continue
            kernels[node] = ScheduleItem("copy", (out_of[node], out_of[src]), None,
                                         f"copy {src.device}->{node.device}", view)
            continue
        if parts.enabled and (cat := concat_parts(node, out_of, parts.users)) is not None:
            srcs = [src for src, _, _, _ in cat]
            if missing := [x for x in srcs if x not in out_of]:
                for x in missing:
                    split.mark(x, "realize-copy-source")
                pending += [node, *missing]
                continue
            copies = [ScheduleItem("copy", (out_of[node], out_of[src]), None, f"copy {src.device}->{node.device}", v, w)
                      for src, v, w, _ in cat]
            for _, _, _, absorbed in cat:  # a COPY read straight from its source gets no buffer of its own
                if absorbed is not None:
                    parts.absorbed.add(absorbed)
                    kernels.pop(absorbed, None)
            kernels[node], parts.before[node] = copies[-1], copies[:-1]
            continue
        if node.op is Ops.STORE:
            if (item := _store_kernel(node, split, pending)) is not None:
                kernels[node] = item
            continue
        dev = node.device if isinstance(node.device, str) else device
        if (cut := split_point(node, out_of, *kernel_limits(dev))) is not None:
            split.mark(cut, OVER_LIMITS)
            pending += [node, cut]  # realized first, so this kernel reads it instead of fusing it
            continue
        flat = {n: flat_of(b) for n, b in out_of.items() if n is not node}
        fused: dict[UOp, None] = {}
        ast = build_kernel(node, _flat(out_of[node]), flat, fused, frozenset(shared_nodes))
        if isinstance(ast, RealizePoint):  # a realize-point rule (rules.rangeify): that node is realized first,
            split.mark(ast.node, ast.rule)  # then this kernel is built again reading it
            pending += [node, ast.node]
            continue
        kernels[node] = _localize(ast)
        inline[node] = fused
        shared = [r for r in fused if any(r in f for k, f in inline.items() if k is not node)]
        if shared:  # realized once; every kernel that computes one of them inline is rebuilt to read it
            for r in shared:
                shared_nodes[r] = None
                split.mark(r, SHARED_REDUCTION)
                out_of[r] = new_buffer(r.dtype, r.shape, r.device if isinstance(r.device, str) else device)
            users = [k for k, f in inline.items() if any(r in f for r in shared)]
            for k in users:
                del kernels[k], inline[k]
            pending += users + shared


@dataclass
class Concats:
    """The copies that fill a realized concatenation before its last one (which stands in `kernels`), the COPYs
    they read straight from their sources, and how many nodes use each node (a COPY used once can be absorbed)."""

    users: dict[UOp, int]
    enabled: bool = True
    before: dict[UOp, list[ScheduleItem]] = field(default_factory=dict)
    absorbed: set[UOp] = field(default_factory=set)


def _store_kernel(node: UOp, split: SplitContext, pending: list[UOp]) -> ScheduleItem | None:
    """The kernel writing an assignment's value into its target buffer, or None after queueing the value to be
    realized first: when the value reads the target anywhere but at the element being written (a flip, a
    matmul, a shift), writing in place would change elements that are still to be read."""
    out_of = split.out_of
    value, tgt = node.src[1], out_of[node]
    flat_out = _flat(tgt)
    flat = {n: _flat(b) for n, b in out_of.items() if n is not node}
    st = indexed_store(node)
    if st is None:  # CONTIGUOUS at the top: a value realized elsewhere is loaded, not recomputed
        ast = build_kernel(UOp(Ops.CONTIGUOUS, (value,)), flat_out, flat)
    else:
        ast = build_store_kernel(st.view, value, flat_out, flat)
        value = st.value  # what is realized first if it reads the target elsewhere
    if isinstance(ast, RealizePoint):
        split.mark(ast.node, ast.rule)
        pending += [node, ast.node]
        return None
    topo = ast.toposort()
    written = {u.src[0] for u in topo if u.op is Ops.STORE}
    reads = {u for u in topo if u.op is Ops.INDEX and u.src[0] is flat_out and u not in written}
    if reads - written and value not in out_of:
        split.mark(value, STORE_VALUE)
        pending += [node, value]
        return None
    return _localize(ast)


def _order_with_stores(kernels: dict[UOp, ScheduleItem], stores: dict[UOp, UOp], out_of: dict[UOp, UOp],
                       topo_index: dict[UOp, int]) -> tuple[list[UOp], list[UOp]]:
    """The kernels in an order that runs each before the kernels that read what it writes, and every kernel
    that reads an assignment's target before the store that overwrites it (the old value is read first). When
    no such order exists (two assignments that each read the other's old value: `p -= lr * m; m.assign(m * b + p)`),
    also the stores left on a cycle."""
    realized = {n: b for n, b in out_of.items() if n not in stores}
    producer: dict[UOp, list[UOp]] = {k: [k] for k in kernels if k.op is not Ops.STORE}
    for n in topo_index:  # reading an AFTER waits for its stores and for those of the target it follows
        if n.op is Ops.AFTER:
            producer[n] = [s for s in n.src[1:] if s in kernels] + producer.get(n.src[0], [])
    deps: dict[UOp, set[UOp]] = {}
    readers: dict[UOp, list[UOp]] = {}  # realized node -> the kernels that read it
    for k in kernels:
        top = k if k.op is not Ops.STORE else UOp(Ops.CONTIGUOUS, (k.src[1],)) if k.src[0].op is not Ops.INDEX else \
            UOp(Ops.SINK, (k.src[0], k.src[1]))  # a store through an INDEX also reads its positions
        leaves = [u for u in _region(top, realized) if u in realized and u is not k]
        deps[k] = {p for leaf in leaves for p in producer.get(leaf, ()) if p is not k}
        for leaf in leaves:
            readers.setdefault(leaf, []).append(k)
    for s in stores:  # the old value is read before it is overwritten
        tgt = s.src[0].src[0] if s.src[0].op is Ops.INDEX else s.src[0]
        deps[s].update(r for r in readers.get(tgt, ()) if r is not s)
    users: dict[UOp, list[UOp]] = {k: [] for k in kernels}
    for k, ds in deps.items():
        for d in ds:
            users[d].append(k)
    missing = {k: len(ds) for k, ds in deps.items()}
    ready = [(topo_index.get(k, -1), id(k), k) for k, n in missing.items() if n == 0]
    heapq.heapify(ready)
    out: list[UOp] = []
    while ready:
        _, _, k = heapq.heappop(ready)
        out.append(k)
        for u in users[k]:
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, (topo_index.get(u, -1), id(u), u))
    return out, [k for k in kernels if missing[k] and k.op is Ops.STORE]


def kernel_limits(device: str) -> tuple[int, int]:
    """The bounds on one kernel of the device's target: (buffer arguments, fused ops); see devices.base.Target."""
    try:
        t = target_for(device)
    except CompilerError:
        return (1 << 30, 1 << 30)
    return t.max_args, t.max_kernel_ops


def _op_weight(u: UOp) -> int:
    if u.op in EXPENSIVE:
        return 16
    return 1 if u.op in _COUNTED else 0


def _region(node: UOp, realized: dict[UOp, UOp]) -> list[UOp]:
    """The nodes that fuse into `node`'s kernel, sources before users: everything below it down to (and
    including, as leaves) realized nodes and buffers."""
    order: list[UOp] = []
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(node, False)]
    while stack:
        u, done = stack.pop()
        if done:
            order.append(u)
            continue
        if u in seen:
            continue
        seen.add(u)
        stack.append((u, True))
        if u is node or u not in realized:
            stack.extend((s, False) for s in u.src if s not in seen)
    return order


def split_point(node: UOp, realized: dict[UOp, UOp], max_args: int, max_ops: int) -> UOp | None:
    """A node to realize first when `node`'s kernel would exceed the device's limits (more than `max_args`
    buffers counting its output, or ops weighing more than `max_ops`), else None. It is the heaviest source of
    the first node (sources first) whose fused subgraph goes over a limit, so the cut leaves kernels near the
    limits; the kernel for `node` is then built again reading it, and cut again if still too big."""
    order = _region(node, realized)
    leaves = [u for u in order if u in realized and u is not node]
    if len(leaves) + 1 <= max_args and sum(_op_weight(u) for u in order) <= max_ops:
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
        n = _op_weight(u)
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


def _localize(ast: UOp) -> ScheduleItem:
    """Renumber the kernel's GLOBAL buffers to local slots 0..n-1 (the output, read by STORE, is 0)."""
    glob = [u for u in ast.toposort() if u.op is Ops.BUFFER and u.buf_arg.addrspace is AddrSpace.GLOBAL]
    stores = [u for u in ast.toposort() if u.op is Ops.STORE]
    outs = list(dict.fromkeys(s.src[0].src[0] for s in stores if s.src[0].op is Ops.INDEX))
    order = outs + [b for b in glob if b not in outs]
    mapping = {b: UOp.buffer(i, b.dtype, b.shape, None) for i, b in enumerate(order)}
    if (rec := viz_capture.ACTIVE) is not None:
        for b, local_buf in mapping.items():
            rec.derive(local_buf, b, "rangeify: a global buffer as the kernel's local slot")
    local = ast.substitute(mapping)
    return ScheduleItem("kernel", tuple(order), local, kernel_name(local))


def kernel_name(ast: UOp) -> str:
    topo = ast.toposort()
    has_reduce = any(u.op is Ops.REDUCE for u in topo)
    dims = [str(u.src[0].value) for u in topo if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]
    return ("r_" if has_reduce else "E_") + ("_".join(dims) or "1")
