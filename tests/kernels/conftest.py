"""Kernel tests run the Triton kernels through the interpreter when there is no GPU (set in the
root conftest, before any kernel is decorated)."""
