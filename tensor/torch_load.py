"""Loading a PyTorch checkpoint (`torch.save(model.state_dict(), path)`, the zip format torch writes by default
since 1.6) with numpy alone: torch need not be installed.

The file is a zip archive: `<name>/data.pkl` is a pickle of the state dict whose tensors refer to storages
by key, and `<name>/data/<key>` holds each storage's raw bytes (`<name>/byteorder` says little or big endian).
The pickle is read by a restricted unpickler: the only globals it resolves are the few a state dict needs
(collections.OrderedDict, torch._utils._rebuild_tensor_v2 and _rebuild_parameter, and the typed storage
classes torch.FloatStorage etc., each mapped to a numpy dtype); any other global -- which is how a pickle runs
arbitrary code -- raises UnsafePickleError before anything is called. Each tensor is rebuilt as a view of its
storage with torch's size, stride and storage offset (numpy strides in bytes), bounds-checked, and copied.

bfloat16 storages are widened to float32 by `torch_load_numpy` (exactly: a bfloat16 is the top half of a float32)
and become bfloat16 Tensors in `torch_load`.
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rewrite.dtype import dtypes

if TYPE_CHECKING:
    from tensor.tensor import Tensor


class TorchLoadError(ValueError):
    """A file that is not a readable PyTorch zip checkpoint (truncated, corrupt, legacy format, missing records)."""


class UnsafePickleError(TorchLoadError, pickle.UnpicklingError):
    """The checkpoint's pickle names a global outside the state-dict allowlist (it could run arbitrary code)."""


# torch's typed storage class -> numpy dtype ("bfloat16" is read as uint16 bits)
_STORAGES: dict[str, np.dtype | str] = {
    "FloatStorage": np.dtype(np.float32), "DoubleStorage": np.dtype(np.float64), "HalfStorage": np.dtype(np.float16),
    "BFloat16Storage": "bfloat16", "LongStorage": np.dtype(np.int64), "IntStorage": np.dtype(np.int32),
    "ShortStorage": np.dtype(np.int16), "CharStorage": np.dtype(np.int8), "ByteStorage": np.dtype(np.uint8),
    "BoolStorage": np.dtype(np.bool_),
}


@dataclass(frozen=True)
class _StorageType:
    name: str


@dataclass
class _Rebuilt:
    """A tensor as the pickle describes it; its array is made once the storages are known."""

    array: np.ndarray
    bfloat16: bool


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, read_storage: Callable[[str, str | np.dtype, int], np.ndarray]) -> None:
        super().__init__(io.BytesIO(data))
        self._read_storage = read_storage
        self._cache: dict[str, tuple[np.ndarray, bool]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch._utils" and name in ("_rebuild_parameter", "_rebuild_parameter_with_state"):
            return _rebuild_parameter
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        raise UnsafePickleError(f"torch_load: the checkpoint's pickle refers to {module}.{name}, which a state dict "
                                f"does not need; refusing to load it (only tensors, storages and OrderedDict are "
                                f"allowed: save `model.state_dict()`, not a whole model or other objects)")

    def persistent_load(self, pid: Any) -> Any:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str) and isinstance(pid[4], int)):
            raise TorchLoadError(f"torch_load: unexpected persistent id {pid!r} in the pickle; expected "
                                 f"('storage', <storage type>, key, location, numel)")
        _, stype, key, _loc, numel = pid
        if key not in self._cache:
            dt = _STORAGES[stype.name]
            self._cache[key] = (self._read_storage(key, dt, numel), dt == "bfloat16")
        return self._cache[key]


def _rebuild_tensor_v2(storage: tuple[np.ndarray, bool], offset: int, size: tuple, stride: tuple,
                       requires_grad: bool = False, hooks: object = None, metadata: object = None) -> _Rebuilt:
    flat, bf16 = storage
    if not (isinstance(offset, int) and isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) and all(isinstance(v, int) and v >= 0 for v in (offset, *size, *stride))):
        raise TorchLoadError(f"torch_load: bad tensor record (offset {offset!r}, size {size!r}, stride {stride!r})")
    n = int(np.prod(size)) if size else 1
    if n and offset + sum((s - 1) * st for s, st in zip(size, stride, strict=True)) >= flat.size:
        raise TorchLoadError(f"torch_load: a tensor of size {size}, stride {stride} at offset {offset} reaches past "
                             f"its storage of {flat.size} elements; the file is corrupt")
    if n == 0:
        return _Rebuilt(np.zeros(size, flat.dtype), bf16)
    item = flat.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(flat[offset:], shape=size, strides=tuple(s * item for s in stride),
                                           writeable=False)
    return _Rebuilt(np.array(view, order="C"), bf16)


