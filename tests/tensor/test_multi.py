"""Multi-device tensors (tensor.multi, lower.multi, lower.parallel): the `axis` property rule by rule, the spec's
collectives written literally and checked against numpy on cpu and python device tuples, shard / to / shard_like,
tensor-parallel matmul (column and row parallel) and a data-parallel training step against one device, and the
errors for bad layouts."""

from __future__ import annotations

import numpy as np
import pytest

from lower import buffers
from lower.multi import view_base
from rewrite import Ops, UOp, dtypes
from rewrite.errors import DeviceError, ShardingError
from tensor import Tensor
from tensor import multi as M
from tests.tensor.util import dp_mlp_step

CPU2 = ("cpu:0", "cpu:1")
CPU4 = ("cpu:0", "cpu:1", "cpu:2", "cpu:3")
PY2 = ("python:0", "python:1")
f32 = dtypes.float32


def buf(shape: tuple, device: str | tuple[str, ...] = CPU2, slot: int = 0) -> UOp:
    return UOp.buffer(slot, f32, shape, device)


# ---------------------------------------------------------------- the axis property, rule by rule

X = buf((4, 3))
S8 = buf((8,))
# fmt: off
AXIS = [
    ("buffer on a tuple",             lambda: X,                                  0),
    ("buffer on one device",          lambda: buf((4, 3), "cpu:0"),               None),
    ("permute follows",               lambda: X.permute((1, 0)),                  1),
    ("reduce on the shard axis",      lambda: X.sum([0]),                         None),
    ("reduce elsewhere",              lambda: X.sum([1]),                         0),
    ("reduce after permute",          lambda: X.permute((1, 0)).sum([0]),         1),
    ("replicated on the shard axis",  lambda: X.replicated(0),                    None),
    ("replicated elsewhere",          lambda: X.replicated(1),                    0),
    ("copy to a tuple reshards",      lambda: buf((8,), "cpu:0").copy(CPU2),      0),
    ("copy of a sharded axis 1",      lambda: X.permute((1, 0)).copy(("cpu:2", "cpu:3")).permute((1, 0)), 1),
    ("copy to one device",            lambda: X.copy("cpu:0"),                    None),
    ("alu inherits",                  lambda: X + X,                              0),
    ("alu inherits from either",      lambda: buf((4, 3), "cpu:0", 1) * X,        0),
    ("flip keeps",                    lambda: X.flip([1]),                        0),
    ("expand keeps",                  lambda: X.reshape((4, 1, 3)).expand((4, 2, 3)), 0),
    ("(8,) -> (2,4)",                 lambda: S8.reshape((2, 4)),                 0),
    ("(8,) -> (4,2)",                 lambda: S8.reshape((4, 2)),                 0),
    ("(8,) -> (1,8)",                 lambda: S8.reshape((1, 8)),                 1),
    ("(8,) -> (8,1)",                 lambda: S8.reshape((8, 1)),                 0),
    ("(8,) -> (2,2,2)",               lambda: S8.reshape((2, 2, 2)),              0),
    ("(4,3) -> (12,)",                lambda: X.reshape((12,)),                   0),
    ("(4,3) -> (1,4,3)",              lambda: X.reshape((1, 4, 3)),               1),
    ("(4,3) -> (2,6)",                lambda: X.reshape((2, 6)),                  0),
    ("(3,4) axis 1 -> (3,2,2)",       lambda: X.permute((1, 0)).reshape((3, 2, 2)), 1),
    ("(8,) on 4 -> (4,2)",            lambda: buf((8,), CPU4).reshape((4, 2)),    0),
    ("spec reduce_scatter reshape",   lambda: buf((8,)).reshape((2, 2, 2)).permute((1, 0, 2)), 1),
]
# fmt: on


@pytest.mark.parametrize(("name", "make", "axis"), AXIS, ids=[a[0] for a in AXIS])
def test_axis(name, make, axis) -> None:
    assert make().axis == axis


