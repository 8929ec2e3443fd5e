"""The front end: a lazy `Tensor` over UOps, the `@function` and `@custom_vjp` decorators, `dtypes`, `no_grad`,
and `Variable` (a symbolic dimension once bound: `Variable("n", 1, 1024).bind(37)`)."""

import tensor.modules  # noqa: F401  # loads tensor.layers after tensor.modules, whichever is imported first
from rewrite.dtype import dtypes
from tensor.autograd import enable_grad, no_grad
from tensor.function import custom_vjp, function
from tensor.symbolic import Variable
from tensor.tensor import Tensor

__all__ = ["Tensor", "Variable", "custom_vjp", "dtypes", "enable_grad", "function", "no_grad"]
