"""Value normalisation that preserves the critic's outputs: PopArt (van Hasselt et al., 2016).

A value normaliser standardises the critic's targets with running statistics of the returns, and the
critic learns in those standardised units. When the statistics move, every value the critic stands
for in return units moves with them, although the critic has not learned anything new. Where the
critic takes few gradient steps per rollout (A2C: one) and bootstraps from its own values, that shift
feeds back into the next targets and can run away. PopArt ("Preserving Outputs Precisely, while
Adaptively Rescaling Targets") rescales the critic's output layer at every change of the statistics
so that its outputs in return units stay exactly as they were.
"""

from typing import Optional

import torch
from torch import nn

from marlparts.models.base import trial_rows
from marlparts.resources.preprocessors import RunningStandardScaler


def value_output_layer(model: nn.Module, *, also_policy: bool = False) -> nn.Linear:
    """The linear layer that gives ``model``'s values: the one named by its ``output_layer`` attribute if it
    has one, else its last ``nn.Linear`` (in module order) with as many outputs as the model has
    (``model.num_outputs``). A model that is also a policy (``also_policy``: one network, two heads) must
    name it: its last layers may be the policy's.

    Raises:
        ValueError: no such layer, naming the model.
    """
    named = getattr(model, "output_layer", None)
    if isinstance(named, nn.Linear):
        return named
    if also_policy:
        raise ValueError(f"PopArt rescales the layer that gives the values of {type(model).__name__}, which is also a "
                         "policy: set `self.output_layer` to the nn.Linear whose outputs are its values, or use "
                         "cfg['value_preprocessor'] = RunningStandardScaler")
    outputs = getattr(model, "num_outputs", None)
    layers = [module for module in model.modules() if isinstance(module, nn.Linear)
              and (outputs is None or module.out_features == outputs)]
    if not layers:
        raise ValueError(f"PopArt rescales the output layer of the value model {type(model).__name__}, but it has no "
                         f"nn.Linear with {outputs} outputs: set `self.output_layer` to the nn.Linear whose outputs "
                         "are the model's values, or use cfg['value_preprocessor'] = RunningStandardScaler")
    return layers[-1]


def check_outputs_are_the_layer_s(model: nn.Module, layer: nn.Linear, *, role: str = "check") -> None:
    """Raise ``ValueError`` where ``model``'s outputs are not exactly ``layer``'s (a shortcut added after it, or a
    squashing function): scaling the layer's weights and bias by 2 must double the outputs of
    ``model.compute(..., role)``. A model that cannot
    run on observations alone (a recurrent one needs its hidden state), or that lives on the meta device, is not
    checked.
    """
    size = getattr(model, "num_observations", None)
    if size is None or layer.weight.is_meta:  # a model on the meta device has no values to compare
        return
    rows = torch.randn(trial_rows(model, 4), size, generator=torch.Generator().manual_seed(0))
    inputs = {"observations": rows.to(layer.weight.device)}
    training, scaled = model.training, False
    model.eval()  # dropout or batch statistics would change the outputs between the two passes
    try:
        with torch.no_grad():
            try:
                before = model.compute(inputs, role=role)[0]
            except (RuntimeError, KeyError, TypeError, ValueError):
                return
            layer.weight.mul_(2.0)
            layer.bias.mul_(2.0)
            scaled = True
            after = model.compute(inputs, role=role)[0]
    finally:
        if scaled:  # halving undoes the doubling exactly
            with torch.no_grad():
                layer.weight.mul_(0.5)
                layer.bias.mul_(0.5)
        model.train(training)
    if not torch.allclose(after, 2.0 * before, rtol=1e-4, atol=1e-5):
        raise ValueError(f"PopArt keeps the values of {type(model).__name__} by rescaling its output layer {layer}, but the "
                         "model's outputs are not that layer's outputs (something follows it: a shortcut, a squashing "
                         "function): set `self.output_layer` to the nn.Linear that gives the values, or use "
                         "cfg['value_preprocessor'] = RunningStandardScaler")


class PopArt(RunningStandardScaler):
    """A :class:`RunningStandardScaler` of the returns that, whenever its statistics change, rescales the
    critic's output layer so that the critic's values in return units stay what they were (PopArt).

    With statistics ``(μ, σ)`` becoming ``(μ', σ')``, the output layer ``y = W h + b`` becomes
    ``W' = W σ/σ'`` and ``b' = (σ b + μ − μ') / σ'``: then ``σ' y' + μ' = σ y + μ`` for every input.
    One statistic (``size=1``) rescales every output of the layer alike (a critic with one value per
    agent, a Q critic with one per action); ``size`` equal to the layer's outputs rescales each on its own.

    Attach the critic with :meth:`preserve_outputs_of`; the algorithms do so for their value models.
    Unattached it is a plain :class:`RunningStandardScaler`.

    Args:
        size: number of statistics (1, or the number of outputs of the critic's output layer).
        epsilon: added to the variance to avoid division by zero.
        clip_threshold: standardised targets are clipped to ``±clip_threshold``.
        device: where the statistics live.
    """

    def __init__(self, size: int, *, epsilon: float = 1e-8, clip_threshold: float = 5.0,
                 device: Optional[torch.device] = None) -> None:
        super().__init__(size, epsilon=epsilon, clip_threshold=clip_threshold, device=device)
        self.__dict__["output_layer"] = None  # the critic's layer: not a submodule of the normaliser

    def preserve_outputs_of(self, model: nn.Module, *, also_policy: bool = False) -> None:
        """Rescale ``model``'s output layer (:func:`value_output_layer`) at every change of the statistics.
        A model that is ``also_policy`` must name its value layer (``model.output_layer``).
        """
        layer = value_output_layer(model, also_policy=also_policy)
        size = self.running_mean.shape[0]
        if size not in (1, layer.out_features):
            raise ValueError(f"PopArt of size {size} cannot rescale the output layer of {type(model).__name__}, which "
                             f"has {layer.out_features} outputs: give it size 1 or {layer.out_features}")
        if layer.bias is None:
            raise ValueError(f"PopArt shifts the outputs of {type(model).__name__} through the bias of its output layer, "
                             f"which has none: build that nn.Linear with bias=True")
        check_outputs_are_the_layer_s(model, layer, role="value" if also_policy else "check")
        self.__dict__["output_layer"] = layer

    def standard_deviation(self) -> torch.Tensor:
        """The statistics' standard deviation (what standardising divides by)."""
        return (self.running_variance + self.epsilon).sqrt()

    def _fold(self, batch_mean: torch.Tensor, batch_variance: torch.Tensor, batch_count: float) -> None:
        """Fold in a batch's statistics, then rescale the output layer to keep its outputs in return units."""
        old_mean, old_std = self.running_mean.clone(), self.standard_deviation()
        super()._fold(batch_mean, batch_variance, batch_count)
        layer = self.output_layer
        if layer is None:
            return
        new_std = self.standard_deviation()
        with torch.no_grad():
            scale = (old_std / new_std).to(layer.weight.dtype)
            shift = ((old_mean - self.running_mean) / new_std).to(layer.weight.dtype)
            layer.weight.mul_(scale.unsqueeze(-1))
            layer.bias.mul_(scale).add_(shift)