def _rebuild_parameter(data: _Rebuilt, requires_grad: bool = False, hooks: object = None,
                       state: object = None) -> _Rebuilt:
    return data


def _open(path: str | os.PathLike[str] | io.IOBase) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path if isinstance(path, io.IOBase) else os.fspath(path))
    except zipfile.BadZipFile as e:
        raise TorchLoadError(f"torch_load: {path!s} is not a zip archive ({e}); it is truncated, corrupt, or a legacy "
                             f"(pre-1.6) torch file: re-save it with torch.save(..., "
                             f"_use_new_zipfile_serialization=True)") from None


def _read(z: zipfile.ZipFile, name: str) -> bytes:
    try:
        return z.read(name)
    except KeyError:
        raise TorchLoadError(f"torch_load: the archive has no record {name!r}; the file is incomplete") from None
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:  # a CRC mismatch, a short member
        raise TorchLoadError(f"torch_load: cannot read {name!r} from the archive ({e}); the file is corrupt") from None


def torch_load_numpy(path: str | os.PathLike[str] | io.IOBase) -> dict[str, np.ndarray]:
    """The tensors of a PyTorch zip checkpoint as numpy arrays, by name (bfloat16 widened to float32)."""
    return {k: v.array for k, v in _load(path).items()}


def _load(path: str | os.PathLike[str] | io.IOBase) -> dict[str, _Rebuilt]:
    with _open(path) as z:
        pkls = [n for n in z.namelist() if n.endswith("data.pkl") and n.count("/") <= 1]
        if len(pkls) != 1:
            raise TorchLoadError(f"torch_load: {path!s} holds {len(pkls)} data.pkl records (a torch checkpoint has "
                                 f"exactly one); it is not a torch.save file")
        prefix = pkls[0][: -len("data.pkl")]
        names = set(z.namelist())
        order = _read(z, prefix + "byteorder").decode().strip() if prefix + "byteorder" in names else "little"
        if order not in ("little", "big"):
            raise TorchLoadError(f"torch_load: unknown byte order {order!r} in {prefix}byteorder")

        def read_storage(key: str, dt: str | np.dtype, numel: int) -> np.ndarray:
            raw = _read(z, f"{prefix}data/{key}")
            base = np.dtype(np.uint16) if dt == "bfloat16" else np.dtype(dt)
            base = base.newbyteorder("<" if order == "little" else ">")
            if len(raw) < numel * base.itemsize:
                raise TorchLoadError(f"torch_load: storage {key} has {len(raw)} bytes, fewer than its {numel} "
                                     f"elements of {base.itemsize} bytes; the file is truncated or corrupt")
            arr = np.frombuffer(raw, base, numel).astype(base.newbyteorder("="))
            if dt == "bfloat16":
                arr = (arr.astype(np.uint32) << 16).view(np.float32)
            return arr

        try:
            obj = _Unpickler(_read(z, pkls[0]), read_storage).load()
        except TorchLoadError:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise TorchLoadError(f"torch_load: cannot unpickle {pkls[0]} ({type(e).__name__}: {e}); the file is "
                                 f"corrupt") from None
    if not isinstance(obj, dict) or not all(isinstance(k, str) and isinstance(v, _Rebuilt) for k, v in obj.items()):
        raise TorchLoadError(f"torch_load: the checkpoint holds a {type(obj).__name__}, not a state dict of tensors "
                             f"by name; save model.state_dict()")
    return dict(obj)


def torch_load(path: str | os.PathLike[str] | io.IOBase, device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a PyTorch zip checkpoint as Tensors by name (bfloat16 kept as bfloat16), ready for
    `model.load_state_dict(...)`."""
    import tensor.tensor as tt

    return {k: tt.Tensor(v.array, dtype=dtypes.bfloat16 if v.bfloat16 else None, device=device)
            for k, v in _load(path).items()}


__all__ = ["TorchLoadError", "UnsafePickleError", "torch_load", "torch_load_numpy"]
