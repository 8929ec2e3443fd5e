"""The kernels suite's cold measurement: the worker's environment (bytecode cache on, our checkout on the path),
the engine's import timed apart from the first call, and choosing cases by name."""

from __future__ import annotations

import pytest

from benchmarks import bench_kernels as bk
from benchmarks import kernel_cases as kc
from benchmarks import kernel_worker as kw


def test_worker_env_turns_the_bytecode_cache_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(kw, "_BYTECODE_DONE", [True])  # no compileall run here
    env = kw.worker_env({"CACHE": "0"})
    assert env["PYTHONDONTWRITEBYTECODE"] == "" and env["CACHE"] == "0"
    assert env["PYTHONPATH"].split(":")[0] == kw.ROOT


def test_worker_reports_import_and_first_call_apart() -> None:
    case = kc.all_cases()["add_1M"]
    res, arr, err = kw.run_worker("ours", case, 0, {"CACHE": "0"}, timeout=300)
    assert res is not None, err
    assert res["import_s"] > 0 and res["first_s"] > 0 and res["compile_s"] >= 0
    assert arr is not None and kc.check(case, arr, case.inputs(), kc.reference(case, case.inputs()))[0]


def test_cases_by_name() -> None:
    assert [c.key for c in bk.selected_cases("full", "")] == [c.key for c in kc._cases(False)]
    assert [c.key for c in bk.selected_cases("quick", "")] == list(kc.QUICK)
    default = [c.key for c in bk.selected_cases("default", "")]
    assert default == [k for k in (c.key for c in kc._cases(False)) if k in kc.DEFAULT] and len(default) >= 4
    assert [c.key for c in bk.selected_cases("quick", "sum_16M, add_1M")] == ["sum_16M", "add_1M"]
    with pytest.raises(ValueError, match="unknown case"):
        bk.selected_cases("default", "sum_16M,nope")
