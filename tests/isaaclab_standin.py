"""A stand-in for an Isaac Lab multi-agent task, for the tests (Isaac Lab itself needs Isaac Sim).

:class:`DirectMARLEnv` follows Isaac Lab's documented ``DirectMARLEnv`` interface: its attributes
(``num_envs``, ``device``, ``possible_agents``, per-agent ``observation_spaces`` / ``action_spaces`` of one
copy, ``state_space`` from ``cfg.state_space`` with -1 / 0 / size meanings, ``max_episode_length``,
``episode_length_buf``), ``reset`` returning ``(observations, extras)``, ``step`` returning per-agent dicts of
``(N, obs)`` observations, ``(N,)`` rewards, ``(N,)`` bool terminated and time-outs and ``extras``, in Isaac
Lab's order (dones, then rewards, then the reset of the copies where all agents terminated or all timed out,
then the observations, so a reset copy returns its next episode's first observation), and ``final_obs`` in
``extras[agent]`` only when ``cfg.compute_final_obs`` is set (newer versions).

:class:`ReachTask` is a small task on it: two agents on a line, each pushed by its unbounded action (clipped
by the task to [-1, 1], as Isaac Lab tasks do), rewarded for being near its own target.
"""

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import gymnasium
import torch


@dataclass
class SimulationCfg:
    """The simulation settings the env reads."""

    dt: float = 1 / 120
    device: str = "cpu"


@dataclass
class DirectMARLEnvCfg:
    """The configuration fields of Isaac Lab's ``DirectMARLEnvCfg`` that the env reads."""

    possible_agents: List[str] = field(default_factory=lambda: ["first", "second"])
    observation_spaces: Dict[str, int] = field(default_factory=lambda: {"first": 3, "second": 3})
    action_spaces: Dict[str, int] = field(default_factory=lambda: {"first": 1, "second": 1})
    state_space: Union[int, gymnasium.Space] = -1
    episode_length_s: float = 20 * 2 / 120  # 20 steps of decimation 2 at dt 1/120
    decimation: int = 2
    num_envs: int = 8
    seed: Optional[int] = None
    compute_final_obs: bool = False
    is_finite_horizon: bool = False  # read by wrappers only: no time-out signal for the agent when True
    sim: SimulationCfg = field(default_factory=SimulationCfg)


def _box(size: int) -> gymnasium.spaces.Box:
    return gymnasium.spaces.Box(-math.inf, math.inf, shape=(size,))


