"""The `symbolic` suite's cold-start figures: fresh Python processes (`python -c`, running `cold_child`) that
import the simplifier and simplify one pickled batch once, with CACHE=0 or an on-disk cache of their own."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from benchmarks.runner import Bench, LoadMeter, Result, converged
from benchmarks.symbolic_simplifiers import fast_batch, full_batch

# the project is imported inside functions: the cold-start child process imports this module first and
# must not have the compiler loaded before it starts its clock
if TYPE_CHECKING:
    from rewrite import UOp

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------- cold start


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def cold_child(path: str, parts: bool = False) -> None:
    """Run in a fresh process (`python -c ...`): import the simplifier and simplify the pickled batch once,
    print the timings as JSON. Nothing of the compiler is loaded before the clock starts. With `parts`, the
    first batch is taken apart instead: the fast rules' first pass, egglog's load, then the full simplifier."""
    preloaded = sorted(m for m in ("rewrite", "rules", "egglog", "tensor", "lower") if m in sys.modules)
    clock = _clock
    t0 = clock()
    # the simplifier (`rules` registers UOp.simplify): the e-graph tier (rules.eqsat) and egglog are imported
    # by the first batch that needs them, inside the timed batch
    import rules  # noqa: F401

    t1 = clock()
    with open(path, "rb") as f:  # unpickling needs rewrite/, imported just above; not timed
        exprs = pickle.load(f)
    from rewrite import UOp

    out: dict[str, Any] = {"preloaded": preloaded, "import": [t1[0] - t0[0], t1[1] - t0[1]]}
    steps: list[tuple[str, Callable[[], object]]] = [("first", lambda: full_batch(exprs))]
    if parts:
        from rules.eqsat import saturate_fast_batch

        # a tiny e-graph loads egglog and its rules (what the first saturation pays), and runs one small batch
        probe = UOp.variable("probe", 0, 9) // 2 < 3
        steps = [("fast", lambda: fast_batch(exprs)), ("egglog_load", lambda: saturate_fast_batch([probe])),
                 ("rest", lambda: full_batch(exprs))]
    before = None
    for name, fn in steps:
        eqsat = sys.modules.get("rules.eqsat")
        before = eqsat.saturator(fast_tier=True).last if eqsat is not None else None  # a new Stats object per run
        a = clock()
        fn()
        z = clock()
        out[name] = [z[0] - a[0], z[1] - a[1]]
    eqsat = sys.modules.get("rules.eqsat")
    st = eqsat.saturator(fast_tier=True).last if eqsat is not None else None
    ran = st is not None and st is not before  # the last step (the batch itself) needed an e-graph
    out.update(sat_stop=st.stop if ran else "", sat_roots=st.roots if ran else 0,  # type: ignore[union-attr]
               egglog_imported="egglog.bindings" in sys.modules or "egglog" in sys.modules,
               eqsat_imported=eqsat is not None)
    print(json.dumps(out))


_TIMED = ("import", "first", "fast", "egglog_load", "rest")  # a child's timed steps: [wall, cpu] each
_CHILD = "import sys; from benchmarks.symbolic_cold import cold_child; cold_child(sys.argv[1], sys.argv[2] == 'parts')"


class ColdRunner:
    """Fresh processes that simplify one pickled batch; the batch and any cache live in a temporary folder."""

    def __init__(self, exprs: list[UOp], env: dict[str, str]) -> None:
        self.tmp = tempfile.mkdtemp(prefix="bench-symbolic-")
        self.path = os.path.join(self.tmp, "batch.pkl")
        with open(self.path, "wb") as f:
            pickle.dump(list(exprs), f)
        self.env = dict(os.environ, PYTHONPATH=_REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
        if self.env.get("CACHE") != "0":  # a disk cache of our own, never the user's
            self.env["CACHEDIR"] = os.path.join(self.tmp, "cache")

    def __enter__(self) -> ColdRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spawn(self, parts: bool = False) -> tuple[dict[str, Any], float | None]:
        """One child's JSON and the foreign load while it ran."""
        meter, before = LoadMeter(), os.times()
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", _CHILD, self.path, "parts" if parts else "whole"], cwd=_REPO,
                           env=self.env, capture_output=True, text=True, check=False)
        wall, after = time.perf_counter() - t0, os.times()
        if p.returncode != 0:
            raise RuntimeError(f"cold child failed: {p.stderr[-2000:]}")
        # LoadMeter counts only this process as ours; the child's CPU time is ours too
        f = meter.foreign()
        kids = (after.children_user + after.children_system) - (before.children_user + before.children_system)
        return json.loads(p.stdout.strip().splitlines()[-1]), (None if f is None else max(0.0, f - kids / wall))

    def many(self, b: Bench, label: str, runs: int, parts: bool = False) -> tuple[list[dict[str, Any]], float | None]:
        """Up to `runs` children: fewer once MIN_RUNS of them agree (benchmarks.runner.converged, on the import
        and first batch's wall time)."""
        data: list[dict[str, Any]] = []
        loads = []
        for i in range(runs):
            b.say(f"{label}: cold process {i + 1}/{runs}")
            d, fgn = self.spawn(parts)
            data.append(d)
            if fgn is not None:
                loads.append(fgn)
            if converged([sum(x[k][0] for k in _TIMED if k in x) for x in data]):
                break
        return data, (statistics.median(loads) if loads else None)


def run_cold(b: Bench, label: str, exprs: list[UOp], env: dict[str, str], runs: int, prime: bool = False
             ) -> tuple[Result, Result]:
    """Cold first-batch figures from `runs` fresh processes: (first batch alone, import + first batch).
    `prime` runs one process first to fill the on-disk cache the measured ones read."""
    with ColdRunner(exprs, env) as cr:
        if prime:
            cr.spawn()
        data, fgn = cr.many(b, label, runs)
    info = {k: data[0][k] for k in ("preloaded", "sat_stop", "sat_roots", "egglog_imported", "eqsat_imported")}
    first = Result(f"{label} first batch", "ms/batch", [1e3 * d["first"][0] for d in data], False, fgn, info,
                   [1e3 * d["first"][1] for d in data])
    total = Result(f"{label} import+first", "ms/batch", [1e3 * (d["import"][0] + d["first"][0]) for d in data],
                   False, fgn, info, [1e3 * (d["import"][1] + d["first"][1]) for d in data])
    b.record(first)
    b.record(total)
    return first, total


def cold_parts(b: Bench, label: str, exprs: list[UOp], runs: int) -> str:
    """Where a cold first batch's time goes (CACHE=0), as a note: medians of CPU ms over `runs` processes."""
    with ColdRunner(exprs, {"CACHE": "0"}) as cr:
        data, fgn = cr.many(b, f"{label} parts", runs, parts=True)
    med = {k: 1e3 * statistics.median(d[k][1] for d in data) for k in ("import", "fast", "egglog_load", "rest")}
    return (f"import {med['import']:.0f}, fast rules' first pass {med['fast']:.0f}, egglog load + tiny e-graph "
            f"{med['egglog_load']:.0f}, then the full batch {med['rest']:.0f} (its e-graph: "
            f"{data[0]['sat_roots']} roots) [CPU ms, median of {len(data)}, "
            f"fgn {'-' if fgn is None else f'{fgn:.2f}'}]")

