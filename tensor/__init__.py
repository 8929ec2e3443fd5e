"""The front end: a lazy `Tensor` over UOps, the `@function` decorator, `dtypes`, and `no_grad`."""

from rewrite.dtype import dtypes
from tensor.autograd import enable_grad, no_grad
from tensor.function import function
from tensor.tensor import Tensor

__all__ = ["Tensor", "dtypes", "enable_grad", "function", "no_grad"]
