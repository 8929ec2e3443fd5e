"""Regression tests for wrong or failing results found by attacking the front end (issue 13): each program is
checked against numpy on the default cpu path, with NOOPT=1 and on the python reference device."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.env import Context
from tensor import Tensor

MODES = [pytest.param({}, id="cpu"), pytest.param({"NOOPT": 1}, id="noopt"), pytest.param({"DEVICE": "python"},
                                                                                        id="python")]


def run(build, knobs: dict) -> np.ndarray:  # noqa: ANN001
    with Context(**knobs):
        return build().numpy()


@pytest.mark.parametrize("knobs", MODES)
def test_padded_upcast_axis_with_lane_invariant_address(knobs: dict) -> None:
    """The pad's validity differs per upcast lane while the address does not (the padded axis has size 1): the
    load must be gated per lane (was a CompileError: the LOAD gate has shape (4,), the index ())."""
    a = np.arange(11 * 5, dtype=np.float32).reshape(11, 1, 5)
    c = np.ones((3, 4, 1), np.float32)
    got = run(lambda: Tensor(a)[0:11:5, :, 4:5].pad([(0, 0), (0, 2), (3, 0)]) @ Tensor(c), knobs)
    np.testing.assert_array_equal(got, np.pad(a[0:11:5, :, 4:5], [(0, 0), (0, 2), (3, 0)]) @ c)
