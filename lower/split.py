"""The kernel split's decisions: which nodes of the tensor graph are realized (get a BUFFER and a kernel of their
own), each decision a named rule.

`realize_rules` is a RuleSet applied with `graph_rewrite(..., walk=True)` over the whole graph (the SINK of the
roots). It rewrites nothing: each rule gives the node it decides on a buffer in the typed context `SplitContext`
and records its own name there (`SplitContext.decided`, node -> the rule that realized it). The decisions it
takes are the ones a node's own op and sources settle:

  realize-root              each root asked for (not a BUFFER or an assignment's alias)
  realize-contiguous        CONTIGUOUS
  realize-copy              COPY, and its source (recorded as realize-copy-source: a copy moves a buffer)
  realize-assign            AFTER(t, STORE(t, v), ...): the STORE writes t's BUFFER in place (AFTER aliases it)
  realize-bitcast-source    the source of a BITCAST that changes the element size (read as raw memory)

The decisions that depend on the kernels around a node are rules of lower.split_build (applied while the
kernels are built; lower.schedule's worklist only builds and carries their decisions out) and of rules.rangeify
(the realize points, applied by rangeify at every site of a kernel with the site as their typed context; the
build returns the rule's `RealizePoint`). All are recorded in the same `decided` map under their rule names:

  realize-reduce-in-reduce-loop    a REDUCE its consumer would evaluate inside another reduction's loop
  realize-broadcast-reduce         a REDUCE broadcast over output loops outside one it depends on (recomputed)
  realize-thread-broadcast-reduce  on a GPU target, an inline REDUCE every thread would compute again, in a kernel
                                   whose every output loop some reduction moves with (no block per row can share
                                   it): the finished kernel's rule (rules.rangeify.kernel_point_rules)
  realize-reduce-epilogue          a REDUCE's elementwise epilogue (through reshapes and permutes) broadcast into
                                   a reduction's loop: one kernel, the REDUCE inline, stored in the reader's layout
  realize-expensive-broadcast      transcendental/division work broadcast into a reduction's loop
  realize-bitcast-source           (again) a resizing BITCAST's source that the rules above left lazy
  realize-copy-source              (again) a COPY's or a concatenation's source not realized yet
  realize-over-limits              the cut that keeps a kernel within its Target's max_args / max_kernel_ops
  realize-shared-reduction         a REDUCE (or a value combining one) that more than one kernel would compute
  realize-store-value              an assignment's value that reads its target elsewhere than where it writes
  realize-assign-cycle             a store's value computed first to break a cycle of assignments (a rule run
                                   over the whole graph once the kernels are built)

One rule decides which kernels are one (lower.split_fuse, recorded in `SplitContext.fused`):

  fuse-sibling-stores              assignments over one iteration space that read a buffer in common at the
                                   element they write, none reading what another writes: one kernel with several
                                   STOREs (an optimizer's parameter and its state)

The context carries the graph's topological order, computed once by the caller: the order in which the
realized nodes get their buffers follows it, so buffer numbering and the kernels do not depend on the walk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from lower.copyview import copy_source
from lower.rangeify import _constant_only
from rewrite import Ops, Rule, RuleSet, UOp, graph_rewrite, op
from rewrite.errors import CompilerError
from rewrite.ops import GroupOp
from rewrite.stores import indexed_store
from rules.rangeify import BROADCAST_REDUCE, EXPENSIVE_BROADCAST, REDUCE_IN_REDUCE_LOOP

# the rules of lower.split_build, by name; the realize points are rules.rangeify's
OVER_LIMITS = "realize-over-limits"
SHARED_REDUCTION = "realize-shared-reduction"
STORE_VALUE = "realize-store-value"
ASSIGN_CYCLE = "realize-assign-cycle"


@dataclass
class SplitContext:
    """The typed context of `realize_rules`: given the roots and the graph's topological order, it receives the
    realized nodes (`decided`, with the deciding rule's name), the assignments (`stores`: each STORE with the
    BUFFER it writes; `out_of` maps every AFTER and STORE to that BUFFER, and every BUFFER leaf to itself)."""

    roots: tuple[UOp, ...]
    topo_index: dict[UOp, int]
    out_of: dict[UOp, UOp] = field(default_factory=dict)
    stores: dict[UOp, UOp] = field(default_factory=dict)
    decided: dict[UOp, str] = field(default_factory=dict)
    fused: dict[UOp, str] = field(default_factory=dict)  # stores sharing one kernel (lower.split_fuse) -> the rule
    _assigns: list[tuple[int, int, UOp]] = field(default_factory=list)  # (AFTER's position, source position, STORE)

    def mark(self, node: UOp, rule: str) -> None:
        """`node` is realized, by `rule` (the first rule to decide it is the one recorded)."""
        self.decided.setdefault(node, rule)

    def initial(self) -> list[UOp]:
        """The nodes the rules realized, in the order the worklist starts from: CONTIGUOUS and COPY nodes in graph
        order, the roots, the assignments' STOREs, then the COPYs' and BITCASTs' sources."""
        topo = self.topo_index
        by_rule: dict[str, list[UOp]] = {}
        for n, why in self.decided.items():
            by_rule.setdefault(why, []).append(n)
        first = sorted(by_rule.get("realize-contiguous", []) + by_rule.get("realize-copy", []), key=topo.__getitem__)
        roots = [r for r in self.roots if self.decided.get(r) == "realize-root"]
        srcs = [s for c in first if c.op is Ops.COPY and (s := copy_source(c)[0]) not in self.out_of]
        srcs += sorted(by_rule.get("realize-bitcast-source", []), key=topo.__getitem__)
        return list(dict.fromkeys([*first, *roots, *self.stores, *srcs]))


