"""Tensor cores: a matmul-like reduction of half/bfloat16 products with float accumulation becomes WMMA.

`apply_tc(ast, shape, tm, tn)` (OptOps.TC, arg "16x8x16 half->float" or "16x8x16 bfloat16->float", one of the
Target's `tensor_cores`, or (shape, tm, tn)) rewrites a kernel that stores f(REDUCE(ADD, float(x) * float(y), k))
(or CAST(x * y, float32)) over output axes u (that x moves with and y does not) and v (that y moves with and x does
not): u splits by 16, v by 8, k by 16; each 16x8 output tile is one warp (a WARP axis of 32 lanes, lowered to
lidx0), the k loop steps 16 at a time and issues one m16n8k16 mma per step. With a warp tile of tm x tn (u splits
by 16 tm, v by 8 tn) each warp owns tm x tn such tiles: per k step it loads tm A and tn B fragments and issues
tm tn mmas, each A fragment used tn times and each B fragment tm times (4 x 4: 48 loads a lane for 16 mmas, where
1 x 1 takes 12 for one). Every lane holds the fragments the PTX `mma.sync.aligned.m16n8k16.row.col` layout gives
it (lane l, g = l // 4, t = l % 4):

  A (16x16, 8 elements e):  row g + 8*((e // 2) % 2), column (k) 2t + e % 2 + 8*(e // 4)
  B (16x8, 4 elements e):   row (k) 2t + e % 2 + 8*(e // 2), column g
  C, D (16x8, 4 elements e): row g + 8*(e // 2), column 2t + e % 2

so the kernel reads A's and B's elements straight from memory into STACKs, accumulates in a 4 tm tn-element REG
buffer (tile (i, j) at 4 (i tn + j); slot 0: the linearizer numbers its accumulators from 1), and stores each
lane's 4 tm tn outputs, elements e and e + 1 (columns 2t, 2t + 1) as one 2-lane store where the output moves by 1
along v from an even element (lower.tc_smem._pairable: one 8-byte float32 or 4-byte 16-bit store instead of two,
a warp's 32 lanes then filling whole 32-byte sectors). The products are
exact in the mma, as in the graph's float32 products of widened operands; only the order of the float32 additions
differs from the plain kernel (the last bits, like a fused multiply-add). Output axes besides u and v (a batch)
stay output axes (GLOBAL). Where the warp tile does not divide u or v, or the mma's k does not divide k (a
convolution's 27 = 3 x 3 x 3 products, 40 output channels), the ranges pad up to whole tiles: the operands' loads
past an axis's end are gated off and read 0, so those products add nothing, and the stores past it are skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod

from devices.base import Target
from lower.opt_apply import axes, next_range_id, replace_range, size
from lower.strides import _Memo
from lower.tc_smem import _gated, _pairable, spread
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.errors import KernelOptError

TC_SHAPES = {"16x8x16 half->float": dtypes.float16, "16x8x16 bfloat16->float": dtypes.bfloat16,
             "16x8x8 tf32->float": dtypes.float32}
M, N, K = 16, 8, 16
ROW_TILE = 64  # the staged forms' smallest block tile along u (lower.tc_smem.staged_config)


@dataclass(frozen=True)
class Layout:
    """One mma shape's fragments (PTX mma.sync, lane l, g = l // 4, t = l % 4): k, A's and B's element counts
    per lane, and where element e of each sits: a(e, g, t) = (row, k), b(e, g, t) = (k, column). C and D are the
    same for every shape: element e at (g + 8 (e // 2), 2t + e % 2)."""

    k: int
    na: int
    nb: int
    a: Callable[[int, UOp, UOp], tuple[UOp | int, UOp | int]]
    b: Callable[[int, UOp, UOp], tuple[UOp | int, UOp | int]]


_M16N8K16 = Layout(16, 8, 4, lambda e, g, t: (g + 8 * ((e // 2) % 2), t * 2 + (e % 2 + 8 * (e // 4))),
                   lambda e, g, t: (t * 2 + (e % 2 + 8 * (e // 2)), g))
# tf32 (m16n8k8): A elements (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B (t, g), (t + 4, g)
_M16N8K8 = Layout(8, 4, 2, lambda e, g, t: (g + 8 * (e % 2), t + 4 * (e // 2)), lambda e, g, t: (t + 4 * e, g))
LAYOUTS = {"16x8x16 half->float": _M16N8K16, "16x8x16 bfloat16->float": _M16N8K16, "16x8x8 tf32->float": _M16N8K8}


def tc_shape_for(ast: UOp, target: Target) -> str | None:
    """The tensor-core shape of `target` that this kernel's reduction can use, if any (any sizes: every form pads
    the edges to whole tiles)."""
    try:
        x, *_ = _match(tc_flatten(ast))  # any sizes: every form pads the edges with zeros
    except KernelOptError:
        return None
    return next((s for s in target.tensor_cores if TC_SHAPES.get(s) is x.dtype), None)


def tc_tile_axes(ast: UOp) -> tuple[UOp, UOp]:
    """The output axes (u, v) that the mma tiles split by 16 and by 8."""
    _, _, _, u, v, _ = _match(ast)
    return u, v


def _depends(e: UOp, r: UOp) -> bool:
    return r in e.toposort()


def _operands(ast: UOp) -> tuple[UOp, UOp, UOp]:
    """(x, y, red): the one float32 sum `red` of products x * y of a kernel of the TC shape (any number of
    reduce ranges), else KernelOptError saying what does not fit."""
    reds = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    ends = [u for u in ast.toposort() if u.op is Ops.END]
    if len(reds) != 1 or len(ends) != 1:
        raise KernelOptError("TC: the kernel must have one reduction and one output store")
    red = reds[0]
    body = red.src[0]
    if red.reduce_op is not Ops.ADD or red.dtype is not dtypes.float32:
        raise KernelOptError("TC: the reduction must be a float32 sum")
    if body.op is Ops.MUL and all(s.op is Ops.CAST for s in body.src):
        x, y = (s.src[0] for s in body.src)  # operands widened before the product (exact, as in the mma)
    elif body.op is Ops.CAST and body.src[0].op is Ops.MUL:
        x, y = body.src[0].src
    elif body.op is Ops.MUL and body.dtype is dtypes.float32:
        x, y = body.src  # float32 products: tf32 tensor cores
    else:
        raise KernelOptError("TC: the reduction must sum float32 products x * y of half, bfloat16 or float32 "
                             "operands (half and bfloat16 cast to float32 before or after the product)")
    if x.dtype not in (dtypes.float16, dtypes.bfloat16, dtypes.float32) or y.dtype is not x.dtype:
        raise KernelOptError(f"TC: the products must be of half, bfloat16 or float32, not {x.dtype.name}")
    return x, y, red


def _match(ast: UOp) -> tuple[UOp, UOp, UOp, UOp, UOp, UOp]:
    """(x, y, red, u, v, k) of a kernel of the TC shape (any sizes: every form pads the edges), else
    KernelOptError saying what does not fit. A kernel of several reduce ranges or row axes matches once
    `tc_flatten` has merged them."""
    x, y, red = _operands(ast)
    ks = red.src[1:]
    if len(ks) != 1:
        raise KernelOptError("TC: the reduction must run over one range")
    k = ks[0]
    loops = [r for r in axes(ast) if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]
    us = [r for r in loops if _depends(x, r) and not _depends(y, r)]
    vs = [r for r in loops if _depends(y, r) and not _depends(x, r)]
    if not us or not vs:
        raise KernelOptError("TC: needs an output axis only x moves with and one only y moves with")
    return x, y, red, us[-1], vs[-1], k


def _tc_flatten(ast: UOp) -> UOp:
    """The kernel as one matmul for the tensor cores: where its sum of products runs over several reduce ranges
    (a convolution's input channel and window, ci x kh x kw), they become one range k over their product
    (each old range a div/mod of k, the first outermost); where the output axes that only x moves with (u) are
    several and the last is shorter than a block tile (ROW_TILE) or no multiple of the mma's 16 (a
    convolution's n x ho x wo rows), or several beside merged reduce ranges, they become one row range likewise.
    The sum is the same terms in another grouping (float32 additions, as the mma's order already differs from
    the plain kernel's). First, an output loop both operands move with that x reads only as r // c (a grouped
    convolution's output channel: x moves with its group) splits in two (`_split_groups`). The kernel as it is
    where it does not match TC or its sizes are symbolic."""
    try:
        ast = _split_groups(ast)
        x, y, red = _operands(ast)
        ks = [r for r in red.src[1:] if r.op is Ops.RANGE]
        loops = [r for r in axes(ast) if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]
        us = [r for r in loops if _depends(x, r) and not _depends(y, r)]
        sizes = [size(r) for r in (*ks, *us)]
    except KernelOptError:
        return ast
    if len(ks) != len(red.src) - 1 or any(r.axis_type is not AxisType.REDUCE for r in ks) or 0 in sizes:
        return ast
    merge_k = len(ks) > 1
    merge_u = len(us) > 1 and (merge_k or size(us[-1]) < ROW_TILE or size(us[-1]) % M != 0)
    nid = next_range_id(ast)
    for group in [g for g, on in ((ks, merge_k), (us, merge_u)) if on]:
        flat = UOp.range(prod(size(r) for r in group), nid, group[-1].axis_type)
        nid += 1
        at = spread(tuple(group), flat)
        for i, r in enumerate(group):  # the merged range takes the last's place in the END's / REDUCE's list
            ast = replace_range(ast, r, (flat,) if i == len(group) - 1 else (), at[r])
    return ast


tc_flatten = _Memo(_tc_flatten, 256)  # asked by tc_shape_for, the heuristics and apply_tc_arg of the same kernel


def _split_groups(ast: UOp) -> UOp:
    """`ast` with each output loop r that both operands x and y move with, x only through r // c (c a constant
    dividing r's size, as one constant), replaced by hi over size/c and lo over c (r = hi c + lo; x's r // c is hi
    and any r % c lo): hi is then an axis of both (a batch) and lo one of y's alone, as TC needs."""
    x, y, _ = _operands(ast)
    nid = next_range_id(ast)
    for r in [r for r in axes(ast) if r.axis_type in (AxisType.LOOP, AxisType.GLOBAL)]:
        if not (_depends(x, r) and _depends(y, r)):
            continue
        divs = [u for u in x.toposort() if u.op is Ops.IDIV and u.src[0] is r and u.src[1].op is Ops.CONST]
        cs = {u.src[1].value for u in divs}
        if len(cs) != 1 or _depends(x.substitute({d: UOp.const(0) for d in divs}), r):
            continue
        (c,) = cs
        n = size(r)
        if not isinstance(c, int) or not 1 < c < n or n % c:
            continue
        hi, lo = UOp.range(n // c, nid, r.axis_type), UOp.range(c, nid + 1, r.axis_type)
        nid += 2
        mods = [u for u in ast.toposort() if u.op is Ops.MOD and u.src[0] is r and u.src[1] is divs[0].src[1]]
        ast = ast.substitute({**{d: hi for d in divs}, **{m: lo for m in mods}})
        ast = replace_range(ast, r, (hi, lo), hi * c + lo)
        x, y, _ = _operands(ast)
    return ast


def tc_arg(arg: object) -> tuple[str, int, int, tuple | None]:
    """A TC opt's arg as (shape, tm, tn, staged) (staged ("wgmma", n, tm, tn, wgu, wgv, bk, stages) for
    lower.tc_wgmma's form): the shape alone ("16x8x16 half->float") is a warp tile of one
    mma tile; (shape, tm, tn) gives each warp tm x tn of them; (shape, tm, tn, wu, wv, bk) also stages the
    operands through shared memory for a block of wu x wv warps, bk elements of k a step (lower.tc_smem);
    (shape, tm, tn, wu, wv, bk, stages) with stages >= 2 stages them through a cp.async pipeline that deep
    (lower.tc_async), stages 0 being the 6-element form."""
    if isinstance(arg, str):
        return arg, 1, 1, None
    from lower.tc_wgmma import wgmma_arg

    if (wg := wgmma_arg(arg)) is not None:  # (shape, "wgmma", n, tm, tn, wgu, wgv, bk, stages): lower.tc_wgmma
        return wg[0], wg[2], wg[3], ("wgmma", *wg[1:])
    if isinstance(arg, tuple) and len(arg) in (3, 6, 7) and isinstance(arg[0], str) and \
            all(isinstance(n, int) and n >= 1 for n in arg[1:6]) and \
            (len(arg) < 7 or (isinstance(arg[6], int) and arg[6] in (0, *range(2, 9)))):
        staged = tuple(arg[3:]) if len(arg) >= 6 else None
        return arg[0], arg[1], arg[2], staged
    raise KernelOptError(f"TC: the arg must be a shape, (shape, tm, tn), (shape, tm, tn, wu, wv, bk), (shape, tm, "
                         f"tn, wu, wv, bk, stages) with stages 0 or 2..8, or (shape, 'wgmma', n, tm, tn, wgu, wgv, "
                         f"bk, stages), not {arg!r}")


def apply_tc_arg(ast: UOp, arg: object) -> UOp:
    """The kernel with a TC opt's arg applied: lower.tc_async's pipeline for a 7-tuple with stages >= 2,
    lower.tc_smem's staged form for a 6-tuple (or stages 0), else `apply_tc`."""
    shape, tm, tn, staged = tc_arg(arg)
    ast = tc_flatten(ast)
    if staged is not None and staged[0] == "wgmma":
        from lower.tc_wgmma import apply_tc_wgmma

        return apply_tc_wgmma(ast, shape, *staged[1:])
    if staged is not None and len(staged) == 4 and staged[3] >= 2:
        from lower.tc_async import apply_tc_async

        return apply_tc_async(ast, shape, tm, tn, *staged)
    if staged is not None:
        from lower.tc_smem import apply_tc_staged

        return apply_tc_staged(ast, shape, tm, tn, *staged[:3])
    return apply_tc(ast, shape, tm, tn)


def apply_tc(ast: UOp, shape: str, tm: int = 1, tn: int = 1) -> UOp:
    """The kernel with its reduction on tensor cores (module docstring); each warp computes tm x tn mma tiles
    (a (16 tm) x (8 tn) output tile), its tm A fragments and tn B fragments loaded once per k step and each
    used tn (tm) times."""
    x, y, red, u, v, k = _match(ast)
    if TC_SHAPES.get(shape) is not x.dtype:
        raise KernelOptError(f"TC {shape!r} does not fit products of {x.dtype.name}; known: {', '.join(TC_SHAPES)}")
    lay = LAYOUTS[shape]
    nu, nv, nk = size(u), size(v), size(k)
    (end,) = [e for e in ast.toposort() if e.op is Ops.END]
    nid = next_range_id(ast)
    wm, wn = M * tm, N * tn
    uo, vo = UOp.range(-(-nu // wm), nid, AxisType.LOOP), UOp.range(-(-nv // wn), nid + 1, AxisType.LOOP)
    ko, lane = UOp.range(-(-nk // lay.k), nid + 2, AxisType.REDUCE), UOp.range(32, nid + 3, AxisType.WARP)
    g, t = lane // 4, lane % 4
    a = [UOp(Ops.STACK, tuple(_at(x, {u: (uo * wm + (i * M + row), nu), k: (ko * lay.k + col, nk)})
                              for row, col in (lay.a(e, g, t) for e in range(lay.na))))
         for i in range(tm)]
    b = [UOp(Ops.STACK, tuple(_at(y, {k: (ko * lay.k + row, nk), v: (vo * wn + (j * N + col), nv)})
                              for row, col in (lay.b(e, g, t) for e in range(lay.nb))))
         for j in range(tn)]
    nacc = 4 * tm * tn  # tile (i, j)'s four floats at 4 (i tn + j)
    acc = UOp(Ops.BUFFER, (UOp.shape_operand((nacc,)),), BufferArg(0, dtypes.float32, None, AddrSpace.REG))
    outer = [r for r in end.src[1:] if r is not u and r is not v]
    at = [acc.index(UOp.const(i)) for i in range(nacc)]
    inits = [UOp(Ops.AFTER, (p, *outer, uo, vo, lane)).store(UOp.const(0.0, dtypes.float32)) for p in at]
    cur = [UOp(Ops.AFTER, (p, init, ko)).load() for p, init in zip(at, inits, strict=True)]
    upd = []
    for i in range(tm):
        for j in range(tn):
            o = 4 * (i * tn + j)
            c = UOp(Ops.STACK, tuple(cur[o:o + 4]))
            mma = UOp(Ops.WMMA, (a[i], b[j], c), (M, N, lay.k, x.dtype, dtypes.float32))
            upd += [at[o + e].store(UOp(Ops.INDEX, (mma, UOp.const(e)))) for e in range(4)]
    step = UOp(Ops.END, (UOp(Ops.GROUP, tuple(upd)), ko))
    res = [UOp(Ops.AFTER, (p, step)).load() for p in at]
    two = _pairable(end.src[0], v)  # columns 2t, 2t + 1 as one store (lower.tc_smem.store_results' pairs)
    stores = [_at(end.src[0],
                  {u: (uo * wm + (i * M + g + 8 * (e // 2)), nu), v: (vo * wn + (j * N + t * 2 + e % 2), nv)},
                  keep=frozenset({step}), lanes={v: UOp.vconst((0, 1))} if two else None,
                  values={red: UOp(Ops.STACK, (res[o], res[o + 1])) if two else res[o]})
              for i in range(tm) for j in range(tn) for e in range(0, 4, 2 if two else 1)
              for o in (4 * (i * tn + j) + e,)]
    return ast.substitute({end: UOp(Ops.END, (UOp(Ops.GROUP, tuple(stores)), *outer, uo, vo, lane))})


def _at(e: UOp, where: dict[UOp, tuple[UOp, int]], keep: frozenset[UOp] | None = None,
        lanes: dict[UOp, UOp] | None = None, values: dict[UOp, UOp] | None = None) -> UOp:
    """Operand or output store `e` with each range r of `where` at its position p (r -> (p, n), n the range's
    size); where a p can pass n (the warp tile or the mma's k does not divide the axis), its GLOBAL loads and
    stores gated by p < n (a gated-off load reads 0: lower.tc_smem._gated). An operand (`keep` None) is then 0
    wherever the gate is off, whatever it computes from those zeros (1 / x would not be 0), so a padded row,
    column or k adds nothing to the sums; a store (`keep`: the k loop its value is read from, left as it is)
    is skipped there. `lanes`: a range r there is at p + lanes[r] (a vector of offsets; the gate is p's: a paired
    store's 2 columns, p even and n even, are both in or both out). `values`: nodes replaced in the same walk (the
    output's reduction by its accumulators)."""
    out = e.substitute({**(values or {}), **{r: p + lanes[r] if lanes and r in lanes else p
                                             for r, (p, _) in where.items()}})
    gates = [p < n for p, n in where.values() if p.vmax >= n]
    if not gates:
        return out
    valid = gates[0]
    for q in gates[1:]:
        valid = valid & q
    if keep is not None:
        return _gated(out, valid, keep)
    return valid.where(_gated(out, valid), UOp.const(0, e.dtype))


__all__ = ["LAYOUTS", "TC_SHAPES", "Layout", "apply_tc", "apply_tc_arg", "tc_arg", "tc_flatten", "tc_shape_for",
           "tc_tile_axes"]
