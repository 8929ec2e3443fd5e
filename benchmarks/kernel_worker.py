"""The `kernels` suite's subprocess side: one case on one engine in a fresh interpreter (cold first call, then
steady runs), and the parent's side that starts it and reads back its JSON line and first result.

The child runs as `python -m benchmarks.bench_kernels --worker ENGINE --case KEY` (bench_kernels.main)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.kernel_cases import Case, all_cases
from benchmarks.kernel_peers import Engine, Ours, TinygradPeer
from benchmarks.runner import Bench, Progress, Result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------- subprocess side


def worker(engine: str, key: str, runs: int, out_path: str | None) -> dict[str, Any]:
    """One case on one engine in this (fresh) process: the first call cold, then one or two more to separate
    compile from run, then `runs` steady runs (0: none). Writes the first result to `out_path` (.npy) for
    checking."""
    case = all_cases()[key]
    xs = case.inputs()
    t0 = time.perf_counter()
    eng: Engine = Ours(case, xs) if engine == "ours" else TinygradPeer(case, xs)
    setup_s = time.perf_counter() - t0  # imports and input upload: a per-process cost, not the kernel's
    t0 = time.perf_counter()
    out = eng.run()
    first = time.perf_counter() - t0
    if out_path:
        np.save(out_path, eng.result(out))
    del out
    again = []
    for _ in range(2 if first < 1.0 else 1):  # a slow case's run time is known well enough from one call
        t0 = time.perf_counter()
        eng.run()
        again.append(time.perf_counter() - t0)
    res: dict[str, Any] = {"engine": engine, "case": key, "setup_s": setup_s, "first_s": first,
                              "again_s": again, "compile_s": max(0.0, first - min(again))}
    if runs:
        b = Bench("kernels-worker", False, Progress(open(os.devnull, "w")))  # noqa: SIM115 -- lives as long as b
        res["steady"] = b.measure(f"{case.key}/{engine}", eng.run, work=1, unit="ms", per_item=1e3,
                                  runs=runs).to_json()
    return res


def run_worker(engine: str, case: Case, runs: int, env: dict[str, str], timeout: float = 900
               ) -> tuple[dict[str, Any] | None, np.ndarray | None, str]:
    """Run `worker` in a fresh interpreter; returns (its JSON, its first result, error text)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.npy")
        cmd = [sys.executable, "-m", "benchmarks.bench_kernels", "--worker", engine, "--case", case.key,
               "--runs", str(runs), "--out", out]
        full_env = dict(os.environ, **env)
        full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
        try:
            r = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, None, f"timed out after {timeout:.0f} s"
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
            return None, None, f"exit {r.returncode}: " + " | ".join(tail)
        line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
        if line is None:
            return None, None, "no result line"
        arr = np.load(out) if os.path.exists(out) else None
        return json.loads(line), arr, ""


def result_from_json(d: dict[str, Any]) -> Result:
    return Result(d["name"], d["unit"], list(d["samples"]), bool(d["higher_is_better"]), d.get("fgn"),
                  dict(d.get("info") or {}), d.get("cpu_samples"))
