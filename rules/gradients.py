"""Reverse-mode differentiation as declarative rules: one named gradient rule per primitive op.

A gradient rule matches a forward node and, given the gradient flowing into that node (`ctx`, a UOp of the
node's dtype and shape), returns the gradients of its sources: a tuple aligned with `node.src` (None for a
source that gets none: a WHERE's condition, a movement op's shape operands), or a dict {descendant: gradient}
for a rule that steps over a non-differentiable idiom (|x| is built from BITCAST and AND). Rules are written
like the math (`grad-mul`: d(a*b) = (g*b, g*a)); their right-hand sides compute, so they are callables over
the captures and `ctx`. Binary patterns are `ordered=True`: the result is aligned with the sources.

`gradient(root, targets)` walks the forward graph once in reverse topological order and applies the rules, so
the result is a lazy UOp graph over the same nodes that the normal pipeline realizes and fuses; nothing is
evaluated here. Conventions:
  * only floating-point sources receive gradients (an integer or bool source is a constant to the derivative);
  * DETACH stops the gradient; CONTIGUOUSBACKWARD makes the gradient flowing through it contiguous;
  * ties go halves: MAX(a, b) with a == b gives g/2 to each side (as torch.maximum and tinygrad), and REDUCE
    MAX splits g evenly among the elements equal to the maximum (as torch.amax and tinygrad);
  * REDUCE MUL is exact with zeros: the gradient of an element is the product of the others, also when the
    product is zero (torch does the same);
  * POW(a, b): d/da = b * a**(b-1), d/db = ret * ln(a), taken as 0 where a == 0 (torch's choice);
  * the gradient of a FUNCTION is a FUNCTION: its body holds the gradients of the body with respect to its
    PARAMs, driven by new PARAMs for the incoming gradients, and it is called on the forward arguments and
    those gradients. Nothing is inlined; the backward body recomputes what it needs from the arguments.
  * an elementwise unit (a FUNCTION whose arg is an `ElementwiseUnit`) states its own derivative: its body is
    TUPLE(value, d value / d a_0, ..., d value / d a_n-1), and its gradient is g times those outputs. The front
    end's accurate exp, tanh, sigmoid, erf, ... are built from BITCAST, shifts and polynomials, whose
    derivative is not the function's: as units they differentiate as the mathematical function does. The
    derivative outputs are only computed when a gradient reads them (the Callify stage inlines each GETTUPLE
    alone). A unit is differentiated once: its derivative outputs have no gradient of their own.
  * a VJP unit (a FUNCTION whose arg is a `VjpUnit`) has a registered vector-Jacobian product instead: its
    gradient is whatever graph that function builds from the incoming gradient and the arguments (an ordinary
    graph, differentiable again).
A float node that receives a gradient but has no rule raises GradientError naming the op and how to go on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from rewrite import Ops, Rule, RuleSet, UOp, dtypes, op, var
from rewrite.derive import fmt_shape, shape_values
from rewrite.errors import GradientError
from rewrite.stores import indexed_store, scatter_add, scatter_store

_LN2 = math.log(2.0)
a, b, c, s, s2 = var("a"), var("b"), var("c"), var("s"), var("s2")
fn = var("fn")


def zeros_like(u: UOp) -> UOp:
    return u.const_like(0)


@dataclass(frozen=True)
class ElementwiseUnit:
    """A FUNCTION's arg: the FUNCTION is the elementwise function `name`, whose body is TUPLE(value, d value /
    d a_0, ...): one partial derivative per argument, each of the value's shape (see the module docstring)."""

    name: str


@dataclass(frozen=True)
class VjpUnit:
    """A FUNCTION's arg: the FUNCTION (one output, its body built over PARAM k for args[k]) is differentiated by
    the vector-Jacobian product registered as `name` (`register_vjp`), called with `params`, instead of through
    its body: an operation whose best backward is not the reverse of its best forward (a strided transposed
    convolution's input gradient is a strided convolution)."""

    name: str
    params: tuple = ()


# name -> vjp(g, args, params): the gradients of the args (a tuple aligned with them, None for one that gets
# none), lazy UOps of each arg's dtype and shape, given g flowing into the output
VJPS: dict[str, Callable[[UOp, tuple[UOp, ...], tuple], tuple[UOp | None, ...]]] = {}


