"""`python -m benchmarks.half_cpu`: 16-bit matmuls and convolutions on the cpu device next to torch's CPU kernels."""

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
