"""The optimizer of a stack of models, member by member: each member's own state, and steps that only some
members take.

One optimizer steps the stacked parameters (``(members, ...)`` tensors) of a
:class:`~marlparts.models.stacked.StackedModels`. Its per-entry state (Adam's moments) is stacked like the
parameters, so each member owns a slice of it; its per-tensor numbers (the step count, NAdam's momentum
product) are one for the whole tensor, while separate models would each have their own. As long as every
member steps at every step they agree, and one optimizer step is each member's own step (for the
element-wise optimizers of :mod:`~marlparts.agents.common.elementwise`). Once a member sits out an update
(its agent never acted in the rollout: it takes no step, as a separate model would not), the members' counts
differ: :class:`MemberOptimizerState` then keeps those numbers per member and steps each set of members that
agree on them in turn, keeping from each step the slices of the members that took it. :class:`StackedOptimizerSlice`
is one member's part, in the form its own optimizer's state would have (checkpoints).
"""

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from marlparts.agents.common.trained_model import optimizer_parameters


def _is_per_entry(value: Any) -> bool:
    """Whether an optimizer state value is per entry of its parameter (a tensor with dimensions), not a number."""
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _as_number(value: Any) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


def _like(template: Any, number: float) -> Any:
    """``number`` in the form of ``template`` (a 0-dim tensor of its dtype and device, or a Python number)."""
    if isinstance(template, torch.Tensor):
        return torch.full_like(template, number)
    return type(template)(number)


