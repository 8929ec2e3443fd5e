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


def _every_kernel_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each kernel offered ahead starts compiling at once, in a file of its own."""
    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "AHEAD_IDLE_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "_ahead_slots", lambda: 1000)


def _settle() -> None:
    """Wait for what earlier tests left compiling ahead."""
    for part in list(DEVICE._ahead.values()):
        if part.lib is not None:
            part.lib.result()


def test_kernels_compiled_ahead_are_taken_by_their_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    _every_kernel_at_once(monkeypatch)
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


def test_a_finished_file_starts_the_kernels_that_gathered_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file starts while a slot is free (here one) and the queue holds AHEAD_IDLE_CHARS: the first kernel at once;
    the next ones gather while it compiles, and the file that finishes starts them, from its own thread."""
    import threading

    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 10**9)
    monkeypatch.setattr(cpu_mod, "AHEAD_IDLE_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "_ahead_slots", lambda: 1)
    go, load = threading.Event(), cpu_mod._load

    def held(*a: object) -> object:
        assert go.wait(60)
        return load(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(cpu_mod, "_load", held)
    progs = _progs(4, "pull")
    with Context(CACHE=0):
        _settle()
        DEVICE.compile_ahead(*progs[0])
        assert not DEVICE._queue and DEVICE._ahead[progs[0]].lib is not None  # started: the slot was free
        DEVICE.compile_ahead(*progs[1])
        DEVICE.compile_ahead(*progs[2])
        assert [DEVICE._ahead[p].lib for p in progs[1:3]] == [None, None]  # gather: the slot is taken
        first = DEVICE._ahead[progs[0]].lib
        assert first is not None
        go.set()
        first.result()
        later = DEVICE._ahead[progs[1]].lib  # started by the file that finished, both in one file
        assert later is not None and DEVICE._ahead[progs[2]].lib is later and not DEVICE._queue
        ks = DEVICE.compile_batch(progs)  # the 4th never offered ahead
    assert not DEVICE._queue and not DEVICE._inflight
    assert len({id(k.lib) for k in ks}) == 3
    _check(ks, 4)


def test_the_batch_shares_out_what_gathered(monkeypatch: pytest.MonkeyPatch) -> None:
    """At compile_batch the kernels still gathering go to files of the batch's own, one per core, the one for the
    core still compiling a file of compile_ahead smaller by what that file has left (the larger starts first)."""
    import threading

    monkeypatch.setattr(cpu_mod, "AHEAD_CHARS", 10**9)
    monkeypatch.setattr(cpu_mod, "AHEAD_IDLE_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "_ahead_slots", lambda: 1)
    monkeypatch.setattr(cpu_mod, "MIN_CHUNK_CHARS", 1)
    monkeypatch.setattr(cpu_mod, "_compile_workers", lambda: 2)
    go, load, job = threading.Event(), cpu_mod._load, cpu_mod._Job
    made: list[str] = []
    weights: list[int] = []  # the files' sizes in the order their jobs start

    def held(compiler: object, src: str, *a: object) -> object:
        made.append(src)
        if "share_0(" in src:  # compile_ahead's file of the first kernel waits (the batch's files compile)
            assert go.wait(60)
        return load(compiler, src, *a)  # type: ignore[arg-type]

    def started(fn: object, *a: object, weight: int = 0, **k: object) -> object:
        weights.append(weight)
        return job(fn, *a, weight=weight, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(cpu_mod, "_load", held)
    monkeypatch.setattr(cpu_mod, "_Job", started)
    progs = _progs(8, "share")
    with Context(CACHE=0):
        _settle()
        for p in progs:
            DEVICE.compile_ahead(*p)
        assert len(DEVICE._queue) == 7  # the first compiles (held), the rest gather
        threading.Timer(0.2, go.set).start()
        ks = DEVICE.compile_batch(progs)
    assert len(made) == 1 + 2 and len({id(k.lib) for k in ks}) == 3  # one file per core
    kernels = {len(src): src.count("void share_") for src in made if "share_0(" not in src}
    batch = [kernels[w] for w in weights[1:] if w in kernels]  # the batch's files, in the order they started
    assert sum(batch) == 7 and batch[0] > batch[1]  # the free core's file is the larger and starts first
    assert not DEVICE._queue and not DEVICE._inflight
    _check(ks, 8)


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

    _every_kernel_at_once(monkeypatch)
    started: list[int] = []
    start = cpu_mod.CPUDevice._start
    monkeypatch.setattr(cpu_mod.CPUDevice, "_start", lambda self, n: (started.append(n), start(self, n)))
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
