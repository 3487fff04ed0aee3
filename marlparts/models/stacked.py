"""Several models of one class and shape run as one: their parameters stacked along a leading axis.

A user who gives each agent its own model (no parameter sharing) still writes one ``Model``
per agent. When those models have the same class and the same parameter shapes,
:class:`StackedModels` runs them as one batched computation: every ``nn.Linear`` becomes one
batched matrix product over the stacked weights, and every other operation of ``compute`` and of
the policy mixin broadcasts over the stack. The member models keep their own parameters, which
share memory with the stacked ones: an optimizer step on the stack shows in each member, and
loading a member's ``state_dict`` writes into the stack.
"""

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from marlparts.models.base import Model
from marlparts.models.recurrent import is_recurrent


class StackedLinear(nn.Module):
    """``K`` linear layers applied to ``(K, batch, in)`` inputs in one batched product.

    The weights are kept transposed, ``(K, in, out)`` (member ``k``'s ``nn.Linear`` weight is the
    transposed view of slice ``k``), and the biases as ``(K, 1, out)``: the product then reads them as
    they lie, with no transpose or unsqueeze in the forward pass or in the gradient, which for the
    small layers of a policy costs as much as the product itself.

    Args:
        weight: ``(K, in, out)`` stacked transposed weights.
        bias: ``(K, 1, out)`` stacked biases, or None.
    """

    def __init__(self, weight: nn.Parameter, bias: Optional[nn.Parameter]) -> None:
        super().__init__()
        self.weight = weight
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ Wᵀ + b`` per stacked layer, ``(K, batch, in)`` to ``(K, batch, out)``."""
        if x.dim() != 3:
            raise ValueError(f"a stacked linear layer takes (models, batch, features) inputs, got {tuple(x.shape)}")
        if self.bias is None:
            return torch.bmm(x, self.weight)
        return torch.baddbmm(self.bias, x, self.weight)


def _owner(module: nn.Module, dotted: str) -> Tuple[nn.Module, str]:
    """The submodule that holds the parameter or buffer ``dotted`` and its local name."""
    *path, name = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    return module, name


def _settings(model: nn.Module) -> Dict[str, Any]:
    """Every plain attribute of ``model`` and its submodules (spaces, limits, flags), by dotted name."""
    settings = {}
    for prefix, module in model.named_modules():
        for key, value in vars(module).items():
            if not key.startswith("_") and not isinstance(value, (torch.Tensor, nn.Module)) and key != "training":
                settings[f"{prefix}.{key}"] = value
    return settings


# layers with parameters that neither a batched product (nn.Linear) nor broadcasting over (K, batch, ...) can run
UNSTACKED_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
                    nn.Embedding, nn.EmbeddingBag)


def stacking_obstacle(models: Sequence[Model]) -> Optional[str]:
    """Why ``models`` cannot be stacked (None if they can): they must be distinct feed-forward models of
    one class without convolutional or embedding layers (:data:`UNSTACKED_LAYERS`), with the same parameter
    and buffer names, shapes and ``requires_grad`` flags, no tensor of
    their own shared with another member and no 0-dim one, the same plain attributes (spaces, limits),
    all on one device.
    """
    first = models[0]
    if len({id(model) for model in models}) != len(models):
        return "a model appears twice"
    if any(type(model) is not type(first) for model in models):
        return "their classes differ"
    if any(is_recurrent(model) for model in models):
        return "recurrent models are not stacked"
    unstackable = sorted({type(module).__name__ for module in first.modules() if isinstance(module, UNSTACKED_LAYERS)})
    if unstackable:
        return (f"they have {', '.join(unstackable)} layers: only nn.Linear layers and parameters that broadcast "
                "over the batch are stacked")
    shapes = [{name: (tuple(t.shape), t.requires_grad) for name, t in [*model.named_parameters(), *model.named_buffers()]}
              for model in models]
    if any(shape != shapes[0] for shape in shapes[1:]):
        return "their parameter or buffer shapes (or requires_grad flags) differ"
    tensors = [t for model in models for t in [*model.parameters(), *model.buffers()]]
    if len({t.data_ptr() for t in tensors if t.numel()}) != sum(1 for t in tensors if t.numel()):
        return "they share a tensor (a common submodule)"
    if any(t.dim() == 0 for t in tensors):
        return "they hold a 0-dim parameter or buffer"
    try:
        if any(_settings(model) != _settings(first) for model in models[1:]):
            return "their attributes (spaces, limits, ...) differ"
    except Exception:  # attributes that cannot be compared
        return "their attributes cannot be compared"
    devices = {t.device for model in models for t in [*model.parameters(), *model.buffers()]}
    if len(devices) > 1:
        return f"their tensors are on several devices {sorted(map(str, devices))}"
    if not any(True for _ in first.parameters()):
        return "they have no parameters"
    return None


class StackedModels(nn.Module):
    """``K`` models of one class and shape (the *members*) run as one batched model.

    Inputs are the rows of a group of ``K`` agents in batch-major order, as a group of agents that
    share one model passes them: ``(batch * K, ...)``, row ``b * K + k`` belonging to member ``k``.
    :meth:`act` returns its outputs in the same order, so the stack stands in for a shared model.

    Built by :meth:`build`, which says why instead when the members cannot be stacked or their stacked
    run does not reproduce their own outputs; the members are untouched until :meth:`bind_members`
    points their parameters at the stack.

    Attributes:
        members: the member models, in stack order (not submodules: :meth:`parameters` yields the
            stacked parameters only, which the optimizer trains).
        member_parameters: ``[(name, stacked parameter)]`` in each member's ``named_parameters`` order.
        transposed: the names of the stacked parameters whose slice ``k`` is member ``k``'s parameter
            transposed (linear weights); every other slice is the member's parameter with a leading 1.
    """

    def __init__(self, members: Sequence[Model], batched: Model,
                 member_parameters: List[Tuple[str, nn.Parameter]], transposed: Sequence[str] = ()) -> None:
        super().__init__()
        self.batched = batched
        self.__dict__["members"] = list(members)  # plain attribute: not registered as submodules
        self.member_parameters = member_parameters
        self.transposed = frozenset(transposed)
        self.size = len(members)

    @classmethod
    def build(cls, members: Sequence[Model], *, check_inputs: int) -> Union["StackedModels", str]:
        """Stack ``members`` (see the class documentation), or say why they cannot be stacked.

        ``check_inputs`` is the number of input features: the stacked run is compared with each
        member's own on random inputs of that size before any member is changed.
        """
        if len(members) < 2:
            return "there is only one model"
        obstacle = stacking_obstacle(members)
        if obstacle is not None:
            return obstacle
        batched, stacked, transposed = cls._batched_copy(members)
        stack = cls(members, batched, stacked, transposed)
        if not stack._reproduces_members(check_inputs):
            return "their batched run does not reproduce each model's own outputs (does compute mix the rows of a batch?)"
        return stack

    @staticmethod
    def _batched_copy(members: Sequence[Model]) -> Tuple[Model, List[Tuple[str, nn.Parameter]], List[str]]:
        """A copy of the first member whose linear layers are :class:`StackedLinear` over the members'
        stacked (transposed) weights and whose other parameters and buffers are stacked as
        ``(K, 1, *shape)``, which broadcasts over ``(K, batch, ...)`` activations; the stacked parameters;
        and the names of those stacked transposed.
        """
        first = members[0]
        batched = copy.deepcopy(first)
        linear_names = {name for name, module in first.named_modules() if type(module) is nn.Linear}
        stacked: Dict[str, nn.Parameter] = {}
        transposed = [f"{name}.weight" if name else "weight" for name in linear_names]
        for name, _ in first.named_parameters():
            if name in transposed:
                values = torch.stack([member.get_parameter(name).detach().t() for member in members])
            else:
                values = torch.stack([member.get_parameter(name).detach() for member in members]).unsqueeze(1)
            stacked[name] = nn.Parameter(values.contiguous(), requires_grad=first.get_parameter(name).requires_grad)
        for module_name in linear_names:
            prefix = f"{module_name}." if module_name else ""
            layer = StackedLinear(stacked[f"{prefix}weight"], stacked.get(f"{prefix}bias"))
            if module_name:
                parent, local = _owner(batched, module_name)
                setattr(parent, local, layer)
            else:
                raise TypeError("a model that is itself an nn.Linear is not stacked")
        for name, parameter in stacked.items():
            module_name, _, local = name.rpartition(".")
            if module_name not in linear_names:
                owner, local = _owner(batched, name)
                setattr(owner, local, parameter)
        persistent = set(first.state_dict())
        for name, _ in first.named_buffers():
            owner, local = _owner(batched, name)
            owner.register_buffer(local, torch.stack([member.get_buffer(name) for member in members]).unsqueeze(1),
                                  persistent=name in persistent)
        return batched, [(name, stacked[name]) for name, _ in first.named_parameters()], transposed

    def _reproduces_members(self, num_inputs: int) -> bool:
        """Whether the stacked run gives each member's own outputs on random inputs (a ``compute`` that
        reshapes its batch, say, would not): the guard that makes stacking safe for any model.
        """
        device = self.member_parameters[0][1].device
        generator = torch.Generator(device="cpu").manual_seed(0)
        batch = self.size + 2  # a batch size unlike the number of members: a broadcast over the wrong axis fails
        inputs = torch.randn(batch * self.size, num_inputs, generator=generator).to(device)
        try:
            with torch.no_grad():
                stacked, _ = self.compute({"observations": inputs})
                for k, member in enumerate(self.members):
                    own, _ = member.compute({"observations": inputs[k::self.size]})
                    if own.shape != stacked[k::self.size].shape or \
                            not torch.allclose(own, stacked[k::self.size], rtol=1e-4, atol=1e-5):
                        return False
        except (RuntimeError, ValueError, TypeError, IndexError):
            return False
        return True

    def bind_members(self) -> None:
        """Point every member's parameters and buffers at its slice of the stacked ones: from here on the
        stack is what trains, and each member reads (and loads into) its slice.
        """
        for name, stacked in self.member_parameters:
            for k, member in enumerate(self.members):
                owner, local = _owner(member, name)
                old = getattr(owner, local)
                setattr(owner, local, nn.Parameter(self.member_view(name, stacked.data[k]), requires_grad=old.requires_grad))
        persistent = set(self.members[0].state_dict())
        for name, stacked in self.batched.named_buffers():
            for k, member in enumerate(self.members):
                owner, local = _owner(member, name)
                owner.register_buffer(local, stacked[k].view(getattr(owner, local).shape), persistent=name in persistent)

    def member_view(self, name: str, stacked_slice: torch.Tensor) -> torch.Tensor:
        """Slice ``k`` of the stacked parameter ``name`` (or of a tensor shaped like it, such as an optimizer
        state) viewed as member ``k``'s own parameter.
        """
        if name in self.transposed:
            return stacked_slice.t()
        return stacked_slice.squeeze(0)

    # ----------------------------------------------------------------------------- running
    def _to_stack(self, tensor: torch.Tensor) -> torch.Tensor:
        """``(batch * K, ...)`` rows to ``(K, batch, ...)``."""
        return tensor.reshape((-1, self.size) + tensor.shape[1:]).transpose(0, 1)

    def _from_stack(self, tensor: Any) -> Any:
        """``(K, batch, ...)`` to ``(batch * K, ...)`` rows (other values as they are)."""
        if isinstance(tensor, torch.Tensor) and tensor.dim() >= 2 and tensor.shape[0] == self.size:
            return tensor.transpose(0, 1).flatten(0, 1)
        return tensor

    def _stacked_inputs(self, inputs: Mapping[str, Any]) -> Dict[str, Any]:
        return {key: self._to_stack(value) if isinstance(value, torch.Tensor) else value
                for key, value in inputs.items()}

    def compute(self, inputs: Mapping[str, Any], role: str = "") -> Tuple[torch.Tensor, Mapping[str, Any]]:
        """Every member's ``compute`` on its rows, in one batched run; rows in, rows out."""
        output, extras = self.batched.compute(self._stacked_inputs(inputs), role)
        return self._from_stack(output), {key: self._from_stack(value) for key, value in extras.items()}

    def act(self, inputs: Mapping[str, Any], role: str = "") -> Tuple[torch.Tensor, Optional[torch.Tensor], Dict]:
        """Every member's ``act`` (its policy mixin on its ``compute``) on its rows, in one batched run; rows in,
        rows out.
        """
        actions, log_prob, outputs = self.batched.act(self._stacked_inputs(inputs), role)
        return (self._from_stack(actions), self._from_stack(log_prob),
                {key: self._from_stack(value) for key, value in outputs.items()})

    def forward(self, inputs: Mapping[str, Any], role: str = "") -> Tuple[torch.Tensor, Optional[torch.Tensor], Dict]:
        """Same as :meth:`act`."""
        return self.act(inputs, role)

    def train(self, mode: bool = True) -> "StackedModels":
        """Set training mode on the batched copy and on every member."""
        super().train(mode)
        for member in self.members:
            member.train(mode)
        return self
