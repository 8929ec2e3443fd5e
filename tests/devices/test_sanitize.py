"""SANITIZE=address: the cpu device's kernels under AddressSanitizer with exact-size buffers. A sample of
movement-heavy programs runs clean (and right), and a kernel that writes past its buffer is caught, so the
check can fail. Each runs in a child process with the ASan runtime preloaded."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from rewrite.env import Context

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _libasan() -> str | None:
    if shutil.which("gcc") is None:
        return None
    p = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return p if os.path.isabs(p) and os.path.exists(p) else None


LIBASAN = _libasan()
needs_asan = pytest.mark.skipif(LIBASAN is None, reason="gcc's libasan is not installed")


def _run(what: str, tmp_path: os.PathLike) -> subprocess.CompletedProcess:
    env = dict(os.environ, SANITIZE="address", LD_PRELOAD=LIBASAN or "", ASAN_OPTIONS="detect_leaks=0",
               CACHEDIR=str(tmp_path), PYTHONPATH=ROOT)
    env.pop("CC", None)  # gcc's libasan: the objects must be built by gcc
    return subprocess.run([sys.executable, os.path.join(ROOT, "tests", "devices", "asan_programs.py"), what],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)


@needs_asan
def test_movement_programs_run_clean_under_asan(tmp_path):
    r = _run("programs", tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "AddressSanitizer" not in r.stderr
    assert r.stdout.split()[-2:] == ["ok", "14"]


@needs_asan
def test_an_out_of_bounds_kernel_is_caught(tmp_path):
    r = _run("oob", tmp_path)
    assert "launching" in r.stdout and "not caught" not in r.stdout
    assert r.returncode != 0
    assert "AddressSanitizer: heap-buffer-overflow" in r.stderr and "WRITE of size 4" in r.stderr


def test_sanitize_without_the_runtime_is_a_typed_error(monkeypatch):
    import devices.cpu_compiler as cpu
    from rewrite.errors import DeviceError

    monkeypatch.setattr(cpu, "_ASAN_OK", [])
    with open("/proc/self/maps") as f:
        if "libasan" in f.read():
            pytest.skip("this process has the ASan runtime")
    with Context(SANITIZE="address"), pytest.raises(DeviceError, match="LD_PRELOAD"):
        cpu.Compiler().load("int f(void) { return 1; }\n", "k")
