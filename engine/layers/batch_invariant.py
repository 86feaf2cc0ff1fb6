"""Whether this process runs the batch-invariant kernels (``EngineConfig.batch_invariant``).

Set once by ``engine/switches.py`` when an engine builds; read by the layers that dispatch a
product or an attention call (``linear.py``, ``attention.py``, ``latent_attention.py``). Where
Triton runs they take the invariant Triton kernels; on a CPU, ``kernels.cpu_invariant``'s padded
products and block-wise attention (outside the mode a CPU takes MKL's GEMV and torch's fused
attention, faster at one row, whose bits follow the row count and the chunking). The switch itself
lives in ``kernels.invariance``, which the kernels read too.
"""

from __future__ import annotations

from kernels.invariance import batch_invariant, set_batch_invariant

__all__ = ["batch_invariant", "set_batch_invariant"]
