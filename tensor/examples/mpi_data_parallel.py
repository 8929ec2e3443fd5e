"""Data-parallel training across MPI ranks: `mpirun -n 2 python -m tensor.examples.mpi_data_parallel`.

Every rank runs this same program. `ranks()` is one cpu device per rank; each rank loads its own rows of the batch
(`from_local`), the model is replicated, and the gradient's sum over the batch (the shard axis) runs as one MPI
Allreduce. Without mpirun it runs on one rank, with the same result."""

from __future__ import annotations

import numpy as np

from devices.mpi import rank_and_size
from tensor import Tensor
from tensor.modules import Linear
from tensor.multi import from_local, ranks, replicate_params
from tensor.optim import AdamW


def main() -> None:
    rank, n = rank_and_size()
    D = ranks()                                             # ("cpu@0", "cpu@1") under mpirun -n 2
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)    # the global batch; each rank keeps its rows
    y = x @ rng.standard_normal((8, 1)).astype(np.float32)
    rows = slice(rank * 64 // n, (rank + 1) * 64 // n)
    X, Y = from_local(x[rows], D), from_local(y[rows], D)   # (64, 8) on D, sharded on axis 0
    Tensor.manual_seed(0)
    model = Linear(8, 1)
    opt = AdamW(model.parameters(), lr=0.1)
    replicate_params(model.parameters() + [t for s in opt.state for t in s.values()], D)
    for _ in range(50):
        loss = ((model(X) - Y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step(loss)
    print(f"rank {rank}/{n}: loss {loss.item():.4f}")       # the same on every rank


if __name__ == "__main__":
    main()
