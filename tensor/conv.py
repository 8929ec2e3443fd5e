"""Convolution: conv2d (and conv1d, one spatial axis) over tensor.nn's sliding windows, and conv_transpose2d.

Both are differentiated as operations (rules.gradients.VjpUnit), not through their windows: conv2d's input gradient
is a transposed convolution and its weight gradient a matmul per group (or, depthwise, the plain reduction); a
strided conv_transpose2d runs forward as subpixel phases and takes the strided conv2d and a matmul backward.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.dtype import DType, promote
from rewrite.errors import DTypeError, ShapeError
from rewrite.ops import Ops
from rewrite.uop import UOp
from rules.gradients import register_vjp, vjp_unit
from tensor.elementwise import common_device, expand_uop
from tensor.helpers import Device
from tensor.nn import IntOrTuple, _acc, _out_sizes, _padding, _pooled, _tuple, _widened
from tensor.reduce import reduce_uop
from tensor.template import Template

if TYPE_CHECKING:
    from tensor.tensor import Tensor


def _channels_last(w: UOp, groups: int, positions: int, dev: Device) -> UOp:
    """conv2d's weight (Cout, Cin/g, *kernel) read through a copy with the output channel innermost, so a register
    tile can load a vector of output channels per tap (lower.opt_tiles: the channels are the lanes, the output
    positions the rows). Only where it pays: the target packs operands (a compiled target with vector registers),
    whole vectors (or half vectors) of output channels per group, and many output positions reusing the small copy.
    Half vectors: 8 output channels on a 16-lane target ran the CNN layer (N100, 16->8, 4x4) in 0.33 ms packed
    against 3.8 unpacked, and 16->24 channels at 28x28 in 3.4 against 10.9 (2-core AVX-512 Xeon); but a half
    vector over a reduction of fewer taps than lanes (1->8 channels, 3x3) lost: 0.20 against 0.08 ms."""
    cout, rest = w.shape[0], w.shape[1:]
    if not _packs_channels(cout // groups, math.prod(rest), positions, dev, w.dtype.itemsize):
        return w
    nk = len(rest)
    split = w.reshape((groups, cout // groups, *rest))
    order = (0, *range(2, 2 + nk), 1)  # (g, Cin/g, *kernel, Cout/g)
    back = (0, 1 + nk, *range(1, 1 + nk))
    return split.permute(order).contiguous().permute(back).reshape(w.shape)


def _packs_channels(cout_g: int, depth: int, positions: int, dev: Device, itemsize: int = 4) -> bool:
    """Whether _channels_last packs a conv's weight: `cout_g` output channels per group, a reduction `depth` deep
    (Cin/g times the taps) and `positions` outputs per channel on device `dev`, elements `itemsize` bytes."""
    from devices import target_for

    if isinstance(dev, tuple):
        return False
    target = target_for(dev)
    lanes = target.lanes(itemsize)
    whole = cout_g % lanes == 0 or (cout_g % max(1, lanes // 2) == 0 and depth >= lanes)
    return not target.interpreted and bool(target.vector_bytes) and whole and positions >= 256


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
        out = vjp_unit(_CONV, geometry, _conv_body(x.uop, weight.uop, dt, geometry), [x.uop, weight.uop])
    else:
        out = _conv(x.uop, weight.uop, dt, geometry)
    res = tt.Tensor._wrap(out, dev)
    if bias is not None:
        if bias.shape != (cout,):
            raise ShapeError(f"conv2d: bias must have shape ({cout},), got {fmt_shape(bias.shape)}")
        res = res + bias.reshape(1, cout, *([1] * ns))
    return res


# Built once per key: conv2d's value over PARAMs (a VjpUnit's body), and its VJP as a tensor.template over
# placeholders for g, x and w. Both are pure functions of the operands' shapes and dtypes, the geometry and the
# device's Target (which _widened, _channels_last and _batch_chunks read; its key is in theirs), so a training
# step's convolutions and their gradients are not built through the Tensor ops again at every step.
_KEPT = 256


def _target_key(geometry: tuple) -> object:
    from devices import target_for

    return target_for(geometry[-1]).key


def _conv_body(x: UOp, w: UOp, dt: DType, geometry: tuple) -> UOp:
    """conv2d's value over PARAM 0 and 1 standing for x and w (a VjpUnit's body)."""
    return _body_of(x.shape, x.dtype, w.shape, w.dtype, dt, geometry, _target_key(geometry))


@functools.lru_cache(maxsize=_KEPT)
def _body_of(xs: tuple, xdt: DType, ws: tuple, wdt: DType, dt: DType, geometry: tuple, _target: object) -> UOp:
    dev = geometry[-1]
    return _conv(UOp.param(0, xdt, xs, dev), UOp.param(1, wdt, ws, dev), dt, geometry)


def _conv(x: UOp, w: UOp, dt: DType, geometry: tuple) -> UOp:
    """conv2d's value (no bias) of x (N, Cin, *spatial) and w (Cout, Cin/groups, *kernel) in dtype dt: the product
    of x's windows and the weight, summed over input channels and taps."""
    ss, ds, pads, groups, dev = geometry
    n, _, *spatial = x.shape
    cout, cin_g, *ks = w.shape
    ns = len(ks)
    os, extra = _out_sizes("conv2d", spatial, ks, ss, ds, list(pads), False)
    g, cout_g = groups, cout // groups
    # half and bfloat16 on a CPU: float32 copies of both operands, so the product loop vectorizes (tensor.nn._widened)
    wide = _widened(dt, dev, math.prod(os) * n, cin_g * math.prod(ks), cout_g)
    xs, ws = x.cast(dt), w.cast(dt)
    if wide is not None:
        xs, ws = xs.cast(wide).contiguous(), ws.cast(wide)
    win = _pooled(xs, ks, ss, ds, list(pads), extra, os, 0)  # (N, Cin, o..., k...)
    xw = win.reshape((n, g, 1, cin_g, *os, *ks))
    packed = _channels_last(ws, g, math.prod(os) * n, dev)
    if wide is not None and packed is ws:
        packed = ws.contiguous()
    ww = packed.reshape((1, g, cout_g, cin_g, *([1] * ns), *ks))
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
    """_conv_grads, rebuilt from its template for the operands' shapes and dtypes (`_vjp_template`)."""
    x, w = args
    if isinstance(params[-1], tuple):
        return _conv_grads(g, args, params)
    t = _vjp_template(params, _target_key(params), *((u.shape, u.dtype) for u in (g, x, w)))
    return _conv_grads(g, args, params) if t is None else tuple(t([g, x, w]))


@functools.lru_cache(maxsize=_KEPT)
def _vjp_template(params: tuple, _target: object, *operands: tuple) -> Template | None:
    ph = [Template.placeholder(k, dt, shape, params[-1]) for k, (shape, dt) in enumerate(operands)]
    dx, dw = _conv_grads(ph[0], (ph[1], ph[2]), params)
    return None if dx is None or dw is None else Template.of([dx, dw], ph)


def _conv_grads(g: UOp, args: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
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
    if product and not _packs_channels(cin_g, cout_g * math.prod(ks), red, dev, dt.itemsize):
        # x's gradient reduces over g's channels, which g's copy has innermost: w's too then (a copy of the small
        # weight), so that reduction is contiguous in both operands and goes into lanes, where the transposed conv
        # does not put its own output channels there (_channels_last). The stem conv's (N8 3->32 64x64 7x7 s2)
        # phases: 10.8 -> 2.3 ms, gathering w 147 floats apart before (2-core AVX-512 Xeon)
        wt = wt.permute(*range(1, 2 + ns), 0).contiguous().permute(1 + ns, *range(0, 1 + ns))
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
