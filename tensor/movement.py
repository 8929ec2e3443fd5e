"""Movement: reshape permute expand pad shrink flip and what is built from them (transpose, squeeze, getitem,
cat, stack, repeat, split, chunk, gather, index_select). No data moves: each op is a view node in the graph.

Strided slicing uses no strided op, since the IR has none: the axis is shrunk to the span it touches, padded to a
multiple of the step, reshaped to (count, step), and the first column kept. A negative step flips the axis first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import dtypes, promote
from rewrite.errors import ArgumentError, ShapeError, VariableError
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor.elementwise import common_device, const_uop
from tensor.helpers import AxisError, alias_arg, norm_axes, norm_axis, resolve_reshape, shape_arg
from tensor.symbolic import bound_value, need_concrete

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def _wrap(x: Tensor, u: UOp) -> Tensor:
    return tt.Tensor._wrap(u, x.device)


# ---------------------------------------------------------------- the primitives


def reshape(x: Tensor, *shape: int) -> Tensor:
    """A view with a new shape of the same element count (one entry may be -1: inferred)."""
    sh = resolve_reshape(shape_arg(shape, "reshape"), x.numel(), x.shape)
    return _wrap(x, x.uop.reshape(sh))


def permute(x: Tensor, *order: int) -> Tensor:
    o = shape_arg(order, "permute")
    if len(o) != x.ndim:
        raise ShapeError(f"permute: {o} has {len(o)} entries for a tensor of shape {fmt_shape(x.shape)} "
                         f"({x.ndim} axes)")
    norm = tuple(norm_axis(a, x.ndim, "permute", x.shape) for a in o)
    if sorted(norm) != list(range(x.ndim)):
        raise ShapeError(f"permute: {o} is not a permutation of the axes 0..{x.ndim - 1}")
    return _wrap(x, x.uop.permute(norm))


def expand(x: Tensor, *shape: int) -> Tensor:
    """Broadcast size-1 axes to a bigger size; new leading axes may be added; -1 keeps a size."""
    sh = shape_arg(shape, "expand")
    if len(sh) < x.ndim:
        raise ShapeError(f"expand: cannot expand {fmt_shape(x.shape)} to the shorter shape {fmt_shape(sh)}")
    src = (1,) * (len(sh) - x.ndim) + x.shape
    new = tuple(s if t == -1 else t for s, t in zip(src, sh, strict=True))
    for i, (s, t) in enumerate(zip(src, new, strict=True)):
        if (isinstance(t, int) and t < 0) or (s is not t and s != t and s != 1):
            raise ShapeError(f"expand: cannot expand {fmt_shape(x.shape)} to {fmt_shape(sh)}: axis {i} has size {s}, "
                             f"and only size-1 axes can be expanded")
    return _wrap(x, x.uop.reshape(src).expand(new))


def _pad_pairs(x: Tensor, padding: Sequence, what: str) -> list[tuple[int, int]]:
    """Padding per axis as (before, after): either one pair (or None) per axis in axis order, or a flat sequence of
    ints in torch's order (last axis first: left, right, top, bottom, ...)."""
    pads = list(padding)
    if pads and all(p is None or isinstance(p, (tuple, list)) for p in pads):
        if len(pads) != x.ndim:
            raise ShapeError(f"{what}: {len(pads)} (before, after) pairs for a tensor of shape {fmt_shape(x.shape)} "
                             f"({x.ndim} axes); give one pair or None per axis")
        out = [(0, 0) if p is None else tuple(p) for p in pads]
        if any(len(p) != 2 for p in out):
            raise ShapeError(f"{what}: each per-axis entry must be a (before, after) pair, got {padding!r}")
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for p in out for v in p):
            raise ShapeError(f"{what}: padding amounts must be ints, got {padding!r}")
        return [(int(b), int(a)) for b, a in out]
    if not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in pads):
        raise ShapeError(f"{what}: padding must be ints or (before, after) pairs, got {padding!r}")
    if len(pads) % 2 or len(pads) > 2 * x.ndim:
        raise ShapeError(f"{what}: a flat padding needs an even number of ints, at most 2 per axis "
                         f"({2 * x.ndim} for shape {fmt_shape(x.shape)}), got {len(pads)}")
    pairs = [(0, 0)] * x.ndim
    for k in range(len(pads) // 2):
        pairs[x.ndim - 1 - k] = (int(pads[2 * k]), int(pads[2 * k + 1]))
    return pairs


def pad(x: Tensor, padding: Sequence, value: float | int | bool = 0, mode: str = "constant") -> Tensor:
    """Pad with `value`. Negative amounts crop, as in torch."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} is not supported; only 'constant'")
    pairs = _pad_pairs(x, padding, "pad")
    for i, ((b, a), d) in enumerate(zip(pairs, x.shape, strict=True)):
        if d + min(b, 0) + min(a, 0) < 0:
            raise ShapeError(f"pad: cropping ({b}, {a}) on axis {i} removes more than its {d} elements")
    u = x.uop.shrink([-min(b, 0) for b, _ in pairs], [d + min(a, 0) for (_, a), d in zip(pairs, x.shape, strict=True)])
    before, after = [max(b, 0) for b, _ in pairs], [max(a, 0) for _, a in pairs]
    padded = u.pad(before, after)
    if value == 0 or padded is u:
        return _wrap(x, padded)
    inside = const_uop(True, dtypes.bool, u.shape).pad(before, after)
    return _wrap(x, UOp(Ops.WHERE, (inside, padded, const_uop(value, x.dtype, padded.shape))))


def shrink(x: Tensor, arg: Sequence[tuple[int | UOp, int | UOp] | None]) -> Tensor:
    """Keep [begin, end) on each axis (None keeps the whole axis)."""
    if len(arg) != x.ndim:
        raise ShapeError(f"shrink: {len(arg)} ranges for a tensor of shape {fmt_shape(x.shape)} ({x.ndim} axes)")
    begin, end = [], []
    for i, (r, d) in enumerate(zip(arg, x.shape, strict=True)):
        b, e = (0, d) if r is None else (_dim(r[0]), _dim(r[1]))
        if any(isinstance(v, UOp) for v in (b, e, d)):
            # symbolic: checked at the variables' bound values (every realize binds them again)
            bv, ev, dv = (bound_value(v, "shrink") for v in (b, e, d))
            if not 0 <= bv <= ev <= dv:
                raise ShapeError(f"shrink: range {fmt_shape((b, e))} = ({bv}, {ev}) on axis {i} is not inside "
                                 f"[0, {dv}] of {fmt_shape(x.shape)}; need 0 <= begin <= end <= size")
            begin.append(b)
            end.append(e)
            continue
        if not 0 <= b <= e <= d:
            raise ShapeError(f"shrink: range ({b}, {e}) on axis {i} is not inside [0, {d}] of {fmt_shape(x.shape)}; "
                             f"need 0 <= begin <= end <= size")
        begin.append(b)
        end.append(e)
    return _wrap(x, x.uop.shrink(begin, end))


def _dim(v: object) -> int | UOp:
    return v if isinstance(v, UOp) else int(v)  # type: ignore[call-overload]  # int() raises for a non-number


def shrink_to(x: Tensor, *shape: int | None) -> Tensor:
    """Keep the first shape[i] elements of each axis (None keeps the axis)."""
    sh = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    if len(sh) != x.ndim:
        raise ShapeError(f"shrink_to: {fmt_shape(tuple(sh))} has {len(sh)} entries for shape {fmt_shape(x.shape)}")
    return shrink(x, [None if s is None else (0, s) for s in sh])


def flip(x: Tensor, axis: int | Sequence[int] | None = None, *, dims: int | Sequence[int] | None = None,
         dim: int | Sequence[int] | None = None) -> Tensor:
    """Reverse the order along the given axes (all of them when None); torch spells them `dims`."""
    axes = norm_axes(alias_arg("flip", "axis", axis, "dims", alias_arg("flip", "dims", dims, "dim", dim)), x.ndim,
                     "flip", x.shape)
    return _wrap(x, x.uop.flip(tuple(i in axes for i in range(x.ndim)))) if axes else x


# ---------------------------------------------------------------- derived views


def transpose(x: Tensor, dim0: int = 1, dim1: int = 0) -> Tensor:
    """Swap two axes (by default the first two, as tinygrad)."""
    a, b = norm_axis(dim0, x.ndim, "transpose", x.shape), norm_axis(dim1, x.ndim, "transpose", x.shape)
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return _wrap(x, x.uop.permute(order))


def reverse_axes(x: Tensor) -> Tensor:
    """All axes in reverse order (numpy's .T)."""
    return _wrap(x, x.uop.permute(tuple(reversed(range(x.ndim)))))


def squeeze(x: Tensor, dim: int | Sequence[int] | None = None, *, axis: int | Sequence[int] | None = None) -> Tensor:
    """Drop size-1 axes (all, or the given ones; a given axis that is not size 1 stays, as in torch)."""
    dim = alias_arg("squeeze", "dim", dim, "axis", axis)
    axes = set(norm_axes(dim, x.ndim, "squeeze", x.shape)) if dim is not None else set(range(x.ndim))
    return _wrap(x, x.uop.reshape(tuple(d for i, d in enumerate(x.shape) if not (i in axes and d == 1))))


def unsqueeze(x: Tensor, dim: int | None = None, *, axis: int | None = None) -> Tensor:
    """Insert a size-1 axis at `dim` or `axis` (-ndim-1 <= dim <= ndim)."""
    given = alias_arg("unsqueeze", "dim", dim, "axis", axis)
    if given is None:
        raise TypeError("unsqueeze() missing the axis to insert: give dim= (or axis=)")
    d = norm_axis(given, x.ndim + 1, "unsqueeze", x.shape)
    return _wrap(x, x.uop.reshape((*x.shape[:d], 1, *x.shape[d:])))


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if x.ndim == 0:
        return _wrap(x, x.uop.reshape((1,)))
    s, e = norm_axis(start_dim, x.ndim, "flatten", x.shape), norm_axis(end_dim, x.ndim, "flatten", x.shape)
    if s > e:
        raise AxisError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} for shape {fmt_shape(x.shape)}")
    return _wrap(x, x.uop.reshape((*x.shape[:s], math.prod(x.shape[s:e + 1]), *x.shape[e + 1:])))


def unflatten(x: Tensor, dim: int, sizes: Sequence[int]) -> Tensor:
    d = norm_axis(dim, x.ndim, "unflatten", x.shape)
    inner = resolve_reshape(tuple(sizes), x.shape[d], (x.shape[d],), "unflatten")
    return _wrap(x, x.uop.reshape(x.shape[:d] + inner + x.shape[d + 1 :]))


# ---------------------------------------------------------------- getitem


def getitem(x: Tensor, index: object) -> Tensor:
    """Basic indexing: ints, slices (any step), None and one Ellipsis. An int out of range raises IndexError."""
    idx = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, slice) and any(isinstance(v, UOp) for v in (i.start, i.stop, i.step)) for i in idx):
        return _symbolic_getitem(x, idx)
    for i in idx:
        if isinstance(i, bool) or not (i is None or i is Ellipsis or isinstance(i, (int, np.integer, slice))):
            kind = "a Tensor" if isinstance(i, tt.Tensor) else type(i).__name__
            raise TypeError(f"getitem: indices must be ints, slices, None or ..., got {kind}; for indexing by a "
                            f"tensor of positions use gather(dim, index)")
    if sum(i is Ellipsis for i in idx) > 1:
        raise IndexError("getitem: an index can only have a single ellipsis (...)")
    n_real = sum(i is not None and i is not Ellipsis for i in idx)
    if n_real > x.ndim:
        raise IndexError(f"getitem: too many indices for a tensor of shape {fmt_shape(x.shape)}: {x.ndim} axes but "
                         f"{n_real} indices")
    if Ellipsis in idx:
        e = idx.index(Ellipsis)
        idx = idx[:e] + (slice(None),) * (x.ndim - n_real) + idx[e + 1 :]
    else:
        idx = idx + (slice(None),) * (x.ndim - n_real)

    u = x.uop
    flips, begin, end = [], [], []
    strided: list[tuple[int, int]] = []  # per axis: (count, step)
    final: list[int] = []  # the result's shape
    axis = 0
    for i in idx:
        if i is None:
            final.append(1)
            continue
        size = x.shape[axis]
        if isinstance(size, UOp):  # a symbolic axis is kept whole (x[:n] shrinks it: _symbolic_getitem)
            if not (isinstance(i, slice) and i.start is None and i.stop is None and i.step in (None, 1)):
                raise VariableError(f"getitem: axis {axis} has symbolic size {size}; only ':' can index it")
            flips.append(False)
            begin.append(0)
            end.append(size)
            strided.append((1, 1))
            final.append(size)
            axis += 1
            continue
        if isinstance(i, slice):
            if i.step == 0:
                raise IndexError(f"getitem: slice step cannot be zero (index {i!r} on axis of size {size})")
            start, stop, step = i.indices(size)
            n = len(range(start, stop, step))
            if step < 0:  # flipped coordinates: element k of the flipped axis is element size-1-k
                start, step = size - 1 - start, -step
            flips.append(i.step is not None and i.step < 0)
            begin.append(start if n else 0)
            end.append(start + (n - 1) * step + 1 if n else 0)
            strided.append((n, step))
            final.append(n)
        else:
            k = int(i)
            if not -size <= k < size:
                raise IndexError(f"getitem: index {k} is out of range for axis {axis} with size {size} "
                                 f"(valid: {-size}..{size - 1})")
            k %= size
            flips.append(False)
            begin.append(k)
            end.append(k + 1)
            strided.append((1, 1))
        axis += 1
    u = u.flip(tuple(flips)) if any(flips) else u
    u = u.shrink(begin, end)
    if any(n > 1 and s > 1 for n, s in strided):
        # pad each strided axis to count*step, split it into (count, step) and keep step index 0
        u = u.pad([0] * len(strided), [n * s - (end[k] - begin[k]) if n > 1 and s > 1 else 0
                                       for k, (n, s) in enumerate(strided)])
        split = [d for n, s in strided for d in ((n, s) if n > 1 and s > 1 else (n,))]
        u = u.reshape(split)
        keep = [d if j == 0 or not (n > 1 and s > 1) else 1 for n, s in strided
                for j, d in enumerate((n, s) if n > 1 and s > 1 else (n,))]
        u = u.shrink([0] * len(split), keep)
    return _wrap(x, u.reshape(tuple(final)))


