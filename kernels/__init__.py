"""Triton kernels, each paired with a plain-torch reference of the same function.

Every public op dispatches by device: Triton on CUDA, the torch reference on CPU and NPU
(``CHASSIS_KERNELS=torch`` forces the reference everywhere).
"""