def register_vjp(name: str, vjp: Callable[[UOp, tuple[UOp, ...], tuple], tuple[UOp | None, ...]]) -> None:
    """Make `vjp` the gradient of the VjpUnit FUNCTIONs named `name` (a module registers its own at import)."""
    VJPS[name] = vjp


def vjp_unit(name: str, params: tuple, value: UOp, args: Sequence[UOp]) -> UOp:
    """The value of FUNCTION(TUPLE(value), *args) with arg VjpUnit(name, params): `value` is built over PARAM k
    standing for args[k]; its gradient is VJPS[name]'s."""
    fn = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (value,)), *args), VjpUnit(name, tuple(params)))
    return UOp(Ops.GETTUPLE, (fn,), 0)


def unit(name: str, value: UOp, partials: Sequence[UOp], args: Sequence[UOp]) -> UOp:
    """The value of the elementwise unit FUNCTION(TUPLE(value, *partials), *args) (arg ElementwiseUnit(name)):
    `value` and `partials` are built over PARAM k standing for args[k] (same shapes and dtypes)."""
    if len(partials) != len(args) or any(d.shape != value.shape or d.dtype is not value.dtype for d in partials):
        raise GradientError(f"unit {name}: needs one partial derivative per argument ({len(args)}), each "
                            f"{fmt_shape(value.shape)} {value.dtype.name} like the value; got "
                            f"{[(fmt_shape(d.shape), d.dtype.name) for d in partials]}")
    fn = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (value, *partials)), *args), ElementwiseUnit(name))
    return UOp(Ops.GETTUPLE, (fn,), 0)


# ---------------------------------------------------------------- rule bodies (module level: rules are pure)


def _cos(a: UOp) -> UOp:
    return (a.const_like(math.pi / 2) - a).sin()


def _max_grad(ctx: UOp, a: UOp, b: UOp) -> tuple:
    zero, half = zeros_like(ctx), ctx * 0.5
    return ((a > b).where(ctx, a.eq(b).where(half, zero)), (b > a).where(ctx, a.eq(b).where(half, zero)))


def _pow_grad(ctx: UOp, ret: UOp, a: UOp, b: UOp) -> tuple:
    da = ctx * b * a.pow(b - 1.0)
    db = a.eq(0.0).where(zeros_like(ctx), ctx * ret * a.log2() * _LN2)
    return (da, db)


def _expand_grad(ctx: UOp, ret: UOp, a: UOp) -> tuple:
    """Sum over the broadcast axes; half-precision gradients are summed in float32 (as the front end's sum)."""
    axes = tuple(i for i, (x, y) in enumerate(zip(a.shape, ret.shape, strict=True)) if x != y)
    if not axes:
        return (ctx, None)
    if ctx.dtype.itemsize < 4:
        return (ctx.cast(dtypes.float32).sum(axes).cast(ctx.dtype), None)
    return (ctx.sum(axes), None)


def _permute_grad(ctx: UOp, ret: UOp) -> tuple:
    order = cast(tuple, ret.arg)
    return (ctx.permute(tuple(order.index(i) for i in range(len(order)))),)


def _pad_grad(ctx: UOp, ret: UOp, a: UOp) -> tuple:
    lo = shape_values(ret.src[1])
    return (ctx.shrink(lo, tuple(x + d for x, d in zip(lo, a.shape, strict=True))), None, None)


def _shrink_grad(ctx: UOp, ret: UOp, a: UOp) -> tuple:
    lo, hi = shape_values(ret.src[1]), shape_values(ret.src[2])
    return (ctx.pad(lo, tuple(d - e for d, e in zip(a.shape, hi, strict=True))), None, None)


def _replicated_grad(ctx: UOp, a: UOp) -> tuple:
    """REPLICATED keeps the first slice of its axes (the rest are equal copies; on a shard axis, device 0's
    block), so the gradient lands in that slice and the copies get zero: a broadcast's gradient is g, not n*g."""
    return (ctx.pad((0,) * len(a.shape), tuple(d - c for d, c in zip(a.shape, ctx.shape, strict=True))),)


def _stack_grad(ctx: UOp, ret: UOp) -> tuple:
    rest = ctx.shape[1:]
    return tuple(ctx.shrink((i, *(0,) * len(rest)), (i + 1, *rest)).reshape(rest) for i in range(len(ret.src)))


