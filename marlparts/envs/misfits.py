"""Errors for what an env copy returned that does not fit its agents or its spaces.

The copies write each step's results into preallocated buffers; a result that does not fit (an observation of
the wrong size, a reward for an agent the env never declared) would otherwise fail deep inside NumPy (``could
not broadcast input array``), raise a bare ``KeyError``, or be spread silently over the buffer (one number
filling a whole observation). The checks are cheap on the hot path; the functions here run only once a check
failed, and build an error that names the agent, the env copy and the shapes.
"""

from typing import Any, Collection, Mapping, Sequence

import gymnasium

from marlparts.utils.spaces import MisfitError


def unknown_agent_error(what: str, uid: Any, row: int, possible_agents: Sequence[str]) -> ValueError:
    """The env returned ``what`` ("a reward", "an observation", ...) for ``uid``, an agent it never declared."""
    return ValueError(f"the env returned {what} for agent {uid!r} in env copy {row}, which is not one of its possible "
                      f"agents {list(possible_agents)}")


def missing_observation_error(live: Collection[Any], observations: Mapping[str, Any], row: int,
                              possible_agents: Sequence[str]) -> ValueError:
    """An agent of ``env.agents`` (it plays on) has no observation, or is no agent the env declared."""
    for uid in live:
        if uid not in possible_agents:
            return ValueError(f"agent {uid!r} plays on in env copy {row} (it is in env.agents), but it is not one of "
                              f"the env's possible agents {list(possible_agents)}")
    missing = sorted(uid for uid in live if uid not in observations)
    return ValueError(f"agent {missing[0]!r} plays on in env copy {row} (it is in env.agents), but the env returned no "
                      f"observation for it (observations came for {sorted(observations)}); an env must return an "
                      "observation for every agent of env.agents")


def observation_error(uid: Any, row: int, live: Collection[Any], space: Any, error: Exception,
                      possible_agents: Sequence[str]) -> ValueError:
    """The observation of ``uid`` could not be written: ``uid`` is unknown, or its value does not fit ``space``."""
    if uid not in possible_agents:
        if uid in live:
            return missing_observation_error([uid], {}, row, possible_agents)
        return unknown_agent_error("an observation", uid, row, possible_agents)
    if isinstance(error, MisfitError):
        return ValueError(f"the observation of agent {uid!r} in env copy {row} {error}")
    return ValueError(f"the observation of agent {uid!r} in env copy {row} does not fit its space {space}: {error}")


def reward_error(rewards: Mapping[Any, Any], row: int, possible_agents: Sequence[str]) -> ValueError:
    """The rewards of a step could not be written: one is for an unknown agent, or is not one number."""
    for uid, value in rewards.items():
        if uid not in possible_agents:
            return unknown_agent_error("a reward", uid, row, possible_agents)
        try:
            float(value)
        except (TypeError, ValueError):
            return ValueError(f"the reward of agent {uid!r} in env copy {row} is {value!r}, not a number")
    return ValueError(f"the rewards of env copy {row} could not be read: {dict(rewards)!r}")


def flag_error(what: str, flags: Mapping[Any, Any], row: int, possible_agents: Sequence[str]) -> ValueError:
    """A termination or truncation flag (``what``) came for an agent the env never declared."""
    unknown = next(uid for uid in flags if uid not in possible_agents)
    return unknown_agent_error(what, unknown, row, possible_agents)


def size_error(what: str, value: Any, size: int, needs: str) -> ValueError:
    """``value`` (``what``: "the state() of env copy 0") has another number of values than the ``size`` it needs."""
    return ValueError(f"{what} has shape {getattr(value, 'shape', ())} ({getattr(value, 'size', 1)} values), but "
                      f"{needs} {size}")


def mask_size_error(uid: Any, row: int, mask: Any, space: gymnasium.Space, size: int) -> ValueError:
    """The action mask of ``uid`` has another number of entries than its action space has actions."""
    return size_error(f"the action mask of agent {uid!r} in env copy {row}", mask, size,
                      f"its action space {space} needs")
