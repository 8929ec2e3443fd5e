"""lower.rangeify's reshape indexing: a reshape splits into groups of axes whose sizes multiply to the same number,
and each group is flattened and unflattened on its own. Oracle: the whole-shape flatten/unflatten, evaluated at
every index of the output shape. Also which broadcasts rangeify realizes rather than recomputes."""

from __future__ import annotations

import itertools
import random

import pytest

from lower.rangeify import flat_index, reshape_groups, reshape_index, unflatten
from rewrite import Ops, UOp


def _index_vars(shape: tuple[int, ...]) -> tuple[UOp, ...]:
    return tuple(UOp.variable(f"i{k}", 0, d - 1) if d > 1 else UOp.const(0) for k, d in enumerate(shape))


def _same_everywhere(out_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> None:
    idx = _index_vars(out_shape)
    got = reshape_index(idx, out_shape, src_shape)
    want = unflatten(flat_index(idx, out_shape), src_shape)
    assert len(got) == len(src_shape)
    for point in itertools.product(*(range(d) for d in out_shape)):
        env = {f"i{k}": v for k, v in enumerate(point) if out_shape[k] > 1}
        assert [g.evaluate(env) for g in got] == [w.evaluate(env) for w in want], (out_shape, src_shape, point)


# fmt: off
CASES = [
    ((4, 8, 16), (32, 16)), ((32, 16), (4, 8, 16)), ((8, 4, 16), (4, 8, 16)), ((6,), (2, 3)), ((2, 3), (6,)),
    ((1, 6, 1), (2, 1, 3)), ((2, 1, 3, 1), (6,)), ((1,), (1, 1)), ((4, 6), (2, 12)), ((3, 4, 5), (5, 4, 3)),
    ((2, 2, 2, 2), (4, 4)), ((12,), (2, 2, 3)), ((2, 6, 5), (12, 5)), ((5, 12), (5, 3, 4)),
]
# fmt: on


@pytest.mark.parametrize("out_shape,src_shape", CASES)
def test_reshape_index_equals_whole_flatten(out_shape: tuple[int, ...], src_shape: tuple[int, ...]) -> None:
    _same_everywhere(out_shape, src_shape)


def test_reshape_index_random_shapes() -> None:
    rng = random.Random(0)
    for _ in range(60):
        factors = [rng.choice((1, 2, 2, 3, 4, 5)) for _ in range(rng.randint(1, 4))]
        total = 1
        for f in factors:
            total *= f

        def split(n: int) -> tuple[int, ...]:
            out = []
            while n > 1 and rng.random() < 0.7:
                d = rng.choice([d for d in range(1, n + 1) if n % d == 0])
                out.append(d)
                n //= d
            out.append(n)
            if rng.random() < 0.3:
                out.insert(rng.randrange(len(out) + 1), 1)
            return tuple(out)

        _same_everywhere(split(total), split(total))


def test_reshape_groups() -> None:
    assert reshape_groups((4, 8, 16), (32, 16)) == [([0, 1], [0]), ([2], [1])]
    assert reshape_groups((8, 4, 16), (4, 8, 16)) == [([0, 1], [0, 1]), ([2], [2])]
    assert reshape_groups((1, 6, 1), (2, 1, 3)) == [([1], [0, 2])]
    assert reshape_groups((0, 4), (4, 0)) is None  # an empty shape: the whole flatten (no grouping) is used


def test_reshape_touches_only_the_axes_it_changes() -> None:
    """An axis that keeps its size passes through as it is: no division or modulo on it."""
    idx = _index_vars((4, 8, 16))
    src = reshape_index(idx, (4, 8, 16), (32, 16))
    assert src[1] is idx[2]
    assert not any(n.op in (Ops.IDIV, Ops.MOD) for n in src[0].toposort())
    back = reshape_index(_index_vars((32, 16)), (32, 16), (4, 8, 16))
    assert back[2] is _index_vars((32, 16))[1]


def test_expensive_broadcast_inside_a_reduction_is_realized() -> None:
    """softmax(s) @ v: the softmax's exp would be evaluated once per output column of the matmul inside its
    reduction loop, so it gets its own kernel; a cheap product stays fused; both match numpy."""
    import numpy as np

    from lower import schedule
    from tensor import Tensor

    rng = np.random.default_rng(0)
    s, v = rng.standard_normal((2, 32, 32)).astype(np.float32), rng.standard_normal((2, 32, 16)).astype(np.float32)

    def kernels(t: Tensor) -> int:
        return sum(it.kind == "kernel" for it in schedule([t.uop])[0])

    soft = Tensor(s).softmax(-1) @ Tensor(v)
    cheap = (Tensor(s) * 2.0 + 1.0) @ Tensor(v)
    assert kernels(cheap) == 1 and kernels(soft) == 2
    e = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(soft.numpy(), (e / e.sum(-1, keepdims=True)) @ v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(cheap.numpy(), (s * 2 + 1) @ v, rtol=1e-5, atol=1e-5)
