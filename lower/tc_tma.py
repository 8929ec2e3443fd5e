"""lower.tc_wgmma's tiles copied by Hopper's tensor memory accelerator (TMA) instead of cp.async (TC arg field
`tma` = 1, with the 128-byte swizzle): the INS instructions of devices.tma.

Each operand is a tensor the copies address by coordinates: its index must be affine in the kernel's ranges
(offset + the inner range, stride 1, + the row range times its stride + any batch ranges times theirs), which
becomes a tensor map of dims (inner extent, rows, batch extents) and strides. Each stage's A tile is bk / 64
boxes of 64 k x BM rows (at most 256 rows a box), B's BN / 64 boxes of 64 columns x bk rows, landing in the
same swizzled atoms the cp.async form writes (lower.tc_wgmma's module docstring); a box past the matrix is
zero-filled by the copy engine, so ragged edges need no gates.

One thread (the block's thread 0, `leader`) does all the copying. The pipeline, with lead = stages - 1 - overlap
k steps copied ahead and one mbarrier (LOCAL uint64) per stage:

  before the loop  the leader initializes the stages' barriers (one arrival a phase); BARRIER
                   "mbarrier.init.fence"; then for k steps s < lead: the leader's expect_tx of the stage's bytes
                   on barrier s and the copies of step s into stage s;
  step ko          BARRIER (__syncthreads: every warpgroup's wgmma.wait of the step before has retired its reads
                   of the stage about to be refilled); the leader's expect_tx and copies of step ko + lead into
                   stage (ko + lead) % stages (none past the last step); every thread waits on barrier
                   ko % stages for phase parity (ko // stages) % 2 (that barrier's (ko // stages)-th phase); then
                   wgmma.fence and the wgmmas as in lower.tc_wgmma.
"""

from __future__ import annotations

from typing import cast

from devices.tma import EXPECT, INIT, INIT_FENCE, LOAD, MAX_BOX, WAIT
from lower.opt_apply import size
from rewrite import BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError

ATOM = 64  # 16-bit elements of a 128-byte swizzled row: a box's inner size


def _affine(idx: UOp) -> tuple[int, dict[object, int]] | None:
    """(constant, {term: coefficient}) when idx is a sum of constants and constant multiples of terms: a range, or
    (range, "%", c) / (range, "//", c) for a range modulo or divided by a constant (a column-panel layout)."""
    if idx.op is Ops.CONST:
        return int(cast(tuple, idx.arg)[0]), {}
    if idx.op is Ops.RANGE:
        return 0, {idx: 1}
    if idx.op in (Ops.MOD, Ops.IDIV) and idx.src[0].op is Ops.RANGE and idx.src[1].op is Ops.CONST:
        return 0, {(idx.src[0], "%" if idx.op is Ops.MOD else "//", int(cast(tuple, idx.src[1].arg)[0])): 1}
    if idx.op is Ops.ADD:
        parts = [_affine(s) for s in idx.src]
        if any(p is None for p in parts):
            return None
        c, terms = 0, cast(dict[object, int], {})
        for pc, pt in cast(list, parts):
            c += pc
            for r, m in pt.items():
                terms[r] = terms.get(r, 0) + m
        return c, terms
    if idx.op is Ops.MUL:
        for a, b in (idx.src, idx.src[::-1]):
            if b.op is Ops.CONST and (p := _affine(a)) is not None:
                m = int(cast(tuple, b.arg)[0])
                return p[0] * m, {r: t * m for r, t in p[1].items()}
    return None