def _index_grad(ctx: UOp, ret: UOp, a: UOp) -> tuple:
    """INDEX(a, i_0, ..., i_m-1) reads a[i_0[k_0], i_1[k_1], ...] (an outer product of the index vectors; a
    ()-shaped index drops its axis). Its gradient adds ctx back at the positions read: a scatter-add
    (rewrite.stores) of ctx's rows into zeros of a's shape, at the flat positions sum(i_j * stride_j) over the
    indexed axes. O(indices x row) after the zero fill; duplicates accumulate. A position outside its axis (a
    read of 0) adds nothing: with several indices it is sent to -1, which the scatter skips."""
    idxs = ret.src[1:]
    m = len(idxs)
    sizes, rest = a.shape[:m], a.shape[m:]
    lead = tuple(i.shape[0] for i in idxs if i.shape)
    n = math.prod(sizes)
    dt = dtypes.int64 if n >= 2**31 or any(i.dtype.itemsize == 8 for i in idxs) else dtypes.int32
    flat: UOp | None = None
    inside: UOp | None = None
    stride, pos = 1, len(lead)
    for i, size in zip(reversed(idxs), reversed(sizes), strict=True):
        if i.shape:
            pos -= 1
            i = i.reshape(tuple(size_k if k == pos else 1 for k, size_k in enumerate(lead))).expand(lead) \
                if len(lead) > 1 else i
        else:
            i = i.reshape((1,) * len(lead)).expand(lead) if lead else i
        i = i.cast(dt) if i.dtype is not dt else i
        if m > 1:
            ok = (i.const_like(-1) < i) & (i < i.const_like(size))
            inside = ok if inside is None else inside & ok
        term = i if stride == 1 else i * i.const_like(stride)
        flat = term if flat is None else flat + term
        stride *= size
    assert flat is not None
    if inside is not None:
        flat = inside.where(flat, flat.const_like(-1))
    k = math.prod(lead)
    zeros = UOp.const(0, ctx.dtype).reshape((1,) * (1 + len(rest))).expand((n, *rest))
    g = scatter_add(zeros, flat.reshape((k,)), ctx.reshape((k, *rest)))
    return (g.reshape(a.shape), *(None,) * m)


def _after_store_grad(ctx: UOp, ret: UOp) -> dict[UOp, UOp]:
    """AFTER(t, STORE(INDEX(t, i), ...)) (rewrite.stores): a scatter-add passes ctx to t whole and gives each
    added row v[j] the gradient at its position, INDEX(ctx, i); a plain scatter gives t ctx with the written
    rows zeroed and each written row the gradient at its position (for duplicates every one, as torch's
    index_put does)."""
    out: dict[UOp, UOp] = {}
    for s in ret.src[1:]:
        st = indexed_store(s)
        if st is None:
            raise GradientError(f"gradient: AFTER {ret.short()} holds a whole-buffer store (an assignment); only "
                                f"scatters through an INDEX are differentiable")
        got = UOp(Ops.INDEX, (ctx, st.index))
        out[st.value] = got if st.value not in out else out[st.value] + got
        if not st.accumulate:
            ctx = scatter_store(ctx, st.index, ctx.const_like(0).index(st.index))
    out[ret.src[0]] = ctx
    return out


def _reduce_axes(ret: UOp) -> tuple[int, ...]:
    return cast(tuple, ret.arg)[1]


def _reduce_add_grad(ctx: UOp, a: UOp) -> tuple:
    return (ctx.expand(a.shape),)


def _reduce_max_grad(ctx: UOp, ret: UOp, a: UOp) -> tuple:
    hit = a.eq(ret.expand(a.shape)).cast(a.dtype)
    count = hit.sum(_reduce_axes(ret)).expand(a.shape)
    return (hit / count * ctx.expand(a.shape),)


def _reduce_mul_grad(ctx: UOp, ret: UOp, a: UOp) -> tuple:
    axes = _reduce_axes(ret)
    is_zero = a.eq(0.0)
    zeros = is_zero.cast(a.dtype).sum(axes).expand(a.shape)  # zeros in each reduced group
    nonzero_prod = is_zero.where(a.const_like(1.0), a).prod(axes).expand(a.shape)
    others = zeros.eq(0.0).where(ret.expand(a.shape) / a,
                                 (zeros.eq(1.0) & is_zero).where(nonzero_prod, zeros_like(a)))
    return (others * ctx.expand(a.shape),)


