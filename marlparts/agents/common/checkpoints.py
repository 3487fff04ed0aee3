"""Checkpoints of an algorithm: what goes in, a check that a checkpoint fits before anything is loaded,
and loading that changes nothing when it fails.
"""

import copy
import os
from typing import Any, Dict, Mapping, Optional, Sequence

import torch
from torch import nn

from marlparts.utils.checkpoint_files import load_checkpoint_file, save_checkpoint_file
from marlparts.utils.distributed import is_main_process
from marlparts.utils.seeding import rng_states, set_rng_states

#: counters that checkpoints of earlier versions lack (loaded as None and False)
OPTIONAL_COUNTERS = frozenset({"evaluated_at", "zero_sum_self_play"})


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


def _kind_and_agents(name: str) -> tuple:
    """``("policy", "agent_0+agent_1")`` of a part name ``policy[agent_0+agent_1]`` (the agents empty without any)."""
    kind, _, agents = name.partition("[")
    return kind, agents.rstrip("]")


def match_part_names(own: Sequence[str], saved: Sequence[str]) -> Dict[str, str]:
    """``{own name: saved name}``: the checkpoint part each part of the algorithm loads from.

    A part loads from the part of the same name. Where the names differ only in their agents, each side has one
    group that shares every model (every part of a side names the same agents, joined by ``+``, and each kind of
    part comes once) and one side's agents are among the other's (``agent_0..agent_5`` and ``agent_0..agent_7``;
    never two teams of different ids), each part loads from the saved part of its kind: models shared by all
    agents, trained with some number of agents, run on another (graph and set networks, or parameter-shared
    policies on the agent's own view). Otherwise the names are left as they are, and the check that follows
    names what does not match.
    """
    matched = {name: name for name in own if name in saved}
    if len(matched) == len(own) == len(saved):
        return matched
    own_kinds = [_kind_and_agents(name) for name in own]
    saved_kinds = [_kind_and_agents(name) for name in saved]
    one_group = all(len({agents for _, agents in kinds}) == 1 and len({kind for kind, _ in kinds}) == len(kinds)
                    and not any("|" in agents for _, agents in kinds)  # a stack of agents' own models
                    for kinds in (own_kinds, saved_kinds))
    if not one_group or {kind for kind, _ in own_kinds} != {kind for kind, _ in saved_kinds}:
        return {name: name for name in own}
    own_agents, saved_agents = set(own_kinds[0][1].split("+")), set(saved_kinds[0][1].split("+"))
    if not (own_agents <= saved_agents or saved_agents <= own_agents):
        return {name: name for name in own}
    saved_by_kind = {kind: name for (kind, _), name in zip(saved_kinds, saved)}
    return {name: saved_by_kind[kind] for (kind, _), name in zip(own_kinds, own)}


