"""Targets: detection from CPU flags, explicit levels, cache keys, and the registry's answers."""

from __future__ import annotations

import pytest

from devices import get_device, target_for
from devices.base import CPU_TARGET_NAMES, cpu_target, host_arch, python_target, x86_level
from rewrite.env import Context
from rewrite.errors import DeviceError, KnobError

V2 = {"cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"}
V3 = V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
V4 = V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.parametrize(("flags", "level"), [
    (set(), "x86-64"), (V2, "x86-64-v2"), (V3, "x86-64-v3"), (V4, "x86-64-v4"),
    (V2 | {"avx", "avx2", "fma"}, "x86-64-v2"),  # AVX2 without BMI2/MOVBE is not v3
    (V4 - {"avx512vl"}, "x86-64-v3"),  # AVX-512F alone (Xeon Phi style) is not v4
    (V4 - {"sse4_2"}, "x86-64"),  # a level needs every lower level
])
def test_x86_level_from_flags(flags: set[str], level: str) -> None:
    assert x86_level(frozenset(flags)) == level


@pytest.mark.parametrize(("name", "vbytes", "vregs", "fma"), [
    ("x86-64-v2", 16, 16, False), ("x86-64-v3", 32, 16, True), ("x86-64-v4", 64, 32, True), ("aarch64", 16, 32, True),
])
def test_explicit_levels(name: str, vbytes: int, vregs: int, fma: bool) -> None:
    t = cpu_target(name)
    assert (t.vector_bytes, t.vector_registers, t.fma, t.isa) == (vbytes, vregs, fma, name)
    assert t.lanes(4) == vbytes // 4 and t.lanes(8) == vbytes // 8
    assert t.cores >= 1 and t.l1d_bytes > 0 and t.l2_bytes >= t.l1d_bytes
    if name == "aarch64":
        assert "-march=armv8-a" in t.compile_flags
        assert t.runs_here == (host_arch() == "aarch64")
    else:
        assert f"-march={name}" in t.compile_flags


def test_native_is_the_hosts_level() -> None:
    t = cpu_target("native")
    assert t.runs_here and t.compile_flags[:1] in (("-march=native",), ("-mcpu=native",), ())
    if host_arch() == "x86_64":  # 64-byte registers: gcc must not prefer 256-bit vectors (some Intel tunings do)
        assert ("-mprefer-vector-width=512" in t.compile_flags) == (t.vector_bytes == 64)
        assert t.vector_bytes == cpu_target(t.isa).vector_bytes
        assert cpu_target(t.isa).runs_here
    assert str(t).startswith("cpu ")


def test_keys_differ_per_target() -> None:
    keys = {cpu_target(n).key for n in CPU_TARGET_NAMES} | {python_target().key}
    assert len(keys) == len(CPU_TARGET_NAMES) + 1
    assert cpu_target("x86-64-v3").with_(cores=1).key != cpu_target("x86-64-v3").key


def test_unknown_target_is_a_typed_error() -> None:
    with pytest.raises(DeviceError, match=r"CPU_TARGET='avx9' is not a known cpu target; use one of native"):
        cpu_target("avx9")
    with pytest.raises(KnobError, match="CPU_TARGET"), Context(CPU_TARGET="avx9"):
        target_for("cpu")


def test_registry_default_targets() -> None:
    with Context(CPU_TARGET="x86-64-v2"):
        assert target_for("cpu") is cpu_target("x86-64-v2")
    assert target_for("python").interpreted and not target_for("cpu").interpreted
    cuda = get_device("cuda")
    ok, why = cuda.available()
    if ok:  # the GPU's own compute capability and multiprocessor count
        t = target_for("cuda")
        assert t.arch == "cuda" and t.warp_size == 32 and t.cores > 0
    else:  # no driver or no GPU: a typed error that says so, never a crash
        with pytest.raises(DeviceError, match="cuda: "):
            target_for("cuda")
        assert "cuda" in why


def test_code_for_a_missing_level_is_refused_not_run() -> None:
    """Code for an instruction set the host lacks would die with SIGILL: the cpu device refuses to load it."""
    from devices.cpu import DEVICE

    missing = next((cpu_target(n) for n in ("x86-64-v4", "aarch64") if not cpu_target(n).runs_here), None)
    if missing is None:
        pytest.skip("this host runs every listed target")
    with pytest.raises(DeviceError, match="cannot run on this host"):
        DEVICE.compiler.load("int f(void) { return 1; }", "probe", missing)
