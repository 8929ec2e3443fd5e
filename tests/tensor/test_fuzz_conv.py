"""The program fuzzer's convolution and pooling nodes (tests/tensor/fuzz_conv.py): their numpy oracles against
torch, their presence in the CI windows of test_fuzz_programs.py, the programs without them left as they were,
and the 16-bit bound of a convolution."""

from __future__ import annotations

import collections
import dataclasses
import random
import re

import numpy as np
import pytest

from tests.tensor import fuzz_conv, fuzz_programs
from tests.tensor.fuzz_bounds import round_to
from tests.tensor.fuzz_programs import Input, Op, Program, eval_numpy, generate, mismatch
from tests.tensor.test_fuzz_programs import COUNTS, COUNTS_16, FIRST, FIRST_16

_METHODS = {
    "conv2d": "conv",
    "conv1d": "conv1d",
    "conv_transpose2d": "conv_transpose",
    "max_pool2d": "max_pool",
    "avg_pool2d": "avg_pool",
}


def _kinds(p: Program) -> list[str]:
    return [_METHODS[m] for op in p.ops for m in re.findall(r"\.(\w+)\(", op.tcode) if m in _METHODS]


def _torch_call(node: fuzz_conv.Node, x: np.ndarray, ws: list[np.ndarray]):
    """The node through torch.nn.functional (None where torch has no such form: (before, after) paddings, a
    dilated avg_pool)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    text = node.tcode.format("x", *[f"w{i}" for i in range(len(ws))])
    m = re.fullmatch(r"x(?:\.reshape(\([\d, ]+\)))?\.(\w+)\((.*)\)", text)
    assert m is not None, text
    shape, method, args = m.groups()
    xt = torch.tensor(x.reshape(eval(shape)) if shape else x)
    if "padding=[" in args:
        return None
    if method == "avg_pool2d":
        args, n = re.subn(r", dilation=(1|\(1,\)|\(1, 1\))", "", args)
        if n == 0:
            return None
    ns = xt.ndim - 2
    fn = {
        "conv2d": F.conv2d,
        "conv1d": F.conv1d,
        "conv_transpose2d": [F.conv_transpose1d, F.conv_transpose2d][ns - 1],
        "max_pool2d": [F.max_pool1d, F.max_pool2d][ns - 1],
        "avg_pool2d": [F.avg_pool1d, F.avg_pool2d][ns - 1],
    }
    env = {"f": fn[method], "x": xt, **{f"w{i}": torch.tensor(w) for i, w in enumerate(ws)}}
    return eval(f"f(x, {args})", env).numpy()


def test_oracles_agree_with_torch() -> None:
    """fuzz_conv's oracles (written from the definitions) give torch's values for drawn nodes of every kind, in
    every form torch takes (it has no (before, after) paddings and no dilated avg_pool2d)."""
    compared: collections.Counter[str] = collections.Counter()
    for seed in range(400):
        rng = random.Random(seed)
        shape = tuple(rng.choice([1, 2, 3, 5, 7]) for _ in range(rng.randint(1, 4)))
        node = fuzz_conv.draw(rng, shape, False, 1 << 14)
        if node is None:
            continue
        gen = np.random.default_rng(seed)
        x = gen.integers(-8, 9, shape) / 4
        ws = [gen.integers(-8, 9, s) / 4 for s in node.weights]
        with np.errstate(all="ignore"):
            want = eval(
                node.ncode.format("x", *[f"w{i}" for i in range(len(ws))]),
                {"np": np, "x": x, **{f"w{i}": w for i, w in enumerate(ws)}, **fuzz_conv.ORACLES},
            )
        got = _torch_call(node, x, ws)
        if got is None:
            continue
        np.testing.assert_allclose(want, got, rtol=1e-12, atol=1e-12, err_msg=node.tcode)
        compared[node.kind] += 1
    assert min(compared[k] for k in set(fuzz_conv.KINDS)) >= 12, compared


@pytest.mark.parametrize("half", [False, True])
def test_ci_windows_draw_convolutions(half: bool) -> None:
    """The CI windows' programs (test_fuzz_programs' seeds and counts) hold convolutions and pools of every kind,
    most of them on a value an earlier op computed (so they chain), and the cpu modes' windows a large one."""
    counts, first = (COUNTS_16, FIRST_16) if half else (COUNTS, FIRST)
    kinds: collections.Counter[str] = collections.Counter()
    programs = chained = big = 0
    for mode, n in counts.items():
        for seed in range(first[mode], first[mode] + n):
            p = generate(seed, gpu=mode == "gpu", half=half, widen=mode in ("cpu", "noopt", "v2"))
            ks = _kinds(p)
            kinds.update(ks)
            programs += bool(ks)
            for op in p.ops:
                if any(m in op.tcode for m in _METHODS):
                    chained += op.args[0] >= len(p.inputs)
                    big += any(len(inp.data) >= 512 for inp in p.inputs[op.args[0] : op.args[0] + 1])
    total = sum(counts.values())
    assert programs >= 0.07 * total and min(kinds[k] for k in set(fuzz_conv.KINDS)) >= (2 if half else 8), kinds
    assert chained >= 0.5 * sum(kinds.values()) and big >= 3, (chained, big)


