"""PettingZoo Parallel environments (and the MPE tasks of ``mpe2``) as a batched :class:`MultiAgentEnv`."""

import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium
import numpy as np
import torch
from pettingzoo.utils.conversions import aec_to_parallel

from marlparts.envs.base import MultiAgentEnv
from marlparts.envs.copies import CopyFailure, EnvCopyError, InProcessCopies
from marlparts.envs.gymnasium_multiagent import GymnasiumMultiAgentEnv, GymnasiumMultiAgentFactory, is_gymnasium_multi_agent
from marlparts.envs.layout import EnvLayout
from marlparts.envs.turns import ParallelFactory, TurnBasedFactory, TurnBasedParallelEnv, is_aec_env, is_parallelizable
from marlparts.envs.workers import WorkerCopies
from marlparts.utils.agent_tensors import AgentTensors
from marlparts.utils.distributed import rank_and_world_size
from marlparts.utils.seeding import EVALUATION_STREAM, REBUILD_STREAM, TRAINING_STREAM, copy_seeds, derived_seed
from marlparts.utils.spaces import action_bounds, is_discrete

SUPPORTED_KINDS = ("a PettingZoo ParallelEnv or AECEnv (an instance, or a factory that builds one copy), "
                   "a Gymnasium multi-agent env with Tuple observation and action spaces (LBF, RWARE), "
                   "a VMAS env (or a factory taking num_envs), an Isaac Lab DirectMARLEnv")


