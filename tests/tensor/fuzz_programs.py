"""A seeded differential fuzzer of random Tensor programs against numpy (issue 13).

A program is 1-3 random inputs (float32 or float64 per program, some int32; ranks 1-4, sizes from {1, 2, 3, 5, 7})
and a random DAG of 2-8 ops: elementwise float and int ops, casts, comparisons, where, movement (permute,
reshape, flips, strided slices with negative steps, expand), pad, cat, reductions, matmul, cumsum and softmax.
Each op is one line of Tensor code and one line of numpy code, so the program runs from the same text on both
sides and prints itself as a repro. The oracle runs float programs in float64 and compares with a tolerance for
the program's dtype; int results compare exactly.

Discontinuous ops (float -> int casts, comparisons and the `where` they feed) only read "exact" floats: values
built from the inputs (multiples of 1/4) by ops that round nothing in either dtype, so an oracle that rounds
differently cannot flip them. Every op that would leave the range [-1e5, 1e5] or make a non-finite value is
rejected while generating, so no NaN is compared.

16-bit programs (`generate(half=True)`): float16 or bfloat16, with a fifth of the float inputs float32 and casts
among the three (mixed-dtype ops promote), log_softmax beside softmax, and half of them with matmul-shaped inputs
((batch,) m, k and k, n, axes of 16 or more) whose product starts the program, so matmuls chain (a 16-bit
intermediate between kernels, lower.split.narrowing_casts) and, on the cpu modes, reach the float32 copies of
16-bit operands (tensor.nn._widened: about a fifth of the programs). Their oracle is tests.tensor.fuzz_bounds: a
float64 value with a per-element bound on the error, carried op by op (its docstring says why a bound rather than
an epsilon times the depth or a per-op rounding simulation alone). A value whose bound is 0 is compared bit for
bit, and so is one whose per-op rounding the oracle can simulate (about 70% and 80% of the result elements); only
exact values feed the discontinuous ops. Values stay within 1e4 (float16 ends at 65504) and 16K elements;
bfloat16 holds quarter-multiples exactly only up to 64, and the larger ones are inexact by the bound itself, so
they stay out of comparisons and int casts. The result's dtype is checked too (bfloat16 comes back from `.numpy()`
as float32: its values must be bfloat16 values).

A tenth of the programs (in every mode and dtype) then get a convolution phase (`_conv_phase`, drawn from a random
stream of its own so the other programs stay as they were): conv2d, conv1d, conv_transpose2d, max_pool2d or
avg_pool2d of the program's last value, reshaped to (N, C, *spatial) where needed, then 0-3 more ops, convolutions
among them; weights and biases are new inputs. tests/tensor/fuzz_conv.py draws them and holds their numpy oracles;
fuzz_bounds bounds them as matmuls (float32 accumulation, one rounding, and one more for a bias).

Running them is tests/tensor/fuzz_run.py's: many programs' outputs realized with one `realize`, a failure re-run
alone and shrunk while it still fails.
"""

from __future__ import annotations

import dataclasses
import functools
import random

import numpy as np

from tensor import Tensor
from tests.tensor import fuzz_conv
from tests.tensor.fuzz_bounds import HALVES, Bounded, mismatch_16, np_log_softmax, np_softmax, step

SIZES = (1, 2, 3, 5, 7)
# the "gpu" mode's sizes: rows long enough for a block to share their reductions (GROUP_REDUCE, warp shuffles) and
# axes no block size divides, at most GPU_ELEMENTS elements an input (the grid emulator runs every thread)
GPU_SIZES, GPU_ELEMENTS = (1, 3, 7, 32, 33, 300, 1000), 6000
# a 16-bit program's matmul-shaped inputs (m, k) and (k, n) draw m, k, n from these: on the cpu modes some
# draws reach tensor.nn.WIDEN_MIN_MACS (the float32 copies of 16-bit operands), on the interpreted ones they stay
# small (the python device runs ~60K multiply-adds a second)
MM_SIZES_CPU, MM_SIZES = (16, 32, 33, 48, 64), (16, 17, 24)
LIMIT = 1e5
RTOL = {"float32": 2e-5, "float64": 1e-10}
ATOL = {"float32": 2e-5, "float64": 1e-10}
# "gpu": every kernel lowered for the sm_90 target (grid, shared memory, warp shuffles) and run by the python
# device's grid emulator
MODES: dict[str, dict] = {"cpu": {}, "noopt": {"NOOPT": 1}, "python": {"DEVICE": "python"},
                          "gpu": {"DEVICE": "python", "PYTHON_TARGET": "sm_90"},
                          "v2": {"CPU_TARGET": "x86-64-v2"}}  # 4-lane vectors, no F16C: the 16-bit fallbacks


