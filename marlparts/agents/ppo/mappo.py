"""Multi-Agent PPO (Yu et al., 2022): decentralised policies, a centralised critic on the global state."""

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.agents.ppo.core import PPO_DEFAULT_CONFIG, MultiAgentPPO
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MAPPO_DEFAULT_CONFIG: Config = PPO_DEFAULT_CONFIG.copy()
# how the centralised critic tells the agents it values apart:
#   "outputs": it reads the global state once per env copy and outputs one value per agent
#   "one_hot": it reads the global state plus a one-hot agent id and outputs one value
#   "none":    it reads the global state and outputs one value shared by every agent
MAPPO_DEFAULT_CONFIG["agent_specific_values"] = "outputs"

CRITIC_MODES = ("outputs", "one_hot", "none")


class MAPPO(MultiAgentPPO):
    """MAPPO: each agent's critic reads the global state (``env.state()``).

    Where agents' rewards differ the critic must know which agent it values. The default,
    ``cfg["agent_specific_values"] = "outputs"``, gives the critic one output per agent: it
    reads the global state once per env copy, so its cost does not grow with the number of
    agents, and each agent trains its own output. Build it with
    ``Value(observation_space=env.state_space, output_size=env.num_agents)``.

    ``"one_hot"`` is the paper's agent-specific global state: the global state followed by a
    one-hot agent id, one output; build the critic with
    ``observation_space=append_agent_id(env.state_space, env.num_agents)``. ``"none"`` (for
    shared rewards) reads the global state and outputs one value for every agent.

    The state preprocessor, when configured, standardises the global state. See
    :class:`MultiAgentPPO` for the update.
    """

    DEFAULT_CONFIG = MAPPO_DEFAULT_CONFIG
    USES_STATE = True

    def __init__(self, **kwargs) -> None:
        mode = (kwargs.get("cfg") or {}).get("agent_specific_values", MAPPO_DEFAULT_CONFIG["agent_specific_values"])
        if mode not in CRITIC_MODES:
            raise ValueError(f"cfg['agent_specific_values'] must be one of {CRITIC_MODES}, got {mode!r}")
        super().__init__(**kwargs)

    def critic_input_size(self, uid: str) -> int:
        """Size of the global state."""
        return flat_size(self.state_spaces[uid])

    def value_model_shape(self, uid: str) -> Tuple[int, int]:
        """``(state size [+ number of agents for "one_hot"], number of agents for "outputs" else 1)``."""
        mode, agents = self.cfg["agent_specific_values"], len(self.possible_agents)
        return self.critic_input_size(uid) + (agents if mode == "one_hot" else 0), agents if mode == "outputs" else 1

    def critic_hint(self) -> str:
        """Name the option that shapes the critic."""
        return f" with cfg['agent_specific_values']={self.cfg['agent_specific_values']!r}"

    def critic_input_rows(self, record: TrainedModel) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The stored global states: one row per env copy and step (every group stores the same ones), for
        each critic of the group.
        """
        group = next(group for group in self.groups if group.trained["value"] is record)
        states = group.memory.get_tensor_by_name("states")
        rows = states.unsqueeze(2).expand(-1, -1, group.model_count("value"), -1)
        return record.rows_per_model(rows, torch.ones(rows.shape[:3], dtype=torch.bool, device=rows.device))

    def predict_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                       inputs: Optional[Mapping[str, torch.Tensor]] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Critic outputs ``(batch, group size, 1)`` for the group's agents from the global state.

        Each of the group's critics (one, or one per agent) reads the state of every env copy through its
        own preprocessor; with ``"one_hot"`` each agent's row gets its one-hot id, and with ``"outputs"``
        each agent takes its own output.
        """
        mode = self.cfg["agent_specific_values"]
        batch, size = observations.shape[:2]
        critics = group.model_count("value")
        rows = states.unsqueeze(1).expand(batch, critics, -1).flatten(0, 1)
        rows = self._preprocess_states(group, rows).unflatten(0, (batch, critics))
        if mode == "one_hot":  # one row per agent: its critic's view of the state, and its id
            one_hot = F.one_hot(group.agent_indexes.to(rows.device), len(self.possible_agents)).to(rows.dtype)
            rows = torch.cat([rows.expand(batch, size, -1), one_hot.expand(batch, size, -1)], dim=-1)
        predicted, outputs = self.critic(group, rows.flatten(0, 1), inputs)
        predicted = predicted.unflatten(0, rows.shape[:2]).expand(batch, size, -1)  # each agent its critic's output
        if mode == "outputs":  # one output per agent: the agent's own
            predicted = predicted.gather(-1, group.agent_indexes.to(predicted.device).view(1, size, 1).expand(batch, size, 1))
        return predicted, outputs
