"""The front end: a lazy `Tensor` over UOps, the `@function` decorator, and `dtypes`."""

from rewrite.dtype import dtypes
from tensor.tensor import Tensor  # first: the op modules reach the class through this module
from tensor.function import function  # noqa: I001 -- after Tensor on purpose

__all__ = ["Tensor", "dtypes", "function"]
