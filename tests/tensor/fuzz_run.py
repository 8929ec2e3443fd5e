"""Running the random programs of tests/tensor/fuzz_programs.py: `run_batch` realizes many programs' outputs with
one `realize` (one schedule, one batched compile per device; `realize_together`, which the tensor-core fuzzer uses
too); a program that fails there is re-run alone (`run_one`), and `shrink` reduces it greedily (unused inputs,
a prefix of its ops, an op dropped for one of its arguments, smaller or constant inputs) while it still fails, for
the standalone repro `report` prints. `fuzz` runs a window of seeds in a mode (fuzz_programs.MODES).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from rewrite.env import Context
from tensor import Tensor
from tests.tensor.fuzz_programs import MODES, Input, Program, build_tensor, eval_numpy, generate, mismatch


def run_one(p: Program, mode: str) -> str | None:
    """Why `p` fails in `mode` run alone (None when it passes)."""
    try:
        with Context(**MODES[mode]):
            got = build_tensor(p).numpy()
    except Exception as e:
        return f"raised {type(e).__name__}: {e}"
    return mismatch(p, got)


def realize_together(builds: list[Callable[[], Tensor]], knobs: dict) -> tuple[list[np.ndarray | None], list]:
    """Build each tensor and realize them all with one realize (one schedule, batched compiles) inside
    `Context(**knobs)`: each one's array (None where its build raised, all None where the realize did) and the
    schedule items of that realize."""
    with Context(**knobs):
        outs: list[Tensor | None] = []
        for build in builds:
            try:
                outs.append(build())
            except Exception:
                outs.append(None)
        live = [t for t in outs if t is not None]
        try:
            items = live[0].schedule(*live[1:]) if live else []
            if live:
                live[0].realize(*live[1:])
            return [None if t is None else t.numpy() for t in outs], items
        except Exception:
            return [None] * len(outs), []


def run_batch(progs: list[Program], mode: str) -> list[tuple[Program, str]]:
    """Realize all programs' outputs together (one schedule, batched compiles); failures re-run alone."""
    failures: list[tuple[Program, str]] = []
    results, _ = realize_together([functools.partial(build_tensor, p) for p in progs], MODES[mode])
    for p, got in zip(progs, results, strict=True):
        why = mismatch(p, got) if got is not None else run_one(p, mode)
        if why is not None and got is not None:
            why = run_one(p, mode)  # confirm alone
        if why is not None:
            failures.append((p, why))
    return failures


def _still_fails(p: Program, mode: str) -> bool:
    if not p.ops:
        return False
    try:
        ref = eval_numpy(p)
    except Exception:
        return False
    if ref.ndim == 0 and ref.dtype.kind == "b":
        return False
    if ref.dtype.kind == "f" and (not np.all(np.isfinite(ref))):
        return False
    return run_one(p, mode) is not None


def _drop_op(p: Program, k: int, sub: int) -> Program:
    """Without op k; later uses of its value read value `sub` instead."""
    n = len(p.inputs)
    old = n + k

    def remap(a: int) -> int:
        if a == old:
            return sub
        return a - 1 if a > old else a

    ops = tuple(dataclasses.replace(o, args=tuple(remap(a) for a in o.args)) for i, o in enumerate(p.ops) if i != k)
    return dataclasses.replace(p, ops=ops)


def _shrink_steps(p: Program) -> list[Program]:
    n = len(p.inputs)
    out = []
    # unused inputs go first (always smaller, and the data steps below can use up the budget)
    used = {a for o in p.ops for a in o.args}
    for i in range(n):
        if i not in used:
            ops = tuple(dataclasses.replace(o, args=tuple(a - 1 if a > i else a for a in o.args)) for o in p.ops)
            out.append(dataclasses.replace(p, inputs=p.inputs[:i] + p.inputs[i + 1:], ops=ops))
    out += [dataclasses.replace(p, ops=p.ops[:k]) for k in range(1, len(p.ops))]  # an earlier value as the output
    for k, op in enumerate(p.ops):
        for a in dict.fromkeys(op.args):
            out.append(_drop_op(p, k, a))
    for i, inp in enumerate(p.inputs):
        for d, s in enumerate(inp.shape):
            for smaller in (1, 2, 3):
                if smaller < s:
                    shape = (*inp.shape[:d], smaller, *inp.shape[d + 1:])
                    arr = np.array(inp.data).reshape(inp.shape)[tuple(slice(0, smaller) if j == d else slice(None)
                                                                      for j in range(len(shape)))]
                    new = Input(shape, inp.dtype, tuple(arr.ravel().tolist()))
                    out.append(dataclasses.replace(p, inputs=(*p.inputs[:i], new, *p.inputs[i + 1:])))
        for fill in (1, 0):
            if any(x != fill for x in inp.data):
                new = Input(inp.shape, inp.dtype, tuple(type(x)(fill) for x in inp.data))
                out.append(dataclasses.replace(p, inputs=(*p.inputs[:i], new, *p.inputs[i + 1:])))
    return out


def shrink(p: Program, mode: str, budget: int = 300) -> Program:
    """The smallest program found (greedy: first smaller candidate that still fails) within `budget` runs."""
    tried = 0
    progress = True
    while progress and tried < budget:
        progress = False
        for q in _shrink_steps(p):
            tried += 1
            if _still_fails(q, mode):
                p, progress = q, True
                break
            if tried >= budget:
                break
    return p


def report(p: Program, mode: str, why: str, shrunk: Program | None = None) -> str:
    s = shrunk or p
    knobs = ", ".join(f"{k}={v!r}" for k, v in MODES[mode].items())
    return (f"fuzz program seed={p.seed} fails in mode {mode} ({knobs or 'defaults'}): {why}\n"
            f"minimal repro:\n{s.repro(knobs)}\n")


def fuzz(seeds: range, mode: str, batch: int = 150, on_fail: Callable[[str], None] | None = None,
         half: bool = False) -> list[str]:
    """Run the programs of `seeds` in `mode` (`half`: the float16 and bfloat16 ones); the shrunk reports of the
    failures."""
    reports = []
    for lo in range(seeds.start, seeds.stop, batch):
        progs = [generate(s, gpu=mode == "gpu", half=half, widen=mode in ("cpu", "noopt", "v2"))
                 for s in range(lo, min(lo + batch, seeds.stop))]
        for p, why in run_batch(progs, mode):
            r = report(p, mode, why, shrink(p, mode))
            reports.append(r)
            if on_fail:
                on_fail(r)
    return reports
