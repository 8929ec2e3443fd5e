"""The `symbolic` suite's workloads: index expressions collected from real kernels' ASTs before the symbolic
stage, the same padded out to a kernel-sized batch with upcast/unroll lanes, and seeded random expressions."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

# the project is imported inside functions: the cold-start child process (benchmarks.symbolic_cold) imports
# this module before it starts its clock and must not have the compiler loaded by then
if TYPE_CHECKING:
    from rewrite import UOp

BATCH = 50


@dataclass
class Workload:
    name: str
    exprs: list[UOp]
    kernel: str = ""  # the kernel it came from ("" for random)
    padded: bool = False  # a lane-padded batch of the size (these get the cold-start figures)
    stats: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------- workloads


def kernel_graphs() -> dict[str, UOp]:
    from tensor import Tensor

    a, b = Tensor.empty(64, 64), Tensor.empty(64, 64)
    x, w = Tensor.empty(1, 8, 16, 16), Tensor.empty(8, 8, 3, 3)
    t = Tensor.empty(4, 8, 16)
    return {
        "gemm": (a @ b).uop,
        "conv": x.conv2d(w, padding=1).uop,
        "reduce": t.reshape(8, 4, 16).permute(2, 0, 1).sum(axis=2).uop,
        "softmax": a.softmax(-1).uop,
    }


def var_name(u: UOp) -> str | None:
    """The name of a symbolic variable (a PARAM whose slot is a name, not a buffer number)."""
    slot = getattr(u.arg, "slot", None)
    return slot if isinstance(slot, str) else None


def _is_index_math(u: UOp) -> bool:
    from rewrite import Ops, dtypes

    leaves = (Ops.CONST, Ops.RANGE, Ops.PARAM)
    for n in u.toposort():
        if n.op in leaves:
            if n.op is Ops.PARAM and var_name(n) is None:
                return False
            continue
        if n.dtype not in (dtypes.index, dtypes.bool):
            return False
    return True


def index_exprs(ast: UOp) -> list[UOp]:
    """The index operands, load gates and WHERE conditions of a kernel AST, distinct, leaves left out."""
    from rewrite import Ops

    found: list[UOp] = []
    for u in ast.toposort():
        if u.op is Ops.INDEX and len(u.src) > 1:
            found.append(u.src[1])
        elif u.op is Ops.LOAD and len(u.src) > 2:
            found.append(u.src[2])
        elif u.op is Ops.WHERE:
            found.append(u.src[0])
    keep = [e for e in dict.fromkeys(found) if e.op not in (Ops.CONST, Ops.RANGE, Ops.PARAM)]
    return [e for e in keep if _is_index_math(e)]


def kernel_batches() -> dict[str, list[UOp]]:
    """Each graph's main kernel: the one with a reduction if any (a gemm also schedules a copy of its right
    operand into column panels), then the most index expressions."""
    from lower.schedule import schedule
    from rewrite import Ops

    out: dict[str, list[UOp]] = {}
    for name, g in kernel_graphs().items():
        items, _ = schedule([g])
        asts = [it.ast for it in items if it.kind == "kernel" and it.ast is not None]
        best = max(asts, key=lambda a: (any(u.op is Ops.REDUCE for u in a.toposort()), len(index_exprs(a))))
        out[name] = index_exprs(best)
    return out


def lane_batch(exprs: list[UOp], n: int = BATCH) -> list[UOp]:
    """`n` distinct expressions: `exprs` for successive lanes of split ranges, r -> r'*f + k, as an
    upcast/unroll by f leaves them. Ranges are split innermost loop first, then innermost reduce, then the
    rest, one more whenever the lanes so far give fewer than `n` distinct expressions; by 4 (or 2), or by 8 where
    that is too few."""
    out = _lane_batch(exprs, n, (4, 2))
    return out if len(out) >= n else _lane_batch(exprs, n, (8, 4, 2), split_all=True)


def _lane_batch(exprs: list[UOp], n: int, factors: tuple[int, ...], split_all: bool = False) -> list[UOp]:
    from rewrite import AxisType, UOp

    def rid(r: UOp) -> int:
        return r.arg[0]  # type: ignore[index]

    def kind(r: UOp) -> AxisType:
        return r.arg[1]  # type: ignore[index]

    ranges = sorted({r for e in exprs for r in e.ranges()}, key=rid, reverse=True)
    order: list[UOp] = []
    for t in (AxisType.LOOP, AxisType.REDUCE):
        order += [r for r in ranges if kind(r) is t][:1]
    order += [r for r in ranges if r not in order]
    next_id = max((rid(r) for r in ranges), default=0) + 1
    splits: list[tuple[UOp, UOp, int]] = []  # (range, its outer part, factor)
    out: dict[UOp, None] = {}
    for i, r in enumerate(order):
        size = int(r.vmax) + 1
        f = next((f for f in factors if size % f == 0 and size > f), None)
        if f is None:
            continue
        splits.append((r, UOp.range(size // f, next_id, kind(r)), f))
        next_id += 1
        if split_all and i < len(order) - 1:
            continue
        out.clear()
        for lane in itertools.product(*(range(sf) for _, _, sf in splits)):
            sub = {sr: outer * sf + k if k else outer * sf for (sr, outer, sf), k in zip(splits, lane, strict=True)}
            for e in exprs:
                out[e.substitute(sub)] = None
                if len(out) == n:
                    return list(out)
    return list(out)  # fewer than n: the kernel has no more distinct lanes to give


def random_batch(seed: int, n: int = BATCH) -> list[UOp]:
    """`n` seeded random index expressions (shapes like tests/rules' fuzzer, generated here so the
    benchmark does not move when the tests' generator does)."""
    from rewrite import UOp

    rng = random.Random(seed)

    def const(nonzero: bool = False) -> int:
        while True:
            c = rng.choice((rng.randint(-4, 4), rng.choice((2, 3, 4, 6, 8, 16, 32, -2, -4))))
            if c or not nonzero:
                return c

    def expr(vs: list[UOp], depth: int) -> UOp:
        if depth <= 0 or rng.random() < 0.15:
            return rng.choice(vs) if rng.random() < 0.85 else UOp.const(const())
        k, sub = rng.random(), (lambda: expr(vs, depth - 1))
        if k < 0.18:  # what index math is made of: (x*c + y) // c and % c
            c = abs(const(nonzero=True))
            num = sub() * c + sub()
            return num // c if rng.random() < 0.5 else num % c
        if k < 0.36:
            return sub() + sub()
        if k < 0.50:
            return sub() * const()
        if k < 0.64:
            return sub() // const(nonzero=True)
        if k < 0.80:
            return sub() % const(nonzero=True)
        if k < 0.88:
            return sub().maximum(sub())
        return cond(vs, depth - 1).where(sub(), sub())

    def cond(vs: list[UOp], depth: int) -> UOp:
        a = expr(vs, depth)
        b = UOp.const(const()) if rng.random() < 0.7 else expr(vs, depth)
        c = a < b if rng.random() < 0.7 else a.ne(b)
        return c & (rng.choice(vs) < const()) if rng.random() < 0.2 else c

    out: dict[UOp, None] = {}
    while len(out) < n:
        vs = []
        for name in ("a", "b", "c")[: rng.randint(1, 3)]:
            lo = rng.choice((0, 0, 0, 1, -2, -5))
            vs.append(UOp.variable(name, lo, lo + rng.choice((1, 3, 7, 15, 31, 63))))
        e = cond(vs, 3) if rng.random() < 0.15 else expr(vs, 4)
        if e.src:  # a bare variable or constant gives no simplifier anything to do
            out[e] = None
    return list(out)


def needy_random(n: int, seeds: range) -> list[UOp]:
    """Up to `n` seeded random expressions whose fast-rules result the full simplifier sends to egglog (about 1 in
    400 of `random_batch`'s: rules.worth_saturating lets it through and a rule of the pruned fast-tier program
    matches it), scanning the seeds in order: the expressions the per-expression e-graph budget is about."""
    from rules import worth_saturating
    from rules.eqsat import fast_tier_can_change
    from rules.symbolic import simplify_fast

    out: list[UOp] = []
    for seed in seeds:
        for e in random_batch(seed):
            f = simplify_fast(e)
            if worth_saturating(f) and fast_tier_can_change(f):
                out.append(e)
                if len(out) == n:
                    return out
    return out


def build_workloads(needy_seeds: range = range(1000, 1240)) -> tuple[list[Workload], list[Workload]]:
    """(batches, per-expression pools)."""
    batches: list[Workload] = []
    kernels = kernel_batches()
    for name, exprs in kernels.items():
        batches.append(Workload(f"{name} k{len(exprs)}", exprs, name))
    lanes: list[Workload] = []
    for name, exprs in kernels.items():
        lb = lane_batch(exprs)
        lanes.append(Workload(f"{name} x{len(lb)}", lb, name, True))
    batches += lanes
    rnd = random_batch(seed=7)
    batches.append(Workload(f"random x{len(rnd)}", rnd))
    pool = list(dict.fromkeys(e for w in lanes for e in w.exprs))
    pools = [Workload(f"per-expr kernel {len(pool)}", pool), Workload(f"per-expr random {len(rnd)}", rnd)]
    needy = needy_random(50, needy_seeds)
    if needy:
        pools.append(Workload(f"per-expr random needy {len(needy)}", needy))
    return batches, pools