def _copy_grad(ctx: UOp, a: UOp) -> tuple:
    dev = a.device
    return (ctx if dev is None or ctx.device == dev else ctx.copy(dev),)


def _abs_grad(ctx: UOp, x: UOp) -> dict:
    """|x| as the front end builds it (clear the sign bit): g * sign(x), 0 at x == 0 (as torch)."""
    zero = zeros_like(ctx)
    return {x: (x > 0.0).where(ctx, (x < 0.0).where(-ctx, zero))}


def _is_abs(x: UOp, ret: UOp, m: UOp) -> bool:
    while m.op in (Ops.RESHAPE, Ops.EXPAND):  # a broadcast constant
        m = m.src[0]
    return (m.op is Ops.CONST and ret.dtype is x.dtype and x.dtype.is_float
            and cast(tuple, m.arg)[0] == (1 << (x.dtype.bits - 1)) - 1)


_VIEWS = (Ops.EXPAND, Ops.RESHAPE, Ops.PERMUTE, Ops.CAST, Ops.SHRINK)


def _layout_copy_source(v: UOp) -> UOp | None:
    """x when v is a copy of x in another layout read back in x's own (`reshape(permute(contiguous(permute(
    reshape(x)))))` with the permutes inverse to each other and the outer shape x's: matmul's column panels,
    tensor.nn._panels), else None; also through a copy of x padded with zeros after its end and read back shrunk to
    x's shape (panels of a ragged column count)."""
    if v.op is Ops.SHRINK:
        x = _layout_copy_source(v.src[0])
        zeros = all(not b for b in v.src[1].arg[0]) if v.src[1].op is Ops.VCONST else False  # type: ignore[index]
        if x is None or x.op is not Ops.PAD or x.src[0].shape != v.shape or not zeros or x.src[1].op is not Ops.VCONST:
            return None
        return x.src[0] if all(not b for b in x.src[1].arg[0]) else None  # type: ignore[index]  # VCONST: (values,)
    outer = v.src[0] if v.op is Ops.RESHAPE else v
    if outer.op is not Ops.PERMUTE or outer.src[0].op is not Ops.CONTIGUOUS:
        return None
    inner = outer.src[0].src[0]
    if inner.op is not Ops.PERMUTE:
        return None
    q, p = cast(tuple, outer.arg), cast(tuple, inner.arg)
    if any(p[q[i]] != i for i in range(len(q))):
        return None
    x = inner.src[0]
    if (x.op is Ops.RESHAPE) != (v.op is Ops.RESHAPE):
        return None
    x = x.src[0] if x.op is Ops.RESHAPE else x
    return x if x.shape == v.shape else None


def _read_through(u: UOp) -> UOp:
    """u with a layout copy in its chain of views replaced by the copy's source. The gradient of a product reads
    the other operand, and a copy made for the forward's access pattern (matmul's column panels of w) is the
    wrong one for the backward's (dY @ w^T reads w along its rows): read w itself, whose own layout the
    backward's register tile then uses."""
    v = u
    while v.op in _VIEWS:
        if (x := _layout_copy_source(v)) is not None:
            return u.substitute({v: x})
        v = v.src[0]
    return u


def _mul_grad(ctx: UOp, a: UOp, b: UOp) -> tuple:
    return (ctx * _read_through(b), ctx * _read_through(a))


def _gettuple_grad(ctx: UOp, ret: UOp, fn: UOp) -> tuple:
    n = len(fn.src[0].src)
    return (tuple(ctx if i == ret.arg else None for i in range(n)),)


def _unit_grad(ctx: tuple, fn: UOp) -> tuple:
    """d/da_k = g * (output 1 + k): the unit's own partial derivatives."""
    if any(g is not None for g in ctx[1:]):
        name = cast(ElementwiseUnit, fn.arg).name
        raise GradientError(f"gradient: the derivative of {name} is itself not differentiable (an elementwise "
                            f"unit is differentiated once); second derivatives through {name} are not supported")
    g = ctx[0]
    if g is None:
        return (None,) * len(fn.src)
    return (None, *(g * UOp(Ops.GETTUPLE, (fn,), 1 + k) for k in range(len(fn.src) - 1)))


