"""The PPO losses on a batch of samples, shared by the feed-forward and the recurrent update."""

from typing import Dict, Mapping, Tuple

import torch

from marlparts.agents.common.losses import masked_mean_weights


def ppo_losses(*, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, entropy: torch.Tensor,
               predicted: torch.Tensor, targets: torch.Tensor, old_values: torch.Tensor, active: torch.Tensor,
               cfg: Mapping, model_sets: int = 1) -> Dict[str, torch.Tensor]:
    """Clipped-surrogate policy loss, (clipped) value loss and entropy loss, each a mean over the active samples.

    All tensors have one row per sample; values are in the critic's (normalised) units; ``cfg`` holds
    ``ratio_clip``, ``entropy_loss_scale``, ``clip_predicted_values``, ``value_clip`` and ``value_loss_scale``.
    Each loss is the mean over the group's ``model_sets`` of each set's own mean (see
    :func:`~marlparts.agents.common.losses.masked_mean`).
    Every tensor holds one value per sample (``(samples,)`` or ``(samples, 1)``).
    """
    samples = active.numel()
    for name, tensor in (("the policy's log_prob", log_prob), ("the policy's entropy", entropy),
                         ("the critic's prediction", predicted)):
        if tensor.numel() != samples:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}: one value per sample "
                             f"({samples} samples) is expected, e.g. (batch, 1)")
    surrogate, ratio, log_ratio = clipped_surrogate(log_prob=log_prob, old_log_prob=old_log_prob,
                                                    advantages=advantages, ratio_clip=cfg["ratio_clip"])
    value_error = value_errors(predicted=predicted, targets=targets, old_values=old_values, cfg=cfg)
    # the three masked means in one product and one sum (each column of ``terms`` one loss)
    with torch.no_grad():
        weights = masked_mean_weights(active.reshape(-1, 1), model_sets=model_sets, dtype=log_prob.dtype)
        kl = ((ratio - 1.0 - log_ratio).reshape(-1, 1) * weights).sum()
    terms = torch.cat([surrogate.reshape(-1, 1), value_error.reshape(-1, 1), entropy.reshape(-1, 1)], dim=1)
    surrogate_mean, value_error_mean, entropy_mean = (terms * weights).sum(0).unbind()
    return {"policy": -surrogate_mean, "value": cfg["value_loss_scale"] * value_error_mean,
            "entropy": -cfg["entropy_loss_scale"] * entropy_mean, "kl": kl, "entropy_value": entropy_mean.detach()}


def clipped_surrogate(*, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor,
                      ratio_clip: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate ``min(r A, clip(r, 1 - ε, 1 + ε) A)`` per sample, with the ratio ``r`` and its log.

    At ratio 1 (the first minibatch of an update) its gradient is the policy gradient ``A ∇ log π``.
    """
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - ratio_clip, 1.0 + ratio_clip) * advantages)
    return surrogate, ratio, log_ratio


def value_errors(*, predicted: torch.Tensor, targets: torch.Tensor, old_values: torch.Tensor,
                 cfg: Mapping) -> torch.Tensor:
    """The squared error of each prediction; with ``cfg["clip_predicted_values"]`` the larger of it and the
    error of the prediction clipped to ``cfg["value_clip"]`` around the stored old value.
    """
    value_error = (predicted - targets).square()
    if cfg["clip_predicted_values"]:
        limit = cfg["value_clip"]
        clipped = old_values + (predicted - old_values).clamp(-limit, limit)
        value_error = torch.max(value_error, (clipped - targets).square())
    return value_error
