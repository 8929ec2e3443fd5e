"""An uncaught project error is one line on stderr by default and a full traceback under DEBUG>=1; other
exceptions, caught ones and stdout are left alone (rewrite.errors.install_excepthook)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
from tensor import Tensor
print("before")
Tensor([1, 2, 3]).reshape(2, 2)
"""


def run(code: str, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "TRACE")} | env
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=e, capture_output=True,
                          text=True, timeout=120)


def test_uncaught_project_error_is_one_line() -> None:
    r = run(SCRIPT)
    assert r.returncode == 1 and r.stdout == "before\n"
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("ShapeError: reshape: cannot reshape (3,)")
    assert "(<string>:4; DEBUG=1 shows the traceback)" in lines[0]


def test_debug_shows_the_full_traceback() -> None:
    r = run(SCRIPT, DEBUG="1")
    assert r.returncode == 1
    assert "Traceback (most recent call last)" in r.stderr and "tensor/helpers.py" in r.stderr
    assert "rewrite.errors.ShapeError: reshape: cannot reshape" in r.stderr


@pytest.mark.parametrize("code", [
    "import tensor\nraise ValueError('not ours')",
    "import tensor\nimport numpy as np\nnp.zeros(3).reshape(2, 2)",
])
def test_other_exceptions_keep_their_traceback(code: str) -> None:
    r = run(code)
    assert r.returncode == 1 and "Traceback (most recent call last)" in r.stderr


def test_a_caught_project_error_prints_nothing() -> None:
    r = run("""
        from rewrite.errors import ShapeError
        from tensor import Tensor
        try:
            Tensor([1, 2, 3]).reshape(2, 2)
        except ShapeError as e:
            print("caught", type(e).__name__)
    """)
    assert r.returncode == 0 and r.stdout == "caught ShapeError\n" and r.stderr == ""


def test_a_multi_line_message_is_cut_to_its_first_line() -> None:
    r = run("""
        from rewrite.errors import CompileError
        import rewrite
        raise CompileError("gcc failed on kernel r_3\\nline 1 of source\\nline 2 of source")
    """)
    assert r.stderr.splitlines() == ["CompileError: gcc failed on kernel r_3 [+2 lines] (<string>:4; DEBUG=1 shows the "
                                     "traceback)"]
