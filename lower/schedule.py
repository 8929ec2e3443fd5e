"""Scheduling: split a tensor graph into kernels and copies, in dependency order.

Realized nodes (each gets a buffer and a kernel that fills it; every decision is a named rule): the roots
asked for, CONTIGUOUS nodes, the sources and results of COPY, assignments' stores and the source of a resizing
BITCAST (these first, by `lower.split.realize_rules` over the whole graph); then, as the rounds here build the
kernels, what the rules of lower.split_build decide on each node they build: the realize points of rangeify
(rules.rangeify: a REDUCE that would be recomputed inside another reduction's loop, an expensive broadcast, a
resizing bitcast's source), a cut where a kernel would exceed its device's limits (`max_args` buffers,
`max_kernel_ops` ops), an assignment's value that reads its target elsewhere; and, over the whole graph once
those are settled, any value that several kernels would compute inline when storing it once reads fewer bytes
(a LayerNorm's statistics read by the next layer's matmuls and by the next LayerNorm: fused, every later kernel
would recompute every earlier one's, a cost quadratic in depth). A round's decisions are carried out together
and every kernel that computed a node they realize is built again, until no rule decides anything: the split is
a fixed point of its decisions and does not depend on the order of the roots. A cycle of assignments is
broken by the rule realize-assign-cycle, run over the whole graph once the kernels are built; assignments over
one iteration space that share their inputs become one kernel with several STOREs (the rule fuse-sibling-stores,
lower.split_fuse: an optimizer's parameter, m and v). The rounds decide nothing themselves: they build each
node's kernel, apply the rules, and carry out their decisions.
Everything else fuses into the kernels that consume it. Each kernel's buffers are
renumbered to local slots (0 is the output, then inputs in order of first use), so kernels that differ only
in which buffers they touch are the same UOp and share their compiled code.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from devices import target_for
from lower.buffers import new_buffer
from lower.copyview import View, copy_source
from lower.rangeify import RealizePoint, build_kernel
from lower.split import SplitContext, decide, narrowing_casts
from lower.split_build import (
    BuildContext,
    Concats,
    Decision,
    break_cycle,
    build_rules,
    decide_build,
    flat_buffer,
    kernel_limits,
    region,
    region_nodes,
    shared_values,
)
from lower.split_fuse import FUSE_STORES, FuseContext, fuse_stores
from rewrite import Ops, UOp
from rewrite.dtype import AddrSpace
from rewrite.errors import CompilerError
from rewrite.stores import indexed_store
from rewrite.viz import capture as viz_capture
from rules.rangeify import kept_index_math

if TYPE_CHECKING:
    from lower.pipeline import Lowering

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
    outs: int = 1  # a kernel's local slots 0..outs-1 are the buffers it writes (several: lower.split_fuse)

    def __repr__(self) -> str:
        return f"ScheduleItem({self.kind} {self.name}, {len(self.bufs)} buffers)"


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
    items = [it for it in items if not _empty(it)]
    if ctx.spec:
        from rewrite.spec import check

        for it in items:
            if it.ast is not None:
                check(it.ast, "kernel")
    return items, {g: outs[r] if r.op is not Ops.TUPLE else assemble(r, outs)
                   for g, r in zip(roots, graph.src, strict=True)}


def _empty(it: ScheduleItem) -> bool:
    """A kernel or copy over no elements: its destination (and, for a kernel, every output, which shares its
    iteration space) has a zero-size shape, so there is nothing to compute; it is not lowered or run (a loop nest
    over an empty range has nothing for the optimizer's tiles to split, and would otherwise be lowered as if it
    had one tile)."""
    return 0 in it.bufs[0].shape


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


def stale_kernels(roots: list[UOp]) -> list[str]:
    """The kernels of `roots`' split that differ when built again against the split's final decisions (for each,
    the rule that realized its node and the rules of the realized nodes it reads now but did not then): a
    kernel built before a later decision realized a node of its region computes that node inline. Empty when
    the split is a fixed point of its decisions, which its rounds reach (docs/pipeline.md); `python -m
    benchmarks.split_digest --fixed-point` reports it for the benchmark models."""
    from lower.multi import flat_roots

    _, graph = _graph_stages(roots)
    items, _, split = _schedule_split(flat_roots(list(graph.src)))
    out_of = split.out_of
    built = {it.bufs[0]: it for it in items if it.kind == "kernel"}
    out = []
    for n, why in split.decided.items():
        if n.op in (Ops.STORE, Ops.COPY) or (old := built.get(flat_buffer(out_of[n]))) is None:
            continue
        flat = {m: flat_buffer(b) for m, b in out_of.items() if m is not n}
        ast = build_kernel(n, flat_buffer(out_of[n]), flat)
        if isinstance(ast, RealizePoint) or _localize(ast).ast is not old.ast:
            reads = {flat_buffer(out_of[u]) for u in region(n, out_of) if u in out_of and u is not n}
            new = sorted(split.decided.get(u, "?") for u in region(n, out_of)
                         if u in out_of and u is not n and flat_buffer(out_of[u]) not in old.bufs)
            out.append(f"{why} {n.op.name}{n.shape}: reads {len(reads)} buffers now, "
                       f"{len(old.bufs) - 1} then; newly read: {', '.join(new) or '-'}")
    return out


def _schedule_split(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], SplitContext]:
    with kept_index_math():  # rangeify's index math, asked the same again and again by the split's builds
        return _scheduled(roots)


def _scheduled(roots: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], SplitContext]:
    given = roots
    # the graph's order, one walk for all the roots (a training step's hundred roots share most of their graph)
    roots, topo = _own_buffers(roots)
    topo_index = {u: i for i, u in enumerate(topo)}
    split = decide(roots, topo_index)  # the decisions the nodes themselves settle: lower.split.realize_rules
    out_of = split.out_of  # realized node -> its BUFFER (node's shape); BUFFER leaves and assignment aliases
    stores = split.stores  # STORE -> the BUFFER it writes in place (AFTER nodes alias it)
    pending = split.initial()
    users: dict[UOp, int] = {}
    for u in topo_index:
        for x in u.src:
            users[x] = users.get(x, 0) + 1
    parts = Concats(users, enabled=not stores)  # assignments order kernels by what they read: no absorbed COPYs
    device = default_device(roots)
    build = BuildContext(split, device, parts, narrow=narrowing_casts(topo_index, users))
    kernels = cast("dict[UOp, ScheduleItem]", build.kernels)
    for node in pending:  # every node known to be realized has its buffer before any consumer is built
        if node not in out_of:
            out_of[node] = new_buffer(node.dtype, node.shape, node.device if isinstance(node.device, str) else device)
    excluded: set[UOp] = set()  # stores whose fused kernel had no order (lower.split_fuse)
    fused: dict[UOp, ScheduleItem] = {}
    leader: dict[UOp, UOp] = {}
    while True:
        _split(pending, build)
        if not stores:
            order = sorted(kernels, key=lambda k: topo_index.get(k, -1))
            break
        realized = {n: b for n, b in out_of.items() if n not in stores}
        reads = {s: tuple(region_nodes(_top(s), realized)[1]) for s in stores if s in kernels}
        fused, leader = _fused_stores(build, stores, topo_index, excluded, reads)
        order, stuck = _order_with_stores(kernels, stores, realized, topo_index, leader, {**build.leaves, **reads})
        if undo := {s for k in stuck if k in fused for s, lead in leader.items() if lead is k}:
            excluded |= undo  # the merge made a cycle: those stores stay kernels of their own
            continue
        if not stuck:
            break
        # a cycle of assignments is broken by computing one store's value into a temporary first (the rule
        # realize-assign-cycle, over the whole graph): the store then only copies
        pending += _carry_out([break_cycle(roots, stuck, out_of, topo_index)], build)
    split.fused.update(dict.fromkeys(leader, FUSE_STORES))
    return ([it for k in order for it in (*parts.before.get(k, ()), fused.get(k) or _localized(kernels, k))],
            {g: out_of[r] for g, r in zip(given, roots, strict=True)}, split)


def _localized(kernels: dict[UOp, ScheduleItem], k: UOp) -> ScheduleItem:
    """The item of kernel `k`: a kernel's AST over the global buffers (as `_build_one` keeps it) localized."""
    it: object = kernels[k]
    return _localize(it) if isinstance(it, UOp) else cast(ScheduleItem, it)


