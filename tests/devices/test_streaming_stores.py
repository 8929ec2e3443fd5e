"""Streaming stores (rules.streaming, devices.c_vector): a map kernel's output of at least the Target's
`stream_bytes` is written with non-temporal vector moves, on every x86-64 level, and the results are the
reference's; what must not stream does not (reductions, an output the kernel reads, a small output, a ragged
edge), and a misaligned output falls back to plain stores."""

from __future__ import annotations

import os
import re
import tempfile

import numpy as np
import pytest

from devices import get_device
from devices.base import Target, cpu_target, host_arch
from devices.cpu import build_object
from devices.cpu_cross import compile_emulated, cross_compiler, emulator
from lower.schedule import ScheduleItem
from lower.stages import lower_kernel
from rewrite import Ops, UOp, dtypes, graph_rewrite
from rewrite.spec import violations
from rules.streaming import Streaming, _coefficients, streaming_stores
from tensor import Tensor

LEVELS = ("x86-64-v2", "x86-64-v3", "x86-64-v4", "aarch64")
# the move each x86 level's registers make: SSE2 16 bytes, AVX 32, AVX-512 64
_MOVE = {"x86-64-v2": r"\bmovntdq\s+%xmm", "x86-64-v3": r"\bvmovntdq\s+%ymm", "x86-64-v4": r"\bvmovntdq\s+%zmm"}


def _small(level: str) -> Target:
    return cpu_target(level).with_(stream_bytes=4096, cores=2)  # a 1,024-float output streams


def _kernel(t: Tensor) -> ScheduleItem:
    items = [i for i in t.schedule() if i.kind == "kernel"]
    assert len(items) == 1, items
    return items[0]


def _streams(lin: UOp) -> list[UOp]:
    return [u for u in lin.src if u.op is Ops.STORE and u.arg == "stream"]


def _run(lin: UOp, it: ScheduleItem, target: Target, ins: dict[int, np.ndarray]) -> np.ndarray | None:
    """The output the target computes (None: an x86 level this host lacks, compiled only)."""
    got = {i: a.copy() for i, a in ins.items()}
    if target.runs_here:
        get_device("cpu").compile(lin, it.name, target)(got)
    elif target.arch == "aarch64":
        if cross_compiler(target) is None or emulator(target) is None:
            pytest.skip("gcc-aarch64-linux-gnu or qemu-user is not installed")
        compile_emulated(lin, it.name, target)(got)
    else:
        return None
    return got[0]


def _assembly(src: str, target: Target) -> str:
    with tempfile.TemporaryDirectory() as d:
        build_object(src, os.path.join(d, "k.s"), target, "assembly", extra=("-S",))
        with open(os.path.join(d, "k.s")) as f:
            return f.read()


@pytest.mark.parametrize("level", LEVELS)
def test_a_big_map_output_streams_on_every_target(level: str) -> None:
    target = _small(level)
    if target.arch != host_arch() and not target.compiler_prefix:
        pytest.skip(f"no cross compiler for {target.arch} on this {host_arch()} host")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4096, dtype=np.float32), rng.standard_normal(4096, dtype=np.float32)
    it = _kernel(Tensor(a) * 2.0 + Tensor(b))
    lin = lower_kernel(it.ast, target)
    if target.arch == "aarch64":  # no streaming store there: stream_bytes 0 in its own Target, plain stores
        assert cpu_target(level).stream_bytes == 0
    assert _streams(lin) and not violations(lin, "linear")
    src = get_device("cpu").render(lin, it.name)
    assert "vstream_" in src and "STREAM_FENCE();" in src
    ins = {0: np.zeros(4096, np.float32), 1: a, 2: b} if it.bufs[1].shape else {}
    ref = {i: x.copy() for i, x in ins.items()}
    get_device("python").compile(lin, it.name)(ref)  # the reference reads "stream" as a plain STORE
    np.testing.assert_allclose(ref[0], a * 2 + b, rtol=1e-6)
    got = _run(lin, it, target, ins)
    if got is not None:
        np.testing.assert_array_equal(got, ref[0])
    if target.arch == "x86_64" and cross_compiler(target) is not None:
        asm = _assembly(src, target)
        assert re.search(_MOVE[level], asm) and "sfence" in asm, asm


