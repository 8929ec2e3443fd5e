"""`python -m benchmarks.half_cpu`: 16-bit matmuls, convolutions and elementwise kernels on the cpu device next to
torch's CPU kernels."""

from __future__ import annotations

import sys

import pytest

from benchmarks import half_cpu


def test_without_torch_it_says_what_it_needs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert half_cpu.main(["--calls", "1"]) == 1
    assert "torch is not installed" in capsys.readouterr().out


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_ours_and_torch_compute_the_same(dt: str) -> None:
    pytest.importorskip("torch")
    _, _, error = half_cpu._pair("matmul_256", dt)
    assert error() < (2e-2 if dt == "bfloat16" else 2e-3)


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32"])
def test_elementwise_cases_compute_what_torch_does(dt: str) -> None:
    """(x * y + z).relu() rounds each op to the dtype on both sides: the same bits; gelu's tanh form (our sigmoid
    of float32 math, torch's tanh) within a few 16-bit ulps of the output's scale."""
    pytest.importorskip("torch")
    assert half_cpu._pair("fma_relu", dt, (64, 80))[2]() == 0.0
    assert half_cpu._pair("gelu", dt, (64, 80))[2]() < {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-6}[dt]


def test_an_unknown_case_is_named(capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("torch")
    with pytest.raises(SystemExit):
        half_cpu.main(["--cases", "nope"])
    assert "no case 'nope'" in capsys.readouterr().err
