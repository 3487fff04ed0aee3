"""Adam whose step, in the common case, is one call of PyTorch's fused kernel and one increment."""

import inspect
from typing import Any, Callable, List, Optional

import torch
from torch.optim import optimizer as torch_optimizer

_TORCH_ADAM_STEP = inspect.unwrap(torch.optim.Adam.step)  # PyTorch's own step, without the hook wrapper
_GLOBAL_HOOKS = (torch_optimizer._global_optimizer_pre_hooks, torch_optimizer._global_optimizer_post_hooks)
_PLAIN_OPTIONS = {"amsgrad": False, "maximize": False, "capturable": False, "differentiable": False,
                  "decoupled_weight_decay": False}


def _plain(options: Any) -> bool:
    """Whether a parameter group's options are the ones the short path implements (checked at every step: a
    group's options may change between steps).
    """
    return all(options.get(key, plain) == plain for key, plain in _PLAIN_OPTIONS.items()) and \
        not isinstance(options["lr"], torch.Tensor) and not any(isinstance(b, torch.Tensor) for b in options["betas"])


class _GroupTensors:
    """One parameter group's tensors as the fused kernel takes them, and the step counters as views into one
    tensor, so that a step increments them all in one operation.
    """

    def __init__(self, parameters: List[torch.Tensor], state: Any) -> None:
        self.parameters = parameters
        self.exp_avgs = [state[parameter]["exp_avg"] for parameter in parameters]
        self.exp_avg_sqs = [state[parameter]["exp_avg_sq"] for parameter in parameters]
        self.counters = torch.stack([state[parameter]["step"] for parameter in parameters])
        self.steps = list(self.counters.unbind())
        for parameter, step in zip(parameters, self.steps):
            state[parameter]["step"] = step

    def still_in(self, state: Any) -> bool:
        """True while the optimizer's state holds these very tensors (a load or a reset replaces them)."""
        for parameter, exp_avg, exp_avg_sq, step in zip(self.parameters, self.exp_avgs, self.exp_avg_sqs, self.steps):
            own = state.get(parameter)
            if own is None or own.get("exp_avg") is not exp_avg or own.get("exp_avg_sq") is not exp_avg_sq \
                    or own.get("step") is not step:
                return False
        return True


class LeanAdam(torch.optim.Adam):
    """``torch.optim.Adam(..., fused=True)`` without the per-step bookkeeping of the generic optimizer.

    The small models of multi-agent RL step their optimizers hundreds of times per rollout, and PyTorch's
    step spends several times longer gathering its state tensors and counting steps (one operation per
    parameter) than its fused kernel spends updating them. Here, once the state exists, a step is one
    increment of every parameter's step counter (views into one tensor) and one call of the same fused
    kernel with the same arguments: the parameters, state and ``state_dict`` are the ones
    ``torch.optim.Adam`` would hold, number for number.

    PyTorch's own step runs instead wherever the short path does not apply: the first step (it creates
    the state), a closure, a step under a ``GradScaler`` (which hands the fused step its scale and
    found-infinity flag), a parameter without a gradient, options other than the plain ones
    (``amsgrad``, ``maximize``, ``capturable``, ``differentiable``, ``decoupled_weight_decay``, a tensor
    learning rate or betas), parameters of several devices or dtypes, or state that a load replaced.
    Hooks registered on the optimizer run either way.
    """

    def __init__(self, params: Any, **kwargs: Any) -> None:
        if kwargs.setdefault("fused", True) is not True:
            raise ValueError(f"LeanAdam is the fused Adam: fused must be True, got {kwargs['fused']!r}")
        super().__init__(params, **kwargs)
        self._groups: Optional[List[_GroupTensors]] = None

    def step(self, closure: Optional[Callable[[], float]] = None) -> Optional[float]:
        """One Adam step over every parameter group (PyTorch's step wherever the short path does not apply);
        the step hooks registered on this optimizer, or on every optimizer, run around it.
        """
        if self._optimizer_step_pre_hooks or self._optimizer_step_post_hooks or _GLOBAL_HOOKS[0] or _GLOBAL_HOOKS[1]:
            return _HOOKED_STEP(self, closure)
        return self._step(closure)

    def _step(self, closure: Optional[Callable[[], float]]) -> Optional[float]:
        groups = self._groups
        scaled = getattr(self, "grad_scale", None) is not None or getattr(self, "found_inf", None) is not None
        if closure is None and not scaled and groups is not None and len(groups) == len(self.param_groups):
            gradients = [[parameter.grad for parameter in group.parameters] for group in groups]
            if all(gradient is not None for grads in gradients for gradient in grads) and \
                    all(_plain(options) for options in self.param_groups) and \
                    all(group.still_in(self.state) for group in groups):
                grad_was_enabled = torch.is_grad_enabled()
                torch.set_grad_enabled(False)  # the kernel writes into the parameters
                try:
                    for tensors, options, grads in zip(groups, self.param_groups, gradients):
                        tensors.counters.add_(1)
                        beta1, beta2 = options["betas"]
                        torch._fused_adam_(tensors.parameters, grads, tensors.exp_avgs, tensors.exp_avg_sqs, [],
                                           tensors.steps, amsgrad=False, lr=options["lr"], beta1=beta1, beta2=beta2,
                                           weight_decay=options["weight_decay"], eps=options["eps"], maximize=False,
                                           grad_scale=None, found_inf=None)
                finally:
                    torch.set_grad_enabled(grad_was_enabled)
                return None
        loss = _TORCH_ADAM_STEP(self, closure)
        self._groups = self._short_path_groups()
        return loss

    step.hooked = True  # not wrapped by torch.optim.Optimizer: the hooks run through _HOOKED_STEP when there are any

    def __setstate__(self, state: Any) -> None:
        """As ``torch.optim.Adam.__setstate__`` (unpickling, ``copy.deepcopy``); the copy gathers its state anew."""
        super().__setstate__(state)
        self._groups = None

    def load_state_dict(self, state_dict: Any) -> None:
        """As ``torch.optim.Adam.load_state_dict``; the next step takes PyTorch's path and gathers the state anew."""
        super().load_state_dict(state_dict)
        self._groups = None

    def _short_path_groups(self) -> Optional[List[_GroupTensors]]:
        """The groups' tensors for the short path, or None where a group does not qualify for it."""
        groups = []
        for options in self.param_groups:
            parameters = options["params"]
            if not _plain(options):
                return None
            if len({(parameter.device, parameter.dtype) for parameter in parameters}) > 1:
                return None
            if any(not {"exp_avg", "exp_avg_sq", "step"} <= self.state.get(parameter, {}).keys()
                   for parameter in parameters):
                return None
            groups.append(_GroupTensors(list(parameters), self.state))
        return groups


_HOOKED_STEP = torch.optim.Optimizer.profile_hook_step(LeanAdam._step)  # the step with hooks, as PyTorch runs them
