"""Reference evaluators: the exact value of a UOp graph, with per-element meaning from rewrite.semantics.

`evaluate` computes a scalar expression (index math, constant folding checks, rule soundness tests);
`evaluate_graph` computes a tensor-level graph on numpy inputs. Both are slow on purpose: they are the
oracle, so every element goes through `exec_alu` / `exec_cast` / `exec_bitcast`, one element at a time.

An op that fails on a value (integer division by zero, a shift out of range) does not raise at once: its
result is poison, which every op passes on except WHERE, which drops the branch it does not select. So
`(x != 0).where(y // x, 0)` is 0 at x == 0, and the error is raised only if poison reaches the result.
Missing inputs, unbound or out-of-range variables and unsupported ops raise at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from rewrite.derive import fmt_shape, shape_values
from rewrite.dtype import DType, dtypes
from rewrite.errors import EvalError
from rewrite.ops import GroupOp, Ops
from rewrite.render import render
from rewrite.semantics import exec_alu, exec_bitcast, exec_cast, from_bytes, python_value_ok, round_to, to_bytes
from rewrite.stores import indexed_store
from rewrite.uop import UOp

Value = int | float | bool


class _Poison:
    """The result of an op that failed on its operands; carries the error raised if it reaches the output."""

    __slots__ = ("error",)

    def __init__(self, error: EvalError) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"<poison: {self.error}>"


def _postorder(root: UOp, children: Callable[[UOp], tuple[UOp, ...]]) -> list[UOp]:
    """Nodes reachable through `children`, children first; iterative so million-node chains work."""
    order: list[UOp] = []
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        n, done = stack.pop()
        if done:
            order.append(n)
        elif n not in seen:
            seen.add(n)
            stack.append((n, True))
            stack.extend((c, False) for c in reversed(children(n)) if c not in seen)
    return order


def _apply(op: Ops, dtype: DType, vals: tuple) -> object:
    """One element of an ALU op, CAST or BITCAST, with poison in and out."""
    if op is Ops.WHERE:
        c = vals[0]
        return c if isinstance(c, _Poison) else vals[1] if c else vals[2]
    for v in vals:
        if isinstance(v, _Poison):
            return v
    try:
        return exec_alu(op, dtype, *vals)
    except EvalError as e:
        return _Poison(e)


def _operand_dtype(u: UOp) -> DType:
    return u.src[1].dtype.scalar if u.op is Ops.WHERE else u.src[0].dtype.scalar


def _convert(u: UOp, v: object) -> object:
    if isinstance(v, _Poison):
        return v
    fn = exec_cast if u.op is Ops.CAST else exec_bitcast
    try:
        return fn(cast(Value, v), u.src[0].dtype, cast(DType, u.arg))  # a CAST's/BITCAST's arg: the target dtype
    except EvalError as e:
        return _Poison(e)


def _coerce(dtype: DType, v: object, what: str) -> Value:
    """An input value as this module's Python representation of `dtype` (numpy scalars accepted)."""
    dt = dtype.scalar
    if isinstance(v, np.generic):
        v = v.item()
    if dt.is_float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not python_value_ok(dt, v):
        raise EvalError(f"{what}: {v!r} is not a valid {dt.name} value (right type, in range, exactly representable)")
    return cast(Value, v)  # python_value_ok said it is one


def _const_value(u: UOp, v: Value) -> Value:
    # a float32/float16/bfloat16 CONST may hold an unrounded float64 (normalize_const does not round it)
    return round_to(u.dtype, v) if u.dtype.scalar.is_float else v


# ---------------------------------------------------------------- scalar expressions


def _scalar_srcs(u: UOp) -> tuple[UOp, ...]:
    return () if u.op is Ops.PARAM else u.src


def _lookup(u: UOp, name: str, env: dict[str, Value]) -> Value:
    if name not in env:
        bound = ", ".join(sorted(env)) or "none"
        raise EvalError(
            f"evaluate: unbound variable {name!r} ({u.op.name}:{u.dtype.name}); pass it in env (bound: {bound})"
        )
    return _coerce(u.dtype, env[name], f"evaluate: variable {name!r}")