@dataclasses.dataclass(frozen=True)
class Op:
    """One line: `v{out} = <tcode>` on the Tensor side, `v{out} = <ncode>` in numpy; args are value indices."""

    tcode: str
    ncode: str
    args: tuple[int, ...]
    rule: str = ""  # how a 16-bit program's error bound propagates through the op (`_RULES`; "name:param")


@dataclasses.dataclass(frozen=True)
class Input:
    shape: tuple[int, ...]
    dtype: str  # "float" (the program's float dtype), "int32", or "float32" (16-bit programs only)
    data: tuple  # flattened values


@dataclasses.dataclass(frozen=True)
class Program:
    seed: int
    fdt: str  # float32 or float64, or float16 or bfloat16 (`generate(half=True)`)
    inputs: tuple[Input, ...]
    ops: tuple[Op, ...]

    def input_dtype(self, i: int) -> str:
        """Input i's Tensor dtype."""
        return self.fdt if self.inputs[i].dtype == "float" else self.inputs[i].dtype

    def input_array(self, i: int, oracle: bool) -> np.ndarray:
        """Input i as numpy holds it: in float64 for the oracle, else in its dtype (bfloat16 data in float32)."""
        dt = self.input_dtype(i)
        dt = "float64" if oracle and dt != "int32" else "float32" if dt == "bfloat16" else dt
        return np.array(self.inputs[i].data, dtype=dt).reshape(self.inputs[i].shape)

    def lines(self, kind: str) -> list[str]:
        n = len(self.inputs)
        out = []
        for k, op in enumerate(self.ops):
            code = op.tcode if kind == "t" else op.ncode
            out.append(f"v{n + k} = " + code.format(*[f"v{a}" for a in op.args]))
        return out

    def repro(self, knobs: str = "") -> str:
        """Standalone Python that runs the program with uopc (inside `Context(knobs)`) and the float64 oracle."""
        n = len(self.inputs)
        head = ["import numpy as np", "from rewrite.env import Context", "from tensor import Tensor",
                f"FDT, TDT = np.float64, '{self.fdt}'"]
        if any("np_softmax" in op.ncode for op in self.ops):
            head.append("def np_softmax(x, axis):\n    e = np.exp(x - x.max(axis=axis, keepdims=True))\n"
                        "    return e / e.sum(axis=axis, keepdims=True)")
        if any("np_log_softmax" in op.ncode for op in self.ops):
            head.append("def np_log_softmax(x, axis):\n    s = x - x.max(axis=axis, keepdims=True)\n"
                        "    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))")
        head += fuzz_conv.oracle_source(" ".join(op.ncode for op in self.ops))
        for i, inp in enumerate(self.inputs):
            head.append(f"a{i} = np.array({list(inp.data)!r}, dtype=np.{self.input_array(i, False).dtype})"
                        f".reshape({inp.shape})")
        t = [f"    v{i} = Tensor(a{i}" + (", dtype='bfloat16')" if self.input_dtype(i) == "bfloat16" else ")")
             for i in range(n)] + ["    " + line for line in self.lines("t")]
        o = [f"v{i} = a{i}.astype(FDT) if a{i}.dtype.kind == 'f' else a{i}" for i in range(n)] + self.lines("n")
        last = f"v{n + len(self.ops) - 1}"
        return "\n".join([*head, f"with Context({knobs}):", *t, f"    got = {last}.numpy()", "# numpy oracle", *o,
                          f"want = np.asarray({last})", "print(got, want, sep='\\n')"])


def _env(fdt: str, oracle: bool) -> dict:
    return {"np": np, "FDT": np.float64 if oracle or fdt in HALVES else np.dtype(fdt).type, "TDT": fdt,
            "np_softmax": np_softmax, "np_log_softmax": np_log_softmax, **fuzz_conv.ORACLES}


