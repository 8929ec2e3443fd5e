"""The cpu device's compile tiers (CPU_TIERS, devices/cpu.py): a file the disk cache lacks is compiled at -Og first
and rebuilt at -O2 in the background; its kernels take the -O2 code at their next call once it is built.

The tiers are cached apart, give bit-identical results (matmul, softmax, a reduction, transcendentals), the knob
turns the fast tier off, a warm cache serves -O2 at once, and a process that exits with a build running leaves no
temporary file in the cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from devices.base import cpu_target
from devices.cpu import DEVICE, _compile_workers
from devices.cpu_compiler import GCC_FAST_FLAGS, Compiler
from rewrite.dtype import dtypes
from rewrite.env import Context
from tests.devices.builder import elementwise

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
F32 = dtypes.float32
needs_two = pytest.mark.skipif(_compile_workers() < 2, reason="one core: no spare core, no tiers")


def _files(d: str) -> list[str]:
    p = os.path.join(d, "cpu")
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


def test_the_tiers_are_keyed_apart() -> None:
    c, t, src = Compiler(), cpu_target("native"), "int f(int x) { return x + 1; }\n"
    assert c.key(src, t) != c.key(src, t, "fast")
    assert c.key(src, t) == c.key(src, t, "opt")
    opt, fast = c.flags(t), c.flags(t, "fast")
    assert "-O2" in opt and "-O2" not in fast and "-Og" in fast
    # the exactness flags are the same; the fast tier adds only its register-allocation flags (gcc)
    extra = () if c.is_clang else GCC_FAST_FLAGS
    assert [f for f in opt if f != "-O2"] == [f for f in fast if f != "-Og" and f not in extra]
    assert all(f in fast for f in extra) and not any(f in opt for f in extra)
    with pytest.raises(ValueError, match="tier"):
        c.flags(t, "fastest")


def test_a_fast_object_is_never_served_as_the_optimized_one(tmp_path: os.PathLike) -> None:
    d, src = str(tmp_path), "int f(int x) { return 2 * x + 1; }\n"
    with Context(CACHEDIR=d, CACHE=1):
        c = Compiler()
        assert c.load(src, "k", tier="fast").f(3) == 7
        assert len(_files(d)) == 1
        assert c.cached(src) is None and Compiler().cached(src) is None  # in memory or on disk: only -Og exists
        c.load(src, "k")
        assert len(_files(d)) == 2 and Compiler().cached(src) is not None
    with Context(CACHEDIR=d, CACHE=0):
        assert Compiler().cached(src) is None  # CACHE=0: no disk lookup


@needs_two
def test_the_swap_happens_and_the_results_are_equal(tmp_path: os.PathLike) -> None:
    progs = [(elementwise(lambda a: (a * 1.7 + 0.3).exp2() * a, F32, [F32], 37), "tier_a"),
             (elementwise(lambda a: a * a - a, F32, [F32], 37), "tier_b")]
    x = np.linspace(-4, 4, 37, dtype=np.float32)
    with Context(CACHEDIR=str(tmp_path), CACHE=1, CPU_TIERS=1):
        ks = DEVICE.compile_batch(progs)
        assert [k.tier for k in ks] == ["fast", "fast"]
        fast = [np.zeros(37, np.float32) for _ in ks]
        for k, out in zip(ks, fast, strict=True):
            k({0: out, 1: x})
        assert DEVICE.finish_upgrades(120)
        opt = [np.zeros(37, np.float32) for _ in ks]
        for k, out in zip(ks, opt, strict=True):
            k({0: out, 1: x})  # this call takes the -O2 code
        assert [k.tier for k in ks] == ["opt", "opt"]
        assert len({k.path for k in ks}) == 1 and ks[0].path is not None and ks[0].path.endswith(".so")
        for a, b in zip(fast, opt, strict=True):
            assert a.tobytes() == b.tobytes()
        again = DEVICE.compile_batch(progs)  # the -O2 object is loaded now: no fast tier
        assert [k.tier for k in again] == ["opt", "opt"]


@needs_two
def test_no_optimized_build_starts_while_a_realize_plans(tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """The -O2 build queued by one compile waits while a realize schedules and lowers new kernels
    (CPUDevice.planning, which lower.realize enters for a new plan), and is built once that ends."""
    from tensor.tensor import Tensor

    progs = [(elementwise(lambda a: a * 2.25 + 0.5, F32, [F32], 41), "tier_held")]
    x = np.linspace(-2, 2, 41, dtype=np.float32)
    with Context(CACHEDIR=str(tmp_path), CACHE=1, CPU_TIERS=1):
        assert DEVICE.finish_upgrades(120)
        with DEVICE.planning():
            (k,) = DEVICE.compile_batch(progs)
            assert k.tier == "fast"
            assert not DEVICE.finish_upgrades(1.0)  # queued, not started: the block plans
            out = np.zeros(41, np.float32)
            k({0: out, 1: x})
            assert k.tier == "fast"
        assert DEVICE.finish_upgrades(120)  # the block ended: built
        again = np.zeros(41, np.float32)
        k({0: again, 1: x})
        assert k.tier == "opt" and again.tobytes() == out.tobytes()
        np.testing.assert_allclose(out, x * 2.25 + 0.5, rtol=1e-6)
    entered: list[int] = []
    real = type(DEVICE).planning

    def counted() -> object:
        entered.append(1)
        return real()

    monkeypatch.setattr(type(DEVICE), "planning", staticmethod(counted))
    y = np.arange(43, dtype=np.float32)
    np.testing.assert_allclose((Tensor(y) * 3.25 - 0.75).numpy(), y * 3.25 - 0.75, rtol=1e-6)  # a new plan
    assert entered == [1]


def test_the_knob_turns_the_fast_tier_off(tmp_path: os.PathLike) -> None:
    progs = [(elementwise(lambda a: a * 3.5 - 1, F32, [F32], 11), "tier_off")]
    with Context(CACHEDIR=str(tmp_path), CACHE=1, CPU_TIERS=0):
        (k,) = DEVICE.compile_batch(progs)
    assert k.tier == "opt" and k._upgrade is None
    assert len(_files(str(tmp_path))) == 1  # one object: -O2, nothing queued
    assert DEVICE.finish_upgrades(0)


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=ROOT, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=e, cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


# a matmul, a softmax (max, exp, sum, divide) and a mean, realized in a fresh process; the kernels each compile
# made are kept, so the test can tell which tier ran
MODEL = """
    import numpy as np, sys
    from devices import cpu
    from tensor import Tensor
    made, born = [], []
    real = cpu.DEVICE.compile_batch
    def batch(*a, **k):
        ks = real(*a, **k)
        made.extend(ks)
        born.extend(k.tier for k in ks)  # the tier each kernel came back with (the -O2 swap may come any time later)
        return ks
    cpu.DEVICE.compile_batch = batch
    rng = np.random.default_rng(0)
    a = rng.standard_normal((48, 40), dtype=np.float32)
    b = rng.standard_normal((40, 56), dtype=np.float32)
    def model():
        h = Tensor(a) @ Tensor(b)
        return np.concatenate([h.softmax(1).numpy().ravel(), (h * h).mean(0).numpy().ravel()])
