"""PettingZoo Parallel environments (and the MPE tasks of ``mpe2``) as a batched :class:`MultiAgentEnv`."""

from typing import Any, Callable, Dict, Mapping, Optional, Tuple, Union

import gymnasium
import numpy as np
import torch

from marlparts.envs.base import MultiAgentEnv
from marlparts.envs.copies import InProcessCopies, WorkerCopies
from marlparts.envs.layout import EnvLayout
from marlparts.utils.agent_tensors import AgentTensors


class PettingZooParallelWrapper(MultiAgentEnv):
    """``num_envs`` copies of a PettingZoo ``ParallelEnv`` as batched torch tensors.

    Args:
        env: a factory that builds one copy (``lambda: simple_spread_v3.parallel_env()``),
            or an env instance when ``num_envs`` is 1 and ``workers`` is 0.
        num_envs: number of copies stepped together.
        workers: 0 to step the copies in this process; ``k > 0`` to split them over ``k``
            worker processes that step in parallel and write into shared memory.
        seed: copy ``i`` is reset with ``seed + i`` on the first :meth:`reset`.
        device: where the returned tensors live.
        state_source: ``"auto"`` (``env.state()`` where the env has it, else all observations
            concatenated in ``possible_agents`` order), ``"env"`` or ``"observations"``.
        check_finite: raise on a NaN or infinite observation or reward, naming agent, copy and step.
    """

    def __init__(self, env: Union[Callable[[], Any], Any], *, num_envs: int = 1, workers: int = 0,
                 seed: Optional[int] = None, device: Union[str, torch.device] = "cpu",
                 state_source: str = "auto", check_finite: bool = True) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be an int >= 0, got {workers!r}")
        is_factory = callable(env) and not hasattr(env, "possible_agents")
        if not is_factory and (num_envs > 1 or workers > 0):
            raise ValueError("pass a factory that builds one copy (e.g. `lambda: simple_spread_v3.parallel_env()`) "
                             "to make several copies or to run copies in worker processes")
        probe = env() if is_factory else env
        if not hasattr(probe, "possible_agents") or not hasattr(probe, "step"):
            raise TypeError(f"expected a PettingZoo ParallelEnv, got {type(probe).__name__}")
        if hasattr(probe, "agent_selection"):
            raise TypeError("this wrapper takes PettingZoo Parallel envs; convert an AEC env whose agents act "
                            "simultaneously with pettingzoo.utils.conversions.aec_to_parallel")
        _, reset_infos = probe.reset(seed=seed)
        self.layout = EnvLayout(probe, reset_infos, state_source=state_source)
        self.possible_agents = list(self.layout.possible_agents)
        self._agent_ids = frozenset(self.possible_agents)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.seed = seed
        self.check_finite = check_finite
        self._steps = 0
        if workers > 0:
            probe.close()
            self.copies = WorkerCopies(env, self.layout, num_envs, workers)
        else:
            envs = [probe] + [env() for _ in range(num_envs - 1)]
            self.copies = InProcessCopies(envs, self.layout, num_envs)
        self._buffers = self.copies.buffers
        self._reset_done = False
        self._closed = False

    @property
    def observation_spaces(self) -> Dict[str, gymnasium.Space]:
        """Observation space of every agent (the ``"observation"`` entry for masked dict observations)."""
        return dict(self.layout.observation_spaces)

    @property
    def action_spaces(self) -> Dict[str, gymnasium.Space]:
        """Action space of every agent."""
        return dict(self.layout.action_spaces)

    @property
    def state_space(self) -> gymnasium.Space:
        """Space of :meth:`state`: the env's own state space, or the concatenated observations."""
        return self.layout.state_space

    def reset(self) -> Tuple[AgentTensors, Dict[str, Any]]:
        """Reset every copy (seeded on the first call) and return ``(observations, infos)``."""
        self.copies.reset(self.seed if not self._reset_done else None)
        self._reset_done = True
        self._steps = 0
        self._check_finite(("obs",))
        observations, infos = self._observations_and_infos()
        return observations, infos

    def step(self, actions: Mapping[str, torch.Tensor]) -> Tuple[Any, Any, Any, Any, Dict[str, Any]]:
        """Apply one action per agent per copy; see :class:`MultiAgentEnv` for what comes back."""
        if not self._reset_done:
            raise RuntimeError("call reset() before step()")
        self._write_actions(actions)
        self.copies.step()
        self._steps += 1
        self._check_finite(("obs", "reward", "final_obs"))
        b = self._buffers
        observations, infos = self._observations_and_infos()
        rewards = AgentTensors(self._tensor(b["reward"]), self.layout.agents)
        terminated = AgentTensors(self._tensor(b["terminated"]), self.layout.agents)
        truncated = AgentTensors(self._tensor(b["truncated"]), self.layout.agents)
        return observations, rewards, terminated, truncated, infos

    def state(self) -> torch.Tensor:
        """Global state of every copy, ``(num_envs, state_size)``."""
        return self._tensor(self._buffers["state" if self.layout.state_from_env else "obs"])

    def render(self) -> Any:
        """Render copy 0 as its ``render_mode`` says (e.g. an RGB array for ``"rgb_array"``)."""
        return self.copies.render()

    def close(self) -> None:
        """Close every copy and stop the workers."""
        if not self._closed:
            self._closed = True
            self.copies.close()

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array.copy()).to(self.device)

    def _observations_and_infos(self) -> Tuple[AgentTensors, Dict[str, Any]]:
        b, layout = self._buffers, self.layout
        final_obs = b["final_obs"]
        infos: Dict[str, Any] = {
            "active": AgentTensors(self._tensor(b["active"]), layout.agents),
            "episode_end": self._tensor(b["episode_end"]),
            "final_observation": AgentTensors(self._tensor(final_obs), layout.observations),
        }
        infos["final_state"] = self._tensor(b["final_state"]) if layout.state_from_env else infos["final_observation"].data
        if layout.has_masks:
            infos["action_mask"] = AgentTensors(self._tensor(b["mask"]), layout.masks)
        return AgentTensors(self._tensor(b["obs"]), layout.observations), infos

    def _write_actions(self, actions: Mapping[str, torch.Tensor]) -> None:
        if not isinstance(actions, Mapping):
            raise TypeError(f"step() takes a mapping agent id -> action tensor, got {type(actions).__name__}")
        unknown = [uid for uid in actions if uid not in self._agent_ids]
        if unknown:
            raise KeyError(f"actions given for unknown agent ids {unknown}; possible agents: {self.possible_agents}")
        buffer, layout = self._buffers["action"], self.layout.actions
        for uid in self.possible_agents:
            if uid not in actions:
                raise KeyError(f"no action for agent {uid!r}: step() needs one action tensor per possible agent")
            action = actions[uid]
            expected = (self.num_envs, layout.widths[layout.index(uid)])
            if tuple(action.shape) != expected:
                raise ValueError(f"action for agent {uid!r} has shape {tuple(action.shape)}, expected {expected} "
                                 f"for action space {self.layout.action_spaces[uid]}")
            buffer[:, layout.columns(uid)] = action.detach().cpu().numpy()

    def _check_finite(self, names: Tuple[str, ...]) -> None:
        if not self.check_finite:
            return
        for name in names:
            array = self._buffers[name]
            if np.isfinite(array).all():
                continue
            row, column = (int(i[0]) for i in np.nonzero(~np.isfinite(array)))
            if name == "reward":
                uid = self.possible_agents[column]
            else:
                layout = self.layout.observations
                uid = next(u for u in self.possible_agents if layout.columns(u).start <= column < layout.columns(u).stop)
            what = {"obs": "observation", "final_obs": "final observation", "reward": "reward"}[name]
            raise ValueError(f"non-finite {what} ({array[row, column]}) for agent {uid!r} in env copy {row} "
                             f"at step {self._steps} after reset")
