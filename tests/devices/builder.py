"""Building LINEAR programs by hand for the device tests, and comparing device outputs exactly."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

from devices.memory import from_bfloat16_bits, np_dtype, to_bfloat16_bits
from rewrite.dtype import AddrSpace, DType, dtypes
from rewrite.env import Context
from rewrite.ops import Ops
from rewrite.uop import UOp

ALL_DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32,
              dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
              dtypes.index]


def linear(*instrs: UOp) -> UOp:
    """LINEAR of `instrs` in the given order, each preceded by its sources not yet listed (depth first).
    A BUFFER's or PARAM's shape and bounds are not listed; statements (RANGE, END, STORE, ...) are placed
    where they are given, so the caller controls the loop structure."""
    out: list[UOp] = []
    seen: set[UOp] = set()
    for ins in instrs:
        stack: list[tuple[UOp, bool]] = [(ins, False)]
        while stack:
            u, done = stack.pop()
            if done:
                if u not in seen:
                    seen.add(u)
                    out.append(u)
                continue
            if u in seen:
                continue
            stack.append((u, True))
            if u.op not in (Ops.BUFFER, Ops.PARAM):
                stack.extend((s, False) for s in reversed(u.src) if s not in seen)
    return UOp(Ops.LINEAR, tuple(out))


def buf(slot: int, dtype: DType, n: int | UOp) -> UOp:
    return UOp.buffer(slot, dtype, (n,))


def reg(slot: int, dtype: DType, n: int) -> UOp:
    return UOp.buffer(slot, dtype, (n,), addrspace=AddrSpace.REG)


def end(body: UOp, *ranges: UOp) -> UOp:
    return UOp(Ops.END, (body, *ranges))


def elementwise(fn: Callable[..., UOp], out_dtype: DType, in_dtypes: list[DType], n: int = 8) -> UOp:
    """out(slot 0)[i] = fn(in1[i], in2[i], ...) for i < n; inputs in slots 1.."""
    ins = [buf(i + 1, dt, n) for i, dt in enumerate(in_dtypes)]
    out = buf(0, out_dtype, n)
    r = UOp.range(n, 0)
    val = fn(*(b.index(r).load() for b in ins))
    st = out.index(r).store(val)
    return linear(out, *ins, r, st, end(st, r))


def multi_output(fns: list[Callable[..., UOp]], out_dtypes: list[DType], in_dtypes: list[DType], n: int = 8) -> UOp:
    """out_k(slot k)[i] = fns[k](loads) for each k; inputs in slots 100.. (one loop, one load per input)."""
    ins = [buf(100 + i, dt, n) for i, dt in enumerate(in_dtypes)]
    outs = [buf(k, dt, n) for k, dt in enumerate(out_dtypes)]
    r = UOp.range(n, 0)
    loads = [b.index(r).load() for b in ins]
    stores = [o.index(r).store(fn(*loads)) for o, fn in zip(outs, fns, strict=True)]
    # END names one body: the last STORE; the others are inside the loop because they are listed before it
    return linear(*outs, *ins, r, *loads, *stores, end(stores[-1], r))


def values(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """An output array as comparable values (bfloat16 bits decoded)."""
    return from_bfloat16_bits(arr) if dtype is dtypes.bfloat16 else arr


def assert_same(got: np.ndarray, want: np.ndarray, dtype: DType, what: str = "", ulps: int = 0) -> None:
    """Exact equality: floats bit for bit (so -0.0 != 0.0) except that any nan equals any nan; `ulps` allows
    that many units in the last place between finite floats."""
    g, w = values(got, dtype), values(want, dtype)
    if dtype.is_float:
        gn, wn = np.isnan(g), np.isnan(w)
        bad = gn != wn
        both = ~gn & ~wn
        bits = {2: np.int16, 4: np.int32, 8: np.int64}[g.dtype.itemsize]
        gi, wi = g.view(bits).astype(np.int64), w.view(bits).astype(np.int64)
        # ordered integer images of the floats, so that a difference counts ulps across zero too
        go = np.where(gi < 0, -(gi & ~(np.int64(-1) << (8 * g.dtype.itemsize - 1))), gi)
        wo = np.where(wi < 0, -(wi & ~(np.int64(-1) << (8 * g.dtype.itemsize - 1))), wi)
        diff = np.abs(go - wo)
        # with ulps, the largest finite value and infinity are one ulp apart (an overflow-boundary rounding)
        bad |= both & ((diff > ulps) if ulps else (gi != wi))
    else:
        bad = g != w
    if bad.any():
        i = np.flatnonzero(bad)[:5]
        raise AssertionError(f"{what} ({dtype.name}): mismatch at {i.tolist()}: got {g[i].tolist()}, "
                             f"want {w[i].tolist()}")


# ---------------------------------------------------------------- every ALU op on one dtype, in one kernel

UNARY = [Ops.NEG, Ops.NOT, Ops.RECIP, Ops.TRUNC, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT]
BINARY = [Ops.ADD, Ops.SUB, Ops.MUL, Ops.DIV, Ops.MAX, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.CMPGT, Ops.CMPGE,
          Ops.CMPLE, Ops.AND, Ops.OR, Ops.XOR, Ops.POW, Ops.IDIV, Ops.MOD]
TRANSCENDENTAL = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW})
# operand slots of alu_kernel: a, b, c any values; d a nonzero divisor; s a shift amount in range; g a bool
A, B, C, D, S, G = 100, 101, 102, 103, 104, 105


def _operands(op: Ops, a: UOp, b: UOp, c: UOp, d: UOp, s: UOp, g: UOp) -> tuple[UOp, ...]:
    if op in UNARY:
        return (a,)
    if op in (Ops.CDIV, Ops.CMOD, Ops.IDIV, Ops.MOD):
        return (a, d)
    if op in (Ops.SHL, Ops.SHR):
        return (a, s)
    if op is Ops.WHERE:
        return (g, a, b)
    if op is Ops.MULACC:
        return (a, b, c)
    return (a, b)


def alu_ops(dtype: DType, supported: frozenset[Ops]) -> list[Ops]:
    """The ops of `supported` that accept `dtype` operands, in a fixed order."""
    order = [*UNARY, *BINARY, Ops.SHL, Ops.SHR, Ops.CDIV, Ops.CMOD, Ops.WHERE, Ops.MULACC, Ops.THREEFRY]
    x = UOp.const(0.0 if dtype.is_float else 0, dtype)
    out = []
    for op in order:
        if op not in supported:
            continue
        try:
            UOp(op, _operands(op, x, x, x, x, x, UOp.const(True)))
        except (TypeError, ValueError):
            continue
        out.append(op)
    return out


def alu_kernel(dtype: DType, ops: list[Ops], n: int = 8) -> tuple[UOp, list[DType]]:
    """out_k(slot k)[i] = ops[k](operands at i); returns the LINEAR and the output dtypes."""
    ins = [dtype] * 5 + [dtypes.bool]
    x = UOp.const(0.0 if dtype.is_float else 0, dtype)
    out_dtypes = [UOp(op, _operands(op, x, x, x, x, x, UOp.const(True))).dtype for op in ops]
    fns = [lambda *v, op=op: UOp(op, _operands(op, *v)) for op in ops]
    return multi_output(fns, out_dtypes, ins, n), out_dtypes


def operand_inputs(op: Ops, arrays: dict[int, np.ndarray]) -> list[np.ndarray]:
    """The input arrays an op of alu_kernel reads, in operand order."""
    if op in UNARY:
        return [arrays[A]]
    if op in (Ops.CDIV, Ops.CMOD, Ops.IDIV, Ops.MOD):
        return [arrays[A], arrays[D]]
    if op in (Ops.SHL, Ops.SHR):
        return [arrays[A], arrays[S]]
    if op is Ops.WHERE:
        return [arrays[G], arrays[A], arrays[B]]
    return [arrays[A], arrays[B], arrays[C]] if op is Ops.MULACC else [arrays[A], arrays[B]]


# ---------------------------------------------------------------- input values

def value_strategy(dtype: DType, small: bool = False) -> st.SearchStrategy:
    """Hypothesis values of `dtype` as numpy storage scalars' Python values (bfloat16 as float32 values)."""
    if dtype is dtypes.bool:
        return st.booleans()
    if dtype is dtypes.index:
        return st.integers(-(1 << 20), 1 << 20)
    if dtype.is_int:
        return st.integers(-128, 127).filter(lambda v: dtype.min <= v <= dtype.max) if small else \
            st.integers(int(dtype.min), int(dtype.max))
    if dtype.itemsize == 2:  # every 16-bit pattern: subnormals, infinities and nans included
        view = np.float16 if dtype is dtypes.float16 else None
        vals = st.integers(0, 0xFFFF).map(lambda b: float(np.uint16(b).view(view)) if view else
                                          float(from_bfloat16_bits(np.array([b], np.uint16))[0]))
        return vals.filter(math.isfinite) if small else vals
    return st.floats(width=dtype.bits, allow_nan=not small, allow_infinity=not small)


