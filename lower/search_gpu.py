"""BEAM search for GPU targets: candidates around the GPU heuristics' opts, timed on the CUDA device.

`beam_search_gpu(ast, bufs, target, width)` starts from lower.gpu.gpu_opts (a one-thread kernel, where the CPU
search starts, would take minutes on a large GPU kernel) and each round times the neighbours of every kept opt
list (`neighbours`), keeping the `width` fastest, until a round gains less than 2% or after `max_rounds`:

- a tensor-core kernel (a TC opt): its arg changed one knob at a time: warp tile tm in 1, 2, 4 and tn in 1, 2, 4,
  8 (tn 8: a 64 x 64 warp tile); warps wu, wv in 1, 2, 4; k step bk in 16, 32, 64; cp.async stages in 0
  (lower.tc_smem's register pipeline), 2, 3, 4; the direct form (lower.wmma) with the current warp tile. For
  Hopper's warpgroup MMA (lower.tc_wgmma, WGMMA=1): wgmma n in 64, 128, 256; tn, warpgroups wgu, wgv in 1, 2; bk in 32,
  64, 128; stages 2..5; the 128-byte swizzle, the in-flight group and the TMA copies each on or off; and the
  mma.sync form. A combination lowering refuses (KernelOptError: too many threads, too much shared memory,
  operands cp.async or the TMA cannot copy) is skipped.
- a sum of products staged for CUDA cores (a SIMT opt, lower.simt_smem): its arg changed one knob at a time:
  register tile tm, tn in 4, 8; threads lu, lv in 8, 16, 32; k step bk in 8, 16, 32; and lower.gpu's unstaged
  register tile, where it fits.
- any other kernel: the heuristics' opts plus one SPLIT of an axis into UPCAST or UNROLL (2, 4) or a LOCAL split
  of a different size (32, 64, 128, 256 threads), where the axis divides; where a block shares its rows'
  reductions (GROUP_REDUCE: softmax, layernorm), its GROUP_REDUCE and LOCAL splits (and their pads) take one of
  those sizes together instead of the LOCAL change.

Each candidate is compiled for the target and run on the device's buffers (random inputs, made once); its output
must match the heuristics' kernel (rtol 1e-2 for 16-bit outputs, else 1e-3), then it is timed with CUDA events
(the mean of `reps` launches, CudaKernel.time). With no usable GPU it raises DeviceError saying so: the
estimate model (lower.estimate) counts work but does not rank kernels, so there is nothing honest to fall back
to. lower.search.beam_search sends GPU targets here; the cache there keys the result by the Target.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devices.base import Target
from lower.opt_apply import Opt, OptOps, axes, size
from rewrite import AxisType, UOp
from rewrite.env import Context
from rewrite.errors import CompilerError, DeviceError

_TC_KNOBS = ((1, (1, 2, 4)), (2, (1, 2, 4, 8)), (3, (1, 2, 4)), (4, (1, 2, 4)), (5, (16, 32, 64)), (6, (0, 2, 3, 4)))
# (shape, "wgmma", n, tm, tn, wgu, wgv, bk, stages, swizzle, overlap, tma): lower.tc_wgmma
_WGMMA_KNOBS = ((2, (64, 128, 256)), (4, (1, 2)), (5, (1, 2)), (6, (1, 2)), (7, (32, 64, 128)), (8, (2, 3, 4, 5)),
                (9, (0, 1)), (10, (0, 1)), (11, (0, 1)))
_SIMT_KNOBS = ((0, (4, 8)), (1, (4, 8)), (2, (8, 16, 32)), (3, (8, 16, 32)), (4, (8, 16, 32)))
_SPLITS = ((AxisType.UPCAST, (2, 4)), (AxisType.UNROLL, (2, 4)))
_BLOCK_SIZES = (32, 64, 128, 256)


def _one_knob(arg: tuple, knobs: tuple[tuple[int, tuple[int, ...]], ...]) -> list[tuple]:
    """`arg` with the element at one knob's position changed to another of its values, for every knob and value."""
    return [(*arg[:pos], val, *arg[pos + 1:]) for pos, values in knobs for val in values if val != arg[pos]]


