"""The Python lowering's cost per kernel, measured steadily: `python -m benchmarks.lower_cost`.

The `kernels` suite's `lower/k` (benchmarks.kernel_worker.split_ours) is one cold call's wall and CPU time
within a case's whole first realize; on a shared machine it moves by more than the changes it should show. This
measures the same work on its own: for each case, a fresh interpreter (as the suite's worker, CACHE=0, bytecode
on) builds the case's graph, schedules it (not counted), then lowers every kernel from its scheduled AST to C
source (lower.stages.lower_kernel, then the cpu device's render; the C compiler is never run), with the
collector paused as realize pauses it. Counted per kernel: the main thread's CPU time (`time.thread_time`) or,
with `--callgrind`, the instructions it executes (valgrind's callgrind, collecting only while a kernel lowers:
the same count on every run, whatever the load). The figure of a case is its total over its kernels divided by
the number of kernels, as `lower/k`; the summary gives the median over the cases and the total.

`--models` adds the three training models of benchmarks.train_models (one eager step each: every kernel the
step lowers, recorded as it runs; its C compiled and run, since later kernels need earlier results; only the
lowering and render are counted). `--out DIR` writes every kernel's C source as DIR/<case>/<nn>_<name>.c, so
two trees (two commits) can be compared with `diff -r`. `--repeat N` runs every case N times (fresh processes)
and reports each case's median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ("mlp", "cnn", "transformer")

_TOGGLE_C = """#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void cg_dump(const char *s) { CALLGRIND_DUMP_STATS_AT(s); }
"""


class Meter:
    """Counts one kernel's lowering: thread CPU time, or (under callgrind) toggles collection and dumps the
    counters after each kernel, one file per kernel."""

    def __init__(self, lib: str | None) -> None:
        self.cg: Any = None
        if lib:
            import ctypes

            self.cg = ctypes.CDLL(lib)
            self.cg.cg_start()
        self.cpu: list[float] = []

    def measure(self, fn: Callable[[], Any], label: str) -> Any:
        if self.cg is not None:
            self.cg.cg_toggle()
            try:
                return fn()
            finally:
                self.cg.cg_toggle()
                self.cg.cg_dump(label.encode())
        c0 = time.thread_time()
        try:
            return fn()
        finally:
            self.cpu.append(time.thread_time() - c0)


def _write(out: str | None, key: str, i: int, name: str, text: str) -> None:
    if out:
        os.makedirs(os.path.join(out, key), exist_ok=True)
        with open(os.path.join(out, key, f"{i:02d}_{name}.c"), "w") as f:
            f.write(text)


def _lower_case(key: str, meter: Meter, out: str | None) -> int:
    """A kernels-suite case: schedule, then each kernel lowered and rendered (as lower.realize.compile_kernels:
    a repeated name numbered, a LINEAR seen before not rendered again). Returns the kernel count."""
    import numpy as np

    from benchmarks.kernel_cases import all_cases, tensor_graph
    from devices import get_device, target_for
    from lower.schedule import schedule
    from lower.stages import lower_kernel
    from rewrite.engine import collector_paused
    from rewrite.env import getenv
    from tensor import Tensor

    case = all_cases()[key]
    xs = [Tensor(np.zeros(s, np.float32)).realize() for s in case.shapes()]  # values play no part in lowering
    items, _ = schedule([tensor_graph(case, xs).uop])
    dev_name = str(getenv("DEVICE"))
    dev, target = get_device(dev_name), target_for(dev_name)
    kernels = [it for it in items if it.kind == "kernel" and it.ast is not None]
    used: set[str] = set()
    seen: set[Any] = set()
    with collector_paused():
        for i, it in enumerate(kernels):
            name = next(u for j in range(len(kernels) + 1) if (u := f"{it.name}_{j}" if j else it.name) not in used)
            used.add(name)

            def one(it: Any = it, name: str = name) -> tuple[Any, str | None]:
                linear = lower_kernel(it.ast, target, bufs=it.bufs, name=name)
                if linear in seen:
                    return linear, None
                seen.add(linear)
                return linear, dev.render(linear, name, target)

            _, text = meter.measure(one, f"{key}:{i}")
            if text is not None:
                _write(out, key, i, name, text)
    return len(kernels)


def _lower_model(kind: str, meter: Meter, out: str | None) -> int:
    """One eager training step of a benchmarks.train_models model, every kernel it lowers counted (lowering and
    render; the compile and run not)."""
    import importlib

    from benchmarks import train_models as tm
    from devices import get_device

    cfg = {"mlp": tm.mlp_config, "cnn": tm.cnn_config, "transformer": tm.transformer_config}[kind](False)
    trainer = tm.OursTrainer(cfg, jit=False)
    realize_mod = importlib.import_module("lower.realize")  # `lower.realize` the attribute is the function
    real = getattr(realize_mod, "lower_kernel")  # noqa: B009 -- the module is imported by name
    n = [0]

    def lower_and_render(ast: Any, target: Any, **kw: Any) -> Any:
        def one() -> Any:
            linear = real(ast, target, **kw)
            return linear, get_device(target.device).render(linear, kw.get("name", "kernel"), target)

        linear, text = meter.measure(one, f"{kind}:{n[0]}")
        _write(out, kind, n[0], kw.get("name", "kernel"), text)
        n[0] += 1
        return linear

    setattr(realize_mod, "lower_kernel", lower_and_render)  # noqa: B010 -- as above
    trainer.step()
    return n[0]


def child(key: str, out: str | None, lib: str | None) -> dict[str, Any]:
    meter = Meter(lib)
    n = _lower_model(key, meter, out) if key in MODELS else _lower_case(key, meter, out)
    return {"case": key, "kernels": n, "cpu_s": meter.cpu}


def _toggle_lib(d: str) -> str:
    src, lib = os.path.join(d, "cgtoggle.c"), os.path.join(d, "cgtoggle.so")
    with open(src, "w") as f:
        f.write(_TOGGLE_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", lib, src], check=True)
    return lib


def _callgrind_totals(d: str, pid_files: list[str]) -> list[int]:
    """Instructions per dump (the dumps of one run, in order), read from callgrind's `totals:` lines."""
    out = []
    for path in sorted(pid_files, key=lambda p: int(p.rsplit(".", 1)[1]) if p.rsplit(".", 1)[1].isdigit() else 0):
        with open(os.path.join(d, path)) as f:
            for line in f:
                if line.startswith("totals:"):
                    out.append(int(line.split()[1]))
                    break
    return out


