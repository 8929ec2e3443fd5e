"""The grid emulator's data-race check (devices.python_mem): hand-built kernels that compute the right answer in
the emulator's thread order yet race on a GPU are reported, their fixed forms and atomics are not; and real
lowered kernels with one BARRIER taken out are caught, where the unchecked emulator still gets numpy's answer."""

from __future__ import annotations

import numpy as np
import pytest

from lower import schedule
from lower.optimize import Opt, OptOps
from lower.stages import lower_kernel
from rewrite import Ops, UOp, dtypes
from rewrite.dtype import AddrSpace
from rewrite.env import Context
from rewrite.errors import DeviceError
from tensor import Tensor
from tests.lower.test_gpu import GPU, PY, _buf, _linear

RACE = "data race"


def _lid(n: int, name: str = "lidx0") -> UOp:
    return UOp(Ops.SPECIAL, (UOp.const(n),), name)


def _after(buf: UOp, *stores: UOp) -> UOp:
    return UOp(Ops.AFTER, (buf, UOp(Ops.BARRIER, stores)))


def _run(root: UOp, arrays: dict[int, np.ndarray], name: str = "k") -> None:
    PY.compile(_linear(root), name, GPU)(arrays)


def test_a_read_of_another_threads_store_needs_a_barrier() -> None:
    """Thread t reads slot t - 1 of shared memory, which thread t - 1 stored: in the emulator's order (thread
    t - 1 runs first) the result is right without a BARRIER, on a GPU it is not. With the BARRIER it is clean."""
    out, inp, sm = _buf(0, 8), _buf(1, 8), _buf(0, 8, AddrSpace.LOCAL)
    t = _lid(8)
    put = sm.index(t).store(inp.index(t).load())
    x = np.arange(8, dtype=np.float32) + 1
    want = np.concatenate([[x[0]], x[:-1]])
    racy = UOp(Ops.GROUP, (put, out.index(t).store(sm.index((t - 1).maximum(0)).load())))
    res = np.zeros(8, np.float32)
    with Context(RACECHECK=0):
        _run(racy, {0: res, 1: x})
    np.testing.assert_array_equal(res, want)  # what the emulator alone says: right
    with pytest.raises(DeviceError, match=f"{RACE}.*thread 1 of block 0 reads element 0 of LOCAL buffer"):
        _run(racy, {0: res, 1: x})
    fixed = out.index(t).store(_after(sm, put).index((t - 1).maximum(0)).load())
    res[:] = 0
    _run(fixed, {0: res, 1: x})
    np.testing.assert_array_equal(res, want)


def test_a_shift_in_place_races_with_its_readers() -> None:
    """sm[t] = sm[t + 1] in one epoch: thread t + 1 overwrites what thread t reads (write after read). The
    emulator runs thread t first and so gets the shift right; the check reports it."""
    out, sm = _buf(0, 8), _buf(0, 9, AddrSpace.LOCAL)
    t = _lid(8)
    fill = UOp(Ops.GROUP, (sm.index(t).store(t.cast(dtypes.float32)),
                           sm.index(UOp.const(8)).store(UOp.const(8.0), t.eq(UOp.const(0)))))
    filled = _after(sm, fill)
    shift = filled.index(t).store(filled.index(t + 1).load())
    read_back = out.index(t).store(_after(sm, shift).index(t).load())
    res = np.zeros(8, np.float32)
    with Context(RACECHECK=0):
        _run(read_back, {0: res})
    np.testing.assert_array_equal(res, np.arange(1, 9))
    with pytest.raises(DeviceError, match=f"{RACE}.*thread 1 of block 0 writes element 1 of LOCAL.*thread 0 of "
                                          "block 0 read"):
        _run(read_back, {0: res})


def test_two_threads_storing_one_value_is_no_race_but_two_values_are() -> None:
    out, sm = _buf(0, 4), _buf(0, 1, AddrSpace.LOCAL)
    t = _lid(4)
    same = out.index(t).store(_after(sm, sm.index(UOp.const(0)).store(UOp.const(2.0))).index(UOp.const(0)).load())
    res = np.zeros(4, np.float32)
    _run(same, {0: res})
    assert (res == 2).all()
    differ = out.index(t).store(_after(sm, sm.index(UOp.const(0)).store(t.cast(dtypes.float32)))
                                .index(UOp.const(0)).load())
    with pytest.raises(DeviceError, match=f"{RACE}.*writes element 0"):
        _run(differ, {0: res})


