"""The base class of every model: a ``torch.nn.Module`` that knows its spaces."""

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple, Type, Union

import gymnasium
import torch
from torch import nn

from marlparts.models.activations import Tanh
from marlparts.utils.spaces import action_size, flat_size


class Model(nn.Module):
    """A network that maps ``inputs["observations"]`` (flat, batched) to an output.

    Subclasses implement :meth:`compute`; a policy mixin (``CategoricalMixin``,
    ``GaussianMixin``, ``DeterministicMixin``) listed before ``Model`` turns that output into
    :meth:`act`. Inputs are a dict: ``"observations"`` ``(batch, num_observations)`` and, where
    relevant, ``"action_mask"`` and ``"taken_actions"``.

    Args:
        observation_space: space of the input (an agent's observation or the global state).
        action_space: space of the actions the model outputs, if it outputs actions.
        output_size: number of outputs of a model that does not output actions (a critic with
            one value per agent, say); default: the flattened action size, or 1 with no action space.
        device: where the parameters live.
    """

    def __init__(self, *, observation_space: gymnasium.Space, action_space: Optional[gymnasium.Space] = None,
                 output_size: Optional[int] = None, device: Union[str, torch.device, None] = None) -> None:
        super().__init__()
        self.observation_space = observation_space
        self.action_space = action_space
        self.num_observations = flat_size(observation_space)
        self.num_actions = flat_size(action_space) if action_space is not None else 0
        self.action_columns = action_size(action_space) if action_space is not None else 0
        self.num_outputs = int(output_size) if output_size is not None else (self.num_actions or 1)
        self.initial_device = torch.device(device) if device is not None else torch.device("cpu")

    @property
    def device(self) -> torch.device:
        """Where the model's parameters (or buffers) are; the ``device`` it was built with if it has none."""
        tensor = next(self.parameters(), None)
        if tensor is None:
            tensor = next(self.buffers(), None)
        return tensor.device if tensor is not None else self.initial_device

    @device.setter
    def device(self, device: Union[str, torch.device]) -> None:
        """Set where a model without parameters or buffers says it is (``model.to`` moves the others)."""
        self.initial_device = torch.device(device)

    def compute(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Return ``(output, extras)`` for ``inputs``; ``role`` names the use (``"policy"``, ``"value"``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement compute(inputs, role)")

    def act(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, Optional[torch.Tensor], Dict]:
        """Return ``(actions, log_prob, outputs)``; provided by a policy mixin."""
        raise NotImplementedError(f"{type(self).__name__} needs a policy mixin (e.g. CategoricalMixin) before Model")

    def forward(self, inputs: Mapping[str, torch.Tensor], role: str = "") -> Tuple[torch.Tensor, Optional[torch.Tensor], Dict]:
        """Same as :meth:`act`."""
        return self.act(inputs, role)

    def check_input_size(self, *, expected: int, what: str, outputs: Optional[int] = None,
                         role: str = "check") -> None:
        """Raise ``ValueError`` if this model does not take ``expected`` inputs or, when ``outputs`` is
        given, does not return that many values per sample (``what`` names the caller). The trial pass
        runs :meth:`compute` with ``role`` (a model that plays several roles is checked in each).
        """
        if self.num_observations != expected:
            raise ValueError(f"{what}: the model {type(self).__name__} was built for {self.num_observations} inputs "
                             f"(observation_space={self.observation_space}) but will be fed {expected}")
        rows = trial_rows(self, 2)
        sample = torch.zeros(rows, expected, device=self.device)
        try:
            with torch.no_grad():
                output, _ = self.compute({"observations": sample}, role=role)
        except RuntimeError as error:
            raise ValueError(f"{what}: the model {type(self).__name__} fails on a ({rows}, {expected}) input batch; "
                             f"its layers do not match its observation space: {error}") from error
        if outputs is not None and tuple(output.shape) != (rows, outputs):
            built_for = f" (it was built for action_space={self.action_space})" if self.action_space is not None else ""
            raise ValueError(f"{what}: the model {type(self).__name__} returns {tuple(output.shape[1:])} values per "
                             f"sample, expected {outputs}{built_for}")

    def update_parameters(self, source: nn.Module, *, polyak: float = 1.0) -> None:
        """Copy (``polyak=1``) or soft-update (``θ ← polyak·θ_source + (1−polyak)·θ``) from ``source``."""
        with torch.no_grad():
            for target, param in zip(self.parameters(), source.parameters()):
                target.lerp_(param, polyak)


def trial_rows(model: nn.Module, at_least: int) -> int:
    """A batch size of at least ``at_least`` rows for a trial pass of ``model`` that checks its shapes: a multiple of
    the ``agents_per_copy`` of every layer that reads the agents of an env copy together
    (:class:`~marlparts.models.agent_sets.AgentSetLayer`), so that the rows fill whole copies.
    """
    copy_sizes = [layer.agents_per_copy for layer in model.modules()
                  if isinstance(getattr(layer, "agents_per_copy", None), int)]
    copy_size = math.lcm(*copy_sizes) if copy_sizes else 1
    return copy_size * max(1, math.ceil(at_least / copy_size))


def mlp(input_size: int, output_size: int, *, hidden_sizes: Sequence[int] = (64, 64),
        activation: Type[nn.Module] = Tanh, output_gain: float = 1.0) -> nn.Sequential:
    """A multilayer perceptron with orthogonal initialisation (gain √2, ``output_gain`` for the last layer).

    Args:
        input_size: number of inputs.
        output_size: number of outputs.
        hidden_sizes: width of each hidden layer.
        activation: activation class placed after each hidden layer (:class:`~marlparts.models.Tanh` by default:
            ``torch.nn.Tanh``'s function, faster on the CPU).
        output_gain: gain of the last layer (small, e.g. 0.01, for policy logits).
    """
    layers, size = [], input_size
    for hidden in hidden_sizes:
        linear = nn.Linear(size, hidden)
        nn.init.orthogonal_(linear.weight, gain=2**0.5)
        nn.init.zeros_(linear.bias)
        layers += [linear, activation()]
        size = hidden
    last = nn.Linear(size, output_size)
    nn.init.orthogonal_(last.weight, gain=output_gain)
    nn.init.zeros_(last.bias)
    layers.append(last)
    return nn.Sequential(*layers)