@functools.lru_cache(maxsize=1024)
def bounded(p: Program) -> list[Bounded] | None:
    """A 16-bit program's values with their error bounds (tests.tensor.fuzz_bounds); None when an op does not
    apply (a shrunk program whose discontinuous op now reads an inexact value, or whose bound is too loose)."""
    vals = [Bounded(p.input_array(i, True), np.zeros(inp.shape), p.input_dtype(i), p.input_array(i, True))
            for i, inp in enumerate(p.inputs)]
    for op in p.ops:
        v = step(p.fdt, vals, op.ncode, op.args, op.rule)
        if v is None:
            return None
        vals.append(v)
    return vals


def eval_numpy(p: Program, oracle: bool = True) -> np.ndarray:
    if p.fdt in HALVES:
        vals = bounded(p)
        if vals is None:
            raise ValueError(f"program {p.seed}: an op does not apply (tests.tensor.fuzz_bounds.step)")
        return vals[-1].ref
    env = _env(p.fdt, oracle)
    for i in range(len(p.inputs)):
        env[f"v{i}"] = p.input_array(i, oracle)
    with np.errstate(all="ignore"):
        exec("\n".join(p.lines("n")), env)
    return np.asarray(env[f"v{len(p.inputs) + len(p.ops) - 1}"])


def build_tensor(p: Program) -> Tensor:
    env = _env(p.fdt, False)
    env["Tensor"] = Tensor
    for i in range(len(p.inputs)):
        env[f"v{i}"] = Tensor(p.input_array(i, False), dtype=p.input_dtype(i))
    exec("\n".join(p.lines("t")), env)
    out = env[f"v{len(p.inputs) + len(p.ops) - 1}"]
    vals = bounded(p) if p.fdt in HALVES else None
    if vals is not None and vals[-1].dt != "int32" and out.dtype.name != vals[-1].dt:  # bfloat16 reads as float32
        raise TypeError(f"the result's dtype is {out.dtype.name}, expected {vals[-1].dt}")
    return out


def mismatch(p: Program, got: np.ndarray) -> str | None:
    """Why `got` is not the program's result (None when it is)."""
    if p.fdt in HALVES:
        return _mismatch_16(p, got)
    want = eval_numpy(p)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    if want.dtype.kind in "iub":
        if got.dtype.kind not in "iub" or not np.array_equal(got, want):
            return f"int result differs:\n got {got.ravel()[:16]}\nwant {want.ravel()[:16]}"
        return None
    if got.dtype != np.dtype(p.fdt):
        return f"dtype {got.dtype} != {p.fdt}"
    tol = np.abs(want).max(initial=1.0) * ATOL[p.fdt]
    err = np.abs(got.astype(np.float64) - want)
    if not np.all(err <= tol + RTOL[p.fdt] * np.abs(want)):
        # a second chance against numpy in the program's own dtype (rounding each op as uopc does)
        alt = eval_numpy(p, oracle=False).astype(np.float64)
        if np.all(np.abs(got - alt) <= tol + RTOL[p.fdt] * np.abs(want)):
            return None
        i = int(np.argmax(err - RTOL[p.fdt] * np.abs(want)))
        return f"float result differs at flat {i}: got {got.ravel()[i]!r} want {want.ravel()[i]!r}"
    return None


def _mismatch_16(p: Program, got: np.ndarray) -> str | None:
    """A 16-bit program's check against its bounded result (fuzz_bounds.mismatch_16)."""
    vals = bounded(p)
    assert vals is not None, f"program {p.seed} is not a valid 16-bit program"
    return mismatch_16(vals[-1], got)


# ---------------------------------------------------------------- generation


@dataclasses.dataclass
class _Val:
    shape: tuple[int, ...]
    kind: str  # "f" or "i"
    exact: bool
    ref: np.ndarray
    dt: str = ""  # a 16-bit program's: the value's dtype (its floats may be float32 too)


_UNARY = [("-{0}", "-{0}", "same"), ("{0}.abs()", "np.abs({0})", "same"), ("{0}.relu()", "np.maximum({0}, 0)", "same"),
          ("{0}.clip(-8, 8).exp()", "np.exp(np.clip({0}, -8, 8))", "exp"),
          ("({0}.abs() + 1).log()", "np.log(np.abs({0}) + 1)", "log1"),
          ("({0}.abs() + 0.5).sqrt()", "np.sqrt(np.abs({0}) + 0.5)", "sqrt"), ("{0}.sin()", "np.sin({0})", "sin"),
          ("{0}.tanh()", "np.tanh({0})", "tanh"), ("{0}.sigmoid()", "1 / (1 + np.exp(-{0}))", "sigmoid"),
          ("{0}.square()", "np.square({0})", "mul"), ("({0}.abs() + 1).reciprocal()", "1 / (np.abs({0}) + 1)", "recip"),
          ("{0} * 0.5", "{0} * 0.5", "scale"), ("{0}.floor()", "np.floor({0})", "discrete"),
          ("{0}.ceil()", "np.ceil({0})", "discrete")]
