"""Balancing ids (lower.optimize.balance_ids): a register-tiled kernel with at least BALANCE_WORK iterations per core
splits its outermost whole-tile loop into up to BALANCE_IDS ids per core (a second THREAD axis), so a slow core
does not hold the whole kernel back. The split happens when and only when it should, and the results stay equal
to numpy's (and the cpu device's to the python reference interpreting the same program)."""

from __future__ import annotations

import numpy as np
import pytest

from devices import get_device
from devices.base import Target, cpu_target
from lower import optimize, schedule
from lower.buffers import new_buffer
from lower.optimize import Opt, OptOps, apply_opts, axes, hand_coded, work
from lower.stages import lower_kernel
from rewrite import AxisType, Ops, UOp, dtypes


def _kernel(out: UOp):
    items, _ = schedule([out])
    (it,) = [i for i in items if i.kind == "kernel"]
    return it


def _matmul(m: int, k: int, n: int) -> UOp:
    a, b = new_buffer(dtypes.float32, (m, k), "cpu"), new_buffer(dtypes.float32, (k, n), "cpu")
    return (a.reshape((m, k, 1)).expand((m, k, n)) * b.reshape((1, k, n)).expand((m, k, n))).sum((1,))


def _thread_splits(opts: list[Opt]) -> list[Opt]:
    return [o for o in opts if o.op is OptOps.SPLIT and o.arg[1] is AxisType.THREAD]  # type: ignore[index]


def _balance(opts: list[Opt]) -> int | None:
    """The balancing split's id count (the second THREAD split), None without one."""
    ts = _thread_splits(opts)
    assert len(ts) <= 2, opts
    return ts[1].arg[0] if len(ts) == 2 else None  # type: ignore[index]


def _target(level: str, cores: int = 2) -> Target:
    return cpu_target(level).with_(cores=cores)


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Thresholds small enough for kernels the python reference interprets quickly."""
    monkeypatch.setattr(optimize, "MIN_WORK_PER_THREAD", 16)
    monkeypatch.setattr(optimize, "BALANCE_WORK", 1024)


# ---------------------------------------------------------------- when the split happens


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_large_matmul_gets_balancing_ids_with_the_default_thresholds(level: str) -> None:
    """matmul 1024 on 2 cores (2^29 iterations each): its 2-way thread split, the register tile, and then the
    column-block loop (the outermost whole-tile loop) split into 4 ids per core: 8 ids in all."""
    it = _kernel(_matmul(1024, 1024, 1024))
    opts = hand_coded(it.ast, _target(level), threads=2)
    assert any(o.op is OptOps.SWAP for o in opts), opts  # a register tile
    ts = _thread_splits(opts)
    assert [o.arg[0] for o in ts] == [2, 4] and ts[-1] is opts[-1], opts  # type: ignore[index]
    ast = apply_opts(it.ast, opts)
    threads = [r for r in axes(ast) if r.axis_type is AxisType.THREAD]
    assert [int(r.src[0].value) for r in threads] == [2, 4]
    # the balancing axis is outside every loop that is left: each id is a block of whole column tiles
    loops = [r for r in axes(ast) if r.axis_type is AxisType.LOOP]
    assert axes(ast).index(threads[1]) < axes(ast).index(loops[0])


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_no_balancing_below_the_work_per_core_or_on_one_core(level: str) -> None:
    """matmul 256 is 2^24 iterations, 2^23 per core on 2 cores: below BALANCE_WORK, one id per core; on 1 core
    (threads=1, or a target of one core) no thread axis at all, however large the kernel."""
    t = _target(level)
    assert _balance(hand_coded(_kernel(_matmul(256, 256, 256)).ast, t, threads=2)) is None
    big = _kernel(_matmul(1024, 1024, 1024)).ast
    assert _thread_splits(hand_coded(big, t, threads=1)) == []
    assert _thread_splits(hand_coded(big, _target(level, cores=1))) == []
    # the default thread count is the target's cores
    assert _balance(hand_coded(big, _target(level, cores=2))) == 4


@pytest.mark.parametrize("level", ["x86-64-v2", "x86-64-v3"])
def test_threshold_is_per_core_and_inclusive(level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The split happens at exactly BALANCE_WORK iterations per core and not one below."""
    monkeypatch.setattr(optimize, "MIN_WORK_PER_THREAD", 16)
    it = _kernel(_matmul(48, 16, 64))
    t = _target(level)
    tiled = apply_opts(it.ast, hand_coded(it.ast, t, threads=1))
    per_core = work(tiled) // 2  # the tile pads nothing here: 48 rows are whole 6-row blocks, 64 columns whole tiles
    assert work(tiled) == work(it.ast) == 48 * 16 * 64
    monkeypatch.setattr(optimize, "BALANCE_WORK", per_core)
    assert _balance(hand_coded(it.ast, t, threads=2)) is not None
    monkeypatch.setattr(optimize, "BALANCE_WORK", per_core + 1)
    assert _balance(hand_coded(it.ast, t, threads=2)) is None


