"""Recurrent models: a hidden state carried from step to step through ``inputs`` and ``outputs``."""

from typing import Mapping, Tuple

import torch
from torch import nn


class RecurrentMixin:
    """Marks a model as recurrent and runs its recurrent cell one step at a time.

    A recurrent model sets ``hidden_size`` and, in ``compute``, passes its features through
    :meth:`recur`, which reads ``inputs["hidden"]`` (``(batch, hidden_size)``; zeros when absent)
    and returns the cell's output and the next hidden state; ``compute`` puts the latter in its
    extras as ``"hidden"``::

        class Policy(RecurrentMixin, CategoricalMixin, Model):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.hidden_size = 64
                self.encoder = mlp(self.num_observations, 64, hidden_sizes=())
                self.cell = torch.nn.GRUCell(64, self.hidden_size)
                self.head = torch.nn.Linear(self.hidden_size, self.num_actions)

            def compute(self, inputs, role=""):
                output, hidden = self.recur(self.cell, torch.relu(self.encoder(inputs["observations"])), inputs)
                return self.head(output), {"hidden": hidden}

    The algorithms that support recurrence (``RecurrentMAPPO`` and ``RecurrentIPPO``) keep
    the hidden states, store them with the rollout, reset them where an episode starts (or an
    agent's own episode has ended), hold them while an agent is inactive (waiting for its turn),
    and train on chunks of consecutive steps from the stored initial states.
    """

    hidden_size: int = 0

    def recur(self, cell: nn.Module, features: torch.Tensor,
              inputs: Mapping[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """One step of ``cell`` (e.g. ``torch.nn.GRUCell``) on ``(batch, features)``: ``(output, next hidden)``."""
        hidden = inputs.get("hidden")
        if hidden is None:
            hidden = features.new_zeros(features.shape[0], self.hidden_size)
        elif hidden.shape != (features.shape[0], self.hidden_size):
            raise ValueError(f"{type(self).__name__} has hidden_size {self.hidden_size} but was given hidden states of "
                             f"shape {tuple(hidden.shape)} for a batch of {features.shape[0]}")
        hidden = cell(features, hidden)
        return hidden, hidden


def is_recurrent(model: nn.Module) -> bool:
    """Whether ``model`` carries a hidden state (a :class:`RecurrentMixin` model)."""
    return isinstance(model, RecurrentMixin)