def _root(ctx: SplitContext, s: UOp) -> None:
    for r in s.src:
        if r.op is not Ops.BUFFER and r not in ctx.out_of:
            ctx.mark(r, "realize-root")


def _contiguous(ctx: SplitContext, x: UOp) -> None:
    ctx.mark(x, "realize-contiguous")


def _copy(ctx: SplitContext, x: UOp) -> None:
    ctx.mark(x, "realize-copy")
    if (src := copy_source(x)[0]) not in ctx.out_of:
        ctx.mark(src, "realize-copy-source")


def _assign(ctx: SplitContext, u: UOp) -> None:
    """AFTER(target, STORE(target, value), ...) is its target's BUFFER once the stores have run (an alias, no
    kernel of its own); each STORE writes that BUFFER. A target is a BUFFER or an AFTER on one (a second
    assignment to the same buffer), which the walk (sources first) has seen already."""
    tgt = ctx.out_of.get(u.src[0]) if u.src[0].op in (Ops.BUFFER, Ops.AFTER) else None
    if tgt is None:
        raise CompilerError(f"assign: an AFTER must follow a BUFFER (a realized tensor) or another AFTER on one, "
                            f"got {u.src[0].short()}; realize the target before assigning to it")
    ctx.out_of[u] = tgt
    for i, s in enumerate(u.src[1:]):
        if s.op is not Ops.STORE:
            continue
        st = indexed_store(s)
        if (s.src[0] is not u.src[0] if st is None else st.target is not u.src[0]) or len(s.src) != 2:
            raise CompilerError(f"assign: AFTER(t, STORE(t, value)) or AFTER(t, STORE(INDEX(t, i), value)) must "
                                f"store into its own target without a gate, got STORE into {s.src[0].short()} "
                                f"with {len(s.src)} sources")
        ctx.out_of[s] = tgt
        ctx._assigns.append((ctx.topo_index[u], i, s))
        ctx.mark(s, "realize-assign")


def _buffer(ctx: SplitContext, b: UOp) -> None:
    ctx.out_of[b] = b


def _bitcast_source(ctx: SplitContext, x: UOp) -> None:
    src = x.src[0]
    if x.dtype.itemsize != src.dtype.itemsize and src.op is not Ops.BUFFER and src not in ctx.out_of:
        ctx.mark(src, "realize-bitcast-source")


def narrowing_casts(topo: Iterable[UOp], users: dict[UOp, int]) -> dict[UOp, UOp]:
    """REDUCE -> CAST for each reduction whose one reader is a CAST to a narrower dtype, through RESHAPEs and
    elementwise ops of it and constants, each read once (a half matmul's float32 sum and its cast to half; a half
    mean's sum, division and cast): a rule that would realize the REDUCE realizes the CAST instead. Every reader
    then reads the narrow value it would have cast on load, so the results are the same, and the buffer between
    the kernels holds half the bytes (a half model's scores or a chained matmul's intermediate stored in float16,
    not float32; the next matmul reads a plain half buffer, which cp.async can copy)."""
    out: dict[UOp, UOp] = {}
    for u in topo:
        if u.op is not Ops.CAST or u.dtype.itemsize >= u.src[0].dtype.itemsize:
            continue
        x: UOp | None = u.src[0]
        while x is not None and x.op is not Ops.REDUCE and users.get(x) == 1:
            if x.op is Ops.RESHAPE:
                x = x.src[0]
            elif x.op in GroupOp.Elementwise and len(vs := [s for s in x.src if not _constant_only(s, {})]) == 1:
                x = vs[0]  # a mean's division, a scale: work on the sum alone, done once where it is stored
            else:
                x = None
        if x is not None and x.op is Ops.REDUCE and users.get(x) == 1:
            out[x] = u
    return out


# fmt: off
realize_rules = RuleSet("realize", [
    Rule("realize-buffer-leaf", op.BUFFER(name="b"), _buffer),
    Rule("realize-assign", op.AFTER(name="u"), _assign),
    Rule("realize-contiguous", op.CONTIGUOUS(name="x"), _contiguous),
    Rule("realize-copy", op.COPY(name="x"), _copy),
    Rule("realize-bitcast-source", op.BITCAST(name="x"), _bitcast_source),
    Rule("realize-root", op.SINK(name="s"), _root),
])
# fmt: on


def decide(roots: list[UOp], topo_index: dict[UOp, int]) -> SplitContext:
    """Apply `realize_rules` over the graph of `roots` (one walk, sources first); `topo_index` is its
    topological order, computed once by the caller."""
    ctx = SplitContext(tuple(roots), topo_index)
    graph_rewrite(UOp.sink(*roots), realize_rules, ctx, name="realize", walk=True)
    ctx._assigns.sort(key=lambda a: (a[0], a[1]))
    ctx.stores = {s: ctx.out_of[s] for _, _, s in ctx._assigns}
    return ctx


__all__ = ["ASSIGN_CYCLE", "BROADCAST_REDUCE", "EXPENSIVE_BROADCAST", "OVER_LIMITS", "REDUCE_IN_REDUCE_LOOP",
           "SHARED_REDUCTION", "STORE_VALUE", "SplitContext", "decide", "narrowing_casts", "realize_rules"]
