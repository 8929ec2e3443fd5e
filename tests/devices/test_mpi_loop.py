"""Repeated allreduces across ranks (tests/devices/mpi_loop_cases.py) under a real `mpirun` on localhost: -n 2, and
-n 4 oversubscribed; each rank checks every result against numpy. Skipped only when OpenMPI's `mpirun` or mpi4py
is missing."""

from __future__ import annotations

import re
import time

import pytest

from tests.devices.test_mpi import needs_mpi, run_mpi

pytestmark = needs_mpi


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("case", ["allreduce_loop", "jit_allreduce_loop"])
def test_repeated_allreduce_matches_numpy(case: str, n: int) -> None:
    p = run_mpi(n, "tests.devices.mpi_loop_cases", case, 240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(re.findall(rf"rank (\d+)/\d+: {case} ok", p.stdout)) == [str(r) for r in range(n)], p.stdout


def test_a_rank_missing_a_repeated_allreduce_aborts_the_job() -> None:
    start = time.monotonic()
    p = run_mpi(2, "tests.devices.mpi_loop_cases", "fast_path_stalls", 100, MPI_TIMEOUT="3")
    assert p.returncode != 0
    assert "unreachable" not in p.stdout
    assert "MPI allreduce of 32 bytes (float32[8]) did not finish in 3 s" in p.stderr, p.stderr
    assert time.monotonic() - start < 90
