"""tensor.torch_load: PyTorch zip checkpoints read with numpy alone. A checkpoint built byte by byte here (the
pickle written opcode by opcode, so CI checks the reader without torch; torch.load reads the same file where torch
is installed), one saved by torch.save and loaded into our modules, and the refusals: a pickle naming any other
global is an UnsafePickleError before anything runs, and a corrupt or truncated file a TorchLoadError."""

from __future__ import annotations

import io
import struct
import zipfile

import numpy as np
import pytest

from rewrite.dtype import dtypes
from tensor import Tensor
from tensor.modules import BatchNorm2d, Conv2d, LayerNorm, Linear, Module, MultiheadAttention, Sequential
from tensor.state import get_state_dict, torch_load
from tensor.torch_load import TorchLoadError, UnsafePickleError, torch_load_numpy
from tests.tensor.test_modules import rnd

# ---------------------------------------------------------------- a pickle writer (protocol 2 opcodes)


def _str(s: str) -> bytes:
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def _int(v: int) -> bytes:
    return b"J" + struct.pack("<i", v)


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _tuple(items: list[bytes]) -> bytes:
    return b"(" + b"".join(items) + b"t" if items else b")"


def _tensor(storage: str, key: str, numel: int, offset: int, size: tuple, stride: tuple) -> bytes:
    pid = _tuple([_str("storage"), _global("torch", storage), _str(key), _str("cpu"), _int(numel)]) + b"Q"
    hooks = _global("collections", "OrderedDict") + b")R"
    args = _tuple([pid, _int(offset), _tuple([_int(v) for v in size]), _tuple([_int(v) for v in stride]), b"\x89",
                   hooks])
    return _global("torch._utils", "_rebuild_tensor_v2") + args + b"R"


def _state_pickle(entries: list[tuple[str, bytes]]) -> bytes:
    body = b"".join(_str(k) + v for k, v in entries)
    return b"\x80\x02" + _global("collections", "OrderedDict") + b")R(" + body + b"u."


def _zip(pkl: bytes, storages: dict[str, bytes], prefix: str = "archive") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{prefix}/data.pkl", pkl)
        z.writestr(f"{prefix}/byteorder", "little")
        for k, raw in storages.items():
            z.writestr(f"{prefix}/data/{k}", raw)
        z.writestr(f"{prefix}/version", "3\n")
    return buf.getvalue()


BASE = np.arange(24, dtype=np.float32).reshape(4, 6) * 0.5 - 3  # one storage behind three tensors
BF16 = np.array([1.5, -2.25, 2.0**127, 1 / 3], np.float32)


def _handmade() -> tuple[bytes, dict[str, np.ndarray]]:
    bf_bits = (BF16.view(np.uint32) >> 16).astype(np.uint16)  # truncation: exact for the first three
    storages = {"0": BASE.tobytes(), "1": np.array([0.5, -1, 2], np.float16).tobytes(), "2": bf_bits.tobytes(),
                "3": np.array([7, -3], np.int64).tobytes(), "4": np.array([True, False, True], bool).tobytes(),
                "5": np.array([2.0, 4.0], np.float64).tobytes()}
    entries = [
        ("weight", _tensor("FloatStorage", "0", 24, 6, (2, 3), (6, 1))),  # rows 1-2, first 3 columns
        ("t", _tensor("FloatStorage", "0", 24, 0, (6, 4), (1, 6))),  # the transpose
        ("strided", _tensor("FloatStorage", "0", 24, 1, (2, 2), (12, 2))),
        ("half", _tensor("HalfStorage", "1", 3, 0, (3,), (1,))),
        ("bf", _tensor("BFloat16Storage", "2", 4, 0, (4,), (1,))),
        ("scalar", _tensor("LongStorage", "3", 2, 1, (), ())),
        ("mask", _tensor("BoolStorage", "4", 3, 0, (3,), (1,))),
        ("double", _tensor("DoubleStorage", "5", 2, 0, (2,), (1,))),
        ("empty", _tensor("FloatStorage", "0", 24, 0, (0, 3), (3, 1))),
        ("param", _global("torch._utils", "_rebuild_parameter")  # an nn.Parameter (state_dict(keep_vars=True))
         + _tuple([_tensor("FloatStorage", "0", 24, 0, (2,), (1,)), b"\x88", _global("collections", "OrderedDict")
                   + b")R"]) + b"R"),
    ]
    bf = (bf_bits.astype(np.uint32) << 16).view(np.float32)
    want = {"weight": BASE[1:3, :3], "t": BASE.T, "strided": BASE.reshape(-1)[[1, 3, 13, 15]].reshape(2, 2),
            "half": np.array([0.5, -1, 2], np.float16), "bf": bf, "scalar": np.array(-3, np.int64),
            "mask": np.array([True, False, True]), "double": np.array([2.0, 4.0]),
            "empty": np.zeros((0, 3), np.float32), "param": BASE.reshape(-1)[:2]}
    return _zip(_state_pickle(entries), storages), want


