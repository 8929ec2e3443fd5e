"""The small real program the viewer's tests record (VIZ=1): one realize of a matmul and a relu."""

import numpy as np

from tensor import Tensor

a = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4) - 5)
b = Tensor(np.ones((4, 5), dtype=np.float32))
c = (a @ b).relu()
out = c.numpy()
assert np.allclose(out, np.maximum(0, (np.arange(12).reshape(3, 4) - 5) @ np.ones((4, 5))))
