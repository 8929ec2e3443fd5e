"""Multi-device expansion: a graph over n-tuple devices becomes per-device graphs joined by COPYs.

A value on a device tuple D = (d_0, ..., d_{n-1}) has a global shape S and a sharding axis (the `axis`
property, rewrite.props): with axis a, device i holds the i-th of n equal blocks of axis a (local shape S with
S[a] // n); with axis NULL every device holds all of S (replicated). After this stage no node lives on a device
tuple: each one is replaced by its n per-device pieces, and the scheduler sees ordinary single-device kernels
and COPYs, which run concurrently device by device (lower.parallel).

The rule set `multi_rules` runs children first. A rule fires on a node on a device tuple (or a COPY out of one)
whose sources are already expanded; it builds the node's pieces from its sources' pieces and returns the node
tagged `("shards", k)`, the spec's tag for temporary processing, with the pieces kept under k in the typed
context (`MultiContext`). The tagged node keeps the global shape, so every parent can still be built; a parent
on a single device (a COPY to one) gets its real single-device graph straight away. Finally `multi_expand` puts
each root on a device tuple in the SINK as `TUPLE(root, piece_0, ..., piece_{n-1})`, the root it stands for (its
shape, axis and devices; the spec checker allows no arg and no tag after a stage) and its pieces: the
scheduler gives each piece a buffer and joins them into one BUFFER on the tuple (lower.schedule.assemble).

What each op becomes, per device i (c = S[a] // n, the block size on the shard axis):
  elementwise      the op on the sources' pieces; a replicated (or device-less) source is cut to block i of the
                   shard axis first, a source broadcast along it is used as is
  RESHAPE          the local reshape (the shard boundary is kept: rewrite.props.reshape_axis)
  PERMUTE, EXPAND  the local op (a permute moving only length-1 axes is a reshape); PAD, SHRINK, FLIP too,
                   except along the shard axis: the result stays sharded on it (its length there must divide by
                   n), so device i's block is made from the part of the source it comes from (`region`), padded
                   or flipped in place (`_reblock`)
  REDUCE           the local reduce; over the shard axis, then the n partial results combined on every device
                   (`allreduce`: reduce_scatter + allgather, each chunk combined once in device order, so every
                   device's copy is bitwise the same); on a tuple with one device per MPI rank it is the direct
                   form with the combination its own kernel (CONTIGUOUS), which lower.mpi_exec recognises and
                   runs as one MPI Allreduce
  REPLICATED       on the shard axis (size n: one element per device): each device's piece, now replicated;
                   on other axes (and on a single device): the first slice, a SHRINK
  STORE, AFTER     per device, as elementwise ops: an assignment into a BUFFER on the tuple writes each device's
                   block in place (a replicated value is cut to the block)
  COPY             to a device tuple: block j of axis 0 assembled on d_j from the pieces that overlap it (each
                   piece's overlap cut out where it lives, copied, padded into place and summed); to one device:
                   the whole value assembled there (a replicated value's own piece when the device is in D)
Anything else on a device tuple raises ShardingError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from devices import spans_ranks
from rewrite import BufferArg, Ops, Rule, RuleSet, UOp, graph_rewrite, op
from rewrite.derive import fmt_shape
from rewrite.dtype import dtypes
from rewrite.errors import ShardingError
from rewrite.ops import GroupOp

Devices = tuple[str, ...]


@dataclass
class MultiContext:
    """The pieces of every expanded node, by the k of its `("shards", k)` tag."""

    pieces: dict[int, tuple[UOp, ...]] = field(default_factory=dict)

    def tagged(self, u: UOp, pieces: tuple[UOp, ...]) -> UOp:
        k = len(self.pieces)
        self.pieces[k] = pieces
        return u.replace(tag=("shards", k))


@dataclass(frozen=True)
class Layout:
    """Where a value lives: `devices` a tuple (then `axis` is its shard axis or None for replicated), a single
    device name, or None for a device-less value (constants), which every device can compute."""

    devices: Devices | str | None
    axis: int | None
    shape: tuple


def _is_shards(u: UOp) -> bool:
    return isinstance(u.tag, tuple) and len(u.tag) == 2 and u.tag[0] == "shards"


def _pieces(ctx: MultiContext, u: UOp) -> tuple[UOp, ...] | None:
    return ctx.pieces[cast(tuple, u.tag)[1]] if _is_shards(u) else None


def _layout(u: UOp) -> Layout:
    d = u.device
    return Layout(d, u.axis if isinstance(d, tuple) else None, u.shape)


def _int_shape(u: UOp, what: str) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in u.shape):
        raise ShardingError(f"{what}: multi-device tensors need concrete shapes, got {fmt_shape(u.shape)}")
    return cast("tuple[int, ...]", u.shape)


def local_shape(shape: tuple, axis: int | None, n: int) -> tuple:
    """The shape of one device's piece."""
    return shape if axis is None else (*shape[:axis], shape[axis] // n, *shape[axis + 1 :])


def _block(shape: tuple, axis: int, n: int, i: int) -> list[tuple[int, int]]:
    """The box of block i of `axis` split n ways (the full range on every other axis)."""
    c = shape[axis] // n
    return [(i * c, (i + 1) * c) if k == axis else (0, d) for k, d in enumerate(shape)]


def _combine(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.OR if a.dtype is dtypes.bool else Ops.ADD, (a, b))


def region(ctx: MultiContext, x: UOp, box: list[tuple[int, int]], dev: str) -> UOp:
    """The part `box` (per axis [lo, hi) of x's global shape) of the value x, as a graph on device `dev`."""
    pieces, lay = _pieces(ctx, x), _layout(x)
    begin, end = [lo for lo, _ in box], [hi for _, hi in box]
    if pieces is None:  # a single device's value, or a device-less one
        part = x.shrink(begin, end)
        return part if lay.devices is None or lay.devices == dev else part.copy(dev)
    devs = cast(Devices, lay.devices)
    if lay.axis is None:  # replicated: the local piece when dev holds one
        i = devs.index(dev) if dev in devs else 0
        part = pieces[i].shrink(begin, end)
        return part if devs[i] == dev else part.copy(dev)
    a, n = lay.axis, len(devs)
    c = lay.shape[a] // n
    lo, hi = box[a]
    out: UOp | None = None
    for i in range(n):
        s, e = max(lo, i * c), min(hi, (i + 1) * c)
        if s >= e:
            continue
        part = pieces[i].shrink([s - i * c if k == a else b for k, b in enumerate(begin)],
                                [e - i * c if k == a else b for k, b in enumerate(end)])
        if devs[i] != dev:
            part = part.copy(dev)
        part = part.pad([s - lo if k == a else 0 for k in range(len(box))],
                        [hi - e if k == a else 0 for k in range(len(box))])
        out = part if out is None else _combine(out, part)
    assert out is not None  # box is inside the shape, so some block overlaps it
    return out


def _devices_of(u: UOp, what: str) -> Devices:
    devs: Devices | None = None
    for s in u.src:
        d = s.device
        if isinstance(d, str):
            raise ShardingError(f"{what}: operands live on {d} and on a device tuple; move them to one place first "
                                f"(x.to(devices) replicates x, x.shard(devices, axis) splits it)")
        if isinstance(d, tuple):
            if devs is not None and d != devs:
                raise ShardingError(f"{what}: operands live on different device tuples {devs} and {d}; move one "
                                    f"with .to({devs}) or .shard({devs}, axis)")
            devs = d
    assert devs is not None  # the rule only fires on a node with a tuple-device source
    return devs


def _elementwise(ctx: MultiContext, u: UOp) -> UOp:
    devs = _devices_of(u, u.op.name)
    n, b, shape = len(devs), u.axis, u.shape
    if b is not None:
        _check_divisible(u.op.name, shape, b, devs)
    srcs_per_dev: list[list[UOp]] = [[] for _ in range(n)]
    for s in u.src:
        ps, lay = _pieces(ctx, s), _layout(s)
        bs = None if b is None else b - (len(shape) - len(s.shape))
        for i in range(n):
            if ps is not None and lay.axis == bs and bs is not None:
                srcs_per_dev[i].append(ps[i])
            elif bs is None or bs < 0 or s.shape[bs] == 1:  # broadcast along the shard axis, or none
                if ps is not None and lay.axis is not None:
                    raise ShardingError(_mismatch(u, s, b))
                srcs_per_dev[i].append(ps[i] if ps is not None else s)
            elif lay.axis is None:
                srcs_per_dev[i].append(region(ctx, s, _block(_int_shape(s, u.op.name), bs, n, i), devs[i]))
            else:
                raise ShardingError(_mismatch(u, s, b))
    return ctx.tagged(u, tuple(u.replace(src=tuple(ss), tag=None) for ss in srcs_per_dev))


def _store(ctx: MultiContext, u: UOp) -> UOp:
    """STORE(target, value) / AFTER(target, stores...) into a BUFFER on the tuple (sharded on axis 0): per device,
    the store of its block of the value into its own shard BUFFER, a replicated value cut to the block."""
    t = u.src[0]
    devs = _devices_of(u, u.op.name)
    n, tps = len(devs), _pieces(ctx, t)
    if tps is None or t.axis != 0:
        raise ShardingError(f"{u.op.name}: an assignment on {devs} must store into a realized BUFFER on the tuple "
                            f"(sharded on axis 0), got a target {fmt_shape(t.shape)} on axis {t.axis}")
    shape = _int_shape(t, u.op.name)
    # the shard BUFFERs (or their pending assignments) under the pieces' local reshape
    targets = [p.src[0] if p.op is Ops.RESHAPE else p for p in tps]
    out = []
    for i in range(n):
        srcs = [targets[i]]
        for s in u.src[1:]:
            ps = _pieces(ctx, s)
            if ps is not None and s.op is Ops.STORE:
                v = ps[i]
            elif ps is not None and s.axis == 0:
                v = ps[i].reshape(targets[i].shape)
            elif ps is None or s.axis is None:
                v = region(ctx, s, _block(shape, 0, n, i), devs[i]).reshape(targets[i].shape)
            else:
                raise ShardingError(_mismatch(u, s, 0))
            srcs.append(v)
        piece = u.replace(src=tuple(srcs), tag=None)
        out.append(piece if u.op is Ops.STORE else piece.reshape(tps[i].shape))
    return ctx.tagged(u, tuple(out))


def _mismatch(u: UOp, s: UOp, b: int | None) -> str:
    return (f"{u.op.name}: an operand {fmt_shape(s.shape)} is sharded on axis {s.axis} but the result "
            f"{fmt_shape(u.shape)} on axis {b}; reshard it with .shard(devices, {b}) (or replicate with .to(devices))")


def _check_divisible(what: str, shape: tuple, axis: int, devs: Devices) -> None:
    d = shape[axis]
    if not isinstance(d, int) or d % len(devs) != 0:
        raise ShardingError(f"{what}: axis {axis} of {fmt_shape(shape)} has {d} elements, not divisible by the "
                            f"{len(devs)} devices {devs}; pad it to a multiple of {len(devs)} or shard another axis")


def _local_permute(p: UOp, order: tuple[int, ...]) -> UOp:
    """A device's piece permuted; a reshape when only axes of length 1 move (`buffer_view` for an axis >= 1), so
    a view of a tuple BUFFER or of an assignment to it stays its shard when realized, not a copy."""
    shape = p.shape
    kept = [i for i in order if not (isinstance(shape[i], int) and shape[i] == 1)]
    if all(isinstance(d, int) for d in shape) and kept == sorted(kept):
        return (p.src[0] if p.op is Ops.RESHAPE else p).reshape(tuple(shape[i] for i in order))
    return p.permute(order)


def _movement(ctx: MultiContext, u: UOp) -> UOp:
    x = u.src[0]
    ps = _pieces(ctx, x)
    if ps is None:  # a single-device source can not meet a tuple-device op
        raise ShardingError(f"{u.op.name}: source on {x.device} in a graph on a device tuple")
    devs = cast(Devices, x.device)
    n, a, b = len(devs), x.axis, u.axis
    if u.op is Ops.RESHAPE:
        new = local_shape(u.shape, b, n)  # a reshape of a reshape is one reshape (an assignment's view stays it)
        out = tuple((p.src[0] if p.op is Ops.RESHAPE else p).reshape(new) for p in ps)
    elif u.op is Ops.PERMUTE:
        out = tuple(_local_permute(p, u.int_tuple_arg) for p in ps)
    elif u.op is Ops.EXPAND:
        new = local_shape(u.shape, b, n)
        out = tuple(p.expand(new) for p in ps)
    elif u.op in (Ops.PAD, Ops.SHRINK):
        lo, hi = (cast(tuple, s.arg)[0] if s.op is Ops.VCONST else None for s in u.src[1:3])
        if lo is None or hi is None:
            raise ShardingError(f"{u.op.name}: symbolic bounds on a device tuple are not supported")
        if a is not None and (lo[a] != 0 or hi[a] != (0 if u.op is Ops.PAD else x.shape[a])):
            out = _reblock(ctx, u, x, devs, a, lo, hi)
        elif u.op is Ops.PAD:
            out = tuple(p.pad(lo, hi) for p in ps)
        else:
            out = tuple(p.shrink(lo, local_shape(hi, a, n)) for p in ps)
    elif u.op is Ops.FLIP:
        if a is not None and u.flip_flags[a]:
            out = _reblock(ctx, u, x, devs, a, (), ())
        else:
            out = tuple(p.flip(u.flip_flags) for p in ps)
    else:
        raise ShardingError(f"{u.op.name}: not supported on a device tuple yet")
    return ctx.tagged(u, out)


def _reblock(ctx: MultiContext, u: UOp, x: UOp, devs: Devices, a: int, lo: tuple, hi: tuple) -> tuple[UOp, ...]:
    """PAD, SHRINK or FLIP (`u`, with bounds lo and hi) of x along its shard axis a: the result is sharded on a
    too, so device i's piece is block i of the result, made from the part of x it comes from (`region`: cut where
    it lives, copied, put in place), padded where it reaches past x (PAD), flipped (FLIP), with the op's part on
    the other axes done locally."""
    n, shape = len(devs), _int_shape(x, u.op.name)
    _check_divisible(u.op.name, u.shape, a, devs)
    size, c = shape[a], cast(int, u.shape[a]) // n
    other = range(len(shape))
    out = []
    for i, d in enumerate(devs):
        k0, k1 = i * c, (i + 1) * c  # block i of the result, along a
        if u.op is Ops.SHRINK:
            s0, s1 = lo[a] + k0, lo[a] + k1
        elif u.op is Ops.PAD:
            s0, s1 = max(k0 - lo[a], 0), min(k1 - lo[a], size)
        else:
            s0, s1 = size - k1, size - k0
        if s0 >= s1:  # all padding
            zero = UOp.const(0, x.dtype).reshape((1,) * len(shape))
            block = zero.expand(tuple(c if k == a else dim for k, dim in enumerate(shape)))
        else:
            block = region(ctx, x, [(s0, s1) if k == a else (0, dim) for k, dim in enumerate(shape)], d)
            if u.op is Ops.PAD and (s0 + lo[a] > k0 or s1 + lo[a] < k1):
                block = block.pad([s0 + lo[a] - k0 if k == a else 0 for k in other],
                                  [k1 - s1 - lo[a] if k == a else 0 for k in other])
        if u.op is Ops.SHRINK:
            block = block.shrink([0 if k == a else lo[k] for k in other], [c if k == a else hi[k] for k in other])
        elif u.op is Ops.PAD and any(lo[k] or hi[k] for k in other if k != a):
            block = block.pad([0 if k == a else lo[k] for k in other], [0 if k == a else hi[k] for k in other])
        elif u.op is Ops.FLIP:
            block = block.flip(u.flip_flags)
        out.append(block)
    return tuple(out)


def _reduce(ctx: MultiContext, u: UOp) -> UOp:
    x = u.src[0]
    ps = cast("tuple[UOp, ...]", _pieces(ctx, x))
    devs = cast(Devices, x.device)
    # a reduction over axes of one element is its source (REDUCE keeps the axes): a shard combined as it is
    partial = tuple(p if all(p.shape[a] == 1 for a in u.reduce_axes) else p.reduce(u.reduce_op, u.reduce_axes)
                    for p in ps)
    if x.axis is None or x.axis not in u.reduce_axes:
        if spans_ranks(devs) and u.reduce_op is Ops.ADD and u.dtype is not dtypes.bool:
            split = [_sum_of_parts(p, u.reduce_axes, d) for p, d in zip(ps, devs, strict=True)]
            if all(q is not None for q in split):
                return ctx.tagged(u, cast("tuple[UOp, ...]", tuple(split)))
        return ctx.tagged(u, partial)
    return ctx.tagged(u, allreduce(partial, devs, u.reduce_op))


def _sum_of_parts(p: UOp, axes: tuple[int, ...], dev: str) -> UOp | None:
    """The sum over `axes` of a piece that COPY assembled from parts padded into place (`region`: an ADD of PADs,
    each part one element long on every axis of `axes`, padded only along them, no two at the same place), maybe
    CAST (a sum that widens its dtype), as the ADD of the parts themselves in the same order, its own kernel
    (CONTIGUOUS), each part copied (one that lives here too), a CAST done where the part's data lives, before it
    is cut and copied: the form of the spec's reduce_scatter across MPI ranks that lower.mpi_gather runs as one
    MPI Reduce_scatter. Adding the parts is the sum over the axes, the padding being zeros; as the parts do not
    overlap, casting each is casting their sum. None when `p` is not of that form."""
    dtype = p.dtype
    while p.op is Ops.CAST:
        p = p.src[0]
    leaves: list[UOp] = []
    stack = [p]
    while stack:
        u = stack.pop()
        if u.op is Ops.ADD and u.shape == p.shape:
            stack.extend(reversed(u.src))
        else:
            leaves.append(u)
    if len(leaves) < 2:
        return None
    parts, places = [], set()
    for leaf in leaves:
        q, lo = leaf, (0,) * len(p.shape)
        if leaf.op is Ops.PAD:
            pads = _bounds(leaf)
            if pads is None or any((pads[0][k] or pads[1][k]) and k not in axes for k in range(len(p.shape))):
                return None
            q, lo = leaf.src[0], tuple(pads[0])
        if len(q.shape) != len(p.shape) or any(q.shape[a] != 1 for a in axes):
            return None
        places.add(tuple(lo[a] for a in axes))
        z = q.src[0] if q.op is Ops.COPY else q
        if z.dtype is not dtype:  # cast where the data lives, the whole source at once (one kernel, not one a part)
            b = _bounds(z) if z.op is Ops.SHRINK else None
            z = z.cast(dtype) if b is None else z.src[0].cast(dtype).contiguous().shrink(*b)
        parts.append(z.copy(dev))
    if len(places) != len(leaves):
        return None
    acc = parts[0]
    for q in parts[1:]:
        acc = UOp(Ops.ADD, (acc, q))
    return acc.contiguous()


def _bounds(u: UOp) -> tuple[list[int], list[int]] | None:
    """A SHRINK's begin and end (a PAD's before and after), None when they are symbolic."""
    lo, hi = u.src[1:3]
    if lo.op is not Ops.VCONST or hi.op is not Ops.VCONST:
        return None
    return list(cast(tuple, lo.arg)[0]), list(cast(tuple, hi.arg)[0])


# ------------------------------------------------------------------ the allreduce over the shard axis

ALLREDUCE_CHUNK_MIN = 1 << 14
"""Elements per device below which the allreduce is direct (every device combines every partial): for small
values the extra copies and kernels of reduce_scatter + allgather cost more time than the data they save."""


def allreduce(partials: tuple[UOp, ...], devs: Devices, op: Ops) -> tuple[UOp, ...]:
    """The partial results `partials[i]` (one per device of `devs`, same shape) combined with `op` on every
    device, each device's copy bitwise the same. Reduce_scatter + allgather: the partials are cut into n chunks
    of their flat form, device j combines chunk j of every partial in device order and sends it to the others,
    which moves 2 (n - 1) / n of a partial per device instead of n - 1. A partial that does not split into n
    chunks of ALLREDUCE_CHUNK_MIN elements or more takes the direct form, and so does a tuple across MPI ranks
    (one MPI Allreduce runs it: lower.mpi_exec)."""
    n, shape = len(devs), partials[0].shape
    size = 1
    for d in shape:
        size = size * d if isinstance(d, int) else -1
    if n == 1 or size < 0 or size % n or size // n < ALLREDUCE_CHUNK_MIN or spans_ranks(devs):
        return _allreduce_direct(partials, devs, op)
    c = size // n
    flat = [p.reshape((size,)) for p in partials]
    chunks = []
    for j, d in enumerate(devs):  # reduce_scatter: device j combines chunk j, in device order
        acc: UOp | None = None
        for i, p in enumerate(flat):
            q = p.shrink([j * c], [(j + 1) * c])
            q = q if i == j else q.copy(d)
            acc = q if acc is None else UOp(op, (acc, q))
        chunks.append(cast(UOp, acc))
    out = []
    for i, d in enumerate(devs):  # allgather: each chunk copied into place on every device
        full: UOp | None = None
        for j, ch in enumerate(chunks):
            q = (ch if i == j else ch.copy(d)).pad([j * c], [size - (j + 1) * c])
            full = q if full is None else _combine(full, q)
        out.append(cast(UOp, full).reshape(shape))
    return tuple(out)


def _allreduce_direct(partials: tuple[UOp, ...], devs: Devices, op: Ops) -> tuple[UOp, ...]:
    """Every device combines every partial, in device order (so every device's copy is bitwise the same)."""
    out = []
    for i, d in enumerate(devs):
        acc: UOp | None = None
        for j, p in enumerate(partials):
            q = p if i == j else p.copy(d)
            acc = q if acc is None else UOp(op, (acc, q))
        # across MPI ranks the combination is its own kernel, which lower.mpi_exec runs as one MPI Allreduce
        out.append(cast(UOp, acc).contiguous() if spans_ranks(devs) else cast(UOp, acc))
    return tuple(out)


def first_slice(x: UOp, axes: tuple[int, ...]) -> UOp:
    """REPLICATED on one device: the value is the same along `axes`, so its first slice."""
    return x.shrink([0] * len(x.shape), [1 if i in axes else d for i, d in enumerate(x.shape)])


def _replicated(ctx: MultiContext, u: UOp) -> UOp:
    x = u.src[0]
    ps = cast("tuple[UOp, ...]", _pieces(ctx, x))
    devs, a = cast(Devices, x.device), x.axis
    axes = u.int_tuple_arg
    if a is not None and a in axes and x.shape[a] != len(devs):
        raise ShardingError(f"REPLICATED: axis {a} of {fmt_shape(x.shape)} is the shard axis over {len(devs)} "
                            f"devices, so it must have exactly {len(devs)} elements (one per device), not "
                            f"{x.shape[a]}")
    rest = tuple(i for i in axes if i != a)
    return ctx.tagged(u, tuple(first_slice(p, rest) if rest else p for p in ps))


def _copy(ctx: MultiContext, u: UOp) -> UOp:
    x, target = u.src[0], u.arg
    shape = _int_shape(x, "COPY")
    full = [(0, d) for d in shape]
    if isinstance(target, str):
        return region(ctx, x, full, target)
    devs = cast(Devices, target)
    if not shape:
        raise ShardingError(f"COPY: a 0-d value cannot be sharded over {devs}; reshape it to (1,) and replicate "
                            f"it (.to(devices))")
    _check_divisible("COPY", shape, 0, devs)
    return ctx.tagged(u, tuple(region(ctx, x, _block(shape, 0, len(devs), j), d) for j, d in enumerate(devs)))


def _buffer(ctx: MultiContext, u: UOp) -> UOp:
    from lower import buffers

    devs = cast(Devices, u.buf_arg.device)
    shape = _int_shape(u, "BUFFER")
    _check_divisible("BUFFER", shape, 0, devs)
    try:
        parts = buffers.shards(u)
    except KeyError as e:
        raise ShardingError(f"BUFFER on {devs}: {e.args[0]}") from None
    local = local_shape(shape, 0, len(devs))
    return ctx.tagged(u, tuple(p.reshape(local) for p in parts))


def _on_tuple(u: UOp) -> bool:
    """Not expanded yet, and on a device tuple (or a COPY out of one, or an op mixing one with other devices)."""
    return u.tag is None and (isinstance(u.device, tuple) or any(isinstance(s.device, tuple) for s in u.src))


def _unsupported(u: UOp) -> UOp:
    raise ShardingError(f"{u.op.name}: not supported on a device tuple {u.device} yet (multi-device graphs take "
                        f"elementwise, movement, REDUCE, REPLICATED, COPY and CONTIGUOUS ops)")


_ELEMENTWISE = GroupOp.ALU | {Ops.CAST, Ops.BITCAST, Ops.CONTIGUOUS, Ops.DETACH, Ops.CONTIGUOUSBACKWARD}

# fmt: off
multi_rules = RuleSet("multi", [
    Rule("shard-buffer",      op.BUFFER(name="u"),                                   _buffer,      when=_on_tuple),
    Rule("shard-copy",        op.COPY(name="u"),                                     _copy,        when=_on_tuple),
    Rule("shard-elementwise", op[_ELEMENTWISE](name="u"),                            _elementwise, when=_on_tuple),
    Rule("shard-store",       op[{Ops.STORE, Ops.AFTER}](name="u"),                  _store,       when=_on_tuple),
    Rule("shard-reduce",      op.REDUCE(name="u"),                                   _reduce,      when=_on_tuple),
    Rule("shard-replicated",  op.REPLICATED(name="u"),                               _replicated,  when=_on_tuple),
    Rule("shard-movement",    op[Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP](name="u"),
         _movement, when=_on_tuple),
    Rule("shard-unsupported", op[set(Ops) - {Ops.SINK, Ops.TUPLE}](name="u"),         _unsupported, when=_on_tuple),
])
# fmt: on


def _replicated_single(u: UOp) -> UOp:
    return first_slice(u.src[0], u.int_tuple_arg)


def _on_one_device(u: UOp) -> bool:
    return not isinstance(u.device, tuple)


single_replicated_rules = RuleSet("replicated", [
    Rule("replicated-first-slice", op.REPLICATED(name="u"), _replicated_single, when=_on_one_device),
])


def _needs_expansion(roots: list[UOp]) -> bool:
    return any(isinstance(u.device, tuple) or u.op is Ops.REPLICATED for u in UOp.toposort_of(roots))


def multi_expand(graph: UOp) -> UOp:
    """The graph stage: `graph` (a SINK of roots) with every node on a device tuple replaced by per-device
    pieces; a root on a tuple becomes `TUPLE(root, pieces...)`."""
    if not _needs_expansion(list(graph.src)):
        return graph
    ctx = MultiContext()
    out = graph_rewrite(graph, multi_rules, ctx, name="multi")
    roots = []
    for r, orig in zip(out.src, graph.src, strict=True):
        ps = _pieces(ctx, r)
        if ps is None:
            roots.append(r)
            continue
        devs = cast(Devices, orig.device)
        # a device-less piece (a constant) is computed on its device and copied into place
        ps = tuple(p if p.device is not None else p.copy(d) for p, d in zip(ps, devs, strict=True))
        roots.append(UOp(Ops.TUPLE, (orig, *ps)))
    return graph_rewrite(UOp.sink(*roots), single_replicated_rules, name="replicated")


def flat_roots(roots: list[UOp]) -> list[UOp]:
    """The roots with each `TUPLE(root, pieces...)` replaced by its pieces."""
    out: list[UOp] = []
    for r in roots:
        out += list(r.src[1:]) if r.op is Ops.TUPLE else [r]
    return out


def storage_shape(shape: tuple, axis: int | None, n: int) -> tuple:
    """The shape of the BUFFER on the device tuple that holds a value of `shape` sharded on `axis` (axis 0 is
    the BUFFER's own): the shape itself for axis 0, else (n, *local shape), one block per device."""
    return shape if axis == 0 else (n, *local_shape(shape, axis, n))


def buffer_view(buf: UOp, shape: tuple, axis: int | None) -> UOp:
    """The value of `shape` sharded on `axis` that the tuple BUFFER `buf` (storage_shape) holds: `buf` itself for
    axis 0, the per-device blocks moved into place for another axis, one block replicated for NULL."""
    if axis == 0:
        return buf
    if axis is None:
        return buf.replicated(0).reshape(shape)
    order = (*range(1, axis + 1), 0, *range(axis + 1, len(shape) + 1))
    return buf.permute(order).reshape(shape)


def storage_value(v: UOp, axis: int | None, n: int) -> UOp:
    """`v` (sharded on `axis` over n devices) laid out as the tuple BUFFER holding it (storage_shape), the inverse
    of `buffer_view`: for NULL every device's block a copy of v; for an axis a >= 1, axis a split into (n, block)
    with the n moved to the front."""
    shape = tuple(v.shape)
    if axis == 0:
        return v
    if axis is None:
        return v.reshape((1, *shape)).expand((n, *shape))
    split = (*shape[:axis], n, shape[axis] // n, *shape[axis + 1:])
    return v.reshape(split).permute((axis, *range(axis), *range(axis + 1, len(split))))


def view_base(u: UOp) -> UOp | None:
    """The tuple BUFFER under a `buffer_view`, or None when `u` is not one."""
    if (u.op is Ops.RESHAPE and (r := u.src[0]).op is Ops.REPLICATED and (x := r.src[0]).op is Ops.BUFFER
            and u.tag is None and r.arg == (0,) and r.tag is None and isinstance(cast(BufferArg, x.arg).device, tuple)):
        return x  # what buffer_view makes for NULL (an allreduce's result), checked first
    x = u
    while x.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.REPLICATED):
        x = x.src[0]
    if x.op is not Ops.BUFFER or not isinstance(x.buf_arg.device, tuple):  # a BUFFER's device is its arg's
        return None
    if u is x:  # axis 0: the buffer itself
        return x
    r = u.src[0]
    if (u.op is Ops.RESHAPE and u.tag is None and r.op is Ops.REPLICATED and r.arg == (0,) and r.tag is None
            and r.src[0] is x):  # what buffer_view makes for NULL, checked without building it again
        return x
    axis = u.axis
    if tuple(x.shape) != tuple(storage_shape(u.shape, axis, len(x.buf_arg.device))):  # another layout's storage
        return None
    return x if u is buffer_view(x, u.shape, axis) else None


__all__ = ["ALLREDUCE_CHUNK_MIN", "Layout", "MultiContext", "allreduce", "buffer_view", "first_slice", "flat_roots",
           "local_shape", "multi_expand", "multi_rules", "region", "storage_shape", "storage_value", "view_base"]