def _fused_stores(build: BuildContext, stores: dict[UOp, UOp], topo_index: dict[UOp, int], excluded: set[UOp],
                  reads: dict[UOp, tuple[UOp, ...]]) -> tuple[dict[UOp, ScheduleItem], dict[UOp, UOp]]:
    """The rule fuse-sibling-stores (lower.split_fuse) over the assignments' kernels: the fused kernels, each
    keyed by its first store, and each fused store's first store. `reads` holds what each store's kernel reads
    (the realized nodes of its value's region, assignments' stores not counted as realized)."""
    kernels = cast("dict[UOp, ScheduleItem]", build.kernels)
    producer = _producers(kernels, topo_index, {})
    after_reads: dict[UOp, set[UOp]] = {}
    for s, leaves in reads.items():
        after_reads[s] = {p for leaf in leaves if leaf.op is Ops.AFTER for p in producer.get(leaf, ())}
    dev = default_device(list(stores))
    ctx = FuseContext({s: build.raw[s] for s in stores if s in kernels and s in build.raw}, after_reads,
                      kernel_limits(dev)[0], set(excluded))
    asts = fuse_stores(ctx, sorted(ctx.raw, key=lambda s: topo_index.get(s, -1)))
    leader = {s: g.members[0] for g in ctx.groups if len(g.members) > 1 for s in g.members}
    return {k: _localize(ast) for k, ast in asts.items()}, leader


