"""The cpu device's compiles in the background: jobs on threads under one limit, and the compile tiers.

A `_Job` is one C file compiling on a thread of its own (the compiler is another process, so the thread waits on
it holding no GIL while Python lowers the next kernels); `_RUNNING` bounds how many run at once and orders the
waiting ones. The tiers (CPU_TIERS, devices.cpu's module text): `_load` compiles a file the disk cache lacks at -Og
and queues its -O2 build on `_UPGRADES`, one background thread at nice 19 that builds only while no kernel file of a
realize compiles or waits to.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import ctypes
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from devices.base import Target
from devices.cpu_compiler import Compiler
from devices.toolrun import host_cores, terminate
from rewrite.env import cache_dir, getenv


def _compile_workers() -> int:
    """Compiler processes to run at once: one per core this process may use (the compiler runs on the host,
    whatever the target)."""
    return host_cores()


class _Job:
    """A compile running on its own thread: the C compiler is another process, so the thread waits on it holding
    no GIL while Python goes on (lowering the next kernels). At most `_RUNNING.limit` jobs run at once: while
    kernels are still being lowered, one core fewer than the host has (Python keeps one); for a batch's last
    files, all of them (compile_batch). Of the jobs waiting for a turn the one of most `weight` goes first (a file's
    source size: the longest compiles start first, so the last ones to finish are short; the thread pool's build,
    weight -1, waits for the kernels' files, since it is needed only at the first launch). Plain threads rather
    than concurrent.futures, whose import alone (it brings in logging) costs a first realize ~10 ms."""

    def __init__(self, fn: Any, *args: Any, weight: float = 0.0) -> None:
        self._out: Any = None
        self._err: BaseException | None = None
        self.weight = weight
        self.began: float | None = None  # time.perf_counter() when it got its turn
        with _RUNNING:
            _RUNNING.waiting.append(self)
        self._thread = threading.Thread(target=self._run, args=(fn, args), name="cpu-compile", daemon=True)
        self._thread.start()

    def _run(self, fn: Any, args: tuple) -> None:
        with _RUNNING:
            _RUNNING.wait_for(lambda: _RUNNING.running < _RUNNING.limit and
                              max(_RUNNING.waiting, key=lambda j: j.weight) is self)
            _RUNNING.waiting.remove(self)
            _RUNNING.running += 1
            self.began = time.perf_counter()
            _RUNNING.kernels += self.weight >= 0
        try:
            self._out = fn(*args)
        except BaseException as e:  # raised again in the thread that asks for the result
            self._err = e
        finally:
            with _RUNNING:
                _RUNNING.running -= 1
                _RUNNING.kernels -= self.weight >= 0
                _RUNNING.notify_all()

    def result(self) -> Any:
        self._thread.join()
        if self._err is not None:
            raise self._err
        return self._out


class _Limit(threading.Condition):
    running = 0
    kernels = 0  # of the running jobs, those compiling kernels (not the thread pool's build)
    limit = 1
    planning = 0  # realizes scheduling and lowering new kernels now (CPUDevice.planning)

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[_Job] = []  # started, waiting for a turn

    def set(self, limit: int) -> None:
        with self:
            self.limit = max(1, limit)
            self.notify_all()

    def busy(self) -> bool:
        """Whether a kernel file compiles or waits to, or a realize plans new kernels (its schedule and lowering
        are the Python its kernel files wait for)."""
        with self:
            return self.kernels > 0 or self.planning > 0 or any(j.weight >= 0 for j in self.waiting)

    @contextlib.contextmanager
    def plans(self) -> Iterator[None]:
        """A realize plans new kernels in the block: no -O2 build starts meanwhile (`busy`)."""
        with self:
            self.planning += 1
        try:
            yield
        finally:
            with self:
                self.planning -= 1
                self.notify_all()


_RUNNING = _Limit()


class _Upgrade:
    """The -O2 build of a C file whose kernels run its -Og build meanwhile. `done` once built (`lib`), failed or
    dropped at exit (`lib` None: the kernels keep the -Og code)."""

    def __init__(self, compiler: Compiler, src: str, what: str, target: Target, key: str) -> None:
        self.compiler, self.src, self.what, self.target, self.key = compiler, src, what, target, key
        # the disk cache in force now ("" for none): the build runs later, maybe under other settings
        self.where = ""
        if int(getenv("CACHE")):
            with contextlib.suppress(OSError):  # unwritable: built in a temporary directory
                self.where = cache_dir()
        self.lib: ctypes.CDLL | None = None
        self.done = False


class _Live(set):
    """The background compiler processes running; once `stopping`, one that starts is terminated at once."""

    stopping = False

    def add(self, p: subprocess.Popen) -> None:
        super().add(p)
        if self.stopping:
            terminate(p)


class _Upgrader:
    """One background thread building queued files at -O2, one at a time, its compiler processes at nice 19; a build
    starts only while no kernel file of a realize compiles or waits to and no realize plans new kernels
    (_RUNNING.busy). Shares _RUNNING's lock."""

    def __init__(self) -> None:
        self.queue: collections.deque[_Upgrade] = collections.deque()
        self.pending: dict[str, _Upgrade] = {}  # the -O2 key -> its build, queued or running
        self.live = _Live()
        self.thread: threading.Thread | None = None
        self.stopping = False

    def submit(self, compiler: Compiler, src: str, what: str, target: Target) -> _Upgrade:
        key = compiler.key(src, target)
        with _RUNNING:
            if (up := self.pending.get(key)) is not None:
                return up
            up = self.pending[key] = _Upgrade(compiler, src, what, target, key)
            if self.stopping:  # exiting: nothing more is built
                self._drop(up)
                return up
            self.queue.append(up)
            if self.thread is None:
                self.thread = threading.Thread(target=self._work, name="cpu-upgrade", daemon=True)
                self.thread.start()
                atexit.register(self.stop)
            _RUNNING.notify_all()
        return up

    def _drop(self, up: _Upgrade) -> None:
        up.done = True
        self.pending.pop(up.key, None)

    def _work(self) -> None:
        # Linux: a thread's nice value is its own, and the processes it starts inherit it
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        while True:
            with _RUNNING:
                _RUNNING.wait_for(lambda: self.stopping or (bool(self.queue) and not _RUNNING.busy()))
                if self.stopping:
                    return
                up = self.queue.popleft()
            lib = None
            try:
                if up.compiler.key(up.src, up.target) == up.key:  # else the flags changed (SANITIZE): dropped
                    lib = up.compiler.load(up.src, up.what, up.target, live=self.live, where=up.where)
            except Exception as e:  # the kernels keep their -Og code
                if not self.stopping and int(getenv("DEBUG")) >= 1:
                    print(f"cpu: the -O2 build of {up.what} failed, keeping -Og: {e}", file=sys.stderr)
            with _RUNNING:
                up.lib = lib
                self._drop(up)
                _RUNNING.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every queued build is done; whether they are."""
        with _RUNNING:
            return _RUNNING.wait_for(lambda: not self.pending, timeout)

    def stop(self) -> None:
        """At exit: drop the queued builds and terminate a running one (its compile's temporary file is removed by
        the compile that fails), then wait for the thread; nothing is left half written in the cache."""
        with _RUNNING:
            self.stopping = self.live.stopping = True
            for up in self.queue:
                self._drop(up)
            self.queue.clear()
            _RUNNING.notify_all()
        for p in list(self.live):
            terminate(p)
        if self.thread is not None:
            self.thread.join(timeout=60)


_UPGRADES = _Upgrader()


def _tiered(target: Target) -> bool:
    """Whether a file the cache lacks is compiled at -Og first: CPU_TIERS=1, code for this host, a spare core."""
    return bool(int(getenv("CPU_TIERS"))) and target.runs_here and _compile_workers() >= 2


def _load(compiler: Compiler, src: str, what: str, target: Target) -> tuple[ctypes.CDLL, _Upgrade | None]:
    """The library of one C file: its -O2 build if loaded or cached; else (tiered) its -Og build, with the -O2 build
    queued; else its -O2 build, compiled now. A file whose -Og object an earlier process cached but whose -O2 object
    is not there is compiled at -O2 now: that process ended before its -O2 build (a run shorter than the build,
    which starts only once nothing else compiles and runs at nice 19), so every later run of it would too and
    none would ever get -O2 code (a depthwise conv's kernel ran 5.5 ms at -Og against 0.4 at -O2, run after run)."""
    if not _tiered(target):
        return compiler.load(src, what, target), None
    if (lib := compiler.cached(src, target)) is not None:
        return lib, None
    if compiler.in_disk_cache(src, target, "fast"):
        return compiler.load(src, what, target), None
    return compiler.load(src, what, target, tier="fast"), _UPGRADES.submit(compiler, src, what, target)
