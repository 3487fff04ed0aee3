"""Multi-Agent PPO (Yu et al., 2022): decentralised policies, a centralised critic on the global state."""

from typing import Optional

import torch
import torch.nn.functional as F

from marlparts.agents.groups import AgentGroup
from marlparts.agents.ppo_core import PPO_DEFAULT_CONFIG, MultiAgentPPO
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MAPPO_DEFAULT_CONFIG: Config = PPO_DEFAULT_CONFIG.copy()
MAPPO_DEFAULT_CONFIG["value_agent_id"] = True  # the critic also reads a one-hot id of the agent it values


class MAPPO(MultiAgentPPO):
    """MAPPO: each agent's critic reads the global state (``env.state()``).

    With ``cfg["value_agent_id"]`` (the default) the critic input is the global state followed
    by a one-hot id of the agent being valued, the paper's agent-specific global state: one
    shared critic can then tell apart agents whose rewards differ. Build the value model with
    ``observation_space=append_agent_id(env.state_space, env.num_agents)`` in that case, or
    with ``env.state_space`` when the option is off.

    The state preprocessor, when configured, standardises the global state before the id is
    appended. See :class:`MultiAgentPPO` for the update.
    """

    DEFAULT_CONFIG = MAPPO_DEFAULT_CONFIG
    USES_STATE = True

    def critic_input_size(self, uid: str) -> int:
        """Size of the global state."""
        return flat_size(self.state_spaces[uid])

    def value_input_size(self, uid: str) -> int:
        """Global state size, plus the number of agents with ``value_agent_id``."""
        extra = len(self.possible_agents) if self.cfg["value_agent_id"] else 0
        return self.critic_input_size(uid) + extra

    def value_inputs(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                     train: bool = False) -> torch.Tensor:
        """Global state (standardised if configured), repeated for each agent of the group, plus its one-hot id."""
        preprocessor = self.state_preprocessors[id(group.models["value"])]
        if preprocessor is not None:
            states = preprocessor(states, train=train)
        batch, size = observations.shape[:2]
        inputs = states.unsqueeze(1).expand(batch, size, states.shape[-1])
        if self.cfg["value_agent_id"]:
            one_hot = F.one_hot(group.agent_indexes.to(states.device), len(self.possible_agents)).to(states.dtype)
            inputs = torch.cat([inputs, one_hot.expand(batch, size, -1)], dim=-1)
        return inputs.flatten(0, 1)
