"""Agents with separate models of one class and shape, trained as one group: stacked parameters.

:func:`stack_groups` merges the one-agent groups whose models can be stacked
(:class:`~marlparts.models.stacked.StackedModels`) into one group that acts, predicts values and
updates in one batched computation. What belongs to each agent stays the agent's own, and
checkpoints hold it under the same names as without stacking, so a checkpoint does not depend
on how the work was batched: each member model (its parameters share memory with the stack),
its slice of the stacked optimizer's state
(:class:`~marlparts.agents.common.stacked_optimizer.StackedOptimizerSlice`), and its own
preprocessors, whose statistics :class:`StackedScaler` reads as one stacked tensor.
"""

import warnings
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Dict, List, Mapping, Optional, Sequence, Type, Union

import torch
from torch import nn

from marlparts.agents.common.elementwise import stacking_obstacle
from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.stacked_optimizer import MemberOptimizerState, StackedOptimizerSlice
from marlparts.agents.common.trained_model import TrainedModel, active_rows
from marlparts.models.stacked import StackedModels
from marlparts.resources.preprocessors import RunningStandardScaler


class StackedScaler(nn.Module):
    """``K`` :class:`RunningStandardScaler` (one per member agent) applied as one.

    The members' statistics are views of stacked ``(K, size)`` buffers, so a member that folds in
    a batch or loads a checkpoint changes the stack. Inputs carry the members on their
    second-to-last axis, ``(..., K, size)``, or are ``(batch * K, size)`` rows in batch-major order.
    """

    def __init__(self, members: Sequence[RunningStandardScaler]) -> None:
        super().__init__()
        self.__dict__["members"] = list(members)  # not submodules: their buffers are views of the stack's
        self.size = len(members)
        self.epsilon, self.clip_threshold = members[0].epsilon, members[0].clip_threshold
        for name in ("running_mean", "running_variance", "current_count"):
            stacked = torch.stack([getattr(member, name) for member in members])
            self.register_buffer(name, stacked)
            for k, member in enumerate(members):
                member.register_buffer(name, stacked[k])

    def forward(self, x: torch.Tensor, train: bool = False, inverse: bool = False, clip: bool = True) -> torch.Tensor:
        """Standardise each member's part of ``x`` with its own statistics (or undo it if ``inverse``)."""
        if train:
            raise ValueError("a StackedScaler is updated with each member's rows (update), not with train=True")
        rows = x.dim() == 2
        stacked = x.unflatten(0, (-1, self.size)) if rows else x
        if stacked.shape[-2:] != self.running_mean.shape:
            raise ValueError(f"stacked RunningStandardScaler of {self.size} members of size {self.running_mean.shape[1]} "
                             f"got input of shape {tuple(x.shape)}")
        mean, std = self.running_mean.to(x.dtype), (self.running_variance + self.epsilon).sqrt().to(x.dtype)
        if inverse:
            result = stacked * std + mean
        else:
            result = (stacked - mean) / std
            result = result.clamp(-self.clip_threshold, self.clip_threshold) if clip else result
        return result.flatten(0, 1) if rows else result

    def preserve_outputs_of(self, model: StackedModels) -> None:
        """Attach each member that preserves a critic's outputs (:class:`~marlparts.resources.PopArt`) to its own
        member model of the stacked ``model``: its output layer's slice of the stack is what it rescales.
        """
        for member, member_model in zip(self.members, model.members):
            if hasattr(member, "preserve_outputs_of"):
                member.preserve_outputs_of(member_model)

    def update(self, rows: Sequence[torch.Tensor]) -> None:
        """Fold ``rows[k]`` (``(n_k, size)``) into member ``k``'s statistics: each member takes in its own
        agent's rows (a :class:`RunningStandardScaler` takes one tensor).
        """
        for member, member_rows in zip(self.members, rows):
            member.update(member_rows)


