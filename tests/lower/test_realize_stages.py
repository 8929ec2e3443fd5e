"""realize goes through the pipeline's program stages: render and compile run as rows of the table (via
lower.pipeline._run_stage), so SPEC=1 checks their output, DEBUG=5 prints it, and a realize's new kernels of one
device are one SINK of PROGRAMs that the compile row compiles as one batch."""

from __future__ import annotations

import numpy as np
import pytest

import lower.pipeline as pl
from rewrite import Ops, UOp
from rewrite.env import Context
from rewrite.errors import SpecViolation
from tensor import Tensor


def _fresh(n: int, m: int) -> tuple[Tensor, np.ndarray]:
    """A two-kernel graph (a reduction realized, then read by an elementwise kernel) of a shape no other test
    uses, so its kernels are not in the kernel cache yet."""
    a = np.linspace(-2, 3, n * m, dtype=np.float32).reshape(n, m)
    t = Tensor(a)
    out = (t - t.sum(1, keepdim=True).contiguous()) * 2
    return out, (a - a.sum(1, keepdims=True)) * 2


def _recording(monkeypatch: pytest.MonkeyPatch, seen: list[tuple[str, UOp]]) -> None:
    """Every program row records what it was given, then runs as before."""

    def wrap(st: pl.Stage) -> pl.Stage:
        def run(g: UOp, ctx: pl.Lowering) -> UOp:
            seen.append((st.name, g))
            return st.run(g, ctx)

        return pl.Stage(st.name, st.scope, st.rules, st.spec, run, st.what)

    monkeypatch.setattr(pl, "PIPELINE", tuple(wrap(s) if s.scope == "program" else s for s in pl.PIPELINE))


def test_realize_compiles_new_kernels_as_one_batch_through_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, UOp]] = []
    _recording(monkeypatch, seen)
    out, want = _fresh(13, 29)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    assert [name for name, _ in seen] == ["render", "compile"]  # each row once, for the whole batch
    (_, rendered_in), (_, compiled_in) = seen
    assert rendered_in.op is Ops.SINK and len(rendered_in.src) == 2  # the reduction's kernel and the one reading it
    assert all(p.op is Ops.PROGRAM and [s.op for s in p.src] == [Ops.SINK, Ops.LINEAR] for p in rendered_in.src)
    assert all([s.op for s in p.src] == [Ops.SINK, Ops.LINEAR, Ops.SOURCE] for p in compiled_in.src)
    names = [p.arg for p in compiled_in.src]
    assert len(set(names)) == len(names)  # one file, one symbol each
    assert all(f" {p.arg}(" in p.src[2].arg for p in compiled_in.src)


def test_spec_is_checked_after_render_and_compile_in_realize(monkeypatch: pytest.MonkeyPatch) -> None:
    import rewrite.spec as spec

    checked: list[tuple[str, tuple[Ops, ...]]] = []
    real = spec.check

    def check(root: UOp, stage: str = "any", **kw: object) -> None:
        if root.op is Ops.PROGRAM:
            checked.append((stage, tuple(s.op for s in root.src)))
        real(root, stage, **kw)  # type: ignore[arg-type]  # the keywords check takes, passed on

    monkeypatch.setattr(spec, "check", check)
    out, want = _fresh(11, 31)
    with Context(SPEC=1):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    after_render = [c for c in checked if c[1][-1] is Ops.SOURCE]
    after_compile = [c for c in checked if c[1][-1] is Ops.BINARY]
    assert len(after_render) == len(after_compile) == 2 and {s for s, _ in checked} == {"program"}
    checked.clear()
    out, _ = _fresh(11, 37)
    out.numpy()  # SPEC off: the program stages are not checked
    assert checked == []


def test_a_render_that_breaks_the_program_spec_is_caught_in_realize(monkeypatch: pytest.MonkeyPatch) -> None:
    good = next(s for s in pl.PIPELINE if s.name == "render")

    def broken(g: UOp, ctx: pl.Lowering) -> UOp:
        """Renders, then leaves a movement op in each program's kernel (a contract a device must not break)."""
        out = good.run(g, ctx)
        progs = out.src if out.op is Ops.SINK else (out,)
        x = UOp.const(1.0).reshape((1,)).expand((4,))
        bad = [UOp(Ops.PROGRAM, (UOp.sink(*p.src[0].src, x), *p.src[1:]), p.arg) for p in progs]
        return UOp.sink(*bad) if out.op is Ops.SINK else bad[0]

    monkeypatch.setattr(pl, "PIPELINE", tuple(pl.Stage(s.name, s.scope, s.rules, s.spec, broken, s.what)
                                              if s is good else s for s in pl.PIPELINE))
    out, _ = _fresh(7, 41)
    with Context(SPEC=1), pytest.raises(SpecViolation, match="program"):
        out.numpy()


def test_debug_5_prints_the_program_stages_in_realize(capsys: pytest.CaptureFixture[str]) -> None:
    out, want = _fresh(5, 43)
    with Context(DEBUG=5):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    err = capsys.readouterr().err
    assert "--- after render" in err and "--- after compile" in err
