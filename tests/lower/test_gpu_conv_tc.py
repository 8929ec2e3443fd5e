"""Convolutions on tensor cores (lower.wmma.tc_flatten): a half, bfloat16 or (ALLOW_TF32) float32 convolution's
reduce ranges (ci x kh x kw) become one k range and its rows (n x ho x wo) one row range, so every tensor-core
form (the direct mma, the shared-memory and cp.async stagings) takes it as a matmul. Run by the grid emulator
against an exact oracle (values in quarters: every product and sum is exact, so the results must agree bit for
bit), their gradients too, and the benchmark's conv (8,64,56,56)->64 lowered and compiled by nvcc and NVRTC."""

from __future__ import annotations

import os

import numpy as np
import pytest

from devices.base import gpu_target
from devices.cuda import DEVICE
from lower.gpu import gpu_opts
from lower.opt_apply import axes, size
from lower.optimize import OptOps
from lower.pipeline import lower_kernel
from lower.schedule import schedule
from lower.wmma import tc_flatten
from rewrite import AxisType, Ops, UOp
from rewrite.env import Context
from tensor import Tensor
from tests.devices.test_cuda_compile import COMPILERS, SMS
from tests.tensor.fuzz_run import realize_together
from tests.tensor.fuzz_tc import _env, kernel_forms


def _quarters(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.integers(-8, 9, shape) / 4).astype(np.float32)


def _rounded(x: np.ndarray, dt: str) -> np.ndarray:
    return np.asarray(_env(dt)["R"](x), np.float32)


