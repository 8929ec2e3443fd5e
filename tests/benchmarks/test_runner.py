"""The benchmark runner itself, with tiny fake suites (no real suite runs here): adaptive repeats, the progress
display (case count, time left; a rich bar on a terminal, plain lines elsewhere), Ctrl-C keeping the results so
far, the run's description in the JSON and the plot, and the checked caches (limits, durations)."""

from __future__ import annotations

import io
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from benchmarks import checked_cache, runner
from benchmarks import limits as ml
from benchmarks.progress import History, Progress
from benchmarks.report import caption, format_table, run_info, suite_json
from benchmarks.runner import Bench, Result, Timed, converged

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------------- adaptive repeats


@pytest.mark.parametrize("samples, ok", [
    ([1.0, 1.0], False),                  # fewer than MIN_RUNS
    ([1.0, 1.01, 0.99], True),            # tight
    ([1.0, 1.5, 0.6], False),             # spread
    ([1.0, 1.4, 0.7, 1.3, 0.8, 1.2], False),  # six runs, still spread
    ([1.0, 1.02, 0.98, 1.01, 0.99, 1.0], True),
])
def test_converged(samples, ok):
    assert converged(samples) is ok


def test_repeats_stop_when_converged_and_never_pass_runs(monkeypatch):
    calls: list[int] = []
    b = Bench("t", progress=Progress(io.StringIO()))
    monkeypatch.setattr(runner, "converged", lambda s, *a: True)
    r = b.measure("a", lambda _: calls.append(1), work=1, unit="x", runs=20)
    assert len(r.samples) == len(calls) == runner.MIN_RUNS
    monkeypatch.setattr(runner, "converged", lambda s, *a: False)
    r = b.measure("b", lambda _: None, work=1, unit="x", runs=7)
    assert len(r.samples) == 7
    r = b.measure("c", lambda _: None, work=1, unit="x", runs=2)  # fewer asked than MIN_RUNS: that many
    assert len(r.samples) == 2
    # taking turns: a job that has converged leaves the rotation, the other goes on
    monkeypatch.setattr(runner, "converged", lambda s, *a: len(s) >= 4)
    fast, slow = b.measure_together([Timed("f", lambda _: None, 1, "x", runs=10),
                                     Timed("s", lambda _: None, 1, "x", runs=6)])
    assert len(fast.samples) == 4 and len(slow.samples) == 4


def test_repeats_stop_at_the_time_cap(monkeypatch):
    monkeypatch.setattr(runner, "converged", lambda s, *a: False)
    b = Bench("t", progress=Progress(io.StringIO()))
    b.max_s = 0.0  # every run is over the cap: MIN_RUNS runs and no more
    assert len(b.measure("a", lambda _: None, work=1, unit="x", runs=30).samples) == runner.MIN_RUNS


def test_modes():
    assert Bench("t", quick=True).mode == "quick" and Bench("t").mode == "default"
    assert Bench("t", mode="full").full and not Bench("t", mode="full").quick
    with pytest.raises(ValueError, match="mode"):
        Bench("t", mode="fast")


# ---------------------------------------------------------------------------- progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def _walk(p: Progress, suites: dict[str, int], pause: float = 0.0) -> None:
    for name, n in suites.items():
        p.begin_suite(name)
        p.set_cases(n)
        for i in range(n):
            p.begin_case(f"{name} case {i}")
            p.update("step")
            time.sleep(pause)
            p.end_case()
        p.end_suite()
        p.done()


def test_plain_progress_counts_cases_and_estimates(cache):
    out = io.StringIO()
    p = Progress(out, ["a", "b"], "default", History("k"), {"b": 30.0})
    _walk(p, {"a": 3}, pause=0.01)
    text = out.getvalue()
    # 3 cases of a, and b counted as one: its count is not known until it starts (nor from a previous run)
    assert "a (1/2)" in text and "0/~4 cases" in text and "2/~4 cases" in text and "a case 1" in text
    # after a's cases: the rest of a from its pace, b from its typical duration
    assert p.remaining_s() is not None and 29 < p.remaining_s() < 31  # type: ignore[operator]
    assert "ETA 0:3" in text  # a's last case: ~0.01 s + b's 30 s


def test_history_gives_the_next_run_its_counts_and_times(cache):
    first = Progress(io.StringIO(), ["a", "b"], "quick", History("k"))
    _walk(first, {"a": 2, "b": 5})
    h = History("k")
    assert h.get("quick", "b")["cases"] == 5 and h.get("default", "b") is None  # type: ignore[index]
    out = io.StringIO()
    second = Progress(out, ["a", "b"], "quick", h)
    second.begin_suite("a")
    assert second.cases_expected() == (0, 1 + 5, True)
    assert second.remaining_s() is not None  # known from the first run before any case ends
    assert "ETA ?" not in out.getvalue()


