"""What every trainer shares: the agents it drives and per-episode statistics."""

from typing import Any, Dict, List, Mapping, Sequence, Union

import torch

from marlparts.agents.base import MultiAgent
from marlparts.envs.base import MultiAgentEnv
from marlparts.utils.agent_tensors import stack_agents


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

    def step(self, rewards: Mapping[str, torch.Tensor], terminated: Mapping[str, torch.Tensor],
             truncated: Mapping[str, torch.Tensor], infos: Mapping[str, Any]) -> torch.Tensor:
        """Add one step; return ``(finished episodes, num_agents)`` returns of the copies that just ended."""
        self.returns += stack_agents(rewards, self.possible_agents).squeeze(-1).to(self.returns.dtype)
        self.lengths += 1
        ended = infos.get("episode_end") if infos else None
        if ended is None:
            done = stack_agents(terminated, self.possible_agents) | stack_agents(truncated, self.possible_agents)
            ended = done.all(dim=1)
        ended = ended.reshape(-1).bool()
        if not ended.any():
            return self.returns[:0]
        finished = self.returns[ended].clone()
        self.returns[ended] = 0.0
        self.lengths[ended] = 0
        return finished

    def reset(self) -> None:
        """Forget running sums (after an env reset)."""
        self.returns.zero_()
        self.lengths.zero_()


class Trainer:
    """Drives one or several algorithms on one environment.

    Args:
        env: the wrapped environment.
        agents: one algorithm, or several that each own a disjoint subset of the agent ids.
        cfg: trainer options (see the subclass).
    """

    DEFAULT_CONFIG: Dict[str, Any] = {}

    def __init__(self, *, env: MultiAgentEnv, agents: Union[MultiAgent, Sequence[MultiAgent]],
                 cfg: Mapping[str, Any] = None) -> None:
        from marlparts.utils.config import merge_config

        self.env = env
        self.cfg = merge_config(self.DEFAULT_CONFIG, cfg or {}, path="trainer cfg")
        self.agents: List[MultiAgent] = list(agents) if isinstance(agents, (list, tuple)) else [agents]
        owners: Dict[str, str] = {}
        for agent in self.agents:
            for uid in agent.possible_agents:
                if uid not in env.possible_agents:
                    raise KeyError(f"{type(agent).__name__} controls {uid!r}, which is not an agent of the environment "
                                   f"(possible agents: {env.possible_agents})")
                if uid in owners:
                    raise ValueError(f"agent id {uid!r} is controlled by two algorithms")
                owners[uid] = type(agent).__name__
        uncontrolled = [uid for uid in env.possible_agents if uid not in owners]
        if uncontrolled:
            raise ValueError(f"no algorithm controls agent(s) {uncontrolled}")
        position = {uid: i for i, uid in enumerate(env.possible_agents)}
        # each algorithm's agents as columns of (envs, all agents) tensors such as episode returns
        self.agent_columns = [torch.as_tensor([position[uid] for uid in agent.possible_agents])
                              for agent in self.agents]

    def _act(self, observations: Any, states: Any, infos: Any, timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        actions: Dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for agent in self.agents:
                actions.update(agent.act(observations, states, infos, timestep, timesteps))
        return actions
