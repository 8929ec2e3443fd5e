"""Multi-device tensors: a tensor on an n-tuple of devices, sharded along one axis or replicated.

A Tensor whose device is a tuple D = (d_0, ..., d_{n-1}) has its full (global) shape; its UOp's `axis` says how
the devices hold it: axis a, device i holds the i-th of n equal blocks of axis a; axis None, every device holds
all of it. Every op works on such tensors as on one device, and the lowering (lower.multi) turns the graph into
per-device kernels plus COPYs: elementwise ops and reductions along other axes stay on each device, a reduction
along the shard axis combines the devices' partial results (an allreduce: the result is replicated), and
operands must share the device tuple and the shard axis (a replicated operand is cut to each device's block).

    x.shard(D, axis)   split x along axis over D (COPY to D reshards with axis 0; another axis is moved there
                       and back); axis=None replicates
    x.to(D)            replicate x on every device of D (the spec's broadcast); x.to(d) gathers onto one device
    x.shard_like(y)    x laid out as y is (y's devices and axis)
    x.copy(D), x.replicated(*axes)   the spec's COPY and REPLICATED, for writing collectives as the spec does

The collectives below are the spec's "Multi-Device Collectives" written literally with those ops (n devices,
T of shape (s,)); `Tensor.replicated` drops the replicated axes as `sum` drops reduced ones, so the shapes are
the spec's comments'.
"""

from __future__ import annotations

import sys
import weakref
from typing import cast

import tensor.tensor as tt
from lower import mpi_cache as _mpi_cache
from rewrite.derive import fmt_shape
from rewrite.errors import DeviceError, ShardingError
from rewrite.uop import UOp
from tensor import jit as _jit
from tensor.helpers import Device, canonical_device, norm_axis

Tensor = tt.Tensor
_getrefcount, _getweakrefcount = sys.getrefcount, weakref.getweakrefcount


def _devices(devices: Device, what: str) -> tuple[str, ...]:
    d = canonical_device(devices)
    if not isinstance(d, tuple):
        raise DeviceError(f"{what}: needs a tuple of devices such as ('cpu:0', 'cpu:1'), got {d!r}")
    return d


def replicate_uop(u: UOp, devs: tuple[str, ...]) -> UOp:
    """u (any device, or none) replicated on every device of `devs`: the spec's broadcast, for any shape."""
    n, shape = len(devs), u.shape
    return u.reshape((1, *shape)).expand((n, *shape)).copy(devs).replicated(0).reshape(shape)


def shard_uop(u: UOp, devs: tuple[str, ...], axis: int) -> UOp:
    """u split along `axis` over `devs` (a COPY to a device tuple reshards with axis 0)."""
    if u.shape[axis] % len(devs) != 0:
        raise ShardingError(f"shard: axis {axis} of {fmt_shape(u.shape)} has {u.shape[axis]} elements, not divisible "
                            f"by the {len(devs)} devices {devs}; pad the tensor to a multiple of {len(devs)} along "
                            f"axis {axis} or shard another axis")
    if axis == 0:
        return u.copy(devs)
    order = (axis, *(i for i in range(len(u.shape)) if i != axis))
    back = tuple(order.index(i) for i in range(len(u.shape)))
    return u.permute(order).copy(devs).permute(back)


def shard(x: Tensor, devices: Device, axis: int | None = 0) -> Tensor:
    """x split along `axis` over the device tuple `devices` (device i holds the i-th block); `axis=None`
    replicates x on every device. The axis must divide evenly among the devices."""
    devs = _devices(devices, "shard")
    if axis is None:
        return to(x, devs)
    if x.ndim == 0:
        raise ShardingError(f"shard: a 0-d tensor has no axis to split over {devs}; use axis=None to replicate it")
    a = norm_axis(axis, x.ndim, "shard", x.shape)
    if x.device == devs and x.uop.axis == a:
        return x
    return Tensor._wrap(shard_uop(x.uop, devs, a), devs)


