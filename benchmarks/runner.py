"""The benchmark runner: a registry of named suites, timing with medians and spread, tables and JSON.

A suite is a function registered with `@suite("name")` that takes a `Bench` and records results through it:

    @suite("engine")
    def engine(b: Bench) -> None:
        r = b.measure("dag/ours", run_once, setup=build_graph, work=100_000, unit="nodes/s")
        ...
        b.compare("dag rewrite", ours=r, peer=peer_result, peer_name="tinygrad")

A suite walks its cases with `for case in b.cases(cases, label)` (the progress bar counts them), reports the
step it is on with `b.say(...)`, and registers output built from its results (a plot) with `b.at_end(fn)`, which
runs when the suite ends or is interrupted (`b.partial`). Adding a suite is one file `benchmarks/bench_NAME.py`
with one `@suite("NAME")` function (benchmarks/__main__.py imports every bench_*.py).

Every figure is the median of several runs, with min/max and the interquartile range, plus `fgn`: the CPU
load of *other* processes while it ran (this machine is shared; see anchors/machine-limits.md), so a noisy
row can be recognized instead of believed. Each figure is also computed from the process's CPU time
(`cpu` column): for single-threaded Python work that figure barely moves when another process takes a core,
so it is the one to compare when fgn is high.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from benchmarks.progress import Progress

T = TypeVar("T")
SuiteFn = Callable[["Bench"], None]

SUITES: dict[str, SuiteFn] = {}
TYPICAL_S: dict[str, dict[str, float]] = {}  # suite -> mode -> seconds: the progress bar's first-run estimate


def suite(name: str, typical_s: dict[str, float] | None = None) -> Callable[[SuiteFn], SuiteFn]:
    """Register a suite under `name` (what `python -m benchmarks NAME` runs). `typical_s` (per mode, seconds on a
    quiet 2-core machine) lets the progress bar estimate the time left before this machine has run the suite."""

    def register(fn: SuiteFn) -> SuiteFn:
        if name in SUITES and SUITES[name] is not fn:
            raise ValueError(f"benchmark suite {name!r} is registered twice: {SUITES[name].__module__} and "
                             f"{fn.__module__}; pick another name")
        SUITES[name] = fn
        if typical_s:
            TYPICAL_S[name] = dict(typical_s)
        return fn

    return register


# ---------------------------------------------------------------------------- results


@dataclass
class Result:
    """One measured figure: `samples` holds one value per run, in `unit`."""

    name: str
    unit: str
    samples: list[float]
    higher_is_better: bool = True
    fgn: float | None = None
    info: dict[str, object] = field(default_factory=dict)
    cpu_samples: list[float] | None = None  # the same figure from process CPU time instead of wall time

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def cpu_median(self) -> float | None:
        return statistics.median(self.cpu_samples) if self.cpu_samples else None

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.samples), max(self.samples)

    @property
    def iqr(self) -> tuple[float, float]:
        if len(self.samples) < 4:
            return self.spread
        q = statistics.quantiles(self.samples, n=4, method="inclusive")
        return q[0], q[2]

    def to_json(self) -> dict[str, object]:
        lo, hi = self.spread
        q1, q3 = self.iqr
        return {"name": self.name, "unit": self.unit, "median": self.median, "min": lo, "max": hi, "q1": q1, "q3": q3,
                "runs": len(self.samples), "samples": self.samples, "higher_is_better": self.higher_is_better,
                "fgn": self.fgn, "cpu_median": self.cpu_median, "cpu_samples": self.cpu_samples, "info": self.info}


@dataclass
class Comparison:
    label: str
    ours: Result
    peer: Result
    peer_name: str

    @property
    def speedup(self) -> float:
        """How many times better ours is (throughput ratio, or inverse time ratio), by wall time."""
        return _ratio(self.ours.median, self.peer.median, self.ours.higher_is_better)

    @property
    def speedup_cpu(self) -> float | None:
        o, p = self.ours.cpu_median, self.peer.cpu_median
        return None if o is None or p is None else _ratio(o, p, self.ours.higher_is_better)

    def to_json(self) -> dict[str, object]:
        return {"label": self.label, "ours": self.ours.name, "peer": self.peer.name, "peer_name": self.peer_name,
                "ours_median": self.ours.median, "peer_median": self.peer.median, "unit": self.ours.unit,
                "speedup": self.speedup, "ours_cpu_median": self.ours.cpu_median,
                "peer_cpu_median": self.peer.cpu_median, "speedup_cpu": self.speedup_cpu}


def _ratio(ours: float, peer: float, higher_is_better: bool) -> float:
    if higher_is_better:
        return ours / peer if peer else float("inf")
    return peer / ours if ours else float("inf")


# ---------------------------------------------------------------------------- foreign load


def _busy_seconds() -> float | None:
    """CPU-seconds spent by the whole machine (all processes), from /proc/stat; None where unavailable."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system


