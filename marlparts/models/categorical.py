"""Categorical policies over ``Discrete`` actions, with action masks."""

from typing import Dict, Mapping, Tuple

import torch
from torch.distributions import Categorical


class CategoricalMixin:
    """Turns the logits that ``compute`` returns into a categorical policy.

    ``inputs["action_mask"]`` (bool, ``True`` = allowed), when given, removes forbidden actions.
    ``inputs["taken_actions"]``, when given, makes :meth:`act` return the log-probability of
    those actions instead of sampling. ``outputs`` holds ``mean_actions`` (the argmax),
    ``entropy`` and ``logits``. Actions are drawn by ``torch.multinomial`` from the normalised
    probabilities, which refuses probabilities that are NaN or infinite with a clear error.
    """

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, torch.Tensor, Dict]:
        """Return ``(actions (batch, 1) int64, log_prob (batch, 1), outputs)``."""
        logits, outputs = self._masked_logits(inputs, role)
        log_probs = torch.log_softmax(logits, dim=-1)
        probs = log_probs.exp()
        taken = inputs.get("taken_actions")
        if taken is None:
            actions = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1] + (1,))
        else:
            actions = taken.long()
        outputs["mean_actions"] = logits.argmax(dim=-1, keepdim=True)
        outputs["entropy"] = -(probs * log_probs).sum(dim=-1, keepdim=True)
        return actions, log_probs.gather(-1, actions), outputs

    def _masked_logits(self, inputs: Mapping[str, torch.Tensor], role: str) -> Tuple[torch.Tensor, Dict]:
        """The logits of ``compute`` with forbidden actions at the lowest float, and the outputs holding them."""
        logits, outputs = self.compute(inputs, role)
        mask = inputs.get("action_mask")
        if mask is not None:
            logits = logits.masked_fill(~mask.bool(), torch.finfo(logits.dtype).min)
        outputs = dict(outputs)
        outputs["logits"] = logits
        return logits, outputs

    def distribution(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Categorical:
        """The policy's ``torch.distributions.Categorical`` for ``inputs`` (masks applied)."""
        return Categorical(logits=self._masked_logits(inputs, role)[0])
