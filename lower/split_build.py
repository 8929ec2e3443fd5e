"""The kernel split's decisions that depend on the kernels around a node, as named rules with a typed context.

lower.split's `realize_rules` settle what a node's own op decides, over the whole graph, before any kernel is
built. What is left depends on the kernels: which nodes a kernel would fuse, which buffers it would read, where
a node is read inside it, which other kernels compute the same thing, in which order the kernels can run. Those
decisions are the rules here. Each returns a `Decision` (the nodes to realize, under the rule's name, and the
kernels to build again reading them); lower.schedule builds kernels in rounds to a fixed point and carries out.

`build_rules` (context `BuildContext`) are applied to each realized node whose kernel a round builds, through
the rule set's matcher (the first rule that fires decides), before its kernel is accepted:

  realize-copy-source            a COPY's source that is not realized (a copy moves a buffer)
  realize-concat-source          the pieces of a concatenation (filled by copies into windows of its buffer)
                                 that are not realized; recorded as realize-copy-source
  realize-over-limits            the cut that keeps a kernel within its Target's max_args / max_kernel_ops
                                 (`split_point`, from the node's fused region and the realized nodes)
  realize-point                  every realize point the kernel's build met (rules.rangeify's realize_point_rules:
                                 realize-reduce-in-reduce-loop, realize-broadcast-reduce, realize-reduce-epilogue,
                                 realize-expensive-broadcast, realize-bitcast-source; each under its own name;
                                 on a GPU target also the finished kernel's realize-thread-broadcast-reduce); a
                                 REDUCE whose one reader is a narrowing CAST (a half matmul's float32 sum) is
                                 realized as that CAST (lower.split.narrowing_casts): the same values in half the bytes
  realize-store-value            an assignment's value that reads its target elsewhere than where it writes

The kernel a rule inspects is built once per visit and cached in the context (`BuildContext.kernel`): the
realize-point and store-value rules read the same build, and the round keeps it when no rule fires
(`BuildContext.accept` then records the nodes it computes inline, so that a later decision realizing one of
them builds it again: the split is a fixed point of its decisions, whatever the order of the builds).

`shared_rules` (context `SharedContext`) are applied over the whole graph once a round decides nothing else
(`shared_values`), in graph_rewrite(..., walk=True)'s order, to the values several kernels compute inline:

  realize-shared-reduction       a value (a REDUCE, an ALU op) that m >= 2 kernels compute inline, when storing it
                                 reads fewer bytes (its own kernel plus the m kernels reading it read less than
                                 the m kernels computing it, lower.split_bytes.recompute_bytes: each buffer once
                                 per loop that reads it, an inline reduction's loop a pass of its own), or when it
                                 is a heavy reduction (rules.rangeify.heavy_reduction: a matmul's loop, repeated).
                                 The global fact is which nodes every kernel fuses (`BuildContext.regions`); of a
                                 chain of such values in the same kernels the last one is realized.

`cycle_rules` (context `CycleContext`) run by `graph_rewrite(..., walk=True)` over the whole graph once the
kernels are built:

  realize-assign-cycle           a store's value computed first to break a cycle of assignments (two assignments
                                 that each read the other's old value). The global fact, the stores left on a
                                 cycle by the kernel order (lower.schedule._order_with_stores), is computed once
                                 per round by the caller and held in the context; of the stores on it whose
                                 value is not realized, the first in the graph's topological order is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import cast

from devices import target_for
from lower.copyview import Part, concat_parts, copy_source
from lower.rangeify import _ELEMENTWISE, EXPENSIVE, RealizePoint, build_kernel, build_store_kernel
from lower.split import ASSIGN_CYCLE, OVER_LIMITS, SHARED_REDUCTION, STORE_VALUE, SplitContext
from lower.split_bytes import ByteCount
from rewrite import Ops, Rule, RuleSet, UOp, graph_rewrite, op
from rewrite.errors import CompilerError
from rewrite.props import nbytes
from rewrite.stores import indexed_store
from rules.rangeify import heavy_reduction

COPY_SOURCE = "realize-copy-source"

_COUNTED = _ELEMENTWISE | {Ops.CAST, Ops.BITCAST, Ops.REDUCE}


@dataclass(frozen=True)
class Decision:
    """What a rule decided: `nodes` are realized (recorded under `rule`), and the kernels of `again` are dropped
    and built again after them, reading them."""

    rule: str
    nodes: tuple[UOp, ...]
    again: tuple[UOp, ...]
    why: tuple[str, ...] = ()  # each node's own rule, when they differ (the realize points one build met)

    def rules(self) -> tuple[str, ...]:
        """The rule each of `nodes` is recorded under."""
        return self.why or (self.rule,) * len(self.nodes)


def flat_buffer(buf: UOp) -> UOp:
    """The 1-D view of a BUFFER that kernels index."""
    if len(buf.shape) == 1:
        return buf
    n: int | UOp = 1
    for d in buf.shape:
        n = d * n if isinstance(d, UOp) else n * d
    return UOp(Ops.BUFFER, (UOp.shape_operand((n,)),), buf.buf_arg)


@dataclass
class Concats:
    """The copies that fill a realized concatenation before its last one (which stands in `kernels`), the COPYs
    they read straight from their sources, and how many nodes use each node (a COPY used once can be absorbed)."""

    users: dict[UOp, int]
    enabled: bool = True
    before: dict[UOp, list] = field(default_factory=dict)  # node -> its ScheduleItems (lower.schedule)
    absorbed: set[UOp] = field(default_factory=set)


@dataclass
class BuildContext:
    """The typed context of `build_rules`: the split so far (`split`: realized nodes and their buffers), the
    kernels built (`kernels`), what each kernel computes inline (`regions`, and `where` the other way), and
    the device a node without one runs on. `kernel(node)` is the
    cached build of the node being visited (`visit` resets it); `concat(node)` likewise its pieces when it is a
    concatenation (lower.copyview.concat_parts: copies into windows of its buffer, no kernel)."""

    split: SplitContext
    device: str
    parts: Concats
    kernels: dict[UOp, object] = field(default_factory=dict)  # node -> its AST or ScheduleItem (lower.schedule)
    narrow: dict[UOp, UOp] = field(default_factory=dict)  # REDUCE -> the narrowing CAST that alone reads it
    raw: dict[UOp, UOp] = field(default_factory=dict)  # realized node -> its kernel over the global buffers
    regions: dict[UOp, frozenset[UOp]] = field(default_factory=dict)  # kernel -> the nodes it computes inline
    leaves: dict[UOp, tuple[UOp, ...]] = field(default_factory=dict)  # kernel -> the realized nodes it reads
    where: dict[UOp, list[UOp]] = field(default_factory=dict)  # node -> kernels whose region held it once
    bytes: ByteCount | None = None  # the byte rule's loops, kept across rounds (`shared_values`)
    walk: dict[UOp, int] | None = None  # the graph's nodes in the order a rule walk visits them (`shared_values`)
    _flats: dict[UOp, UOp] = field(default_factory=dict)
    _limits: dict[str, tuple[int, int]] = field(default_factory=dict)  # `kernel_limits` by device, for this split
    _flat_of: dict[UOp, UOp] = field(default_factory=dict)
    _threads: dict[str, bool] = field(default_factory=dict)  # `kernel_threads` by device, for this split
    _node: UOp | None = None
    _built: UOp | RealizePoint | None = None
    _points: list[RealizePoint] = field(default_factory=list)
    _region: tuple[set[UOp], list[UOp]] | None = None
    _cat: list[Part] | None = None
    _cat_seen: bool = False

    def visit(self, node: UOp) -> None:
        """A round is about to build `node`: forget the previous node's build."""
        self._node, self._built, self._cat, self._cat_seen = node, None, None, False
        self._points, self._region = [], None

    def region(self, node: UOp) -> tuple[set[UOp], list[UOp]]:
        """`region_nodes(node, realized)` of the node being visited, computed once per visit."""
        assert node is self._node, "BuildContext.region: visit the node first"
        if self._region is None:
            self._region = region_nodes(node, self.split.out_of)
        return self._region

    def accept(self, node: UOp) -> None:
        """`node`'s kernel stands: remember the nodes it computes inline, so that a later decision realizing one
        of them builds it again (lower.schedule)."""
        out_of = self.split.out_of
        nodes, leaves = self.region(node)
        inner = frozenset(u for u in nodes if u not in out_of)
        self.regions[node] = inner
        self.leaves[node] = tuple(leaves)
        for u in inner:
            self.where.setdefault(u, []).append(node)

    def concat(self, node: UOp) -> list[Part] | None:
        """The pieces of `node` when it is a concatenation to fill by copies (not a COPY, and not when the
        graph has assignments: they order kernels by what they read), else None; looked at once per visit."""
        assert node is self._node, "BuildContext.concat: visit the node first"
        if not self._cat_seen:
            ok = self.parts.enabled and node.op is not Ops.COPY
            self._cat = concat_parts(node, self.split.out_of, self.parts.users) if ok else None
            self._cat_seen = True
        return self._cat

    def flat(self, b: UOp) -> UOp:
        if (f := self._flats.get(b)) is None:
            f = self._flats[b] = flat_buffer(b)
        return f

    def buffers(self) -> dict[UOp, UOp]:
        """Every realized node (and BUFFER leaf) -> the 1-D view of its buffer, what the kernels read: kept as
        `split.out_of` grows (it only grows, in order), not made again per kernel. The node being built may be
        in it: rangeify loads a realized node only below the kernel's root."""
        out_of, flat = self.split.out_of, self._flat_of
        if len(flat) != len(out_of):
            for n, b in islice(out_of.items(), len(flat), None):
                flat[n] = self.flat(b)
        return flat

    def kernel(self, node: UOp) -> UOp | RealizePoint:
        """The kernel AST of `node` against the realized nodes (or the first realize point its build met; all of
        them in `points()`), built once per visit. A STORE gets the assignment's kernel (in place into its
        target)."""
        assert node is self._node, "BuildContext.kernel: visit the node first"
        if self._built is None:
            flat = self.buffers()
            flat_out = flat[node]
            if node.op is not Ops.STORE:
                self._built = build_kernel(node, flat_out, flat, points=self._points, threads=self.threads(node))
            elif (st := indexed_store(node)) is None:  # CONTIGUOUS at the top: a realized value is loaded
                self._built = build_kernel(UOp(Ops.CONTIGUOUS, (node.src[1],)), flat_out, flat, points=self._points)
            else:
                self._built = build_store_kernel(st.view, node.src[1], flat_out, flat, self._points)
        return self._built

    def threads(self, node: UOp) -> bool:
        """Whether `node`'s device runs a kernel's output loops as threads (a GPU target: rules.rangeify's
        kernel_point_rules apply)."""
        dev = node.device if isinstance(node.device, str) else self.device
        if (known := self._threads.get(dev)) is None:
            known = self._threads[dev] = kernel_threads(dev)
        return known

    def points(self, node: UOp) -> list[RealizePoint]:
        """Every realize point the build of `node` met (empty when it is a kernel)."""
        self.kernel(node)
        return self._points


