"""The differential fuzzer of random Tensor programs against numpy (issue 13; the generator, oracle and shrinker
are in fuzz_programs.py).

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
"""

from __future__ import annotations

import os

import pytest

from tests.tensor.fuzz_programs import fuzz

LONG = os.environ.get("FUZZ_LONG", "") not in ("", "0")
BASE = int(os.environ.get("FUZZ_SEED", "0"))
COUNTS = {"cpu": 800, "noopt": 400, "python": 800, "gpu": 100}


@pytest.mark.parametrize("mode", list(COUNTS))
def test_fuzz_programs(mode: str) -> None:
    offset = {"cpu": 0, "noopt": 1_000_000, "python": 2_000_000, "gpu": 3_000_000}[mode] + BASE + \
        (10_000_000 if LONG else 0)
    n = COUNTS[mode] * ((10 if mode == "gpu" else 50) if LONG else 1)
    reports = fuzz(range(offset, offset + n), mode, on_fail=print if LONG else None)
    assert not reports, f"{len(reports)} of {n} programs fail in mode {mode}; the first:\n{reports[0]}"


def test_shrinker_prints_a_minimal_repro() -> None:
    """A planted oracle bug in one op of a longer program shrinks to that op alone, and the report names the seed."""
    import dataclasses

    from tests.tensor.fuzz_programs import Op, generate, report, run_one, shrink

    p = generate(7)
    bad = Op("{0}.abs()", "np.abs({0}) + 1", (len(p.inputs) + len(p.ops) - 1,))
    p = dataclasses.replace(p, ops=(*p.ops, bad))
    assert run_one(p, "python") is not None
    s = shrink(p, "python")
    assert len(s.ops) == 1 and s.ops[0] == dataclasses.replace(bad, args=(0,)), s.ops
    assert all(len(inp.data) == 1 for inp in s.inputs), s.inputs
    text = report(p, "python", "planted", s)
    assert "seed=7" in text and "v1 = np.abs(v0) + 1" in text, text