def _vjp_grad(ctx: tuple, fn: UOp) -> tuple:
    """A VjpUnit FUNCTION: its registered vector-Jacobian product on the incoming gradient, checked."""
    unit_arg = cast(VjpUnit, fn.arg)
    g, args = ctx[0], fn.src[1:]
    if g is None:
        return (None,) * len(fn.src)
    vjp = VJPS.get(unit_arg.name)
    if vjp is None:
        raise GradientError(f"gradient: no vector-Jacobian product is registered for the unit {unit_arg.name!r} "
                            f"(register_vjp); the known ones are {sorted(VJPS)}")
    grads = tuple(vjp(g, args, unit_arg.params))
    if len(grads) != len(args) or any(d is not None and (d.shape != a.shape or d.dtype is not a.dtype)
                                      for d, a in zip(grads, args, strict=False)):
        raise GradientError(f"gradient: the vector-Jacobian product of {unit_arg.name!r} must give one gradient per "
                            f"argument ({[(fmt_shape(a.shape), a.dtype.name) for a in args]}), each of the "
                            f"argument's shape and dtype or None; it gave "
                            f"{[None if d is None else (fmt_shape(d.shape), d.dtype.name) for d in grads]}")
    return (None, *grads)


def _function_grad(ctx: tuple, fn: UOp) -> tuple:
    """FUNCTION(TUPLE(outs), args...) -> FUNCTION(TUPLE(d outs / d PARAM k ...), args..., incoming grads...)."""
    body, args = fn.src[0], fn.src[1:]
    nargs = len(args)
    seeds: dict[UOp, UOp] = {}
    extra: list[UOp] = []
    for out, g in zip(body.src, ctx, strict=True):
        if g is None:
            continue
        p = UOp.param(nargs + len(extra), g.dtype, g.shape, _single_device(g))
        seeds[out] = p if out not in seeds else seeds[out] + p
        extra.append(g)
    params = _own_params(body)
    wanted = [k for k in range(nargs) if args[k].dtype.is_float and k in params]
    found = backprop(seeds, [params[k] for k in wanted])
    outs = [g if g is not None else zeros_like(params[k]) for k, g in zip(wanted, found, strict=True)]
    if not outs:
        return (None,) * len(fn.src)
    bwd = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, tuple(outs)), *args, *extra))
    grads: list[UOp | None] = [None] * len(fn.src)
    for i, k in enumerate(wanted):
        grads[k + 1] = UOp(Ops.GETTUPLE, (bwd,), i)
    return tuple(grads)


def _own_params(body: UOp) -> dict[int, UOp]:
    """slot -> PARAM for the positional PARAMs a FUNCTION body binds: not those inside a nested FUNCTION's or
    CALL's body (an elementwise unit inside a traced function has its own PARAM 0, often of another shape)."""
    out: dict[int, UOp] = {}
    seen, todo = {body}, [body]
    while todo:
        u = todo.pop()
        if u.op is Ops.PARAM and isinstance(slot := getattr(u.arg, "slot", None), int):
            out[slot] = u
        for x in u.src[1:] if u.op in (Ops.FUNCTION, Ops.CALL) else u.src:
            if x not in seen:
                seen.add(x)
                todo.append(x)
    return out


def _single_device(u: UOp) -> str | None:
    d = u.device
    return d if isinstance(d, str) else None


# ---------------------------------------------------------------- the rules