class DirectMARLEnv(gymnasium.Env):
    """Isaac Lab's ``DirectMARLEnv`` base class, as documented; tasks fill in the ``_get_*`` methods."""

    def __init__(self, cfg: DirectMARLEnvCfg) -> None:
        self.cfg = cfg
        self.num_envs = cfg.num_envs
        self.device = cfg.sim.device  # Isaac Lab gives a string such as "cuda:0"
        self.possible_agents = list(cfg.possible_agents)
        self.agents = list(self.possible_agents)
        self.observation_spaces = {uid: _box(cfg.observation_spaces[uid]) for uid in self.possible_agents}
        self.action_spaces = {uid: _box(cfg.action_spaces[uid]) for uid in self.possible_agents}
        if isinstance(cfg.state_space, int) and cfg.state_space < 0:
            self.state_space = gymnasium.spaces.flatten_space(
                gymnasium.spaces.Tuple([self.observation_spaces[uid] for uid in self.possible_agents]))
        elif isinstance(cfg.state_space, int):
            self.state_space = _box(cfg.state_space)  # 0 gives a Box of size 0, as Isaac Lab does
        else:
            self.state_space = cfg.state_space
        self.step_dt = cfg.sim.dt * cfg.decimation
        self.max_episode_length = math.ceil(cfg.episode_length_s / self.step_dt)
        self.episode_length_buf = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        self.reset_buf = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        self.extras: Dict[str, Any] = {uid: {} for uid in self.possible_agents}
        self.generator = torch.Generator(device=self.device)
        self.obs_dict: Dict[str, torch.Tensor] = {}
        self.reset_calls = 0

    def reset(self, seed: Optional[int] = None, options: Optional[Dict] = None):
        """Reset every copy; ``(observations, extras)``."""
        if seed is not None:
            self.generator.manual_seed(seed)
        self.reset_calls += 1
        self._reset_idx(torch.arange(self.num_envs, device=self.device))
        self.obs_dict = self._get_observations()
        return self.obs_dict, self.extras

    def step(self, actions: Dict[str, torch.Tensor]):
        """One step of every copy, in Isaac Lab's order."""
        actions = {uid: action.to(self.device) for uid, action in actions.items()}
        self._pre_physics_step(actions)
        for _ in range(self.cfg.decimation):
            self._apply_action()
        self.episode_length_buf += 1
        terminated, time_outs = self._get_dones()
        rewards = self._get_rewards()
        self.reset_buf = (torch.stack(list(terminated.values())).all(dim=0)
                          | torch.stack(list(time_outs.values())).all(dim=0))
        if self.cfg.compute_final_obs:
            final = self._get_observations()
            for uid in self.possible_agents:
                self.extras[uid]["final_obs"] = final[uid].clone()
        reset_ids = self.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        if len(reset_ids) > 0:
            self._reset_idx(reset_ids)
        self.obs_dict = self._get_observations()
        return self.obs_dict, rewards, terminated, time_outs, self.extras

    def state(self) -> Optional[torch.Tensor]:
        """``None`` for ``state_space = 0``, the observations concatenated for -1, else ``_get_states()``."""
        if not self.cfg.state_space:
            return None
        if isinstance(self.cfg.state_space, int) and self.cfg.state_space < 0:
            return torch.cat([self.obs_dict[uid].reshape(self.num_envs, -1) for uid in self.possible_agents], dim=-1)
        return self._get_states()

    def render(self, recompute: bool = False):
        """No viewer in the stand-in."""
        return None

    def close(self) -> None:
        """Nothing to release."""

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        self.episode_length_buf[env_ids] = 0


class ReachTask(DirectMARLEnv):
    """Two agents on a line; agent ``i`` observes (its position, its target, the other's position), moves by
    0.1 x its action clipped to [-1, 1], and gets ``-|position - target|`` each step. A copy terminates
    when an agent leaves [-2, 2] (both agents' terminated are set), and times out after
    ``max_episode_length - 1`` steps, as Isaac Lab's tasks do."""

    def __init__(self, cfg: DirectMARLEnvCfg) -> None:
        super().__init__(cfg)
        self.position = torch.zeros(self.num_envs, 2, device=self.device)
        self.target = torch.zeros(self.num_envs, 2, device=self.device)
        self.actions = torch.zeros(self.num_envs, 2, device=self.device)

    def _pre_physics_step(self, actions: Dict[str, torch.Tensor]) -> None:
        self.actions = torch.cat([actions[uid] for uid in self.possible_agents], dim=1).clamp(-1.0, 1.0)

    def _apply_action(self) -> None:
        self.position += 0.05 * self.actions  # two substeps per step: 0.1 per step at full push

    def _get_observations(self) -> Dict[str, torch.Tensor]:
        first = torch.stack([self.position[:, 0], self.target[:, 0], self.position[:, 1]], dim=1)
        second = torch.stack([self.position[:, 1], self.target[:, 1], self.position[:, 0]], dim=1)
        return {"first": first, "second": second}

    def _get_states(self) -> torch.Tensor:
        return torch.cat([self.position, self.target], dim=1)

    def _get_rewards(self) -> Dict[str, torch.Tensor]:
        distance = (self.position - self.target).abs()
        return {"first": -distance[:, 0], "second": -distance[:, 1]}

    def _get_dones(self):
        out = (self.position.abs() > 2.0).any(dim=1)
        time_out = self.episode_length_buf >= self.max_episode_length - 1
        return ({uid: out.clone() for uid in self.possible_agents},
                {uid: time_out.clone() for uid in self.possible_agents})

    def _reset_idx(self, env_ids: torch.Tensor) -> None:
        super()._reset_idx(env_ids)
        count = len(env_ids)
        self.position[env_ids] = torch.rand(count, 2, generator=self.generator, device=self.device) * 2 - 1
        self.target[env_ids] = torch.rand(count, 2, generator=self.generator, device=self.device) * 2 - 1
