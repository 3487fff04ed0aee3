"""Independent PPO (de Witt et al., 2020): every critic reads only its own agent's observation."""

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.agents.ppo.core import PPO_DEFAULT_CONFIG, MultiAgentPPO
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

IPPO_DEFAULT_CONFIG: Config = PPO_DEFAULT_CONFIG.copy()


class IPPO(MultiAgentPPO):
    """IPPO: decentralised critics on each agent's own observation; no global state is needed.

    Build the value model with ``observation_space=env.observation_space(uid)``. The state
    preprocessor, when configured, standardises the critic's observation input.
    See :class:`MultiAgentPPO` for the update.
    """

    DEFAULT_CONFIG = IPPO_DEFAULT_CONFIG
    USES_STATE = False

    def agent_row_roles(self) -> Tuple[str, ...]:
        """Policy and critic both read one row per agent of their group (each agent's own observation)."""
        return ("policy", "value")

    def critic_input_size(self, uid: str) -> int:
        """Size of the agent's flattened observation."""
        return flat_size(self.observation_spaces[uid])

    def critic_input_rows(self, record: TrainedModel) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The stored observations of the agents that use the critic, at their active steps (per member of
        stacked critics).
        """
        return self.record_rows(record, "observations")

    def predict_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                       inputs: Optional[Mapping[str, torch.Tensor]] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """The critic on each agent's own (standardised if configured) observation: one row per agent."""
        rows = self._preprocess_states(group, observations.flatten(0, 1))
        predicted, outputs = self.critic(group, rows, inputs)
        return predicted.unflatten(0, observations.shape[:2]), outputs
