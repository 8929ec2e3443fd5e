"""realize-thread-broadcast-reduce (rules.rangeify.kernel_point_rules): on a target whose output loops are
threads (a GPU), a reduction computed inline that many threads would each compute again is realized, where no
block can share it; on the cpu, whose linearizer hoists it out of the loops, and where a block per row shares it
(softmax, layernorm: lower.gpu), the kernel stays one. Results are checked against numpy on the grid emulator."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from devices.base import gpu_target
from lower.estimate import estimate
from lower.rangeify import build_kernel
from lower.schedule import schedule, split_decisions
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.env import Context
from rules.rangeify import THREAD_BROADCAST_REDUCE, RealizePoint, kernel_point, kernel_point_rules
from tensor import Tensor


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _pool_of_softmaxes(x: np.ndarray, device: str = "python") -> Tensor:
    return Tensor(x, device=device).softmax(0).softmax(0).reshape(2, 2, 2, 125).max_pool2d(2, stride=(1, 2))


def _pool_want(x: np.ndarray) -> np.ndarray:
    y = _softmax(_softmax(x)).reshape(2, 2, 2, 125)
    win = np.lib.stride_tricks.sliding_window_view(y, (2, 2), axis=(2, 3))[:, :, :, ::2]  # stride (1, 2)
    return win.max(axis=(-2, -1))


def _decided(t: Tensor) -> list[str]:
    return sorted(v for v in split_decisions([t.uop]).values() if v == THREAD_BROADCAST_REDUCE)


@dataclass
class _KSite:
    loops: tuple[UOp, ...]
    threads: bool = True
    inline: dict[UOp, UOp] = field(default_factory=dict)


def _stat_kernel(n: int, outputs: int) -> tuple[UOp, UOp, UOp]:
    """A hand-made kernel: out[i] = sum_j(w[i, j]) + sum_k(x[k]) over `outputs` i, j < 4, k < n. The first
    reduction moves with i (every output loop is a reduction's), the second with none of them."""
    w, x, out = (UOp.buffer(s, dtypes.float32, (4096,), None) for s in range(3))
    i = UOp.range(outputs, 1, AxisType.LOOP)
    j, k = UOp.range(4, 2, AxisType.REDUCE), UOp.range(n, 3, AxisType.REDUCE)
    own = UOp(Ops.REDUCE, (w.index(i * 4 + j).load(), j), (Ops.ADD, ()))
    stat = UOp(Ops.REDUCE, (x.index(k).load(), k), (Ops.ADD, ()))
    st = out.index(i).store(own + stat)
    return UOp.sink(UOp(Ops.END, (st, i))), stat, i


def test_the_rule_is_named_and_documented() -> None:
    from pathlib import Path

    from lower import split

    assert [r.name for r in kernel_point_rules] == [THREAD_BROADCAST_REDUCE]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "pipeline.md").read_text()
    assert THREAD_BROADCAST_REDUCE in docs and THREAD_BROADCAST_REDUCE in (split.__doc__ or "")


def test_fires_only_for_threads_repeating_a_long_inline_reduction() -> None:
    k, stat, i = _stat_kernel(1000, 64)
    tensor_node = Tensor(_arr(1000)).sum().uop  # stands for the tensor REDUCE the kernel's `stat` computes
    site = _KSite((i,), inline={stat: tensor_node})
    assert kernel_point(site, k) == RealizePoint(tensor_node, THREAD_BROADCAST_REDUCE)
    assert kernel_point(_KSite((i,), threads=False, inline={stat: tensor_node}), k) is None  # a cpu: hoisted
    assert kernel_point(_KSite((i,)), k) is None  # the kernel's own root: not inline
    short, stat_s, i_s = _stat_kernel(16, 64)  # 16 < THREAD_MIN_REDUCE: cheaper to recompute
    assert kernel_point(_KSite((i_s,), inline={stat_s: tensor_node}), short) is None
    few, stat_f, i_f = _stat_kernel(1000, 4)  # 4 threads < RECOMPUTE_LIMIT
    assert kernel_point(_KSite((i_f,), inline={stat_f: tensor_node}), few) is None


