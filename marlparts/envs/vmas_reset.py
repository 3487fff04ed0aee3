"""Resetting some of a VMAS env's copies at once.

VMAS resets either every copy (``reset``: one vectorised call) or one copy (``reset_at(index)``: each call
costs about as much as a whole step, since scenarios compute over the full batch). Resetting the copies that
ended one by one is a Python loop over copies in the hot path. :class:`CopyResetter` avoids it: it keeps the
batched tensors of the copies that go on, resets every copy at once, and writes the kept rows back. Which
tensors are batched is found by walking the env's objects (world, entities, scenario, and the lists and dicts
they hold) for tensors whose first dimension is the number of copies; each is found again after the reset by
its path from the env, since a reset may replace it.

That reset draws a fresh row for every copy, the kept ones too, and those rows would be thrown away. With
``pooled=True`` the resetter keeps them: a copy that ends later starts from its own unused fresh row (its rows
written into every batched tensor, no call into VMAS), until a copy ends whose row was used; then it resets
every copy again. This is sound only for a scenario that draws every copy's start on its own and keeps all of
a copy's state in batched tensors (balance does). Where a scenario draws one value for the whole batch (a
``randperm`` or ``.item()`` in its reset: passage, wind_flocking, football, the MPE ports), every copy started
from one reset's rows shares it, and since a batch whose shared draw makes episodes long serves more starts
before it is replaced, the starts are no longer drawn from the scenario's distribution; state outside batched
tensors (het_mass's masses, road_traffic's buffer of past positions, whose first dimension is not the copies)
is not started afresh. So it is off by default. On balance with 512 copies it makes env-only stepping 1.27x as
fast (``benchmarks/README.md``).
"""

from typing import Any, List, Optional, Tuple

import torch

# objects of these packages hold no per-copy simulation state (rendering, spaces, tensors' own internals)
_SKIPPED_PACKAGES = frozenset({"torch", "numpy", "pyglet", "gym", "gymnasium", "builtins", "PIL"})


Path = Tuple[Tuple[str, Any], ...]  # ("attr", name) / ("item", key or index) steps from the env


def batched_tensor_paths(root: Any, num_envs: int) -> List[Path]:
    """The path from ``root`` to every tensor reachable from it whose first dimension is ``num_envs``.

    Attributes are read through ``vars`` (so a property's backing field is found, not the property), and the
    walk follows attributes, lists, tuples and dicts, of objects and of tensors alike (a scenario may keep
    per-copy tensors in a dict of its agents). Each tensor is found by its first path.
    """
    paths: List[Path] = []
    seen = set()
    stack: List[Tuple[Any, Path]] = [(root, ())]
    while stack:
        value, path = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            # a view expanded along the first dimension holds one value for every copy: nothing per copy
            if value.dim() > 0 and value.shape[0] == num_envs and (num_envs == 1 or value.stride(0) != 0):
                paths.append(path)
        elif isinstance(value, (list, tuple)):
            stack.extend((item, path + (("item", index),)) for index, item in enumerate(value) if _worth_walking(item))
        elif isinstance(value, dict):
            stack.extend((item, path + (("item", key),)) for key, item in value.items() if _worth_walking(item))
        elif hasattr(value, "__dict__"):
            stack.extend((item, path + (("attr", name),)) for name, item in vars(value).items() if _worth_walking(item))
    return paths


def _worth_walking(value: Any) -> bool:
    if isinstance(value, (torch.Tensor, list, tuple, dict)):
        return True
    return (hasattr(value, "__dict__") and not isinstance(value, type)
            and type(value).__module__.split(".")[0] not in _SKIPPED_PACKAGES)


def resolve(root: Any, path: Path) -> Any:
    """The value at ``path`` from ``root``."""
    value = root
    for kind, key in path:
        value = getattr(value, key) if kind == "attr" else value[key]
    return value


def _describe(path: Path) -> str:
    return "env" + "".join(f".{key}" if kind == "attr" else f"[{key!r}]" for kind, key in path)


