"""The @function decorator: trace a Python function on Tensors into one FUNCTION node (the spec's graph capture).

Calling a decorated function:
1. finds every Tensor in the arguments (nested lists, tuples and dict values too), deduplicated by identity;
2. runs the Python function lazily on stand-ins whose UOps are PARAM(k) placeholders of the same dtype, shape
   and device, so the traced body mentions no concrete buffer;
3. turns any BUFFER the body captured from elsewhere (a global Tensor, a closure) into one more PARAM, passed as
   one more argument;
4. wraps the result(s) in a TUPLE and builds FUNCTION(TUPLE(body...), a_0, a_1, ...);
5. returns one GETTUPLE(FUNCTION, i) Tensor per result: a Tensor for a single return, a tuple for a tuple.

The same body for the same argument types is the same UOp (hash-consing), so a function traced twice shares
its graph. the lowering's Callify stage (lower/callify.py) substitutes the arguments back.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar, cast

import tensor.tensor as tt
from rewrite.ops import Ops
from rewrite.uop import BufferArg, UOp

F = TypeVar("F", bound=Callable)


def _collect(obj: object, out: dict[int, tt.Tensor]) -> None:
    if isinstance(obj, tt.Tensor):
        out.setdefault(id(obj), obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _collect(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _collect(o, out)


def _replace(obj: object, mapping: dict[int, tt.Tensor]) -> object:
    if isinstance(obj, tt.Tensor):
        return mapping[id(obj)]
    if isinstance(obj, list):
        return [_replace(o, mapping) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_replace(o, mapping) for o in obj)
    if isinstance(obj, dict):
        return {k: _replace(v, mapping) for k, v in obj.items()}
    return obj


def _outer_buffers(body: UOp) -> list[UOp]:
    """BUFFERs the body reaches without entering a nested FUNCTION's body (which has its own PARAMs)."""
    out, seen, todo = [], {body}, [body]
    while todo:
        u = todo.pop()
        if u.op is Ops.BUFFER:
            out.append(u)
        for s in u.src[1:] if u.op in (Ops.FUNCTION, Ops.CALL) else u.src:
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return sorted(out, key=lambda b: cast(BufferArg, b.arg).slot)


def trace(fn: Callable, args: tuple, kwargs: dict) -> tuple[UOp, list[str], bool]:
    """FUNCTION(TUPLE(results...), args...), each result's device, and whether fn returned a tuple."""
    found: dict[int, tt.Tensor] = {}
    _collect((args, kwargs), found)
    inputs = list(found.values())
    stand_ins = {id(t): tt.Tensor._wrap(UOp.param(k, t.dtype, t.shape, t.device), t.device)
                 for k, t in enumerate(inputs)}
    result = fn(*cast(tuple, _replace(args, stand_ins)), **cast(dict, _replace(kwargs, stand_ins)))
    many = isinstance(result, (tuple, list))
    results = list(result) if many else [result]
    if not results or not all(isinstance(r, tt.Tensor) for r in results):
        raise TypeError(f"@function {getattr(fn, '__name__', fn)!r}: must return a Tensor or a tuple of Tensors, "
                        f"got {type(result).__name__}")
    body = UOp(Ops.TUPLE, tuple(r.uop for r in results))
    arg_uops = [t.uop for t in inputs]
    captured = _outer_buffers(body)
    if captured:
        params = {b: UOp.param(len(arg_uops) + i, b.dtype, b.shape, b.buf_arg.device)
                  for i, b in enumerate(captured)}
        body = body.substitute(params)
        arg_uops += captured
    return UOp(Ops.FUNCTION, (body, *arg_uops)), [r.device for r in results], many


def function(fn: F) -> F:
    """Decorate a function of Tensors so that each call builds one FUNCTION node (see the module docstring)."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        f, devices, many = trace(fn, args, kwargs)
        outs = tuple(tt.Tensor._wrap(UOp(Ops.GETTUPLE, (f,), i), d) for i, d in enumerate(devices))
        return outs if many else outs[0]

    return cast(F, wrapper)  # functools.wraps: the wrapper takes and returns what fn does


__all__ = ["function", "trace"]
