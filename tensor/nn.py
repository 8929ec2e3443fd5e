"""Neural-network ops: matmul (the spec's gemm with batch axes), convolution and pooling over sliding windows
built from movement ops, and activations.

Sliding windows without a strided op or a loop over output positions (`_windows_last`): to read, for each of
k kernel taps j and output positions q, the element x[q + j*d] of a length-L axis, tile x (period L), flatten,
and re-read it in rows of length L + d. Row j then starts j*(L + d) = j*L + j*d into the tiling, which is
element j*d of a copy of x: each row is x shifted by j*d. Keeping the first o*s columns of each row, then
every s-th one (a reshape to (o, s) and a shrink), gives the strided windows. Pooling and convolution apply
this along each spatial axis and reduce over the tap axes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes, promote
from rewrite.errors import DTypeError, ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules.gradients import register_vjp, vjp_unit
from tensor import elementwise as ew
from tensor import logic as lg
from tensor import packed as _pk
from tensor import units as _un
from tensor.elementwise import common_device, const_uop, expand_uop
from tensor.helpers import Device, broadcast_shape
from tensor.reduce import reduce_uop

if TYPE_CHECKING:
    from tensor.tensor import Tensor

IntOrTuple = int | Sequence[int]


def _acc(dt: DType) -> DType:
    """Matmul and conv accumulate in their own dtype (numpy and torch), halves in float32. The products are taken
    in that dtype too (the operands cast first, as torch's fp32-accumulating GEMMs do): a product of two halves or
    two bfloat16 is exact in float32, while rounding each product to 16 bits first costs ~2^-11 (bf16: 2^-8) of
    every term, which matmul 4096 showed as an error of 0.05 (bf16: 0.43) next to torch."""
    return dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt


# ---------------------------------------------------------------- matmul


def matmul(x: Tensor, w: Tensor) -> Tensor:
    """x @ w with numpy's rules: 1-D operands are a row / a column (dropped again), leading axes broadcast.

    (.., M, K, 1) * (.., 1, K, N) summed over K: the spec's gemm, batched."""
    if not isinstance(w, tt.Tensor):
        w = tt.Tensor(w, device=x.device)
    if x.ndim == 0 or w.ndim == 0:
        raise ShapeError(f"matmul: both operands need at least one axis, got shapes {fmt_shape(x.shape)} and "
                         f"{fmt_shape(w.shape)}; use * for scalars")
    dev = common_device("matmul", [x, w])
    a = x.uop.reshape((1, x.shape[0])) if x.ndim == 1 else x.uop
    b = w.uop.reshape((w.shape[0], 1)) if w.ndim == 1 else w.uop
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul: {fmt_shape(x.shape)} @ {fmt_shape(w.shape)}: the inner dimensions differ "
                         f"({a.shape[-1]} vs {b.shape[-2]}); x's last axis must match w's "
                         f"{'only' if w.ndim == 1 else 'second-to-last'} axis")
    dt = promote(x.dtype, w.dtype)
    work = dtypes.int32 if dt.is_bool else dt  # bool @ bool is an or of ands: sum the products, compare to 0
    batch = broadcast_shape([a.shape[:-2], b.shape[:-2]], "matmul")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    full = (*batch, m, k, n)
    au = expand_uop(a.cast(work).reshape((*a.shape, 1)), full)
    rows = m * math.prod(batch) // max(1, math.prod(b.shape[:-2]))  # rows of a that reuse each of b's panels
    # a weight that no gradient flows into keeps its packed copy from forward to forward (tensor.packed)
    bu = expand_uop(_panels(b.cast(work), rows, dev, not w.requires_grad).reshape((*b.shape[:-2], 1, k, n)), full)
    out = reduce_uop(au.cast(_acc(work)) * bu.cast(_acc(work)), Ops.ADD, (len(full) - 2,), False)
    out = out.ne(out.const_like(0)) if dt.is_bool else out.cast(dt)
    shape = (*batch, *(() if x.ndim == 1 else (m,)), *(() if w.ndim == 1 else (n,)))
    return tt.Tensor._wrap(out.reshape(shape), dev)


# Rows of a reusing each panel (a's batch axes over an unbatched b count) from which even a small row-major b is
# packed (_panels). Measured on an Intel AVX-512 host, 2 threads, 40 calls a run, 3 runs alternated (the first
# after a new kernel's build left out): the BERT forward's (8, 128, 384) @ (384, 384) + bias alone, copy and
# product medians 1.39-1.47 -> 1.17-1.23 ms (x86-64-v4), 1.87-1.91 -> 1.79-1.83 ms (x86-64-v3); in the forward
# (x86-64-v4, 2 runs of 6 forwards) the product's median 1.38-1.43 -> 1.09-1.14 ms plus a 0.10-0.11 ms copy. 512
# rows (was 1024): square 512 read in place has its rows 2 KiB apart, so a panel's rows share a few L1 sets and the
# panel never stays in L1; packed, on the same Intel host, copy and product, mins of 20, 3 runs each way
# alternated, load average ~3: 1 core (CPU time) 1.72 -> 1.53 ms (x86-64-v4), 2.72 -> 2.33 ms (x86-64-v3);
# 2 threads (wall) 1.59-1.66 -> 0.89-1.64 ms (v4), 2.70-2.88 -> 2.35-2.42 ms (v3). Square 256 (fewer rows) keeps
# reading b in place, as measured on an AVX2 EPYC.
PANEL_ROWS = 512