def _symbolic_getitem(x: Tensor, idx: tuple) -> Tensor:
    """Indexing with a symbolic slice (`x[:n]`, `x[a:b]`, step 1 only): the symbolic axes shrink first, then the
    rest indexes as usual."""
    if any(i is None or i is Ellipsis for i in idx) or len(idx) > x.ndim:
        raise VariableError("getitem: a symbolic slice works only with ints and slices, one per leading axis (no "
                            "None or ...); use shrink")
    ranges: list[tuple[int | UOp, int | UOp] | None] = [None] * x.ndim
    rest: list = []
    for k, i in enumerate(idx):
        if isinstance(i, slice) and any(isinstance(v, UOp) for v in (i.start, i.stop, i.step)):
            if i.step is not None and not (isinstance(i.step, int) and i.step == 1):
                raise VariableError(f"getitem: a symbolic slice needs step 1, got {i!r}")
            for v in (i.start, i.stop):
                if isinstance(v, int) and v < 0:
                    raise VariableError(f"getitem: a symbolic slice takes no negative bounds, got {i!r}")
            ranges[k] = (0 if i.start is None else i.start, x.shape[k] if i.stop is None else i.stop)
            rest.append(slice(None))
        else:
            rest.append(i)
    return getitem(shrink(x, ranges), tuple(rest))


