"""Hopper's tensor memory accelerator (TMA) and shared-memory barriers (mbarrier): the INS instructions that
lower.tc_wgmma's `tma` form uses, what they mean, and the tensor maps a launch passes.

Every one is an INS (a single machine instruction, seed 001) whose first sources are read as values and whose
remaining sources only order it (they are listed before it):

  ("mbarrier.init", count)        (INDEX of a LOCAL uint64 mbarrier, leader): the leader thread initializes the
                                  barrier for `count` arrivals a phase, phase 0.
  ("mbarrier.expect_tx", nbytes)  (mbarrier INDEX, leader): the leader arrives once and says the phase's copies
                                  bring `nbytes` more bytes (`mbarrier.arrive.expect_tx`).
  ("tma.load", dims, strides, box, swizzle)
                                  (INDEX of the box's first element in a LOCAL buffer, INDEX of the tensor's
                                  element 0 in a GLOBAL buffer, mbarrier INDEX, leader, one coordinate per dim):
                                  the leader copies the box at those coordinates (innermost first) of the tensor
                                  of `dims` elements (innermost first, its elements contiguous along dims[0],
                                  `strides` elements apart along the others) into shared memory, zeros where the
                                  box leaves the tensor; the copy completes `prod(box) x itemsize` bytes of the
                                  mbarrier's phase (`cp.async.bulk.tensor`). The box lands row-major (dims[0]
                                  fastest); with swizzle 1 (the 128-byte swizzle: box[0] x itemsize = 128 and the
                                  destination 1024-byte aligned) row r's 16-byte chunk c at chunk c ^ (r % 8), the
                                  layout wgmma's swizzle mode 1 reads.
  ("mbarrier.wait",)              (mbarrier INDEX, parity): every thread of the block waits until the phase of
                                  that parity has completed: all its arrivals made and its copies landed
                                  (`mbarrier.try_wait.parity` in a loop). Like a BARRIER, every thread meets it.

BARRIER "mbarrier.init.fence" makes initialized barriers visible to the copy engine (fence.mbarrier_init) and
is a __syncthreads.

A launch passes one tensor map (CUDA's 128-byte CUtensorMap, `cuTensorMapEncodeTiled`) per distinct (GLOBAL
slot, offset, dims, strides, box, swizzle) of the program's copies, after its variables, in order of first use
(`tensor_maps`).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple, cast

from devices.python_gpu import swizzle_128b
from rewrite.dtype import DType, dtypes
from rewrite.ops import Ops
from rewrite.uop import BufferArg, UOp

INIT, EXPECT, LOAD, WAIT = "mbarrier.init", "mbarrier.expect_tx", "tma.load", "mbarrier.wait"
INIT_FENCE = "mbarrier.init.fence"  # a BARRIER arg
SWIZZLE_BYTES = 128  # swizzle 1: rows of 128 bytes in 1024-byte atoms
MAX_BOX = 256  # elements of a box along one dim (cuTensorMapEncodeTiled)
MAX_RANK = 5
# cuTensorMapEncodeTiled's enums (cuda.h): CUtensorMapDataType, CUtensorMapSwizzle, CUtensorMapL2promotion
TMA_DTYPES = {dtypes.float16: 6, dtypes.bfloat16: 9, dtypes.float32: 7}
CU_SWIZZLE = {0: 0, 1: 3}  # none, 128B
L2_PROMOTION_256B = 3


def ins_kind(u: UOp) -> str | None:
    """The TMA / mbarrier instruction an INS is (module docstring), None for any other."""
    arg = u.arg
    if u.op is Ops.INS and isinstance(arg, tuple) and arg and arg[0] in (INIT, EXPECT, LOAD, WAIT):
        return cast(str, arg[0])
    return None


def value_sources(u: UOp) -> int:
    """How many leading sources of a TMA / mbarrier INS are read as values (the rest only order it)."""
    kind = ins_kind(u)
    if kind == LOAD:
        return 4 + len(cast(tuple, u.arg)[1])
    return 2


class TensorMap(NamedTuple):
    """One tensor map a launch passes (module docstring): the GLOBAL slot and the element offset its tensor
    starts at, its dtype, dims and strides (elements, innermost first; strides for dims 1..), box, swizzle."""

    slot: int
    offset: int
    dtype: DType
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int

    def encode_args(self, ptr: int) -> tuple:
        """cuTensorMapEncodeTiled's arguments after the map itself: (data type, rank, global address, global dims,
        global strides in bytes, box dims, element strides, interleave, swizzle, L2 promotion, OOB fill)."""
        size = self.dtype.itemsize
        return (TMA_DTYPES[self.dtype], len(self.dims), ptr + self.offset * size, self.dims,
                tuple(s * size for s in self.strides), self.box, (1,) * len(self.dims), 0, CU_SWIZZLE[self.swizzle],
                L2_PROMOTION_256B, 0)


def load_problem(u: UOp, dtype: DType, offset: int) -> str | None:
    """What is wrong with the static part of a "tma.load" (its arg, the tensor's dtype and offset), None if
    nothing: the limits of cuTensorMapEncodeTiled and of the swizzle."""
    arg = cast(tuple, u.arg)
    if len(arg) != 5 or not all(isinstance(t, tuple) for t in arg[1:4]) or arg[4] not in CU_SWIZZLE:
        return "arg is ('tma.load', dims, strides, box, swizzle 0 or 1)"
    dims, strides, box, swizzle = arg[1:]
    rank = len(dims)
    if not 1 <= rank <= MAX_RANK or len(strides) != rank - 1 or len(box) != rank:
        return f"{rank} dims (1..{MAX_RANK}) need {rank - 1} strides and {rank} box sizes"
    if not all(isinstance(x, int) and x > 0 for x in (*dims, *strides, *box)):
        return "dims, strides and box sizes are positive ints"
    if dtype not in TMA_DTYPES:
        return f"the tensor is {dtype.name}; tma copies {', '.join(d.name for d in TMA_DTYPES)}"
    size = dtype.itemsize
    if any(b > MAX_BOX for b in box) or (box[0] * size) % 16:
        return f"box {box}: at most {MAX_BOX} elements a dim and a multiple of 16 bytes along dims[0]"
    if any((s * size) % 16 or s * size >= 1 << 40 for s in strides) or (offset * size) % 16:
        return f"strides {strides} and offset {offset} (elements of {size} bytes) must be multiples of 16 bytes"
    if swizzle == 1 and box[0] * size != SWIZZLE_BYTES:
        return f"the 128-byte swizzle copies rows of 128 bytes (box[0] = {SWIZZLE_BYTES // size}), not {box[0]}"
    return None


def box_bytes(u: UOp) -> int:
    """Bytes a "tma.load" brings (its whole box: the zero-filled part counts)."""
    arg = cast(tuple, u.arg)
    return prod(arg[3]) * u.src[1].dtype.itemsize


def box_place(r: int, i: int, box0: int, itemsize: int, swizzle: int) -> int:
    """The element offset from the box's first element of element i of box row r (rows: the box's dims past the
    first, flattened row-major), under `swizzle` (the destination 1024-byte aligned for swizzle 1)."""
    at = (r * box0 + i) * itemsize
    return (swizzle_128b(at) if swizzle == 1 else at) // itemsize


def box_coords(box: tuple[int, ...]) -> list[tuple[int, ...]]:
    """The box's rows in order: the offsets along dims 1.. of each row (the last dim slowest)."""
    rows: list[tuple[int, ...]] = [()]
    for b in box[1:]:
        rows = [(*r, k) for k in range(b) for r in rows]
    return rows


def tensor_map_of(u: UOp, slot: int, offset: int) -> TensorMap:
    arg = cast(tuple, u.arg)
    return TensorMap(slot, offset, u.src[1].dtype, arg[1], arg[2], arg[3], arg[4])


def tensor_maps(instrs: tuple[UOp, ...]) -> tuple[list[TensorMap], dict[UOp, int]]:
    """The tensor maps a launch of a program with these instructions passes (module docstring), and the index
    of each "tma.load"'s map among them."""
    from rewrite.props import base_of

    maps: list[TensorMap] = []
    of: dict[UOp, int] = {}
    for u in instrs:
        if ins_kind(u) == LOAD:
            at = u.src[1]
            g = base_of(at.src[0])
            tm = tensor_map_of(u, cast(int, cast(BufferArg, g.arg).slot), int(cast(tuple, at.src[1].arg)[0]))
            if tm not in maps:
                maps.append(tm)
            of[u] = maps.index(tm)
    return maps, of


__all__ = ["EXPECT", "INIT", "INIT_FENCE", "LOAD", "TMA_DTYPES", "WAIT", "TensorMap", "box_bytes", "box_coords",
           "box_place", "ins_kind", "load_problem", "tensor_map_of", "tensor_maps", "value_sources"]
