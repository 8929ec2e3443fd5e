"""DEBUG and TRACE output goes to stderr: a program's own stdout stays exactly what it printed."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from rewrite.env import Context
from tensor import Tensor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("device", ["cpu", "python"])
def test_debug_5_writes_only_to_stderr(capsys: pytest.CaptureFixture[str], device: str) -> None:
    n = 37 if device == "cpu" else 41  # a shape no other test compiles, so the kernel is lowered here
    a = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    with Context(DEBUG=5):
        got = (Tensor(a, device=device) * 2 + 1).sum(axis=1).numpy()
    np.testing.assert_allclose(got, (a * 2 + 1).sum(1))
    out, err = capsys.readouterr()
    assert out == ""
    for level_shows in ("ran 1 kernels", "*** ", "--- after", "--- "):  # DEBUG 1, 2, 5 and 3's listings
        assert level_shows in err


def test_debug_and_trace_leave_stdout_alone_in_a_process() -> None:
    code = "from tensor import Tensor\nprint('result', (Tensor([1.0, 2.0, 3.0]) * 2).sum().item())\n"
    env = os.environ | {"DEBUG": "5", "TRACE": "2", "CACHE": "0"}
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "result 12.0\n"
    assert "TRACE:" in r.stderr and "ran 1 kernels" in r.stderr and "--- after" in r.stderr
