"""OptOps: legal opts keep every kernel's result; illegal ones raise KernelOptError saying why."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devices import get_device
from lower import schedule
from lower.buffers import new_buffer
from lower.optimize import Opt, OptOps, apply_opt, axes, size
from lower.stages import lower_kernel
from rewrite import AxisType, UOp, dtypes
from rewrite.errors import KernelOptError


def _kernel(out: UOp):
    items, _ = schedule([out])
    (it,) = [i for i in items if i.kind == "kernel"]
    return it


def _run(it, device: str, opts: list[Opt] | None, arrays: dict[int, np.ndarray]) -> np.ndarray:
    dev = get_device(device)
    k = dev.compile(lower_kernel(it.ast, dev, opts=opts), it.name)
    bufs = {i: (np.zeros_like(arrays[1], shape=(it.bufs[0].shape[0],)) if i == 0 else arrays[i].copy())
            for i in range(len(it.bufs))}
    bufs[0] = np.zeros(int(np.prod(it.bufs[0].shape)), dtype=np.float32)
    k(bufs)
    return bufs[0]


def _cases() -> list[tuple[str, UOp]]:
    a, b = new_buffer(dtypes.float32, (8, 16), "cpu"), new_buffer(dtypes.float32, (16, 8), "cpu")
    mm = (a.reshape((8, 16, 1)).expand((8, 16, 8)) * b.reshape((1, 16, 8)).expand((8, 16, 8))).sum((1,))
    sm = (a - a.max((1,)).expand((8, 16))).exp2()
    return [("matmul", mm), ("softmaxish", sm / sm.sum((1,)).expand((8, 16))), ("rowsum", a.sum((1,)) * 2.0),
            ("elementwise", (a * 3.0 + 1.0).sqrt())]


def _inputs(it) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(0)
    return {i: rng.standard_normal(int(np.prod(b.shape))).astype(np.float32) for i, b in enumerate(it.bufs) if i}


_TARGETS = [AxisType.LOOP, AxisType.THREAD, AxisType.REDUCE, AxisType.UPCAST, AxisType.UNROLL]


@st.composite
def opt_lists(draw: st.DrawFn, ast: UOp) -> list[Opt]:
    opts: list[Opt] = []
    for _ in range(draw(st.integers(0, 3))):
        rs = axes(ast)
        i = draw(st.integers(0, len(rs) - 1))
        n = size(rs[i])
        divs = [d for d in (2, 4, 8) if n % d == 0]
        if not divs:
            continue
        o = Opt(OptOps.SPLIT, i, (draw(st.sampled_from(divs)), draw(st.sampled_from(_TARGETS)), draw(st.booleans())))
        try:
            ast = apply_opt(ast, o)
        except KernelOptError:
            continue
        opts.append(o)
    return opts


@pytest.mark.parametrize("name", [c[0] for c in _cases()])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_opts_keep_results(name: str, data: st.DataObject) -> None:
    it = _kernel(dict(_cases())[name])
    opts = data.draw(opt_lists(it.ast))
    arrays = _inputs(it)
    ref = _run(it, "python", [], arrays)
    try:
        got_py = _run(it, "python", opts, arrays)
    except KernelOptError:
        return
    # lanes can change the order of a reduction's additions: equal up to rounding, then cpu == python exactly
    np.testing.assert_allclose(got_py, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_run(it, "cpu", opts, arrays), got_py)


def test_illegal_opts_say_why() -> None:
    it = _kernel(_cases()[2][1])  # rowsum: axes (8 loop, 16 reduce)
    with pytest.raises(KernelOptError, match="does not divide"):
        apply_opt(it.ast, Opt(OptOps.SPLIT, 0, (3, AxisType.UPCAST, False)))
    with pytest.raises(KernelOptError, match="cannot be split from a REDUCE"):
        apply_opt(it.ast, Opt(OptOps.SPLIT, 1, (4, AxisType.UPCAST, False)))
    with pytest.raises(KernelOptError, match="axis out of range"):
        apply_opt(it.ast, Opt(OptOps.SPLIT, 7, (2, AxisType.LOOP, False)))
    with pytest.raises(KernelOptError, match="not supported"):
        apply_opt(it.ast, Opt(OptOps.TC, 0, None))
