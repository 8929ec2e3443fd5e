"""Building LINEAR programs by hand for the device tests, and comparing device outputs exactly."""

from __future__ import annotations

import numpy as np

from devices.memory import from_bfloat16_bits
from rewrite.dtype import AddrSpace, DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
              dtypes.index]


def linear(*instrs: UOp) -> UOp:
    """LINEAR of `instrs` in the given order, each preceded by its sources not yet listed (depth first).
    A BUFFER's or PARAM's shape and bounds are not listed; statements (RANGE, END, STORE, ...) are placed
    where they are given, so the caller controls the loop structure."""
    out: list[UOp] = []
    seen: set[UOp] = set()
    for ins in instrs:
        stack: list[tuple[UOp, bool]] = [(ins, False)]
        while stack:
            u, done = stack.pop()
            if done:
                if u not in seen:
                    seen.add(u)
                    out.append(u)
                continue
            if u in seen:
                continue
            stack.append((u, True))
            if u.op not in (Ops.BUFFER, Ops.PARAM):
                stack.extend((s, False) for s in reversed(u.src) if s not in seen)
    return UOp(Ops.LINEAR, tuple(out))


def buf(slot: int, dtype: DType, n: int | UOp) -> UOp:
    return UOp.buffer(slot, dtype, (n,))


def reg(slot: int, dtype: DType, n: int) -> UOp:
    return UOp.buffer(slot, dtype, (n,), addrspace=AddrSpace.REG)


def end(body: UOp, *ranges: UOp) -> UOp:
    return UOp(Ops.END, (body, *ranges))


def elementwise(fn, out_dtype: DType, in_dtypes: list[DType], n: int = 8) -> UOp:  # noqa: ANN001
    """out(slot 0)[i] = fn(in1[i], in2[i], ...) for i < n; inputs in slots 1.."""
    ins = [buf(i + 1, dt, n) for i, dt in enumerate(in_dtypes)]
    out = buf(0, out_dtype, n)
    r = UOp.range(n, 0)
    val = fn(*(b.index(r).load() for b in ins))
    st = out.index(r).store(val)
    return linear(out, *ins, r, st, end(st, r))


def multi_output(fns: list, out_dtypes: list[DType], in_dtypes: list[DType], n: int = 8) -> UOp:
    """out_k(slot k)[i] = fns[k](loads) for each k; inputs in slots 100.. (one loop, one load per input)."""
    ins = [buf(100 + i, dt, n) for i, dt in enumerate(in_dtypes)]
    outs = [buf(k, dt, n) for k, dt in enumerate(out_dtypes)]
    r = UOp.range(n, 0)
    loads = [b.index(r).load() for b in ins]
    stores = [o.index(r).store(fn(*loads)) for o, fn in zip(outs, fns, strict=True)]
    # END names one body: the last STORE; the others are inside the loop because they are listed before it
    return linear(*outs, *ins, r, *loads, *stores, end(stores[-1], r))


def values(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """An output array as comparable values (bfloat16 bits decoded)."""
    return from_bfloat16_bits(arr) if dtype is dtypes.bfloat16 else arr


def assert_same(got: np.ndarray, want: np.ndarray, dtype: DType, what: str = "", ulps: int = 0) -> None:
    """Exact equality: floats bit for bit (so -0.0 != 0.0) except that any nan equals any nan; `ulps` allows
    that many units in the last place between finite floats."""
    g, w = values(got, dtype), values(want, dtype)
    if dtype.is_float:
        gn, wn = np.isnan(g), np.isnan(w)
        bad = gn != wn
        both = ~gn & ~wn
        bits = {2: np.int16, 4: np.int32, 8: np.int64}[g.dtype.itemsize]
        gi, wi = g.view(bits).astype(np.int64), w.view(bits).astype(np.int64)
        # ordered integer images of the floats, so that a difference counts ulps across zero too
        go = np.where(gi < 0, -(gi & ~(np.int64(-1) << (8 * g.dtype.itemsize - 1))), gi)
        wo = np.where(wi < 0, -(wi & ~(np.int64(-1) << (8 * g.dtype.itemsize - 1))), wi)
        diff = np.abs(go - wo)
        bad |= both & ((diff > ulps) | ((diff > 0) & (np.isinf(g) | np.isinf(w))) if ulps else (gi != wi))
    else:
        bad = g != w
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        raise AssertionError(f"{what} ({dtype.name}): mismatch at {i.tolist()}: got {g[i].tolist()}, "
                             f"want {w[i].tolist()}")
