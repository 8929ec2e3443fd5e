"""The cpu device's disk and memory caches under attack: concurrent compiles (threads and processes), truncated,
garbage and swapped objects, unwritable cache directories, stale temporaries, the size bound and the bound on
loaded libraries."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

from devices import objcache
from devices.cpu import Compiler
from rewrite.env import Context

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def src(k: int) -> str:
    return f"int f{k}(int x) {{ return {k} * x + 1; }}\n"


def cached(d: str) -> list[str]:
    p = os.path.join(d, "cpu")
    return sorted(os.listdir(p)) if os.path.isdir(p) else []


@pytest.mark.parametrize("rep", range(4))
def test_threads_compile_the_same_kernel_into_an_empty_cache(tmp_path: os.PathLike, rep: int) -> None:
    d = str(tmp_path)
    shared = Compiler()  # threads sharing one Compiler, and threads with their own, all miss at once
    barrier = threading.Barrier(6)
    results: list[object] = [None] * 6

    def work(i: int) -> None:
        c = shared if i % 2 else Compiler()
        barrier.wait()
        try:
            results[i] = getattr(c.load(src(7 + rep), "k"), f"f{7 + rep}")(3)
        except Exception as e:
            results[i] = e

    with Context(CACHEDIR=d, CACHE=1):
        ts = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert results == [3 * (7 + rep) + 1] * 6
    assert len(cached(d)) == 1 and not cached(d)[0].endswith(objcache.TMP_SUFFIX)


def test_processes_compile_the_same_kernel_into_an_empty_cache(tmp_path: os.PathLike) -> None:
    code = ("import sys, time; from devices.cpu import Compiler\n"
            "t = float(sys.argv[1])\n"
            "while time.time() < t: pass\n"
            f"print(Compiler().load({src(11)!r}, 'k').f11(2))\n")
    env = dict(os.environ, CACHEDIR=str(tmp_path), CACHE="1", PYTHONPATH=ROOT)
    start = time.time() + 1.5
    procs = [subprocess.Popen([sys.executable, "-c", code, str(start)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [e for _, e in outs]
    assert [o.strip() for o, _ in outs] == ["23"] * 4
    assert len(cached(str(tmp_path))) == 1


def _object(d: str) -> str:
    (name,) = cached(d)
    return os.path.join(d, "cpu", name)


@pytest.mark.parametrize("damage", ["truncate", "empty", "garbage", "flip_byte", "no_footer"])
def test_a_damaged_object_is_rebuilt(tmp_path: os.PathLike, damage: str) -> None:
    d = str(tmp_path)
    with Context(CACHEDIR=d, CACHE=1):
        assert Compiler().load(src(5), "k").f5(2) == 11
        path = _object(d)
        with open(path, "rb") as f:
            data = f.read()
        bad = {"truncate": data[: len(data) // 2], "empty": b"", "garbage": os.urandom(len(data)),
               "flip_byte": data[:100] + bytes([data[100] ^ 0xFF]) + data[101:],
               "no_footer": data[: -objcache.FOOTER]}[damage]
        # written beside and renamed over: this process still maps the old file, which must stay intact
        with open(path + ".new", "wb") as f:
            f.write(bad)
        os.replace(path + ".new", path)
        assert not objcache.verify(path, os.path.basename(path)[:-3])
        # a truncated object would die with SIGBUS in dlopen: run the reload in a child so a crash fails the test
        code = f"from devices.cpu import Compiler; print(Compiler().load({src(5)!r}, 'k').f5(4))"
        env = dict(os.environ, CACHEDIR=d, CACHE="1", PYTHONPATH=ROOT)
        r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "21"
        assert objcache.verify(path, os.path.basename(path)[:-3])  # healed on disk


def test_a_swapped_object_is_not_trusted(tmp_path: os.PathLike) -> None:
    d = str(tmp_path)
    with Context(CACHEDIR=d, CACHE=1):
        c = Compiler()
        assert c.load(src(2), "a").f2(10) == 21
        (pa,) = cached(d)
        assert c.load(src(2).replace("f2", "g2").replace("2 *", "3 *"), "b").g2(10) == 31
        pb = next(n for n in cached(d) if n != pa)
        # the other kernel's object, with its own valid footer, put where kernel a's belongs
        with open(os.path.join(d, "cpu", pb), "rb") as f:
            data = f.read()
        with open(os.path.join(d, "cpu", pa + ".new"), "wb") as f:
            f.write(data)
        os.replace(os.path.join(d, "cpu", pa + ".new"), os.path.join(d, "cpu", pa))
        lib = Compiler().load(src(2), "a")
        assert lib.f2(10) == 21


def test_unwritable_cache_directory_falls_back_with_one_warning(tmp_path: os.PathLike) -> None:
    blocker = os.path.join(tmp_path, "a_file")
    with open(blocker, "w") as f:
        f.write("not a directory")
    objcache.reset_warning()
    for knobs in ({"CACHEDIR": os.path.join(blocker, "cache")}, {"CACHEDIR": os.path.join(blocker, "c"), "CACHE": 0}):
        with Context(**knobs), warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            c = Compiler()
            assert c.load(src(3), "k").f3(1) == 4
            assert c.load(src(4), "k").f4(1) == 5
            # the runtime library is kept on disk even under CACHE=0: it falls back too
            assert c.load(src(6).replace("f6", "rt6"), "runtime", runtime=True).rt6(1) == 7
        cw = [x for x in w if issubclass(x.category, objcache.CacheWarning)]
        assert len(cw) <= 1 and all("not writable" in str(x.message) and "CACHEDIR" in str(x.message) for x in cw)
    objcache.reset_warning()


def test_unwritable_home_falls_back(tmp_path: os.PathLike) -> None:
    blocker = os.path.join(tmp_path, "home_file")
    with open(blocker, "w") as f:
        f.write("")
    code = ("import warnings; warnings.simplefilter('always'); from devices.cpu import Compiler\n"
            f"print(Compiler().load({src(9)!r}, 'k').f9(1))\n"
            "from tensor import Tensor\n"
            "import numpy as np\n"
            "print(float((Tensor(np.arange(1 << 20, dtype=np.float64)) * 2).sum().numpy()))\n")
    env = {k: v for k, v in os.environ.items() if k != "CACHEDIR"}
    env.update(HOME=blocker, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10", str(float((1 << 20) * ((1 << 20) - 1)))]
    assert r.stderr.count("CacheWarning") == 1


def test_a_read_only_cache_is_read_and_misses_compile_elsewhere(tmp_path: os.PathLike,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    d = str(tmp_path)
    with Context(CACHEDIR=d, CACHE=1):
        Compiler().load(src(12), "k")
        before = cached(d)

        def refuse(_d: str, _key: str) -> str:
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(objcache, "temp_path", refuse)
        objcache.reset_warning()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            c = Compiler()
            assert c.load(src(12), "k").f12(1) == 13  # a hit needs no write
            assert not w
            assert c.load(src(13), "k").f13(1) == 14
            assert c.load(src(14), "k").f14(1) == 15
        assert len([x for x in w if issubclass(x.category, objcache.CacheWarning)]) == 1
        assert cached(d) == before
    objcache.reset_warning()


def test_stale_temporaries_are_swept(tmp_path: os.PathLike) -> None:
    d = os.path.join(tmp_path, "cpu")
    os.makedirs(d)
    old = os.path.join(d, "abc.123.456.xyz.tmp.so")
    new = os.path.join(d, "def.123.456.xyz.tmp.so")
    keep = os.path.join(d, "0123.so")
    for p in (old, new, keep):
        with open(p, "wb") as f:
            f.write(b"x" * 10)
    past = time.time() - objcache.STALE_S - 60
    os.utime(old, (past, past))
    os.utime(keep, (past, past))
    # a new process sweeps when it first uses the directory
    code = f"from devices.cpu import Compiler; print(Compiler().load({src(15)!r}, 'k').f15(1))"
    env = dict(os.environ, CACHEDIR=str(tmp_path), CACHE="1", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(old) and os.path.exists(new) and os.path.exists(keep)


def test_disk_cache_is_bounded_lru(tmp_path: os.PathLike) -> None:
    d = str(tmp_path)
    with Context(CACHEDIR=d, CACHE=1):
        Compiler().load(src(100), "k")
        first = _object(d)
        size = os.path.getsize(first)
    limit = size * 4 + size // 2  # room for 4 objects; eviction goes down to 90%, i.e. 4 again
    names: dict[int, str] = {100: os.path.basename(first)}
    with Context(CACHEDIR=d, CACHE=1, CACHE_SIZE=limit):
        c = Compiler()
        for k in range(101, 112):
            if k == 104:
                time.sleep(0.01)
                assert Compiler().load(src(100), "k").f100(1) == 101  # a disk hit makes 100 the most recent
            before = set(cached(d))
            objcache._written.clear()  # every write scans (a process normally scans after limit/16 bytes)
            assert getattr(c.load(src(k), "k"), f"f{k}")(1) == k + 1
            names[k] = next(iter(set(cached(d)) - before), "")
            total = sum(os.path.getsize(os.path.join(d, "cpu", n)) for n in cached(d))
            assert total <= limit
            if k == 104:  # least recently used went first: 101, not 100 (the oldest written)
                assert names[100] in cached(d) and names[101] not in cached(d)
        assert sorted(cached(d)) == sorted(names[k] for k in range(108, 112))


def _mapped(d: str) -> int:
    with open("/proc/self/maps") as f:
        return len({line.split()[-1] for line in f if d in line})


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc")
@pytest.mark.parametrize("cache", [0, 1])
@pytest.mark.usefixtures("young_gc")
def test_loaded_libraries_are_bounded(tmp_path: os.PathLike, cache: int) -> None:
    d = str(tmp_path)
    with Context(CACHEDIR=d, CACHE=cache):
        c = Compiler()
        c.max_libs = 4
        held = []
        for k in range(200, 240):
            lib = c.load(src(k), "k")
            fn = getattr(lib, f"f{k}")
            if k < 203:
                held.append(fn)  # a function pointer keeps its library loaded
            del lib
            assert fn(1) == k + 1
            del fn
            gc.collect()
        if cache:
            assert _mapped(d) <= 4 + 3
        assert all(f(2) == 2 * (200 + i) + 1 for i, f in enumerate(held))
        assert len(c._libs) == 4


@pytest.mark.usefixtures("young_gc")
def test_loaded_library_count_bounded_through_kernels(tmp_path: os.PathLike) -> None:
    """CPUKernels hold their library; dropping them and the table's entry unloads it."""
    import numpy as np

    from devices.cpu import CPUDevice
    from rewrite.dtype import dtypes
    from rewrite.ops import Ops
    from rewrite.uop import UOp
    from tests.devices.builder import linear

    d = str(tmp_path)
    with Context(CACHEDIR=d, CACHE=1):
        dev = CPUDevice()
        dev.compiler.max_libs = 3
        out = UOp.buffer(0, dtypes.int32, (4,))
        for k in range(12):
            r = UOp.range(4, 1)
            st = out.index(r).store((r * k).cast(dtypes.int32))
            kern = dev.compile(linear(r, st, UOp(Ops.END, (st, r))), f"k{k}")
            a = np.zeros(4, np.int32)
            kern({0: a})
            assert a.tolist() == [0, k, 2 * k, 3 * k]
            del kern
            gc.collect()
        assert _mapped(d) <= 3