@pytest.mark.parametrize(("make", "words"), [
    (lambda: buf((8,), CPU4).reshape((2, 4)), ["RESHAPE", "(8,)", "(2, 4)", "4 devices"]),
    (lambda: X.permute((1, 0)).reshape((12,)), ["RESHAPE", "(3, 4)", "axis 1", "(12,)"]),
])
def test_reshape_that_splits_the_shard_boundary_raises(make, words) -> None:
    with pytest.raises(ShardingError) as e:
        _ = make().axis
    assert all(w in str(e.value) for w in words)


# ---------------------------------------------------------------- the spec's collectives, literally


@pytest.mark.parametrize("D", [CPU2, PY2, CPU4], ids=["cpu2", "python2", "cpu4"])
def test_collectives(D) -> None:
    n = len(D)
    s = 2 * n
    rng = np.random.default_rng(n)
    t = rng.integers(-9, 9, s).astype(np.float32)
    T = Tensor(t, device=D[0])
    checks = [  # (result, expected numpy, devices, axis)
        (M.broadcast(T, D), t, D, None),
        (M.scatter(T, D), t, D, 0),
    ]
    full = rng.integers(-9, 9, n * s).astype(np.float32)  # (n*s,) on D, axis 0: device i holds full[i*s:(i+1)*s]
    TD = Tensor(full, device=D[0]).shard(D, 0)
    checks += [
        (M.gather(TD), full, D[0], None),
        (M.reduce(TD), full.reshape(n, s).sum(0), D[0], None),
        (M.allgather(TD), full, D, None),
        (M.reduce_scatter(TD), full.reshape(n, s).sum(0), D, 0),
        (M.allreduce(TD), full.reshape(n, s).sum(0), D, None),
    ]
    for got, want, dev, axis in checks:
        assert got.device == dev
        assert got.shape == want.shape
        assert (got.uop.axis if isinstance(got.device, tuple) else None) == axis
        np.testing.assert_array_equal(got.numpy(), want)


PAD_SHRINK_FLIP = [  # (name, op on a tensor, the same on a numpy array); the value (4n, 6) sharded on axis 0
    ("pad",              lambda x, n: x.pad(((1, 3), None)),             lambda a, n: np.pad(a, ((1, 3), (0, 0)))),
    ("pad whole blocks", lambda x, n: x.pad(((2 * n, 2 * n), (1, 0))),
     lambda a, n: np.pad(a, ((2 * n, 2 * n), (1, 0)))),
    ("shrink",           lambda x, n: x.shrink(((1, 1 + 2 * n), (1, 4))), lambda a, n: a[1:1 + 2 * n, 1:4]),
    ("shrink a block",   lambda x, n: x.shrink(((n, 2 * n), None)),      lambda a, n: a[n:2 * n]),
    ("flip",             lambda x, n: x.flip(0),                         lambda a, n: a[::-1]),
    ("flip both",        lambda x, n: x.flip((0, 1)),                    lambda a, n: a[::-1, ::-1]),
    ("flip then pad",    lambda x, n: x.flip(0).pad(((n, n), None)) * 2,
     lambda a, n: np.pad(a[::-1], ((n, n), (0, 0))) * 2),
]


@pytest.mark.parametrize("D", [CPU2, PY2, CPU4], ids=["cpu2", "python2", "cpu4"])
@pytest.mark.parametrize(("name", "op", "ref"), PAD_SHRINK_FLIP, ids=[p[0] for p in PAD_SHRINK_FLIP])
def test_pad_shrink_flip_along_the_shard_axis(D, name, op, ref) -> None:
    n = len(D)
    a = np.random.default_rng(n).integers(-9, 9, (4 * n, 6)).astype(np.float32)
    got = op(Tensor(a).shard(D, 0), n)
    want = ref(a, n)
    assert got.device == D and got.uop.axis == 0 and got.shape == want.shape   # still sharded on the axis
    np.testing.assert_array_equal(got.numpy(), want)
    base = view_base(got.realize().uop)
    assert base is not None
    for i, d in enumerate(D):  # each device holds its block of the result
        block = np.asarray(buffers.lookup(buffers.shards(base)[i])).reshape(-1)
        np.testing.assert_array_equal(block, want.reshape(n, -1)[i], err_msg=d)


