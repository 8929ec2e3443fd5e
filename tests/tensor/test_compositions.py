"""The spec's "Common Ops as Compositions", written exactly as the spec writes them, return numpy's answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tensor import Tensor
from tests.tensor.util import arrays, close, shapes

SET = settings(max_examples=25, deadline=None)


# ---- verbatim from the spec (seed 001, "Common Ops as Compositions") ----

# gemm:  $C[M,N] = A[M,K] @ B[K,N]$
def gemm(A, B):
    M,K = A.shape; _,N = B.shape  # noqa: E702
    return (A.reshape(M,K,1) * B.reshape(1,K,N)).sum(1)

# prefix_sum: cumulative sum via repeat+reshape sliding window trick
def prefix_sum(T):
    n = T.shape[0]
    x = T.pad((n-1, 0)) # (2n-1,)
    x = x.reshape(1,2*n-1).expand(n+1,2*n-1) # tile
    x = x.reshape((n+1)*(2*n-1)).shrink_to(2*n*n) # trim
    x = x.reshape(n,2*n).shrink_to(n,n) # windows
    return x.sum(-1) # reduce

# arange: prefix_sum of all 1s gives [1,2,...,n], subtract 1 for [0,1,...,n-1]
def arange(n):
    return prefix_sum(Tensor(1).reshape(1).expand(n)) - 1

# gather: out[i] = T[idx[i]]. one-hot mask along gather axis, then reduce
def gather(T, idx):
    K = T.shape[0]
    pos = arange(K).reshape(K, 1) # (K, 1)
    mask = (pos == idx.reshape(1, -1)).cast(T.dtype) # (K, D)
    return (T.reshape(K, 1) * mask).sum(0) # (D,)

# scatter_add: T[idx[i]] += val[i]
def scatter_add(T, idx, val):
    K, D = T.shape[0], idx.shape[0]
    pos = arange(K).reshape(K, 1) # (K, 1)
    mask = (pos == idx.reshape(1, D)).cast(T.dtype) # (K, D)
    return T + (mask * val.reshape(1, D)).sum(1) # (K,)

# ---- end of the spec's code ----


@SET
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 5), st.sampled_from(["float32", "int32"]), st.data())
def test_gemm(m: int, k: int, n: int, dt: str, data: st.DataObject) -> None:
    a = data.draw(arrays(dt, (m, k), lo=-10, hi=10))
    b = data.draw(arrays(dt, (k, n), lo=-10, hi=10))
    close(gemm(Tensor(a), Tensor(b)), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


@SET
@given(st.sampled_from(["float32", "int32", "int8"]), st.data())
def test_prefix_sum(dt: str, data: st.DataObject) -> None:
    a = data.draw(arrays(dt, shapes(1, 1, max_side=12), lo=-50, hi=50))
    close(prefix_sum(Tensor(a)), np.cumsum(a), rtol=1e-5, atol=1e-4)


def test_prefix_sum_is_the_same_graph_as_cumsum() -> None:
    t = Tensor(np.arange(7, dtype=np.float32))
    assert prefix_sum(t).uop is t.cumsum().uop  # hash-consing: the front end builds exactly the spec's graph


@given(st.integers(1, 20))
@settings(max_examples=10, deadline=None)
def test_arange(n: int) -> None:
    close(arange(n), np.arange(n))


@SET
@given(st.integers(1, 6), st.integers(1, 6), st.sampled_from(["float32", "int32"]), st.data())
def test_gather(k: int, d: int, dt: str, data: st.DataObject) -> None:
    t = data.draw(arrays(dt, (k,), lo=-100, hi=100))
    idx = data.draw(arrays("int32", (d,), lo=0, hi=k - 1))
    close(gather(Tensor(t), Tensor(idx)), t[idx])


@SET
@given(st.integers(1, 6), st.integers(1, 6), st.data())
def test_scatter_add(k: int, d: int, data: st.DataObject) -> None:
    t = data.draw(arrays("float32", (k,), lo=-100, hi=100))
    idx = data.draw(arrays("int32", (d,), lo=0, hi=k - 1))
    v = data.draw(arrays("float32", (d,), lo=-100, hi=100))
    expected = t.astype(np.float64).copy()
    np.add.at(expected, idx, v.astype(np.float64))
    close(scatter_add(Tensor(t), Tensor(idx), Tensor(v)), expected, rtol=1e-5, atol=1e-4)
