"""Suite `train`: training steps end to end (forward, backward, optimizer update), against PyTorch eager.

Rows:
  mlp      an MLP (784-512-512-10, ReLU, batch 256, AdamW lr 1e-3 wd 0.01, float32; `--quick`: 784-128-10,
           batch 64) on one fixed random batch, the same initial weights (numpy, seeded) in ours and torch:
    cold     the first step in a fresh process whose kernel cache is an empty temporary CACHEDIR (graph,
             scheduling, lowering, the C compiler and the run), and the second step of that process;
    steady   one whole step after the check's steps (graph built again, plan replayed): median of N runs,
             timed in turns with torch eager doing the identical step (all threads);
    check    the loss of each of the first K steps, ours against torch: max relative difference <= 1e-4.
  digits   `python -m tensor.train_digits`'s MLP (64-64-10, Adam, sklearn digits) trained for its default 12
           epochs (`--quick`: 3): wall time to its held-out accuracy, and that accuracy (needs scikit-learn).

`python -m benchmarks.bench_train --worker --config JSON` is the cold row's subprocess side (one JSON line).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks.kernel_peers import have
from benchmarks.kernel_worker import run_module
from benchmarks.runner import Bench, Result, Timed, suite

CHECK_RTOL = 1e-4


@dataclass(frozen=True)
class MLPConfig:
    sizes: tuple[int, ...] = (784, 512, 512, 10)
    batch: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 0

    @property
    def label(self) -> str:
        return f"mlp {'-'.join(map(str, self.sizes))} b{self.batch}"


FULL = MLPConfig()
QUICK = MLPConfig(sizes=(784, 128, 10), batch=64)
TINY = MLPConfig(sizes=(64, 32, 10), batch=16)  # the test's row


def init(cfg: MLPConfig) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Initial weights (torch.nn.Linear's uniform bound, weight then bias per layer) and one batch (x, y)."""
    rng = np.random.default_rng(cfg.seed)
    params: list[np.ndarray] = []
    for fin, fout in zip(cfg.sizes, cfg.sizes[1:], strict=False):
        bound = 1.0 / np.sqrt(fin)
        params.append(rng.uniform(-bound, bound, (fout, fin)).astype(np.float32))
        params.append(rng.uniform(-bound, bound, (fout,)).astype(np.float32))
    x = rng.standard_normal((cfg.batch, cfg.sizes[0])).astype(np.float32)
    y = rng.integers(0, cfg.sizes[-1], cfg.batch).astype(np.int32)
    return params, x, y


class OursStep:
    """Our model, optimizer and batch; `step` is one training step (the loss realized with the update)."""

    def __init__(self, cfg: MLPConfig) -> None:
        from tensor.modules import Linear, Sequential
        from tensor.optim import AdamW
        from tensor.tensor import Tensor

        params, x, y = init(cfg)
        layers: list[Any] = []
        for fin, fout in zip(cfg.sizes, cfg.sizes[1:], strict=False):
            layers += [Linear(fin, fout), Tensor.relu]
        self.model = Sequential(*layers[:-1])
        self.model.load_state_dict(dict(zip(self.model.state_dict(), params, strict=True)))
        self.opt = AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.x, self.y = Tensor(x).realize(), Tensor(y).realize()

    def step(self, _: object = None) -> float:
        from tensor.modules import cross_entropy

        self.opt.zero_grad()
        loss = cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step(loss)
        return loss.item()


class TorchStep:
    """The identical step in PyTorch eager."""

    def __init__(self, cfg: MLPConfig) -> None:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        params, x, y = init(cfg)
        layers: list[Any] = []
        for fin, fout in zip(cfg.sizes, cfg.sizes[1:], strict=False):
            layers += [torch.nn.Linear(fin, fout), torch.nn.ReLU()]
        self.model = torch.nn.Sequential(*layers[:-1])
        with torch.no_grad():
            for p, v in zip(self.model.parameters(), params, strict=True):
                p.copy_(torch.from_numpy(v))
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y).long()
        self.f = torch.nn.functional

    def step(self, _: object = None) -> float:
        self.opt.zero_grad()
        loss = self.f.cross_entropy(self.model(self.x), self.y)
        loss.backward()
        self.opt.step()
        return float(loss.item())


def loss_check(ours: list[float], peer: list[float]) -> tuple[bool, float]:
    rel = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(ours, peer, strict=True))
    return rel <= CHECK_RTOL, rel


# ---------------------------------------------------------------------------- subprocess side (cold)


