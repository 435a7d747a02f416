"""What the GPU a kernel runs on offers beyond plain launches."""

from __future__ import annotations

import functools

import torch


@functools.cache
def dependent_launch(device: torch.device) -> bool:
    """Whether ``device`` launches a kernel early behind another (programmatic dependent
    launch: CUDA GPUs of compute capability 9.0 on)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9