def kernel_limits(device: str) -> tuple[int, int]:
    """The bounds on one kernel of the device's target: (buffer arguments, fused ops); see devices.base.Target."""
    try:
        t = target_for(device)
    except CompilerError:
        return (1 << 30, 1 << 30)
    return t.max_args, t.max_kernel_ops


def kernel_threads(device: str) -> bool:
    """Whether the device's target runs a kernel's output loops as threads (Target.warp_size > 0: a GPU)."""
    try:
        return target_for(device).warp_size > 0
    except CompilerError:
        return False


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


def region_nodes(node: UOp, realized: dict[UOp, UOp]) -> tuple[set[UOp], list[UOp]]:
    """The nodes of `region(node, realized)` as a set, and its realized leaves (without `node`): one walk that
    keeps no order (what the rules here ask of a region but for `split_point`'s cut)."""
    seen: set[UOp] = {node}
    leaves: list[UOp] = []
    stack = [node]
    while stack:
        for s in stack.pop().src:
            if s not in seen:
                seen.add(s)
                if s in realized:
                    leaves.append(s)
                else:
                    stack.append(s)
    return seen, leaves


def under_limits(nodes: set[UOp], leaves: list[UOp], max_args: int, max_ops: int) -> bool:
    """Whether a kernel whose region holds `nodes` (`leaves` realized) stays within `max_args` buffers counting its
    output and `max_ops` weighed ops: then `split_point` has no cut to make."""
    return len(leaves) + 1 <= max_args and sum([_WEIGHT[u.op] for u in nodes]) <= max_ops


