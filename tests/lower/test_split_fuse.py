"""The rule fuse-sibling-stores (lower.split_fuse): assignments over one iteration space that read a buffer in
common at the element they write share one kernel with several STOREs, and never where a store would see what a
sibling writes. Every case is checked against numpy, on the cpu and the python (reference) device."""

from __future__ import annotations

import numpy as np
import pytest

from lower.schedule import schedule
from rewrite import Ops, UOp
from tensor import Tensor
from tensor.optim import SGD, Adam, AdamW

DEVICES = ["cpu", "python"]


def _arr(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _real(a: np.ndarray, device: str) -> Tensor:
    return Tensor(a, device=device).realize()


def _stores(ast: UOp) -> int:
    return sum(u.op is Ops.STORE for u in ast.toposort())


def _kernels(*ts: Tensor) -> list[tuple[int, int]]:
    """(outputs, STOREs) of each kernel that realizes `ts`."""
    items, _ = schedule([t.uop for t in ts])
    return [(it.outs, _stores(it.ast)) for it in items if it.kind == "kernel" and it.ast is not None]


@pytest.mark.parametrize("device", DEVICES)
def test_siblings_reading_one_input_share_a_kernel(device: str) -> None:
    a0, b0, g0 = _arr(5, 7), _arr(5, 7, seed=1), _arr(5, 7, seed=2)
    a, b, g = _real(a0, device), _real(b0, device), _real(g0, device)
    va, vb = a * 0.5 + g, b - g * g + a * 0.25  # vb reads a's OLD value at the element a's store writes
    a.assign(va)
    b.assign(vb)
    assert _kernels(a, b) == [(2, 2)]
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), a0 * 0.5 + g0, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 - g0 * g0 + a0 * 0.25, rtol=1e-6)


def test_shared_value_is_computed_once() -> None:
    """AdamW's shape: the parameter's update reads the new moment that the moment's own store writes."""
    p0, m0, g0 = _arr(8, 3), _arr(8, 3, seed=1), _arr(8, 3, seed=2)
    p, m, g = _real(p0, "cpu"), _real(m0, "cpu"), _real(g0, "cpu")
    new_m = m * 0.9 + g * 0.1
    m.assign(new_m)
    p.assign(p - new_m * 0.5)
    items, _ = schedule([m.uop, p.uop])
    (it,) = [i for i in items if i.kind == "kernel"]
    assert it.ast is not None and it.outs == 2
    st_m, st_p = sorted((u for u in it.ast.toposort() if u.op is Ops.STORE), key=lambda u: u.src[0].src[0].buf_arg.slot)
    assert st_m.src[1] in st_p.src[1].toposort()  # new_m is one node: computed once, stored and read
    Tensor.realize(m, p)
    np.testing.assert_allclose(m.numpy(), m0 * 0.9 + g0 * 0.1, rtol=1e-6)
    np.testing.assert_allclose(p.numpy(), p0 - (m0 * 0.9 + g0 * 0.1) * 0.5, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_reading_a_siblings_new_value_stays_apart(device: str) -> None:
    a0, b0, g0 = _arr(6), _arr(6, seed=1), _arr(6, seed=2)
    a, b, g = _real(a0, device), _real(b0, device), _real(g0, device)
    a.assign(a + g)
    b.assign(b + a + g)  # `a` is the AFTER: the new value, written by the sibling
    assert _kernels(a, b) == [(1, 1), (1, 1)]
    Tensor.realize(a, b)
    np.testing.assert_allclose(b.numpy(), b0 + a0 + g0 + g0, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_reading_a_siblings_target_elsewhere_stays_apart(device: str) -> None:
    a0, b0, g0 = _arr(6), _arr(6, seed=1), _arr(6, seed=2)
    a, b, g = _real(a0, device), _real(b0, device), _real(g0, device)
    va, vb = a + g, b + a.flip(0) + g  # vb reads the old a at other elements: a's kernel would overwrite them
    a.assign(va)
    b.assign(vb)
    assert all(o == 1 for o, _ in _kernels(a, b))
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), a0 + g0, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 + a0[::-1] + g0, rtol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_target_read_without_its_own_store_reading_it_stays_apart(device: str) -> None:
    """a's store does not load a, so in one kernel nothing orders b's load of the old a before a's store."""
    a0, b0, g0 = _arr(6), _arr(6, seed=1), _arr(6, seed=2)
    a, b, g = _real(a0, device), _real(b0, device), _real(g0, device)
    va, vb = g * 2, b + a + g
    a.assign(va)
    b.assign(vb)
    assert all(o == 1 for o, _ in _kernels(a, b))
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), g0 * 2, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 + a0 + g0, rtol=1e-6)