def to(x: Tensor, device: Device) -> Tensor:
    """The same data on `device`: one device (a COPY, gathering a multi-device tensor), or every device of a
    tuple (replicated); self when it is already laid out so."""
    dev = canonical_device(device)
    if isinstance(dev, tuple):
        if x.device == dev and x.uop.axis is None and isinstance(x.uop.device, tuple):
            return x
        return Tensor._wrap(replicate_uop(x.uop, dev), dev)
    return x if dev == x.device else Tensor._wrap(x.uop.copy(dev), dev)


def shard_like(x: Tensor, y: Tensor) -> Tensor:
    """x laid out as y: on y's devices, split along y's shard axis (replicated when y is)."""
    if not isinstance(y.device, tuple):
        return to(x, y.device)
    if x.shape != y.shape:
        raise ShardingError(f"shard_like: x {fmt_shape(x.shape)} and y {fmt_shape(y.shape)} differ in shape; "
                            f"shard x explicitly with x.shard(devices, axis)")
    return shard(x, y.device, y.uop.axis if isinstance(y.uop.device, tuple) else None)


def copy(x: Tensor, device: Device) -> Tensor:
    """The spec's COPY: to a device tuple it reshards with axis 0 (device i gets the i-th block of axis 0); to one
    device it gathers. The shape never changes."""
    dev = canonical_device(device)
    u = x.uop
    if isinstance(dev, tuple) and (not x.shape or x.shape[0] % len(dev)):
        raise ShardingError(f"copy: COPY to {dev} splits axis 0, but {fmt_shape(x.shape)} has "
                            f"{x.shape[0] if x.shape else 'no'} elements there, not a multiple of {len(dev)}; "
                            f"reshape so axis 0 divides evenly, or replicate with .to(devices)")
    if isinstance(x.device, tuple) and not isinstance(u.device, tuple):
        u = replicate_uop(u, x.device)  # a device-less graph (constants) on a tuple: replicated
    return Tensor._wrap(u.copy(dev), dev)


def replicated(x: Tensor, *axes: int) -> Tensor:
    """The spec's REPLICATED: x is the same along `axes` (on the shard axis: every device's block is the same),
    which are dropped, as `sum` drops reduced axes."""
    ax = tuple(sorted({norm_axis(a, x.ndim, "replicated", x.shape) for a in axes}))
    u = x.uop.replicated(*ax)
    return Tensor._wrap(u.reshape(tuple(d for i, d in enumerate(x.shape) if i not in ax)), x.device)


# ------------------------------------------------------------------ the spec's collectives, literally


def _n(t: Tensor, what: str) -> tuple[tuple[str, ...], int]:
    if not isinstance(t.device, tuple):
        raise DeviceError(f"{what}: T must live on a device tuple (shard it first), got one on {t.device}")
    return t.device, len(t.device)


def broadcast(T: Tensor, D: Device) -> Tensor:
    """T (s,) on one device replicated to all n devices: (s,) on D, axis None."""
    devs = _devices(D, "broadcast")
    n, s = len(devs), T.shape[0]
    return T.reshape(1, s).expand(n, s).copy(devs).replicated(0)


def scatter(T: Tensor, D: Device) -> Tensor:
    """T (s,) on one device split into n chunks, one per device: (s,) on D, axis 0."""
    return T.copy(_devices(D, "scatter"))


def gather(T: Tensor) -> Tensor:
    """All shards of T ((n*s,) on D, axis 0) collected on D[0]: (n*s,), axis None."""
    D, _ = _n(T, "gather")
    return T.copy(D[0])


def reduce(T: Tensor) -> Tensor:
    """gather + sum: the devices' (s,) blocks summed on D[0]."""
    _, n = _n(T, "reduce")
    s = T.shape[0] // n
    return gather(T).reshape(n, s).sum(0)


