"""A native thread pool that runs one compiled kernel across several cores: `launch(entry, args, n)`.

A kernel with a core_id SPECIAL is compiled with a small wrapper, `void NAME__entry(void** args, int core_id)`,
that unpacks a packed argument array (every argument as one 64-bit word) and calls the kernel. `launch` runs
that wrapper once per core_id in [0, n) on the calling thread plus the pool's workers and returns when all are
done. ctypes drops the GIL for the call, so other Python threads keep running.

Why native and why this protocol (measured on the project's shared 2-vCPU VM):
waking a sleeping thread costs 3-27 us there (libgomp's spin-then-sleep policy even stalled ~6 ms after a 10 ms
idle gap), and a thread that only spins loses its vCPU for a whole scheduler slice (4+ ms) whenever another
process holds the other core. So:

* the caller publishes (function, args, n) under a new generation and runs ids itself right away;
* ids are claimed one at a time from a shared counter, so the caller also runs the ids no worker has claimed
  yet: a worker that is asleep, slow to wake or descheduled costs a launch nothing but parallelism, never a
  scheduler slice of waiting. The caller only waits for ids a worker has already started;
* waiting is a bounded spin and then a futex sleep, both for workers waiting for the next launch and for the
  caller waiting for the last ids (CALLER_SPIN_US of `pause`). A worker's spin is ~2 us of `pause`, then
  sched_yield rounds up to SPIN_US in all, so a process that wants its core gets it. A futex wake is a syscall
  only when someone actually sleeps.

The pool starts lazily on the first launch with n > 1 (its C source is compiled once and kept in the disk cache
like kernels, but also under CACHE=0: it is the runtime, not a kernel),
with one worker per usable CPU beyond the caller. Launches from two Python threads at once do not queue: the
second runs its ids serially on its own thread. At interpreter exit the workers are stopped and joined; a
forked child resets the pool (its workers do not exist there) and starts new workers on its first launch.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import sys
import threading
from collections.abc import Sequence

from devices.base import cpu_target
from rewrite.env import getenv
from rewrite.errors import CompileError

# How long a worker spins (mostly yielding) for the next launch before it sleeps. Measured on a quiet machine, a
# 2-way 256K-float add launched after 200 us of caller work took 90 us with a 50 us spin (the worker had gone to
# sleep: the futex wake of an idle vCPU costs the caller 10-20 us and the woken core starts slowly), 61 us with
# 1 ms, and 120 us on one thread; with a busy-loop process on the other vCPU all three took ~120 us. Kernels
# follow each other after Python-side pauses of that order. Well under a 4 ms scheduler tick.
SPIN_US = 1000
# How long the caller spins for ids still running on workers before it sleeps: a few futex wake-ups.
CALLER_SPIN_US = 50

_SRC = r"""
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef void (*entry_fn)(void **args, int core_id);

#define MAX_WORKERS 255
#define CLOSED 0xFFFFFFFFu /* low half of the claim word while a launch is being published */

static struct {
  /* generation << 32 | next unclaimed id. Only a successful compare-exchange on it claims an id, so a worker
     that wakes late for an old launch can never run an id of a newer one. */
  _Alignas(64) _Atomic uint64_t claim;
  _Atomic(entry_fn) fn;
  _Atomic(void **) args;
  _Atomic int n;
  _Alignas(64) _Atomic uint32_t wake_seq; /* futex word sleeping workers wait on */
  _Atomic int sleepers;
  _Atomic int stop;
  _Alignas(64) _Atomic int pending; /* ids not finished yet; futex word the caller waits on */
  _Atomic int caller_sleeping;
  _Alignas(64) pthread_mutex_t lock; /* one launch at a time; held for the whole launch */
  int threads;                       /* wanted participants, caller included */
  int nworkers;
  int started;
  int closed;                        /* after shutdown: run serially */
  long spin_ns;                      /* how long workers spin for the next launch */
  long caller_spin_ns;               /* how long the caller spins for the last ids */
  pthread_t tid[MAX_WORKERS];
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .threads = 1, .spin_ns = 1000000, .caller_spin_ns = 50000};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static inline long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* One round of a bounded spin-wait; false once `limit` ns have passed. The first rounds only `pause` (~2 us: a
   thread on the other core answers within that). After that a worker yields the CPU each round: while it waits
   for the next launch, a process that wants this core should get it. The caller does not yield: when another
   process shares its core, a yield would hand that process a whole time slice (seen: 4 ms launches). */
typedef struct { long t0; unsigned k; } spin_t;

static inline int spin_more(spin_t *s, long limit, int yield) {
  if (++s->k < 64) {
    cpu_relax();
    return 1;
  }
  long t = now_ns();
  if (s->k == 64) s->t0 = t;
  if (t - s->t0 > limit) return 0;
  if (yield) sched_yield();
  else cpu_relax();
  return 1;
}

static void futex_wait(void *addr, uint32_t expect) {
  syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
}

static void futex_wake(void *addr, int count) {
  syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
}

