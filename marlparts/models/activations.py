"""Activations of the models' hidden layers."""

from typing import Any, Tuple

import torch
from torch import nn


class _TanhFromSigmoid(torch.autograd.Function):
    """``tanh(x) = 2 σ(2x) − 1``, with tanh's own derivative ``1 − tanh(x)²`` in both modes of differentiation."""

    generate_vmap_rule = True  # (forward and derivatives are made of operations that vmap batches)

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``2 σ(2x) − 1`` in one new tensor."""
        return _tanh_from_sigmoid_without_gradient(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: Tuple[torch.Tensor], output: torch.Tensor) -> None:
        """Keep the output: the derivative is read off it."""
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``grad · (1 − y²)``, in differentiable operations (so a second derivative can be taken)."""
        (y,) = ctx.saved_tensors
        return torch.addcmul(grad, grad, y.square(), value=-1.0)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        """Forward mode: ``tangent · (1 − y²)``."""
        (y,) = ctx.saved_tensors
        return torch.addcmul(tangent, tangent, y.square(), value=-1.0)


# below this many elements the extra calls cost more than the faster kernel saves (measured on one thread)
SIGMOID_TANH_MIN_ELEMENTS = 32768
# in half precision 2σ(2x) − 1 rounds small values to 0: those dtypes keep torch.tanh
_FULL_PRECISION = (torch.float32, torch.float64)


def _tanh_from_sigmoid_without_gradient(x: torch.Tensor) -> torch.Tensor:
    """``2 σ(2x) − 1`` in one new tensor, outside autograd."""
    return torch.mul(x, 2.0).sigmoid_().mul_(2.0).sub_(1.0)


def tanh(x: torch.Tensor) -> torch.Tensor:
    """The hyperbolic tangent of ``x``; on the CPU, for tensors of at least ``SIGMOID_TANH_MIN_ELEMENTS``
    elements, computed as ``2 σ(2x) − 1``.

    PyTorch's CPU kernel for ``tanh`` is several times slower than its ``sigmoid`` (on an AVX-512
    machine, 1.57M float32 values: 4.3 ms against 0.64 ms on one thread), and the tanh of an MLP's
    hidden layers is a large share of a small model's forward pass over a large batch. The identity
    gives the same function (at most 2e-7 apart from ``torch.tanh`` in float32) at about half the cost,
    forward and backward, from a few tens of thousands of elements up. Smaller tensors, half-precision
    ones (where ``2σ(2x) − 1`` would round small values to 0) and other devices use ``torch.tanh``.
    """
    if x.numel() < SIGMOID_TANH_MIN_ELEMENTS or not x.is_cpu or x.dtype not in _FULL_PRECISION:
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _TanhFromSigmoid.apply(x)
    return _tanh_from_sigmoid_without_gradient(x)


class Tanh(nn.Module):
    """``torch.nn.Tanh`` computed by :func:`tanh`: the default activation of :func:`~marlparts.models.mlp`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The hyperbolic tangent of ``x``."""
        return tanh(x)
