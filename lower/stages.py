"""The lowering pipeline as one ordered table of named stages (the spec's Lowering Pipeline).

Graph stages run once per realize on the whole tensor graph; kernel stages run on each kernel's AST, each a
graph_rewrite with a rule set or, for the few global steps, a function. Any stage's output can be printed
(`lower_kernel(..., upto=name)`) and checked against the spec (`rewrite.spec.check`).

| stage                 | where                | what |
|-----------------------|----------------------|------|
| callify               | lower.callify        | FUNCTION calls inlined: one graph of BUFFER leaves |
| split-reduce          | lower.split_reduce   | large reductions with small outputs become two kernels |
| rangeify              | lower.rangeify       | kernel split; movement ops become index math over RANGEs |
| symbolic              | rules.symbolic       | index arithmetic simplified (fast rules; egglog for the rest) |
| optimize              | lower.optimize       | OptOps (hand-coded heuristics or BEAM=n search); THREAD -> core_id |
| expand                | lower.expand         | UPCAST/UNROLL ranges become vector lanes |
| instruction-selection | rules.decompositions | ops the device lacks become ops it has |
| linearize             | lower.linearize      | accumulators, loop placement, the LINEAR program |
| render                | devices.*            | source text, compiled by the device |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devices import get_device
from devices.base import Target
from lower.linearize import linearize
from rewrite import Ops, RuleSet, UOp, dtypes, graph_rewrite


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[UOp, Target], UOp]  # (kernel AST, target) -> AST


_SATURATE_OPS = frozenset({Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE})


def _index_exprs(ast: UOp) -> list[UOp]:
    """The kernel's index expressions (addresses and gates) that still hold a div, mod or comparison."""
    out: dict[UOp, None] = {}
    for u in ast.toposort():
        cands = (u.src[1],) if u.op is Ops.INDEX and len(u.src) == 2 else u.src[2:] if u.op is Ops.LOAD else ()
        for e in cands:
            if e.shape == () and (e.dtype is dtypes.index or e.dtype is dtypes.bool) and \
                    any(x.op in _SATURATE_OPS for x in e.toposort()):
                out[e] = None
    return list(out)


def _symbolic(ast: UOp, target: Target) -> UOp:
    """Fast rules on the whole kernel; then the index expressions they leave with div, mod or comparisons that
    the e-graph may still shrink (rules.worth_saturating) go into one e-graph (rules.eqsat, cached by structure;
    EGGLOG=0 skips it), and the fast rules run again."""
    from rewrite.env import getenv
    from rules import worth_saturating
    from rules.symbolic import symbolic

    ast = graph_rewrite(ast, symbolic, name="symbolic")
    if not int(getenv("EGGLOG")) or not (exprs := [e for e in _index_exprs(ast) if worth_saturating(e)]):
        return ast
    from rules.eqsat import saturate_batch

    better = {e: r for e, r in zip(exprs, saturate_batch(exprs), strict=True) if r is not e}
    return graph_rewrite(ast.substitute(better), symbolic, name="symbolic") if better else ast


def _decompose(ast: UOp, target: Target) -> UOp:
    from rules.decompositions import decompositions_for

    device = get_device(target.device)
    rules: RuleSet = decompositions_for(device.supported_ops - getattr(device, "decompose", frozenset()))
    return graph_rewrite(ast, rules, name="instruction-selection") if len(rules) else ast


def _optimize(ast: UOp, target: Target, opts: list | None = None, bufs: tuple | None = None, name: str = "") -> UOp:
    """Apply `opts` (default: the hand-coded heuristics for the target; none with NOOPT=1), then lower
    THREAD axes to core_id and expand UPCAST/UNROLL axes into vector lanes."""
    from lower.expand import expand
    from lower.optimize import apply_opts, hand_coded, lower_threads
    from rewrite.env import getenv

    if opts is None:
        if getenv("NOOPT") or target.interpreted:
            opts = []
        elif int(getenv("BEAM")) > 0 and bufs is not None:
            from lower.search import beam_search

            opts = beam_search(ast, bufs, target, int(getenv("BEAM")), name=name)
        else:
            opts = hand_coded(ast, target)
    if int(getenv("DEBUG")) >= 3 and opts:
        print(f"opts: {opts}")
    return expand(lower_threads(apply_opts(ast, opts)), target)


def _fuses(target: Target) -> bool:
    """Whether reductions of products accumulate with a fused MULACC: an optimization (one rounding per step
    instead of two changes the result's last bits), so on when optimizing and the device has MULACC."""
    from rewrite.env import getenv

    device = get_device(target.device)
    return not getenv("NOOPT") and Ops.MULACC in device.supported_ops and \
        Ops.MULACC not in getattr(device, "decompose", frozenset())


KERNEL_STAGES: tuple[Stage, ...] = (
    Stage("symbolic", _symbolic),
    Stage("optimize", _optimize),
    Stage("symbolic-opt", _symbolic),
    Stage("instruction-selection", _decompose),
    Stage("symbolic-late", _symbolic),
    Stage("linearize", lambda ast, target: linearize(ast, _fuses(target))),
)


def as_target(where: Target | Any) -> Target:
    """A Target as given, or a device object's (or device name's) default target."""
    if isinstance(where, Target):
        return where
    if isinstance(where, str):
        return get_device(where).default_target()  # type: ignore[no-any-return]
    return where.default_target()  # type: ignore[no-any-return]


def lower_kernel(ast: UOp, target: Target | Any, upto: str | None = None, opts: list | None = None,
                 bufs: tuple | None = None, name: str = "") -> UOp:
    """Run the kernel stages on `ast` for `target` (a Target, or a device whose default target is meant),
    stopping after `upto` if given; returns the LINEAR. `opts` replaces the heuristics' choice of OptOps (a
    search tries candidates this way); `bufs` (the kernel's buffers) lets BEAM=n time candidates."""
    target = as_target(target)
    for st in KERNEL_STAGES:
        ast = _optimize(ast, target, opts, bufs, name) if st.name == "optimize" else st.run(ast, target)
        if st.name == upto:
            break
    return ast