def run_one(key: str, out: str | None, callgrind: bool, tmp: str) -> dict[str, Any]:
    """The child for `key` in a fresh interpreter (as the kernels suite's worker runs one: CACHE=0, bytecode on)."""
    from benchmarks.kernel_worker import worker_env

    env = worker_env({"CACHE": "0", "CPU_TIERS": "0", "PYTHONHASHSEED": "0"})
    cmd = [sys.executable, "-m", "benchmarks.lower_cost", "--child", key]
    if out:
        cmd += ["--out", out]
    cgdir = None
    if callgrind:
        cgdir = tempfile.mkdtemp(dir=tmp)
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               f"--callgrind-out-file={cgdir}/cg.out", *cmd, "--lib", _toggle_lib(tmp)]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{key}: exit {r.returncode}: {r.stderr[-2000:]}")
    res = json.loads(next(ln for ln in reversed(r.stdout.splitlines()) if ln.startswith("{")))
    if cgdir is not None:
        res["instr"] = _callgrind_totals(cgdir, [p for p in os.listdir(cgdir) if p.startswith("cg.out.")])
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.lower_cost", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="", help="comma-separated case keys (default: the --full list)")
    ap.add_argument("--models", action="store_true", help="the three training models too")
    ap.add_argument("--out", default=None, help="write each kernel's C source under this folder")
    ap.add_argument("--callgrind", action="store_true", help="count instructions (valgrind) instead of CPU time")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the per-case results here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lib", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.out, args.lib)))
        return 0
    from benchmarks.kernel_cases import cases_for

    keys = [k for k in args.cases.split(",") if k] or [c.key for c in cases_for("full")]
    keys += list(MODELS) if args.models else []
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            for key in keys:
                rows.setdefault(key, []).append(run_one(key, args.out if rep == 0 else None, args.callgrind, tmp))
    unit, scale, field = ("M instr", 1e-6, "instr") if args.callgrind else ("ms CPU", 1e3, "cpu_s")
    per_case = {}
    for key, runs in rows.items():
        per_k = [sum(r[field]) / max(1, r["kernels"]) * scale for r in runs]
        per_case[key] = statistics.median(per_k)
        print(f"{key:14s} {runs[0]['kernels']:3d} kernels  {per_case[key]:9.2f} {unit}/kernel  "
              f"(runs: {' '.join(f'{v:.2f}' for v in per_k)})")
    suite = [v for k, v in per_case.items() if k not in MODELS]
    if suite:
        print(f"median over {len(suite)} cases: {statistics.median(suite):.2f} {unit}/kernel; "
              f"total {sum(suite):.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"unit": unit, "rows": rows, "per_case": per_case}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
