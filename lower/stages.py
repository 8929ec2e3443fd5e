"""The kernel half of the pipeline under its old name: everything lives in lower.pipeline (one table)."""

from __future__ import annotations

from lower.pipeline import PIPELINE, Lowering, as_target, lower_kernel
from lower.pipeline import symbolic as _symbolic_stage
from rewrite import UOp

KERNEL_STAGES = tuple(s for s in PIPELINE if s.scope == "kernel")


def _symbolic(ast: UOp, target: object) -> UOp:
    """The symbolic stage alone, for tests and tools that simplify a kernel outside the pipeline."""
    return _symbolic_stage(ast, Lowering.from_env(as_target(target)))


__all__ = ["KERNEL_STAGES", "as_target", "lower_kernel"]
