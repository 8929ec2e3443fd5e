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
        # gcc 12 miscompiled gated loads it if-converted (devices.cpu_compiler.GCC_EXACT_FLAGS), in both tiers
        assert all(("-fno-tree-loop-if-convert" in c.flags(tier=t)) == (name == "gcc") for t in ("opt", "fast"))
        assert c.load(SRC, "twice").twice(21) == 42


def test_runtime_library_stays_on_disk_under_cache_off(tmp_path: os.PathLike) -> None:
    with Context(CACHEDIR=str(tmp_path), CACHE=0):
        c = Compiler()
        assert c.load(SRC, "a kernel").twice(2) == 4
        cached = os.path.join(tmp_path, "cpu")
        assert not os.path.exists(cached) or not os.listdir(cached)
        assert c.load(SRC.replace("twice", "thrice").replace("2 *", "3 *"), "runtime", runtime=True).thrice(2) == 6
        assert len(os.listdir(cached)) == 1


# a kernel library's libm and libc calls (sinf, sqrt, fmaf, memcpy) and a libgcc helper (128-bit division) bind
# when it is linked lean (devices.cpu_compiler._LEAN_LINK), at both tiers, cached and not
LIBS_SRC = """
float sinf(float); double sqrt(double); float fmaf(float, float, float);
void* memcpy(void* restrict, const void* restrict, __SIZE_TYPE__);
double calls(volatile float x, volatile double y) {
  float s = sinf(x) + fmaf(x, x, 1.0f); unsigned u; memcpy(&u, &s, 4);
  volatile unsigned __int128 big = ((unsigned __int128)u << 64) | 12345u; volatile unsigned __int128 d = 977;
  return (double)s + sqrt(y) + (double)(unsigned long long)((big / d) % 1000003u);
}
"""


@pytest.mark.parametrize("libm", [True, False])
@pytest.mark.parametrize("cache", [0, 1])
@pytest.mark.parametrize("tier", ["opt", "fast"])
def test_kernel_library_calls_bind(tmp_path: os.PathLike, cache: int, tier: str, libm: bool,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """libm: whether the process is taken to have libm loaded (linked without -lm) or not (with it)."""
    import ctypes
    import math

    from devices import cpu_compiler

    if libm and not cpu_compiler._libm_loaded():
        pytest.skip("libm is not in this process's global scope")
    monkeypatch.setattr(cpu_compiler, "_LIBM", [libm])
    with Context(CACHEDIR=str(tmp_path), CACHE=cache):
        fn = Compiler().load(LIBS_SRC, "calls", tier=tier).calls
        fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_float, ctypes.c_double]
        x = ctypes.c_float(0.5).value
        s = ctypes.c_float(ctypes.c_float(math.sin(x)).value + ctypes.c_float(x * x + 1.0).value).value
        u = int.from_bytes(ctypes.c_float(s), "little")
        want = s + math.sqrt(2.0) + float(((u << 64) | 12345) // 977 % 1000003)
        assert fn(x, 2.0) == pytest.approx(want, rel=1e-6)
