"""Environment wrappers: any supported source becomes a batched :class:`MultiAgentEnv`."""

from typing import Any

from marlparts.envs.base import MultiAgentEnv
from marlparts.envs.copies import EnvCopyError
from marlparts.envs.pettingzoo import PettingZooParallelWrapper


def wrap_env(env: Any, **kwargs: Any) -> MultiAgentEnv:
    """Wrap ``env`` (an instance or a factory that builds one copy) as a :class:`MultiAgentEnv`.

    Supported sources: PettingZoo Parallel envs, including the MPE tasks of ``mpe2``.
    Keyword arguments go to the wrapper; see :class:`PettingZooParallelWrapper`
    (``num_envs``, ``workers``, ``seed``, ``device``, ``state_source``, ``check_finite``).
    """
    if isinstance(env, MultiAgentEnv):
        return env
    return PettingZooParallelWrapper(env, **kwargs)


__all__ = ["EnvCopyError", "MultiAgentEnv", "PettingZooParallelWrapper", "wrap_env"]
