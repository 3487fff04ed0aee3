"""A graph neural network over the agents of each env copy, through ``torch_geometric``: :class:`AgentGraph`.

Every agent is a node; within one env copy each agent receives a message from every other agent (a complete
graph without self-loops; copies are never connected). Where the agents' positions are among their
observation features (``position_features``), each edge carries the sender's position relative to the
receiver and their distance, so the attention of a ``GATv2Conv`` layer can depend on where the others are.
Needs ``pip install "marlparts[graphs]"``.
"""

import math
from typing import Dict, Optional, Tuple, Type

import torch
from torch import nn

from marlparts.models.activations import Tanh, tanh
from marlparts.models.agent_sets import AgentSetLayer
from marlparts.models.base import mlp


class AgentGraph(AgentSetLayer):
    """Encoder, ``message_passes`` residual ``GATv2Conv`` layers over the agents of each copy, decoder:
    ``h_i = tanh(enc(x_i))``, ``h_i ← h_i + tanh(GATv2(h)_i)``, ``out_i = dec(h_i)``.

    Its parameters do not depend on the number of agents: a model trained with 4 agents a copy runs with 8.

    Args:
        input_size: features of one agent's row.
        output_size: outputs of one agent's row.
        hidden_size: width of the node features and of the decoder's hidden layer.
        message_passes: ``GATv2Conv`` layers (how many hops information travels).
        heads: attention heads per layer (their outputs are averaged).
        position_features: ``(start, stop)``: the columns of a row that hold the agent's position; the edges then
            carry the relative position and the distance. None: edges without features.
        activation: activation class of the encoder and decoder hidden layers (:class:`~marlparts.models.Tanh` by default).
        output_gain: gain of the last layer (small, e.g. 0.01, for policy logits).

    Raises:
        ImportError: ``torch_geometric`` is not installed.
    """

    def __init__(self, input_size: int, output_size: int, *, hidden_size: int = 64, message_passes: int = 1,
                 heads: int = 1, position_features: Optional[Tuple[int, int]] = None,
                 activation: Type[nn.Module] = Tanh, output_gain: float = 1.0) -> None:
        super().__init__()
        try:  # imported here: torch_geometric is an optional extra, and slow to import
            from torch_geometric.nn import GATv2Conv
        except ImportError as error:  # pragma: no cover - depends on the optional extra
            raise ImportError('AgentGraph needs torch_geometric: pip install "marlparts[graphs]"') from error
        if position_features is not None:
            start, stop = position_features
            if not 0 <= start < stop <= input_size:
                raise ValueError(f"position_features must be (start, stop) columns within the {input_size} input "
                                 f"features, got {position_features}")
        self.position_features = tuple(position_features) if position_features is not None else None
        edge_size = (self.position_features[1] - self.position_features[0] + 1) if self.position_features else None
        self.encoder = nn.Sequential(mlp(input_size, hidden_size, hidden_sizes=(), output_gain=math.sqrt(2)),
                                     Tanh())
        self.message_layers = nn.ModuleList(
            GATv2Conv(hidden_size, hidden_size, heads=heads, concat=False, add_self_loops=False, edge_dim=edge_size)
            for _ in range(message_passes))
        self.decoder = mlp(hidden_size, output_size, hidden_sizes=(hidden_size,), activation=activation,
                           output_gain=output_gain)
        self._edges: Dict[Tuple[int, int, torch.device, bool], torch.Tensor] = {}

    def edge_index(self, copies: int, agents: int, device: torch.device) -> torch.Tensor:
        """``(2, copies * agents * (agents - 1))`` sender and receiver rows: every ordered pair of distinct agents
        of each copy (kept for the next call with the same sizes).
        """
        key = (copies, agents, device, torch.is_inference_mode_enabled())  # inference tensors serve no backward
        if key not in self._edges:
            pairs = (~torch.eye(agents, dtype=torch.bool, device=device)).nonzero().T  # (2, agents * (agents - 1))
            first_rows = torch.arange(copies, device=device) * agents
            if len(self._edges) >= 4:  # acting and the update use a few batch sizes; keep the cache that small
                self._edges.clear()
            self._edges[key] = (pairs.unsqueeze(1) + first_rows.view(1, -1, 1)).flatten(1)
        return self._edges[key]

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        """``(copies * agents, input_size)`` to ``(copies * agents, output_size)``."""
        copies, agents = self.split_copies(rows).shape[:2]
        edges = self.edge_index(copies, agents, rows.device)
        edge_features = None
        if self.position_features is not None:
            positions = rows[:, self.position_features[0]:self.position_features[1]]
            offsets = positions[edges[0]] - positions[edges[1]]  # the sender seen from the receiver
            edge_features = torch.cat([offsets, offsets.norm(dim=-1, keepdim=True)], dim=-1)
        nodes = self.encoder(rows)
        for layer in self.message_layers:
            nodes = nodes + tanh(layer(nodes, edges, edge_features))
        return self.decoder(nodes)

    def extra_repr(self) -> str:
        """The settings shown when the layer is printed."""
        return f"{super().extra_repr()}, position_features={self.position_features}"
