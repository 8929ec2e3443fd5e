"""Copies of strided views: a COPY whose source is movement ops over a value copies straight out of that value's
buffer, with no kernel to make the source contiguous first.

A `View` is a strided window of a flat buffer: element (i_0, ..., i_{k-1}) of the view is element
`offset + sum(i_j * strides[j])` of the buffer (in elements). RESHAPE (where the strides allow it without a
copy, as numpy decides it), PERMUTE, SHRINK and EXPAND (stride 0) over a buffer are such a window; PAD, FLIP and
everything else are not. `source_view` finds the window of a COPY's source; the scheduler realizes the value
under it and emits a copy item that carries the window (lower.schedule). `copy_into` runs one: a contiguous
window (a slice) is a single memory copy, any other a strided numpy copy.

The other way round, a realized concatenation (pieces padded into place and summed, as lower.multi assembles a
value from its pieces on other devices) is copies into windows of its buffer (`concat_parts`): no kernel with a
bounds check per element, and a piece on another device is copied straight from where it lives into place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from rewrite import Ops, UOp
from rewrite.errors import DeviceError

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


def window(a: Any, v: View) -> Any:
    if v.contiguous:
        return a[v.offset : v.offset + v.size]
    return np.lib.stride_tricks.as_strided(a[v.offset :], v.shape, tuple(st * a.itemsize for st in v.strides))


def copy_into(dst: Any, src: Any, v: View | None, dst_view: View | None = None) -> None:
    """Copy the window `v` of the flat array `src` (all of it when None) into the window `dst_view` of the flat
    array `dst` (all of it when None); both windows have the same number of elements."""
    s = src if v is None else window(src, v)
    if dst_view is None:  # the whole destination, which may be a device's buffer that is only written whole
        if s.ndim == 1:
            dst[:] = s
        elif isinstance(dst, np.ndarray):
            dst.reshape(s.shape)[...] = s
        else:
            dst[:] = np.ascontiguousarray(s).reshape(-1)
        return
    d = window(dst, dst_view)
    if s.shape == d.shape:
        d[...] = s
    elif d.ndim == 1:
        d.reshape(s.shape)[...] = s
    else:
        d[...] = s.reshape(d.shape)


def copy_source(copy: UOp) -> tuple[UOp, View | None]:
    """What a COPY reads: the value under its source's movement ops and the window of it (`source_view`), so
    a slice is copied straight out of the buffer; or the source itself, realized first (None: all of it). Only
    from a device whose buffers are host arrays (a GPU buffer is copied whole)."""
    src = copy.src[0]
    found = source_view(src)
    if found is None or found[0] is src:
        return src, None
    base, view = found
    if not isinstance(base.device, str) or base.device != src.device or not host_memory(base.device):
        return src, None
    whole = view.contiguous and view.offset == 0 and view.size == math.prod(cast("tuple[int, ...]", base.shape))
    return base, None if whole else view


def host_memory(device: str) -> bool:
    """Whether the device's buffers are host numpy arrays, which a copy can slice."""
    from devices import get_device
    from devices.memory import Allocator

    try:
        return isinstance(get_device(device), Allocator)
    except DeviceError:
        return False


Part = tuple[UOp, "View | None", View, "UOp | None"]


def concat_parts(node: UOp, out_of: dict[UOp, UOp], users: dict[UOp, int]) -> list[Part] | None:
    """A realized `node` that is a concatenation, the sum of PADs that tile its shape exactly (what lower.multi's
    `region` builds to assemble a value from pieces), as copies into windows of its buffer: per piece, the value
    to copy from, its window (None: all of it), the window of `node` it fills, and the COPY it reads straight from
    its source (None when it copies a value on `node`'s device). None when `node` is not such a sum or a piece is
    not realized anyway (a piece to compute is better fused into a kernel than written and copied again). RESHAPEs
    over the sum keep its flat order, so they are looked through."""
    x = node
    while x.op is Ops.RESHAPE:
        x = x.src[0]
    if x.op not in (Ops.ADD, Ops.OR) or not isinstance(node.device, str) or not host_memory(node.device):
        return None
    shape = x.shape
    if not all(isinstance(d, int) for d in shape):
        return None
    terms: list[UOp] = []
    stack = [x]
    while stack:
        t = stack.pop()
        if t.op is x.op and (t is x or (t not in out_of and users.get(t, 0) == 1)):
            stack += reversed(t.src)
        else:
            terms.append(t)
    strides = _contiguous(cast("tuple[int, ...]", shape))
    out: list[Part] = []
    boxes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for t in terms:
        inner, lo = t, (0,) * len(shape)
        if t.op is Ops.PAD:
            if (b := _ints(t.src[1])) is None or users.get(t, 0) != 1:
                return None
            inner, lo = t.src[0], b
        ishape = inner.shape
        if not all(isinstance(d, int) for d in ishape):
            return None
        part = _piece(inner, node.device, out_of, users)
        if part is None:
            return None
        boxes.append((lo, cast("tuple[int, ...]", ishape)))
        dst = View(cast("tuple[int, ...]", ishape), strides, sum(a * st for a, st in zip(lo, strides, strict=True)))
        out.append((part[0], part[1], dst, part[2]))
    if len(out) < 2 or not _tiles(boxes, cast("tuple[int, ...]", shape)):
        return None
    return out


def _piece(inner: UOp, device: str, out_of: dict[UOp, UOp], users: dict[UOp, int]
           ) -> tuple[UOp, View | None, UOp | None] | None:
    """Where one piece of a concatenation is copied from: (value, window, absorbed COPY), or None."""
    if inner.op is Ops.COPY and users.get(inner, 0) == 1:
        src, v = copy_source(inner)
        if isinstance(src.device, str) and host_memory(src.device):
            return src, v, inner
    if inner in out_of:
        return inner, None, None
    found = source_view(inner)
    if found is None or found[0].device != device or (found[0] not in out_of and found[0].op is not Ops.BUFFER):
        return None
    return found[0], found[1], None


def _tiles(boxes: list[tuple[tuple[int, ...], tuple[int, ...]]], shape: tuple[int, ...]) -> bool:
    """Whether the boxes (offset, shape) lie inside `shape`, do not overlap and cover it."""
    if sum(math.prod(s) for _, s in boxes) != math.prod(shape):
        return False
    for lo, s in boxes:
        if any(a < 0 or a + d > n for a, d, n in zip(lo, s, shape, strict=True)):
            return False
    for i, (lo1, s1) in enumerate(boxes):
        for lo2, s2 in boxes[:i]:
            if all(a1 < a2 + d2 and a2 < a1 + d1 for a1, d1, a2, d2 in zip(lo1, s1, lo2, s2, strict=True)):
                return False
    return True


__all__ = ["View", "concat_parts", "copy_into", "copy_source", "host_memory", "source_view", "window"]
