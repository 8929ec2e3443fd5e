"""A Recorder as JSON: every node once, by id, and everything else pointing at ids.

    {"version": 1,
     "groups":    {op name: group},                       colours in the viewer
     "nodes":     [[op, arg, dtype, shape, [src ids]], ...] children before parents; ids are list positions
     "callsites": [text, ...],  "node_callsite": {id: callsite index}
     "rules":     [[name, "file:line", source line], ...]
     "stages":    [graph_rewrite stage name, ...]
     "firings":   [[stage index, rule index, before id, after id], ...]   in the order they fired
     "derived":   [[new id, old id, how], ...]                built by a function from another node (not a rule)
     "kernels":   [{"name", "device", "opts", "linear", "source", "flops", "mem_bytes", ...}, ...]
     "realizes":  [{"label", "stages": [{"name", "scope", "kernel", "before", "after", "firings": [first, last],
                    "ms"}], "runs": [{"kernel", "ms", "gbs", "gflops"}]}, ...]}

UOps are hash-consed, so a node shared by many stages, firings and graphs is written once. The walk is
iterative and shares one memo across all roots: the cost is linear in the number of distinct nodes.
"""

from __future__ import annotations

import json
import linecache
import os
from typing import TYPE_CHECKING

from rewrite.derive import fmt_shape
from rewrite.ops import GroupOp, Ops

if TYPE_CHECKING:
    from rewrite.uop import UOp
    from rewrite.viz.capture import Recorder

VERSION = 1
ARG_CHARS = 160  # longer args (a SOURCE's text, a BINARY's bytes) are cut; the kernel view has the whole source

_GROUPS: tuple[tuple[str, frozenset[Ops]], ...] = (
    ("const", frozenset({Ops.CONST, Ops.VCONST})),
    ("buffer", frozenset({Ops.PARAM, Ops.BUFFER, Ops.BUFFERVIEW, Ops.BINARY})),
    ("movement", GroupOp.Movement),
    ("reduce", GroupOp.Reduce),
    ("call", GroupOp.Call),
    ("memory", GroupOp.LoadStore),
    ("control", GroupOp.Ordering),
    ("alu", GroupOp.Elementwise | GroupOp.Decomposed | GroupOp.DeviceALU | GroupOp.Unary),
    ("marker", GroupOp.Marker),
    ("codegen", GroupOp.Codegen),
)


def _sig(x: float) -> float:
    """A rate or time kept to 4 significant digits: a tiny kernel's 0.0004 GFLOP/s stays above zero (rounding to
    fixed decimals made it 0.0 whenever the machine was slow)."""
    return float(f"{x:.4g}")


def op_group(op: Ops) -> str:
    for name, ops in _GROUPS:
        if op in ops:
            return name
    return "other"


def _arg(u: UOp) -> str:
    if u.arg is None:
        return ""
    try:
        s = repr(u.arg)
    except Exception as e:  # an arg whose repr fails still gets a row
        s = f"<{type(u.arg).__name__}: {e}>"
    return s if len(s) <= ARG_CHARS else s[: ARG_CHARS - 3] + "..."


def _row(u: UOp, ids: dict[UOp, int]) -> list:
    try:
        dtype = u.dtype.name
    except Exception:
        dtype = "?"
    try:
        shape = fmt_shape(u.shape)
    except Exception:
        shape = "?"
    return [u.op.name, _arg(u), dtype, shape, [ids[s] for s in u.src]]


class NodeTable:
    """Ids for nodes, children first; `add(root)` numbers root's whole graph (each node once)."""

    def __init__(self) -> None:
        self.ids: dict[UOp, int] = {}
        self.rows: list[list] = []

    def add(self, root: UOp) -> int:
        ids = self.ids
        if (i := ids.get(root)) is not None:
            return i
        stack: list[tuple[UOp, bool]] = [(root, False)]
        while stack:
            u, ready = stack.pop()
            if u in ids:
                continue
            if ready:
                ids[u] = len(self.rows)
                self.rows.append(_row(u, ids))
                continue
            stack.append((u, True))
            stack.extend((s, False) for s in reversed(u.src) if s not in ids)
        return ids[root]


def _where(loc: str) -> tuple[str, str]:
    """`file:line` made relative to the working directory when under it, and the text of that line."""
    path, _, line = loc.rpartition(":")
    if not path or not line.isdigit():
        return loc, ""
    text = linecache.getline(path, int(line)).strip()
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..') else rel}:{line}", text


def to_json(rec: Recorder) -> dict:
    table = NodeTable()
    stage_names: dict[str, int] = {}
    rule_ix: dict[tuple[str, str], int] = {}
    rules: list[list[str]] = []
    firings: list[list[int]] = []
    for f in rec.log.firings:
        si = stage_names.setdefault(f.stage, len(stage_names))
        if (ri := rule_ix.get((f.rule, f.where))) is None:
            ri = rule_ix[(f.rule, f.where)] = len(rules)
            rules.append([f.rule, *_where(f.where)])
        firings.append([si, ri, table.add(f.before), table.add(f.after)])
    realizes = []
    for r in rec.realizes:
        stages = [{"name": s.name, "scope": s.scope, "kernel": s.kernel, "before": table.add(s.before),
                   "after": table.add(s.after), "firings": [s.first, s.last], "ms": round(s.ms, 3)}
                  for s in r.stages]
        runs = []
        for run in r.runs:
            k = rec.kernels[run.kernel].info
            flops, mem = k.get("flops", 0), k.get("mem_bytes", 0)
            sec = max(run.seconds, 1e-9)
            runs.append({"kernel": run.kernel, "ms": _sig(run.seconds * 1e3),
                         "gbs": _sig(float(mem) / sec / 1e9) if isinstance(mem, int | float) else 0,
                         "gflops": _sig(float(flops) / sec / 1e9) if isinstance(flops, int | float) else 0})
        realizes.append({"label": r.label, "stages": stages, "runs": runs})
    derived = [[table.add(new), table.add(old), how] for new, (old, how) in rec.derived.items()]
    node_callsite = {str(i): rec.callsite_of[u] for u, i in table.ids.items() if u in rec.callsite_of}
    return {
        "version": VERSION,
        "groups": {op.name: op_group(op) for op in Ops},
        "nodes": table.rows,
        "callsites": rec.callsites,
        "node_callsite": node_callsite,
        "rules": rules,
        "stages": list(stage_names),
        "firings": firings,
        "derived": derived,
        "kernels": [{"name": k.name, "device": k.device, **k.info} for k in rec.kernels],
        "realizes": realizes,
    }


def write(rec: Recorder, path: str) -> None:
    with open(path, "w") as f:
        json.dump(to_json(rec), f, separators=(",", ":"))
