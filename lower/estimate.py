"""Work estimates of a LINEAR program: floating-point ops and global-memory bytes, counted per lane and
multiplied by the trip counts of the loops around them (and the SPECIAL thread indices). Loops with a
symbolic bound count once. Used for DEBUG=2's GFLOP/s and GB/s; lower.realize keeps a `LazyEstimate` per kernel,
counted only when one of those lines reads it."""

from __future__ import annotations

from dataclasses import dataclass

from rewrite import GroupOp, Ops, UOp
from rewrite.dtype import AddrSpace


@dataclass(frozen=True)
class Estimate:
    flops: int
    mem_bytes: int


def _lanes(u: UOp) -> int:
    return u.shape[0] if u.shape and isinstance(u.shape[0], int) else 1


def estimate(linear: UOp) -> Estimate:
    mult, stack = 1, []
    for u in linear.src:
        if u.op is Ops.SPECIAL and u.src[0].op is Ops.CONST:
            mult *= int(u.src[0].value)
    flops = mem = 0
    for u in linear.src:
        if u.op is Ops.RANGE:
            n = int(u.src[0].value) if u.src[0].op is Ops.CONST else 1
            stack.append(n)
            mult *= n
        elif u.op is Ops.END:
            mult //= max(stack.pop(), 1) if stack else 1
        elif u.op in GroupOp.ALU and u.dtype.scalar.is_float:
            flops += mult * _lanes(u) * (2 if u.op is Ops.MULACC else 1)  # a multiply and an add
        elif u.op in (Ops.LOAD, Ops.STORE):
            at = u.src[0]
            buf = at.src[0] if at.op is Ops.INDEX else None
            if buf is not None and buf.op is Ops.BUFFER and buf.buf_arg.addrspace is AddrSpace.GLOBAL:
                val = u if u.op is Ops.LOAD else u.src[1]
                mem += mult * _lanes(at) * val.dtype.scalar.itemsize
    return Estimate(flops, mem)


class LazyEstimate:
    """The estimate of a LINEAR program, counted when first read (`flops`, `mem_bytes`): a realize keeps one per new
    kernel and only DEBUG=2's lines read them, so a first realize does not walk every program again for it."""

    __slots__ = ("_est", "_linear")

    def __init__(self, linear: UOp) -> None:
        self._linear: UOp | None = linear
        self._est: Estimate | None = None

    def get(self) -> Estimate:
        if self._est is None:
            assert self._linear is not None  # dropped only once counted
            self._est, self._linear = estimate(self._linear), None
        return self._est

    @property
    def flops(self) -> int:
        return self.get().flops

    @property
    def mem_bytes(self) -> int:
        return self.get().mem_bytes
