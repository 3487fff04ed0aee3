"""A PettingZoo AEC env (turn-based: one agent acts at a time) seen as a Parallel env.

:class:`TurnBasedParallelEnv` lists in ``agents`` only the agent whose turn it is, so the batched
wrapper marks that agent active and every other agent inactive for the step. The observations
of all agents still in the game come back at every step (each as the env shows it to that agent),
so a critic can value a waiting agent's position and a centralised state can hold every agent's view.

Rewards: an AEC env may reward any agent at any step (a loser's -1 arrives on the winner's move).
Every agent's reward at a step is returned at that step, whether it acted or not; the algorithms
credit what reaches an agent while it waits to its last action (see
:func:`~marlparts.agents.ppo.advantages.compute_gae`).
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import gymnasium
from pettingzoo.utils.conversions import aec_to_parallel
from pettingzoo.utils.env import AECEnv


def is_aec_env(env: Any) -> bool:
    """Whether ``env`` is a PettingZoo AEC env (wrapped or not)."""
    return isinstance(env, AECEnv)


class TurnBasedParallelEnv:
    """The Parallel-env interface the batched wrapper steps, over a PettingZoo AEC env.

    ``step(actions)`` plays the action of the agent whose turn it is (actions of other agents are
    ignored), then removes the agents whose episode ended (PettingZoo's ``None`` steps), so that
    the next call finds a live agent to act or an empty ``agents`` list at the end of the game.

    Args:
        env: a PettingZoo AEC env.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.possible_agents: List[str] = list(env.possible_agents)
        self.metadata = getattr(env, "metadata", {})

    @property
    def agents(self) -> List[str]:
        """The agent whose turn it is, as a one-element list; empty once the game is over."""
        env = self.env
        if not env.agents:
            return []
        return [env.agent_selection]

    def observation_space(self, uid: str) -> gymnasium.Space:
        """The AEC env's observation space of ``uid``."""
        return self.env.observation_space(uid)

    def action_space(self, uid: str) -> gymnasium.Space:
        """The AEC env's action space of ``uid``."""
        return self.env.action_space(uid)

    @property
    def state_space(self) -> gymnasium.Space:
        """The AEC env's state space (where it has one)."""
        return self.env.state_space

    def state(self) -> Any:
        """The AEC env's global state (where it has one)."""
        return self.env.state()

    def reset(self, seed: Any = None) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        """Reset the game; the observations and infos of every agent."""
        self.env.reset(seed=seed)
        self._remove_ended_agents()
        return self._observations(), self._infos()

    def step(self, actions: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, float], Dict[str, bool],
                                                     Dict[str, bool], Dict[str, Any]]:
        """Play the action of the agent to move; every agent's reward from this move, whose episode
        ended with it, and the observations of the agents that were in the game.
        """
        env = self.env
        mover = env.agent_selection
        rewards = dict.fromkeys(env.agents, 0.0)
        env.step(actions[mover])
        for uid in env.agents:
            rewards[uid] = rewards.get(uid, 0.0) + float(env.rewards.get(uid, 0.0))
        terminated = {uid: bool(env.terminations.get(uid, False)) for uid in rewards}
        truncated = {uid: bool(env.truncations.get(uid, False)) for uid in rewards}
        # every player's view now; then an ended player's view at its own dead step (its "turn" to leave, as
        # PettingZoo's loop hands it over), and a live player's once the dead steps are done (the player to move
        # is then a live one: before them every view and mask would be of an ended player's turn)
        observations, infos = self._observations(), self._infos()
        rewards_while_leaving = self._remove_ended_agents(observations, infos, terminated, truncated)
        for uid, reward in rewards_while_leaving.items():
            rewards[uid] = rewards.get(uid, 0.0) + reward
        observations.update(self._observations())
        infos.update(self._infos())
        return observations, rewards, terminated, truncated, infos

    def render(self) -> Any:
        """Render the game as the AEC env's ``render_mode`` says."""
        return self.env.render()

    def close(self) -> None:
        """Close the AEC env."""
        self.env.close()

    def _remove_ended_agents(self, observations: Optional[Dict[str, Any]] = None, infos: Optional[Dict[str, Any]] = None,
                             terminated: Optional[Dict[str, bool]] = None, truncated: Optional[Dict[str, bool]] = None
                             ) -> Dict[str, float]:
        """Step ``None`` for every agent whose episode has ended until a live agent is to move (or none is
        left); the rewards those steps gave. Each ended agent's view and infos go into ``observations`` and
        ``infos`` right before its dead step, and an episode that a dead step ends for another agent goes into
        ``terminated`` / ``truncated`` (where given).
        """
        env, rewards = self.env, {}
        while env.agents and (env.terminations.get(env.agent_selection, False)
                              or env.truncations.get(env.agent_selection, False)):
            leaving = env.agent_selection
            if observations is not None:
                observations[leaving], infos[leaving] = env.observe(leaving), env.infos.get(leaving, {})
                for uid in terminated:
                    terminated[uid] = terminated[uid] or bool(env.terminations.get(uid, False))
                    truncated[uid] = truncated[uid] or bool(env.truncations.get(uid, False))
            env.step(None)
            for uid in env.agents:
                rewards[uid] = rewards.get(uid, 0.0) + float(env.rewards.get(uid, 0.0))
        return rewards

    def _observations(self) -> Dict[str, Any]:
        return {uid: self.env.observe(uid) for uid in self.env.agents}

    def _infos(self) -> Dict[str, Any]:
        return {uid: self.env.infos.get(uid, {}) for uid in self.env.agents}


def is_parallelizable(env: Any) -> bool:
    """Whether an AEC env says its agents act simultaneously (``metadata["is_parallelizable"]``), so that
    PettingZoo's ``aec_to_parallel`` steps all of them at once.
    """
    return bool(getattr(env, "metadata", {}).get("is_parallelizable", False))


class ParallelFactory:
    """A factory of Parallel copies (``aec_to_parallel``) from a factory of parallelizable AEC copies."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory

    def __call__(self) -> Any:
        """One new copy."""
        return aec_to_parallel(self.factory())


class TurnBasedFactory:
    """A factory of :class:`TurnBasedParallelEnv` copies from a factory of AEC env copies (picklable
    whenever ``factory`` is, for worker processes).
    """

    def __init__(self, factory: Callable[[], Any]) -> None:
        self.factory = factory

    def __call__(self) -> TurnBasedParallelEnv:
        """One new copy."""
        return TurnBasedParallelEnv(self.factory())
