"""The kernel split's multi-output decision: assignments that share one iteration space become one kernel.

An optimizer step assigns each parameter and each piece of its state (AdamW: the parameter, m and v) in one
realize. Each assignment is its own kernel (lower.schedule), and every one of them reads the gradient again and
recomputes what the others compute (the parameter's update recomputes m and v). The rule here puts such
stores in one kernel with several STOREs, `SINK(END(GROUP(STORE, STORE, ...), ranges...))`, where hash-consing
makes the loads and values the stores share one node each: the gradient is read once, m and v are computed
once and stored, and the parameter's update reads them.

`fuse_rules` (context `FuseContext`) are applied to each assignment's STORE in the graph's topological order,
once the kernels are built and before they are ordered:

  fuse-sibling-stores   a STORE joins an earlier one's kernel when
                        - both kernels are plain elementwise stores of the whole target (no gate, no scatter)
                          over the same ranges and the same flat index (the same shape);
                        - they read a buffer in common at that index (the same inputs at the same index:
                          merging stores that share nothing would only make a bigger kernel);
                        - no store reads what another of the kernel writes: neither the new value of another's
                          target (an AFTER of its store), nor its target's memory anywhere but at the element
                          being written, and a target read in the kernel is read by its own store's value (the
                          store depends on the load, so every schedule of the kernel loads the old element
                          before it overwrites it);
                        - the merged kernel stays within the Target's max_args buffers, and no two stores'
                          reductions share a RANGE (each kernel numbers its ranges from 1).

An order of the merged kernels may not exist where the separate ones had one (a store that reads, through
another kernel, what its sibling writes): lower.schedule then takes the merge back (`FuseContext.excluded`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from rewrite import Ops, Rule, RuleSet, UOp, op
from rewrite.dtype import AddrSpace

FUSE_STORES = "fuse-sibling-stores"


@dataclass
class Group:
    """Stores fused into one kernel: their ranges and flat index, their STORE nodes in the kernel, the INDEX
    nodes their values read at the store index, and the global buffers' slots they read and write."""

    members: list[UOp]
    ranges: tuple[UOp, ...]
    index: UOp
    stores: list[UOp]
    loads: set[UOp]
    slots: set[int]
    after_reads: set[UOp]  # the stores whose new values the members read
    inner: set[UOp]  # the RANGEs of the members' reductions
    own: dict[int, set[UOp]]  # each member's target slot -> the loads of it its own store's value makes
    reads: dict[int, set[UOp]]  # each global buffer slot -> the loads of it in the members' values


@dataclass
class FuseContext:
    """The typed context of `fuse_rules`: each store's kernel over the global buffers (`raw`), the stores whose
    new value each store reads (`after_reads`, direct reads of an AFTER), the stores not to fuse (`excluded`:
    a merge lower.schedule took back), the bound on a kernel's buffers, and the groups formed."""

    raw: dict[UOp, UOp]
    after_reads: dict[UOp, set[UOp]]
    max_args: int
    excluded: set[UOp] = field(default_factory=set)
    groups: list[Group] = field(default_factory=list)
    group_of: dict[UOp, Group] = field(default_factory=dict)


def _slot(b: UOp) -> int:
    return cast(int, b.buf_arg.slot)


def _plain(ast: UOp) -> tuple[UOp, tuple[UOp, ...]] | None:
    """(STORE, ranges) when `ast` is SINK(END(STORE(INDEX(buf, i), value), ranges...)) with output ranges only."""
    if ast.op is not Ops.SINK or len(ast.src) != 1 or (end := ast.src[0]).op is not Ops.END:
        return None
    st, ranges = end.src[0], end.src[1:]
    if st.op is not Ops.STORE or len(st.src) != 2 or st.src[0].op is not Ops.INDEX or len(st.src[0].src) != 2:
        return None
    return st, ranges


def _is_global_load(x: UOp) -> bool:
    return (x.op is Ops.LOAD and x.src[0].op is Ops.INDEX and len(x.src[0].src) == 2
            and x.src[0].src[0].op is Ops.BUFFER and x.src[0].src[0].buf_arg.addrspace is AddrSpace.GLOBAL)


def _fuse(ctx: FuseContext, s: UOp) -> None:
    if s in ctx.excluded or (ast := ctx.raw.get(s)) is None or (plain := _plain(ast)) is None:
        return
    st, ranges = plain
    index, target = st.src[0].src[1], _slot(st.src[0].src[0])
    topo = st.src[1].toposort()  # one walk of each store's value
    own = [x for x in topo if _is_global_load(x)]
    by_slot: dict[int, set[UOp]] = {}
    for x in own:
        by_slot.setdefault(_slot(x.src[0].src[0]), set()).add(x)
    if any(x.src[0].src[1] is not index for x in by_slot.get(target, ())):
        return  # reads its own target elsewhere (realize-store-value computed such a value first)
    loads = {x.src[0] for x in own if x.src[0].src[1] is index}
    slots = set(by_slot) | {target}
    reads = ctx.after_reads.get(s, set())
    inner = {x for x in topo if x.op is Ops.RANGE} - set(ranges)
    for g in ctx.groups:
        if g.ranges != ranges or g.index is not index or not (g.loads & loads) or len(g.slots | slots) > ctx.max_args:
            continue
        if inner & g.inner:  # a reduction's loop of one store's kernel is its own (range ids count per kernel)
            continue
        if reads & set(g.members) or s in g.after_reads or target in g.own:  # (two stores into one buffer)
            continue
        # the targets read across the kernel: only at the element written, and by the target's own store too
        if any(t in by_slot and not (by_slot[t] <= mine and all(x.src[0].src[1] is index for x in by_slot[t]))
               for t, mine in g.own.items()):
            continue
        if not g.reads.get(target, set()) <= by_slot.get(target, set()):
            continue
        g.members.append(s)
        g.stores.append(st)
        g.loads |= loads
        g.slots |= slots
        g.after_reads |= reads
        g.inner |= inner
        g.own[target] = by_slot.get(target, set())
        for t, xs in by_slot.items():
            g.reads.setdefault(t, set()).update(xs)
        ctx.group_of[s] = g
        return
    g = Group([s], ranges, index, [st], loads, slots, set(reads), inner, {target: by_slot.get(target, set())},
              {t: set(xs) for t, xs in by_slot.items()})
    ctx.groups.append(g)
    ctx.group_of[s] = g


fuse_rules = RuleSet("split-fuse", [Rule(FUSE_STORES, op.STORE(name="s"), _fuse)])


def fuse_stores(ctx: FuseContext, stores: list[UOp]) -> dict[UOp, UOp]:
    """Apply `fuse_rules` to `stores` (in the graph's topological order); the fused kernels, each keyed by its
    first store, over the global buffers: SINK(END(GROUP(STORE...), ranges...))."""
    m = fuse_rules.matcher(Ops.STORE)
    assert m is not None
    for s in stores:
        m(s, ctx)
    out: dict[UOp, UOp] = {}
    for g in ctx.groups:
        if len(g.members) > 1:
            out[g.members[0]] = UOp.sink(UOp(Ops.END, (UOp(Ops.GROUP, tuple(g.stores)), *g.ranges)))
    return out


__all__ = ["FUSE_STORES", "FuseContext", "Group", "fuse_rules", "fuse_stores"]