class PettingZooParallelWrapper(MultiAgentEnv):
    """``num_envs`` copies of a PettingZoo ``ParallelEnv`` or ``AECEnv`` as batched torch tensors.

    An AEC env whose agents take turns (``tictactoe_v3.env()``) is stepped one move per step: only the
    agent whose turn it is is active (``infos["active"]``); the actions given for the other agents are
    ignored. An AEC env that PettingZoo marks parallelizable (all agents act in each cycle, as MPE's
    ``.env()``) is stepped as the Parallel env ``aec_to_parallel`` makes of it.
    Every agent's observation and reward come back at every step (see
    :class:`~marlparts.envs.turns.TurnBasedParallelEnv`), and ``turn_based`` is True.

    A Gymnasium multi-agent env (tuple spaces, a list of rewards, one ``done``: LBF, RWARE) is stepped
    through :class:`~marlparts.envs.gymnasium_multiagent.GymnasiumMultiAgentEnv`, its agents named
    ``agent_0``, ``agent_1``, ...; build that adapter in the factory yourself to set its options.

    Integer actions are indexes from 0: an env's ``Discrete(n, start=s)`` is ``Discrete(n)`` here (and a
    ``MultiDiscrete`` with a start likewise), and the wrapper adds ``s`` before it steps the env.

    Args:
        env: a factory that builds one copy (``lambda: simple_spread_v3.parallel_env()``,
            ``lambda: tictactoe_v3.env()``, ``lambda: gymnasium.make("rware-tiny-2ag-v2")``), or an env instance
            when ``num_envs`` is 1 and ``workers`` is 0.
        num_envs: number of copies stepped together.
        workers: 0 to step the copies in this process; ``k > 0`` to split them over ``k``
            worker processes that step in parallel and write into shared memory.
        seed: the run's seed: copy ``i`` is reset, on the first :meth:`reset`, with the ``i``-th seed of
            its own stream (:func:`~marlparts.utils.seeding.copy_seeds`), so the copies of one run,
            and of runs with other seeds, never share an episode stream.
        seed_stream: which stream of ``seed`` the copies draw from (0: training, 1: evaluation copies).
        device: where the returned tensors live.
        state_source: ``"auto"`` (``env.state()`` where the env has it, else all observations
            concatenated in ``possible_agents`` order), ``"env"`` or ``"observations"``.
        check_finite: raise on a NaN or infinite observation or reward, naming agent, copy and step.
        max_env_failures: how many times env copies may raise in ``step``, ``reset`` or ``state()`` before the error
            is raised (0: at once). Below it, a copy that raises is rebuilt with the factory (a worker
            process that dies is started again), a warning names the copy and the error, the episode
            it was playing is dropped (``infos["failed"]`` marks its row; the trainer leaves it out of
            statistics and the algorithms out of their memories), and ``env_failures`` counts it.
        info_keys: names of numeric entries of the agents' infos (what the env reports: kills, deliveries,
            successes) to carry at every step as ``infos["env_info"][key]``, ``(num_envs, num_agents)``
            float32, 0 where an agent's infos lack the key. The trainer sums them over each episode and
            hands them to callbacks' ``on_episode_infos``.
    """

    def __init__(self, env: Union[Callable[[], Any], Any], *, num_envs: int = 1, workers: int = 0,
                 seed: Optional[int] = None, device: Union[str, torch.device] = "cpu",
                 state_source: str = "auto", check_finite: bool = True, seed_stream: int = TRAINING_STREAM,
                 max_env_failures: int = 0, info_keys: Sequence[str] = ()) -> None:
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if not isinstance(workers, int) or workers < 0:
            raise ValueError(f"workers must be an int >= 0, got {workers!r}")
        if not isinstance(max_env_failures, int) or max_env_failures < 0:
            raise ValueError(f"max_env_failures must be an int >= 0, got {max_env_failures!r}")
        is_factory = callable(env) and not hasattr(env, "possible_agents")
        if not is_factory and (num_envs > 1 or workers > 0):
            raise ValueError("pass a factory that builds one copy (e.g. `lambda: simple_spread_v3.parallel_env()`) "
                             "to make several copies or to run copies in worker processes")
        probe = env() if is_factory else env
        if is_gymnasium_multi_agent(probe):  # tuple spaces and reward lists: seen through the Parallel interface
            probe = GymnasiumMultiAgentEnv(probe)
            env = GymnasiumMultiAgentFactory(env) if is_factory else probe
        if not hasattr(probe, "possible_agents") or not hasattr(probe, "step"):
            raise TypeError(f"wrap_env got {type(probe).__name__!r}{' (from the factory)' if is_factory else ''}, "
                            f"which is none of the supported kinds: {SUPPORTED_KINDS}")
        if is_aec_env(probe) and is_parallelizable(probe):  # every agent acts at each cycle: stepped at once
            probe = aec_to_parallel(probe)
            env = ParallelFactory(env) if is_factory else probe
        elif is_aec_env(probe):  # one agent acts at a time: the copies are seen through TurnBasedParallelEnv
            probe = TurnBasedParallelEnv(probe)
            env = TurnBasedFactory(env) if is_factory else probe
        self.turn_based = isinstance(probe, TurnBasedParallelEnv)
        _, reset_infos = probe.reset(seed=seed)
        self.layout = EnvLayout(probe, reset_infos, state_source=state_source, info_keys=info_keys)
        self._factory = env if is_factory else None
        self._options = {"device": device, "state_source": state_source, "check_finite": check_finite,
                         "max_env_failures": max_env_failures, "info_keys": tuple(info_keys)}
        if max_env_failures and not is_factory:
            raise ValueError("max_env_failures needs a factory that builds one copy, to rebuild a copy that failed")
        self.max_env_failures = max_env_failures
        self.env_failures = 0
        self.possible_agents = list(self.layout.possible_agents)
        self._agent_ids = frozenset(self.possible_agents)
        self._action_bounds = self._all_action_bounds()
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.seed = seed
        self.seed_stream = seed_stream
        self.rank = rank_and_world_size()[0]  # under torchrun each rank's copies have their own streams
        self.copy_seeds = copy_seeds(seed, num_envs, seed_stream, self.rank)
        self.check_finite = check_finite
        self._steps = 0
        rebuild_seed = derived_seed(seed, REBUILD_STREAM, seed_stream, self.rank)  # copies rebuilt after failures
        if workers > 0:
            probe.close()
            self.copies = WorkerCopies(env, self.layout, num_envs, workers, recover=max_env_failures > 0,
                                       rebuild_seed=rebuild_seed)
        else:
            envs = [probe] + [env() for _ in range(num_envs - 1)]
            self.copies = InProcessCopies(envs, self.layout, num_envs, env if max_env_failures else None, rebuild_seed)
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

    def reset(self, seed: Optional[int] = None) -> Tuple[AgentTensors, Dict[str, Any]]:
        """Reset every copy and return ``(observations, infos)``.

        The first reset seeds the copies from the wrapper's ``seed``; later ones continue each
        copy's random stream, unless ``seed`` is given: then the copies are seeded anew from its
        streams (the same ``seed`` gives the same episodes, as evaluation wants).
        """
        self._check_open("reset")
        if seed is not None:
            self.copy_seeds = copy_seeds(seed, self.num_envs, self.seed_stream, self.rank)
        self._count_failures(self.copies.reset(self.copy_seeds if seed is not None or not self._reset_done else None))
        self._reset_done = True
        self._steps = 0
        self._check_finite(("obs",))
        observations, infos = self._observations_and_infos()
        return observations, infos

    def make_evaluation_env(self, num_envs: int) -> Optional["PettingZooParallelWrapper"]:
        """``num_envs`` new copies of the same env, in this process, seeded from the evaluation stream of
        this wrapper's seed; None when the wrapper was given an env instance instead of a factory.
        """
        if self._factory is None:
            return None
        return PettingZooParallelWrapper(self._factory, num_envs=num_envs, seed=self.seed,
                                         seed_stream=EVALUATION_STREAM, **self._options)

    def step(self, actions: Mapping[str, torch.Tensor]) -> Tuple[Any, Any, Any, Any, Dict[str, Any]]:
        """Apply one action per agent per copy; see :class:`MultiAgentEnv` for what comes back."""
        self._check_open("step")
        if not self._reset_done:
            raise RuntimeError("call reset() before step()")
        self._write_actions(actions)
        self._count_failures(self.copies.step())
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

    def start_recording(self) -> None:
        """Start keeping copy 0's frames: one now, then one after each step (before an ended
        episode's reset, so its last frame is kept). Needs ``render_mode="rgb_array"`` copies in
        this process.
        """
        self.copies.start_recording()

    def stop_recording(self) -> np.ndarray:
        """Stop recording; the frames ``(time, height, width, 3)`` since :meth:`start_recording`."""
        return np.stack(self.copies.stop_recording())

    def close(self) -> None:
        """Close every copy and stop the workers."""
        if not self._closed:
            self._closed = True
            self.copies.close()

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise RuntimeError(f"cannot {what}: this env was closed (its copies are gone); make a new one")

    def _count_failures(self, failures: List[CopyFailure]) -> None:
        """Warn of each copy rebuilt; raise its error once more than ``max_env_failures`` happened."""
        for failure in failures:
            self.env_failures += 1
            if self.env_failures > self.max_env_failures:
                raise EnvCopyError(f"env copies failed {self.env_failures} times, more than max_env_failures="
                                   f"{self.max_env_failures}; the last failure:\n{failure.message}") from failure.error
            warnings.warn(f"{failure.message.splitlines()[0]}; the copy was rebuilt and its episode dropped (failure "
                          f"{self.env_failures} of at most {self.max_env_failures})", RuntimeWarning, stacklevel=3)

    def _tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array.copy()).to(self.device)

    def _observations_and_infos(self) -> Tuple[AgentTensors, Dict[str, Any]]:
        b, layout = self._buffers, self.layout
        final_obs = b["final_obs"]
        infos: Dict[str, Any] = {
            "active": AgentTensors(self._tensor(b["active"]), layout.agents),
            "episode_end": self._tensor(b["episode_end"]),
            "final_observation": AgentTensors(self._tensor(final_obs), layout.observations),
            "failed": self._tensor(b["failed"]),
        }
        infos["final_state"] = self._tensor(b["final_state"])
        if layout.has_masks:
            infos["action_mask"] = AgentTensors(self._tensor(b["mask"]), layout.masks)
            infos["final_action_mask"] = AgentTensors(self._tensor(b["final_mask"]), layout.masks)
        if layout.info_keys:
            values = self._tensor(b["env_info"])
            infos["env_info"] = {key: values[:, k] for k, key in enumerate(layout.info_keys)}
        return AgentTensors(self._tensor(b["obs"]), layout.observations), infos

    def _write_actions(self, actions: Mapping[str, Any]) -> None:
        if not isinstance(actions, Mapping):
            raise TypeError(f"step() takes a mapping agent id -> action tensor, got {type(actions).__name__}")
        unknown = [uid for uid in actions if uid not in self._agent_ids]
        if unknown:
            raise KeyError(f"actions given for unknown agent ids {unknown}; possible agents: {self.possible_agents}")
        buffer, layout = self._buffers["action"], self.layout.actions
        for uid in self.possible_agents:
            if uid not in actions:
                raise KeyError(f"no action for agent {uid!r}: step() needs one action tensor per possible agent")
            space = self.layout.action_spaces[uid]
            action = self._action_array(uid, actions[uid], space)
            columns = layout.columns(uid)
            expected = (self.num_envs, columns.stop - columns.start)
            if action.shape != expected:
                raise ValueError(f"action for agent {uid!r} has shape {action.shape}, expected {expected} "
                                 f"for action space {space}")
            buffer[:, columns] = action
        low, high = self._action_bounds  # every action checked at once: integers inside their space, floats finite
        inside = (buffer >= low) & (buffer <= high)  # NaN is outside
        if not inside.all():
            row, column = (int(i[0]) for i in np.nonzero(~inside))
            uid = layout.uid_at(column)
            space = self.layout.action_spaces[uid]
            if not np.isfinite(buffer[row, column]):
                raise ValueError(f"action for agent {uid!r} in env copy {row} is {buffer[row, layout.columns(uid)].tolist()}, "
                                 f"which is not finite; the env was not stepped (action space {space})")
            raise ValueError(f"action for agent {uid!r} in env copy {row} is {int(buffer[row, column])}, outside "
                             f"its action space {space}")

    def _all_action_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(low, high)`` per action column: an integer action must lie in ``[low, high]``; a continuous one
        must be finite (the copies clip it into its ``Box``).
        """
        layout = self.layout.actions
        largest = np.finfo(np.float64).max
        low, high = np.full(layout.total, -largest), np.full(layout.total, largest)
        for uid in self.possible_agents:  # (the layout's spaces count from 0)
            if is_discrete(self.layout.action_spaces[uid]):
                columns = layout.columns(uid)
                low[columns], high[columns] = action_bounds(self.layout.action_spaces[uid])
        return low, high

    @staticmethod
    def _action_array(uid: str, action: Any, space: gymnasium.Space) -> np.ndarray:
        """``action`` (a tensor or NumPy array) as a NumPy array, with a clear error for other types, for values
        that are not real numbers, or for floats given to an integer (``Discrete``, ``MultiDiscrete``) space.
        """
        if isinstance(action, torch.Tensor):
            array = action.detach().cpu().numpy()
        elif isinstance(action, np.ndarray):
            array = action
        else:
            raise TypeError(f"action for agent {uid!r} is a {type(action).__name__}; step() takes a torch tensor (or "
                            f"NumPy array) of shape (num_envs, columns) per agent")
        if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
                or array.dtype == np.bool_):  # complex numbers would lose their imaginary part; objects, strings
            raise TypeError(f"action for agent {uid!r} has dtype {str(action.dtype).replace('torch.', '')}: actions "
                            f"are real numbers (action space {space})")
        integer_space = isinstance(space, (gymnasium.spaces.Discrete, gymnasium.spaces.MultiDiscrete))
        if integer_space and not np.issubdtype(array.dtype, np.integer):
            raise TypeError(f"action for agent {uid!r} has dtype {str(action.dtype).replace('torch.', '')}, but its "
                            f"action space {space} takes integers (e.g. torch.long)")
        return array

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
                uid = layout.uid_at(column)
            what = {"obs": "observation", "final_obs": "final observation", "reward": "reward"}[name]
            raise ValueError(f"non-finite {what} ({array[row, column]}) for agent {uid!r} in env copy {row} "
                             f"at step {self._steps} after reset")