ret = "ret"
# fmt: off
gradients = RuleSet("gradients", [
    # elementwise arithmetic
    Rule("grad-add",  op.ADD(a, b, name=ret, ordered=True),  lambda ctx: (ctx, ctx)),
    Rule("grad-sub",  op.SUB(a, b, name=ret, ordered=True),  lambda ctx: (ctx, -ctx)),
    Rule("grad-mul",  op.MUL(a, b, name=ret, ordered=True),  _mul_grad),
    Rule("grad-neg",  op.NEG(a, name=ret),                   lambda ctx: (-ctx,)),
    Rule("grad-div",  op.DIV(a, b, name=ret, ordered=True),  lambda ctx, ret, b: (ctx / b, -ctx * ret / b)),
    Rule("grad-recip", op.RECIP(a, name=ret),                lambda ctx, ret: (-ctx * ret * ret,)),
    Rule("grad-mulacc", op.MULACC(a, b, c, name=ret),        lambda ctx, a, b: (ctx * b, ctx * a, ctx)),
    Rule("grad-max",  op.MAX(a, b, name=ret, ordered=True),  _max_grad),
    Rule("grad-where", op.WHERE(c, a, b, name=ret),
         lambda ctx, c: (None, c.where(ctx, zeros_like(ctx)), c.where(zeros_like(ctx), ctx))),
    Rule("grad-cast", op.CAST(a, name=ret),                  lambda ctx, a: (ctx.cast(a.dtype),)),
    Rule("grad-trunc", op.TRUNC(a, name=ret),                lambda ctx: (zeros_like(ctx),)),
    # transcendental
    Rule("grad-exp2", op.EXP2(a, name=ret),                  lambda ctx, ret: (ctx * ret * _LN2,)),
    Rule("grad-log2", op.LOG2(a, name=ret),                  lambda ctx, a: (ctx / (a * _LN2),)),
    Rule("grad-sin",  op.SIN(a, name=ret),                   lambda ctx, a: (ctx * _cos(a),)),
    Rule("grad-sqrt", op.SQRT(a, name=ret),                  lambda ctx, ret: (ctx / (ret * 2.0),)),
    Rule("grad-pow",  op.POW(a, b, name=ret, ordered=True),  _pow_grad),
    # an idiom over non-differentiable ops: |x| = bitcast(bitcast(x) & 0x7f..f)
    Rule("grad-abs",  op.BITCAST(op.AND(op.BITCAST(var("x")), var("m")), name=ret), _abs_grad, when=_is_abs),
    # movement
    Rule("grad-reshape", op.RESHAPE(a, s, name=ret),         lambda ctx, a: (ctx.reshape(a.shape), None)),
    Rule("grad-expand",  op.EXPAND(a, s, name=ret),          _expand_grad),
    Rule("grad-permute", op.PERMUTE(a, name=ret),            _permute_grad),
    Rule("grad-pad",     op.PAD(a, s, s2, name=ret),         _pad_grad),
    Rule("grad-shrink",  op.SHRINK(a, s, s2, name=ret),      _shrink_grad),
    Rule("grad-flip",    op.FLIP(a, name=ret),               lambda ctx, ret: (ctx.flip(ret.arg),)),
    Rule("grad-stack",   op.STACK(name=ret),                 _stack_grad),
    Rule("grad-copy",    op.COPY(a, name=ret),               _copy_grad),
    Rule("grad-replicated", op.REPLICATED(a, name=ret),      _replicated_grad),
    Rule("grad-index",   op.INDEX(a, name=ret, rest=True),   _index_grad),
    Rule("grad-scatter", op.AFTER(a, name=ret, rest=True),   _after_store_grad,
         when=lambda ret: any(indexed_store(s) is not None for s in ret.src[1:])),
    # reductions
    Rule("grad-reduce-add", op.REDUCE(a, name=ret), _reduce_add_grad, when=lambda ret: ret.arg[0] is Ops.ADD),
    Rule("grad-reduce-max", op.REDUCE(a, name=ret), _reduce_max_grad, when=lambda ret: ret.arg[0] is Ops.MAX),
    Rule("grad-reduce-mul", op.REDUCE(a, name=ret), _reduce_mul_grad, when=lambda ret: ret.arg[0] is Ops.MUL),
    # markers
    Rule("grad-contiguous",          op.CONTIGUOUS(a, name=ret),         lambda ctx: (ctx,)),
    Rule("grad-contiguous-backward", op.CONTIGUOUSBACKWARD(a, name=ret), lambda ctx: (ctx.contiguous(),)),
    Rule("grad-detach",              op.DETACH(a, name=ret),             lambda ctx: (None,)),
    # functions
    Rule("grad-gettuple", op.GETTUPLE(fn, name=ret), _gettuple_grad),
    Rule("grad-elementwise-unit", op.FUNCTION(name="fn"), _unit_grad,
         when=lambda fn: isinstance(fn.arg, ElementwiseUnit)),
    Rule("grad-custom-vjp", op.FUNCTION(name="fn"), _vjp_grad, when=lambda fn: isinstance(fn.arg, VjpUnit)),
    Rule("grad-function", op.FUNCTION(name="fn"), _function_grad),
])
# fmt: on


# ---------------------------------------------------------------- the walk