_OTHER_HALF = {"float16": "bfloat16", "bfloat16": "float16"}


def _candidates(rng: random.Random, vals: list[_Val], fdt: str) -> Op | None:
    """One random op over `vals` (None when the pick does not apply). A 16-bit program (`fdt` float16 or bfloat16)
    also draws casts between its float dtypes, log_softmax, and more matmuls (chains of them)."""
    half = fdt in HALVES
    n = len(vals)
    ai = n - 1 if rng.random() < 0.6 else rng.randrange(n)
    a = vals[ai]
    nd = len(a.shape)
    others = [j for j, v in enumerate(vals) if v.kind == a.kind and _broadcasts(a.shape, v.shape)]
    bi = rng.choice(others) if others else ai
    kind = rng.choice(["unary", "unary", "binary", "binary", "int", "cast", "cmp", "move", "move", "move", "pad",
                       "cat", "reduce", "reduce", "matmul", "cumsum", "softmax"] + ["int", "cmp"] * (a.kind == "i")
                      + ["fcast", "fcast", "matmul", "matmul"] * half)
    if kind == "unary":
        if a.kind != "f":
            return Op("-{0}", "-{0}", (ai,), "same") if rng.random() < 0.5 else Op("{0}.abs()", "np.abs({0})", (ai,),
                                                                                  "same")
        t, m, rule = rng.choice(_UNARY)
        if t in ("{0}.floor()", "{0}.ceil()") and not a.exact:
            return None
        if t == "{0}.sin()" and np.abs(a.ref).max() > 64:  # ill-conditioned: float32 rounding of x moves sin(x)
            return None
        return Op(t, m, (ai,), rule)
    if kind == "binary":
        ops = [("{0} + {1}", "{0} + {1}", "add"), ("{0} - {1}", "{0} - {1}", "add"),
               ("{0} * {1}", "{0} * {1}", "mul"), ("{0}.maximum({1})", "np.maximum({0}, {1})", "max2"),
               ("{0}.minimum({1})", "np.minimum({0}, {1})", "max2")]
        if a.kind == "f":
            ops.append(("{0} / ({1}.abs() + 1)", "{0} / (np.abs({1}) + 1)", "div"))
        t, m, rule = rng.choice(ops)
        return Op(t, m, (ai, bi), rule)
    if kind == "int":
        if a.kind != "i":
            return None
        c = rng.choice([1, 2, 3, 5, -3, -2])
        s = rng.randrange(4)
        t, m = rng.choice([(f"{{0}} // {c}", f"{{0}} // {c}"), (f"{{0}} % {c}", f"{{0}} % {c}"),
                           ("{0} & {1}", "{0} & {1}"), ("{0} | {1}", "{0} | {1}"), ("{0} ^ {1}", "{0} ^ {1}"),
                           (f"{{0}} << {s}", f"{{0}} << {s}"), (f"{{0}} >> {s}", f"{{0}} >> {s}"),
                           ("{0} // ({1}.abs() + 1)", "{0} // (np.abs({1}) + 1)"),
                           ("{0} % ({1}.abs() + 1)", "{0} % (np.abs({1}) + 1)")])
        return Op(t, m, (ai, bi) if "{1}" in t else (ai,), "discrete")
    if kind == "cast":
        if a.kind == "i":
            return Op("{0}.cast(TDT)", "{0}.astype(FDT)", (ai,), "cast:TDT")
        if not a.exact:
            return None
        return Op("{0}.cast('int32')", "{0}.astype(np.int32)", (ai,), "discrete")
    if kind == "fcast":
        return _float_cast(rng, a, ai, fdt)
    if kind == "cmp":
        if a.kind == "f" and not (a.exact and vals[bi].exact):
            return None
        rel = rng.choice(["<", "<=", "==", "!=", ">"])
        if rng.random() < 0.5:
            return Op(f"({{0}} {rel} {{1}}).cast('int32')", f"({{0}} {rel} {{1}}).astype(np.int32)", (ai, bi),
                      "discrete")
        return Op(f"({{0}} {rel} {{1}}).where({{0}}, {{1}})", f"np.where({{0}} {rel} {{1}}, {{0}}, {{1}})", (ai, bi),
                  "discrete")
    if kind == "move":
        return _movement(rng, a, ai)
    if kind == "pad":
        pads = [(rng.randrange(3), rng.randrange(3)) for _ in range(nd)]
        v = rng.choice([0, 1, -2])
        return Op(f"{{0}}.pad({pads}, value={v})", f"np.pad({{0}}, {pads}, constant_values={v})", (ai,), "move")
    if kind == "cat":
        d = rng.randrange(nd)
        js = [j for j, v in enumerate(vals) if v.kind == a.kind and len(v.shape) == nd and v.dt == a.dt
              and all(v.shape[k] == a.shape[k] for k in range(nd) if k != d)]
        j = rng.choice(js)
        if j == ai and rng.random() < 0.5:
            return Op(f"{{0}}.cat({{0}}.flip({d}), dim={d})", f"np.concatenate([{{0}}, np.flip({{0}}, {d})], axis={d})",
                      (ai,), "move")
        return Op(f"{{0}}.cat({{1}}, dim={d})", f"np.concatenate([{{0}}, {{1}}], axis={d})", (ai, j), "move")
    if kind == "reduce":
        ax = rng.choice([None, *range(nd)])
        kd = rng.random() < 0.5
        opts = [("sum", "sum"), ("max", "extreme:max"), ("min", "extreme:min")] + \
            ([("mean", "mean")] if a.kind == "f" else [])
        t, rule = rng.choice(opts)
        return Op(f"{{0}}.{t}(axis={ax}, keepdim={kd})", f"{{0}}.{t}(axis={ax}, keepdims={kd})", (ai,), rule)
    if kind == "matmul":
        if a.kind != "f":
            return None
        js = [j for j, v in enumerate(vals) if v.kind == "f" and _mm_ok(a.shape, v.shape)]
        if js:
            return Op("{0} @ {1}", "{0} @ {1}", (ai, rng.choice(js)), "matmul")
        if nd >= 2:
            return Op("{0} @ {0}.transpose(-1, -2)", "{0} @ np.swapaxes({0}, -1, -2)", (ai,), "matmul")
        return Op("{0} @ {0}", "{0} @ {0}", (ai,), "matmul")
    if kind == "cumsum":
        d = rng.randrange(nd)
        return Op(f"{{0}}.cumsum({d})", f"np.cumsum({{0}}, axis={d})", (ai,), "sum")
    if a.kind != "f":
        return None
    d = rng.randrange(nd)
    if half and rng.random() < 0.5:
        return Op(f"{{0}}.log_softmax({d})", f"np_log_softmax({{0}}, {d})", (ai,), f"log_softmax:{d}")
    return Op(f"{{0}}.softmax({d})", f"np_softmax({{0}}, {d})", (ai,), f"softmax:{d}")