def index_select(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """The slices of x at positions `index` (1-D, integer) along `dim`: out has x's shape with axis `dim`
    replaced by index's length (torch's index_select; `w.index_select(0, ids)` is an embedding lookup). The
    positions are data, read by the kernel (an INDEX node, lowered to a load at a loaded address), so the cost is
    the rows read, not rows x x.shape[dim] as a one-hot gather would be. A position outside 0..size-1 (negative
    included) reads zeros: a kernel cannot raise, and the read stays in bounds."""
    d = norm_axis(dim, x.ndim, "index_select", x.shape)
    if not isinstance(index, tt.Tensor) or not index.dtype.is_int:
        raise TypeError(f"index_select: index must be an integer Tensor, got "
                        f"{index.dtype.name if isinstance(index, tt.Tensor) else type(index).__name__}")
    if index.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got shape {fmt_shape(index.shape)}; flatten it and "
                         f"reshape the result")
    common_device("index_select", [x, index])
    order = (d, *(i for i in range(x.ndim) if i != d))
    u = x.uop if d == 0 else x.uop.permute(order)
    u = UOp(Ops.INDEX, (u, index.uop))
    if d:
        u = u.permute(tuple(order.index(i) for i in range(x.ndim)))
    return _wrap(x, u)


# ---------------------------------------------------------------- joining and splitting