def test_misaligned_output_falls_back_to_plain_stores() -> None:
    """The streaming move faults on a misaligned address: the helper tests it and stores plainly instead."""
    target = _small("native")
    rng = np.random.default_rng(1)
    a = rng.standard_normal(4096, dtype=np.float32)
    it = _kernel(Tensor(a) + 1.0)
    lin = lower_kernel(it.ast, target)
    assert _streams(lin)
    kernel = get_device("cpu").compile(lin, it.name, target)
    for shift in (0, 1, 3):  # the output 4 and 12 bytes past a 64-byte boundary, and on it
        store = np.zeros(4096 + 16, np.float32)
        base = (-store.ctypes.data % 64) // 4
        out = store[base + shift:base + shift + 4096]
        bufs = {0: out, 1: a.copy()}
        kernel(bufs)
        np.testing.assert_array_equal(bufs[0], a + np.float32(1.0))


def _streamed(t: Tensor, target: Target) -> bool:
    return bool(_streams(lower_kernel(_kernel(t).ast, target)))


def test_what_must_not_stream_does_not() -> None:
    target = _small("native")
    x = np.ones((64, 64), np.float32)
    assert not _streamed(Tensor(x).sum(1) + 1.0, target)  # a reduction kernel
    assert not _streamed(Tensor(np.ones(4096, np.float32)) + 1.0, cpu_target("native").with_(stream_bytes=0))
    assert not _streamed(Tensor(np.ones(1000, np.float32)) + 1.0, target)  # 4,000 bytes: below the size
    # a ragged edge: its last vector's store is gated
    assert not _streamed(Tensor(np.ones(4099, np.float32)) + 1.0, target.with_(stream_bytes=4096))


def _store_at(index: UOp) -> UOp:
    out, src = UOp.buffer(0, dtypes.float32, (4096,)), UOp.buffer(1, dtypes.float32, (4096,))
    return UOp(Ops.STORE, (out.index(index), src.index(index).load()))


def test_the_rule_streams_only_whole_lines_in_order() -> None:
    """The rule on hand-made stores of 8 consecutive lanes: streamed when its finest loop steps one vector,
    not when that loop steps further (lines written in pieces), when two loops step one vector, or when the
    lanes are not consecutive."""
    r0, r1 = UOp.range(8, 0), UOp.range(64, 1)
    lanes, strided = UOp.vconst(list(range(8))), UOp.vconst([2 * i for i in range(8)])
    ctx = Streaming(4096, frozenset({UOp.buffer(1, dtypes.float32, (4096,))}))

    def streams(index: UOp) -> bool:
        return graph_rewrite(_store_at(index), streaming_stores, ctx).arg == "stream"

    assert streams(r1 * 64 + r0 * 8 + lanes)
    assert not streams(r0 * 64 + r1 * 16 + lanes)  # the finest loop skips half of each 64-byte pair of vectors
    assert not streams(r0 * 8 + r1 * 8 + lanes)  # two loops one vector apart: the same lines twice
    assert not streams(r1 * 64 + r0 * 8 + strided)
    assert not streams(UOp.const(0) + lanes)  # one vector, no loop: nothing to stream
    small = Streaming(1 << 20, ctx.loaded)
    assert graph_rewrite(_store_at(r1 * 64 + r0 * 8 + lanes), streaming_stores, small).arg is None


def test_an_output_the_kernel_reads_does_not_stream() -> None:
    """An in-place update reads the buffer it writes: its stores stay plain (a streamed line would leave the cache
    the next read wants it in)."""
    target = _small("native")
    t = Tensor(np.ones(4096, np.float32)).realize()
    t.assign(t * 2.0 + 1.0)
    lin = lower_kernel(_kernel(t).ast, target)
    out = [u.src[0].src[0] for u in lin.src if u.op is Ops.STORE]
    assert out and any(u.op is Ops.LOAD and u.src[0].src[0] in out for u in lin.src)
    assert not _streams(lin)
    np.testing.assert_array_equal(t.numpy(), np.full(4096, 3.0, np.float32))


def test_the_default_target_streams_only_past_the_last_level_cache() -> None:
    t = cpu_target("native")
    if t.arch != "x86_64":
        assert t.stream_bytes == 0
    else:
        assert t.stream_bytes == t.l3_bytes > 0


def test_coefficients_of_index_expressions() -> None:
    r0, r1 = UOp.range(8, 0), UOp.range(16, 1)
    core = UOp(Ops.SPECIAL, (UOp.const(2),), "core_id")
    assert _coefficients((core * 128 + r0) * 16 + r1 * 8) == {r0: 16, r1: 8}
    assert _coefficients(r0 * 4 + r0 * 4) == {r0: 8}
    assert _coefficients(core * 3) == {}
    assert _coefficients((r0 * 8) // 2) is None  # not affine
