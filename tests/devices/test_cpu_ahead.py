"""compile_ahead: kernels whose compile begins while later ones are still being lowered (devices.cpu).

The results must be exactly what a plain batch gives: the same kernels, the same source per kernel, the same
outputs, whichever of them were compiled ahead, still gathering, or never offered ahead."""

from __future__ import annotations

import numpy as np
import pytest

import devices.cpu as cpu_mod
from devices.cpu import DEVICE
from rewrite.dtype import dtypes
from rewrite.env import Context
from tests.devices.builder import elementwise

I32 = dtypes.int32


def _progs(n: int, tag: str) -> list[tuple]:
    return [(elementwise(lambda a, k=k: a * (k + 3) + 7, I32, [I32], 5), f"{tag}_{k}") for k in range(n)]


def _check(kernels: list, n: int) -> None:
    x = np.arange(5, dtype=np.int32)
    for k, kern in enumerate(kernels[:n]):
        out = np.zeros(5, np.int32)
        kern({0: out, 1: x})
        assert out.tolist() == (x * (k + 3) + 7).tolist()


def test_kernels_compiled_ahead_are_taken_by_their_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 1)  # every kernel starts compiling at once, in its own file
    progs = _progs(4, "ahead")
    with Context(CACHE=0):
        for linear, name in progs[:3]:
            DEVICE.compile_ahead(linear, name)
        assert all(DEVICE._ahead[p].lib is not None for p in progs[:3])
        ks = DEVICE.compile_batch(progs)  # the 4th was never offered ahead: compiled here
    assert not any(p in DEVICE._ahead for p in progs) and not DEVICE._queue
    assert len({id(k.lib) for k in ks}) == 4
    _check(ks, 4)


def test_kernels_still_gathering_join_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 10**9)  # nothing reaches the size to start
    monkeypatch.setattr(cpu_mod, "AHEAD_IDLE_CHARS", 10**9)
    progs = _progs(3, "gather")
    with Context(CACHE=0):
        for linear, name in progs[:2]:
            DEVICE.compile_ahead(linear, name)
        assert len(DEVICE._queue) == 2
        ks = DEVICE.compile_batch(progs)
    assert not DEVICE._queue and not any(p in DEVICE._ahead for p in progs)
    assert len({id(k.lib) for k in ks}) == 1  # one file, as without compile_ahead
    _check(ks, 3)


def test_an_idle_compiler_starts_a_small_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below AHEAD_CHARS a file starts only while no compile runs or waits (AHEAD_IDLE_CHARS): the first kernel
    of a realize starts at once, the next one gathers while a compile is still pending."""
    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 10**9)
    monkeypatch.setattr(cpu_mod, "AHEAD_IDLE_CHARS", 1)
    progs = _progs(3, "idle")
    with Context(CACHE=0):
        for job in list(DEVICE._ahead.values()):  # nothing of an earlier test still compiling
            if job.lib is not None:
                job.lib.result()
        assert not cpu_mod._RUNNING.busy()
        DEVICE.compile_ahead(*progs[0])
        assert not DEVICE._queue and DEVICE._ahead[progs[0]].lib is not None  # started: nothing else was pending
        monkeypatch.setattr(cpu_mod._RUNNING, "busy", lambda: True)  # as if that compile still ran
        DEVICE.compile_ahead(*progs[1])
        assert DEVICE._queue and DEVICE._ahead[progs[1]].lib is None  # gathers: the compiler is busy
        monkeypatch.undo()
        ks = DEVICE.compile_batch(progs)
    assert not cpu_mod._RUNNING.busy() and not DEVICE._queue
    _check(ks, 3)


def test_render_is_the_same_text_ahead_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 10**9)
    monkeypatch.setattr(cpu_mod, "AHEAD_IDLE_CHARS", 10**9)
    (linear, name), = _progs(1, "same_text")
    plain = DEVICE.render(linear, name)
    DEVICE._rendered.clear()
    DEVICE.compile_ahead(linear, name)
    assert DEVICE.render(linear, name) == plain
    with Context(CACHE=0):
        _check(DEVICE.compile_batch([(linear, name)]), 1)


def test_a_realize_of_many_kernels_with_every_kernel_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """lower.realize offers each kernel as it is lowered; with every one started at once the results stay
    numpy's."""
    from tensor import Tensor

    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 1)
    started: list[int] = []
    flush = cpu_mod.CPUDevice._flush
    monkeypatch.setattr(cpu_mod.CPUDevice, "_flush", lambda self: (started.append(len(self._queue)), flush(self)))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((13, 17)).astype(np.float32), rng.standard_normal((17, 5)).astype(np.float32)
    with Context(CACHE=0):
        x, y = Tensor(a), Tensor(b)
        h = (x @ y).relu()
        out = (h - h.mean(0, keepdim=True)).exp().sum(1).numpy()
    hh = np.maximum(a @ b, 0)
    np.testing.assert_allclose(out, np.exp(hh - hh.mean(0, keepdims=True)).sum(1), rtol=1e-5)
    assert len(started) >= 2 and not DEVICE._queue  # several kernels began ahead


def test_one_core_compiles_nothing_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no second core there is nothing to overlap: kernels wait for their batch (one file, as before)."""
    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "_compile_workers", lambda: 1)
    progs = _progs(2, "one_core")
    with Context(CACHE=0):
        DEVICE.compile_ahead(*progs[0])
        assert progs[0] not in DEVICE._ahead and not DEVICE._queue
        ks = DEVICE.compile_batch(progs)
    assert ks[0].lib is ks[1].lib
    _check(ks, 2)