static inline int published(uint64_t w, uint32_t seen) {
  return (uint32_t)(w >> 32) != seen && (uint32_t)w != CLOSED;
}

/* Claim and run ids of generation `gen` until none is left; returns how many this thread ran. */
static int run_ids(uint32_t gen) {
  int ran = 0;
  uint64_t w = atomic_load_explicit(&P.claim, memory_order_acquire);
  for (;;) {
    if ((uint32_t)(w >> 32) != gen) break;
    uint32_t i = (uint32_t)w;
    int n = atomic_load_explicit(&P.n, memory_order_relaxed);
    /* pairs with the release fence in pool_launch: if n is already the next launch's, the compare-exchange
       below sees the CLOSED word and fails */
    atomic_thread_fence(memory_order_acquire);
    if (i >= (uint32_t)n) break;
    if (!atomic_compare_exchange_weak_explicit(&P.claim, &w, w + 1, memory_order_acq_rel, memory_order_acquire))
      continue;
    /* id i is ours and unfinished, so the launch cannot end and fn/args cannot change until we are done */
    atomic_load_explicit(&P.fn, memory_order_relaxed)(atomic_load_explicit(&P.args, memory_order_relaxed), (int)i);
    ran++;
    if (atomic_fetch_sub(&P.pending, 1) == 1 && atomic_load(&P.caller_sleeping))
      futex_wake((void *)&P.pending, 1);
    w = atomic_load_explicit(&P.claim, memory_order_acquire);
  }
  return ran;
}

/* Wait for a launch newer than `seen` (or stop): spin for spin_ns, then sleep on wake_seq. */
static uint64_t wait_launch(uint32_t seen) {
  spin_t sp = {0, 0};
  do {
    uint64_t w = atomic_load_explicit(&P.claim, memory_order_acquire);
    if (published(w, seen) || atomic_load_explicit(&P.stop, memory_order_relaxed)) return w;
  } while (spin_more(&sp, P.spin_ns, 1));
  for (;;) {
    uint32_t ws = atomic_load_explicit(&P.wake_seq, memory_order_acquire);
    /* sleepers++ then re-check, against the caller's publish then sleepers check: one of us sees the other */
    atomic_fetch_add(&P.sleepers, 1);
    uint64_t w = atomic_load(&P.claim);
    if (!published(w, seen) && !atomic_load(&P.stop)) futex_wait((void *)&P.wake_seq, ws);
    atomic_fetch_sub(&P.sleepers, 1);
    w = atomic_load_explicit(&P.claim, memory_order_acquire);
    if (published(w, seen) || atomic_load(&P.stop)) return w;
  }
}

static void *worker(void *arg) {
  uint32_t seen = (uint32_t)(uintptr_t)arg;
  for (;;) {
    uint64_t w = wait_launch(seen);
    if (atomic_load(&P.stop)) return NULL;
    seen = (uint32_t)(w >> 32);
    run_ids(seen);
  }
}

