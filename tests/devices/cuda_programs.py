"""GPU-shaped LINEAR programs built by hand (SPECIAL gidx/lidx, LOCAL memory, BARRIER, ATOMICADD) and the kernel
suite's Tensor graphs, shared by the nvcc CI tests and the GPU tests."""

from __future__ import annotations

import numpy as np

from rewrite.dtype import AddrSpace, DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import UOp
from tests.devices.builder import buf, end, linear, reg


def special(name: str, bound: int | UOp) -> UOp:
    b = bound if isinstance(bound, UOp) else UOp.const(bound, dtypes.index)
    return UOp(Ops.SPECIAL, (b,), name)


def local(slot: int, dtype: DType, n: int) -> UOp:
    return UOp.buffer(slot, dtype, (n,), addrspace=AddrSpace.LOCAL)


def block_sum(blocks: int, threads: int, dtype: DType = dtypes.float32, atomic: bool = True) -> UOp:
    """out[g] = sum of inp[g*threads : (g+1)*threads] through shared memory and a barrier (thread 0 sums the
    block's values); with `atomic`, thread 0 also adds it to total[0] (slot 2) with ATOMICADD."""
    g, lt = special("gidx0", blocks), special("lidx0", threads)
    inp, out, total = buf(1, dtype, blocks * threads), buf(0, dtype, blocks), buf(2, dtype, 1)
    sm = local(0, dtype, threads)
    st = sm.index(lt).store(inp.index(g * threads + lt).load())
    bar = UOp(Ops.BARRIER, (st,))
    acc = reg(1, dtype, 1)
    z = UOp.const(0, dtypes.index)
    a0 = acc.index(z).store(UOp.const(0, dtype))
    r = UOp.range(threads, 0)
    a1 = acc.index(z).store(acc.index(z).load() + UOp(Ops.AFTER, (sm, bar)).index(r).load())
    e = end(a1, r)
    gate = UOp(Ops.IF, (UOp(Ops.CMPEQ, (lt, z)),))
    s = UOp(Ops.AFTER, (acc, e)).index(z).load()
    fin = out.index(g).store(s)
    stmts = [out, inp, total, g, lt, sm, st, bar, acc, a0, r, a1, e, gate, s, fin]
    if atomic:
        stmts.append(UOp(Ops.ATOMICADD, (total.index(z), s)))
    return linear(*stmts, UOp(Ops.ENDIF, (gate,)))


def grid_elementwise(n: int, threads: int, fn_dtype: DType = dtypes.float32) -> UOp:
    """out[i] = in1[i] * in2[i] + in1[i] over a 2-D grid: i = (gidx0 * threads + lidx0), gated to i < n."""
    blocks = -(-n // threads)
    g, lt = special("gidx0", blocks), special("lidx0", threads)
    a, b, out = buf(1, fn_dtype, n), buf(2, fn_dtype, n), buf(0, fn_dtype, n)
    i = g * threads + lt
    gate = UOp(Ops.IF, (UOp(Ops.CMPLT, (i, UOp.const(n, dtypes.index))),))
    x = a.index(i).load()
    st = out.index(i).store(x * b.index(i).load() + x)
    return linear(out, a, b, g, lt, i, gate, x, st, UOp(Ops.ENDIF, (gate,)))


def big_shared(threads: int = 256, floats: int = 16384) -> UOp:
    """A kernel with 64 KiB of LOCAL memory (more than the 48 KiB a block declares statically): each thread fills
    its stripe with the positions, then after a barrier sums it: out[t] = sum of t*per .. t*per + per - 1."""
    lt = special("lidx0", threads)
    out = buf(0, dtypes.float32, threads)
    sm = local(0, dtypes.float32, floats)
    per = floats // threads
    r = UOp.range(per, 0)
    base = lt * per
    pos = base + r
    st = sm.index(pos).store(pos.cast(dtypes.float32))
    e = end(st, r)
    bar = UOp(Ops.BARRIER, (e,))
    acc = reg(1, dtypes.float32, 1)
    z = UOp.const(0, dtypes.index)
    a0 = acc.index(z).store(UOp.const(0.0, dtypes.float32))
    r2 = UOp.range(per, 1)
    a1 = acc.index(z).store(acc.index(z).load() + UOp(Ops.AFTER, (sm, bar)).index(base + r2).load())
    e2 = end(a1, r2)
    fin = out.index(lt).store(UOp(Ops.AFTER, (acc, e2)).index(z).load())
    return linear(out, lt, sm, base, r, st, e, bar, acc, a0, r2, a1, e2, fin)


def big_shared_expected(threads: int = 256, floats: int = 16384) -> np.ndarray:
    per = floats // threads
    return np.array([sum(float(t * per + k) for k in range(per)) for t in range(threads)], dtype=np.float32)
