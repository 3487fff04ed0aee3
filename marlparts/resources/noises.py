"""Exploration noises for deterministic continuous policies, with a linear decay schedule."""

from typing import Any, Dict, Mapping, Optional, Sequence

import torch


class Noise:
    """Base of the noises: ``sample(shape)`` returns a noise tensor of that shape."""

    def __init__(self, *, device: Optional[torch.device] = None) -> None:
        self.device = torch.device(device) if device is not None else torch.device("cpu")

    def sample(self, shape: Sequence[int]) -> torch.Tensor:
        """Noise of ``shape``."""
        raise NotImplementedError

    def reset(self, mask: Optional[torch.Tensor] = None) -> None:
        """Forget internal state (where ``mask`` is true, if given); stateless noises ignore it."""

    def state_dict(self) -> Dict[str, Any]:
        """The noise's internal state, for checkpoints (empty for stateless noises)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


class GaussianNoise(Noise):
    """Independent normal noise.

    Args:
        mean: mean of the noise.
        std: standard deviation of the noise.
    """

    def __init__(self, *, mean: float = 0.0, std: float = 0.1, device: Optional[torch.device] = None) -> None:
        super().__init__(device=device)
        self.mean, self.std = float(mean), float(std)

    def sample(self, shape: Sequence[int]) -> torch.Tensor:
        """Normal noise of ``shape``."""
        return torch.randn(tuple(shape), device=self.device) * self.std + self.mean


class OrnsteinUhlenbeckNoise(Noise):
    """Temporally correlated noise: ``x += theta * (mean - x) + sigma * N(0, 1)``, scaled by ``base_scale``.

    The state has the shape of the first sample; ``reset(mask)`` restarts it where ``mask`` is
    true, ``mask`` indexing the state's leading dimensions (for example ``(env copies, agents)``
    of a ``(env copies, agents, action)`` state, true for the copies whose episode ended).

    Args:
        theta: pull towards the mean.
        sigma: scale of the random increments.
        base_scale: factor applied to the state when sampling.
        mean: long-run mean.
    """

    def __init__(self, *, theta: float = 0.15, sigma: float = 0.2, base_scale: float = 1.0, mean: float = 0.0,
                 device: Optional[torch.device] = None) -> None:
        super().__init__(device=device)
        self.theta, self.sigma, self.base_scale, self.mean = float(theta), float(sigma), float(base_scale), float(mean)
        self.state: Optional[torch.Tensor] = None

    def sample(self, shape: Sequence[int]) -> torch.Tensor:
        """The next value of the process, of ``shape``."""
        shape = tuple(shape)
        if self.state is None or self.state.shape != shape:
            self.state = torch.full(shape, self.mean, device=self.device)
        self.state = self.state + self.theta * (self.mean - self.state) + self.sigma * torch.randn(shape, device=self.device)
        return self.base_scale * self.state

    def reset(self, mask: Optional[torch.Tensor] = None) -> None:
        """Restart the process (only the rows where ``mask`` is true, if given)."""
        if self.state is None:
            return
        if mask is None:
            self.state = None
            return
        mask = mask.to(self.state.device).bool()
        if tuple(mask.shape) != tuple(self.state.shape[:mask.dim()]):
            raise ValueError(f"reset mask of shape {tuple(mask.shape)} does not index the leading dimensions of the "
                             f"noise state {tuple(self.state.shape)}")
        self.state[mask] = self.mean

    def state_dict(self) -> Dict[str, Any]:
        """The process's current value (None before the first sample)."""
        return {"state": self.state}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the process's value."""
        value = state["state"]
        self.state = None if value is None else value.to(self.device)


def linear_scale(timestep: int, *, initial_scale: float, final_scale: float, timesteps: Optional[int]) -> float:
    """Noise scale at ``timestep``: from ``initial_scale`` down (or up) to ``final_scale`` over
    ``timesteps`` steps, then constant; constant ``initial_scale`` when ``timesteps`` is None.
    """
    if not timesteps:
        return float(initial_scale)
    fraction = min(max(timestep / timesteps, 0.0), 1.0)
    return float(initial_scale + fraction * (final_scale - initial_scale))
