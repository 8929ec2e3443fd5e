"""`python -m benchmarks.call_overhead`: per-call times of small realizes next to numpy."""

from __future__ import annotations

import numpy as np

from benchmarks import call_overhead as co


def test_every_case_computes_what_numpy_does() -> None:
    for case in co.CASES:
        xs = co._inputs(case)
        got = co._ours(case, xs)().numpy()
        np.testing.assert_allclose(got, co._numpy(case, xs)(), rtol=1e-4, atol=1e-5)


def test_measure_and_main_print_a_row_per_case(capsys) -> None:
    rows = co.measure(("a+b 16",), calls=5, fresh=True)
    assert rows[0]["case"] == "a+b 16" and rows[0]["ours_s"] > 0 and rows[0]["numpy_s"] > 0
    assert co.main(["--calls", "5"]) == 0
    out = capsys.readouterr().out
    assert all(c in out for c in co.CASES) and "numpy" in out
