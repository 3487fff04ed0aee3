"""Callbacks: users' own logic at the points of a run, without subclassing the trainer or an algorithm."""

from typing import Any, Dict, Optional

import torch


class Callback:
    """Override the methods you need; each is called with what happened.

    Register callbacks with ``SequentialTrainer(..., callbacks=[...])``; the trainer hands them to
    its algorithms too, for ``on_update`` and ``on_checkpoint``. ``trainer.stop()`` ends
    ``train()`` after the current step (early stopping).
    """

    def on_step(self, trainer: Any, timestep: int) -> None:
        """After each training step (``timestep`` counts vectorized steps, from 0)."""

    def on_episode_end(self, trainer: Any, returns: torch.Tensor, lengths: torch.Tensor) -> None:
        """Training episodes ended: ``returns`` ``(episodes, agents)`` in the env's agent order, ``lengths`` ``(episodes,)``."""

    def on_episode_infos(self, trainer: Any, infos: Dict[str, Any]) -> None:
        """Training episodes ended, in an env made with ``info_keys``: ``infos[key]`` is an
        :class:`~marlparts.trainers.base.EpisodeInfo` of ``(episodes, agents)`` tensors, ``total`` (the entry
        summed over each episode's steps) and ``last`` (its value at each agent's last step of the episode). Log
        figures of your own with ``trainer.log(name, value)``.
        """

    def on_update(self, agent: Any, metrics: Dict[str, float]) -> None:
        """An algorithm finished an update; ``metrics`` holds its losses (means over the update)."""

    def on_evaluation(self, trainer: Any, result: Dict[str, Any]) -> None:
        """An evaluation finished; ``result`` is what ``trainer.eval()`` returns."""

    def on_checkpoint(self, agent: Any, path: str) -> None:
        """An algorithm wrote the checkpoint ``path``."""


class EarlyStopping(Callback):
    """Stop training once an evaluation's mean return reaches ``threshold``.

    Args:
        threshold: the mean return to reach.
        team: the team (algorithm) whose return counts, by its name in ``result["teams"]``;
            None for a single algorithm.
    """

    def __init__(self, threshold: float, team: Optional[str] = None) -> None:
        self.threshold = float(threshold)
        self.team = team
        self.stopped_at: Optional[int] = None

    def on_evaluation(self, trainer: Any, result: Dict[str, Any]) -> None:
        """Stop the trainer when the return reaches the threshold."""
        value = result["mean_return"] if self.team is None else result["teams"][self.team]["mean_return"]
        if value >= self.threshold:
            self.stopped_at = result["timestep"]
            trainer.stop()