def split_point(node: UOp, realized: dict[UOp, UOp], max_args: int, max_ops: int,
                order: list[UOp] | None = None) -> UOp | None:
    """A node to realize first when `node`'s kernel would exceed the device's limits (more than `max_args`
    buffers counting its output, or ops weighing more than `max_ops`), else None. It is the heaviest source of
    the first node (sources first) whose fused subgraph goes over a limit, so the cut leaves kernels near the
    limits; the kernel for `node` is then built again reading it, and cut again if still too big. `order`, when
    given, is `region(node, realized)`."""
    order = region(node, realized) if order is None else order
    leaves = [u for u in order if u in realized and u is not node]
    if under_limits(set(order), leaves, max_args, max_ops):
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


# ---------------------------------------------------------------------------- the rules applied while building


def _copy_source(ctx: BuildContext, n: UOp) -> Decision | None:
    src = copy_source(n)[0]
    return None if src in ctx.split.out_of else Decision(COPY_SOURCE, (src,), (n,))


def _concat_source(ctx: BuildContext, n: UOp) -> Decision | None:
    """A concatenation's pieces are copied from their sources' buffers: the sources not realized yet are."""
    if (cat := ctx.concat(n)) is None:
        return None
    missing = tuple(src for src, _, _, _ in cat if src not in ctx.split.out_of)
    return Decision(COPY_SOURCE, missing, (n,)) if missing else None


