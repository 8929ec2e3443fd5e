"""The engines the `kernels` suite times: ours (our Tensor, plus its prebuilt-schedule re-run) and the peers,
numpy, PyTorch eager and tinygrad, each running the same case on the same inputs."""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.kernel_cases import Case, numpy_graph, tensor_graph

# ---------------------------------------------------------------------------- engines


class Engine:
    """One way to compute a case: `run` is the timed call (the argument is the runner's unused setup state),
    `result` turns its output into an ndarray for the check."""

    name = ""

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        self.case = case

    def run(self, _: object = None) -> Any:
        raise NotImplementedError

    def result(self, out: Any) -> np.ndarray:
        return np.asarray(out.numpy())


class Ours(Engine):
    """Our Tensor: inputs realized once; `run` builds the graph again and realizes it (the whole user call)."""

    name = "ours"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        from tensor import Tensor

        self.case, self.T = case, Tensor
        self.xs = [Tensor(x) for x in xs]
        for t in self.xs:
            t.realize()

    def run(self, _: object = None) -> Any:
        return tensor_graph(self.case, self.xs).realize()

    def kernels(self) -> tuple[Callable[[object], None], list[dict[str, object]]]:
        """A function that re-runs the case's kernels from one prebuilt schedule, and what each kernel is
        (name, thread slices) -- read from the compiled kernels, so the count follows the lead's optimizer."""
        from lower.realize import get_kernel, run_schedule
        from lower.schedule import schedule
        from rewrite.env import getenv

        items, outs = schedule([tensor_graph(self.case, self.xs).uop])
        keep = set(outs.values())
        info = []
        for it in items:
            if it.kind != "kernel" or it.ast is None:
                continue
            dev = getattr(it.bufs[0].arg, "device", None)
            k = get_kernel(it.ast, dev if isinstance(dev, str) else str(getenv("DEVICE")), it.name)
            info.append({"name": it.name, "slices": _slices(k)})

        def rerun(_: object = None) -> None:
            run_schedule(items, keep=keep)

        return rerun, info


def _slices(kernel: Any) -> int:
    """How many core_id slices a compiled kernel runs (1: single-threaded); 1 when it cannot be told."""
    try:
        from devices.linear import special_bound

        prog = kernel.prog
        if not prog.specials or getattr(kernel, "entry", None) is None:
            return 1
        return math.prod(special_bound(sp, {}, kernel.name) for sp in prog.specials.values())
    except Exception:  # the device's internals are the lead's to change: then count it as one thread
        return 1


def our_threads(kinfo: list[dict[str, object]]) -> int:
    """Threads our kernels can keep busy: the largest slice count, capped by the thread pool's size."""
    from devices import cpu_pool

    most = max((int(k["slices"]) for k in kinfo), default=1)  # type: ignore[call-overload]
    return max(1, min(most, cpu_pool.threads()))


class NumpyPeer(Engine):
    name = "numpy"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        self.case, self.xs = case, xs

    def run(self, _: object = None) -> np.ndarray:
        return numpy_graph(self.case, self.xs)

    def result(self, out: Any) -> np.ndarray:
        return np.asarray(out)


class TorchPeer(Engine):
    """PyTorch eager on all threads; gradients off (inference), as our Tensor computes none."""

    name = "torch"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        import torch

        torch.set_num_threads(os.cpu_count() or 1)
        self.torch, self.case = torch, case
        self.xs = [torch.from_numpy(x) for x in xs]

    def run(self, _: object = None) -> Any:
        t = self.torch
        with t.inference_mode():
            return tensor_graph(self.case, self.xs, conv=lambda x, w: t.nn.functional.conv2d(x, w, padding=1))


class TinygradPeer(Engine):
    """tinygrad's Tensor; realize, then wait for the device (its CPU queue may run asynchronously)."""

    name = "tinygrad"

    def __init__(self, case: Case, xs: list[np.ndarray]) -> None:
        from tinygrad import Device, Tensor

        self.case, self.dev = case, Device[Device.DEFAULT]
        self.xs = [Tensor(x).realize() for x in xs]
        self.dev.synchronize()

    def run(self, _: object = None) -> Any:
        out = tensor_graph(self.case, self.xs).realize()
        self.dev.synchronize()
        return out


def have(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
