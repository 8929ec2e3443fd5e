"""The `kernels` suite's subprocess side: one case on one engine in a fresh interpreter (the engine's import,
the cold first call, then steady runs), and the parent's side that starts it and reads back its JSON line and
first result.

The child runs as `python -m benchmarks.kernel_worker --worker ENGINE --case KEY`. This module imports none of
our packages at the top, so the child times the engine's own import (`tensor` or `tinygrad`) from nothing.

What "cold" means here, for both engines alike: a fresh process, the engine imported and its device started
(`import_s`), inputs uploaded (`setup_s`, not counted), then the first call (`first_s`): graph, scheduling,
lowering, compiling and one run, with no compiled kernel from disk (ours: CACHE=0; tinygrad: CACHELEVEL=0). An
engine that imports its compiler and starts its device lazily pays for that inside the first call, one that
does it up front pays in `import_s` (tinygrad: `Device[...]` alone takes hundreds of ms here), so the first call
alone favours the eager one; `import_s + first_s`, the time to the first result, does not. Our thread pool's
runtime library stays in the disk cache under CACHE=0 (it is the device's runtime, built once per machine, not
a kernel), and both engines run with Python's bytecode cache on (see worker_env).
"""

from __future__ import annotations

import argparse
import importlib
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


def timed(owner: Any, attr: str, acc: dict[str, float], key: str, count: dict[str, int] | None = None) -> None:
    """Wrap owner.attr so its wall time adds up in acc[key] and the calling thread's CPU time in acc[key + "_cpu"]
    (outermost calls only; the CPU time is the figure to trust on a busy machine) and, with `count`, its calls in
    count[key]."""
    fn = getattr(owner, attr)
    depth = [0]

    def wrapped(*a: Any, **k: Any) -> Any:
        depth[0] += 1
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*a, **k)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                acc[key] = acc.get(key, 0.0) + time.perf_counter() - t0
                acc[key + "_cpu"] = acc.get(key + "_cpu", 0.0) + time.thread_time() - c0
                if count is not None:
                    count[key] = count.get(key, 0) + 1

    setattr(owner, attr, wrapped)


def split_ours(acc: dict[str, float], count: dict[str, int]) -> None:
    """Time our pipeline's parts from now on (after `import tensor`): `schedule` (kernel split), `lower` (the
    kernel stages, graph to LINEAR, per kernel: count["lower"] kernels), `render` (LINEAR to C text: the
    device's analysis and function rendering), `compile` (the compile stage's batch: the C compiler, wall).
    Python lowering per kernel, graph in and source out with the compiler excluded, is (lower + render) /
    kernels."""
    from devices.cpu import CPUDevice

    realize_mod = importlib.import_module("lower.realize")  # `lower.realize` the attribute is the function
    timed(realize_mod, "schedule", acc, "schedule")
    timed(realize_mod, "lower_kernel", acc, "lower", count)
    timed(CPUDevice, "_function", acc, "render")
    timed(CPUDevice, "compile_batch", acc, "compile")


