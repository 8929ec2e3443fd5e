"""The native thread pool (devices.cpu_pool) that runs kernels with a core_id SPECIAL on several cores.

Each core_id must run exactly once per launch: kernels here read-modify-write their own slot, so a lost or a
repeated id shows up as a wrong count. The results are compared with the python (reference) device.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from devices import cpu_pool
from devices.cpu import DEVICE, CPUKernel
from devices.python import DEVICE as PY
from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import buf, end, linear

I32, I64 = dtypes.int32, dtypes.int64
THREADS = max(2, cpu_pool.threads())


def special(bound: int | UOp, name: str = "core_id") -> UOp:
    return UOp(Ops.SPECIAL, (bound if isinstance(bound, UOp) else UOp.const(bound),), name)


def slices(cores: int, per: int) -> UOp:
    """out[core_id*per + r] = a[...] * 3 + core_id: each core_id writes its own slice."""
    a, o = buf(1, I32, cores * per), buf(0, I32, cores * per)
    core = special(cores)
    r = UOp.range(per, 0)
    i = core * per + r
    st = o.index(i).store(a.index(i).load() * 3 + core.cast(I32))
    return linear(o, a, core, r, st, end(st, r))


def counter(cores: int) -> UOp:
    """out[core_id] += 1: after k launches every slot holds k exactly when each id ran once per launch."""
    o = buf(0, I32, cores)
    core = special(cores)
    st = o.index(core).store(o.index(core).load() + UOp.const(1, I32))
    return linear(o, core, st)


def two_specials() -> UOp:
    """out[a*8 + b] = a*1000 + b*10 + neg + (big >> 60) for SPECIALs a < 3, b < m (a variable): the flat id is
    unravelled in the entry wrapper and the variables travel as 64-bit words (a negative int64, a uint64 above
    2**63)."""
    m = UOp.variable("m", 1, 8)
    neg = UOp.variable("neg", -(1 << 40), 0, I64)
    big = UOp.variable("big", 0, (1 << 64) - 1, dtypes.uint64)
    o = buf(0, I64, 24)
    sa, sb = special(3, "a"), special(m, "b")
    val = sa.cast(I64) * 1000 + sb.cast(I64) * 10 + neg + (big >> UOp.const(60, dtypes.uint64)).cast(I64)
    st = o.index(sa * 8 + sb).store(val)
    return linear(o, m, neg, big, sa, sb, st)


def test_threaded_slices_match_python_device() -> None:
    for cores, per in [(THREADS, 50_000), (7, 1000), (1, 10)]:
        prog = slices(cores, per)
        a = np.arange(cores * per, dtype=np.int32) - 1000
        outs = []
        for k in (DEVICE.compile(prog, "slices"), PY.compile(prog, "slices")):
            out = np.zeros(cores * per, np.int32)
            k({0: out, 1: a})
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_array_equal(outs[0], a * 3 + np.repeat(np.arange(cores, dtype=np.int32), per))


def test_several_specials_and_variables_match_python_device() -> None:
    prog = two_specials()
    vv = {"m": 5, "neg": -(1 << 40) + 3, "big": (1 << 64) - 5}
    outs = []
    for k in (DEVICE.compile(prog, "two"), PY.compile(prog, "two")):
        out = np.full(24, -1, np.int64)
        k({0: out}, vv)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
    want = np.full(24, -1, np.int64)
    for a in range(3):
        want[a * 8:a * 8 + 5] = a * 1000 + np.arange(5) * 10 + vv["neg"] + 15
    np.testing.assert_array_equal(outs[0], want)


def test_zero_bound_runs_nothing() -> None:
    n = UOp.variable("n", 0, 4)
    o = buf(0, I32, 4)
    core = special(n)
    st = o.index(core).store(UOp.const(5, I32))
    k = DEVICE.compile(linear(o, n, core, st), "zero")
    out = np.zeros(4, np.int32)
    k({0: out}, {"n": 0})
    assert not out.any()
    k({0: out}, {"n": 3})
    np.testing.assert_array_equal(out, [5, 5, 5, 0])


def test_many_tiny_launches() -> None:
    k = DEVICE.compile(counter(THREADS), "count")
    out = np.zeros(THREADS, np.int32)
    for _ in range(10_000):
        k({0: out})
    np.testing.assert_array_equal(out, 10_000)
    # the raw launch path too, with a prepacked argument array (no Python-side checks)
    assert k.entry is not None
    args = cpu_pool.pack([out.ctypes.data])
    for _ in range(10_000):
        cpu_pool.launch(k.entry, args, THREADS)
    np.testing.assert_array_equal(out, 20_000)


def test_launches_after_idle_gaps() -> None:
    # after a gap the workers sleep on the futex: the launch must wake them (or run without them), not stall
    k = DEVICE.compile(slices(THREADS, 20_000), "gaps")
    c = DEVICE.compile(counter(THREADS * 3), "gaps_count")
    a = np.arange(THREADS * 20_000, dtype=np.int32)
    want = a * 3 + np.repeat(np.arange(THREADS, dtype=np.int32), 20_000)
    cnt = np.zeros(THREADS * 3, np.int32)
    for i in range(8):
        time.sleep(0.02 if i % 2 else 0.001)
        out = np.zeros_like(a)
        k({0: out, 1: a})
        np.testing.assert_array_equal(out, want)
        c({0: cnt})
    np.testing.assert_array_equal(cnt, 8)


def test_single_id_runs_on_the_caller_without_starting_threads() -> None:
    # n = 1 must not need the pool at all: a fresh process runs it and still has no workers
    code = textwrap.dedent("""
        import numpy as np
        from devices import cpu_pool
        from devices.cpu import DEVICE
        from tests.devices.test_cpu_pool import slices
        k = DEVICE.compile(slices(1, 64), "one")
        a, out = np.arange(64, dtype=np.int32), np.zeros(64, np.int32)
        k({0: out, 1: a})
        assert (out == a * 3).all()
        cpu_pool.launch(k.entry, cpu_pool.pack([out.ctypes.data, a.ctypes.data]), 1)
        assert cpu_pool.workers() == 0 and not cpu_pool._LIB, "n = 1 loaded or started the pool"
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=_root())
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_concurrent_launches_from_python_threads() -> None:
    # a second launch while one runs goes serial on its own thread instead of waiting or mixing ids
    kernels = [DEVICE.compile(counter(THREADS * 2), f"conc{i}") for i in range(3)]
    outs = [np.zeros(THREADS * 2, np.int32) for _ in kernels]

    def go(k: CPUKernel, out: np.ndarray) -> None:
        for _ in range(2000):
            k({0: out})

    ts = [threading.Thread(target=go, args=(k, o)) for k, o in zip(kernels, outs, strict=True)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for o in outs:
        np.testing.assert_array_equal(o, 2000)


def test_entry_names_do_not_clash() -> None:
    # `rand` is also a libc function: the entry wrapper must call the kernel, not libc's rand
    names = ["args", "x", "x__entry", "x__entry_kernel", "core_id", "rand"]
    progs = [(counter(2), name) for name in names]
    ks = DEVICE.compile_batch(progs)
    for k in ks:
        out = np.zeros(2, np.int32)
        k({0: out})
        np.testing.assert_array_equal(out, 1)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_and_exit() -> None:
    # the parent's workers do not exist in a forked child: its first launch starts new ones; both exit cleanly
    code = textwrap.dedent("""
        import os
        import numpy as np
        from devices import cpu_pool
        from devices.cpu import DEVICE
        from tests.devices.test_cpu_pool import THREADS, counter
        k = DEVICE.compile(counter(THREADS), "forked")
        out = np.zeros(THREADS, np.int32)
        for _ in range(100):
            k({0: out})
        assert cpu_pool.workers() == THREADS - 1
        pid = os.fork()
        if pid == 0:
            for _ in range(1000):
                k({0: out})
            os._exit(0 if (out == 1100).all() and cpu_pool.workers() == THREADS - 1 else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        for _ in range(100):
            k({0: out})
        assert (out == 200).all()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=_root())
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_without_a_pool_ids_run_one_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    # where the pool cannot be built (no futex outside Linux) kernels still run, single-threaded
    k = DEVICE.compile(counter(5), "nopool")
    monkeypatch.setattr(cpu_pool, "_LIB", [])
    monkeypatch.setattr(cpu_pool, "_FAILED", ["no pool"])
    out = np.zeros(5, np.int32)
    for _ in range(3):
        k({0: out})
    np.testing.assert_array_equal(out, 3)


def test_launch_checks_n() -> None:
    with pytest.raises(ValueError, match="n must be"):
        cpu_pool.launch(0, [], -1)


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(cpu_pool.threads() < 2, reason="one CPU: launches never take the pool")
def test_pool_is_built_alongside_the_first_parallel_kernels() -> None:
    # a fresh process with an empty cache: compiling a kernel with several ids builds and loads the pool in the same
    # batch (its compile runs next to the kernels', not after them at the first launch); one id does not
    code = textwrap.dedent("""
        import os, tempfile
        os.environ["CACHEDIR"] = tempfile.mkdtemp()
        import numpy as np
        from devices import cpu_pool
        from devices.cpu import DEVICE
        from tests.devices.test_cpu_pool import slices
        DEVICE.compile(slices(1, 64), "one")
        assert cpu_pool.unbuilt(), "a kernel with one id built the pool"
        k = DEVICE.compile(slices(4, 16), "four")
        assert not cpu_pool.unbuilt() and cpu_pool._LIB, "the pool was not built with the kernels"
        a, out = np.arange(64, dtype=np.int32), np.zeros(64, np.int32)
        k({0: out, 1: a})
        assert (out == a * 3 + np.repeat(np.arange(4, dtype=np.int32), 16)).all()
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=_root())
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
