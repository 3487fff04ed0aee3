"""Deterministic models: value functions, Q-functions and deterministic policies."""

from typing import Dict, Mapping, Tuple

import torch


class DeterministicMixin:
    """:meth:`act` returns the output of ``compute`` as it is, with no log-probability."""

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, None, Dict]:
        """Return ``(output, None, outputs)``; ``outputs["mean_actions"]`` is the output too."""
        output, outputs = self.compute(inputs, role)
        outputs = dict(outputs)
        outputs["mean_actions"] = output
        return output, None, outputs
