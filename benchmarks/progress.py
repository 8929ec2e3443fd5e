"""The run's progress display: which suite, which case of how many, what it is doing, how long is left.

On a terminal it is a rich progress bar on stderr (suite, cases done of all, elapsed, an estimate of the time
left, the current case and step); anywhere else (CI logs, a pipe) it is plain lines: one per case, and the
current step at most every PLAIN_EVERY_S seconds, so a log stays readable.

The bar is redrawn only when the run reports something (`update`, a case starting), never from a timer thread:
a thread waking up ten times a second would take the GIL and a core from the code being timed.

The estimate of the time left: the rest of the current suite from its own pace (its cases so far) or, before
its first case ends, from how long it took last time; later suites from last time's duration, or the typical
duration their registration gives, or the mean duration of this run's suites so far (the current one projected
to its end). Last time's durations and
case counts are kept per mode in the project's cache directory (benchmarks.checked_cache: a damaged file is
ignored and rewritten), keyed by CPU model, core count and target, since they describe this machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from benchmarks import checked_cache

if TYPE_CHECKING:
    import rich.progress

HISTORY_FORMAT = 1
PLAIN_EVERY_S = 15.0


def _clock(s: float | None) -> str:
    if s is None:
        return "?"
    s = max(0, round(s))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class History:
    """Per mode and suite: the wall seconds and case count of the last complete run on this machine."""

    def __init__(self, key: str) -> None:
        self.key, self.path = key, checked_cache.path_for("bench-history", key)
        d = checked_cache.read(self.path, key, HISTORY_FORMAT) or {}
        self.data: dict[str, dict[str, dict[str, float]]] = {}
        for mode, suites in d.items():  # keep only well-formed entries: the file could be from a buggy writer
            if isinstance(suites, dict):
                self.data[mode] = {s: v for s, v in suites.items() if isinstance(v, dict) and
                                   isinstance(v.get("wall_s"), int | float) and isinstance(v.get("cases"), int)}

    def get(self, mode: str, suite: str) -> dict[str, float] | None:
        return self.data.get(mode, {}).get(suite)

    def record(self, mode: str, suite: str, wall_s: float, cases: int) -> None:
        self.data.setdefault(mode, {})[suite] = {"wall_s": round(wall_s, 2), "cases": cases}
        checked_cache.write(self.path, self.key, HISTORY_FORMAT, self.data)


class Progress:
    """What the run and its suites report progress to. `Progress(stream)` alone (as a worker process or a test
    makes one) prints plain step lines to `stream`; the runner builds one for the whole run with `suites`."""

    def __init__(self, stream: IO[str] | None = None, suites: Sequence[str] = (), mode: str = "default",
                 history: History | None = None, typical_s: dict[str, float] | None = None,
                 fancy: bool | None = None) -> None:
        self.stream: IO[str] = stream or sys.stderr
        self.suites, self.mode, self.history = list(suites), mode, history
        self.typical_s = typical_s or {}
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.fancy = is_tty if fancy is None else fancy
        self.t_run = time.perf_counter()
        self.suite, self.suite_i, self.t_suite = "", -1, self.t_run
        self.suite_walls: list[float] = []
        self.cases_total, self.cases_done, self.case, self.t_case = 0, 0, "", self.t_run
        self.done_before = 0  # cases of the suites already finished
        self.case_walls: list[float] = []
        self.step, self.t_plain = "", 0.0
        self._bar: rich.progress.Progress | None = None
        self._task: rich.progress.TaskID | None = None

    # ------------------------------------------------------------------ what the runner and the suites call

    def begin_suite(self, name: str) -> None:
        self.suite, self.t_suite = name, time.perf_counter()
        self.suite_i = self.suites.index(name) if name in self.suites else self.suite_i + 1
        self.cases_total, self.cases_done, self.case, self.case_walls = 1, 0, "", []
        self.step = ""
        self._show(force=True)

    def set_cases(self, n: int) -> None:
        """The current suite has `n` cases (Bench.cases calls this)."""
        self.cases_total, self.cases_done = max(1, n), 0
        self._show()

    def begin_case(self, label: str) -> None:
        self.case, self.t_case, self.step = label, time.perf_counter(), ""
        self._show(force=True)

    def end_case(self) -> None:
        self.case_walls.append(time.perf_counter() - self.t_case)
        self.cases_done = min(self.cases_done + 1, self.cases_total)
        self.case, self.step = "", ""
        self._show()

    def end_suite(self, record: bool = True) -> float:
        """Close the suite; `record` keeps its duration for the next run's estimate (a complete suite only)."""
        wall = time.perf_counter() - self.t_suite
        if record and self.history is not None:
            self.history.record(self.mode, self.suite, wall, self.cases_total)
        self.suite_walls.append(wall)
        self.done_before += self.cases_total
        self.cases_done, self.cases_total, self.case = 0, 0, ""
        return wall

    def update(self, msg: str) -> None:
        """The current step (Bench.say): shown in place on a terminal, every PLAIN_EVERY_S seconds otherwise."""
        self.step = msg
        self._show()

    def done(self) -> None:
        """Take the bar off the screen (before a table is printed, at the end, on Ctrl-C)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar, self._task = None, None

    # ------------------------------------------------------------------ estimates

    def _expected(self, suite: str) -> tuple[float | None, int | None]:
        h = self.history.get(self.mode, suite) if self.history is not None else None
        if h is not None:
            return float(h["wall_s"]), int(h["cases"])
        return self.typical_s.get(suite), None

    def remaining_s(self) -> float | None:
        """Seconds left in the whole run; None when nothing is known yet to base it on."""
        now = time.perf_counter()
        exp_wall, _ = self._expected(self.suite)
        in_suite = now - self.t_suite
        left: float | None
        if self.cases_done:  # this suite's own pace
            left = in_suite / self.cases_done * (self.cases_total - self.cases_done)
        else:
            left = None if exp_wall is None else max(0.0, exp_wall - in_suite)
        if left is None and self.suite_walls:  # nothing known of this suite yet: as long as the others so far
            left = max(0.0, sum(self.suite_walls) / len(self.suite_walls) - in_suite)
        if left is None:
            return None
        # a later suite nothing is known about: as long as the suites so far took on average (this one included,
        # projected to its end) -- rough, but a first run on a new machine still gets an estimate
        walls = [*self.suite_walls, in_suite + left]
        mean_done = sum(walls) / len(walls)
        for s in self.suites[self.suite_i + 1:]:
            w = self._expected(s)[0]
            w = w if w is not None else mean_done
            if w is None:
                return None
            left += w
        return left

    def cases_expected(self) -> tuple[int, int, bool]:
        """(cases done, cases in the whole run, whether the total is exact): a later suite's count is known from
        the last run or counted as 1 until it starts."""
        total, exact = self.done_before + self.cases_total, True
        for s in self.suites[self.suite_i + 1:]:
            n = self._expected(s)[1]
            total += n if n is not None else 1
            exact = exact and n is not None
        return self.done_before + self.cases_done, total, exact

    # ------------------------------------------------------------------ drawing

    def _status(self) -> tuple[str, str, str]:
        done, total, exact = self.cases_expected()
        head = f"{self.suite} ({self.suite_i + 1}/{len(self.suites)})" if self.suites else self.suite
        count = f"{done}/{total if exact else f'~{total}'} cases"
        what = " | ".join(p for p in (self.case, self.step) if p)
        return head, count, what

    def _show(self, force: bool = False) -> None:
        if not self.suites:  # a bare Progress (a worker, a test): the step alone, as a plain line
            if self.step:
                self._line(self.step)
            return
        head, count, what = self._status()
        elapsed, left = time.perf_counter() - self.t_run, self.remaining_s()
        if not self.fancy:
            now = time.perf_counter()
            if force or now - self.t_plain >= PLAIN_EVERY_S:
                self.t_plain = now
                self._line(f"[{head} | {count} | {_clock(elapsed)} elapsed, ETA {_clock(left)}] {what}")
            return
        self._draw(head, count, what, elapsed, left)

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def _draw(self, head: str, count: str, what: str, elapsed: float, left: float | None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as Bar

        done, total, _ = self.cases_expected()
        if self._bar is None:
            console = Console(file=self.stream)
            self._bar = Bar(TextColumn("[bold]{task.fields[head]}"), BarColumn(bar_width=24),
                            TextColumn("{task.fields[count]}"), TextColumn("{task.fields[clock]}"),
                            TextColumn("[dim]{task.fields[what]}"), console=console, auto_refresh=False,
                            transient=True, redirect_stdout=False, redirect_stderr=False)
            self._task = self._bar.add_task("run", total=total, head="", count="", clock="", what="")
            self._bar.start()
        assert self._task is not None
        width = max(20, self._bar.console.width - 80)
        self._bar.update(self._task, total=max(total, 1), completed=done, head=head, count=count,
                         clock=f"{_clock(elapsed)} elapsed, ETA {_clock(left)}",
                         what=what if len(what) <= width else what[: width - 1] + "…")
        self._bar.refresh()
