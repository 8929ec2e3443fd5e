"""CPU BEAM starts from the hand-coded heuristics' opts as well as from none, so it never ends on a kernel slower
than the heuristics pick: a search of a few greedy rounds cannot reach a three-opt choice (conv_transpose2d's
input gradient: BEAM=2 kept one THREAD split and ran 8x slower than without BEAM). Timing is replaced by a fixed
cost per candidate here, so what is checked is the search's logic, not a machine's speed."""

from __future__ import annotations

import numpy as np
import pytest

import lower.search as search
from devices import get_device
from lower.optimize import Opt, hand_coded
from lower.schedule import schedule
from rewrite.env import Context
from tensor import Tensor


def _matmul():
    a = Tensor(np.ones((64, 64), np.float32)).contiguous()
    (item,) = [it for it in schedule([(a @ a).uop])[0] if it.kind == "kernel" and it.name.startswith("r_")]
    return item


def _costs(heur: list[Opt], heur_cost: float | Exception, seen: list[list[Opt]]):
    def fake(ast, bufs, target, opts, name, expect=None) -> float:
        seen.append(list(opts))
        if opts == heur:
            if isinstance(heur_cost, Exception):
                raise heur_cost
            return heur_cost
        return 1.0 if not opts else 0.5  # the unoptimized kernel, then any searched candidate
    return fake


def test_beam_keeps_the_heuristics_when_nothing_beats_them(monkeypatch: pytest.MonkeyPatch) -> None:
    item = _matmul()
    cpu = get_device("cpu")
    heur = hand_coded(item.ast, cpu.default_target())
    assert len(heur) >= 2  # a register tile and threads: more than one greedy round away from no opts
    seen: list[list[Opt]] = []
    monkeypatch.setattr(search, "time_candidate", _costs(heur, 0.1, seen))
    with Context(CACHE=0):
        got = search.beam_search(item.ast, item.bufs, cpu, 2, max_rounds=2, name="seeded")
    assert got == heur
    assert any(s[:len(heur)] == heur and len(s) > len(heur) for s in seen)  # the heuristics' opts were extended


def test_beam_takes_a_faster_candidate_over_the_heuristics(monkeypatch: pytest.MonkeyPatch) -> None:
    item = _matmul()
    cpu = get_device("cpu")
    heur = hand_coded(item.ast, cpu.default_target())
    monkeypatch.setattr(search, "time_candidate", _costs(heur, 0.9, []))
    with Context(CACHE=0):
        got = search.beam_search(item.ast, item.bufs, cpu, 2, max_rounds=1, name="seeded")
    # a candidate one opt past no opts or past the heuristics' (0.5) beat the heuristics' own (0.9)
    assert got != heur and (len(got) == 1 or (got[:len(heur)] == heur and len(got) == len(heur) + 1))


def test_beam_searches_on_when_the_heuristics_fail(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    item = _matmul()
    cpu = get_device("cpu")
    heur = hand_coded(item.ast, cpu.default_target())
    wrong = search.WrongResult("beam seeded: opts change the kernel's result")
    monkeypatch.setattr(search, "time_candidate", _costs(heur, wrong, []))
    with Context(CACHE=0):
        got = search.beam_search(item.ast, item.bufs, cpu, 2, max_rounds=1, name="seeded")
    assert got != heur and len(got) == 1
    assert "the heuristics' opts fail" in capsys.readouterr().err
