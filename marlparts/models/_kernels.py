"""Faster forms of two operations the models use, with the same values as PyTorch's own.

They are implementation details (the names here are private): ``mlp`` puts :class:`FastTanh`
where ``torch.nn.Tanh`` is asked for, and the categorical policy normalises its logits with
:func:`log_softmax`. Both trade nothing in accuracy; whether they are faster depends on the
PyTorch build and the hardware, and ``benchmarks/throughput.py`` is where to check.
"""

import torch
from torch import nn


def _tanh_by_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """``2·sigmoid(2x) − 1``: one new tensor, three in-place passes."""
    return torch.mul(x, 2.0).sigmoid_().mul_(2.0).sub_(1.0)


class _TanhFunction(torch.autograd.Function):
    """``tanh(x) = 2·sigmoid(2x) − 1`` with the backward ``g·(1 − y²)`` computed from the output."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = _tanh_by_sigmoid(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)  # g·(1 − y²) in one fused pass


class FastTanh(nn.Module):
    """``torch.nn.Tanh`` computed as ``2·sigmoid(2x) − 1`` (equal within float32 rounding, about 2e-7),
    for CPU builds of PyTorch whose ``tanh`` kernel is slower than their ``sigmoid`` one; its
    backward is PyTorch's fused ``tanh_backward``.
    """

    # below these many elements the fixed cost of the extra calls outweighs the faster kernel: a few thousand
    # without a gradient, tens of thousands with one (the autograd function's own backward node costs more)
    SMALL = 8192
    SMALL_WITH_GRADIENT = 32768

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``tanh(x)``: PyTorch's own for small tensors (acting on a few env copies, small minibatches),
        the faster form for large ones, without the autograd function where no gradient is recorded.
        """
        if x.requires_grad and torch.is_grad_enabled():
            return torch.tanh(x) if x.numel() < self.SMALL_WITH_GRADIENT else _TanhFunction.apply(x)
        return torch.tanh(x) if x.numel() < self.SMALL else _tanh_by_sigmoid(x)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """``torch.log_softmax(logits, dim=-1)`` for ``(batch, actions)`` logits.

    On the CPU it normalises the transposed view over its first dimension: PyTorch's CPU kernel
    vectorises along that dimension, which suits the handful of actions a policy has better than
    normalising each short row. The values are the same.
    """
    if logits.device.type == "cpu" and logits.dim() == 2:
        return torch.log_softmax(logits.t(), dim=0).t()
    return torch.log_softmax(logits, dim=-1)