class Tensor:
    """An operand as a TMA tensor: the INDEX of its element 0, dims and strides (innermost first), and the
    coordinates of a tile's first element. Its index is affine (`_affine`): the inner range at stride 1 (or, in
    column panels of c elements, inner % c at stride 1 and inner // c at its own stride: dims (c, rows, panels)),
    the row range at its stride, and batch ranges at theirs."""

    def __init__(self, x: UOp, inner: UOp, rows: UOp, outer: list[UOp], what: str) -> None:
        if x.op is not Ops.LOAD or len(x.src) != 1 or x.src[0].op is not Ops.INDEX:
            raise KernelOptError(f"TC wgmma tma: operand {what} is not a plain load")
        buf, idx = x.src[0].src
        aff = _affine(idx) if inner.op is Ops.RANGE and rows.op is Ops.RANGE else None
        if aff is None:
            raise KernelOptError(f"TC wgmma tma: operand {what}'s index is not affine in single ranges (a reshaped "
                                 f"or gathered view); use the cp.async form (tma 0)")
        off, terms = aff
        panels = [t for t in terms if isinstance(t, tuple) and t[0] is inner]
        c = panels[0][2] if panels else 0
        self.batch = [r for r in outer if terms.get(r, 0)]
        known = {inner, rows, *self.batch} if not c else {(inner, "%", c), (inner, "//", c), rows, *self.batch}
        n = size(inner)
        if c and (c % ATOM or n % c or terms.get((inner, "%", c)) != 1 or terms.get((inner, "//", c), 0) <= 0):
            raise KernelOptError(f"TC wgmma tma: operand {what} is in column panels of {c} that are not whole "
                                 f"64-element atoms of its {n} columns")
        if (not c and terms.get(inner) != 1) or set(terms) != known or any(terms[t] <= 0 for t in known):
            raise KernelOptError(f"TC wgmma tma: operand {what} must be contiguous along its inner axis and move "
                                 f"forward along the others")
        self.at = buf.index(UOp.const(off, idx.dtype))
        self.panel = c
        batch_dims = tuple(size(r) for r in self.batch)
        batch_strides = tuple(terms[r] for r in self.batch)
        if c:
            self.dims = (c, size(rows), n // c, *batch_dims)
            self.strides = (terms[rows], terms[(inner, "//", c)], *batch_strides)
        else:
            self.dims = (n, size(rows), *batch_dims)
            self.strides = (terms[rows], *batch_strides)

    def load(self, dst: UOp, bar: UOp, gate: UOp, first: tuple[UOp, UOp], rows: int, deps: tuple[UOp, ...]) -> UOp:
        """The copy of the box of 64 inner elements x `rows` rows at `first` = (inner, row) (the inner one a
        multiple of 64) into `dst`."""
        col, row = first
        coords = (col % self.panel, row, col // self.panel) if self.panel else (col, row)
        box = (ATOM, rows, *(1,) * (len(self.dims) - 2))
        return UOp(Ops.INS, (dst, self.at, bar, gate, *coords, *self.batch, *deps),
                   (LOAD, self.dims, self.strides, box, 1))


def tma_pipeline(tiles: tuple, sa: UOp, sb: UOp, origin: tuple[UOp, UOp], loop: tuple[UOp, int, int, int],
                 leader: UOp) -> tuple[UOp, UOp]:
    """The copies and waits of the module docstring: (the step's wait, the step's issue) for lower.tc_wgmma."""
    x, y, u, v, k, outer, bm, bn, bk = tiles
    u0, v0 = origin
    ko, steps, stages, lead = loop
    ta, tb = Tensor(x, k, u, outer, "A"), Tensor(y, v, k, outer, "B")
    asz, bsz = bm * bk, bk * bn
    nbytes = (asz + bsz) * x.dtype.itemsize
    mbar = UOp(Ops.BUFFER, (UOp.shape_operand((stages,)),), BufferArg(2, dtypes.uint64, None, AddrSpace.LOCAL))
    fenced = UOp(Ops.BARRIER, tuple(UOp(Ops.INS, (mbar.index(UOp.const(s)), leader), (INIT, 1))
                                    for s in range(stages)), INIT_FENCE)

    def issue(step: UOp, stage: UOp, gate: UOp, deps: tuple[UOp, ...]) -> list[UOp]:
        bar = mbar.index(stage)
        expect = UOp(Ops.INS, (bar, gate, *deps), (EXPECT, nbytes))
        k0 = step * bk
        loads = [ta.load(sa.index(stage * asz + j * (bm * ATOM) + r0 * ATOM), bar, gate,
                         (k0 + j * ATOM, u0 + r0), min(MAX_BOX, bm - r0), (expect,))
                 for j in range(bk // ATOM) for r0 in range(0, bm, MAX_BOX)]
        loads += [tb.load(sb.index(stage * bsz + j * (bk * ATOM) + r0 * ATOM), bar, gate,
                          (v0 + j * ATOM, k0 + r0), min(MAX_BOX, bk - r0), (expect,))
                  for j in range(bn // ATOM) for r0 in range(0, bk, MAX_BOX)]
        return [expect, *loads]

    pro = [ins for s in range(min(lead, steps)) for ins in issue(UOp.const(s), UOp.const(s), leader, (fenced,))]
    sync = UOp(Ops.BARRIER, (fenced, *pro, ko))
    ahead = ko + lead
    now = issue(ahead, ahead % stages, leader & (ahead < steps), (sync,))
    wait = UOp(Ops.INS, (mbar.index(ko % stages), (ko // stages) % 2, *now), (WAIT,))
    return wait, UOp(Ops.GROUP, tuple(now))


def tma_fits(ast: UOp) -> bool:
    """Whether both operands of a matmul kernel (lower.wmma._match) are tensors the TMA addresses (`Tensor`)."""
    from lower.wmma import _match

    x, y, _, u, v, k = _match(ast)
    (end,) = [e for e in ast.toposort() if e.op is Ops.END]
    outer = [r for r in end.src[1:] if r is not u and r is not v]
    try:
        Tensor(x, k, u, outer, "A"), Tensor(y, v, k, outer, "B")
    except KernelOptError:
        return False
    return True


__all__ = ["Tensor", "tma_fits", "tma_pipeline"]
