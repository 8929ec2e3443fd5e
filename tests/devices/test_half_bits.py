"""16-bit floats that a kernel only moves keep their bits (devices.c_bits): every float16 bit pattern and every
bfloat16 one, signaling nans and nan payloads included, comes out of a flip, a cat, a pad, a where between two
tensors, a transposed copy, an expanded copy, a strided slice and a bitcast exactly as it went in, as torch and
numpy give. On the cpu at the x86 levels the host runs (x86-64-v2: no F16C, the generic conversions; x86-64-v3:
F16C's VCVTPH2PS, which quiets a signaling nan) and at the host's own, and on the python device; a kernel that
moves and computes also for aarch64 (under qemu where installed).

Oracle: the same movement done by numpy on the uint16 bits. Inputs are written as raw storage (bfloat16 as its
uint16 bits), never converted, and read back as raw storage."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import pytest

from devices.base import cpu_target
from devices.cpu import DEVICE as CPU
from devices.cpu_cross import compile_emulated, cross_compiler, emulator
from devices.memory import from_bfloat16_bits, to_bfloat16_bits
from devices.python import DEVICE as PY
from lower import buffers as registry
from rewrite.dtype import DType, dtypes
from rewrite.env import Context
from rewrite.uop import UOp
from tensor import Tensor
from tests.devices.builder import assert_same, multi_output, storage, vector_multi_output

N = 1 << 16
BITS = np.arange(N, dtype=np.uint16)  # every pattern: signaling nans are 0x7c01-0x7dff (float16), 0x7f81-0x7fbf
_MASK = (BITS * 7919 % 5 < 2)  # a select mask that is neither a block nor a stride
_NAN_16 = (BITS & 0x7C00 == 0x7C00) & (BITS & 0x03FF != 0)
_NAN_BF = (BITS & 0x7F80 == 0x7F80) & (BITS & 0x007F != 0)

# (name, the movement on a tensor, the same movement on the numpy bits)
_MOVES: list[tuple[str, Callable[[Tensor, str], Tensor], Callable[[np.ndarray], np.ndarray]]] = [
    ("flip", lambda t, d: t.flip(0), lambda b: b[::-1]),
    ("cat", lambda t, d: t.cat(t.flip(0)), lambda b: np.concatenate([b, b[::-1]])),
    ("pad", lambda t, d: t.pad(((3, 5),)), lambda b: np.pad(b, (3, 5))),
    ("where", lambda t, d: Tensor(_MASK, device=d).where(t, t.flip(0)), lambda b: np.where(_MASK, b, b[::-1])),
    ("transpose", lambda t, d: t.reshape(256, 256).transpose(0, 1).contiguous(), lambda b: b.reshape(256, 256).T),
    ("expand", lambda t, d: t.reshape(1, N).expand(3, N).contiguous(), lambda b: np.broadcast_to(b, (3, N))),
    ("slice", lambda t, d: t.reshape(256, 256)[3::5, 1:200:3], lambda b: b.reshape(256, 256)[3::5, 1:200:3]),
    ("pad_flip_2d", lambda t, d: t.reshape(256, 256).flip(1).pad(((0, 2), (1, 0))),
     lambda b: np.pad(b.reshape(256, 256)[:, ::-1], ((0, 2), (1, 0)))),
]
# (device, CPU_TARGET or None for the host's own)
_PLACES = [("cpu", "x86-64-v2"), ("cpu", "x86-64-v3"), ("cpu", None), ("python", None)]


def _tensor(bits: np.ndarray, dt: DType, device: str) -> Tensor:
    """A tensor whose storage is `bits` as they are (no conversion on the way in)."""
    buf = registry.new_buffer(dt, bits.shape, device)
    raw = np.ascontiguousarray(bits.view(np.float16) if dt is dtypes.float16 else bits)
    raw.setflags(write=False)
    registry.store(buf, raw)
    return Tensor._wrap(buf, device)


def _bits(t: Tensor) -> np.ndarray:
    """The storage of `t` as uint16 bits (bfloat16 reads back as float32 holding its bits in the high half)."""
    a = t.numpy()
    return a.view(np.uint16) if a.dtype == np.float16 else (a.view(np.uint32) >> 16).astype(np.uint16)


def _place(device: str, level: str | None) -> Context:
    if level is not None and not cpu_target(level).runs_here:
        pytest.skip(f"this host does not run {level}")
    return Context(DEVICE=device, CPU_TARGET=level) if level is not None else Context(DEVICE=device)


def _check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    want = np.ascontiguousarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{what}: {bad.size} patterns changed, e.g. " + \
        ", ".join(f"{want.flat[i]:#06x} -> {got.flat[i]:#06x}" for i in bad[:4])


@pytest.mark.parametrize(("device", "level"), _PLACES, ids=[f"{d}-{lv or 'host'}" for d, lv in _PLACES])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_moves_keep_every_bit_pattern(dt: DType, device: str, level: str | None) -> None:
    with _place(device, level):
        t = _tensor(BITS, dt, device)
        for name, move, oracle in _MOVES:
            _check(_bits(move(t, device)), oracle(BITS), f"{dt.name} {name} on {device} {level or 'host'}")


@pytest.mark.parametrize(("device", "level"), _PLACES[:3], ids=[f"{d}-{lv or 'host'}" for d, lv in _PLACES[:3]])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_bitcasts_keep_every_bit_pattern(dt: DType, device: str, level: str | None) -> None:
    """A bitcast is a move too: to int16 and back, fused with a flip, the bits are the input's. (Not on the python
    device: rewrite.semantics.exec_bitcast, its op semantics, gives a nan's bits as the canonical nan's.)"""
    with _place(device, level):
        t = _tensor(BITS, dt, device)
        as_int = t.flip(0).bitcast(dtypes.int16).numpy().view(np.uint16)
        _check(as_int, BITS[::-1], f"{dt.name} -> int16 on {device} {level or 'host'}")
        back = Tensor(BITS.view(np.int16), device=device).flip(0).bitcast(dt)
        _check(_bits(back), BITS[::-1], f"int16 -> {dt.name} on {device} {level or 'host'}")


def _floats(bits: np.ndarray, dt: DType) -> np.ndarray:
    return bits.view(np.float16) if dt is dtypes.float16 else from_bfloat16_bits(bits)


def _storage(bits: np.ndarray, dt: DType) -> np.ndarray:
    return bits.view(np.float16).copy() if dt is dtypes.float16 else bits.copy()


# one kernel that moves its inputs and computes with them: (output dtype, fn of the operands, oracle on the bits)
def _mixed(dt: DType) -> list[tuple[DType, Callable[[UOp, UOp], UOp], Callable[[np.ndarray, np.ndarray], np.ndarray]]]:
    def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # rewrite.semantics: float32's sum rounded once
        if dt is dtypes.float16:
            return (_floats(a, dt) + _floats(b, dt)).view(np.uint16)
        return to_bfloat16_bits(_floats(a, dt) + _floats(b, dt))
    return [
        (dt, lambda x, y: x, lambda a, b: a),
        (dt, lambda x, y: (x < y).where(x, y), lambda a, b: np.where(_floats(a, dt) < _floats(b, dt), a, b)),
        (dt, lambda x, y: x + y, add),
        (dtypes.int16, lambda x, y: x.bitcast(dtypes.int16), lambda a, b: a),
        (dt, lambda x, y: y.bitcast(dtypes.int16).bitcast(dt), lambda a, b: b),
    ]


def _run_kernel(prog: UOp, name: str, device: str, level: str | None, ins: list[np.ndarray],
                outs: list[DType]) -> list[np.ndarray]:
    bufs = {100 + j: x for j, x in enumerate(ins)}
    bufs.update({k: np.zeros(N, storage([], d).dtype) for k, d in enumerate(outs)})
    if level == "aarch64":  # C's own conversions of `_Float16` vectors (FCVTL / FCVTN), run under qemu
        target = cpu_target(level)
        if cross_compiler(target) is None or emulator(target) is None:
            pytest.skip("gcc-aarch64-linux-gnu or qemu-user is not installed")
        compile_emulated(prog, name, target)(bufs)
    else:
        with _place(device, level):
            (CPU if device == "cpu" else PY).compile(prog, name)(bufs)
    return [bufs[k].view(np.uint16) for k in range(len(outs))]


_KERNEL_PLACES = [*_PLACES, ("cpu", "aarch64")]


@pytest.mark.parametrize(("device", "level"), _KERNEL_PLACES, ids=[f"{d}-{lv or 'host'}" for d, lv in _KERNEL_PLACES])
@pytest.mark.parametrize("lanes", [1, 8, 16], ids=["scalar", "x8", "x16"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_moved_and_computed_in_one_kernel(dt: DType, lanes: int, device: str, level: str | None) -> None:
    """Loads that one kernel both stores (as they are, selected, bitcast) and computes with: the moved outputs keep
    every bit (devices.c_bits' float view), the sum is the arithmetic's (any nan for a nan). Vectors read input 0
    reversed (a gather) and input 1 in order."""
    if device == "python" and lanes > 1:
        pytest.skip("the python device runs the scalar kernel; vectors are the C renderer's")
    rng = np.random.default_rng(7)
    a, b = BITS.copy(), rng.permutation(BITS)
    cases = _mixed(dt)
    fns, outs = [f for _, f, _ in cases], [o for o, _, _ in cases]
    if lanes == 1:
        prog = multi_output(fns, outs, [dt, dt], N)
    else:
        prog = vector_multi_output([lambda v, s, f=f: f(v[0], v[1]) for f in fns], outs, [dt, dt], lanes, N // lanes,
                                   gathered=frozenset({0}))
        a = a.reshape(-1, lanes)[:, ::-1].reshape(-1).copy()  # the gather reads each block reversed
    got = _run_kernel(prog, f"mixed_{dt.name}_{lanes}", device, level, [_storage(a, dt), _storage(b, dt)], outs)
    if lanes > 1:
        a = a.reshape(-1, lanes)[:, ::-1].reshape(-1)  # the lanes the kernel computed with, in output order
    where = f"{dt.name} x{lanes} on {device} {level or 'host'}"
    for k, (_, _, oracle) in enumerate(cases):
        if device == "python" and k >= 3:
            continue  # the python device's bitcast gives a nan's bits as the canonical nan's (rewrite.semantics)
        with np.errstate(all="ignore"):
            want = oracle(a, b)
        if k == 2:  # the sum: exact but for a nan's bits
            assert_same(got[k] if dt is dtypes.bfloat16 else got[k].view(np.float16),
                        want if dt is dtypes.bfloat16 else want.view(np.float16), dt, f"sum {where}")
            continue
        _check(got[k], want, f"output {k} {where}")


@pytest.mark.parametrize("lanes", [1, 8, 16], ids=["scalar", "x8", "x16"])
@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_a_move_renders_no_conversion(dt: DType, lanes: int) -> None:
    """A kernel that only moves halves (a copy, a bitcast, a select between an input and -0.0 on a condition of
    their bits) moves uint16 bits: its text has no conversion to or from float lanes, and -0.0 is its bits."""
    i16 = dtypes.int16
    fns: list[Callable[[UOp, UOp], UOp]] = [
        lambda x, y: x,
        lambda x, y: x.bitcast(i16),
        lambda x, y: (x.bitcast(i16) < y.bitcast(i16)).where(x, UOp.const(-0.0, dt)),  # a pad's kind of select
    ]
    outs = [dt, i16, dt]
    if lanes == 1:
        prog = multi_output(fns, outs, [dt, dt], 64)
    else:
        prog = vector_multi_output([lambda v, s, f=f: f(v[0], v[1]) for f in fns], outs, [dt, dt], lanes, 4,
                                   gathered=frozenset({0}))
    body = CPU.render(prog, f"moves_{lanes}").split("\nvoid ")[-1]
    if lanes > 1:  # vector_multi_output also loads each block's first element as a scalar that nothing reads
        body = "\n".join(ln for ln in body.split("\n") if not re.match(r"\s*(float|_Float16) val\d+ = ", ln))
    for conversion in ("vh2f_", "vf2h_", "vload_f16_", "vstore_f16_", "bf16_to_f32", "f32_to_bf16", "vload_bf16_",
                       "vstore_bf16_"):
        assert conversion not in body, body
    assert "_Float16 val" not in body, body
    assert "uint16_t val" in body or f"u16x{lanes} val" in body, body
    assert "0x8000" in body, body
