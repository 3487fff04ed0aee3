"""VMAS (vectorised multi-agent simulator) envs as a :class:`MultiAgentEnv`, with every tensor left on the env's
device.
"""

import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import gymnasium
import numpy as np
import torch

from marlparts.envs.batched import BatchedSimulatorEnv
from marlparts.envs.vmas_reset import CopyResetter
from marlparts.utils.agent_tensors import AgentTensors
from marlparts.utils.distributed import rank_and_world_size
from marlparts.utils.seeding import EVALUATION_STREAM, TRAINING_STREAM, copy_seeds
from marlparts.utils.spaces import as_gymnasium_space


def is_vmas_env(env: Any) -> bool:
    """True for a VMAS ``Environment`` (found without importing VMAS)."""
    return any(cls.__module__.startswith("vmas.") and cls.__name__ == "Environment" for cls in type(env).__mro__)


def is_batched_factory(env: Any) -> bool:
    """True for a callable that takes a ``num_envs`` argument (e.g. ``functools.partial(vmas.make_env, ...)``):
    a factory of a batched simulator, called with the number of copies it must hold.
    """
    if not callable(env) or hasattr(env, "possible_agents") or is_vmas_env(env):
        return False
    try:
        return "num_envs" in inspect.signature(env).parameters
    except (TypeError, ValueError):
        return False


class _OwnRandomStream:
    """Gives one VMAS env its own random stream. VMAS keeps a single random state for all its envs in a
    process (``Environment.vmas_random_state``: the CPU generators of torch, NumPy and Python); without this,
    the evaluation copies would draw from, and shift, the training copies' stream. On CUDA, VMAS draws from the
    device's global generator and its ``seed`` re-seeds every device's: the wrapper keeps the env's own CUDA
    state too, and puts the global one back after each call, so the models' sampling on the GPU is untouched.
    """

    def __init__(self, env: Any) -> None:
        self.shared = type(env).vmas_random_state
        self.state = list(self.shared)
        device = torch.device(env.device)
        self.cuda_device = device if device.type == "cuda" else None
        self.cuda_state: Optional[torch.Tensor] = None
        self._global_cuda_states: Optional[List[torch.Tensor]] = None

    def __enter__(self) -> None:
        self.shared[:] = self.state
        if self.cuda_device is not None:
            self._global_cuda_states = torch.cuda.get_rng_state_all()
            if self.cuda_state is not None:
                torch.cuda.set_rng_state(self.cuda_state, self.cuda_device)

    def __exit__(self, *exc: Any) -> None:
        self.state = list(self.shared)
        if self.cuda_device is not None:
            self.cuda_state = torch.cuda.get_rng_state(self.cuda_device)
            torch.cuda.set_rng_state_all(self._global_cuda_states)


