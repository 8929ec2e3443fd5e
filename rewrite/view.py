"""Views and masks over symbolic index variables (seed 002), and expanding a variable over its values.

A View is (shape, strides, offset, mask): element `idx` of the view lives at `offset + sum(idx_k * stride_k)`
of the underlying buffer, and is valid only where every `mask[k][0] <= idx_k < mask[k][1]`. `expr_idxs`
gives both as simplified UOps. The index is simplified *given* the valid condition: each index variable is
first narrowed to the part of its range the mask allows (a mask of width one pins it to a constant), so a
one-row mask gives an index that no longer depends on the row.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from rewrite.ops import Ops
from rewrite.uop import ParamArg, UOp

Dim = int | UOp


@dataclass(frozen=True)
class View:
    shape: tuple[Dim, ...]
    strides: tuple[Dim, ...]
    offset: Dim = 0
    mask: tuple[tuple[Dim, Dim], ...] | None = None

    @staticmethod
    def create(shape: Sequence[Dim], strides: Sequence[Dim] | None = None, offset: Dim = 0,
               mask: Sequence[tuple[Dim, Dim]] | None = None) -> View:
        """A view of `shape`; without strides, the contiguous row-major ones."""
        shape = tuple(shape)
        if strides is None:
            acc: Dim = 1
            st: list[Dim] = []
            for d in reversed(shape):
                st.append(acc)
                acc = acc * d
            strides = tuple(reversed(st))
        if len(strides) != len(shape) or (mask is not None and len(mask) != len(shape)):
            raise ValueError(f"View: shape {shape}, strides {tuple(strides)} and mask must have one entry per axis")
        return View(shape, tuple(strides), offset, None if mask is None else tuple((lo, hi) for lo, hi in mask))

    def expr_idxs(self, idxs: Sequence[UOp]) -> tuple[UOp, UOp]:
        """(index expression, valid expression) for index variables `idxs`, both simplified."""
        if len(idxs) != len(self.shape):
            raise ValueError(f"expr_idxs: need one index per axis of {self.shape}, got {len(idxs)}")
        valid = UOp.const(True)
        narrowed: dict[UOp, UOp] = {}
        back: dict[UOp, UOp] = {}
        for k, i in enumerate(idxs):
            if self.mask is None:
                continue
            lo, hi = self.mask[k]
            if not (isinstance(lo, int) and lo <= i.vmin):
                valid = valid & (UOp.const(lo - 1) < i if isinstance(lo, int) else (i < lo).ne(True))
            if not (isinstance(hi, int) and i.vmax < hi):
                valid = valid & (i < hi)
            if isinstance(lo, int) and isinstance(hi, int) and i.is_variable:
                nlo, nhi = max(lo, int(i.vmin)), min(hi - 1, int(i.vmax))  # a variable's bounds are ints
                if nlo > nhi:
                    return UOp.const(0), UOp.const(False)
                fresh = UOp.const(nlo) if nlo == nhi else UOp.variable(f"{i.buf_arg.slot}'", nlo, nhi)
                narrowed[i] = fresh
                if fresh.op is Ops.PARAM:
                    back[fresh] = i
        terms: list[UOp] = [self.offset if isinstance(self.offset, UOp) else UOp.const(self.offset)]
        for i, d, st in zip(idxs, self.shape, self.strides, strict=True):
            if (isinstance(d, int) and d == 1) or (isinstance(st, int) and st == 0):
                continue
            terms.append(i * st)
        index = terms[0]
        for t in terms[1:]:
            index = index + t
        index = index.substitute(narrowed).simplify().substitute(back).simplify() if narrowed else index.simplify()
        return index, valid.simplify()


def expand_node(u: UOp, over: Sequence[UOp] | None = None) -> list[UOp]:
    """The values of `u` for every assignment of the variables in `over` (default: those named `_uidx*`, the
    upcast axes), simplified; with none to expand, `[u]`. Assignments run in row-major order."""
    if over is None:
        over = [v for v in u.variables() if isinstance(v.arg, ParamArg) and str(v.arg.slot).startswith("_uidx")]
    if not over:
        return [u]
    ranges = [range(int(v.vmin), int(v.vmax) + 1) for v in over]
    return [u.substitute({v: UOp.const(x, v.dtype) for v, x in zip(over, vals, strict=True)}).simplify()
            for vals in itertools.product(*ranges)]
