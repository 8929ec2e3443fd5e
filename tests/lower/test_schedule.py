"""Kernel counts are a contract: fusion decisions of the scheduler, checked on tensor-level UOp graphs."""

from __future__ import annotations

from lower import schedule
from lower.buffers import new_buffer
from rewrite import Ops, UOp, dtypes


def buf(*shape: int) -> UOp:
    return new_buffer(dtypes.float32, shape, "python")


def kernels(*roots: UOp) -> list:
    items, _ = schedule(list(roots))
    return [it for it in items if it.kind == "kernel"]


def loads(item) -> int:
    return sum(u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].arg.slot != 0
               for u in item.ast.toposort())


def test_elementwise_chain_is_one_kernel() -> None:
    a, b = buf(16, 8), buf(16, 8)
    out = ((a + b) * a - b).exp2().sqrt() + 1.0
    assert len(kernels(out)) == 1


def test_dot_is_one_kernel() -> None:
    a, b = buf(8, 16), buf(16, 4)
    out = (a.reshape((8, 16, 1)).expand((8, 16, 4)) * b.reshape((1, 16, 4)).expand((8, 16, 4))).sum((1,))
    assert len(kernels(out)) == 1


def test_var_at_most_two_kernels() -> None:
    a = buf(64)
    mean = a.sum((0,)) * (1 / 64)
    d = a - mean.expand((64,))
    var = (d * d).sum((0,)) * (1 / 63)
    assert len(kernels(var)) <= 2


def test_softmax_at_most_two_kernels() -> None:
    x = buf(4, 32)
    m = x.max((1,)).expand((4, 32))
    e = (x - m).exp2()
    out = e / e.sum((1,)).expand((4, 32))
    assert len(kernels(out)) <= 2


def test_chained_matmul_realizes_the_inner_product() -> None:
    # (a @ b) @ c: the inner product would be recomputed inside the outer reduction's loop
    a, b, c = buf(4, 8), buf(8, 4), buf(4, 2)
    ab = (a.reshape((4, 8, 1)).expand((4, 8, 4)) * b.reshape((1, 8, 4)).expand((4, 8, 4))).sum((1,)).reshape((4, 4))
    abc = (ab.reshape((4, 4, 1)).expand((4, 4, 2)) * c.reshape((1, 4, 2)).expand((4, 4, 2))).sum((1,))
    assert len(kernels(abc)) == 2


def _biased_relu_matmul(n: int) -> UOp:
    """relu(h + bias) @ w for h (16, 32), w (32, n): the ReLU'd operand is broadcast n times in the matmul."""
    h, bias, w = buf(16, 32), buf(32), buf(32, n)
    a = (h + bias.reshape((1, 32)).expand((16, 32))).maximum(0.0)
    return (a.reshape((16, 32, 1)).expand((16, 32, n)) * w.reshape((1, 32, n)).expand((16, 32, n))).sum((1,))


def test_cheap_work_on_two_loads_is_realized_before_a_wide_matmul() -> None:
    # read inside the reduction and repeated 64 times, the bias add and ReLU (two loads) get their own kernel;
    # the matmul then loads the realized operand and w, nothing else
    ks = kernels(_biased_relu_matmul(64))
    assert len(ks) == 2
    assert loads(ks[1]) == 2
    # repeated only 8 times, recomputing is cheaper than another pass: one kernel loading h, bias and w
    ks = kernels(_biased_relu_matmul(8))
    assert len(ks) == 1
    assert loads(ks[0]) == 3


def test_contiguous_forces_a_kernel() -> None:
    a = buf(8)
    out = (a + 1.0).contiguous() * 2.0
    assert len(kernels(out)) == 2


def test_arange_by_prefix_sum_has_no_load() -> None:
    n = 8
    one = UOp.const(1.0, dtypes.float32).reshape((1,)).expand((n,))
    x = one.pad((n - 1,), (0,))
    x = x.reshape((1, 2 * n - 1)).expand((n + 1, 2 * n - 1)).reshape(((n + 1) * (2 * n - 1),))
    x = x.shrink((0,), (2 * n * n,)).reshape((n, 2 * n)).shrink((0, 0), (n, n))
    ar = x.sum((1,)).reshape((n,)) - 1.0
    ks = kernels(ar)
    assert len(ks) == 1
    assert loads(ks[0]) == 0


def test_identical_kernels_share_their_ast() -> None:
    a, b, c, d = buf(8), buf(8), buf(8), buf(8)
    k1, = kernels(a + b)
    k2, = kernels(c + d)
    assert k1.ast is k2.ast


def test_memory_plan_reuses_storage_of_dead_intermediates() -> None:
    from lower.memory import plan

    a = buf(64)
    x1 = (a + 1.0).contiguous()
    x2 = (x1 * 2.0).contiguous()
    x3 = (x2 + 3.0).contiguous()
    out = x3 * 4.0
    items, outs = schedule([out])
    assert len(items) == 4
    shared = plan(items, set(outs.values()))
    slots = [it.bufs[0].arg.slot for it in items[:3]]  # the three intermediates, in order
    owners = [shared[s].arg.slot for s in slots]
    # x1 is dead once x2 is computed, so x3 takes its storage; x2 is live while x3 is computed
    assert owners[0] == slots[0] and owners[1] == slots[1] and owners[2] == slots[0]
    assert outs[out].arg.slot not in shared


def test_large_reduction_with_small_output_is_split_in_two() -> None:
    a = buf(1 << 16)
    assert len(kernels(a.sum((0,)))) == 2
    small = buf(1 << 10)
    assert len(kernels(small.sum((0,)))) == 1
    wide = buf(1 << 10, 1 << 6)  # 1024 outputs: enough parallel work already
    assert len(kernels(wide.sum((1,)))) == 1


def test_split_reduction_is_exact_for_integers() -> None:
    import numpy as np

    from lower import realize
    from lower.buffers import lookup, store

    a = new_buffer(dtypes.int32, (1 << 16,), "cpu")
    v = np.arange(1 << 16, dtype=np.int32) % 1000 - 500
    store(a, v)
    res = realize([a.sum((0,))])
    assert int(lookup(next(iter(res.values())))[0]) == int(v.sum())
