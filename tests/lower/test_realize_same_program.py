"""lower.realize.compile_kernels renders and compiles a program once when two kernels' ASTs lower to the same
LINEAR (their index expressions differ only until the symbolic stage)."""

from __future__ import annotations

import importlib

import numpy as np

import lower.pipeline as pl
from rewrite import Ops, UOp
from rewrite.dtype import dtypes

realize_mod = importlib.import_module("lower.realize")  # `lower.realize` the attribute is the function


def _copy_kernel(n: int, m: int, spelled: int) -> UOp:
    """out[i, j] = 3 * x[i, j] over an n x m grid, the flat position written i*m + j, (i*1)*m + j or
    i*m + (j + 0): other ASTs, which the symbolic stage makes one program."""
    out, x = UOp.buffer(0, dtypes.float32, (n * m,)), UOp.buffer(1, dtypes.float32, (n * m,))
    i, j = UOp.range(n, 1), UOp.range(m, 2)
    pos = (i * m + j, (i * 1) * m + j, i * m + (j + 0))[spelled]
    return UOp.sink(out.index(pos).store(x.index(pos).load() * 3.0).end(j, i))


def test_kernels_of_one_linear_compile_once(monkeypatch) -> None:
    n, m = 7, 37  # a shape no other test uses: nothing of it is compiled yet
    a, b = _copy_kernel(n, m, 0), _copy_kernel(n, m, 1)
    assert a is not b
    programs: list[int] = []
    real = pl.program_stages

    def counted(program: UOp, ctx: pl.Lowering, upto: str | None = None) -> UOp:
        programs.append(len(program.src) if program.op is Ops.SINK else 1)
        return real(program, ctx, upto)

    monkeypatch.setattr(realize_mod, "program_stages", counted)
    ka, kb = realize_mod.compile_kernels([(a, "cpu", "copy_a", None), (b, "cpu", "copy_b", None)])
    assert programs == [1]  # one PROGRAM rendered and compiled for both
    assert ka is kb
    x = np.arange(n * m, dtype=np.float32)
    for k in (ka, kb):
        out = np.zeros(n * m, dtype=np.float32)
        k({0: out, 1: x})
        np.testing.assert_array_equal(out, 3 * x)
    # a later batch with a third spelling of the same program takes the compiled one too
    c = _copy_kernel(n, m, 2)
    assert c is not a and c is not b
    assert realize_mod.compile_kernels([(c, "cpu", "copy_c", None)])[0] is ka
    assert programs == [1]
    # a kernel of another program still compiles
    other = realize_mod.compile_kernels([(_copy_kernel(m, n, 0), "cpu", "copy_d", None)])[0]
    assert other is not ka and programs == [1, 1]


def test_lowering_memo_skips_the_later_stages(monkeypatch) -> None:
    """lower_kernel(memo=True), as lower.realize calls it: a kernel whose symbolic stage gives an AST lowered
    before gets that one's LINEAR, the one the whole pipeline makes for it, without the later stages."""
    from devices import target_for

    n, m = 5, 43  # a shape no other test uses
    a, b = _copy_kernel(n, m, 0), _copy_kernel(n, m, 1)
    target = target_for("cpu")
    runs: list[str] = []

    def noted(st: pl.Stage) -> pl.Stage:
        def run(graph: UOp, ctx: pl.Lowering) -> UOp:
            runs.append(st.name)
            return st.run(graph, ctx)

        return pl.Stage(st.name, st.scope, st.rules, st.spec, run, st.what)

    stages = tuple(noted(s) for s in pl.PIPELINE)
    monkeypatch.setattr(pl, "PIPELINE", stages)
    la = pl.lower_kernel(a, target, name="copy_a", memo=True)
    kernel_stages = [s.name for s in stages if s.scope == "kernel"]
    assert runs == kernel_stages
    lb = pl.lower_kernel(b, target, name="copy_b", memo=True)
    assert lb is la and runs == kernel_stages + kernel_stages[:1]  # only the first stage ran for b
    assert pl.lower_kernel(b, target, name="copy_b") is la  # what the whole pipeline makes of b
    assert runs[len(kernel_stages) + 1:] == kernel_stages
    # another knob is another key: NOOPT lowers b through every stage again
    from rewrite.env import Context

    with Context(NOOPT=1):
        del runs[:]
        pl.lower_kernel(b, target, name="copy_b", memo=True)
        assert runs == kernel_stages
