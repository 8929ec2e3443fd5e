"""MULACC on floats is a fused multiply-add (rewrite.semantics.fma): one rounding. An independent oracle (the
nearest of a candidate's neighbours to the exact value, ties to even), and the cases where two roundings differ."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from rewrite.dtype import dtypes
from rewrite.ops import Ops
from rewrite.semantics import exec_alu


def same(a: float, b: float) -> bool:
    return (a != a and b != b) or (a == b and math.copysign(1.0, a) == math.copysign(1.0, b))


def fused_oracle(npt: type, a: float, b: float, c: float) -> float:
    """a*b + c rounded once to npt, by searching the neighbours of a candidate for the nearest (ties to even);
    float16 is the float32 fused result rounded to float16, as rewrite.semantics defines it."""
    if npt is np.float16:
        return float(np.float16(fused_oracle(np.float32, a, b, c)))
    if math.isfinite(a) and math.isfinite(b) and not math.isfinite(c):
        return c
    if not all(math.isfinite(v) for v in (a, b, c)):
        with np.errstate(all="ignore"):
            return float(npt(npt(a) * npt(b)) + npt(c)) if npt is not np.float64 else a * b + c
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if not exact:
        return a * b + c if not (a * b) and not c else 0.0
    try:
        q = npt(float(exact))
    except OverflowError:
        return math.inf if exact > 0 else -math.inf
    if not np.isfinite(q):
        return float(q)
    cands = [q, np.nextafter(q, npt(np.inf)), np.nextafter(q, npt(-np.inf))]
    cands = [x for x in cands if np.isfinite(x)]
    ity = np.int32 if npt is np.float32 else np.int64
    best = min(cands, key=lambda x: (abs(Fraction(float(x)) - exact), int(np.array(x).view(ity)) & 1))
    return float(best)


# exact sums near float32 midpoints; for the ones marked True, rounding to float64 first lands exactly on the
# midpoint, so a float64-then-float32 evaluation rounds the wrong way: MULACC must round once
DOUBLE_ROUNDING_F32 = [(1.0 + 2.0**-12, 1.0 + 2.0**-12, 2.0**-60, True), (3.0, 1.0 + 2.0**-23, -(2.0**-80), True),
                       (1.0 + 2.0**-12, 1.0 + 2.0**-12, -(2.0**-60), False),
                       (1.0 - 2.0**-24, 1.0 + 2.0**-23, 2.0**-70, False)]


@pytest.mark.parametrize("a,b,c,twice_differs", DOUBLE_ROUNDING_F32)
def test_mulacc_rounds_once(a: float, b: float, c: float, twice_differs: bool) -> None:
    got = exec_alu(Ops.MULACC, dtypes.float32, a, b, c)
    assert same(got, fused_oracle(np.float32, a, b, c))
    twice = float(np.float32(float(Fraction(a) * Fraction(b) + Fraction(c))))
    assert (twice != got) == twice_differs
