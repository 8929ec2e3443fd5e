"""Devices: thin modules that render a LINEAR kernel to source, compile it, allocate buffers and launch.

The contract between `lower/` and a device is the LINEAR program, a UOp `LINEAR(i0, i1, ...)` whose sources
are the kernel's instructions in execution order. Every source of an instruction appears earlier in the
list. Values are scalars (shape ()); an instruction's value is named by its UOp (identity), and each UOp
appears once. The instructions:

  BUFFER   arg BufferArg(slot, dtype, device, addrspace), shape (n,). GLOBAL: kernel parameter `data{slot}`,
           a pointer to n elements of dtype. REG: a local array of n elements (accumulators), declared where
           it appears.
  PARAM    a symbolic int variable (arg.slot is its name, src[1], src[2] its CONST bounds): an int kernel
           parameter passed by name at launch.
  CONST    arg (value, dtype).
  SPECIAL  arg name (e.g. "core_id", "gidx0"), src (bound,): a hardware/thread index in [0, bound).
  RANGE    src (bound,), arg (id, AxisType): opens `for (ridx = 0; ridx < bound; ridx++)`.
  END      src (body, range): closes the loop of `range` (the most recently opened one still open).
  INDEX    src (buf, i): the address of element i of buf (i is an index/int scalar).
  LOAD     src (index,) or (index, alt, gate): read the element; with a gate, `gate ? *index : alt`.
  STORE    src (index, value) or (index, value, gate): write (only when gate is true).
  AFTER    src (x, deps...): the value x; deps only order.
  IF       src (gate,) / ENDIF src (if,): a conditional block.
  ALU ops  (GroupOp.ALU) and CAST, BITCAST: elementwise on scalars; exact meaning in rewrite.semantics.

Vector values (after the Expand stage upcasts a range into lanes): any value may have shape (n,), n > 1, a
vector of n lanes; lane counts are powers of two up to 64 (128 for a wgmma's accumulators). A scalar operand of
an op with vector operands is broadcast to every lane. Additionally:

  VCONST   arg (values, dtype): a vector constant (lane i holds values[i]).
  INDEX    src (buf, i) with i of shape (n,): n addresses. LOAD of it gives a vector (a gather; when the
           lanes are base + (0, 1, ..., n-1) it is one contiguous load), STORE of it writes n elements. A
           gate may be a scalar or have shape (n,).
  INDEX    src (v, CONST k) with v a vector value (not a buffer): lane k of v, a scalar.
  STACK    src (s0, ..., s{n-1}) of scalars: the vector of those lanes.
  BUFFER   REG of n elements indexed by a VCONST (0..n-1): a vector accumulator.
  REDUCE-free: horizontal reductions are written as ALU ops on INDEX lane extractions.

GPU kernels (lowered for a Target with warp_size > 0, e.g. devices.base.gpu_target; lower/gpu.py):

  SPECIAL  "gidx0"/"gidx1"/"gidx2": the block index along grid x/y/z, src (bound,) = the grid size on that axis;
           "lidx0"/"lidx1"/"lidx2": the thread index inside the block along x/y/z, bound = the block size on
           that axis. The bounds are CONST ints and are the launch size (a missing axis has size 1; the product
           of the lidx bounds is at most 1024; gidx1 and gidx2 at most 65535). lidx0 is the fastest-varying
           axis (consecutive threads touch consecutive elements).
  BUFFER   addrspace LOCAL, shape (n,): a shared-memory array of n elements per block (CUDA `__shared__`),
           declared where it appears (at the top level of the kernel); its slot numbers its own namespace
           (LOCAL slots 0, 1, ... apart from GLOBAL and REG slots). Never initialized: reads only what a
           thread of the block stored.
  BARRIER  src (the stores it waits for): every thread of the block waits (`__syncthreads()`); never inside an
           IF (every thread must reach it). Reads of a LOCAL buffer after it go through AFTER(buffer, BARRIER),
           an AFTER whose value is the whole buffer (shape (n,)): INDEX(AFTER(local, BARRIER), i); so do the
           stores of a later round (a reduction tree stores to INDEX(AFTER(local, BARRIER), lidx0), gated).
  ATOMICADD src (INDEX of a GLOBAL buffer, scalar value of its dtype): `atomicAdd(&buf[i], value)`; a statement.
  SHUFFLE  arg k (1, 2, 4, 8 or 16), src (one scalar of 16, 32 or 64 bits: devices.linear.SHUFFLE_DTYPES): the
           value lane (l XOR k) of the warp brought, for lane l (`__shfl_xor_sync(0xffffffff, v, k)`); every
           lane of every warp of the block reaches it (never inside an IF), and the block is whole warps.

  WMMA     arg (16, 8, 16, in dtype, float32) (M, N, K; in dtype float16 or bfloat16), src (A, B, C):
           `mma.sync.aligned.m16n8k16.row.col.f32.{f16|bf16}.{f16|bf16}.f32` by the 32 lanes of a warp (lane l =
           lidx0 % 32, a warp is 32 consecutive lidx0; g = l // 4, t = l % 4). A = STACK of 8 scalars, element
           e = A[g + 8*((e//2)%2)][2t + e%2 + 8*(e//4)] (registers {a0,a1} {a2,a3} {a4,a5} {a6,a7}); B = STACK
           of 4, e = B[2t + e%2 + 8*(e//2)][g] ({b0,b1} {b2,b3}); C = STACK of 4 float32, e = C[g + 8*(e//2)]
           [2t + e%2]. The value has shape (4,), D in C's layout, read only as INDEX(wmma, CONST e).
           arg (16, 8, 8, float32, float32): the tf32 mma (`...m16n8k8.row.col.f32.tf32.tf32.f32`): A = STACK
           of 4 float32, e = A[g + 8*(e%2)][t + 4*(e//2)]; B = STACK of 2, e = B[t + 4*e][g]; each A and B
           element is first rounded to tf32 (10 mantissa bits, to nearest, ties away from zero); C and D as
           above. Every thread of the block reaches it (like a BARRIER). The accumulator is a REG buffer of
           float32 read and written by scalar INDEXes.

  GPU kernels use scalar values only, with two exceptions: WMMA's fragments, and the 8-lane copy chunks of a
  tensor-core kernel staged through shared memory (lower.tc_smem): a LOAD of INDEX(global, base + VCONST(0..7))
  (ungated, or gated by a scalar with 0 for the off value; where the operand is cast in the kernel, a CAST of
  it) and a STORE of it to INDEX(local, base' + VCONST(0..7)), or to INDEX(local, base' + VCONST(0, s, .., 7s))
  (a chunk stored into a column-major tile, lower.simt_smem); and lower.simt_smem's 16-byte reads of a LOCAL
  tile, LOAD of INDEX(local, base + VCONST(0..W-1)) (W = 4 float32, 2 float64), its lanes taken by INDEX(v,
  CONST k). The cuda renderer makes such an access one 16-byte access where it can prove base 16-byte aligned
  (devices.cuda_render), else lane by lane.
  UPCAST/UNROLL axes become separate scalar instructions (copies of the code, lower.expand), never vector lanes.
  A store every thread of a block would make alike (the result of a reduction shared by the block) is gated
  to lidx0 == 0; a warp's total for the block's fold is stored by lane 0 of the warp (lower.gpu). Loads and
  stores past a padded axis's end carry a gate (never an out-of-bounds access).
  The python device emulates the grid exactly (devices/python.py): blocks one by one, the threads of a block
  in lockstep from BARRIER to BARRIER (and to each WMMA and SHUFFLE, where a warp's lanes exchange values),
  LOCAL memory per block.

IDIV/MOD are floor division; a device that lacks them declares so and lowering gives it CDIV/CMOD plus a fix.
A device declares `supported_ops`; lowering decomposes the rest (rules/decompositions.py).

Registry: `get_device(name)` returns the device object ("cpu", "python", "cuda");
`DEVICE` picks the default.

Devices of other processes (MPI ranks, devices/mpi.py): `NAME@r` is rank r's device NAME ("cpu@1", "cpu:0@1").
A name without `@` is a device every rank has (its own, each rank holding the same data there). `rank_of` and
`local_name` split a name; the device object is the same (`get_device("cpu@1")` is the cpu device).
`target_for(name)` is the device's default Target (devices.base): for cpu, the host's as detected, or the level
`CPU_TARGET` names. Lowering takes a Target as an argument; nothing below reads the environment for it.
"""

