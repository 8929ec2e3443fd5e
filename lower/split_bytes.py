"""The byte count of the kernel split's shared-value rule (lower.split_build.shared_rules): the bytes a kernel
computing a node reads, each realized node once per loop that reads it (a reduction computed inline reads its
inputs in a pass of its own), walked once per loop and kept across the split's rounds (`ByteCount`)."""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from rewrite import Ops, UOp
from rewrite.props import nbytes


@dataclass
class _Loop:
    """One loop's reads (a kernel's own loops, or an inline REDUCE's): the bytes of the realized nodes it reads
    (None when a size is symbolic), the nodes it computes, and the REDUCEs whose loops it opens."""

    nbytes: int | None
    inner: frozenset[UOp]
    reduces: tuple[UOp, ...]


def _loop(top: UOp, realized: dict[UOp, UOp], also: UOp | None) -> _Loop:
    total: int | None = 0
    seen: set[UOp] = set()
    reduces: list[UOp] = []
    stack = list(top.src)
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if u in realized or u is also:
            b = nbytes(u)
            total = None if total is None or b is None else total + b
        elif u.op is Ops.REDUCE:
            reduces.append(u)
        else:
            stack.extend(u.src)
    return _Loop(total, frozenset(seen), tuple(reduces))


class ByteCount:
    """`recompute_bytes` over a set of realized nodes that only grows (in order, as `split.out_of`), each loop
    walked once (the kernels of a round share most of their reductions) and kept across rounds: `sync()` forgets
    only the loops whose walk met a node realized since (the others read the same)."""

    def __init__(self, realized: dict[UOp, UOp]) -> None:
        self.realized = realized
        self._loops: dict[tuple[UOp, UOp | None], _Loop] = {}
        self._known = len(realized)

    def sync(self) -> None:
        """Forget the loops that the nodes realized since the last call change."""
        if len(self.realized) == self._known:
            return
        new = set(islice(self.realized, self._known, None))
        self._known = len(self.realized)
        self._loops = {k: lp for k, lp in self._loops.items() if new.isdisjoint(lp.inner)}

    def loop(self, top: UOp, also: UOp | None = None) -> _Loop:
        if (lp := self._loops.get((top, also))) is None:
            lp = self._loops[(top, also)] = _loop(top, self.realized, also)
        return lp

    def __call__(self, node: UOp, also: UOp | None = None) -> int | None:
        total = 0
        todo, done = [node], {node}
        while todo:
            top = todo.pop()
            lp = self.loop(top)
            if also is not None and also in lp.inner:  # `also` read in this loop: walked again, stopping at it
                lp = self.loop(top, also)
            if lp.nbytes is None:
                return None
            total += lp.nbytes
            for r in lp.reduces:
                if r is also:  # read as a buffer in this loop
                    if (b := nbytes(r)) is None:
                        return None
                    total += b
                elif r not in done:
                    done.add(r)
                    todo.append(r)
        return total


def recompute_bytes(node: UOp, realized: dict[UOp, UOp], also: UOp | None = None) -> int | None:
    """The bytes a kernel computing `node` reads (None when a size is symbolic): each realized node and buffer
    of its region once per loop that reads it (the kernel's own loops, and each REDUCE's loop again: a
    reduction computed inline reads its inputs in a pass of its own). `also`, when given, counts as realized."""
    return ByteCount(realized)(node, also)


__all__ = ["ByteCount", "recompute_bytes"]
