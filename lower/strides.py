"""Memoized analyses of a kernel's index expressions that the heuristics ask again and again: the toposort of an
AST, the ranges an expression reads, how far an address moves when one range steps (`_stride`), and whether every
buffer access of a kernel moves by 0 or 1 along a range. lower.optimize's splits and the GPU stages
(lower.gpu, lower.tc_smem, lower.simt_smem) read strides through `_stride`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from rewrite import Ops, UOp, dtypes

R = TypeVar("R")


class _Memo(Generic[R]):
    """A bounded memo of an analysis of one UOp (or a tuple of UOps). UOps are immutable and interned, so a
    result computed for a node stays valid for as long as the node exists; the heuristics (lower.optimize) ask
    the same questions of the same AST many times (each split re-reads the axes, every access's stride), and a
    walk per question made them quadratic in the kernel's size. The oldest entries go first when it is full;
    entries hold their nodes, so the bound is what keeps memory flat. The key is every argument: the analyses
    memoized here read only the AST, none the Target; one that reads the Target takes it as an argument, so it is
    in the key."""

    def __init__(self, fn: Callable[..., R], size: int = 512) -> None:
        self.fn, self.size = fn, size
        self.d: dict[tuple, R] = {}

    def __call__(self, *key: Hashable) -> R:
        d = self.d
        try:
            return d[key]
        except KeyError:
            pass
        if len(d) >= self.size:
            del d[next(iter(d))]
        v = d[key] = self.fn(*key)
        return v


_topo_memo: _Memo[tuple[UOp, ...]] = _Memo(lambda u: tuple(u.toposort()))


def _topo(u: UOp) -> tuple[UOp, ...]:
    """u.toposort() as a tuple, once per AST: the walk every analysis below starts from."""
    return _topo_memo(u)


_ranges_in = _Memo(lambda u: frozenset(x for x in _topo(u) if x.op is Ops.RANGE), 4096)


def _names_of(rs: frozenset[UOp]) -> dict[str, UOp]:
    from rewrite.render import render

    return {render(q): q for q in rs}


_names = _Memo(_names_of, 4096)  # the ranges an expression reads, by their rendered names (once per set of ranges)


def _stride_of(idx: UOp, r: UOp) -> int | None:
    from rewrite.errors import EvalError

    rs = _ranges_in(idx)
    if r not in rs:
        return 0
    names = _names(rs)
    if (b := r.src[0]).op is Ops.CONST and type(b.value) is int and b.value <= 2:
        if b.value < 2:
            return None
        try:  # two values: the step between them is the stride (r = 2, outside the range, is no evidence)
            at = [idx.evaluate({n: (k if q is r else 0) for n, q in names.items()}) for k in (0, 1)]
        except EvalError:
            return None
        return int(at[1] - at[0])
    if len(names) == len(rs) and (fast := _affine_at(idx, r)) is not None:
        d = fast[1] - fast[0]
        return d if fast[2] - fast[1] == d else None
    try:
        at = [idx.evaluate({n: (k if q is r else 0) for n, q in names.items()}) for k in (0, 1, 2)]
    except EvalError:
        return None
    step = at[1] - at[0]
    return int(step) if at[2] - at[1] == step else None  # index math: ints


_AFFINE = frozenset({Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.CONST, Ops.RANGE})


def _affine_at(idx: UOp, r: UOp) -> tuple[int, int, int] | None:
    """What `idx.evaluate` gives at r = 0, 1, 2 with every other range at 0, computed in one walk, when idx is
    index-typed CONST, RANGE, ADD, MUL, and IDIV and MOD (Python's floor `//` and `%`, as rewrite.semantics has
    them on index) by nonzero values only (the usual address), and every range has a constant bound that those
    values respect; None otherwise (the evaluator decides, errors included)."""
    vals: dict[UOp, tuple[int, int, int] | None] = {}  # None: a term not evaluated here (_loaded_offset)
    index = dtypes.index
    offset = False  # some value holds a loaded offset: only its steps are known
    for u in _topo(idx):
        op = u.op
        if op not in _AFFINE or u.dtype is not index or any(s in vals and vals[s] is None for s in u.src):
            if r in _ranges_in(u) and (op is not Ops.ADD or u.dtype is not index or len(u.src) != 2):
                return None  # a term that moves with r and that this walk cannot evaluate
            if r not in _ranges_in(u):
                vals[u] = None
                continue
            known = [s for s in u.src if vals[s] is not None]
            if len(known) != 1 or not _loaded_offset(u.src[1 - u.src.index(known[0])]):
                return None
            vals[u], offset = vals[known[0]], True
            continue
        if op is Ops.CONST:
            v = u.value
            if type(v) is not int:
                return None
            vals[u] = (v, v, v)
        elif op is Ops.RANGE:
            b = u.src[0]
            if len(u.src) != 1 or b.op is not Ops.CONST or type(bound := b.value) is not int:
                return None
            if u is r:
                if bound <= 2:
                    return None
                vals[u] = (0, 1, 2)
            else:
                if bound <= 0:
                    return None
                vals[u] = (0, 0, 0)
        else:
            if len(u.src) != 2:
                return None
            a, c = vals[u.src[0]], vals[u.src[1]]
            assert a is not None and c is not None
            if op is Ops.ADD:
                vals[u] = (a[0] + c[0], a[1] + c[1], a[2] + c[2])
            elif op is Ops.MUL:
                vals[u] = (a[0] * c[0], a[1] * c[1], a[2] * c[2])
            elif 0 in c or offset:  # division by zero: the evaluator's poison; a quotient of an unknown offset
                return None
            elif op is Ops.IDIV:
                vals[u] = (a[0] // c[0], a[1] // c[1], a[2] // c[2])
            else:
                vals[u] = (a[0] % c[0], a[1] % c[1], a[2] % c[2])
    return vals[idx]


def _loaded_offset(u: UOp) -> bool:
    """Whether `u`, an index term that does not move with the range asked about, is read from memory (a gathered
    row's offset: an id loaded and cast, times the row's length): added to that range's terms it shifts the address
    by the same amount at every step, so the steps are known though the address is not."""
    return u.dtype is dtypes.index and any(x.op is Ops.LOAD for x in _topo(u))


_stride_memo = _Memo(_stride_of, 8192)


def _stride(idx: UOp, r: UOp) -> int | None:
    """How far `idx` moves when range r steps by one (others at 0), if it moves linearly; None otherwise."""
    return _stride_memo(idx, r)


def _steady_of(idx: UOp, r: UOp, n: int) -> bool:
    from rewrite.errors import EvalError

    step = _stride(idx, r)
    if step is None:
        return False
    if r not in _ranges_in(idx):
        return True
    names = _names(_ranges_in(idx))
    try:
        at = [idx.evaluate({q: (k if u is r else 0) for q, u in names.items()}) for k in (0, n - 1)]
    except EvalError:
        return False
    return int(at[1] - at[0]) == step * (n - 1)


_steady_memo = _Memo(_steady_of, 4096)


def _steady(idx: UOp, r: UOp, n: int) -> bool:
    """Whether `idx` keeps `_stride(idx, r)` over the first n steps of r (others at 0): its step measured at r = 0,
    1, 2 holds at n - 1 too. An index of r // 16 (a grouped conv's input channel block, over its merged output
    channels) measures step 0 there but jumps at r = 16: over 32 lanes it is no broadcast."""
    return _steady_memo(idx, r, n)


def _accesses(ast: UOp) -> tuple[UOp, ...]:
    """The index expressions of the kernel's plain buffer accesses."""
    return tuple(u.src[1] for u in _topo(ast) if u.op is Ops.INDEX and u.src[0].op is Ops.BUFFER and len(u.src) == 2)


_accesses_memo = _Memo(_accesses)


def _contiguous_everywhere(ast: UOp, r: UOp) -> bool:
    """Every buffer access moves by 0 or 1 element when r steps: its lanes would be one contiguous vector."""
    return all(_stride(i, r) in (0, 1) for i in _accesses_memo(ast))
