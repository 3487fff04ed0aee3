"""The preprocessors of the PPO algorithms: standardised policy and critic inputs, normalised values."""

from typing import List, Optional, Union

import torch
from torch import nn

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.trained_model import TrainedModel


class PPOPreprocessingMixin:
    """Each trained model's preprocessors in the PPO algorithms: the observation preprocessor of a policy,
    the state preprocessor of a critic and its value normaliser (kept in the model's record), built from
    ``cfg`` and folded in once per update from the rollout's active steps. Part of
    :class:`~marlparts.agents.ppo.core.MultiAgentPPO`, which provides ``critic_input_rows``.
    """

    def _make_preprocessor(self, key: str, size: int, record: TrainedModel) -> Optional[nn.Module]:
        """The preprocessor of ``cfg[key]`` for ``size`` features of ``record``'s model (None if not configured)."""
        preprocessor_class = self.cfg[key]
        if preprocessor_class is None:
            return None
        return record.make_preprocessor(preprocessor_class, size, self.cfg[f"{key}_kwargs"], self.device)

    def _make_value_normaliser(self, record: TrainedModel, *, also_policy: bool = False) -> Optional[nn.Module]:
        """The value normaliser of ``cfg["value_preprocessor"]`` for the critic of ``record`` (None if not configured),
        attached to the critic where it preserves the critic's outputs (:class:`~marlparts.resources.PopArt`);
        ``also_policy``: the critic is its agents' policy too (one network, two heads).
        """
        normaliser = self._make_preprocessor("value_preprocessor", 1, record)
        if normaliser is not None and hasattr(normaliser, "preserve_outputs_of"):
            if also_policy:
                normaliser.preserve_outputs_of(record.model, also_policy=True)
            else:
                normaliser.preserve_outputs_of(record.model)
        return normaliser

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
            for record in self.trained:  # (a model that is policy and value has one record, of role "policy")
                if record.role == "policy" and record.input_preprocessor is not None:
                    record.input_preprocessor.update(self.record_rows(record, "observations"))
                if record.role == "value" and record.input_preprocessor is not None:
                    record.input_preprocessor.update(self.critic_input_rows(record))
                if record.value_normaliser is not None:
                    record.value_normaliser.update(self.record_rows(record, "returns"))

    def record_rows(self, record: TrainedModel, name: str) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The rows of stored tensor ``name`` at the active steps of the agents that use ``record``'s model, as
        its preprocessors take them in (:meth:`~marlparts.agents.common.trained_model.TrainedModel.rows_per_model`).
        """
        rows = [record.rows_per_model(group.memory.get_tensor_by_name(name),
                                      group.memory.get_tensor_by_name("active").squeeze(-1))
                for group in self.groups if group.trained.get(record.role) is record]
        return rows[0] if len(rows) == 1 else torch.cat(rows)
