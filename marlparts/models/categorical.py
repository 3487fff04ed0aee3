"""Categorical policies over ``Discrete`` actions, with action masks."""

from typing import Dict, Mapping, Tuple

import torch
from torch.distributions import Categorical


class CategoricalMixin:
    """Turns the logits that ``compute`` returns into a categorical policy.

    ``inputs["action_mask"]`` (bool, ``True`` = allowed), when given, removes forbidden actions.
    ``inputs["taken_actions"]``, when given, makes :meth:`act` return the log-probability of
    those actions instead of sampling. ``outputs`` holds ``mean_actions`` (the argmax),
    ``entropy`` and ``logits``.
    """

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, torch.Tensor, Dict]:
        """Return ``(actions (batch, 1) int64, log_prob (batch, 1), outputs)``."""
        distribution, outputs = self._distribution_and_outputs(inputs, role)
        taken = inputs.get("taken_actions")
        actions = distribution.sample().unsqueeze(-1) if taken is None else taken.long()
        outputs["entropy"] = distribution.entropy().unsqueeze(-1)
        return actions, distribution.log_prob(actions.squeeze(-1)).unsqueeze(-1), outputs

    def _distribution_and_outputs(self, inputs: Mapping[str, torch.Tensor], role: str) -> Tuple[Categorical, Dict]:
        logits, outputs = self.compute(inputs, role)
        mask = inputs.get("action_mask")
        if mask is not None:
            logits = logits.masked_fill(~mask.bool(), torch.finfo(logits.dtype).min)
        outputs = dict(outputs)
        outputs["logits"] = logits
        outputs["mean_actions"] = logits.argmax(dim=-1, keepdim=True)
        # sampling (torch.multinomial) refuses probabilities that are NaN or infinite with a clear error
        return Categorical(logits=logits, validate_args=False), outputs

    def distribution(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Categorical:
        """The policy's ``torch.distributions.Categorical`` for ``inputs`` (masks applied)."""
        return self._distribution_and_outputs(inputs, role)[0]
