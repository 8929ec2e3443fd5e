"""The disk cache of generated matchers' bytecode (rewrite.codecache): a later process loads what an earlier one
compiled, and a file that is damaged, truncated, for another source or for another bytecode format is not
trusted: the matcher is compiled again and the file written anew. The matchers made either way must act alike."""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import pytest

from rewrite import Ops, Rule, RuleSet, UOp, codecache, const, graph_rewrite, match, var
from rewrite.dsl import params_of

x, y, c0 = var("x"), var("y"), const("c0")
a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)


def _keep_big(c0: int) -> bool:
    return c0 > 3


def _rules(tag: int) -> RuleSet:
    """A rule set whose ADD matcher has a source no other test makes (`tag` goes into a rule's guard text as a
    constant), so the cache entry is this test's own."""
    return RuleSet(f"cc-{tag}", [
        Rule("add-zero", x + 0, x),
        Rule("add-self", x + x, x * 2),
        Rule("add-big-const", x + c0, x * 1, when=_keep_big),
        Rule(f"add-tag-{tag}", (x + y) + tag, x + (y + tag)),
    ])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private cache directory with bytecode writing on; the in-process code memo emptied before and after."""
    monkeypatch.setenv("CACHEDIR", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    compiles: list[str] = []
    real = compile

    def counting(src, name, mode, *args, **kw):
        compiles.append(src)
        return real(src, name, mode, *args, **kw)

    monkeypatch.setattr(match, "compile", counting, raising=False)
    match._CODE.clear()
    yield tmp_path / "matchers", compiles
    match._CODE.clear()


def _entry(src: str, d) -> str:
    return codecache._path(str(d), codecache.source_key(src))


def _results(rs: RuleSet) -> list[UOp]:
    """What the rule set makes of a few sums (each compared by identity: UOps are hash-consed)."""
    cases = [a + 0, a + a, a + 7, a + 2, (a + b) + int(rs.name.split("-")[1])]
    return [graph_rewrite(u, rs) for u in cases]


def test_written_then_loaded_without_compiling(cache):
    d, compiles = cache
    tag = 90001
    fresh = _rules(tag)
    m = fresh.matcher(Ops.ADD)
    assert m is not None and len(compiles) == 1
    path = _entry(m.source, d)
    assert os.path.exists(path)
    want = _results(fresh)
    assert want[0] is a and want[1] is graph_rewrite(a * 2, fresh) and want[3] is a + 2
    match._CODE.clear()  # as a new process: nothing in memory, the file on disk
    again = _rules(tag)
    m2 = again.matcher(Ops.ADD)
    assert m2 is not None and len(compiles) == 1  # loaded, not compiled
    assert m2.source == m.source and m2.__code__.co_code == m.__code__.co_code
    assert m2.__code__.co_filename == f"<rules cc-{tag} on ADD>"
    assert _results(again) == want


def _damage(path: str, how: str, other: str) -> None:
    with open(path, "rb") as f:
        blob = f.read()
    if how == "flip-payload":
        i = len(blob) - 5
        blob = blob[:i] + bytes([blob[i] ^ 0xFF]) + blob[i + 1:]
    elif how == "truncate":
        blob = blob[: len(blob) // 2]
    elif how == "empty":
        blob = b""
    elif how == "garbage":
        blob = os.urandom(len(blob))
    elif how == "other-source":  # a whole, valid file of another matcher under this name
        with open(other, "rb") as f:
            blob = f.read()
    elif how == "other-python":  # another bytecode format's magic number
        n = len(codecache.MAGIC)
        blob = blob[:n] + bytes(b ^ 0x55 for b in importlib.util.MAGIC_NUMBER) + blob[n + 4:]
    elif how == "bad-magic":
        blob = b"X" + blob[1:]
    elif how == "not-code":  # header and digest consistent, but the payload is not a code object
        import hashlib
        import marshal

        payload = marshal.dumps(("not", "code"))
        head = blob[: len(codecache.MAGIC) + 4 + 32]
        blob = head + hashlib.sha256(payload).digest() + payload
    with open(path, "wb") as f:
        f.write(blob)


@pytest.mark.parametrize("how", ["flip-payload", "truncate", "empty", "garbage", "other-source", "other-python",
                                 "bad-magic", "not-code"])
def test_damaged_entry_is_rebuilt(cache, how):
    d, compiles = cache
    tag = 90100 + len(how)
    rs = _rules(tag)
    want = _results(rs)
    src = rs.matcher(Ops.ADD).source  # type: ignore[union-attr]  # a rule set with ADD rules has an ADD matcher
    other_rs = _rules(tag + 5000)
    other_src = other_rs.matcher(Ops.ADD).source  # type: ignore[union-attr]  # likewise
    path = _entry(src, d)
    _damage(path, how, _entry(other_src, d))
    assert codecache.load(src) is None  # not trusted
    match._CODE.clear()
    n = len(compiles)
    again = _rules(tag)
    assert _results(again) == want  # compiled again, and right
    assert len(compiles) == n + 1
    assert isinstance(codecache.load(src), types.CodeType)  # and the file written anew
    match._CODE.clear()
    assert _results(_rules(tag)) == want and len(compiles) == n + 1  # which the next one loads


def test_no_write_without_bytecode_writing(cache, monkeypatch):
    d, compiles = cache
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    rs = _rules(90300)
    src = rs.matcher(Ops.ADD).source  # type: ignore[union-attr]  # a rule set with ADD rules has an ADD matcher
    assert compiles and not os.path.exists(_entry(src, d))


def test_unwritable_cache_dir_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CACHEDIR", str(blocker))  # makedirs under a file fails
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    match._CODE.clear()
    try:
        rs = _rules(90400)
        assert graph_rewrite(a + 0, rs) is a
    finally:
        match._CODE.clear()


def test_sweep_bounds_the_directory(cache, monkeypatch):
    d, _ = cache
    monkeypatch.setattr(codecache, "MAX_FILES", 6)
    monkeypatch.setattr(codecache, "_swept", [])
    d.mkdir(parents=True, exist_ok=True)
    for i in range(10):
        (d / f"old{i}.code").write_bytes(b"x")
        os.utime(d / f"old{i}.code", (1_000_000 + i, 1_000_000 + i))
    _rules(90500).matcher(Ops.ADD)  # a write sweeps once
    left = sorted(p.name for p in d.iterdir())
    assert len(left) <= 6 and "old0.code" not in left and "old9.code" in left


def test_params_of_agrees_with_inspect_on_the_library_rules():
    """params_of reads plain functions off their code: it must name the same parameters inspect.signature does,
    for every guard and computed right-hand side of the library's rule sets."""
    import inspect

    import rules.decompositions
    import rules.eqsat
    import rules.symbolic
    import rules.transcendental

    seen = 0
    for mod in (rules.symbolic, rules.eqsat, rules.decompositions, rules.transcendental):
        for rs in vars(mod).values():
            if not isinstance(rs, RuleSet):
                continue
            for r in rs:
                for fn in (r.when, r.rhs):
                    if callable(fn) and not isinstance(fn, type(x)):
                        assert params_of(fn) == list(inspect.signature(fn).parameters), r.name
                        seen += 1
    assert seen > 50


def test_params_of_falls_back_for_unusual_callables():
    import functools
    import inspect

    def plain(x, y, ctx=None): return x
    def star(x, *rest): return x
    def kwonly(x, *, k): return x

    @functools.wraps(plain)
    def wrapped(*args, **kw): return plain(*args, **kw)

    class Call:
        def __call__(self, q): return q

    for fn in (plain, star, kwonly, wrapped, Call(), functools.partial(plain, 1)):
        assert params_of(fn) == list(inspect.signature(fn).parameters)