def _conv_kernel(shape: tuple[int, ...], k: int, dt: str = "float16", groups: int = 1) -> UOp:
    """The AST of the reduce kernel of a conv of x (n, ci, h, w) with a (co, ci / groups, k, k) weight, padding
    k // 2."""
    n, ci, h, w, co = shape
    with Context(PYTHON_TARGET="sm_90"):
        x = Tensor.empty(n, ci, h, w, dtype=dt, device="python").realize()
        wt = Tensor.empty(co, ci // groups, k, k, dtype=dt, device="python").realize()
        items, _ = schedule([x.conv2d(wt, padding=k // 2, groups=groups).uop])
    (ast,) = [it.ast for it in items if it.kind == "kernel" and it.ast is not None and
              any(u.op is Ops.REDUCE for u in it.ast.toposort())]
    return ast


def test_flatten_makes_a_conv_one_matmul_and_leaves_a_matmul_as_it_is() -> None:
    ast = _conv_kernel((2, 16, 10, 12, 64), 3)
    (red,) = [u for u in ast.toposort() if u.op is Ops.REDUCE]
    assert len(red.src) == 4  # ci, kh, kw
    flat = tc_flatten(ast)
    (red,) = [u for u in flat.toposort() if u.op is Ops.REDUCE]
    assert len(red.src) == 2 and size(red.src[1]) == 16 * 3 * 3
    loops = sorted(size(r) for r in axes(flat) if r.axis_type is AxisType.LOOP)
    assert loops == [64, 2 * 10 * 12]  # co, and the rows n x ho x wo
    grouped = tc_flatten(_conv_kernel((2, 32, 8, 8, 128), 3, groups=2))  # co = 2 groups x 64: x moves with the group
    loops = sorted(size(r) for r in axes(grouped) if r.axis_type is AxisType.LOOP)
    assert loops == [2, 64, 2 * 8 * 8]
    with Context(PYTHON_TARGET="sm_90"):
        a = Tensor.empty(256, 128, dtype="float16", device="python").realize()
        b = Tensor.empty(128, 192, dtype="float16", device="python").realize()
        items, _ = schedule([(a @ b).uop])
    mm = next(it.ast for it in items if it.kind == "kernel" and it.ast is not None)
    assert tc_flatten(mm) is mm


def test_the_benchmark_conv_takes_the_staged_tensor_cores() -> None:
    """conv2d (8,64,56,56)->64 in half (python -m benchmarks gpu, conv_fp16): 25088 rows, 64 channels, k 576;
    before tc_flatten it ran on CUDA cores (the SIMT staging)."""
    opts = gpu_opts(_conv_kernel((8, 64, 56, 56, 64), 3), gpu_target("sm_90", tf32=False))
    assert [o.op for o in opts] == [OptOps.TC] and opts[0].arg[0] == "16x8x16 half->float"
    assert len(opts[0].arg) >= 6  # staged through shared memory


CASES = [  # (n, ci, h, w, co), k, stride, padding, dtype, knobs
    ((1, 16, 8, 8, 64), 3, 1, 1, "float16", {}),              # 64 rows x 64 channels: the staged form
    ((2, 16, 9, 7, 96), 3, 1, 1, "bfloat16", {}),             # ragged rows (126) and channels: gated edges
    ((1, 32, 8, 8, 64), 1, 1, 0, "float16", {}),              # 1x1: one reduce range, rows merged (w = 8)
    ((1, 16, 8, 8, 64), 3, 2, 1, "float16", {}),              # stride 2: 16 rows, the direct form
    ((1, 8, 10, 10, 64), 5, 1, 2, "float16", {"PYTHON_TARGET": "sm_80"}),
    ((1, 16, 8, 8, 64), 3, 1, 1, "float32", {"ALLOW_TF32": 1}),
    ((1, 32, 8, 8, 128), 3, 1, 1, "float16", {"groups": 2}),   # the group a batch axis of both operands
    # the direct form padded to whole mma tiles (lower.wmma.apply_tc's gated edges): a first layer's 3 x 3 x 3
    # products (k 27 -> 32) into 20 channels (-> 24); 42 rows, k 45; tf32's k 9 (-> 16)
    ((2, 3, 12, 12, 20), 3, 1, 1, "float16", {}),
    ((1, 5, 6, 7, 24), 3, 1, 1, "bfloat16", {}),
    ((1, 1, 8, 8, 16), 3, 1, 1, "float32", {"ALLOW_TF32": 1}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"_k{c[1]}s{c[2]}_{c[4]}")
def test_convolutions_run_on_tensor_cores_exactly(case: tuple) -> None:
    (n, ci, h, w, co), k, stride, pad, dt, knobs = case
    knobs = dict(knobs)
    groups = knobs.pop("groups", 1)
    rng = np.random.default_rng(7)
    xs, ws = _quarters(rng, (n, ci, h, w)), _quarters(rng, (co, ci // groups, k, k))
    env = _env(dt)
    want = _rounded(env["conv"](xs.astype(np.float64), ws.astype(np.float64), stride, pad, 1, groups), dt)

    def build() -> Tensor:
        x, wt = (Tensor(a) if dt == "float32" else Tensor(a).cast(dt) for a in (xs, ws))
        return x.conv2d(wt, stride=stride, padding=pad, groups=groups).cast("float32")

    mode = {"DEVICE": "python", "PYTHON_TARGET": "sm_90", **knobs}
    (got,), items = realize_together([build], mode)
    with Context(**mode):
        forms = kernel_forms(items)
    assert forms["mma"] == 1, forms
    assert got is not None and got.shape == want.shape and np.array_equal(got, want)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_conv_gradients_run_on_tensor_cores_exactly(dt: str) -> None:
    """dx (a transposed convolution: rows n x h x w merged, k = co x 3 x 3) and dw (a reduction over n x ho x wo)
    both take the tensor cores, and agree bit for bit with the float64 gradients rounded once."""
    rng = np.random.default_rng(11)
    xs, ws, gs = _quarters(rng, (2, 16, 8, 8)), _quarters(rng, (64, 16, 3, 3)), _quarters(rng, (2, 64, 8, 8))
    conv = _env(dt)["conv"]
    # dx: the correlation of the padded gradient with the flipped, transposed weight; dw: of x with the gradient
    want_dx = conv(gs.astype(np.float64), np.flip(ws, (2, 3)).transpose(1, 0, 2, 3).astype(np.float64), 1, 1, 1, 1)
    want_dw = conv(xs.transpose(1, 0, 2, 3).astype(np.float64), gs.transpose(1, 0, 2, 3).astype(np.float64),
                   1, 1, 1, 1).transpose(1, 0, 2, 3)
    grads: list[Tensor] = []

    def backward() -> None:
        x = Tensor(xs).cast(dt).realize().requires_grad_()
        w = Tensor(ws).cast(dt).realize().requires_grad_()
        x.conv2d(w, padding=1).backward(Tensor(gs).cast(dt))
        assert x.grad is not None and w.grad is not None
        grads.extend([x.grad.cast("float32"), w.grad.cast("float32")])

    mode = {"DEVICE": "python", "PYTHON_TARGET": "sm_90"}
    with Context(**mode):
        backward()
    (dx, dw), items = realize_together([lambda: grads[0], lambda: grads[1]], mode)
    with Context(**mode):
        forms = kernel_forms(items)
    assert forms["mma"] == 2, forms
    assert dx is not None and np.array_equal(dx, _rounded(want_dx, dt))
    assert dw is not None and np.array_equal(dw, _rounded(want_dw, dt))


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_the_benchmark_conv_on_tensor_cores_compiles(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    ast = _conv_kernel((8, 64, 56, 56, 64), 3)
    lin = lower_kernel(ast, gpu_target(sm, tf32=False), name="conv_fp16")
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        (k,) = DEVICE.compile_batch([(lin, "conv_fp16")], gpu_target(sm, tf32=False))
    assert k.cubin[:4] == b"\x7fELF"
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in k.src and "__syncthreads();" in k.src
    grid, block = k.launch_dims({})
    assert grid[0] * grid[1] * grid[2] == 392 and block[0] * block[1] * block[2] == 128  # 64 x 64 tiles, 4 warps


@pytest.mark.parametrize("compiler", COMPILERS)
@pytest.mark.parametrize("sm", SMS)
def test_a_first_layer_conv_on_padded_tensor_cores_compiles(compiler: str, tmp_path: os.PathLike, sm: str) -> None:
    """A first layer's conv (8,3,64,64)->32 in half: k = 3 x 3 x 3 = 27 products pad to 32 in the direct mma form
    (32 channels: under the staged forms' 64), its gated loads compiled by nvcc and NVRTC."""
    ast = _conv_kernel((8, 3, 64, 64, 32), 3)
    opts = gpu_opts(ast, gpu_target(sm, tf32=False))
    assert opts[0].op is OptOps.TC and len(opts[0].arg) == 3  # (shape, tm, tn): the direct form
    lin = lower_kernel(ast, gpu_target(sm, tf32=False), name="conv_first")
    with Context(CACHEDIR=str(tmp_path), CUDA_COMPILER=compiler):
        (k,) = DEVICE.compile_batch([(lin, "conv_first")], gpu_target(sm, tf32=False))
    assert k.cubin[:4] == b"\x7fELF" and "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in k.src