def _float_cast(rng: random.Random, a: _Val, ai: int, fdt: str) -> Op:
    """A 16-bit program's cast between its dtypes: mostly 16-bit <-> float32, sometimes to the other 16-bit
    dtype; ints to float32."""
    wide, other = "float32", _OTHER_HALF[fdt]
    if a.kind == "i":
        to = wide
    elif a.dt == wide:
        to = fdt if rng.random() < 0.8 else other
    else:
        to = (wide if rng.random() < 0.8 else other) if a.dt == fdt else rng.choice([fdt, wide])
    if to == fdt:
        return Op("{0}.cast(TDT)", "{0}.astype(FDT)", (ai,), "cast:TDT")
    return Op(f"{{0}}.cast('{to}')", "{0}.astype(FDT)", (ai,), f"cast:{to}")


def _broadcasts(a: tuple, b: tuple) -> bool:
    """b broadcasts to a's shape without changing it."""
    return len(b) <= len(a) and all(y in (1, x) for x, y in zip(a[::-1], b[::-1], strict=False))


def _mm_ok(a: tuple, b: tuple) -> bool:
    if len(a) == 0 or len(b) == 0:
        return False
    k = a[-1]
    kb = b[0] if len(b) == 1 else b[-2]
    if k != kb:
        return False
    if len(a) >= 2 and len(b) >= 2:
        return _broadcasts(a[:-2], b[:-2]) or _broadcasts(b[:-2], a[:-2])
    return True


