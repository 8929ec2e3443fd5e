"""Suite-wide settings.

CPU_TIERS=0: the suite compiles each kernel file once, at -O2. With the default tiers every file a test process
compiles would be built twice (-Og at once, -O2 in the background), which on the 2-core CI machine costs the suite
minutes and adds nothing to what it checks: tests/devices/test_cpu_tiers.py turns the tiers on and checks them
(the -O2 swap, bit-identical results, the cache keys, clean exits). Subprocesses the tests start inherit it.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("CPU_TIERS", "0")


@pytest.fixture
def young_gc() -> Iterator[None]:
    """gc.collect() inside the test scans only the objects made since it began: what the process held before is
    frozen (gc.freeze) until the test ends. A test that collects after each of dozens of steps, to check that its
    own objects are freed, otherwise scans a whole suite worker's heap each time (about a second apiece there)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