class CopyResetter:
    """Resets the ended copies of a VMAS env without a Python loop over them.

    Args:
        env: the VMAS ``Environment``.
        vectorised: reset ended copies (but not all) by keep-reset-restore (one ended copy, without ``pooled``:
            one ``reset_at``); False: always one ``reset_at`` per ended copy (VMAS's own way, as a fallback for a
            scenario whose state is not all in batched tensors).
        pooled: (with ``vectorised``) keep the fresh rows of every copy that a keep-reset-restore drew and did
            not use, and start later episodes of those copies from them, without calling VMAS, until a copy
            ends whose fresh row was used; then draw a fresh row for every copy again. Only for scenarios that
            draw each copy's start on its own and keep all state in batched tensors (see above).
    """

    def __init__(self, env: Any, *, vectorised: bool = True, pooled: bool = False) -> None:
        self.env = env
        self.vectorised = vectorised
        self.pooled = pooled and vectorised
        self._fresh: List[Tuple[Path, torch.Tensor]] = []  # every batched tensor right after the last reset
        self._unused: Optional[torch.Tensor] = None  # (num_envs,) bool: copies whose fresh row is still unused

    def forget_fresh_rows(self) -> None:
        """Drop the kept fresh rows (after the env was reset or seeded from outside)."""
        self._fresh, self._unused = [], None

    def reset(self, ended: torch.Tensor) -> None:
        """Reset the copies where the ``(num_envs,)`` bool ``ended`` is True; the others go on untouched."""
        ended = ended.to(self.env.device)  # one index of the copies on the env's device: no mask resolved per tensor
        count = int(ended.sum())
        if count == 0:
            return
        if self._unused is not None and bool((self._unused | ~ended).all()) and self._start_from_fresh_rows(ended):
            return
        if count == self.env.num_envs:
            self.env.reset(return_observations=False)
            self.forget_fresh_rows()
        elif not self.vectorised or (count == 1 and not self.pooled):
            for index in torch.nonzero(ended).flatten().tolist():  # one reset_at costs about a vectorised reset
                self.env.reset_at(index, return_observations=False)
        else:
            self._reset_some(ended)

    def _start_from_fresh_rows(self, ended: torch.Tensor) -> bool:
        paths = batched_tensor_paths(self.env, self.env.num_envs)
        if set(paths) != {path for path, _ in self._fresh}:
            return False  # a batched tensor came or went since the fresh rows were drawn: draw them again
        targets = [(resolve(self.env, path), rows) for path, rows in self._fresh]
        if any(target.shape != rows.shape for target, rows in targets):
            return False
        index = torch.nonzero(ended).flatten()
        for target, rows in targets:
            target[index] = rows.index_select(0, index)
        self._unused &= ~ended
        return True

    def _reset_some(self, ended: torch.Tensor) -> None:
        keep = torch.nonzero(~ended).flatten()
        paths = batched_tensor_paths(self.env, self.env.num_envs)
        kept = [(path, resolve(self.env, path).index_select(0, keep)) for path in paths]
        self.env.reset(return_observations=False)
        if self.pooled:
            self._fresh = [(path, resolve(self.env, path).clone())
                           for path in batched_tensor_paths(self.env, self.env.num_envs)]
            self._unused = ~ended
        for path, rows in kept:
            try:
                tensor = resolve(self.env, path)
            except (AttributeError, KeyError, IndexError):
                continue  # the reset dropped it (a cache, rebuilt when next needed)
            if tensor is None:
                continue
            if isinstance(tensor, torch.Tensor) and tensor.dim() > 0 and tensor.stride(0) == 0:
                continue  # now one value for every copy (an expanded view): nothing per copy to keep
            if not isinstance(tensor, torch.Tensor) or tensor.shape[0] != self.env.num_envs \
                    or tensor.shape[1:] != rows.shape[1:]:
                raise RuntimeError(f"VMAS's reset replaced {_describe(path)} by something else than a tensor of the same "
                                   f"shape, so the copies that go on cannot be kept; wrap this env with "
                                   f"vectorised_reset=False")
            tensor[keep] = rows  # (index_copy_ would refuse a tensor expanded along a later dimension)