def _movement(rng: random.Random, a: _Val, ai: int) -> Op:
    nd = len(a.shape)
    pick = rng.choice(["permute", "reshape", "flip", "slice", "slice", "expand"])
    if pick == "permute" and nd >= 2:
        order = list(range(nd))
        rng.shuffle(order)
        o = tuple(order)
        return Op(f"{{0}}.permute{o}", f"np.transpose({{0}}, {o})", (ai,), "move")
    if pick == "reshape":
        numel = int(np.prod(a.shape))
        shape = _random_factor(rng, numel)
        return Op(f"{{0}}.reshape{shape}", f"{{0}}.reshape({shape})", (ai,), "move")
    if pick == "flip":
        axes = tuple(sorted(rng.sample(range(nd), rng.randint(1, nd))))
        return Op(f"{{0}}.flip({axes})", f"np.flip({{0}}, {axes})", (ai,), "move")
    if pick == "expand" and 1 in a.shape:
        shape = tuple(rng.choice(SIZES) if s == 1 else s for s in a.shape)
        return Op(f"{{0}}.expand{shape}", f"np.broadcast_to({{0}}, {shape})", (ai,), "move")
    parts = []
    for s in a.shape:
        step = rng.choice([1, 1, 2, 3, -1, -2])
        lo = rng.randrange(s)
        hi = rng.randrange(lo, s) + 1
        if step < 0:
            lo, hi = hi - 1, lo - 1
            parts.append(f"{lo}:{hi if hi >= 0 else ''}:{step}")
        else:
            parts.append(f"{lo}:{hi}:{step}")
    idx = ", ".join(parts)
    return Op(f"{{0}}[{idx}]", f"{{0}}[{idx}]", (ai,), "move")


def _random_factor(rng: random.Random, numel: int) -> tuple[int, ...]:
    dims, left = [], numel
    for _ in range(rng.randint(0, 3)):
        divs = [d for d in range(2, left + 1) if left % d == 0]
        if not divs:
            break
        d = rng.choice(divs)
        dims.append(d)
        left //= d
    dims.append(left)
    rng.shuffle(dims)
    if rng.random() < 0.3:
        dims.insert(rng.randrange(len(dims) + 1), 1)
    return tuple(dims[:4]) if int(np.prod(dims[:4])) == numel else (numel,)


def _random_input(rng: random.Random, shape: tuple[int, ...], kind: str) -> Input:
    n = int(np.prod(shape))
    if kind == "f":
        return Input(shape, "float", tuple(rng.randint(-16, 16) / 4 for _ in range(n)))
    return Input(shape, "int32", tuple(rng.randint(-20, 20) for _ in range(n)))


def _random_shape(rng: random.Random, sizes: tuple[int, ...] = SIZES, most: int = 0) -> tuple[int, ...]:
    """1-4 axes of `sizes`; with `most`, redrawn until at most that many elements."""
    while True:
        shape = tuple(rng.choice(sizes) for _ in range(rng.randint(1, 4)))
        if not most or int(np.prod(shape)) <= most:
            return shape


def _value_of(ref: np.ndarray, kind: str, exact: bool) -> _Val | None:
    if ref.ndim == 0 or ref.size == 0 or ref.ndim > 4 or ref.dtype.kind == "b":
        return None
    if not np.all(np.isfinite(ref)) or np.abs(ref).max() > LIMIT:
        return None
    return _Val(ref.shape, "i" if ref.dtype.kind in "iu" else "f", exact, ref)


_ROUNDS = ("sin", "tanh", "exp", "log", "sqrt", "sigmoid", "reciprocal", "/", "mean", "softmax", "@", "*", "conv",
           "avg_pool")


