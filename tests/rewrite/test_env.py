"""Typed knobs (rewrite/env.py): the declared table, parsing, bad values, Context overrides, the getenv wrapper."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import typing

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rewrite import env
from rewrite.env import KNOBS, Context, KnobError, getenv, knob_bool, knob_int, knob_str, knobs

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in KNOBS:
        monkeypatch.delenv(name, raising=False)


def test_literal_groups_match_the_table():
    by_kind = {int: env.IntKnob, str: env.StrKnob, bool: env.BoolKnob}
    for kind, lit in by_kind.items():
        assert set(typing.get_args(lit)) == {k.name for k in KNOBS.values() if k.kind is kind}, kind


def test_knobs_fields_match_the_table():
    hints = typing.get_type_hints(env.Knobs)
    fields = {f.name.upper(): hints[f.name] for f in dataclasses.fields(env.Knobs)}
    assert fields == {k.name: k.kind for k in KNOBS.values()}


def test_defaults_are_allowed_values_of_their_type():
    for k in KNOBS.values():
        assert type(k.default) is k.kind, k
        assert k.parse(k.default if k.kind is not int else str(k.default)) == k.default


def test_defaults_when_unset():
    snap = knobs()
    for k in KNOBS.values():
        assert getattr(snap, k.name.lower()) == k.default
    assert knob_int("DEBUG") == 0 and knob_str("DEVICE") == "cpu" and knob_bool("NOOPT") is False


# knob, environment text => value
GOOD = [
    ("DEBUG", "3", 3), ("DEBUG", " 5", 5), ("TRACE", "2", 2), ("BEAM", "8", 8), ("BEAM", "0", 0),
    ("CACHE", "0", 0), ("EGGLOG", "0", 0), ("SPEC", "1", 1), ("VIZ", "1", 1),
    ("NOOPT", "1", True), ("NOOPT", "0", False), ("NOOPT", "yes", True), ("NOOPT", "False", False),
    ("NOOPT", "", False), ("DEVICE", "python", "python"), ("CPU_TARGET", "x86-64-v3", "x86-64-v3"),
    ("CPU_TARGET", "aarch64", "aarch64"), ("CACHEDIR", "/tmp/x", "/tmp/x"), ("CC", "clang", "clang"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "value"), GOOD)
def test_environment_values(monkeypatch, name, text, value):
    monkeypatch.setenv(name, text)
    read = {int: knob_int, str: knob_str, bool: knob_bool}[KNOBS[name].kind]
    assert read(name) == value and type(read(name)) is KNOBS[name].kind
    assert getenv(name) == value and getattr(knobs(), name.lower()) == value


# knob, environment text => words the error must contain
BAD = [
    ("DEBUG", "abc", "integer from 0 to 5"), ("DEBUG", "6", "integer from 0 to 5"), ("DEBUG", "-1", "from 0 to 5"),
    ("DEBUG", "1.5", "integer"), ("BEAM", "-1", "integer >= 0"), ("BEAM", "two", "integer >= 0"),
    ("TRACE", "3", "from 0 to 2"), ("CACHE", "2", "from 0 to 1"), ("NOOPT", "2", "0 or 1"),
    ("NOOPT", "maybe", "0 or 1"), ("CPU_TARGET", "x86-64-v5", "'x86-64-v3'"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "allowed"), BAD)
def test_bad_environment_value_names_knob_value_and_what_is_allowed(monkeypatch, name, text, allowed):
    monkeypatch.setenv(name, text)
    read = {int: knob_int, str: knob_str, bool: knob_bool}[KNOBS[name].kind]
    for call in (lambda: read(name), lambda: getenv(name), knobs):
        with pytest.raises(KnobError) as info:
            call()
        msg = str(info.value)
        assert f"{name}={text!r}" in msg and allowed in msg, msg
    assert issubclass(KnobError, ValueError)  # callers that caught the old ValueError still do


@given(st.sampled_from([k for k in KNOBS.values() if k.kind is int]), st.integers(-(10**6), 10**6))
def test_int_knobs_accept_exactly_their_range(knob, n):
    inside = (knob.lo is None or n >= knob.lo) and (knob.hi is None or n <= knob.hi)
    if inside:
        assert knob.parse(str(n)) == n and knob.parse(n) == n
    else:
        with pytest.raises(KnobError, match=knob.name):
            knob.parse(str(n))


def test_wrong_type_and_unknown_knob():
    with pytest.raises(KnobError, match=r"DEBUG is declared int, not str: read it with knob_int\('DEBUG'\)"):
        knob_str("DEBUG")
    with pytest.raises(KnobError, match="NOOPT is declared bool"):
        knob_int("NOOPT")
    with pytest.raises(KnobError, match="unknown knob 'DEBUGG'"):
        knob_int("DEBUGG")


def test_context_overrides_and_restores(monkeypatch):
    monkeypatch.setenv("DEBUG", "1")
    with Context(DEBUG=2, NOOPT=1, DEVICE="python"):
        assert knob_int("DEBUG") == 2 and knob_bool("NOOPT") is True and knob_str("DEVICE") == "python"
        with Context(DEBUG="4"):  # parsed like the environment's text
            assert knob_int("DEBUG") == 4 and knobs().debug == 4
        assert knob_int("DEBUG") == 2
    assert knob_int("DEBUG") == 1 and knob_bool("NOOPT") is False and knob_str("DEVICE") == "cpu"


@pytest.mark.parametrize(
    ("overrides", "words"),
    [({"BEAM": -1}, "BEAM=-1"), ({"DEBUG": "abc"}, "DEBUG='abc'"), ({"DEBUG": True}, "DEBUG=True"),
     ({"DEVICE": 3}, "DEVICE=3"), ({"NOOPT": 5}, "NOOPT=5"), ({"CACHE": 0, "EGGLOG": 7}, "EGGLOG=7")],
)  # fmt: skip
def test_context_checks_values_on_entry(overrides, words):
    with pytest.raises(KnobError, match=words.replace("(", r"\(")), Context(**overrides):
        pytest.fail("the block must not run with a bad value")
    assert knob_int("BEAM") == 0 and knob_int("DEBUG") == 0 and knob_int("CACHE") == 1  # nothing leaked


def test_getenv_wrapper_for_undeclared_names(monkeypatch):
    monkeypatch.delenv("UOPC_TEST_KNOB", raising=False)
    assert getenv("UOPC_TEST_KNOB", 7) == 7 and getenv("UOPC_TEST_KNOB") == 0
    monkeypatch.setenv("UOPC_TEST_KNOB", "12")
    assert getenv("UOPC_TEST_KNOB", 7) == 12 and getenv("UOPC_TEST_KNOB", "s") == "12"
    monkeypatch.setenv("UOPC_TEST_KNOB", "x")
    with pytest.raises(KnobError, match="UOPC_TEST_KNOB='x' must be an integer"):
        getenv("UOPC_TEST_KNOB", 7)


def test_cache_dir_reads_cachedir(tmp_path):
    with Context(CACHEDIR=str(tmp_path / "c")):
        assert env.cache_dir() == str(tmp_path / "c") and (tmp_path / "c").is_dir()


def _knob_reads(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if fn in {"getenv", "knob_int", "knob_str", "knob_bool"} and isinstance(node.args[0].value, str):
                out.append((node.lineno, node.args[0].value))
    return out


def test_every_knob_the_code_reads_is_declared():
    """Every `getenv(...)` / `knob_*(...)` with a literal name in the source packages names a declared knob."""
    undeclared, reads = [], 0
    for pkg in ("rewrite", "rules", "devices", "lower", "tensor", "benchmarks"):
        for path in (ROOT / pkg).rglob("*.py"):
            for line, name in _knob_reads(ast.parse(path.read_text())):
                reads += 1
                if name not in KNOBS:
                    undeclared.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert reads > 10 and not undeclared, undeclared


def _readme_knob_rows() -> dict[str, str]:
    """The README's knob table: the first cell of each row (`NAME`, `NAME=...`) by knob name."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Environment knobs") :]
    rows = {}
    for line in section.splitlines():
        if m := re.match(r"\| `([A-Z][A-Z0-9_]*)([^`A-Z0-9_][^`]*)?` \|", line):  # a name may hold digits (ALLOW_TF32)
            rows[m.group(1)] = m.group(2) or ""
    return rows


