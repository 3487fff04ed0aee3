"""Gaussian policies squashed by tanh into a ``Box``: the actions of soft actor-critic methods."""

import math
from typing import Dict, Mapping, Tuple

import gymnasium
import numpy as np
import torch
from torch.distributions import Normal

from marlparts.models.gaussian import gaussian_log_std


def _log_det_of_tanh(sample: torch.Tensor) -> torch.Tensor:
    """``log(1 − tanh(u)²)`` per component, as ``2 (log 2 − u − softplus(−2u))``: stable for large ``|u|``."""
    return 2.0 * (math.log(2.0) - sample - torch.nn.functional.softplus(-2.0 * sample))


def check_squashable(space: gymnasium.Space, *, owner: str) -> None:
    """Raise ``ValueError`` (naming ``owner`` and the component) unless ``space`` is a ``Box`` with finite bounds and
    ``low < high`` in every component: a zero-width component would make every log-probability infinite, an
    infinite bound every action NaN.
    """
    if not isinstance(space, gymnasium.spaces.Box):
        raise ValueError(f"{owner} squashes its actions into a Box, but its action_space is {space}")
    low, high = space.low.reshape(-1), space.high.reshape(-1)
    unusable = ~(np.isfinite(low) & np.isfinite(high) & (low < high))
    if unusable.any():
        component = int(np.flatnonzero(unusable)[0])
        raise ValueError(f"{owner} squashes its actions into a Box with finite bounds and low < high in every "
                         f"component, but component {component} of its action_space {space} has low "
                         f"{low[component]} and high {high[component]} (leave a fixed component out of the actions, "
                         f"or use GaussianMixin for unbounded ones)")


class SquashedGaussianMixin:
    """Turns the mean that ``compute`` returns into a tanh-squashed Gaussian policy over the action Box.

    A sample ``u ~ N(mean, std)`` (reparameterised, so gradients reach the mean and std) becomes
    the action ``low + (tanh(u) + 1) (high − low) / 2``, always inside the Box; its
    log-probability carries the change of variables, ``log N(u) − Σ log(1 − tanh(u)²) −
    Σ log((high − low) / 2)``. The log standard deviation comes from ``extras["log_std"]`` or a
    ``log_std`` parameter, clamped to ``[min_log_std, max_log_std]``.

    ``outputs["sampled_actions"]`` is the Gaussian sample ``u`` before the squashing: an algorithm
    that re-evaluates stored actions (PPO) stores it and gives it back as ``inputs["taken_actions"]``,
    whose log-probability is then exact (inverting tanh from a saturated action could not be).
    ``outputs["mean_actions"]`` is the squashed mean (the greedy action). ``outputs["entropy"]`` is
    ``−log π`` of a fresh reparameterised sample, a one-sample estimate of the squashed policy's
    entropy whose gradient reaches the mean and the std.
    """

    min_log_std: float = -20.0
    max_log_std: float = 2.0

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        check_squashable(self.action_space, owner=type(self).__name__)

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, torch.Tensor, Dict]:
        """Return ``(actions (batch, act_dim), log_prob (batch, 1), outputs)``; with ``inputs["taken_actions"]``
        (pre-squash samples, as ``outputs["sampled_actions"]`` gave them) the actions are those, squashed.
        """
        mean, outputs = self.compute(inputs, role)
        log_std = gaussian_log_std(self, mean, outputs)
        low = torch.as_tensor(self.action_space.low, device=mean.device, dtype=mean.dtype)
        high = torch.as_tensor(self.action_space.high, device=mean.device, dtype=mean.dtype)
        half_range = (high - low) / 2
        distribution = Normal(mean, log_std.exp(), validate_args=False)

        def squashed_log_prob(sample: torch.Tensor) -> torch.Tensor:
            return (distribution.log_prob(sample) - _log_det_of_tanh(sample)
                    - torch.log(half_range)).sum(dim=-1, keepdim=True)

        taken = inputs.get("taken_actions")
        fresh = distribution.rsample()
        sample = fresh if taken is None else taken
        log_prob = squashed_log_prob(sample)
        outputs = dict(outputs)
        outputs["sampled_actions"] = sample
        # clamped: where tanh rounds to ±1, low + 2 * half_range can land one float step outside an asymmetric Box
        outputs["mean_actions"] = torch.clamp(low + (torch.tanh(mean) + 1.0) * half_range, low, high)
        outputs["log_std"] = log_std
        outputs["entropy"] = -(log_prob if taken is None else squashed_log_prob(fresh))
        return torch.clamp(low + (torch.tanh(sample) + 1.0) * half_range, low, high), log_prob, outputs
