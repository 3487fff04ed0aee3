"""Isaac Lab multi-agent envs (``DirectMARLEnv``) as a :class:`MultiAgentEnv`, with every tensor left on the
simulation device.
"""

from typing import Any, Dict, Optional, Tuple

import gymnasium
import numpy as np
import torch

from marlparts.envs.batched import BatchedSimulatorEnv
from marlparts.utils.agent_tensors import AgentTensors
from marlparts.utils.spaces import flat_size

_MARL_ATTRIBUTES = ("possible_agents", "num_envs", "observation_spaces", "action_spaces", "state",
                    "max_episode_length", "device")


def is_isaaclab_marl_env(env: Any) -> bool:
    """True for an Isaac Lab ``DirectMARLEnv``, also inside gymnasium wrappers (``gymnasium.make`` adds some)."""
    unwrapped = getattr(env, "unwrapped", env)
    named = any(cls.__name__ == "DirectMARLEnv" for cls in type(unwrapped).__mro__)
    return named and all(hasattr(unwrapped, name) for name in _MARL_ATTRIBUTES)


class IsaacLabWrapper(BatchedSimulatorEnv):
    """An Isaac Lab ``DirectMARLEnv`` as a :class:`MultiAgentEnv`: its ``(num_envs, ...)`` tensors stay on the
    simulation device; nothing loops over copies.

    What the wrapper relies on (Isaac Lab's documented interface): ``step({agent: (N, act)})`` returns
    per-agent dicts of ``(N, obs)`` observations, ``(N,)`` rewards, ``(N,)`` terminated and ``(N,)`` time-outs,
    and ``extras``; a copy is reset inside ``step`` when all its agents terminated or all timed out, and the
    observation returned for it is the first of its next episode.

    - **Final observations.** Where the env keeps them (``compute_final_obs`` in newer Isaac Lab versions puts
      them in ``extras[agent]["final_obs"]``), they go to ``infos["final_observation"]`` and time-outs are
      bootstrapped from them. Where it does not, no final observation can be had once the copy was reset:
      ``infos`` then has no ``"final_observation"`` at a step where a copy ended, and the algorithms treat a
      time-out there as the end of the return (not bootstrapped), with a warning.
    - **Global state** (``cfg.state_space``): ``-1`` is every observation concatenated (the final state is then
      the final observations concatenated); a positive size or a space is the env's ``_get_states()``, whose
      final value Isaac Lab does not keep (time-outs are then not bootstrapped by a critic on the state);
      ``0`` means no state: :meth:`state` returns None and :attr:`state_space` raises, saying how to get one.
    - With ``cfg.is_finite_horizon`` (Isaac Lab: "no time-out signal is sent to the agent"), time-outs are
      reported as terminations: the return ends at the horizon, not bootstrapped.
    - A copy where only some agents are done goes on; ``infos["final_observation"]`` of such a copy is the
      observation just returned, so an agent that timed out alone is valued where it is.
    - Agents never leave: every agent is active at every step. ``infos["extras"]`` holds the env's extras
      (e.g. its ``"log"``).
    - Isaac Lab runs one simulation per process, so :meth:`make_evaluation_env` returns None: the trainer
      evaluates on these copies, ending the training episodes in progress.

    Args:
        env: the env (``gymnasium.make(task, cfg=env_cfg)``; its ``unwrapped`` ``DirectMARLEnv`` is used).
        check_finite: raise on a NaN or infinite observation or reward (one device sync per step).
    """

    def __init__(self, env: Any, *, check_finite: bool = True) -> None:
        if not is_isaaclab_marl_env(env):
            raise TypeError(f"expected an Isaac Lab DirectMARLEnv (with {', '.join(_MARL_ATTRIBUTES)}), "
                            f"got {type(env).__name__}")
        self.env = env.unwrapped if hasattr(env, "unwrapped") else env
        self._outer = env
        self.num_envs = int(self.env.num_envs)
        self.device = torch.device(self.env.device)
        self.possible_agents = list(self.env.possible_agents)
        self.check_finite = check_finite
        self._set_spaces(dict(self.env.observation_spaces), dict(self.env.action_spaces))
        self._state_kind = self._read_state_kind()
        self._finite_horizon = bool(getattr(getattr(self.env, "cfg", None), "is_finite_horizon", False))
        self._no_final_state = (torch.zeros(self.num_envs, flat_size(self.env.state_space), device=self.device)
                                if self._state_kind == "env" else None)
        self._observations: Optional[torch.Tensor] = None
        self._steps = 0

    def _read_state_kind(self) -> str:
        """``"observations"`` (cfg.state_space -1), ``"env"`` (a size or a space) or ``"none"`` (0)."""
        setting = getattr(getattr(self.env, "cfg", None), "state_space", None)
        if isinstance(setting, int) and not isinstance(setting, bool):
            return "observations" if setting < 0 else ("none" if setting == 0 else "env")
        space = getattr(self.env, "state_space", None)
        return "none" if space is None or flat_size(space) == 0 else "env"

    @property
    def state_space(self) -> gymnasium.Space:
        """Space of :meth:`state`; an error where the env has no state (``cfg.state_space = 0``)."""
        if self._state_kind == "none":
            raise ValueError("this Isaac Lab env has no global state (cfg.state_space = 0), which a centralised "
                             "critic (MAPPO) needs: set env_cfg.state_space = -1 (every observation concatenated) "
                             "or to the size of the env's _get_states(), or train with IPPO")
        if self._state_kind == "observations":
            return gymnasium.spaces.Box(-np.inf, np.inf, shape=(self.observation_layout.total,), dtype=np.float32)
        return self.env.state_space

    def reset(self, seed: Optional[int] = None) -> Tuple[AgentTensors, Dict[str, Any]]:
        """Reset every copy (seeded with ``seed`` where given) and return ``(observations, infos)``."""
        observations, extras = self._outer.reset(seed=seed)
        self._observations = self._flatten(observations)
        self._steps = 0
        self._check_finite(self._observations, torch.zeros(1, 1, device=self.device), 0)
        no_end = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        infos = self._infos(no_end, None, None)
        infos["extras"] = extras
        return AgentTensors(self._observations, self.observation_layout), infos

    def step(self, actions: Any) -> Tuple[AgentTensors, AgentTensors, AgentTensors, AgentTensors, Dict[str, Any]]:
        """Step every copy; see the class for what ``infos`` holds where copies ended."""
        if self._observations is None:
            raise RuntimeError("call reset() before step()")
        joint = self._joint_actions(actions)
        per_agent = dict(zip(self.possible_agents, self._per_agent_actions(joint)))
        observations, rewards, terminated, time_outs, extras = self._outer.step(per_agent)
        uids = self.possible_agents
        self._observations = self._flatten(observations)
        rewards = torch.stack([rewards[uid].reshape(self.num_envs) for uid in uids], dim=1).float()
        terminated = torch.stack([terminated[uid].reshape(self.num_envs) for uid in uids], dim=1).bool()
        time_outs = torch.stack([time_outs[uid].reshape(self.num_envs) for uid in uids], dim=1).bool()
        self._steps += 1
        self._check_finite(self._observations, rewards, self._steps)
        ended = terminated.all(dim=1) | time_outs.all(dim=1)  # Isaac Lab's own reset rule
        if self._finite_horizon:  # no time-out signal: the end of the horizon is the end of the return
            terminated, time_outs = terminated | time_outs, torch.zeros_like(time_outs)
        any_ended = bool(ended.any())
        final_observations = self._final_observations(extras, ended, any_ended)
        final_state = final_observations if self._state_kind == "observations" else None
        if self._state_kind == "env" and not any_ended:
            # no copy was reset: an agent's time-out in a copy that goes on is valued at the state it is in
            final_state = self.state() if bool(time_outs.any()) else self._no_final_state
        infos = self._infos(ended, final_observations, final_state)
        infos["extras"] = extras
        return (AgentTensors(self._observations, self.observation_layout), AgentTensors(rewards, self.agent_layout),
                AgentTensors(terminated, self.agent_layout), AgentTensors(time_outs, self.agent_layout), infos)

    def state(self) -> Optional[torch.Tensor]:
        """The global state ``(num_envs, state_size)``: the observations concatenated (``state_space = -1``),
        the env's ``state()`` (a custom state), or None (``state_space = 0``).
        """
        if self._observations is None:
            raise RuntimeError("call reset() before state()")
        if self._state_kind == "observations":
            return self._observations
        if self._state_kind == "none":
            return None
        return self.env.state().reshape(self.num_envs, -1).float()

    def placement_hint(self, device: str) -> str:
        """Isaac Lab simulates on the device of its configuration."""
        return f"run Isaac Lab's simulation there (parse_env_cfg(task, device={device!r}), or --device {device})"

    def render(self) -> Any:
        """What the env's ``render()`` returns (an RGB array with ``render_mode="rgb_array"``)."""
        return self._outer.render()

    def close(self) -> None:
        """Close the env (the simulation app is the script's to close)."""
        self._outer.close()

    def _final_observations(self, extras: Dict[str, Any], ended: torch.Tensor, any_ended: bool
                            ) -> Optional[torch.Tensor]:
        """What each agent's episode ended on: for the copies that were reset, their last observations (from
        ``extras[agent]["final_obs"]``); for the copies that go on (where an agent may have timed out alone),
        the observation just returned. None when copies were reset and the env keeps no final observations.
        """
        if not any_ended:
            return self._observations
        per_agent = [extras.get(uid, {}).get("final_obs") if isinstance(extras.get(uid), dict) else None
                     for uid in self.possible_agents]
        if any(obs is None for obs in per_agent):
            return None
        final = self._flat_observations(per_agent)
        return torch.where(ended.reshape(-1, 1), final, self._observations)

    def _flatten(self, observations: Dict[str, Any]) -> torch.Tensor:
        try:
            per_agent = [observations[uid] for uid in self.possible_agents]
        except KeyError as error:
            raise KeyError(f"the Isaac Lab env returned no observation for agent {error.args[0]!r}; "
                           f"possible agents: {self.possible_agents}") from None
        return self._flat_observations(per_agent)