def _tensors(x: Tensor | Sequence[Tensor], others: tuple) -> list[Tensor]:
    """Accept f(a, b, c), a.f(b, c) and f([a, b, c])."""
    if isinstance(x, (list, tuple)):
        return [*x, *others]
    return [x, *others]


def cat(x: Tensor | Sequence[Tensor], *others: Tensor, dim: int | None = None, axis: int | None = None) -> Tensor:
    """Join along an existing axis, `dim` or `axis` (default 0): each piece is padded to the full length at its
    offset and selected where a padded mask of its extent is true (a select, not a sum of zero-padded pieces, so
    -0.0 and nan survive)."""
    ts = _tensors(x, others)
    if not ts:
        raise ArgumentError("cat: needs at least one tensor")
    ref = ts[0]
    if ref.ndim == 0:
        raise ShapeError("cat: zero-dimensional tensors cannot be concatenated; use stack")
    d = norm_axis(alias_arg("cat", "dim", dim, "axis", axis) or 0, ref.ndim, "cat", ref.shape)
    for t in ts[1:]:
        if t.ndim != ref.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, ref.shape, strict=True)) if i != d):
            raise ShapeError(f"cat: shapes {', '.join(fmt_shape(t.shape) for t in ts)} differ outside axis {d}; all "
                             f"axes but the joined one must match")
    dev = common_device("cat", ts)
    dt = promote(*(t.dtype for t in ts))
    total = sum(t.shape[d] for t in ts)
    out: UOp | None = None
    off = 0
    for t in ts:
        if t.shape[d] == 0:
            continue
        before = [off if i == d else 0 for i in range(ref.ndim)]
        after = [total - off - t.shape[d] if i == d else 0 for i in range(ref.ndim)]
        piece = t.uop.cast(dt).pad(before, after)
        mask = const_uop(True, dtypes.bool, t.shape).pad(before, after)
        out = piece if out is None else mask.where(piece, out)
        off += t.shape[d]
    if out is None:
        out = ts[0].uop.cast(dt)
    return tt.Tensor._wrap(out, dev)


