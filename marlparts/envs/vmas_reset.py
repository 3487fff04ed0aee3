"""Resetting some of a VMAS env's copies at once.

VMAS resets either every copy (``reset``: one vectorised call) or one copy (``reset_at(index)``: each call
costs about as much as a whole step, since scenarios compute over the full batch). Resetting the copies that
ended one by one is a Python loop over copies in the hot path. :class:`CopyResetter` avoids it: it keeps the
batched tensors of the copies that go on, resets every copy at once, and writes the kept rows back. Which
tensors are batched is found by walking the env's objects (world, entities, scenario) for tensors whose first
dimension is the number of copies.
"""

from typing import Any, Iterator, List, Tuple

import torch

# objects of these packages hold no per-copy simulation state (rendering, spaces, tensors' own internals)
_SKIPPED_PACKAGES = frozenset({"torch", "numpy", "pyglet", "gym", "gymnasium", "builtins", "PIL"})


def batched_tensor_slots(root: Any, num_envs: int) -> List[Tuple[Any, str]]:
    """``(owner, attribute)`` of every tensor reachable from ``root`` whose first dimension is ``num_envs``.

    Attributes are read through ``vars`` (so a property's backing field is found, not the property), and the
    walk follows attributes, lists, tuples and dicts of objects.
    """
    slots: List[Tuple[Any, str]] = []
    seen = set()
    stack = [root]
    while stack:
        owner = stack.pop()
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        for name, value in vars(owner).items():
            if isinstance(value, torch.Tensor):
                if value.dim() > 0 and value.shape[0] == num_envs:
                    slots.append((owner, name))
            else:
                stack.extend(_objects_in(value))
    return slots


def _objects_in(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    else:
        items = (value,)
    for item in items:
        if hasattr(item, "__dict__") and not isinstance(item, type) \
                and type(item).__module__.split(".")[0] not in _SKIPPED_PACKAGES:
            yield item


class CopyResetter:
    """Resets the ended copies of a VMAS env without a Python loop over them.

    Args:
        env: the VMAS ``Environment``.
        vectorised: reset two or more ended copies (but not all) by keep-reset-restore; False: always one
            ``reset_at`` per ended copy (VMAS's own way, as a fallback for a scenario whose state is not
            all in batched tensors).
    """

    def __init__(self, env: Any, *, vectorised: bool = True) -> None:
        self.env = env
        self.vectorised = vectorised

    def reset(self, ended: torch.Tensor) -> None:
        """Reset the copies where the ``(num_envs,)`` bool ``ended`` is True; the others go on untouched."""
        count = int(ended.sum())
        if count == 0:
            return
        if count == self.env.num_envs:
            self.env.reset(return_observations=False)
        elif count == 1 or not self.vectorised:  # one reset_at costs about as much as a vectorised reset
            for index in torch.nonzero(ended).flatten().tolist():
                self.env.reset_at(index, return_observations=False)
        else:
            self._reset_some(ended)

    def _reset_some(self, ended: torch.Tensor) -> None:
        keep = ~ended
        kept = [(owner, name, getattr(owner, name)[keep].clone())
                for owner, name in batched_tensor_slots(self.env, self.env.num_envs)]
        self.env.reset(return_observations=False)
        for owner, name, rows in kept:
            tensor = getattr(owner, name)
            if tensor is None or tensor.shape[1:] != rows.shape[1:]:
                raise RuntimeError(f"VMAS reset replaced {type(owner).__name__}.{name} by a tensor of another shape; "
                                   f"wrap this env with vectorised_reset=False")
            tensor[keep] = rows
