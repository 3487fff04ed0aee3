"""Categorical policies over ``Discrete`` actions, with action masks."""

import math
from typing import Dict, Mapping, Tuple

import torch
from torch.distributions import Categorical

from marlparts.models._kernels import log_softmax

_NOT_FINITE = ("the policy's action probabilities are not finite (NaN or infinite logits): the model's parameters or "
              "inputs hold a NaN or an infinity")


class CategoricalMixin:
    """Turns the logits that ``compute`` returns into a categorical policy.

    ``inputs["action_mask"]`` (bool, ``True`` = allowed), when given, removes forbidden actions.
    ``inputs["taken_actions"]``, when given, makes :meth:`act` return the log-probability of
    those actions instead of sampling. ``outputs`` holds ``mean_actions`` (the argmax),
    ``entropy`` and ``logits``.
    """

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, torch.Tensor, Dict]:
        """Return ``(actions (batch, 1) int64, log_prob (batch, 1), outputs)``."""
        logits, outputs = self.compute(inputs, role)
        mask = inputs.get("action_mask")
        if mask is not None:
            logits = logits.masked_fill(~mask.bool(), torch.finfo(logits.dtype).min)
        log_probs = log_softmax(logits)
        probs = log_probs.exp()
        taken = inputs.get("taken_actions")
        actions = self._sample(probs) if taken is None else taken.long()
        outputs = dict(outputs)
        outputs["logits"] = logits
        outputs["mean_actions"] = logits.argmax(dim=-1, keepdim=True)
        outputs["entropy"] = -(probs * log_probs).sum(dim=-1, keepdim=True)
        return actions, log_probs.gather(-1, actions), outputs

    @staticmethod
    def _sample(probs: torch.Tensor) -> torch.Tensor:
        """One action per row of ``(..., actions)`` probabilities, ``(..., 1)`` int64, by an exponential race:
        with ``E_i`` independent ``Exp(1)`` times, ``argmax_i p_i / E_i`` is ``i`` with probability ``p_i``
        (three small operations, a third of the time of ``torch.multinomial`` on the few rows of acting).
        A race time of exactly 0 is raised to the smallest positive float, so that a forbidden action
        (``p_i = 0``) never wins; probabilities that are not finite are an error.
        """
        if probs.device.type == "cpu":  # (a NaN or an infinity anywhere makes the sum one)
            if not math.isfinite(probs.sum().item()):
                raise ValueError(_NOT_FINITE)
        else:  # checked on the device, without waiting for it
            torch._assert_async(torch.isfinite(probs).all(), _NOT_FINITE)
        times = torch.empty_like(probs).exponential_().clamp_(min=torch.finfo(probs.dtype).tiny)
        return (probs / times).argmax(dim=-1, keepdim=True)

    def distribution(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Categorical:
        """The policy's ``torch.distributions.Categorical`` for ``inputs`` (masks applied)."""
        _, _, outputs = self.act(inputs, role)
        return Categorical(logits=outputs["logits"])
