"""Fixtures of the benchmark tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory (limits, history) with the cache on and no forced re-measuring."""
    monkeypatch.setenv("CACHEDIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CACHE", raising=False)
    monkeypatch.delenv("REMEASURE_LIMITS", raising=False)
    return tmp_path / "cache"


@pytest.fixture(autouse=True)
def _runner_collects_only_the_tests_objects(young_gc: None) -> None:
    """The runner collects garbage before each sample (benchmarks.runner): with the worker's earlier objects frozen
    (tests/conftest.py young_gc) a collection scans only what the test made."""
