"""Tensors with a zero-size axis: every op gives numpy's answer, no kernel runs over an empty output (one used to
be lowered as if its empty loop had a tile and wrote past a zero-byte buffer), and the interpreter exits cleanly."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tensor import Tensor

CASES = {
    "add": (lambda x: x + 1, lambda a: a + 1),
    "exp": (lambda x: x.exp(), np.exp),
    "transpose-exp": (lambda x: x.T.exp(), lambda a: np.exp(a.T)),
    "softmax": (lambda x: x.softmax(-1), lambda a: a),
    "sum-empty-axis": (lambda x: x.sum(0), lambda a: a.sum(0)),
    "sum-kept-empty": (lambda x: x.sum(-1), lambda a: a.sum(-1)),
    "contiguous-chain": (lambda x: (x.T.contiguous().T + 1) * 2, lambda a: (a + 1) * 2),
    "cat": (lambda x: x.cat(Tensor.ones(2, 64, device=x.device)) * 2,
            lambda a: np.concatenate([a, np.ones((2, 64), np.float32)]) * 2),
    "matmul-empty-rows": (lambda x: x @ Tensor.ones(64, 8, device=x.device),
                          lambda a: a @ np.ones((64, 8), np.float32)),
    "matmul-empty-inner": (lambda x: x.T @ Tensor.ones(0, 8, device=x.device),
                           lambda a: a.T @ np.ones((0, 8), np.float32)),
}


@pytest.mark.parametrize("device", ["cpu", "python"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_zero_size_matches_numpy(name: str, device: str) -> None:
    ours, ref = CASES[name]
    a = np.zeros((0, 64), np.float32)
    out = ours(Tensor(a, device=device)).numpy()
    want = ref(a)
    assert out.shape == want.shape
    np.testing.assert_allclose(out, want)


def test_no_kernel_for_an_empty_output() -> None:
    x = Tensor(np.zeros((0, 64), np.float32))
    assert x.exp().schedule() == []
    assert [it.kind for it in x.sum(0).schedule()] == ["kernel"]  # the sum over no rows is 64 zeros


def test_empty_softmax_process_exits_cleanly() -> None:
    code = ("import numpy as np\nfrom tensor import Tensor\n"
            "print(Tensor(np.zeros((0, 64), np.float32)).softmax(-1).numpy().shape)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "(0, 64)"