"""


@needs_two
def test_the_tiers_give_the_same_bits_end_to_end(tmp_path: Path) -> None:
    code = MODEL + """
    first = model()
    tiers = set(born)
    assert cpu.DEVICE.finish_upgrades(300)
    second = model()
    print("TIERS", sorted(tiers), sorted({k.tier for k in made}))
    print("BITS", first.tobytes().hex(), second.tobytes().hex())
    """
    on = _run(code, CACHEDIR=str(tmp_path / "on"), CPU_TIERS="1", CACHE="1")
    off = _run(code, CACHEDIR=str(tmp_path / "off"), CPU_TIERS="0", CACHE="1")
    assert on.returncode == 0, on.stderr[-3000:]
    assert off.returncode == 0, off.stderr[-3000:]
    assert "TIERS ['fast'] ['opt']" in on.stdout  # the first run used -Og only, every kernel swapped to -O2 since
    assert "TIERS ['opt'] ['opt']" in off.stdout
    bits_on, bits_off = on.stdout.split("BITS", 1)[1].split(), off.stdout.split("BITS", 1)[1].split()
    assert len(bits_on) == 2 and bits_on == bits_off  # -Og, then -O2 after the swap; -O2 throughout: the same bits
    assert bits_on[0] == bits_on[1]
    # a warm cache: the -O2 objects are found, nothing is compiled at -Og
    warm = _run(code, CACHEDIR=str(tmp_path / "on"), CPU_TIERS="1", CACHE="1")
    assert warm.returncode == 0 and "TIERS ['opt'] ['opt']" in warm.stdout, warm.stderr[-3000:]


@needs_two
def test_a_run_that_ended_before_its_optimized_build_leaves_the_next_one_optimized(tmp_path: Path) -> None:
    # the first process exits with its -O2 builds still queued (held back: it plans throughout), so the cache has
    # only -Og objects; the next process compiles those files at -O2 at once and queues nothing. Before, it took the
    # -Og objects and queued the -O2 builds again: a script shorter than its -O2 build never ran -O2 code
    code = MODEL + """
    import os
    with cpu.DEVICE.planning():
        model()
        print("PENDING", bool(cpu._UPGRADES.pending))
    print("BORN", sorted(set(born)))
    print("FILES", *sorted({os.path.basename(k.path) for k in made}))
    """
    env = {"CACHEDIR": str(tmp_path), "CPU_TIERS": "1", "CACHE": "1"}
    first = _run(code, **env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "PENDING True" in first.stdout and "BORN ['fast']" in first.stdout, first.stdout
    again = _run(code, **env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "PENDING False" in again.stdout and "BORN ['opt']" in again.stdout, again.stdout
    files = [r.split("FILES", 1)[1].split() for r in (first.stdout, again.stdout)]
    assert files[0] and len(files[1]) == len(files[0]) and not set(files[0]) & set(files[1])  # -O2 objects now


@needs_two
@pytest.mark.parametrize("cache", ["1", "0"])
def test_exit_with_a_build_running_leaves_no_temporary_file(tmp_path: Path, cache: str) -> None:
    # the process exits as soon as a -O2 build has begun: the compiler is terminated and its temporary removed
    code = MODEL + """
    import time
    model()
    t0 = time.perf_counter()
    while not cpu._UPGRADES.live and time.perf_counter() - t0 < 60:
        time.sleep(0.005)
    print("RUNNING", bool(cpu._UPGRADES.live))
    """
    d, tmp = str(tmp_path / "cache"), tmp_path / "tmp"
    tmp.mkdir()
    r = _run(code, CACHEDIR=d, CPU_TIERS="1", CACHE=cache, TMPDIR=str(tmp))  # CACHE=0 compiles under TMPDIR
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RUNNING True" in r.stdout
    assert not [f for f in _files(d) if ".tmp" in f], _files(d)
    assert not os.listdir(tmp)


def test_a_background_compile_runs_in_its_own_group_of_this_session() -> None:
    # run_compiler with `live` (the -O2 builds): a process group of its own, so terminate() ends the compiler and
    # what it started, but this session, so the nice value the build runs at is not void under Linux's scheduler
    # autogroups (one per session, each weighted alike)
    from devices.toolrun import run_compiler

    live: set[subprocess.Popen] = set()
    seen: list[tuple[int, int]] = []

    class Watch(set):
        def add(self, p: subprocess.Popen) -> None:
            seen.append((os.getpgid(p.pid), os.getsid(p.pid)))
            live.add(p)

        def discard(self, p: subprocess.Popen) -> None:
            live.discard(p)

    code = "import sys; sys.stdin.read()"
    run_compiler([sys.executable, "-c", code], "cpu", "k", "", 60, stdin="", live=Watch())
    (pgid, sid), = seen
    assert pgid != os.getpgid(0) and sid == os.getsid(0)
    assert not live
