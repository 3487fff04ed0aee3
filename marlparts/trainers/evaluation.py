"""Evaluation episodes without bias toward short ones, and their summary per agent and per team.

Keeping "the first N episodes to finish" over a batch of copies favours short episodes (they
finish first). Here each copy is given a fixed number of episodes, all started after the
evaluation began, and every one of them is kept, however long it takes.
"""

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence

import numpy as np
import torch

from marlparts.envs.base import MultiAgentEnv
from marlparts.trainers.base import EpisodeStatistics

Act = Callable[[Any, Any, Any], Mapping[str, torch.Tensor]]


def episodes_per_copy(episodes: int, num_envs: int) -> torch.Tensor:
    """How many episodes each copy runs so that they add up to ``episodes`` (the first copies take one more)."""
    quota = torch.full((num_envs,), episodes // num_envs, dtype=torch.long)
    quota[: episodes % num_envs] += 1
    return quota


class Episodes(NamedTuple):
    """What an evaluation collected: ``returns`` ``(episodes, num_agents)``, ``lengths`` ``(episodes,)``,
    ``frames`` ``(time, height, width, 3)`` of copy 0's first episode when recorded (else None), and
    ``env_info``: per entry of the env's ``info_keys``, its sum over each episode ``(episodes, num_agents)``.
    """

    returns: torch.Tensor
    lengths: torch.Tensor
    frames: Optional[np.ndarray]
    env_info: Dict[str, torch.Tensor] = {}


def collect_episodes(env: MultiAgentEnv, act: Act, episodes: int, *, seed: Optional[int],
                     record_video: bool = False) -> Episodes:
    """Reset ``env`` with ``seed`` (the same seed at every evaluation gives the same episodes) and
    run ``episodes`` whole episodes, a fixed number per copy.

    Args:
        env: the evaluation copies.
        act: ``act(observations, states, infos) -> actions``.
        episodes: how many episodes to collect.
        seed: the seed of the reset (None: unseeded).
        record_video: keep the frames of copy 0's first episode: its first frame and one per step,
            the last one included (``length + 1`` frames).
    """
    if episodes < 1:
        raise ValueError(f"evaluation needs at least one episode, got {episodes}")
    quota = episodes_per_copy(episodes, env.num_envs).to(env.device)
    finished = torch.zeros_like(quota)
    statistics = EpisodeStatistics(env.possible_agents, env.num_envs, env.device)
    observations, infos = env.reset(seed=seed)
    states = env.state()
    returns: List[torch.Tensor] = []
    lengths: List[torch.Tensor] = []
    env_info: Dict[str, List[torch.Tensor]] = {}
    frames, recording = None, record_video
    if recording:
        env.start_recording()
    try:
        while bool((finished < quota).any()):
            actions = act(observations, states, infos)
            observations, rewards, terminated, truncated, infos = env.step(actions)
            states = env.state()
            ends = statistics.step(rewards, terminated, truncated, infos)
            if ends.returns.shape[0]:
                wanted = (finished < quota)[ends.copies]
                returns.append(ends.returns[wanted])
                lengths.append(ends.lengths[wanted])
                for key, info in ends.infos.items():
                    env_info.setdefault(key, []).append(info.total[wanted])
                finished += ends.copies.long()
                if recording and bool(ends.copies[0]):
                    frames, recording = env.stop_recording(), False
    finally:
        if recording:
            env.stop_recording()
    return Episodes(torch.cat(returns).cpu(), torch.cat(lengths).cpu(), frames,
                    {key: torch.cat(totals).cpu() for key, totals in env_info.items()})


TEAM_RETURNS = ("mean", "sum")


def summarise(returns: torch.Tensor, lengths: torch.Tensor, possible_agents: Sequence[str],
              teams: Mapping[str, Sequence[str]], timestep: int, *, outcomes: bool = False,
              env_info: Optional[Mapping[str, torch.Tensor]] = None, team_return: str = "mean") -> Dict[str, Any]:
    """The evaluation report: per agent, per team (each episode's team return, the mean or the sum of its
    agents' returns as ``team_return`` says, and their mean and standard deviation over episodes) and, at
    the top level, the single team's figures, or where no team played (fixed policies in every seat)
    those of the mean return over every seat; several teams are never averaged together. With
    ``outcomes``, each agent's rates of episodes won, drawn and lost (return > 0, = 0, < 0). A team that played
    every seat of a game whose returns sum to zero has ``"zero_sum_self_play": True`` (:func:`zero_sum_self_play`).
    With ``env_info`` (per entry of the env's ``info_keys``, its sum over each episode), each agent's mean of
    those sums.
    """
    column = {uid: i for i, uid in enumerate(possible_agents)}
    per_agent = dict(zip(possible_agents, returns.mean(dim=0).tolist()))
    report: Dict[str, Any] = {"episodes": int(returns.shape[0]), "timestep": int(timestep),
                              "mean_length": float(lengths.float().mean()), "returns": per_agent, "teams": {}}
    if team_return not in TEAM_RETURNS:
        raise ValueError(f"team_return must be one of {TEAM_RETURNS}, got {team_return!r}")
    for name, uids in teams.items():
        members = returns[:, [column[uid] for uid in uids]]
        team_returns = members.sum(dim=1) if team_return == "sum" else members.mean(dim=1)
        report["teams"][name] = {
            "mean_return": float(team_returns.mean()),
            "std_return": float(team_returns.std()) if team_returns.numel() > 1 else 0.0,
            "episode_returns": team_returns.tolist(),
            "returns": {uid: per_agent[uid] for uid in uids},
            "mean_length": report["mean_length"],
        }
        if zero_sum_self_play(returns, len(uids) == len(possible_agents)):
            report["teams"][name]["zero_sum_self_play"] = True
    if env_info:
        report["env_info"] = {key: dict(zip(possible_agents, totals.mean(dim=0).tolist()))
                              for key, totals in env_info.items()}
    if outcomes:
        report["outcomes"] = {uid: {"win": float((returns[:, i] > 0).float().mean()),
                                    "draw": float((returns[:, i] == 0).float().mean()),
                                    "loss": float((returns[:, i] < 0).float().mean())}
                              for i, uid in enumerate(possible_agents)}
    if len(teams) == 1:
        (team,) = report["teams"].values()
        report["mean_return"], report["std_return"] = team["mean_return"], team["std_return"]
    elif not teams:  # fixed policies in every seat: the mean over every seat (teams are never averaged together)
        every_seat = returns.mean(dim=1)
        report["mean_return"] = float(every_seat.mean())
        report["std_return"] = float(every_seat.std()) if every_seat.numel() > 1 else 0.0
    return report


def zero_sum_self_play(returns: torch.Tensor, plays_every_seat: bool) -> bool:
    """Whether a team that ``plays_every_seat`` (``returns`` ``(episodes, seats)``) played a game whose seats'
    returns sum to zero in every episode, some of them not zero: its team return is then 0 by construction and
    says nothing of how well it plays (a self-play evaluation of tic-tac-toe, say).
    """
    if not plays_every_seat or returns.shape[1] < 2 or returns.numel() == 0:
        return False
    returns = returns.double()
    scale = returns.abs().sum(dim=1)  # per episode: a large episode does not hide another's sum
    return bool((scale > 0).any()) and bool((returns.sum(dim=1).abs() <= 1e-5 * scale).all())


def learning_curve_point(report: Mapping[str, Any], team: str, passes: Mapping[str, Mapping[str, Any]]
                         ) -> Dict[str, Any]:
    """One point of a team's learning curve from an evaluation ``report`` and its ``passes`` (``"greedy"``
    and/or ``"sampled"`` to the report of each): the step counts, and per pass the team's mean return and
    its return of every episode (``{}`` for a pass in which the team played no seat).
    """
    point: Dict[str, Any] = {"timestep": report["timestep"], "env_steps": report["env_steps"],
                             "episodes": report["episodes"]}
    for actions, passed in passes.items():
        figures = passed["teams"].get(team)
        point[actions] = {} if figures is None else {"mean_return": figures["mean_return"],
                                                     "episode_returns": figures["episode_returns"]}
    return point
