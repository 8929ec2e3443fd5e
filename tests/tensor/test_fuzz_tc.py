"""The tensor-core fuzzer (fuzz_tc.py) of issue 12: random half, bfloat16 and tf32 matmuls with random shapes,
layouts, prologues and epilogues, lowered for sm_90 and sm_80 (mma.sync, the cp.async pipelines, wgmma, the TMA)
and run by the grid emulator, and on the cpu device, each against an exact oracle; and random convolutions (1 or 2
spatial axes, stride, padding, dilation, groups) in the conv modes, on the tensor cores through lower.wmma.tc_flatten;
and float32 matmuls without tf32 in the simt mode (lower.simt_smem's staged tiles: 8 cases, about 30 s of one core
on a loaded 2-core machine, 5 of their 10 kernels staged).

CI runs the counts of COUNTS on a fixed seed window, each mode's cases held to at most its MACS multiply-adds, and
checks that they reach the forms each mode is for (FORMS). The long run (10 times the counts, twice the sizes,
seeds apart from CI's):

    FUZZ_LONG=1 python -m pytest tests/tensor/test_fuzz_tc.py -s

`FUZZ_SEED=n` moves the window. Measured on 2 cores: the CI counts take about 80 s of one core (3 s a wgmma or
TMA case, 0.5 s an mma.sync one) plus about 30 s for the conv modes, a like-sized long run 35 minutes plus about
15 for the conv modes (a conv case of up to 2M multiply-adds on the emulator: about 5 s).
"""

from __future__ import annotations

import os

import pytest

from tests.tensor.fuzz_tc import fuzz

LONG = os.environ.get("FUZZ_LONG", "") not in ("", "0")
BASE = int(os.environ.get("FUZZ_SEED", "0"))
COUNTS = {"sm_90": 30, "sm_80": 12, "wgmma": 10, "tma": 8, "tf32": 12, "cpu": 60, "conv": 10, "conv_tf32": 6,
          "conv_cpu": 40, "simt": 8}
MACS = {"sm_90": 1 << 19, "sm_80": 300_000, "wgmma": 1 << 21, "tma": 1 << 21, "tf32": 300_000, "cpu": 1 << 20,
        "conv": 1 << 20, "conv_tf32": 1 << 19, "conv_cpu": 1 << 20, "simt": 300_000}
# the least each CI window must reach (its cases' kernels, by form; the window is fixed, so this is deterministic)
FORMS = {"sm_90": {"mma": 15, "cp.async": 3}, "sm_80": {"mma": 6}, "wgmma": {"wgmma": 3}, "tma": {"tma": 2},
         "tf32": {"mma": 5}, "cpu": {}, "conv": {"mma": 6}, "conv_tf32": {"mma": 3}, "conv_cpu": {},
         "simt": {"simt": 3}}


@pytest.mark.parametrize("mode", list(COUNTS))
def test_fuzz_tensor_cores(mode: str) -> None:
    offset = 1_000_000 * list(COUNTS).index(mode) + BASE + (50_000_000 if LONG else 0)
    n = COUNTS[mode] * (10 if LONG else 1)
    reports, forms = fuzz(range(offset, offset + n), mode, max_macs=MACS[mode] * (2 if LONG else 1),
                          on_fail=print if LONG else None)
    assert not reports, f"{len(reports)} of {n} cases fail in mode {mode}; the first:\n{reports[0]}"
    if LONG:
        print(f"{mode}: {n} cases, kernels by form {dict(forms)}")
    short = {f: (forms[f], least) for f, least in FORMS[mode].items() if forms[f] < least}
    assert not short, f"mode {mode}: too few kernels of the form it tests, (found, least): {short}; all: {forms}"


def test_a_wrong_element_is_reported_and_the_repro_runs(capsys: pytest.CaptureFixture) -> None:
    """The check allows no difference (one bfloat16 ulp off one element fails), and a case's repro is standalone
    Python whose oracle is the one the fuzzer compares with."""
    import contextlib
    import io

    import numpy as np

    from tests.tensor.fuzz_tc import Case, generate, mismatch, oracle

    c = next(c for s in range(100) if (c := generate(s, "cpu", 1 << 14)).dt == "bfloat16" and len(c.lines) > 3)
    assert isinstance(c, Case)
    want = oracle(c)
    assert mismatch(c, want.astype(np.float32)) is None
    off = want.astype(np.float32).copy()
    off.flat[want.size // 2] += max(abs(float(off.flat[want.size // 2])), 1.0) * 2.0 ** -7
    assert mismatch(c, off) is not None and "1 of" in str(mismatch(c, off))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(c.repro("DEVICE='cpu'"), {})
    assert out.getvalue().startswith("[]"), out.getvalue()  # no element differs