def test_nothing_in_common_or_other_shapes_stay_apart() -> None:
    a, b, c = _real(_arr(6), "cpu"), _real(_arr(6, seed=1), "cpu"), _real(_arr(3, 2), "cpu")
    g, h = _real(_arr(6, seed=2), "cpu"), _real(_arr(6, seed=3), "cpu")
    a.assign(a + g)
    b.assign(b + h)  # reads nothing a's kernel reads at the same element (a merge would only grow a kernel)
    c.assign(c + g.reshape(3, 2))  # another iteration space
    assert all(o == 1 for o, _ in _kernels(a, b, c))


@pytest.mark.parametrize("device", DEVICES)
def test_a_merge_without_an_order_is_taken_back(device: str) -> None:
    """b reads a reduction of a's NEW value (another kernel), so b's store must follow a's: one kernel for both
    would wait for itself. The split takes the merge back."""
    a0, b0, g0 = _arr(6), _arr(6, seed=1), _arr(6, seed=2)
    a, b, g = _real(a0, device), _real(b0, device), _real(g0, device)
    a.assign(a + g)
    b.assign(b + g + a.sum().contiguous())
    assert sorted(_kernels(a, b)) == [(1, 1), (1, 1), (1, 1)]
    Tensor.realize(a, b)
    np.testing.assert_allclose(a.numpy(), a0 + g0, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), b0 + g0 + (a0 + g0).sum(), rtol=1e-5)


def _step_state(cls: type, kwargs: dict, device: str, steps: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((4, 6)).astype(np.float32), device=device, requires_grad=True)
    x = Tensor(rng.standard_normal((3, 4)).astype(np.float32), device=device)
    opt = cls([w], lr=0.1, **kwargs)
    for _ in range(steps):
        opt.zero_grad()
        ((x @ w).relu() * (x @ w)).sum().backward()
        opt.step()
    return [w.numpy(), *(t.numpy() for t in opt.state[0].values())]


