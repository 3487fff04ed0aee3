"""A check that a checkpoint fits an algorithm before anything is loaded."""

from typing import Any, Mapping

import torch
from torch import nn


def _shape(value: Any) -> tuple:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()


def check_part_fits(name: str, part: Any, state: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming ``name`` and the tensor if ``state`` cannot be loaded into ``part``.

    Modules are compared tensor by tensor (names and shapes); optimizers by their number of
    parameter groups and parameters. Nothing is changed.
    """
    if isinstance(part, nn.Module):
        own = part.state_dict()
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        if missing or unexpected:
            raise ValueError(f"the checkpoint does not fit {name}: tensors missing from it {missing}, "
                             f"tensors this model does not have {unexpected}")
        for key, tensor in own.items():
            if _shape(state[key]) != _shape(tensor):
                raise ValueError(f"the checkpoint does not fit {name}: tensor {key!r} has shape {_shape(state[key])} "
                                 f"in the checkpoint but {_shape(tensor)} here")
    elif isinstance(part, torch.optim.Optimizer):
        theirs = [len(group["params"]) for group in state.get("param_groups", [])]
        own_counts = [len(group["params"]) for group in part.param_groups]
        if theirs != own_counts:
            raise ValueError(f"the checkpoint does not fit {name}: its parameter groups hold {theirs} tensors, "
                             f"this optimizer's {own_counts}")