def generate(seed: int, gpu: bool = False, half: bool = False, widen: bool = False) -> Program:
    """The program of `seed`; `gpu`: its inputs' shapes drawn from GPU_SIZES (the "gpu" mode's programs); `half`:
    a float16 or bfloat16 program (`_inputs_16`), whose matmul-shaped inputs are large enough for the cpu's float32
    copies with `widen` (the cpu modes)."""
    rng = random.Random(seed)
    fdt = rng.choice(HALVES if half else ("float32", "float64"))
    sizes, most = (GPU_SIZES, GPU_ELEMENTS) if gpu else (SIZES, 0)
    if half:
        inputs = _inputs_16(rng, sizes, most, MM_SIZES_CPU if widen else MM_SIZES)
    else:
        base = _random_shape(rng, sizes, most)
        inputs = []
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            shape = base if r < 0.5 else tuple(1 if rng.random() < 0.3 else s for s in base) if r < 0.75 \
                else _random_shape(rng, sizes, most)
            inputs.append(_random_input(rng, shape, "f" if rng.random() < 0.7 else "i"))
    p = Program(seed, fdt, tuple(inputs), ())
    vals = [_Val(inp.shape, "f" if inp.dtype != "int32" else "i", True, p.input_array(i, True),
                 p.input_dtype(i) if half else "") for i, inp in enumerate(inputs)]
    bvals = [Bounded(v.ref, np.zeros(v.shape), v.dt, v.ref) for v in vals]
    want = rng.randint(2, 8)
    tries = 0
    # a 16-bit program with matmul-shaped inputs mostly starts with their product (the later ops draw more)
    first = Op("{0} @ {1}", "{0} @ {1}", (0, 1), "matmul") if half and len(inputs) > 1 and \
        _mm_ok(inputs[0].shape, inputs[1].shape) and rng.random() < 0.7 else None
    while len(p.ops) < want and tries < 200:
        tries += 1
        op, first = first or _candidates(rng, vals, fdt), None
        if op is None:
            continue
        q = _extended(p, vals, bvals, op)
        if q is not None:
            p, vals, bvals = q
    return _conv_phase(p, vals, bvals, widen)


def _extended(p: Program, vals: list[_Val], bvals: list[Bounded], op: Op) \
        -> tuple[Program, list[_Val], list[Bounded]] | None:
    """The program with `op` appended and its values (None where the op does not apply: numpy refuses it, its
    value is out of range, or a 16-bit program's bound rejects it)."""
    if p.fdt in HALVES:
        b = step(p.fdt, bvals, op.ncode, op.args, op.rule)
        if b is None:
            return None
        v = _Val(b.ref.shape, "i" if b.dt == "int32" else "f", b.exact, b.ref, b.dt)
        return dataclasses.replace(p, ops=(*p.ops, op)), [*vals, v], [*bvals, b]
    q = dataclasses.replace(p, ops=(*p.ops, op))
    try:
        ref = eval_numpy(q)
    except (ValueError, IndexError, TypeError):
        return None
    exact = all(vals[j].exact for j in op.args) and not any(s in op.tcode for s in _ROUNDS)
    exact = exact or ref.dtype.kind in "iu"
    w = _value_of(ref, "", (exact and ref.dtype.kind == "f") or ref.dtype.kind in "iu")
    if w is None or (w.kind == "f" and ref.dtype != np.float64):
        return None
    return q, [*vals, w], bvals


# A tenth of the programs get a convolution phase after their other ops (drawn from a stream of their own, so the
# other programs stay as they were and these keep theirs as a prefix): 1-4 more ops, the first a convolution or
# pool (fuzz_conv.draw) of the program's last value (its output so far, so its ops stay live), the others the usual
# ops or more convolutions of any value. Their multiply-adds are bounded as the matmuls' sizes are: CONV_MACS on
# the interpreted modes (the python device runs ~60K a second), CONV_MACS_CPU on the cpu modes, where a third of
# the phases start instead with a convolution of a new input, BIG_MACS at most (channels in whole vectors,
# hundreds of positions: the packed weight of tensor.conv._channels_last and, for 16-bit programs, the float32
# copies of tensor.nn._widened); the ops before those phases only run where a later op reads them.
P_CONV = 0.1
CONV_MACS, CONV_MACS_CPU, BIG_MACS = 1 << 11, 1 << 14, 1 << 18


def _conv_phase(p: Program, vals: list[_Val], bvals: list[Bounded], widen: bool) -> Program:
    rng = random.Random(f"conv-{p.seed}")
    if rng.random() >= P_CONV:
        return p
    want, added, tries = rng.randint(1, 4), 0, 0
    big = widen and rng.random() < 0.3
    while added < want and tries < 40:
        tries += 1
        if added == 0 or rng.random() < 0.35:
            q = _conv_node(rng, p, vals, bvals, CONV_MACS_CPU if widen else CONV_MACS, added == 0, big and added == 0)
        else:
            op = _candidates(rng, vals, p.fdt)
            q = None if op is None else _extended(p, vals, bvals, op)
        if q is not None:
            p, vals, bvals = q
            added += 1
    return p


