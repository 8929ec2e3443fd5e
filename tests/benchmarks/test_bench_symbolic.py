"""Smoke tests for the `symbolic` benchmark suite: its workloads are what it says they are, every simplifier's
result it measures is equal to its input, the tinygrad translation is node for node, and the cold-start child
process runs. The timings themselves are not tested (they belong to the machine)."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks import bench_symbolic as bs
from benchmarks import symbolic_cold as sc
from benchmarks import symbolic_simplifiers as ss
from benchmarks import symbolic_tinygrad as st
from benchmarks import symbolic_workloads as sw
from benchmarks.runner import SUITES, Bench
from rewrite import Ops, dtypes

HAS_TINYGRAD = importlib.util.find_spec("tinygrad") is not None


@pytest.fixture(scope="module")
def kernels() -> dict[str, list]:
    return sw.kernel_batches()


def test_suite_is_registered() -> None:
    assert SUITES["symbolic"] is bs.symbolic


def test_kernel_batches_are_index_math_before_the_symbolic_stage(kernels: dict[str, list]) -> None:
    assert set(kernels) == {"gemm", "conv", "reduce", "softmax"}
    for name, exprs in kernels.items():
        assert 2 <= len(exprs) <= 8, name
        for e in exprs:
            assert e.dtype in (dtypes.index, dtypes.bool)
            assert any(u.op is Ops.RANGE for u in e.toposort())
    assert any(e.dtype is dtypes.bool for e in kernels["conv"])  # the padding's gate
    # rangeify's raw output: the fast rules have something to remove
    assert ss.total_nodes(ss.fast_batch(kernels["conv"])) < ss.total_nodes(kernels["conv"])


def test_lane_batch_is_distinct_and_kernel_sized(kernels: dict[str, list]) -> None:
    lanes = sw.lane_batch(kernels["gemm"])
    assert len(lanes) == len(set(lanes)) == sw.BATCH
    old = {r for e in kernels["gemm"] for r in e.ranges()}
    assert all(r not in old for e in lanes for r in e.ranges())  # every lane has its split ranges replaced


def test_random_batch_is_seeded() -> None:
    a, b = sw.random_batch(3, 20), sw.random_batch(3, 20)
    assert a == b and len(set(a)) == 20


def test_measured_results_equal_their_inputs(kernels: dict[str, list]) -> None:
    exprs = kernels["reduce"] + kernels["conv"] + sw.random_batch(5, 15)
    with ss.no_disk_cache():
        ss.clear_memory_cache()
        results = {"fast": ss.fast_batch(exprs), "full": ss.full_batch(exprs), "each": ss.full_each(exprs)}
    assert ss.check_equal(exprs, results, None) == {"fast": "0", "full": "0", "each": "0"}
    wrong = [e + 1 if e.dtype is dtypes.index else ~e for e in exprs]
    assert ss.check_equal(exprs, {"wrong": wrong}, None) == {"wrong": str(len(exprs))}


@pytest.mark.skipif(not HAS_TINYGRAD, reason="tinygrad is not installed")
def test_tinygrad_translation_is_node_for_node(kernels: dict[str, list]) -> None:
    exprs = kernels["conv"] + sw.random_batch(11, 20)
    texprs, leaves = st.to_tinygrad(exprs)
    assert [ss.nodes(t) for t in texprs] == [ss.nodes(e) for e in exprs]
    assert ss.check_equal(exprs, {"tinygrad": texprs}, leaves) == {"tinygrad": "0"}
    assert ss.check_equal(exprs, {"tinygrad": st.tinygrad_batch(texprs)}, leaves) == {"tinygrad": "0"}


def test_cold_child_runs(kernels: dict[str, list]) -> None:
    b = Bench("symbolic", quick=True)
    first, total = sc.run_cold(b, "smoke", kernels["softmax"], {"CACHE": "0"}, runs=1)
    assert first.info["preloaded"] == []  # nothing of the compiler was loaded before the clock started
    assert 0 < first.median <= total.median


def test_cold_child_imports_egglog_only_when_the_egraph_runs(kernels: dict[str, list]) -> None:
    """A kernel batch the e-graph cannot shrink loads neither rules.eqsat nor egglog; a batch that needs the
    e-graph, answered from a disk cache an earlier process filled, loads rules.eqsat but not egglog."""
    from benchmarks.symbolic_family_cases import CASES, build
    from rules import worth_saturating
    from rules.eqsat import fast_tier_can_change

    b = Bench("symbolic", quick=True)
    first, _ = sc.run_cold(b, "kernel", kernels["conv"], {"CACHE": "0"}, runs=1)
    assert not first.info["eqsat_imported"] and not first.info["egglog_imported"]
    # random expressions and the remainder family (what the e-graph's fast tier still shrinks)
    exprs = sw.random_batch(7, 20) + [build(e, boxes) for f, e, boxes, _ in CASES if f == "remainder"]
    assert any(worth_saturating(u) and fast_tier_can_change(u) for u in ss.fast_batch(exprs))
    empty, _ = sc.run_cold(b, "empty", exprs, {"CACHE": "0"}, runs=1)
    assert empty.info["eqsat_imported"] and empty.info["egglog_imported"] and empty.info["sat_roots"] > 0
    disk, _ = sc.run_cold(b, "disk", exprs, {"CACHE": "1"}, runs=1, prime=True)
    assert disk.info["eqsat_imported"] and not disk.info["egglog_imported"]
