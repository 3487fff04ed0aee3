"""Generalised advantage estimation with correct episode ends."""

from typing import Tuple

import torch


def compute_gae(*, rewards: torch.Tensor, values: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor,
                final_values: torch.Tensor, last_values: torch.Tensor, discount_factor: float,
                gae_lambda: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns of a rollout of ``T`` steps (Schulman et al., 2016).

    All tensors are ``(T, ...)`` except ``last_values`` (``...``): the value of the observation
    that follows the last step. At step ``t`` the value of what comes next is

    - 0 where the episode was ``terminated`` (no future reward),
    - ``final_values[t]``, the value of the episode's final observation, where it was
      ``truncated`` (the future was cut off, not absent),
    - ``values[t + 1]`` otherwise (``last_values`` for the last step);

    and the advantage recursion stops at either kind of episode end, so no advantage mixes
    two episodes.

    Returns:
        ``(advantages, returns)`` with ``returns = advantages + values``.
    """
    terminated, truncated = terminated.bool(), truncated.bool()
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(values.shape[0])):
        next_values = torch.where(terminated[t], 0.0, torch.where(truncated[t], final_values[t], next_values))
        delta = rewards[t] + discount_factor * next_values - values[t]
        continues = ~(terminated[t] | truncated[t])
        running = delta + discount_factor * gae_lambda * continues * running
        advantages[t] = running
        next_values = values[t]
    return advantages, advantages + values
