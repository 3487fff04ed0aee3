"""One call that seeds every random number generator a run uses."""

import os
import random

import numpy as np
import torch


def set_seed(seed: int, *, deterministic: bool = False) -> int:
    """Seed Python's ``random``, NumPy and PyTorch (CPU and CUDA) with ``seed``.

    Args:
        seed: the seed; the same seed on the same machine gives the same run.
        deterministic: also ask PyTorch for deterministic kernels (slower on GPU).

    Returns:
        The seed, so that it can be logged.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"set_seed expects an int seed, got {seed!r}")
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    return seed