def storage(values_: list, dtype: DType) -> np.ndarray:
    """A buffer of `dtype` holding `values_` (bfloat16: float values rounded to bfloat16 bits)."""
    if dtype is dtypes.bfloat16:
        return to_bfloat16_bits(np.array(values_, dtype=np.float32))
    return np.array(values_, dtype=np_dtype(dtype))


def python_values(arr: np.ndarray, dtype: DType) -> list:
    """A buffer's elements as the Python values rewrite.semantics works on."""
    return values(arr, dtype).tolist()


# ---------------------------------------------------------------- vector programs (shape (n,) values)


def vconst(values: list, dtype: DType = dtypes.index) -> UOp:
    return UOp.vconst(values, dtype)


def block_positions(r: UOp, lanes: int, reverse: bool = False) -> UOp:
    """The positions r*lanes + (0..lanes-1): consecutive (one vector access), or reversed (a gather/scatter)."""
    order = list(range(lanes))[::-1] if reverse else list(range(lanes))
    return r * lanes + vconst(order)


def vector_multi_output(fns: list[Callable[[list[UOp], list[UOp]], UOp]], out_dtypes: list[DType],
                        in_dtypes: list[DType], lanes: int = 8, blocks: int = 2,
                        gathered: frozenset[int] = frozenset()) -> UOp:
    """out_k(slot k)[block] = fns[k](vectors, scalars) over `blocks` blocks of `lanes` elements. Input j (slot
    100 + j) is read as vectors[j], the block's lanes (in reverse order, a gather, when j is in `gathered`),
    and as scalars[j], the block's first element. Outputs are stored as consecutive lanes."""
    n = lanes * blocks
    ins = [buf(100 + j, dt, n) for j, dt in enumerate(in_dtypes)]
    outs = [buf(k, dt, n) for k, dt in enumerate(out_dtypes)]
    r = UOp.range(blocks, 0)
    vecs = [b.index(block_positions(r, lanes, j in gathered)).load() for j, b in enumerate(ins)]
    scalars = [b.index(r * lanes).load() for b in ins]
    stores = [o.index(block_positions(r, lanes)).store(fn(vecs, scalars)) for o, fn in zip(outs, fns, strict=True)]
    return linear(*outs, *ins, r, *vecs, *scalars, *stores, end(stores[-1], r))


