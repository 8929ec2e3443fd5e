"""The front end: a lazy `Tensor` over UOps, the `@function` decorator, and `dtypes`."""

from rewrite.dtype import dtypes
from tensor.function import function
from tensor.tensor import Tensor

__all__ = ["Tensor", "dtypes", "function"]