def _top(k: UOp) -> UOp:
    """What kernel `k` computes, for its region: a store's value (and the positions of a store through an INDEX)."""
    if k.op is not Ops.STORE:
        return k
    return UOp(Ops.CONTIGUOUS, (k.src[1],)) if k.src[0].op is not Ops.INDEX else UOp(Ops.SINK, (k.src[0], k.src[1]))


def _producers(kernels: dict[UOp, ScheduleItem], topo_index: dict[UOp, int], leader: dict[UOp, UOp]
               ) -> dict[UOp, list[UOp]]:
    """Realized node -> the kernels that write it: itself, and for an AFTER its stores' kernels (and those of
    the target it follows); a fused store stands for its kernel's first store (`leader`)."""
    producer: dict[UOp, list[UOp]] = {k: [k] for k in kernels if k.op is not Ops.STORE}
    for n in topo_index:  # reading an AFTER waits for its stores and for those of the target it follows
        if n.op is Ops.AFTER:
            producer[n] = [leader.get(s, s) for s in n.src[1:] if s in kernels] + producer.get(n.src[0], [])
    return producer


def _own_buffers(roots: list[UOp]) -> tuple[list[UOp], list[UOp]]:
    """`roots` with each store into a lazy value (rewrite.stores: AFTER(t, STORE(INDEX(t, i), ...)) with t not
    a BUFFER) given a fresh buffer: AFTER(B', STORE(INDEX(B', i), ...)) with B' = AFTER(B, STORE(B, t)), the
    copy of t that the stores then update in place; and the toposort of the graph of the roots returned."""
    topo = UOp.toposort_of(roots)
    if not any(u.op is Ops.AFTER and u.src[0].op not in (Ops.BUFFER, Ops.AFTER) for u in topo):
        return roots, topo  # nothing to rewrite (an optimizer's assignments all store into buffers)
    new: dict[UOp, UOp] = {}
    for u in topo:
        if not new and u.op is not Ops.AFTER:  # nothing below it rewritten yet
            continue
        src = tuple([new.get(s, s) for s in u.src])
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
    out = [new.get(r, r) for r in roots]
    return out, UOp.toposort_of(out)


def _split(pending: list[UOp], build: BuildContext) -> None:
    """The kernel split's rounds, to a fixed point over the whole graph: every node to build (the realized nodes
    without a kernel, `pending` first) gets its kernel against the realized nodes of the round, and the rules
    (lower.split_build.build_rules) decide on each; the round's decisions are then carried out together (each
    recorded in `split.decided` under its rule's name, lower.split), and the nodes they realize, the kernels
    that decided and every kernel that computed one of the nodes inline are built in the next round. Once a
    round decides nothing, the rule realize-shared-reduction runs over the whole graph (`shared_values`) on
    the kernels of all the rounds, and its decision is carried out the same way. When no rule decides
    anything, every kernel was built against the final decisions: none recomputes a node another decision
    realized, and the kernels do not depend on the order of the roots or of the builds. It decides nothing
    itself. A concatenation is copies (`parts`, lower.copyview.concat_parts)."""
    topo = build.split.topo_index
    todo = list(dict.fromkeys(pending))
    pending.clear()
    while True:
        while todo:
            decisions = []
            for node in sorted(todo, key=lambda u: topo.get(u, -1)):
                if (d := _build_one(build, node)) is not None:
                    decisions.append(d)
            todo = _carry_out(decisions, build)
        if (d := shared_values(build)) is None:
            return
        todo = _carry_out([d], build)


