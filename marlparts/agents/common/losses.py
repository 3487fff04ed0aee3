"""Loss helpers shared by the algorithms."""

from typing import Tuple

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, *, model_sets: int = 1) -> torch.Tensor:
    """Mean of ``values`` over the entries where ``mask`` is true (0 if there are none).

    Used to leave out the steps where an agent was inactive (it had left the episode). The rows are
    ``(batch * model_sets)`` in batch-major order (a group's agents, see
    :attr:`~marlparts.agents.common.groups.AgentGroup.model_sets`), and the result is the mean over the sets
    of each set's own masked mean: agents with models of their own weigh the same whatever their number of
    active steps, as they would each in a group of their own. With one set it is the plain masked mean.
    """
    return (values * masked_mean_weights(mask, model_sets=model_sets, dtype=values.dtype)).sum()


def masked_mean_weights(mask: torch.Tensor, *, model_sets: int = 1, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-entry weights ``w`` (shaped like ``mask``) with ``(values * w).sum()`` equal to
    :func:`masked_mean` ``(values, mask, model_sets=model_sets)``: computed once, they turn every masked mean
    of a batch into one product and one sum (the losses of one minibatch share their mask). They are in
    ``dtype`` or float32, whichever is wider: float16 products of small values and small weights would round to 0.
    """
    per_set = mask.to(torch.promote_types(dtype, torch.float32)).unflatten(0, (-1, model_sets))
    counts = per_set.sum([0, *range(2, per_set.dim())]).clamp(min=1.0)  # (model_sets,)
    shape = (1, model_sets) + (1,) * (per_set.dim() - 2)
    return (per_set / (counts.view(shape) * model_sets)).flatten(0, 1)


def masked_mean_std(values: torch.Tensor, mask: torch.Tensor, *, dims: Tuple[int, ...]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and (unbiased) standard deviation of ``values`` over ``dims`` where ``mask`` is True, kept as
    size-1 dims for broadcasting; the standard deviation is 1 where fewer than two values count.
    """
    mask = mask.to(values.dtype)
    count = mask.sum(dim=dims, keepdim=True)
    mean = (values * mask).sum(dim=dims, keepdim=True) / count.clamp(min=1.0)
    variance = ((values - mean).square() * mask).sum(dim=dims, keepdim=True) / (count - 1.0).clamp(min=1.0)
    return mean, torch.where(count > 1, variance.sqrt(), torch.ones_like(variance))
