"""Kernel tests run the Triton kernels through the interpreter when there is no GPU.

``triton.jit`` decides at decoration time whether a kernel is interpreted, so the variable must
be set before ``thoughttree.kernels`` is first imported; pytest imports this file before the
test modules of this directory. Without CUDA no compiled Triton kernel can run anyway, so the
setting changes nothing else for later directories except that ``store_kv`` on CPU tensors runs
its kernel in the interpreter instead of the PyTorch reference (same results).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
