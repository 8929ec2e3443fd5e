"""Run-time checks of values: an error that only the data can show, raised when the data is computed.

torch raises such errors from inside its kernels (binary_cross_entropy: "all elements of input should be between
0 and 1"). Here a function's result is a lazy graph, so `guard(out, bad, ...)` attaches a check to the result:
`bad` is a scalar tensor over the same inputs (the count of offending elements), and the check runs whenever a
realize computes a graph that contains `out`:
  - the realize adds `bad` to its roots (one schedule, so it reads the inputs the realize reads anyway: a small
    reduction, often fused) and, once it has run, reads the one number and raises the error if it is not 0;
  - `backward()` carries the checks of its root to the gradients it makes, so a step that realizes only the
    gradients and the optimizer's update (`opt.step()` without the loss) checks too;
  - under tensor.jit the check also runs after every replay (the replay refills `bad`'s buffer).
A check runs once per realize that computes its guarded value; once realized, the value does not change. With no
check pending (the usual case) a realize pays one dict test; while one is pending, a realize walks its graph once
more to find it. The table holds the guarded nodes weakly: a loss that is dropped unrealized takes its check
along. Where the inputs are realized already when the function is called, the function checks at once (on the
host data), so the error points at the call, as torch's does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rewrite.uop import UOp

if TYPE_CHECKING:
    from tensor.tensor import Tensor


@dataclass(eq=False)
class Check:
    bad: Tensor  # scalar: 0 when the value is fine, else how many elements offend
    error: Callable[[int], Exception]  # the error for that count


_checks: weakref.WeakKeyDictionary[UOp, list[Check]] = weakref.WeakKeyDictionary()


def guard(out: Tensor, bad: Tensor, error: Callable[[int], Exception]) -> Tensor:
    """Check `bad == 0` whenever a realize computes `out` (see the module's text); returns `out`."""
    _checks.setdefault(out.uop, []).append(Check(bad, error))
    return out


def pending(roots: Iterable[UOp]) -> list[Check]:
    """The checks guarding values that a realize of `roots` computes (they leave the table: each runs once)."""
    if not _checks:
        return []
    out: dict[int, Check] = {}  # a loss and its gradients share their checks
    for u in UOp.toposort_of(list(roots)):
        for c in _checks.pop(u, ()):
            out.setdefault(id(c), c)
    return list(out.values())


def carry(nodes: Iterable[UOp], to: list[UOp]) -> None:
    """backward(): the checks on any of `nodes` (the root's graph) also guard the gradients `to`."""
    if not _checks:
        return
    cs = [c for u in nodes for c in _checks.get(u, ())]
    for g in to if cs else ():
        _checks.setdefault(g, []).extend(c for c in cs if c not in _checks.get(g, ()))


def verify(checks: list[Check]) -> None:
    """After the realize that computed the checks' flags: raise the first failing one's error; under a jit capture,
    run the same checks after every replay."""
    from tensor import jit

    if jit.capturing():
        jit.on_replay(lambda: _raise_failed(checks))
    _raise_failed(checks)


def _raise_failed(checks: list[Check]) -> None:
    for c in checks:
        n = int(c.bad.item())
        if n:
            raise c.error(n)


__all__ = ["Check", "carry", "guard", "pending", "verify"]
