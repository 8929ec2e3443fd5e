"""BEAM's on-disk cache (beam.json) under attack: valid JSON that is not an object, garbage, entries that do not
parse or no longer apply, an unwritable directory. Each is searched again (and the file repaired), and the kernel
still computes the right answer."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from devices import get_device
from lower.optimize import Opt, OptOps, apply_opts
from lower.schedule import schedule
from lower.search import _cached_opts, _opt_from_json, _opt_to_json, beam_search
from lower.stages import lower_kernel
from rewrite import AxisType
from rewrite.env import Context
from tensor import Tensor


def _kernel():
    a = Tensor(np.arange(8, dtype=np.float32))
    (item,) = [it for it in schedule([(a * 2 + 1).uop])[0] if it.kind == "kernel"]
    return item


def _run(item, opts) -> np.ndarray:
    dev = get_device("cpu")
    k = dev.compile(lower_kernel(item.ast, dev, opts=opts), "beamtest")
    bufs = {0: np.zeros(8, np.float32), 1: np.arange(8, dtype=np.float32)}
    k(bufs)
    return bufs[0]


def _search(tmp_path, item):
    with Context(CACHEDIR=str(tmp_path), CACHE=1):
        return beam_search(item.ast, item.bufs, get_device("cpu"), 1, max_rounds=1, name="beamtest")


@pytest.mark.parametrize("content", ["[1, 2, 3]", "null", "42", '"text"', "{garbage", "", '{"k": 5}'])
def test_beam_cache_file_that_is_not_an_object_is_rebuilt(tmp_path, content):
    item = _kernel()
    (tmp_path / "beam.json").write_text(content)
    opts = _search(tmp_path, item)
    np.testing.assert_array_equal(_run(item, opts), np.arange(8, dtype=np.float32) * 2 + 1)
    d = json.loads((tmp_path / "beam.json").read_text())
    assert isinstance(d, dict) and len([k for k in d if k != "k"]) == 1


@pytest.mark.parametrize("entry", [[["NOPE", 0, [2, {"axis": "UPCAST"}, False]]],
                                   [["SPLIT", 99, [2, {"axis": "UPCAST"}, False]]],
                                   [["SPLIT", 0, [3, {"axis": "UPCAST"}, False]]],
                                   [["SPLIT", 0, [2, {"axis": "NOPE"}, False]]], [["SPLIT", 0, [2, "UPCAST"]]],
                                   [["SPLIT", 0, [2, {"kind": "UPCAST"}, False]]],
                                   [["SPLIT", 0, 2, "UPCAST", False]],  # the format before TC opts were cached
                                   [[1, 2]], ["x"], [None]])
def test_beam_cache_entry_that_does_not_apply_is_searched_again(tmp_path, entry):
    item = _kernel()
    _search(tmp_path, item)
    d = json.loads((tmp_path / "beam.json").read_text())
    (key,) = d
    d[key] = entry
    (tmp_path / "beam.json").write_text(json.dumps(d))
    opts = _search(tmp_path, item)
    apply_opts(item.ast, opts)  # a fresh search's result (timing decides which), which applies
    np.testing.assert_array_equal(_run(item, opts), np.arange(8, dtype=np.float32) * 2 + 1)
    assert json.loads((tmp_path / "beam.json").read_text())[key] == [_opt_to_json(o) for o in opts]


def test_beam_with_an_unwritable_cache_dir(tmp_path):
    item = _kernel()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with Context(CACHEDIR=str(blocker / "sub"), CACHE=1):
        opts = beam_search(item.ast, item.bufs, get_device("cpu"), 1, max_rounds=1, name="beamtest")
    np.testing.assert_array_equal(_run(item, opts), np.arange(8, dtype=np.float32) * 2 + 1)
    assert not [n for n in os.listdir(tmp_path) if n != "file"]


def test_every_opt_form_round_trips_through_the_cache_format() -> None:
    """GPU BEAM results hold TC opts (a 7-tuple arg), the heuristics PADTO and NOLOCALS: each is written and read
    back equal (the H100 run's BEAM over matmul 4096 fp16 failed writing its TC result in the SPLIT-only format)."""
    opts = [Opt(OptOps.TC, None, ("16x8x16 half->float", 4, 4, 2, 4, 64, 3)),
            Opt(OptOps.TC, None, "16x8x16 half->float"),
            Opt(OptOps.SPLIT, 1, (4, AxisType.UPCAST, False)), Opt(OptOps.SPLIT, 0, (256, AxisType.GROUP_REDUCE, True)),
            Opt(OptOps.PADTO, 2, (128, "repeat")), Opt(OptOps.NOLOCALS)]
    back = [_opt_from_json(j) for j in json.loads(json.dumps([_opt_to_json(o) for o in opts]))]
    assert back == opts


def test_gpu_opts_round_trip_through_the_cache() -> None:
    """A GPU search's result (PADTO, TC, SIMT opts, not only SPLITs) is written and read back as it was, and a
    cached SIMT opt is checked against the kernel with the GPU's lowering (apply_opt refuses it)."""
    from devices.base import gpu_target

    opts = [Opt(OptOps.PADTO, 0, 128), Opt(OptOps.SPLIT, 1, (16, AxisType.LOCAL, False)),
            Opt(OptOps.TC, None, ("16x8x16 half->float", 4, 4, 2, 4, 32, 3)),
            Opt(OptOps.SIMT, None, (8, 8, 16, 16, 16))]
    assert [_opt_from_json(json.loads(json.dumps(_opt_to_json(o)))) for o in opts] == opts
    a = Tensor(np.zeros((64, 64), np.float32), device="python").contiguous()
    (item,) = [it for it in schedule([(a @ a).uop])[0] if it.kind == "kernel" and it.name.startswith("r_")]
    hit = [_opt_to_json(Opt(OptOps.SIMT, None, (4, 4, 16, 16, 16)))]
    assert _cached_opts(item.ast, hit, gpu_target("sm_90")) == [Opt(OptOps.SIMT, None, (4, 4, 16, 16, 16))]
    assert _cached_opts(item.ast, [_opt_to_json(Opt(OptOps.SIMT, None, (4, 4, 16, 16, 12)))], gpu_target()) is None
