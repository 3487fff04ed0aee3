"""Groups of agents that share models: each group runs as one batch (env copies × agents)."""

from typing import Any, Dict, FrozenSet, List, Mapping, Optional, Sequence

import torch

from marlparts.memories.base import Memory
from marlparts.models.agent_sets import AgentSetLayer
from marlparts.models.base import Model


class AgentGroup:
    """Agents whose models are the same instances for every role.

    Attributes:
        uids: the agent ids, in ``possible_agents`` order.
        models: ``role -> model`` shared by the group.
        memory: storage for the whole group (the memory given for its first agent), with an
            agent axis: tensors of shape ``(memory_size, num_envs, len(uids), *size)``.
        agent_indexes: positions of ``uids`` in ``possible_agents`` (for one-hot agent ids).
        cfg: the algorithm's configuration for this group: per-agent values resolved (every
            agent of the group has the same value), every other key as it is.
        trained: ``role -> TrainedModel``, the record of each model the algorithm trains.
        noise: the exploration noise of algorithms that add one (off-policy methods), else None.
        hidden: ``role -> HiddenStates`` of the group's recurrent models (empty for feed-forward ones).
        cache: values of the current step passed from ``act`` to ``record_transition``.
        model_sets: how many sets of models stand behind the group: 1 when its agents share every model,
            the group's size when each agent has models of its own (some of them run as one batched model,
            a :class:`~marlparts.models.stacked.StackedModels`). Statistics that belong to a set of models
            (advantage normalisation, loss means) are taken per set: ``tensor.unflatten(agent_axis,
            (group.model_sets, -1))`` gives each set its own axis.
    """

    def __init__(self, uids: Sequence[str], models: Mapping[str, Model], memory: Optional[Memory],
                 agent_indexes: Sequence[int], *, per_agent_roles: FrozenSet[str] = frozenset()) -> None:
        self.uids = list(uids)
        self.models = dict(models)
        self.memory = memory
        self.agent_indexes = torch.as_tensor(list(agent_indexes), dtype=torch.long)
        self.cfg: Dict[str, Any] = {}
        self.trained: Dict[str, Any] = {}
        self.noise: Optional[Any] = None
        self.hidden: Dict[str, Any] = {}
        self.cache: Dict[str, torch.Tensor] = {}
        self.per_agent_roles = frozenset(per_agent_roles)
        self.model_sets = len(self.uids) if self.per_agent_roles else 1

    @property
    def size(self) -> int:
        """Number of agents in the group."""
        return len(self.uids)

    def model_count(self, role: str) -> int:
        """How many models of ``role`` the group runs: 1 when its agents share one, the group's size when each
        agent has its own (run as one batched model).
        """
        return len(self.uids) if role in self.per_agent_roles else 1

    def __repr__(self) -> str:
        return f"AgentGroup({self.uids})"


def build_groups(possible_agents: Sequence[str], models: Mapping[str, Mapping[str, Model]], roles: Sequence[str],
                 memories: Optional[Mapping[str, Memory]]) -> List[AgentGroup]:
    """Group agents by the identity of their models for ``roles``, in ``possible_agents`` order.

    Raises:
        ValueError: one ``Memory`` instance given to agents of different groups (their rows
            would interleave in it).
    """
    order: Dict[tuple, List[str]] = {}
    for uid in possible_agents:
        key = tuple(id(models[uid][role]) for role in roles)
        order.setdefault(key, []).append(uid)
    position = {uid: i for i, uid in enumerate(possible_agents)}
    groups = []
    for uids in order.values():
        first = uids[0]
        memory = memories[first] if memories is not None else None
        groups.append(AgentGroup(uids, {role: models[first][role] for role in roles}, memory,
                                 [position[uid] for uid in uids]))
    if memories is not None:
        owner: Dict[int, AgentGroup] = {}
        for group in groups:
            for uid in group.uids:
                other = owner.setdefault(id(memories[uid]), group)
                if other is not group:
                    raise ValueError(f"memories[{other.uids[0]!r}] and memories[{uid!r}] are the same Memory, but the "
                                     f"two agents do not share models (groups {other.uids} and {group.uids}): give "
                                     "each group its own Memory")
    return groups


