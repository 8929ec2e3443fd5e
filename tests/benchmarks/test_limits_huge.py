"""The machine-limits triad runs on memory laid out as the cpu device's buffers are (2 MiB-aligned, huge-page
advised), and limits files written before that (an older FORMAT) or damaged are measured again."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from benchmarks import checked_cache
from benchmarks import limits as ml


def _limits() -> ml.Limits:
    rows = [ml.Row("fma_avx2", 1, "GFLOP/s", 90.0, 91.0, [90.0, 91.0]),
            ml.Row("triad", 1, "GB/s", 30.0, 30.0, [30.0, 30.0])]
    return ml.Limits(ml.machine_key(), ml.cpu_model(), 2, "now", False, "cc", 0.0, rows)


def test_stream_arrays_are_huge_page_maps() -> None:
    src = ml.program_source(ml.target_for("cpu"))
    assert "MADV_HUGEPAGE" in src and "MAP_PRIVATE | MAP_ANONYMOUS" in src and "aligned_alloc" not in src
    assert ml.FORMAT >= 4


@pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")), reason="no C compiler")
def test_stream_on_huge_pages_reports_every_row(tmp_path) -> None:
    exe, _ = ml._compile(str(tmp_path))
    out = subprocess.run([exe, "stream", "24", "0.001"], capture_output=True, text=True, check=True).stdout
    rows = ml._parse(out)
    assert {"triad", "copy", "read"} <= {r.name for r in rows}
    assert all(r.median > 0 for r in rows)


@pytest.mark.parametrize("damage", ["old format", "garbage"])
def test_stale_or_corrupt_limits_file_is_measured_again(cache, monkeypatch, damage) -> None:
    calls: list[bool] = []

    def fake_measure(quick: bool = False, say: object = None, target: object = None) -> ml.Limits:
        calls.append(quick)
        return _limits()

    monkeypatch.setattr(ml, "measure", fake_measure)
    path = ml.cache_path()
    if damage == "old format":  # intact, but written by the program that measured 4 KiB pages
        checked_cache.write(path, ml.machine_key(), ml.FORMAT - 1, _limits().to_json())
        with open(path) as f:
            assert json.load(f)["format"] == ml.FORMAT - 1
    else:
        (cache).mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fb:
            fb.write(b"\x00\xff not json")
    lim = ml.load()
    assert not lim.cached and calls == [False]
    with open(path) as f:
        assert json.load(f)["format"] == ml.FORMAT  # rebuilt
    assert ml.load().cached and calls == [False]