def test_blocks_are_never_ordered() -> None:
    """A GLOBAL element one block writes and another reads, or two blocks write with different values, races:
    there is no barrier across blocks, with or without lidx threads."""
    out, inp = _buf(0, 4), _buf(1, 4)
    g = UOp(Ops.SPECIAL, (UOp.const(4),), "gidx0")
    last = out.index(UOp.const(0)).store(g.cast(dtypes.float32))
    with pytest.raises(DeviceError, match=f"{RACE}.*block 1 .*writes element 0 of buffer slot 0.*block 0"):
        _run(last, {0: np.zeros(4, np.float32)})
    own = out.index(g).store(inp.index(g).load() * 2)
    neighbour = out.index(g).store(out.index((g + 3) % 4).load() + 1)  # reads what another block wrote
    res = np.zeros(4, np.float32)
    _run(own, {0: res, 1: np.arange(4, dtype=np.float32)})
    np.testing.assert_array_equal(res, [0, 2, 4, 6])
    t = _lid(2)
    threaded = UOp(Ops.GROUP, (out.index(g).store(UOp.const(1.0), t.eq(UOp.const(0))),
                               inp.index(g).store(out.index((g + 3) % 4).load(), t.eq(UOp.const(1)))))
    for k in (neighbour, threaded):
        with pytest.raises(DeviceError, match=RACE):
            _run(k, {0: np.zeros(4, np.float32), 1: np.zeros(4, np.float32)})


def test_atomics_alone_and_a_single_thread_are_never_races() -> None:
    out, inp = _buf(0, 1), _buf(1, 64)
    g, t = UOp(Ops.SPECIAL, (UOp.const(4),), "gidx0"), _lid(16)
    add = UOp(Ops.ATOMICADD, (out.index(UOp.const(0)), inp.index(g * 16 + t).load()))
    res, x = np.zeros(1, np.float32), np.arange(64, dtype=np.float32)
    _run(add, {0: res, 1: x})
    assert res[0] == x.sum()
    one = _buf(0, 4)
    r = UOp.range(UOp.const(4), 0)
    loop = UOp(Ops.END, (one.index(UOp.const(0)).store(one.index(r).load() + 1), r))
    _run(loop, {0: np.zeros(4, np.float32)})  # one thread: program order is all there is


def test_a_plain_access_races_with_an_atomic() -> None:
    """Atomic adds to one element are no race with each other, but a plain read or store of that element by a
    thread they are not ordered with is: it may run before or after any of the adds. After a BARRIER (the same
    block) it is ordered."""
    out, inp = _buf(0, 2), _buf(1, 16)
    t = _lid(16)
    add = UOp(Ops.ATOMICADD, (out.index(UOp.const(0)), inp.index(t).load()))
    peek = out.index(UOp.const(1)).store(out.index(UOp.const(0)).load(), t.eq(UOp.const(3)))
    x = np.arange(16, dtype=np.float32)
    # (every thread loads out[0]; only thread 3's store is gated): thread 1's add comes after thread 0's read
    with pytest.raises(DeviceError, match=f"{RACE}.*thread 1 of block 0 adds atomically to element 0 of buffer slot "
                                          "0, which thread 0 of block 0 read"):
        _run(UOp(Ops.GROUP, (add, peek)), {0: np.zeros(2, np.float32), 1: x})
    store = out.index(UOp.const(0)).store(UOp.const(5.0), t.eq(UOp.const(9)))
    with pytest.raises(DeviceError, match=f"{RACE}.*thread 9 of block 0 writes element 0 of buffer slot 0, which "
                                          "several threads added to atomically"):
        _run(UOp(Ops.GROUP, (store, add)), {0: np.zeros(2, np.float32), 1: x})
    ordered = _after(out, add).index(UOp.const(0)).load()  # after the BARRIER every add has landed
    res = np.zeros(2, np.float32)
    _run(out.index(UOp.const(1)).store(ordered, t.eq(UOp.const(3))), {0: res, 1: x})
    assert res.tolist() == [x.sum(), x.sum()]
    g = UOp(Ops.SPECIAL, (UOp.const(2),), "gidx0")  # another block's plain read: never ordered
    across = UOp(Ops.GROUP, (UOp(Ops.ATOMICADD, (out.index(UOp.const(0)), UOp.const(1.0))),
                             inp.index(g).store(out.index(UOp.const(0)).load())))
    with pytest.raises(DeviceError, match=f"{RACE}.*block 1 .*adds atomically to element 0.*block 0 .*read"):
        _run(across, {0: np.zeros(2, np.float32), 1: np.zeros(16, np.float32)})


