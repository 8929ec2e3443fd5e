"""Rewrite tracing: with TRACE=1 (or inside `tracing()`), every rule firing is recorded.

    with tracing() as log:
        out = graph_rewrite(g, rules, name="simplify")
    print(log.format())          # stage, rule name, before -> after, one per line
    log.made(out)                # the firings whose result is `out`: "which rules made this node"
"""

from __future__ import annotations

import atexit
import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rewrite.env import knob_int

if TYPE_CHECKING:
    from rewrite.uop import UOp


@dataclass(frozen=True)
class Firing:
    stage: str
    rule: str
    before: UOp
    after: UOp
    where: str = ""  # the rule's definition, file:line

    def __str__(self) -> str:
        return f"[{self.stage}] {self.rule}: {_short(self.before)} -> {_short(self.after)}"


def _short(u: UOp) -> str:
    try:
        s = u.render()
    except Exception:
        s = u.short()
    return s if len(s) <= 120 else s[:117] + "..."


class TraceLog:
    def __init__(self) -> None:
        self.firings: list[Firing] = []

    def record(self, stage: str, rule: str, before: UOp, after: UOp, where: str = "") -> None:
        self.firings.append(Firing(stage, rule, before, after, where))

    def made(self, node: UOp) -> list[Firing]:
        """The chain of firings that produced `node`, oldest first: the firing whose result is `node`, then the
        one whose result was that firing's input, and so on back to a node no rule made."""
        by_after: dict[UOp, Firing] = {}
        for firing in self.firings:
            by_after.setdefault(firing.after, firing)
        chain: list[Firing] = []
        seen: set[UOp] = set()
        while (f := by_after.get(node)) is not None and node not in seen:
            seen.add(node)
            chain.append(f)
            node = f.before
        return chain[::-1]

    def counts(self) -> Counter[str]:
        return Counter(f.rule for f in self.firings)

    def format(self, limit: int = 200) -> str:
        lines = [str(f) for f in self.firings[:limit]]
        if len(self.firings) > limit:
            lines.append(f"... {len(self.firings) - limit} more")
        return "\n".join(lines)

    def clear(self) -> None:
        self.firings.clear()


_active: list[TraceLog] = []
GLOBAL_LOG = TraceLog()


def _report_at_exit() -> None:
    """With TRACE=1 the process ends with a summary of rule firings; TRACE=2 lists every firing."""
    if not GLOBAL_LOG.firings:
        return
    level = knob_int("TRACE")
    out = [f"TRACE: {len(GLOBAL_LOG.firings)} rule firings"]
    out += [f"  {n:6d}  {rule}" for rule, n in GLOBAL_LOG.counts().most_common(40)]
    if level >= 2:
        out.append(GLOBAL_LOG.format(limit=10_000))
    sys.stderr.write("\n".join(out) + "\n")


if knob_int("TRACE"):
    atexit.register(_report_at_exit)


def current() -> TraceLog | None:
    """The log firings go to now: the innermost `tracing()` block, else the global log when TRACE=1."""
    if _active:
        return _active[-1]
    return GLOBAL_LOG if knob_int("TRACE") else None


@contextlib.contextmanager
def tracing() -> Iterator[TraceLog]:
    log = TraceLog()
    _active.append(log)
    try:
        yield log
    finally:
        _active.pop()
