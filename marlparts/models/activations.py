"""Activations of the models' hidden layers."""

import os
import time
from typing import Any, Optional, Tuple

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
# with "auto", the sigmoid form is chosen only where its forward pass is this many times as fast as torch.tanh's:
# where the two are close, torch.tanh (exact, with its own one-pass derivative) is kept
SIGMOID_TANH_MIN_SPEEDUP = 1.5
TANH_KERNELS = ("torch", "sigmoid", "auto")
TANH_KERNEL_VARIABLE = "MARLPARTS_TANH_KERNEL"

_chosen_kernel: Optional[str] = None  # "torch" or "sigmoid" once chosen


def _tanh_from_sigmoid_without_gradient(x: torch.Tensor) -> torch.Tensor:
    """``2 σ(2x) − 1`` in one new tensor, outside autograd."""
    return torch.mul(x, 2.0).sigmoid_().mul_(2.0).sub_(1.0)


def faster_tanh_kernel(torch_seconds: float, sigmoid_seconds: float) -> str:
    """``"sigmoid"`` where ``2σ(2x) − 1`` took at most ``1 / SIGMOID_TANH_MIN_SPEEDUP`` of ``torch.tanh``'s time
    on the same tensor, else ``"torch"``.
    """
    return "sigmoid" if sigmoid_seconds * SIGMOID_TANH_MIN_SPEEDUP <= torch_seconds else "torch"


def _time_tanh_kernels(repeats: int = 9, calls: int = 16) -> Tuple[float, float]:
    """The best time of ``calls`` forward passes of each kernel on a 2048 x 64 float32 CPU tensor (seconds)."""
    with torch.no_grad():
        x = torch.linspace(-4.0, 4.0, 2048 * 64, dtype=torch.float32, device="cpu").reshape(2048, 64)
        best = {"torch": float("inf"), "sigmoid": float("inf")}
        for _ in range(repeats):  # the kernels alternate, so a slow moment of the machine slows both
            for name, kernel in (("torch", torch.tanh), ("sigmoid", _tanh_from_sigmoid_without_gradient)):
                began = time.perf_counter()
                for _ in range(calls):
                    kernel(x)
                best[name] = min(best[name], time.perf_counter() - began)
    return best["torch"], best["sigmoid"]


def choose_tanh_kernel(kernel: str) -> str:
    """Set how :func:`tanh` computes large CPU tensors for the rest of the process, and return the kernel in use.

    ``"torch"`` (the default) is ``torch.tanh``. ``"sigmoid"`` is ``2 σ(2x) − 1``, which differs from it by at
    most 2e-7 in float32 and is faster where PyTorch's CPU ``tanh`` kernel is slow: its speed varies from one
    machine to the next (on one AVX-512 machine it took 4.3 ms on 1.57M float32 values where ``sigmoid`` took
    0.64 ms; on another 0.53 ms, three times as fast as ``2 σ(2x) − 1`` there). ``"auto"`` times both forward
    kernels now (about 10 ms on an idle machine) and keeps ``2 σ(2x) − 1`` only where it is at least
    ``SIGMOID_TANH_MIN_SPEEDUP`` times as fast. A timing can come out differently from one process to the next
    on a loaded machine, and the two kernels' small differences grow over a training run: where runs must match
    bit for bit (a seeded rerun, a run resumed in a fresh process), name the kernel.
    """
    global _chosen_kernel
    if kernel not in TANH_KERNELS:
        raise ValueError(f"the tanh kernel must be one of {TANH_KERNELS}, got {kernel!r}")
    _chosen_kernel = faster_tanh_kernel(*_time_tanh_kernels()) if kernel == "auto" else kernel
    return _chosen_kernel


def tanh_kernel() -> str:
    """The kernel :func:`tanh` uses for large CPU tensors, ``"torch"`` or ``"sigmoid"``: the one
    :func:`choose_tanh_kernel` set, else, at the first call, the one the ``MARLPARTS_TANH_KERNEL`` environment
    variable names (``"torch"`` where it is not set).
    """
    if _chosen_kernel is None:
        requested = os.environ.get(TANH_KERNEL_VARIABLE, "torch")
        if requested not in TANH_KERNELS:
            raise ValueError(f"the environment variable {TANH_KERNEL_VARIABLE} must be one of {TANH_KERNELS}, "
                             f"got {requested!r}")
        if requested == "auto" and torch.compiler.is_compiling():
            return "torch"  # nothing is timed while a graph is traced (the compiler makes its own tanh code)
        return choose_tanh_kernel(requested)
    return _chosen_kernel


def tanh(x: torch.Tensor) -> torch.Tensor:
    """The hyperbolic tangent of ``x``: ``torch.tanh``, or on the CPU, for tensors of at least
    ``SIGMOID_TANH_MIN_ELEMENTS`` elements, ``2 σ(2x) − 1`` where that kernel is chosen (:func:`choose_tanh_kernel`).

    On some machines PyTorch's CPU kernel for ``tanh`` is several times slower than its ``sigmoid``, and
    the tanh of an MLP's hidden layers is a large share of a small model's forward pass over a large batch.
    The identity gives the same function (at most 2e-7 apart from ``torch.tanh`` in float32) at about half
    the cost there, forward and backward. Smaller tensors, half-precision ones (where ``2σ(2x) − 1`` would
    round small values to 0) and other devices always use ``torch.tanh``.
    """
    if x.numel() < SIGMOID_TANH_MIN_ELEMENTS or not x.is_cpu or x.dtype not in _FULL_PRECISION \
            or tanh_kernel() == "torch":
        return torch.tanh(x)
    if torch.is_grad_enabled() and x.requires_grad:
        return _TanhFromSigmoid.apply(x)
    return _tanh_from_sigmoid_without_gradient(x)


class Tanh(nn.Module):
    """``torch.nn.Tanh`` computed by :func:`tanh`: the default activation of :func:`~marlparts.models.mlp`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The hyperbolic tangent of ``x``."""
        return tanh(x)
