"""The base of every multi-agent algorithm: configuration, groups, models and their records, hooks.

Tracking, checkpoints and the optimizer step come from the mixins of :mod:`~marlparts.agents.common.tracking`,
:mod:`~marlparts.agents.common.checkpoints` and :mod:`~marlparts.agents.common.optimization`.
"""

import copy
import datetime
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import gymnasium
import torch

from marlparts.agents.common.checkpoints import CheckpointMixin
from marlparts.agents.common.config_ranges import ALGORITHM_CONFIG_RANGES
from marlparts.agents.common.groups import AgentGroup, bind_agent_sets, build_groups
from marlparts.agents.common.optimization import OptimizationMixin
from marlparts.agents.common.stacking import StackedTrainedModel
from marlparts.agents.common.tracking import TrackingMixin
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.memories.base import Memory
from marlparts.models.base import Model
from marlparts.models.recurrent import is_recurrent
from marlparts.models.stacked import StackedModels
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import agreed_value, check_config, check_ranges, merge_config
from marlparts.utils.distributed import (
    broadcast_tensors,
    check_same_on_every_rank,
    is_distributed,
    is_main_process,
)
from marlparts.utils.run_folders import files_written_after, free_folder
from marlparts.utils.tracking import Tracker

EXPERIMENT_DEFAULTS = {
    "directory": "runs",            # parent folder of experiments
    "experiment_name": "",          # sub-folder; a timestamp and class name when empty
    "write_interval": "auto",       # timesteps between metric writes ("auto": timesteps / 100)
    "checkpoint_interval": "auto",  # timesteps between checkpoints ("auto": timesteps / 10; 0: none)
    "checkpoint_memory": False,     # also save the replay memory in checkpoints (off-policy algorithms)
    "tensorboard": True,            # write TensorBoard event files
    "csv": True,                    # write every scalar to scalars.csv (step, tag, value)
    "wandb": False,                 # also log to Weights & Biases
    "wandb_kwargs": {},             # passed to wandb.init
}


