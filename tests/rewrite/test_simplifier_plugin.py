"""UOp.simplify is a plug-in (rewrite/uop.py): rules/ registers it; rewrite/ finds it by entry-point group only."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tomllib
from importlib.metadata import EntryPoint

import pytest

import rules
from rewrite import PluginError, UOp
from rewrite import uop as uop_module

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_pyproject_declares_the_entry_point_and_it_loads_rules_simplify():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    group = project["entry-points"][uop_module.SIMPLIFIER_GROUP]
    assert group == {"symbolic": "rules:simplify"}
    assert EntryPoint("symbolic", group["symbolic"], uop_module.SIMPLIFIER_GROUP).load() is rules.simplify


def test_importing_rules_registers_simplify():
    assert uop_module._simplifier() is rules.simplify
    a = UOp.variable("a", 0, 10)
    assert ((a * 4 + 3) // 4).simplify() is a


def test_no_simplifier_and_no_entry_point_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(uop_module, "_SIMPLIFIER", [])
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [])
    with pytest.raises(PluginError, match=r"no simplifier is registered.*`import rules`"):
        (UOp.variable("a", 0, 10) + 0).simplify()


def test_entry_point_is_loaded_on_first_use(monkeypatch):
    """With nothing registered, the first simplify() registers what the group's entry point names."""
    calls = []

    def fake(u: UOp) -> UOp:
        calls.append(u)
        return u

    eps = [EntryPoint("zz", "no.such.module:f", "g"), EntryPoint("a", f"{__name__}:_fake_simplifier", "g")]
    monkeypatch.setattr(uop_module, "_SIMPLIFIER", [])
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: eps if group == "uopc.simplifier" else [])
    monkeypatch.setitem(globals(), "_fake_simplifier", fake)
    x = UOp.variable("a", 0, 10) + 0
    assert x.simplify() is x and x.simplify() is x and calls == [x, x]  # "a" sorts first; loaded once
    assert [fake] == uop_module._SIMPLIFIER


def test_bare_engine_user_gets_simplify_through_an_installed_entry_point(tmp_path):
    """A fresh process that imports only `rewrite` and has the entry point installed (a dist-info on its path, as
    `pip install` writes it) simplifies with the symbolic rules, and `rules` is loaded by the lookup, not by
    rewrite/ importing it."""
    dist = tmp_path / "uopc_plugin_check-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: uopc-plugin-check\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[uopc.simplifier]\nsymbolic = rules:simplify\n")
    code = (
        "import sys\n"
        "from rewrite import UOp\n"
        "assert 'rules' not in sys.modules, 'rewrite imported rules'\n"
        "a = UOp.variable('a', 0, 10)\n"
        "print(((a * 4 + 3) // 4).simplify().render(), 'rules' in sys.modules)\n"
    )
    path = os.pathsep.join([str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": path}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["a", "True"]