def stack(x: Tensor | Sequence[Tensor], *others: Tensor, dim: int | None = None, axis: int | None = None) -> Tensor:
    """Join along a new axis at `dim` or `axis` (default 0)."""
    ts = _tensors(x, others)
    if not ts:
        raise ArgumentError("stack: needs at least one tensor")
    for t in ts[1:]:
        if t.shape != ts[0].shape:
            raise ShapeError(f"stack: all shapes must be equal, got {', '.join(fmt_shape(t.shape) for t in ts)}")
    d = norm_axis(alias_arg("stack", "dim", dim, "axis", axis) or 0, ts[0].ndim + 1, "stack", ts[0].shape)
    return cat([unsqueeze(t, d) for t in ts], dim=d)


def repeat(x: Tensor, *repeats: int) -> Tensor:
    """Tile the tensor (torch's repeat, numpy's tile): a new axis per repeated one, expanded, then merged."""
    reps = need_concrete(shape_arg(repeats, "repeat"), "repeat")
    if len(reps) < x.ndim:
        raise ShapeError(f"repeat: {len(reps)} repeat counts for a tensor of shape {fmt_shape(x.shape)}; need at "
                         f"least {x.ndim}")
    if any(r < 0 for r in reps):
        raise ShapeError(f"repeat: repeat counts must be >= 0, got {reps}")
    src = (1,) * (len(reps) - x.ndim) + x.shape
    u = x.uop.reshape(tuple(d for s in src for d in (1, s)))
    u = u.expand(tuple(d for r, s in zip(reps, src, strict=True) for d in (r, s)))
    return _wrap(x, u.reshape(tuple(r * s for r, s in zip(reps, src, strict=True))))


