"""What every trainer shares: the agents it drives, their teams, and per-episode statistics."""

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

import torch

from marlparts.agents.base import MultiAgent
from marlparts.envs.base import MultiAgentEnv
from marlparts.trainers.callbacks import Callback
from marlparts.trainers.opponents import Opponents, check_seats
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import Allowed, check_config, check_ranges, merge_config
from marlparts.utils.devices import same_device
from marlparts.utils.seeding import OPPONENT_STREAM, TRAINING_STREAM, derived_seed

#: The values the trainers' numeric options take (the keys a trainer's config has are checked).
TRAINER_CONFIG_RANGES: Dict[str, Allowed] = {
    "timesteps": Allowed(0, integer=True),
    "progress_interval": Allowed(0),                 # 0: a line at every step
    "eval_interval": Allowed(0, integer=True),        # 0: no evaluation during training
    "eval_episodes": Allowed(1, integer=True),
    "eval_num_envs": Allowed(1, integer=True, words=(None,)),
    "video_fps": Allowed(0, open_low=True),
}


class EpisodeInfo(NamedTuple):
    """One entry of the env's infos over the episodes that ended at a step, each ``(ended, num_agents)``:
    ``total``, its values summed over the episode's steps (deliveries, kills); ``last``, its value at each
    agent's last step of the episode (a final score, a success flag), for an agent that left early the
    step it left.
    """

    total: torch.Tensor
    last: torch.Tensor


class EpisodeEnds(NamedTuple):
    """The episodes that ended at one step: ``copies`` ``(num_envs,)`` bool, the copies whose episode
    ended; ``returns`` ``(ended, num_agents)``, each ended episode's return per agent; ``lengths``
    ``(ended,)``, each ended episode's number of steps; ``dropped`` ``(num_envs,)`` bool, the copies whose
    env failed (their episode is not counted), and ``dropped_lengths`` ``(num_envs,)``, the steps of each
    such episode (0 elsewhere), this one included; ``any_dropped``, whether ``dropped`` holds any copy;
    ``infos``, the ended episodes' :class:`EpisodeInfo` per entry of the env's ``info_keys`` (empty where the
    env carries none). The tensors are read-only: a step without ended or dropped episodes hands out the
    same ones each time.
    """

    copies: torch.Tensor
    returns: torch.Tensor
    lengths: torch.Tensor
    dropped: torch.Tensor
    dropped_lengths: torch.Tensor
    any_dropped: bool
    infos: Dict[str, EpisodeInfo] = {}


class EpisodeStatistics:
    """Sums each agent's rewards per env copy and hands out the returns of finished episodes.

    Args:
        possible_agents: agent ids in column order.
        num_envs: number of env copies.
        device: where the sums live.
    """

    def __init__(self, possible_agents: Sequence[str], num_envs: int, device: torch.device) -> None:
        self.possible_agents = list(possible_agents)
        self.returns = torch.zeros(num_envs, len(self.possible_agents), device=device)
        self.lengths = torch.zeros(num_envs, dtype=torch.long, device=device)
        # what a step without ended or dropped episodes hands out (read-only: made once, not per step)
        self._no_returns, self._no_lengths = self.returns[:0], self.lengths[:0]
        self._no_drops = torch.zeros(num_envs, dtype=torch.bool, device=device)
        self._no_drop_lengths = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.info_totals: Dict[str, torch.Tensor] = {}  # per entry of the env's infos: sums (num_envs, agents)
        self.info_last: Dict[str, torch.Tensor] = {}  # and the value at each agent's last step so far
        self.agents_done = torch.zeros(num_envs, len(self.possible_agents), dtype=torch.bool, device=device)

    def step(self, rewards: Mapping[str, torch.Tensor], terminated: Mapping[str, torch.Tensor],
             truncated: Mapping[str, torch.Tensor], infos: Mapping[str, Any]) -> EpisodeEnds:
        """Add one step; return the episodes of the copies that just ended. The episode of a copy whose
        env failed (``infos["failed"]``) is dropped, not returned.
        """
        self.returns += stack_agents(rewards, self.possible_agents).squeeze(-1)
        self.lengths += 1
        env_info = infos.get("env_info") if infos else None
        if env_info:
            for key, values in env_info.items():
                total = self.info_totals.get(key)
                self.info_totals[key] = values.to(self.returns.dtype, copy=True) if total is None else total + values
                last = self.info_last.get(key)  # agents that left earlier keep the value of the step they left
                self.info_last[key] = values.to(self.returns.dtype, copy=True) if last is None else \
                    torch.where(self.agents_done, last, values)
            self.agents_done |= stack_agents(terminated, self.possible_agents).squeeze(-1) | \
                stack_agents(truncated, self.possible_agents).squeeze(-1)
        ended = infos.get("episode_end") if infos else None
        if ended is None:
            done = stack_agents(terminated, self.possible_agents) | stack_agents(truncated, self.possible_agents)
            ended = done.all(dim=1)
        ended = ended.reshape(-1).bool()
        failed = infos.get("failed") if infos else None
        any_dropped = failed is not None and bool(failed.any())
        if any_dropped:
            dropped = failed.reshape(-1).bool()
            dropped_lengths = torch.where(dropped, self.lengths, 0)
            ended = ended & ~dropped
        else:
            dropped, dropped_lengths = self._no_drops, self._no_drop_lengths
            if not ended.any():
                return EpisodeEnds(ended, self._no_returns, self._no_lengths, dropped, dropped_lengths, False)
        episode_infos = {key: EpisodeInfo(self.info_totals[key][ended].clone(), self.info_last[key][ended].clone())
                         for key in (env_info or {})}
        finished = EpisodeEnds(ended, self.returns[ended].clone(), self.lengths[ended].clone(), dropped,
                               dropped_lengths, any_dropped, episode_infos)
        over = ended | dropped if any_dropped else ended
        self.returns[over] = 0.0
        self.lengths[over] = 0
        for total in self.info_totals.values():
            total[over] = 0.0
        self.agents_done[over] = False
        return finished

    def reset(self) -> None:
        """Forget running sums (after an env reset)."""
        self.returns.zero_()
        self.lengths.zero_()
        self.info_totals.clear()
        self.info_last.clear()
        self.agents_done.zero_()


