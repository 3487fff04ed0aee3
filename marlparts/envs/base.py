"""The interface every wrapped environment offers to algorithms and trainers."""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium
import torch


class MultiAgentEnv:
    """A batch of ``num_envs`` copies of a multi-agent environment, speaking torch tensors.

    Every possible agent is always present in the returned mappings:

    - observations: ``{uid: (num_envs, obs_size)}`` float32, spaces flattened;
    - rewards, terminated, truncated: ``{uid: (num_envs, 1)}``;
    - ``infos`` holds ``"active"`` (``{uid: (num_envs, 1)}`` bool: the agent acts at the
      next step), ``"episode_end"`` (``(num_envs, 1)`` bool: the copy ended and was reset),
      ``"final_observation"`` (``{uid: (num_envs, obs_size)}``: the last observation of an
      agent whose episode ended at this step; read it only there: elsewhere it holds zeros or, for batched
      simulators, the observation just returned), ``"final_state"``,
      ``"action_mask"`` (``{uid: (num_envs, n)}`` bool) where the environment has masks, and
      ``"failed"`` (``(num_envs, 1)`` bool) where copies can fail and be rebuilt: the copy's env
      raised, and the episode it was playing is to be dropped.

    Copies reset themselves when their episode ends, so the observation returned for an
    ended copy is already the first one of its next episode. Where a simulator cannot give the final
    observations (Isaac Lab without ``final_obs``), ``infos`` has no ``"final_observation"`` at a step where a
    copy ended, and algorithms do not bootstrap time limits there.

    Attributes:
        possible_agents: every agent id, in column order.
        num_envs: number of copies.
        device: where the returned tensors live.
        seed: the run's seed (None: unseeded).
        copy_seeds: the seed each copy was last reset with (None entries where unseeded).
        turn_based: the agents take turns (one is active at each step), as in board games; evaluation
            then reports each seat's wins, draws and losses.
    """

    possible_agents: List[str]
    num_envs: int
    device: torch.device
    seed: Optional[int] = None
    copy_seeds: List[Optional[int]] = []
    turn_based: bool = False

    @property
    def num_agents(self) -> int:
        """Number of possible agents."""
        return len(self.possible_agents)

    def observation_space(self, uid: str) -> gymnasium.Space:
        """Observation space of agent ``uid`` (before flattening)."""
        return self._lookup(self.observation_spaces, uid, "observation space")

    def action_space(self, uid: str) -> gymnasium.Space:
        """Action space of agent ``uid``."""
        return self._lookup(self.action_spaces, uid, "action space")

    @property
    def observation_spaces(self) -> Dict[str, gymnasium.Space]:
        """Observation space of every possible agent."""
        raise NotImplementedError

    @property
    def action_spaces(self) -> Dict[str, gymnasium.Space]:
        """Action space of every possible agent."""
        raise NotImplementedError

    @property
    def state_space(self) -> gymnasium.Space:
        """Space of the global state returned by :meth:`state`."""
        raise NotImplementedError

    @property
    def state_spaces(self) -> Dict[str, gymnasium.Space]:
        """The global state space, once per agent id (the input space of centralised critics)."""
        return {uid: self.state_space for uid in self.possible_agents}

    def reset(self, seed: Optional[int] = None) -> Tuple[Mapping[str, torch.Tensor], Dict[str, Any]]:
        """Reset every copy; returns ``(observations, infos)``. With ``seed``, the copies are seeded anew
        from it (the same seed gives the same episodes); without, the first reset uses the env's own seed.
        """
        raise NotImplementedError

    def make_evaluation_env(self, num_envs: int) -> Optional["MultiAgentEnv"]:
        """Separate copies of the same env for evaluation, seeded apart from these; None where none can
        be made (the trainer then evaluates on this env and cuts the training episodes).
        """
        return None

    def step(self, actions: Mapping[str, torch.Tensor]) -> Tuple[Any, Any, Any, Any, Dict[str, Any]]:
        """Step every copy; returns ``(observations, rewards, terminated, truncated, infos)``."""
        raise NotImplementedError

    def state(self) -> torch.Tensor:
        """Global state of every copy, ``(num_envs, state_size)``."""
        raise NotImplementedError

    def placement_hint(self, device: str) -> str:
        """How to make this env return tensors on ``device`` (for error messages)."""
        return f"wrap the env with device={device!r} (e.g. wrap_env(..., device={device!r}))"

    def render(self) -> Any:
        """Render the first copy (as the wrapped environment's ``render_mode`` says)."""
        raise NotImplementedError

    def start_recording(self) -> None:
        """Start keeping copy 0's frames (one now, then one after every step); for videos."""
        raise ValueError(f"{type(self).__name__} cannot record videos")

    def stop_recording(self) -> Any:
        """Stop recording and return the frames ``(time, height, width, 3)``."""
        raise ValueError(f"{type(self).__name__} cannot record videos")

    def close(self) -> None:
        """Release the copies and any worker processes."""

    def _lookup(self, spaces: Mapping[str, Any], uid: str, what: str) -> Any:
        try:
            return spaces[uid]
        except KeyError:
            raise KeyError(f"no {what} for unknown agent id {uid!r}; possible agents: {self.possible_agents}") from None

    def __enter__(self) -> "MultiAgentEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
