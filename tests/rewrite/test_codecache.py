"""Generated matchers kept by shape (rewrite.match_cache) on disk (rewrite.codecache): a later process loads what
an earlier one generated and compiled, without generating it; a file that is damaged, truncated, for another key,
of another form or for another bytecode format is not trusted: the matcher is generated again and the file
written anew; rules of one shape but other objects get their own objects, and a code that named one object where
the live rules now have two is not reused. The matchers made either way must act alike."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from rewrite import Ops, Rule, RuleSet, UOp, codecache, const, graph_rewrite, match, match_cache, var
from rewrite.dsl import params_of

x, y, c0 = var("x"), var("y"), const("c0")
a, b = UOp.variable("a", 0, 10), UOp.variable("b", 0, 10)


def _never(u: UOp) -> None:
    return None


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
    """A private cache directory with bytecode writing on, the in-process memos emptied before and after; counts
    the rules generated and the sources compiled."""
    monkeypatch.setattr(codecache, "ROOT", str(tmp_path / "matchers"))
    monkeypatch.setattr(codecache, "_made", {})
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    counts = {"compile": 0, "generate": 0}
    real, real_rule = compile, match._Gen.rule

    def counting(*args, **kw):
        counts["compile"] += 1
        return real(*args, **kw)

    def generating(self, *args, **kw):
        counts["generate"] += 1
        return real_rule(self, *args, **kw)

    monkeypatch.setattr(match, "compile", counting, raising=False)
    monkeypatch.setattr(match._Gen, "rule", generating)
    _forget()
    yield tmp_path / "matchers", counts
    _forget()


def _forget() -> None:
    """As a new process: nothing in memory (what is on disk stays)."""
    match._CODE.clear()
    match._ENTRIES.clear()


def _entry(rs: RuleSet, d) -> str:
    key = match.matcher_key(rs, Ops.ADD)
    assert key is not None
    return codecache._path(str(d), key)


def _results(rs: RuleSet) -> list[UOp]:
    """What the rule set makes of a few sums (each compared by identity: UOps are hash-consed)."""
    cases = [a + 0, a + a, a + 7, a + 2, (a + b) + int(rs.name.split("-")[1])]
    return [graph_rewrite(u, rs) for u in cases]


def test_written_then_loaded_without_generating(cache):
    d, counts = cache
    tag = 90001
    fresh = _rules(tag)
    m = fresh.matcher(Ops.ADD)
    assert m is not None and counts == {"compile": 1, "generate": 4}
    assert os.path.exists(_entry(fresh, d))
    want = _results(fresh)
    assert want[0] is a and want[1] is graph_rewrite(a * 2, fresh) and want[3] is a + 2
    _forget()
    again = _rules(tag)
    m2 = again.matcher(Ops.ADD)
    assert m2 is not None and counts == {"compile": 1, "generate": 4}  # loaded: neither generated nor compiled
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
    elif how == "not-an-entry":  # header and digest consistent, but the payload is not a matcher's entry
        import marshal

        payload = marshal.dumps(("not", "code", "here"))
        head = blob[: len(codecache.MAGIC) + 4 + 32]
        blob = head + codecache.digest(payload) + payload
    with open(path, "wb") as f:
        f.write(blob)


@pytest.mark.parametrize("how", ["flip-payload", "truncate", "empty", "garbage", "other-source", "other-python",
                                 "bad-magic", "not-an-entry"])
def test_damaged_entry_is_rebuilt(cache, how):
    d, counts = cache
    tag = 90100 + len(how)
    rs = _rules(tag)
    want = _results(rs)
    other = _rules(tag + 5000)
    other.matcher(Ops.ADD)
    path = _entry(rs, d)
    _damage(path, how, _entry(other, d))
    key = match.matcher_key(rs, Ops.ADD)
    assert key is not None and match_cache.valid(codecache.load(key)) is None  # not trusted
    _forget()
    n = counts["compile"]
    assert _results(_rules(tag)) == want  # generated again, and right
    assert counts["compile"] == n + 1
    assert match_cache.valid(codecache.load(key)) is not None  # and the file written anew
    _forget()
    assert _results(_rules(tag)) == want and counts["compile"] == n + 1  # which the next one loads


def _pair(k1: int, k2: int, name: str) -> RuleSet:
    """Two rules whose constants are given: one rule set shape for any k1, k2; its code names k1 and k2 once if
    they are one object, twice if not."""
    return RuleSet(name, [Rule("add-k", x + k1, x), Rule("add-k-twice", (x + k2) + y, x + y)])


@pytest.mark.parametrize("disk", [False, True])
def test_same_shape_other_objects(cache, disk):
    """Rule sets of one shape share code but not objects; code that names one object (5 in both rules) is not used
    where the live rules hold two (5 and 7), nor the other way round: each acts as its own rules say."""
    _, counts = cache
    shared, apart = _pair(5, 5, "cc-shared"), _pair(5, 7, "cc-apart")
    assert match.matcher_key(shared, Ops.ADD) == match.matcher_key(apart, Ops.ADD)
    for first, second in ((shared, apart), (apart, shared)):
        _forget()
        first.matcher(Ops.ADD)
        if disk:
            match._ENTRIES.clear()
        fresh = [_pair(5, 5, "cc-shared"), _pair(5, 7, "cc-apart")][second is apart]
        assert graph_rewrite(a + 5, fresh) is a
        assert graph_rewrite((a + 7) + b, fresh) is (a + b if second is apart else (a + 7) + b)
        assert graph_rewrite((a + 5) + b, fresh) is a + b
    other = _pair(6, 8, "cc-other")  # one shape, other values: the stored code with these objects
    _forget()
    apart.matcher(Ops.ADD)
    n = counts["generate"]
    assert graph_rewrite(a + 6, other) is a and graph_rewrite((a + 8) + b, other) is a + b
    assert graph_rewrite(a + 5, other) is a + 5
    assert counts["generate"] == n  # reused, not generated


def test_library_matchers_all_cacheable_and_consistent(monkeypatch):
    """Every matcher of the library's rule sets: its generated code names only objects of the shape walk (so it
    can be stored), and no two matchers with one key have different sources (the key holds all the generator
    reads)."""
    import rules.decompositions
    import rules.eqsat
    import rules.symbolic
    import rules.transcendental
    from rewrite.ops import Ops as AllOps

    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # nothing written
    sets = [rs for mod in (rules.symbolic, rules.eqsat, rules.decompositions, rules.transcendental)
            for rs in vars(mod).values() if isinstance(rs, RuleSet)]
    sets.append(rules.decompositions.decompositions_for(frozenset(), True))
    by_key: dict[bytes, str] = {}
    made = 0
    for rs in sets:
        for o in AllOps:
            chosen = match._chosen(rs, o)
            if not chosen:
                continue
            g = match._Gen()
            g.emit(0, "def _match(u, ctx):")
            for i, r in chosen:
                g.rule(i, r, o)
            shaped = match_cache.shape_key(chosen, o)
            assert shaped is not None
            assert match_cache.positions(g.globals, shaped[1]) is not None, (rs.name, o)
            src = "\n".join(g.lines)
            assert by_key.setdefault(shaped[0], src) == src, (rs.name, o)
            made += 1
    assert made > 50


def test_no_write_without_bytecode_writing(cache, monkeypatch):
    d, counts = cache
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    rs = _rules(90300)
    assert rs.matcher(Ops.ADD) is not None and counts["compile"] == 1 and not os.path.exists(_entry(rs, d))


def _generated(monkeypatch) -> list[int]:
    """A counter of the rules the generator writes from now on."""
    generated = [0]
    real_rule = match._Gen.rule

    def generating(self, *args, **kw):
        generated[0] += 1
        return real_rule(self, *args, **kw)

    monkeypatch.setattr(match._Gen, "rule", generating)
    return generated


def test_without_bytecode_writing_the_matchers_directory_keeps_them(tmp_path, monkeypatch):
    """PYTHONDONTWRITEBYTECODE (common in container images) keeps the package untouched, but the matchers still
    persist: they go to their own cache directory (~/.cache/uopc-matchers), not under CACHEDIR, where a later
    process finds them without generating them, even after the kernel cache (CACHEDIR) is cleared."""
    import shutil

    monkeypatch.setattr(codecache, "ROOT", None)
    monkeypatch.setattr(codecache, "_made", {})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MATCHERDIR", raising=False)
    monkeypatch.setenv("CACHEDIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    generated = _generated(monkeypatch)
    _forget()
    try:
        rs = _rules(90500)
        first = _results(rs)
        own = tmp_path / "home" / ".cache" / "uopc-matchers"
        assert codecache.default_dir() == str(own)
        beside = codecache._path(codecache._beside(), match.matcher_key(rs, Ops.ADD) or b"")
        assert os.path.exists(_entry(rs, own)) and not os.path.exists(beside)
        assert not (tmp_path / "cache" / "matchers").exists()
        made = generated[0]
        assert made > 0
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # the kernel cache cleared
        _forget()  # a new process
        assert _results(_rules(90500)) == first and generated[0] == made  # read back, not generated again
    finally:
        _forget()


def test_no_home_means_no_default_directory(tmp_path, monkeypatch):
    """Without a home directory the matchers' own directory is not `./~/.cache/...`: the kernel cache's is used."""
    monkeypatch.setattr(codecache, "ROOT", None)
    monkeypatch.setattr(codecache, "_made", {})
    monkeypatch.delenv("MATCHERDIR", raising=False)
    monkeypatch.setenv("CACHEDIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)  # as when neither HOME nor the password entry says
    assert codecache.default_dir() is None
    assert codecache._dir() == str(tmp_path / "cache" / "matchers")


@pytest.mark.parametrize("bytecode", [False, True])
def test_matcherdir_knob_names_the_directory(tmp_path, monkeypatch, bytecode):
    """MATCHERDIR is the one place read and written, whether or not bytecode writing is on; a corrupt file there
    is rebuilt as anywhere else."""
    monkeypatch.setattr(codecache, "ROOT", None)
    monkeypatch.setattr(codecache, "_made", {})
    monkeypatch.setenv("MATCHERDIR", str(tmp_path / "mine"))
    monkeypatch.setenv("CACHEDIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "dont_write_bytecode", not bytecode)
    generated = _generated(monkeypatch)
    _forget()
    try:
        assert codecache._dir() == str(tmp_path / "mine")
        tag = 90600 + bytecode
        rs = _rules(tag)
        want = _results(rs)
        path = _entry(rs, tmp_path / "mine")
        assert os.path.exists(path)
        assert not (tmp_path / "home").exists() and not (tmp_path / "cache" / "matchers").exists()
        made = generated[0]
        _forget()
        assert _results(_rules(tag)) == want and generated[0] == made  # a new process reads it back
        _damage(path, "truncate", path)
        _forget()
        assert _results(_rules(tag)) == want and generated[0] > made  # not trusted: generated again
        key = match.matcher_key(rs, Ops.ADD)
        assert key is not None and match_cache.valid(codecache.load(key)) is not None  # and written anew
    finally:
        _forget()


def test_unwritable_cache_dir_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(codecache, "ROOT", str(blocker / "matchers"))  # makedirs under a file fails
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(codecache, "_made", {})
    _forget()
    try:
        rs = _rules(90400)
        assert graph_rewrite(a + 0, rs) is a
    finally:
        _forget()


def test_default_place_is_beside_the_package_like_bytecode(monkeypatch, tmp_path):
    """With no override, the files go where Python would put the package's bytecode (or under
    sys.pycache_prefix), not under CACHEDIR, so a fresh CACHEDIR still finds them."""
    monkeypatch.setattr(codecache, "ROOT", None)
    monkeypatch.setattr(codecache, "_made", {})
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.delenv("MATCHERDIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CACHEDIR", str(tmp_path / "cachedir"))
    assert codecache._dir() == str(tmp_path / "prefix" / "uopc-matchers")
    monkeypatch.setattr(codecache, "_made", {})
    monkeypatch.setattr(sys, "pycache_prefix", None)
    beside = os.path.join(os.path.dirname(os.path.abspath(codecache.__file__)), "__pycache__", "uopc-matchers")
    # the matchers' own directory only where the package's directory cannot be written
    assert codecache._dir() == (beside if os.access(os.path.dirname(os.path.dirname(beside)), os.W_OK) else
                                str(tmp_path / "home" / ".cache" / "uopc-matchers"))


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


def test_rules_for_is_the_rules_whose_root_can_be_the_op():
    """RuleSet.rules_for (an index by root op) gives what filtering the rules in order gives, for every op of the
    library's rule sets, wildcard roots (any op) included."""
    import rules.decompositions
    import rules.symbolic
    from rewrite.ops import Ops as AllOps

    sets = [rs for mod in (rules.symbolic, rules.decompositions) for rs in vars(mod).values()
            if isinstance(rs, RuleSet)]
    sets.append(RuleSet("cc-wild", [Rule("mul-zero", x * 0, 0), Rule("any-node", var("u"), _never),
                                    Rule("add-zero", x + 0, x), Rule("any-node-again", var("u"), _never)]))
    checked = 0
    for rs in sets:
        for o in AllOps:
            assert rs.rules_for(o) == [(i, r) for i, r in enumerate(rs.rules) if r.lhs.ops is None or o in r.lhs.ops]
            checked += bool(rs.rules_for(o))
    assert checked > 20
