"""Loss helpers shared by the algorithms."""

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` is true (0 if there are none).

    Used to leave out the steps where an agent was inactive (it had left the episode).
    """
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp(min=1.0)