def _over_limits(ctx: BuildContext, n: UOp) -> Decision | None:
    if ctx.concat(n) is not None:  # copies, no kernel
        return None
    dev = n.device if isinstance(n.device, str) else ctx.device
    if (limits := ctx._limits.get(dev)) is None:
        limits = ctx._limits[dev] = kernel_limits(dev)
    if under_limits(*ctx.region(n), *limits):
        return None
    cut = split_point(n, ctx.split.out_of, *limits)
    return None if cut is None else Decision(OVER_LIMITS, (cut,), (n,))


def _realize_point(ctx: BuildContext, n: UOp) -> Decision | None:
    if ctx.concat(n) is not None:
        return None
    if not (points := ctx.points(n)):
        return None
    first: dict[UOp, str] = {}
    for p in points:  # each node once, under the rule met first; a REDUCE read only through a narrowing CAST
        first.setdefault(ctx.narrow.get(p.node, p.node), p.rule)  # is stored narrow (lower.split.narrowing_casts)
    nodes = tuple(first)
    return Decision(points[0].rule, nodes, (n,), why=tuple(first[u] for u in nodes))


def _store_value(ctx: BuildContext, n: UOp) -> Decision | None:
    """Writing in place is wrong when the value reads the target anywhere but at the element being written (a
    flip, a matmul, a shift): it would change elements still to be read. Then the value is realized first."""
    ast = ctx.kernel(n)
    assert not isinstance(ast, RealizePoint)  # realize-point fires first
    st = indexed_store(n)
    value = n.src[1] if st is None else st.value
    flat_out = ctx.flat(ctx.split.out_of[n])
    topo = ast.toposort()
    written = {u.src[0] for u in topo if u.op is Ops.STORE}
    reads = {u for u in topo if u.op is Ops.INDEX and u.src[0] is flat_out and u not in written}
    if reads - written and value not in ctx.split.out_of:
        return Decision(STORE_VALUE, (value,), (n,))
    return None


