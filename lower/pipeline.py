"""The pipeline: `compile(graph, target)`, driven by the one ordered table `PIPELINE` (the spec's Lowering Pipeline).

Every row is a stage: its name, its scope, the rule set (or, for the few truly global steps, the function and why
it is one), the spec stage its output must satisfy, and the callable that runs it. `print_pipeline()` prints it.

  scope "graph"    runs once on the tensor graph (a SINK of the roots) and feeds the next graph stage; the last
                   graph stage, rangeify, splits it into kernels (ScheduleItems, each kernel a SINK over RANGEs)
  scope "kernel"   runs on each kernel's AST, from its SINK to its LINEAR program
  scope "program"  runs on a kernel's `PROGRAM(SINK, LINEAR)`: render adds `SOURCE(text)`, compile adds
                   `BINARY(bytes)`, so a compiled kernel is `PROGRAM(SINK, LINEAR, SOURCE, BINARY)` (seed 001);
                   on a SINK of PROGRAMs (lower.realize passes a schedule's new kernels of one device so) each one,
                   and compile compiles them as one batch (one compiler run per host core for all of them)

`compile()` and `lower.realize` run the same rows: realize's kernels go through `lower_kernel` and then
`program_stages`, so SPEC, DEBUG, VIZ and the spec checks attach to render and compile there too.

What runs a stage is uniform (`_run_stage`): the stage gets the graph and the typed `Lowering` context (target,
knobs, per-kernel overrides), and after it, in this order, `SPEC=1` checks the result against the row's spec
stage (rewrite.spec), `DEBUG>=5` prints the stage's output, and `upto=` may stop. Nothing reads the environment
below this module: `Lowering.from_env(target)` reads the knobs once, and everything else is an argument.

The scheduler's own bookkeeping (buffers for realized nodes, the memory plan) stays in lower.schedule and
lower.memory. The kernel split's decisions are named rules (lower.split): `realize_rules`, a RuleSet over the
whole graph, realizes what a node's own op settles (roots, CONTIGUOUS, COPY and its source, assignments, a
resizing BITCAST's source); the decisions that depend on the kernels around a node are the rules of
lower.split_build, applied as lower.schedule builds the kernels in rounds to a fixed point over the whole graph
(it only builds and carries the decisions out), and are recorded under their rule names beside the first ones
(`lower.schedule.split_decisions`).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from devices import get_device
from devices.base import Target
from rewrite import Ops, RuleSet, UOp, dtypes, graph_rewrite
from rewrite.env import getenv, lowering_knobs
from rewrite.viz import capture as viz_capture

# ------------------------------------------------------------------------------------------ the context


@dataclass(frozen=True)
class Lowering:
    """The typed context every stage gets: where the code runs and the knobs that change what it becomes."""

    target: Target
    noopt: bool = False
    beam: int = 0
    egglog: bool = True
    debug: int = 0
    spec: bool = False
    nolocals: bool = False  # GPU targets: no LOCAL axes (every output axis GLOBAL, one thread per block)
    warp_reduce: bool = True  # GPU targets: GROUP_REDUCEs fold each warp by SHUFFLEs (lower.gpu, WARP_REDUCE)
    opts: tuple | None = None  # OptOps that replace the heuristics' choice (a search tries candidates so)
    bufs: tuple[UOp, ...] | None = None  # the kernel's buffers, for BEAM to time candidates on
    name: str = "kernel"

    @staticmethod
    def from_env(target: Target, **overrides: Any) -> Lowering:
        """The context for `target` with the knobs as the environment (or a `Context`) sets them now."""
        ctx = Lowering(target, noopt=bool(int(getenv("NOOPT"))), beam=int(getenv("BEAM")),
                       egglog=bool(int(getenv("EGGLOG"))), debug=int(getenv("DEBUG")), spec=bool(int(getenv("SPEC"))),
                       nolocals=bool(int(getenv("NOLOCALS"))), warp_reduce=bool(int(getenv("WARP_REDUCE"))))
        return replace(ctx, **overrides) if overrides else ctx

    @property
    def device(self) -> Any:
        return get_device(self.target.device)


@dataclass(frozen=True)
class Stage:
    """One row of the pipeline."""

    name: str
    scope: str  # "graph", "kernel" or "program"
    rules: str  # the rule set it applies, or "function: <why it is global>"
    spec: str  # the rewrite.spec stage its output satisfies ("" for none the checker knows)
    run: Callable[[UOp, Lowering], UOp]
    what: str


# ------------------------------------------------------------------------------------------ kernel stages

_SATURATE_OPS = frozenset({Ops.IDIV, Ops.MOD, Ops.CMPLT, Ops.CMPNE})


def _index_exprs(ast: UOp) -> list[UOp]:
    """The kernel's index expressions (addresses, load gates and WHERE conditions) that still hold a div, mod or
    comparison."""
    out: dict[UOp, None] = {}
    # node -> it or a node below it is a div, mod or comparison: entered for the scalar index and bool expressions
    # only (each node once), not for the whole kernel
    holds: dict[UOp, bool] = {}
    index, boolean = dtypes.index, dtypes.bool
    from lower.strides import _topo  # the walk the optimize stage's analyses start from (memoized per AST)

    for u in _topo(ast):
        op = u.op
        cands = (u.src[1],) if op is Ops.INDEX and len(u.src) == 2 else u.src[2:] if op is Ops.LOAD else \
            u.src[:1] if op is Ops.WHERE else ()
        for e in cands:
            if e in out or e.shape != () or (e.dtype is not index and e.dtype is not boolean):
                continue
            if e not in holds:
                for n in UOp.toposort_of((e,), holds.__contains__):
                    holds[n] = n.op in _SATURATE_OPS or any(holds[s] for s in n.src)
            if holds[e]:
                out[e] = None
    return list(out)


# kernels the symbolic stage gave back unchanged from its e-graph step, with the EGGLOG setting it ran under: the
# stage on one of them again (symbolic-late after an instruction selection that changed nothing) would find the
# same fixed point of the fast rules and the same index expressions, none of which a fast-tier rule can change,
# so it gives the kernel back without walking it (rewrite.engine: every node of a rewrite's result is one on which
# no rule fired; the rules read only the node)
_SETTLED: weakref.WeakKeyDictionary[UOp, bool] = weakref.WeakKeyDictionary()


def symbolic(ast: UOp, ctx: Lowering) -> UOp:
    """Fast rules on the whole kernel; then the index expressions they leave with div, mod or comparisons that
    the e-graph may still shrink (rules.worth_saturating) and that a fast-tier rule can change at all
    (rules.eqsat.fast_tier_can_change) go into one e-graph (rules.eqsat, cached by structure; EGGLOG=0 skips it),
    and the fast rules run again."""
    if _SETTLED.get(ast) in (ctx.egglog, True):
        return ast
    from rules import worth_saturating
    from rules.symbolic import FIXED_POINTS
    from rules.symbolic import symbolic as symbolic_rules

    ast = graph_rewrite(ast, symbolic_rules, name="symbolic", fixed_points=FIXED_POINTS)
    exprs = [e for e in _index_exprs(ast) if worth_saturating(e)] if ctx.egglog else []
    if exprs:
        from rules.eqsat import fast_tier_can_change

        exprs = [e for e in exprs if fast_tier_can_change(e)]  # what saturate_fast_batch would leave as it is
    if not exprs:
        _SETTLED[ast] = ctx.egglog
        return ast
    from rules.eqsat import saturate_fast_batch

    better = {e: r for e, r in zip(exprs, saturate_fast_batch(exprs), strict=True) if r is not e}
    return graph_rewrite(ast.substitute(better), symbolic_rules, name="symbolic", fixed_points=FIXED_POINTS) \
        if better else ast


def symbolic_lanes(ast: UOp, ctx: Lowering) -> UOp:
    """`symbolic` on an expanded kernel, then lower.expand.lane_addresses: an address it made a scalar under a
    vector gate or value gets its lanes back."""
    from lower.expand import lane_addresses, lost_lanes

    ast = symbolic(ast, ctx)
    return graph_rewrite(ast, lane_addresses, name="lane-addresses") if lost_lanes(ast) else ast


def symbolic_kernel(ast: UOp, ctx: Lowering) -> UOp:
    """The first symbolic stage: `symbolic`, then loops a reshape merged split back where the index math takes
    them apart (lower.unflatten: a range read as r // c and r % c becomes two), simplified again."""
    from lower.unflatten import unflatten

    ast = symbolic(ast, ctx)
    split = unflatten(ast, lambda a: symbolic(a, ctx))
    return ast if split is None else split


def optimize(ast: UOp, ctx: Lowering) -> UOp:
    """Choose OptOps (ctx.opts if given; else none under NOOPT or on an interpreted target; BEAM=n search; else
    the hand-coded heuristics for the target), apply them, and lower THREAD axes to core_id SPECIALs (on a GPU
    target, with warps: scatter-adds made ATOMICADD first, the GPU heuristics of lower.gpu, and
    GLOBAL/LOCAL/GROUP_REDUCE axes to the grid)."""
    from lower.optimize import apply_opts, hand_coded, lower_threads

    if ctx.target.warp_size:  # a scatter-add's serial index loop becomes parallel threads (lower.atomics)
        from lower.atomics import atomic_scatter

        ast = atomic_scatter(ast)
    opts: list | None = list(ctx.opts) if ctx.opts is not None else None
    if opts is None:
        if ctx.noopt or ctx.target.interpreted:
            opts = []
        elif ctx.beam > 0 and ctx.bufs is not None:
            from lower.search import beam_search

            opts = beam_search(ast, ctx.bufs, ctx.target, ctx.beam, name=ctx.name)
        elif ctx.target.warp_size:
            from lower.gpu import gpu_opts

            opts = gpu_opts(ast, ctx.target, nolocals=ctx.nolocals)
        else:
            opts = hand_coded(ast, ctx.target)
    if ctx.debug >= 3 and opts:
        print(f"opts {ctx.name}: {opts}", file=sys.stderr)
    if (rec := viz_capture.ACTIVE) is not None:
        rec.note(ctx.name, opts=[str(o) for o in opts])
    if ctx.target.warp_size:
        from lower.gpu import apply_gpu_opts

        return apply_gpu_opts(ast, opts, ctx.target, warp_reduce=ctx.warp_reduce)
    ast = lower_threads(apply_opts(ast, opts))
    if ctx.noopt or ctx.target.interpreted:
        return ast
    from lower.interior import split_interior  # the gated loops' interiors without their checks

    return split_interior(ast)


def expand(ast: UOp, ctx: Lowering) -> UOp:
    from lower.expand import expand as expand_lanes

    return expand_lanes(ast, ctx.target)


def _decompositions(ctx: Lowering) -> RuleSet:
    from rules.decompositions import decompositions_for

    device = ctx.device
    return decompositions_for(device.supported_ops - getattr(device, "decompose", frozenset()), fuses_mulacc(ctx))


def instruction_selection(ast: UOp, ctx: Lowering) -> UOp:
    rules = _decompositions(ctx)
    return graph_rewrite(ast, rules, name="instruction-selection") if len(rules) else ast


def stream_stores(ast: UOp, ctx: Lowering) -> UOp:
    from rules.streaming import context, streaming_stores

    if ctx.noopt or (sctx := context(ast, ctx.target.stream_bytes)) is None:
        return ast
    return graph_rewrite(ast, streaming_stores, sctx, name="stream-stores")


def fuses_mulacc(ctx: Lowering) -> bool:
    """Whether reductions of products accumulate with a fused MULACC: an optimization (one rounding per step
    instead of two changes the result's last bits), so on when optimizing, the device has MULACC, and the target
    computes it in one step: it has fused multiply-add instructions, or it is an interpreter (which computes the
    fused result exactly at no extra cost). Without FMA instructions (x86-64-v2) a fused float multiply-add has
    no instruction and becomes a libm fma call per lane, about 50x slower than a multiply and an add (matmul 1024
    on x86-64-v2: 12 s fused, 0.25 s not)."""
    device = ctx.device
    return not ctx.noopt and (ctx.target.fma or ctx.target.interpreted) and Ops.MULACC in device.supported_ops and \
        Ops.MULACC not in getattr(device, "decompose", frozenset())


def linearize(ast: UOp, ctx: Lowering) -> UOp:
    from lower.linearize import linearize as to_linear

    return to_linear(ast, fuses_mulacc(ctx))


# ------------------------------------------------------------------------------------------ program stages


def _name(program: UOp, ctx: Lowering) -> str:
    return program.arg if isinstance(program.arg, str) else ctx.name


def render(program: UOp, ctx: Lowering) -> UOp:
    """PROGRAM(SINK, LINEAR) gains SOURCE: the device's text for the kernel (a whole compilable file). A SINK of
    PROGRAMs (a batch, as realize makes) becomes the SINK of each one rendered."""
    if program.op is Ops.SINK:
        return UOp.sink(*(render(p, ctx) for p in program.src))
    name = _name(program, ctx)
    text = ctx.device.render(program.src[1], name, ctx.target)
    if ctx.debug >= 4:
        print(text, file=sys.stderr)
    return UOp(Ops.PROGRAM, (*program.src[:2], UOp(Ops.SOURCE, (), text)), program.arg)


def compile_program(program: UOp, ctx: Lowering) -> UOp:
    """PROGRAM(SINK, LINEAR, SOURCE) gains BINARY: what the device made of it (a shared object's bytes on cpu;
    empty for an interpreter, which runs the LINEAR). The loaded kernel is kept by `loaded(program)`.

    A SINK of PROGRAMs is compiled as one batch when the device can (`compile_batch`: one compiler run per host
    core for the lot instead of one per kernel) and becomes the SINK of the compiled PROGRAMs, in order."""
    progs = program.src if program.op is Ops.SINK else (program,)
    device = ctx.device
    wanted = [(p.src[1], _name(p, ctx)) for p in progs]
    batch = getattr(device, "compile_batch", None)
    if batch is not None and len(wanted) > 1:
        kernels = batch(wanted, ctx.target)
    else:
        kernels = [device.compile(linear, name, ctx.target) for linear, name in wanted]
    blobs: dict[str, bytes] = {}  # kernels of one batch share their shared object: read it once
    out = []
    for p, kernel in zip(progs, kernels, strict=True):
        path = getattr(kernel, "path", None)
        if path is None or (blob := blobs.get(path)) is None:
            blob = kernel.binary() if hasattr(kernel, "binary") else b""
            if path is not None:
                blobs[path] = blob
        done = UOp(Ops.PROGRAM, (*p.src[:3], UOp(Ops.BINARY, (), blob)), p.arg)
        _loaded[done] = kernel
        out.append(done)
    return UOp.sink(*out) if program.op is Ops.SINK else out[0]


# a compiled PROGRAM's loaded kernel, for as long as someone holds the PROGRAM (realize keeps the kernels in its
# own cache; a PROGRAM from compile() is the caller's)
_loaded: weakref.WeakKeyDictionary[UOp, Any] = weakref.WeakKeyDictionary()


def loaded(program: UOp) -> Any:
    """The callable kernel of a compiled PROGRAM (compiled in this process)."""
    return _loaded[program]


# ------------------------------------------------------------------------------------------ graph stages


def _roots(graph: UOp) -> list[UOp]:
    return list(graph.src) if graph.op is Ops.SINK else [graph]


def callify(graph: UOp, ctx: Lowering) -> UOp:
    from lower.callify import callify as inline

    return UOp.sink(*inline(_roots(graph)))


def multi(graph: UOp, ctx: Lowering) -> UOp:
    """Nodes on device tuples become per-device pieces (lower.multi); a root on a tuple becomes a TUPLE of them."""
    from lower.multi import multi_expand

    return multi_expand(graph)


def split_reduce(graph: UOp, ctx: Lowering) -> UOp:
    from lower.split_reduce import split_reductions

    return graph if ctx.noopt else UOp.sink(*split_reductions(_roots(graph)))


def rangeify(graph: UOp, ctx: Lowering) -> UOp:
    """The kernel split: the schedule's kernels as a SINK of their ASTs (lower.schedule keeps the buffers)."""
    from lower.multi import flat_roots
    from lower.schedule import schedule_split

    items, _ = schedule_split(flat_roots(_roots(graph)))
    return UOp.sink(*(it.ast for it in items if it.kind == "kernel" and it.ast is not None))


# ------------------------------------------------------------------------------------------ the table

# fmt: off
PIPELINE: tuple[Stage, ...] = (
    Stage("callify", "graph", "lower.callify.callify_rules", "tensor", callify,
          "FUNCTION calls inlined: one graph of BUFFER leaves"),
    Stage("multi", "graph", "lower.multi.multi_rules (the pieces kept in a MultiContext)", "tensor", multi,
          "nodes on device tuples become per-device pieces joined by COPYs"),
    Stage("split-reduce", "graph", "function: picks which reductions to split by their sizes", "tensor",
          split_reduce, "large reductions with small outputs become two kernels"),
    Stage("rangeify", "graph", "lower.split.realize_rules (what a node's op settles; the typed SplitContext "
          "carries the graph's order, computed once) + lower.split_build.build_rules (what depends on the "
          "kernel around a node: limits, realize points, store values) + lower.split_build.shared_rules "
          "(values several kernels compute, a byte rule over the whole graph), run with the kernel builds "
          "(lower.rangeify) in rounds to a fixed point over the whole graph + lower.split_build.cycle_rules "
          "(cycles of assignments, over the whole graph)",
          "kernel", rangeify, "kernel split; movement ops become index math over RANGEs"),
    Stage("symbolic", "kernel", "rules.symbolic + rules.eqsat (e-graph, batched per kernel); then function "
          "lower.unflatten (a global range substitution)", "kernel", symbolic_kernel,
          "index arithmetic simplified; a loop a reshape merged, read as r // c and r % c, split back in two"),
    Stage("optimize", "kernel", "function: OptOps chosen by heuristics or BEAM search over the kernel's ranges",
          "kernel", optimize, "split/swap/pad ranges into THREAD/UPCAST/UNROLL axes; THREAD -> core_id; a loop "
          "whose reduction reads through gates split into border and gate-free interior parts (lower.interior)"),
    Stage("expand", "kernel", "function: one lane space per kernel (UPCAST/UNROLL ranges)", "", expand,
          "UPCAST/UNROLL ranges become vector lanes (beyond one register: copies)"),
    Stage("symbolic-opt", "kernel", "rules.symbolic + lower.expand.lane_addresses", "", symbolic_lanes,
          "the index math the opts made, simplified"),
    Stage("instruction-selection", "kernel", "rules.decompositions (by the target's supported ops)", "",
          instruction_selection, "ops the device lacks become ops it has"),
    Stage("symbolic-late", "kernel", "rules.symbolic + lower.expand.lane_addresses", "", symbolic_lanes,
          "what the decompositions made, simplified"),
    Stage("stream-stores", "kernel", "rules.streaming (by the target's stream_bytes)", "", stream_stores,
          "a map kernel's big output written around the caches (STORE arg stream)"),
    Stage("linearize", "kernel", "function: a global order (accumulators, loop placement)", "linear", linearize,
          "the LINEAR program"),
    Stage("render", "program", "the device's renderer rule set", "program", render,
          "PROGRAM gains SOURCE (a SINK of PROGRAMs: each one)"),
    Stage("compile", "program", "function: the device's compiler; a SINK of PROGRAMs is one batch (one compiler run "
          "per core for all of them)", "program", compile_program, "PROGRAM gains BINARY"),
)
# fmt: on
STAGE_NAMES = tuple(s.name for s in PIPELINE)
# the memory plan runs on the schedule (lower.memory.plan), not on a UOp: it is listed for the printout
MEMORY_PLAN = "memory-plan: lower.memory.plan (intermediate buffers share storage by lifetime)"


def print_pipeline(file: Any = None) -> None:
    """The table, one stage a line."""
    out = file or sys.stdout
    for i, s in enumerate(PIPELINE):
        print(f"{i:2d} {s.name:22s} {s.scope:8s} {s.what}\n   {'':22s} {'':8s} [{s.rules}]", file=out)
        if s.name == "linearize":
            print(f"   {MEMORY_PLAN}", file=out)


def _stages(scope: str) -> tuple[Stage, ...]:
    return tuple(s for s in PIPELINE if s.scope == scope)


def _run_stage(st: Stage, graph: UOp, ctx: Lowering) -> UOp:
    if (rec := viz_capture.ACTIVE) is not None:
        begun = rec.stage_begin()
        out = st.run(graph, ctx)
        rec.stage_end(begun, st.name, st.scope, "" if st.scope == "graph" else ctx.name, graph, out)
    else:
        out = st.run(graph, ctx)
    if ctx.spec and st.spec:
        from rewrite.spec import check

        # the kernel split's output is a SINK of kernels, each with its own slots and range ids, and a batch of
        # programs a SINK of PROGRAMs: each checked apart
        apart = (st.scope == "graph" and st.spec != "tensor") or (st.scope == "program" and out.op is Ops.SINK)
        for part in (out.src if apart else (out,)):
            check(part, st.spec)
    if ctx.debug >= 5:
        print(f"--- after {st.name} ({ctx.name})\n{out}", file=sys.stderr)
    return out


def _check_upto(upto: str | None) -> None:
    if upto is not None and upto not in STAGE_NAMES:
        from rewrite.errors import CompilerError

        raise CompilerError(f"upto={upto!r} is not a stage; the stages are {', '.join(STAGE_NAMES)}")


def lower_kernel(ast: UOp, target: Target | Any, upto: str | None = None, opts: list | None = None,
                 bufs: tuple | None = None, name: str = "kernel", memo: bool = False) -> UOp:
    """The kernel stages on `ast` for `target` (a Target, or a device whose default target is meant), stopping
    after `upto` if given; returns the LINEAR. `opts` replaces the heuristics' choice of OptOps; `bufs` (the
    kernel's buffers) lets BEAM=n time candidates. `memo` (lower.realize): a kernel whose first stage gives an AST
    that this process lowered before under the same knobs gets that one's LINEAR without the later stages."""
    _check_upto(upto)
    ctx = Lowering.from_env(as_target(target), opts=None if opts is None else tuple(opts), bufs=bufs, name=name)
    # the stages after the first are a function of its result and the knobs (not of the kernel's name or, without
    # BEAM, its buffers): a kernel whose symbolic stage gives an AST lowered before has that one's LINEAR. Two
    # ASTs that differ only in how an index's terms are grouped (one buffer read through two chains of views,
    # `(a * b + c) * d + e` against `a * b * d + c * d + e`) meet there: 3 of the transformer's 84 kernels
    memo = memo and upto is None and not ctx.beam and not ctx.spec and ctx.debug < 3 and viz_capture.ACTIVE is None
    key: tuple | None = None
    stages = _stages("kernel")
    for i, st in enumerate(stages):
        ast = _run_stage(st, ast, ctx)
        if st.name == upto:
            break
        if i == 0 and memo:
            # the knobs too: those the context does not carry (WGMMA, TMA) still change the later stages
            key = (ast, replace(ctx, bufs=None, name=""), stages, lowering_knobs())
            if (done := _LOWERED.get(key)) is not None:
                return done
    if key is not None:
        if len(_LOWERED) >= LOWERED_KEPT:
            del _LOWERED[next(iter(_LOWERED))]
        _LOWERED[key] = ast
    return ast


# (the kernel's AST after the first kernel stage, its context without name and buffers, the stages) -> its LINEAR:
# lower_kernel(memo=True)
_LOWERED: dict[tuple, UOp] = {}
LOWERED_KEPT = 4096  # the oldest entry goes first past this many


def compile_kernel(ast: UOp, target: Target | Any, upto: str | None = None, opts: list | None = None,
                   name: str = "kernel") -> UOp:
    """One kernel through the kernel and program stages: `PROGRAM(SINK, LINEAR, SOURCE, BINARY)` (or the graph
    after `upto`)."""
    _check_upto(upto)
    ctx = Lowering.from_env(as_target(target), opts=None if opts is None else tuple(opts), name=name)
    if upto is not None and upto in (s.name for s in _stages("kernel")):
        return lower_kernel(ast, ctx.target, upto, opts, None, name)
    program = UOp(Ops.PROGRAM, (ast, lower_kernel(ast, ctx.target, None, opts, None, name)), name)
    return program_stages(program, ctx, upto)


def program_stages(program: UOp, ctx: Lowering, upto: str | None = None) -> UOp:
    """The program stages (render, compile) on `program`, a `PROGRAM(SINK, LINEAR)` named by its arg, or a SINK of
    them (a batch: compiled together, lower.realize), stopping after `upto` if it names one of them."""
    for st in _stages("program"):
        program = _run_stage(st, program, ctx)
        if st.name == upto:
            break
    return program


def compile(graph: UOp, target: Target | Any, upto: str | None = None) -> UOp:
    """The tensor graph `graph` (a SINK of roots, or one root) for `target`, through the whole table: a SINK of
    one PROGRAM per kernel in schedule order (or the graph after `upto`: a graph stage's SINK, or a SINK of each
    kernel's AST after a kernel stage)."""
    from lower.schedule import kernel_name

    _check_upto(upto)
    ctx = Lowering.from_env(as_target(target))
    graph = graph if graph.op is Ops.SINK else UOp.sink(graph)
    for st in _stages("graph"):
        graph = _run_stage(st, graph, ctx)
        if st.name == upto:
            return graph
    kernels = list(graph.src)
    if upto is not None and upto in (s.name for s in _stages("kernel")):
        return UOp.sink(*(lower_kernel(k, ctx.target, upto, name=kernel_name(k)) for k in kernels))
    return UOp.sink(*(compile_kernel(k, ctx.target, upto, name=kernel_name(k)) for k in kernels))


def as_target(where: Target | Any) -> Target:
    """A Target as given, or a device object's (or device name's) default target."""
    if isinstance(where, Target):
        return where
    if isinstance(where, str):
        return get_device(where).default_target()
    return where.default_target()


__all__ = ["PIPELINE", "STAGE_NAMES", "Lowering", "Stage", "as_target", "compile", "compile_kernel",
           "fuses_mulacc", "loaded", "lower_kernel", "print_pipeline", "program_stages"]