def _conv_node(rng: random.Random, p: Program, vals: list[_Val], bvals: list[Bounded], most: int, first: bool,
               big: bool) -> tuple[Program, list[_Val], list[Bounded]] | None:
    """The program with a convolution or pool (fuzz_conv.draw) of one of its values appended (`first`: of its last
    value, so the ops before the phase stay live), its weight and bias new inputs; `big`: a convolution of a new
    input, BIG_MACS at most."""
    half = p.fdt in HALVES
    gen = np.random.default_rng(rng.getrandbits(64))
    fresh: list[Input] = []
    if big:
        shape = (rng.choice([1, 2]), rng.choice([4, 8, 16]), rng.choice([8, 12, 16]), rng.choice([8, 16, 20]))
        fresh.append(Input(shape, "float", tuple((gen.integers(-16, 17, shape) / 4).ravel().tolist())))
        node = fuzz_conv.draw(rng, shape, False, BIG_MACS, big=True)
        xdt = p.fdt if half else ""
        integer = False
    else:
        n = len(vals)
        ai = n - 1 if first or rng.random() < 0.6 else rng.randrange(n)
        integer, xdt = vals[ai].kind == "i", vals[ai].dt
        node = fuzz_conv.draw(rng, vals[ai].shape, integer, most)
    if node is None:
        return None
    wdt = "int32" if integer else "float32" if half and rng.random() < 0.2 else "float"
    for k, shape in enumerate(node.weights):
        if integer:
            data = tuple(gen.integers(-3, 4, shape).ravel().tolist())
        else:
            data = tuple((gen.integers(-8, 9, shape) / 4).ravel().tolist())
        dts = {xdt, p.fdt if wdt == "float" else wdt}
        bdt = "int32" if integer else "float" if not half or len(dts) == 1 else "float32"  # the conv's dtype
        fresh.append(Input(shape, wdt if k == 0 else bdt, data))
    at = len(p.inputs)
    ins = (*p.inputs, *fresh)
    shift = len(fresh)
    ops = tuple(dataclasses.replace(o, args=tuple(a + shift if a >= at else a for a in o.args)) for o in p.ops)
    q = dataclasses.replace(p, inputs=ins, ops=ops)
    new = [_Val(inp.shape, "f" if inp.dtype != "int32" else "i", True, q.input_array(at + i, True),
                q.input_dtype(at + i) if half else "") for i, inp in enumerate(fresh)]
    qvals = [*vals[:at], *new, *vals[at:]]
    qbvals = [*bvals[:at], *[Bounded(v.ref, np.zeros(v.shape), v.dt, v.ref) for v in new], *bvals[at:]]
    x = at if big else ai + shift if ai >= at else ai
    args = (x, *range(at + big, at + len(fresh)))
    return _extended(q, qvals, qbvals, Op(node.tcode, node.ncode, args, node.rule))


def _inputs_16(rng: random.Random, sizes: tuple[int, ...], most: int, mm: tuple[int, ...]) -> list[Input]:
    """A 16-bit program's inputs: half the programs get matmul-shaped ones ((batch,) m, k and k, n from `mm`, and
    maybe a bias row of n), the others 1-3 of `sizes` as a float32/float64 program's. Floats are the program's
    dtype, a fifth of them float32 (mixed-dtype ops); a quarter of the others int32."""
    def one(shape: tuple[int, ...], floats_only: bool = False) -> Input:
        gen = np.random.default_rng(rng.getrandbits(64))  # numpy's draws: the matmul-shaped inputs are large
        if rng.random() < 0.25 and not floats_only:
            return Input(shape, "int32", tuple(gen.integers(-20, 21, shape).ravel().tolist()))
        data = tuple((gen.integers(-16, 17, shape) / 4).ravel().tolist())
        return Input(shape, "float32" if rng.random() < 0.2 else "float", data)

    if rng.random() < 0.5:
        m, k, n = (rng.choice(mm) for _ in range(3))
        batch = (rng.choice((2, 3)),) if rng.random() < 0.25 else ()
        shapes = [(*batch, m, k), (k, n)] + ([(n,)] if rng.random() < 0.3 else [])
        return [one(s, floats_only=True) for s in shapes]
    base = _random_shape(rng, sizes, most)
    shapes = [base if r < 0.5 else tuple(1 if rng.random() < 0.3 else s for s in base) if r < 0.75
              else _random_shape(rng, sizes, most) for r in (rng.random() for _ in range(rng.randint(1, 3)))]
    return [one(s) for s in shapes]