def test_handmade_checkpoint_reads_with_views_and_dtypes(tmp_path) -> None:
    data, want = _handmade()
    path = tmp_path / "m.pt"
    path.write_bytes(data)
    got = torch_load_numpy(path)
    assert list(got) == list(want)
    for k, v in want.items():
        assert got[k].dtype == (np.float32 if k == "bf" else v.dtype), k
        np.testing.assert_array_equal(got[k], v, err_msg=k)
    np.testing.assert_array_equal(got["bf"][:3], BF16[:3])
    ts = torch_load(path)
    assert ts["bf"].dtype is dtypes.bfloat16 and ts["scalar"].dtype is dtypes.int64 and ts["mask"].dtype is dtypes.bool
    np.testing.assert_array_equal(ts["bf"].float().numpy(), got["bf"])
    lin = Linear(3, 2)
    lin.load_state_dict({"weight": ts["weight"], "bias": ts["double"]})  # float64 cast to the layer's float32
    np.testing.assert_allclose(lin(Tensor(np.eye(3, dtype=np.float32))).numpy(), BASE[1:3, :3].T + np.array([2.0, 4.0]))
    assert torch_load_numpy(io.BytesIO(data)).keys() == want.keys()  # a file object works too


def test_handmade_checkpoint_is_a_real_torch_checkpoint(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    data, _ = _handmade()
    path = tmp_path / "m.pt"
    path.write_bytes(data)
    got = torch_load_numpy(path)
    theirs = torch.load(path, weights_only=True)
    for k, v in theirs.items():
        v = v.detach()  # "param" comes back as an nn.Parameter
        np.testing.assert_array_equal(v.float().numpy() if k == "bf" else v.numpy(), got[k], err_msg=k)


def test_other_globals_are_refused_before_anything_runs(tmp_path) -> None:
    marker = tmp_path / "pwned"
    evil = _global("os", "system") + _tuple([_str(f"touch {marker}")]) + b"R"
    pkl = _state_pickle([("weight", evil)])
    with pytest.raises(UnsafePickleError, match=r"refers to os\.system.*refusing"):
        torch_load_numpy(io.BytesIO(_zip(pkl, {})))
    assert not marker.exists()
    for module, name in (("builtins", "eval"), ("torch.nn.modules.linear", "Linear"), ("numpy", "load")):
        pkl = b"\x80\x02" + _global(module, name) + b"."
        with pytest.raises(UnsafePickleError, match=rf"{module}\.{name}"):
            torch_load_numpy(io.BytesIO(_zip(pkl, {})))


def test_corrupt_and_truncated_files_are_clear_errors(tmp_path) -> None:
    data, _ = _handmade()
    with pytest.raises(TorchLoadError, match=r"not a zip archive.*truncated, corrupt, or a legacy"):
        torch_load_numpy(io.BytesIO(data[: len(data) // 2]))
    with pytest.raises(TorchLoadError, match="not a zip archive"):
        torch_load_numpy(io.BytesIO(b"\x80\x02}q\x00."))  # a legacy (non-zip) pickle
    entries = [("w", _tensor("FloatStorage", "0", 24, 20, (2, 3), (3, 1)))]  # reaches element 25 of 24
    with pytest.raises(TorchLoadError, match=r"reaches past its storage of 24 elements"):
        torch_load_numpy(io.BytesIO(_zip(_state_pickle(entries), {"0": BASE.tobytes()})))
    with pytest.raises(TorchLoadError, match=r"storage 0 has 48 bytes, fewer than its 24 elements"):
        torch_load_numpy(io.BytesIO(_zip(_state_pickle(entries), {"0": BASE.tobytes()[:48]})))
    with pytest.raises(TorchLoadError, match=r"no record 'archive/data/0'"):
        torch_load_numpy(io.BytesIO(_zip(_state_pickle(entries), {})))
    with pytest.raises(TorchLoadError, match="cannot unpickle"):
        torch_load_numpy(io.BytesIO(_zip(_state_pickle(entries)[:-9], {"0": BASE.tobytes()})))
    flipped = bytearray(data)  # a byte of a stored record changed: the CRC check fails
    at = data.index(BASE.tobytes()[:8]) + 3
    flipped[at] ^= 0xFF
    with pytest.raises(TorchLoadError, match="corrupt"):
        torch_load_numpy(io.BytesIO(bytes(flipped)))
    with pytest.raises(TorchLoadError, match="holds a list, not a state dict"):
        torch_load_numpy(io.BytesIO(_zip(b"\x80\x02]q\x00.", {})))


class _Net(Module):
    """Ours, named as the torch model below is (a list attribute is named by index, as torch's Sequential)."""

    def __init__(self) -> None:
        self.features = [Conv2d(3, 4, 3, padding=1), BatchNorm2d(4)]
        self.norm = LayerNorm(4)
        self.attn = MultiheadAttention(4, 2, batch_first=True)
        self.head = Linear(4, 5)

    def __call__(self, x: Tensor) -> Tensor:
        h = self.features[1](self.features[0](x)).relu().mean((2, 3))  # (N, 4)
        h = self.norm(h).reshape(x.shape[0], 1, 4)
        return self.head(self.attn(h, h, h)[0].reshape(x.shape[0], 4))


def test_torch_saved_state_dict_loads_into_our_modules(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4))
            self.norm = torch.nn.LayerNorm(4)
            self.attn = torch.nn.MultiheadAttention(4, 2, batch_first=True)
            self.head = torch.nn.Linear(4, 5)

        def forward(self, x):
            h = self.features(x).relu().mean((2, 3))
            h = self.norm(h).reshape(x.shape[0], 1, 4)
            return self.head(self.attn(h, h, h)[0].reshape(x.shape[0], 4))

    net = Net()
    net.train()
    net(torch.randn(8, 3, 5, 5))  # BatchNorm's running statistics move away from 0 and 1
    net.eval()
    path = tmp_path / "net.pt"
    torch.save(net.state_dict(), path)
    sd = torch_load(path)
    ours = _Net()
    assert list(get_state_dict(ours)) == list(net.state_dict())
    ours.load_state_dict(sd)
    ours.eval()
    x = rnd(2, 3, 5, 5, seed=3).astype(np.float32)
    with torch.no_grad():
        want = net(torch.tensor(x)).numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
    assert sd["features.1.num_batches_tracked"].dtype is dtypes.int64
    # every dtype and view torch writes
    base = torch.arange(24.0).reshape(4, 6)
    extra = {"t": base.t(), "s": base[1:3, 2:], "bf": torch.tensor([1.5, -2.25, 3e38], dtype=torch.bfloat16),
             "h": torch.tensor([0.5, 2.0], dtype=torch.float16), "i32": torch.tensor([1, -2], dtype=torch.int32),
             "u8": torch.tensor([255, 0], dtype=torch.uint8), "b": torch.tensor([True, False]),
             "i8": torch.tensor([-128, 5], dtype=torch.int8), "i16": torch.tensor([-300], dtype=torch.int16)}
    torch.save(extra, tmp_path / "x.pt")
    got = torch_load_numpy(tmp_path / "x.pt")
    for k, v in extra.items():
        np.testing.assert_array_equal(got[k], v.float().numpy() if k == "bf" else v.numpy(), err_msg=k)
        assert got[k].dtype == (np.float32 if k == "bf" else v.numpy().dtype), k


def test_torch_sequential_state_dict_loads_into_our_sequential(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    theirs = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 3))
    torch.save(theirs.state_dict(), tmp_path / "seq.pt")
    ours = Sequential(Linear(5, 7), Tensor.relu, Linear(7, 3))
    assert list(ours.state_dict()) == list(theirs.state_dict())  # 0.weight, 0.bias, 2.weight, 2.bias
    ours.load_state_dict(torch_load(tmp_path / "seq.pt"))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    want = theirs(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-6)
