"""rules.eqsat's result caches: in memory by UOp, on disk (SQLite) across saturators and processes, off with
CACHE=0, and a damaged disk cache (edited rows, a garbage file, an unwritable directory) detected and rebuilt,
never trusted."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from rewrite.egraph import Saturator
from rewrite.env import Context
from rewrite.uop import UOp
from rules import eqsat
from rules.eqsat import saturate
from tests.rules.test_eqsat import same_function

V = UOp.variable


@pytest.fixture(autouse=True, scope="module")
def private_disk_cache(tmp_path_factory):
    """Results of earlier runs must not answer for the e-graph: each test run gets an empty disk cache."""
    with Context(CACHEDIR=str(tmp_path_factory.mktemp("eqsat-cache"))):
        eqsat.saturator().clear_memory()
        yield


# ---------------------------------------------------------------------------------------------- caches


def test_memory_cache_hit_is_fast():
    e = ((V("x", 0, 77) * 8) + V("y", 0, 7)) // 8
    first = saturate(e)
    t = time.perf_counter()
    for _ in range(100):
        assert saturate(e) is first
    assert (time.perf_counter() - t) / 100 < 1e-3


def test_disk_cache_across_saturators_and_processes(tmp_path):
    text, _ = eqsat.program()
    made = "((V('x', 0, 55) * 4 + V('y', 0, 3)) // 4) * 7 + V('y', 0, 3) % 4"
    env = {**os.environ, "CACHEDIR": str(tmp_path), "CACHE": "1",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    code = ("from rewrite.uop import UOp; V = UOp.variable; from rules.eqsat import saturate; "
            f"print(saturate({made}).render())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    e = eval(made, {"V": V})
    with Context(CACHEDIR=str(tmp_path), CACHE=1):
        fresh = Saturator("disk", text, eqsat.SCHEDULE)
        t = time.perf_counter()
        r = fresh.run([e])[0]
        took = time.perf_counter() - t
    assert fresh._eg is None, "the result should come from disk, without starting egglog"
    assert r.uop.render() == out.stdout.strip() and took < 0.05
    assert same_function(e, r.uop, [V("x", 0, 55), V("y", 0, 3)]) is None


def test_saturation_loads_only_the_bindings_extension(tmp_path):
    """A fresh process saturates with egglog's compiled extension alone (the `egglog` package costs ~0.2 s to
    import and the bridge needs none of it); a later `import egglog` reuses that same extension module."""
    env = {**os.environ, "CACHEDIR": str(tmp_path), "CACHE": "0",
           "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    code = ("import sys; from rewrite.uop import UOp; from rules.eqsat import saturate; x = UOp.variable('x', 0, 100); "
            "print(saturate((x // 4) * 4 + x % 4 < 50).render(), 'egglog' in sys.modules, "
            "'egglog.bindings' in sys.modules); import egglog; from egglog import bindings; "
            "print(bindings is sys.modules['egglog.bindings'], egglog.EGraph is not None)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["(x<50)", "False", "True", "True", "True"]


def test_cache_off_writes_nothing(tmp_path):
    text, _ = eqsat.program()
    with Context(CACHEDIR=str(tmp_path), CACHE=0):
        Saturator("nocache", text, eqsat.SCHEDULE).run([(V("x", 0, 9) * 2 + 1) // 2])
    assert not (tmp_path / "egraph.sqlite").exists()


# ---------------------------------------------------------------------------------------------- a damaged disk cache


def _fill_disk_cache(tmp_path):
    text, _ = eqsat.program()
    e = ((V("x", 0, 55) * 4 + V("y", 0, 3)) // 4) * 7 + V("y", 0, 3) % 4
    with Context(CACHEDIR=str(tmp_path), CACHE=1):
        s = Saturator("fill", text, eqsat.SCHEDULE)
        want = s.run([e])[0].uop
    s._db.close()  # as if that process had ended
    return text, e, want


def _fresh_result(tmp_path, text, e):
    with Context(CACHEDIR=str(tmp_path), CACHE=1):
        s = Saturator("fresh", text, eqsat.SCHEDULE)
        return s, s.run([e])[0].uop


@pytest.mark.parametrize("edit", ["lo_hi", "nodes", "not_json", "no_checksum", "moved_row"])
def test_edited_disk_cache_rows_are_not_trusted(tmp_path, edit):

    text, e, want = _fill_disk_cache(tmp_path)
    db = sqlite3.connect(tmp_path / "egraph.sqlite")
    (key, val), = db.execute("SELECT key, val FROM eg").fetchall()
    d = json.loads(val)
    if edit == "lo_hi":  # a narrower range would let later rules fold comparisons wrongly
        d["lo"], d["hi"] = 5, 5
        val = json.dumps(d)
    elif edit == "nodes":  # another expression's term: x * 7 instead
        d["n"] = d["n"][:1]
        val = json.dumps(d)
    elif edit == "not_json":
        val = "{garbage"
    elif edit == "no_checksum":
        d.pop("c")
        val = json.dumps(d)
    else:  # a valid row written under another key
        db.execute("INSERT INTO eg (key, val) VALUES (?, ?)", ("0" * 64, val))
        key = "0" * 64
    db.execute("UPDATE eg SET val = ? WHERE key = ?", (val, key))
    db.commit()
    db.close()
    s, got = _fresh_result(tmp_path, text, e)
    assert got is want
    if edit != "moved_row":
        assert s._eg is not None, "the damaged row must not be used"


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty_header"])
def test_garbage_disk_cache_file_is_rebuilt(tmp_path, damage):

    text, e, want = _fill_disk_cache(tmp_path)
    path = tmp_path / "egraph.sqlite"
    for extra in ("egraph.sqlite-wal", "egraph.sqlite-shm"):
        (tmp_path / extra).unlink(missing_ok=True)
    data = path.read_bytes()
    path.write_bytes({"garbage": os.urandom(len(data)), "truncated": data[:100],
                      "empty_header": b"SQLite format 3\0" + b"\xff" * 200}[damage])
    _, got = _fresh_result(tmp_path, text, e)
    assert got is want
    db = sqlite3.connect(path)  # a real database again, holding the fresh result
    assert len(db.execute("SELECT key FROM eg").fetchall()) == 1
    db.close()
    s, got = _fresh_result(tmp_path, text, e)
    assert got is want and s._eg is None


def test_unwritable_cache_dir_means_no_disk_cache(tmp_path):
    text, _ = eqsat.program()
    blocker = tmp_path / "file"
    blocker.write_text("")
    e = (V("x", 0, 9) * 2 + 1) // 2
    with Context(CACHEDIR=str(blocker / "sub"), CACHE=1):
        assert Saturator("ro", text, eqsat.SCHEDULE).run([e])[0].uop.render() == "x"
