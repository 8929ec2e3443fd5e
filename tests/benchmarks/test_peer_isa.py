"""benchmarks.peer_isa: with CPU_TARGET below the host's level, the peers are held to that level too, and each
peer's switch really takes effect (checked in a child process, where the switches are read at import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks.peer_isa import LEVELS, MARK, host_level, numpy_above, peer_env
from benchmarks.report import caption

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
x86_v3 = pytest.mark.skipif(host_level() not in LEVELS[2:], reason="needs an x86-64 host of level v3 or above")


def test_no_limit_at_or_above_the_host_level() -> None:
    for req in ("x86-64-v3", "x86-64-v4", "native", "aarch64", ""):
        assert peer_env(req, "x86-64-v3") == {}
    assert peer_env("x86-64-v2", "") == {}  # not an x86 host: nothing to hold


def test_switches_for_a_lower_level() -> None:
    env = peer_env("x86-64-v3", "x86-64-v4")
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["ATEN_CPU_CAPABILITY"] == "avx2"
    assert env["MKL_ENABLE_INSTRUCTIONS"] == "AVX2" and env["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert env["DEV"] == "CPU:CLANG:x86_64,x86-64-v3" and env[MARK] == "x86-64-v3"
    off = env["NPY_DISABLE_CPU_FEATURES"].split()
    assert off == numpy_above("x86-64-v3")
    assert not any(n in off for n in ("X86_V3", "AVX2", "FMA3")), off
    assert all(n.startswith(("AVX512", "X86_V4")) for n in off), off
    off2 = peer_env("x86-64-v2", "x86-64-v4")["NPY_DISABLE_CPU_FEATURES"].split()
    assert set(off) < set(off2) and any(n in off2 for n in ("X86_V3", "AVX2")), off2


_PROBE = """
import json, numpy
try:
    from numpy._core._multiarray_umath import __cpu_features__ as f
except ImportError:
    from numpy.core._multiarray_umath import __cpu_features__ as f
out = {"numpy_on": [k for k in %r if f.get(k)]}
try:
    import torch
    out["torch"] = torch.backends.cpu.get_cpu_capability()
except ImportError:
    pass
try:
    from threadpoolctl import threadpool_info
    out["blas"] = [i.get("architecture") for i in threadpool_info() if i.get("internal_api") == "openblas"]
except ImportError:
    pass
print(json.dumps(out))
"""


@x86_v3
def test_each_peer_honours_its_switch() -> None:
    """Held to x86-64-v2 (below any host this runs on): numpy dispatches to none of its higher targets, ATen runs
    its default (non-AVX) kernels, OpenBLAS its Nehalem ones."""
    env = peer_env("x86-64-v2", host_level())
    above = numpy_above("x86-64-v2")
    r = subprocess.run([sys.executable, "-c", _PROBE % (above,)], env={**os.environ, **env}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["numpy_on"] == [], out
    if "torch" in out:
        assert out["torch"] == "DEFAULT", out
    if out.get("blas"):
        assert set(out["blas"]) == {"Nehalem"}, out


@x86_v3
def test_runner_restarts_with_the_peers_held() -> None:
    """`CPU_TARGET=x86-64-v2 python -m benchmarks --help` restarts itself once with the switches set and says so."""
    env = {k: v for k, v in os.environ.items() if k != MARK}
    r = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, capture_output=True, text=True,
                       env={**env, "CPU_TARGET": "x86-64-v2"}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("peers held to x86-64-v2") == 1 and "OPENBLAS_CORETYPE=Nehalem" in r.stderr
    assert "usage" in r.stdout


def test_caption_names_the_held_level() -> None:
    run: dict[str, object] = {"cpu": "c", "target": "x86-64-v3 (AVX2, FMA)", "threads": 2, "load_start": [0.1],
                              "load_end": [0.2], "mode": "quick", "date": "2026-11-28T00:00:00"}
    assert "peers held" not in caption({**run, "peers_isa": "host"})
    assert "peers held to x86-64-v3" in caption({**run, "peers_isa": "x86-64-v3"})


def test_tinygrad_dev_follows_the_mark(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks.peer_isa import tinygrad_dev

    monkeypatch.delenv(MARK, raising=False)
    assert tinygrad_dev() == "CPU"
    monkeypatch.setenv(MARK, "x86-64-v3")
    assert tinygrad_dev() == "CPU:CLANG:x86_64,x86-64-v3"