def test_programs_without_a_conv_phase_are_unchanged() -> None:
    """The conv phase draws from its own stream after the other ops: a program without one is the program the
    generator made before convolutions existed (P_CONV = 0), and one with it starts with that program (its inputs,
    then its ops with the new inputs numbered in)."""
    phases = 0
    for seed in range(120):
        for kw in ({}, {"half": True, "widen": True}, {"gpu": True}):
            new = generate(seed, **kw)
            saved = fuzz_programs.P_CONV
            fuzz_programs.P_CONV = 0.0
            try:
                old = generate(seed, **kw)
            finally:
                fuzz_programs.P_CONV = saved
            n, k = len(old.inputs), len(new.inputs) - len(old.inputs)
            shifted = tuple(dataclasses.replace(o, args=tuple(a + k if a >= n else a for a in o.args)) for o in old.ops)
            assert new.inputs[:n] == old.inputs and new.ops[: len(old.ops)] == shifted, (seed, kw)
            phases += new != old
            assert new == old or random.Random(f"conv-{seed}").random() < fuzz_programs.P_CONV, (seed, kw)
    assert 0.04 * 360 <= phases <= 0.16 * 360, phases


@pytest.mark.parametrize("fdt", ["float16", "bfloat16"])
def test_16_bit_oracle_fails_a_conv_summed_in_16_bits(fdt: str) -> None:
    """The conv bound is tight: a 3x3 conv over 32 channels (288 taps) summed in its 16-bit dtype fails, the same
    products summed in float32 and rounded once pass (and so does the float32 sum in another order)."""
    gen = np.random.default_rng(1)
    x, w = gen.integers(-16, 17, (1, 32, 6, 6)) / 4, gen.integers(-8, 9, (4, 32, 3, 3)) / 4
    op = Op(
        "{0}.conv2d({1}, None, stride=1, padding=1, dilation=1, groups=1)",
        "np_conv({0}, {1}, None, [1, 1], [(1, 1), (1, 1)], [1, 1], 1)",
        (0, 1),
        "conv",
    )
    p = Program(
        0,
        fdt,
        (Input(x.shape, "float", tuple(x.ravel().tolist())), Input(w.shape, "float", tuple(w.ravel().tolist()))),
        (op,),
    )
    rnd = round_to
    want = eval_numpy(p)
    x, w = rnd(x, fdt), rnd(w, fdt)
    terms = [
        np.einsum(
            "nchw,oc->nohw",
            np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])[:, c : c + 1, i : i + 6, j : j + 6],
            w[:, c : c + 1, i, j],
        )
        for c in range(32)
        for i in range(3)
        for j in range(3)
    ]
    f32 = np.zeros(want.shape, np.float32)
    for t in reversed(terms):
        f32 += t.astype(np.float32)
    acc = np.zeros(want.shape)
    for t in terms:
        acc = rnd(acc + t, fdt)
    got16 = acc.astype(np.float16) if fdt == "float16" else acc.astype(np.float32)
    good = rnd(f32.astype(np.float64), fdt)
    assert mismatch(p, good.astype(np.float16) if fdt == "float16" else good.astype(np.float32)) is None
    assert (why := mismatch(p, got16)) is not None and "error bound" in why, why


def test_conv_repro_runs_standalone() -> None:
    """A conv program's printed repro holds the oracles' definitions: it runs alone and gives the oracle's value."""
    p = next(q for q in (generate(s) for s in range(200)) if {"conv", "conv_transpose", "avg_pool"} & set(_kinds(q)))
    env: dict = {}
    exec(p.repro().replace("print(got, want, sep='\\n')", ""), env)
    assert mismatch(p, env["got"]) is None
    np.testing.assert_array_equal(env["want"], eval_numpy(p))
