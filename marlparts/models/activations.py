"""Activations of the models' hidden layers."""

from typing import Any, Tuple

import torch
from torch import nn


class _TanhFromSigmoid(torch.autograd.Function):
    """``tanh(x) = 2 σ(2x) − 1``, with tanh's own derivative ``1 − tanh(x)²`` in the backward pass."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``2 σ(2x) − 1`` in one new tensor."""
        return _tanh_from_sigmoid_without_gradient(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[torch.Tensor], output: torch.Tensor) -> None:
        """Keep the output: the derivative is read off it."""
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``grad · (1 − y²)``, in differentiable operations (so a second derivative can be taken)."""
        (y,) = ctx.saved_tensors
        return torch.addcmul(grad, grad, y.square(), value=-1.0)


# below this many elements the extra calls cost more than the faster kernel saves (measured on one thread)
SIGMOID_TANH_MIN_ELEMENTS = 32768


def _tanh_from_sigmoid_without_gradient(x: torch.Tensor) -> torch.Tensor:
    """``2 σ(2x) − 1`` in one new tensor, outside autograd."""
    y = torch.mul(x, 2.0)
    torch.sigmoid(y, out=y)
    return y.mul_(2.0).sub_(1.0)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """The hyperbolic tangent of ``x``; on the CPU, for tensors of at least ``SIGMOID_TANH_MIN_ELEMENTS``
    elements, computed as ``2 σ(2x) − 1``.

    PyTorch's CPU kernel for ``tanh`` is several times slower than its ``sigmoid`` (on an AVX-512
    machine, 1.57M float32 values: 4.3 ms against 0.64 ms on one thread), and the tanh of an MLP's
    hidden layers is a large share of a small model's forward pass over a large batch. The identity
    gives the same function (at most 2e-7 apart from ``torch.tanh`` in float32) at about half the cost,
    forward and backward, from a few tens of thousands of elements up. Smaller tensors and other
    devices use ``torch.tanh``.
    """
    if x.numel() < SIGMOID_TANH_MIN_ELEMENTS or not x.is_cpu:
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _TanhFromSigmoid.apply(x)
    return _tanh_from_sigmoid_without_gradient(x)


class Tanh(nn.Module):
    """``torch.nn.Tanh`` computed by :func:`tanh`: the default activation of :func:`~marlparts.models.mlp`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The hyperbolic tangent of ``x``."""
        return tanh(x)
