"""A batched multi-agent env whose step costs nearly nothing, to time the algorithm alone."""

from typing import Any, Dict, Optional, Tuple

import gymnasium
import numpy as np
import torch

from marlparts.envs.base import MultiAgentEnv
from marlparts.utils.agent_tensors import AgentLayout, AgentTensors


class SyntheticEnv(MultiAgentEnv):
    """``num_agents`` agents with ``obs_size`` random observations, ``Discrete(5)`` actions,
    random rewards and episodes truncated every ``episode_length`` steps. Observations come
    from a precomputed bank, so a step is a few tensor views."""

    def __init__(self, num_agents: int, *, num_envs: int = 16, obs_size: int = 18, episode_length: int = 25,
                 seed: int = 0, device: str = "cpu") -> None:
        generator = torch.Generator().manual_seed(seed)
        self.possible_agents = [f"agent_{i}" for i in range(num_agents)]
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.episode_length = episode_length
        self._obs_space = gymnasium.spaces.Box(-np.inf, np.inf, (obs_size,), np.float32)
        self._action_space = gymnasium.spaces.Discrete(5)
        self._layout = AgentLayout(self.possible_agents, [obs_size] * num_agents)
        self._unit = AgentLayout(self.possible_agents, [1] * num_agents)
        self._bank = torch.randn(64, num_envs, num_agents * obs_size, generator=generator).to(self.device)
        self._rewards = torch.randn(64, num_envs, num_agents, generator=generator).to(self.device)
        self._false = torch.zeros(num_envs, num_agents, dtype=torch.bool, device=self.device)
        self._true = torch.ones(num_envs, num_agents, dtype=torch.bool, device=self.device)
        self._t = 0

    @property
    def observation_spaces(self) -> Dict[str, gymnasium.Space]:
        """Same Box for every agent."""
        return {uid: self._obs_space for uid in self.possible_agents}

    @property
    def action_spaces(self) -> Dict[str, gymnasium.Space]:
        """Same Discrete(5) for every agent."""
        return {uid: self._action_space for uid in self.possible_agents}

    @property
    def state_space(self) -> gymnasium.Space:
        """All observations concatenated."""
        return gymnasium.spaces.Box(-np.inf, np.inf, (self._layout.total,), np.float32)

    def _infos(self, ended: bool, final: torch.Tensor) -> Dict[str, Any]:
        return {"active": AgentTensors(self._true[:, :], self._unit),
                "episode_end": torch.full((self.num_envs, 1), ended, device=self.device),
                "final_observation": AgentTensors(final, self._layout), "final_state": final}

    def reset(self, seed: Optional[int] = None) -> Tuple[AgentTensors, Dict[str, Any]]:
        """Start at the first bank entry (the steps are fixed: ``seed`` changes nothing)."""
        self._t = 0
        return AgentTensors(self._bank[0], self._layout), self._infos(False, self._bank[0])

    def step(self, actions: Any) -> Tuple[Any, Any, Any, Any, Dict[str, Any]]:
        """Next bank entry; truncated every ``episode_length`` steps."""
        self._t += 1
        ended = self._t % self.episode_length == 0
        obs = self._bank[self._t % 64]
        truncated = self._true if ended else self._false
        return (AgentTensors(obs, self._layout), AgentTensors(self._rewards[self._t % 64], self._unit),
                AgentTensors(self._false, self._unit), AgentTensors(truncated, self._unit),
                self._infos(ended, obs))

    def state(self) -> torch.Tensor:
        """All observations concatenated."""
        return self._bank[self._t % 64]