def test_gradient_through_flip_and_pad_along_the_shard_axis() -> None:
    a = np.arange(24, dtype=np.float32).reshape(8, 3)
    w = np.random.default_rng(0).standard_normal((12, 3)).astype(np.float32)
    x = Tensor(a, requires_grad=True)
    (x.shard(CPU2, 0).flip(0).pad(((2, 2), None)) * Tensor(w).shard(CPU2, 0)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), w[2:10][::-1])   # d/dx of sum(pad(flip(x)) * w)


def test_pad_shrink_flip_along_the_shard_axis_need_a_divisible_result() -> None:
    x = Tensor(np.ones((4, 6), np.float32)).shard(CPU2, 0)
    _raises(ShardingError, lambda: x.pad(((1, 0), None)).realize(), ["PAD", "(5, 6)", "not divisible", "2 devices"])
    _raises(ShardingError, lambda: x.shrink(((0, 3), None)).realize(), ["SHRINK", "(3, 6)", "not divisible"])


def test_replicated_copies_are_bitwise_equal_on_every_device() -> None:
    t = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    r = M.allreduce(Tensor(t).shard(CPU2, 0)).realize()
    base = view_base(r.uop)
    assert base is not None
    a, b = (buffers.lookup(p) for p in buffers.shards(base))
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------- shard, to, shard_like


def test_shard_to_shard_like() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = Tensor(a)
    for axis in (0, 1, -1):
        s = x.shard(CPU2, axis)
        assert s.device == CPU2 and s.uop.axis == axis % 2 and s.shape == (4, 6)
        np.testing.assert_array_equal(s.numpy(), a)
        np.testing.assert_array_equal((s * 2 + 1).numpy(), a * 2 + 1)
        np.testing.assert_array_equal(s.sum(1).numpy(), a.sum(1))
        np.testing.assert_array_equal(s.sum(0).numpy(), a.sum(0))
        like = Tensor(a + 1).shard_like(s)
        assert like.uop.axis == s.uop.axis
        np.testing.assert_array_equal((s + like).numpy(), 2 * a + 1)
    r = x.to(CPU2)
    assert r.uop.axis is None and r.device == CPU2
    np.testing.assert_array_equal(r.numpy(), a)
    np.testing.assert_array_equal(x.shard(CPU2, None).numpy(), a)
    back = x.shard(CPU2, 1).to("cpu:1")
    assert back.device == "cpu:1"
    np.testing.assert_array_equal(back.numpy(), a)
    # a sharded operand meets a replicated one: each device takes its block of the replicated one
    np.testing.assert_array_equal((x.shard(CPU2, 1) - r).numpy(), np.zeros_like(a))
    # resharding from axis 1 to axis 0, and data made directly on a tuple (replicated)
    np.testing.assert_array_equal(x.shard(CPU2, 1).shard(CPU2, 0).numpy(), a)
    t = Tensor(a.tolist(), device=CPU2)
    assert t.uop.axis is None
    np.testing.assert_array_equal(t.numpy(), a)
    z = Tensor.zeros(4, 2, device=CPU2) + 3
    np.testing.assert_array_equal(z.numpy(), np.full((4, 2), 3, np.float32))


def test_realized_result_is_a_buffer_on_the_tuple() -> None:
    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    for axis in (0, 1, None):
        s = (Tensor(a).shard(CPU2, axis) + 0).realize()
        assert s.is_realized and s.uop.axis == axis
        base = view_base(s.uop)
        assert base is not None and base.op is Ops.BUFFER and base.device == CPU2
        assert len(buffers.shards(base)) == 2
        np.testing.assert_array_equal((s * 1).numpy(), a)


