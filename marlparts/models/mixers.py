"""Mixing networks of value decomposition: the agents' values and the global state to one team value."""

from typing import Any, Dict, Mapping, Tuple

import gymnasium
import torch
from torch import nn

from marlparts.models.base import Model
from marlparts.models.deterministic import DeterministicMixin


class QMixer(DeterministicMixin, Model):
    """QMIX's monotonic mixer (Rashid et al., 2018).

    ``inputs["agent_values"]`` ``(batch, num_agents)`` are mixed into ``(batch, 1)`` by a two-layer
    network whose weights come from hypernetworks of the state ``inputs["observations"]``; the
    weights are made non-negative (absolute values), so the team value never decreases when an
    agent's value grows, and each agent's greedy action is greedy for the team.

    Args:
        state_space: the global state's space.
        num_agents: how many agent values are mixed.
        embed_dim: width of the mixing layer.
        hypernet_hidden: hidden width of the hypernetworks of the mixing weights; 0 makes them single
            linear layers of the state (the original QMIX's).
    """

    def __init__(self, *, state_space: gymnasium.Space, num_agents: int, embed_dim: int = 32,
                 hypernet_hidden: int = 64, device: Any = None) -> None:
        super().__init__(observation_space=state_space, output_size=1, device=device)
        self.num_agents, self.embed_dim = int(num_agents), int(embed_dim)
        state = self.num_observations

        def hypernet(outputs: int) -> nn.Module:
            if hypernet_hidden <= 0:
                return nn.Linear(state, outputs)
            return nn.Sequential(nn.Linear(state, hypernet_hidden), nn.ReLU(), nn.Linear(hypernet_hidden, outputs))

        self.hyper_w1 = hypernet(self.num_agents * self.embed_dim)
        self.hyper_b1 = nn.Linear(state, self.embed_dim)
        self.hyper_w2 = hypernet(self.embed_dim)
        self.hyper_b2 = nn.Sequential(nn.Linear(state, self.embed_dim), nn.ReLU(), nn.Linear(self.embed_dim, 1))

    def compute(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, Dict]:
        """The team value ``(batch, 1)``."""
        states = inputs["observations"]
        values = inputs.get("agent_values")
        if values is None:  # the input-size check at construction feeds states only
            values = states.new_zeros(states.shape[0], self.num_agents)
        w1 = self.hyper_w1(states).abs().view(-1, self.num_agents, self.embed_dim)
        hidden = torch.nn.functional.elu(torch.bmm(values.unsqueeze(1), w1).squeeze(1) + self.hyper_b1(states))
        w2 = self.hyper_w2(states).abs().unsqueeze(-1)                                     # (batch, embed, 1)
        return torch.bmm(hidden.unsqueeze(1), w2).squeeze(1) + self.hyper_b2(states), {}
