"""Gymnasium multi-agent envs (tuple spaces, one reward per agent) seen as PettingZoo Parallel envs.

Level-Based Foraging (``lbforaging``), the Multi-Robot Warehouse (``rware``) and other envs of the
EPyMARL convention are single Gymnasium envs whose observation and action spaces are ``Tuple`` s with
one entry per agent, whose ``step`` takes a tuple of actions and returns a list of rewards, and whose
episode ends with one ``done`` flag (or a list of them). :class:`GymnasiumMultiAgentEnv` gives such an
env the PettingZoo Parallel interface, so that the batched wrapper steps it like any other env: in
process or in workers, with failures, time limits, masks and a global state.
"""

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium
import numpy as np

from marlparts.envs.lbf import is_lbf, lbf_action_masks, lbf_food_all_collected

#: The entries of ``env.spec.kwargs`` read as the env's own episode step limit, in this order.
TIME_LIMIT_KWARGS = ("max_episode_steps", "max_steps")


def _tuple_spaces(space: Any) -> Optional[List[gymnasium.Space]]:
    """The per-agent spaces of a ``Tuple`` space (or a list/tuple of spaces); None for anything else."""
    if isinstance(space, gymnasium.spaces.Tuple):
        return list(space.spaces)
    if isinstance(space, (list, tuple)) and space and all(isinstance(s, gymnasium.Space) for s in space):
        return list(space)
    return None


def is_gymnasium_multi_agent(env: Any) -> bool:
    """Whether ``env`` is a Gymnasium env of the multi-agent convention: a ``Tuple`` observation space and a
    ``Tuple`` action space (one entry per agent, which :class:`GymnasiumMultiAgentEnv` checks) and no PettingZoo
    interface of its own.
    """
    if hasattr(env, "possible_agents") or not hasattr(env, "step") or not hasattr(env, "reset"):
        return False
    observations = _tuple_spaces(getattr(env, "observation_space", None))
    actions = _tuple_spaces(getattr(env, "action_space", None))
    return observations is not None and actions is not None  # (tuples of different lengths: an error, not another kind)


def env_time_limit(env: Any) -> Optional[int]:
    """The step limit of ``env``'s episodes as its registration says: the smallest of ``spec.max_episode_steps``
    (Gymnasium's ``TimeLimit``) and the ``max_episode_steps`` / ``max_steps`` entries of ``spec.kwargs`` (the
    env's own limit, as LBF and RWARE register it); None when the spec says nothing.
    """
    spec = getattr(env, "spec", None)
    if spec is None:
        return None
    limits = [int(spec.max_episode_steps)] if spec.max_episode_steps is not None else []
    limits += [int(value) for key in TIME_LIMIT_KWARGS if (value := (spec.kwargs or {}).get(key)) is not None]
    return min(limits) if limits else None


def env_own_limit(env: Any, time_limit: Optional[int]) -> Optional[int]:
    """The step from which ``env``'s own ``done`` may mean only that its step limit was reached: the smallest
    ``max_episode_steps`` / ``max_steps`` entry of ``spec.kwargs`` (LBF and RWARE report their limit as ``done``);
    None where the spec shows no such limit (Gymnasium's ``TimeLimit`` reports a truncation apart, so the env's
    ``terminated`` is its own); ``time_limit`` for an env without a spec (its limit as given to the adapter).
    """
    spec = getattr(env, "spec", None)
    if spec is None:
        return time_limit
    limits = [int(value) for key in TIME_LIMIT_KWARGS if (value := (spec.kwargs or {}).get(key)) is not None]
    return min(limits) if limits else None


def known_episode_finished(env: Any) -> Optional[Callable[[Any], bool]]:
    """The ``episode_finished`` function of the envs whose own end can be told from the outside (LBF: every food
    collected); None for the others (RWARE's episodes end only at their step limit).
    """
    if is_lbf(env):
        return lbf_food_all_collected
    return None