def worker(cfg: MLPConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    import tensor  # noqa: F401 -- the user's first line

    import_s = time.perf_counter() - t0
    m = OursStep(cfg)
    t0 = time.perf_counter()
    loss = m.step()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    m.step()
    again = time.perf_counter() - t0
    return {"import_s": import_s, "first_s": first, "again_s": again, "loss": loss}


def run_worker(cfg: MLPConfig, timeout: float = 900) -> tuple[dict[str, Any] | None, str]:
    with tempfile.TemporaryDirectory() as d:
        res, _, err = run_module(["benchmarks.bench_train", "--worker", "--config", json.dumps(asdict(cfg))],
                                 {"CACHEDIR": os.path.join(d, "cache")}, timeout, os.path.join(d, "none.npy"))
        return res, err


# ---------------------------------------------------------------------------- the rows


def mlp_row(b: Bench, cfg: MLPConfig, *, cold: bool = True, check_steps: int = 3, runs: int = 5) -> dict[str, Any]:
    """Record the MLP row's figures into b; returns the check's outcome (what the test asserts on)."""
    name = cfg.label
    out: dict[str, Any] = {"config": asdict(cfg)}
    if cold:
        b.say(f"{name}: cold first step (fresh process, empty kernel cache)")
        res, err = run_worker(cfg)
        if res is None:
            b.note(f"{name}: cold run failed: {err}")
        else:
            b.record(Result(f"{name}: cold first step", "s", [res["first_s"]], False, None, res))
            b.record(Result(f"{name}: cold second step", "ms", [1e3 * res["again_s"]], False, None))
            b.note(f"{name}: cold first step {res['first_s']:.2f} s (+{res['import_s']:.2f} s import), "
                   f"second step {1e3 * res['again_s']:.1f} ms")
    b.say(f"{name}: ours, first {check_steps} steps")
    ours = OursStep(cfg)
    out["ours_losses"] = [ours.step() for _ in range(check_steps)]
    jobs = [Timed(f"{name}: step/ours", ours.step, 1, "ms", per_item=1e3, runs=runs)]
    peer: TorchStep | None = None
    if have("torch"):
        b.say(f"{name}: torch, first {check_steps} steps")
        peer = TorchStep(cfg)
        out["torch_losses"] = [peer.step() for _ in range(check_steps)]
        ok, rel = loss_check(out["ours_losses"], out["torch_losses"])
        out.update(check_ok=ok, rel_err=rel)
        b.note(f"{name}: loss of steps 1..{check_steps} ours vs torch: max rel diff {rel:.1e} -> "
               f"{'ok' if ok else 'FAIL'} (<= {CHECK_RTOL:g}); ours {out['ours_losses'][-1]:.6f}, "
               f"torch {out['torch_losses'][-1]:.6f}")
        jobs.append(Timed(f"{name}: step/torch", peer.step, 1, "ms", per_item=1e3, runs=runs))
    else:
        out.update(check_ok=None, rel_err=None)
        b.note(f"{name}: torch not installed: no torch column, no loss check")
    results = b.measure_together(jobs)
    results[0].info.update(out)
    out["steady_ms"] = results[0].median
    if peer is not None:
        b.compare(f"{name}: AdamW step vs torch eager", results[0], results[1], "torch")
        out["torch_ms"] = results[1].median
    return out


def digits_row(b: Bench, epochs: int) -> None:
    if not have("sklearn"):
        b.note("digits: scikit-learn not installed: no digits row")
        return
    from tensor import train_digits

    b.say(f"digits MLP: {epochs} epochs")
    with tempfile.TemporaryDirectory() as d, contextlib.redirect_stderr(io.StringIO()):
        t0 = time.perf_counter()
        acc = train_digits.main(["--epochs", str(epochs), "--save", os.path.join(d, "digits.safetensors")])
        wall = time.perf_counter() - t0
    b.record(Result(f"digits mlp 64-64-10: {epochs} epochs", "s", [wall], False, None, {"accuracy": acc}))
    b.record(Result("digits mlp 64-64-10: test accuracy", "%", [100 * acc], True, None))
    b.note(f"digits: {epochs} epochs of tensor.train_digits (Adam lr 0.01, batch 100, incl. save+reload check) "
           f"in {wall:.1f} s to test accuracy {acc:.4f} (kernel cache as this process finds it)")


@suite("train")
def train(b: Bench) -> None:
    cfg = QUICK if b.quick else FULL
    b.note(f"MLP {'-'.join(map(str, cfg.sizes))} ReLU, batch {cfg.batch}, AdamW lr {cfg.lr} wd {cfg.weight_decay}, "
           f"float32, same init weights and batch in ours and torch")
    b.case(cfg.label, of=2)
    mlp_row(b, cfg, runs=5 if b.quick else 7)
    b.case("digits")
    digits_row(b, 3 if b.quick else 12)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_train",
                                 description="subprocess side of the train suite (run the suite with "
                                             "`python -m benchmarks train`)")
    ap.add_argument("--worker", action="store_true", required=True)
    ap.add_argument("--config", required=True, help="MLPConfig fields as JSON")
    args = ap.parse_args(argv)
    fields = json.loads(args.config)
    fields["sizes"] = tuple(fields["sizes"])
    print(json.dumps(worker(MLPConfig(**fields))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
