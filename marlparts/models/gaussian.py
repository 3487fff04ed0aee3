"""Diagonal Gaussian policies over ``Box`` actions."""

from typing import Any, Dict, Mapping, Tuple

import torch
from torch.distributions import Normal


def gaussian_log_std(model: Any, mean: torch.Tensor, extras: Mapping[str, Any]) -> torch.Tensor:
    """The log standard deviation of a Gaussian policy, shaped like ``mean``: ``extras["log_std"]``, or the
    model's ``log_std`` parameter, clamped to ``[model.min_log_std, model.max_log_std]``.
    """
    log_std = extras.get("log_std", getattr(model, "log_std", None))
    if log_std is None:
        raise AttributeError(f"{type(model).__name__}: define a `log_std` parameter or return extras['log_std']")
    return log_std.clamp(model.min_log_std, model.max_log_std).expand_as(mean)


class GaussianMixin:
    """Turns the mean that ``compute`` returns into a diagonal Gaussian policy.

    The log standard deviation comes from ``extras["log_std"]`` if ``compute`` returns one,
    else from a ``log_std`` parameter the model defines. It is clamped to
    ``[min_log_std, max_log_std]``.

    With ``clip_actions`` set, the returned actions (and ``mean_actions``) are clipped into the
    action space; the log-probability is that of the unclipped sample, which ``outputs``
    carries as ``"sampled_actions"``: an algorithm that re-evaluates stored actions later
    (PPO) stores that sample, so the probability ratio of the first update is exactly 1.
    """

    min_log_std: float = -20.0
    max_log_std: float = 2.0
    clip_actions: bool = False

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, torch.Tensor, Dict]:
        """Return ``(actions (batch, act_dim), log_prob (batch, 1), outputs)``."""
        mean, outputs = self.compute(inputs, role)
        log_std = gaussian_log_std(self, mean, outputs)
        distribution = Normal(mean, log_std.exp(), validate_args=False)
        taken = inputs.get("taken_actions")
        actions = distribution.rsample() if taken is None else taken
        log_prob = distribution.log_prob(actions).sum(dim=-1, keepdim=True)
        outputs = dict(outputs)
        outputs["mean_actions"] = mean
        if taken is None and self.clip_actions:
            low = torch.as_tensor(self.action_space.low, device=mean.device, dtype=mean.dtype)
            high = torch.as_tensor(self.action_space.high, device=mean.device, dtype=mean.dtype)
            outputs["sampled_actions"] = actions
            actions = torch.clamp(actions, low, high)
            outputs["mean_actions"] = torch.clamp(mean, low, high)
        outputs["log_std"] = log_std
        outputs["entropy"] = distribution.entropy().sum(dim=-1, keepdim=True)
        return actions, log_prob, outputs
