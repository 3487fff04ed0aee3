"""Hidden states of recurrent models during collection: kept per group and role, reset row by row where what a
row belongs to starts afresh (an episode of its env copy, or of its agent), and held where its agent waits.
"""

from typing import Any, Mapping, Optional, Tuple

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.utils.agent_tensors import stack_agents


def episode_starts(infos: Optional[Mapping[str, Any]], group: AgentGroup, batch: int,
                   device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(agent_starts (batch, group), copy_starts (batch,), waiting (batch, group))`` bool at this step: where an
    agent's hidden state starts afresh because its copy was reset, where an env copy's episode starts (for rows
    that belong to the copy, not to one agent), and which agents are inactive at this step (waiting for their
    turn, or gone): their hidden state is held, neither advanced on this step's observation nor reset.
    """
    infos = infos or {}
    episode_end = infos.get("episode_end")
    copy_starts = (episode_end.reshape(batch).bool().to(device) if episode_end is not None
                   else torch.zeros(batch, dtype=torch.bool, device=device))
    agent_starts = copy_starts.unsqueeze(1).expand(batch, group.size)
    active = infos.get("active")
    waiting = (~stack_agents(active, group.uids).reshape(batch, group.size).bool().to(device) if active is not None
               else torch.zeros(batch, group.size, dtype=torch.bool, device=device))
    return agent_starts, copy_starts, waiting


def reset_rows(hidden: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """``hidden`` ``(batch * rows, size)`` with the rows that start afresh zeroed; ``starts`` is ``(batch, rows)``."""
    if hidden.shape[0] != starts.numel():
        raise ValueError(f"hidden states of {hidden.shape[0]} rows for {tuple(starts.shape)} (env copies, rows) starts")
    return torch.where(starts.reshape(-1, 1), torch.zeros((), dtype=hidden.dtype, device=hidden.device), hidden)


def hold_rows(returned: torch.Tensor, read: torch.Tensor, held: torch.Tensor) -> torch.Tensor:
    """The hidden state after a step: ``returned`` by the model, with the ``held`` rows (``(batch, rows)``) kept at
    the state they ``read`` (a row whose agent waits for its turn keeps its state for that turn).
    """
    if returned.shape[0] != held.numel():
        raise ValueError(f"hidden states of {returned.shape[0]} rows for {tuple(held.shape)} (env copies, rows) held rows")
    return torch.where(held.reshape(-1, 1), read, returned)


class HiddenStates:
    """The hidden state of one recurrent model of one group, for training and for evaluation apart.

    :meth:`take` hands the state to the model for a step (zeros the first time, or when the
    number of rows changes, with the rows that start afresh zeroed); :meth:`keep` stores the
    state the model returned. :meth:`clear` forgets it (the next step starts afresh).
    """

    def __init__(self, hidden_size: int) -> None:
        self.hidden_size = int(hidden_size)
        self.states = {True: None, False: None}  # training -> hidden

    def take(self, starts: torch.Tensor, training: bool) -> torch.Tensor:
        """The hidden state ``(batch * rows, hidden_size)`` for this step; ``starts`` ``(batch, rows)`` says which
        rows start afresh.
        """
        hidden = self.states[training]
        if hidden is None or hidden.shape[0] != starts.numel():
            return torch.zeros(starts.numel(), self.hidden_size, device=starts.device)
        return reset_rows(hidden, starts)

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
