"""Run under SANITIZE=address by tests/devices/test_sanitize.py (with libasan preloaded): movement-heavy Tensor
programs on the cpu device checked against numpy, or (`oob`) a hand-built kernel that writes one element past
its buffer, which AddressSanitizer must stop."""

from __future__ import annotations

import sys

import numpy as np


def programs(rng: np.random.Generator) -> list[tuple[str, object, object]]:
    from tensor import Tensor

    a = rng.standard_normal((7, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    c = rng.standard_normal((3, 11, 4)).astype(np.float32)
    img = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    v = rng.standard_normal(37).astype(np.float32)

    def conv_ref(x: np.ndarray, k: np.ndarray, stride: int, pad: int) -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        n, _, h, wd = xp.shape
        o, _, kh, kw = k.shape
        oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
        out = np.zeros((n, o, oh, ow), np.float64)
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, k)
        return out

    A, B, C, IMG, W, V = map(Tensor, (a, b, c, img, w, v))
    return [
        ("pad", lambda: A.pad([(2, 3), (0, 4)]), np.pad(a, ((2, 3), (0, 4)))),
        ("shrink", lambda: A.shrink([(1, 6), (2, 5)]), a[1:6, 2:5]),
        ("flip", lambda: C.flip((0, 2)), c[::-1, :, ::-1]),
        ("strided", lambda: C[::2, 1:10:3, ::-1], c[::2, 1:10:3, ::-1]),
        ("negative_step", lambda: V[30:2:-4], v[30:2:-4]),
        ("cat", lambda: A.cat(A.flip(0), dim=1), np.concatenate([a, a[::-1]], axis=1)),
        ("cat3", lambda: V[:5].cat(V[10:13], V[-2:]), np.concatenate([v[:5], v[10:13], v[-2:]])),
        ("matmul", lambda: A @ B, a.astype(np.float64) @ b),
        ("matmul_sliced", lambda: A[1::2] @ B[:, ::-1], a[1::2].astype(np.float64) @ b[:, ::-1]),
        ("conv", lambda: IMG.conv2d(W), conv_ref(img, w, 1, 0)),
        ("conv_stride_pad", lambda: IMG.conv2d(W, stride=2, padding=1), conv_ref(img, w, 2, 1)),
        ("reduce_flip", lambda: C.flip(1).max(axis=2), c[:, ::-1].max(axis=2)),
        ("cumsum", lambda: V.cumsum(0), np.cumsum(v.astype(np.float64))),
        ("big_pad", lambda: Tensor(np.arange(3000, dtype=np.float32)).pad([(100, 57)])[50:3100:7],
         np.pad(np.arange(3000, dtype=np.float32), (100, 57))[50:3100:7]),
    ]


def run_programs() -> None:
    from rewrite.env import getenv

    assert getenv("SANITIZE") == "address"
    rng = np.random.default_rng(0)
    ok = 0
    for name, make, want in programs(rng):
        got = make().numpy()  # type: ignore[operator]
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-4, err_msg=name)
        ok += 1
    print(f"ok {ok}")


def out_of_bounds() -> None:
    """A kernel storing i for i in [0, n] into a buffer of n elements: its last store is past the end."""
    from devices.cpu import DEVICE
    from rewrite.dtype import dtypes
    from rewrite.ops import Ops
    from rewrite.uop import UOp
    from tests.devices.builder import linear

    n = 13
    out = UOp.buffer(0, dtypes.int32, (n,))
    r = UOp.range(n + 1, 1)
    st = out.index(r).store(r.cast(dtypes.int32))
    k = DEVICE.compile(linear(r, st, UOp(Ops.END, (st, r))), "oob")
    arr = DEVICE.alloc(n, dtypes.int32)
    print("launching", flush=True)
    k({0: arr})
    print("not caught", flush=True)


if __name__ == "__main__":
    {"programs": run_programs, "oob": out_of_bounds}[sys.argv[1]]()
