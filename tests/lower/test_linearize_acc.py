"""lower.linearize's accumulators: where an accumulator's init goes when reductions share one loop."""

from __future__ import annotations

import numpy as np

from devices import get_device
from lower.linearize import linearize
from rewrite import AxisType, BufferArg, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace

PY = get_device("python")


def _buf(slot: int, n: int) -> UOp:
    return UOp(Ops.BUFFER, (UOp.shape_operand((n,)),), BufferArg(slot, dtypes.float32, None, AddrSpace.GLOBAL))


def test_an_accumulator_restarts_inside_every_loop_around_its_reduction_loop() -> None:
    """Two sums over one reduction range k inside a batch loop b: out[2b] = sum_k 1 (no b in its body) and
    out[2b + 1] = sum_k inp[b, k]. The two ENDs of k are one loop, inside b (the second sum reads b); the first
    sum's init must run on every b too, though its own dependencies would hoist it out of b (it summed every
    batch's terms: 4, 8, 12 instead of 4)."""
    out, inp = _buf(0, 6), _buf(1, 12)
    b = UOp.range(3, 0, AxisType.LOOP)
    k1, k2 = UOp.range(4, 1, AxisType.REDUCE), UOp.range(4, 1, AxisType.REDUCE)
    assert k1 is k2  # one range, as a register tile's copies share it
    ones = UOp(Ops.REDUCE, (UOp.const(1.0, dtypes.float32), k1), (Ops.ADD, ()))
    row = UOp(Ops.REDUCE, (inp.index(b * 4 + k1).load(), k1), (Ops.ADD, ()))
    st = UOp(Ops.GROUP, (out.index(b * 2).store(ones), out.index(b * 2 + 1).store(row)))
    lin = linearize(UOp.sink(UOp(Ops.END, (st, b))))
    opened = lin.src.index(b)
    inits = [i for i, u in enumerate(lin.src) if u.op is Ops.STORE and u.src[1].op is Ops.CONST]
    assert len(inits) == 2 and all(i > opened for i in inits), inits
    x = np.arange(12, dtype=np.float32)
    res = np.zeros(6, np.float32)
    PY.compile(lin, "restart", PY.default_target())({0: res, 1: x})
    np.testing.assert_array_equal(res, np.stack([np.full(3, 4.0), x.reshape(3, 4).sum(1)], 1).reshape(-1))
