"""Neural-network ops: matmul (the spec's gemm with batch axes), pooling over sliding windows built from movement
ops, and activations; convolution is tensor.conv's (re-exported here), over the same windows.

Sliding windows without a strided op or a loop over output positions (`_windows_last`): to read, for each of
k kernel taps j and output positions q, the element x[q + j*d] of a length-L axis, tile x (period L), flatten,
and re-read it in rows of length L + d. Row j then starts j*(L + d) = j*L + j*d into the tiling, which is
element j*d of a copy of x: each row is x shifted by j*d. Keeping the first o*s columns of each row, then
every s-th one (a reshape to (o, s) and a shrink), gives the strided windows. Pooling and convolution apply
this along each spatial axis and reduce over the tap axes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import DType, dtypes, promote
from rewrite.errors import ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp
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
    rows = m * math.prod(batch) // max(1, math.prod(b.shape[:-2]))  # rows of a that reuse each of b's panels
    wide = _widened(work, dev, rows, k, n)
    a = a.cast(work) if wide is None else a.cast(work).cast(wide).contiguous()
    au = expand_uop(a.reshape((*a.shape, 1)), full)
    # a weight that no gradient flows into keeps its packed copy from forward to forward (tensor.packed)
    bp = _panels(b.cast(work), rows, dev, not w.requires_grad, wide)
    bu = expand_uop(bp.reshape((*b.shape[:-2], 1, k, n)), full)
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


# 16-bit float matmuls on a CPU read float32 copies of their operands (`_widened`) from this many multiply-adds on
# (each axis 16 or more): the products are float32 either way, but converting each 16-bit element inside the
# product loop, at every use, cost most of the time: matmul 1024 ran at 4.5 (half) and 5.0 (bfloat16) GFLOP/s as
# scalar code, and 10 / 62 with the conversions vectorized (lower.optimize._lane_unfriendly), where the float32
# copies give ~350 (2-core AVX-512 Xeon). The copies cost a pass over each operand, repaid many times over by a
# reduction of 16 or more.
WIDEN_MIN_MACS = 1 << 15


def _widened(dt: DType, dev: Device, m: int, k: int, n: int) -> DType | None:
    """float32 where a matmul of `dt` (m rows reusing each of b's elements, k long, n columns) on `dev` should read
    float32 copies of its half or bfloat16 operands: a CPU target (its vector code converts 16-bit floats lane by
    lane; a GPU's tensor cores take them as they are, an interpreter has no vectors), each axis 16 or more (a
    matrix-vector product is memory-bound: a wider copy would only move more bytes) and WIDEN_MIN_MACS or more."""
    if dt not in (dtypes.float16, dtypes.bfloat16) or min(m, k, n) < 16 or m * k * n < WIDEN_MIN_MACS:
        return None
    from devices import target_for

    target = target_for(dev if isinstance(dev, str) else dev[0])
    if target.interpreted or target.warp_size or not target.vector_bytes:
        return None
    return dtypes.float32


def _panels(b: UOp, m: int, dev: Device, keep: bool = False, wide: DType | None = None) -> UOp:
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
    read through a packed copy kept from an earlier call while its data is unchanged (tensor.packed). `wide`: the
    copy (packed, or else row-major) holds b cast to that dtype (`_widened`)."""
    from devices import target_for
    from lower.opt_tiles import matmul_panel_bytes

    k, n = b.shape[-2], b.shape[-1]
    size = (wide or b.dtype).itemsize
    target = target_for(dev if isinstance(dev, str) else dev[0])
    panel = 0 if target.interpreted else matmul_panel_bytes(target) // size
    plain = b if wide is None else b.cast(wide).contiguous()
    if not panel or n <= panel or k < 64 or m < 16:
        return plain
    if n * size < 4096 and k * n * size <= target.l2_bytes and not _permuted(b) and m < PANEL_ROWS:
        return plain
    if isinstance(dev, tuple) and isinstance(b.device, tuple) and b.axis == b.ndim - 1 and \
            (n % panel or (n // panel) % len(dev)):
        return plain  # the panels would split the devices' blocks of N (rewrite.props.reshape_axis)
    n_pad = -(-n // panel) * panel
    if keep and _pk.reusable(b, dev):
        key = panel if wide is None else (panel, wide.name)
        packed = _pk.packed(b, functools.partial(_pack, panel=panel, wide=wide), key, cast(str, dev))
    else:
        packed = _pack(b, panel, wide)
    return packed.permute(_swap(b.ndim)).reshape((*b.shape[:-1], n_pad)).shrink((0,) * b.ndim, b.shape)


def _swap(ndim: int) -> tuple[int, ...]:
    """The permutation (.., K, N/P, P) <-> (.., N/P, K, P) that packs an operand (.., K, N) of `ndim` axes into
    column panels: its own inverse."""
    nb = ndim - 2
    return (*range(nb), nb + 1, nb, nb + 2)


def _pack(b: UOp, panel: int, wide: DType | None = None) -> UOp:
    """b (..., K, N) copied as column panels (..., N/P, K, P), N padded with zeros to whole panels of P (cast to
    `wide` on the way)."""
    k, n = b.shape[-2], b.shape[-1]
    n_pad = -(-n // panel) * panel
    src = (b if wide is None else b.cast(wide)).pad((0,) * b.ndim, (*(0,) * (b.ndim - 1), n_pad - n))
    return src.reshape((*b.shape[:-2], k, n_pad // panel, panel)).permute(_swap(b.ndim)).contiguous()


def _permuted(x: UOp) -> bool:
    """Whether x is read through a PERMUTE among the movement ops and casts above its data."""
    while x.op in (Ops.CAST, Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.CONTIGUOUS):
        if x.op is Ops.PERMUTE:
            return True
        x = x.src[0]
    return False


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


# ---------------------------------------------------------------- pooling


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


# the functional API keeps convolution under tensor.nn; it lives in tensor.conv, which reads the windows above
from tensor.conv import conv1d, conv2d, conv_transpose2d  # noqa: E402
