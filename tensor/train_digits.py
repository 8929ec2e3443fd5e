"""Train a classifier on scikit-learn's bundled digits (1,797 8x8 images, no download): `python -m tensor.train_digits`.

An MLP 64-64-10 by default, a small CNN with --cnn; Adam, seeded, the training step under tensor.jit (--no-jit: each
step run as written, the same results), one progress line per epoch (loss and held-out accuracy), then the weights
are saved to a .safetensors file, loaded into a fresh model and checked to give the same predictions.
Needs scikit-learn (the test extra installs it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

from tensor.jit import jit
from tensor.modules import BatchNorm2d, Conv2d, Linear, Module, Sequential, cross_entropy
from tensor.optim import Adam
from tensor.state import safe_load, safe_save
from tensor.tensor import Tensor


def make_model(cnn: bool, seed: int = 0) -> Module:
    Tensor.manual_seed(seed)
    if not cnn:
        return Sequential(Linear(64, 64), Tensor.relu, Linear(64, 10))
    return Sequential(Conv2d(1, 8, 3, padding=1), BatchNorm2d(8), Tensor.relu, lambda x: x.max_pool2d(2),
                      Conv2d(8, 16, 3, padding=1), Tensor.relu, lambda x: x.max_pool2d(2),
                      lambda x: x.reshape(x.shape[0], -1), Linear(64, 10))


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cnn", action="store_true", help="a small CNN instead of the MLP (slower)")
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--no-jit", action="store_true", help="run every step as written (tensor.jit replays the "
                    "captured kernels from the third step on; the results are the same)")
    ap.add_argument("--save", default=os.path.join(tempfile.gettempdir(), "digits.safetensors"))
    args = ap.parse_args(argv)
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x, y = (x / 16.0).astype(np.float32), y.astype(np.int32)
    perm = np.random.default_rng(0).permutation(len(x))
    tr, te = perm[:1400], perm[1400:]
    shape = (-1, 1, 8, 8) if args.cnn else (-1, 64)
    model = make_model(args.cnn)
    opt = Adam(model.parameters(), lr=args.lr)
    rng, t0 = np.random.default_rng(1), time.perf_counter()

    def accuracy(m: Module) -> float:
        m.eval()
        acc = float((m(Tensor(x[te].reshape(shape))).numpy().argmax(1) == y[te]).mean())
        m.train()
        return acc

    def train_step(xb: Tensor, yb: Tensor) -> Tensor:
        opt.zero_grad()
        loss = cross_entropy(model(xb), yb)
        loss.backward()
        opt.step(loss)
        return loss

    # under jit the first two calls run as written, the later ones replay their kernels with the new batch; the
    # last batch of an epoch may be smaller: its shape gets a step of its own
    steps: dict[int, Callable[[Tensor, Tensor], Tensor]] = {}
    for epoch in range(args.epochs):
        order, losses = rng.permutation(tr), []
        for k in range(0, len(order), args.batch):
            b = order[k:k + args.batch]
            step = steps.setdefault(len(b), train_step if args.no_jit else jit(train_step))
            losses.append(step(Tensor(x[b].reshape(shape)), Tensor(y[b])).item())
            done = (k + args.batch) / len(order)
            print(f"\repoch {epoch + 1}/{args.epochs} [{'#' * int(20 * done):20s}] loss {np.mean(losses):.4f}",
                  end="", file=sys.stderr)
        print(f" test accuracy {accuracy(model):.4f} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    acc = accuracy(model)
    safe_save(model.state_dict(), args.save)
    again = make_model(args.cnn, seed=1)  # other initial weights: the loaded ones must replace them
    again.load_state_dict(safe_load(args.save))
    if accuracy(again) != acc:
        raise RuntimeError("train_digits: the reloaded weights predict differently from the trained model")
    print(f"saved to {args.save}; reloaded: test accuracy {acc:.4f}", file=sys.stderr)
    return acc


if __name__ == "__main__":
    main()
