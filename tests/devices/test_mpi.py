"""The MPI transport (devices/mpi.py) under a real `mpirun` on localhost: -n 2, and -n 4 oversubscribed.

Skipped only when OpenMPI's `mpirun` or mpi4py is missing (CI installs both: .ci/run)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from devices.mpi import launched_by_mpi, world
from rewrite.errors import CollectiveError

needs_mpi = pytest.mark.skipif(shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs OpenMPI's mpirun and mpi4py (apt-get install openmpi-bin; pip install "
                                      "mpi4py)")
pytestmark = needs_mpi


def run_mpi(n: int, module: str, case: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """`mpirun -n n` (oversubscribed, allowed as root) of `python -m module case`, its output captured."""
    full = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **env}
    cmd = ["mpirun", "-n", str(n), "--oversubscribe", sys.executable, "-m", module, case]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full)


def mpirun(n: int, case: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return run_mpi(n, "tests.devices.mpi_cases", case, timeout, **env)


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_match_numpy(n: int) -> None:
    p = mpirun(n, "collectives")
    assert p.returncode == 0, p.stdout + p.stderr
    # ranks' lines may interleave in mpirun's merged stdout: find each rank's report anywhere in it
    assert sorted(re.findall(r"rank (\d+)/\d+: collectives ok", p.stdout)) == [str(r) for r in range(n)]


def test_a_rank_that_dies_takes_the_job_down() -> None:
    start = time.monotonic()
    p = mpirun(2, "rank_dies", MPI_TIMEOUT="60")   # mpirun itself sees the rank leave without MPI_Finalize
    assert p.returncode != 0
    assert time.monotonic() - start < 50
    assert "unreachable" not in p.stdout


def test_a_rank_that_never_joins_is_aborted_by_the_watchdog() -> None:
    start = time.monotonic()
    p = mpirun(2, "rank_stalls", MPI_TIMEOUT="3")
    assert p.returncode != 0
    assert time.monotonic() - start < 60
    assert "unreachable" not in p.stdout
    assert "MPI allreduce of 16 bytes (float32[4]) did not finish in 3 s" in p.stderr, p.stderr


def test_an_uncaught_error_on_one_rank_aborts_every_rank() -> None:
    start = time.monotonic()
    p = mpirun(2, "rank_raises", MPI_TIMEOUT="60")   # far longer than the test takes: the hook, not the timeout
    assert p.returncode != 0
    assert time.monotonic() - start < 50
    assert "unreachable" not in p.stdout
    assert "ValueError: deliberate failure on the last rank" in p.stderr
    assert "uncaught ValueError; aborting every rank" in p.stderr


def test_no_launcher_means_no_mpi() -> None:
    if launched_by_mpi():
        pytest.skip("this test process itself runs under an MPI launcher")
    assert world() is None


def test_bad_arguments_are_typed_errors() -> None:
    from devices.mpi import Comm

    class OneRank:   # the calls below fail before touching the communicator or initialising MPI
        def Get_rank(self) -> int: return 0
        def Get_size(self) -> int: return 2

    c = Comm(OneRank(), timeout=1.0)
    with pytest.raises(CollectiveError, match="leading axis must be the rank count 2"):
        c.reduce_scatter(np.zeros((3, 4), np.float32))
    with pytest.raises(CollectiveError, match=r"rank 5 is not one of this job's ranks 0\.\.1"):
        c.bcast(np.zeros(2), root=5)
    with pytest.raises(CollectiveError, match="'mean' is not one of sum, prod, max, min"):
        c.allreduce(np.zeros(2), "mean")
    with pytest.raises(CollectiveError, match="numpy arrays, got list"):
        c.allreduce([1.0, 2.0])  # type: ignore[arg-type]
    assert "mpi4py.MPI" not in sys.modules or launched_by_mpi()