_KERNELS = frozenset(Ops) - {Ops.STORE, Ops.COPY}

# fmt: off
build_rules = RuleSet("split-build", [
    Rule(COPY_SOURCE, op.COPY(name="n"), _copy_source),
    Rule("realize-concat-source", op[_KERNELS](name="n"), _concat_source),
    Rule(OVER_LIMITS, op[_KERNELS](name="n"), _over_limits),
    Rule("realize-point", op[_KERNELS | {Ops.STORE}](name="n"), _realize_point),
    Rule(STORE_VALUE, op.STORE(name="n"), _store_value),
])
# fmt: on


def decide_build(ctx: BuildContext, node: UOp) -> Decision | None:
    """The decision `build_rules` take on `node` (the first rule that fires), or None: its kernel stands."""
    ctx.visit(node)
    m = build_rules.matcher(node.op)
    res = None if m is None else m(node, ctx)
    return None if res is None else cast(Decision, res[0])  # what every rule here returns


# ---------------------------------------------------------------------------- shared values, over the graph


@dataclass
class SharedContext:
    """The typed context of `shared_rules`: the realized nodes (`out_of`), each value some kernel computes inline
    -> those kernels (`users`, from the regions of every kernel built: `BuildContext.regions`), and the nodes
    decided."""

    out_of: dict[UOp, UOp]
    users: dict[UOp, list[UOp]]
    nodes: list[UOp] = field(default_factory=list)
    count: ByteCount | None = None  # kept across rounds (`BuildContext.bytes`), else made for this one

    def __post_init__(self) -> None:
        if self.count is None:
            self.count = ByteCount(self.out_of)


def _shared_value(ctx: SharedContext, n: UOp) -> None:
    """A value `m` >= 2 kernels compute inline is realized when it is a heavy reduction, or when that reads fewer
    bytes: its own kernel plus the `m` kernels reading it read less than the `m` kernels computing it."""
    if len(ks := ctx.users.get(n, ())) < 2 or n in ctx.out_of:
        return
    count = ctx.count
    assert count is not None  # made by __post_init__
    own, once = count(n), nbytes(n)
    if heavy_reduction(n, own):  # its loop's work, not the bytes it reads, is what each kernel would repeat
        ctx.nodes.append(n)
        return
    if own is not None and once is not None and (len(ks) - 1) * own <= (len(ks) + 1) * once:
        return  # each kernel saves at most `own - once`: storing it reads no less
    now = [count(k) for k in ks]
    after = [count(k, n) for k in ks]
    sizes = [b for b in (own, once, *now, *after) if b is not None]
    if len(sizes) < 2 + 2 * len(ks) or sum(sizes[:2]) + sum(sizes[2 + len(ks):]) < sum(sizes[2:2 + len(ks)]):
        ctx.nodes.append(n)


shared_rules = RuleSet("split-shared", [Rule(SHARED_REDUCTION, op[_COUNTED](name="n"), _shared_value)])


def walk_order(root: UOp) -> dict[UOp, int]:
    """Each node of `root`'s graph -> its place in the order `graph_rewrite(..., walk=True)` applies rules in
    (rewrite.engine: a node after its sources, the sources entered last to first)."""
    out: dict[UOp, int] = {}
    stack: list = [root]
    while stack:
        e = stack.pop()
        if e.__class__ is UOp:
            if e not in out:
                stack.append((e, None))
                stack.extend(s for s in e.src if s not in out)
        elif (n := e[0]) not in out:
            out[n] = len(out)
    return out