class LoadMeter:
    """Foreign CPU load over an interval: machine busy time minus ours, in vCPUs (0 = quiet, 1 = one taken)."""

    def __init__(self) -> None:
        self.wall, self.busy, self.own = time.perf_counter(), _busy_seconds(), _own_seconds()

    def foreign(self) -> float | None:
        wall = time.perf_counter() - self.wall
        busy = _busy_seconds()
        if busy is None or self.busy is None or wall < 0.05:  # /proc/stat ticks are 4-10 ms: too coarse below
            return None
        return max(0.0, (busy - self.busy) - (_own_seconds() - self.own)) / wall


# ---------------------------------------------------------------------------- the handle a suite gets


@dataclass
class Timed:
    """One figure to time: fn(setup()) per run; see Bench.measure for work, unit and per_item."""

    name: str
    fn: Callable[[object], object]
    work: float
    unit: str
    setup: Callable[[], object] | None = None
    runs: int | None = None
    per_item: float | None = None
    teardown: Callable[[object, object], None] | None = None
    info: dict[str, object] | None = None


_CTRL_C = [False]  # a SIGINT arrived during this run (on_ctrl_c)


def _settle() -> None:
    """Before a timed run: wait for the cpu device's background -O2 builds (CPU_TIERS), so that a kernel compiled
    by an earlier run is timed as the -O2 code it swaps to at its next call, not as its -Og first build."""
    if (cpu := sys.modules.get("devices.cpu")) is not None:
        cpu.DEVICE.finish_upgrades()


def on_ctrl_c(signum: int, frame: object) -> None:
    """The SIGINT handler of a benchmark run: remembers the interrupt, then raises KeyboardInterrupt as Python's
    own handler does. Remembering matters when the exception is lost: raised inside a finalizer (gc.collect runs
    them between timed runs), Python prints it as ignored and carries on; `checkpoint` raises it again."""
    _CTRL_C[0] = True
    raise KeyboardInterrupt


