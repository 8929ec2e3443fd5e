"""Convolution and pooling nodes of the program fuzzer (fuzz_programs.py), and their numpy oracles.

A node reads another value of the program, reshaped to (N, C, *spatial) where its shape does not already fit (one
or two spatial axes), and is one of: conv2d (two spatial axes) or conv1d, conv_transpose2d (one or two), max_pool2d
and avg_pool2d. Kernels of 1-3 taps an axis (5 sometimes), strides 1-3, dilations 1-2, paddings 0-2 given in each
form the front end takes (an int, one per axis, (before, after) pairs, torch's flat order), groups dividing the
channels, a bias sometimes, output_padding on transposed convolutions, ceil_mode and count_include_pad on pools.
A convolution's weight and bias are new inputs of the program (`Node.weights`), so the shrinker reduces them as
any other input. Each node is bounded in multiply-adds (`draw`'s `most`), as the matmul nodes are by their sizes.

The oracles are written from the definitions, not from tensor.conv: a loop over kernel offsets, each a strided
slice of the padded input contracted with that tap of the weight (einsum), in the arrays' dtype (float64 for the
oracle; float32 for the float32 programs' second chance). A transposed convolution scatters each tap's product to
the strided output positions and crops the padding; a pool takes the max (padding and ceil_mode's tail never win)
or the mean over the window cells inside the input, the explicit padding counted only with count_include_pad.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import random

import numpy as np

__all__ = ["ORACLES", "Node", "draw", "np_conv", "np_conv_transpose", "np_pool", "oracle_source"]


def np_conv(x, w, b, stride, pads, dilation, groups):
    """torch's conv2d (cross-correlation) of x (N, Cin, *spatial) with w (Cout, Cin/groups, *kernel), bias b or
    None; stride and dilation one int per spatial axis, pads one (before, after) pair per axis."""
    ns = w.ndim - 2
    xp = np.pad(x, [(0, 0), (0, 0), *pads])
    n, cout, cig, ks = x.shape[0], w.shape[0], w.shape[1], w.shape[2:]
    cog = cout // groups
    os = [(xp.shape[2 + i] - dilation[i] * (ks[i] - 1) - 1) // stride[i] + 1 for i in range(ns)]
    xg = xp.reshape(n, groups, cig, *xp.shape[2:])
    wg = w.reshape(groups, cog, cig, *ks)
    out = np.zeros((n, groups, cog, *os), np.result_type(x, w))
    for at in np.ndindex(*ks):
        win = tuple(
            slice(a * d, a * d + s * (o - 1) + 1, s) for a, d, s, o in zip(at, dilation, stride, os, strict=True)
        )
        out += np.einsum("ngc...,goc->ngo...", xg[(slice(None),) * 3 + win], wg[(Ellipsis, *at)])
    out = out.reshape(n, cout, *os)
    return out if b is None else out + b.reshape(1, cout, *[1] * ns)


def np_conv_transpose(x, w, b, stride, padding, output_padding, dilation, groups):
    """torch's conv_transpose2d of x (N, Cin, *spatial) with w (Cin, Cout/groups, *kernel): input element i of an
    axis adds its products with tap a to output position i * stride + a * dilation - padding; the output is
    (L - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1 long."""
    ns = w.ndim - 2
    n, cin, sp = x.shape[0], x.shape[1], x.shape[2:]
    cig, cog, ks = cin // groups, w.shape[1], w.shape[2:]
    full = [
        (L - 1) * s + d * (k - 1) + 1 + o
        for L, s, d, k, o in zip(sp, stride, dilation, ks, output_padding, strict=True)
    ]
    out = np.zeros((n, groups, cog, *full), np.result_type(x, w))
    xg = x.reshape(n, groups, cig, *sp)
    wg = w.reshape(groups, cig, cog, *ks)
    for at in np.ndindex(*ks):
        to = tuple(
            slice(a * d, a * d + (L - 1) * s + 1, s) for a, d, s, L in zip(at, dilation, stride, sp, strict=True)
        )
        out[(slice(None),) * 3 + to] += np.einsum("ngc...,gco->ngo...", xg, wg[(Ellipsis, *at)])
    crop = tuple(slice(p, f - p) for p, f in zip(padding, full, strict=True))
    out = out[(slice(None),) * 3 + crop].reshape(
        n, groups * cog, *[f - 2 * p for p, f in zip(padding, full, strict=True)]
    )
    return out if b is None else out + b.reshape(1, groups * cog, *[1] * ns)


def np_pool(x, kind, kernel, stride, pads, dilation, ceil_mode, count_include_pad=True):
    """torch's max_pool2d ("max") or avg_pool2d ("avg") over the last len(kernel) axes of x; pads one (before,
    after) pair per axis. ceil_mode adds a last, partial window where one more starts inside the input or its
    left padding; the mean divides by the window's cells inside the input, plus the explicit padding when
    count_include_pad (never ceil_mode's tail)."""
    ns = len(kernel)
    sp = x.shape[x.ndim - ns :]
    os, tails = [], []
    for L, k, s, d, (pb, pa) in zip(sp, kernel, stride, dilation, pads, strict=True):
        eff, padded = d * (k - 1) + 1, L + pb + pa
        o = (-(-(padded - eff) // s) if ceil_mode else (padded - eff) // s) + 1
        if ceil_mode and (o - 1) * s >= L + pb:
            o -= 1
        os.append(o)
        tails.append(max(0, (o - 1) * s + eff - padded))
    around = [(pb, pa + t) for (pb, pa), t in zip(pads, tails, strict=True)]
    if kind == "max":
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        xp = np.pad(x, [(0, 0)] * (x.ndim - ns) + around, constant_values=fill)
    else:
        xp = np.pad(x, [(0, 0)] * (x.ndim - ns) + around)
        if count_include_pad:
            counted = np.pad(
                np.ones([L + pb + pa for L, (pb, pa) in zip(sp, pads, strict=True)]), [(0, t) for t in tails]
            )
        else:
            counted = np.pad(np.ones(sp), around)
    acc, cnt = None, 0.0
    for at in np.ndindex(*kernel):
        win = tuple(
            slice(a * d, a * d + s * (o - 1) + 1, s) for a, d, s, o in zip(at, dilation, stride, os, strict=True)
        )
        part = xp[(Ellipsis, *win)]
        if kind == "max":
            acc = part if acc is None else np.maximum(acc, part)
        else:
            acc = part if acc is None else acc + part
            cnt = cnt + counted[win]
    return acc if kind == "max" else acc / cnt


ORACLES = {f.__name__: f for f in (np_conv, np_conv_transpose, np_pool)}


def oracle_source(ncode: str) -> list[str]:
    """The definitions of the oracles that `ncode` calls (a repro prints them)."""
    return [inspect.getsource(f) for name, f in ORACLES.items() if name + "(" in ncode]


@dataclasses.dataclass(frozen=True)
class Node:
    """A drawn node: `tcode`/`ncode` read the value as {0}, its weight as {1} and bias as {2}; `weights` are the
    shapes of the new inputs those are (none for a pool); `rule` the 16-bit bound's (fuzz_bounds.RULES)."""

    kind: str  # conv, conv1d, conv_transpose, max_pool, avg_pool
    tcode: str
    ncode: str
    rule: str
    weights: tuple[tuple[int, ...], ...]
    macs: int


KINDS = ("conv", "conv", "conv", "conv1d", "conv_transpose", "conv_transpose", "max_pool", "avg_pool")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layout(rng: random.Random, shape: tuple[int, ...], ns: int) -> tuple[int, ...]:
    """(N, C, *spatial) for a value of `shape` with ns spatial axes: its own shape where it fits, else a random
    factoring of its elements (the batch and channels mostly small, the spatial axes taking the rest)."""
    if len(shape) == ns + 2 and rng.random() < 0.7:
        return shape
    left = math.prod(shape)
    n = rng.choice([d for d in _divisors(left) if d <= 3]) if rng.random() < 0.5 else 1
    left //= n
    c = rng.choice([d for d in _divisors(left) if d <= 8])
    left //= c
    if ns == 1:
        return (n, c, left)
    h = rng.choice(_divisors(left))
    return (n, c, h, left // h)


def _pad_text(rng: random.Random, pads: list[tuple[int, int]], symmetric: bool) -> str:
    """The padding argument in one of the forms the front end takes, for these pairs."""
    ns = len(pads)
    if symmetric or all(b == a for b, a in pads):
        if len({b for b, _ in pads}) == 1 and rng.random() < 0.5:
            return str(pads[0][0])
        return str(tuple(b for b, _ in pads)) if ns > 1 or rng.random() < 0.5 else f"[{pads[0][0]}]"
    if rng.random() < 0.5:
        return str([tuple(p) for p in pads])
    return str([v for p in reversed(pads) for v in p])  # torch's F.pad order: the last axis first


def _ints(rng: random.Random, values: list[int]) -> str:
    """Per-axis ints as the front end takes them: one int where they agree (sometimes), else a tuple."""
    return str(values[0]) if len(set(values)) == 1 and rng.random() < 0.5 else str(tuple(values))


def draw(rng: random.Random, shape: tuple[int, ...], integer: bool, most: int, big: bool = False) -> Node | None:
    """A random node over a value of `shape` (int32 when `integer`: no avg_pool), at most `most` multiply-adds;
    None where the draw does not fit (a kernel wider than the padded input, too much work). `big`: a conv2d of
    `shape` as it is (N, C, H, W) with 8-32 output channels a group, as a CNN layer's."""
    kind = "conv" if big else rng.choice([k for k in KINDS if not (integer and k == "avg_pool")])
    ns = 1 if kind == "conv1d" else rng.choice([1, 2, 2]) if kind == "conv_transpose" else 2
    lay = shape if big else _layout(rng, shape, ns)
    n, c, sp = lay[0], lay[1], list(lay[2:])
    pre = "" if lay == shape else f".reshape{lay}"
    x_t, x_n = "{0}" + pre, "{0}" + pre
    ks = [rng.choice([1, 2, 3, 3, 5]) if s >= 5 else rng.choice([1, 2, 3]) for s in sp]
    ss = [rng.choice([1, 1, 2, 3]) for _ in sp]
    ds = [rng.choice([1, 1, 1, 2]) for _ in sp]
    if kind in ("max_pool", "avg_pool"):
        pads = [(rng.randint(0, k // 2),) * 2 for k in ks]
        if rng.random() < 0.3 and kind == "avg_pool":
            ds = [1] * ns
        ceil, inc = rng.random() < 0.3, rng.random() < 0.5
        os = _out(sp, ks, ss, ds, pads)
        if os is None:
            return None
        stride = "None" if ss == ks and rng.random() < 0.5 else _ints(rng, ss)
        t_args = (
            f"{_ints(rng, ks)}, stride={stride}, padding={_pad_text(rng, pads, True)}, "
            f"dilation={_ints(rng, ds)}, ceil_mode={ceil}"
        )
        n_args = f"{ks}, {ss}, {pads}, {ds}, {ceil}"
        if kind == "avg_pool":
            t_args += f", count_include_pad={inc}"
            n_args += f", {inc}"
        macs = n * c * math.prod(os) * math.prod(ks)
        fn = kind[:3]
        rule = "extreme:max" if fn == "max" else f"avg_pool:{math.prod(ks)}"
        node = Node(kind, f"{x_t}.{kind}2d({t_args})", f"np_pool({x_n}, '{fn}', {n_args})", rule, (), macs)
        return node if macs <= most else None
    groups = rng.choice([g for g in _divisors(c) if g <= 4]) if rng.random() < 0.4 else 1
    cout = groups * rng.choice([8, 16, 24, 32] if big else [1, 2, 3, 4])
    if big:
        ks = [rng.choice([1, 3, 3, 5])] * 2
        ss, ds = [rng.choice([1, 1, 2])] * 2, [1, 1]
    bias = rng.random() < 0.4
    if kind == "conv_transpose":
        pads1 = [rng.randint(0, 2) for _ in sp]
        ops = [rng.randrange(max(s, d)) if rng.random() < 0.4 else 0 for s, d in zip(ss, ds, strict=True)]
        sizes = [
            (L - 1) * s - 2 * p + d * (k - 1) + o + 1
            for L, s, p, d, k, o in zip(sp, ss, pads1, ds, ks, ops, strict=True)
        ]
        if min(sizes) <= 0:
            return None
        wshape = (c, cout // groups, *ks)
        macs = n * c * math.prod(sp) * (cout // groups) * math.prod(ks)
        t_args = (
            f"stride={_ints(rng, ss)}, padding={_ints(rng, pads1)}, output_padding={_ints(rng, ops)}, "
            f"groups={groups}, dilation={_ints(rng, ds)}"
        )
        t = f"{x_t}.conv_transpose2d({{1}}, {'{2}' if bias else 'None'}, {t_args})"
        nc = f"np_conv_transpose({x_n}, {{1}}, {'{2}' if bias else 'None'}, {ss}, {pads1}, {ops}, {ds}, {groups})"
        node = Node(kind, t, nc, "conv", (wshape, (cout,)) if bias else (wshape,), macs)
        return node if macs <= most else None
    pads = [(rng.randint(0, 2), rng.randint(0, 2)) if rng.random() < 0.3 else (rng.randint(0, 2),) * 2 for _ in sp]
    os = _out(sp, ks, ss, ds, pads)
    if os is None:
        return None
    wshape = (cout, c // groups, *ks)
    macs = n * cout * math.prod(os) * (c // groups) * math.prod(ks)
    fn = "conv1d" if kind == "conv1d" else "conv2d"
    t_args = (
        f"stride={_ints(rng, ss)}, padding={_pad_text(rng, pads, False)}, dilation={_ints(rng, ds)}, groups={groups}"
    )
    t = f"{x_t}.{fn}({{1}}, {'{2}' if bias else 'None'}, {t_args})"
    nc = f"np_conv({x_n}, {{1}}, {'{2}' if bias else 'None'}, {ss}, {pads}, {ds}, {groups})"
    return Node(kind, t, nc, "conv", (wshape, (cout,)) if bias else (wshape,), macs) if macs <= most else None


def _out(sp: list[int], ks: list[int], ss: list[int], ds: list[int], pads: list[tuple[int, int]]) -> list[int] | None:
    """The output sizes (floor mode), None where a kernel spans more than the padded axis."""
    os = [(L + pb + pa - d * (k - 1) - 1) // s + 1 for L, k, s, d, (pb, pa) in zip(sp, ks, ss, ds, pads, strict=True)]
    return os if min(os) >= 1 else None
