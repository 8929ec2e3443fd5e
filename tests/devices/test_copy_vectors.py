"""Kernels that only move data (matmul's packing copy into column panels, a bias added on the way into attention's
head layout) are vector code of the Target's full width at both compile tiers, compiled only (any x86-64 host with
gcc; the helpers and tunings of tests/devices/test_wide_vectors.py). lower.optimize upcasts their contiguous output
loop into lanes: as scalar loops gcc vectorized them at -O2 only (zmm on x86-64-v4) and at -Og, the fast tier's
level, not at all (one float per load and store: the packing copy ran 7x slower there). x86-64-v3 is checked at -Og
and, for the bias add, at -O2: under gcc's Zen 3 tuning a pure 32-byte copy is emitted as 16-byte moves whatever the
source says (its tuning of block copies), so the packing copy's -O2 code is not held to ymm."""

from __future__ import annotations

import pytest

from devices.base import host_arch
from devices.cpu import DEVICE as CPU
from tensor import Tensor
from tests.devices.test_wide_vectors import _assembly, _kernels, _rand, _target, check_wide

pytestmark = pytest.mark.skipif(host_arch() != "x86_64", reason="compiles x86-64 assembly with the host's gcc")


def _case(case: str) -> Tensor:
    if case == "pack":  # a (384, 384) weight into 12 panels of 32 columns, as matmul packs BERT's projections
        return _rand(384, 384).reshape(384, 12, 32).permute(1, 0, 2).contiguous()
    return (_rand(8, 128, 384) + _rand(384)).reshape(8, 128, 12, 32).permute(0, 2, 1, 3).contiguous()


@pytest.mark.parametrize(("level", "case", "tier"), [
    ("x86-64-v4", "pack", "opt"), ("x86-64-v4", "pack", "fast"), ("x86-64-v4", "bias_heads", "opt"),
    ("x86-64-v4", "bias_heads", "fast"), ("x86-64-v3", "pack", "fast"), ("x86-64-v3", "bias_heads", "opt"),
    ("x86-64-v3", "bias_heads", "fast")])
def test_data_movement_is_full_width(level: str, case: str, tier: str) -> None:
    target = _target(level)
    for name, lin in _kernels(_case(case), target):
        check_wide(_assembly(CPU.render(lin, name), target, tier), f"{case} kernel {name} {level} ({tier})",
                   width=target.vector_bytes)
