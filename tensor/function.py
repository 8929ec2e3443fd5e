"""The @function decorator: trace a Python function on Tensors into one FUNCTION node (the spec's graph capture);
@custom_vjp(bwd): the same for a function whose gradient is `bwd` rather than its traced body's.

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
from rewrite.errors import GradientError
from rewrite.ops import Ops
from rewrite.uop import BufferArg, UOp
from rules.gradients import VJPS, register_vjp, vjp_unit

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
    body, arg_uops = _bind_captured(UOp(Ops.TUPLE, tuple(r.uop for r in results)), [t.uop for t in inputs])
    return UOp(Ops.FUNCTION, (body, *arg_uops)), [r.device for r in results], many


def _bind_captured(body: UOp, args: list[UOp]) -> tuple[UOp, list[UOp]]:
    """A traced body over PARAMs 0..len(args)-1 with each BUFFER it captured from elsewhere turned into one more
    PARAM, and the arguments with those buffers appended."""
    captured = _outer_buffers(body)
    if not captured:
        return body, args
    params = {b: UOp.param(len(args) + i, b.dtype, b.shape, b.buf_arg.device) for i, b in enumerate(captured)}
    return body.substitute(params), args + captured


def function(fn: F) -> F:
    """Decorate a function of Tensors so that each call builds one FUNCTION node (see the module docstring)."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        f, devices, many = trace(fn, args, kwargs)
        outs = tuple(tt.Tensor._wrap(UOp(Ops.GETTUPLE, (f,), i), d) for i, d in enumerate(devices))
        return outs if many else outs[0]

    return cast(F, wrapper)  # functools.wraps: the wrapper takes and returns what fn does


def custom_vjp(bwd: Callable[..., object]) -> Callable[[F], F]:
    """`@custom_vjp(bwd)` on `f(*tensors, **static) -> Tensor`: each call is one FUNCTION node of f's traced body
    (as @function), whose gradient is `bwd(g, *tensors, **static)` instead of the body's: g is the gradient
    flowing into f's result, and bwd returns one gradient per positional Tensor, in order (a Tensor of that
    argument's shape, or None for none; a single Tensor for a one-argument f). Keyword arguments are static:
    hashable values both functions get (a stride, a scale). bwd builds an ordinary lazy graph, which is itself
    differentiable (second derivatives go through it). Tensors f reads from elsewhere (a global, a closure) are
    arguments too, but get no gradient. Like torch.autograd.Function and jax.custom_vjp: a straight-through
    estimator, a clipped or rescaled gradient, an operation whose best backward is not its forward's reverse
    (tensor.conv's conv2d and strided conv_transpose2d are, through the same rules.gradients.VjpUnit)."""

    def decorate(fn: F) -> F:
        name = _vjp_name(fn)

        def vjp(g: UOp, args: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
            count, static, devices, out_device = params  # the devices: g's UOp may be a constant of none
            ins = [tt.Tensor._wrap(a, d) for a, d in zip(args[:count], devices, strict=True)]
            got = bwd(tt.Tensor._wrap(g, out_device), *ins, **dict(static))
            grads = list(got) if isinstance(got, (tuple, list)) else [got]
            if len(grads) != count:
                raise GradientError(f"custom_vjp {name!r}: the backward gave {len(grads)} gradient(s) for {count} "
                                    f"Tensor argument(s); return one per argument (None for none)")
            out: list[UOp | None] = []
            for k, (t, d) in enumerate(zip(ins, grads, strict=True)):
                if d is not None and (not isinstance(d, tt.Tensor) or tuple(d.shape) != tuple(t.shape)):
                    what = f"shape {d.shape}" if isinstance(d, tt.Tensor) else type(d).__name__
                    raise GradientError(f"custom_vjp {name!r}: gradient {k} must be a Tensor of its argument's shape "
                                        f"{t.shape} (or None), got {what}")
                out.append(None if d is None else d.uop if d.dtype is t.dtype else d.uop.cast(t.dtype))
            return (*out, *(None,) * (len(args) - count))

        register_vjp(name, vjp)

        @functools.wraps(fn)
        def wrapper(*tensors: tt.Tensor, **static: object) -> tt.Tensor:
            for k, t in enumerate(tensors):
                if not isinstance(t, tt.Tensor):
                    raise TypeError(f"custom_vjp {name!r}: positional argument {k} is a {type(t).__name__}; the "
                                    f"positional arguments are the Tensors it differentiates, pass other values "
                                    f"by keyword")
            try:
                key = tuple(sorted(static.items()))
                hash(key)
            except TypeError:
                raise TypeError(f"custom_vjp {name!r}: keyword arguments are static and must be hashable, got "
                                f"{sorted(static)}") from None
            stand_ins = [tt.Tensor._wrap(UOp.param(k, t.dtype, t.shape, t.device), t.device)
                         for k, t in enumerate(tensors)]
            result = fn(*stand_ins, **static)
            if not isinstance(result, tt.Tensor):
                raise TypeError(f"custom_vjp {name!r}: must return one Tensor, got {type(result).__name__}")
            body, args = _bind_captured(result.uop, [t.uop for t in tensors])
            params = (len(tensors), key, tuple(t.device for t in tensors), result.device)
            return tt.Tensor._wrap(vjp_unit(name, params, body, args), result.device)

        return cast(F, wrapper)

    return decorate


def _vjp_name(fn: Callable) -> str:
    """A registry name for fn's VJP: its module and qualified name, numbered past the first of that name (the same
    program decorates in the same order, so names are stable from run to run)."""
    base = f"custom_vjp:{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    name, k = base, 1
    while name in VJPS:
        k += 1
        name = f"{base}#{k}"
    return name


__all__ = ["custom_vjp", "function", "trace"]