class MemberOptimizerState:
    """The per-tensor numbers of a stacked optimizer's state (step counts, ...) per member, once members differ.

    While every member has stepped alike (:attr:`uniform`), the optimizer's own state is every member's and
    nothing is kept here. Otherwise, for each parameter (by position in the optimizer) :attr:`started` says
    which members have a state for it and :attr:`numbers` holds each member's value of each per-tensor
    number; the optimizer's own numbers are then placeholders, set to a set of members' values for each
    step (:meth:`step`).

    Args:
        optimizer: the optimizer of the stacked parameters (each ``(members, ...)``).
        members: the number of members.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, members: int) -> None:
        self.optimizer, self.members = optimizer, members
        self.started: Optional[List[torch.Tensor]] = None  # per parameter: (members,) bool
        self.numbers: Optional[List[Dict[str, torch.Tensor]]] = None  # per parameter: {key: (members,) float64}

    @property
    def uniform(self) -> bool:
        """Whether every member's state is the optimizer's own (the members have always stepped together)."""
        return self.started is None

    # ----------------------------------------------------------------------------- one member
    def member_started(self, index: int, position: int) -> bool:
        """Whether member ``index`` has an optimizer state for the parameter at ``position``."""
        if self.started is None:
            parameter = optimizer_parameters(self.optimizer)[position]
            return bool(self.optimizer.state.get(parameter))
        return bool(self.started[position][index])

    def member_number(self, index: int, position: int, key: str, template: Any) -> Any:
        """Member ``index``'s value of the per-tensor number ``key`` of the parameter at ``position``, in the form
        of ``template`` (the optimizer's own value of it).
        """
        if self.numbers is None:
            return copy.deepcopy(template)
        return _like(template, float(self.numbers[position][key][index]))

    def set_member(self, index: int, position: int, numbers: Optional[Mapping[str, float]]) -> None:
        """Give member ``index`` the per-tensor ``numbers`` of the parameter at ``position`` (None: no state)."""
        self._split()
        self.started[position][index] = numbers is not None
        for values in self.numbers[position].values():
            values[index] = 0.0
        for key, number in (numbers or {}).items():
            self.numbers[position].setdefault(key, torch.zeros(self.members, dtype=torch.float64))[index] = number

    # ----------------------------------------------------------------------------- the whole stack
    def _split(self) -> None:
        """Start keeping the numbers per member (from the optimizer's own, the same for every member)."""
        if self.started is not None:
            return
        self.started, self.numbers = [], []
        for parameter in optimizer_parameters(self.optimizer):
            state = self.optimizer.state.get(parameter) or {}
            self.started.append(torch.full((self.members,), bool(state)))
            self.numbers.append({key: torch.full((self.members,), _as_number(value), dtype=torch.float64)
                                 for key, value in state.items() if not _is_per_entry(value)})

    def _signatures(self) -> torch.Tensor:
        """``(members, columns)``: what each member's numbers are (equal rows: members that step alike)."""
        columns = []
        for started, numbers in zip(self.started, self.numbers):
            columns.append(started.double())
            columns.extend(numbers[key] for key in sorted(numbers))
        return torch.stack(columns, dim=1)

    def settle(self) -> None:
        """Drop the state of parameters no member has started, and go back to :attr:`uniform` where every
        member's numbers agree again (writing them into the optimizer's state).
        """
        if self.started is None:
            return
        parameters = optimizer_parameters(self.optimizer)
        for position, parameter in enumerate(parameters):
            if not self.started[position].any():
                self.optimizer.state.pop(parameter, None)
                self.numbers[position] = {}
        if torch.unique(self._signatures(), dim=0).shape[0] > 1:
            return
        for position, parameter in enumerate(parameters):
            state = self.optimizer.state.get(parameter)
            for key, values in self.numbers[position].items():
                if state is not None and key in state:
                    state[key] = _like(state[key], float(values[0]))
        self.started, self.numbers = None, None

    @torch.no_grad()
    def step(self, stepping: torch.Tensor) -> None:
        """One optimizer step for the members where ``stepping`` (``(members,)`` bool) is True: the others'
        parameter slices and state are left as they were.

        The members that step are taken in sets that agree on every per-tensor number; each set's step starts
        from the state before this step, with the optimizer's numbers set to the set's (no state where the set
        has none: the optimizer creates it as for a model that never stepped), and keeps the slices of its
        members. Costs one optimizer step per set, and copies of the parameters and state.
        """
        self._split()
        parameters = optimizer_parameters(self.optimizer)
        before = [(parameter.detach().clone(), _clone_state(self.optimizer.state.get(parameter)))
                  for parameter in parameters]
        result = [(parameter.detach().clone(), dict(state or {})) for parameter, (_, state) in zip(parameters, before)]
        signatures = self._signatures()
        stepping = stepping.to(torch.bool).cpu()
        classes = torch.unique(signatures[stepping], dim=0)
        for signature in classes:
            members = stepping & (signatures == signature).all(dim=1)
            self._step_members(parameters, before, result, members)
        for parameter, (values, state) in zip(parameters, result):
            parameter.copy_(values)
            if state:
                self.optimizer.state[parameter] = state
        self.settle()

    def _step_members(self, parameters: Sequence[torch.Tensor], before: Sequence[Tuple[torch.Tensor, Optional[dict]]],
                      result: Sequence[Tuple[torch.Tensor, dict]], members: torch.Tensor) -> None:
        """One optimizer step from the state ``before``, as the set ``members`` (which agree on their numbers)
        would take it; their slices of the parameters and of the per-entry state go into ``result``.
        """
        first = int(members.nonzero()[0])
        for position, (parameter, (values, state)) in enumerate(zip(parameters, before)):
            parameter.copy_(values)
            if self.started[position][first]:
                own = _clone_state(state)
                for key, number in self.numbers[position].items():
                    if key in own:
                        own[key] = _like(own[key], float(number[first]))
                self.optimizer.state[parameter] = own
            else:
                self.optimizer.state.pop(parameter, None)
        self.optimizer.step()
        for position, parameter in enumerate(parameters):
            state = self.optimizer.state.get(parameter)
            if not state:
                continue
            keep = members.to(parameter.device).view((-1,) + (1,) * (parameter.dim() - 1))
            values, kept = result[position]
            values.copy_(torch.where(keep, parameter, values))
            for key, value in state.items():
                if _is_per_entry(value):
                    kept[key] = torch.where(keep, value, kept[key] if key in kept else torch.zeros_like(value))
                else:
                    kept[key] = value
                    self.numbers[position].setdefault(key, torch.zeros(self.members, dtype=torch.float64))[members] = \
                        _as_number(value)
            self.started[position][members] = True


def _clone_state(state: Optional[Mapping[str, Any]]) -> dict:
    """A copy of one parameter's optimizer state (tensors cloned)."""
    return {key: value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)
            for key, value in (state or {}).items()}


class StackedOptimizerSlice:
    """One member's part of the optimizer of a stack, in the form the member's own optimizer would have:
    its ``state_dict`` holds the member's slice of every per-entry state tensor and its own per-tensor numbers
    (step count, ...), and no state at all for a member that has never stepped; loading one writes that slice
    and those numbers.

    Args:
        optimizer: the optimizer of the stacked parameters.
        members: the stack's :class:`MemberOptimizerState`.
        index: the member's position in the stack.
        stack: the stacked models, which say how a slice of each stacked parameter (and of its state)
            lies in the member's own layout (:meth:`StackedModels.member_view`).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, members: MemberOptimizerState, index: int, stack: Any) -> None:
        self.optimizer, self.members, self.index = optimizer, members, index
        self.names = [name for name, _ in stack.member_parameters]  # the stack's parameter order
        self.member_view = stack.member_view

    def state_dict(self) -> Dict[str, Any]:
        """The member's optimizer state: the state tensors' slices, its numbers, and the hyperparameters."""
        full = self.optimizer.state_dict()
        state = {}
        for position, values in full["state"].items():
            if not self.members.member_started(self.index, position):
                continue
            state[position] = {key: self.member_view(self.names[position], value[self.index]).clone(
                                   memory_format=torch.contiguous_format) if _is_per_entry(value)
                               else self.members.member_number(self.index, position, key, value)
                               for key, value in values.items()}
        return {"state": state, "param_groups": copy.deepcopy(full["param_groups"])}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Write the member's slice of every state tensor (creating the stacked state where there is none), its
        numbers and the hyperparameters; a state that does not fit (another number of parameters, a tensor of
        another shape) is refused before anything changes.
        """
        parameters = optimizer_parameters(self.optimizer)
        theirs = [len(group["params"]) for group in state_dict.get("param_groups", [])]
        if sum(theirs) != len(parameters) or len(theirs) != len(self.optimizer.param_groups):
            raise ValueError(f"the optimizer state holds parameter groups of {theirs} tensors, this stacked optimizer "
                             f"{[len(group['params']) for group in self.optimizer.param_groups]}")
        loaded = {int(position): values for position, values in state_dict.get("state", {}).items() if values}
        for position, values in loaded.items():
            parameter = parameters[position]
            for key, value in values.items():
                target = self.member_view(self.names[position], parameter[self.index])
                if _is_per_entry(value) and target.shape != value.shape:
                    raise ValueError(f"the optimizer state {key!r} of parameter {self.names[position]!r} has shape "
                                     f"{tuple(value.shape)}, the parameter {tuple(target.shape)}")
        with torch.no_grad():
            for position, parameter in enumerate(parameters):
                values = loaded.get(position)
                numbers = None if values is None else {key: _as_number(value) for key, value in values.items()
                                                       if not _is_per_entry(value)}
                if values is not None:
                    self._write(parameter, position, values)
                self.members.set_member(self.index, position, numbers)
        self.members.settle()
        for group, their_group in zip(self.optimizer.param_groups, state_dict["param_groups"]):
            group.update({key: value for key, value in their_group.items() if key != "params"})

    def _write(self, parameter: torch.Tensor, position: int, values: Mapping[str, Any]) -> None:
        """The member's slice of each per-entry state tensor of ``parameter``, and placeholders of its numbers
        (their values are the member's own in :attr:`members`).
        """
        own = self.optimizer.state[parameter]
        for key, value in values.items():
            if _is_per_entry(value):
                if key not in own:
                    own[key] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
                self.member_view(self.names[position], own[key][self.index]).copy_(value)
            elif key not in own:  # where the optimizer keeps its numbers: on the parameter's device if fused or capturable
                if isinstance(value, torch.Tensor):
                    on_parameter = self.optimizer.defaults.get("fused") or self.optimizer.defaults.get("capturable")
                    own[key] = value.detach().clone().to(device=parameter.device if on_parameter else value.device,
                                                         dtype=torch.float32)
                else:
                    own[key] = copy.deepcopy(value)