def test_independent_devices_run_without_waiting_on_each_other() -> None:
    from lower.parallel import dependencies, shared_targets

    x = Tensor(np.ones(64, np.float32), device="cpu:0").shard(CPU2, 0)
    items = ((x * 2).exp() + 1).schedule()
    kernels = [i for i, it in enumerate(items) if it.kind == "kernel"]
    storage = {buffers.slot(b): buffers.slot(b) for it in items for b in it.bufs}
    deps = dependencies(items, storage)
    on = {i: items[i].bufs[0].device for i in range(len(items))}
    for k in kernels:  # a kernel waits only for items of its own device (its input's copy lands there)
        assert all(on[d] == on[k] for d in deps[k]), (items, deps)
    assert {on[k] for k in kernels} == set(CPU2)
    targets = shared_targets(items, {i: str(on[i]) for i in range(len(items))})
    from devices import target_for

    assert all(t.cores == max(1, target_for("cpu").cores // 2) for t in targets.values())


# ---------------------------------------------------------------- tensor-parallel matmul, data-parallel training


@pytest.mark.parametrize("D", [CPU2, PY2], ids=["cpu", "python"])
def test_tensor_parallel_matmul(D) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    one = (Tensor(a) @ Tensor(w)).numpy()
    col = Tensor(a).to(D) @ Tensor(w).shard(D, 1)  # column parallel: each device a block of output columns
    row = Tensor(a).shard(D, 1) @ Tensor(w).shard(D, 0)  # row parallel: partial products, allreduced
    assert col.uop.axis == 1 and row.uop.axis is None
    np.testing.assert_allclose(col.numpy(), one, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(row.numpy(), one, rtol=1e-6, atol=1e-6)
    # the Megatron pair: column parallel, then row parallel on its sharded output, one allreduce at the end
    w2 = rng.standard_normal((4, 5)).astype(np.float32)
    mlp = (col.relu() @ Tensor(w2).shard(D, 0)).numpy()
    np.testing.assert_allclose(mlp, np.maximum(one, 0) @ w2, rtol=1e-5, atol=1e-5)


def test_data_parallel_training_step_matches_one_device() -> None:
    from tensor.modules import Linear
    from tensor.optim import AdamW

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    y = rng.standard_normal((8, 3)).astype(np.float32)
    results = []
    for multi in (False, True):
        Tensor.manual_seed(0)
        layers = [Linear(4, 16), Linear(16, 3)]
        params = [p for layer in layers for p in layer.parameters()]
        opt = AdamW(params, lr=0.01)
        X, Y = Tensor(x), Tensor(y)
        if multi:
            M.replicate_params(params + [t for s in opt.state for t in s.values()], CPU2)
            X, Y = X.shard(CPU2, 0), Y.shard(CPU2, 0)
        for _ in range(2):
            loss = ((layers[1](layers[0](X).relu()) - Y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            if multi:  # the gradients were allreduced: replicated on every device
                assert all(p.grad is not None and p.grad.uop.axis is None for p in params)
            opt.step(loss)
        results.append([p.numpy() for p in params] + [loss.numpy()])
    for a, b in zip(*results, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _dp_run(opt_name: str, devices: tuple[str, ...] | None, use_jit: bool, batches: list) -> tuple[list, list, int]:
    """Five steps of a small MLP (its losses, its final weights, how often the body ran), data-parallel on
    `devices` (None: one device), the step under tensor.jit or eager."""
    f, params, ran = dp_mlp_step(opt_name, devices, use_jit)
    losses = []
    for x, y in batches:
        X, Y = Tensor(x), Tensor(y)
        if devices is not None:
            X, Y = X.shard(devices, 0).realize(), Y.shard(devices, 0).realize()
        losses.append(f(X, Y).numpy())
    return losses, [p.numpy() for p in params], ran[0]


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_jitted_data_parallel_step_matches_eager_and_one_device(opt_name: str) -> None:
    """tensor.jit over a data-parallel step: the parameters and the optimizer state on the device tuple are updated
    in place (each device its own shard), the per-step scalars are a host input refilled on every device, and the
    replays (calls 3 to 5, a new batch each) give the eager step's and the single-device step's losses and
    weights."""
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((8, 4)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32))
               for _ in range(5)]
    one_losses, one_w, _ = _dp_run(opt_name, None, False, batches)
    eager_losses, eager_w, _ = _dp_run(opt_name, CPU2, False, batches)
    jit_losses, jit_w, ran = _dp_run(opt_name, CPU2, True, batches)
    assert ran == 2  # the body ran for the two capturing calls only; calls 3 to 5 replayed
    for a, b, c in zip(jit_losses + jit_w, eager_losses + eager_w, one_losses + one_w, strict=True):
        np.testing.assert_array_equal(a, b)  # the same plans: bit for bit
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
    assert len(set(float(v) for v in jit_losses)) == 5  # every replay computed its own batch's loss


def test_assign_on_a_device_tuple_writes_each_shard_in_place() -> None:
    """`assign` to a replicated or sharded tensor (on axis 0 or another axis) on a device tuple writes the
    devices' own shard buffers (no new buffer, the same storage), and an alias of the tensor sees the update."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    for axis in (None, 0, 1):
        t = Tensor(a).shard(CPU2, axis).realize()
        assert t.uop.axis == axis
        base = view_base(t.uop)
        before = [buffers.slot(b) for b in buffers.shards(base)]
        storage = [buffers.lookup(b) for b in buffers.shards(base)]
        alias = Tensor(t)
        t.assign(t * 2 + 1)
        t.realize()
        assert [buffers.slot(b) for b in buffers.shards(view_base(t.uop))] == before
        np.testing.assert_array_equal(t.numpy(), a * 2 + 1)
        np.testing.assert_array_equal(alias.numpy(), a * 2 + 1)
        t += Tensor(np.ones((4, 6), np.float32)).shard(CPU2, axis)
        np.testing.assert_array_equal(t.numpy(), a * 2 + 2)
        for other in (None, 0, 1):  # a value in another layout is laid out as t first
            t.assign(Tensor(a * 3).shard(CPU2, other) - 1)
            np.testing.assert_array_equal(t.numpy(), a * 3 - 1)
        t *= 2
        np.testing.assert_array_equal(t.numpy(), (a * 3 - 1) * 2)
        assert t.uop.axis == axis
        assert [buffers.slot(b) for b in buffers.shards(view_base(t.uop))] == before
        assert all(buffers.lookup(b) is s for b, s in zip(buffers.shards(base), storage, strict=True))
        blocks = [np.asarray(s).reshape(-1) for s in storage]   # each device's own block, written in place
        want = (a * 3 - 1) * 2
        expect = [want] * 2 if axis is None else np.split(want, 2, axis=axis)
        for got, w in zip(blocks, expect, strict=True):
            np.testing.assert_array_equal(got, np.ascontiguousarray(w).reshape(-1))


@pytest.mark.parametrize("shape", [(2, 1, 4), (4, 1, 2, 1), (1, 2, 2)])
def test_every_permute_of_a_sharded_tensor_matches_numpy(shape: tuple[int, ...]) -> None:
    """Brute force over every permutation and every shardable axis, for shapes with length-1 axes (whose moves
    the lowering makes a local reshape, lower.multi._local_permute): the permuted tensor, an op on it and a
    reduction of it equal numpy's, and the result keeps its axis."""
    import itertools

    a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3
    for axis in (i for i, d in enumerate(shape) if d % 2 == 0):
        X = Tensor(a).shard(CPU2, axis).realize()
        for order in itertools.permutations(range(len(shape))):
            p = X.permute(order)
            want = a.transpose(order)
            assert p.uop.axis == order.index(axis)
            np.testing.assert_array_equal(p.realize().numpy(), want)
            np.testing.assert_array_equal((X.permute(order) * 2 + 1).numpy(), want * 2 + 1)
            np.testing.assert_array_equal(X.permute(order).sum(len(shape) - 1).numpy(), want.sum(-1))


def test_assign_on_a_device_tuple_sharded_on_a_later_axis_is_in_place_and_matches_the_graph() -> None:
    """A 3-d tensor sharded on axis 1 and on axis 2: assignments of values in every layout write the shards in
    place, and the result equals numpy's and the same values computed as a new tensor (the graph form)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 4, 6)).astype(np.float32)
    b = rng.standard_normal((2, 4, 6)).astype(np.float32)
    for axis in (1, 2):
        t = Tensor(a).shard(CPU2, axis).realize()
        base = view_base(t.uop)
        before = [buffers.slot(x) for x in buffers.shards(base)]
        graph = (Tensor(a).shard(CPU2, axis) * 2 + Tensor(b).shard(CPU2, axis)).realize()
        t.assign(t * 2 + Tensor(b).shard(CPU2, axis))
        t.realize()
        np.testing.assert_array_equal(t.numpy(), a * 2 + b)
        np.testing.assert_array_equal(t.numpy(), graph.numpy())
        for k, other in enumerate((None, 0, 1, 2)):  # a value in another layout is laid out as t first
            t.assign(Tensor(b * k).shard(CPU2, other) + 1)
            np.testing.assert_array_equal(t.numpy(), b * k + 1)
        t -= Tensor(b).shard(CPU2, axis)
        np.testing.assert_array_equal(t.numpy(), b * 3 + 1 - b)
        assert t.uop.axis == axis
        assert [buffers.slot(x) for x in buffers.shards(view_base(t.uop))] == before


# ---------------------------------------------------------------- bad input


def _raises(exc, fn, words) -> None:
    with pytest.raises(exc) as e:
        fn()
    assert all(w in str(e.value) for w in words), str(e.value)


def test_bad_input_errors() -> None:
    a = Tensor(np.ones((4, 6), np.float32))
    _raises(ShardingError, lambda: a.shard(CPU4, 1), ["shard", "(4, 6)", "6 elements", "divisible", "4 devices"])
    _raises(ShardingError, lambda: Tensor(np.ones(5, np.float32)).copy(CPU2), ["COPY", "(5,)", "multiple of 2"])
    _raises(ShardingError, lambda: a.shard(CPU2, 0) + a.shard(("cpu:2", "cpu:3"), 0),
            ["add", "device tuples", "cpu:2", ".to(devices)"])
    _raises(ShardingError, lambda: a.shard(CPU2, 0) + a, ["add", "cpu", "shard_like"])
    _raises(ShardingError, lambda: (a.shard(CPU2, 0) + a.shard(CPU2, 1)).realize(),
            ["ADD", "sharded on axis 1", "axis 0", ".shard(devices, 0)"])
    _raises(ShardingError, lambda: a.shard(CPU2, 1).reshape(24), ["RESHAPE", "(4, 6)", "(24,)", "shard boundary"])
    _raises(DeviceError, lambda: Tensor([1.0], device=("cpu:0", "cpu:0")), ["names a device twice"])
    _raises(DeviceError, lambda: Tensor([1.0], device=("cpu:0", "gpu:1")), ["unknown device", "gpu:1"])
    _raises(DeviceError, lambda: a.shard("cpu:0"), ["shard", "tuple of devices"])
    _raises(DeviceError, lambda: M.gather(a), ["gather", "device tuple"])
    _raises(ShardingError, lambda: M.reduce_scatter(Tensor(np.ones(6, np.float32)).shard(CPU2, 0)),
            ["reduce_scatter", "3 elements", "divisible"])
    _raises(ShardingError, lambda: Tensor(3.0).shard(CPU2, 0), ["0-d", "axis=None"])


def test_pipeline_has_the_multi_stage() -> None:
    from lower.pipeline import STAGE_NAMES, compile

    assert STAGE_NAMES.index("callify") < STAGE_NAMES.index("multi") < STAGE_NAMES.index("rangeify")
    x = Tensor(np.ones(8, np.float32)).shard(CPU2, 0)
    out = compile((x + 1).uop, "cpu", upto="multi")
    (root,) = out.src
    assert root.op is Ops.TUPLE and root.src[0] is (x + 1).uop  # the root it stands for, then its pieces
    assert [p.device for p in root.src[1:]] == list(CPU2)
    assert not any(isinstance(u.device, tuple) for p in root.src[1:] for u in p.toposort())


def test_gradient_through_replication_is_not_multiplied_by_the_device_count() -> None:
    x = Tensor(np.arange(4, dtype=np.float32), requires_grad=True)
    b = np.arange(8, dtype=np.float32).reshape(2, 4)
    loss = (x.to(CPU2) * Tensor(b).shard(CPU2, 0)).sum()
    loss.backward()
    assert x.grad is not None and x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), b.sum(0))
    np.testing.assert_array_equal(loss.numpy(), (np.arange(4) * b).sum())
