"""Copies of strided views: a COPY whose source is movement ops over a value copies straight out of that value's
buffer, with no kernel to make the source contiguous first.

A `View` is a strided window of a flat buffer: element (i_0, ..., i_{k-1}) of the view is element
`offset + sum(i_j * strides[j])` of the buffer (in elements). RESHAPE (where the strides allow it without a
copy, as numpy decides it), PERMUTE, SHRINK and EXPAND (stride 0) over a buffer are such a window; PAD, FLIP and
everything else are not. `source_view` finds the window of a COPY's source; the scheduler realizes the value
under it and emits a copy item that carries the window (lower.schedule). `copy_into` runs one: a contiguous
window (a slice) is a single memory copy, any other a strided numpy copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from rewrite import Ops, UOp

_REALIZED = (Ops.BUFFER, Ops.CONTIGUOUS, Ops.COPY)  # values that have their own buffer whatever reads them


@dataclass(frozen=True)
class View:
    """A strided window of a flat buffer, in elements."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int

    @staticmethod
    def of(shape: tuple[int, ...]) -> View:
        return View(shape, _contiguous(shape), 0)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def contiguous(self) -> bool:
        """Whether the window is one run of consecutive elements (a slice of the buffer)."""
        return all(st == want for d, st, want in zip(self.shape, self.strides, _contiguous(self.shape), strict=True)
                   if d != 1)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _ints(u: UOp) -> tuple[int, ...] | None:
    """The values of a shape operand, or None when one is symbolic."""
    return tuple(int(v) for v in u.vconst_values) if u.op is Ops.VCONST else None


def _reshape(v: View, new: tuple[int, ...]) -> View | None:
    """`v` seen with shape `new` without moving data, or None when that needs a copy (numpy's rule: each group of
    old axes merged or split into new ones must be contiguous within itself)."""
    if v.contiguous:
        return View(new, _contiguous(new), v.offset)
    old = [(d, st) for d, st in zip(v.shape, v.strides, strict=True) if d != 1]
    strides = [0] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        oj, nj = oi + 1, ni + 1
        op, np_ = old[oi][0], new[ni]
        while op != np_:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        strides[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            strides[k - 1] = strides[k] * new[k]
        oi, ni = oj, nj
    return View(new, tuple(strides), v.offset)


def _step(v: View, u: UOp) -> View | None:
    """The window after the movement op `u` (applied to a value whose window is `v`)."""
    if u.op is Ops.RESHAPE:
        new = _ints(u.src[1])
        return None if new is None else _reshape(v, new)
    if u.op is Ops.PERMUTE:
        order = u.int_tuple_arg
        return View(tuple(v.shape[i] for i in order), tuple(v.strides[i] for i in order), v.offset)
    if u.op is Ops.SHRINK:
        lo, hi = _ints(u.src[1]), _ints(u.src[2])
        if lo is None or hi is None:
            return None
        off = v.offset + sum(b * st for b, st in zip(lo, v.strides, strict=True))
        return View(tuple(e - b for b, e in zip(lo, hi, strict=True)), v.strides, off)
    if u.op is Ops.EXPAND:
        new = _ints(u.src[1])
        if new is None:
            return None
        return View(new, tuple(st if d == n else 0 for d, n, st in zip(v.shape, new, v.strides, strict=True)),
                    v.offset)
    return None


def source_view(src: UOp) -> tuple[UOp, View] | None:
    """For a COPY's source: the value to realize and the window of its buffer that the copy reads, or None when
    the source is to be realized as is. Movement ops are looked through down to a value with a buffer of its own
    (a BUFFER, CONTIGUOUS or COPY), or to a computed value the window reads all of (realizing a bigger value
    than the copy needs would compute what nobody reads)."""
    chain: list[UOp] = []
    base = src
    while base.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.EXPAND):
        chain.append(base)
        base = base.src[0]
    shape = base.shape
    if not all(isinstance(d, int) and d > 0 for d in shape) or not all(isinstance(d, int) for d in src.shape):
        return None
    v: View | None = View.of(cast("tuple[int, ...]", shape))
    for u in reversed(chain):
        if v is None:
            return None
        v = _step(v, u)
    if v is None or v.shape != src.shape:
        return None
    if base.op not in _REALIZED and v.size < math.prod(cast("tuple[int, ...]", shape)):
        return None
    return base, v


def copy_into(dst: Any, src: Any, v: View | None) -> None:
    """Copy the window `v` of the flat array `src` into the flat array `dst` (v.size elements); all of `src` when
    `v` is None."""
    if v is None:
        dst[:] = src
    elif v.contiguous:
        dst[:] = src[v.offset : v.offset + v.size]
    else:
        item = src.itemsize
        window = np.lib.stride_tricks.as_strided(src[v.offset :], v.shape, tuple(st * item for st in v.strides))
        dst.reshape(v.shape)[...] = window


__all__ = ["View", "copy_into", "source_view"]