def test_a_free_output_loop_leaves_it_to_a_block_per_row() -> None:
    """Softmax's and layernorm's row statistics do not move with the column loop, which no reduction depends on:
    lower.gpu gives the kernel a block per row whose threads share them, so the kernel stays one."""
    with Context(PYTHON_TARGET="sm_90"):
        soft = Tensor(_arr(16, 512), device="python").softmax(-1)
        h = Tensor(_arr(8, 256), device="python")
        c = h - h.mean(-1, keepdim=True)
        norm = c * ((c * c).mean(-1, keepdim=True) + 1e-5).rsqrt()  # layernorm's
        assert _decided(soft) == [] and _decided(norm) == []
        items, _ = schedule([soft.uop])
        assert sum(it.kind == "kernel" for it in items) == 1


def test_a_pool_over_softmaxes_realizes_the_statistics_on_a_gpu_only() -> None:
    """The fuzzer's find: every output of a max pool over softmax(softmax(x)) computed both softmaxes' four
    reductions of 1,000 again (272x the split form's work). On a GPU target they get kernels of their own; on
    the cpu the kernel stays one (its linearizer hoists them out of the output loops)."""
    x = _arr(1000)
    with Context(PYTHON_TARGET="sm_90"):
        t = _pool_of_softmaxes(x)
        assert _decided(t) == [THREAD_BROADCAST_REDUCE] * 4  # both softmaxes' max and sum, the last first
        items, _ = schedule([t.uop])
        asts = [it for it in items if it.kind == "kernel" and it.ast is not None]
        target = gpu_target("sm_90")
        flops = sum(estimate(lower_kernel(it.ast, target, name=it.name)).flops for it in asts)
        assert flops < 200_000, flops  # fused: 32.4 MFLOP (lower.estimate)
        np.testing.assert_allclose(t.numpy(), _pool_want(x), rtol=1e-5, atol=1e-9)
    cpu = _pool_of_softmaxes(x, "cpu")
    assert _decided(cpu) == []
    np.testing.assert_allclose(cpu.numpy(), _pool_want(x), rtol=1e-5, atol=1e-9)


def test_per_channel_statistics_under_a_pool() -> None:
    """A pool over an input centred by its per-image, per-channel mean: the mean moves with the batch and
    channel loops, not with the pooled ones (16 x 16 threads per mean): realized on a GPU target."""
    x = _arr(2, 3, 32, 32)
    with Context(PYTHON_TARGET="sm_80"):
        h = Tensor(x, device="python")
        t = (h - h.mean((2, 3), keepdim=True)).max_pool2d(2)
        assert _decided(t) == [THREAD_BROADCAST_REDUCE]
        c = x - x.mean((2, 3), keepdims=True)
        want = c.reshape(2, 3, 16, 2, 16, 2).max(axis=(3, 5))
        np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-6)


def test_build_kernel_returns_the_point_only_for_threads() -> None:
    """build_kernel gives the kernel on a cpu, the realize point where `threads` says the loops are a GPU's."""
    x = Tensor(_arr(1000)).realize()
    t = (x * x.sum()).reshape(8, 125).sum(1)  # row sums of a scaled x: the scale, a sum of 1,000, inline
    node, out = t.uop, UOp.buffer(9, dtypes.float32, (8,), None)
    buffers = {x.uop: UOp.buffer(0, dtypes.float32, (1000,), None)}
    assert not isinstance(build_kernel(node, out, buffers), RealizePoint)
    points: list[RealizePoint] = []
    p = build_kernel(node, out, buffers, points=points, threads=True)
    assert isinstance(p, RealizePoint) and p.rule == THREAD_BROADCAST_REDUCE and points == [p]
    assert p.node.op is Ops.REDUCE and p.node.shape in ((), (1,))