from __future__ import annotations

import importlib
from typing import Any

from devices.base import Target
from rewrite.errors import DeviceError

_MODULES = {"cpu": "devices.cpu", "python": "devices.python", "cuda": "devices.cuda"}
_PLANNED: dict[str, str] = {}
_loaded: dict[str, Any] = {}


def rank_of(name: str) -> int | None:
    """The MPI rank that owns device `name` ("cpu@1" -> 1), or None for a device every rank has ("cpu")."""
    _, at, r = name.partition("@")
    return int(r) if at and r.isdigit() else None


def spans_ranks(devices: tuple[str, ...]) -> bool:
    """Whether a device tuple has one device on each of several MPI ranks (no rank twice, none unranked)."""
    ranks = [rank_of(d) for d in devices]
    return len(ranks) > 1 and None not in ranks and len(set(ranks)) == len(ranks)


def local_name(name: str) -> str:
    """The device's name inside its own rank ("cpu:0@1" -> "cpu:0")."""
    return name.partition("@")[0]


def get_device(name: str) -> Any:
    key = local_name(name).split(":")[0].lower()
    if key in _PLANNED:
        raise DeviceError(f"device {name!r}: {_PLANNED[key]}")
    if key not in _MODULES:
        raise DeviceError(f"unknown device {name!r}; known devices: {', '.join(sorted(_MODULES))}")
    if key not in _loaded:
        _loaded[key] = importlib.import_module(_MODULES[key]).DEVICE
    return _loaded[key]


def target_for(name: str) -> Target:
    """The default Target of device `name` (e.g. "cpu", "cpu:1", "cpu@1", "python")."""
    return get_device(name).default_target()  # type: ignore[no-any-return]  # registry entries are modules' DEVICE


def known_devices() -> list[str]:
    return sorted(_MODULES)
