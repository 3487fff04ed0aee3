"""The base of every multi-agent algorithm: configuration, groups, hooks, tracking, checkpoints."""

import collections
import datetime
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import gymnasium
import numpy as np
import torch

from marlparts.agents.groups import AgentGroup, build_groups
from marlparts.memories.base import Memory
from marlparts.models.base import Model
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import merge_config
from marlparts.utils.tracking import Tracker

EXPERIMENT_DEFAULTS = {
    "directory": "runs",            # parent folder of experiments
    "experiment_name": "",          # sub-folder; a timestamp and class name when empty
    "write_interval": "auto",       # timesteps between metric writes ("auto": timesteps / 100)
    "checkpoint_interval": "auto",  # timesteps between checkpoints ("auto": timesteps / 10; 0: none)
    "best_window": 100,             # episodes averaged to decide the best checkpoint
    "tensorboard": True,            # write TensorBoard event files
    "wandb": False,                 # also log to Weights & Biases
    "wandb_kwargs": {},             # passed to wandb.init
}


class MultiAgent:
    """Base of the multi-agent algorithms.

    Subclasses set ``DEFAULT_CONFIG`` and ``ROLES`` (the model roles each agent needs) and
    override :meth:`act`, :meth:`record_transition` and :meth:`update`.

    Agents whose models are the same instances form an :class:`AgentGroup`, run as one batch.
    Configuration values may be given per agent as ``{agent_id: value}``; agents of one group
    must then agree (see :meth:`group_value`).

    Args:
        possible_agents: every agent id, in a fixed order.
        models: ``{agent_id: {role: Model}}``.
        memories: ``{agent_id: Memory}``; a group stores its data in its first agent's memory.
        observation_spaces: ``{agent_id: space}``.
        action_spaces: ``{agent_id: space}``.
        state_spaces: ``{agent_id: space}`` of the global state (centralised critics).
        device: where models and tensors live.
        cfg: configuration; unknown keys are an error.
    """

    DEFAULT_CONFIG: Dict[str, Any] = {"experiment": EXPERIMENT_DEFAULTS}
    ROLES: Sequence[str] = ()
    NEEDS_MEMORY: bool = True

    def __init__(self, *, possible_agents: Sequence[str], models: Mapping[str, Mapping[str, Model]],
                 memories: Optional[Mapping[str, Memory]] = None,
                 observation_spaces: Mapping[str, gymnasium.Space], action_spaces: Mapping[str, gymnasium.Space],
                 state_spaces: Optional[Mapping[str, gymnasium.Space]] = None,
                 device: Union[str, torch.device, None] = None, cfg: Optional[Mapping[str, Any]] = None) -> None:
        self.possible_agents = list(possible_agents)
        if not self.possible_agents or len(set(self.possible_agents)) != len(self.possible_agents):
            raise ValueError(f"possible_agents must be a non-empty list of distinct ids, got {possible_agents!r}")
        self.cfg = merge_config(self.DEFAULT_CONFIG, cfg or {})
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.observation_spaces = self._per_agent_dict(observation_spaces, "observation_spaces")
        self.action_spaces = self._per_agent_dict(action_spaces, "action_spaces")
        self.state_spaces = self._per_agent_dict(state_spaces, "state_spaces") if state_spaces is not None else None
        self._check_models(models)
        if self.NEEDS_MEMORY:
            if memories is None:
                raise ValueError(f"{type(self).__name__} needs `memories`: one Memory per agent id")
            memories = self._per_agent_dict(memories, "memories")
        self.models = {uid: dict(models[uid]) for uid in self.possible_agents}
        self.memories = memories
        self.groups: List[AgentGroup] = build_groups(self.possible_agents, self.models, self.ROLES, memories)
        self._distinct: Dict[Optional[str], List[Model]] = {}
        for model in self.distinct_models():
            model.to(self.device)
        self.training = True
        self.stochastic_evaluation = False
        self.optimizers: Dict[int, torch.optim.Optimizer] = {}  # by id() of the model they train
        self.tracker: Optional[Tracker] = None
        self.experiment_dir: Optional[str] = None
        self.checkpoint_modules: Dict[str, Any] = {}
        self._recent_returns: collections.deque = collections.deque(maxlen=int(self.cfg["experiment"]["best_window"]))
        self._best_return = -float("inf")
        self.timestep = 0
        self._write_interval = 0
        self._checkpoint_interval = 0

    # ----------------------------------------------------------------------------- setup
    def _per_agent_dict(self, mapping: Optional[Mapping[str, Any]], name: str) -> Dict[str, Any]:
        if not isinstance(mapping, Mapping):
            raise TypeError(f"{name} must be a dict keyed by agent id, got {type(mapping).__name__}")
        missing = [uid for uid in self.possible_agents if uid not in mapping]
        if missing:
            raise KeyError(f"{name} has no entry for agent(s) {missing}; it needs one per possible agent")
        unknown = [uid for uid in mapping if uid not in self.possible_agents]
        if unknown:
            raise KeyError(f"{name} has entries for unknown agent id(s) {unknown}; possible agents: "
                           f"{self.possible_agents}")
        return {uid: mapping[uid] for uid in self.possible_agents}

    def _check_models(self, models: Mapping[str, Mapping[str, Model]]) -> None:
        models = self._per_agent_dict(models, "models")
        for uid, roles in models.items():
            for role in self.ROLES:
                if role not in roles:
                    raise KeyError(f"models[{uid!r}] has no {role!r} model; {type(self).__name__} needs roles "
                                   f"{list(self.ROLES)}")
                if not isinstance(roles[role], Model):
                    raise TypeError(f"models[{uid!r}][{role!r}] is a {type(roles[role]).__name__}, not a marlparts Model")

    def distinct_models(self, role: Optional[str] = None) -> List[Model]:
        """Every distinct model instance (of ``role`` if given), in first-use order."""
        if role not in self._distinct:
            seen: Dict[int, Model] = {}
            for uid in self.possible_agents:
                for name, model in self.models[uid].items():
                    if role is None or name == role:
                        seen.setdefault(id(model), model)
            self._distinct[role] = list(seen.values())
        return self._distinct[role]

    def model_name(self, model: Model) -> str:
        """A stable name for ``model``: its role and the agents that use it, e.g. ``policy[agent_0+agent_1]``."""
        for role in self.ROLES:
            owners = [uid for uid in self.possible_agents if self.models[uid][role] is model]
            if owners:
                return f"{role}[{'+'.join(owners)}]"
        raise KeyError("model is not used by this algorithm")

    def group_value(self, key: str, group: AgentGroup) -> Any:
        """Config value ``key`` for ``group``: a plain value, or ``{agent_id: value}`` on which the group agrees."""
        value = self.cfg[key]
        if isinstance(value, Mapping) and value and set(value) <= set(self.possible_agents):
            missing = [uid for uid in group.uids if uid not in value]
            if missing:
                raise KeyError(f"cfg[{key!r}] is given per agent but has no value for {missing}")
            values = {uid: value[uid] for uid in group.uids}
            if len({repr(v) for v in values.values()}) > 1:
                raise ValueError(f"cfg[{key!r}] differs within the group {group.uids} that shares models: {values}")
            return values[group.uids[0]]
        return value

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Prepare the experiment folder and tracking; called by the trainer before the first step."""
        trainer_cfg = dict(trainer_cfg or {})
        timesteps = int(trainer_cfg.get("timesteps", 0))
        experiment = self.cfg["experiment"]
        name = experiment["experiment_name"] or datetime.datetime.now().strftime(f"%y-%m-%d_%H-%M-%S-%f_{type(self).__name__}")
        self.experiment_dir = os.path.join(experiment["directory"], name)
        write_interval = experiment["write_interval"]
        checkpoint_interval = experiment["checkpoint_interval"]
        self._write_interval = max(1, timesteps // 100) if write_interval == "auto" else int(write_interval)
        self._checkpoint_interval = max(1, timesteps // 10) if checkpoint_interval == "auto" else int(checkpoint_interval)
        if self.tracker is None and (experiment["tensorboard"] or experiment["wandb"]):
            os.makedirs(self.experiment_dir, exist_ok=True)
            self.tracker = Tracker(self.experiment_dir if experiment["tensorboard"] else None,
                                   wandb=experiment["wandb"], wandb_kwargs=experiment["wandb_kwargs"],
                                   config=self.cfg)

    # ----------------------------------------------------------------------------- hooks
    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """Return one action tensor per agent id for the batch of ``observations``."""
        raise NotImplementedError

    def record_transition(self, *, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor],
                          actions: Mapping[str, torch.Tensor], rewards: Mapping[str, torch.Tensor],
                          next_observations: Mapping[str, torch.Tensor], next_states: Optional[torch.Tensor],
                          terminated: Mapping[str, torch.Tensor], truncated: Mapping[str, torch.Tensor],
                          infos: Mapping[str, Any], timestep: int, timesteps: int) -> None:
        """Store one step of experience (the infos are those returned with ``next_observations``)."""

    def pre_interaction(self, timestep: int, timesteps: int) -> None:
        """Called before each :meth:`act` in training."""

    def post_interaction(self, timestep: int, timesteps: int) -> None:
        """Called after each :meth:`record_transition` in training: writes metrics and checkpoints."""
        self.timestep = timestep + 1
        if self.tracker is not None and self.timestep % self._write_interval == 0:
            self.tracker.write(self.timestep)
        if self._checkpoint_interval > 0 and self.timestep % self._checkpoint_interval == 0:
            self.write_checkpoint(self.timestep)

    def update(self, timestep: int, timesteps: int) -> None:
        """Improve the models from stored experience."""
        raise NotImplementedError

    def make_optimizer(self, model: Model, learning_rate: float) -> torch.optim.Optimizer:
        """Adam for ``model`` (the fused implementation on CPU and CUDA: one kernel per step)."""
        fused = self.device.type in ("cpu", "cuda") and all(p.is_floating_point() for p in model.parameters())
        self.optimizers[id(model)] = torch.optim.Adam(model.parameters(), lr=learning_rate, fused=fused)
        return self.optimizers[id(model)]

    def optimize(self, models: Sequence[Model], loss: torch.Tensor) -> None:
        """One optimizer step for each of ``models`` on ``loss``: zero, backward, clip to ``grad_norm_clip``, step."""
        for model in models:
            self.optimizers[id(model)].zero_grad(set_to_none=True)
        loss.backward()
        clip = self.cfg.get("grad_norm_clip", 0)
        for model in models:
            if clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            self.optimizers[id(model)].step()

    def mean_over_agents(self, group_values: Sequence[Mapping[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """``{key: mean over agents}`` from one ``{key: group mean}`` per group (groups weighted by size)."""
        weights = [group.size / len(self.possible_agents) for group in self.groups]
        return {key: sum(w * values[key] for w, values in zip(weights, group_values)) for key in group_values[0]}

    @staticmethod
    def active_mask(infos: Optional[Mapping[str, Any]], group: AgentGroup, batch_size: int,
                    device: torch.device) -> torch.Tensor:
        """Which agents of ``group`` act at this step, ``(batch, group, 1)`` bool, from ``infos["active"]``
        (all of them for an env that does not say).
        """
        active = infos.get("active") if infos else None
        if active is None:
            return torch.ones(batch_size, group.size, 1, dtype=torch.bool, device=device)
        return stack_agents(active, group.uids).bool()

    # ----------------------------------------------------------------------------- tracking
    def track_data(self, tag: str, value: float) -> None:
        """Record metric ``tag``; the means are written every ``write_interval`` timesteps."""
        if self.tracker is not None:
            self.tracker.add(tag, value)

    def track_episode_returns(self, returns: torch.Tensor) -> None:
        """Record finished episodes: ``returns`` is ``(episodes, num_agents)`` in ``possible_agents`` order."""
        returns = returns.detach().cpu()
        for row in returns.tolist():
            self._recent_returns.append(float(np.mean(row)))
        if self.tracker is not None:
            self.tracker.add("Episode / return (mean over agents)", returns.mean().item())
            for uid, value in zip(self.possible_agents, returns.mean(dim=0).tolist()):
                self.tracker.add(f"Episode / return / {uid}", value)

    def set_mode(self, mode: str) -> None:
        """``"train"`` (sample actions, update statistics) or ``"eval"`` (frozen; greedy actions unless
        ``stochastic_evaluation`` is set).
        """
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self.training = mode == "train"
        for model in self.distinct_models():
            model.train(self.training)

    # ----------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """Everything that makes up the algorithm's state: models, optimizers, preprocessors, counters."""
        modules = {name: module.state_dict() for name, module in self.checkpoint_modules.items()}
        return {"modules": modules, "timestep": self.timestep, "best_return": self._best_return}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; a missing or unknown part is an error."""
        modules = state["modules"]
        missing = sorted(set(self.checkpoint_modules) - set(modules))
        unknown = sorted(set(modules) - set(self.checkpoint_modules))
        if missing or unknown:
            raise KeyError(f"checkpoint does not match this algorithm: missing {missing}, unexpected {unknown}")
        for name, module in self.checkpoint_modules.items():
            module.load_state_dict(modules[name])
        self.timestep = int(state.get("timestep", 0))
        self._best_return = float(state.get("best_return", -float("inf")))

    def save(self, path: str) -> None:
        """Write the algorithm's state to ``path`` atomically: a crash never leaves a half-written file."""
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
        os.close(handle)
        try:
            torch.save(self.state_dict(), temporary)
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)

    def load(self, path: str) -> None:
        """Load a checkpoint written by :meth:`save`; only tensors and plain data are read, no code runs."""
        self.load_state_dict(torch.load(path, map_location=self.device, weights_only=True))

    def write_checkpoint(self, timestep: int) -> None:
        """Write ``checkpoints/agent_<timestep>.pt`` and, if the recent mean return is the best yet, ``best_agent.pt``."""
        if self.experiment_dir is None:
            return
        folder = os.path.join(self.experiment_dir, "checkpoints")
        self.save(os.path.join(folder, f"agent_{timestep}.pt"))
        if self._recent_returns:
            recent = float(np.mean(self._recent_returns))
            if recent > self._best_return:
                self._best_return = recent
                self.save(os.path.join(folder, "best_agent.pt"))

    def close(self) -> None:
        """Flush and close the tracker."""
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
