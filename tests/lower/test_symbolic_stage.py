"""The pipeline's symbolic stage: the fast rules, then the e-graph on what they leave (lower.pipeline.symbolic)."""

from __future__ import annotations

import rules  # noqa: F401  # registers UOp.simplify
from devices import target_for
from lower.pipeline import Lowering, symbolic
from lower.schedule import schedule
from rewrite.ops import Ops
from rewrite.uop import UOp
from tensor import Tensor


def _gated_load(ast: UOp) -> UOp:
    return next(u for u in ast.toposort() if u.op is Ops.LOAD and len(u.src) > 2)


def test_egraph_bounds_remove_a_gate() -> None:
    """A conv kernel's padding gate, and-ed with `(r + r*n) < 1` for a symbolic n bound to -1 (a shape variable
    fixed to one value): the fast rules leave variables alone and give r + r*n the interval [-r.vmax, r.vmax],
    so they keep the gate; the e-graph's interval of that sum is the best over its equivalent forms, among them
    the constant 0, so with the e-graph tier on the conjunct is True and the gate is the padding gate alone."""
    x, w = Tensor.empty(1, 4, 8, 8), Tensor.empty(4, 4, 3, 3)
    items, _ = schedule([x.conv2d(w, padding=1).uop])
    ast = next(it.ast for it in items if it.kind == "kernel" and it.ast is not None
               and any(u.op is Ops.LOAD and len(u.src) > 2 for u in it.ast.toposort()))
    gate = _gated_load(ast).src[2]
    r = next(u for u in gate.toposort() if u.op is Ops.RANGE)
    n = UOp.variable("n", -1, -1)
    extra = (r + r * n) < 1
    marked = ast.substitute({gate: gate & extra})
    target = target_for("python")
    plain = _gated_load(symbolic(ast, Lowering(target, egglog=False))).src[2]
    fast = _gated_load(symbolic(marked, Lowering(target, egglog=False))).src[2]
    full = _gated_load(symbolic(marked, Lowering(target, egglog=True))).src[2]
    assert n in fast.toposort(), f"the fast rules alone already removed the conjunct: {fast.render()}"
    assert n not in full.toposort(), f"the e-graph kept the conjunct: {full.render()}"
    assert full is plain, f"{full.render()} != {plain.render()}"


def test_egraph_bounds_remove_a_block_start_mask() -> None:
    """An elementwise kernel over 16 elements whose value is masked by `(r - r%4) < 13` (the start of each
    4-element block is below 13: always true). Term by term the fast rules give r - r%4 over r in [0, 15] the
    interval [-3, 15], so they keep the WHERE; the e-graph holds the equivalent (r//4)*4 with [0, 12], the class's
    interval is the tighter one, the comparison is the constant True, and the WHERE goes."""
    items, _ = schedule([(Tensor.empty(16) + 1).uop])
    ast = next(it.ast for it in items if it.kind == "kernel" and it.ast is not None)
    store = next(u for u in ast.toposort() if u.op is Ops.STORE)
    r = next(u for u in ast.toposort() if u.op is Ops.RANGE)
    value = store.src[1]
    mask = (r - r % 4) < 13
    masked = ast.substitute({value: mask.where(value, UOp.const(0.0, value.dtype))})
    target = target_for("python")
    fast = symbolic(masked, Lowering(target, egglog=False))
    full = symbolic(masked, Lowering(target, egglog=True))
    assert any(u.op is Ops.WHERE for u in fast.toposort()), "the fast rules alone already removed the mask"
    assert not any(u.op is Ops.WHERE for u in full.toposort()), f"the e-graph kept the mask: {full.render()}"
    assert full is symbolic(ast, Lowering(target, egglog=True))


def test_settled_kernel_is_given_back_without_a_walk(monkeypatch) -> None:
    """The stage on its own result (symbolic-late after an instruction selection that changed nothing) gives it
    back without rewriting it again, and that is what rewriting it again gives: checked by running the stage with
    the record of settled kernels forgotten. A kernel settled with EGGLOG=0 is not taken as settled for EGGLOG=1."""
    import lower.pipeline as pipeline

    x, w = Tensor.empty(2, 4, 8, 8), Tensor.empty(4, 4, 3, 3)
    items, _ = schedule([x.conv2d(w, padding=1).relu().uop])
    target = target_for("cpu")
    walks: list[str] = []
    real = pipeline.graph_rewrite

    def counting(*args, **kw):
        walks.append(kw.get("name", ""))
        return real(*args, **kw)

    monkeypatch.setattr(pipeline, "graph_rewrite", counting)
    settled = 0
    for it in items:
        if it.kind != "kernel" or it.ast is None:
            continue
        for egglog in (False, True):
            once = symbolic(it.ast, Lowering(target, egglog=egglog))
            n = len(walks)
            assert symbolic(once, Lowering(target, egglog=egglog)) is once
            if pipeline._SETTLED.get(once) is not None:
                assert len(walks) == n  # not walked again
                settled += 1
            pipeline._SETTLED.clear()
            assert symbolic(once, Lowering(target, egglog=egglog)) is once  # the full stage agrees
        pipeline._SETTLED.clear()
        off = symbolic(it.ast, Lowering(target, egglog=False))
        if pipeline._SETTLED.get(off) is False:
            n = len(walks)
            symbolic(off, Lowering(target, egglog=True))
            assert len(walks) > n  # settled without the e-graph is not settled with it
    assert walks and settled
