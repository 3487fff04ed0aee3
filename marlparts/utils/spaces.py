"""Flattening of gymnasium spaces into the flat float vectors that models consume."""

from typing import Any, Optional, Sequence

import gymnasium
import numpy as np
import torch


def flat_size(space: gymnasium.Space) -> int:
    """Number of values in the flattened form of ``space`` (gymnasium's ``flatdim``)."""
    if space is None:
        raise ValueError("a space is required here, got None")
    return int(gymnasium.spaces.flatdim(space))


def compact_storage_dtype(space: gymnasium.Space) -> Optional[torch.dtype]:
    """The dtype that holds observations of ``space`` exactly in less memory than float32: ``torch.uint8`` for a
    ``Box`` of ``uint8`` values (images), None otherwise (they are stored as float32).
    """
    if isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8:
        return torch.uint8
    return None


def action_size(space: gymnasium.Space) -> int:
    """Number of columns an action for ``space`` takes in a batched action tensor.

    ``Discrete`` actions are one integer column, ``MultiDiscrete`` one column per
    sub-action, ``Box`` actions their flattened size.
    """
    if isinstance(space, gymnasium.spaces.Discrete):
        return 1
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return int(np.prod(space.nvec.shape))
    if isinstance(space, gymnasium.spaces.Box):
        return int(np.prod(space.shape))
    raise TypeError(f"unsupported action space {space!r}: use Discrete, MultiDiscrete or Box")


def action_bounds(space: gymnasium.Space) -> tuple:
    """The lowest and highest allowed value of each action column of ``space`` (integers as floats)."""
    if isinstance(space, gymnasium.spaces.Box):
        return np.asarray(space.low, dtype=np.float64).ravel(), np.asarray(space.high, dtype=np.float64).ravel()
    if isinstance(space, gymnasium.spaces.Discrete):
        return np.array([space.start], dtype=np.float64), np.array([space.start + space.n - 1], dtype=np.float64)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        nvec = np.asarray(space.nvec, dtype=np.float64).ravel()
        start = np.asarray(getattr(space, "start", np.zeros_like(nvec)), dtype=np.float64).ravel()
        return start, start + nvec - 1
    raise TypeError(f"unsupported action space {space!r}: use Discrete, MultiDiscrete or Box")


def is_discrete(space: gymnasium.Space) -> bool:
    """True for spaces whose actions are integers (``Discrete``, ``MultiDiscrete``)."""
    return isinstance(space, (gymnasium.spaces.Discrete, gymnasium.spaces.MultiDiscrete))


def integer_start(space: gymnasium.Space) -> Any:
    """The value of the first action of an integer space: an int for ``Discrete``, an int64 array of
    the space's shape for ``MultiDiscrete``; None for other spaces.
    """
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(space.start)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return np.asarray(space.start, dtype=np.int64).reshape(space.shape)
    return None


def from_zero(space: gymnasium.Space) -> gymnasium.Space:
    """``space`` with its integer actions counted from 0 (``Discrete(n, start=s)`` becomes ``Discrete(n)``);
    the space itself where it already starts at 0 or is not an integer space.
    """
    start = integer_start(space)
    if start is None or not np.any(start):
        return space
    if isinstance(space, gymnasium.spaces.Discrete):
        return gymnasium.spaces.Discrete(int(space.n))
    return gymnasium.spaces.MultiDiscrete(space.nvec, dtype=space.dtype)


class MisfitError(ValueError):
    """A value that does not fit its space: it flattens to another number of values than the space holds."""


def flatten_into(space: gymnasium.Space, value: Any, out: np.ndarray) -> None:
    """Write the flattened ``value`` of ``space`` into the 1-D array ``out`` (no allocation for Box).

    Raises:
        MisfitError: ``value`` flattens to another number of values than ``out`` holds (a single number is
            not spread over a space of several).
        ValueError, TypeError: ``value`` is not numeric, or gymnasium cannot flatten it for ``space``.
    """
    flat = np.asarray(value, dtype=np.float32) if isinstance(space, gymnasium.spaces.Box) else \
        gymnasium.spaces.flatten(space, value)
    if flat.size != out.size:
        raise MisfitError(f"has shape {np.shape(value)} ({flat.size} values), but its space {space} holds {out.size}")
    out[:] = flat.reshape(-1)


def unflatten(space: gymnasium.Space, tensor: torch.Tensor) -> Any:
    """Inverse of the flattening for one sample: a flat tensor back to a value of ``space``."""
    array = tensor.detach().cpu().numpy()
    return gymnasium.spaces.unflatten(space, array)


def append_agent_id(space: gymnasium.Space, num_agents: int) -> gymnasium.spaces.Box:
    """The flat ``Box`` of ``space`` followed by a one-hot agent id of ``num_agents`` entries.

    This is the input space of a centralised critic that is told which agent it values
    (the MAPPO paper's agent-specific global state).
    """
    size = flat_size(space) + int(num_agents)
    return gymnasium.spaces.Box(low=-np.inf, high=np.inf, shape=(size,), dtype=np.float32)


def joint_space(spaces: Sequence[gymnasium.Space]) -> gymnasium.spaces.Box:
    """One flat ``Box`` as long as all ``spaces`` flattened one after another.

    The input space of a critic that reads every agent's observation and action:
    ``joint_space([*env.observation_spaces.values(), *env.action_spaces.values()])``.
    """
    size = sum(flat_size(space) for space in spaces)
    return gymnasium.spaces.Box(low=-np.inf, high=np.inf, shape=(size,), dtype=np.float32)


def as_gymnasium_space(space: Any) -> gymnasium.Space:
    """``space`` as a gymnasium space: spaces of the older ``gym`` package (which VMAS uses) are rebuilt as
    their gymnasium equivalents (``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``, ``Dict``, ``Tuple``).
    """
    if isinstance(space, gymnasium.Space):
        return space
    kind = type(space).__name__
    if kind == "Box":
        return gymnasium.spaces.Box(low=space.low, high=space.high, shape=space.shape, dtype=space.dtype)
    if kind == "Discrete":
        return gymnasium.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if kind == "MultiDiscrete":
        return gymnasium.spaces.MultiDiscrete(np.asarray(space.nvec))
    if kind == "MultiBinary":
        return gymnasium.spaces.MultiBinary(space.n)
    if kind == "Dict":
        return gymnasium.spaces.Dict({key: as_gymnasium_space(value) for key, value in space.spaces.items()})
    if kind == "Tuple":
        return gymnasium.spaces.Tuple([as_gymnasium_space(value) for value in space.spaces])
    raise TypeError(f"cannot convert the space {space!r} ({type(space).__module__}.{kind}) to a gymnasium space")
