"""A catalogue of bad inputs, each with the typed error it must raise and a check of its message: bad shapes
(broadcast, reshape, matmul, conv, pad, cat), bad dtypes, sizes too large for memory, NaN and infinity where they
matter, out-of-range indices, unbound variables, malformed rules, bad knobs and bad devices. Corrupt caches are
not errors: the second table damages each cache and checks the answer is still right (the cache heals).

Another reliability helper owns gather's out-of-range indices, shifts and division by zero, tanh and guards that
return a non-bool; their cases live with their fixes."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from devices.cpu import DEVICE as CPU
from devices.memory import check_vars
from rewrite.dsl import Rule, RuleSet, const, var
from rewrite.dtype import dtypes
from rewrite.env import Context
from rewrite.errors import (
    ArgumentError,
    CompilerError,
    DeviceError,
    DTypeError,
    EvalError,
    KnobError,
    OutOfMemoryError,
    RuleError,
    ShapeError,
    VariableError,
)
from rewrite.uop import UOp
from tensor import Tensor
from tensor.helpers import AxisError

x, y, c0 = var("x"), var("y"), const("c0")


def m() -> Tensor:
    return Tensor.ones(2, 3)


def img() -> Tensor:
    return Tensor.ones(1, 3, 4, 4)


@contextlib.contextmanager
def env(**knobs: str) -> Iterator[None]:
    old = {k: os.environ.get(k) for k in knobs}
    os.environ.update(knobs)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def with_env(fn: Callable[[], object], **knobs: str) -> Callable[[], object]:
    def run() -> object:
        with env(**knobs):
            return fn()
    return run


def _in_context(fn: Callable[[], object], **knobs: int | str) -> object:
    with Context(**knobs):
        return fn()


def realized(fn: Callable[[], Tensor]) -> Callable[[], object]:
    return lambda: fn().numpy()


N = UOp.variable("n", 1, 10)

# (id, what to run, the error class, a regular expression its message must match)
CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # ---- shapes
    ("broadcast-3d", lambda: Tensor.ones(2, 3, 4) + Tensor.ones(3, 3, 4), ShapeError,
     r"add: cannot broadcast shapes \(2, 3, 4\), \(3, 3, 4\): axis -3 has sizes 2 and 3"),
    ("broadcast-where", lambda: (m() > 0).where(Tensor.ones(4), 0.0), ShapeError, r"where: cannot broadcast"),
    ("reshape-count", lambda: m().reshape(4, 2), ShapeError, r"reshape: cannot reshape \(2, 3\) \(6 elements\)"),
    ("reshape-negative", lambda: m().reshape(-2, 3), ShapeError, r"reshape: negative dimension -2"),
    ("reshape-float", lambda: m().reshape(2.0, 3), ShapeError, r"reshape: shape entries must be ints, got float"),
    ("reshape-two-minus-one", lambda: m().reshape(-1, -1), ShapeError, r"only one dimension can be -1"),
    ("reshape-symbolic", lambda: m().reshape(N), ShapeError,
     r"reshape: cannot reshape \(2, 3\) to \(n,\): the element counts 6 and n are not provably equal"),
    ("expand-fewer-axes", lambda: m().expand(3), ShapeError, r"expand: cannot expand \(2, 3\) to the shorter shape"),
    ("expand-non-1", lambda: m().expand(4, 3), ShapeError, r"expand: cannot expand \(2, 3\) to \(4, 3\)"),
    ("shrink-reversed", lambda: m().shrink(((1, 0), None)), ShapeError, r"shrink: range \(1, 0\) on axis 0"),
    ("shrink-too-few", lambda: m().shrink(((0, 1),)), ShapeError, r"shrink: 1 ranges for a tensor of shape \(2, 3\)"),
    ("permute-length", lambda: m().permute(0), ShapeError, r"permute: \(0,\) has 1 entries"),
    ("permute-repeat", lambda: m().permute(0, 0), ShapeError, r"permute: \(0, 0\) is not a permutation"),
    ("pad-float", lambda: m().pad([(1.5, 0), (0, 0)]), ShapeError, r"pad: padding amounts must be ints"),
    ("pad-odd-flat", lambda: m().pad((1, 2, 3)), ShapeError, r"pad: a flat padding needs an even number"),
    ("pad-crop-too-much", lambda: m().pad([(-2, -1), (0, 0)]), ShapeError, r"pad: cropping \(-2, -1\) on axis 0"),
    ("cat-rank", lambda: m().cat(Tensor.ones(3)), ShapeError, r"cat: shapes \(2, 3\), \(3,\) differ outside axis 0"),
    ("cat-axis", lambda: m().cat(m(), dim=3), AxisError, r"cat: axis 3 is out of range"),
    ("stack-shapes", lambda: Tensor.stack([m(), Tensor.ones(3, 2)]), ShapeError, r"stack: all shapes must be equal"),
    ("split-sizes", lambda: m().split([1, 1], dim=1), ShapeError, r"split: sizes \[1, 1\] must be non-negative"),
    ("repeat-count", lambda: m().repeat(2), ShapeError, r"repeat: 1 repeat counts for a tensor of shape \(2, 3\)"),
    ("matmul-inner", lambda: m() @ m(), ShapeError, r"matmul: \(2, 3\) @ \(2, 3\): the inner dimensions differ"),
    ("matmul-1d", lambda: Tensor.ones(3) @ Tensor.ones(4), ShapeError, r"matmul: \(3,\) @ \(4,\)"),
    ("matmul-0d", lambda: Tensor(1.0) @ Tensor.ones(3), ShapeError, r"matmul: both operands need at least one axis"),
    ("matmul-batch", lambda: Tensor.ones(2, 3, 4) @ Tensor.ones(3, 4, 5), ShapeError,
     r"matmul: cannot broadcast shapes \(2,\), \(3,\)"),
    ("conv-input-rank", lambda: Tensor.ones(3, 4, 4).conv2d(Tensor.ones(1, 3, 2, 2)), ShapeError,
     r"conv2d: input \(3, 4, 4\) and weight \(1, 3, 2, 2\) do not fit"),
    ("conv-weight-rank", lambda: img().conv2d(Tensor.ones(3, 2, 2)), ShapeError, r"conv2d: input .* do not fit"),
    ("conv-channels", lambda: img().conv2d(Tensor.ones(1, 2, 2, 2)), ShapeError, r"conv2d: input has 3 channels"),
    ("conv-stride-0", lambda: img().conv2d(Tensor.ones(1, 3, 2, 2), stride=0), ShapeError,
     r"conv2d: kernel sizes, strides and dilations must be positive"),
    ("conv-kernel-too-big", lambda: img().conv2d(Tensor.ones(1, 3, 5, 5)), ShapeError, r"conv2d: the kernel spans 5"),
    ("conv-groups", lambda: img().conv2d(Tensor.ones(2, 3, 2, 2), groups=2), ShapeError, r"with groups=2"),
    ("conv-bias", lambda: img().conv2d(Tensor.ones(2, 3, 2, 2), bias=Tensor.ones(3)), ShapeError,
     r"conv2d: bias must have shape \(2,\), got \(3,\)"),
    ("conv-negative-padding", lambda: img().conv2d(Tensor.ones(2, 3, 2, 2), padding=-1), ShapeError,
     r"conv2d: padding must be >= 0"),
    ("pool-stride-0", lambda: Tensor.ones(1, 1, 4, 4).max_pool2d(2, stride=0), ShapeError,
     r"max_pool2d: kernel sizes, strides and dilations must be positive"),
    ("ones-negative", lambda: Tensor.ones(-1), ShapeError, r"full: negative dimension -1"),
    ("ones-float", lambda: Tensor.ones(2.5), ShapeError, r"ones: shape entries must be ints, got float 2.5"),
    ("ones-string", lambda: Tensor.ones("3"), ShapeError, r"ones: shape entries must be ints, got str"),
    ("ones-unbound", lambda: Tensor.ones(N).realize(), VariableError,
     r"realize: variable 'n' is unbound; bind it to a value: UOp.variable\('n', lo, hi\).bind\(value\)"),
    ("full-shape-none", lambda: Tensor.full(None, 1.0), ShapeError, r"full: shape must be an int or a sequence"),
    ("ragged-list", lambda: Tensor([[1, 2], [3]]), ShapeError, r"Tensor: nested lists must be rectangular"),
    ("numel-over-2**62", lambda: Tensor.ones(2**40, 2**40), ShapeError, r"full: shape .* more than 2\*\*62"),
    ("sum-axis", lambda: m().sum(2), AxisError, r"sum: axis 2 is out of range for a tensor with 2 dimensions"),
    ("sum-float-axis", lambda: m().sum(0.5), AxisError, r"sum: axis must be an int, got float 0.5"),
    ("softmax-axis", lambda: m().softmax(5), AxisError, r"softmax: axis 5 is out of range"),
    ("cumsum-axis", lambda: m().cumsum(3), AxisError, r"cumsum: axis 3 is out of range"),
    ("max-empty", lambda: Tensor.ones(0).max(), ShapeError, r"max: cannot reduce over an empty axis"),
    # ---- dtypes
    ("numpy-object", lambda: Tensor(np.array([object()])), DTypeError, r"Tensor: cannot make a tensor from numpy obj"),
    ("numpy-complex", lambda: Tensor(np.ones(3, np.complex64)), DTypeError, r"from numpy complex64 data"),
    ("numpy-strings", lambda: Tensor(["a", "b"]), DTypeError, r"from numpy <U1 data"),
    ("numpy-datetime", lambda: Tensor(np.array(["2020-01-01"], dtype="datetime64[D]")), DTypeError,
     r"from numpy datetime64\[D\] data"),
    ("dtype-name", lambda: Tensor([1], dtype="float8"), DTypeError, r"Tensor: unknown dtype 'float8'"),
    ("cast-unknown", lambda: m().cast("float7"), DTypeError, r"cast: unknown dtype 'float7'; known dtypes"),
    ("cast-object", lambda: m().cast(object()), DTypeError, r"cast: unknown dtype <object"),
    ("cast-index", lambda: m().cast(dtypes.index), DTypeError, r"cast: dtypes.index is not a tensor dtype"),
    ("and-float", lambda: m() & m(), DTypeError, r"bitwise_and: needs integer or bool tensors, got float32"),
    ("invert-float", lambda: ~m(), DTypeError, r"bitwise_not: needs integer or bool tensors"),
    ("rand-int", lambda: Tensor.rand(2, dtype="int8"), DTypeError, r"rand: needs a float dtype, got int8"),
    ("bitcast-size", lambda: Tensor.ones(3, dtype=dtypes.uint8).bitcast(dtypes.int16), DTypeError,
     r"bitcast: cannot view"),
    ("arange-bool", lambda: Tensor.arange(3, dtype="bool"), DTypeError, r"arange: a bool arange is not meaningful"),
    # ---- sizes too large for memory
    ("empty-10**13", lambda: Tensor.empty(10**13), OutOfMemoryError, r"empty: shape \(10000000000000,\) of float32"),
    ("realize-10**14", realized(lambda: Tensor.ones(10**7, 10**7) + 1), OutOfMemoryError,
     r"alloc: 100000000000000 elements of float32 need 400000000000000 bytes, more than this machine's memory"),
    ("alloc-2**60", lambda: CPU.alloc(2**60, dtypes.int8), OutOfMemoryError, r"alloc: 1152921504606846976 elements"),
    ("alloc-negative", lambda: CPU.alloc(-1, dtypes.int8), DeviceError, r"alloc: count must be an int >= 0"),
    # ---- NaN and infinity where they matter
    ("arange-inf", lambda: Tensor.arange(0, float("inf")), ArgumentError, r"arange: start, stop and step must be fin"),
    ("arange-nan", lambda: Tensor.arange(float("nan")), ArgumentError, r"arange: .* must be finite, got 0, nan, 1"),
    ("arange-nan-step", lambda: Tensor.arange(0, 5, float("nan")), ArgumentError, r"arange: .* must be finite"),
    ("uniform-nan", lambda: Tensor.uniform(3, low=float("nan")), ArgumentError, r"uniform: need finite numbers low"),
    ("uniform-inf", lambda: Tensor.uniform(3, high=float("inf")), ArgumentError, r"uniform: .* high=inf"),
    ("uniform-reversed", lambda: Tensor.uniform(3, low=2.0, high=1.0), ArgumentError, r"uniform: .* low <= high"),
    ("normal-nan-std", lambda: Tensor.normal(3, std=float("nan")), ArgumentError, r"normal: need a finite mean and"),
    ("normal-negative-std", lambda: Tensor.normal(3, std=-1.0), ArgumentError, r"normal: .* std >= 0, got .*-1.0"),
    ("normal-inf-mean", lambda: Tensor.normal(3, mean=float("-inf")), ArgumentError, r"normal: .* mean=-inf"),
    ("reshape-nan", lambda: m().reshape(float("nan")), ShapeError, r"reshape: shape entries must be ints, got float"),
    ("ones-nan", lambda: Tensor.ones(float("nan")), ShapeError, r"ones: shape entries must be ints, got float nan"),
    ("linspace-nan-steps", lambda: Tensor.linspace(0, 1, float("nan")), ValueError, r"linspace: steps must be a"),
    # ---- other bad argument values
    ("arange-step-0", lambda: Tensor.arange(0, 10, 0), ArgumentError, r"arange: step must not be 0"),
    ("cat-nothing", lambda: Tensor.cat([]), ArgumentError, r"cat: needs at least one tensor"),
    ("split-size-0", lambda: m().split(0), ArgumentError, r"split: the piece size must be positive"),
    ("randint-empty-range", lambda: Tensor.randint(3, low=5, high=5), ValueError, r"randint: need ints low < high"),
    ("eye-negative", lambda: Tensor.eye(-1), ValueError, r"eye: sizes must be non-negative ints"),
    # ---- out-of-range indices
    ("index-int", lambda: m()[2], IndexError, r"index 2 is out of range for axis 0 with size 2"),
    ("index-negative", lambda: Tensor.ones(5)[-6], IndexError, r"index -6 is out of range for axis 0 with size 5"),
    ("index-too-many", lambda: m()[None, 0, 0, 0], IndexError, r"too many indices for a tensor of shape \(2, 3\)"),
    ("index-step-0", lambda: m()[::0], IndexError, r"getitem: slice step cannot be zero"),
    ("index-float", lambda: m()[0.5], TypeError, r"getitem: indices must be ints, slices, None or ..., got float"),
    ("index-string", lambda: m()["a"], TypeError, r"getitem: indices must be ints, .* got str"),
    ("item-many", lambda: m().item(), ShapeError, r"item: the tensor has 6 elements"),
    ("item-empty", lambda: Tensor.ones(0).item(), ShapeError, r"item: the tensor has 0 elements"),
    # ---- unbound and out-of-range variables
    ("evaluate-unbound", lambda: (UOp.variable("n", 0, 10) + 1).evaluate({}), EvalError,
     r"evaluate: unbound variable 'n'"),
    ("launch-unbound", lambda: check_vars({"n": UOp.variable("n", 0, 10)}, {}, "k"), DeviceError,
     r"kernel 'k': variable 'n' has no value; pass var_vals"),
    ("launch-out-of-range", lambda: check_vars({"n": UOp.variable("n", 0, 10)}, {"n": 11}, "k"), DeviceError,
     r"variable 'n' = 11 is outside its range \[0, 10\]"),
    ("launch-not-int", lambda: check_vars({"n": UOp.variable("n", 0, 10)}, {"n": 2.5}, "k"), DeviceError,
     r"variable 'n' must be an int, got 2.5"),
    # ---- malformed rules
    ("rule-unbound-template", lambda: Rule("r", x + y, var("z")), RuleError, r"template uses 'z'"),
    ("rule-name", lambda: Rule("AddZero", x + 0, x), RuleError, r"kebab-case"),
    ("rule-lhs-number", lambda: Rule("r", 3, x), RuleError, r"left-hand side"),
    ("rule-guard-unknown", lambda: Rule("r", x + y, x, when=lambda w: w > 0), RuleError, r"when= takes w"),
    ("ruleset-duplicate", lambda: RuleSet("s", [Rule("r", x + 0, x), Rule("r", x * 1, x)]), RuleError, r"named 'r'"),
    ("ruleset-not-a-rule", lambda: RuleSet("s", [x + 0]), RuleError, r"is not a Rule"),
    # ---- bad knobs and devices
    ("knob-DEBUG-abc", with_env(realized(lambda: Tensor(np.arange(3.0)) + 1), DEBUG="abc"), KnobError,
     r"knob DEBUG='abc' is not allowed: DEBUG must be an integer from 0 to 5"),
    ("knob-BEAM-negative", with_env(realized(lambda: Tensor(np.arange(3.0)) + 2), BEAM="-1"), KnobError,
     r"knob BEAM='-1' is not allowed: BEAM must be an integer >= 0"),
    ("knob-NOOPT-word", with_env(realized(lambda: Tensor(np.arange(3.0)) + 3), NOOPT="maybe"), KnobError,
     r"knob NOOPT='maybe' is not allowed: NOOPT must be 0 or 1"),
    ("knob-CACHE_SIZE-suffix", with_env(lambda: CPU.compiler.load("int f1g(void){return 1;}", "k"), CACHE_SIZE="1G"),
     KnobError, r"knob CACHE_SIZE='1G' is not allowed: CACHE_SIZE must be an integer >= 0"),
    ("knob-CACHE_SIZE-negative", with_env(lambda: CPU.compiler.load("int fneg(void){return 1;}", "k"),
                                          CACHE_SIZE="-5"), KnobError, r"knob CACHE_SIZE='-5' is not allowed"),
    ("knob-SANITIZE-unknown", with_env(lambda: CPU.compiler.load("int fsan(void){return 1;}", "k"), SANITIZE="mem"),
     KnobError, r"knob SANITIZE='mem' is not allowed: SANITIZE must be one of '', 'address'"),
    ("knob-Context-negative", lambda: _in_context(realized(lambda: Tensor(np.arange(3.0)) + 4), BEAM=-2), KnobError,
     r"knob BEAM=-2 is not allowed"),
    ("knob-DEVICE-nope", with_env(lambda: Tensor.ones(2), DEVICE="nope"), DeviceError,
     r"unknown device 'nope'; known devices: cpu, cuda, python"),
    ("device-unknown", lambda: Tensor.ones(2, device="gpu"), DeviceError, r"unknown device 'gpu'"),
    ("device-not-str", lambda: Tensor.ones(2, device=3), DeviceError,
     r"device must be a str such as 'cpu' or a tuple of them such as \('cpu:0', 'cpu:1'\), got int"),
    ("device-mixed", lambda: m() + m().to("python"), DeviceError, r"operands live on different devices"),
]


def test_catalogue_is_large() -> None:
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("fn,exc,msg", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(fn: Callable[[], object], exc: type[Exception], msg: str) -> None:
    with pytest.raises(exc, match=msg) as info:
        fn()
    e = info.value
    # a typed error of the project's hierarchy, except the Python protocol errors of indexing
    assert isinstance(e, CompilerError) or type(e) in (IndexError, TypeError, ValueError), type(e)


# ---------------------------------------------------------------------------------------------- corrupt caches


def _so(d: str) -> list[str]:
    p = os.path.join(d, "cpu")
    return [os.path.join(p, n) for n in os.listdir(p)] if os.path.isdir(p) else []


def _replace(path: str, data: bytes) -> None:
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _truncate_so(d: str) -> None:
    for p in _so(d):
        _replace(p, _read(p)[:1000])


def _zero_so(d: str) -> None:
    for p in _so(d):
        _replace(p, b"")


def _swap_so(d: str) -> None:
    ps = _so(d)
    data = [_read(p) for p in ps]
    for p, b in zip(ps, data[1:] + data[:1], strict=True):
        _replace(p, b)


def _garbage_sqlite(d: str) -> None:
    p = os.path.join(d, "egraph.sqlite")
    for extra in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(p + extra)
    _replace(p, b"this is not a database" * 100)


def _edit_sqlite(d: str) -> None:
    db = sqlite3.connect(os.path.join(d, "egraph.sqlite"))
    for key, val in db.execute("SELECT key, val FROM eg").fetchall():
        v = json.loads(val)
        v["lo"], v["hi"] = 0, 0
        db.execute("UPDATE eg SET val = ? WHERE key = ?", (json.dumps(v), key))
    db.commit()
    db.close()


def _stale_tmp(d: str) -> None:
    os.makedirs(os.path.join(d, "cpu"), exist_ok=True)
    p = os.path.join(d, "cpu", "0" * 32 + ".1.2.abc.tmp.so")
    with open(p, "wb") as f:
        f.write(b"half an object")
    os.utime(p, (1, 1))


# beam.json damage: tests/lower/test_search_cache.py
CORRUPTIONS = [_truncate_so, _zero_so, _swap_so, _garbage_sqlite, _edit_sqlite, _stale_tmp]


@pytest.mark.parametrize("damage", CORRUPTIONS, ids=[f.__name__[1:] for f in CORRUPTIONS])
def test_corrupt_cache_heals(tmp_path: os.PathLike, damage: Callable[[str], None]) -> None:
    """A fresh process (run here as fresh compilers and saturators: the in-memory caches are cleared) meets the
    damaged cache and still computes the right answer."""
    import subprocess
    import sys

    d = str(tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import numpy as np; from tensor import Tensor\n"
            "from rewrite.uop import UOp; from rules.eqsat import saturate; V = UOp.variable\n"
            "print(saturate(((V('x', 0, 55) * 4 + V('y', 0, 3)) // 4) * 7 + V('y', 0, 3) % 4 < 40).render())\n"
            "a = np.arange(24, dtype=np.float32).reshape(4, 6)\n"
            "t = Tensor(a)\n"
            "r = ((t[1:, ::2] * 2 + 1).sum(1) + t.flip(0)[:3, 1]).numpy()\n"
            "w = (a[1:, ::2] * 2 + 1).sum(1) + a[::-1][:3, 1]\n"
            "assert np.array_equal(r, w), (r, w)\n"
            "print('ok')\n")
    e = dict(os.environ, CACHEDIR=d, CACHE="1", PYTHONPATH=root)
    first = None
    for step in ("fill", "damaged", "healed"):
        r = subprocess.run([sys.executable, "-c", code], env=e, cwd=root, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.split()[-1] == "ok", (step, r.stderr[-3000:])
        first = first or r.stdout
        assert r.stdout == first  # the simplified expression too
        if step == "fill":
            assert _so(d) and os.path.exists(os.path.join(d, "egraph.sqlite"))
            damage(d)
    assert not [p for p in _so(d) if p.endswith(".tmp.so")]
