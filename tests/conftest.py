"""Suite-wide settings.

CPU_TIERS=0: the suite compiles each kernel file once, at -O2. With the default tiers every file a test process
compiles would be built twice (-Og at once, -O2 in the background), which on the 2-core CI machine costs the suite
minutes and adds nothing to what it checks: tests/devices/test_cpu_tiers.py turns the tiers on and checks them
(the -O2 swap, bit-identical results, the cache keys, clean exits). Subprocesses the tests start inherit it.
"""

from __future__ import annotations

import os

os.environ.setdefault("CPU_TIERS", "0")