class VmasWrapper(BatchedSimulatorEnv):
    """A VMAS env as a :class:`MultiAgentEnv`: ``(num_envs, ...)`` tensors on the env's device, no copy off it
    and no loop over copies.

    Give either the env (``vmas.make_env(..., terminated_truncated=True)``) or a factory that takes
    ``num_envs`` (``functools.partial(vmas.make_env, "balance", terminated_truncated=True, max_steps=100)``);
    only a factory can make the separate evaluation copies of :meth:`make_evaluation_env`.

    - Copies that ended are reset inside :meth:`step` (several at once without a Python loop, see
      :class:`~marlparts.envs.vmas_reset.CopyResetter`); ``infos["final_observation"]`` holds the last
      observation of those copies, so a time limit (``truncated``, from ``max_steps``) is bootstrapped.
    - The global state is every agent's observation concatenated (VMAS has no state of its own).
    - Continuous (``Box``), ``Discrete`` and ``MultiDiscrete`` actions; ``dict_spaces`` envs and dict
      observations (flattened in the space's key order).
    - Rewards are per agent, ``(num_envs, 1)`` each; a copy's ``terminated`` / ``truncated`` is given to all
      of its agents.
    - The env has its own random stream, seeded from ``seed`` (one stream for all its copies, as VMAS
      draws for the batch at once), on CUDA too; the process's global generators are left as they were.

    Args:
        env: the VMAS env, or a factory ``f(num_envs=...) -> env``.
        num_envs: number of copies, for a factory (an env has its own).
        seed: the run's seed; None leaves VMAS's stream as it is.
        seed_stream: which stream of ``seed`` (0: training, 1: evaluation copies).
        check_finite: raise on a NaN or infinite observation or reward (one device sync per step).
        vectorised_reset: reset several ended copies at once (see :class:`CopyResetter`).
        pooled_reset: (with ``vectorised_reset``) start ended copies from the unused fresh rows of the last
            vectorised reset, without a call into VMAS, while every ended copy has one: only for a scenario that
            draws each copy's start on its own and keeps all its state in batched tensors, such as balance
            (see :mod:`~marlparts.envs.vmas_reset`).
    """

    def __init__(self, env: Union[Any, Callable[..., Any]], *, num_envs: Optional[int] = None,
                 seed: Optional[int] = None, seed_stream: int = TRAINING_STREAM, check_finite: bool = True,
                 vectorised_reset: bool = True, pooled_reset: bool = False) -> None:
        self._factory: Optional[Callable[..., Any]] = None
        if is_batched_factory(env):
            if not isinstance(num_envs, int) or num_envs < 1:
                raise ValueError(f"num_envs must be a positive int when a factory is given, got {num_envs!r}")
            self._factory, env = env, env(num_envs=num_envs)
        if not is_vmas_env(env):
            raise TypeError(f"expected a VMAS Environment or a factory taking num_envs, got {type(env).__name__}")
        if num_envs is not None and num_envs != env.num_envs:
            raise ValueError(f"num_envs={num_envs} but the VMAS env holds {env.num_envs} copies")
        if not env.terminated_truncated:
            raise ValueError("make the VMAS env with terminated_truncated=True (vmas.make_env(..., "
                             "terminated_truncated=True)) so that time limits (max_steps) are told apart from "
                             "terminations and bootstrapped")
        self.env = env
        self.num_envs = int(env.num_envs)
        self.device = torch.device(env.device)
        self.possible_agents = [agent.name for agent in env.agents]
        self.seed, self.seed_stream = seed, seed_stream
        self.rank = rank_and_world_size()[0]
        self.check_finite = check_finite
        self.vectorised_reset, self.pooled_reset = vectorised_reset, pooled_reset
        self.copy_seeds = [None] * self.num_envs  # the copies share one stream: stream_seed
        self.stream_seed = self._stream_seed(seed)
        self._random = _OwnRandomStream(env)
        self._resetter = CopyResetter(env, vectorised=vectorised_reset, pooled=pooled_reset)
        observation_spaces = self._per_agent_spaces(env.observation_space)
        self._set_spaces(observation_spaces, self._per_agent_spaces(env.action_space))
        self._state_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(self.observation_layout.total,),
                                                 dtype=np.float32)
        self._observations: Optional[torch.Tensor] = None
        self._steps = 0
        self._frames: Optional[List[np.ndarray]] = None

    def _stream_seed(self, seed: Optional[int]) -> Optional[int]:
        """The seed of the env's stream: copy 0's seed of ``seed``'s stream, below 2**32 as VMAS needs."""
        stream_seed = copy_seeds(seed, 1, self.seed_stream, self.rank)[0]
        return None if stream_seed is None else stream_seed % 2**32

    def _per_agent_spaces(self, joint: Any) -> Dict[str, gymnasium.Space]:
        spaces = list(joint.spaces.values()) if self.env.dict_spaces else list(joint.spaces)
        return {uid: as_gymnasium_space(space) for uid, space in zip(self.possible_agents, spaces)}

    @property
    def state_space(self) -> gymnasium.Space:
        """Every agent's flattened observation, concatenated in ``possible_agents`` order."""
        return self._state_space

    def reset(self, seed: Optional[int] = None) -> Tuple[AgentTensors, Dict[str, Any]]:
        """Reset every copy. The first reset seeds the env's stream from the wrapper's ``seed``; later ones go
        on with the stream, unless ``seed`` is given (the same ``seed``, the same episodes).
        """
        if seed is not None:
            self.stream_seed = self._stream_seed(seed)
        with self._random:
            if self.stream_seed is not None and (seed is not None or self._observations is None):
                self.env.seed(self.stream_seed)
            self.env.reset(return_observations=False)
            self._resetter.forget_fresh_rows()
            self._observations = self._read_observations()
        self._steps = 0
        self._check_finite(self._observations, torch.zeros(1, 1, device=self.device), 0)
        no_end = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return AgentTensors(self._observations, self.observation_layout), self._infos(no_end, None, None)

    def step(self, actions: Any) -> Tuple[AgentTensors, AgentTensors, AgentTensors, AgentTensors, Dict[str, Any]]:
        """Step every copy; copies that ended are reset and ``infos["final_observation"]`` keeps their last
        observation (zeros elsewhere).
        """
        if self._observations is None:
            raise RuntimeError("call reset() before step()")
        joint = self._joint_actions(actions)
        per_agent = self._per_agent_actions(joint)
        with self._random:
            observations, rewards, terminated, truncated, _ = self.env.step(per_agent)
            observations = self._flatten(observations)
            rewards = torch.stack(list(rewards.values()) if isinstance(rewards, dict) else rewards, dim=1).float()
            self._steps += 1
            self._check_finite(observations, rewards, self._steps)
            terminated, truncated = terminated.bool(), truncated.bool()
            ended = terminated | truncated
            final = None
            if self._frames is not None:
                self._frames.append(self.render())
            if bool(ended.any()):
                final = torch.where(ended.reshape(-1, 1), observations, 0.0)
                self._resetter.reset(ended)
                observations = self._read_observations()
        self._observations = observations
        infos = self._infos(ended, final if final is not None else self._no_final_observation,
                            final if final is not None else self._no_final_observation)
        return (AgentTensors(observations, self.observation_layout), AgentTensors(rewards, self.agent_layout),
                self._per_agent_flags(terminated), self._per_agent_flags(truncated), infos)

    def state(self) -> torch.Tensor:
        """The global state of every copy: all observations concatenated, ``(num_envs, state_size)``."""
        if self._observations is None:
            raise RuntimeError("call reset() before state()")
        return self._observations

    def make_evaluation_env(self, num_envs: int) -> Optional["VmasWrapper"]:
        """``num_envs`` new copies from the factory, seeded from the evaluation stream of this wrapper's seed;
        None when the wrapper was given an env instead of a factory.
        """
        if self._factory is None:
            return None
        return VmasWrapper(self._factory, num_envs=num_envs, seed=self.seed, seed_stream=EVALUATION_STREAM,
                           check_finite=self.check_finite, vectorised_reset=self.vectorised_reset,
                           pooled_reset=self.pooled_reset)

    def placement_hint(self, device: str) -> str:
        """VMAS envs live where they are made."""
        return f"make the VMAS env on that device (vmas.make_env(..., device={device!r}))"

    def render(self) -> np.ndarray:
        """Copy 0 as an RGB array ``(height, width, 3)``."""
        return np.asarray(self.env.render(mode="rgb_array", env_index=0))

    def start_recording(self) -> None:
        """Keep copy 0's frames: one now, then one after each step (before an ended copy is reset)."""
        self._frames = [self.render()]

    def stop_recording(self) -> np.ndarray:
        """Stop recording; the frames ``(time, height, width, 3)`` since :meth:`start_recording`."""
        if self._frames is None:
            raise RuntimeError("stop_recording() without start_recording()")
        frames, self._frames = self._frames, None
        return np.stack(frames)

    def close(self) -> None:
        """Close VMAS's viewer, if one was opened."""
        viewer = getattr(self.env, "viewer", None)
        if viewer is not None:
            viewer.close()
            self.env.viewer = None

    def _read_observations(self) -> torch.Tensor:
        (observations,) = self.env.get_from_scenario(get_observations=True, get_rewards=False, get_infos=False,
                                                    get_dones=False)
        return self._flatten(observations)

    def _flatten(self, observations: Any) -> torch.Tensor:
        return self._flat_observations(list(observations.values()) if isinstance(observations, dict)
                                       else observations)
