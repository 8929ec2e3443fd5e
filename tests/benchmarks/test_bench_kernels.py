"""Smoke tests of the `kernels` benchmark suite and the machine-limits probe, at --quick sizes (well under 20 s).

They check that the pieces run and produce well-formed rows, not how fast anything is: timings on a shared
2-vCPU machine are too noisy to assert on.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import time

import numpy as np
import pytest

from benchmarks import bench_kernels as bk
from benchmarks import kernel_cases as kc
from benchmarks import kernel_peers as kp
from benchmarks import kernel_worker as kw
from benchmarks import limits as ml
from benchmarks.report import suite_json
from benchmarks.runner import Bench, Progress, Timed
from devices import target_for
from devices.base import cpu_target, host_arch


def _fake_limits(quick: bool = True) -> ml.Limits:
    rows = [ml.Row("fma_avx512", 1, "GFLOP/s", 200.0, 240.0, [200.0, 240.0]),
            ml.Row("fma_avx512", 2, "GFLOP/s", 400.0, 470.0, [400.0, 470.0]),
            ml.Row("triad", 1, "GB/s", 15.0, 17.0, [15.0, 17.0]),
            ml.Row("triad", 2, "GB/s", 25.0, 30.0, [25.0, 30.0]),
            ml.Row("triad_cache", 1, "GB/s", 28.0, 29.0, [28.0, 29.0]),
            ml.Row("triad_cache", 2, "GB/s", 55.0, 58.0, [55.0, 58.0])]
    return ml.Limits(ml.machine_key(), ml.cpu_model(), 2, "now", quick, "cc", 0.0, rows)


# ---------------------------------------------------------------------------- limits


@pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")), reason="no C compiler")
def test_limits_program_compiles_and_reports(tmp_path):
    exe, ident = ml._compile(str(tmp_path))
    assert ident
    peak = subprocess.run([exe, "peak", "1", "0.002"], capture_output=True, text=True, check=True)
    stream = subprocess.run([exe, "stream", "3", "0.001", "_t"], capture_output=True, text=True, check=True)
    rows = ml._parse(peak.stdout) + ml._parse(stream.stdout)
    names = {r.name for r in rows}
    assert {"fma_scalar", "triad_t", "copy_t", "read_t"} <= names
    assert all(r.median > 0 and r.best >= r.median and r.samples for r in rows)
    assert {r.threads for r in rows} >= {1}


_PEAK_ASM = {"x86-64-v2": (r"\bmulps\s+%xmm", "%ymm"), "x86-64-v3": (r"\bvfmadd\w*ps\s+%ymm", "%zmm"),
             "x86-64-v4": (r"\bvfmadd\w*ps\s+%zmm", None)}


@pytest.mark.skipif(shutil.which("gcc") is None or host_arch() != "x86_64", reason="needs gcc on x86-64")
@pytest.mark.parametrize("level", list(_PEAK_ASM))
def test_limits_peak_uses_the_targets_vectors(tmp_path, level):
    """The peak's chains are one register of the target wide and as many as chain_counts says: in the machine
    code, that many vector multiply-adds of the target's register class (FMA where it has FMA) and none of a
    wider class; where the target runs here, the program reports the target's rows."""
    target = cpu_target(level)
    src = tmp_path / "limits.c"
    src.write_text(ml.program_source(target))
    asm = tmp_path / "limits.s"
    subprocess.run(["gcc", "-O3", *target.compile_flags, "-ffp-contract=fast", "-S", str(src), "-o", str(asm)],
                   check=True)
    text = asm.read_text()
    want, wider = _PEAK_ASM[level]
    n_vec = ml.chain_counts(target)[0]
    assert len(re.findall(want, text)) >= n_vec and (wider is None or wider not in text)
    if target.runs_here:
        exe, _ = ml._compile(str(tmp_path), target)
        out = subprocess.run([exe, "peak", "1", "0.002"], capture_output=True, text=True, check=True).stdout
        names = {r.name for r in ml._parse(out)}
        assert names == {n + s for n in ml.row_names(target) for s in ("", "_cpu")}, names


