"""The kernel split's output as digests, and its time: a check that a change to the split (lower.schedule,
lower.split, lower.rangeify) leaves every kernel the same.

`python -m benchmarks.split_digest` prints, for the BERT forward (benchmarks.bert_model, full and --quick shapes),
the transformer training step and the MLP training step (benchmarks.train_models, quick shapes, one step without
the jit), the kernel count and one sha256 over every schedule item in order (each kernel's AST structural hash,
each copy's kind and views). `--time N` also times `lower.schedule.schedule` on the BERT --quick graph and on
the transformer step's graphs: the least and the median CPU time of N calls each (the roots are built once;
every call splits them anew). `--fixed-point` also builds every kernel again against the split's final
decisions and counts the kernels that come out different (a kernel built before a node in its region was
realized by a later decision computes that node inline): zero when the split is a fixed point of its decisions,
the condition for deciding them all before any kernel is built without changing a kernel.
Run it on the code before and after a change and compare the lines.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from typing import Any

from rewrite import UOp
from rewrite.hashing import structural_hash


def _item_text(it: Any) -> str:
    if it.kind == "kernel":
        return f"kernel {it.name} {structural_hash(it.ast)}"
    return f"{it.kind} {it.name} {it.view} {it.dst_view}"


def digest(batches: list[list[Any]]) -> tuple[int, str]:
    """(kernel count, sha256 over every item's text) of the schedules `batches`, in order."""
    h = hashlib.sha256()
    kernels = 0
    for items in batches:
        for it in items:
            kernels += it.kind == "kernel"
            h.update(_item_text(it).encode() + b"\n")
        h.update(b"--\n")
    return kernels, h.hexdigest()[:16]


def bert_roots(quick: bool) -> list[UOp]:
    from benchmarks.bench_model import config
    from benchmarks.bert_model import forward_ours, weights
    from tensor import Tensor

    cfg = config(quick)
    w = {k: Tensor(v).realize() for k, v in weights(cfg).items()}
    return [forward_ours(cfg, w).uop]


def train_roots(kind: str) -> list[list[UOp]]:
    """The roots of every realize one training step (no jit) makes, in order."""
    import importlib

    from benchmarks.train_models import OursTrainer, mlp_config, transformer_config

    cfg = transformer_config(True) if kind == "transformer" else mlp_config(True)
    trainer = OursTrainer(cfg, jit=False)
    realize_mod = importlib.import_module("lower.realize")  # the module (`lower.realize` is also a function)
    seen: list[list[UOp]] = []
    inner = realize_mod.schedule

    def recording(roots: list[UOp]) -> Any:
        seen.append(list(roots))
        return inner(roots)

    realize_mod.schedule = recording  # type: ignore[assignment]  # a recording wrapper of the same signature
    try:
        trainer.step()
    finally:
        realize_mod.schedule = inner  # type: ignore[assignment]  # restored
    return seen


def _times(fn: Any, n: int) -> tuple[float, float]:
    """(min, median) over `n` calls of the process's CPU time (steadier than wall time on a shared machine)."""
    times = []
    for _ in range(n):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times), statistics.median(times)


def main() -> None:
    from lower.schedule import schedule, stale_kernels

    ap = argparse.ArgumentParser()
    ap.add_argument("--time", type=int, default=0, help="also time the split: median of N calls")
    ap.add_argument("--no-full", action="store_true", help="skip the full-size BERT")
    ap.add_argument("--fixed-point", action="store_true", help="count kernels built against stale decisions")
    args = ap.parse_args()
    quick = bert_roots(True)
    cases: dict[str, list[list[UOp]]] = {"bert --quick": [quick]}
    if not args.no_full:
        cases["bert"] = [bert_roots(False)]
    cases["transformer step"] = train_roots("transformer")
    cases["mlp step"] = train_roots("mlp")
    for name, batches in cases.items():
        k, d = digest([schedule(r)[0] for r in batches])
        print(f"{name:18s} kernels {k:4d} digest {d}", flush=True)
    if args.fixed_point:
        for name, batches in cases.items():
            stale = [s for r in batches for s in stale_kernels(r)]  # lower.schedule
            print(f"{name:18s} kernels built before a later decision changed them: {len(stale)}", flush=True)
            for line in stale:
                print(f"    {line}", flush=True)
    if args.time:
        for name in ("bert --quick", "transformer step"):
            batches = cases[name]
            lo, med = _times(lambda b=batches: [schedule(r) for r in b], args.time)
            print(f"{name:18s} schedule CPU time min {lo * 1000:7.1f} ms, median {med * 1000:7.1f} ms "
                  f"({args.time} calls)", flush=True)


if __name__ == "__main__":
    main()