def _build_one(build: BuildContext, node: UOp) -> Decision | None:
    """Build `node`'s kernel (or copies) against the realized nodes, unless a rule decides on it first."""
    split, kernels, parts = build.split, build.kernels, build.parts
    out_of = split.out_of
    if node in parts.absorbed:
        return None
    if node not in out_of:
        out_of[node] = new_buffer(node.dtype, node.shape, node.device if isinstance(node.device, str) else build.device)
    if (d := decide_build(build, node)) is not None:
        return d
    if node.op is Ops.COPY:
        src, view = copy_source(node)
        kernels[node] = ScheduleItem("copy", (out_of[node], out_of[src]), None, f"copy {src.device}->{node.device}",
                                     view)
        return None
    if (cat := build.concat(node)) is not None:
        copies = [ScheduleItem("copy", (out_of[node], out_of[src]), None, f"copy {src.device}->{node.device}", v, w)
                  for src, v, w, _ in cat]
        for _, _, _, absorbed in cat:  # a COPY read straight from its source gets no buffer of its own
            if absorbed is not None:
                parts.absorbed.add(absorbed)
                kernels.pop(absorbed, None)
        kernels[node], parts.before[node] = copies[-1], copies[:-1]
        return None
    ast = build.kernel(node)
    assert not isinstance(ast, RealizePoint)  # the realize-point rule fires on it
    kernels[node] = ast  # localized once the split is done (`_localized`): a later round may drop it
    build.raw[node] = ast
    build.accept(node)
    return None


def _carry_out(decisions: list[Decision], build: BuildContext) -> list[UOp]:
    """Carry out a round's decisions together: their nodes are recorded under their rules' names (a node two
    rules decided in one round under the one first in `build_rules`, then by name), their kernels to build
    again are dropped, and so is every kernel that computes one of the nodes inline. Returns what the next
    round builds: the new nodes, and the kernels dropped."""
    out_of, split = build.split.out_of, build.split
    rank = {r.name: i for i, r in enumerate(build_rules.rules)}
    why: dict[UOp, str] = {}
    again: dict[UOp, None] = {}
    for d in decisions:
        for n, rule in zip(d.nodes, d.rules(), strict=True):
            if n not in why or (rank.get(rule, len(rank)), rule) < (rank.get(why[n], len(rank)), why[n]):
                why[n] = rule
        again.update(dict.fromkeys(d.again))
    new = [n for n in why if n not in build.kernels or n in again]
    for n in why:
        split.mark(n, why[n])
        if n not in out_of:
            out_of[n] = new_buffer(n.dtype, n.shape, n.device if isinstance(n.device, str) else build.device)
        for k in build.where.pop(n, ()):  # the kernels that computed it inline read it now
            if n in build.regions.get(k, ()):
                again[k] = None
    for k in again:
        build.kernels.pop(k, None)
        build.raw.pop(k, None)
        build.regions.pop(k, None)
        build.leaves.pop(k, None)
    return list(dict.fromkeys([*again, *new]))


def _order_with_stores(kernels: dict[UOp, ScheduleItem], stores: dict[UOp, UOp], realized: dict[UOp, UOp],
                       topo_index: dict[UOp, int], leader: dict[UOp, UOp], built: dict[UOp, tuple[UOp, ...]]
                       ) -> tuple[list[UOp], list[UOp]]:
    """The kernels in an order that runs each before the kernels that read what it writes, and every kernel
    that reads an assignment's target before the store that overwrites it (the old value is read first). When
    no such order exists (two assignments that each read the other's old value: `p -= lr * m; m.assign(m * b + p)`),
    also the stores left on a cycle. Stores fused into one kernel (`leader`: each one's first store) are ordered
    as that kernel, keyed by its first store. `built` holds the realized nodes each kernel reads (`realized`:
    assignments' stores not counted): a store's value's, and what the other kernels read when they were built
    (lower.split_build.BuildContext.leaves), which a kernel that stands was against the final decisions."""
    producer = _producers(kernels, topo_index, leader)
    units = list(dict.fromkeys(leader.get(k, k) for k in kernels))
    deps: dict[UOp, set[UOp]] = {k: set() for k in units}
    readers: dict[UOp, list[UOp]] = {}  # realized node -> the kernels that read it
    for k in kernels:
        u = leader.get(k, k)
        if (leaves := built.get(k)) is None or any(x in stores for x in leaves):
            leaves = tuple(x for x in region_nodes(_top(k), realized)[1] if x is not k)
        deps[u].update(p for leaf in leaves for p in producer.get(leaf, ()) if p is not u)
        for leaf in leaves:
            readers.setdefault(leaf, []).append(u)
    for s in stores:  # the old value is read before it is overwritten
        if s not in kernels:
            continue
        u = leader.get(s, s)
        tgt = s.src[0].src[0] if s.src[0].op is Ops.INDEX else s.src[0]
        deps[u].update(r for r in readers.get(tgt, ()) if r is not u)
    users: dict[UOp, list[UOp]] = {k: [] for k in units}
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
    return out, [k for k in units if missing[k] and k.op is Ops.STORE]