def test_triad_now_measures_this_moment():
    """The triad a GB/s case is compared with, measured now (a small working set here: a smoke test)."""
    one = ml.triad_now(1, mib=48, gb=0.05)
    assert one is not None and 0.5 < one < 2000, one
    assert ml.triad_now(1, target=cpu_target("aarch64" if host_arch() == "x86_64" else "x86-64-v2")) is None
    both = ml.triads_now(1, mib=48, gb=0.05)  # on x86 also the triad with streaming stores
    assert set(both) == ({"triad", "triad_nt"} if host_arch() == "x86_64" else {"triad"}), both
    assert all(0.5 < v < 2000 for v in both.values()), both


def test_limits_are_kept_per_target():
    v2, v3 = cpu_target("x86-64-v2"), cpu_target("x86-64-v3")
    assert ml.machine_key(v2) != ml.machine_key(v3) and ml.cache_path(v2) != ml.cache_path(v3)
    assert ml.row_names(v2) == ("muladd_sse", "muladd_scalar") and ml.row_names(v3)[0] == "fma_avx2"
    assert ml.row_names(cpu_target("aarch64"))[0] == "fma_neon"


def test_limit_lookup_uses_best_and_never_drops_with_threads():
    lim = ml.Limits("k", "cpu", 4, "now", False, "cc", 0.0, [
        ml.Row("triad", 1, "GB/s", 10.0, 12.0, [10.0, 12.0]),
        ml.Row("triad", 4, "GB/s", 8.0, 9.0, [8.0, 9.0]),  # measured under load: below the 1-thread figure
        ml.Row("fma_avx2", 1, "GFLOP/s", 100.0, 120.0, [100.0, 120.0]),
        ml.Row("fma_avx2", 4, "GFLOP/s", 400.0, 480.0, [400.0, 480.0])])
    assert lim.get("triad", 1) == 12.0
    assert lim.get("triad", 4) == 12.0  # more threads never lower a limit
    assert lim.get("fma_avx2", 2) == 240.0  # unmeasured count: linear from one thread, capped by all threads
    assert lim.get("fma_avx2", 8) == 480.0
    assert lim.peak(4) == ("fma_avx2", 480.0)  # the widest FMA kind measured
    assert lim.get("nothing", 1) is None
    assert "AVX2" in lim.summary()


def test_limits_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("CACHEDIR", str(tmp_path))
    monkeypatch.delenv("REMEASURE_LIMITS", raising=False)
    calls: list[bool] = []

    def fake_measure(quick: bool = False, say: object = None, target: object = None) -> ml.Limits:
        calls.append(quick)
        return _fake_limits(quick)

    monkeypatch.setattr(ml, "measure", fake_measure)
    first = ml.load(quick=True)
    assert not first.cached and calls == [True]
    again = ml.load(quick=True)
    assert again.cached and calls == [True]
    assert again.get("triad", 2) == 30.0
    ml.load(quick=False)  # a quick measurement is not good enough for a full run: measured again
    assert calls == [True, False]
    assert ml.load(quick=True).cached and not ml.load(quick=True).quick  # the full one now serves both
    ml.load(quick=True, remeasure=True)
    assert len(calls) == 3
    monkeypatch.setenv("CACHE", "0")  # the project's knob: no disk cache, measure every time
    ml.load(quick=True)
    assert len(calls) == 4


# ---------------------------------------------------------------------------- cases and checks


@pytest.mark.parametrize("key", [c.key for c in kc._cases(True)])
def test_numpy_graph_matches_reference_and_check_catches_wrong(key):
    case = kc.all_cases()[key]
    xs = case.inputs()
    ref = kc.reference(case, xs)
    got = kc.numpy_graph(case, xs)
    assert got.shape == ref.shape
    assert kc.check(case, got, xs, ref)[0]
    wrong = np.array(got, dtype=np.float32, copy=True).reshape(-1)
    wrong[0] += 1.0 + abs(float(wrong[0]))
    assert not kc.check(case, wrong.reshape(got.shape), xs, ref)[0]
    assert case.flops() > 0 and case.bytes() > 0


