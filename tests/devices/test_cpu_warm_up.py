"""The cpu device's warm-up (CPUDevice.warm_up): lower.realize asks the devices of a new graph to get ready before
it schedules the graph, and the cpu device then builds its thread pool in the background, so the pool's compile
overlaps the schedule and the lowering instead of joining the kernels' last compile."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devices import cpu_pool


def _root() -> str:
    return str(Path(__file__).resolve().parents[2])


@pytest.mark.skipif(cpu_pool.threads() < 2, reason="one CPU: no thread pool to build")
def test_realize_builds_the_pool_while_it_schedules() -> None:
    # a fresh process with an empty cache: the pool's build has begun by the time the schedule runs, one build in
    # all, and a kernel launched on the pool gives numpy's result
    code = textwrap.dedent("""
        import importlib, os, tempfile
        os.environ["CACHEDIR"] = tempfile.mkdtemp()
        import numpy as np
        from devices import cpu, cpu_pool
        from tensor import Tensor
        R = importlib.import_module("lower.realize")
        seen, real = [], R.schedule
        def schedule(*a, **k):
            seen.append(list(cpu._WARMING))
            return real(*a, **k)
        R.schedule = schedule
        builds, load = [], cpu.DEVICE.compiler.load
        def counted(src, what, *a, **k):
            builds.append(what)
            return load(src, what, *a, **k)
        cpu.DEVICE.compiler.load = counted
        assert cpu_pool.unbuilt() and not cpu._WARMING
        x = np.linspace(-3, 3, 512 * 384, dtype=np.float32).reshape(512, 384)
        got = (Tensor(x) * 2 + 1).sum(1).numpy()
        assert seen and seen[0] and seen[0][0].name == "cpu-pool-build", seen
        seen[0][0].join()
        assert not cpu_pool.unbuilt() and cpu_pool._LIB
        np.testing.assert_allclose(got, (x * 2 + 1).sum(1), rtol=1e-5)
        assert builds.count("thread pool") == 1, builds
        cpu.DEVICE.warm_up()  # built: nothing more starts
        assert len(cpu._WARMING) == 1
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=_root())
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