def test_history_file_damage_is_ignored_and_rewritten(cache):
    h = History("k")
    h.record("default", "a", 12.0, 3)
    path = h.path
    with open(path) as f:
        good = f.read()
    for bad in ("{not json", good.replace("12.0", "1.0"), json.dumps({"format": 1, "key": "k", "payload": []})):
        with open(path, "w") as f:
            f.write(bad)
        assert History("k").get("default", "a") is None
    History("k").record("default", "a", 5.0, 2)
    assert History("k").get("default", "a") == {"wall_s": 5.0, "cases": 2}


def test_rich_bar_on_a_terminal(cache):
    out = _Tty()
    p = Progress(out, ["a"], "default", History("k"), {"a": 60.0})
    assert p.fancy
    p.begin_suite("a")
    p.set_cases(4)
    p.begin_case("matmul 1024")
    p.update("ours warm-up")
    p.end_case()
    p.done()
    text = out.getvalue()
    assert "1/4 cases" in text and "ETA" in text and ("matmul 1024" in text or "ours warm-up" in text)
    assert "\x1b[" in text  # drawn in place (cursor control), not as log lines


def test_bare_progress_prints_steps():
    out = io.StringIO()
    b = Bench("t", progress=Progress(out))
    b.say("hello")
    for _ in b.cases([1, 2]):
        pass
    assert "hello" in out.getvalue()


# ---------------------------------------------------------------------------- the run, end to end


_SCRIPT = """
import sys, time
from benchmarks import __main__ as bm
from benchmarks.report import caption
from benchmarks.runner import suite

@suite("fake")
def fake(b):
    def end():
        with open("end.txt", "w") as f:
            f.write(f"{b.partial}\\n{caption(b.run)}")
    b.at_end(end)
    b.note("a fake suite")
    for i in b.cases(range(int(sys.argv[1])), lambda i: f"case {i}"):
        b.measure(f"fig{i}", lambda _: None, work=1, unit="x", runs=3)
        if i == 1:
            open("ready", "w").close()
        time.sleep(float(sys.argv[2]))

sys.exit(bm.main(["fake", *sys.argv[3:]]))
"""