def bind_agent_sets(groups: Sequence[AgentGroup], row_roles: Sequence[str], possible_agents: Sequence[str],
                    algorithm: str) -> None:
    """Tell each layer that reads the agents of an env copy together
    (:class:`~marlparts.models.agent_sets.AgentSetLayer`) how many agents a copy has: the size of the group that
    shares its model.

    Args:
        groups: the algorithm's groups.
        row_roles: the roles whose models the algorithm runs on one row per agent of the group, the agents of
            one copy consecutive (the only ones such layers can be in).
        possible_agents: every agent the algorithm runs.
        algorithm: the algorithm's name, for the errors.

    Raises:
        ValueError: such a layer in a model of another role, in a model of more than one group (its rows would
            hold only some of the agents it reads), in a model of a one-agent group where there are more agents,
            or already set to another number of agents (by another group, or another algorithm built around the
            same instance: the number is the layer's, so one instance serves one agent count). Nothing is set
            then.
    """
    sizes: Dict[AgentSetLayer, int] = {}  # modules hash by identity
    for group in groups:
        for role, model in group.models.items():
            layers = [layer for layer in model.modules() if isinstance(layer, AgentSetLayer)]
            if not layers:
                continue
            where = f"models[{group.uids[0]!r}][{role!r}] ({type(model).__name__}) has a {type(layers[0]).__name__} layer"
            if role not in row_roles:
                readers = f"only its {list(row_roles)} models" if row_roles else "none of its models"
                raise ValueError(f"{where}, which reads every agent of an env copy, but {algorithm} gives such a layer "
                                 f"one row per agent in {readers}")
            users = [other.uids for other in groups if any(used is model for used in other.models.values())]
            if len(users) > 1 or (group.size == 1 and len(possible_agents) > 1):
                raise ValueError(f"{where}, which reads every agent of an env copy, so one instance must be shared by "
                                 f"the agents it reads: it is used by {' and '.join(map(str, users))}, which do not "
                                 f"share all their models ({algorithm} runs agents that share every model as one group, "
                                 f"of {len(possible_agents)} agents here)")
            for layer in layers:
                earlier = sizes.setdefault(layer, group.size)
                if earlier != group.size or layer.agents_per_copy not in (None, group.size):
                    bound = earlier if earlier != group.size else layer.agents_per_copy
                    raise ValueError(f"{where} that already reads copies of {bound} agents (another group's, or another "
                                     f"algorithm's built around the same instance), not {group.size}: a layer serves "
                                     "one agent count; build new models for this one (or copy.deepcopy them) and load "
                                     "the parameters into them")
    for layer, size in sizes.items():
        layer.agents_per_copy = size


def agent_order(groups: Sequence[AgentGroup], possible_agents: Sequence[str],
                widths: Optional[Sequence[int]] = None) -> Optional[torch.Tensor]:
    """The columns, in ``possible_agents`` order, of a tensor that holds the groups' agents one group after another
    (``torch.cat`` of per-group tensors), each agent of the ``k``-th group ``widths[k]`` columns wide (1 without
    ``widths``); None where the two orders agree.
    """
    group_order = [uid for group in groups for uid in group.uids]
    if group_order == list(possible_agents):
        return None
    agent_widths = [1 if widths is None else int(widths[k]) for k, group in enumerate(groups) for _ in group.uids]
    starts = [sum(agent_widths[:i]) for i in range(len(agent_widths))]
    position = {uid: i for i, uid in enumerate(group_order)}
    return torch.cat([torch.arange(starts[position[uid]], starts[position[uid]] + agent_widths[position[uid]])
                      for uid in possible_agents])
