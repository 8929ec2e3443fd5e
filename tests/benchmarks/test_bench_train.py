"""The `train` suite's smallest row in-process: ours against torch on the same steps, the row's fields sane."""

from __future__ import annotations

import math

import pytest

from benchmarks.bench_train import TINY, conv_row, loss_check, mlp_row, model_row, run_worker
from benchmarks.kernel_peers import have
from benchmarks.runner import Bench


def test_loss_check_tolerance() -> None:
    assert loss_check([1.0, 2.0], [1.0, 2.0 * (1 + 5e-5)])[0]
    assert not loss_check([1.0, 2.0], [1.0, 2.1])[0]


def test_cold_worker_reports_the_compiler() -> None:
    """The cold row's subprocess (empty kernel cache): its first step with the C compiler's share, every kernel
    lowered in it compiled from some bytes of C in at least one file."""
    res, err = run_worker(TINY)
    assert res is not None, err
    assert res["first_s"] > 0 and res["lowered"] > 0 and math.isfinite(res["loss"])
    assert 0 < res["cc_cpu_s"] < 600 and 1 <= res["c_files"] <= res["cc_runs"] <= res["lowered"] + 1
    assert 0 < res["step_cpu_s"] < 600 and res["load"] >= 0  # the step's own CPU, beside the compiler's
    assert res["c_bytes"] >= 100 * res["c_files"]  # each file has at least its head and one function
    # an untimed cold run went first, so the rule matchers came from their own cache (not the fresh CACHEDIR)
    assert res["matchers_generated"] == 0


def test_cold_worker_counts_matchers_generated(tmp_path, monkeypatch) -> None:
    """Without the warm-up run and with an empty matcher directory, the timed step generates its matchers and the
    JSON says so."""
    monkeypatch.setenv("MATCHERDIR", str(tmp_path / "matchers"))
    res, err = run_worker(TINY, warm=False)
    assert res is not None, err
    assert res["matchers_generated"] > 0
    assert any((tmp_path / "matchers").iterdir())  # kept there for the next process


def test_tiny_mlp_row() -> None:
    b = Bench("train", quick=True)
    out = mlp_row(b, TINY, cold=False, check_steps=3, runs=3)
    names = [r.name for r in b.results]
    assert f"{TINY.label}: step/ours" in names
    ours = b.results[names.index(f"{TINY.label}: step/ours")]
    assert len(ours.samples) == 3 and all(0 < s < 10_000 for s in ours.samples) and ours.unit == "ms"
    assert len(out["ours_losses"]) == 3 and all(math.isfinite(v) and v > 0 for v in out["ours_losses"])
    assert out["ours_losses"][-1] < out["ours_losses"][0]  # training lowers the loss on a fixed batch
    if not have("torch"):
        assert out["check_ok"] is None
        pytest.skip("torch not installed: no loss check")
    assert out["check_ok"], out
    assert out["rel_err"] <= 1e-4
    assert f"{TINY.label}: step/torch" in names and len(b.comparisons) == 1


def test_steady_rows_alone(monkeypatch, capsys) -> None:
    """`--steady`: ours under jit, ours eager (its losses the jit's bit for bit) and torch eager, timed in turns;
    a table of their medians."""
    pytest.importorskip("torch")
    from benchmarks import bench_train

    monkeypatch.setitem(bench_train.STEADY, "mlp", TINY)
    assert bench_train.main(["--steady", "mlp", "--runs", "3"]) == 0
    table, err = capsys.readouterr()
    for row in ("step/ours ", "step/ours eager", "step/torch"):
        line = next(ln for ln in table.splitlines() if f"{TINY.label}: {row}" in ln)
        wall, cpu = map(float, line.split()[-3:-1])
        assert 0 < wall < 10_000 and 0 < cpu < 10_000
    assert "CHECK FAILED" not in err


@pytest.mark.slow
def test_tiny_mlp_row_torch_compile() -> None:
    """The torch.compile column: its cold rows and steady step recorded and its losses equal to ours, or (where
    torch.compile fails on this machine) a note saying why and no column."""
    pytest.importorskip("torch")
    b = Bench("train", quick=True)
    out = model_row(b, TINY, cold=False, check_steps=3, runs=3, peers=("torch",), eager=False, compiled=True)
    names = [r.name for r in b.results]
    if "compile_check_ok" not in out:
        assert any("torch.compile fails on this machine" in n for n in b.notes), b.notes
        return
    assert out["compile_check_ok"], out
    for row in ("cold first step/torch.compile", "cold second step/torch.compile", "step/torch.compile"):
        assert f"{TINY.label}: {row}" in names
    assert len(b.comparisons) == 2


@pytest.mark.parametrize("transposed", [True, False])
def test_convt_row_small(transposed: bool) -> None:
    b = Bench("train", quick=True)
    out = conv_row(b, runs=3, shape=(2, 4, 6, 5, 3, 2, 1, 2), transposed=transposed)  # groups 2
    assert 0 < out["ours_ms"] < 10_000
    if not have("torch"):
        pytest.skip("torch not installed: no check")
    assert out["ok"], out
