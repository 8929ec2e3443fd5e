"""The pipeline table: compile(graph, target) runs every stage in order, stops at any stage, checks the spec
between stages under SPEC=1, and reads the Target it is given (never the environment)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from devices.base import cpu_target, python_target
from lower.pipeline import PIPELINE, STAGE_NAMES, Stage, compile, loaded, print_pipeline
from lower.schedule import schedule
from rewrite import Ops, UOp, dtypes
from rewrite.env import Context
from rewrite.errors import CompilerError, SpecViolation
from tensor import Tensor

SPEC_ORDER = ["callify", "rangeify", "symbolic", "optimize", "expand", "instruction-selection", "linearize",
              "render", "compile"]


def _graph() -> tuple[UOp, np.ndarray, np.ndarray]:
    a = np.arange(48, dtype=np.float32).reshape(6, 8) / 7
    b = np.linspace(-1, 1, 8 * 16, dtype=np.float32).reshape(8, 16)
    return (Tensor(a) @ Tensor(b)).relu().sum(1).uop, a, b


def test_table_follows_the_spec_order() -> None:
    names = list(STAGE_NAMES)
    assert [n for n in names if n in SPEC_ORDER] == SPEC_ORDER
    assert all(isinstance(s, Stage) and s.scope in ("graph", "kernel", "program") for s in PIPELINE)
    scopes = [s.scope for s in PIPELINE]
    assert scopes == sorted(scopes, key=["graph", "kernel", "program"].index)  # graph, then kernel, then program
    out = io.StringIO()
    print_pipeline(out)
    text = out.getvalue()
    assert all(n in text for n in names) and "memory-plan" in text


@pytest.mark.parametrize("target", [cpu_target("native"), python_target()], ids=["cpu", "python"])
def test_compile_gives_programs_that_run(target) -> None:
    g, a, b = _graph()
    out = compile(g, target)
    assert out.op is Ops.SINK and out.src and all(p.op is Ops.PROGRAM for p in out.src)
    for p in out.src:
        assert [s.op for s in p.src] == [Ops.SINK, Ops.LINEAR, Ops.SOURCE, Ops.BINARY]
        assert isinstance(p.src[2].arg, str) and isinstance(p.src[3].arg, bytes)
        assert (len(p.src[3].arg) > 0) == (not target.interpreted)
    # run the programs in schedule order on the schedule's buffers
    items, outs = schedule([g])
    arrays: dict[UOp, np.ndarray] = {}
    from lower.buffers import has_data, lookup

    for it in items:
        for buf in it.bufs:
            if buf not in arrays:
                arrays[buf] = lookup(buf).reshape(-1).copy() if has_data(buf) else np.zeros(int(np.prod(buf.shape)),
                                                                                              np.float32)
    kernels = [it for it in items if it.kind == "kernel"]
    assert len(kernels) == len(out.src)
    for it, p in zip(kernels, out.src, strict=True):
        assert p.src[0] is it.ast
        loaded(p)({i: arrays[buf] for i, buf in enumerate(it.bufs)})
    want = np.maximum(a.astype(np.float64) @ b, 0).sum(1)
    np.testing.assert_allclose(arrays[outs[g]], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", STAGE_NAMES)
def test_upto_stops_after_any_stage(name: str) -> None:
    g, _, _ = _graph()
    out = compile(g, cpu_target("native"), upto=name)
    stage = next(s for s in PIPELINE if s.name == name)
    assert out.op is Ops.SINK
    if stage.scope == "graph" and name != "rangeify":
        assert all(r.op is not Ops.SINK for r in out.src)  # tensor roots
    elif name == "rangeify" or (stage.scope == "kernel" and name != "linearize"):
        assert all(k.op is Ops.SINK for k in out.src)
    elif name == "linearize":
        assert all(k.op is Ops.LINEAR for k in out.src)
    else:
        assert all(p.op is Ops.PROGRAM and len(p.src) == (3 if name == "render" else 4) for p in out.src)


def test_upto_unknown_stage_is_a_typed_error() -> None:
    g, _, _ = _graph()
    with pytest.raises(CompilerError, match="not a stage"):
        compile(g, cpu_target("native"), upto="rangify")


def test_the_target_decides_the_vector_width() -> None:
    """The same graph for SSE, AVX2 and AVX-512 targets: the register tile's vectors follow the target, whatever
    CPU_TARGET says (the target is an argument)."""
    a = Tensor(np.ones((64, 64), np.float32))
    g = (a @ a).uop
    with Context(CPU_TARGET="x86-64-v2"):
        for level, lanes in (("x86-64-v2", 4), ("x86-64-v3", 8), ("x86-64-v4", 16)):
            (p,) = compile(g, cpu_target(level), upto="render").src
            assert f"f32x{lanes} acc0;" in p.src[2].arg, level
            assert f"f32x{lanes * 2} acc0" not in p.src[2].arg


def test_spec_checked_between_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    g, _, _ = _graph()
    with Context(SPEC=1):
        compile(g, cpu_target("native"))  # every stage's output passes its spec stage
        # a stage that breaks the kernel contract (a movement op left in a kernel) is caught at its boundary
        import lower.pipeline as pl

        bad = next(s for s in pl.PIPELINE if s.name == "symbolic")

        def broken(ast: UOp, ctx: pl.Lowering) -> UOp:
            x = UOp.const(1.0, dtypes.float32).reshape((1,))
            return UOp.sink(*ast.src, x.expand((4,)))

        monkeypatch.setattr(pl, "PIPELINE", tuple(Stage(s.name, s.scope, s.rules, s.spec, broken, s.what)
                                                  if s is bad else s for s in pl.PIPELINE))
        with pytest.raises(SpecViolation):
            pl.compile(g, cpu_target("native"))
