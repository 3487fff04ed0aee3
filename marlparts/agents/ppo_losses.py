"""The PPO losses on a batch of samples, shared by the feed-forward and the recurrent update."""

from typing import Dict, Mapping

import torch

from marlparts.agents.losses import masked_mean


def ppo_losses(*, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor,
               predicted: torch.Tensor, targets: torch.Tensor, old_values: torch.Tensor, active: torch.Tensor,
               cfg: Mapping, members: int = 0) -> Dict[str, torch.Tensor]:
    """Clipped-surrogate policy loss, (clipped) value loss and entropy loss, each a mean over the active samples.

    All tensors have one row per sample; values are in the critic's (normalised) units; ``cfg`` holds
    ``ratio_clip``, ``entropy_loss_scale``, ``clip_predicted_values``, ``value_clip`` and ``value_loss_scale``.
    With ``members`` (agents with models of their own, merged into one group), each loss is the mean
    over the agents of each agent's own mean (see :func:`~marlparts.agents.losses.masked_mean`).
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    clip = cfg["ratio_clip"]
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    value_error = (predicted - targets).square()
    if cfg["clip_predicted_values"]:
        limit = cfg["value_clip"]
        clipped = old_values + (predicted - old_values).clamp(-limit, limit)
        value_error = torch.max(value_error, (clipped - targets).square())
    def mean(values: torch.Tensor) -> torch.Tensor:
        return masked_mean(values, active, members=members)

    with torch.no_grad():
        kl = mean(ratio - 1.0 - log_ratio)
    return {"policy": -mean(surrogate), "value": cfg["value_loss_scale"] * mean(value_error),
            "entropy": -cfg["entropy_loss_scale"] * mean(entropy), "kl": kl, "entropy_value": mean(entropy.detach())}