@pytest.mark.usefixtures("small")
def test_untiled_kernels_get_no_balancing_ids() -> None:
    """Only register-tiled kernels: an elementwise kernel and a plain sum, however long, keep one id per core;
    so does a matmul for a target without vector registers (no register tile)."""
    a = new_buffer(dtypes.float32, (256, 256), "cpu")
    t = _target("x86-64-v3")
    for out in ((a * 3.0 + 1.0).sqrt(), a.sum((1,)) * 2.0):
        opts = hand_coded(_kernel(out).ast, t, threads=2)
        assert len(_thread_splits(opts)) == 1, opts
    opts = hand_coded(_kernel(_matmul(48, 16, 64)).ast, t.with_(vector_bytes=0), threads=2)
    assert len(_thread_splits(opts)) == 1, opts


@pytest.mark.usefixtures("small")
@pytest.mark.parametrize(("level", "n", "ids"), [
    # AVX2: 2 x 8-lane column tiles of 16: 64 columns are 4 tiles, 48 are 3, 80 are 5 (then the 4 row blocks of a
    # core's 24 rows split instead); SSE: tiles of 8 columns: 64 -> 8 tiles, 48 -> 6 (3 divides, 4 does not)
    ("x86-64-v3", 64, 4), ("x86-64-v3", 48, 3), ("x86-64-v3", 80, 4),
    ("x86-64-v2", 64, 4), ("x86-64-v2", 48, 3),
])
def test_id_count_is_the_largest_that_divides_the_outermost_splittable_loop(level: str, n: int, ids: int) -> None:
    it = _kernel(_matmul(48, 16, n))
    opts = hand_coded(it.ast, _target(level), threads=2)
    assert _balance(opts) == ids, opts


@pytest.mark.usefixtures("small")
def test_no_balancing_where_no_count_divides_a_loop() -> None:
    """AVX2, 6-row tiles: 60 rows are 30 per core, 5 row blocks; 80 columns are 5 column tiles; no count of 4, 3
    or 2 divides either loop: one id per core."""
    opts = hand_coded(_kernel(_matmul(60, 16, 80)).ast, _target("x86-64-v3"), threads=2)
    assert len(_thread_splits(opts)) == 1 and any(o.op is OptOps.SWAP for o in opts), opts


# ---------------------------------------------------------------- the results


def _run(it, device: str, target: Target, arrays: dict[int, np.ndarray], opts: list[Opt]) -> np.ndarray:
    dev = get_device(device)
    lin = lower_kernel(it.ast, target, opts=opts)
    specials = [u for u in lin.src if u.op is Ops.SPECIAL]
    assert len(specials) == 2, [u.arg for u in specials]  # core_id and the balancing core_id1
    k = dev.compile(lin, it.name, target if device == "cpu" else dev.default_target())
    bufs = {i: a.copy() for i, a in arrays.items()}
    bufs[0] = np.zeros(int(np.prod(it.bufs[0].shape)), dtype=np.float32)
    k(bufs)
    return bufs[0]


@pytest.mark.usefixtures("small")
@pytest.mark.parametrize("level", ["native", "x86-64-v2"])
# 100 rows: padded to whole tiles; 96 columns: whole vectors at every width (80, five 16-lane vectors, leaves an
# AVX-512 tile no whole-tile loop worth balancing)
@pytest.mark.parametrize("shape", [(48, 16, 64), (48, 24, 48), (100, 16, 96), (52, 16, 64), (48, 16, 37)])
def test_balanced_results_equal_numpy_on_cpu_and_python(level: str, shape: tuple[int, int, int]) -> None:
    """Matmuls whose kernels get balancing ids (including padded rows and ragged columns) computed by the cpu
    device and by the python reference interpreting the same program: equal to each other exactly and to numpy
    up to rounding."""
    target = _target(level)
    if not target.runs_here:
        pytest.skip(f"{target.isa} does not run on this host")
    m, kk, n = shape
    it = _kernel(_matmul(m, kk, n))
    opts = hand_coded(it.ast, target, threads=2)
    assert _balance(opts) is not None, opts
    rng = np.random.default_rng(sum(shape))
    a, b = rng.standard_normal((m, kk)).astype(np.float32), rng.standard_normal((kk, n)).astype(np.float32)
    arrays = {1: a.reshape(-1), 2: b.reshape(-1)}
    got = _run(it, "cpu", target, arrays, opts)
    np.testing.assert_allclose(got.reshape(m, n), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(_run(it, "python", target, arrays, opts), got)
