"""What a PettingZoo environment looks like once flattened: agents, spaces, column layouts."""

from typing import Any, Callable, Dict, Optional, Sequence

import gymnasium
import numpy as np

from marlparts.utils.agent_tensors import AgentLayout
from marlparts.utils.spaces import action_size, flat_size, from_zero, integer_start


def _mask_size(space: gymnasium.Space) -> int:
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    raise TypeError(f"action masks need a Discrete or MultiDiscrete action space, got {space!r}")


class EnvLayout:
    """Spaces and column layouts of one kind of PettingZoo environment, read off a probe copy.

    Observations given as ``{"observation": ..., "action_mask": ...}`` dicts (the PettingZoo
    convention) are split: the observation space becomes the ``"observation"`` entry and the
    mask travels separately. Masks given in the per-agent ``infos`` are found as well.

    Args:
        env: a reset PettingZoo ``ParallelEnv`` copy.
        reset_infos: the infos its ``reset`` returned.
        state_source: ``"env"`` to use ``env.state()``, ``"observations"`` for all agents'
            observations concatenated, ``"auto"`` for the first when the env has one.
        info_keys: numeric entries of the agents' infos carried at every step (``infos["env_info"]``).
    """

    def __init__(self, env: Any, reset_infos: Dict[str, Any], *, state_source: str = "auto",
                 info_keys: Sequence[str] = ()) -> None:
        if isinstance(info_keys, str) or not all(isinstance(key, str) for key in info_keys):
            raise TypeError(f"info_keys must be a sequence of str (the names of entries of the agents' infos), "
                            f"got {info_keys!r}")
        self.info_keys = tuple(info_keys)
        self.possible_agents = list(env.possible_agents)
        self.raw_observation_spaces = {uid: env.observation_space(uid) for uid in self.possible_agents}
        self.env_action_spaces = {uid: env.action_space(uid) for uid in self.possible_agents}
        # integer actions are indexes from 0 outside the env; the copies add each space's start
        self.action_spaces = {uid: from_zero(space) for uid, space in self.env_action_spaces.items()}
        self.action_starts = {uid: integer_start(space) for uid, space in self.env_action_spaces.items()}
        self.observation_spaces: Dict[str, gymnasium.Space] = {}
        self.mask_in_observation = False
        for uid, space in self.raw_observation_spaces.items():
            if isinstance(space, gymnasium.spaces.Dict) and "action_mask" in space.spaces and "observation" in space.spaces:
                self.mask_in_observation = True
                self.observation_spaces[uid] = space["observation"]
            else:
                self.observation_spaces[uid] = space
        reset_infos = reset_infos or {}
        self.mask_in_infos = any(isinstance(reset_infos.get(uid), dict) and "action_mask" in reset_infos[uid]
                                 for uid in self.possible_agents)
        self.has_masks = self.mask_in_observation or self.mask_in_infos

        uids = self.possible_agents
        self.observations = AgentLayout(uids, [flat_size(self.observation_spaces[u]) for u in uids])
        self.actions = AgentLayout(uids, [action_size(self.action_spaces[u]) for u in uids])
        self.agents = AgentLayout(uids, [1] * len(uids))
        self.masks = AgentLayout(uids, [_mask_size(self.action_spaces[u]) for u in uids]) if self.has_masks else None

        self.state_from_env = self._resolve_state_source(env, state_source)
        if self.state_from_env:
            space = getattr(env, "state_space", None)
            if space is None:
                space = gymnasium.spaces.Box(-np.inf, np.inf, shape=np.asarray(env.state()).shape, dtype=np.float32)
            self.state_space = space
        else:
            self.state_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(self.observations.total,), dtype=np.float32)
        self.state_size = flat_size(self.state_space)

    @staticmethod
    def _resolve_state_source(env: Any, state_source: str) -> bool:
        if state_source not in ("auto", "env", "observations"):
            raise ValueError(f"state_source must be 'auto', 'env' or 'observations', got {state_source!r}")
        if state_source == "observations":
            return False
        state_fn: Optional[Callable[[], Any]] = getattr(env, "state", None)
        works = False
        if callable(state_fn):
            try:
                state_fn()
                works = True
            except (NotImplementedError, AttributeError):
                works = False
        if state_source == "env" and not works:
            raise ValueError("state_source='env' but the environment has no working state() method")
        return works
