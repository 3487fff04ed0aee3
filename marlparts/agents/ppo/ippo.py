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

    Policy and critic read the same input, so one model may be both (``models[uid] = {"policy": m,
    "value": m}``, e.g. one convolutional encoder with a policy head and a value head): its
    ``compute(inputs, role="policy")`` returns the policy's output and ``outputs["values"]``, the
    update takes both from that one forward pass, and ``compute(inputs, role="value")`` returns the
    values alone (for the rollout's values and bootstrapping). One optimizer steps it on the sum of the
    losses; the observation preprocessor standardises its input (``cfg["state_preprocessor"]`` must be
    the same); with PopArt the model names its value layer as ``self.output_layer``.
    """

    DEFAULT_CONFIG = IPPO_DEFAULT_CONFIG
    USES_STATE = False
    SHARED_ROLES = ("policy", "value")

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
