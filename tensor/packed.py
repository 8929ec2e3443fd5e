"""Packed copies of realized weights, kept while the weight's data is unchanged.

matmul reads a large or reused right operand through a copy laid out as column panels (tensor.nn._panels). When
that operand is a realized buffer (a model's weight), every forward would pack it again, the same bytes each
time: the BERT forward spent ~5 ms of ~90 ms in its 36 weight-packing kernels. Here the packing graph of such a
buffer is realized with the first product that reads it (one schedule, its kernels compiled together) and the
result kept and reused while the buffer's data is unchanged: lower.buffers counts every
write into a buffer's data (a new array, an assignment's kernel or copy, a jit refill), and an entry made at an
older count is packed again. Measured on an Intel AVX-512 host (2 threads, one process alternating the two ways
in blocks): the forward 2-4 ms faster (minimum 90-92 -> 86-90 ms), not the whole 5 ms: a product then reads its
panels from L3, where the packing kernel had just left them in L2.

Memory: one packed copy per weight read this way (the weight's size, its columns padded to whole panels),
held until the weight's BUFFER is garbage or its data changes (the next matmul then packs it again and drops the
old copy); `clear()` drops them all.

Gradients: a graph holding the packed BUFFER no longer shows that it was computed from the weight.
`with_sources` puts each packing graph back in place of its BUFFER (while the copy is current), so
`Tensor.gradient` and `backward` reach the weight as they do through a lazy packing graph.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

from lower import buffers as registry
from rewrite.ops import Ops
from rewrite.uop import UOp

Packing = Callable[[UOp], UOp]  # a weight's BUFFER -> its packing graph (a CONTIGUOUS over it alone)


class _Entry:
    """A weight's packed copy: the weight (weakly: the copy must not keep it alive), its write count when packed,
    how it was packed and the packed BUFFER."""

    __slots__ = ("out", "packing", "version", "weight")

    def __init__(self, weight: UOp, version: int, packing: Packing, out: UOp) -> None:
        self.weight, self.version, self.packing, self.out = weakref.ref(weight), version, packing, out


_cache: dict[tuple[int, object], _Entry] = {}  # (weight slot, packing key) -> its packed copy
_by_packed: dict[UOp, tuple[int, object]] = {}  # packed BUFFER -> its key in _cache


class _Pending:
    """A packing not yet realized: its graph (weakly: it lives as long as a lazy product reads it), the weight, its
    write count when the graph was made, and how it packs."""

    __slots__ = ("device", "graph", "packing", "version", "weight")

    def __init__(self, graph: UOp, weight: UOp, version: int, packing: Packing, device: str) -> None:
        self.graph, self.weight = weakref.ref(graph), weakref.ref(weight)
        self.version, self.packing, self.device = version, packing, device


_pending: dict[tuple[int, object], _Pending] = {}
_watched: set[tuple[int, object]] = set()  # keys whose weight has a finalizer that forgets its copy


def reusable(b: UOp, device: object) -> bool:
    """Whether b's packing may be reused: b is a realized BUFFER on one local device whose code runs here, and no
    jit is capturing (a capture must record the packing kernel so that its replays, with other data in the
    weight, pack again)."""
    if b.op is not Ops.BUFFER or not isinstance(device, str) or not registry.has_data(b):
        return False
    from devices import rank_of, target_for
    from tensor.jit import capturing

    return rank_of(device) is None and not capturing() and target_for(device).runs_here


def packed(b: UOp, packing: Packing, key: object, device: str) -> UOp:
    """packing(b) (`key` names the packing among b's): the copy made at b's current data if there is one; else
    the packing graph itself, noted as pending: the realize that runs it keeps its result (`along`, `settle`), so
    the packing kernel is scheduled and compiled with the product's."""
    k, now = (registry.slot(b), key), registry.version(b)
    hit = _cache.get(k)
    if hit is not None and hit.version == now:
        return hit.out
    graph = packing(b)
    _pending[k] = _Pending(graph, b, now, packing, device)
    return graph


def along(roots: list[UOp]) -> list[tuple[tuple[int, object], UOp, str]]:
    """The pending packings that the graphs of `roots` read (key, graph, device): a realize of them realizes these
    too. None during a jit capture: its two calls must realize the same graphs."""
    if not _pending:
        return []
    from tensor.jit import capturing

    if capturing():
        return []
    for k in [k for k, p in _pending.items() if p.graph() is None]:
        del _pending[k]
    nodes = set(UOp.toposort_of(roots))
    return [(k, g, p.device) for k, p in _pending.items() if (g := p.graph()) is not None and g in nodes]


def settle(done: list[tuple[tuple[int, object], UOp, UOp]]) -> None:
    """Keep the results (key, graph, realized BUFFER) of pending packings a realize ran, where the weight still
    holds the data they were made from (the same realize may have written it: then the copy is of the old data)."""
    for k, graph, out in done:
        p = _pending.get(k)
        if p is None or p.graph() is not graph:
            continue
        del _pending[k]
        w = p.weight()
        if w is None or out.op is not Ops.BUFFER or registry.version(w) != p.version:
            continue
        old = _cache.get(k)
        if old is not None:
            _by_packed.pop(old.out, None)
        if k not in _watched:
            _watched.add(k)
            weakref.finalize(w, _forget, k)
        _cache[k] = _Entry(w, p.version, p.packing, out)
        _by_packed[out] = k


def _forget(key: tuple[int, object]) -> None:
    _watched.discard(key)
    _pending.pop(key, None)
    hit = _cache.pop(key, None)
    if hit is not None:
        _by_packed.pop(hit.out, None)


def with_sources(root: UOp) -> UOp:
    """root with every current packed copy it reads replaced by its packing graph (over the weight's BUFFER)."""
    if not _by_packed:
        return root
    back: dict[UOp, UOp] = {}
    for u in root.toposort():
        if u.op is Ops.BUFFER and (k := _by_packed.get(u)) is not None:
            e = _cache[k]
            w = e.weight()
            if w is not None and registry.has_data(w) and registry.version(w) == e.version:
                back[u] = e.packing(w)
    return root.substitute(back) if back else root


def kept(b: UOp) -> list[UOp]:
    """The packed copies kept for the BUFFER b (current or not)."""
    s = registry.slot(b)
    return [e.out for (slot, _), e in _cache.items() if slot == s]


def clear() -> None:
    """Drop every kept packed copy (their memory goes when no graph holds them)."""
    _cache.clear()
    _by_packed.clear()
    _pending.clear()


__all__ = ["along", "clear", "kept", "packed", "reusable", "settle", "with_sources"]
