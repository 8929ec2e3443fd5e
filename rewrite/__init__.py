"""The rewrite engine: UOps, dtypes, the rule DSL and graph_rewrite. Imports nothing else of this project."""

from rewrite.dsl import Pat, Rule, RuleSet, const, fold, op, var
from rewrite.dtype import AddrSpace, DType, PtrDType, dtypes, promote
from rewrite.engine import graph_rewrite, substitute
from rewrite.env import knob_int as _knob_int
from rewrite.errors import (
    ArityError,
    CompilerError,
    DTypeError,
    EvalError,
    KnobError,
    PluginError,
    RewriteLoopError,
    RuleError,
    ShapeError,
    SpecViolation,
    UOpError,
    install_excepthook,
)
from rewrite.ops import AxisType, GroupOp, Ops
from rewrite.trace import tracing
from rewrite.uop import BufferArg, ParamArg, UOp

if _knob_int("VIZ"):  # the viewer records from the first rewrite on (rewrite.viz); off, nothing is imported
    from rewrite.viz.capture import start_from_env

    start_from_env()
install_excepthook()  # an uncaught CompilerError is one line unless DEBUG>=1 (rewrite.errors.install_excepthook)

__all__ = [
    "AddrSpace", "ArityError", "AxisType", "BufferArg", "CompilerError", "DType", "DTypeError", "EvalError",
    "GroupOp", "KnobError", "Ops", "ParamArg", "Pat", "PluginError", "PtrDType", "RewriteLoopError", "Rule",
    "RuleError", "RuleSet", "ShapeError", "SpecViolation", "UOp", "UOpError", "const", "dtypes", "fold",
    "graph_rewrite", "op", "promote", "substitute", "tracing", "var",
]