def _eval_scalar(u: UOp, vals: list, env: dict[str, Value]) -> object:
    op = u.op
    if u.shape != ():
        raise EvalError(
            f"evaluate: {op.name} has shape {fmt_shape(u.shape)}; evaluate takes scalar expressions, "
            f"use evaluate_graph for tensors"
        )
    if op is Ops.CONST:
        return _const_value(u, u.value)
    if op in GroupOp.ALU:
        return _apply(op, _operand_dtype(u), tuple(vals))
    if op is Ops.CAST or op is Ops.BITCAST:
        return _convert(u, vals[0])
    if op is Ops.PARAM:
        name = render(u)
        v = _lookup(u, name, env)
        if len(u.src) == 3:
            lo, hi = (s.value if s.op is Ops.CONST else evaluate(s, env) for s in u.src[1:])
            if not lo <= v <= hi:
                raise EvalError(f"evaluate: variable {name!r} = {v!r} is outside its range [{lo}, {hi}]")
        return v
    if op is Ops.RANGE or op is Ops.SPECIAL:
        name = render(u)
        v = _lookup(u, name, env)
        bound = vals[0]
        if isinstance(bound, _Poison):
            raise bound.error
        if not 0 <= v < cast(int, bound):  # the bound of a RANGE or SPECIAL is an index
            raise EvalError(f"evaluate: {op.name} {name!r} = {v!r} is outside [0, {bound})")
        return v
    raise EvalError(
        f"evaluate: cannot evaluate {op.name}; scalar expressions hold CONST, PARAM variables, RANGE, "
        f"SPECIAL, ALU ops, CAST and BITCAST"
    )


def evaluate(u: UOp, env: dict[str, Value]) -> Value:
    """The exact value of the scalar expression `u`; variables, RANGEs and SPECIALs are looked up by the name
    `render` gives them (a variable's name, `r3` for RANGE id 3)."""
    vals: dict[UOp, object] = {}
    for n in _postorder(u, _scalar_srcs):
        vals[n] = _eval_scalar(n, [vals[s] for s in _scalar_srcs(n)], env)
    r = vals[u]
    if isinstance(r, _Poison):
        raise r.error
    return cast(Value, r)  # not a _Poison, so a value


# ---------------------------------------------------------------- tensor graphs

_ONE_SRC = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.COPY})


def _data_srcs(u: UOp) -> tuple[UOp, ...]:
    if u.op in (Ops.PARAM, Ops.BUFFER):
        return ()
    if u.op is Ops.AFTER:  # the target, then per store its positions and value (rewrite.stores)
        out = [u.src[0]]
        for s in u.src[1:]:
            if s.op is Ops.STORE:
                st = indexed_store(s)
                out += [s.src[1]] if st is None else [st.index, st.value]
        return tuple(out)
    return u.src[:1] if u.op in _ONE_SRC else u.src


def _ints(u: UOp, dims: tuple) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in dims):
        raise EvalError(f"evaluate_graph: {u.op.name} has symbolic dimensions {fmt_shape(dims)}; bind them first")
    return dims


