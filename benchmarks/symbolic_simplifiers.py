"""What the `symbolic` suite times on our side: the fast rules and the full simplifier, on a batch or one
expression at a time, with the caches it controls; node counts; and the untimed check that every measured
result equals its input at random points of its variables."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from benchmarks.symbolic_tinygrad import Untranslatable, tinygrad_eval
from benchmarks.symbolic_workloads import var_name

# the project is imported inside functions: the cold-start child process (benchmarks.symbolic_cold) imports
# this module before it starts its clock and must not have the compiler loaded by then
if TYPE_CHECKING:
    from rewrite import UOp
    from rewrite.uop import ConstValue

CHECK_POINTS = 16  # random points per expression for the untimed equivalence check


# ---------------------------------------------------------------------------------------------- simplifiers


def fast_batch(exprs: Sequence[UOp]) -> tuple[UOp, ...]:
    """The fast rules on the batch as one graph (a kernel stage rewrites the kernel's whole AST at once)."""
    from rewrite import UOp
    from rules.symbolic import simplify_fast

    return simplify_fast(UOp.sink(*exprs)).src


def full_batch(exprs: Sequence[UOp]) -> tuple[UOp, ...]:
    """Fast rules, one e-graph for the results the e-graph may still shrink, fast rules again, shared factors taken
    out of sums (rules.simplify's order and its test `rules.worth_saturating`, batched as the pipeline's symbolic
    stage does). rules.eqsat, and with it the e-graph's code, is imported only when some result needs it."""
    from rules import factor_final, worth_saturating

    fast = fast_batch(exprs)
    worth = [u for u in dict.fromkeys(fast) if worth_saturating(u)]
    if worth:
        from rules.eqsat import saturate_fast_batch

        sat = dict(zip(worth, saturate_fast_batch(worth), strict=True))
        fast = fast_batch([sat.get(u, u) for u in fast])
    return tuple(factor_final(u) for u in fast)


def full_each(exprs: Sequence[UOp]) -> list[UOp]:
    import rules  # noqa: F401 -- installs UOp.simplify

    return [e.simplify() for e in exprs]


def fast_each(exprs: Sequence[UOp]) -> list[UOp]:
    from rules.symbolic import simplify_fast

    return [simplify_fast(e) for e in exprs]


@contextlib.contextmanager
def no_disk_cache() -> Iterator[None]:
    from rewrite.env import Context

    with Context(CACHE=0):
        yield


def saturate_all(fast: Sequence[UOp]) -> object:
    """Saturation forced on every expression of a fast-rules result (not only what rules.worth_saturating lets
    through): what the e-graph costs when it runs on a whole kernel batch."""
    from rules.eqsat import saturator

    return saturator(fast_tier=True).run(fast)


def saturate_each(fast: Sequence[UOp]) -> object:
    """One e-graph call per expression (the e-graph persists across them, as in one process)."""
    from rules.eqsat import saturator

    sat = saturator(fast_tier=True)
    return [sat.run([u]) for u in fast]


def clear_fixed_points() -> None:
    """The fast rules' fixed points kept across calls (rules.symbolic.FIXED_POINTS), emptied: a timed run of the
    rules then rewrites its expressions instead of looking up an earlier run's results."""
    from rules.symbolic import FIXED_POINTS

    FIXED_POINTS.clear()


def forget_egraph() -> None:
    """An empty memory cache and an e-graph holding the rules alone: the next batch starts from scratch."""
    from rules.eqsat import saturator

    saturator(fast_tier=True).forget()
    clear_fixed_points()


def clear_memory_cache() -> None:
    """The e-graph's memory cache and the factoring's (rules.linear.factor_sums), and the fast rules' fixed points,
    emptied."""
    from rules.eqsat import saturator
    from rules.linear import clear_factor_cache

    saturator(fast_tier=True).clear_memory()
    clear_factor_cache()
    clear_fixed_points()


def nodes(u: Any) -> int:
    """Unique nodes of one expression, variables and ranges as leaves (their bound operands not counted);
    works on our UOps and tinygrad's alike."""
    seen: set[int] = set()
    stack = [u]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op.name not in ("PARAM", "RANGE", "BUFFER"):
            stack.extend(n.src)
    return len(seen)


def total_nodes(exprs: Sequence[Any]) -> int:
    return sum(nodes(e) for e in exprs)


# ---------------------------------------------------------------------------------------------- checking


def _is_variable(u: UOp) -> bool:
    from rewrite import Ops

    return u.op is Ops.RANGE or (u.op is Ops.PARAM and var_name(u) is not None)


def _draw(rng: random.Random, u: UOp) -> ConstValue:
    v = rng.randint(int(u.vmin), int(u.vmax))
    return bool(v) if u.dtype.scalar.is_bool else v


def check_equal(orig: Sequence[UOp], results: dict[str, Sequence[Any]], tleaves: dict[Any, Any] | None,
                seed: int = 0) -> dict[str, str]:
    """Per simplifier: how many results differ from their original at some random point of its variables,
    and how many could not be evaluated (an op the small tinygrad evaluator here lacks)."""
    rng = random.Random(seed)
    wrong: dict[str, set[int]] = {k: set() for k in results}
    unchecked: dict[str, set[int]] = {k: set() for k in results}
    for i, e in enumerate(orig):
        leaves = [u for u in e.toposort() if _is_variable(u)]
        for _ in range(CHECK_POINTS):
            point = {u: _draw(rng, u) for u in leaves}
            by_name: dict[str, ConstValue] = {u.render(): v for u, v in point.items()}
            want = e.evaluate(by_name)
            for label, res in results.items():
                if i in wrong[label] or i in unchecked[label]:
                    continue
                try:
                    if label == "tinygrad":
                        assert tleaves is not None
                        got = tinygrad_eval(res[i], {tleaves[u]: v for u, v in point.items() if u in tleaves})
                    else:
                        got = res[i].evaluate(by_name)
                except Untranslatable:
                    unchecked[label].add(i)
                    continue
                if got != want:
                    wrong[label].add(i)
    return {k: f"{len(wrong[k])}" + (f" ({len(unchecked[k])} unchecked)" if unchecked[k] else "") for k in results}