def matmul_tile(m: int, n: int, k: int, rows: int = 4, lanes: int = 16) -> UOp:
    """c = a @ b (float32, row-major m x k and k x n) with a rows x lanes register tile: per tile, a REG of
    rows*lanes accumulators (vectors of `lanes`, indexed by VCONSTs), each k step loading one vector of b and a
    scalar of a per row, and updating with a separate MUL then ADD (no fused multiply-add)."""
    f32 = dtypes.float32
    a, b, c, acc = buf(1, f32, m * k), buf(2, f32, k * n), buf(0, f32, m * n), reg(100, f32, rows * lanes)
    i, j, kk = UOp.range(m // rows, 0), UOp.range(n // lanes, 1), UOp.range(k, 2)
    lane = vconst(list(range(lanes)))
    tile = [acc.index(vconst(list(range(q * lanes, (q + 1) * lanes)))) for q in range(rows)]
    row = [i * rows + q for q in range(rows)]
    col = j * lanes
    inits = [t.store(vconst([0.0] * lanes, f32)) for t in tile]
    bv = b.index(kk * n + col + lane).load()
    upds = [t.store(t.load() + a.index(rq * k + kk).load() * bv) for t, rq in zip(tile, row, strict=True)]
    ek = end(upds[-1], kk)
    outs = [c.index(rq * n + col + lane).store(t.after(ek).load()) for t, rq in zip(tile, row, strict=True)]
    ej = end(outs[-1], j)
    # row offsets may be shared by the k loop and the stores after it (k == n), so they are listed before it opens
    return linear(c, a, b, i, *row, *(rq * k for rq in row), *(rq * n for rq in row), j, col, acc, *inits, kk, *upds,
                  ek, *outs, ej, end(ej, i))


def matmul_tile_scalar(m: int, n: int, k: int, rows: int = 4, cols: int = 16) -> UOp:
    """matmul_tile's computation with scalars only: rows*cols accumulators, one scalar op per element."""
    f32 = dtypes.float32
    a, b, c, acc = buf(1, f32, m * k), buf(2, f32, k * n), buf(0, f32, m * n), reg(100, f32, rows * cols)
    i, j, kk = UOp.range(m // rows, 0), UOp.range(n // cols, 1), UOp.range(k, 2)
    cells = [[acc.index(q * cols + e) for e in range(cols)] for q in range(rows)]
    row = [i * rows + q for q in range(rows)]
    col = j * cols
    inits = [x.store(UOp.const(0.0, f32)) for line in cells for x in line]
    bs = [b.index(kk * n + col + e).load() for e in range(cols)]
    avs = [a.index(rq * k + kk).load() for rq in row]
    upds = [x.store(x.load() + av * bv) for line, av in zip(cells, avs, strict=True) for x, bv in zip(line, bs,
                                                                                                       strict=True)]
    ek = end(upds[-1], kk)
    outs = [c.index(rq * n + col + e).store(x.after(ek).load()) for line, rq in zip(cells, row, strict=True)
            for e, x in enumerate(line)]
    ej = end(outs[-1], j)
    return linear(c, a, b, i, *row, *(rq * k for rq in row), *(rq * n for rq in row), j, col, acc, *inits, kk, *upds,
                  ek, *outs, ej, end(ej, i))


def has_reduce(ast: UOp) -> bool:
    """Whether a scheduled kernel's AST sums over a loop (a matmul's product kernel, not the copies around it:
    on a cpu target tensor.nn may pad a matmul's columns, adding a pad copy before and a cut-back copy after)."""
    return any(u.op is Ops.REDUCE for u in ast.toposort())


def gpu_graphs(sm: str = "sm_90") -> Context:
    """Build Tensor graphs for a GPU target: their tensors on the python device with PYTHON_TARGET=sm, whose Target
    is the GPU's, so graph-level choices (a cpu target's column panels and float32 copies of 16-bit matmul
    operands, tensor.nn) are the GPU's, as on the cuda device. Nothing runs: only the schedule's ASTs are used."""
    return Context(DEVICE="python", PYTHON_TARGET=sm)
