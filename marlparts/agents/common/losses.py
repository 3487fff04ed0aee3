"""Loss helpers shared by the algorithms."""

from typing import Tuple

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, *, members: int = 0) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` is true (0 if there are none).

    Used to leave out the steps where an agent was inactive (it had left the episode). With
    ``members``, the rows are ``(batch * members)`` in batch-major order and the result is the mean
    over members of each member's own masked mean: agents with models of their own weigh the same
    whatever their number of active steps, as they would each in a group of their own.
    """
    return (values * masked_mean_weights(mask, members=members, dtype=values.dtype)).sum()


def masked_mean_weights(mask: torch.Tensor, *, members: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-entry weights ``w`` (shaped like ``mask``) with ``(values * w).sum()`` equal to
    :func:`masked_mean` ``(values, mask, members=members)``: computed once, they turn every masked mean of
    a batch into one product and one sum (the losses of one minibatch share their mask). They are in
    ``dtype`` or float32, whichever is wider: float16 products of small values and small weights would round to 0.
    """
    mask = mask.to(torch.promote_types(dtype, torch.float32))
    if members:
        per_member = mask.unflatten(0, (-1, members))
        counts = per_member.flatten(2).sum((0, 2)).clamp(min=1.0)  # (members,)
        shape = (1, members) + (1,) * (per_member.dim() - 2)
        return (per_member / (counts.view(shape) * members)).flatten(0, 1)
    return mask / mask.sum().clamp(min=1.0)


def masked_mean_std(values: torch.Tensor, mask: torch.Tensor, *, dims: Tuple[int, ...]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and (unbiased) standard deviation of ``values`` over ``dims`` where ``mask`` is True, kept as
    size-1 dims for broadcasting; the standard deviation is 1 where fewer than two values count.
    """
    mask = mask.to(values.dtype)
    count = mask.sum(dim=dims, keepdim=True)
    mean = (values * mask).sum(dim=dims, keepdim=True) / count.clamp(min=1.0)
    variance = ((values - mean).square() * mask).sum(dim=dims, keepdim=True) / (count - 1.0).clamp(min=1.0)
    return mean, torch.where(count > 1, variance.sqrt(), torch.ones_like(variance))
