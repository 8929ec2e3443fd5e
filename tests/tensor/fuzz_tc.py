"""A seeded differential fuzzer of tensor-core matmuls (issue 12): random half, bfloat16 and (on tf32 tensor cores)
float32 matmuls with random shapes, operand layouts, prologues and epilogues, lowered for a GPU target and run by
the python device's grid emulator, against an exact numpy oracle.

A case is one matmul `A @ B`, A of shape (*batch, m, k) and B of (*batch, k, n) or (k, n) shared by the batch:
- sizes that are multiples of the mma tiles, ragged ones of 64 or more (the staged forms' edge tiles gated) or
  small odd ones (the direct form padded to whole mma tiles where half its work stays real, else no tensor
  cores), at most `max_macs` multiply-adds (the emulator runs every thread);
- each operand stored as its logical shape, transposed (a Linear's weight), as a window of a larger buffer
  (offset and, for A, a step of 2), zero-padded along k from a shorter buffer, or in float32 and cast in the graph;
  then maybe scaled, negated, rectified or added to another operand, all exact;
- then an epilogue of up to three of: a bias over n, relu, a halving, a residual, a cast to float32, a transpose
  made contiguous, a sum over n.

Values are multiples of 1/4 in [-2, 2]: every product and every sum of up to 2^12 of them is exact in float32 (the
tensor cores' accumulator) and in bfloat16 or tf32 inputs, so the oracle is exact: the float64 result of each op
rounded to the case's dtype (float16, or bfloat16 to nearest even), as the graph rounds it. Any difference is a
wrong element, not a rounding: the check allows none.

Modes (the knobs of `MODES`): "sm_90" (mma.sync m16n8k16 and the cp.async pipelines of 128-wide tiles), "sm_80",
"wgmma" (WGMMA=1: Hopper's warpgroup MMA where its tiles fit), "tma" (with TMA=1: the tiles copied by the tensor
memory accelerator where k allows 64-wide steps), "tf32" (float32 cases, ALLOW_TF32=1), "simt" (the same float32
cases without tf32: the staged SIMT form of lower.simt_smem where both output extents reach 64, CUDA-core FMAs
elsewhere) and "cpu" (the same half and bfloat16 cases on the cpu device). The conv modes ("conv": sm_90,
"conv_tf32", "conv_cpu") draw a convolution in place of the matmul: 1 or 2 spatial axes, kernel 1, 3 or 5,
stride, padding, dilation and groups, 70% of them with 64 or more rows (n x the output positions) and output
channels, the sizes the staged forms take; its oracle is `conv` (float64, exact for these values). `fuzz` also
counts the cases' kernels by form (`kernel_forms`), so a test can check that the cases reach what it means to test.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections import Counter
from collections.abc import Callable

import numpy as np

from rewrite.env import Context
from tensor import Tensor

# (m and n, k) pools: tile multiples, ragged sizes of 64 or more (the staged forms gate the edge tiles) and small
# odd ones (the direct form padded, lower.wmma.apply_tc, or no tensor cores: the fallback is checked too)
ALIGNED = ((16, 32, 48, 64, 80, 96, 128, 144, 192, 256), (16, 32, 48, 64, 96, 128, 256, 320))
RAGGED = ((64, 72, 100, 136, 200), (17, 24, 40, 100, 136, 256))
ODD = ((8, 17, 24, 33), (8, 17, 24, 33))
MAX_MACS = 1 << 20
SIMT_TILE = 512  # a LOCAL buffer this large is a staged operand tile (a block's reductions share 32 slots at most)
_TMP = 1000  # the lines' values are numbered from here while a case is drawn, then renumbered after the inputs
GPU = {"DEVICE": "python"}
MODES: dict[str, dict] = {
    "sm_90": {**GPU, "PYTHON_TARGET": "sm_90"},
    "sm_80": {**GPU, "PYTHON_TARGET": "sm_80"},
    "wgmma": {**GPU, "PYTHON_TARGET": "sm_90", "WGMMA": 1},
    "tma": {**GPU, "PYTHON_TARGET": "sm_90", "WGMMA": 1, "TMA": 1},
    "tf32": {**GPU, "PYTHON_TARGET": "sm_90", "ALLOW_TF32": 1},
    "simt": {**GPU, "PYTHON_TARGET": "sm_90"},
    "cpu": {"DEVICE": "cpu"},
    # convolutions (lower.wmma.tc_flatten makes their reduce ranges, and rows, one matmul for the tensor cores)
    "conv": {**GPU, "PYTHON_TARGET": "sm_90"},
    "conv_tf32": {**GPU, "PYTHON_TARGET": "sm_90", "ALLOW_TF32": 1},
    "conv_cpu": {"DEVICE": "cpu"},
}


@dataclasses.dataclass(frozen=True)
class Stored:
    """An input buffer: `dtype` "dt" (the case's dtype) or "float32", its shape and flat values."""

    dtype: str
    shape: tuple[int, ...]
    data: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Case:
    seed: int
    dt: str  # float16, bfloat16 or float32
    inputs: tuple[Stored, ...]  # v0 .. v{n-1}
    lines: tuple[tuple[str, str], ...]  # (Tensor code, numpy code) of v{n}, v{n+1}, ...; the last is the result
    macs: int

    def code(self, kind: str) -> list[str]:
        n = len(self.inputs)
        return [f"v{n + i} = {t if kind == 't' else o}" for i, (t, o) in enumerate(self.lines)]

    def repro(self, knobs: str) -> str:
        """Standalone Python running the case with uopc inside `Context(knobs)`, and its exact oracle."""
        head = ["import numpy as np", "from rewrite.env import Context", "from tensor import Tensor",
                f"DT = '{self.dt}'", _RNE_SRC]
        for i, s in enumerate(self.inputs):
            head.append(f"a{i} = np.array({list(s.data)!r}, np.float32).reshape({s.shape})")
        t = [f"    v{i} = stored(a{i}, '{s.dtype}')" for i, s in enumerate(self.inputs)] + \
            ["    " + line for line in self.code("t")]
        o = [f"v{i} = a{i}.astype(np.float64)" for i in range(len(self.inputs))] + self.code("n")
        last = f"v{len(self.inputs) + len(self.lines) - 1}"
        return "\n".join([*head, f"with Context({knobs}):", *t, f"    got = {last}.numpy()", "# the exact oracle",
                          *o, f"want = {last}", "print(np.argwhere(got != want)[:10], got.shape)"])


_RNE_SRC = '''def R(x):
    """x rounded to DT as the graph rounds it (float16, bfloat16 to nearest even, float32)."""
    if DT == "float16":
        return np.asarray(x).astype(np.float16).astype(np.float64)
    f = np.asarray(x).astype(np.float32)
    if DT == "bfloat16":
        u = f.view(np.uint32)
        f = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)
    return f.astype(np.float64)


def conv(x, w, stride, padding, dilation, groups):
    """torch's convolution (cross-correlation) of x (N, Cin, *spatial) with w (Cout, Cin/groups, *kernel), in
    float64: exact for these values."""
    nd = w.ndim - 2
    x = np.pad(x, [(0, 0), (0, 0)] + [(padding, padding)] * nd)
    cig, cog, ks = w.shape[1], w.shape[0] // groups, w.shape[2:]
    outs = [(x.shape[2 + d] - dilation * (ks[d] - 1) - 1) // stride + 1 for d in range(nd)]
    out = np.zeros((x.shape[0], w.shape[0], *outs))
    for g in range(groups):
        for at in np.ndindex(*ks):
            win = (slice(None), slice(g * cig, (g + 1) * cig)) + tuple(
                slice(a * dilation, a * dilation + stride * (o - 1) + 1, stride) for a, o in zip(at, outs))
            wk = w[(slice(g * cog, (g + 1) * cog), slice(None)) + at]
            out[:, g * cog:(g + 1) * cog] += np.moveaxis(np.tensordot(x[win], wk, axes=([1], [1])), -1, 1)
    return out


def stored(a, dtype):
    """The input buffer: float32, or the case's dtype realized (so the matmul loads it, as a model's weight)."""
    return Tensor(a) if dtype == "float32" else Tensor(a).cast(DT).realize()'''


def _env(dt: str) -> dict:
    """The namespace a case's code runs in: numpy, Tensor, DT and the R and stored of _RNE_SRC for that DT."""
    env = {"np": np, "Tensor": Tensor, "DT": dt}
    exec(_RNE_SRC, env)
    return env


def _values(rng: random.Random, count: int) -> tuple[float, ...]:
    return tuple(rng.randint(-8, 8) / 4 for _ in range(count))


def _operand(rng: random.Random, name: str, batch: tuple[int, ...], rows: int, cols: int, kdim: int,
             inputs: list[Stored], lines: list[tuple[str, str]], cast_ok: bool, plain: bool) -> str:
    """Make the operand of logical shape (*batch, rows, cols) (k is axis `kdim`: -1 for A, -2 for B) from a new
    input; returns the name of the value holding it. `plain`: mostly a buffer loaded as it is (what cp.async, and
    so wgmma and the TMA, copy)."""
    nb = len(batch)
    how = "plain" if plain and rng.random() < 0.85 else \
        rng.choice(["plain", "plain", "T", "T", "window", "pad", "cast"] if cast_ok else
                   ["plain", "plain", "T", "T", "window", "pad"])

    def add(shape: tuple[int, ...], dtype: str = "dt") -> str:
        inputs.append(Stored(dtype, shape, _values(rng, int(np.prod(shape)))))
        return f"v{len(inputs) - 1}"

    def line(t: str, o: str) -> str:
        lines.append((t, o))
        return f"v{_TMP + len(lines) - 1}"

    if how == "T":
        new = add((*batch, cols, rows))
        order = (*range(nb), nb + 1, nb)
        cur = line(f"{new}.permute({order})", f"{new}.transpose({order})")
    elif how == "window":
        step = 2 if name == "A" and rng.random() < 0.5 else 1
        new = add((*batch, rows * step + 2, cols + 3))
        sl = ", ".join([":"] * nb + [f"1:{1 + rows * step}:{step}", f"2:{2 + cols}"])
        cur = line(f"{new}[{sl}]", f"{new}[{sl}]")
    elif how == "pad":
        short = max(1, (cols if kdim == -1 else rows) - rng.randint(1, 9))
        shape = (*batch, rows, short) if kdim == -1 else (*batch, short, cols)
        new = add(shape)
        before = rng.randint(0, (cols if kdim == -1 else rows) - short)
        after = (cols if kdim == -1 else rows) - short - before
        pads = [(0, 0)] * nb + ([(0, 0), (before, after)] if kdim == -1 else [(before, after), (0, 0)])
        cur = line(f"{new}.pad({tuple(pads)})", f"np.pad({new}, {pads})")
    elif how == "cast":
        new = add((*batch, rows, cols), "float32")
        cur = line(f"{new}.cast(DT)", f"R({new})")
    else:
        cur = add((*batch, rows, cols))
    r = rng.random() + (0.6 if plain else 0)
    if r < 0.1:
        cur = line(f"{cur} * 2", f"R({cur} * 2)")
    elif r < 0.2:
        cur = line(f"-{cur}", f"-{cur}")
    elif r < 0.3:
        cur = line(f"{cur}.relu()", f"np.maximum({cur}, 0)")
    elif r < 0.4:
        other = add((*batch, rows, cols))
        cur = line(f"{cur} + {other}", f"R({cur} + {other})")
    return cur


def _conv_core(rng: random.Random, dt: str, max_macs: int, inputs: list[Stored],
               lines: list[tuple[str, str]]) -> tuple[int, tuple[int, ...]]:
    """Draw a convolution (1 or 2 spatial axes, kernel, stride, padding, dilation, groups) as the case's core line;
    (its multiply-adds, its output shape). The input is stored in the case's dtype or cast from float32 in the
    graph, maybe rectified first; the weight is stored as it is."""
    big = rng.random() < 0.7  # sizes the staged tensor-core forms take: 64 or more rows and output channels
    for _ in range(1000):
        nd = rng.choice([1, 2, 2, 2])
        groups = rng.choice([1, 1, 1, 2] if big else [1, 1, 2, 3])
        cig = rng.choice([1, 3, 8, 16, 16, 24, 32, 64])
        cog = rng.choice([64, 64, 72, 96, 128] if big else [8, 16, 24, 32, 48, 64])
        n, ks = rng.choice([1, 1, 2, 3]), tuple(rng.choice([1, 3, 3, 5]) for _ in range(nd))
        stride, dilation = rng.choice([1, 1, 1, 2]), rng.choice([1, 1, 1, 2])
        padding = rng.choice([0, max(ks) // 2, max(ks) // 2, 1])
        spatial = tuple(rng.randint(max(dilation * (k - 1) + 1 - 2 * padding, 1), 20 if nd == 2 else 90) for k in ks)
        outs = [(i + 2 * padding - dilation * (k - 1) - 1) // stride + 1 for i, k in zip(spatial, ks, strict=True)]
        macs = n * cog * groups * int(np.prod(outs)) * cig * int(np.prod(ks))
        if min(outs) >= 1 and macs <= max_macs and (not big or n * int(np.prod(outs)) >= 64):
            break
    else:
        raise ValueError(f"fuzz_tc: no convolution of at most {max_macs} multiply-adds")
    shape_x, shape_w = (n, cig * groups, *spatial), (cog * groups, cig, *ks)
    x = f"v{len(inputs)}"
    if dt != "float32" and rng.random() < 0.25:
        inputs.append(Stored("float32", shape_x, _values(rng, int(np.prod(shape_x)))))
        lines.append((f"{x}.cast(DT)", f"R({x})"))
        x = f"v{_TMP + len(lines) - 1}"
    else:
        inputs.append(Stored("dt", shape_x, _values(rng, int(np.prod(shape_x)))))
    if rng.random() < 0.2:
        lines.append((f"{x}.relu()", f"np.maximum({x}, 0)"))
        x = f"v{_TMP + len(lines) - 1}"
    w = f"v{len(inputs)}"
    inputs.append(Stored("dt", shape_w, _values(rng, int(np.prod(shape_w)))))
    args = f"stride={stride}, padding={padding}, dilation={dilation}, groups={groups}"
    lines.append((f"{x}.conv2d({w}, {args})", f"R(conv({x}, {w}, {stride}, {padding}, {dilation}, {groups}))"))
    return macs, (n, cog * groups, *outs)


def generate(seed: int, mode: str, max_macs: int = MAX_MACS) -> Case:
    """The case of `seed` for `mode` (the wgmma modes draw tiles big enough for a warpgroup more often, the simt
    mode big enough for the staged SIMT form, the conv modes a convolution instead of a matmul)."""
    rng = random.Random(seed)
    dt = "float32" if mode in ("tf32", "conv_tf32", "simt") else rng.choice(["float16", "bfloat16"])
    inputs: list[Stored] = []
    lines: list[tuple[str, str]] = []
    if mode.startswith("conv"):
        macs, shape = _conv_core(rng, dt, max_macs, inputs, lines)
        return _epilogue(rng, seed, dt, inputs, lines, macs, shape)
    big = mode in ("wgmma", "tma", "simt") and rng.random() < 0.7
    r = rng.random()
    mn, ks = ALIGNED if r < 0.65 else RAGGED if r < 0.9 else ODD
    for tries in range(1000):
        if tries == 100:  # max_macs too small for this pool's sizes (or a warpgroup's): the small odd sizes
            mn, ks, big = ODD[0], ODD[1], False
        batch = rng.choice([(), (), (), (2,), (3,)])
        m, n, k = rng.choice(mn), rng.choice(mn), rng.choice(ks)
        if big:  # a warpgroup's tile, 8-element chunks along k and B's columns (what cp.async copies), and for
            # the TMA k of 256 or more (its 64-wide k steps); for SIMT the staged form's 64 x 64 and k of 32
            m, n = max(m, 64), max(-(-n // 8) * 8, 64)
            k = max(-(-k // 8) * 8, 256 if mode == "tma" else 32 if mode == "simt" else 16)
        macs = int(np.prod(batch, dtype=np.int64)) * m * n * k
        if macs <= max_macs:
            break
    else:
        raise ValueError(f"fuzz_tc.generate: no case of at most {max_macs} multiply-adds (the least is 512)")
    shared_b = bool(batch) and rng.random() < 0.5
    # the lines are numbered from _TMP while drawing (inputs are still being added), then renumbered
    plain = big or rng.random() < 0.4  # both operands mostly plain buffers: the cp.async pipelines' cases
    a = _operand(rng, "A", batch, m, k, -1, inputs, lines, dt != "float32", plain)
    b = _operand(rng, "B", () if shared_b else batch, k, n, -2, inputs, lines, dt != "float32", plain)
    lines.append((f"{a} @ {b}", f"R({a} @ {b})"))
    return _epilogue(rng, seed, dt, inputs, lines, macs, (*batch, m, n))


def _epilogue(rng: random.Random, seed: int, dt: str, inputs: list[Stored], lines: list[tuple[str, str]], macs: int,
              shape: tuple[int, ...]) -> Case:
    """The case: the core's lines (the last one's value of `shape`) and an epilogue of up to three ops."""
    out = f"v{_TMP + len(lines) - 1}"
    rounded = True
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        r = rng.random()
        rnd = "R" if rounded else ""  # the oracle rounds each op's result while the value is in the case's dtype
        if r < 0.2:
            bias = f"v{len(inputs)}"
            inputs.append(Stored("dt", shape[-1:], _values(rng, shape[-1])))
            lines.append((f"{out} + {bias}", f"{rnd}({out} + {bias})"))
        elif r < 0.35:
            lines.append((f"{out}.relu()", f"np.maximum({out}, 0)"))
        elif r < 0.45:
            lines.append((f"{out} * 0.5", f"{rnd}({out} * 0.5)"))
        elif r < 0.6:
            res = f"v{len(inputs)}"
            inputs.append(Stored("dt", shape, _values(rng, int(np.prod(shape)))))
            lines.append((f"{out} - {res}", f"{rnd}({out} - {res})"))
        elif r < 0.7 and rounded:
            lines.append((f"{out}.float()", f"{out}"))
            rounded = False
        elif r < 0.85 and len(shape) >= 2:
            order = (*range(len(shape) - 2), len(shape) - 1, len(shape) - 2)
            lines.append((f"{out}.permute({order}).contiguous()", f"{out}.transpose({order})"))
            shape = (*shape[:-2], shape[-1], shape[-2])
        elif len(shape) >= 2:
            lines.append((f"{out}.sum(-1)", f"{rnd}({out}.sum(-1))"))
            shape = shape[:-1]
        out = f"v{_TMP + len(lines) - 1}"
    # renumber: the lines' values follow the inputs
    base = len(inputs)
    renum = []
    for t, o in lines:
        for j in range(len(lines) - 1, -1, -1):
            t, o = t.replace(f"v{_TMP + j}", f"v{base + j}"), o.replace(f"v{_TMP + j}", f"v{base + j}")
        renum.append((t, o))
    return Case(seed, dt, tuple(inputs), tuple(renum), macs)


# ---------------------------------------------------------------- running


def _build(c: Case) -> Tensor:
    env = _env(c.dt)
    for i, s in enumerate(c.inputs):
        env[f"v{i}"] = env["stored"](np.array(s.data, np.float32).reshape(s.shape), s.dtype)
    exec("\n".join(c.code("t")), env)
    return env[f"v{len(c.inputs) + len(c.lines) - 1}"]


def oracle(c: Case) -> np.ndarray:
    env = _env(c.dt)
    for i, s in enumerate(c.inputs):
        env[f"v{i}"] = np.array(s.data, np.float64).reshape(s.shape)
    exec("\n".join(c.code("n")), env)
    return np.asarray(env[f"v{len(c.inputs) + len(c.lines) - 1}"])


def mismatch(c: Case, got: np.ndarray) -> str | None:
    want = oracle(c)
    if got.shape != want.shape:
        return f"shape {got.shape}, want {want.shape}"
    bad = np.argwhere(got.astype(np.float64) != want)
    if len(bad):
        i = tuple(bad[0])
        return f"{len(bad)} of {want.size} elements differ; at {i}: {got[i]!r}, want {want[i]!r}"
    return None


def run_one(c: Case, mode: str) -> str | None:
    try:
        with Context(**MODES[mode]):
            got = _build(c).numpy()
    except Exception as e:
        return f"raised {type(e).__name__}: {e}"
    return mismatch(c, got)


def run_batch(cases: list[Case], mode: str, forms: Counter | None = None) -> list[tuple[Case, str]]:
    """Realize the cases' results together (one schedule, one batch of lowerings); failures re-run alone. `forms`
    counts the tensor-core forms of the batch's kernels (`kernel_forms`)."""
    from tests.tensor.fuzz_run import realize_together

    got, items = realize_together([functools.partial(_build, c) for c in cases], MODES[mode])
    if forms is not None:
        with Context(**MODES[mode]):  # the kernels' keys hold the mode's target and knobs
            forms.update(kernel_forms(items))
    failures = []
    for c, g in zip(cases, got, strict=True):
        why = mismatch(c, g) if g is not None else "not run"
        if why is not None:
            why = run_one(c, mode)  # alone, for the report
        if why is not None:
            failures.append((c, why))
    return failures


def kernel_forms(items: list) -> Counter:
    """How many of the schedule items' compiled kernels hold each tensor-core form: "mma" (mma.sync), "wgmma",
    "tma" (its copies), "cp.async", and "simt" (lower.simt_smem's staged tiles: a LOCAL buffer of SIMT_TILE
    elements or more in a kernel without tensor cores); "kernels": all of them (inside the Context they were
    realized under)."""
    from lower.realize import _compiled, _device_of, _kernel_key
    from rewrite import Ops
    from rewrite.dtype import AddrSpace

    out: Counter = Counter()
    for it in items:
        if it.kind != "kernel":
            continue
        k = _compiled.get(_kernel_key(it.ast, _device_of(it.bufs[0])))
        prog = getattr(k, "prog", None)  # the grid emulator's kernels show their instructions
        out["kernels"] += 1
        if prog is None:
            continue
        got = set()
        tiles = False
        for u in prog.instrs:
            if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL and u.shape and u.shape[0] >= SIMT_TILE:
                tiles = True
            if u.op is Ops.WMMA:
                got.add("wgmma" if u.arg[0] == "wgmma" else "mma")
            elif u.op is Ops.INS and u.arg[0] == "tma.load":
                got.add("tma")
            elif u.op is Ops.STORE and u.arg == "cp.async":
                got.add("cp.async")
        if tiles and not got & {"mma", "wgmma"}:
            got.add("simt")
        out.update(got)
    return out


def fuzz(seeds: range, mode: str, batch: int = 12, max_macs: int = MAX_MACS,
         on_fail: Callable[[str], None] | None = None) -> tuple[list[str], Counter]:
    """Run the cases of `seeds` in `mode`: the failures' reports, and the tensor-core forms of their kernels."""
    reports = []
    forms: Counter = Counter()
    knobs = ", ".join(f"{k}={v!r}" for k, v in MODES[mode].items())
    for lo in range(seeds.start, seeds.stop, batch):
        cases = [generate(s, mode, max_macs) for s in range(lo, min(lo + batch, seeds.stop))]
        for c, why in run_batch(cases, mode, forms):
            r = f"tensor-core fuzz case seed={c.seed} fails in mode {mode} ({knobs}): {why}\nrepro:\n{c.repro(knobs)}\n"
            reports.append(r)
            if on_fail:
                on_fail(r)
    return reports, forms
