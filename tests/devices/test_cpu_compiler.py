"""The cpu device's compile path: the compiler's identity without starting it, gcc/clang by name, and the
device's runtime library kept on disk under CACHE=0 while kernels are not."""

from __future__ import annotations

import os
import shutil

import pytest

from devices.cpu_compiler import Compiler, _identity
from rewrite.env import Context

SRC = "int twice(int x) { return 2 * x; }\n"


def test_identity_follows_the_binary(tmp_path: os.PathLike) -> None:
    exe = os.path.join(tmp_path, "mycc")
    with open(exe, "w") as f:
        f.write("#!/bin/sh\n")
    first = _identity(exe)
    os.utime(exe, ns=(1, 1))
    assert _identity(exe) != first  # an upgraded compiler gets new cache keys
    link = os.path.join(tmp_path, "cc-link")
    os.symlink(exe, link)
    assert _identity(link) == _identity(exe)


@pytest.mark.parametrize("name", ["gcc", "clang"])
def test_gcc_or_clang_by_name(name: str) -> None:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    with Context(CC=name):
        c = Compiler()
        assert c.is_clang == (name == "clang")
        assert ("-fexcess-precision=standard" in c.flags()) == (name == "gcc")
        assert c.load(SRC, "twice").twice(21) == 42


def test_runtime_library_stays_on_disk_under_cache_off(tmp_path: os.PathLike) -> None:
    with Context(CACHEDIR=str(tmp_path), CACHE=0):
        c = Compiler()
        assert c.load(SRC, "a kernel").twice(2) == 4
        cached = os.path.join(tmp_path, "cpu")
        assert not os.path.exists(cached) or not os.listdir(cached)
        assert c.load(SRC.replace("twice", "thrice").replace("2 *", "3 *"), "runtime", runtime=True).thrice(2) == 6
        assert len(os.listdir(cached)) == 1
