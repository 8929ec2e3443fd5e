"""Programs that tests/tensor/test_mpi_tensor.py runs under `mpirun`: `python -m tests.tensor.mpi_tensor_cases CASE`.

Every rank runs the same program (SPMD) on `tensor.multi.ranks()`, one cpu device per rank, and checks its results
against numpy; a mismatch raises, and the uncaught error takes every rank down with a non-zero exit."""

from __future__ import annotations

import sys

import numpy as np

from devices.mpi import world
from tensor import Tensor
from tensor import multi as M
from tests.tensor.util import dp_mlp_step


def _rank() -> tuple[int, int]:
    c = world()
    assert c is not None, "run me under mpirun"
    return c.rank, c.size


def _eq(got: np.ndarray, want: np.ndarray, tol: float = 0.0) -> None:
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def shard_to() -> None:
    r, n = _rank()
    D = M.ranks()
    a = np.arange(n * n * 6, dtype=np.float32).reshape(n * 2, n * 3)
    x = Tensor(a).shard(D, 0)
    _eq(x.numpy(), a)
    from lower import buffers
    from lower.multi import view_base

    base = view_base(x.uop)
    assert base is not None
    held = [buffers.has_data(s) for s in buffers.shards(base)]
    assert held == [k == r for k in range(n)], held   # only this rank's block is allocated here
    _eq(Tensor(a).shard(D, 1).numpy(), a)
    _eq((x * 2 + 1).numpy(), a * 2 + 1)
    _eq(x.to(D).numpy(), a)               # resharded to replicated: every rank's block goes to every rank
    _eq(x.to("cpu@0").numpy(), a)         # gathered on rank 0, then (numpy) onto every rank
    _eq(x.shard_like(Tensor(a).to(D)).numpy(), a)
    z = Tensor(a).to(D)
    _eq(z.shard(D, 0).numpy(), a)
    _eq(x.sum(1).numpy(), a.sum(1))       # a reduce off the shard axis stays on each rank
    _eq(x.sum(0).numpy(), a.sum(0))       # on the shard axis: an MPI allreduce
    _eq(x.max(axis=0).numpy(), a.max(0))
    _eq(x.pad(((1, 2 * n - 1), None)).numpy(), np.pad(a, ((1, 2 * n - 1), (0, 0))))   # along the shard axis: moved
    _eq(x.flip(0).shrink(((1, 1 + n), None)).numpy(), a[::-1][1:1 + n])               # between the ranks
    mine = M.from_local(np.full((2, 3), r, np.float32), D, 0)
    _eq(mine.numpy(), np.repeat(np.arange(n, dtype=np.float32), 2)[:, None] * np.ones((1, 3), np.float32))
    cols = M.from_local(np.full((2, 1), r, np.int32), D, 1)
    _eq(cols.numpy(), np.tile(np.arange(n, dtype=np.int32), (2, 1)))
    print(f"rank {r}/{n}: shard_to ok", flush=True)


def collectives() -> None:
    r, n = _rank()
    D = M.ranks()
    s = 4 * n
    data = np.arange(n * s, dtype=np.float32) * 0.5 - 3
    blocks = data.reshape(n, s)
    T = Tensor(data).shard(D, 0)
    _eq(M.broadcast(Tensor(blocks[0]), D).numpy(), blocks[0])
    _eq(M.scatter(Tensor(data), D).numpy(), data)
    _eq(M.gather(T).numpy(), data)
    _eq(M.reduce(T).numpy(), blocks.sum(0))
    _eq(M.allgather(T).numpy(), data)
    _eq(M.reduce_scatter(T).numpy(), blocks.sum(0))
    _eq(M.allreduce(T).numpy(), blocks.sum(0), 1e-6)
    _eq(M.allgather(M.reduce_scatter(T)).numpy(), blocks.sum(0), 1e-6)   # the spec's allreduce, literally
    print(f"rank {r}/{n}: collectives ok", flush=True)