def test_counts_follow_the_stated_formulas():
    c = kc.all_cases()
    assert c["matmul_1024"].flops() == 2 * 1024**3
    assert c["conv"].flops() == 2 * 8 * 64 * 56 * 56 * 64 * 9
    assert c["add_16M"].bytes() == 12 * (1 << 24)
    assert c["sum_16M"].bytes() == 4 * ((1 << 24) + 1)
    assert c["softmax_4096"].bytes() == 8 * 4096 * 4096
    b, h, t, d = 8, 8, 512, 64
    assert c["attention"].flops() == 4 * b * h * t * t * d + 6 * b * h * t * t


# ---------------------------------------------------------------------------- the suite, end to end


def test_quick_suite_runs_and_produces_rows(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the plot (if any) lands under ./results
    cases = [kc.all_cases()["add_1M"], kc.all_cases()["matmul_256"]]
    monkeypatch.setattr(bk, "cases_for", lambda mode: cases)
    monkeypatch.setattr(bk.machine_limits, "load",
                        lambda quick=False, remeasure=False, say=None, target=None: _fake_limits())
    # the triads measured before and after the GB/s case (matmul is GFLOP/s: none), plain and streaming stores
    beside = iter([{"triad": 20.0, "triad_nt": 26.0}, {"triad": 22.0, "triad_nt": 30.0}])
    monkeypatch.setattr(bk.machine_limits, "triads_now", lambda threads, target=None, mib=0, gb=0.0: next(beside))
    real_have = bk.have
    # peers that start slow processes stay out of a smoke test; numpy is always there
    monkeypatch.setattr(bk, "have", lambda m: False if m in ("torch", "tinygrad") else real_have(m))
    monkeypatch.setattr(bk, "_n_runs", lambda one, quick: 5)
    b = Bench("kernels", True, Progress(io.StringIO()))
    bk.kernels(b)
    b.finish()  # the per-case table and the plot are written at the end of the suite
    names = {r.name for r in b.results}
    for c in cases:
        for suffix in ("ours", "ours exec only", "ours cold first call", "numpy"):
            assert f"{c.key}/{suffix}" in names, (suffix, sorted(names))
    assert "add_1M/ours GB/s" in names and "matmul_256/ours GFLOP/s" in names
    steady = next(r for r in b.results if r.name == "add_1M/ours")
    assert steady.info["check_ok"] is True
    assert steady.info["pct_of_limit"] is not None and steady.info["cold_ms"] > 0
    # its share is of the triad measured beside it (mean of before and after), the cached one kept in the JSON
    assert steady.info["triad_beside"] == (20.0, 22.0)
    assert steady.info["pct_of_limit"] == pytest.approx(100 * steady.info["rate"] / 21.0)
    assert steady.info["pct_of_cached_triad"] == pytest.approx(100 * steady.info["rate"] / 30.0)
    assert steady.info["pct_of_streaming_triad"] == pytest.approx(100 * steady.info["rate"] / 28.0)
    assert len(steady.samples) >= 3  # MIN_RUNS, more until the figure converges
    # the 4 MiB result comes from the pool at every steady call: nothing fresh, no page of it faulted in again
    assert steady.info["fresh_allocs_per_call"] == 0
    faults = steady.info["page_faults_per_call"]
    assert isinstance(faults, float) and faults < 256, faults
    assert {c.peer_name for c in b.comparisons} == {"numpy"}
    table = "\n".join(b.notes + [" ".join(row) for _, _, rows in b.tables for row in rows])
    assert b.notes[0] == f"target: {target_for('cpu')}"  # the target the kernels were compiled for, first
    assert "add 1M" in table and "matmul 256" in table and "ERROR" not in table and "FAIL" not in table
    assert "% of DRAM triad" in table and "alloc/flt" in " ".join(next(h for _, h, _ in b.tables))
    json.dumps(suite_json(b, {}, "now", 0.0), default=str)
    cold = next(r for r in b.results if r.name == "matmul_256/ours cold first call")  # the fresh-process worker
    assert cold.median > 0 and cold.info["compile_ms"][0] >= 0


def test_memory_per_call_counts_fresh_allocations_and_faults():
    from devices.cpu import DEVICE
    from rewrite.dtype import dtypes

    held: list = []

    def keeps(_: object) -> None:  # every call's buffer stays referenced: the pool cannot serve the next one
        a = DEVICE.alloc((1 << 20) + 4099, dtypes.float32)  # a size nothing else pools
        a[:] = 1.0
        held.append(a)

    def drops(_: object) -> None:
        a = DEVICE.alloc((1 << 20) + 4099, dtypes.float32)  # a size nothing else pools
        a[:] = 1.0
        DEVICE.free(a)

    allocs, faults = bk.memory_per_call(keeps, calls=3)
    assert allocs == 1 and faults >= 2  # 4 MiB first touched: at least two huge pages' worth of faults
    drops(None)
    allocs, faults = bk.memory_per_call(drops, calls=3)
    assert allocs == 0 and faults < 16  # the pooled block, already mapped
    for a in held:
        DEVICE.free(a)


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    case = kc.all_cases()["add_1M"]
    from benchmarks.runner import Result

    row = bk.Row(case, ok=True, steady=Result("a", "ms", [1.0] * 5, False),
                 peers={"numpy": Result("n", "ms", [2.0] * 5, False)})
    path = bk.plot([row], str(tmp_path / "k.png"), "cpu x86-64-v3")
    with open(str(path), "rb") as f:
        assert f.read(4) == b"\x89PNG"


@pytest.mark.skipif(kp.have("tinygrad") is False or shutil.which("clang") is None,
                    reason="tinygrad's CPU backend needs tinygrad and clang")
def test_tinygrad_worker_runs_a_quick_case():
    case = kc.all_cases()["add_1M"]
    res, arr, err = kw.run_worker("tinygrad", case, 3, {"DEV": "CPU", "CACHELEVEL": "0", "CC": "clang"}, timeout=120)
    assert res is not None, err
    assert arr is not None and kc.check(case, arr, case.inputs(), kc.reference(case, case.inputs()))[0]
    assert kw.result_from_json(res["steady"]).median > 0 and res["first_s"] > 0


# ---------------------------------------------------------------------------- timing order


def test_engines_are_timed_in_abba_blocks_after_their_threads_idle():
    """_timed_in_turns: each job's runs in two blocks, A B then B A, half its runs each, every figure recorded
    with its waits; every block starts after _quiet."""
    log: list[str] = []
    jobs = [Timed(name, lambda _, n=name: log.append(n), 1, "ms", runs=4, per_item=1e3) for name in ("a", "b")]
    b = Bench("kernels", True, Progress(io.StringIO()))
    ra, rb = bk._timed_in_turns(b, jobs)
    assert log == ["a", "a", "b", "b", "b", "b", "a", "a"], log
    assert log.count("a") == len(ra.samples) == 4 and log.count("b") == len(rb.samples) == 4
    assert {r.name for r in b.results} == {"a", "b"} and len(ra.info["quiet_wait_s"]) == 2


def test_quiet_waits_for_a_spinning_thread_of_this_process():
    """_quiet returns at once when the process is idle, and waits while one of its threads keeps a core busy
    (as OpenBLAS's workers do after a call), at most QUIET_MAX_S."""
    import threading

    assert bk._quiet() < 0.2
    stop = time.perf_counter() + 0.3

    def spin() -> None:
        while time.perf_counter() < stop:
            pass

    t = threading.Thread(target=spin)
    t.start()
    waited = bk._quiet()
    t.join()
    assert 0.2 <= waited <= bk.QUIET_MAX_S + 0.1, waited