def _panels(b: UOp, m: int, dev: Device, keep: bool = False) -> UOp:
    """b (..., K, N) read through a copy stored as column panels (..., N/P, K, P), P = the panel width of the
    device's target (lower.opt_tiles.matmul_panel_bytes): a register tile then reads P consecutive elements per step
    of K, and the rows of a panel are adjacent in memory instead of N elements apart. Only when the copy pays for
    itself (M rows reuse each panel, K is large) and is needed: b's rows are a page or more apart (every row then
    lands in the same cache
    sets: matmul 1024 ran at a third of the speed), or b is larger than an L2 cache, or b is a permuted view (a
    transposed operand, whose N elements are not adjacent for the tile's vector loads). A small row-major b is read
    in place: at 256 the copy cost more than it saved; but not when PANEL_ROWS rows or more (`m` counts a's
    rows reusing each panel) amortize the copy. A column count of no whole panels is padded with
    zero columns in the same copy and read back shrunk to N: the product's register tile masks its ragged last
    vector (lower.opt_tiles.ragged_columns), so the extra columns are never computed or stored. `keep`: b may be
    read through a packed copy kept from an earlier call while its data is unchanged (tensor.packed)."""
    from devices import target_for
    from lower.opt_tiles import matmul_panel_bytes

    k, n = b.shape[-2], b.shape[-1]
    size = b.dtype.itemsize
    target = target_for(dev if isinstance(dev, str) else dev[0])
    panel = 0 if target.interpreted else matmul_panel_bytes(target) // size
    if not panel or n <= panel or k < 64 or m < 16:
        return b
    if n * size < 4096 and k * n * size <= target.l2_bytes and not _permuted(b) and m < PANEL_ROWS:
        return b
    if isinstance(dev, tuple) and isinstance(b.device, tuple) and b.axis == b.ndim - 1 and \
            (n % panel or (n // panel) % len(dev)):
        return b  # the panels would split the devices' blocks of N (rewrite.props.reshape_axis)
    n_pad = -(-n // panel) * panel
    if keep and _pk.reusable(b, dev):
        packed = _pk.packed(b, functools.partial(_pack, panel=panel), panel, cast(str, dev))
    else:
        packed = _pack(b, panel)
    return packed.permute(_swap(b.ndim)).reshape((*b.shape[:-1], n_pad)).shrink((0,) * b.ndim, b.shape)


def _swap(ndim: int) -> tuple[int, ...]:
    """The permutation (.., K, N/P, P) <-> (.., N/P, K, P) that packs an operand (.., K, N) of `ndim` axes into
    column panels: its own inverse."""
    nb = ndim - 2
    return (*range(nb), nb + 1, nb, nb + 2)


def _pack(b: UOp, panel: int) -> UOp:
    """b (..., K, N) copied as column panels (..., N/P, K, P), N padded with zeros to whole panels of P."""
    k, n = b.shape[-2], b.shape[-1]
    n_pad = -(-n // panel) * panel
    src = b.pad((0,) * b.ndim, (*(0,) * (b.ndim - 1), n_pad - n))
    return src.reshape((*b.shape[:-2], k, n_pad // panel, panel)).permute(_swap(b.ndim)).contiguous()


def _permuted(x: UOp) -> bool:
    """Whether x is read through a PERMUTE among the movement ops and casts above its data."""
    while x.op in (Ops.CAST, Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.CONTIGUOUS):
        if x.op is Ops.PERMUTE:
            return True
        x = x.src[0]
    return False


def _channels_last(w: UOp, groups: int, positions: int, dev: Device) -> UOp:
    """conv2d's weight (Cout, Cin/g, *kernel) read through a copy with the output channel innermost, so a register
    tile can load a vector of output channels per tap (lower.opt_tiles: the channels are the lanes, the output
    positions the rows). Only where it pays: the target packs operands (a compiled target with vector registers),
    whole vectors (or half vectors) of output channels per group, and many output positions reusing the small copy.
    Half vectors: 8 output channels on a 16-lane target ran the CNN layer (N100, 16->8, 4x4) in 0.33 ms packed
    against 3.8 unpacked, and 16->24 channels at 28x28 in 3.4 against 10.9 (2-core AVX-512 Xeon); but a half
    vector over a reduction of fewer taps than lanes (1->8 channels, 3x3) lost: 0.20 against 0.08 ms."""
    from devices import target_for

    if isinstance(dev, tuple):
        return w
    target = target_for(dev)
    cout, rest = w.shape[0], w.shape[1:]
    lanes = target.lanes(w.dtype.itemsize)
    cout_g, depth = cout // groups, math.prod(rest)
    whole = cout_g % lanes == 0 or (cout_g % max(1, lanes // 2) == 0 and depth >= lanes)
    if target.interpreted or not target.vector_bytes or not whole or positions < 256:
        return w
    nk = len(rest)
    split = w.reshape((groups, cout // groups, *rest))
    order = (0, *range(2, 2 + nk), 1)  # (g, Cin/g, *kernel, Cout/g)
    back = (0, 1 + nk, *range(1, 1 + nk))
    return split.permute(order).contiguous().permute(back).reshape(w.shape)


# ---------------------------------------------------------------- sliding windows


def _windows_last(u: UOp, k: int, s: int, d: int, o: int) -> UOp:
    """(..., L) -> (..., k, o): element [j, i] is x[i*s + j*d] (see the module docstring)."""
    *lead, length = u.shape
    z = [0] * len(lead)
    if k == 1:
        x = u.reshape((*lead, 1, length))
        row = length
    else:
        row = length + d
        tiles = -(-k * row // length)
        x = u.reshape((*lead, 1, length)).expand((*lead, tiles, length)).reshape((*lead, tiles * length))
        x = x.shrink([*z, 0], [*lead, k * row]).reshape((*lead, k, row))
    span = o * s
    x = x.shrink([*z, 0, 0], [*lead, k, span]) if span <= row else x.pad([*z, 0, 0], [*z, 0, span - row])
    if s > 1:
        x = x.reshape((*lead, k, o, s)).shrink([*z, 0, 0, 0], [*lead, k, o, 1]).reshape((*lead, k, o))
    return x


def windows(u: UOp, ks: Sequence[int], ss: Sequence[int], ds: Sequence[int], os: Sequence[int]) -> UOp:
    """(B..., L1..Ln) -> (B..., o1..on, k1..kn): sliding windows over the last n axes."""
    n, nb = len(ks), len(u.shape) - len(ks)
    for i in range(n):
        ax, nd = nb + i, len(u.shape)
        if ks[i] == ss[i] and ds[i] == 1 and os[i] * ss[i] <= u.shape[ax]:
            # disjoint windows (a 2x2 pool): a reshape of the axis into (o, k), no tiling; its gradient is a plain
            # reshape too, so a materialized gradient keeps the input's layout (the tiling's permutes left the
            # gradient of the CNN's second conv stored with its spatial axes swapped, which kept its kernels from
            # reading whole vectors)
            z = [0] * nd
            u = u.shrink(z, [*u.shape[:ax], os[i] * ss[i], *u.shape[ax + 1:]])
            u = u.reshape((*u.shape[:ax], os[i], ks[i], *u.shape[ax + 1:]))
            u = u.permute([*range(ax + 1), *range(ax + 2, nd + 1), ax + 1])
            continue
        u = _windows_last(u.permute([j for j in range(nd) if j != ax] + [ax]), ks[i], ss[i], ds[i], os[i])
        # now (others..., k_i, o_i): put o_i back at `ax`, keep k_i last
        u = u.permute([*range(ax), nd, *range(ax, nd - 1), nd - 1])
    return u


def _tuple(v: IntOrTuple, n: int, what: str, name: str) -> tuple[int, ...]:
    t = (v,) * n if isinstance(v, int) else tuple(v)
    if len(t) != n or not all(isinstance(e, int) for e in t):
        raise ShapeError(f"{what}: {name} must be an int or {n} ints, got {v!r}")
    return t


def _padding(p: IntOrTuple | Sequence[tuple[int, int]], n: int, what: str) -> list[tuple[int, int]]:
    """int (all sides), n ints (symmetric per axis), n (before, after) pairs, or 2n ints in torch's order
    (last axis first)."""
    if isinstance(p, int):
        pairs = [(p, p)] * n
    else:
        seq = list(p)
        ints = [e for e in seq if isinstance(e, int)]
        two = [e for e in seq if isinstance(e, (tuple, list)) and len(e) == 2]
        if len(seq) == n and len(ints) == n:
            pairs = [(e, e) for e in ints]
        elif len(seq) == n and len(two) == n:
            pairs = [(int(e[0]), int(e[1])) for e in two]
        elif len(seq) == 2 * n and len(ints) == 2 * n:
            pairs = [(ints[2 * (n - 1 - i)], ints[2 * (n - 1 - i) + 1]) for i in range(n)]
        else:
            raise ShapeError(f"{what}: padding must be an int, {n} ints, {n} pairs or {2 * n} ints, got {p!r}")
    if any(b < 0 or a < 0 for b, a in pairs):
        raise ShapeError(f"{what}: padding must be >= 0, got {p!r}")
    return pairs


def _out_sizes(what: str, shape: Sequence[int], ks: Sequence[int], ss: Sequence[int], ds: Sequence[int],
               pads: list[tuple[int, int]], ceil_mode: bool) -> tuple[list[int], list[int]]:
    """Output size per axis, and the extra padding after each axis that ceil_mode's last window needs."""
    if any(v <= 0 for v in (*ks, *ss, *ds)):
        raise ShapeError(f"{what}: kernel sizes, strides and dilations must be positive, got {ks}, {ss}, {ds}")
    os, extra = [], []
    for length, k, s, d, (pb, pa) in zip(shape, ks, ss, ds, pads, strict=True):
        eff, padded = d * (k - 1) + 1, length + pb + pa
        if padded < eff:
            raise ShapeError(f"{what}: the kernel spans {eff} elements (size {k}, dilation {d}) but the padded input "
                             f"axis has {padded} (spatial shape {fmt_shape(tuple(shape))}); use a smaller kernel or "
                             f"more padding")
        o = (-(-(padded - eff) // s) if ceil_mode else (padded - eff) // s) + 1
        if ceil_mode and (o - 1) * s >= length + pb:  # the last window must start inside the input or left padding
            o -= 1
        os.append(o)
        extra.append(max(0, (o - 1) * s + eff - padded))
    return os, extra


def _pooled(u: UOp, ks: Sequence[int], ss: Sequence[int], ds: Sequence[int], pads: list[tuple[int, int]],
            extra: list[int], os: Sequence[int], fill: float | int | bool) -> UOp:
    """Pad the last len(ks) axes with `fill`, then take the windows."""
    nb = len(u.shape) - len(ks)
    before = [0] * nb + [b for b, _ in pads]
    after = [0] * nb + [a + e for (_, a), e in zip(pads, extra, strict=True)]
    p = u.pad(before, after)
    if fill != 0 and p is not u:
        inside = const_uop(True, dtypes.bool, u.shape).pad(before, after)
        p = UOp(Ops.WHERE, (inside, p, const_uop(fill, u.dtype, p.shape)))
    return windows(p, ks, ss, ds, os)


# ---------------------------------------------------------------- convolution and pooling


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
           padding: IntOrTuple | Sequence[tuple[int, int]] = 0, dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """torch's conv2d (cross-correlation); x (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel). Any number of
    spatial axes works (weight.ndim - 2 of them)."""
    ns = weight.ndim - 2
    if ns < 1 or x.ndim != ns + 2:
        raise ShapeError(f"conv2d: input {fmt_shape(x.shape)} and weight {fmt_shape(weight.shape)} do not fit: need "
                         f"input (N, Cin, *spatial) and weight (Cout, Cin/groups, *kernel) with as many spatial axes")
    _, cin, *spatial = x.shape
    cout, cin_g, *ks = weight.shape
    if groups < 1 or cin != cin_g * groups or cout % groups:
        raise ShapeError(f"conv2d: input has {cin} channels and weight {fmt_shape(weight.shape)} with groups={groups}: "
                         f"need Cin == weight.shape[1] * groups ({cin_g} * {groups}) and Cout % groups == 0")
    if not (x.dtype.is_float or x.dtype.is_int) or not (weight.dtype.is_float or weight.dtype.is_int):
        raise DTypeError(f"conv2d: needs numeric tensors, got {x.dtype.name} and {weight.dtype.name}")
    dev = common_device("conv2d", [x, weight] + ([bias] if bias is not None else []))
    ss, ds = _tuple(stride, ns, "conv2d", "stride"), _tuple(dilation, ns, "conv2d", "dilation")
    pads = _padding(padding, ns, "conv2d")
    _out_sizes("conv2d", spatial, ks, ss, ds, pads, False)  # its errors: a kernel wider than the padded input
    dt = promote(x.dtype, weight.dtype)
    geometry = (tuple(ss), tuple(ds), tuple(pads), groups, dev)
    # a VJP unit where a gradient may flow: float, one device, sizes known (a symbolic batch keeps the windows' own
    # gradient)
    if dt.is_float and not isinstance(dev, tuple) and all(type(d) is int for d in (*x.shape, *weight.shape)):
        px, pw = UOp.param(0, x.dtype, x.shape, dev), UOp.param(1, weight.dtype, weight.shape, dev)
        out = vjp_unit(_CONV, geometry, _conv(px, pw, dt, geometry), [x.uop, weight.uop])
    else:
        out = _conv(x.uop, weight.uop, dt, geometry)
    res = tt.Tensor._wrap(out, dev)
    if bias is not None:
        if bias.shape != (cout,):
            raise ShapeError(f"conv2d: bias must have shape ({cout},), got {fmt_shape(bias.shape)}")
        res = res + bias.reshape(1, cout, *([1] * ns))
    return res


def _conv(x: UOp, w: UOp, dt: DType, geometry: tuple) -> UOp:
    """conv2d's value (no bias) of x (N, Cin, *spatial) and w (Cout, Cin/groups, *kernel) in dtype dt: the product
    of x's windows and the weight, summed over input channels and taps."""
    ss, ds, pads, groups, dev = geometry
    n, _, *spatial = x.shape
    cout, cin_g, *ks = w.shape
    ns = len(ks)
    os, extra = _out_sizes("conv2d", spatial, ks, ss, ds, list(pads), False)
    win = _pooled(x.cast(dt), ks, ss, ds, list(pads), extra, os, 0)  # (N, Cin, o..., k...)
    g, cout_g = groups, cout // groups
    xw = win.reshape((n, g, 1, cin_g, *os, *ks))
    ww = _channels_last(w.cast(dt), g, math.prod(os) * n, dev).reshape((1, g, cout_g, cin_g, *([1] * ns), *ks))
    full = (n, g, cout_g, cin_g, *os, *ks)
    prod = expand_uop(xw, full).cast(_acc(dt)) * expand_uop(ww, full).cast(_acc(dt))
    red_axes = (3, *range(4 + ns, 4 + 2 * ns))
    return reduce_uop(prod, Ops.ADD, red_axes, False).cast(dt).reshape((n, cout, *os))


_CONV = "conv"
# Output channels per group from which a conv's weight gradient is a matmul (_conv_vjp); fewer (a depthwise conv's
# one) and the matmul's columns are a strided gather of g, its rows a window copy of 9x the input: the plain
# reduction reads both along the output positions instead. Depthwise N16 64 channels 28x28 3x3, forward and
# backward on a 2-core AVX-512 Xeon: 19 ms as the matmul, 5.3 as the reduction (torch eager 2-5 there).
_PRODUCT_COLUMNS = 4


def _conv_vjp(g: UOp, args: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
    """The gradients of conv2d(x, w) (no bias; strides ss, dilations ds, padding pairs, groups, on device dev) for
    an incoming g (N, Cout, O...), each an operation of its own rather than the reverse of the windows:
    x's is the transposed convolution of g by w (conv_transpose2d: a convolution of g padded, or for strides > 1
    its subpixel phases), its output_padding the input's tail that no window reads; where the paddings differ per
    side it is computed unpadded and cropped;
    w's, dw[co, ci, k...] = sum over n and output positions o of x_padded[n, ci, s o + d k] g[n, co, o], is one
    matmul per group, (Cin_g k..., N O...) x (N O..., Cout_g): x's windows copied row after row (a copy that
    reads and writes along the output positions, each row's axes kept apart so no index is divided), and g stored
    channels-last once, which the transposed convolution reads as well; with fewer than _PRODUCT_COLUMNS output
    channels per group (a depthwise conv) the plain reduction of g times x's windows instead.
    Through the windows' own gradient, the weight's gradient was a reduction over N O... gathering both operands
    a lane at a time, and the input's a materialized (k..., O..., N, Cin) product summed by two more kernels: a
    conv's forward and backward (N32, 32->64 channels, 32x32, 3x3) took 546 ms, 21-24 ms as this VJP (torch eager
    15-28 ms for the same step, a noisy 2-core AVX-512 Xeon; benchmarks.bench_train's conv rows)."""
    x, w = args
    ss, ds, pads, groups, dev = params
    dt = g.dtype
    n, _, *spatial = x.shape
    cout, cin_g, *ks = w.shape
    ns = len(ks)
    os, extra = _out_sizes("conv2d", spatial, ks, ss, ds, list(pads), False)
    grp, cout_g, red = groups, cout // groups, n * math.prod(os)
    product = cout_g >= _PRODUCT_COLUMNS
    gt = tt.Tensor._wrap(g, dev)
    if product:  # g stored channels-last once: the right operand of the weight's product reads rows of channels
        last = (0, *range(2, 2 + ns), 1)
        gt = gt.permute(*last).contiguous().permute(0, 1 + ns, *range(1, 1 + ns))
    else:
        gt = gt.contiguous()
    wt = tt.Tensor._wrap(w.cast(dt), dev)
    tails = [length + b + a - d * (k - 1) - 1 - (o - 1) * s
             for length, (b, a), k, s, d, o in zip(spatial, pads, ks, ss, ds, os, strict=True)]
    if all(b == a for b, a in pads):
        dx = conv_transpose2d(gt, wt, None, ss, [b for b, _ in pads], tails, groups, ds)
    else:
        full = conv_transpose2d(gt, wt, None, ss, 0, tails, groups, ds)
        dx = full.shrink([None, None, *[(b, b + length) for (b, _), length in zip(pads, spatial, strict=True)]])
    xs = x.cast(dt)
    # padded once, contiguous: the window copy below then has no gate, and along a stride-1 row gcc vectorizes it
    # (N32 32->64 32x32 3x3: 3.6 -> 1.9 ms, plus 0.7 for the padded copy); along a strided row it stays a gather,
    # and a small copy (under 1M elements: the digits CNN's) does not pay for the extra kernel
    big = cin_g * groups * math.prod(ks) * red >= 1 << 20
    if product and big and ss[-1] == 1 and ds[-1] == 1 and any(b or a for b, a in pads):
        xs = tt.Tensor._wrap(xs, dev).pad(((0, 0), (0, 0), *pads)).contiguous().uop
        pads = tuple((0, 0) for _ in pads)
    win = _pooled(xs, ks, ss, ds, list(pads), extra, os, 0)  # (N, Cin, O..., k...)
    chunks = _batch_chunks(dev, n, math.prod(os))
    nb, m = n // chunks, cin_g * math.prod(ks)
    if not product:  # each weight a sum over N O... of g times x's window: both read along the output positions
        xw = win.reshape((chunks, nb, grp, 1, cin_g, *os, *ks))
        gw = gt.uop.reshape((chunks, nb, grp, cout_g, 1, *os, *([1] * ns)))
        shape = (chunks, nb, grp, cout_g, cin_g, *os, *ks)
        prod = expand_uop(xw, shape).cast(_acc(dt)) * expand_uop(gw, shape).cast(_acc(dt))
        part = reduce_uop(prod, Ops.ADD, (1, *range(5, 5 + ns)), False)  # (chunks, G, Cout_g, Cin_g, k...)
        dw_u = (reduce_uop(part, Ops.ADD, (0,), False) if chunks > 1 else part).cast(dt).reshape(w.shape)
        return dx.uop.cast(x.dtype), dw_u.cast(w.dtype)
    # x's windows as (G, chunks, Cin_g k..., N/chunks O...): a copy that reads and writes along the output positions
    a = tt.Tensor._wrap(win.reshape((chunks, nb, grp, cin_g, *os, *ks)), dev)
    a = a.permute(2, 0, 3, *range(4 + ns, 4 + 2 * ns), 1, *range(4, 4 + ns)).contiguous()
    a = a.reshape(grp * chunks, m, red // chunks)
    b = gt.reshape(chunks, nb, grp, cout_g, *os).permute(2, 0, 1, *range(4, 4 + ns), 3)
    parts = a @ b.reshape(grp * chunks, red // chunks, cout_g)
    dw = parts.reshape(grp, chunks, m, cout_g).sum(1) if chunks > 1 else parts
    dw = dw.contiguous().reshape(grp, cin_g, *ks, cout_g).permute(0, 2 + ns, 1, *range(2, 2 + ns))
    dw = dw.reshape(cout, cin_g, *ks)
    return dx.uop.cast(x.dtype), dw.uop.cast(w.dtype)


def _batch_chunks(dev: Device, n: int, positions: int) -> int:
    """The chunks of the batch whose partial weight gradients _conv_vjp sums after its product: 1 on the cpu (its
    cores are busy with one product), on a GPU target the most of at most 64 that leave each at least 512 of the
    reduction: a weight gradient has few outputs (Cin_g k x Cout_g) and a long reduction (N O...), and as one
    product it fills a few blocks of a GPU (N32 32->64 channels 32x32 3x3: 5 blocks of 64 x 64 outputs for 132
    multiprocessors); a chunk each, as many times more. Not measured on a GPU yet."""
    from devices import target_for

    if isinstance(dev, tuple) or not target_for(dev).warp_size:
        return 1
    return max((d for d in range(1, min(n, 64) + 1) if n % d == 0 and n // d * positions >= 512), default=1)


register_vjp(_CONV, _conv_vjp)


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1, padding: IntOrTuple = 0,
           dilation: IntOrTuple = 1, groups: int = 1) -> Tensor:
    """torch's conv1d: x (N, Cin, L), weight (Cout, Cin/groups, k); conv2d with one spatial axis."""
    if weight.ndim != 3:
        raise ShapeError(f"conv1d: weight {fmt_shape(weight.shape)} must be (Cout, Cin/groups, k)")
    return conv2d(x, weight, bias, stride, padding, dilation, groups)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: IntOrTuple = 1,
                     padding: IntOrTuple = 0, output_padding: IntOrTuple = 0, groups: int = 1,
                     dilation: IntOrTuple = 1) -> Tensor:
    """torch's conv_transpose2d (the gradient of conv2d with respect to its input), x (N, Cin, *spatial), weight
    (Cin, Cout/groups, *kernel); any number of spatial axes (weight.ndim - 2). Output size per axis:
    (L - 1)*stride - 2*padding + dilation*(k - 1) + output_padding + 1.

    Stride 1: a conv2d of the input padded by dilation*(k - 1) - padding on each side (a crop where negative) plus
    output_padding after, with the kernel flipped in space and its channel axes swapped within each group. Stride
    > 1 with dilation 1: one such stride-1 transposed conv per output phase, interleaved (`_subpixel`), whose
    gradients are the operation's own, a strided conv2d and a matmul (`_strided_transposed`). Stride > 1
    with dilation > 1: the input spread out with stride - 1 zeros between elements first (s^n times the work of
    the phases)."""
    ns = weight.ndim - 2
    what = "conv_transpose2d"
    if ns < 1 or x.ndim != ns + 2:
        raise ShapeError(f"{what}: input {fmt_shape(x.shape)} and weight {fmt_shape(weight.shape)} do not fit: need "
                         f"input (N, Cin, *spatial) and weight (Cin, Cout/groups, *kernel) with as many spatial axes")
    n, cin, *spatial = x.shape
    wcin, cout_g, *ks = weight.shape
    if groups < 1 or cin != wcin or cin % groups:
        raise ShapeError(f"{what}: input has {cin} channels and weight {fmt_shape(weight.shape)} with "
                         f"groups={groups}: need Cin == weight.shape[0] and Cin % groups == 0")
    ss, ds = _tuple(stride, ns, what, "stride"), _tuple(dilation, ns, what, "dilation")
    ps, ops = _tuple(padding, ns, what, "padding"), _tuple(output_padding, ns, what, "output_padding")
    if any(v <= 0 for v in (*ss, *ds)) or any(v < 0 for v in (*ps, *ops)):
        raise ShapeError(f"{what}: strides and dilations must be positive and paddings >= 0, got stride={ss}, "
                         f"dilation={ds}, padding={ps}, output_padding={ops}")
    if any(o >= s and o >= d for o, s, d in zip(ops, ss, ds, strict=True)):
        raise ShapeError(f"{what}: output_padding {ops} must be smaller than the stride {ss} or the dilation {ds}")
    for length, k, s, d, p, o in zip(spatial, ks, ss, ds, ps, ops, strict=True):
        if (length - 1) * s - 2 * p + d * (k - 1) + o + 1 <= 0:
            raise ShapeError(f"{what}: input spatial shape {fmt_shape(tuple(spatial))} with kernel {tuple(ks)}, "
                             f"stride {ss}, padding {ps}: the output would be empty; use less padding")
    dt = promote(x.dtype, weight.dtype)
    xs = x.cast(dt) if x.dtype is not dt else x
    if any(s > 1 for s in ss) and all(d == 1 for d in ds):
        return _strided_transposed(xs, weight.cast(dt) if weight.dtype is not dt else weight, bias, ss, ps, ops,
                                   groups)
    if any(s > 1 for s in ss):  # spread: (.., L) -> (.., L, s) with zeros after each element, then drop the tail
        inter = [v for length, s in zip(spatial, ss, strict=True) for v in (length, 1)]
        xs = xs.reshape(n, cin, *inter)
        xs = xs.pad([(0, 0), (0, 0), *[(0, v) for s in ss for v in (0, s - 1)]])
        xs = xs.reshape(n, cin, *[length * s for length, s in zip(spatial, ss, strict=True)])
        xs = xs.shrink([None, None, *[(0, (length - 1) * s + 1) for length, s in zip(spatial, ss, strict=True)]])
    edge = [d * (k - 1) - p for k, d, p in zip(ks, ds, ps, strict=True)]
    xs = xs.pad([(0, 0), (0, 0), *[(e, e + o) for e, o in zip(edge, ops, strict=True)]])
    g = groups
    w = weight.reshape(g, cin // g, cout_g, *ks).transpose(1, 2).reshape(g * cout_g, cin // g, *ks)
    w = w.flip(tuple(range(2, 2 + ns)))
    return conv2d(xs, w, bias, 1, 0, ds, g)


def _strided_transposed(x: Tensor, weight: Tensor, bias: Tensor | None, ss: Sequence[int], ps: Sequence[int],
                        ops: Sequence[int], groups: int) -> Tensor:
    """conv_transpose2d with strides > 1 (dilation 1): the subpixel phases forward (`_subpixel`), wrapped as a VJP
    unit (rules.gradients.VjpUnit) whose backward is that of the operation rather than of its phases: the input
    gradient of a transposed convolution is the strided convolution conv2d(g, w) and the weight gradient one
    matmul of x against g's windows (`_transposed_vjp`). Through the phases, the input
    gradient ran as 4 phase products gathering weights 256 floats apart plus 2 kernels adding them up (3.6 + 0.6
    ms of a 10 ms step for the benchmark's N16 32->16 16x16 k4 s2 layer on a 2-core Xeon)."""
    dev = x.device
    px = tt.Tensor._wrap(UOp.param(0, x.dtype, x.shape, dev), dev)
    pw = tt.Tensor._wrap(UOp.param(1, weight.dtype, weight.shape, dev), dev)
    body = _subpixel(px, pw, ss, ps, ops, groups).uop
    res = tt.Tensor._wrap(vjp_unit(_TRANSPOSED, (tuple(ss), tuple(ps), groups, dev), body, [x.uop, weight.uop]), dev)
    if bias is not None:
        cout = weight.shape[1] * groups
        if bias.shape != (cout,):
            raise ShapeError(f"conv_transpose2d: bias must have shape ({cout},), got {fmt_shape(bias.shape)}")
        res = res + bias.reshape(1, cout, *([1] * len(ss)))
    return res


_TRANSPOSED = "conv-transpose"


def _transposed_vjp(g: UOp, args: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
    """The gradients of conv_transpose(x, w) (strides ss, paddings ps, groups, on device dev) for an incoming g
    (N, Cout, O...):
    x's is conv2d(g, w) with those strides and paddings (its output is x's size, as output_padding < stride);
    w's, dw[ci, co, k...] = sum over n and positions i of x[n, ci, i] g[n, co, s i + k - p], is one matmul per
    group: x as (Cin_g, N L...) times g's windows (those conv2d(g, .) reads) as (N L..., Cout_g k...), so the
    strided window reads become the product's packed copy of its right operand instead of a gather in every
    step of a long reduction (7 ms against 0.6 for the benchmark's layer). The right operand's columns are ordered
    (k..., Cout_g) and the result permuted back: with Cout_g innermost a vector of output lanes is contiguous in
    the packed panels (ordered (Cout_g, k...) the lanes gathered across panels: 1.05 ms against 0.76). x is made
    contiguous as (Cin_g, N L...) first (0.06 ms; the product read it 256 floats apart per lane otherwise)."""
    x, w = args
    ss, ps, groups, dev = params  # dev: the tensors' device (g's UOp may be a constant of none)
    gt, wt = tt.Tensor._wrap(g, dev), tt.Tensor._wrap(w, dev)
    dx = conv2d(gt, wt, None, ss, ps, 1, groups).uop
    n, cin, *spatial = x.shape
    cout = g.shape[1]
    ks = w.shape[2:]
    ns = len(ks)
    pads = [(p, p) for p in ps]
    os, extra = _out_sizes("conv_transpose2d", g.shape[2:], ks, ss, (1,) * ns, pads, False)
    win = _pooled(g, ks, ss, (1,) * ns, pads, extra, os, 0)  # (N, Cout, L..., k...): os == spatial
    grp, cin_g, cout_g = groups, cin // groups, cout // groups
    red = n * math.prod(spatial)
    a = tt.Tensor._wrap(x, dev).reshape(n, grp, cin_g, *spatial).permute(1, 2, 0, *range(3, 3 + ns))
    b = tt.Tensor._wrap(win.reshape((n, grp, cout_g, *os, *ks)), dev)
    b = b.permute(1, 0, *range(3, 3 + ns), *range(3 + ns, 3 + 2 * ns), 2)  # (G, N, L..., k..., Cout_g)
    dw = a.reshape(grp, cin_g, red).contiguous() @ b.reshape(grp, red, math.prod(ks) * cout_g)
    dw = dw.reshape(cin, *ks, cout_g).permute(0, 1 + ns, *range(1, 1 + ns))
    return dx, dw.uop


register_vjp(_TRANSPOSED, _transposed_vjp)


def _subpixel(x: Tensor, weight: Tensor, ss: Sequence[int], ps: Sequence[int], ops: Sequence[int],
              groups: int) -> Tensor:
    """conv_transpose2d with strides > 1 (dilation 1) as stride-1 transposed convolutions, one per output phase:
    output position o (uncropped, o = i*s + j for input i and tap j) has phase r = o mod s, and the taps that reach
    it are j = r, r + s, ...: phase r is x convolved (stride 1, full) with the sub-kernel w[r::s], and the output
    interleaves the phases. No product with an inserted zero is computed (the spread form does s^n times the work).
    The forward of `_strided_transposed`, which gives the gradients and adds the bias."""
    n, _, *spatial = x.shape
    ns = len(ss)
    ks = weight.shape[2:]
    cout = weight.shape[1] * groups
    qs = [length - 1 + -(-k // s) for length, k, s in zip(spatial, ks, ss, strict=True)]  # positions per phase
    phases: dict[tuple[int, ...], Tensor] = {}
    for rs in itertools.product(*[range(s) for s in ss]):
        taps = [len(range(r, k, s)) for r, k, s in zip(rs, ks, ss, strict=True)]
        if 0 in taps:  # a stride larger than the kernel: this phase gets no tap
            phases[rs] = tt.Tensor.zeros(n, cout, *qs, dtype=x.dtype, device=x.device)
            continue
        sub = weight.shrink([None, None, *[(r, r + s * (t - 1) + 1) for r, s, t in zip(rs, ss, taps, strict=True)]])
        if any(s > 1 for s in ss):  # w[r::s]: a reshape to (t, s) per axis, keeping column 0
            sub = sub.pad([(0, 0), (0, 0), *[(0, s - 1) for s in ss]])
            inter = [v for t, s in zip(taps, ss, strict=True) for v in (t, s)]
            sub = sub.reshape(*sub.shape[:2], *inter)
            sub = sub.shrink([None, None, *[v for _ in ss for v in (None, (0, 1))]]).reshape(*sub.shape[:2], *taps)
        # each phase its own kernels, forward and backward: fused into the interleave (a select), every output
        # element (every weight element, for the weight's gradient) would compute all s^n phases' sums
        y = conv_transpose2d(x, sub.contiguous_backward(), None, 1, 0, 0, groups, 1).contiguous()
        phases[rs] = y.pad([(0, 0), (0, 0), *[(0, q - v) for q, v in zip(qs, y.shape[2:], strict=True)]])
    # interleave: (N, C, Q1, s1, Q2, s2, ...) -> (N, C, Q1*s1, Q2*s2, ...), built from the last axis
    def nest(prefix: tuple[int, ...]) -> Tensor:
        d = len(prefix)
        if d == ns:
            return phases[prefix].reshape(n, cout, *[v for q in qs for v in (q, 1)])
        return tt.Tensor.cat(*[nest((*prefix, r)) for r in range(ss[d])], dim=3 + 2 * d)

    full = nest(()).reshape(n, cout, *[q * s for q, s in zip(qs, ss, strict=True)])
    outs = [(length - 1) * s - 2 * p + k + o for length, s, p, k, o in zip(spatial, ss, ps, ks, ops, strict=True)]
    extra = [max(0, p + o_len - q * s) for p, o_len, q, s in zip(ps, outs, qs, ss, strict=True)]
    if any(extra):
        full = full.pad([(0, 0), (0, 0), *[(0, e) for e in extra]])
    return full.shrink([None, None, *[(p, p + o_len) for p, o_len in zip(ps, outs, strict=True)]])


def _pool_args(x: Tensor, kernel_size: IntOrTuple, stride: IntOrTuple | None, dilation: IntOrTuple,
               padding: IntOrTuple | Sequence[tuple[int, int]], ceil_mode: bool, what: str) -> tuple:
    ks = _tuple(kernel_size, 2 if isinstance(kernel_size, int) else len(tuple(kernel_size)), what, "kernel_size")
    ns = len(ks)
    if x.ndim < ns:
        raise ShapeError(f"{what}: a {ns}-d kernel needs at least {ns} axes, got shape {fmt_shape(x.shape)}")
    ss = ks if stride is None else _tuple(stride, ns, what, "stride")
    ds = _tuple(dilation, ns, what, "dilation")
    pads = _padding(padding, ns, what)
    os, extra = _out_sizes(what, x.shape[-ns:], ks, ss, ds, pads, ceil_mode)
    return ks, ss, ds, pads, os, extra


def max_pool2d(x: Tensor, kernel_size: IntOrTuple = (2, 2), stride: IntOrTuple | None = None,
               padding: IntOrTuple | Sequence[tuple[int, int]] = 0, dilation: IntOrTuple = 1,
               ceil_mode: bool = False) -> Tensor:
    """Max over windows of the last len(kernel_size) axes (stride defaults to the kernel size, as torch);
    padding never wins (it is -inf, or the dtype's minimum for ints)."""
    ks, ss, ds, pads, os, extra = _pool_args(x, kernel_size, stride, dilation, padding, ceil_mode, "max_pool2d")
    fill = -math.inf if x.dtype.is_float else x.dtype.min
    win = _pooled(x.uop, ks, ss, ds, pads, extra, os, fill)
    nd = len(win.shape)
    return tt.Tensor._wrap(reduce_uop(win, Ops.MAX, tuple(range(nd - len(ks), nd)), False), x.device)


def avg_pool2d(x: Tensor, kernel_size: IntOrTuple = (2, 2), stride: IntOrTuple | None = None,
               padding: IntOrTuple | Sequence[tuple[int, int]] = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, dilation: IntOrTuple = 1) -> Tensor:
    """Mean over windows. The divisor follows torch: the window's elements inside the input, plus the explicit
    padding when count_include_pad; never the extra elements ceil_mode adds."""
    ks, ss, ds, pads, os, extra = _pool_args(x, kernel_size, stride, dilation, padding, ceil_mode, "avg_pool2d")
    xf = x if x.dtype.is_float else x.cast(dtypes.default_float)
    acc = _acc(xf.dtype)
    win = _pooled(xf.uop.cast(acc), ks, ss, ds, pads, extra, os, 0)
    nd, ns = len(win.shape), len(ks)
    axes = tuple(range(nd - ns, nd))
    total = reduce_uop(win, Ops.ADD, axes, False)
    # the divisor per output position: the same windows over a mask of the cells that count
    spatial = x.shape[-ns:]
    if count_include_pad:
        mask = const_uop(1.0, acc, tuple(s + b + a for s, (b, a) in zip(spatial, pads, strict=True)))
        cnt = windows(mask.pad([0] * ns, extra), ks, ss, ds, os)
    else:
        cnt = _pooled(const_uop(1.0, acc, spatial), ks, ss, ds, pads, extra, os, 0)
    count = reduce_uop(cnt, Ops.ADD, tuple(range(ns, 2 * ns)), False)
    return tt.Tensor._wrap((total / expand_uop(count, total.shape)).cast(xf.dtype), x.device)


# ---------------------------------------------------------------- activations


def relu(x: Tensor) -> Tensor:
    """max(x, 0) with torch's gradient at 0 (none: the where sends it to the constant); nan stays nan."""
    return ew.where(lg.le(x, 0), 0, x)


def sigmoid(x: Tensor) -> Tensor:
    return ew._unit_math(x, _un.sigmoid)


def tanh(x: Tensor) -> Tensor:
    return ew._unit_math(x, _un.tanh)


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(x: Tensor, approximate: str = "tanh") -> Tensor:
    """GELU. Default: the tanh approximation (as tinygrad); approximate="none" is the exact x*Phi(x) via erf
    (torch's default)."""
    xf = ew.floatify(x)
    if approximate == "tanh":
        inner = ew.mul(ew.add(xf, ew.mul(ew.mul(ew.mul(xf, xf), xf), 0.044715)), _SQRT_2_OVER_PI)
        return ew.mul(xf, sigmoid(ew.mul(inner, 2.0)))  # 0.5 * (1 + tanh(z)) = sigmoid(2z), with no cancellation
    if approximate == "none":
        return ew.mul(ew.mul(xf, 0.5), ew.add(ew.erf(ew.mul(xf, 1.0 / math.sqrt(2.0))), 1.0))
    raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")


def silu(x: Tensor) -> Tensor:
    return ew._unit_math(x, _un.silu)


def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, computed as max(bx, 0) + log(1 + exp(-|bx|)) so it never overflows."""
    bx = ew.mul(ew.floatify(x), beta)
    return ew.mul(ew.add(ew.maximum(bx, 0.0), ew._unit_math(ew.neg(ew.abs_(bx)), _un.log1p_exp)), 1.0 / beta)


def leaky_relu(x: Tensor, neg_slope: float = 0.01) -> Tensor:
    return ew.where(lg.lt(x, 0), ew.mul(x, neg_slope), x)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    # expm1 of min(x, 0): the unused branch's derivative e**x would be inf for a large x, and 0 * inf = nan
    xf = ew.floatify(x)
    neg = ew.where(lg.gt(xf, 0), 0.0, xf)
    return ew.where(lg.gt(xf, 0), xf, ew.mul(ew._unit_math(neg, _un.expm1), alpha))


def relu6(x: Tensor) -> Tensor:
    return ew.clip(x, 0, 6)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return ew.clip(x, min_val, max_val)


__all__ = ["avg_pool2d", "conv1d", "conv2d", "conv_transpose2d", "elu", "gelu", "hardtanh", "leaky_relu", "matmul",
           "max_pool2d", "relu", "relu6", "sigmoid", "silu", "softplus", "tanh", "windows"]
