"""benchmarks/gpu_check.sh without a GPU: its dry run (plan, budget under 8 minutes with and without BEAM, syntax,
every module importable with its arguments, the benchmark's cases covering the issue's targets), the file count
the device machine brings back (at most 8), and tinygrad's compile-time probe on tinygrad's python device."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _dry(tmp_path: pathlib.Path, **env: str) -> str:
    run = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable, "OUT": str(tmp_path), **env})
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


@pytest.mark.parametrize("beam", ["0", "2"])
def test_dry_run_plan_fits_the_budget(tmp_path: pathlib.Path, beam: str) -> None:
    out = _dry(tmp_path, BEAM=beam)
    budget = int(re.search(r"budget (\d+) s of 480", out).group(1))  # type: ignore[union-attr]
    assert budget <= 480
    steps = re.findall(r"^  (.+?)\s+(\d+) s  -> (\S+)", out, re.M)
    assert sum(int(s[1]) for s in steps) + 5 * len(steps) == budget
    names = [s[0] for s in steps]
    assert "benchmark" in names and "cold compile per kernel" in names and "gpu tests" in names
    assert (f"benchmark under BEAM={beam}" in names) == (beam != "0")
    assert ("compile CI tests" in names) == (beam == "0")  # skipped under BEAM to stay in the budget
    assert "syntax: ok" in out and "modules, arguments and the targets' cases: ok" in out
    assert not any(tmp_path.iterdir())  # a dry run writes nothing


def test_skip_nvcc_measures_the_reductions_without_warp_shuffles_in_its_place(tmp_path: pathlib.Path) -> None:
    """SKIP_NVCC=1 (the compile tests are CI's): in their time the reduction cases run again under WARP_REDUCE=0,
    so one GPU session compares the warp-shuffle reductions with the shared-memory tree; no file more."""
    out = _dry(tmp_path, SKIP_NVCC="1")
    steps = re.findall(r"^  (.+?)\s+(\d+) s  -> (\S+)\s+(.*)$", out, re.M)
    names = [s[0] for s in steps]
    assert "compile CI tests" not in names and "WARP_REDUCE=0 reductions" in names
    cmd = next(s[3] for s in steps if s[0] == "WARP_REDUCE=0 reductions")
    assert "--variants WARP_REDUCE=0" in cmd and "--json /dev/null" in cmd
    assert all(c in cmd for c in ("softmax_4096", "layernorm", "attention"))
    assert int(re.search(r"budget (\d+) s of 480", out).group(1)) <= 480  # type: ignore[union-attr]


def test_at_most_eight_files_come_back() -> None:
    """The device machine returns at most 8 files from $OUT: the script names every one it writes (the GPU run's,
    and HOST_CPU=1's, which runs none of the GPU steps)."""
    text = SCRIPT.read_text()
    written = set(re.findall(r"\$OUT/([\w.-]+)", text)) | {"env.txt", "tests.log", "bench.log"}
    host = {f for f in written if "host-cpu" in f}
    assert len(written - host) <= 8, written
    assert len(host | {"env.txt", "summary.txt", "bench.log"}) <= 8


def test_host_cpu_dry_run_runs_only_the_cpu_kernels(tmp_path: pathlib.Path) -> None:
    out = _dry(tmp_path, HOST_CPU="1")
    names = [s[0] for s in re.findall(r"^  (.+?)\s+(\d+) s  -> (\S+)", out, re.M)]
    assert names == ["env", "host cpu kernels", "host cpu kernels, x86-64-v3"]
    assert "CPU_TARGET=x86-64-v3" in out and "syntax: ok" in out


def test_tinygrad_probe_times_each_kernel(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("tinygrad")
    path = tmp_path / "tg.json"
    env = {**os.environ, "DEV": "PYTHON", "CACHELEVEL": "0", "PARALLEL": "0", "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "benchmarks.gpu_compile_tinygrad", "--tiny", "--json", str(path)], cwd=ROOT,
                   env=env, timeout=300, check=True, capture_output=True)
    got = json.loads(path.read_text())
    assert got["error"] is None and len(got["ms"]) == 2 and all(t > 0 for t in got["ms"])


def test_tinygrad_compiles_for_a_gpu_without_one(tmp_path: pathlib.Path) -> None:
    """Without a GPU, tinygrad's cold compile runs on its null device with its CUDA renderer and the NVRTC library
    ours loads: the kernels are CUDA C compiled to sm_90 cubins, timed one by one."""
    pytest.importorskip("tinygrad")
    from benchmarks.gpu_compile import tinygrad_compile, tinygrad_dev
    from devices.cuda_compile import _find_nvrtc
    from rewrite.errors import CompileError

    try:
        _find_nvrtc()
    except CompileError:
        pytest.skip("no NVRTC library here")
    dev = tinygrad_dev("sm_90")
    assert dev in ("CUDA", "NULL:CUDA:sm_90")
    got = tinygrad_compile(str(tmp_path / "tg.json"), "NULL:CUDA:sm_90", timeout=240, tiny=True)
    assert got["error"] is None and got["dev"] == "NULL:CUDA:sm_90", got
    assert len(got["ms"]) == 2 and all(t > 0 for t in got["ms"])


def test_benchmark_variants_parse_knob_groups() -> None:
    """`python -m benchmarks gpu --variants`: groups of declared knob settings; anything else is refused."""
    from benchmarks.gpu import parse_variants

    assert parse_variants("") == [{}]
    assert parse_variants("WGMMA=1; WGMMA=1,TMA=1") == [{"WGMMA": "1"}, {"WGMMA": "1", "TMA": "1"}]
    assert parse_variants("WARP_REDUCE=0") == [{"WARP_REDUCE": "0"}]
    for bad in ("WGMMA", "NOPE=1", "WGMMA=maybe"):
        with pytest.raises(ValueError):
            parse_variants(bad)