class CheckpointMixin:
    """Saving and loading of :class:`~marlparts.agents.MultiAgent`: every part of every trained model,
    the counters, the random generators' states, the experiment folder and, when asked, the memories.
    """

    def checkpoint_parts(self) -> Dict[str, Any]:
        """``{name: part}`` of every object with a ``state_dict`` that makes up the algorithm's state."""
        parts: Dict[str, Any] = {}
        for record in self.trained:
            parts.update(record.checkpoint_parts())
        return parts

    def counters(self) -> Dict[str, Any]:
        """The algorithm's counters (subclasses add theirs): saved and restored with the models. ``evaluated_at``
        (the step of the last evaluation during training) tells a resumed run whether its first step's
        evaluation is done; ``zero_sum_self_play`` that its evaluations keep no ``best_agent.pt``.
        """
        return {"timestep": self.timestep, "best_return": self.best_return, "evaluated_at": self.evaluated_at,
                "zero_sum_self_play": self.zero_sum_self_play}

    def load_counters(self, counters: Mapping[str, Any]) -> None:
        """Restore what :meth:`counters` returned (a checkpoint written before ``evaluated_at`` or
        ``zero_sum_self_play`` was kept: None and False).
        """
        self.timestep = int(counters["timestep"])
        self.best_return = float(counters["best_return"])
        evaluated_at = counters.get("evaluated_at")
        self.evaluated_at = None if evaluated_at is None else int(evaluated_at)
        self.zero_sum_self_play = bool(counters.get("zero_sum_self_play", False))

    def state_dict(self, *, include_memory: Optional[bool] = None) -> Dict[str, Any]:
        """Everything that makes up the algorithm's state: models, optimizers, schedulers, preprocessors,
        counters, the random generators' states, the experiment folder and, if ``include_memory``
        (default ``cfg["experiment"]["checkpoint_memory"]``), each group's memory.
        """
        if include_memory is None:
            include_memory = bool(self.cfg["experiment"]["checkpoint_memory"])
        state = {"modules": {name: part.state_dict() for name, part in self.checkpoint_parts().items()},
                 "counters": self.counters(), "rng": rng_states(), "experiment_dir": self.experiment_dir}
        if include_memory and self.NEEDS_MEMORY:
            state["memories"] = {group.uids[0]: group.memory.state_dict() for group in self.groups}
        return state

    def _check_state(self, state: Mapping[str, Any], sources: Mapping[str, str]) -> None:
        """Raise a clear error if ``state`` does not fit this algorithm, each part read from its ``sources``
        entry (:func:`match_part_names`); changes nothing.
        """
        parts = self.checkpoint_parts()
        modules = state.get("modules", {})
        missing = sorted(name for name, source in sources.items() if source not in modules)
        unknown = sorted(set(modules) - set(sources.values()))
        if missing or unknown:
            raise KeyError(f"checkpoint does not match this {type(self).__name__}: parts missing from it {missing}, "
                           f"parts this algorithm does not have {unknown}")
        for name, part in parts.items():
            check_part_fits(name, part, modules[sources[name]])
        if any(name != source for name, source in sources.items()):
            return  # another number of agents: only the parts load (load_state_dict)
        missing = sorted(set(self.counters()) - set(state.get("counters", {})) - OPTIONAL_COUNTERS)
        if missing:
            raise KeyError(f"checkpoint does not match this {type(self).__name__}: counters missing from it {missing}")
        missing = sorted({"torch", "numpy", "python"} - set(state.get("rng", {})))
        if missing:
            raise KeyError(f"checkpoint has no rng state for {missing}")
        for uid, memory_state in state.get("memories", {}).items():
            group = next((g for g in self.groups if g.uids[0] == uid), None)
            if group is None:
                raise KeyError(f"checkpoint holds a memory for {uid!r}, which leads no group of this algorithm")
            group.memory.check_state(memory_state, what=f"memories[{uid!r}]")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; everything is checked first, and a load that fails
        leaves the algorithm as it was.

        A checkpoint of the same agents continues its run: counters, random generators, memories and the
        experiment folder come with the models. One of another number of agents (:func:`match_part_names`)
        gives the models, their optimizers and preprocessors only: this is another run, with counters and a
        folder of its own, which leaves the checkpoint's run as it was.
        """
        sources = match_part_names(list(self.checkpoint_parts()), list(state.get("modules", {})))
        self._check_state(state, sources)
        same_agents = all(name == source for name, source in sources.items())
        backup = copy.deepcopy(self.state_dict(include_memory=False))
        try:
            self._apply_state(state, sources, parts_only=not same_agents)
        except Exception:
            self._apply_state(backup, {name: name for name in sources})
            raise
        if same_agents:
            self.resume_folder(state.get("experiment_dir"))

    def _apply_state(self, state: Mapping[str, Any], sources: Mapping[str, str], *, parts_only: bool = False) -> None:
        for name, part in self.checkpoint_parts().items():
            part.load_state_dict(state["modules"][sources[name]])
        if parts_only:
            return
        self.load_counters(state["counters"])
        set_rng_states(state["rng"])
        for group in self.groups:  # last: the backup a failed load falls back on does not hold memories
            if group.uids[0] in state.get("memories", {}):
                group.memory.load_state_dict(state["memories"][group.uids[0]])

    def save(self, path: str) -> None:
        """Write the algorithm's state to ``path`` atomically (a crash never leaves a half-written file), each
        tensor with its checksum. A write that fails (a full disk) raises ``OSError`` naming the file, and
        leaves the file that was at ``path`` as it was.
        """
        save_checkpoint_file(self.state_dict(), path)

    def load(self, path: str) -> None:
        """Load a checkpoint written by :meth:`save` and continue from it.

        Only tensors and plain data are read (``weights_only=True``: no code runs). A file that is
        truncated, is no checkpoint, or holds a tensor whose bytes changed since it was written raises
        :class:`~marlparts.utils.checkpoint_files.CorruptCheckpointError` naming the file (and the
        tensor). The checkpoint is checked against this algorithm before anything changes; on a
        mismatch the error names the part (role and agents) and the tensor. A run resumed this way
        keeps counting its timesteps and goes on writing into the checkpoint's experiment folder
        where it exists here and ``experiment_name`` is empty or names it; a checkpoint of an earlier
        step than the folder's last branches into a folder of its own (:meth:`resume_folder`). A run
        folder copied or moved since (a checkpoint at ``<folder>/checkpoints/<file>`` where ``<folder>``
        has the name of the folder it was written in, but is another) goes on where it now is.
        """
        # read on the CPU: each part copies into its own tensors on the algorithm's device (generator
        # states must stay on the CPU)
        state = load_checkpoint_file(path, map_location="cpu")
        holder = os.path.dirname(os.path.abspath(path))
        folder, written_in = os.path.dirname(holder), state.get("experiment_dir")
        if os.path.basename(holder) == "checkpoints" and written_in and \
                os.path.basename(os.path.normpath(written_in)) == os.path.basename(folder) and \
                not (os.path.isdir(written_in) and os.path.samefile(written_in, folder)):
            state["experiment_dir"] = folder  # the run's folder, copied or moved
        self.load_state_dict(state)

    def save_checkpoint(self, path: str) -> None:
        """:meth:`save` to ``path`` and tell the callbacks."""
        self.save(path)
        for callback in self.callbacks:
            callback.on_checkpoint(self, path)

    def checkpoint_path(self) -> Optional[str]:
        """Where :meth:`write_checkpoint` writes at this step: ``checkpoints/agent_<timestep>.pt`` in the experiment
        folder (None before the run has one).
        """
        if self.experiment_dir is None:
            return None
        return os.path.join(self.experiment_dir, "checkpoints", f"agent_{self.timestep}.pt")

    def write_checkpoint(self) -> None:
        """Write ``checkpoints/agent_<timestep>.pt`` into the experiment folder (rank 0 only under torchrun)."""
        path = self.checkpoint_path()
        if path is not None and is_main_process():
            self.save_checkpoint(path)