def team_names(agents: Sequence[MultiAgent]) -> List[str]:
    """One name per algorithm: its class name, numbered where two algorithms share a class."""
    names = [type(agent).__name__ for agent in agents]
    return [f"{name}_{i}" if names.count(name) > 1 else name for i, name in enumerate(names)]


class Trainer:
    """Drives one or several algorithms on one environment.

    When several algorithms each own a subset of the agents (teams), every return the trainer
    shows or reports is per team: never one mean across opposing teams.

    Args:
        env: the wrapped environment.
        agents: one algorithm, or several that each own a disjoint subset of the agent ids.
        cfg: trainer options (see the subclass); their types and ranges (:data:`TRAINER_CONFIG_RANGES`) are
            checked here.
        eval_env: the env copies :meth:`eval` runs on; by default the trainer makes them with
            ``env.make_evaluation_env`` (separate copies, seeded apart from the training ones).
        callbacks: :class:`~marlparts.trainers.callbacks.Callback` objects, called at each step,
            episode end, update, evaluation and checkpoint.
        opponents: ``{agent_id: policy}`` for seats that no algorithm controls, played by a fixed
            policy in training and evaluation: ``"random"`` (uniform over legal actions), a function
            ``(observation, action_mask) -> action``, or a frozen algorithm
            (:mod:`marlparts.trainers.opponents`).
    """

    DEFAULT_CONFIG: Dict[str, Any] = {}

    def __init__(self, *, env: MultiAgentEnv, agents: Union[MultiAgent, Sequence[MultiAgent]],
                 cfg: Optional[Mapping[str, Any]] = None, eval_env: Optional[MultiAgentEnv] = None,
                 callbacks: Sequence[Callback] = (), opponents: Optional[Mapping[str, Any]] = None) -> None:
        self.env = env
        self.cfg = merge_config(self.DEFAULT_CONFIG, cfg or {}, path="trainer cfg")
        check_config(self.cfg, self.DEFAULT_CONFIG, possible_agents=(), per_agent_keys=(), path="trainer cfg")
        check_ranges(self.cfg, TRAINER_CONFIG_RANGES, path="trainer cfg")
        self.agents: List[MultiAgent] = list(agents) if isinstance(agents, (list, tuple)) else [agents]
        self.opponents = (Opponents(opponents, env, seed=derived_seed(env.seed, OPPONENT_STREAM, TRAINING_STREAM))
                          if opponents else None)
        self._check_ownership()
        self._check_turn_based(env)
        self._check_devices(env, "env")
        self.teams = team_names(self.agents)
        position = {uid: i for i, uid in enumerate(env.possible_agents)}
        # each algorithm's agents as columns of (envs, all agents) tensors such as episode returns
        self.agent_columns = [torch.as_tensor([position[uid] for uid in agent.possible_agents])
                              for agent in self.agents]
        self.callbacks: List[Callback] = list(callbacks)
        for callback in self.callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"callbacks must be marlparts Callback objects, got {type(callback).__name__}")
        for agent in self.agents:
            agent.callbacks = self.callbacks
        self._stop_requested = False
        self.eval_env = eval_env
        if eval_env is not None and list(eval_env.possible_agents) != list(env.possible_agents):
            raise ValueError(f"eval_env has agents {eval_env.possible_agents}, the training env {env.possible_agents}")
        if eval_env is not None:
            self._check_devices(eval_env, "eval_env")

    def _check_devices(self, env: MultiAgentEnv, name: str) -> None:
        """Raise ``ValueError`` if ``env`` returns tensors on another device than an algorithm computes on."""
        for agent in self.agents:
            if not same_device(torch.device(env.device), agent.device):
                raise ValueError(f"the {name} returns tensors on {env.device} but {type(agent).__name__} (agents "
                                 f"{agent.possible_agents}) computes on {agent.device}: "
                                 f"{env.placement_hint(str(agent.device))}, or build the algorithm with "
                                 f"device=env.device")

    def _check_turn_based(self, env: MultiAgentEnv) -> None:
        """Raise ``ValueError`` if an algorithm that cannot credit rewards given between an agent's turns is
        to train on a turn-based env (it would learn silently wrong values).
        """
        if not getattr(env, "turn_based", False):
            return
        for agent in self.agents:
            agent.turn_based = True
            if not agent.SUPPORTS_TURN_BASED:
                raise ValueError(f"{type(agent).__name__} cannot train on a turn-based env: its transitions go from one "
                                 "step to the next, so a reward that reaches an agent while it waits for its turn would "
                                 "be lost; train with MAPPO or IPPO (a frozen copy of any algorithm may still play a seat "
                                 "as an opponent)")

    def stop(self) -> None:
        """End ``train()`` after the current step (for callbacks: early stopping)."""
        self._stop_requested = True

    def log(self, name: str, value: Union[float, torch.Tensor]) -> None:
        """Track a figure of your own (from a callback) beside the built-in ones: every algorithm's tracker
        adds ``value`` (a number or a one-element tensor) under ``name``, written as the others are
        (TensorBoard, ``scalars.csv``, W&B), as the mean of the values added between two writes.
        """
        value = float(value.item() if isinstance(value, torch.Tensor) else value)
        for agent in self.agents:
            if agent.tracker is not None:
                agent.tracker.add(name, value)

    def notify(self, event: str, *args: Any) -> None:
        """Call ``event`` (``"on_step"``, ``"on_episode_end"``, ``"on_evaluation"``) on every callback."""
        for callback in self.callbacks:
            getattr(callback, event)(self, *args)

    def _check_ownership(self) -> None:
        env, owners, memories = self.env, {}, {}
        for agent in self.agents:
            for uid in agent.possible_agents:
                if uid not in env.possible_agents:
                    raise KeyError(f"{type(agent).__name__} controls {uid!r}, which is not an agent of the environment "
                                   f"(possible agents: {env.possible_agents})")
                if uid in owners:
                    raise ValueError(f"agent id {uid!r} is controlled by two algorithms")
                owners[uid] = type(agent).__name__
            for group in agent.groups:
                if group.memory is not None:
                    other = memories.setdefault(id(group.memory), agent)
                    if other is not agent:
                        raise ValueError(f"{type(agent).__name__} and {type(other).__name__} were given the same Memory: "
                                         "give each algorithm its own memories")
        check_seats(self.opponents, list(owners))
        for uid in self.opponents.seats if self.opponents is not None else ():
            owners[uid] = "opponents"
        uncontrolled = [uid for uid in env.possible_agents if uid not in owners]
        if uncontrolled:
            raise ValueError(f"no algorithm controls agent(s) {uncontrolled}, and no opponent plays them")

    def _act(self, observations: Any, states: Any, infos: Any, timestep: int, timesteps: int, *,
             opponents: Optional[Opponents] = None, lags: Optional[Sequence[int]] = None) -> Dict[str, torch.Tensor]:
        """Every algorithm's actions, then the fixed policies' (``opponents``, by default the trainer's) in
        their seats. ``lags``: how many steps each algorithm's own step count is behind ``timestep`` (none).
        """
        opponents = opponents or self.opponents
        actions: Dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for agent, lag in zip(self.agents, lags or [0] * len(self.agents)):
                actions.update(agent.act(observations, states, infos, timestep - lag, timesteps - lag))
            if opponents is not None:
                actions.update(opponents.act(observations, states, infos, timestep, timesteps))
        return actions
