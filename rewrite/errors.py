"""The project's typed errors: one small hierarchy, each saying what was wrong and how to fix it."""

from __future__ import annotations

import os
import sys
import traceback
from types import TracebackType


class CompilerError(Exception):
    """Base of every error this project raises on purpose."""


class UOpError(CompilerError):
    """An inconsistent UOp: wrong arity, operand dtypes or shapes. Raised when the node is built."""


class ShapeError(UOpError, ValueError):
    """Shapes that do not fit the op (broadcast mismatch, bad reshape, expand of a non-1 axis, bad axis)."""


class ShardingError(ShapeError):
    """A multi-device layout that does not fit the op: a shape not divisible by the device count, a reshape that
    splits the shard boundary, operands sharded on different axes or living on different device tuples."""


class DTypeError(UOpError, TypeError):
    """Operand dtypes that the op does not accept."""


class ArityError(UOpError, TypeError):
    """A wrong number of sources, or a source or argument of the wrong kind."""


class RuleError(CompilerError):
    """A malformed rule or rule set: found when the rule is defined, not when it first matches."""


class RewriteLoopError(CompilerError):
    """graph_rewrite exceeded its step budget; the message names the rules that kept firing."""


class SpecViolation(CompilerError):
    """A graph that breaks the spec tables, found by rewrite.spec.check; `violations` lists them one by one."""

    def __init__(self, message: str, violations: list[str] | None = None) -> None:
        super().__init__(message)
        self.violations: list[str] = violations if violations is not None else [message]


class EvalError(CompilerError):
    """The reference evaluator met an op or value it cannot evaluate (unbound variable, division by zero)."""


class VariableError(CompilerError, ValueError):
    """A symbolic variable that is unbound where a value is needed, bound outside its range, bound to two values
    in one realize, or a symbolic shape where an op needs a concrete one."""


class DeviceError(CompilerError):
    """An unknown or unavailable device, or a failed launch."""


class CollectiveError(DeviceError):
    """A cross-process (MPI) transfer or collective that cannot run: mpi4py missing, a bad rank, a shape that does
    not fit the collective. A collective that never finishes is not an error but an abort (devices/mpi.py)."""


class CudaError(DeviceError):
    """A CUDA driver call failed (`call`: the driver function, `code`: its CUresult, `name`: cuGetErrorName's)."""

    def __init__(self, msg: str, call: str = "", code: int = 0, name: str = "") -> None:
        super().__init__(msg)
        self.call, self.code, self.name = call, code, name


class OutOfMemoryError(DeviceError, MemoryError):
    """A buffer larger than the device can hold; raised before trying to allocate it."""


class ArgumentError(CompilerError, ValueError):
    """An argument value the op cannot take (a zero step, a NaN or infinite bound, an empty list of tensors)."""


class CompileError(CompilerError):
    """A device compiler rejected generated source; the message holds the source and the compiler's output."""


class KernelOptError(CompilerError):
    """An illegal kernel optimization (OptOp); the message says why."""


class KnobError(CompilerError, ValueError):
    """An environment knob (rewrite/env.py) with a value it does not allow, or an undeclared knob."""


class PluginError(CompilerError, RuntimeError):
    """A plug-in the engine looks up at run time (the simplifier behind UOp.simplify) is not registered."""


class GradientError(CompilerError):
    """A graph that cannot be differentiated: an op with no gradient rule on the path, or a bad seed."""


class JitError(CompilerError, RuntimeError):
    """A tensor.jit function that cannot be replayed: its first calls did different work, or read new data."""


# ---------------------------------------------------------------- how an uncaught error is shown

_PACKAGES = ("rewrite", "rules", "lower", "devices", "tensor")
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _ours(filename: str) -> bool:
    path = os.path.abspath(filename)
    return any(path.startswith(os.path.join(_ROOT, p) + os.sep) for p in _PACKAGES)


def short_report(err: CompilerError, tb: TracebackType | None) -> str:
    """One line for an uncaught project error: its type, the first line of its message, and the caller's line
    that led to it (the innermost traceback frame outside this project's packages)."""
    lines = str(err).splitlines() or [""]
    where = ""
    for frame, lineno in traceback.walk_tb(tb):
        if not _ours(frame.f_code.co_filename):
            where = f"{os.path.basename(frame.f_code.co_filename)}:{lineno}; "
    more = f" [+{len(lines) - 1} lines]" if len(lines) > 1 else ""
    return f"{type(err).__name__}: {lines[0]}{more} ({where}DEBUG=1 shows the traceback)"


def _excepthook(kind: type[BaseException], err: BaseException, tb: TracebackType | None) -> None:
    if isinstance(err, CompilerError):
        from rewrite.env import knob_int  # env imports this module

        try:
            full = knob_int("DEBUG") >= 1
        except CompilerError:  # a DEBUG value that is not allowed: show everything
            full = True
        if not full:
            print(short_report(err, tb), file=sys.stderr)
            return
    _previous_hook(kind, err, tb)


_previous_hook = sys.excepthook


def install_excepthook() -> None:
    """Show an uncaught project error (a CompilerError) as one line on stderr, the full traceback under DEBUG>=1.

    Why a sys.excepthook: it runs only for an exception that nothing caught, just before the interpreter exits (or
    the REPL prompts again), so it changes no control flow: `except ShapeError` works, pytest and IPython report
    errors their own way (neither calls sys.excepthook), and every other exception goes to the hook that was
    installed before, unchanged. Installed once, when `rewrite` is imported; a hook set later by someone else wins."""
    global _previous_hook
    if sys.excepthook is not _excepthook:
        _previous_hook = sys.excepthook
        sys.excepthook = _excepthook