static void start_locked(void) {
  P.started = 1;
  P.nworkers = 0;
  /* workers take no signals: Python handles them on its main thread */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  uint32_t gen = (uint32_t)(atomic_load(&P.claim) >> 32);
  for (int i = 0; i < P.threads - 1 && i < MAX_WORKERS; i++) {
    if (pthread_create(&P.tid[i], NULL, worker, (void *)(uintptr_t)gen) != 0) break;
    P.nworkers++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void run_serial(entry_fn fn, void **args, int n) {
  for (int i = 0; i < n; i++) fn(args, i);
}

void pool_configure(int threads, long spin_ns, long caller_spin_ns) {
  pthread_mutex_lock(&P.lock);
  P.threads = threads < 1 ? 1 : threads;
  P.spin_ns = spin_ns;
  P.caller_spin_ns = caller_spin_ns;
  pthread_mutex_unlock(&P.lock);
}

int pool_workers(void) { return P.nworkers; }

void pool_launch(entry_fn fn, void **args, int n) {
  if (n <= 0) return;
  if (n == 1 || P.threads < 2 || pthread_mutex_trylock(&P.lock) != 0) {
    run_serial(fn, args, n);
    return;
  }
  if (!P.started && !P.closed) start_locked();
  if (P.nworkers == 0) {
    pthread_mutex_unlock(&P.lock);
    run_serial(fn, args, n);
    return;
  }
  /* only the lock holder writes the claim word's generation */
  uint64_t gen = (atomic_load_explicit(&P.claim, memory_order_relaxed) >> 32) + 1;
  atomic_store_explicit(&P.claim, gen << 32 | CLOSED, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&P.n, n, memory_order_relaxed);
  atomic_store_explicit(&P.fn, fn, memory_order_relaxed);
  atomic_store_explicit(&P.args, args, memory_order_relaxed);
  atomic_store_explicit(&P.pending, n, memory_order_relaxed);
  atomic_store(&P.claim, gen << 32); /* publish */
  atomic_fetch_add(&P.wake_seq, 1);
  if (atomic_load(&P.sleepers) > 0) futex_wake((void *)&P.wake_seq, n - 1 < P.nworkers ? n - 1 : P.nworkers);
  run_ids((uint32_t)gen);
  /* every id is claimed; wait for the ones workers are still running */
  spin_t sp = {0, 0};
  while (atomic_load_explicit(&P.pending, memory_order_acquire) != 0 && spin_more(&sp, P.caller_spin_ns, 0)) {
  }
  for (;;) {
    int p = atomic_load(&P.pending);
    if (p == 0) break;
    atomic_store(&P.caller_sleeping, 1);
    p = atomic_load(&P.pending);
    if (p != 0) futex_wait((void *)&P.pending, (uint32_t)p);
    atomic_store(&P.caller_sleeping, 0);
  }
  pthread_mutex_unlock(&P.lock);
}

/* At interpreter exit: stop and join the workers. A launch still running (a daemon thread) keeps them. */
void pool_shutdown(void) {
  if (pthread_mutex_trylock(&P.lock) != 0) return;
  if (P.started) {
    atomic_store(&P.stop, 1);
    atomic_fetch_add(&P.wake_seq, 1);
    futex_wake((void *)&P.wake_seq, INT_MAX);
    for (int i = 0; i < P.nworkers; i++) pthread_join(P.tid[i], NULL);
    P.nworkers = 0;
    P.started = 0;
    atomic_store(&P.stop, 0);
  }
  P.closed = 1;
  pthread_mutex_unlock(&P.lock);
}

/* In a forked child only the forking thread exists: forget the workers (and a lock a launch may have held);
   the next launch starts new ones. */
static void after_fork_child(void) {
  pthread_mutex_init(&P.lock, NULL);
  P.started = 0;
  P.nworkers = 0;
  atomic_store(&P.sleepers, 0);
  atomic_store(&P.pending, 0);
  atomic_store(&P.caller_sleeping, 0);
  atomic_store(&P.stop, 0);
}

__attribute__((constructor)) static void pool_init(void) { pthread_atfork(NULL, NULL, after_fork_child); }
"""

_LIB: list[ctypes.CDLL] = []
_FAILED: list[str] = []  # why the pool could not be built, if it could not
_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int)
_LOAD_LOCK = threading.Lock()


def threads() -> int:
    """How many threads a launch may use: the CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _lib() -> ctypes.CDLL | None:
    with _LOAD_LOCK:
        if not _LIB and not _FAILED:
            from devices.cpu import DEVICE  # here, not at import time: devices.cpu imports this module

            try:
                lib = DEVICE.compiler.load(_SRC, "thread pool", cpu_target("native"), runtime=True)
            except CompileError as e:  # e.g. no futex outside Linux: kernels still run, one id after another
                _FAILED.append(str(e))
                if int(getenv("DEBUG")) >= 1:
                    print(f"cpu_pool: no thread pool, kernels run single-threaded:\n{e}", file=sys.stderr)
                return None
            lib.pool_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
            lib.pool_launch.restype = None
            lib.pool_configure.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long]
            lib.pool_configure.restype = None
            lib.pool_workers.restype = ctypes.c_int
            lib.pool_shutdown.restype = None
            lib.pool_configure(threads(), SPIN_US * 1000, CALLER_SPIN_US * 1000)
            atexit.register(lib.pool_shutdown)
            _LIB.append(lib)
    return _LIB[0] if _LIB else None


def unbuilt() -> bool:
    """Whether a parallel launch would still have to build (or find in the disk cache) and load the pool."""
    return not _LIB and not _FAILED and threads() > 1


def prepare() -> None:
    """Build and load the pool now (devices.cpu.compile_batch does it alongside a process's first kernels)."""
    if threads() > 1:
        _lib()


def pack(args: Sequence[int]) -> ctypes.Array:
    """The argument array an entry wrapper reads: each pointer or integer as one 64-bit word (ctypes keeps
    the low 64 bits of an int, so a negative value arrives as its two's complement)."""
    return (ctypes.c_uint64 * max(len(args), 1))(*args)


def launch(entry: int, args: Sequence[int] | ctypes.Array, n: int) -> None:
    """Run `entry(args, core_id)` for every core_id in [0, n) across the pool; returns when all have run.

    `entry` is the address of a `void f(void** args, int core_id)`; `args` are its words (ints are packed,
    a ctypes array from `pack` is passed as is)."""
    if not 0 <= n < 1 << 31:
        raise ValueError(f"launch: n must be in [0, 2**31), got {n}")
    arr = args if isinstance(args, ctypes.Array) else pack(args)
    lib = None if n <= 1 else _LIB[0] if _LIB else _lib()  # one id needs no pool: it runs here
    if lib is not None:
        lib.pool_launch(entry, arr, n)
        return
    fn = _ENTRY(entry)
    for i in range(n):
        fn(ctypes.cast(arr, ctypes.c_void_p), i)


def workers() -> int:
    """Worker threads running now (0 before the first parallel launch)."""
    return int(_LIB[0].pool_workers()) if _LIB else 0


__all__ = ["CALLER_SPIN_US", "SPIN_US", "launch", "pack", "prepare", "threads", "unbuilt", "workers"]
