"""Loops that a reshape merged, split back where the kernel's index math takes them apart.

A kernel whose value is read through a RESHAPE that merged axes (a flat chunk of a matmul's output, as the
allreduce's reduce-scatter copies it; a view flattened for a copy) loops over one range `r` and reads its inputs
at `r // c` and `r % c`. The optimizer sees one axis where there are two, so a matmul cannot be register-tiled
(measured: row-parallel matmul 1024 on 2 cpu devices ran at 1.3 GFLOP/s this way, 70 tiled).

`unflatten` replaces such an `r` (size `n`, `c` dividing `n`) by two loops, `hi` over n/c and `lo` over c, with
`r = hi*c + lo`: exact, since the pair enumerates [0, n) in the same order. It does so only where the optimizer
needs it: a reduction kernel with one output loop (a register tile needs two). A kernel with more output loops
keeps them as they are: its divisions are a layout the optimizer reads as it is (a matmul's B packed in column
panels is read at `col // W` and `col % W`, and its tile is chosen for exactly that). The symbolic rules
then fold `(hi*c + lo) // c` to `hi` and `% c` to `lo`. A global step (every use of a range changes at once), so a
function, not a rule; the pipeline's first symbolic stage runs it (lower.pipeline.symbolic_kernel).
"""

from __future__ import annotations

from collections.abc import Callable

from lower.opt_apply import next_range_id, replace_range
from lower.strides import _topo
from rewrite.ops import AxisType, Ops
from rewrite.uop import UOp


def _divisors(ast: UOp, loops: set[UOp]) -> dict[UOp, int]:
    """Each of `loops` the index math takes apart by `r // c` or `r % c` (c a constant that divides its size,
    1 < c < size) -> the smallest such c (a flattened (a, b, c) view reads r % C first, then (r // C) % B: one
    split a round)."""
    found: dict[UOp, int] = {}
    for u in _topo(ast):
        if u.op not in (Ops.IDIV, Ops.MOD):
            continue
        r, c = u.src
        if r not in loops or c.op is not Ops.CONST:
            continue
        n, k = r.src[0].value, c.value
        if r.src[0].op is not Ops.CONST or not isinstance(n, int) or not isinstance(k, int):
            continue
        if 1 < k < n and n % k == 0 and k < found.get(r, n):
            found[r] = k
    return found


def unflatten(ast: UOp, simplify: Callable[[UOp], UOp], rounds: int = 4) -> UOp | None:
    """`ast` with the one output loop of a reduction kernel split where its index math divides it by a constant
    (see the module's text), `simplify`d after each round (the next divisor shows once `(hi*c + lo) // c` is
    `hi`); None when there is nothing to split."""
    topo = _topo(ast)  # memoized: the optimize stage walks the same AST next when nothing is split
    loops = {u for u in topo if u.op is Ops.RANGE and u.axis_type is AxisType.LOOP}
    if len(loops) != 1 or not any(u.op is Ops.REDUCE for u in topo):
        return None
    out: UOp | None = None
    for _ in range(rounds):
        if not (found := _divisors(ast, loops)):
            break
        nid = next_range_id(ast)
        for r, c in found.items():
            n = r.src[0].value
            assert isinstance(n, int)
            hi, lo = UOp.range(n // c, nid, AxisType.LOOP), UOp.range(c, nid + 1, AxisType.LOOP)
            nid += 2
            ast = replace_range(ast, r, (hi, lo), hi * c + lo)
            loops = (loops - {r}) | {hi, lo}
        ast = out = simplify(ast)
    return out
