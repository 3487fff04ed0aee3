"""Which optimizers can step a stack of models as each member's own optimizer would.

A stack (:class:`~marlparts.models.stacked.StackedModels`) keeps its members' parameters as slices of
one tensor, and one optimizer steps that tensor. Each member then trains exactly as with an optimizer
of its own only where the optimizer's step is element-wise: every entry of a parameter, and of each
of its state tensors, moves by a function of that entry's own gradient and state, and of per-tensor
numbers that depend on the step count alone (Adam's bias correction, NAdam's momentum product,
Adagrad's learning-rate decay), which the stack keeps per member
(:class:`~marlparts.agents.common.stacked_optimizer.MemberOptimizerState`). An optimizer that reads the
whole tensor (a norm, an RMS, a factored second moment: ``torch.optim.Adafactor``; a line search:
``torch.optim.LBFGS``) would mix the members.
"""

from typing import FrozenSet, Optional

import torch

ELEMENT_WISE_OPTIMIZERS: FrozenSet[type] = frozenset({
    torch.optim.SGD,       # momentum, dampening, Nesterov, weight decay: per entry
    torch.optim.Adam,      # moments per entry; bias correction from the step count; amsgrad's running max per entry
    torch.optim.AdamW,     # Adam with decoupled weight decay (per entry)
    torch.optim.Adamax,    # an infinity-norm moment per entry (the max of |g| over steps, not over the tensor)
    torch.optim.NAdam,     # the momentum product depends on the step count alone
    torch.optim.RAdam,     # the rectification depends on the step count alone
    torch.optim.RMSprop,   # centred or not, with or without momentum: per entry
    torch.optim.Adagrad,   # the accumulated square per entry; the learning-rate decay from the step count
    torch.optim.Adadelta,  # running averages per entry
    torch.optim.Rprop,     # a step size per entry, from the sign of its own gradient
    torch.optim.ASGD,      # the averaged parameter per entry; eta and mu from the step count
})
"""The ``torch.optim`` classes whose step is element-wise with any of their options (checked, option by
option, by ``tests/test_stacking.py``: a stack trains as its separate members). Subclasses are not
included: they may change the step."""


def stacking_obstacle(optimizer_class: type) -> Optional[str]:
    """Why models trained by ``optimizer_class`` cannot be stacked (None where they can): the class must be one of
    :data:`ELEMENT_WISE_OPTIMIZERS`.
    """
    if optimizer_class in ELEMENT_WISE_OPTIMIZERS:
        return None
    public = getattr(torch.optim, optimizer_class.__name__, None) is optimizer_class
    name = f"torch.optim.{optimizer_class.__name__}" if public else f"{optimizer_class.__module__}.{optimizer_class.__qualname__}"
    return (f"their optimizer {name} is not one whose step is known to be element-wise (one step on the stacked "
            "tensor would mix the members, e.g. by the RMS of the whole tensor or a factored second moment); "
            "set cfg['stack_models'] = False to train them one after another without this warning")
