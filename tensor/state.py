"""A model's state: `get_state_dict`, `get_parameters`, `load_state_dict`, and safetensors save and load.

A model is any object: its tensors are found by walking attributes (a Tensor is a leaf; lists, tuples and dicts
are walked by index and key; any other object with a __dict__ by attribute name, skipping names that start with
an underscore), and named with dots as torch names them (`layers.0.weight`). Parameters are the tensors that
require a gradient; buffers (BatchNorm's running statistics) are the others.

Loading rebinds each model tensor to the loaded data (the Tensor objects stay the ones the model and its
optimizer hold). Safetensors files are read and written with the `safetensors` package's numpy API.
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping

import numpy as np

import tensor.tensor as tt
from rewrite.derive import fmt_shape
from rewrite.errors import DTypeError, ShapeError

Tensor = tt.Tensor
_NOT_MODELS = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType)


class StateDictError(KeyError):
    """load_state_dict: keys missing from or unexpected in a state dict (the message lists them)."""

    def __str__(self) -> str:  # KeyError's str() quotes its message
        return str(self.args[0])


def _walk(obj: object, prefix: str, out: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, Tensor):
        out.setdefault(prefix.rstrip("."), obj)
        return
    if id(obj) in seen or isinstance(obj, (str, bytes, int, float, bool, type(None), np.ndarray)):
        return
    seen.add(id(obj))
    if isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _walk(v, f"{prefix}{i}.", out, seen)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, f"{prefix}{k}.", out, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, _NOT_MODELS):
        inline = getattr(type(obj), "state_inline", ())  # attributes named without their own name (Sequential)
        for k, v in vars(obj).items():
            if not k.startswith("_"):
                _walk(v, prefix if k in inline else f"{prefix}{k}.", out, seen)


def get_state_dict(model: object, prefix: str = "") -> dict[str, Tensor]:
    """Every tensor reachable from `model`, by dotted name (parameters and buffers)."""
    out: dict[str, Tensor] = {}
    _walk(model, prefix, out, set())
    return out


def get_parameters(model: object) -> list[Tensor]:
    """The tensors of `model` that require a gradient (what an optimizer updates), each once."""
    return list(dict.fromkeys(t for t in get_state_dict(model).values() if t.requires_grad))


def load_state_dict(model: object, state: Mapping[str, Tensor | np.ndarray], strict: bool = True) -> None:
    """Load `state` into the model's tensors: shapes must match (dtypes are cast to the model's). strict: every
    key of the model is in `state` and no other."""
    mine = get_state_dict(model)
    missing, unexpected = [k for k in mine if k not in state], [k for k in state if k not in mine]
    if strict and (missing or unexpected):
        raise StateDictError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}; pass "
                             f"strict=False to load the keys that match")
    new: list[tuple[Tensor, Tensor]] = []
    for k, t in mine.items():
        if k not in state:
            continue
        v = state[k]
        src = v if isinstance(v, Tensor) else Tensor(np.asarray(v), device=t.device)
        if tuple(src.shape) != tuple(t.shape):
            raise ShapeError(f"load_state_dict: {k!r} is {fmt_shape(src.shape)} in the state dict but "
                             f"{fmt_shape(t.shape)} in the model")
        if src.dtype.is_float != t.dtype.is_float:
            raise DTypeError(f"load_state_dict: {k!r} is {src.dtype.name} in the state dict but {t.dtype.name} in "
                             f"the model")
        if src.device != t.device:
            src = src.to(t.device)
        new.append((t, src if src.dtype is t.dtype else src.cast(t.dtype)))
    if new:
        Tensor.realize(*(v for _, v in new))
    for t, v in new:
        t.uop = v.uop  # a realize never writes into a buffer somebody holds: sharing the loaded one is safe


def safe_save(state: Mapping[str, Tensor], path: str | os.PathLike[str],
              metadata: Mapping[str, str] | None = None) -> None:
    """Write tensors to a .safetensors file (safetensors.numpy)."""
    from safetensors.numpy import save_file

    arrays = {}
    for k, t in state.items():
        if t.dtype.name == "bfloat16":
            raise DTypeError(f"safe_save: {k!r} is bfloat16, which numpy cannot hold; cast it first "
                             f"(t.float() or t.half())")
        arrays[k] = np.array(t.numpy(), order="C")  # ascontiguousarray would make a 0-d array 1-d
    save_file(arrays, os.fspath(path), metadata=dict(metadata) if metadata else None)


def safe_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a .safetensors file, by name."""
    from safetensors.numpy import load_file

    return {k: Tensor(v, device=device) for k, v in load_file(os.fspath(path)).items()}


def torch_load(path: str | os.PathLike[str], device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a PyTorch checkpoint (`torch.save(model.state_dict(), path)`) by name, read with numpy and
    a restricted unpickler; torch need not be installed (tensor.torch_load)."""
    from tensor.torch_load import torch_load as load

    return load(path, device)


__all__ = ["StateDictError", "get_parameters", "get_state_dict", "load_state_dict", "safe_load", "safe_save",
           "torch_load"]
