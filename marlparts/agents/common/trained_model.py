"""One record per model an algorithm trains: the model and everything that belongs to it."""

from dataclasses import dataclass
from typing import AbstractSet, Any, Dict, List, Mapping, Optional, Type, Union

import torch
from torch import nn

from marlparts.models.base import Model


def optimizer_parameters(optimizer: torch.optim.Optimizer) -> List[torch.Tensor]:
    """Every parameter ``optimizer`` steps, in its parameter groups' order."""
    return [parameter for group in optimizer.param_groups for parameter in group["params"]]


def active_rows(values: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """The rows of ``values`` ``(..., features)`` where ``active`` ``(...)`` is True, in order: ``values[active]``,
    or, when every entry is active (the common case), the rows as they are, without a masked copy.
    """
    if active.shape == values.shape[:-1] and bool(active.all()):
        return values.reshape(-1, values.shape[-1])
    return values[active]


@dataclass(eq=False)
class TrainedModel:
    """A distinct model and what the algorithm keeps for it.

    Attributes:
        name: ``role[agents]``, e.g. ``policy[agent_0+agent_1]``: the model's name in checkpoints and logs.
        role: the role the model plays (``"policy"``, ``"value"``, ``"critic"``, ...).
        model: the model.
        owners: the agents that use it, in ``possible_agents`` order.
        optimizer: its optimizer.
        scheduler: its learning-rate scheduler, if any.
        target: its target copy (off-policy algorithms), if any.
        input_preprocessor: standardises its inputs (observations or state), if configured.
        value_normaliser: standardises the targets of a value function, if configured.
        grad_norm_clip: the gradient-norm limit of its optimizer steps (0: none).
        takes_steps: whether :meth:`~marlparts.agents.common.optimization.OptimizationMixin.optimize` steps it
            (:meth:`plan_steps`: False for the update of a rollout in which none of its agents acted).
    """

    name: str
    role: str
    model: Model
    owners: List[str]
    optimizer: Optional[torch.optim.Optimizer] = None
    scheduler: Optional[Any] = None
    target: Optional[nn.Module] = None
    input_preprocessor: Optional[nn.Module] = None
    value_normaliser: Optional[nn.Module] = None
    grad_norm_clip: float = 0.0
    takes_steps: bool = True

    def checkpoint_parts(self) -> Dict[str, Any]:
        """``{name: object with state_dict/load_state_dict}`` of everything this record holds."""
        parts: Dict[str, Any] = {self.name: self.model}
        for prefix, part in (("optimizer", self.optimizer), ("scheduler", self.scheduler), ("target", self.target),
                             ("preprocessor", self.input_preprocessor), ("value_normaliser", self.value_normaliser)):
            if part is not None:
                parts[f"{prefix}:{self.name}"] = part
        return parts

    def make_preprocessor(self, preprocessor_class: Type[nn.Module], size: int, kwargs: Mapping[str, Any],
                          device: torch.device) -> nn.Module:
        """A preprocessor of class ``preprocessor_class`` for ``size`` features of this model's inputs or values."""
        return preprocessor_class(size, **kwargs).to(device)

    def rows_per_model(self, values: torch.Tensor, active: torch.Tensor) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The rows of ``values`` ``(..., agents, features)`` where ``active`` ``(..., agents)`` is True, as this
        record's preprocessors take them in: one tensor for its model.
        """
        return active_rows(values, active)

    def learning_rate(self) -> float:
        """The optimizer's current learning rate."""
        return float(self.optimizer.param_groups[0]["lr"])

    def learning_rates(self) -> Dict[str, float]:
        """``{name: learning rate}`` of the model(s) this record trains, for the logs."""
        return {self.name: self.learning_rate()}

    def trained_parameters(self) -> List[torch.Tensor]:
        """The parameters its optimizer steps (read from the optimizer: no walk over the model's modules)."""
        return optimizer_parameters(self.optimizer)

    def zero_gradients(self) -> None:
        """Forget the gradients of the trained parameters (set them to None)."""
        for parameter in self.trained_parameters():
            parameter.grad = None

    def clip_gradients(self) -> None:
        """Scale the gradient of the trained parameters to norm at most ``grad_norm_clip`` (0: no clipping)."""
        if self.grad_norm_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.trained_parameters(), self.grad_norm_clip)

    def plan_steps(self, acted: AbstractSet[str]) -> None:
        """Before an update: the model takes steps in it only if one of its owners is in ``acted`` (the agents
        with an active sample in the rollout). A model whose agents all sat out the rollout has empty losses:
        its zero gradients would still move it through the optimizer's momentum and weight decay, as they would
        not a model that was not trained at all.
        """
        self.takes_steps = any(owner in acted for owner in self.owners)

    def step(self, scaler: Optional[Any] = None) -> None:
        """The optimizer step on the gradients computed: unscaled by the mixed-precision ``scaler`` if any (which
        then takes the step, skipping it on non-finite gradients), clipped to ``grad_norm_clip``.
        """
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        self.clip_gradients()
        if scaler is not None:
            scaler.step(self.optimizer)
        else:
            self.optimizer.step()
