"""Comparing devices as PyTorch places tensors on them."""

import torch


def same_device(first: torch.device, second: torch.device) -> bool:
    """Whether two devices are the same; ``cuda`` without an index is the current CUDA device
    (where PyTorch sees none, it matches any index).
    """
    first, second = _with_index(first), _with_index(second)
    if first.type != second.type:
        return False
    if first.index is None or second.index is None:
        return True
    return first.index == second.index


def _with_index(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return device
