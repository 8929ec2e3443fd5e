"""An optimizer step alone: AdamW over 8 parameters of 512 x 512 float32 with fixed, realized gradients, under
tensor.jit (the captured kernels replayed). Prints the kernels one step launches and the median and least wall and
CPU time of N steps. Run it on two commits in turns to compare them (the fused optimizer kernel, lower.split_fuse:
one kernel per parameter instead of one each for the parameter, m and v)."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np


def main() -> None:
    from lower.realize import plans
    from tensor import Tensor
    from tensor.jit import jit
    from tensor.optim import AdamW

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--params", type=int, default=8)
    ap.add_argument("--size", type=int, default=512)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    shape = (args.size, args.size)
    ps = [Tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True).realize()
          for _ in range(args.params)]
    for p in ps:
        p.grad = Tensor(rng.standard_normal(shape).astype(np.float32)).realize()
    opt = AdamW(ps, lr=1e-3)
    step = jit(lambda: opt.step())
    for _ in range(4):  # capture, then replays
        step()
    wall, cpu = [], []
    k0 = plans.kernels_run
    for _ in range(args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        step()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    kernels = (plans.kernels_run - k0) // args.steps
    print(f"AdamW {args.params} x {shape}: {kernels} kernels per step, wall median {1e3 * statistics.median(wall):.2f} "
          f"ms (least {1e3 * min(wall):.2f}), CPU median {1e3 * statistics.median(cpu):.2f} ms")


if __name__ == "__main__":
    main()
