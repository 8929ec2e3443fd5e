"""conv2d's register tile on x86: on AVX2 (16 vector registers) the gated output columns are padded for a 6 x 2 tile
(lower.opt_tiles.SLACK_ACCUMULATORS) and the tile's row values are opaque broadcast loads (devices.c_bcast), so
the unrolled taps' step keeps its 12 accumulators, 2 column vectors and a broadcast in registers (all but one
vector); on AVX-512 the
exact 8 x 2 tile stays and its row values are plain splats. Numerics against numpy's float64 direct loop."""

from __future__ import annotations

import re

import numpy as np
import pytest

from devices import get_device
from devices.base import CPU_TARGET_NAMES, cpu_target, host_arch
from lower import optimize, schedule
from lower.optimize import OptOps
from lower.pipeline import lower_kernel
from rewrite.env import Context
from tensor import Tensor
from tests.devices.test_targets import _assembly
from tests.tensor.test_nn import conv_reference

pytestmark = pytest.mark.skipif(host_arch() != "x86_64", reason="x86 assembly")

_FMA = re.compile(r"\bvfmadd\w*ps\b")
_BCAST_MEM = re.compile(r"\bvbroadcastss\s+-?\w*\(")  # a broadcast straight from memory
_STACK = re.compile(r"\(%[re]sp[,)]|\(%[re]bp[,)]")


def _conv(level: str) -> tuple[str, list, object]:
    target = cpu_target(level)
    x, w = Tensor.empty(2, 16, 56, 56), Tensor.empty(32, 16, 3, 3)
    items, _ = schedule([x.conv2d(w, padding=1).uop])
    it = [i for i in items if i.kind == "kernel"][-1]
    opts = optimize.hand_coded(it.ast, target, threads=1)
    lin = lower_kernel(it.ast, target, opts=opts)
    return get_device("cpu").render(lin, it.name), opts, target


def _innermost_loops(asm: str) -> list[list[str]]:
    """The bodies of the loops (a label up to a jump back to it) that hold no other loop."""
    lines = asm.splitlines()
    at = {ln[:-1]: i for i, ln in enumerate(lines) if re.fullmatch(r"\.L\w+:", ln)}
    loops = [(at[m.group(1)], i) for i, ln in enumerate(lines)
             if (m := re.match(r"\s+j\w+\s+(\.L\w+)$", ln)) and m.group(1) in at and at[m.group(1)] < i]
    return [lines[a:b + 1] for a, b in loops if not any(a < c and d < b for c, d in loops if (c, d) != (a, b))]


@pytest.mark.skipif("x86-64-v3" not in CPU_TARGET_NAMES, reason="no x86-64-v3 target here")
def test_avx2_conv_tile_is_6x2_and_keeps_its_registers() -> None:
    src, opts, target = _conv("x86-64-v3")
    # the 56 gated output columns padded to 60 for 6-row tiles, their values broadcast straight from memory
    assert any(o.op is OptOps.PADTO and o.arg == (6, "repeat") for o in opts), opts
    assert "vbload_f32x8(&data1[" in src and "!defined(__AVX512F__)" in src
    # the interior's step, three taps unrolled: 36 FMAs, 18 broadcasts from memory, and at most one value moved
    # through the stack (gcc 12 -O2 parks one vector there: a store and one FMA reading it; with the taps'
    # broadcasts merged the same step made 22 stack accesses)
    full = [lp for lp in _innermost_loops(_assembly(src, target)) if sum(bool(_FMA.search(x)) for x in lp) == 36]
    clean = [lp for lp in full if sum(bool(_BCAST_MEM.search(x)) for x in lp) == 18
             and sum(bool(_STACK.search(x)) for x in lp) <= 2]
    assert clean, "\n\n".join("\n".join(lp) for lp in full)


@pytest.mark.skipif("x86-64-v4" not in CPU_TARGET_NAMES, reason="no x86-64-v4 target here")
def test_avx512_conv_tile_stays_exact_with_plain_splats() -> None:
    src, opts, _ = _conv("x86-64-v4")
    assert not any(o.op is OptOps.PADTO for o in opts), opts  # 8 x 2 over 56 columns: exact
    assert "vbload" not in src


@pytest.mark.parametrize("level", [lv for lv in ("x86-64-v3", "x86-64-v4") if lv in CPU_TARGET_NAMES])
@pytest.mark.parametrize("size", [(56, 56), (13, 20), (6, 7)])
def test_conv_with_padded_gated_rows_matches_numpy(level: str, size: tuple[int, int]) -> None:
    if not cpu_target(level).runs_here:
        pytest.skip(f"{level} does not run on this host")
    rng = np.random.default_rng(sum(size))
    x = rng.standard_normal((2, 8, *size)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    with Context(CPU_TARGET=level):
        got = Tensor(x).conv2d(Tensor(w), padding=1).numpy()
    want = conv_reference(x, w, (1, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_broadcast_loads_feed_only_fmas() -> None:
    """Each broadcast-loaded row value is read only as the multiplicand of the tile's FMAs, one per column vector
    (devices.c_bcast: a scalar that anything else reads stays a scalar load)."""
    src, _, _ = _conv("x86-64-v3")
    names = re.findall(r"f32x8 (val\d+) = vbload_f32x8", src)
    assert names
    for nm in names:
        reads = len(re.findall(rf"\b{nm}\b", src)) - 1
        assert reads == 2 and reads == src.count(f"vfma_f32x8({nm}, "), nm