def allgather(T: Tensor) -> Tensor:
    """All shards collected and replicated to every device: (n*s,) on D, axis None."""
    D, n = _n(T, "allgather")
    ns = T.shape[0]
    return T.reshape(1, ns).expand(n, ns).copy(D).replicated(0)


def reduce_scatter(T: Tensor) -> Tensor:
    """The devices' (s,) blocks summed, the sum scattered: (s,) on D, axis 0 (s must divide by n)."""
    D, n = _n(T, "reduce_scatter")
    s = T.shape[0] // n
    if s % n:
        raise ShardingError(f"reduce_scatter: each device's block has {s} elements, not divisible by the {n} devices "
                            f"{D}; pad T so that its length divides by {n * n}")
    return T.reshape(n, n, s // n).permute(1, 0, 2).copy(D).sum(1).reshape(s)


def allreduce(T: Tensor) -> Tensor:
    """reduce_scatter + allgather: the devices' (s,) blocks summed, on every device: (s,) on D, axis None. On a
    tuple with one device per MPI rank it is the same sum written as the reduction over the shard axis
    (`T.reshape(n, s).sum(0)`), which runs as one MPI Allreduce (lower.mpi_exec). When T is already realized
    there (and needs no gradient), that Allreduce runs at once and the result comes back realized: the call
    costs the MPI call and a few microseconds of Python, not a graph's schedule and replay. Inside a
    `tensor.jit` capture it stays a graph, so that the capture records it and every replay runs it."""
    D = T._device
    across: bool | None = True  # D is the device tuple of the fast path's last new Tensor: it spans ranks
    if D is not _spans_last:  # else no tuple hashed
        D, _ = _n(T, "allreduce")
        if (across := _spans.get(D)) is None:
            from devices import spans_ranks

            across = _spans[D] = spans_ranks(D)
    if across:
        # realized (and no gradient, no jit capture): one Allreduce now (lower.mpi_cache.allreduce_now)
        if not T._requires_grad and not _jit._ACTIVE and (t := _at_once(T, D)) is not None:
            return t
        return T.reshape(len(D), T.shape[0] // len(D)).sum(0)
    return allgather(reduce_scatter(T))


_spans: dict[tuple[str, ...], bool] = {}  # device tuple -> whether it spans MPI ranks (devices.spans_ranks)
_spans_last: tuple[str, ...] | None = None  # the device tuple of the fast path's last new Tensor (spans ranks)
_handed: list[Tensor | None] = [None]  # the last Tensor allreduce's fast path returned


def _free_refs() -> int:
    """sys.getrefcount of an object only a list slot refers to, read through a local as _at_once reads it (the
    slot, the local and the call's argument: 3 on CPython 3.11-3.13; measured rather than assumed, since an
    interpreter that borrows references on its stack counts fewer, and a wrong constant would reuse a Tensor the
    caller still holds)."""
    slot: list[object] = [object()]
    t = slot[0]
    return _getrefcount(t)


_FREE_REFS = _free_refs()  # that count for the Tensor _handed holds: no one else refers to it


def _at_once(T: Tensor, D: tuple[str, ...]) -> Tensor | None:
    """allreduce's fast path: the result of lower.mpi_cache.allreduce_now as a Tensor, or None. The Tensor it
    returned last time is returned again, holding the new result, when nothing refers to it any more, strongly or
    weakly (its one weak reference is the live-tensor tracking's, tensor.inplace): the caller dropped it, so no
    one can tell it from a new Tensor, and making and dropping one costs more than the rest of a call (in a
    training loop, with the caches cold after the MPI call moved megabytes). Its UOp is let go first, so that
    allreduce_now finds the last result free to write into."""
    t = _handed[0]
    if t is not None and _getrefcount(t) == _FREE_REFS and _getweakrefcount(t) == 1:
        _handed[0] = None
        del t.uop
        if (u := _mpi_cache.allreduce_now(T.uop)) is None:
            return None
        t.uop, t._device, t.grad, t._requires_grad = u, D, None, False
        _handed[0] = t
        return t
    if (u := _mpi_cache.allreduce_now(T.uop)) is None:
        return None
    global _spans_last
    _spans_last = D  # kept alive by this, so `is` cannot meet another tuple at its address
    t = _handed[0] = Tensor._wrap(u, D)
    return t


# ------------------------------------------------------------------ across MPI ranks


def ranks(device: str = "cpu") -> tuple[str, ...]:
    """One device per MPI rank of this job: `("cpu@0", ..., "cpu@{n-1}")` (`device` may be "cpu:1", "cuda", ...);
    `("cpu@0",)` when the process was not started by `mpirun`, so one program runs on 1 or n ranks."""
    from devices.mpi import rank_and_size

    return tuple(f"{device}@{r}" for r in range(rank_and_size()[1]))


def from_local(local: object, devices: Device, axis: int = 0) -> Tensor:
    """A tensor on `devices` (one device per rank, as from `ranks()`) made of every rank's own `local` array: the
    block of rank r's device along `axis` is rank r's `local`, so the global shape is local's with that axis
    n times longer. Each rank passes its own data (the batch it loaded); nothing is sent."""
    import numpy as np

    from devices import rank_of
    from devices.mpi import rank_and_size
    from lower import buffers as registry
    from lower.multi import buffer_view, storage_shape
    from tensor.buffers import to_storage
    from tensor.tensor import _infer_dtype

    devs = _devices(devices, "from_local")
    rank, _ = rank_and_size()
    owners = [rank_of(d) for d in devs]
    if None in owners or len(set(owners)) != len(owners):
        raise DeviceError(f"from_local: needs one device per MPI rank, such as tensor.multi.ranks(), got {devs}")
    if rank not in owners:
        raise DeviceError(f"from_local: {devs} has no device of this rank ({rank}); include one per rank")
    arr = np.asarray(local)
    if arr.ndim == 0:
        raise ShardingError("from_local: a 0-d array has no axis to stack the ranks' blocks along; reshape it to (1,)")
    a = norm_axis(axis, arr.ndim, "from_local", arr.shape)
    n = len(devs)
    shape = (*arr.shape[:a], arr.shape[a] * n, *arr.shape[a + 1 :])
    dtype = _infer_dtype(arr, False)
    store = storage_shape(shape, a, n)
    part = (store[0] // n, *store[1:])
    parts = tuple(registry.new_buffer(dtype, part, d) for d in devs)
    registry.store(parts[owners.index(rank)], to_storage(arr if a == 0 else arr.reshape(part), dtype))
    buf = registry.new_buffer(dtype, store, devs)
    registry.store_shards(buf, parts)
    return Tensor._wrap(buffer_view(buf, shape, a), devs)


def numpy_of(x: Tensor) -> object:
    """The data of a tensor on a device tuple as one host array: gathered onto its first device."""
    devs = cast("tuple[str, ...]", x.device)
    return to(x, devs[0]).numpy()


__all__ = ["allgather", "allreduce", "broadcast", "copy", "from_local", "gather", "ranks", "reduce", "reduce_scatter",
           "replicate_params", "replicate_uop",
           "replicated", "scatter", "shard", "shard_like", "shard_uop", "to"]


def replicate_params(tensors: list[Tensor], devices: Device) -> None:
    """Move each tensor (a model's parameters, an optimizer's state) to every device of `devices`, replicated and
    realized, in place: the Tensor objects stay the same, so a model and its optimizer keep sharing them. The
    start of data-parallel training: shard the batch (x.shard(devices, 0)) and the backward pass's reduction over
    the batch axis (the shard axis) allreduces every gradient (lower.multi), so each device holds the same
    gradients and takes the same step."""
    devs = _devices(devices, "replicate_params")
    new = [to(t, devs) for t in tensors]
    Tensor.realize(*new)
    for t, v in zip(tensors, new, strict=True):
        t.uop, t._device = v.uop, devs
