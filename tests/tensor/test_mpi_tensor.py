"""Tensors across MPI ranks (tensor.multi.ranks, lower.mpi_exec): the programs of mpi_tensor_cases.py under a real
`mpirun` on localhost (-n 2, and -n 4 oversubscribed), each checking its results against numpy on every rank; and,
in this process, the rank device names, what each rank runs of a schedule, the recognised allreduce, and the
errors. The mpirun tests are skipped only when OpenMPI's `mpirun` or mpi4py is missing (CI installs both)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from devices import local_name, rank_of, spans_ranks
from rewrite.errors import DeviceError, ShardingError
from tensor import Tensor
from tensor import multi as M
from tests.devices.test_mpi import needs_mpi, run_mpi


def mpirun(n: int, case: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return run_mpi(n, "tests.tensor.mpi_tensor_cases", case, timeout, **env)


def _ok(p: subprocess.CompletedProcess, case: str, n: int) -> None:
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(re.findall(rf"rank (\d+)/\d+: {case} ok", p.stdout)) == [str(r) for r in range(n)], p.stdout


@needs_mpi
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("case", ["shard_to", "collectives", "matmul", "data_parallel", "one_call_collectives",
                                  "allreduce_at_once", "allreduce_at_once_reuse", "assign_in_place",
                                  "jit_allreduce", "jit_data_parallel"])
def test_programs_across_ranks_match_numpy(case: str, n: int) -> None:
    _ok(mpirun(n, case), case, n)


@needs_mpi
def test_several_devices_per_rank() -> None:
    _ok(mpirun(2, "several_per_rank"), "several_per_rank", 2)


@needs_mpi
def test_ranks_running_different_programs_fail_with_the_ranks_named() -> None:
    p = mpirun(2, "mismatched_programs", MPI_TIMEOUT="60")
    assert p.returncode != 0
    assert "unreachable" not in p.stdout
    assert "MPI ranks run different programs: the schedule of rank(s) [1] differs from rank 0's" in p.stderr, p.stderr


@needs_mpi
def test_ranks_allreducing_different_shapes_at_once_fail_with_the_ranks_named() -> None:
    p = mpirun(2, "allreduce_at_once_mismatched", MPI_TIMEOUT="60")
    assert p.returncode != 0
    assert "unreachable" not in p.stdout
    # each rank names its own call (float32[6] on rank 0, [10] on rank 1); the first to abort may silence the other
    assert re.search(r"MPI ranks run different programs: the schedule of rank\(s\) \[1\] differs from rank 0's "
                     r"\(allreduce of float32\[(6|10)\] on \('cpu@0', 'cpu@1'\)", p.stderr), p.stderr


@needs_mpi
def test_a_rank_that_never_joins_an_allreduce_at_once_is_aborted_by_the_watchdog() -> None:
    start = time.monotonic()
    p = mpirun(2, "allreduce_at_once_stalls", MPI_TIMEOUT="3")
    assert p.returncode != 0
    assert time.monotonic() - start < 60
    assert "unreachable" not in p.stdout
    assert "MPI allreduce of 16 bytes (float32[4]) did not finish in 3 s" in p.stderr, p.stderr


@needs_mpi
def test_a_rank_that_raises_midway_takes_every_rank_down_fast() -> None:
    start = time.monotonic()
    p = mpirun(2, "raises_midway", MPI_TIMEOUT="60")   # the abort hook, not the timeout, ends it
    assert p.returncode != 0
    assert time.monotonic() - start < 50
    assert "unreachable" not in p.stdout
    assert "uncaught ValueError; aborting every rank" in p.stderr


@needs_mpi
def test_the_readme_example_runs_under_mpirun() -> None:
    full = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    cmd = ["mpirun", "-n", "2", "--oversubscribe", sys.executable, "-m", "tensor.examples.mpi_data_parallel"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=full)
    assert p.returncode == 0, p.stdout + p.stderr
    losses = re.findall(r"rank \d/2: loss (\d+\.\d+)", p.stdout)  # ranks' lines may interleave
    assert len(losses) == 2 and losses[0] == losses[1] and float(losses[0]) < 0.05, p.stdout


# ---------------------------------------------------------------- in this process (no mpirun)

@pytest.mark.parametrize(("name", "rank", "local"), [("cpu", None, "cpu"), ("cpu@1", 1, "cpu"),
                                                     ("cpu:0@3", 3, "cpu:0"), ("python:2", None, "python:2")])
def test_rank_device_names(name: str, rank: int | None, local: str) -> None:
    assert rank_of(name) == rank and local_name(name) == local


def test_spans_ranks() -> None:
    assert spans_ranks(("cpu@0", "cpu@1"))
    assert not spans_ranks(("cpu@0",)) and not spans_ranks(("cpu@0", "cpu:1@0"))
    assert not spans_ranks(("cpu@0", "cpu:1"))


def test_without_mpirun_there_is_one_rank() -> None:
    if os.environ.get("OMPI_COMM_WORLD_SIZE"):
        pytest.skip("runs under mpirun")
    assert M.ranks() == ("cpu@0",)
    with pytest.raises(DeviceError, match=r"names MPI rank 1, but this job has 1 rank \(0\.\.0\); start it with "
                                          r"`mpirun -n 2`"):
        Tensor([1.0], device=("cpu@0", "cpu@1"))
    with pytest.raises(DeviceError, match="unknown device 'cpu@x'"):
        Tensor([1.0], device="cpu@x")
    # the same SPMD program runs on one rank
    a = np.arange(12, dtype=np.float32).reshape(4, 3)
    x = Tensor(a).shard(M.ranks(), 0)
    np.testing.assert_array_equal(x.sum(0).numpy(), a.sum(0))
    np.testing.assert_array_equal(M.from_local(a, M.ranks(), 1).numpy(), a)


def test_a_graph_of_the_same_structure_replays_its_schedule() -> None:
    from lower import mpi_cache

    D = M.ranks()
    w = Tensor(np.ones((3, 2), np.float32)).to(D).realize()
    before = dict(mpi_cache.stats)
    for k in range(3):  # new data each time, the same structure: scheduled once
        a = np.arange(12, dtype=np.float32).reshape(4, 3) * (k + 1)
        y = (Tensor(a).shard(D, 0) @ w).sum(0)
        np.testing.assert_allclose(y.numpy(), (a @ np.ones((3, 2), np.float32)).sum(0))
    assert mpi_cache.stats["hits"] - before["hits"] >= 4  # the product, and numpy()'s gather, twice each


def test_bad_inputs_across_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    import devices.mpi

    monkeypatch.setattr(devices.mpi, "rank_and_size", lambda: (0, 2))
    D = ("cpu@0", "cpu@1")
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ShardingError, match="not divisible"):
        Tensor(a).shard(D, 0)
    with pytest.raises(ShardingError, match="device tuples"):
        _ = Tensor(a).shard(D, 1) + Tensor(a).shard(("cpu@1", "cpu@0"), 1)
    with pytest.raises(DeviceError, match="one device per MPI rank"):
        M.from_local(a, ("cpu@0", "cpu:1@0"))
    with pytest.raises(DeviceError, match="names a device twice"):
        M.from_local(a, ("cpu@0", "cpu@0"))


def _schedule_on_two_ranks(monkeypatch: pytest.MonkeyPatch, make):  # type: ignore[no-untyped-def]
    import devices.mpi
    from lower.schedule import schedule

    monkeypatch.setattr(devices.mpi, "rank_and_size", lambda: (0, 2))
    return schedule([make(("cpu@0", "cpu@1")).uop])[0]


def test_the_shard_axis_reduction_is_one_allreduce_on_each_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    from lower.mpi_exec import allreduces, plan_steps

    items = _schedule_on_two_ranks(monkeypatch, lambda D: Tensor(np.ones((4, 6), np.float32)).shard(D, 0).sum(0))
    (_first, (replaced, op)), = allreduces(items, 2).items()
    assert op == "sum" and sorted(items[k].kind for k in replaced) == ["copy", "copy", "kernel", "kernel"]
    for rank in (0, 1):
        steps = plan_steps(items, rank, 2)
        assert [s.kind for s in steps].count("allreduce") == 1
        assert not any(s.kind in ("send", "recv") for s in steps)
        ar = next(s for s in steps if s.kind == "allreduce")
        assert all(rank_of(b.buf_arg.device) == rank for b in ar.bufs)  # this rank's output and partial sum
        # nothing of the other rank runs here
        assert all(rank_of(items[s.item].bufs[0].buf_arg.device) in (None, rank) for s in steps if s.kind == "kernel")


def test_other_moves_are_point_to_point(monkeypatch: pytest.MonkeyPatch) -> None:
    from lower.mpi_exec import plan_steps

    items = _schedule_on_two_ranks(monkeypatch, lambda D: Tensor(np.ones((4, 4), np.float32)).shard(D, 0).shard(D, 1))
    for rank in (0, 1):  # a reshard: blocks of each rank's piece to the other rank
        kinds = [s.kind for s in plan_steps(items, rank, 2)]
        assert "send" in kinds and "recv" in kinds and not set(kinds) & {"allreduce", "allgather", "reduce_scatter"}
    gathered = _schedule_on_two_ranks(monkeypatch, lambda D: Tensor(np.ones(4, np.float32)).shard(D, 0).to("cpu"))
    assert [s.kind for s in plan_steps(gathered, 1, 2)].count("bcast") == 2   # each rank's block to every rank


@pytest.mark.parametrize(("make", "kind"), [(M.allgather, "allgather"), (M.reduce_scatter, "reduce_scatter")])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_the_spec_allgather_and_reduce_scatter_are_one_collective_on_each_rank(
        monkeypatch: pytest.MonkeyPatch, make, kind: str, dtype: type) -> None:  # type: ignore[no-untyped-def]
    from lower import buffers
    from lower.mpi_exec import plan_steps

    items = _schedule_on_two_ranks(monkeypatch, lambda D: make(Tensor(np.ones(8, dtype)).shard(D, 0)))
    for rank in (0, 1):
        steps = plan_steps(items, rank, 2)
        assert [s.kind for s in steps].count(kind) == 1 and not any(s.kind in ("send", "recv") for s in steps)
        (coll,) = (s for s in steps if s.kind == kind)
        res = buffers.slot(coll.bufs[0])
        assert all(rank_of(b.buf_arg.device) == rank for b in coll.bufs)
        n_out, n_src = (int(np.prod(b.shape)) for b in coll.bufs)
        assert (n_out, n_src) == ((8, 4) if kind == "allgather" else (2, 4))   # the result here, this rank's piece
        # the kernels left on this rank only make its piece (a cast for int32's widening sum), none reads the result
        assert all(buffers.slot(b) != res for s in steps if s.kind == "kernel" for b in items[s.item].bufs)


def test_combined_slots_only_matches_a_pure_combination(monkeypatch: pytest.MonkeyPatch) -> None:
    from lower.mpi_exec import combined_slots

    items = _schedule_on_two_ranks(monkeypatch, lambda D: (Tensor(np.ones(4, np.float32)).shard(D, 0) * 2).sum(0))
    found = [combined_slots(it.ast) for it in items if it.ast is not None]
    assert ("sum", [1, 2]) in found
    assert all(f is None or f[0] == "sum" for f in found)
    from rewrite import Ops, UOp

    assert combined_slots(UOp.sink()) is None and Ops.ADD
