"""The differential fuzzer of random Tensor programs against numpy (issue 13; the generator and oracle are in
fuzz_programs.py, the 16-bit programs' bounds in fuzz_bounds.py, the batched runs and the shrinker in fuzz_run.py).

CI runs 2,100 programs: 800 on the default cpu path, 400 with NOOPT=1, 800 on the python device and 100 in the
"gpu" mode (the python device with PYTHON_TARGET=sm_90: every kernel lowered for the GPU, its grid, shared
memory and warp shuffles, run by the grid emulator; inputs up to 1000 wide, so blocks share row reductions),
many programs realized together per batch (one schedule, one batched compile). A failure prints the seed and a
shrunk standalone repro. The long run, 101,000 programs (50 times each mode's count, 10 times the gpu mode's,
seeds apart from CI's):

    FUZZ_LONG=1 python -m pytest tests/tensor/test_fuzz_programs.py -s

`FUZZ_SEED=n` moves the seed window (the CI window is fixed, so CI is deterministic). Measured: 58 s for the
2,000 (cpu 28 s, python 17 s, noopt 13 s) on 2 cores at load average 4 with an empty kernel cache; the gpu
mode's 100 took 26 s beside a long fuzz run, but other windows run larger programs through the emulator (4.3 s a
program in one: the long run's 1,000 take about an hour); with `-n 2` the modes run on both workers.

CI also runs 260 float16/bfloat16 programs (`test_fuzz_16_bit_programs`: cpu 100, noopt 64, python 32, gpu 16,
and 48 on the cpu under CPU_TARGET=x86-64-v2 (4-lane vectors, no F16C), where a one-off window found a bug;
their oracle is tests.tensor.fuzz_bounds, an error bound per element plus the value of rounding each op where that
is determined) and checks that oracle (tight, fails a matmul summed in 16 bits, bounds hold for the simulated
values). Measured with the 2,100 above in one pytest process and an empty kernel cache: at load average 0.5 the
16-bit windows and tests took 10 s (cpu 3.3, python 2.8, gpu 2.2, noopt 0.9; the x86-64-v2 window, added after,
about 3 s more) beside 47 s for the 2,100; at load average 6 (other jobs) 30 s with windows a fifth larger (cpu 120,
noopt 80, python 40) beside 112 s. Their long run is 25 times each count (6,500 programs, seeds apart from CI's),
in the same `FUZZ_LONG=1` run: 18 minutes at load average 3-5 before the x86-64-v2 window's 1,200, 12 of them the
gpu mode's 400.

A tenth of all these programs end with a convolution phase (fuzz_programs._conv_phase: conv2d, conv1d,
conv_transpose2d, max_pool2d, avg_pool2d and more ops after them; test_fuzz_conv.py checks that the CI windows hold
every kind). Measured with a fifth (P_CONV = 0.2), in fresh processes at load average 3.5, each window with and
without the phase: cpu 7.6 -> 9.9 s, noopt 6.1 -> 7.6, python 9.2 -> 13.5, gpu 24.9 -> 20.0 (its programs changed:
the phase's last value is the result), 16-bit windows about 1 s more in all. Under pytest the cpu window costs more
than that (at load 2.5: 10.6 s without the phase, 22.0 with a fifth, 18.3 with a tenth), a cost not proportional
to the programs drawn and not yet explained.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from devices.memory import from_bfloat16_bits, to_bfloat16_bits
from tests.tensor.fuzz_bounds import UNIT
from tests.tensor.fuzz_programs import Input, Op, Program, bounded, eval_numpy, generate, mismatch
from tests.tensor.fuzz_run import fuzz

LONG = os.environ.get("FUZZ_LONG", "") not in ("", "0")
BASE = int(os.environ.get("FUZZ_SEED", "0"))
COUNTS = {"cpu": 800, "noopt": 400, "python": 800, "gpu": 100}
COUNTS_16 = {"cpu": 100, "noopt": 64, "python": 32, "gpu": 16, "v2": 48}  # float16 and bfloat16 programs
FIRST = {"cpu": 0, "noopt": 1_000_000, "python": 2_000_000, "gpu": 3_000_000}  # each CI window's first seed
FIRST_16 = {"cpu": 4_000_000, "noopt": 5_000_000, "python": 6_000_000, "gpu": 7_000_000, "v2": 8_000_000}


@pytest.mark.parametrize("mode", list(COUNTS))
def test_fuzz_programs(mode: str) -> None:
    offset = FIRST[mode] + BASE + (10_000_000 if LONG else 0)
    n = COUNTS[mode] * ((10 if mode == "gpu" else 50) if LONG else 1)
    reports = fuzz(range(offset, offset + n), mode, on_fail=print if LONG else None)
    assert not reports, f"{len(reports)} of {n} programs fail in mode {mode}; the first:\n{reports[0]}"


@pytest.mark.parametrize("mode", list(COUNTS_16))
def test_fuzz_16_bit_programs(mode: str) -> None:
    """float16 and bfloat16 programs (with float32 values mixed in) against the error-bound oracle."""
    offset = FIRST_16[mode] + BASE + (10_000_000 if LONG else 0)
    n = COUNTS_16[mode] * (25 if LONG else 1)
    reports = fuzz(range(offset, offset + n), mode, on_fail=print if LONG else None, half=True)
    assert not reports, f"{len(reports)} of {n} 16-bit programs fail in mode {mode}; the first:\n{reports[0]}"


def test_shrinker_prints_a_minimal_repro() -> None:
    """A planted oracle bug in one op of a longer program shrinks to that op alone, and the report names the seed."""
    import dataclasses

    from tests.tensor.fuzz_run import report, run_one, shrink

    p = generate(7)
    bad = Op("{0}.abs()", "np.abs({0}) + 1", (len(p.inputs) + len(p.ops) - 1,))
    p = dataclasses.replace(p, ops=(*p.ops, bad))
    assert run_one(p, "python") is not None
    s = shrink(p, "python")
    assert len(s.ops) == 1 and s.ops[0] == dataclasses.replace(bad, args=(0,)), s.ops
    assert all(len(inp.data) == 1 for inp in s.inputs), s.inputs
    text = report(p, "python", "planted", s)
    assert "seed=7" in text and "v1 = np.abs(v0) + 1" in text, text


def _round_16(a: np.ndarray, fdt: str) -> np.ndarray:
    """a rounded to fdt, as `.numpy()` gives it (bfloat16 in float32)."""
    if fdt == "float16":
        return a.astype(np.float16)
    return from_bfloat16_bits(to_bfloat16_bits(a.astype(np.float32)))


@pytest.mark.parametrize("fdt", ["float16", "bfloat16"])
def test_16_bit_oracle_fails_a_matmul_summed_in_16_bits(fdt: str) -> None:
    """The error bound is tight enough that x @ x.T (48 terms) summed in its 16-bit dtype fails, where the same
    products summed in float32 and rounded once pass."""
    x = np.random.default_rng(0).integers(-16, 17, (48, 48)) / 4
    op = Op("{0} @ {0}.transpose(-1, -2)", "{0} @ np.swapaxes({0}, -1, -2)", (0,), "matmul")
    p = Program(0, fdt, (Input((48, 48), "float", tuple(x.ravel().tolist())),), (op,))
    good = _round_16(x.astype(np.float32) @ x.T.astype(np.float32), fdt)
    acc = _round_16(np.zeros((48, 48)), fdt)
    for j in range(48):
        acc = _round_16(acc.astype(np.float64) + _round_16(np.outer(x[:, j], x[:, j]), fdt), fdt)
    assert mismatch(p, good) is None
    assert (why := mismatch(p, acc)) is not None and "error bound" in why, why


def test_16_bit_bounds_are_tight() -> None:
    """Half the generated 16-bit results are exact (compared bit for bit), and the others' bounds are a few units of
    roundoff of their magnitude (median about one): the oracle is not vacuous."""
    ratios, exact = [], 0
    for seed in range(100, 300):
        vals = bounded(generate(seed, half=True, widen=True))
        assert vals is not None
        v = vals[-1]
        if v.dt in ("float16", "bfloat16"):
            exact += v.exact
            if not v.exact:
                ratios.append(v.err.max() / (UNIT[v.dt] * max(1.0, np.abs(v.ref).max())))
    assert exact >= 0.3 * (exact + len(ratios)) and np.median(ratios) <= 4 and max(ratios) <= 64, (exact, ratios)


def test_16_bit_repro_runs_standalone() -> None:
    """A bfloat16 program's printed repro (its inputs given as float32 data) runs and reproduces the result."""
    p = next(q for q in (generate(s, half=True) for s in range(50)) if q.fdt == "bfloat16" and
             any(inp.dtype == "float" for inp in q.inputs) and bounded(q)[-1].dt == "bfloat16")  # type: ignore[index]
    env: dict = {}
    exec(p.repro().replace("print(got, want, sep='\\n')", ""), env)
    assert mismatch(p, env["got"]) is None
    np.testing.assert_array_equal(env["want"], eval_numpy(p))


def test_16_bit_bounds_hold_for_rounding_each_op() -> None:
    """Where the oracle knows what rounding each op to its dtype gives (the simulation), that value lies within
    the error bound of every value of every program: a check of the bounds themselves."""
    known = 0
    for seed in range(300, 420):
        vals = bounded(generate(seed, half=True, widen=True))
        assert vals is not None
        for v in vals:
            k = ~np.isnan(v.sim)
            known += int(k.sum())
            assert np.all(np.abs(v.sim[k] - v.ref[k]) <= v.err[k]), seed
    assert known > 5_000
