"""The preprocessors of the PPO algorithms: standardised policy and critic inputs, normalised values."""

from typing import List, Optional, Union

import torch
from torch import nn

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.stacking import StackedScaler, StackedTrainedModel
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.resources.preprocessors import RunningStandardScaler


class PPOPreprocessingMixin:
    """Each trained model's preprocessors in the PPO algorithms: the observation preprocessor of a policy,
    the state preprocessor of a critic and its value normaliser (kept in the model's record), built from
    ``cfg`` and folded in once per update from the rollout's active steps. Part of
    :class:`~marlparts.agents.ppo.core.MultiAgentPPO`, which provides ``critic_input_rows``.
    """

    def _make_preprocessor(self, key: str, size: int, members: int = 0) -> Optional[nn.Module]:
        """The preprocessor of ``cfg[key]`` for ``size`` features (None if not configured); with ``members``,
        one per member of a stack, applied together by a :class:`StackedScaler`.
        """
        preprocessor_class = self.cfg[key]
        if preprocessor_class is None:
            return None
        if members:
            if preprocessor_class is not RunningStandardScaler:
                raise TypeError(f"cfg[{key!r}] = {preprocessor_class.__name__}: agents whose models are stacked use "
                                "RunningStandardScaler; set cfg['stack_models'] = False for other preprocessors")
            return StackedScaler([preprocessor_class(size, **self.cfg[f"{key}_kwargs"]).to(self.device)
                                  for _ in range(members)])
        return preprocessor_class(size, **self.cfg[f"{key}_kwargs"]).to(self.device)

    def observation_preprocessor(self, group: AgentGroup) -> Optional[nn.Module]:
        """The preprocessor of the group's policy inputs (None if not configured)."""
        return group.trained["policy"].input_preprocessor

    def state_preprocessor(self, group: AgentGroup) -> Optional[nn.Module]:
        """The preprocessor of the group's critic inputs (None if not configured)."""
        return group.trained["value"].input_preprocessor

    def value_normaliser(self, group: AgentGroup) -> Optional[nn.Module]:
        """The value normaliser of the group's critic (None if not configured)."""
        return group.trained["value"].value_normaliser

    def _preprocess_states(self, group: AgentGroup, inputs: torch.Tensor) -> torch.Tensor:
        preprocessor = self.state_preprocessor(group)
        return inputs if preprocessor is None else preprocessor(inputs)

    def _policy_inputs(self, group: AgentGroup, observations: torch.Tensor) -> torch.Tensor:
        preprocessor = self.observation_preprocessor(group)
        flat = observations.flatten(0, 1)
        return flat if preprocessor is None else preprocessor(flat)

    def update_preprocessors(self) -> None:
        """Fold the rollout into the running statistics, active steps only: policy inputs into the
        observation preprocessors, critic inputs into the state preprocessors, returns into the
        value normalisers. Called once the update is done.
        """
        with torch.no_grad():
            for record in self.trained:
                if record.role == "policy" and record.input_preprocessor is not None:
                    record.input_preprocessor.update(self.record_rows(record, "observations"))
                if record.role == "value":
                    if record.input_preprocessor is not None:
                        record.input_preprocessor.update(self.critic_input_rows(record))
                    if record.value_normaliser is not None:
                        record.value_normaliser.update(self.record_rows(record, "returns"))

    def record_rows(self, record: TrainedModel, name: str) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The rows of stored tensor ``name`` at the active steps of the agents that use ``record``'s model;
        for a stack (one merged group), one tensor per member, each agent's own rows.
        """
        groups = [group for group in self.groups if group.trained.get(record.role) is record]
        if isinstance(record, StackedTrainedModel):
            values = groups[0].memory.get_tensor_by_name(name)
            active = groups[0].memory.get_tensor_by_name("active").squeeze(-1)
            return [values[:, :, k][active[:, :, k]] for k in range(groups[0].size)]
        return torch.cat([self._active_rows(group, name) for group in groups])

    @staticmethod
    def _active_rows(group: AgentGroup, name: str) -> torch.Tensor:
        """The rows of stored tensor ``name`` (with an agent axis) at the group's active steps."""
        return group.memory.get_tensor_by_name(name)[group.memory.get_tensor_by_name("active").squeeze(-1)]