def shared_values(build: BuildContext) -> Decision | None:
    """The decision `shared_rules` take over the whole graph once every kernel of a round stands (the realize
    points, cuts and copies settled): the values several kernels compute inline that are cheaper stored,
    realized at once (of a chain of them, the last one that the same kernels compute), and every kernel that
    computes one of them built again reading it."""
    users: dict[UOp, list[UOp]] = {}
    for k, inner in build.regions.items():  # an assignment's value is its own (lower.split_fuse shares them)
        if k.op is not Ops.STORE:
            for r in inner:
                if r.op in _COUNTED:
                    users.setdefault(r, []).append(k)
    if not any(len(ks) > 1 for ks in users.values()):
        return None
    out_of = build.split.out_of
    if build.bytes is None:
        build.bytes = ByteCount(out_of)
    build.bytes.sync()
    ctx = SharedContext(out_of, users, count=build.bytes)
    # the rules over the graph, as graph_rewrite(..., walk=True) would apply them (in its order), but only on the
    # values it can decide on: those several kernels compute
    if build.walk is None:
        build.walk = walk_order(UOp.sink(*build.split.roots))
    for n in sorted((n for n, ks in users.items() if len(ks) > 1), key=build.walk.__getitem__):
        if (m := shared_rules.matcher(n.op)) is not None:
            m(n, ctx)
    chosen: list[UOp] = []
    covered: dict[UOp, set[UOp]] = {}  # node -> the kernels that read it through a chosen value
    for v in reversed(ctx.nodes):  # users first: a value below a chosen one in the same kernels stays inline
        ks = set(users[v])
        if ks <= covered.get(v, set()):
            continue
        chosen.append(v)
        for x in region_nodes(v, out_of)[0]:
            if x not in out_of:
                covered.setdefault(x, set()).update(ks)
    if not chosen:
        return None
    chosen.reverse()
    again = dict.fromkeys(k for n in chosen for k in users[n])
    return Decision(SHARED_REDUCTION, tuple(chosen), tuple(again))


# ---------------------------------------------------------------------------- the assignment cycle, over the graph


@dataclass
class CycleContext:
    """The typed context of `cycle_rules`: the stores the kernel order left on a cycle (`stuck`, a graph
    analysis computed once per round by lower.schedule._order_with_stores), the realized nodes, the graph's
    topological order (computed once, lower.split.SplitContext.topo_index) and the decision taken."""

    stuck: frozenset[UOp]
    out_of: dict[UOp, UOp]
    topo_index: dict[UOp, int]
    decision: Decision | None = None


def _assign_cycle(ctx: CycleContext, s: UOp) -> None:
    """A store on a cycle whose value is not realized yet: the one first in graph order is chosen."""
    if s not in ctx.stuck or s.src[1] in ctx.out_of:
        return
    if ctx.decision is None or ctx.topo_index[s] < ctx.topo_index[ctx.decision.again[0]]:
        ctx.decision = Decision(ASSIGN_CYCLE, (s.src[1],), (s,))


cycle_rules = RuleSet("split-cycle", [Rule(ASSIGN_CYCLE, op.STORE(name="s"), _assign_cycle)])


def break_cycle(roots: list[UOp], stuck: list[UOp], out_of: dict[UOp, UOp], topo_index: dict[UOp, int]) -> Decision:
    """The decision `cycle_rules` take over the graph of `roots` given the stores left on a cycle (the value of
    the first such store in graph order whose value is not realized yet is computed first); a clear error when
    every such store's value is realized already (no temporary can help)."""
    ctx = CycleContext(frozenset(stuck), out_of, topo_index)
    graph_rewrite(UOp.sink(*roots), cycle_rules, ctx, name="split-cycle", walk=True)
    if ctx.decision is None:
        raise CompilerError("assign: a kernel reads a buffer both before and after an assignment to it, so no "
                            "order of the kernels is right; realize one of the two values first "
                            "(x.contiguous().realize())")
    return ctx.decision


__all__ = ["COPY_SOURCE", "BuildContext", "Concats", "CycleContext", "Decision", "SharedContext", "break_cycle",
           "build_rules", "cycle_rules", "decide_build", "flat_buffer", "kernel_limits", "kernel_threads", "nbytes",
           "region", "region_nodes", "shared_rules", "shared_values", "split_point", "under_limits"]