def _objects(values: list, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


def _numpy_dtype(dt: DType) -> np.dtype:
    return np.dtype("float32" if dt is dtypes.bfloat16 else "int64" if dt is dtypes.index else dt.name)


def _from_input(u: UOp, arr: object) -> np.ndarray:
    dt, shape = u.dtype.scalar, _ints(u, u.shape)
    a = np.asarray(arr)
    what = f"evaluate_graph: input for {u.op.name} slot {u.buf_arg.slot!r}"
    if a.shape != shape:
        raise EvalError(f"{what} has shape {a.shape}, the node has {fmt_shape(shape)}")
    ok = a.dtype.kind in "iuO" if dt is dtypes.index else a.dtype == _numpy_dtype(dt)
    if not ok:
        raise EvalError(f"{what} has numpy dtype {a.dtype}, need {_numpy_dtype(dt)} for {dt.name}")
    flat = a.reshape(-1).tolist()
    if dt is dtypes.bfloat16:  # numpy has no bfloat16: float32 inputs are rounded to it
        flat = [round_to(dt, v) for v in flat]
    return _objects([_coerce(dt, v, what) for v in flat], shape)


def _elementwise(u: UOp, vals: list[np.ndarray], fn: Callable[..., object]) -> np.ndarray:
    shape = _ints(u, u.shape)
    cols = [np.broadcast_to(v, shape).reshape(-1).tolist() for v in vals]
    return _objects([fn(*xs) for xs in zip(*cols, strict=True)], shape)


def _index(u: UOp, vals: list[np.ndarray]) -> np.ndarray:
    x, idxs = vals[0], vals[1:]
    n_out = sum(i.ndim for i in idxs)
    key: list = []
    pos = 0
    for axis, iv in enumerate(idxs):
        for v in iv.reshape(-1).tolist():
            if isinstance(v, _Poison):
                raise v.error
            if not 0 <= v < x.shape[axis]:
                raise EvalError(f"INDEX: index {v} out of range for axis {axis} of size {x.shape[axis]}")
        if iv.ndim == 0:
            key.append(int(iv[()]))
        else:  # each (k,) index gets its own output axis: an outer product, not numpy's zipped indexing
            key.append(np.array(iv.tolist(), dtype=np.int64).reshape([-1 if j == pos else 1 for j in range(n_out)]))
            pos += 1
    return np.asarray(x[tuple(key)], dtype=object).reshape(_ints(u, u.shape))


def _bitcast_resize(u: UOp, a: np.ndarray) -> np.ndarray:
    src, dst = u.src[0].dtype.scalar, u.dtype.scalar
    flat = a.reshape(-1).tolist()
    for v in flat:
        if isinstance(v, _Poison):
            raise v.error
    data = b"".join(to_bytes(src, v) for v in flat)  # C order keeps each last-axis row contiguous
    n = dst.itemsize
    return _objects([from_bytes(dst, data[i : i + n]) for i in range(0, len(data), n)], _ints(u, u.shape))


def _reduce(u: UOp, a: np.ndarray) -> np.ndarray:
    rop, axes = u.reduce_op, u.reduce_axes
    if len(u.src) > 1:
        raise EvalError("evaluate_graph: REDUCE over RANGEs is kernel-level; only tensor-level REDUCE is evaluated")
    dt = u.dtype.scalar
    keep = [i for i in range(a.ndim) if i not in axes]
    n_out = int(np.prod([a.shape[i] for i in keep], dtype=np.int64))
    rows = a.transpose(keep + list(axes)).reshape(n_out, a.size // n_out if n_out else 0).tolist()
    # start from the identity, as a device's accumulator loop does (so a sum of [-0.0] is 0.0); index is
    # unbounded, so its MAX starts from the first element instead
    identity: object = dt.min if rop is Ops.MAX else round_to(dt, 0 if rop is Ops.ADD else 1)
    out = []
    for row in rows:
        if rop is Ops.MAX and dt is dtypes.index:
            if not row:
                raise EvalError("evaluate_graph: REDUCE MAX over index has no identity for an empty axis")
            acc, row = row[0], row[1:]
        else:
            acc = identity
        for v in row:  # in index order, rounding after every step as an accumulator loop does
            acc = _apply(rop, dt, (acc, v))
        out.append(acc)
    return _objects(out, _ints(u, u.shape))


def _after(u: UOp, vals: list[np.ndarray]) -> np.ndarray:
    """AFTER(t, stores...): t after its stores, in order: a whole store replaces it, a store through an INDEX
    writes (or adds) row by row in index order (rewrite.stores)."""
    out, k = vals[0].copy(), 1
    for s in u.src[1:]:
        if s.op is not Ops.STORE:
            continue
        st = indexed_store(s)
        if st is None:
            out, k = np.broadcast_to(vals[k], out.shape).copy(), k + 1
            continue
        pos, v = vals[k].reshape(-1).tolist(), vals[k + 1]
        k += 2
        dt = u.dtype.scalar
        for j, p in enumerate(pos):
            if isinstance(p, _Poison):
                raise p.error
            if not 0 <= p < out.shape[0]:
                continue  # a position outside the target is skipped, as a kernel's gated store does
            if not st.accumulate:
                out[p] = v[j]
            elif out.ndim == 1:
                out[p] = _apply(Ops.ADD, dt, (out[p], v[j]))
            else:
                out[p] = _objects([_apply(Ops.ADD, dt, (a, b)) for a, b in zip(
                    out[p].reshape(-1).tolist(), v[j].reshape(-1).tolist(), strict=True)], out.shape[1:])
    return out


def _eval_tensor(u: UOp, vals: list[np.ndarray], inputs: dict[UOp, np.ndarray]) -> np.ndarray:
    op = u.op
    if op in (Ops.BUFFER, Ops.PARAM):
        if u not in inputs:
            raise EvalError(
                f"evaluate_graph: no input for {u.op.name} slot {u.buf_arg.slot!r} "
                f"{fmt_shape(u.shape)}:{u.dtype.name}; pass it in inputs"
            )
        return _from_input(u, inputs[u])
    if op is Ops.CONST:
        return _objects([_const_value(u, u.value)], ())
    if op is Ops.VCONST:
        return _objects([_const_value(u, v) for v in u.vconst_values], (len(u.vconst_values),))
    if op in GroupOp.ALU:
        dt = _operand_dtype(u)
        return _elementwise(u, vals, lambda *xs: _apply(op, dt, xs))
    if op is Ops.CAST or (op is Ops.BITCAST and u.dtype.itemsize == u.src[0].dtype.itemsize):
        return _elementwise(u, vals, lambda x: _convert(u, x))
    if op is Ops.BITCAST:
        return _bitcast_resize(u, vals[0])
    if op is Ops.RESHAPE or op is Ops.EXPAND:
        shape = _ints(u, u.shape)
        return vals[0].reshape(shape) if op is Ops.RESHAPE else np.broadcast_to(vals[0], shape)
    if op is Ops.PERMUTE:
        return vals[0].transpose(u.int_tuple_arg)
    if op is Ops.FLIP:
        return vals[0][tuple(slice(None, None, -1) if f else slice(None) for f in u.flip_flags)]
    if op is Ops.SHRINK or op is Ops.PAD:
        begin, end = _ints(u, shape_values(u.src[1])), _ints(u, shape_values(u.src[2]))
        if op is Ops.SHRINK:
            return vals[0][tuple(slice(b, e) for b, e in zip(begin, end, strict=True))]
        out = np.full(_ints(u, u.shape), round_to(u.dtype, 0), dtype=object)
        out[tuple(slice(b, b + d) for b, d in zip(begin, vals[0].shape, strict=True))] = vals[0]
        return out
    if op is Ops.REPLICATED:  # equal along its axes (on a device tuple: across devices): the first slice
        axes = u.int_tuple_arg
        return vals[0][tuple(slice(0, 1) if i in axes else slice(None) for i in range(vals[0].ndim))]
    if op is Ops.STACK:
        return np.stack(vals)
    if op is Ops.INDEX:
        return _index(u, vals)
    if op is Ops.REDUCE:
        return _reduce(u, vals[0])
    if op is Ops.AFTER:
        return _after(u, vals)
    if op in GroupOp.Marker or op is Ops.COPY:
        return vals[0]
    raise EvalError(
        f"evaluate_graph: cannot evaluate {op.name}; tensor graphs hold BUFFER/PARAM inputs, CONST, "
        f"VCONST, movement ops, REPLICATED, ALU ops, CAST, BITCAST, REDUCE, markers, AFTER and COPY"
    )


def evaluate_graph(u: UOp, inputs: dict[UOp, np.ndarray]) -> np.ndarray:
    """The exact value of a tensor-level graph, as an ndarray of `u`'s dtype.

    `inputs` maps each BUFFER/PARAM leaf to an ndarray of its shape and dtype. numpy has no bfloat16, so a
    bfloat16 input is a float32 array (rounded to bfloat16 on the way in) and a bfloat16 result is returned
    as float32 values that are all exact bfloat16 values. An index result is int64 if it fits, else object."""
    vals: dict[UOp, np.ndarray] = {}
    for n in _postorder(u, _data_srcs):
        vals[n] = _eval_tensor(n, [vals[s] for s in _data_srcs(n)], inputs)
    flat = vals[u].reshape(-1).tolist()
    for v in flat:
        if isinstance(v, _Poison):
            raise v.error
    dt = u.dtype.scalar
    if dt is dtypes.index and not all(-(2**63) <= v < 2**63 for v in flat):
        return _objects(flat, vals[u].shape)
    return np.array(flat, dtype=_numpy_dtype(dt)).reshape(vals[u].shape)


__all__ = ["evaluate", "evaluate_graph"]
