"""The schedule cache (lower.schedule_cache): a realize of a graph with the structure of an earlier one replays
that one's plan. Checked: hits and misses by structure, results against numpy with new data and new buffers,
aliasing (x + x against x + y), fresh outputs, memory-planned intermediates, several roots, the knobs that
change lowering, and errors raised the same on a hit as on the miss."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from lower import realize
from lower import schedule_cache as sc
from lower.buffers import has_data, lookup, new_buffer, store
from lower.realize import plans
from rewrite import UOp, dtypes
from rewrite.env import Context
from rewrite.errors import DeviceError
from tensor import Tensor

RNG = np.random.default_rng(7)


def data(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def buf(a: np.ndarray, device: str = "cpu") -> UOp:
    b = new_buffer(getattr(dtypes, a.dtype.name), a.shape, device)
    store(b, np.ascontiguousarray(a).reshape(-1))
    return b


def value(b: UOp) -> np.ndarray:
    return np.asarray(lookup(b)).reshape(b.shape)


class Counts:
    """Hits and misses of the process-wide plan cache since construction."""

    def __init__(self) -> None:
        self.h0, self.m0 = plans.hits, plans.misses

    @property
    def hits(self) -> int:
        return plans.hits - self.h0

    @property
    def misses(self) -> int:
        return plans.misses - self.m0


@pytest.mark.parametrize("device", ["cpu", "python"])
def test_same_structure_new_buffers_hits_and_computes_with_their_data(device: str) -> None:
    shape = (5, 7) if device == "python" else (300, 17)
    c = Counts()
    for i in range(4):
        a, b = data(*shape), data(*shape)
        x, y = buf(a, device), buf(b, device)
        out = (x * y + 1.5).sum((1,))
        res = realize([out])[out]
        np.testing.assert_allclose(value(res).reshape(-1), (a * b + 1.5).sum(1), rtol=1e-5, atol=1e-5)
        assert (c.misses, c.hits) == (1, i)


def test_a_changed_graph_misses() -> None:
    a, b = data(64), data(64)
    x, y = buf(a), buf(b)
    base = x + y
    realize([base])
    variants = {
        "op": x * y,
        "constant": x + y + 1.0,
        "other constant": x + y + 2.0,
        "shape": buf(data(32)) + buf(data(32)),
        "dtype": buf(data(64).astype(np.float64)) + buf(data(64).astype(np.float64)),
        "aliasing": x + x,
        "argument order": (x + y).reshape((8, 8)),
        "device": buf(a, "python") + buf(b, "python"),
    }
    for what, g in variants.items():
        c = Counts()
        realize([g])
        assert (c.misses, c.hits) == (1, 0), what
    c = Counts()
    realize([buf(a) + buf(b)])
    assert (c.misses, c.hits) == (0, 1)


def test_aliasing_is_part_of_the_key() -> None:
    a, b = data(100), data(100)
    x, y = buf(a), buf(b)
    r1 = realize([x + y])[x + y]
    c = Counts()
    r2 = realize([x + x])[x + x]  # one buffer read twice: not the plan of two buffers
    assert c.misses == 1
    np.testing.assert_array_equal(value(r1), a + b)
    np.testing.assert_array_equal(value(r2), a + a)
    z = buf(b)
    r3 = realize([z + z])[z + z]
    assert c.hits == 1
    np.testing.assert_array_equal(value(r3), b + b)


def test_outputs_are_fresh_and_earlier_results_stay() -> None:
    a = data(256)
    x = buf(a)
    g = (x * 2.0).exp2()
    first = realize([g])[g]
    keep = value(first).copy()
    store(x, (a + 1.0).astype(np.float32))  # new data under the same buffer: read at the next replay
    c = Counts()
    second = realize([g])[g]
    assert c.hits == 1
    assert second is not first and second.arg.slot != first.arg.slot
    np.testing.assert_array_equal(value(first), keep)
    np.testing.assert_allclose(value(second), np.exp2((a + 1.0) * 2.0), rtol=1e-6)


def test_intermediates_share_storage_and_are_given_back(monkeypatch: pytest.MonkeyPatch) -> None:
    from devices import get_device

    dev = get_device("cpu")

    def chain(x: UOp) -> UOp:
        x1 = (x + 1.0).contiguous()
        x2 = (x1 * 2.0).contiguous()
        x3 = (x2 + 3.0).contiguous()
        return x3 * 4.0

    realize([chain(buf(data(1000)))])
    live: dict[int, int] = {}  # id(array) -> allocations not given back
    alloc, free = dev.alloc, dev.free

    def counting_alloc(count: int, dtype: object) -> np.ndarray:
        arr = alloc(count, dtype)
        live[id(arr)] = live.get(id(arr), 0) + 1
        return arr

    def counting_free(arr: np.ndarray) -> None:
        live[id(arr)] -= 1
        free(arr)

    monkeypatch.setattr(dev, "alloc", counting_alloc)
    monkeypatch.setattr(dev, "free", counting_free)
    c = Counts()
    results = []
    for _ in range(3):
        a = data(1000)
        g = chain(buf(a))
        res = realize([g])[g]
        np.testing.assert_allclose(value(res), (((a + 1) * 2) + 3) * 4, rtol=1e-6)
        results.append(res)  # results are kept: only their storage stays allocated
    assert c.hits == 3
    # three intermediates in two storage groups per replay (x3 reuses x1's), each given back; the outputs stay
    assert sum(live.values()) == 3
    del results, res
    import gc

    gc.collect()
    assert sum(live.values()) == 0


def test_several_roots_with_a_shared_intermediate() -> None:
    def roots(x: UOp) -> list[UOp]:
        s = (x + 1.0).contiguous()
        return [s * 2.0, s.sum((0,)), s]

    c = Counts()
    for _ in range(3):
        a = data(128)
        rs = roots(buf(a))
        outs = realize(rs)
        np.testing.assert_allclose(value(outs[rs[0]]), (a + 1) * 2, rtol=1e-6)
        np.testing.assert_allclose(value(outs[rs[1]]).reshape(()), (a + 1).sum(), rtol=1e-5)
        np.testing.assert_allclose(value(outs[rs[2]]), a + 1, rtol=1e-6)
        assert len({outs[r].arg.slot for r in rs}) == 3
    assert (c.misses, c.hits) == (1, 2)
    a = data(128)
    x = buf(a)
    c = Counts()
    flipped = roots(x)[::-1]  # the same graphs asked in another order: another plan
    outs = realize(flipped)
    assert c.misses == 1
    np.testing.assert_allclose(value(outs[flipped[0]]), a + 1, rtol=1e-6)


def test_a_buffer_root_is_its_own_result() -> None:
    x = buf(data(8))
    for _ in range(2):
        assert realize([x])[x] is x
    y = buf(data(8))
    assert realize([y])[y] is y


def test_lowering_knobs_are_part_of_the_key() -> None:
    a = data(1 << 16)
    x = buf(a)
    g = x.sum((0,))
    realize([g])
    c = Counts()
    with Context(NOOPT=1):
        res = realize([g])[g]
    assert c.misses == 1
    np.testing.assert_allclose(value(res).reshape(()), a.sum(), rtol=1e-4)
    k1, _ = sc.signature([g])
    with Context(NOOPT=1):
        k2, _ = sc.signature([g])
    assert k1 != k2


def _tc_and_barriers(run: Callable[[], Tensor], **knobs: object) -> list[tuple[str, int]]:
    """What the kernels that `run()` realizes on the grid emulator hold, by op (WMMA, SHUFFLE, BARRIER, INS)."""
    from collections import Counter

    from rewrite import Ops

    with Context(DEVICE="python", **knobs):  # type: ignore[arg-type]
        key, _ = sc.signature([run().uop])
        run().realize()
    p = plans.get(key)
    assert p is not None
    ops: Counter = Counter()
    for st in p.steps:
        for u in st.kernel.prog.instrs:
            if u.op in (Ops.WMMA, Ops.SHUFFLE, Ops.BARRIER):
                ops[u.op.name] += 1
            elif u.op is Ops.INS:
                ops[u.arg[0]] += 1
    return sorted(ops.items())


def test_every_lowering_knob_keys_the_process_caches() -> None:
    """A knob that changes lowering, set by a Context after the same graph was lowered without it, gets its own
    kernels: WGMMA, TMA and WARP_REDUCE (which the lowered-LINEAR memo, the compiled-kernel table and the plan key
    all missed, handing back the first lowering) and ALLOW_TF32 and PYTHON_TARGET (through the target)."""
    from rewrite.env import KNOBS, LOWERING_KNOBS

    assert LOWERING_KNOBS[0] == "DEVICE"  # lower.realize._kernel_key leaves out the first
    assert {"WGMMA", "TMA", "WARP_REDUCE", "ALLOW_TF32", "PYTHON_TARGET", "NOOPT", "BEAM"} <= set(LOWERING_KNOBS)
    assert not KNOBS["DEBUG"].lowers and not KNOBS["CACHEDIR"].lowers
    a16, b16 = data(64, 256).astype(np.float16), data(256, 64).astype(np.float16)
    f32, wide = data(64, 64), data(4, 512)

    def mm() -> Tensor:
        return Tensor(a16) @ Tensor(b16)

    def mm32() -> Tensor:
        return Tensor(f32) @ Tensor(f32)

    def rows() -> Tensor:
        return Tensor(wide).sum(1)

    mma = _tc_and_barriers(mm, PYTHON_TARGET="sm_90")
    wgmma = _tc_and_barriers(mm, PYTHON_TARGET="sm_90", WGMMA=1)
    tma = _tc_and_barriers(mm, PYTHON_TARGET="sm_90", WGMMA=1, TMA=1)
    assert dict(mma)["WMMA"] == 16 and dict(wgmma)["WMMA"] == 4, (mma, wgmma)  # m16n8k16 tiles, then m64n128k16
    assert "tma.load" not in dict(wgmma) and dict(tma)["tma.load"] > 0, (wgmma, tma)
    assert _tc_and_barriers(mm, PYTHON_TARGET="sm_90") == mma  # and back
    assert "WMMA" not in dict(_tc_and_barriers(mm32, PYTHON_TARGET="sm_90"))
    assert "WMMA" in dict(_tc_and_barriers(mm32, PYTHON_TARGET="sm_90", ALLOW_TF32=1))  # tf32 tensor cores
    assert "WMMA" not in dict(_tc_and_barriers(mm32, PYTHON_TARGET="sm_90"))
    shuffles = dict(_tc_and_barriers(rows, PYTHON_TARGET="sm_90"))
    tree = dict(_tc_and_barriers(rows, PYTHON_TARGET="sm_90", WARP_REDUCE=0))
    assert shuffles.get("SHUFFLE") and "SHUFFLE" not in tree and tree["BARRIER"] > shuffles["BARRIER"], (shuffles,
                                                                                                          tree)
    assert "BARRIER" not in dict(_tc_and_barriers(rows))  # the plain interpreter: no grid
    # and the BEAM disk cache's key holds them (a search from the mma.sync heuristics is no WGMMA=1 result)
    from lower.search import beam_key
    from tests.lower.test_gpu import GPU

    ast = mm().schedule()[-1].ast
    off = beam_key(ast, GPU, 2)
    with Context(WGMMA=1):
        on = beam_key(ast, GPU, 2)
    assert on != off and off == beam_key(ast, GPU, 2)


def test_tensor_front_end_replays() -> None:
    c = Counts()
    for _ in range(3):
        a, b = data(33, 65), data(65)
        t = (Tensor(a) - Tensor(b)).relu().softmax(-1)
        e = np.exp(np.maximum(a - b, 0) - np.maximum(a - b, 0).max(-1, keepdims=True))
        np.testing.assert_allclose(t.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert c.hits >= 2


def test_an_input_without_data_gets_storage_on_every_replay() -> None:
    c = Counts()
    for _ in range(2):
        x = new_buffer(dtypes.float32, (16,), "cpu")  # never written: storage on first use
        g = x.bitcast(dtypes.uint32) * 0 + 2  # whatever the storage holds (a float NaN would stay NaN)
        np.testing.assert_array_equal(value(realize([g])[g]), np.full(16, 2, np.uint32))
        assert has_data(x)
    assert c.hits == 1


def test_copies_between_devices_replay() -> None:
    c = Counts()
    for _ in range(3):
        a = data(6, 4)
        t = Tensor(a, device="cpu").to("python") + 1
        np.testing.assert_allclose(t.numpy(), a + 1, rtol=1e-6)
    assert c.hits >= 2


def test_random_draws_differ_and_replay_with_the_seed() -> None:
    Tensor.manual_seed(3)
    r1 = Tensor.rand(64).numpy()
    r2 = Tensor.rand(64).numpy()
    assert not np.array_equal(r1, r2)
    Tensor.manual_seed(3)
    c = Counts()
    assert np.array_equal(Tensor.rand(64).numpy(), r1)
    assert c.hits == 1


def test_bad_storage_is_caught_on_a_hit() -> None:
    a = data(64)
    x = buf(a)
    realize([x * 3.0])
    y = buf(a)
    store(y, np.zeros(10, np.float32))  # too small for the shape the graph says
    c = Counts()
    with pytest.raises(DeviceError, match="has 10 elements"):
        realize([y * 3.0])
    assert c.hits == 1


def test_variables_are_structure() -> None:
    x = buf(data(8))

    def g(hi: int) -> UOp:
        return x + UOp.variable("n", 1, hi).cast(dtypes.float32).reshape((1,)).expand((8,))

    assert sc.signature([g(8)])[0] == sc.signature([g(8)])[0]
    assert sc.signature([g(8)])[0] != sc.signature([g(9)])[0]  # a variable's bounds are structure


def test_two_views_of_one_buffer_are_one_input() -> None:
    a, b, c = data(16), data(16), data(16)
    p = buf(a)
    p44 = UOp.buffer(p.arg.slot, dtypes.float32, (4, 4), "cpu")  # the same storage, seen as 4x4
    g1 = p44.reshape((16,)) + p
    np.testing.assert_array_equal(value(realize([g1])[g1]), a + a)
    q, r = buf(b), buf(c)
    g2 = UOp.buffer(r.arg.slot, dtypes.float32, (4, 4), "cpu").reshape((16,)) + q  # two storages: not g1's plan
    cnt = Counts()
    np.testing.assert_array_equal(value(realize([g2])[g2]), c + b)
    assert cnt.misses == 1
    s = buf(b)
    g3 = UOp.buffer(s.arg.slot, dtypes.float32, (4, 4), "cpu").reshape((16,)) + s
    np.testing.assert_array_equal(value(realize([g3])[g3]), b + b)
    assert cnt.hits == 1


def test_signature_abstracts_buffers_by_position() -> None:
    x, y, z = buf(data(4)), buf(data(4)), buf(data(4))
    k1, in1 = sc.signature([x * y + x])
    k2, in2 = sc.signature([z * x + z])
    assert k1 == k2 and in1 == [x, y] and in2 == [z, x]
    k3, _ = sc.signature([x * y + y])
    assert k3 != k1


def test_plan_cache_keeps_the_most_recent() -> None:
    cache = sc.PlanCache(limit=2)
    p = object()
    for k in ("a", "b", "c"):
        cache.put((k,), p)  # type: ignore[arg-type]
    assert len(cache) == 2 and cache.get(("a",)) is None and cache.get(("c",)) is p
    assert (cache.hits, cache.misses) == (1, 1)


def test_signature_tells_apart_what_lowering_tells_apart() -> None:
    """Keys of graphs that differ in a leaf constant's value type or sign, in the order of one, two or three
    sources, or in a source's position are all distinct (buffers count by position: x - y is y - x); the same
    graphs over new buffers have the same keys (the walk's parts are written out per source count and for leaves:
    each form checked)."""
    x, y, m = buf(data(6)), buf(data(6)), buf(data(6) > 0)
    i = buf(np.arange(6, dtype=np.int32))
    graphs: dict[str, Callable[[UOp, UOp, UOp, UOp], UOp]] = {
        "float 1": lambda x, y, m, i: x + 1.0,
        "float 2": lambda x, y, m, i: x + 2.0,
        "float -0": lambda x, y, m, i: x * -0.0,
        "float +0": lambda x, y, m, i: x * 0.0,
        "int 1": lambda x, y, m, i: i + 1,
        "int 1 cast": lambda x, y, m, i: (i + 1).cast(dtypes.float32),
        "bool true": lambda x, y, m, i: m & True,
        "bool false": lambda x, y, m, i: m & False,
        "unary": lambda x, y, m, i: x.sqrt(),
        "unary other": lambda x, y, m, i: x.exp2(),
        "binary xy": lambda x, y, m, i: (x + 1.0) - x,
        "binary yx": lambda x, y, m, i: x - (x + 1.0),
        "binary two buffers": lambda x, y, m, i: x - y,
        "where xy": lambda x, y, m, i: m.where(x + 1.0, x),
        "where yx": lambda x, y, m, i: m.where(x, x + 1.0),
        "where xx": lambda x, y, m, i: m.where(x, x),
        "reshape": lambda x, y, m, i: (x + y).reshape((2, 3)),
        "reshape other": lambda x, y, m, i: (x + y).reshape((3, 2)),
    }
    keys = {name: sc.signature([g(x, y, m, i)])[0] for name, g in graphs.items()}
    assert len(set(keys.values())) == len(keys), [(a, b) for a in keys for b in keys if a < b and keys[a] == keys[b]]
    x2, y2, m2 = buf(data(6)), buf(data(6)), buf(data(6) > 0)
    i2 = buf(np.arange(6, dtype=np.int32))
    for name, g in graphs.items():
        assert sc.signature([g(x2, y2, m2, i2)])[0] == keys[name], name