def _start(tmp_path, cases: int, pause: float, *args: str) -> subprocess.Popen:
    (tmp_path / "fake_run.py").write_text(textwrap.dedent(_SCRIPT))
    env = dict(os.environ, PYTHONPATH=ROOT, CACHEDIR=str(tmp_path / "cache"))
    # SIGINT as a terminal gives it: a shell's background job (and so a test run started with `&`) has it ignored,
    # which a child would inherit and keep, and the Ctrl-C test would wait in vain
    return subprocess.Popen([sys.executable, "fake_run.py", str(cases), str(pause), *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_a_run_writes_results_with_its_description(tmp_path):
    p = _start(tmp_path, 3, 0.0, "--quick")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    data = json.loads((tmp_path / "results" / "bench-fake.json").read_text())
    assert data["partial"] is False and data["mode"] == "quick" and len(data["results"]) == 3
    run = data["run"]
    assert run["cpu"] == ml.cpu_model() and run["threads"] >= 1 and run["mode"] == "quick" and run["date"]
    assert run["target"].startswith(ml.target_for("cpu").isa)
    assert len(run["load_start"]) == 3 and len(run["load_end"]) == 3
    assert "fig2" in out and "a fake suite" in out and "Traceback" not in err
    end = (tmp_path / "end.txt").read_text().splitlines()
    assert end[0] == "False" and "Target" in end[1] and "threads" in end[1] and "mode quick" in end[1]
    assert "3/3 cases" in err or "2/3 cases" in err  # plain progress lines: stderr is not a terminal here


def test_ctrl_c_keeps_the_results_so_far(tmp_path):
    p = _start(tmp_path, 10_000, 0.05, "--json", "all.json")
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists():
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline, "the fake suite never started"
        time.sleep(0.05)
    time.sleep(0.2)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "Traceback" not in out
    assert sum("interrupted" in ln for ln in err.splitlines()) == 1 and "partial" in err
    data = json.loads((tmp_path / "all.json").read_text())
    assert data["run"]["partial"] is True
    (suite_data,) = data["suites"]
    assert suite_data["partial"] is True and len(suite_data["results"]) >= 2  # fig0, fig1 at least
    assert all(len(r["samples"]) == 3 for r in suite_data["results"])
    end = (tmp_path / "end.txt").read_text().splitlines()  # the suite's end-of-run output saw the interrupt
    assert end[0] == "True" and "PARTIAL" in end[1]
    assert "INTERRUPTED" in out


# ---------------------------------------------------------------------------- output


def test_table_and_json_and_caption():
    b = Bench("t", progress=Progress(io.StringIO()), run=run_info("default"))
    b.record(Result("x/ours", "ms", [1.0, 2.0, 3.0], False))
    b.table("per case", ["case", "ms"], [["add", "1.0"]])
    b.note("note line")
    text = format_table(b)
    assert "x/ours" in text and "per case" in text and "note line" in text and "\x1b[" not in text
    d = suite_json(b, {}, "now", 1.0)
    assert d["tables"][0]["rows"] == [["add", "1.0"]] and d["run"]["mode"] == "default"
    json.dumps(d)
    c = caption(b.run)
    assert ml.cpu_model() in c and ("Target x86" in c or "Target aarch64" in c)
    assert "threads" in c and "load" in c and "mode default" in c


# ---------------------------------------------------------------------------- checked caches


def test_checked_cache_rejects_damage(cache):
    path = checked_cache.path_for("thing", "key")
    checked_cache.write(path, "key", 1, {"a": 1})
    assert checked_cache.read(path, "key", 1) == {"a": 1}
    assert checked_cache.read(path, "other", 1) is None and checked_cache.read(path, "key", 2) is None
    with open(path) as f:
        d = json.load(f)
    d["payload"]["a"] = 2  # edited without its checksum
    with open(path, "w") as f:
        json.dump(d, f)
    assert checked_cache.read(path, "key", 1) is None
    with open(path, "w") as f:
        f.write('{"format": 1, "key": "key", "sha')  # truncated
    assert checked_cache.read(path, "key", 1) is None


def _limits(triad: float = 30.0) -> ml.Limits:
    rows = [ml.Row("fma_avx2", 1, "GFLOP/s", 90.0, 91.0, [90.0, 91.0]),
            ml.Row("triad", 1, "GB/s", triad, triad, [triad, triad])]
    return ml.Limits(ml.machine_key(), ml.cpu_model(), 2, "now", False, "cc", 0.0, rows)


@pytest.mark.parametrize("damage", ["truncate", "edit", "nan", "no triad"])
def test_corrupt_limits_cache_is_measured_again(cache, monkeypatch, damage):
    calls: list[bool] = []

    def fake_measure(quick: bool = False, say: object = None, target: object = None) -> ml.Limits:
        calls.append(quick)
        return _limits()

    monkeypatch.setattr(ml, "measure", fake_measure)
    ml.load()
    assert calls == [False] and ml.load().cached and calls == [False]
    path = ml.cache_path()
    with open(path) as f:
        d = json.load(f)
    if damage == "truncate":
        text = json.dumps(d)[:50]
    else:
        if damage == "edit":
            d["payload"]["rows"][1]["best"] = 300.0  # a hand-edited figure: the checksum no longer matches
        else:
            # a well-formed file (valid checksum) whose figures make no sense
            bad = _limits(float("nan")) if damage == "nan" else _limits()
            if damage == "no triad":
                bad.rows = bad.rows[:1]
            d = {"format": ml.FORMAT, "key": ml.machine_key(), "sha256": checked_cache._digest(bad.to_json()),
                 "payload": bad.to_json()}
        text = json.dumps(d)
    with open(path, "w") as f:
        f.write(text)
    again = ml.load()
    assert not again.cached and calls == [False, False] and again.triad(1) == 30.0
    assert ml.load().cached and len(calls) == 2  # and the file was rewritten whole
    assert math.isfinite(ml.load().triad(1) or math.nan)


def test_the_bar_starts_no_thread(cache):
    # the bar is redrawn by the run's own calls; a refresh thread would take a core from the timed code
    before = threading.active_count()
    p = Progress(_Tty(), ["a"], "default", History("k"))
    p.begin_suite("a")
    p.update("step")
    assert p._bar is not None and threading.active_count() == before
    p.done()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped one, on purpose
def test_a_ctrl_c_lost_in_a_finalizer_stops_the_run_at_the_next_step(tmp_path):
    """Python prints and drops a KeyboardInterrupt raised inside a finalizer (the runner's gc.collect runs them):
    the run's handler remembers the Ctrl-C, so the next step of the suite raises it again."""
    import gc

    from benchmarks import runner

    class Finalized:
        def __del__(self) -> None:
            runner.on_ctrl_c(signal.SIGINT, None)

    outer = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a program (a test worker may differ)
    before = runner.watch_ctrl_c()
    try:
        f = Finalized()
        f.cycle = f  # type: ignore[attr-defined]
        del f
        gc.collect()  # the handler's KeyboardInterrupt is raised in __del__, reported and ignored
        with pytest.raises(KeyboardInterrupt):
            runner.checkpoint()
        assert runner.watch_ctrl_c() is runner.on_ctrl_c  # a new run forgets it
        runner.checkpoint()
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGINT, outer)
