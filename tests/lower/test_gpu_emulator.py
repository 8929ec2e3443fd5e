"""The python device's grid emulator on hand-built GPU programs (shared memory, barriers, atomics, divergence),
and PYTHON_TARGET, which puts whole Tensor programs through the GPU lowering onto it."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite import AxisType, Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.env import Context
from rewrite.errors import DeviceError, KnobError
from tensor import Tensor
from tests.lower.test_gpu import GPU, PY, _buf, _linear, _softmax, rng


def test_emulator_shares_local_memory_across_a_barrier() -> None:
    """Each block reverses its 8 elements through shared memory: thread t writes slot t, and after the BARRIER
    reads slot 7 - t, which another thread wrote; without lockstep to the barrier it would read unwritten memory."""
    out, inp, sm = _buf(0, 32), _buf(1, 32), _buf(0, 8, AddrSpace.LOCAL)
    g, t = UOp(Ops.SPECIAL, (UOp.const(4),), "gidx0"), UOp(Ops.SPECIAL, (UOp.const(8),), "lidx0")
    bar = UOp(Ops.BARRIER, (sm.index(t).store(inp.index(g * 8 + t).load()),))
    st = out.index(g * 8 + t).store(UOp(Ops.AFTER, (sm, bar)).index(7 - t).load())
    k = PY.compile(_linear(st), "reverse", GPU)
    x = np.arange(32, dtype=np.float32)
    res = np.zeros(32, np.float32)
    k({0: res, 1: x})
    np.testing.assert_array_equal(res, x.reshape(4, 8)[:, ::-1].reshape(-1))


def test_emulator_local_memory_is_per_block_and_unwritten_reads_fail() -> None:
    out, sm = _buf(0, 8), _buf(0, 8, AddrSpace.LOCAL)
    t = UOp(Ops.SPECIAL, (UOp.const(8),), "lidx0")
    bar = UOp(Ops.BARRIER, (sm.index(t).store(t.cast(dtypes.float32)),))
    bad = out.index(t).store(UOp(Ops.AFTER, (sm, bar)).index((t + 1) % 9).load())  # thread 7 reads slot 8
    with pytest.raises(DeviceError, match="out of bounds"):
        PY.compile(_linear(bad), "oob", GPU)({0: np.zeros(8, np.float32)})
    no_barrier = out.index(t).store(sm.index(7 - t).load())
    first = UOp(Ops.GROUP, (sm.index(t).store(t.cast(dtypes.float32)), no_barrier))
    with pytest.raises(DeviceError, match="before any STORE"):
        PY.compile(_linear(first), "race", GPU)({0: np.zeros(8, np.float32)})


def test_emulator_atomic_add() -> None:
    out, inp = _buf(0, 1), _buf(1, 64)
    g, t = UOp(Ops.SPECIAL, (UOp.const(4),), "gidx0"), UOp(Ops.SPECIAL, (UOp.const(16),), "lidx0")
    add = UOp(Ops.ATOMICADD, (out.index(UOp.const(0)), inp.index(g * 16 + t).load()))
    x = rng.integers(-9, 9, 64).astype(np.float32)
    res = np.array([0.5], np.float32)
    PY.compile(_linear(add), "atomic", GPU)({0: res, 1: x})
    assert res[0] == x.sum() + 0.5


def test_emulator_threads_must_meet_at_one_barrier() -> None:
    out, sm = _buf(0, 4), _buf(0, 4, AddrSpace.LOCAL)
    t = UOp(Ops.SPECIAL, (UOp.const(4),), "lidx0")
    r = UOp.range(t + 1, 1, AxisType.LOOP)  # thread t waits at the loop's barrier t + 1 times
    bar = UOp(Ops.BARRIER, (sm.index(t).store(r.cast(dtypes.float32)),))
    loop = UOp(Ops.END, (out.index(t).store(UOp(Ops.AFTER, (sm, bar)).index(t).load()), r))
    with pytest.raises(DeviceError, match="different barriers"):
        PY.compile(_linear(loop), "diverge", GPU)({0: np.zeros(4, np.float32)})


def test_python_target_runs_tensor_programs_through_the_gpu_lowering() -> None:
    """DEVICE=python PYTHON_TARGET=sm_90: the python device's default Target is the GPU's, so a Tensor program's
    realize lowers every kernel for the grid (SPECIALs, shared memory, warp shuffles) and the emulator runs them;
    the result is numpy's. An unknown target is refused by the knob."""
    import devices.python as pydev

    made: list[set] = []
    orig = pydev.PythonKernel.__init__

    def record(self: pydev.PythonKernel, prog: object) -> None:
        orig(self, prog)  # type: ignore[arg-type]
        made.append({u.op for u in self.instrs})

    x = rng.standard_normal((3, 500)).astype(np.float32)
    pydev.PythonKernel.__init__ = record  # type: ignore[method-assign]
    try:
        with Context(DEVICE="python", PYTHON_TARGET="sm_90"):
            assert PY.default_target().warp_size == 32 and PY.default_target().device == "python"
            got = Tensor(x).softmax(-1).numpy()
    finally:
        pydev.PythonKernel.__init__ = orig  # type: ignore[method-assign]
    np.testing.assert_allclose(got, _softmax(x), rtol=1e-5, atol=1e-7)
    assert any({Ops.SPECIAL, Ops.SHUFFLE, Ops.BARRIER} <= ops for ops in made), made
    assert PY.default_target().interpreted
    with pytest.raises(KnobError, match="PYTHON_TARGET must be one of"), Context(PYTHON_TARGET="sm_70"):
        PY.default_target()
