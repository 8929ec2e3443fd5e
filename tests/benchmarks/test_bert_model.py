"""The model suite's BERT forward: ours, on a small configuration, against the numpy float64 forward, so the
benchmark's model code cannot rot; and the numpy float32 forward (the suite's peer) against the same."""

from __future__ import annotations

import numpy as np

from benchmarks import bench_model
from benchmarks.bert_model import BertConfig, check, forward_numpy, forward_ours, weights

SMALL = BertConfig(layers=2, hidden=32, heads=4, inter=64, vocab=40, max_pos=16, batch=2, seq=8)


def test_ours_matches_numpy_float64() -> None:
    from tensor import Tensor

    w = weights(SMALL)
    ref = forward_numpy(SMALL, w, np.float64)
    got = forward_ours(SMALL, {k: Tensor(v) for k, v in w.items()}).numpy()
    assert got.shape == (SMALL.batch, SMALL.seq, SMALL.hidden)
    ok, err = check(got, ref)
    assert ok, err
    # the rows differ (the embedding lookup picked different tokens), so a broadcast bug would show
    assert not np.allclose(got[0, 0], got[0, 1])


def test_numpy_float32_peer_matches_reference() -> None:
    w = weights(SMALL)
    assert check(forward_numpy(SMALL, w), forward_numpy(SMALL, w, np.float64))[0]


def test_cold_worker_reports_its_parts() -> None:
    cfg = BertConfig(layers=1, hidden=16, heads=2, inter=32, vocab=20, max_pos=8, batch=1, seq=4)
    res, arr, err = bench_model.run_worker(cfg, timeout=600)
    assert res is not None, err
    assert res["first_s"] > 0 and res["kernels"] > 0 and res["lowered"] > 0
    assert res["parts"]["lower"] > 0 and res["parts"]["compile"] > 0
    assert arr is not None and check(arr, forward_numpy(cfg, weights(cfg), np.float64))[0]
