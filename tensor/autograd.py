"""Autograd for the Tensor front end: `requires_grad`, `backward()`, `.grad`, `Tensor.gradient`, `no_grad`.

Nothing is recorded while the forward graph is built: a Tensor is its UOp graph, so the gradient is computed
from that graph when it is asked for (rules.gradients walks it once and applies one rule per op), and the
result is a lazy graph that realizes with everything else, fused into kernels. A tensor that does not require
a gradient costs nothing extra. Tensors marked `requires_grad` are kept in a weak registry; `backward()` finds
those whose UOp lies in the loss's graph and accumulates into their `.grad` (as torch does for leaves).

`no_grad()` marks every tensor made inside it with DETACH, so values computed there (an optimizer's update, a
target) never carry a gradient into a later loss. Only intermediate results made from UOps are marked; a
tensor made from host data has no graph to cut.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from rewrite.derive import fmt_shape
from rewrite.engine import collector_paused
from rewrite.errors import DTypeError, GradientError, ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules.gradients import gradient as uop_gradient
from rules.gradients import zeros_like
from tensor import checks as _chk

if TYPE_CHECKING:
    from tensor.tensor import Tensor

F = TypeVar("F", bound=Callable)

_live: dict[int, weakref.ref] = {}  # id -> tensor, for every live tensor with requires_grad set
_no_grad_depth = [0]


def _forget(key: int, ref: weakref.ref) -> None:
    if _live.get(key) is ref:
        del _live[key]


def set_requires_grad(t: Tensor, flag: bool) -> None:
    if flag and not t.dtype.is_float:
        raise DTypeError(f"requires_grad: only floating-point tensors can require a gradient, this one is "
                         f"{t.dtype.name}; cast it first (t.float())")
    key = id(t)
    if flag:
        _live[key] = weakref.ref(t, functools.partial(_forget, key))
    else:
        _live.pop(key, None)


def grad_enabled() -> bool:
    return _no_grad_depth[0] == 0


def cut(u: UOp) -> UOp:
    """The UOp a new tensor holds: detached inside no_grad(), unchanged (the fast path) outside."""
    return u if _no_grad_depth[0] == 0 or u.op is Ops.DETACH or not u.dtype.is_float else u.detach()


class no_grad:
    """Context manager and decorator: tensors made inside carry no gradient (each is a DETACH)."""

    def __enter__(self) -> no_grad:
        _no_grad_depth[0] += 1
        return self

    def __exit__(self, *exc: object) -> None:
        _no_grad_depth[0] -= 1

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: object, **kwargs: object) -> object:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


@contextmanager
def enable_grad() -> Iterator[None]:
    """Undo an enclosing no_grad() for a block."""
    saved = _no_grad_depth[0]
    _no_grad_depth[0] = 0
    try:
        yield
    finally:
        _no_grad_depth[0] = saved


def with_requires_grad(fn: F) -> F:
    """`fn` (a tensor constructor) taking `requires_grad=` too, as torch's and tinygrad's constructors do."""

    @functools.wraps(fn)
    def wrapper(*args: object, requires_grad: bool = False, **kwargs: object) -> object:
        t = fn(*args, **kwargs)
        if requires_grad:
            t.requires_grad = True
        return t

    return wrapper  # type: ignore[return-value]


def _seed(root: Tensor, grad: Tensor | None, what: str) -> UOp:
    if grad is None:
        if root.numel() != 1:
            raise ShapeError(f"{what}: the tensor has shape {fmt_shape(root.shape)}; a gradient can be implied only "
                             f"for a one-element (scalar) loss. Reduce it first (loss.sum() or loss.mean()) or pass "
                             f"gradient= with its shape")
        return root.uop.const_like(1)
    if tuple(grad.shape) != tuple(root.shape):
        raise ShapeError(f"{what}: gradient= has shape {fmt_shape(grad.shape)} but the tensor has "
                         f"{fmt_shape(root.shape)}; they must match")
    return grad.uop.cast(root.dtype)


def _check_root(root: Tensor, what: str) -> None:
    if not root.dtype.is_float:
        raise DTypeError(f"{what}: the tensor is {root.dtype.name}; only a floating-point result has a gradient")


def gradient(root: Tensor, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """d root / d target for each target (tinygrad's Tensor.gradient): lazy Tensors of the targets' shapes,
    zeros for a target the root does not depend on."""
    import tensor.tensor as tt

    _check_root(root, "gradient")
    for t in targets:
        if not isinstance(t, tt.Tensor):
            raise TypeError(f"gradient: targets must be Tensors, got {type(t).__name__}")
    from tensor.packed import with_sources  # a weight read through its kept packed copy (tensor.packed)

    grads = uop_gradient(with_sources(root.uop), [t.uop for t in targets], _seed(root, gradient, "gradient"))
    return [tt.Tensor._wrap(g if g is not None else zeros_like(t.uop), t.device) for t, g in zip(targets, grads,
                                                                                                strict=True)]


def backward(root: Tensor, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d root / d leaf into `.grad` of every tensor with requires_grad that the root depends on."""
    _check_root(root, "backward")
    # the gradient graph is as large as the forward one and makes no reference cycles, yet with the collector on
    # its young collections would traverse it (and the forward graph) again and again while it grows, and promote
    # both to the older generations, whose collections then traverse them once more (as in graph_rewrite)
    with collector_paused():
        _backward(root, gradient)
    return root


def _backward(root: Tensor, gradient: Tensor | None) -> None:
    import tensor.tensor as tt
    from tensor.packed import with_sources  # a weight read through its kept packed copy (tensor.packed)

    graph = with_sources(root.uop)
    topo = graph.toposort()  # walked once: for the leaves here and for the gradient's walk
    nodes = set(topo)
    leaves = [t for r in list(_live.values()) if (t := r()) is not None and t.uop in nodes]
    if not leaves:
        raise GradientError("backward: no tensor in this graph requires a gradient; create the parameters with "
                            "requires_grad=True (or call .requires_grad_()), and call backward() before the loss "
                            "is realized (realizing replaces its graph by the result)")
    grads = uop_gradient(graph, [t.uop for t in leaves], _seed(root, gradient, "backward"), topo)
    _chk.carry(nodes, [g for g in grads if g is not None])  # the root's run-time checks guard its gradients too
    for t, g in zip(leaves, grads, strict=True):
        if g is None:  # every path to it is detached
            continue
        new = tt.Tensor._wrap(g.detach() if g.op is not Ops.DETACH else g, t.device)
        t.grad = new if t.grad is None else tt.Tensor._wrap((t.grad.uop + new.uop).detach(), t.device)


__all__ = ["backward", "cut", "enable_grad", "grad_enabled", "gradient", "no_grad", "set_requires_grad",
           "with_requires_grad"]
