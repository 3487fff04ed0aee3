"""What an algorithm writes about itself: metrics, training episodes, evaluations (and the best checkpoint)."""

import os
import warnings
from typing import Any, Mapping

import torch

from marlparts.utils.distributed import is_main_process


class TrackingMixin:
    """Metrics through the algorithm's tracker (TensorBoard, CSV, Weights & Biases), its callbacks told
    of every update, and ``best_agent.pt`` kept for the best evaluation. Part of
    :class:`~marlparts.agents.MultiAgent`, which sets ``tracker``, ``callbacks``, ``timestep``,
    ``best_return`` and ``experiment_dir``.
    """

    def track_data(self, tag: str, value: float) -> None:
        """Record metric ``tag``; the means are written every ``write_interval`` timesteps."""
        if self.tracker is not None:
            self.tracker.add(tag, value)

    def track_episode_returns(self, returns: torch.Tensor) -> None:
        """Record finished training episodes: ``returns`` is ``(episodes, agents)`` in ``possible_agents`` order."""
        if self.tracker is None:
            return
        returns = returns.detach().cpu()
        self.tracker.add("Episode / return (mean over agents)", returns.mean().item())
        for uid, value in zip(self.possible_agents, returns.mean(dim=0).tolist()):
            self.tracker.add(f"Episode / return / {uid}", value)

    def report_update(self, metrics: Mapping[str, float]) -> None:
        """Track an update's metrics (``{tag: value}``) and tell the callbacks."""
        for tag, value in metrics.items():
            self.track_data(tag, value)
        for callback in self.callbacks:
            callback.on_update(self, dict(metrics))

    def record_evaluation(self, result: Mapping[str, Any]) -> None:
        """Log an evaluation of this algorithm's agents and keep ``best_agent.pt`` for its best mean return (none
        where it played every seat of a zero-sum game, whose team return is 0 by construction: a warning says so;
        that holds until an evaluation's team return is not 0, as against fixed players after a reload).

        ``result`` holds ``mean_return`` (mean over episodes of this algorithm's team return),
        ``returns`` (agent id to its mean) and ``mean_length``, and ``sampled_mean_return`` where the
        evaluation also ran sampled actions beside the greedy ones. The step is kept as ``evaluated_at``.
        """
        self.evaluated_at = self.timestep
        if self.tracker is not None:
            values = {"Evaluation / return (team)": result["mean_return"],
                      "Evaluation / episode length": result["mean_length"]}
            if "sampled_mean_return" in result:
                values["Evaluation / sampled-action return (team)"] = result["sampled_mean_return"]
            values.update({f"Evaluation / return / {uid}": value for uid, value in result["returns"].items()})
            self.tracker.write_now(values, self.timestep)
        if result.get("zero_sum_self_play") and not self.zero_sum_self_play:
            self.zero_sum_self_play = True  # for good: a later evaluation of draws only cannot show it again
            warnings.warn(f"{type(self).__name__} plays every seat of a game whose returns sum to zero, so its team "
                          f"return is 0 in every evaluation and tells no policy from another: no best_agent.pt is "
                          f"kept (one that an earlier evaluation wrote holds no best agent either). Evaluate it "
                          f"against fixed players, e.g. trainer.eval(opponents={{seat: 'random'}}), for a measure of "
                          f"its play", stacklevel=2)
        elif self.zero_sum_self_play and result["mean_return"] != 0:
            self.zero_sum_self_play = False  # a team return that is not 0: the team no longer plays every seat
        if self.zero_sum_self_play:
            return
        if result["mean_return"] > self.best_return and self.experiment_dir is not None and is_main_process():
            self.best_return = float(result["mean_return"])
            self.save_checkpoint(os.path.join(self.experiment_dir, "checkpoints", "best_agent.pt"))

    def close(self) -> None:
        """Flush and close the tracker."""
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