def worker(engine: str, key: str, runs: int, out_path: str | None) -> dict[str, Any]:
    """One case on one engine in this (fresh) process: the first call cold, then one or two more to separate
    compile from run, then `runs` steady runs (0: none). Writes the first result to `out_path` (.npy) for
    checking."""
    case = all_cases()[key]
    xs = case.inputs()
    t0 = time.perf_counter()
    mod = importlib.import_module("tensor" if engine == "ours" else "tinygrad")  # what a user's first line imports
    if engine == "tinygrad":  # its device starts apart from the import (ours starts within the first call)
        mod.Device[mod.Device.DEFAULT]
    import_s = time.perf_counter() - t0
    parts: dict[str, float] = {}
    count: dict[str, int] = {}
    if engine == "ours":
        split_ours(parts, count)
    t0 = time.perf_counter()
    eng: Engine = Ours(case, xs) if engine == "ours" else TinygradPeer(case, xs)
    setup_s = time.perf_counter() - t0  # input upload (and the peer's device start): not the kernel's
    setup_parts, setup_count = dict(parts), dict(count)
    t0 = time.perf_counter()
    out = eng.run()
    first = time.perf_counter() - t0
    parts = {k: v - setup_parts.get(k, 0.0) for k, v in parts.items()}
    lowered = count.get("lower", 0) - setup_count.get("lower", 0)
    if out_path:
        np.save(out_path, eng.result(out))
    del out
    again = []
    for _ in range(2 if first < 1.0 else 1):  # a slow case's run time is known well enough from one call
        t0 = time.perf_counter()
        eng.run()
        again.append(time.perf_counter() - t0)
    res: dict[str, Any] = {"engine": engine, "case": key, "import_s": import_s, "setup_s": setup_s, "first_s": first,
                              "again_s": again, "compile_s": max(0.0, first - min(again))}
    if engine == "ours":  # the first call's parts (benchmarks.kernel_worker.split_ours), in seconds
        res.update({f"{k}_s": v for k, v in parts.items()}, lowered=lowered)
        if lowered:
            for sfx in ("", "_cpu"):
                res[f"lower_per_kernel{sfx}_s"] = (parts.get(f"lower{sfx}", 0.0) + parts.get(f"render{sfx}", 0.0)) \
                    / lowered
    if runs:
        b = Bench("kernels-worker", False, Progress(open(os.devnull, "w")))  # noqa: SIM115 -- lives as long as b
        res["steady"] = b.measure(f"{case.key}/{engine}", eng.run, work=1, unit="ms", per_item=1e3,
                                  runs=runs).to_json()
    return res


# Our packages, compiled to bytecode before any worker runs (see worker_env).
PACKAGES = ("rewrite", "rules", "devices", "lower", "tensor", "benchmarks")
_BYTECODE_DONE: list[bool] = []


def worker_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of a worker process: ours plus `env`, our checkout on the path, and Python's bytecode
    cache on. A pip-installed package such as tinygrad comes with its .pyc files, while a checkout run with
    PYTHONDONTWRITEBYTECODE=1 (as this machine's shell sets it) compiles every module from source in every
    process; a cold first call that imports modules lazily would then time Python's parser for us and not for
    the peer. So both engines' workers run with bytecode caching on, and our packages are compiled once
    beforehand (`python -m compileall`), as an installation would have them."""
    full_env = dict(os.environ, **env)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env["PYTHONDONTWRITEBYTECODE"] = ""  # an empty value is "not set" to Python
    if not _BYTECODE_DONE:
        dirs = [os.path.join(ROOT, p) for p in PACKAGES]
        subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], cwd=ROOT, env=full_env,
                       capture_output=True, timeout=300, check=False)
        _BYTECODE_DONE.append(True)
    return full_env


def run_module(args: list[str], env: dict[str, str], timeout: float, out: str
               ) -> tuple[dict[str, Any] | None, np.ndarray | None, str]:
    """Run `python -m <args>` in a fresh interpreter under worker_env(env); returns (the last JSON line it prints,
    the array it saved at `out` if any, error text)."""
    try:
        r = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=worker_env(env), capture_output=True,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None, f"timed out after {timeout:.0f} s"
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        return None, None, f"exit {r.returncode}: " + " | ".join(tail)
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        return None, None, "no result line"
    return json.loads(line), (np.load(out) if os.path.exists(out) else None), ""


def run_worker(engine: str, case: Case, runs: int, env: dict[str, str], timeout: float = 900
               ) -> tuple[dict[str, Any] | None, np.ndarray | None, str]:
    """Run `worker` in a fresh interpreter; returns (its JSON, its first result, error text)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.npy")
        return run_module(["benchmarks.kernel_worker", "--worker", engine, "--case", case.key, "--runs", str(runs),
                           "--out", out], env, timeout, out)


def result_from_json(d: dict[str, Any]) -> Result:
    return Result(d["name"], d["unit"], list(d["samples"]), bool(d["higher_is_better"]), d.get("fgn"),
                  dict(d.get("info") or {}), d.get("cpu_samples"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.kernel_worker",
                                 description="subprocess side of the kernels suite (run the suite with "
                                             "`python -m benchmarks kernels`)")
    ap.add_argument("--worker", choices=("ours", "tinygrad"), required=True)
    ap.add_argument("--case", required=True, choices=sorted(all_cases()))
    ap.add_argument("--runs", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    print(json.dumps(worker(args.worker, args.case, args.runs, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
