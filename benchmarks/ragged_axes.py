"""Ragged vector axes (issue 9): sizes no multiple of the vector lanes, through Tensor. CPU time
(time.process_time, all threads) of one realize, best of REPS (env, default 7), after a warm-up realize (the
compile); the result checked against numpy in float64. `python -m benchmarks.ragged_axes [case,case,...]`."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from tensor import Tensor

REPS = int(os.environ.get("REPS", "7"))
rng = np.random.default_rng(0)


def f32(*s):
    return rng.standard_normal(s).astype(np.float32)


def mm(n):
    a, b = f32(n, n), f32(n, n)
    return (lambda: Tensor(a) @ Tensor(b)), (lambda: a.astype(np.float64) @ b), 2 * n ** 3


def handsum(m, k, n):
    a, b = f32(m, k), f32(k, n)
    return (lambda: (Tensor(a)[:, :, None] * Tensor(b)[None]).sum(1)), (lambda: a.astype(np.float64) @ b), 2 * m * k * n


def conv(nb, cin, hw, cout, ks):
    x, w = f32(nb, cin, hw, hw), f32(cout, cin, ks, ks)
    ho = hw - ks + 1

    def ref():
        xd = x.astype(np.float64)
        return sum(np.einsum("bchw,oc->bohw", xd[:, :, i:i + ho, j:j + ho], w[:, :, i, j])
                   for i in range(ks) for j in range(ks))

    return (lambda: Tensor(x).conv2d(Tensor(w))), ref, 2 * nb * cout * ho * ho * cin * ks * ks


def rowsum(m, n):
    a = f32(m, n)
    return (lambda: Tensor(a).sum(1)), (lambda: a.astype(np.float64).sum(1)), m * n


def exp(m, n):
    a = f32(m, n)
    return (lambda: Tensor(a).exp()), (lambda: np.exp(a.astype(np.float64))), m * n


CASES = {f"matmul {n}": (mm, (n,)) for n in (1021, 1023, 513, 1000, 1024)}
CASES.update({"handsum 256x256x1021": (handsum, (256, 256, 1021)),
              "conv 8x32x30x30 * 100x32x3x3": (conv, (8, 32, 30, 100, 3)),
              "rowsum 1000x1021": (rowsum, (1000, 1021)), "exp 1000x1021": (exp, (1000, 1021))})


def main() -> None:
    want = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    for name in want:
        run(name)


def run(name: str) -> None:
    fn, args = CASES[name]
    make, ref, flops = fn(*args)
    got = make().numpy()
    r = ref()
    err = float(np.abs(got - r).max() / (np.abs(r).max() + 1e-30))
    ts = []
    for _ in range(REPS):
        t = time.process_time()
        make().numpy()
        ts.append(time.process_time() - t)
    c = min(ts)
    print(f"{os.environ.get('TAG', ''):5s} {name:32s} cpu {c * 1e3:8.2f} ms  {flops / c / 1e9:7.2f} G/s(cpu)  "
          f"relerr {err:.1e}", flush=True)


if __name__ == "__main__":
    main()
