"""Mean-field actor-critic (Yang et al., 2018): each agent's critic reads its own observation and the mean action
of the other agents of its team, so its cost does not grow with the number of agents.
"""

from typing import Any, Optional, Tuple

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.mean_field import others_mean_actions
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.agents.ppo.coma import COMA, COMA_DEFAULT_CONFIG
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MFAC_DEFAULT_CONFIG: Config = COMA_DEFAULT_CONFIG.copy()


class MFAC(COMA):
    """MFAC for discrete actions: ``π_i(a|o_i)`` and a critic ``Q(o_i, ā_i, ·)`` of every own action, where
    ``ā_i`` is the mean one-hot action of the other agents active at the step (an agent that died or left is
    out of the mean).

    The critic (the ``"value"`` role, one instance for every agent of the team) reads the agent's
    observation followed by the ``ā_i`` of its ``actions`` values, and outputs a value per action: build it
    with ``joint_space([env.observation_space(uid), Box(0, 1, (actions,))])``. Every agent of the algorithm
    must have the same number of actions. The update is :class:`COMA`'s with this critic: the advantage
    ``A_i = Q(o_i, ā_i)[u_i] − Σ_a π_i(a|o_i) Q(o_i, ā_i)[a]``, the critic on TD(λ) returns, then one pass
    of the actors on ``−A_i log π_i``. No global state is needed.
    """

    DEFAULT_CONFIG = MFAC_DEFAULT_CONFIG
    USES_STATE = False

    def __init__(self, **kwargs: Any) -> None:
        spaces = kwargs.get("action_spaces") or {}
        counts = {uid: getattr(spaces.get(uid), "n", None) for uid in kwargs.get("possible_agents") or []}
        if len({int(n) for n in counts.values() if n is not None}) > 1:
            raise ValueError(f"MFAC averages the other agents' one-hot actions, so every agent must have the same "
                             f"number of actions; got {counts}")
        super().__init__(**kwargs)

    def critic_input_size(self, uid: str) -> int:
        """Size of the agent's observation (what the state preprocessor standardises)."""
        return flat_size(self.observation_spaces[uid])

    def value_model_shape(self, uid: str) -> Tuple[int, int]:
        """``(observation + actions, actions)``."""
        actions = int(self.action_spaces[uid].n)
        return self.critic_input_size(uid) + actions, actions

    def critic_input_rows(self, record: TrainedModel) -> torch.Tensor:
        """The stored observations of the agents at their active steps."""
        return self.record_rows(record, "observations")

    def critic_inputs(self, group: AgentGroup, states: Optional[torch.Tensor], observations: torch.Tensor,
                      joint_actions: torch.Tensor) -> torch.Tensor:
        """Each agent's (standardised) observation followed by the mean action of the other active agents."""
        mean = others_mean_actions(joint_actions, group.agent_indexes, self.action_counts[0])
        rows = self._preprocess_states(group, observations.flatten(0, 1)).unflatten(0, observations.shape[:2])
        return torch.cat([rows, mean.to(rows.dtype)], dim=-1)