class MultiAgent(CheckpointMixin, TrackingMixin, OptimizationMixin):
    """Base of the multi-agent algorithms.

    Subclasses set ``DEFAULT_CONFIG``, ``ROLES`` (the model roles each agent needs) and
    ``PER_AGENT_KEYS`` (the config keys that may be given per agent as ``{agent_id: value}``),
    register each model they train with :meth:`add_trained_model`, and override :meth:`act`,
    :meth:`record_transition` and :meth:`update`.

    Agents whose models are the same instances form an :class:`AgentGroup`, run as one batch.
    Configuration is checked and resolved once, here: types, per-agent values (every agent id
    named, no unknown id; agents of one group must agree), ranges (:mod:`~marlparts.agents.common.config_ranges`:
    ``discount_factor`` in ``[0, 1]``, ``learning_epochs`` >= 1, ...) and, for values that belong to a
    model such as its learning rate, agreement among the agents that share it.

    A run continues across several ``train()`` calls and across :meth:`save` / :meth:`load`:
    one experiment folder, counters that keep counting, and checkpoints that hold everything
    (models, optimizers, schedulers, preprocessors, counters, random generators' states and,
    when asked, the replay memory).

    Args:
        possible_agents: every agent id, in a fixed order.
        models: ``{agent_id: {role: Model}}``.
        memories: ``{agent_id: Memory}``; a group stores its data in its first agent's memory.
        observation_spaces: ``{agent_id: space}``; the env's whole dict may be given (``env.observation_spaces``):
            an algorithm that owns some of the agents (a team) keeps its own agents' entries.
        action_spaces: ``{agent_id: space}``, likewise.
        state_spaces: ``{agent_id: space}`` of the global state (centralised critics), likewise.
        device: where models and tensors live.
        cfg: configuration; unknown keys are an error.
    """

    DEFAULT_CONFIG: Dict[str, Any] = {"experiment": EXPERIMENT_DEFAULTS}
    ROLES: Sequence[str] = ()
    PER_AGENT_KEYS: frozenset = frozenset()
    NEEDS_MEMORY: bool = True
    SUPPORTS_SEQUENCES: bool = False  # whether recurrent models (RecurrentMixin) can be trained
    # whether it trains on turn-based envs: credits what reaches an agent while it waits to its last action
    SUPPORTS_TURN_BASED: bool = False
    # roles that one model may play together for the same agents (it computes them in one pass); otherwise every
    # role of every agent needs a model of its own
    SHARED_ROLES: Tuple[str, ...] = ()

    def __init__(self, *, possible_agents: Sequence[str], models: Mapping[str, Mapping[str, Model]],
                 memories: Optional[Mapping[str, Memory]] = None,
                 observation_spaces: Mapping[str, gymnasium.Space], action_spaces: Mapping[str, gymnasium.Space],
                 state_spaces: Optional[Mapping[str, gymnasium.Space]] = None,
                 device: Union[str, torch.device, None] = None, cfg: Optional[Mapping[str, Any]] = None) -> None:
        self.possible_agents = list(possible_agents)
        if not self.possible_agents or len(set(self.possible_agents)) != len(self.possible_agents):
            raise ValueError(f"possible_agents must be a non-empty list of distinct ids, got {possible_agents!r}")
        self.cfg = merge_config(self.DEFAULT_CONFIG, cfg or {})
        check_config(self.cfg, self.DEFAULT_CONFIG, possible_agents=self.possible_agents,
                     per_agent_keys=self.PER_AGENT_KEYS)
        check_ranges(self.cfg, ALGORITHM_CONFIG_RANGES)
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        # a team's algorithm takes the env's whole space dicts and keeps its own agents' entries
        self.observation_spaces = self._per_agent_dict(observation_spaces, "observation_spaces", other_agents=True)
        self.action_spaces = self._per_agent_dict(action_spaces, "action_spaces", other_agents=True)
        self.state_spaces = (self._per_agent_dict(state_spaces, "state_spaces", other_agents=True)
                             if state_spaces is not None else None)
        self._check_models(models)
        if self.NEEDS_MEMORY:
            if memories is None:
                raise ValueError(f"{type(self).__name__} needs `memories`: one Memory per agent id")
            memories = self._per_agent_dict(memories, "memories")
            for uid, memory in memories.items():  # every memory checked before any moves
                memory.check_device(self.device, owner=f"memories[{uid!r}]")
            for uid, memory in memories.items():
                memory.use_device(self.device, owner=f"memories[{uid!r}]")
        self.models = {uid: dict(models[uid]) for uid in self.possible_agents}
        self.memories = memories
        self.groups: List[AgentGroup] = build_groups(self.possible_agents, self.models, self.ROLES, memories)
        bind_agent_sets(self.groups, self.agent_row_roles(), self.possible_agents, type(self).__name__)
        for group in self.groups:
            self._check_group_spaces(group)
            what = f"the group {group.uids} that shares models"
            group.cfg = {key: agreed_value(self.cfg, key, group.uids, what) if key in self.PER_AGENT_KEYS else value
                         for key, value in self.cfg.items()}
        self._distinct: Dict[Optional[str], List[Model]] = {}
        for model in self.distinct_models():
            model.to(self.device)
        self.trained: List[TrainedModel] = []
        self._records: Dict[int, TrainedModel] = {}
        self._grad_scaler = self._make_grad_scaler()
        self.training = True
        self.turn_based = False  # set by the trainer: the env's agents take turns
        self.stochastic_evaluation = False
        self.tracker: Optional[Tracker] = None
        self.callbacks: List[Any] = []  # set by the trainer: Callback objects told of updates and checkpoints
        self.experiment_dir: Optional[str] = None
        self._initialised = False
        self.best_return = -float("inf")
        # set by record_evaluation once an evaluation showed the algorithm playing every seat of a zero-sum game
        self.zero_sum_self_play = False
        self.timestep = 0
        self.evaluated_at: Optional[int] = None  # the step of the last evaluation during training (record_evaluation)
        self._write_interval = 0
        self._checkpoint_interval = 0

    # ----------------------------------------------------------------------------- setup
    def _per_agent_dict(self, mapping: Optional[Mapping[str, Any]], name: str, *,
                        other_agents: bool = False) -> Dict[str, Any]:
        """``mapping``'s entries for ``possible_agents``, every one required; entries for other ids are an
        error unless ``other_agents`` (the env's space dicts, which also hold other teams' agents).
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(f"{name} must be a dict keyed by agent id, got {type(mapping).__name__}")
        missing = [uid for uid in self.possible_agents if uid not in mapping]
        if missing:
            raise KeyError(f"{name} has no entry for agent(s) {missing}; it needs one per possible agent")
        unknown = [uid for uid in mapping if uid not in self.possible_agents]
        if unknown and not other_agents:
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
                if is_recurrent(roles[role]) and not self.SUPPORTS_SEQUENCES:
                    raise TypeError(f"models[{uid!r}][{role!r}] is recurrent, but {type(self).__name__} does not train on "
                                    "sequences: use RecurrentMAPPO or RecurrentIPPO, or a feed-forward model")
        self._check_roles_of_each_model(models)

    def _check_roles_of_each_model(self, models: Mapping[str, Mapping[str, Model]]) -> None:
        """One model instance plays one role, for any number of agents; the exception is a model that plays all of
        ``SHARED_ROLES`` for the same agents (a policy and a value in one network).
        """
        uses: Dict[int, List[Tuple[str, str]]] = {}
        for uid in self.possible_agents:
            for role in self.ROLES:
                uses.setdefault(id(models[uid][role]), []).append((uid, role))
        for places in uses.values():
            roles = {role for _, role in places}
            if len(roles) < 2:
                continue
            shareable = roles == set(self.SHARED_ROLES) and all(
                all(models[uid][other] is models[uid][role] for other in self.SHARED_ROLES) for uid, role in places)
            if not shareable:
                (first_uid, first_role), other = places[0], next(place for place in places if place[1] != places[0][1])
                hint = (f" (it can share one model between the roles {list(self.SHARED_ROLES)} of the same agents)"
                        if self.SHARED_ROLES else "")
                raise ValueError(f"models[{first_uid!r}][{first_role!r}] and models[{other[0]!r}][{other[1]!r}] are the "
                                 f"same {type(models[first_uid][first_role]).__name__} instance: "
                                 f"{type(self).__name__} needs a model of its own for each role{hint}")
        owners: Dict[int, Tuple[str, str]] = {}  # parameter -> the first place of the model that holds it
        for places in uses.values():
            model = models[places[0][0]][places[0][1]]
            for parameter in model.parameters():
                first = owners.setdefault(id(parameter), places[0])
                if first != places[0]:
                    raise ValueError(f"models[{first[0]!r}][{first[1]!r}] and models[{places[0][0]!r}][{places[0][1]!r}] are "
                                     "different models that share parameters (a submodule): each would be stepped by its "
                                     "own optimizer. Give the models parameters of their own"
                                     + (f", or give {type(self).__name__} one model for the roles "
                                        f"{list(self.SHARED_ROLES)} of the same agents" if self.SHARED_ROLES else ""))

    def _check_group_spaces(self, group: AgentGroup) -> None:
        """Agents that share models must see and act in the same spaces."""
        first = group.uids[0]
        for uid in group.uids[1:]:
            for name, spaces in (("observation", self.observation_spaces), ("action", self.action_spaces)):
                if spaces[uid] != spaces[first]:
                    raise ValueError(f"agents {first!r} and {uid!r} share models but their {name} spaces differ: "
                                     f"{spaces[first]} vs {spaces[uid]}")

    def agent_row_roles(self) -> Tuple[str, ...]:
        """The roles whose models this algorithm runs on one row per agent of their group, the agents of one env
        copy consecutive: the models that may hold layers that read every agent of a copy together
        (:class:`~marlparts.models.agent_sets.AgentSetLayer`: graph and set networks). None by default; an
        algorithm that feeds its models so lists those roles.
        """
        return ()

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

    def owners(self, model: Model, role: str) -> List[str]:
        """The agents that use ``model`` (or, for a :class:`StackedModels`, one of its members) as ``role``,
        in ``possible_agents`` order.
        """
        members = model.members if isinstance(model, StackedModels) else [model]
        return [uid for uid in self.possible_agents if any(self.models[uid].get(role) is member for member in members)]

    def model_name(self, model: Model) -> str:
        """A stable name for ``model``: its role and the agents that use it, e.g. ``policy[agent_0+agent_1]``
        (``policy[agent_0|agent_1]`` for a stack of the two agents' own models).
        """
        separator = "|" if isinstance(model, StackedModels) else "+"
        for role in self.ROLES:
            owners = self.owners(model, role)
            if owners:
                return f"{role}[{separator.join(owners)}]"
        raise KeyError("model is not used by this algorithm")

    def model_value(self, key: str, model: Model, role: str) -> Any:
        """Config value ``key`` for ``model``: one value every agent that shares the model agrees on."""
        return agreed_value(self.cfg, key, self.owners(model, role), f"the agents that share {self.model_name(model)}")

    def add_trained_model(self, model: Model, role: str, *, learning_rate_key: str = "learning_rate") -> TrainedModel:
        """The record of ``model`` (created on first call): an optimizer of class ``cfg["optimizer"]`` (Adam by
        default, with ``cfg["optimizer_kwargs"]``) at the model's learning rate, the scheduler of
        ``cfg["learning_rate_scheduler"]`` if the config has one, and its gradient-norm limit.
        """
        if id(model) in self._records:
            return self._records[id(model)]
        rate = self.model_value(learning_rate_key, model, role)
        optimizer_class = self.cfg.get("optimizer") or torch.optim.Adam
        optimizer = optimizer_class(model.parameters(), lr=rate, **self.cfg.get("optimizer_kwargs", {}))
        # a stack's record names each member as without stacking (checkpoints, logs)
        stacked = {"member_names": [self.model_name(m) for m in model.members],
                   "member_owners": [self.owners(m, role) for m in model.members]} if isinstance(model, StackedModels) else {}
        record = (StackedTrainedModel if stacked else TrainedModel)(
            name=self.model_name(model), role=role, model=model, owners=self.owners(model, role), optimizer=optimizer,
            **stacked)
        if "grad_norm_clip" in self.cfg:
            record.grad_norm_clip = float(self.model_value("grad_norm_clip", model, role))
        scheduler_class = self.cfg.get("learning_rate_scheduler")
        if scheduler_class is not None:
            record.scheduler = scheduler_class(optimizer, **self.cfg["learning_rate_scheduler_kwargs"])
        self.trained.append(record)
        self._records[id(model)] = record
        return record

    def trained_model(self, model: Model) -> TrainedModel:
        """The record of a model this algorithm trains."""
        try:
            return self._records[id(model)]
        except KeyError:
            raise KeyError(f"{type(model).__name__} is not trained by this algorithm") from None

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Prepare the experiment folder and tracking; called by the trainer before each ``train()``.

        The write and checkpoint intervals are set from each call's ``timesteps`` (``"auto"``: a
        hundredth and a tenth of them). The rest is done by the first call only: later ``train()``
        calls, and a run resumed with :meth:`load`, keep the same folder and writers.

        A fresh run writes to ``directory/experiment_name`` (a timestamp and the class name when the
        name is empty); where an earlier run already wrote there, it writes to the first free
        ``<name>_2``, ``<name>_3``, ... instead, and says so. A run resumed with :meth:`load` goes on
        in the checkpoint's folder, unless that folder holds checkpoints or videos of later steps: it
        then branches into ``<folder>_from_<step>`` (see :meth:`resume_folder`).
        """
        timesteps = int(dict(trainer_cfg or {}).get("timesteps", 0))
        experiment = self.cfg["experiment"]
        write_interval, checkpoint_interval = experiment["write_interval"], experiment["checkpoint_interval"]
        self._write_interval = max(1, timesteps // 100) if write_interval == "auto" else int(write_interval)
        self._checkpoint_interval = max(1, timesteps // 10) if checkpoint_interval == "auto" else int(checkpoint_interval)
        if self._initialised:
            return
        self._initialised = True
        self._start_distributed()
        if self.experiment_dir is None or files_written_after(self.experiment_dir, self.timestep):
            self.forget_evaluations()  # a folder of its own (fresh, or a branch): its curve starts at this step
        if not is_main_process():  # under torchrun only rank 0 writes logs, checkpoints and reports
            self.experiment_dir = self.experiment_dir or self._named_folder()
            return
        self.experiment_dir = self._fresh_folder() if self.experiment_dir is None else self._branch_folder()
        self._open_tracker()

    def _named_folder(self) -> str:
        """``directory/experiment_name``, or ``directory/<timestamp>_<class name>`` when the name is empty."""
        experiment = self.cfg["experiment"]
        name = experiment["experiment_name"] or \
            datetime.datetime.now().strftime(f"%y-%m-%d_%H-%M-%S-%f_{type(self).__name__}")
        return os.path.join(experiment["directory"], name)

    def _fresh_folder(self) -> str:
        """The folder of a new run: the named one, or the first free numbered one where a run used it."""
        named = os.path.normpath(self._named_folder())
        folder = free_folder(named)
        if folder != named:
            warnings.warn(f"{named} holds an earlier run: this run writes to {folder} (to continue the earlier run, "
                          "load one of its checkpoints first; or choose another experiment_name)", stacklevel=4)
        return folder

    def _branch_folder(self) -> str:
        """The experiment folder, or, where it holds files of steps after this run's ``timestep`` (a run
        resumed from an earlier checkpoint), a new ``<folder>_from_<timestep>`` that keeps them apart.
        """
        later = files_written_after(self.experiment_dir, self.timestep)
        if not later:
            return self.experiment_dir
        branch = free_folder(f"{os.path.normpath(self.experiment_dir)}_from_{self.timestep}")
        shown = ", ".join(later[:4]) + (f" and {len(later) - 4} more" if len(later) > 4 else "")
        warnings.warn(f"{self.experiment_dir} holds files written after step {self.timestep} ({shown}): this run, "
                      f"resumed at step {self.timestep}, writes to {branch} so that they are kept", stacklevel=4)
        return branch

    def forget_evaluations(self) -> None:
        """Start the curve anew in a folder of its own: no evaluation at this step yet (``evaluated_at``), and no best
        return to beat (its ``best_agent.pt`` is the best of its own evaluations, not of the checkpoint's run).
        """
        self.evaluated_at = None
        self.best_return = -float("inf")

    def resume_folder(self, folder: Optional[str]) -> None:
        """Where a run goes on writing after a checkpoint of ``folder`` was loaded.

        Before the run started: in ``folder`` if it exists here and the config names no other folder
        (``experiment_name`` empty or naming it). A run that already writes (its first ``train()`` is
        over) keeps its folder. Either way, where that folder holds checkpoints or videos of steps after
        the loaded ``timestep``, the run branches into ``<folder>_from_<timestep>``, with a warning,
        so that they are never overwritten. A run that does not go on in the checkpoint's folder (a
        fresh folder or a branch) forgets the checkpoint's evaluations (:meth:`forget_evaluations`): its curve
        starts anew.
        """
        if not self._initialised:
            named = self.cfg["experiment"]["experiment_name"]
            if self.experiment_dir is None and folder and os.path.isdir(folder) and \
                    (not named or os.path.abspath(self._named_folder()) == os.path.abspath(folder)):
                self.experiment_dir = folder
            return  # the first train() checks for later files (init)
        if self.experiment_dir is None:
            return
        if files_written_after(self.experiment_dir, self.timestep):
            self.forget_evaluations()  # it branches: the new folder's curve starts at this step
        if not is_main_process():
            return
        branch = self._branch_folder()
        if branch != self.experiment_dir:
            self.experiment_dir = branch
            if self.tracker is not None:
                self.tracker.close()
                self.tracker = None
            self._open_tracker()

    def _open_tracker(self) -> None:
        """The experiment folder's tracker, with the sinks the config asks for (none: no tracker)."""
        experiment = self.cfg["experiment"]
        if self.tracker is None and (experiment["tensorboard"] or experiment["csv"] or experiment["wandb"]):
            os.makedirs(self.experiment_dir, exist_ok=True)
            self.tracker = Tracker(self.experiment_dir, tensorboard=experiment["tensorboard"], csv=experiment["csv"],
                                   wandb=experiment["wandb"], wandb_kwargs=experiment["wandb_kwargs"], config=self.cfg)

    def _start_distributed(self) -> None:
        """Under ``torchrun``: check that every rank has the same agents, spaces and models, then give
        every rank rank 0's parameters (and targets, preprocessors, normalisers).
        """
        if not is_distributed():
            return
        description = {"the algorithm": type(self).__name__, "the agents": self.possible_agents}
        for uid in self.possible_agents:
            description[f"the observation space of {uid}"] = repr(self.observation_spaces[uid])
            description[f"the action space of {uid}"] = repr(self.action_spaces[uid])
        for name, part in self.checkpoint_parts().items():
            if isinstance(part, torch.nn.Module):
                description[f"the tensor shapes of {name}"] = [tuple(t.shape) for t in part.state_dict().values()]
        check_same_on_every_rank(description, "what they train")
        tensors = [t for part in self.checkpoint_parts().values() if isinstance(part, torch.nn.Module)
                   for t in part.state_dict().values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
        broadcast_tensors(tensors)

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

    def drop_episodes(self, copies: torch.Tensor, lengths: torch.Tensor) -> None:
        """Leave out of every loss the stored steps of episodes whose env copy failed: for each copy ``e`` in
        ``copies`` (``(num_envs,)`` bool), its last ``lengths[e]`` stored steps are marked inactive.
        Called by the trainer after ``record_transition``, before ``post_interaction``.
        """
        for group in self.groups:
            memory = group.memory
            if memory is None or "active" not in memory.tensors:
                continue
            size = memory.memory_size
            # how many steps ago each row was written: 0 for the row of this step
            age = (memory.newest_step - torch.arange(size, device=copies.device)) % size
            drop = (age.unsqueeze(1) < lengths.to(age.device).unsqueeze(0)) & copies.bool().unsqueeze(0)
            active = memory.get_tensor_by_name("active")
            active[drop.to(active.device)] = False

    def pre_interaction(self, timestep: int, timesteps: int) -> None:
        """Called before each :meth:`act` in training."""

    def post_interaction(self, timestep: int, timesteps: int) -> None:
        """Called after each :meth:`record_transition` in training: counts the step, then runs :meth:`update`
        where :meth:`update_due` says so, then writes metrics and checkpoints. The step is counted first: it
        was taken and stored, whatever happens in the update (an error, an interrupt in a callback).
        """
        self.timestep += 1
        if self.training and self.update_due():
            self.update(timestep, timesteps)
        if self.tracker is not None and self.timestep % self._write_interval == 0:
            self.tracker.write(self.timestep)
        if self._checkpoint_interval > 0 and self.timestep % self._checkpoint_interval == 0:
            self.write_checkpoint()

    def update_due(self) -> bool:
        """Whether :meth:`update` runs at this step (asked by :meth:`post_interaction` in training, after the step
        is counted); never, unless a subclass says when.
        """
        return False

    def cut_episodes(self) -> None:
        """The episodes in progress end here without a terminal state (the trainer must reset the env):
        the last stored step is to be treated as truncated. Algorithms that bootstrap from stored
        next observations need nothing; the PPO family overrides this.
        """

    def update(self, timestep: int, timesteps: int) -> None:
        """Improve the models from stored experience."""
        raise NotImplementedError

    def mean_over_agents(self, group_values: Sequence[Mapping[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """``{key: mean over agents}`` from one ``{key: group mean}`` per group (groups weighted by size)."""
        if len(group_values) == 1 and self.groups[0].size == len(self.possible_agents):
            return dict(group_values[0])  # one group of every agent: its means are the means over agents
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

    def can_bootstrap_time_limits(self, infos: Mapping[str, Any], uses_state: bool) -> bool:
        """Whether ``infos`` holds what valuing the end of a truncated episode needs: the final observations,
        and the final state for a critic on the global state. Where a simulator cannot keep them (Isaac Lab
        without ``final_obs``, a custom Isaac Lab state), a truncation ends the return like a termination
        (no bootstrap); a warning says so once.
        """
        available = "final_observation" in infos and (not uses_state or "final_state" in infos)
        if not available and not getattr(self, "_warned_no_bootstrap", False):
            self._warned_no_bootstrap = True
            missing = "final observations" if "final_observation" not in infos else "the final global state"
            warnings.warn(f"{type(self).__name__}: the env gives no {missing} of the episodes that ended, so "
                          f"time-limit truncations there are not bootstrapped (treated as terminal)", stacklevel=3)
        return available

    def set_mode(self, mode: str) -> None:
        """``"train"`` (sample actions, update statistics) or ``"eval"`` (frozen; greedy actions unless
        ``stochastic_evaluation`` is set).
        """
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self.training = mode == "train"
        for model in self.distinct_models():
            model.train(self.training)
        for group in self.groups:  # the models a group runs (a batched model of several agents' own included)
            for model in group.models.values():
                model.train(self.training)

    def frozen_copy(self) -> "MultiAgent":
        """A copy that acts as this algorithm does now and never changes: its models and preprocessors
        copied, in evaluation mode (greedy unless ``stochastic_evaluation``), with no memories, tracker,
        callbacks or experiment folder. An opponent for self-play or evaluation
        (:mod:`marlparts.trainers.opponents`); not for training.
        """
        left_out: Dict[int, Any] = {id(self.callbacks): []}
        for memory in list((self.memories or {}).values()) + [group.memory for group in self.groups]:
            if memory is not None:
                left_out[id(memory)] = None
        if self.tracker is not None:
            left_out[id(self.tracker)] = None
        frozen = copy.deepcopy(self, memo=left_out)
        frozen.experiment_dir = None
        frozen.set_mode("eval")
        for model in frozen.distinct_models():
            model.requires_grad_(False)
        return frozen