def _localize(ast: UOp) -> ScheduleItem:
    """Renumber the kernel's GLOBAL buffers to local slots 0..n-1 (the output, read by STORE, is 0)."""
    if viz_capture.ACTIVE is None and (item := _localize_walk(ast)) is not None:
        return item
    return _localize_substitute(ast)


def _localize_substitute(ast: UOp) -> ScheduleItem:
    """`_localize` the long way: the toposort's buffers, then a substitution (VIZ records each local slot)."""
    topo = ast.toposort()
    glob = [u for u in topo if u.op is Ops.BUFFER and u.buf_arg.addrspace is AddrSpace.GLOBAL]
    stores = [u for u in topo if u.op is Ops.STORE]
    outs = list(dict.fromkeys(s.src[0].src[0] for s in stores if s.src[0].op is Ops.INDEX))
    order = outs + [b for b in glob if b not in outs]
    mapping = {b: UOp.buffer(i, b.dtype, b.shape, None) for i, b in enumerate(order)}
    if (rec := viz_capture.ACTIVE) is not None:
        for b, local_buf in mapping.items():
            rec.derive(local_buf, b, "rangeify: a global buffer as the kernel's local slot")
    local = ast.substitute(mapping)
    return ScheduleItem("kernel", tuple(order), local, kernel_name(local, topo), outs=max(len(outs), 1))


_CONTAINERS = (Ops.SINK, Ops.END, Ops.GROUP)


def _store_targets(ast: UOp) -> list[UOp]:
    """The buffers the kernel's STOREs write (through an INDEX), found under its SINK, ENDs and GROUPs."""
    out: list[UOp] = []
    stack = [ast]
    while stack:
        u = stack.pop()
        if u.op is Ops.STORE:
            if u.src[0].op is Ops.INDEX:
                out.append(u.src[0].src[0])
        elif u.op in _CONTAINERS:
            stack.extend(reversed(u.src))
    return list(dict.fromkeys(out))


def _localize_walk(ast: UOp) -> ScheduleItem | None:
    """`_localize` in one walk: the toposort's (depth first, sources in order) with each node rebuilt over the
    local buffers once its sources are, the slots given in the order the toposort meets the buffers, the outputs
    first. None when the walk meets a STORE the SINK's ENDs and GROUPs do not hold (`_localize` then does it
    the long way)."""
    outs = _store_targets(ast)
    mapping = {b: UOp.buffer(i, b.dtype, b.shape, None) for i, b in enumerate(outs)}
    order = list(outs)
    topo: list[UOp] = []
    new: dict[UOp, UOp] = {}
    stores: list[UOp] = []
    glob = AddrSpace.GLOBAL
    stack = [(ast, iter(ast.src))]
    while stack:
        u, rest = stack[-1]
        for s in rest:
            if s in new:
                continue
            if s.src or s.op is Ops.BUFFER:
                stack.append((s, iter(s.src)))
                break
            new[s] = s
            topo.append(s)
        else:
            stack.pop()
            topo.append(u)
            if u.op is Ops.BUFFER and u.buf_arg.addrspace is glob:
                if (local := mapping.get(u)) is None:
                    local = mapping[u] = UOp.buffer(len(order), u.dtype, u.shape, None)
                    order.append(u)
                new[u] = local
                continue
            if u.op is Ops.STORE:
                stores.append(u)
            src = tuple([new[s] for s in u.src])
            new[u] = u if src == u.src else UOp(u.op, src, u.arg, u.tag)
    if list(dict.fromkeys(s.src[0].src[0] for s in stores if s.src[0].op is Ops.INDEX)) != outs:
        return None
    local = new[ast]
    return ScheduleItem("kernel", tuple(order), local, kernel_name(local, topo), outs=max(len(outs), 1))


def kernel_name(ast: UOp, topo: list[UOp] | None = None) -> str:
    """`r_` (a kernel with a reduction) or `E_`, then its constant range sizes in graph order; `topo`, when
    given, is the toposort of `ast` or of the same kernel before its buffers were renumbered."""
    topo = ast.toposort() if topo is None else topo
    has_reduce = any(u.op is Ops.REDUCE for u in topo)
    dims = [str(u.src[0].value) for u in topo if u.op is Ops.RANGE and u.src[0].op is Ops.CONST]
    return ("r_" if has_reduce else "E_") + ("_".join(dims) or "1")
