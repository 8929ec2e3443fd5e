"""benchmarks.lower_cost: a case's kernels lowered to C in a fresh process, counted per kernel, written for diffing."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from benchmarks import lower_cost as lc


def test_a_case_lowers_to_c_that_compiles(tmp_path) -> None:
    res = lc.run_one("softmax_512", str(tmp_path / "src"), False, str(tmp_path))
    files = sorted((tmp_path / "src" / "softmax_512").glob("*.c"))
    assert res["kernels"] == len(res["cpu_s"]) >= 1 and all(t > 0 for t in res["cpu_s"])
    assert 1 <= len(files) <= res["kernels"]  # a kernel whose LINEAR an earlier one has is not written again
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to check the sources with")
    for f in files:  # each file is a whole C translation unit, as the cpu device compiles it
        r = subprocess.run(["gcc", "-fsyntax-only", "-march=native", "-x", "c", str(f)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_callgrind_totals_in_dump_order(tmp_path) -> None:
    for n, total in ((2, 300), (1, 200), (10, 5)):  # callgrind numbers its dumps .1, .2, ...
        (tmp_path / f"cg.out.{n}").write_text(f"version: 1\ncmd: python\nsummary: {total}\ntotals: {total}\n")
    assert lc._callgrind_totals(str(tmp_path), ["cg.out.10", "cg.out.2", "cg.out.1"]) == [200, 300, 5]
