"""Hidden states of recurrent models during collection: kept per group and role, reset where an episode
starts or an agent is inactive, and handed to the model whatever rows it reads (per agent or per env copy).
"""

from typing import Any, Mapping, Optional

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.utils.agent_tensors import stack_agents


def episode_starts(infos: Optional[Mapping[str, Any]], group: AgentGroup, batch: int,
                   device: torch.device) -> torch.Tensor:
    """``(batch, group)`` bool: where the hidden state starts afresh at this step (the copy was reset,
    or the agent is inactive, so its hidden state stays at zero until it acts again).
    """
    infos = infos or {}
    starts = torch.zeros(batch, group.size, dtype=torch.bool, device=device)
    episode_end = infos.get("episode_end")
    if episode_end is not None:
        starts |= episode_end.reshape(batch, 1).bool().to(device)
    active = infos.get("active")
    if active is not None:
        starts |= ~stack_agents(active, group.uids).reshape(batch, group.size).bool().to(device)
    return starts


def reset_rows(hidden: torch.Tensor, starts: torch.Tensor, copy_starts: torch.Tensor) -> torch.Tensor:
    """Zero the rows of ``hidden`` that start afresh: rows per agent (``batch × group`` rows) follow
    ``starts`` ``(batch, group)``; rows per env copy (``batch`` rows) follow ``copy_starts`` ``(batch,)``.
    """
    rows = hidden.shape[0]
    if rows == starts.numel():
        mask = starts.reshape(rows, 1)
    elif rows == copy_starts.numel():
        mask = copy_starts.reshape(rows, 1)
    else:
        raise ValueError(f"a recurrent model read {rows} rows for a batch of {starts.shape[0]} env copies of "
                         f"{starts.shape[1]} agents: recurrence needs one row per agent or one per env copy")
    return torch.where(mask, torch.zeros((), dtype=hidden.dtype, device=hidden.device), hidden)


class HiddenStates:
    """The hidden state of one recurrent model of one group, for training and for evaluation apart.

    :meth:`take` hands the state to the model for a step (zeros the first time, or when the
    number of rows changes, with the rows that start afresh zeroed); :meth:`keep` stores the
    state the model returned. :meth:`clear` forgets it (the next step starts afresh).
    """

    def __init__(self, hidden_size: int) -> None:
        self.hidden_size = int(hidden_size)
        self.states = {True: None, False: None}  # training -> hidden

    def take(self, rows: int, training: bool, starts: torch.Tensor, copy_starts: torch.Tensor) -> torch.Tensor:
        """The hidden state ``(rows, hidden_size)`` for this step."""
        hidden = self.states[training]
        if hidden is None or hidden.shape[0] != rows:
            return torch.zeros(rows, self.hidden_size, device=starts.device)
        return reset_rows(hidden, starts, copy_starts)

    def keep(self, hidden: torch.Tensor, training: bool) -> None:
        """Store the hidden state a step returned."""
        if hidden.shape[-1] != self.hidden_size:
            raise ValueError(f"the model returned hidden states of size {hidden.shape[-1]}, but its hidden_size is "
                             f"{self.hidden_size}")
        self.states[training] = hidden.detach()

    def clear(self, training: Optional[bool] = None) -> None:
        """Forget the hidden state (of one mode, or of both)."""
        for mode in (True, False) if training is None else (training,):
            self.states[mode] = None