@pytest.mark.parametrize("cls, kwargs", [(AdamW, {}), (Adam, {"weight_decay": 0.1}), (SGD, {"momentum": 0.9})])
def test_optimizer_step_is_one_kernel_per_parameter_and_device_independent(cls: type, kwargs: dict) -> None:
    rng = np.random.default_rng(0)
    w = Tensor(rng.standard_normal((4, 6)).astype(np.float32), requires_grad=True)
    opt = cls([w], lr=0.1, **kwargs)
    (w * w).sum().backward()
    targets = opt._assign_updates()
    items, _ = schedule([t.uop for t in targets])
    stores = [it for it in items if it.kind == "kernel" and it.outs > 1]
    assert len(stores) == 1 and stores[0].outs == len(targets)
    cpu, ref = _step_state(cls, kwargs, "cpu"), _step_state(cls, kwargs, "python")
    for a, b in zip(cpu, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


FUSED: dict[int, bool] = {}


@pytest.mark.parametrize("seed", range(10))
def test_random_sibling_stores_match_numpy(seed: int) -> None:
    """Generated: four buffers assigned in one realize, each value reading a shared input at the element written
    and two random buffers, each read by its old value (at the element or flipped) or, once assigned, its new
    value (the AFTER); whatever the rule fuses, every buffer ends with numpy's value, on the cpu and the python
    device alike, and on these graphs the rule fuses some of them."""
    fused_any = False
    for device in DEVICES:
        rng = np.random.default_rng(seed)
        n = 4
        olds = [_arr(6, seed=seed * 10 + i) for i in range(n)]
        g0 = _arr(6, seed=seed * 10 + 9)
        ts = [_real(x.copy(), device) for x in olds]
        g = _real(g0, device)
        cur = list(olds)  # numpy: each buffer's value as the graph reads it now
        lazy = list(ts)
        # per buffer: the two it reads, how (0, 1: as the graph has it now, 2: flipped), coefficients, and
        # whether it is assigned at once (the values made after it read its new value)
        plans = [(rng.choice(n, size=2), rng.choice(3, size=2, p=[0.45, 0.45, 0.1]), rng.integers(1, 4, size=2),
                  rng.random() < 0.25) for _ in range(n)]
        vals = []
        for i, (reads, how, coef, now) in enumerate(plans):
            v, w = lazy[i] + g * float(coef[0]), cur[i] + g0 * coef[0]
            for j, h in zip(reads, how, strict=True):
                src, ref = (lazy[j], cur[j]) if h != 2 else (lazy[j].flip(0), cur[j][::-1])
                v, w = v + src * float(coef[1]), w + ref * coef[1]
            vals.append((v, w))
            if now:
                ts[i].assign(v)
                lazy[i], cur[i] = ts[i], w
        for i, (v, w) in enumerate(vals):
            if not plans[i][3]:
                ts[i].assign(v)
                cur[i] = w
        fused_any |= any(o > 1 for o, _ in _kernels(*ts))
        Tensor.realize(*ts)
        for i in range(n):
            np.testing.assert_allclose(ts[i].numpy(), cur[i], rtol=1e-5, atol=1e-5)
    FUSED[seed] = fused_any


def test_random_sibling_stores_fuse_some() -> None:
    """The generated graphs above are not all left apart (the rule is exercised, not only its refusals)."""
    for seed in range(10):
        if seed not in FUSED:
            test_random_sibling_stores_match_numpy(seed)
    assert sum(FUSED.values()) >= 3


@pytest.mark.parametrize("device", DEVICES)
def test_fused_kernel_replays_from_the_plan_cache(device: str) -> None:
    """A realize of the same structure replays the cached plan: every output of the fused kernel is an input
    written in place (made writable, the caller's arrays untouched), with the new buffers' data."""
    from lower.realize import plans

    shape = (5, 7) if device == "python" else (64, 129)  # the cpu shape is vectorized and split across threads
    hits = plans.hits
    for i in range(4):
        a0, b0, g0 = _arr(*shape, seed=3 * i), _arr(*shape, seed=3 * i + 1), _arr(*shape, seed=3 * i + 2)
        keep = a0.copy(), b0.copy()
        a, b, g = Tensor(a0, device=device), Tensor(b0, device=device), Tensor(g0, device=device)
        Tensor.realize(a, b, g)
        va, vb = a * 0.5 + g, b - g * g + a * 0.25
        a.assign(va)
        b.assign(vb)
        if i == 0:
            assert _kernels(a, b) == [(2, 2)]
        Tensor.realize(a, b)
        np.testing.assert_allclose(a.numpy(), keep[0] * 0.5 + g0, rtol=1e-6)
        np.testing.assert_allclose(b.numpy(), keep[1] - g0 * g0 + keep[0] * 0.25, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(a0, keep[0])
        np.testing.assert_array_equal(b0, keep[1])
    assert plans.hits - hits >= 1  # (which realizes hit depends on the tensors still alive: aliasing is keyed)


def test_memory_plan_counts_every_output_of_a_kernel() -> None:
    """A kernel's outputs 0..outs-1 are all produced by it: an intermediate written as a second output shares
    storage like any other (lower.memory)."""
    from lower.buffers import new_buffer, slot
    from lower.memory import plan
    from lower.schedule import ScheduleItem
    from rewrite import dtypes

    x, y, inp, out, z, w = (new_buffer(dtypes.float32, (16,), "cpu") for _ in range(6))
    items = [ScheduleItem("kernel", (x, y, inp), outs=2), ScheduleItem("kernel", (z, y)),
             ScheduleItem("kernel", (w, x)), ScheduleItem("kernel", (out, w, z))]
    shared = plan(items, {out})
    assert shared[slot(y)] is y  # the second output is an intermediate with storage of its own
    assert shared[slot(w)] is y  # and, dead after item 1, lends it to w


@pytest.mark.parametrize("device", DEVICES)
def test_two_stores_into_one_buffer_stay_apart(device: str) -> None:
    """Two assignments to one buffer in one realize, the second not reading the first: one kernel would leave
    the order of the two writes to each element open."""
    t0, g0 = _arr(6), _arr(6, seed=1)
    t, g = _real(t0, device), _real(g0, device)
    t.assign(g * 2)
    t.assign(g * 3)  # neither reads t: nothing else keeps them apart
    assert _kernels(t) == [(1, 1), (1, 1)]
    t.realize()
    np.testing.assert_allclose(t.numpy(), g0 * 3, rtol=1e-6)
