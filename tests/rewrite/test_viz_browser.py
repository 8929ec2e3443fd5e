"""The viewer in a real browser: the system's headless Chromium driven by playwright (no browser download).

- a click-through on a trace recorded from a real program (tests/rewrite/viz_program.py, a matmul and a relu):
  pipeline stage -> rule firing (name, definition line, before/after) -> node provenance (back to the Tensor
  call) -> kernel (opts, LINEAR, source, time);
- screenshots of the main views of a fixed trace (viz_refs/trace.json) against committed references;
- a synthesized 100k-node graph with 100k firings: time to first render, and a click that expands the graph.

Screenshots are compared on a fixed 1280x800 viewport after 4x4 box pooling (glyph edges and sub-pixel shifts
average out), counting a pooled pixel as different when a channel moves by more than 24; a view fails when more
than 3% differ (a missing pane, a wrong colour scheme or a broken layout is far above that; a different font
version is well below). To regenerate the references (and the fixed trace, from the program) after an intended
change of the page, run

    UOPC_UPDATE_SCREENSHOTS=1 python -m pytest tests/rewrite/test_viz_browser.py

and look at the new PNGs in tests/rewrite/viz_refs/ before committing them. A failing comparison writes the
actual screenshot and a diff image next to pytest's temporary files and names them.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil
import time
from collections.abc import Iterator

import numpy as np
import pytest

from lower.pipeline import PIPELINE
from rewrite import Ops, UOp, dtypes
from rewrite.viz.capture import Recorder
from rewrite.viz.server import serve
from tests.rewrite.test_viz import record_program

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install '.[test]')")
Image = pytest.importorskip("PIL.Image", reason="pillow is not installed (pip install '.[test]')")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no system chromium (apt-get install chromium)", allow_module_level=True)

pytestmark = pytest.mark.browser

REFS = pathlib.Path(__file__).parent / "viz_refs"
UPDATE = os.environ.get("UOPC_UPDATE_SCREENSHOTS") == "1"
VIEWPORT = {"width": 1280, "height": 800}
POOL, CHANNEL_TOL, MAX_DIFFERENT = 4, 24, 0.03
FIRST_RENDER_S = 5.0  # 100k nodes: from navigation to the first drawn view


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--font-render-hinting=none",
            "--force-color-profile=srgb", "--hide-scrollbars"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    pg.close()
    assert not errors, errors


def open_trace(page, path: pathlib.Path, timeout_ms: int = 20_000):
    srv, url = serve(str(path))
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)
    return srv


# ------------------------------------------------------------------------------------------ click-through


@pytest.fixture(scope="module")
def live_trace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("viz") / "trace.json"
    record_program(out)
    return out


def test_click_through_stage_firing_provenance_kernel(page, live_trace: pathlib.Path):
    srv = open_trace(page, live_trace)
    try:
        stages = page.locator(".stage-row td:first-child").all_inner_texts()
        graph_stages = [st.name for st in PIPELINE if st.scope == "graph"]   # the table's order, up to the split
        graph_stages = graph_stages[:graph_stages.index("rangeify") + 1]
        assert stages[:len(graph_stages)] == graph_stages and stages[-1] == PIPELINE[-1].name
        # stage: both graphs drawn, a bounded number of nodes, the firings listed
        page.click(".stage-row >> text=linearize")
        assert "stage linearize" in page.inner_text("#view-title")
        assert page.locator(".pane").count() == 2 and page.locator(".pane .node").count() > 4
        rows = page.locator(".firing-row")
        assert rows.count() >= 1 and "reduce-to-accumulator" in page.inner_text("#firing-list")
        # firing: the rule's name, where it is defined, the line itself, its before and after graphs
        page.click(".firing-row >> text=reduce-to-accumulator")
        assert "reduce-to-accumulator" in page.inner_text("#view-title")
        loc = page.inner_text("#rule-loc")
        assert loc.startswith("lower/linearize.py:") and loc.split(":")[1].isdigit()
        assert '"reduce-to-accumulator"' in page.inner_text("#rule-src")
        assert page.locator(".pane .pane-head b").all_inner_texts()[0].startswith("before: REDUCE")
        # provenance of the firing's result: the rule that made it
        page.locator(".pane").nth(1).locator(".node").first.click()
        prov = page.inner_text("#provenance")
        assert "made by rule reduce-to-accumulator" in prov and "firing #" in prov
        # provenance of a kernel node across the kernel split: the tensor REDUCE it computes, made by the matmul
        page.locator(".pane").nth(0).locator(".node").first.click()
        prov = page.inner_text("#provenance")
        assert "by rangeify" in prov
        assert "created by the Tensor call __matmul__() at tests/rewrite/viz_program.py:9" in prov, prov
        # hover: op, dtype and shape
        page.locator(".pane").nth(0).locator(".node").first.hover()
        tip = page.inner_text("#tip")
        assert "REDUCE" in tip and "dtype float32" in tip
        # a tensor-graph node: provenance ends at the Tensor call that created it
        page.click(".stage-row >> text=callify")
        page.locator(".pane").nth(0).locator(".node").nth(1).click()
        prov = page.inner_text("#provenance")
        assert "created by the Tensor call relu() at tests/rewrite/viz_program.py:9" in prov, prov
        page.locator(".pane").nth(0).locator(".node").nth(1).hover()
        assert "shape (3, 5)" in page.inner_text("#tip")
        # kernel: opts, LINEAR listing, rendered source, measured time and rates
        page.click(".kernel-row")
        name = page.inner_text("#view-title").removeprefix("kernel ")
        assert name.startswith("r_") and f"void {name}(" in page.inner_text("#kernel-source")
        assert "RANGE" in page.inner_text("#kernel-linear") and page.locator("#kernel-opts").count() == 1
        stats = page.inner_text("#kernel-stats")
        assert "GB/s" in stats and "GFLOP/s" in stats and " ms" in stats
    finally:
        srv.shutdown()


# ------------------------------------------------------------------------------------------ screenshots


def _normalized(trace: dict) -> dict:
    """Timings made constant, so the screenshots of a trace do not depend on the machine that recorded it."""
    for r in trace["realizes"]:
        for s in r["stages"]:
            s["ms"] = 1.0
        for run in r["runs"]:
            run.update(ms=0.125, gbs=1.5, gflops=2.5)
    return trace


@pytest.fixture(scope="module")
def ref_trace(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    path = REFS / "trace.json"
    if UPDATE:
        tmp = tmp_path_factory.mktemp("viz") / "trace.json"
        trace = _normalized(record_program(tmp))
        path.write_text(json.dumps(trace, separators=(",", ":")))
    return path


def _pool(img: np.ndarray) -> np.ndarray:
    h, w = img.shape[0] // POOL * POOL, img.shape[1] // POOL * POOL
    return img[:h, :w].reshape(h // POOL, POOL, w // POOL, POOL, 3).mean(axis=(1, 3))


def different_fraction(actual: np.ndarray, ref: np.ndarray) -> float:
    if actual.shape != ref.shape:
        return 1.0
    return float((np.abs(_pool(actual.astype(np.float32)) - _pool(ref.astype(np.float32))).max(axis=-1)
                  > CHANNEL_TOL).mean())


def _rgb(png: bytes | pathlib.Path) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png) if isinstance(png, bytes) else png).convert("RGB"))


def check_screenshot(page, name: str, out_dir: pathlib.Path) -> None:
    page.mouse.move(0, 0)  # no hover state in the picture
    png = page.screenshot()
    ref = REFS / f"{name}.png"
    if UPDATE or not ref.exists():
        ref.write_bytes(png)
        if not UPDATE:
            pytest.fail(f"no reference screenshot {ref.name}: wrote one; look at it and commit it")
        return
    actual, expected = _rgb(png), _rgb(ref)
    frac = different_fraction(actual, expected)
    if frac > MAX_DIFFERENT:
        (out_dir / f"{name}.actual.png").write_bytes(png)
        if actual.shape == expected.shape:
            diff = (np.abs(actual.astype(int) - expected.astype(int)).max(axis=-1) > CHANNEL_TOL) * 255
            Image.fromarray(diff.astype(np.uint8)).save(out_dir / f"{name}.diff.png")
        pytest.fail(f"screenshot {name}: {frac:.1%} of pooled pixels differ (at most {MAX_DIFFERENT:.0%}); actual and "
                    f"diff in {out_dir}; if the change is intended, regenerate (module docstring)")


def test_screenshots_match_references(page, ref_trace: pathlib.Path, tmp_path: pathlib.Path):
    srv = open_trace(page, ref_trace)
    try:
        page.click(".stage-row >> text=linearize")
        check_screenshot(page, "stage", tmp_path)
        page.click(".firing-row >> nth=0")
        page.locator(".pane").nth(1).locator(".node").first.click()
        check_screenshot(page, "firing", tmp_path)
        page.click(".kernel-row")
        check_screenshot(page, "kernel", tmp_path)
    finally:
        srv.shutdown()


def test_screenshot_comparison_catches_a_changed_view():
    ref = _rgb(REFS / "stage.png")
    assert different_fraction(ref, ref) == 0.0
    noisy = ref.astype(np.int16) + np.random.default_rng(0).integers(-10, 11, ref.shape)  # anti-aliasing-sized
    assert different_fraction(noisy.clip(0, 255).astype(np.uint8), ref) == 0.0
    broken = ref.copy()
    broken[100:400, 300:900] = (255, 0, 0)  # a pane gone red
    assert different_fraction(broken, ref) > MAX_DIFFERENT
    assert different_fraction(ref[:-8], ref) == 1.0


# ------------------------------------------------------------------------------------------ 100k nodes


def big_trace(path: pathlib.Path) -> int:
    """A 100k-node graph (a balanced ADD tree over 50k distinct constants) as one stage, and 100k firings."""
    level = [UOp.const(i, dtypes.int32) for i in range(50_000)]
    consts = level
    while len(level) > 1:
        level = [UOp(Ops.ADD, (level[i], level[i + 1])) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    root = UOp.sink(level[0])
    rec = Recorder()
    begun = rec.stage_begin()
    for i in range(100_000):
        rec.log.record("big", "big-rule", consts[i % 50_000], consts[(i + 1) % 50_000], "big.py:1")
    rec.stage_end(begun, "big-stage", "graph", "", root, root)
    rec.write(str(path))
    return len(root.toposort())


def test_100k_node_graph_loads_fast_and_stays_responsive(page, tmp_path: pathlib.Path):
    path = tmp_path / "big.json"
    t0 = time.perf_counter()
    n = big_trace(path)
    made_s = time.perf_counter() - t0
    assert n == 100_000
    srv = open_trace(page, path)
    try:
        timing = page.evaluate("window.vizTiming")
        first_render_s = timing["sinceNavigation"] / 1e3
        assert first_render_s < FIRST_RENDER_S, timing
        assert "100000 nodes" in page.inner_text(".pane-head")
        drawn = int(page.locator(".graph").first.get_attribute("data-nodes"))
        assert 50 <= drawn <= 200  # the top levels, not the whole graph
        # expanding a collapsed node redraws in well under a second
        t1 = time.perf_counter()
        page.locator(".pane").first.locator(".more").first.dispatch_event("click")  # it may lie outside the view
        page.wait_for_function(f"document.querySelector('.graph').dataset.nodes > {drawn}")
        expand_s = time.perf_counter() - t1
        assert expand_s < 1.0
        # the firing list is paged
        assert page.locator(".firing-row").count() == 100
        t2 = time.perf_counter()
        page.click("#firing-list .next")
        assert "101-200 of 100000" in page.inner_text("#firing-list .pager")
        page_s = time.perf_counter() - t2
        assert page_s < 1.0
        # provenance over the whole table (consumer index built on first use)
        page.locator(".pane").first.locator(".node").nth(3).click()
        assert page.locator("#provenance li").count() >= 1
        print(f"\n100k nodes: trace written in {made_s:.2f} s ({path.stat().st_size / 1e6:.1f} MB); first render "
              f"{first_render_s:.2f} s after navigation (fetch+parse {timing['fetchParse'] / 1e3:.2f} s); "
              f"expand {expand_s * 1e3:.0f} ms; next page {page_s * 1e3:.0f} ms")
    finally:
        srv.shutdown()
