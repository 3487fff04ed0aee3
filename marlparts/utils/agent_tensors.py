"""Per-agent tensors stored side by side in one batch tensor, and stacking helpers.

Environments return one tensor per agent id. Storing all agents' columns in one
``(batch, total)`` tensor and handing out column views makes building that mapping
free, and lets an algorithm take a group of agents with equal sizes as one
``(batch, agents, size)`` view instead of gathering agent by agent.
"""

import bisect
from typing import Dict, Iterator, Mapping, Sequence, Tuple

import torch


class AgentLayout:
    """Where each agent's columns lie in a ``(batch, total)`` tensor.

    Args:
        uids: agent ids, in column order.
        widths: number of columns of each agent.
    """

    def __init__(self, uids: Sequence[str], widths: Sequence[int]) -> None:
        if len(uids) != len(widths):
            raise ValueError(f"{len(uids)} agent ids but {len(widths)} widths")
        self.uids = list(uids)
        self.widths = [int(w) for w in widths]
        self.offsets = [0]
        for width in self.widths:
            self.offsets.append(self.offsets[-1] + width)
        self.total = self.offsets[-1]
        self._index = {uid: i for i, uid in enumerate(self.uids)}
        self._blocks: dict = {}

    def index(self, uid: str) -> int:
        """Position of ``uid`` in the layout; a clear ``KeyError`` for an unknown id."""
        try:
            return self._index[uid]
        except KeyError:
            raise KeyError(f"unknown agent id {uid!r}; known ids: {self.uids}") from None

    def columns(self, uid: str) -> slice:
        """The column slice of ``uid``."""
        i = self.index(uid)
        return slice(self.offsets[i], self.offsets[i + 1])

    def uid_at(self, column: int) -> str:
        """The agent id whose columns hold ``column``."""
        index = bisect.bisect_right(self.offsets, int(column)) - 1
        if not 0 <= index < len(self.uids):
            raise IndexError(f"column {column} is outside the layout's {self.total} columns")
        return self.uids[index]

    def block(self, uids: Sequence[str]) -> Tuple[slice, int]:
        """``(columns, width)`` if ``uids`` are adjacent, in order, and of equal width, else ``(None, 0)``."""
        key = tuple(uids)
        if key not in self._blocks:
            self._blocks[key] = self._find_block(key)
        return self._blocks[key]

    def _find_block(self, uids: Tuple[str, ...]) -> Tuple[slice, int]:
        positions = [self._index.get(uid, -1) for uid in uids]
        first = positions[0]
        if first < 0 or positions != list(range(first, first + len(uids))):
            return None, 0
        width = self.widths[first]
        if any(self.widths[p] != width for p in positions):
            return None, 0
        return slice(self.offsets[first], self.offsets[first + len(uids)]), width


class AgentTensors(Mapping[str, torch.Tensor]):
    """A read-only mapping ``agent id -> (batch, width)`` backed by one ``(batch, total)`` tensor.

    Args:
        data: the tensor holding every agent's columns.
        layout: which columns belong to which agent.
    """

    def __init__(self, data: torch.Tensor, layout: AgentLayout) -> None:
        if data.shape[-1] != layout.total:
            raise ValueError(f"tensor has {data.shape[-1]} columns, layout needs {layout.total}")
        self.data = data
        self.layout = layout

    def __getitem__(self, uid: str) -> torch.Tensor:
        return self.data[:, self.layout.columns(uid)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.layout.uids)

    def __len__(self) -> int:
        return len(self.layout.uids)

    def __repr__(self) -> str:
        return f"AgentTensors(agents={self.layout.uids}, data={tuple(self.data.shape)} {self.data.dtype})"


def stack_agents(tensors: Mapping[str, torch.Tensor], uids: Sequence[str]) -> torch.Tensor:
    """The tensors of ``uids`` as one ``(batch, len(uids), width)`` tensor.

    A view with no copy when ``tensors`` is an :class:`AgentTensors` whose ``uids`` are
    adjacent columns of equal width; otherwise one ``torch.stack``.
    """
    if isinstance(tensors, AgentTensors):
        columns, width = tensors.layout.block(uids)
        if columns is not None:
            data = tensors.data
            if columns.stop - columns.start != data.shape[-1]:
                data = data.narrow(-1, columns.start, columns.stop - columns.start)
            shape = data.shape[:-1] + (len(uids), width)
            return data.view(shape) if data.stride(-1) == 1 else data.reshape(shape)
    try:
        return torch.stack([tensors[uid] for uid in uids], dim=1)
    except KeyError as error:
        raise KeyError(f"missing agent in per-agent tensors: {error.args[0]}") from None


def unstack_agents(tensor: torch.Tensor, uids: Sequence[str]) -> Dict[str, torch.Tensor]:
    """Inverse of :func:`stack_agents`: a ``(batch, agents, ...)`` tensor to ``{uid: (batch, ...)}``."""
    return dict(zip(uids, tensor.unbind(dim=1)))


def with_own_actions(joint_actions: torch.Tensor, own_actions: torch.Tensor, offsets: Sequence[int]) -> torch.Tensor:
    """For each agent ``g`` of a group, the joint action with agent ``g``'s own part replaced.

    Args:
        joint_actions: ``(batch, total)`` every agent's action side by side.
        own_actions: ``(batch, agents, width)`` the group's agents' replacement actions.
        offsets: the first column of each of the group's agents in ``joint_actions``.

    Returns:
        ``(batch, agents, total)``: row ``g`` is ``joint_actions`` with columns
        ``offsets[g]:offsets[g] + width`` taken from ``own_actions[:, g]`` (gradients flow to
        ``own_actions``); the other agents' columns stay as they were. This is how MADDPG's
        actor loss evaluates ``Q_i(x, a_1, ..., μ_i(o_i), ..., a_N)`` for all agents of a group at once.
    """
    batch, agents, width = own_actions.shape
    if len(offsets) != agents:
        raise ValueError(f"{len(offsets)} offsets for {agents} agents")
    columns = torch.as_tensor(list(offsets), device=own_actions.device).unsqueeze(-1) \
        + torch.arange(width, device=own_actions.device)                                   # (agents, width)
    rows = torch.arange(agents, device=own_actions.device).unsqueeze(-1).expand(agents, width)
    replaced = joint_actions.unsqueeze(1).expand(batch, agents, joint_actions.shape[-1]).clone()
    replaced[:, rows, columns] = own_actions
    return replaced