def test_readme_knob_table_is_the_declared_knobs():
    """Every declared knob has a row in the README's table, and every row is a declared knob."""
    rows = _readme_knob_rows()
    assert set(rows) == set(KNOBS), (set(rows) ^ set(KNOBS))


def test_readme_knob_levels_are_the_allowed_ones():
    """A row that lists an int knob's levels (`DEBUG=1..5`, `TRACE=1|2`) lists exactly its non-zero values; a row
    with one value (`CACHE=0`) names an allowed one."""
    checked = 0
    for name, spec in _readme_knob_rows().items():
        k = KNOBS[name]
        if k.kind is not int or not spec.startswith("=") or k.hi is None:
            continue
        text = spec[1:].replace("\\|", "|")
        if ".." not in text and "|" not in text:  # one value (CACHE=0): an allowed one
            k.parse(text)
            continue
        if m := re.fullmatch(r"(\d+)\.\.(\d+)", text):
            levels = set(range(int(m.group(1)), int(m.group(2)) + 1))
        else:
            levels = {int(v) for v in text.split("|")}
        assert levels == set(range(max(k.lo or 0, 1), k.hi + 1)), (name, spec)
        checked += 1
    assert checked >= 2  # DEBUG and TRACE at least


def test_unset_says_false_whenever_a_knob_may_be_set(monkeypatch):
    """rewrite.env.unset, the per-call check before getenv: True only when neither the environment nor a Context
    sets any of the knobs; then each reads as its default."""
    from rewrite.env import Context, env_keys, getenv, unset

    keys = env_keys("TRACE", "VIZ")
    monkeypatch.delenv("TRACE", raising=False)
    monkeypatch.delenv("VIZ", raising=False)
    assert unset(keys) and getenv("TRACE") == 0 and getenv("VIZ") == 0
    monkeypatch.setenv("VIZ", "0")
    assert not unset(keys)
    monkeypatch.delenv("VIZ")
    assert unset(keys)
    with Context(DEBUG=1):  # any override: the knob is read the slow way
        assert not unset(keys)
    assert unset(keys)
