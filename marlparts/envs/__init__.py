"""Environment wrappers: any supported source becomes a batched :class:`MultiAgentEnv`."""

from typing import Any

from marlparts.envs.base import MultiAgentEnv
from marlparts.envs.copies import EnvCopyError
from marlparts.envs.gymnasium_multiagent import GymnasiumMultiAgentEnv
from marlparts.envs.isaaclab import IsaacLabWrapper, is_isaaclab_marl_env
from marlparts.envs.pettingzoo import PettingZooParallelWrapper
from marlparts.envs.vmas import VmasWrapper, is_batched_factory, is_vmas_env


def wrap_env(env: Any, **kwargs: Any) -> MultiAgentEnv:
    """Wrap ``env`` (an instance or a factory that builds one copy) as a :class:`MultiAgentEnv`.

    Supported sources:

    - PettingZoo Parallel envs, including the MPE tasks of ``mpe2``, and AEC envs (turn-based games: one
      move per step): an instance or a factory of one copy; see :class:`PettingZooParallelWrapper`
      (``num_envs``, ``workers``, ``seed``, ``device``, ``state_source``, ``check_finite``,
      ``max_env_failures``, ``info_keys``);
    - Gymnasium multi-agent envs with ``Tuple`` spaces and per-agent reward lists (``lbforaging``,
      ``rware``), stepped as PettingZoo Parallel envs through :class:`GymnasiumMultiAgentEnv`, with the same
      options;
    - VMAS envs: an env, or a factory taking ``num_envs`` (``functools.partial(vmas.make_env, ...)``);
      see :class:`VmasWrapper` (``num_envs``, ``seed``, ``check_finite``, ``vectorised_reset``,
      ``pooled_reset``);
    - Isaac Lab multi-agent envs (``DirectMARLEnv``, also inside gymnasium wrappers); see
      :class:`IsaacLabWrapper` (``check_finite``).
    """
    if isinstance(env, MultiAgentEnv):
        return env
    if is_vmas_env(env) or is_batched_factory(env):
        return VmasWrapper(env, **kwargs)
    if is_isaaclab_marl_env(env):
        return IsaacLabWrapper(env, **kwargs)
    return PettingZooParallelWrapper(env, **kwargs)


__all__ = ["EnvCopyError", "GymnasiumMultiAgentEnv", "IsaacLabWrapper", "MultiAgentEnv", "PettingZooParallelWrapper",
           "VmasWrapper", "wrap_env"]
