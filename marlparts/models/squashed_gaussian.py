"""Gaussian policies squashed by tanh into a ``Box``: the actions of soft actor-critic methods."""

import math
from typing import Dict, Mapping, Tuple

import torch
from torch.distributions import Normal

from marlparts.models.gaussian import gaussian_log_std


class SquashedGaussianMixin:
    """Turns the mean that ``compute`` returns into a tanh-squashed Gaussian policy over the action Box.

    A sample ``u ~ N(mean, std)`` (reparameterised, so gradients reach the mean and std) becomes
    the action ``low + (tanh(u) + 1) (high − low) / 2``, always inside the Box; its
    log-probability carries the change of variables, ``log N(u) − Σ log(1 − tanh(u)²) −
    Σ log((high − low) / 2)``. The log standard deviation comes from ``extras["log_std"]`` or a
    ``log_std`` parameter, clamped to ``[min_log_std, max_log_std]``. ``outputs["mean_actions"]`` is
    the squashed mean (the greedy action); ``outputs["entropy"]`` is ``−log π`` of the sample.
    """

    min_log_std: float = -20.0
    max_log_std: float = 2.0

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, torch.Tensor, Dict]:
        """Return ``(actions (batch, act_dim), log_prob (batch, 1), outputs)``."""
        mean, outputs = self.compute(inputs, role)
        log_std = gaussian_log_std(self, mean, outputs)
        low = torch.as_tensor(self.action_space.low, device=mean.device, dtype=mean.dtype)
        high = torch.as_tensor(self.action_space.high, device=mean.device, dtype=mean.dtype)
        half_range = (high - low) / 2
        sample = Normal(mean, log_std.exp(), validate_args=False).rsample()
        squashed = torch.tanh(sample)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), stable for large |u|
        log_det = 2.0 * (math.log(2.0) - sample - torch.nn.functional.softplus(-2.0 * sample))
        log_prob = (Normal(mean, log_std.exp(), validate_args=False).log_prob(sample) - log_det
                    - torch.log(half_range)).sum(dim=-1, keepdim=True)
        outputs = dict(outputs)
        outputs["mean_actions"] = low + (torch.tanh(mean) + 1.0) * half_range
        outputs["log_std"] = log_std
        outputs["entropy"] = -log_prob
        return low + (squashed + 1.0) * half_range, log_prob, outputs
