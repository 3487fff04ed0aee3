"""Networks that read every agent of a group at once: :class:`AgentSetLayer`, their base, and :class:`DeepSets`.

The algorithms hand a model one row per agent and env copy, ``(copies * agents, features)``, the agents of one
copy next to each other. A layer derived from :class:`AgentSetLayer` gives those rows their copy axis back,
``(copies, agents, features)``, so that each agent's output can depend on the other agents of its copy (and
never on another copy's). How many agents a copy has is not in the rows: the algorithm sets it
(:attr:`AgentSetLayer.agents_per_copy`) when it is built, to the size of the group of agents that share the
model. The layer's parameters do not depend on that number: a model trained with 4 agents runs unchanged with 8.

:class:`~marlparts.models.graph.AgentGraph` (a graph neural network, through ``torch_geometric``) is the other
layer of this kind.
"""

import math
from typing import Optional, Type

import torch
from torch import nn

from marlparts.models.activations import Tanh
from marlparts.models.base import mlp


class AgentSetLayer(nn.Module):
    """The base of layers whose rows are the agents of env copies, ``(copies * agents, features)``.

    Attributes:
        agents_per_copy: how many consecutive rows belong to one env copy; set by the algorithm that runs the
            model (the size of the group of agents that share it), or by hand where the layer is used alone.
    """

    def __init__(self) -> None:
        super().__init__()
        self.agents_per_copy: Optional[int] = None

    def split_copies(self, rows: torch.Tensor) -> torch.Tensor:
        """``(copies * agents, features)`` rows as ``(copies, agents, features)``.

        Raises:
            ValueError: :attr:`agents_per_copy` is not set, or does not divide the number of rows.
        """
        agents = self.agents_per_copy
        if agents is None:
            raise ValueError(f"{type(self).__name__} reads the agents of each env copy together, but does not know how "
                             "many agents a copy has: give the model to an algorithm (which sets it to the size of "
                             "the group that shares the model) or set its agents_per_copy")
        if rows.dim() != 2 or rows.shape[0] % agents:
            raise ValueError(f"{type(self).__name__} takes rows (copies * agents, features) with {agents} agents a "
                             f"copy, got input of shape {tuple(rows.shape)}")
        return rows.unflatten(0, (-1, agents))

    def extra_repr(self) -> str:
        """The settings shown when the layer is printed."""
        return f"agents_per_copy={self.agents_per_copy}"


class DeepSets(AgentSetLayer):
    """A permutation-equivariant set network over the agents of each copy (Zaheer et al., 2017):
    ``out_i = ρ([φ(x_i), mean_j φ(x_j)])``.

    Each agent reads its own encoding and the mean of every agent's encoding of its copy; the mean (rather than
    a sum) keeps the input of ``ρ`` in the same range whatever the number of agents. Orthogonal initialisation as
    :func:`~marlparts.models.mlp`.

    Args:
        input_size: features of one agent's row.
        output_size: outputs of one agent's row.
        hidden_size: width of the encoding ``φ`` and of the hidden layers.
        encoder_layers: hidden layers of ``φ`` before its output layer.
        decoder_layers: hidden layers of ``ρ`` before its output layer.
        activation: activation class after each hidden layer (:class:`~marlparts.models.Tanh` by default).
        output_gain: gain of the last layer (small, e.g. 0.01, for policy logits).
    """

    def __init__(self, input_size: int, output_size: int, *, hidden_size: int = 64, encoder_layers: int = 1,
                 decoder_layers: int = 1, activation: Type[nn.Module] = Tanh, output_gain: float = 1.0) -> None:
        super().__init__()
        self.encoder = nn.Sequential(mlp(input_size, hidden_size, hidden_sizes=(hidden_size,) * encoder_layers,
                                         activation=activation, output_gain=math.sqrt(2)), activation())
        self.decoder = mlp(2 * hidden_size, output_size, hidden_sizes=(hidden_size,) * decoder_layers,
                           activation=activation, output_gain=output_gain)

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """``(copies * agents, input_size)`` to ``(copies * agents, output_size)``."""
        encoded = self.encoder(self.split_copies(rows))  # (copies, agents, hidden)
        pooled = encoded.mean(dim=1, keepdim=True).expand_as(encoded)
        return self.decoder(torch.cat([encoded, pooled], dim=-1)).flatten(0, 1)

