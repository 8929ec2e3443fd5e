"""Suite `symbolic`: how fast index expressions simplify, fast rules alone and with e-graph saturation, and
how small they get, against tinygrad 0.14's symbolic rules on the same expressions.

Workloads (every batch is simplified as one unit, the way a kernel stage rewrites a kernel's AST):
  * real kernels: gemm 64x64x64, conv2d (1,8,16,16) * (8,8,3,3) with padding 1, a sum over the last axis of a
    reshaped and permuted (4,8,16) tensor, and a 64x64 softmax are scheduled (lower.schedule) and the
    expressions of each kernel's AST are collected BEFORE the symbolic stage: the index operand of every
    INDEX, the gate of every gated LOAD and the condition of every WHERE over index math. Constants and bare
    ranges are left out (no simplifier has work there). `<kernel> kN` is that set as it is (N = 2..4);
  * `<kernel> x50`: the issue's kernel-sized batch of 50. A kernel has only a few index expressions, so the
    same expressions are padded out as upcast/unroll lanes would produce them: one to three of the kernel's
    ranges are split, r -> r'*f + k (f = 4 or 2, innermost loop and reduce ranges first), and the
    expressions are taken for successive lanes k until 50 distinct ones exist;
  * `random x50`: 50 seeded random expressions shaped like the symbolic fuzzer's (1-3 bounded variables with
    negative lows too; + * // % max where < != and, with (x*c+y)//c and (x*c+y)%c shapes).

Figures: time per batch and per expression for (1) the fast rules alone (rules.symbolic.simplify_fast);
(2) the full simplifier (fast rules, then one egglog e-graph for the batch's results that the e-graph may still
shrink, then the fast rules again: rules.simplify's order, batched as rules.eqsat.saturate_batch allows), warm
in this process with the in-memory result cache filled (`cached`) or emptied before each run (`uncached`), and
cold: a fresh Python process with CACHE=0 (an empty disk cache) that imports the
simplifier (`rules`; the e-graph tier rules.eqsat and egglog are imported by the first batch that needs them)
and simplifies the batch once (import + first batch, and the first batch alone), the same with an on-disk
cache filled by an earlier process, and where a cold first batch's time goes (the fast rules' first pass,
egglog's load); the random batch gets the cold rows too, since it is the one that needs egglog. The full
simplifier saturates only the results `rules.worth_saturating` lets through; (3) tinygrad's `symbolic` matcher
(what its UOp.simplify() runs) on the same expressions translated node for node (variables by name and
bounds, RANGEs as RANGEs of the same size). Per-expression figures call each simplifier once per
expression (the full one through UOp.simplify: one egglog call per expression that needs one). Node
counts are unique nodes per expression (variables and ranges are leaves), summed over the batch. Every
result is checked against the original expression at random points of its variables (untimed). Nothing
is written to the user's cache: in-process runs use CACHE=0 (the memory cache still works), the
disk-cache rows use a temporary CACHEDIR.

E-graph ON (issue 14): per batch, saturation forced on every expression of the fast result (not only what
rules.worth_saturating lets through), warm (the persistent e-graph already holds the batch: a repeated layer)
and fresh (an e-graph holding the rules alone); per expression, one e-graph call for each random fast result
that worth_saturating lets through and a fast-tier rule matches (rules.eqsat.fast_tier_can_change: what the full
simplifier sends to egglog), from a fresh e-graph. Both with the fast-tier program (rules.eqsat.fast_tier_program),
which the full simplifier saturates with; in the budget lines next to the full simplifier.

Families (issue 14): benchmarks/symbolic_family_cases.py's table, one line per family: node counts after our fast rules,
our full simplifier and tinygrad's, how many cases ours is larger or smaller, wrong results.

`--quick` times only the softmax kernel's batches and the random batch (QUICK_BATCHES), with fewer runs.

Budget (the issue): a kernel's index batch simplified in at most 5 ms median once warm, 50 ms cold.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.runner import Bench, LoadMeter, Result, Timed, fmt_value, suite
from benchmarks.symbolic_cold import cold_parts, run_cold
from benchmarks.symbolic_families import family_lines
from benchmarks.symbolic_simplifiers import (
    check_equal,
    clear_fixed_points,
    clear_memory_cache,
    fast_batch,
    fast_each,
    forget_egraph,
    full_batch,
    full_each,
    no_disk_cache,
    saturate_all,
    saturate_each,
    total_nodes,
)
from benchmarks.symbolic_tinygrad import Untranslatable, tinygrad_batch, tinygrad_each, tinygrad_version, to_tinygrad
from benchmarks.symbolic_workloads import Workload, build_workloads, kernel_graphs, random_batch

WARM_BUDGET_MS, COLD_BUDGET_MS = 5.0, 50.0
NEEDY_BUDGET_MS = 2.0  # per random expression that reaches the e-graph (issue 14)
QUICK_BATCHES = ("softmax", "random")  # the batches --quick times (workload names start with these)


# ---------------------------------------------------------------------------------------------- the suite


@suite("symbolic")
def symbolic(b: Bench) -> None:
    q = b.quick
    fast_runs, slow_runs, cold_runs = (7, 3, 3) if q else (21, 5, 5)
    load0 = os.getloadavg()
    b.say("building workloads")
    batches, pools = build_workloads(range(1000, 1080) if q else range(1000, 1240))
    if q:  # --quick: one kernel's batches (as they are, and padded to 50) and the random batch
        batches = [w for w in batches if w.name.split()[0] in QUICK_BATCHES]
    peer = tinygrad_version()
    if peer is None:
        b.note("tinygrad is not installed: no peer figures (pip install tinygrad==0.14.0)")
    import rules  # noqa: F401
    from lower.schedule import schedule
    from rules.eqsat import saturator

    # warm up both sides (matcher compilation, egglog import and rule loading) outside any timed run
    warm = random_batch(seed=99, n=10)
    with no_disk_cache():
        full_batch(warm)
        full_each(warm)
    tg: dict[str, tuple[list[Any], dict[Any, Any]]] = {}
    if peer is not None:
        tinygrad_each(to_tinygrad(warm)[0])
        for w in batches + pools:
            try:
                tg[w.name] = to_tinygrad(w.exprs)
            except Untranslatable as e:
                b.note(f"{w.name}: not translatable to tinygrad ({e})")

    budget_lines: list[str] = []
    cold: dict[str, list[tuple[str, Result]]] = {}
    parts: dict[str, str] = {}
    sched: list[Result] = []
    graphs: dict[str, Any] = {}
    family: list[str] = []
    # the padded kernel batches, and the random batch: it needs the e-graph, so its cold figures show what
    # loading egglog costs (empty disk cache) and what the disk cache spares (filled by an earlier process)
    cold_batches = [w for w in batches if w.padded or not w.kernel]

    def cold_rows(w: Workload) -> None:
        first, total = run_cold(b, f"{w.name}/full cold CACHE=0", w.exprs, {"CACHE": "0"}, cold_runs)
        cold[w.name] = [("cold import+first, empty cache", total), ("cold first batch", first)]
        if not q or not w.kernel:
            _, disk = run_cold(b, f"{w.name}/full cold disk-cached", w.exprs, {"CACHE": "1"}, cold_runs, prime=True)
            cold[w.name].append(("cold import+first, disk cache filled", disk))
        if not q:
            parts[w.name] = cold_parts(b, w.name, w.exprs, cold_runs)

    def schedule_rows() -> None:
        # the workloads are what rangeify emits, so how long it takes to emit them is part of the picture
        graphs.update(kernel_graphs())
        sched.extend(b.measure_together([Timed(f"{name} schedule (rangeify)", lambda _, g=g: schedule([g]), 1,
                                                "ms/graph", setup=clear_fixed_points, runs=fast_runs, per_item=1e3)
                                          for name, g in graphs.items()]))

    steps: list[tuple[str, Callable[[], object]]] = \
        [(f"warm {w.name}", lambda w=w: _batch_figures(b, w, tg.get(w.name), fast_runs, saturator)) for w in batches]
    steps += [(f"per-expr {w.name}", lambda w=w: _pool_figures(b, w, tg.get(w.name), fast_runs, slow_runs))
              for w in pools]
    steps.append(("schedule", schedule_rows))
    steps += [(f"cold {w.name}", lambda w=w: cold_rows(w)) for w in cold_batches]
    steps.append(("families", lambda: family.extend(family_lines(peer is not None))))
    # most rows last under the 50 ms LoadMeter needs for a reading of its own: one reading over them all
    meter = LoadMeter()
    fgn_warm: float | None = None
    with no_disk_cache():
        for label, step in b.cases(steps, lambda st: st[0]):
            step()
            if label == "schedule":
                fgn_warm = meter.foreign()

    b.note("kN: a kernel's own index expressions and gates before the symbolic stage; xN: the same kernel's "
           "padded to ~50 with upcast/unroll lanes; random: seeded generator; per-expr: one call per expression "
           "over all xN expressions / the random batch. Node counts: unique nodes per expression, summed")
    for w in batches:
        s = w.stats
        line = (f"{w.name:<12} nodes {s['in']:>5} -> fast {s['fast']:>4}, full {s['full']:>4}"
                + (f", tinygrad {s['tg']:>4} (its input {s['tg_in']})" if "tg" in s else "")
                + f"; egglog: {s['sat'] or 'not needed (rules.worth_saturating: nothing it could shrink)'}"
                + f"; wrong results: {s['bad']}")
        b.note(line)
    for ln in family:
        b.note(ln)
    for w in pools:
        s = w.stats
        b.note(f"{w.name:<12} nodes {s['in']:>5} -> fast {s['fast']:>4}, full {s['full']:>4}"
               + (f", tinygrad {s['tg']:>4}" if "tg" in s else ""))
    budget_lines.append(f"budget: a kernel batch in <= {WARM_BUDGET_MS:g} ms median warm, <= {COLD_BUDGET_MS:g} ms"
                        " cold, for the full simplifier (fast rules alone for reference); each figure as wall/cpu"
                        " median ms with a verdict for each (cpu is what to believe when fgn is high)")
    for w in batches:
        rows = [("fast", w.stats["r_fast"], WARM_BUDGET_MS), ("warm cached", w.stats["r_cached"], WARM_BUDGET_MS),
                ("warm uncached", w.stats["r_uncached"], WARM_BUDGET_MS),
                ("e-graph ON all, warm", w.stats["r_sat_warm"], WARM_BUDGET_MS),
                ("e-graph ON all, fresh", w.stats["r_sat_fresh"], WARM_BUDGET_MS)]
        rows += [(label, r, COLD_BUDGET_MS) for label, r in cold.get(w.name, [])]
        budget_lines.append(f"  {w.name:<12} " + "; ".join(_budget(label, r, lim) for label, r, lim in rows)
                            + ("" if w.kernel else " (not a kernel batch: outside the budget)"))
    for w in pools:
        if "r_needy" in w.stats:
            r = w.stats["r_needy"]
            budget_lines.append(f"  {w.name}: the e-graph per expression that reaches it (<= {NEEDY_BUDGET_MS:g} ms): "
                                + _budget("fresh e-graph, one call each", r, NEEDY_BUDGET_MS * 1e3))
    budget_lines += [f"  cold parts {name}: {text}" for name, text in parts.items()]
    budget_lines.append("  schedule (callify, rangeify: the kernels' ASTs, the workloads' source) per graph: "
                        + ", ".join(f"{n} {fmt_value(r.median)} ms" for n, r in zip(graphs, sched, strict=True)))
    for ln in budget_lines:
        b.note(ln)
    load1 = os.getloadavg()
    if fgn_warm is not None:
        b.note(f"foreign load over all in-process rows: {fgn_warm:.2f} vCPUs (rows under 50 ms show fgn '-')")
    b.note(f"load average (1/5/15 min) at start {load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f}, at end "
           f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f}; {os.cpu_count()} CPUs; fgn = other processes' load")
    from importlib import metadata

    b.note(f"egglog {metadata.version('egglog')}, Python {sys.version.split()[0]}"
           + (f", tinygrad {peer} (its `symbolic` matcher, what UOp.simplify() runs)" if peer else ""))


def _verdict(ms: float, budget: float) -> str:
    return "PASS" if ms <= budget else "FAIL"


def _budget(label: str, r: Result, limit: float) -> str:
    cpu = r.cpu_median
    egg = " (egglog imported)" if r.info.get("egglog_imported") else ""
    if cpu is None:
        return f"{label}{egg} {fmt_value(r.median)} {_verdict(r.median, limit)}"
    return f"{label}{egg} {fmt_value(r.median)}/{fmt_value(cpu)} {_verdict(r.median, limit)}/{_verdict(cpu, limit)}"


def _per_batch(name: str, fn: Callable[[object], object], runs: int,
               setup: Callable[[], object] | None = None) -> Timed:
    return Timed(name, fn, 1, "ms/batch", setup=setup, runs=runs, per_item=1e3)


def _per_expr(name: str, fn: Callable[[object], object], n: int, runs: int,
              setup: Callable[[], object] | None = None) -> Timed:
    return Timed(name, fn, n, "us/expr", setup=setup, runs=runs, per_item=1e6)


def _batch_figures(b: Bench, w: Workload, tg: tuple[list[Any], dict[Any, Any]] | None, runs: int,
                   saturator: Callable[..., Any]) -> None:
    exprs = w.exprs
    clear_memory_cache()
    sat = saturator(fast_tier=True)  # the fast-tier program: what the full simplifier saturates with
    before = sat.last
    full_out = full_batch(exprs)  # fills the memory cache for the cached rows, and gives the e-graph's stats
    st = sat.last if sat.last is not before else None  # None: no e-graph was needed
    # timed in turns, so a change in the machine's load falls on all four alike; the uncached runs refill the
    # memory cache, so the cached runs that follow them in the next turn still find it full
    # every run of the fast rules rewrites (their fixed points, kept across calls, are cleared before it); "cached"
    # is the e-graph's memory cache
    jobs = [_per_batch(f"{w.name}/fast", lambda _: fast_batch(exprs), runs, clear_fixed_points),
            _per_batch(f"{w.name}/full warm cached", lambda _: full_batch(exprs), runs, clear_fixed_points),
            _per_batch(f"{w.name}/full warm uncached", lambda _: full_batch(exprs), runs, clear_memory_cache)]
    # saturation ON for the whole batch (every expression of the fast result, not only what worth_saturating
    # lets through): warm (the e-graph already holds the batch from earlier runs: a repeated layer) and fresh
    # (an e-graph holding the rules alone, the first time this batch is seen)
    fast_all = [u for u in dict.fromkeys(fast_batch(exprs)) if u.src]
    sat_jobs = [_per_batch(f"{w.name}/e-graph ON all {len(fast_all)}, warm", lambda _: saturate_all(fast_all), runs,
                           clear_memory_cache),
                _per_batch(f"{w.name}/e-graph ON all {len(fast_all)}, fresh", lambda _: saturate_all(fast_all), runs,
                           forget_egraph)]
    if tg is not None:
        texprs = tg[0]
        jobs.append(_per_batch(f"{w.name}/tinygrad", lambda _: tinygrad_batch(texprs), runs))
    res = b.measure_together(jobs + sat_jobs)
    w.stats.update(r_sat_warm=res[-2], r_sat_fresh=res[-1])
    res = res[:-2]
    fast, cached, uncached = res[:3]
    fast_out = fast_batch(exprs)
    results: dict[str, Sequence[Any]] = {"fast": fast_out, "full": full_out}
    w.stats.update(exprs=len(exprs), r_fast=fast, r_cached=cached, r_uncached=uncached,
                   **{"in": total_nodes(exprs), "fast": total_nodes(fast_out), "full": total_nodes(full_out)},
                   sat=None if st is None else f"{st.roots} roots, {st.iterations} iterations, stop={st.stop}, "
                   f"{1e3 * st.seconds:.1f} ms in egglog")
    if tg is not None:
        tout = tinygrad_batch(tg[0])
        results["tinygrad"] = tout
        w.stats.update(tg=total_nodes(tout), tg_in=total_nodes(tg[0]))
        b.compare(f"{w.name}: fast vs tinygrad", fast, res[3], "tinygrad")
        b.compare(f"{w.name}: full uncached vs tinygrad", uncached, res[3], "tinygrad")
    bad = check_equal(exprs, results, tg[1] if tg is not None else None)
    w.stats["bad"] = ", ".join(f"{k} {v}" for k, v in bad.items())


def _pool_figures(b: Bench, w: Workload, tg: tuple[list[Any], dict[Any, Any]] | None, fast_runs: int,
                  slow_runs: int) -> None:
    exprs = w.exprs
    n = len(exprs)
    full_each(exprs)
    jobs = [_per_expr(f"{w.name}/fast", lambda _: fast_each(exprs), n, fast_runs, clear_fixed_points),
            _per_expr(f"{w.name}/full cached", lambda _: full_each(exprs), n, fast_runs, clear_fixed_points),
            _per_expr(f"{w.name}/full uncached", lambda _: full_each(exprs), n, slow_runs, clear_memory_cache)]
    if tg is not None:
        texprs = tg[0]
        jobs.append(_per_expr(f"{w.name}/tinygrad", lambda _: tinygrad_each(texprs), n, fast_runs))
    from rules import worth_saturating
    from rules.eqsat import fast_tier_can_change

    # the fast results the full simplifier sends to egglog: those rules.worth_saturating lets through and a rule of
    # the fast-tier program matches (rules.eqsat.saturate_fast skips the others without an egglog call)
    needy = [u for u in dict.fromkeys(fast_each(exprs)) if worth_saturating(u) and fast_tier_can_change(u)]
    if needy:  # the e-graph alone, one call per fast result that needs it, from an e-graph holding the rules alone
        jobs.append(_per_expr(f"{w.name}/e-graph per expr that needs it ({len(needy)})",
                              lambda _: saturate_each(needy), len(needy), slow_runs, forget_egraph))
    res = b.measure_together(jobs)
    if needy:
        w.stats["r_needy"] = res[-1]
    w.stats.update(**{"in": total_nodes(exprs), "fast": total_nodes(fast_each(exprs)),
                      "full": total_nodes(full_each(exprs))})
    if tg is not None:
        w.stats["tg"] = total_nodes(tinygrad_each(tg[0]))
        b.compare(f"{w.name}: fast vs tinygrad", res[0], res[3], "tinygrad")
        b.compare(f"{w.name}: full uncached vs tinygrad", res[2], res[3], "tinygrad")
