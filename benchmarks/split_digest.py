"""The kernel split's output as digests, and its time: a check that a change to the split (lower.schedule,
lower.split, lower.rangeify) leaves every kernel the same.

`python -m benchmarks.split_digest` prints, for the BERT forward (benchmarks.bert_model, full and --quick shapes),
the transformer, CNN and MLP training steps (benchmarks.train_models, quick shapes, `--steps N` steps without
the jit, default 1; the figures are per step), the kernel count, the most buffers one kernel takes (its
outputs and inputs), the bytes the kernels and copies read and write (each buffer argument whole, once per
item), and one sha256 over every schedule item in order (each kernel's AST structural hash, each copy's kind and
views). `--time N` also times `lower.schedule.schedule` on the BERT --quick graph and on the transformer step's
graphs: the least and the median CPU time of N calls each (the roots are built once; every call splits them
anew). `--fixed-point` also builds every kernel again against the split's final decisions and counts the
kernels that come out different (a kernel built before a node in its region was realized by a later decision
computes that node inline): zero when the split is a fixed point of its decisions (lower.schedule's rounds).
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


def _nbytes(b: Any) -> int:
    """The bytes of a buffer; a symbolic size counts 0."""
    n = b.dtype.itemsize
    for d in b.shape:
        n *= d if isinstance(d, int) else 0
    return n


def traffic(batches: list[list[Any]]) -> tuple[int, int, int]:
    """(the most buffers one kernel takes, bytes read, bytes written) over the schedules `batches`: each kernel
    reads its input buffers and writes its outputs whole, a copy reads and writes its window (or all of it)."""
    widest = read = written = 0
    for items in batches:
        for it in items:
            if it.kind == "kernel":
                widest = max(widest, len(it.bufs))
                written += sum(_nbytes(b) for b in it.bufs[:it.outs])
                read += sum(_nbytes(b) for b in it.bufs[it.outs:])
            else:
                src = it.bufs[1]
                n = _nbytes(src) if it.view is None else it.view.size * src.dtype.itemsize
                read += n
                written += n
    return widest, read, written


def bert_roots(quick: bool) -> list[UOp]:
    from benchmarks.bench_model import config
    from benchmarks.bert_model import forward_ours, weights
    from tensor import Tensor

    cfg = config(quick)
    w = {k: Tensor(v).realize() for k, v in weights(cfg).items()}
    return [forward_ours(cfg, w).uop]


def train_roots(kind: str, steps: int = 1) -> list[list[UOp]]:
    """The roots of every realize `steps` training steps (no jit) make, in order."""
    import importlib

    from benchmarks.train_models import OursTrainer, cnn_config, mlp_config, transformer_config

    configs = {"transformer": transformer_config, "cnn": cnn_config, "mlp": mlp_config}
    trainer = OursTrainer(configs[kind](True), jit=False)
    realize_mod = importlib.import_module("lower.realize")  # the module (`lower.realize` is also a function)
    seen: list[list[UOp]] = []
    inner = realize_mod.schedule

    def recording(roots: list[UOp]) -> Any:
        seen.append(list(roots))
        return inner(roots)

    realize_mod.schedule = recording  # type: ignore[assignment,attr-defined]  # a recording wrapper of the same signature
    try:
        for _ in range(steps):
            trainer.step()
    finally:
        realize_mod.schedule = inner  # type: ignore[assignment,attr-defined]  # restored
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
    ap.add_argument("--steps", type=int, default=1, help="training steps recorded (figures are per step)")
    args = ap.parse_args()
    quick = bert_roots(True)
    cases: dict[str, list[list[UOp]]] = {"bert --quick": [quick]}
    per = {"bert --quick": 1}
    if not args.no_full:
        cases["bert"], per["bert"] = [bert_roots(False)], 1
    for kind in ("transformer", "cnn", "mlp"):
        cases[f"{kind} step"], per[f"{kind} step"] = train_roots(kind, args.steps), args.steps
    for name, batches in cases.items():
        scheds = [schedule(r)[0] for r in batches]
        k, d = digest(scheds)
        widest, read, written = traffic(scheds)
        n = per[name]
        print(f"{name:18s} kernels {k / n:6.1f} widest {widest:3d} buffers read {read / n / 1e6:7.3f} MB "
              f"written {written / n / 1e6:7.3f} MB digest {d}", flush=True)
    if args.fixed_point:
        for name, batches in cases.items():
            stale = [s for r in batches for s in stale_kernels(r)]  # lower.schedule
            print(f"{name:18s} kernels built before a later decision changed them: {len(stale)}"
                  f"{f' ({args.steps} steps)' if args.steps > 1 and name.endswith('step') else ''}", flush=True)
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