def neighbours(ast: UOp, opts: list[Opt], target: Target | None = None) -> list[list[Opt]]:
    """The opt lists one step from `opts` (module docstring); may hold lists that lowering refuses. `target`: for
    a wgmma kernel, also the heuristics' opts for it without the WGMMA knob."""
    out: list[list[Opt]] = []
    tc = next((o for o in opts if o.op is OptOps.TC), None)
    if tc is not None:
        arg = tc.arg if isinstance(tc.arg, tuple) else (tc.arg, 1, 1)
        full = tuple(arg) + ((0,) if len(arg) == 6 else ())
        rest = [o for o in opts if o is not tc]
        from lower.tc_wgmma import wgmma_arg

        if (wg := wgmma_arg(arg)) is not None:  # the 12-element form's knobs, and the mma.sync heuristics' form
            out += [[Opt(OptOps.TC, None, new), *rest] for new in _one_knob((wg[0], "wgmma", *wg[1:]), _WGMMA_KNOBS)]
            if target is not None:
                from lower.gpu import gpu_opts

                with Context(WGMMA=False):
                    out.append(gpu_opts(ast, target))
        elif len(full) == 7:
            out += [[Opt(OptOps.TC, None, new if new[6] else new[:6]), *rest] for new in _one_knob(full, _TC_KNOBS)]
            out.append([Opt(OptOps.TC, None, full[:3])])  # the direct form
        else:
            for tm in (1, 2, 4):
                for tn in (1, 2, 4):
                    if (tm, tn) != tuple(full[1:3]):
                        out.append([Opt(OptOps.TC, None, (full[0], tm, tn)), *rest])
        return out
    simt = next((o for o in opts if o.op is OptOps.SIMT), None)
    if simt is not None and isinstance(simt.arg, tuple):
        out += [[Opt(OptOps.SIMT, None, new)] for new in _one_knob(simt.arg, _SIMT_KNOBS)]
        from lower.gpu import _register_tile

        if (tiled := _register_tile(ast, [])) is not None:
            out.append(tiled)
        return out
    from lower.opt_apply import apply_opts

    try:
        cur = apply_opts(ast, opts)
    except CompilerError:
        return out
    for i, r in enumerate(axes(cur)):
        try:
            n = size(r)
        except CompilerError:
            continue
        if r.axis_type in (AxisType.LOOP, AxisType.REDUCE):
            for t, factors in _SPLITS:
                if t is AxisType.UNROLL and r.axis_type is not AxisType.REDUCE:
                    continue
                out += [[*opts, Opt(OptOps.SPLIT, i, (k, t, False))] for k in factors if n % k == 0 and n > k]
    group = next((o.arg[0] for o in opts if o.op is OptOps.SPLIT and isinstance(o.arg, tuple)
                  and o.arg[1] is AxisType.GROUP_REDUCE), None)
    if group is not None:  # a block shares rows' reductions: all its splits (and their pads) take another size
        def resized(o: Opt, k: int) -> Opt:
            if o.op is OptOps.PADTO and o.arg == group:
                return Opt(OptOps.PADTO, o.axis, k)
            if o.op is OptOps.SPLIT and isinstance(o.arg, tuple) and o.arg[0] == group and \
                    o.arg[1] in (AxisType.GROUP_REDUCE, AxisType.LOCAL):
                return Opt(OptOps.SPLIT, o.axis, (k, *o.arg[1:]))
            return o
        out += [[resized(o, k) for o in opts] for k in _BLOCK_SIZES if k != group]
        return out
    for j, o in enumerate(opts):  # a LOCAL split of another size
        if o.op is OptOps.SPLIT and isinstance(o.arg, tuple) and o.arg[1] is AxisType.LOCAL:
            out += [[*opts[:j], Opt(OptOps.SPLIT, o.axis, (k, AxisType.LOCAL, *o.arg[2:])), *opts[j + 1:]]
                    for k in _BLOCK_SIZES if k != o.arg[0]]
    return out


def _device_buffers(bufs: tuple[UOp, ...], dev: Any) -> dict[int, Any]:
    from devices.memory import np_dtype

    rng = np.random.default_rng(0)
    out = {}
    for i, b in enumerate(bufs):
        n = int(np.prod(b.shape))
        dt = np_dtype(b.dtype)
        host = rng.standard_normal(n).astype(dt) if np.issubdtype(dt, np.floating) else np.ones(n, dtype=dt)
        out[i] = dev.alloc(n, b.dtype)
        dev.copyin(out[i], host)
    return out


def time_on_gpu(ast: UOp, bufs: dict[int, Any], target: Target, opts: list[Opt], name: str,
                expect: np.ndarray | None = None, reps: int = 10) -> tuple[float, np.ndarray]:
    """(seconds per launch, the output) of `ast` lowered with `opts` on the CUDA device; WrongResult where the
    output differs from `expect`."""
    from devices.cuda import DEVICE
    from lower.search import WrongResult
    from lower.stages import lower_kernel

    k = DEVICE.compile(lower_kernel(ast, target, opts=opts), name, target)
    bufs[0][:] = 0
    k(bufs)
    got = np.asarray(bufs[0]).astype(np.float64)
    if expect is not None:
        rtol = 1e-2 if bufs[0].dtype.itemsize <= 2 else 1e-3
        if not np.allclose(got, expect, rtol=rtol, atol=rtol, equal_nan=True):
            raise WrongResult(f"beam {name}: opts {opts} change the kernel's result")
    return k.time(bufs, reps=reps) * 1e-3, got


def beam_search_gpu(ast: UOp, bufs_uops: tuple[UOp, ...], target: Target, width: int, max_rounds: int = 4,
                    name: str = "beam") -> list[Opt]:
    """The fastest opts found around the GPU heuristics' (module docstring)."""
    from devices.cuda import DEVICE
    from lower.gpu import gpu_opts
    from lower.search import timed_round

    ok, why = DEVICE.available()
    if not ok:
        raise DeviceError(f"BEAM for {target.isa}: candidates are timed on a CUDA GPU and none is usable here "
                          f"({why}); unset BEAM to lower with the GPU heuristics (or NOOPT=1)")
    bufs = _device_buffers(bufs_uops, DEVICE)
    try:
        best = gpu_opts(ast, target)
        best_t, expect = time_on_gpu(ast, bufs, target, best, name)
        beam: list[tuple[float, list[Opt]]] = [(best_t, best)]
        seen = {repr(best)}
        for rnd in range(max_rounds):
            cands = [c for _, opts in beam for c in neighbours(ast, opts, target) if repr(c) not in seen]
            seen.update(repr(c) for c in cands)
            # a CompilerError covers a launch the GPU refuses too (CudaError: too many resources)
            timed = timed_round(cands, lambda c: time_on_gpu(ast, bufs, target, c, name, expect)[0], name, rnd, best_t)
            if not timed:
                break
            beam = timed[:width]
            if beam[0][0] < best_t * 0.98:
                best_t, best = beam[0]
            else:
                break
    finally:
        for b in bufs.values():
            DEVICE.free(b)
    return best


__all__ = ["beam_search_gpu", "neighbours", "time_on_gpu"]
