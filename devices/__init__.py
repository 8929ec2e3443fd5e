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
vector of n lanes; lane counts are powers of two up to 64. A scalar operand of an op with vector operands is
broadcast to every lane. Additionally:

  VCONST   arg (values, dtype): a vector constant (lane i holds values[i]).
  INDEX    src (buf, i) with i of shape (n,): n addresses. LOAD of it gives a vector (a gather; when the
           lanes are base + (0, 1, ..., n-1) it is one contiguous load), STORE of it writes n elements. A
           gate may be a scalar or have shape (n,).
  INDEX    src (v, CONST k) with v a vector value (not a buffer): lane k of v, a scalar.
  STACK    src (s0, ..., s{n-1}) of scalars: the vector of those lanes.
  BUFFER   REG of n elements indexed by a VCONST (0..n-1): a vector accumulator.
  REDUCE-free: horizontal reductions are written as ALU ops on INDEX lane extractions.

GPU programs (the cuda device; the python device emulates them):

  SPECIAL  "gidx0/1/2": the block index on axis x/y/z (CUDA blockIdx), bound = the grid size on that axis;
           "lidx0/1/2": the thread index in the block (threadIdx), bound = the block size on that axis.
  BUFFER   addrspace LOCAL, shape (n,), n constant: memory shared by the threads of one block (`__shared__`).
  BARRIER  every thread of the block waits here (`__syncthreads()`); LOCAL reads after it go through
           AFTER(buf, BARRIER).
  ATOMICADD src (INDEX, value): adds value to the element atomically; no result.
  Values are scalars on the GPU in this version (no vector lanes).

IDIV/MOD are floor division; a device that lacks them declares so and lowering gives it CDIV/CMOD plus a fix.
A device declares `supported_ops`; lowering decomposes the rest (rules/decompositions.py).

Registry: `get_device(name)` returns the device object ("cpu", "python", "cuda");
`DEVICE` picks the default.
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


def get_device(name: str) -> Any:
    key = name.split(":")[0].lower()
    if key in _PLANNED:
        raise DeviceError(f"device {name!r}: {_PLANNED[key]}")
    if key not in _MODULES:
        raise DeviceError(f"unknown device {name!r}; known devices: {', '.join(sorted(_MODULES))}")
    if key not in _loaded:
        _loaded[key] = importlib.import_module(_MODULES[key]).DEVICE
    return _loaded[key]


def target_for(name: str) -> Target:
    """The default Target of device `name` (e.g. "cpu", "cpu:1", "python")."""
    return get_device(name).default_target()  # type: ignore[no-any-return]  # registry entries are modules' DEVICE


def known_devices() -> list[str]:
    return sorted(_MODULES)