def split(x: Tensor, sizes: int | Sequence[int], dim: int | None = None, *, axis: int | None = None
          ) -> tuple[Tensor, ...]:
    """Pieces of `sizes` elements along `dim` or `axis` (default 0; an int size: equal pieces, the last one
    smaller)."""
    d = norm_axis(alias_arg("split", "dim", dim, "axis", axis) or 0, x.ndim, "split", x.shape)
    n = x.shape[d]
    if isinstance(sizes, int):
        if sizes <= 0:
            raise ArgumentError(f"split: the piece size must be positive, got {sizes}")
        parts = [min(sizes, n - o) for o in range(0, n, sizes)] or [0]
    else:
        parts = [int(s) for s in sizes]
        if sum(parts) != n or any(p < 0 for p in parts):
            raise ShapeError(f"split: sizes {parts} must be non-negative and add up to {n}, the size of axis {d} of "
                             f"{fmt_shape(x.shape)}")
    out, off = [], 0
    for p in parts:
        out.append(shrink(x, [(off, off + p) if i == d else None for i in range(x.ndim)]))
        off += p
    return tuple(out)


def chunk(x: Tensor, chunks: int, dim: int | None = None, *, axis: int | None = None) -> tuple[Tensor, ...]:
    """At most `chunks` pieces of ceil(n / chunks) elements (torch's rule) along `dim` or `axis` (default 0)."""
    if not isinstance(chunks, int) or chunks <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    d = norm_axis(alias_arg("chunk", "dim", dim, "axis", axis) or 0, x.ndim, "chunk", x.shape)
    return split(x, max(1, math.ceil(x.shape[d] / chunks)), d)


def gather(x: Tensor, dim: int, index: Tensor) -> Tensor:
    """out[..., i, ...] = x[..., index[..., i, ...], ...] along `dim` (torch's gather): a read of x's flat storage
    at the positions sum(pos_k * stride_k) (pos_d = index, the others the element's own), an INDEX whose positions
    the kernel loads, so the forward is O(index elements) and the backward a scatter-add of that size (after a
    zero fill of x's shape). A position outside 0..x.shape[dim]-1 reads 0 (a kernel never reads out of bounds)."""
    d = norm_axis(dim, x.ndim, "gather", x.shape)
    if not isinstance(index, tt.Tensor) or not index.dtype.is_int:
        raise TypeError("gather: index must be an integer Tensor")
    if index.ndim != x.ndim or any(a > b for i, (a, b) in enumerate(zip(index.shape, x.shape, strict=True)) if i != d):
        raise ShapeError(f"gather: index shape {fmt_shape(index.shape)} must have the rank of {fmt_shape(x.shape)} "
                         f"and be no larger outside axis {d}")
    common_device("gather", [x, index])
    n, m, shape = x.numel(), index.numel(), tuple(index.shape)
    if m == 0 or n == 0:
        return _wrap(x, const_uop(0, x.dtype, shape))
    pos = flat_positions(tuple(x.shape), d, index)
    return _wrap(x, UOp(Ops.INDEX, (x.uop.reshape((n,)), pos)).reshape(shape))


def flat_positions(shape: tuple, d: int, index: Tensor) -> UOp:
    """The (index.numel(),) flat positions in a tensor of `shape` that index names along axis d (gather's and
    scatter's addressing): index there, each element's own position on the other axes; -1 (skipped by a
    scatter, read as 0 by INDEX) where index leaves 0..shape[d]-1."""
    from tensor.reduce import arange_uop

    n, ishape = math.prod(shape), tuple(index.shape)
    dt = dtypes.int64 if n >= 2**31 or index.dtype.itemsize == 8 else dtypes.int32
    strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
    i = index.uop if index.dtype is dt else index.uop.cast(dt)
    inside = (i.const_like(-1) < i) & (i < i.const_like(shape[d]))
    pos = i * i.const_like(strides[d]) if strides[d] != 1 else i
    for k, size in enumerate(ishape):
        if k != d and size > 1:
            own = arange_uop(size, dt) * strides[k] if strides[k] != 1 else arange_uop(size, dt)
            pos = pos + own.reshape(tuple(size if j == k else 1 for j in range(len(ishape)))).expand(ishape)
    return inside.where(pos, pos.const_like(-1)).reshape((math.prod(ishape),))


__all__ = ["cat", "chunk", "expand", "flatten", "flip", "gather", "getitem", "index_select", "pad", "permute",
           "repeat", "reshape", "reverse_axes", "shrink", "shrink_to", "split", "squeeze", "stack", "transpose",
           "unflatten", "unsqueeze"]
