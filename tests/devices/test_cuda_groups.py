"""A cuda batch's compiles at once (devices.cuda.compile_groups): its kernels shared into .cu files of about equal
source, one per core, compiled on threads; needs no GPU."""

from __future__ import annotations

import os

import pytest

from devices.base import gpu_target
from devices.cuda import DEVICE
from rewrite.env import Context
from rewrite.errors import CompileError
from tests.devices.test_cuda_compile import lowered, needs_nvrtc, suite_kernels


def test_compile_groups_balance_source_and_keep_each_groups_order() -> None:
    from devices.cuda import GROUP_MIN_SOURCE, compile_groups

    big = GROUP_MIN_SOURCE
    assert compile_groups([big] * 5, 1) == [[0, 1, 2, 3, 4]]  # one core: the batch as it is
    assert compile_groups([10, 20, 30], 8) == [[0, 1, 2]]  # too little source to be worth two compiles
    groups = compile_groups([big, 3 * big, big, 2 * big, big, big], 3)
    assert sorted(i for g in groups for i in g) == list(range(6)) and all(g == sorted(g) for g in groups)
    loads = sorted(sum([big, 3 * big, big, 2 * big, big, big][i] for i in g) for g in groups)
    assert loads == [3 * big, 3 * big, 3 * big]
    assert compile_groups([big] * 2, 16) == [[0], [1]]  # never more groups than kernels
    assert compile_groups([big, 3 * big, big, 2 * big, big, big], 3) == groups  # the same batch, the same files


@needs_nvrtc
def test_a_batch_compiles_its_groups_at_once(tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    """With 3 cores the suite's kernels go into 3 .cu files compiled on threads at once: every kernel's function
    is in its own group's source, and each group's cubin is the one that source gives alone. A compile error in a
    thread is raised to the caller."""
    import devices.cuda as cuda

    progs = lowered(suite_kernels(), "sm_90", "gpu")
    monkeypatch.setattr(cuda, "_workers", lambda: 3)
    monkeypatch.setattr(cuda, "GROUP_MIN_SOURCE", 1)
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER="nvrtc"):
        ks = DEVICE.compile_batch(progs, gpu_target("sm_90"))
        srcs = {k.src: k.cubin for k in ks}
        assert len(srcs) == 3 and [k.name for k in ks] == [n for _, n in progs]
        for k in ks:
            assert f" {k.symbol}(" in k.src
        with Context(CACHE=0):
            for src, cubin in srcs.items():
                assert DEVICE.compiler.cubin(src, gpu_target("sm_90")) == cubin
        real = type(DEVICE.compiler).cubin

        def failing(self: object, src: str, target: object, what: str = "kernel") -> bytes:
            if "softmax" in src:
                raise CompileError("cuda: the softmax group fails")
            return real(self, src, target, what)  # type: ignore[arg-type]

        monkeypatch.setattr(type(DEVICE.compiler), "cubin", failing)
        with pytest.raises(CompileError, match="the softmax group fails"), Context(CACHE=0):
            DEVICE.compile_batch(progs, gpu_target("sm_90"))
