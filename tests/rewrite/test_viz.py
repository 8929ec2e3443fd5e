"""The viewer's recording, serialization and server (rewrite.viz), without a browser (test_viz_browser.py has one)."""

from __future__ import annotations

import gc
import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from rewrite import Ops, Rule, RuleSet, UOp, dtypes, graph_rewrite, var
from rewrite.viz import capture, recording
from rewrite.viz.serialize import NodeTable, to_json
from rewrite.viz.server import serve

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = "tests/rewrite/viz_program.py"

x = var("x")
RULES = RuleSet("viz-test", [Rule("viz-add-zero", x + 0, x), Rule("viz-mul-one", x * 1, x)])


def record_program(out: pathlib.Path, program: str = PROGRAM) -> dict:
    """Run `program` under VIZ=1 VIZ_OUT=out in a fresh process (so every kernel is lowered) and load the trace."""
    env = {**os.environ, "VIZ": "1", "VIZ_OUT": str(out), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, program], cwd=ROOT, env=env, check=True, capture_output=True, timeout=120)
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def program_trace(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return record_program(tmp_path_factory.mktemp("viz") / "trace.json")


def test_off_records_nothing_and_imports_nothing():
    assert capture.ACTIVE is None
    code = ("import sys, numpy as np\nfrom tensor import Tensor\n(Tensor(np.ones(3)) + 1).numpy()\n"
            "import rewrite.viz.capture as c\nprint(c.ACTIVE, 'rewrite.viz.serialize' in sys.modules, "
            "'rewrite.viz.server' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in ("VIZ", "VIZ_OUT")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, capture_output=True, text=True)
    assert out.stdout.split() == ["None", "False", "False"]


def test_firings_carry_rule_and_its_definition_line():
    a = UOp.variable("a", 0, 10)
    with recording() as rec:
        out = graph_rewrite((a + 0) * 1, RULES, name="viz-stage")
    assert out is a
    d = to_json(rec)
    rules = {r[0]: r for r in d["rules"]}
    assert set(rules) == {"viz-add-zero", "viz-mul-one"}
    for name, (_, where, text) in rules.items():
        assert where.startswith("tests/rewrite/test_viz.py:"), where
        assert name in text  # the source line of the rule's definition
    assert [d["stages"][f[0]] for f in d["firings"]] == ["viz-stage", "viz-stage"]
    before, after = d["firings"][0][2], d["firings"][0][3]
    assert d["nodes"][before][0] == "ADD" and after == d["nodes"][before][4][0]


def test_nodes_are_written_once_children_first():
    a = UOp.variable("a", 0, 10)
    shared = a * 3
    g = UOp.sink(shared + 1, shared + 2)
    t = NodeTable()
    root = t.add(g)
    assert len(t.rows) == len(g.toposort()) and root == len(t.rows) - 1
    assert all(s < i for i, row in enumerate(t.rows) for s in row[4])
    assert t.add(shared + 1) < root  # already there: same id
    assert len(t.rows) == len(g.toposort())


def _chain(n: int) -> UOp:
    u = UOp.const(0, dtypes.int32)
    for i in range(n):
        u = UOp(Ops.ADD, (u, UOp.const(i + 1, dtypes.int32)))
    return u


def _table_cpu(u: UOp) -> float:
    """CPU seconds of this thread to tabulate `u` (the best of three: CPU time, not wall, so other processes on a
    loaded machine do not count; the cyclic garbage collector off meanwhile, whose full passes over every live
    object, a loaded test worker's many, fall into the big chain's run more often and made it 10x the small one's)."""
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(3):
            t0 = time.thread_time()
            NodeTable().add(u)
            best = min(best, time.thread_time() - t0)
    finally:
        if enabled:
            gc.enable()
    return best


def test_node_table_is_iterative_and_linear():
    big, small = _chain(20_000), _chain(5_000)  # a 40k-node chain: deeper than Python's recursion limit
    t = NodeTable()
    t.add(big)
    assert len(t.rows) == 40_001
    # linear: 4x the nodes cost about 4x the time (a quadratic table would cost 16x); 8x leaves room for noise
    assert _table_cpu(big) < 8 * max(_table_cpu(small), 1e-3)


def test_recording_restores_previous_state():
    with recording() as outer, recording() as inner:
        assert capture.ACTIVE is inner
    assert capture.ACTIVE is None and outer is not inner


def test_program_trace_has_pipeline_kernels_and_tensor_calls(program_trace: dict):
    from lower.pipeline import STAGE_NAMES

    d = program_trace
    (r,) = d["realizes"]
    names = [s["name"] for s in r["stages"]]
    # the graph stages once, then the kernel and program stages (render, compile) for the one kernel, in the
    # table's order: realize runs every row of the table
    assert names == list(STAGE_NAMES)
    assert all(0 <= s["before"] < len(d["nodes"]) and 0 <= s["after"] < len(d["nodes"]) for s in r["stages"])
    lin = r["stages"][names.index("linearize")]
    assert d["nodes"][lin["after"]][0] == "LINEAR"
    rules = {d["rules"][f[1]][0] for f in d["firings"][lin["firings"][0]:lin["firings"][1]]}
    assert "reduce-to-accumulator" in rules
    (run,) = r["runs"]
    k = d["kernels"][run["kernel"]]
    assert run["ms"] > 0 and run["gflops"] > 0 and run["gbs"] > 0
    assert k["name"] in k["source"] and "RANGE" in k["linear"] and isinstance(k["opts"], list)
    # two FLOPs per multiply-add (i, j, k), and the relu on each of the 3x5 outputs
    assert 2 * 3 * 4 * 5 <= k["flops"] <= 2 * 3 * 4 * 5 + 2 * 3 * 5
    sites = d["callsites"]
    assert any(s.startswith("relu() at tests/rewrite/viz_program.py:9") for s in sites), sites
    assert any(s.startswith("__matmul__() at tests/rewrite/viz_program.py:9") for s in sites), sites
    # the graph callify gets holds the relu the program built, attributed to that call
    callify = r["stages"][0]
    top = d["nodes"][callify["before"]][4][0]
    assert sites[d["node_callsite"][str(top)]].startswith("relu()")


def test_server_serves_page_files_and_trace(tmp_path: pathlib.Path):
    p = tmp_path / "t.json"
    p.write_text('{"version": 1}')
    srv, url = serve(str(p))
    try:
        page = urllib.request.urlopen(url).read().decode()
        assert "viz.js" in page and "viz.css" in page
        assert b"GraphView" in urllib.request.urlopen(url + "viz.js").read()
        assert json.loads(urllib.request.urlopen(url + "trace.json").read()) == {"version": 1}
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(url + "../pyproject.toml")
    finally:
        srv.shutdown()


def test_server_names_a_missing_trace():
    with pytest.raises(FileNotFoundError, match="VIZ_OUT"):
        serve("no-such-trace.json")


def test_cli_serves_until_stopped(tmp_path: pathlib.Path):
    p = tmp_path / "t.json"
    p.write_text('{"version": 1}')
    proc = subprocess.Popen([sys.executable, "-m", "rewrite.viz", str(p), "--port", "0", "--no-browser"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "VIZ: serving" in line, line
        url = line.split(" at ")[1].split()[0]
        assert json.loads(urllib.request.urlopen(url + "trace.json", timeout=10).read()) == {"version": 1}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