def test_another_blocks_read_is_kept_past_this_blocks_reads() -> None:
    """Block 0 reads inp[0]; block 1's thread 0 reads it too, and after a BARRIER its thread 1 overwrites it.
    Within block 1 that is ordered, but block 0's read is not: the check keeps it though block 1 read since."""
    out, inp = _buf(0, 4), _buf(1, 4)
    g, t = UOp(Ops.SPECIAL, (UOp.const(2),), "gidx0"), _lid(2)
    read = out.index(g * 2 + t).store(inp.index(UOp.const(0)).load(), t.eq(UOp.const(0)))
    write = _after(inp, read).index(UOp.const(0)).store(g.cast(dtypes.float32) + 7.0,
                                                        t.eq(UOp.const(1)) & g.eq(UOp.const(1)))
    # (the load is not gated: both threads of block 0 read inp[0], reported as several threads)
    with pytest.raises(DeviceError, match=f"{RACE}.*thread 1 of block 1 writes element 0 of buffer slot 1, which "
                                          "several threads read"):
        _run(write, {0: np.zeros(4, np.float32), 1: np.ones(4, np.float32)})


def test_a_cp_async_destination_is_off_limits_until_its_wait() -> None:
    """Thread t copies into sm[t] with cp.async, then reads sm[t + 1] before the wait: thread t + 1's copy into
    it may land at any time until that wait. The emulator lands copies at the wait, so it reads the old 0s."""
    out, inp, sm = _buf(0, 8), _buf(1, 8), _buf(0, 9, AddrSpace.LOCAL)
    t = _lid(8)
    zero = _after(sm, sm.index(t).store(UOp.const(0.0)), sm.index(UOp.const(8)).store(UOp.const(0.0)))
    copy = UOp(Ops.STORE, (zero.index(t), inp.index(t).load()), "cp.async")
    commit = UOp(Ops.BARRIER, (copy,), "cp.async.commit")
    early = out.index(t).store(UOp(Ops.AFTER, (zero, commit)).index(t + 1).load())
    wait = UOp(Ops.BARRIER, (early,), ("cp.async.wait", 0))
    res = np.ones(8, np.float32)
    with Context(RACECHECK=0):
        _run(wait, {0: res, 1: np.arange(8, dtype=np.float32) + 1})
    assert (res == 0).all()
    with pytest.raises(DeviceError, match=f"{RACE}.*was read by thread 0 .*cp.async copy into it was in flight"):
        _run(wait, {0: res, 1: np.arange(8, dtype=np.float32) + 1})


def _staged_matmul() -> tuple[UOp, dict[int, np.ndarray], np.ndarray]:
    """A 64 x 64 x 64 half matmul on tensor cores staged through shared memory, k 16 a step (four steps: the
    loop's BARRIERs run), lowered for the GPU; its arrays (small integers: every sum exact) and numpy's answer."""
    rng = np.random.default_rng(3)
    av, bv = (rng.integers(-3, 4, (64, 64)).astype(np.float16) for _ in range(2))
    a, b = Tensor(av, device="python").contiguous(), Tensor(bv, device="python").contiguous()
    out = (a.reshape(64, 64, 1) * b.reshape(1, 64, 64)).cast(dtypes.float32).sum(1)
    items, _ = schedule([out.uop])
    k = [i for i in items if i.kind == "kernel"][-1]  # the matmul, after the inputs' contiguous copies
    lin = lower_kernel(k.ast, GPU, opts=[Opt(OptOps.TC, None, ("16x8x16 half->float", 2, 4, 2, 2, 16))])
    arrays = {0: np.zeros(64 * 64, np.float32), 1: av.reshape(-1), 2: bv.reshape(-1)}
    return lin, arrays, (av.astype(np.float64) @ bv.astype(np.float64)).reshape(-1)


def test_each_barrier_of_a_staged_tensor_core_matmul_is_needed() -> None:
    """Take out any one BARRIER of the staged kernel and the emulator reports it: a read of an element no thread
    has stored yet (the first tiles' BARRIER) or a data race (the loop's two). For the one between the
    mmas' fragment reads and the next tiles' stores, the unchecked emulator still gets numpy's answer (every
    thread has read its fragments when they meet at the mma): only the check sees that it is missing."""
    lin, arrays, want = _staged_matmul()
    PY.compile(lin, "staged")(arrays)
    np.testing.assert_array_equal(arrays[0], want)
    bars = [u for u in lin.src if u.op is Ops.BARRIER and u.arg is None]
    assert len(bars) == 3
    unseen = races = 0
    for bar in bars:
        bad = lin.substitute({bar: UOp(Ops.GROUP, bar.src)})
        arrays[0][:] = 0
        with Context(RACECHECK=0):
            try:
                PY.compile(bad, "dropped")(arrays)
                unseen += bool((arrays[0] == want).all())
            except DeviceError:
                pass  # an unwritten element read: the emulator saw this one without the check
        with pytest.raises(DeviceError, match=f"{RACE}|before any STORE") as e:
            PY.compile(bad, "dropped")(arrays)
        races += RACE in str(e.value)
    assert (unseen, races) == (1, 2)