def _accumulate(old: object, new: object) -> object:
    if old is None:
        return new
    if new is None:
        return old
    if isinstance(old, tuple):  # a FUNCTION's gradient: one entry per output
        return tuple(_accumulate(x, y) for x, y in zip(old, cast(tuple, new), strict=True))
    return old + new  # type: ignore[operator]


def _data_src(u: UOp) -> tuple[UOp, ...]:
    """The sources a gradient can flow into: a FUNCTION's body is not one (its arguments are)."""
    return u.src[1:] if u.op is Ops.FUNCTION else u.src


def _receives(u: UOp) -> bool:
    return u.dtype.is_float or (u.op in (Ops.FUNCTION, Ops.GETTUPLE) and _function_of(u) is not None)


def _function_of(u: UOp) -> UOp | None:
    f = u if u.op is Ops.FUNCTION else u.src[0] if u.op is Ops.GETTUPLE else None
    return f if f is not None and f.op is Ops.FUNCTION else None


def _apply(node: UOp, g: object) -> Mapping[UOp, object] | tuple:
    m = gradients.matcher(node.op)
    res = m(node, g) if m is not None else None
    if res is None:
        dt = node.dtype.name
        raise GradientError(
            f"gradient: no gradient rule for {node.op.name} ({fmt_shape(node.shape)} {dt}), which lies between "
            f"the loss and a tensor that requires a gradient; detach() the operand that should not be "
            f"differentiated, or add a rule for {node.op.name} to rules.gradients")
    return cast("Mapping[UOp, object] | tuple", res[0])  # a gradient rule's result, not a rewritten UOp


def backprop(seeds: Mapping[UOp, UOp], targets: Sequence[UOp], topo: list[UOp] | None = None) -> list[UOp | None]:
    """The gradients of sum(root * seed for each root, seed in seeds) with respect to each target: one lazy UOp
    per target (None when no path leads from a root to it). The forward graph is walked once, parents first.
    `topo`: UOp.toposort_of(seeds' roots), when the caller has it."""
    if topo is None:
        topo = (UOp.sink(*seeds) if len(seeds) != 1 else next(iter(seeds))).toposort()
    wanted = set(targets)
    detach = Ops.DETACH
    on_path: set[UOp] = set()  # (set operations: the walks below run at C speed over each node's sources)
    for n in topo:  # children first: a node is on a path if one of its data sources is (DETACH cuts)
        if n in wanted or (n.op is not detach and not on_path.isdisjoint(_data_src(n))):
            on_path.add(n)
    grads: dict[UOp, object] = dict(seeds)
    for n in reversed(topo):
        g = grads.get(n)
        if g is None or n not in on_path or on_path.isdisjoint(_data_src(n)):
            continue
        res = _apply(n, g)
        pairs = res.items() if isinstance(res, Mapping) else zip(n.src, res, strict=True)
        for x, gx in pairs:
            if gx is not None and x in on_path and _receives(x):
                grads[x] = _accumulate(grads.get(x), gx)
        if n not in wanted:
            del grads[n]  # keeps memory to the frontier (a target's gradient is the answer)
    return [grads.get(t) for t in targets]  # type: ignore[misc]


def gradient(root: UOp, targets: Sequence[UOp], seed: UOp | None = None, topo: list[UOp] | None = None
             ) -> list[UOp | None]:
    """d root / d target for each target, as lazy UOps; `seed` is the gradient flowing into root (default: ones,
    so a scalar root gives the plain derivative). `topo`: root.toposort(), when the caller has it."""
    if seed is None:
        seed = root.const_like(1)
    elif seed.shape != root.shape or seed.dtype is not root.dtype:
        raise GradientError(f"gradient: the seed is {fmt_shape(seed.shape)} {seed.dtype.name} but the root is "
                            f"{fmt_shape(root.shape)} {root.dtype.name}; pass a seed of the root's shape and dtype")
    if not root.dtype.is_float:
        raise GradientError(f"gradient: the root is {root.dtype.name}; only a floating-point value has a gradient "
                            f"(cast it to a float dtype first)")
    return backprop({root: seed}, targets, topo)


__all__ = ["VJPS", "ElementwiseUnit", "VjpUnit", "backprop", "gradient", "gradients", "register_vjp", "unit",
           "vjp_unit", "zeros_like"]