def matmul() -> None:
    r, n = _rank()
    D = M.ranks()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4 * n, 6 * n)).astype(np.float32)
    w = rng.standard_normal((6 * n, 4 * n)).astype(np.float32)
    w2 = rng.standard_normal((4 * n, 5)).astype(np.float32)
    col = Tensor(a).to(D) @ Tensor(w).shard(D, 1)
    row = Tensor(a).shard(D, 1) @ Tensor(w).shard(D, 0)
    _eq(col.numpy(), a @ w, 1e-4)
    _eq(row.numpy(), a @ w, 1e-4)
    _eq((col.relu() @ Tensor(w2).shard(D, 0)).numpy(), np.maximum(a @ w, 0) @ w2, 1e-4)
    print(f"rank {r}/{n}: matmul ok", flush=True)


def _train(D: tuple[str, ...] | None, x: np.ndarray, y: np.ndarray, local: bool = False) -> list[np.ndarray]:
    from tensor.modules import Linear
    from tensor.optim import AdamW

    Tensor.manual_seed(0)
    layers = [Linear(4, 16), Linear(16, 3)]
    params = [p for layer in layers for p in layer.parameters()]
    opt = AdamW(params, lr=0.01)
    X, Y = Tensor(x), Tensor(y)
    if D is not None:
        M.replicate_params(params + [t for st in opt.state for t in st.values()], D)
        if local:  # each rank contributes its own rows
            r, n = _rank()
            k = x.shape[0] // n
            X, Y = M.from_local(x[r * k:(r + 1) * k], D), M.from_local(y[r * k:(r + 1) * k], D)
        else:
            X, Y = X.shard(D, 0), Y.shard(D, 0)
    for _ in range(2):
        loss = ((layers[1](layers[0](X).relu()) - Y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step(loss)
    return [p.numpy() for p in params] + [loss.numpy()]


def data_parallel() -> None:
    r, n = _rank()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4 * n, 4)).astype(np.float32)
    y = rng.standard_normal((4 * n, 3)).astype(np.float32)
    one = _train(None, x, y)
    from lower import mpi_cache

    for local in (False, True):
        for a, b in zip(_train(M.ranks(), x, y, local), one, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert mpi_cache.stats["hits"] > 0, mpi_cache.stats   # the second step replayed the first one's schedule
    print(f"rank {r}/{n}: data_parallel ok", flush=True)


def several_per_rank() -> None:
    """Two cpu devices on each rank: moves inside a rank are local copies, across ranks Send/Recv."""
    r, n = _rank()
    D = tuple(f"cpu:{i}@{k}" for k in range(n) for i in range(2))
    a = np.arange(16 * n, dtype=np.float32).reshape(4 * n, 4)
    x = Tensor(a).shard(D, 0)
    _eq(x.sum(0).numpy(), a.sum(0))
    _eq((x * 2).numpy(), a * 2)
    _eq(M.allgather(Tensor(a.reshape(-1)).shard(D, 0)).numpy(), a.reshape(-1))
    flat = np.arange(2 * n * 2 * n * 3, dtype=np.float32)   # not one device per rank: point to point, still the sum
    _eq(M.reduce_scatter(Tensor(flat).shard(D, 0)).numpy(), flat.reshape(2 * n, -1).sum(0))
    w = np.ones((4, 2 * n), np.float32)
    _eq((Tensor(a).to(D) @ Tensor(w).shard(D, 1)).numpy(), a @ w)
    print(f"rank {r}/{n}: several_per_rank ok", flush=True)


def mismatched_programs() -> None:
    """Rank 0 sums a tensor of another length than the others: the schedule check names the ranks."""
    r, n = _rank()
    k = 2 if r == 0 else 4
    Tensor(np.ones(k * n, np.float32)).shard(M.ranks(), 0).sum(0).numpy()
    print("unreachable: the ranks ran different programs", flush=True)


def raises_midway() -> None:
    """The last rank raises after the first collective: every rank must exit non-zero, fast."""
    r, n = _rank()
    D = M.ranks()
    x = Tensor(np.ones(2 * n, np.float32)).shard(D, 0)
    x.sum(0).numpy()
    if r == n - 1:
        raise ValueError("deliberate failure on the last rank")
    (x * 2).sum(0).numpy()
    print("unreachable: the other ranks finished without the last one", flush=True)


def _local(t: Tensor) -> np.ndarray:
    """This rank's own piece of a tensor on ranks(), as it is stored here (nothing gathered)."""
    from lower import buffers
    from lower.multi import view_base

    base = view_base(t.uop)
    assert base is not None, "a realized tensor on a device tuple is a view of a BUFFER there"
    r, _ = _rank()
    return np.asarray(buffers.lookup(buffers.shards(base)[r])).reshape(-1)


def _made(before: dict[str, int]) -> dict[str, int]:
    c = world()
    assert c is not None
    return {k: v - before.get(k, 0) for k, v in c.calls.items() if v != before.get(k, 0)}


def one_call_collectives() -> None:
    """The spec's allgather and reduce_scatter (tensor.multi) across ranks run as one MPI call each (counted on
    this rank), the first time (scheduled, after the schedule check) and replayed, and their results are numpy's
    on every rank, for float and integer dtypes."""
    r, n = _rank()
    c = world()
    assert c is not None
    D = M.ranks()
    s = 6 * n
    rng = np.random.default_rng(7)
    for dt in (np.float32, np.float64, np.int32, np.int64):
        for k in range(2):  # scheduled, then replayed (lower.mpi_cache)
            data = (rng.standard_normal(n * s) * 50).astype(dt)
            T = M.from_local(data.reshape(n, s)[r], D)  # each rank's own block: nothing is sent to make T
            before = dict(c.calls)
            g = M.allgather(T).realize()
            made = _made(before)
            check = made.pop("schedule check (allgather)", 0)
            assert made == {"Allgather": 1} and check == (1 if k == 0 else 0), (dt, k, made, check)
            _eq(_local(g), data)                 # this rank holds all of it
            before = dict(c.calls)
            rs = M.reduce_scatter(T).realize()
            made = _made(before)
            made.pop("schedule check (allgather)", 0)
            assert made == {"Reduce_scatter_block": 1}, (dt, k, made)
            want = data.reshape(n, s).sum(0, dtype=dt)
            tol = 1e-5 * float(np.abs(data).max()) * n if np.dtype(dt).kind == "f" else 0.0
            _eq(_local(rs), want.reshape(n, s // n)[r], tol)   # this rank's chunk of the sum
            _eq(g.numpy(), data)
            _eq(rs.numpy(), want, tol)
            _eq(M.allgather(M.reduce_scatter(T)).numpy(), want, tol)   # the spec's allreduce, both recognised
    print(f"rank {r}/{n}: one_call_collectives ok", flush=True)


def allreduce_at_once() -> None:
    """tensor.multi.allreduce of a realized tensor on ranks() runs one MPI Allreduce at once (lower.mpi_cache.
    allreduce_now), with the ranks' agreement checked the first time only; its result is the lazy form's exactly
    (values, dtype, layout, this rank's shard alone allocated), for every dtype it takes; int32 (whose sum is
    int64), a tensor that needs a gradient, or a lazy one take the graph, with the same values."""
    from lower import buffers
    from lower.multi import view_base

    r, n = _rank()
    c = world()
    assert c is not None
    D = M.ranks()
    rng = np.random.default_rng(3)
    for dt in (np.float32, np.float64, np.int64, np.int32):
        for k in range(2):
            data = (rng.standard_normal((n, 5 * n)) * 40).astype(dt)
            T = M.from_local(data[r], D)
            before = dict(c.calls)
            got = M.allreduce(T)
            made = _made(before)
            want = data.sum(0, dtype=dt)
            lazy = T.reshape(n, 5 * n).sum(0).realize()
            if dt is np.int32:
                assert not got.is_realized and made == {}, made   # the graph: nothing runs before realize
                got.realize()
            else:
                assert got.is_realized, dt
                assert made == ({"Allreduce": 1, "schedule check (allgather)": 1} if k == 0 else {"Allreduce": 1}), \
                    (dt, k, made)
            assert (got.shape, got.dtype, got.device, got.uop.axis) == (lazy.shape, lazy.dtype, lazy.device, None)
            a, b = view_base(got.uop), view_base(lazy.uop)
            assert a is not None and b is not None and a.shape == b.shape
            assert [(s.shape, buffers.has_data(s)) for s in buffers.shards(a)] == \
                [(s.shape, buffers.has_data(s)) for s in buffers.shards(b)]
            np.testing.assert_array_equal(_local(got), _local(lazy))   # the same MPI call: the same bits
            tol = 1e-5 * float(np.abs(data).max()) * n if np.dtype(dt).kind == "f" else 0.0
            _eq(got.numpy(), want, tol)
    x = M.from_local(np.ones(4, np.float32) * (r + 1), D)
    x.requires_grad = True
    g = M.allreduce(x)
    assert not g.is_realized   # a gradient needs the graph
    g.sum().backward()
    assert x.grad is not None
    _eq(g.numpy(), np.full(4, n * (n + 1) / 2, np.float32))
    lazy_in = M.from_local(np.ones(4, np.float32), D) * 2   # not realized: the graph, fused with its producer
    _eq(M.allreduce(lazy_in).numpy(), np.full(4, 2 * n, np.float32))
    print(f"rank {r}/{n}: allreduce_at_once ok", flush=True)


def allreduce_at_once_reuse() -> None:
    """An at-once allreduce writes into the last result's storage once nothing refers to it (its tensor dropped),
    and into fresh storage while a tensor, a lazy graph on it, or a numpy view of its data is alive: those keep
    their values. Every result equals the lazy form's bits and numpy's sum."""
    from lower import buffers
    from lower.multi import view_base

    r, n = _rank()
    D = M.ranks()
    s = 3 * n
    rng = np.random.default_rng(11)
    blocks = [(rng.standard_normal((n, s)) * 10).astype(np.float32) for _ in range(6)]
    Ts = [M.from_local(b[r], D) for b in blocks]
    want = [T.reshape(n, s).sum(0).realize().numpy() for T in Ts]   # the graph form, one Allreduce each

    def run(k: int) -> tuple[Tensor, int]:
        t = M.allreduce(Ts[k])
        assert t.is_realized
        base = view_base(t.uop)
        assert base is not None
        np.testing.assert_array_equal(_local(t), want[k])
        _eq(want[k], blocks[k].sum(0), 1e-5 * float(np.abs(blocks[k]).max()) * n)
        return t, buffers.slot(base)

    a, slot_a = run(0)
    del a
    b, slot_b = run(1)
    assert slot_b == slot_a, "a dropped result's storage is reused"
    c, slot_c = run(2)
    assert slot_c != slot_b, "a held result is not overwritten"
    np.testing.assert_array_equal(_local(b), want[1])
    view = _local(c)   # a numpy view of c's data, held past c
    del b, c
    d, slot_d = run(3)
    assert slot_d != slot_c, "a result whose data is still viewed is not overwritten"
    np.testing.assert_array_equal(view, want[2])
    lazy = d * 2   # a graph on d keeps it
    del d
    e, slot_e = run(4)
    assert slot_e != slot_d
    np.testing.assert_array_equal(lazy.numpy(), want[3] * 2)
    del e
    f, slot_f = run(5)
    assert slot_f == slot_e
    f.assign(f * 2)   # written in place: f keeps the shards under a new tuple BUFFER
    f.realize()
    g, _ = run(0)
    np.testing.assert_array_equal(_local(f), want[5] * 2)
    np.testing.assert_array_equal(_local(g), want[0])
    del f, g
    # the Tensor handed out is made again only while something refers to the last one: strongly, or weakly (a
    # weak reference must not see a dropped result come back holding a new one)
    import weakref

    first = id(M.allreduce(Ts[1]))
    again = M.allreduce(Ts[2])
    assert id(again) == first, "a dropped result's Tensor is reused"
    np.testing.assert_array_equal(_local(again), want[2])
    seen = weakref.ref(again)
    del again
    held = M.allreduce(Ts[3])
    assert seen() is None, "a weakly referenced result is not reused"
    other = M.allreduce(Ts[4])
    assert other is not held
    np.testing.assert_array_equal(_local(held), want[3])
    np.testing.assert_array_equal(_local(other), want[4])
    other.requires_grad = True   # kept in autograd's weak table: not reused, and its flag stays its own
    del other
    fresh = M.allreduce(Ts[5])
    assert not fresh.requires_grad and fresh.grad is None
    np.testing.assert_array_equal(_local(fresh), want[5])
    del held, fresh
    # the kept results are bounded: with room for one, another shape's call lets the first one's storage go
    from lower import mpi_cache

    def slot_of(t: Tensor) -> int:
        base = view_base(t.uop)
        assert base is not None
        return buffers.slot(base)

    budget = mpi_cache.MAX_NOW_BYTES
    try:
        for k, (room, same) in enumerate(((budget, True), (1, False))):   # shapes new to this path each time
            A = M.from_local(np.ones((2 + 2 * k) * n, np.float32) * (r + 1), D)
            B = M.from_local(np.ones((3 + 2 * k) * n, np.float32), D)
            mpi_cache.MAX_NOW_BYTES = room
            first = slot_of(M.allreduce(A))
            np.testing.assert_array_equal(M.allreduce(B).numpy(), np.full(B.shape[0] // n, n, np.float32))
            again = M.allreduce(A)
            assert (slot_of(again) == first) is same, (room, same)
            np.testing.assert_array_equal(again.numpy(), np.full(A.shape[0] // n, n * (n + 1) / 2, np.float32))
            del again
    finally:
        mpi_cache.MAX_NOW_BYTES = budget
    print(f"rank {r}/{n}: allreduce_at_once_reuse ok", flush=True)


def assign_in_place() -> None:
    """Assignment to a tensor on ranks() replicated or sharded on axis 0, 1 or 2 writes this rank's own shard in
    place (the same storage array), also for a value in another layout; the result equals numpy's and the same value
    computed as a new tensor (the graph form), bit for bit."""
    from lower import buffers
    from lower.multi import view_base

    r, n = _rank()
    D = M.ranks()
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2 * n, 2 * n, 2 * n)).astype(np.float32)
    b = rng.standard_normal((2 * n, 2 * n, 2 * n)).astype(np.float32)
    for axis in (None, 0, 1, 2):
        t = Tensor(a).shard(D, axis).realize()
        base = view_base(t.uop)
        assert base is not None
        mine = buffers.shards(base)[r]
        storage = buffers.lookup(mine)
        graph = (Tensor(a).shard(D, axis) * 2 + Tensor(b).shard(D, axis)).realize()
        t.assign(t * 2 + Tensor(b).shard(D, axis))
        got = t.numpy()
        np.testing.assert_array_equal(got, a * 2 + b)
        np.testing.assert_array_equal(got, graph.numpy())
        for other in (None, 1 if axis == 0 else 0):   # a value in another layout is laid out as t first
            t.assign(Tensor(b).shard(D, other) - 1)
            np.testing.assert_array_equal(t.numpy(), b - 1)
        t += Tensor(a).shard(D, axis)
        np.testing.assert_array_equal(t.numpy(), b - 1 + a)
        now = view_base(t.uop)
        assert now is not None and t.uop.axis == axis
        assert buffers.shards(now)[r] is mine and buffers.lookup(mine) is storage, axis
        block = (b - 1 + a) if axis is None else np.split(b - 1 + a, n, axis=axis)[r]
        np.testing.assert_array_equal(np.asarray(storage).reshape(-1), np.ascontiguousarray(block).reshape(-1))
    print(f"rank {r}/{n}: assign_in_place ok", flush=True)


def allreduce_at_once_mismatched() -> None:
    """Rank 0 allreduces a tensor of another length than the others, at once: the first call's check names the
    ranks on every rank (the same error as for a schedule)."""
    r, _ = _rank()
    T = M.from_local(np.ones(3 if r == 0 else 5, np.float32), M.ranks())
    M.allreduce(T)
    print("unreachable: the ranks made different calls", flush=True)


def allreduce_at_once_stalls() -> None:
    """The last rank never reaches an at-once allreduce that the others have agreed on before: the watchdog
    (devices.mpi) aborts the job with the call named, as for any MPI call."""
    import os
    import time

    r, n = _rank()
    T = M.from_local(np.ones(4, np.float32), M.ranks())
    M.allreduce(T)   # agreed: the next call is the Allreduce alone
    if r == n - 1:
        time.sleep(120)
        os._exit(0)
    M.allreduce(T)
    print("unreachable: the allreduce finished without the last rank", flush=True)


def jit_allreduce() -> None:
    """A tensor.jit step whose body allreduces its argument across the ranks: captured as the graph (not at once),
    and every replay runs the Allreduce on the new argument's data (one MPI call per step, no schedule check)."""
    from tensor.jit import jit

    r, n = _rank()
    c = world()
    assert c is not None
    D = M.ranks()

    @jit
    def step(T: Tensor) -> Tensor:
        return M.allreduce(T) * 2

    for k in range(5):
        blocks = np.arange(6 * n, dtype=np.float32).reshape(n, 6) * (k + 1) - np.arange(n, dtype=np.float32)[:, None]
        T = M.from_local(blocks[r], D)   # rank q's block is row q
        before = dict(c.calls)
        got = step(T)
        made = _made(before)
        want = 2 * blocks.sum(0)
        if k >= 2:   # a replay: the Allreduce alone
            assert made == {"Allreduce": 1}, (k, made)
        _eq(_local(got), want, 1e-5)
    assert step.calls == 5
    print(f"rank {r}/{n}: jit_allreduce ok", flush=True)


def _jit_train(opt_name: str, D: tuple[str, ...] | None, batches: list, use_jit: bool) -> tuple[list, int]:
    """Five steps of a small MLP, data-parallel on D (None: this rank alone, the whole batch): the losses and final
    weights, and how often the body ran."""
    f, params, ran = dp_mlp_step(opt_name, D, use_jit)
    losses = []
    for x, y in batches:
        if D is None:
            X, Y = Tensor(x), Tensor(y)
        else:  # each rank contributes its own rows
            r, n = _rank()
            k = x.shape[0] // n
            X, Y = M.from_local(x[r * k:(r + 1) * k], D), M.from_local(y[r * k:(r + 1) * k], D)
        losses.append(f(X, Y).numpy())
    return losses + [p.numpy() for p in params], ran[0]


def jit_data_parallel() -> None:
    """A tensor.jit data-parallel step (SGD with momentum, AdamW) across the ranks: parameters and optimizer state
    updated in place on every rank, the scalars refilled, the gradients' Allreduce replayed; a new batch at every
    call. Losses and weights equal the eager step's bit for bit and the single-process step's numpy-close."""
    r, n = _rank()
    rng = np.random.default_rng(2)
    batches = [(rng.standard_normal((4 * n, 4)).astype(np.float32), rng.standard_normal((4 * n, 3)).astype(np.float32))
               for _ in range(5)]
    for opt_name in ("sgd", "adamw"):
        one, _ = _jit_train(opt_name, None, batches, False)
        eager, _ = _jit_train(opt_name, M.ranks(), batches, False)
        jitted, ran = _jit_train(opt_name, M.ranks(), batches, True)
        assert ran == 2, ran   # calls 3 to 5 replayed
        for a, b, c in zip(jitted, eager, one, strict=True):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        assert len({float(v) for v in jitted[:5]}) == 5   # every replay computed its own batch's loss
    print(f"rank {r}/{n}: jit_data_parallel ok", flush=True)


if __name__ == "__main__":
    cases = {f.__name__: f for f in (shard_to, collectives, matmul, data_parallel, several_per_rank,
                                     mismatched_programs, raises_midway, one_call_collectives, allreduce_at_once,
                                     allreduce_at_once_reuse, assign_in_place,
                                     allreduce_at_once_mismatched, allreduce_at_once_stalls, jit_allreduce,
                                     jit_data_parallel)}
    cases[sys.argv[1]]()