def _per_agent_flags(value: Any, count: int, what: str) -> np.ndarray:
    """A ``done``/``terminated``/``truncated`` value (one bool, or one per agent) as ``count`` bools."""
    flags = np.asarray(value, dtype=bool).reshape(-1)
    if flags.size == 1:
        return np.repeat(flags, count)
    if flags.size != count:
        raise ValueError(f"the env returned {what} with {flags.size} entries for {count} agents; give one bool, "
                         "or one per agent")
    return flags


def idle_action(space: gymnasium.Space) -> Any:
    """The action sent for an agent whose episode has ended while the others play on: the first action of
    integer spaces (0 unless the space has a start; the no-op of LBF and RWARE), zeros clipped into the
    bounds for ``Box`` spaces.
    """
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(space.start)
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return np.asarray(space.start if hasattr(space, "start") else 0, dtype=np.int64) + np.zeros(space.shape, np.int64)
    if isinstance(space, gymnasium.spaces.Box):
        return np.clip(np.zeros(space.shape, dtype=space.dtype), space.low, space.high)
    raise TypeError(f"no idle action is known for action space {space}; agents of such a space cannot leave "
                    "before the episode ends")


class GymnasiumMultiAgentEnv:
    """A Gymnasium multi-agent env (tuple spaces) with the PettingZoo Parallel interface.

    Agent ``i`` is named ``agent_i``. ``step`` accepts each convention these envs use:

    - ``(obs, rewards, terminated, truncated, info)`` (Gymnasium) or ``(obs, rewards, done, info)``
      (the step of gym before 0.26, spaces from ``gymnasium``; ``info["TimeLimit.truncated"]`` marks a
      time limit, which is then a truncation and not a termination);
    - rewards as a list with one entry per agent, or one number shared by all agents;
    - ``done``/``terminated``/``truncated`` as one bool or as one per agent. An agent whose flag is set
      leaves ``agents`` (the env then receives :func:`idle_action` for it until the episode ends); the
      episode ends when every agent has left.

    Time limits: an episode cut at the step limit is *truncated*, not terminated, so that the algorithms
    bootstrap its last value. An episode still running at ``time_limit`` is cut (truncated) after that step.
    Envs such as LBF and RWARE end their episodes at their own limit with ``done`` and ``truncated=False``:
    from the step of that limit on (:func:`env_own_limit`), a ``done`` is read as a termination only where
    ``episode_finished(env)`` says the env ended the episode for its own reason (for LBF, out of the box: every
    food collected), and as a truncation otherwise. A ``done`` before that step is the env's own, a termination.

    Action masks, where the env exposes valid actions, go to each agent's infos as ``"action_mask"``
    (which the batched wrapper reads): from ``action_masks(env)`` when given, else from an
    ``info["action_mask"]`` with one mask per agent, else from the env's ``get_avail_actions()``, else,
    for Level-Based Foraging, each player's legal moves (:func:`~marlparts.envs.lbf.lbf_action_masks`).

    The global state is ``env.state()`` where the env has one; otherwise ``state()`` raises
    ``NotImplementedError`` and the batched wrapper concatenates the observations.

    The env's ``info`` is split per agent: an entry holding a list, tuple or array with one value per agent
    (its length is the number of agents) gives agent ``i`` its ``i``-th value; any other entry goes to every
    agent (a team-level figure then appears once per agent).

    Args:
        env: the Gymnasium env (``gymnasium.make("Foraging-8x8-2p-2f-coop-v3")``).
        time_limit: the step at which episodes end as truncated; ``"auto"`` reads it from the env's
            spec (:func:`env_time_limit`), None treats every end as a termination. An env built without
            ``gymnasium.make`` has no spec: pass its limit here.
        action_masks: a function of the env returning one boolean mask per agent (True: allowed), for
            envs that expose valid actions in their own way (LBF's are built in).
        episode_finished: a function of the env, asked when the env says ``done`` at its own step limit:
            True where the episode ended for the env's own reason that same step (a task completed), so it is
            a termination, not a truncation. ``"auto"`` knows LBF (:func:`known_episode_finished`); None, or an
            env it does not know, reads every such ``done`` as the limit's.
    """

    metadata: Dict[str, Any] = {}

    def __init__(self, env: Any, *, time_limit: Any = "auto",
                 action_masks: Optional[Callable[[Any], Sequence[Any]]] = None,
                 episode_finished: Any = "auto") -> None:
        if not is_gymnasium_multi_agent(env):
            raise TypeError(f"{type(env).__name__} is not a Gymnasium multi-agent env: its observation_space and "
                            "action_space must be Tuple spaces with one entry per agent, got "
                            f"{getattr(env, 'observation_space', None)} and {getattr(env, 'action_space', None)}")
        self.env = env
        self._observation_spaces = _tuple_spaces(env.observation_space)
        self._action_spaces = _tuple_spaces(env.action_space)
        if len(self._observation_spaces) != len(self._action_spaces):
            raise ValueError(f"{type(env).__name__}: its observation_space has {len(self._observation_spaces)} entries "
                             f"and its action_space {len(self._action_spaces)}; a Gymnasium multi-agent env has one entry "
                             "per agent in each")
        self.possible_agents: List[str] = [f"agent_{i}" for i in range(len(self._observation_spaces))]
        self._index = {uid: i for i, uid in enumerate(self.possible_agents)}
        if time_limit == "auto":
            time_limit = env_time_limit(env)
        if time_limit is not None and (not isinstance(time_limit, int) or time_limit < 1):
            raise ValueError(f"time_limit must be a positive int, 'auto' or None, got {time_limit!r}")
        self.time_limit: Optional[int] = time_limit
        self._own_limit = env_own_limit(env, time_limit)
        if episode_finished == "auto":
            episode_finished = known_episode_finished(env)
        if episode_finished is not None and not callable(episode_finished):
            raise TypeError(f"episode_finished must be a function of the env, 'auto' or None, got {episode_finished!r}")
        self.episode_finished: Optional[Callable[[Any], bool]] = episode_finished
        self.action_masks = action_masks if action_masks is not None else lbf_action_masks if is_lbf(env) else None
        self.metadata = getattr(env, "metadata", {}) or {}
        self.render_mode = getattr(env, "render_mode", None)
        self.agents: List[str] = []
        self._steps = 0

    def observation_space(self, uid: str) -> gymnasium.Space:
        """Observation space of agent ``uid``: its entry of the env's ``Tuple`` space."""
        return self._observation_spaces[self._agent_index(uid)]

    def action_space(self, uid: str) -> gymnasium.Space:
        """Action space of agent ``uid``: its entry of the env's ``Tuple`` space."""
        return self._action_spaces[self._agent_index(uid)]

    def reset(self, seed: Optional[int] = None, options: Optional[dict] = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Reset the env; every agent plays. Returns ``(observations, infos)`` keyed by agent id."""
        result = self.env.reset(seed=seed, options=options)
        returns_info = isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)
        observations, info = result if returns_info else (result, {})
        self.agents = list(self.possible_agents)
        self._steps = 0
        return self._by_agent(observations, "observations"), self._agent_infos(info, self.agents)

    def step(self, actions: Dict[str, Any]) -> Tuple[Dict[str, Any], ...]:
        """Step the env with one action per live agent (idle actions for agents that left); results are keyed
        by the agents that acted, who leave ``agents`` once their episode ended.
        """
        if not self.agents:
            raise RuntimeError("step() after the episode ended: reset() first")
        joint = tuple(actions[uid] if uid in actions and uid in self.agents else idle_action(self._action_spaces[i])
                      for i, uid in enumerate(self.possible_agents))
        result = self.env.step(joint)
        if len(result) == 5:
            observations, rewards, terminated, truncated, info = result
        elif len(result) == 4:  # gym's done: a time limit marks it in the info, and is a truncation only
            observations, rewards, terminated, info = result
            truncated = bool((info or {}).get("TimeLimit.truncated", False))
            terminated = np.asarray(terminated, dtype=bool) & (not truncated)
        else:
            raise ValueError(f"the env's step() returned {len(result)} values; expected (obs, rewards, terminated, "
                             "truncated, info) or (obs, rewards, done, info)")
        count = len(self.possible_agents)
        self._steps += 1
        terminated = _per_agent_flags(terminated, count, "terminated/done")
        truncated = _per_agent_flags(truncated, count, "truncated")
        if self._own_limit is not None and self._steps >= self._own_limit and terminated.any() \
                and not (self.episode_finished is not None and self.episode_finished(self.env)):
            truncated, terminated = truncated | terminated, np.zeros(count, dtype=bool)  # the env's done: its limit
        if self.time_limit is not None and self._steps >= self.time_limit:  # the limit cuts every agent's episode
            truncated = ~terminated
        rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
        if rewards.size == 1:
            rewards = np.repeat(rewards, count)
        if rewards.size != count:
            raise ValueError(f"the env returned {rewards.size} rewards for {count} agents; give one per agent, or "
                             "one shared by all")
        acted = self.agents
        all_observations = self._by_agent(observations, "observations")
        infos = self._agent_infos(info, acted)
        ended = terminated | truncated
        self.agents = [uid for uid in acted if not ended[self._index[uid]]]
        index = self._index
        return ({uid: all_observations[uid] for uid in acted},
                {uid: float(rewards[index[uid]]) for uid in acted},
                {uid: bool(terminated[index[uid]]) for uid in acted},
                {uid: bool(truncated[index[uid]]) for uid in acted},
                infos)

    def state(self) -> np.ndarray:
        """The env's global state, where it has a ``state()``; ``NotImplementedError`` otherwise."""
        state = self._env_method("state")
        if state is None:
            raise NotImplementedError(f"{type(self.env).__name__} has no state(); the batched wrapper concatenates "
                                      "the observations instead")
        return np.asarray(state(), dtype=np.float32)

    def render(self) -> Any:
        """The env's ``render()``."""
        return self.env.render()

    def close(self) -> None:
        """Close the env."""
        self.env.close()

    def _agent_index(self, uid: str) -> int:
        if uid not in self._index:
            raise KeyError(f"unknown agent id {uid!r}; this env's agents are {self.possible_agents}")
        return self._index[uid]

    def _by_agent(self, values: Any, what: str) -> Dict[str, Any]:
        values = list(values)
        if len(values) != len(self.possible_agents):
            raise ValueError(f"the env returned {what} for {len(values)} agents, but its spaces have "
                             f"{len(self.possible_agents)}")
        return dict(zip(self.possible_agents, values))

    def _agent_infos(self, info: Any, uids: Sequence[str]) -> Dict[str, Dict[str, Any]]:
        """The env's ``info`` split per agent, with each agent's action mask where the env exposes them."""
        info = info if isinstance(info, dict) else {}
        count = len(self.possible_agents)
        infos: Dict[str, Dict[str, Any]] = {uid: {} for uid in uids}
        for key, value in info.items():
            per_agent = ((isinstance(value, (list, tuple)) and len(value) == count)
                         or (isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == count))
            for uid in uids:
                infos[uid][key] = value[self._index[uid]] if per_agent else value
        masks = self._masks(info)
        if masks is not None:
            for uid in uids:
                infos[uid]["action_mask"] = np.asarray(masks[self._index[uid]], dtype=bool)
        return infos

    def _masks(self, info: Dict[str, Any]) -> Optional[Sequence[Any]]:
        if self.action_masks is not None:
            return self.action_masks(self.env)
        if "action_mask" in info:
            return info["action_mask"]
        available = self._env_method("get_avail_actions")
        return None if available is None else available()

    def _env_method(self, name: str) -> Optional[Callable[..., Any]]:
        """The env's method ``name``, looked up on the env and then on ``env.unwrapped`` (Gymnasium's wrappers
        do not forward attributes); None where neither has it.
        """
        for target in (self.env, getattr(self.env, "unwrapped", None)):
            method = getattr(target, name, None)
            if callable(method):
                return method
        return None


class GymnasiumMultiAgentFactory:
    """A factory of :class:`GymnasiumMultiAgentEnv` copies from a factory of Gymnasium multi-agent envs
    (picklable whenever ``factory`` is, for worker processes).
    """

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory

    def __call__(self) -> GymnasiumMultiAgentEnv:
        """One new copy."""
        return GymnasiumMultiAgentEnv(self.factory())
