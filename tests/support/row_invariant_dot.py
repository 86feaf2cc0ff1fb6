"""Give Triton's interpreter a ``tl.dot`` whose rows do not depend on their position in the tile.

The batch-invariance tests compare a row computed at different positions of a tile. On the GPU each
row of a tile goes through the same MMA instruction; the interpreter's ``np.matmul`` goes through
OpenBLAS's sgemm, whose micro-kernel sums rows at different register positions in different orders
(34 of 64 positions of a 64x64 @ 64x32 fp32 product differ in the last bit). This stands in for the
GPU's MMA, which cannot exist here: each row is its own ``[1, K] @ [K, N]`` product, so the tests
check the kernels' tiles, masks and loop order rather than OpenBLAS's register blocking.
"""

from __future__ import annotations


def install_row_invariant_dot(monkeypatch) -> None:
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def by_rows(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.ndim != 2:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        rows = [np.matmul(a.data[i : i + 1], b.data, dtype=d.data.dtype) for i in range(a.data.shape[0])]
        return interpreter.TensorHandle(np.concatenate(rows) + d.data, d.dtype.scalar)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", by_rows)