@dataclass(eq=False)
class StackedTrainedModel(TrainedModel):
    """The record of a :class:`StackedModels`: one optimizer (and scheduler) over the stacked parameters,
    :class:`StackedScaler` preprocessors, and, in checkpoints and logs, each member under its own name.

    Each member trains as it would with an optimizer of its own: its own gradient-norm limit, no step in
    an update where its agent sat out the rollout, and its own step count
    (:class:`~marlparts.agents.common.stacked_optimizer.MemberOptimizerState`).

    Attributes:
        member_names: the members' names (``role[agent]``), in stack order.
        member_owners: the agents of each member, in stack order.
        member_state: the members' own per-tensor optimizer numbers, where they differ.
        stepping_members: ``(members,)`` bool, the members that take steps in this update (:meth:`plan_steps`);
            None: all of them.
    """

    member_names: List[str] = field(default_factory=list)
    member_owners: List[List[str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.member_state = MemberOptimizerState(self.optimizer, len(self.member_names))
        self.stepping_members: Optional[torch.Tensor] = None

    def checkpoint_parts(self) -> Dict[str, Any]:
        """Each member's model, optimizer slice, scheduler and preprocessors, named as without stacking."""
        parts: Dict[str, Any] = {}
        for k, (name, member) in enumerate(zip(self.member_names, self.model.members)):
            parts[name] = member
            parts[f"optimizer:{name}"] = StackedOptimizerSlice(self.optimizer, self.member_state, k, self.model)
            if self.scheduler is not None:
                parts[f"scheduler:{name}"] = self.scheduler
            if self.input_preprocessor is not None:
                parts[f"preprocessor:{name}"] = self.input_preprocessor.members[k]
            if self.value_normaliser is not None:
                parts[f"value_normaliser:{name}"] = self.value_normaliser.members[k]
        return parts

    def make_preprocessor(self, preprocessor_class: Type[nn.Module], size: int, kwargs: Mapping[str, Any],
                          device: torch.device) -> nn.Module:
        """One :class:`RunningStandardScaler` per member, applied together by a :class:`StackedScaler`."""
        if not issubclass(preprocessor_class, RunningStandardScaler):
            raise TypeError(f"{preprocessor_class.__name__}: agents whose models are stacked use RunningStandardScaler "
                            "preprocessors; set cfg['stack_models'] = False for other preprocessors")
        return StackedScaler([preprocessor_class(size, **kwargs).to(device) for _ in self.member_names])

    def rows_per_model(self, values: torch.Tensor, active: torch.Tensor) -> List[torch.Tensor]:
        """The rows of ``values`` ``(..., members, features)`` where ``active`` ``(..., members)`` is True, one
        tensor per member (each member's preprocessors take in its own agent's rows).
        """
        return [active_rows(values[..., k, :], active[..., k]) for k in range(len(self.member_names))]

    def learning_rates(self) -> Dict[str, float]:
        """``{member name: learning rate}`` (one optimizer: the same rate for every member)."""
        return {name: self.learning_rate() for name in self.member_names}

    def plan_steps(self, acted: AbstractSet[str]) -> None:
        """Before an update: the members that take steps in it are those whose agent is in ``acted``."""
        stepping = [any(owner in acted for owner in owners) for owners in self.member_owners]
        self.takes_steps = any(stepping)
        self.stepping_members = None if all(stepping) else torch.tensor(stepping)

    def step(self, scaler: Optional[Any] = None) -> None:
        """One step for the stepping members: one optimizer step while every member steps alike; otherwise the
        members' own step (:meth:`MemberOptimizerState.step`), skipped where the mixed-precision ``scaler``
        finds non-finite gradients (as its own step would be).
        """
        if self.stepping_members is None and self.member_state.uniform:
            super().step(scaler)
            return
        if scaler is not None:
            scaler.unscale_(self.optimizer)
        self.clip_gradients()
        gradients = [parameter.grad for parameter in self.trained_parameters() if parameter.grad is not None]
        if scaler is not None and gradients and not torch.stack([torch.isfinite(g).all() for g in gradients]).all():
            return  # the scaler's update lowers its scale, as after a step it skipped
        stepping = self.stepping_members
        self.member_state.step(torch.ones(len(self.member_names), dtype=torch.bool) if stepping is None else stepping)

    def clip_gradients(self) -> None:
        """Clip each member's gradient to norm ``grad_norm_clip`` on its own, as its own optimizer would."""
        if self.grad_norm_clip <= 0:
            return
        gradients = [parameter.grad for parameter in self.trained_parameters() if parameter.grad is not None]
        if not gradients:
            return
        norms = torch.linalg.vector_norm(torch.cat([gradient.flatten(1) for gradient in gradients], 1), dim=1)  # (K,)
        scale = (self.grad_norm_clip / (norms + 1e-6)).clamp_(max=1.0)
        for gradient in gradients:  # each stacked gradient is (K, ...): member k's part scaled by scale[k]
            gradient.mul_(scale.view((-1,) + (1,) * (gradient.dim() - 1)))


def stack_groups(groups: Sequence[AgentGroup], roles: Sequence[str], input_sizes: Callable[[str, str], int],
                 settings: Callable[[AgentGroup], Any], *, optimizer_class: type) -> List[AgentGroup]:
    """Merge the one-agent groups whose models can be stacked into one group per kind of model.

    Groups of several agents (shared models) stay as they are. One-agent groups are candidates
    together when, for every role, their models are either one shared instance or of one class
    with the same parameter shapes; a merged group's model of a role is then that shared instance
    or a :class:`StackedModels` of its members' models. ``input_sizes(uid, role)`` is the number of
    inputs a model of ``role`` reads, for the check that the stacked run reproduces the members';
    only groups with equal ``settings(group)`` (their per-agent configuration) are merged, since the
    merged agents share one. The merged group takes the first member's place and memory.
    Candidates that cannot be stacked stay groups of their own, run one after another, and a
    warning says why: so do all of them where ``optimizer_class`` (the optimizer of every trained
    model) does not step element-wise (:func:`~marlparts.agents.common.elementwise.stacking_obstacle`).
    """
    optimizer_obstacle = stacking_obstacle(optimizer_class)
    candidates: Dict[tuple, List[AgentGroup]] = {}
    for group in groups:
        if group.size == 1:
            key = (repr(settings(group)),) + tuple(
                (type(group.models[role]), tuple(p.shape for p in group.models[role].parameters())) for role in roles)
            candidates.setdefault(key, []).append(group)
    merged: Dict[int, Optional[AgentGroup]] = {}
    for members in candidates.values():
        if len(members) < 2:
            continue
        group = optimizer_obstacle or _merge(members, roles, input_sizes)
        if isinstance(group, str):
            warnings.warn(f"the models of agents {[member.uids[0] for member in members]} are not run as one batched "
                          f"model, but one agent after another: {group}", stacklevel=4)
            continue
        merged[id(members[0])] = group
        for member in members[1:]:
            merged[id(member)] = None
    return [merged.get(id(group), group) for group in groups if merged.get(id(group), group) is not None]


def _merge(members: List[AgentGroup], roles: Sequence[str], input_sizes: Callable[[str, str], int]
           ) -> Union[AgentGroup, str]:
    """One group of ``members`` with stacked models, or why their models cannot be stacked."""
    models: Dict[str, Any] = {}
    first = members[0]
    for role in roles:
        role_models = [group.models[role] for group in members]
        if all(model is role_models[0] for model in role_models):
            models[role] = role_models[0]
            continue
        stack = StackedModels.build(role_models, check_inputs=input_sizes(first.uids[0], role))
        if isinstance(stack, str):
            return f"their {role!r} models cannot be stacked: {stack}"
        models[role] = stack
    per_agent_roles = frozenset(role for role, model in models.items() if isinstance(model, StackedModels))
    for role in per_agent_roles:
        models[role].bind_members()
    group = AgentGroup([group.uids[0] for group in members], models, first.memory,
                       [int(group.agent_indexes[0]) for group in members], per_agent_roles=per_agent_roles)
    group.cfg = dict(first.cfg)
    return group