def checkpoint() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived that the code it interrupted swallowed (see on_ctrl_c)."""
    if _CTRL_C[0]:
        raise KeyboardInterrupt


def watch_ctrl_c() -> object:
    """Install on_ctrl_c (where SIGINT still has Python's default handler) and forget earlier interrupts; returns
    the handler to restore when the run ends."""
    import signal

    _CTRL_C[0] = False
    before = signal.getsignal(signal.SIGINT)
    if before is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_ctrl_c)
    return before


# Adaptive repeats: a figure stops being re-run once it has MIN_RUNS runs and the standard error of their mean is
# under REL_SE of their median, or its runs have taken MAX_S[mode] seconds of wall time (a slow figure is known
# well enough from a few runs); a job's `runs` is the most it gets. Every run still counts: nothing is dropped.
MIN_RUNS = 3
REL_SE = 0.025
MAX_S = {"quick": 1.0, "default": 4.0, "full": 15.0}
MODES = ("quick", "default", "full")


def converged(samples: list[float], min_runs: int = MIN_RUNS, rel_se: float = REL_SE) -> bool:
    """Whether `samples` pin their median down well enough: at least `min_runs` of them, and the standard error
    of their mean at most `rel_se` of their median."""
    n = len(samples)
    if n < max(2, min_runs):
        return False
    med = statistics.median(samples)
    return med > 0 and statistics.stdev(samples) / n**0.5 <= rel_se * med


class Bench:
    """What a suite records into. `mode` is quick (small sizes), default, or full (every case, exhaustive sizes);
    `quick` is `mode == "quick"`. `runs` is the most timed runs a figure gets (see converged); `run` is the run's
    description (machine, target, threads, load, mode, date: benchmarks.report.run_info) for plots' titles."""

    def __init__(self, suite_name: str, quick: bool = False, progress: Progress | None = None,
                 mode: str | None = None, run: dict[str, object] | None = None) -> None:
        self.mode = mode or ("quick" if quick else "default")
        if self.mode not in MODES:
            raise ValueError(f"benchmark mode {self.mode!r}: expected one of {', '.join(MODES)}")
        self.suite, self.quick, self.full = suite_name, self.mode == "quick", self.mode == "full"
        self.runs = 5
        self.max_s = MAX_S[self.mode]
        self.results: list[Result] = []
        self.comparisons: list[Comparison] = []
        self.notes: list[str] = []
        self.tables: list[tuple[str, list[str], list[list[str]]]] = []
        self.progress = progress or Progress()
        self.run = run if run is not None else {"mode": self.mode}
        self.partial = False  # set when the run was interrupted before the suite finished
        self._at_end: list[Callable[[], None]] = []
        self._case_open = False

    def cases(self, items: Sequence[T], label: Callable[[T], str] = str) -> Iterator[T]:
        """Iterate over the suite's cases, telling the progress display how many there are and which one runs."""
        self.progress.set_cases(len(items))
        for it in items:
            checkpoint()
            self.progress.begin_case(label(it))
            yield it
            self.progress.end_case()

    def case(self, label: str, of: int | None = None) -> None:
        """The next case starts (the previous one, if any, ends): for a suite written as straight-line steps
        rather than a loop; `of` (with the first) says how many there are."""
        checkpoint()
        if of is not None:
            self.progress.set_cases(of)
        if self._case_open:
            self.progress.end_case()
        self.progress.begin_case(label)
        self._case_open = True

    def at_end(self, fn: Callable[[], None]) -> None:
        """Call `fn` when the suite ends, finished or interrupted (`partial` tells which): for output built from
        the results so far, such as a plot."""
        self._at_end.append(fn)

    def finish(self, partial: bool = False) -> None:
        """Run the at_end callbacks once (the runner calls this)."""
        self.partial = partial
        if self._case_open and not partial:
            self.progress.end_case()
        self._case_open = False
        fns, self._at_end = self._at_end, []
        for fn in fns:
            fn()

    def table(self, title: str, header: list[str], rows: list[list[str]]) -> None:
        """A table of the suite's own (a summary per case), printed after its figures and kept in the JSON."""
        self.tables.append((title, header, rows))

    def say(self, msg: str) -> None:
        checkpoint()
        self.progress.update(msg)

    def note(self, msg: str) -> None:
        """A line printed under the suite's table (what was compared, caveats)."""
        self.notes.append(msg)

    def time_runs(self, jobs: list[Timed]) -> list[tuple[list[float], list[float], float | None]]:
        """Wall and CPU seconds of each run of each job, and each job's median foreign load. The jobs take
        turns run by run (A B A B ...), so a change in the machine's load falls on all of them alike; a job
        leaves the rotation once its figure has converged (or used its time, see MAX_S), after at least
        MIN_RUNS runs, and at the latest after its `runs` (default `self.runs`). Setup and teardown are not
        timed; garbage of the previous run is collected first."""
        most = [job.runs or self.runs for job in jobs]
        least = [min(m, MIN_RUNS) for m in most]
        out: list[tuple[list[float], list[float], list[float]]] = [([], [], []) for _ in jobs]
        active = list(range(len(jobs)))
        i = 0
        while active:
            for k in active:
                job, (wall, cpu, loads) = jobs[k], out[k]
                self.say(f"{job.name}: run {i + 1}/{most[k]}" + (f" (last {wall[-1]:.3f} s)" if wall else ""))
                state = job.setup() if job.setup is not None else None
                gc.collect()
                _settle()
                meter = LoadMeter()
                c0, t0 = time.process_time(), time.perf_counter()
                res = job.fn(state)
                dt, dc = time.perf_counter() - t0, time.process_time() - c0
                if (f := meter.foreign()) is not None:
                    loads.append(f)
                wall.append(dt)
                cpu.append(dc)
                if job.teardown is not None:
                    job.teardown(state, res)
                del state, res
            i += 1
            active = [k for k in active if i < most[k] and
                      (i < least[k] or not (converged(out[k][0]) or sum(out[k][0]) >= self.max_s))]
        return [(w, c, statistics.median(ld) if ld else None) for w, c, ld in out]

    def measure(self, name: str, fn: Callable[[T], object], *, work: float, unit: str,
                setup: Callable[[], T] | None = None, runs: int | None = None, per_item: float | None = None,
                teardown: Callable[[T, object], None] | None = None, info: dict[str, object] | None = None) -> Result:
        """Time fn and record a figure. Without `per_item`: a rate, `work` units per second (higher is better).
        With `per_item=s`: seconds per unit of work times s (e.g. 1e9 for ns per node; lower is better)."""
        return self.measure_together([Timed(name, fn, work, unit, setup, runs, per_item, teardown, info)])[0]

    def measure_together(self, jobs: list[Timed]) -> list[Result]:
        """Several figures timed in turns (see time_runs): what to use for figures that will be compared."""
        out = []
        for job, (wall, cpu, fgn) in zip(jobs, self.time_runs(jobs), strict=True):

            def figure(secs: list[float], job: Timed = job) -> list[float]:
                if job.per_item is None:
                    return [job.work / max(s, 1e-9) for s in secs]
                return [s / job.work * job.per_item for s in secs]

            info = dict(job.info or {}, seconds=wall, cpu_seconds=cpu, work=job.work)
            r = Result(job.name, job.unit, figure(wall), job.per_item is None, fgn, info, figure(cpu))
            self.results.append(r)
            out.append(r)
        return out

    def rate_from(self, timed: Result, name: str, unit: str, work: float) -> Result:
        """Another rate from the same timed runs (e.g. rule firings per second next to nodes per second)."""
        wall, cpu = timed.info["seconds"], timed.info["cpu_seconds"]
        r = Result(name, unit, [work / s for s in wall], True, timed.fgn, {"work": work},  # type: ignore[attr-defined]
                   [work / s for s in cpu])  # type: ignore[attr-defined]
        self.results.append(r)
        return r

    def record(self, result: Result) -> Result:
        self.results.append(result)
        return result

    def compare(self, label: str, ours: Result, peer: Result, peer_name: str) -> Comparison:
        c = Comparison(label, ours, peer, peer_name)
        self.comparisons.append(c)
        return c


# ---------------------------------------------------------------------------- numbers for tables


def fmt_value(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.4g}k"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"
