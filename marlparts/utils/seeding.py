"""Seeding: one call that seeds every random number generator a run uses, independent seed streams
for env copies, and the generators' states for checkpoints.
"""

import os
import random
from typing import Any, Dict, List, Optional

import numpy as np
import torch

TRAINING_STREAM = 0    # the seed stream of the training env copies
EVALUATION_STREAM = 1  # the seed stream of the evaluation env copies


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


def copy_seeds(seed: Optional[int], count: int, stream: int = TRAINING_STREAM) -> List[Optional[int]]:
    """One seed per env copy, each from its own stream of NumPy's ``SeedSequence``.

    Copy ``i`` of run seed ``s`` gets the ``i``-th child of ``SeedSequence(s, spawn_key=(stream,))``,
    so no two copies share a stream, whether of one run or of runs with different seeds
    (``seed + i`` would give run 0's copy ``k + 1`` the stream of run 1's copy ``k``), and the
    evaluation copies (``stream=1``) never replay a training copy's episodes.

    Returns:
        ``count`` seeds below 2**63, or ``count`` times ``None`` when ``seed`` is None (unseeded).
    """
    if seed is None:
        return [None] * count
    children = np.random.SeedSequence(seed, spawn_key=(stream,)).spawn(count)
    return [int(child.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for child in children]


def rng_states() -> Dict[str, Any]:
    """The states of PyTorch's (CPU and, if used, CUDA), NumPy's and Python's global generators, as tensors."""
    version, python_state, gauss = random.getstate()
    kind, numpy_keys, numpy_position, has_gauss, cached_gaussian = np.random.get_state()
    states = {
        "torch": torch.get_rng_state(),
        "numpy": {"keys": torch.from_numpy(numpy_keys.astype(np.int64)), "position": int(numpy_position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)},
        "python": {"version": int(version), "state": torch.tensor(python_state, dtype=torch.int64),
                   "gauss": gauss},
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: Dict[str, Any]) -> None:
    """Restore generator states returned by :func:`rng_states`."""
    torch.set_rng_state(states["torch"].cpu())
    numpy = states["numpy"]
    np.random.set_state(("MT19937", numpy["keys"].numpy().astype(np.uint32), numpy["position"], numpy["has_gauss"],
                         numpy["cached_gaussian"]))
    python = states["python"]
    random.setstate((python["version"], tuple(int(v) for v in python["state"].tolist()), python["gauss"]))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([state.cpu() for state in states["cuda"]])
