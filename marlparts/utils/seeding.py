"""Seeding: one call that seeds every random number generator a run uses, independent seed streams
for env copies, and the generators' states for checkpoints.
"""

import os
import random
from typing import Any, Dict, List, Optional

import numpy as np
import torch

from marlparts.utils.distributed import rank_and_world_size

TRAINING_STREAM = 0    # the seed stream of the training env copies
EVALUATION_STREAM = 1  # the seed stream of the evaluation env copies
RANK_STREAM = 2        # the seed stream of the random generators of ranks other than 0 (torchrun)
OPPONENT_STREAM = 3    # the seed stream of fixed random players (trainers' opponents)
REBUILD_STREAM = 4     # the seed stream of env copies rebuilt after a failure
SAMPLING_STREAM = 5    # the seed stream of the actions sampled in evaluation


def set_seed(seed: int, *, deterministic: bool = False) -> int:
    """Seed Python's ``random``, NumPy and PyTorch (CPU and CUDA) with ``seed``.

    Under ``torchrun`` rank 0 uses ``seed`` and every other rank a seed of its own drawn from it,
    so the ranks' action samples are independent.

    Args:
        seed: the seed; the same seed on the same machine gives the same run.
        deterministic: also ask PyTorch for deterministic kernels (slower on GPU).

    Returns:
        The seed, so that it can be logged.
    """
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"set_seed expects an int seed, got {seed!r}")
    rank = rank_and_world_size()[0]
    if rank > 0:  # under torchrun every rank samples from its own streams
        seed = int(np.random.SeedSequence(seed, spawn_key=(RANK_STREAM, rank)).generate_state(1, dtype=np.uint32)[0])
    os.environ["PYTHONHASHSEED"] = str(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
    return seed


def copy_seeds(seed: Optional[int], count: int, stream: int = TRAINING_STREAM, rank: int = 0) -> List[Optional[int]]:
    """One seed per env copy, each from its own stream of NumPy's ``SeedSequence``.

    Copy ``i`` of run seed ``s`` gets the ``i``-th child of ``SeedSequence(s, spawn_key=(stream,))``,
    so no two copies share a stream, whether of one run or of runs with different seeds
    (``seed + i`` would give run 0's copy ``k + 1`` the stream of run 1's copy ``k``), and the
    evaluation copies (``stream=1``) never replay a training copy's episodes. The copies of a
    ``torchrun`` rank ``r > 0`` draw from ``spawn_key=(stream, r)``.

    Returns:
        ``count`` seeds below 2**63, or ``count`` times ``None`` when ``seed`` is None (unseeded).
    """
    if seed is None:
        return [None] * count
    key = (stream,) if rank == 0 else (stream, rank)
    children = np.random.SeedSequence(seed, spawn_key=key).spawn(count)
    return [int(child.generate_state(1, dtype=np.uint64)[0] >> np.uint64(1)) for child in children]


def derived_seed(seed: Optional[int], *key: int) -> Optional[int]:
    """A new run-level seed drawn from ``seed`` by ``key`` (None stays None): the seed of a
    re-seeded reset, whose copies then get their own streams from it as usual.
    """
    if seed is None:
        return None
    return int(np.random.SeedSequence(seed, spawn_key=key).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


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
    np.random.set_state(("MT19937", numpy["keys"].cpu().numpy().astype(np.uint32), numpy["position"], numpy["has_gauss"],
                         numpy["cached_gaussian"]))
    python = states["python"]
    random.setstate((python["version"], tuple(int(v) for v in python["state"].cpu().tolist()), python["gauss"]))
    if "cuda" in states and torch.cuda.is_available():  # as many devices as both machines have
        for device, state in enumerate(states["cuda"][:torch.cuda.device_count()]):
            torch.cuda.set_rng_state(state.cpu(), device)
