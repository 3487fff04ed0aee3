"""Recurrent MAPPO and IPPO: hidden states through collection, and training on chunks of consecutive steps
from the stored initial hidden states.

:class:`RecurrentPPOMixin` holds what recurrence adds to the PPO core; :class:`RecurrentMAPPO` and
:class:`RecurrentIPPO` put it in front of :class:`~marlparts.agents.ppo.mappo.MAPPO` and
:class:`~marlparts.agents.ppo.ippo.IPPO`. The hidden state of a model is always passed to it in its inputs
(``inputs["hidden"]``, one row per row the model reads) and read back from its outputs.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.ppo.hidden_states import HiddenStates, episode_starts, hold_rows, reset_rows
from marlparts.agents.ppo.ippo import IPPO, IPPO_DEFAULT_CONFIG
from marlparts.agents.ppo.losses import ppo_losses
from marlparts.agents.ppo.mappo import MAPPO, MAPPO_DEFAULT_CONFIG
from marlparts.models.recurrent import is_recurrent
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import Config

RECURRENT_MAPPO_DEFAULT_CONFIG: Config = MAPPO_DEFAULT_CONFIG.copy()
RECURRENT_MAPPO_DEFAULT_CONFIG["sequence_length"] = 10  # steps per training chunk (a divisor of cfg["rollouts"])
RECURRENT_IPPO_DEFAULT_CONFIG: Config = IPPO_DEFAULT_CONFIG.copy()
RECURRENT_IPPO_DEFAULT_CONFIG["sequence_length"] = 10


class RecurrentPPOMixin:
    """Hidden states of recurrent policies and critics, kept per group and role (``group.hidden``).

    During collection the hidden state a model reads at each step is stored with the step
    (``policy_hidden``, ``value_hidden``), together with where it started afresh (``starts``: a new
    episode of the agent's env copy, or the step after the agent's own episode ended; ``copy_starts``: a
    new episode of the env copy) and where it was held (``waiting``: the agent was inactive, waiting for
    its turn or gone; its state is neither advanced on that step's observation nor reset, so at its next
    turn it reads the state its previous turn left). The critic's rows start afresh, and are held, as
    :meth:`critic_row_starts` says: a row that reads an agent's own view follows the agent, a row that reads
    the global state the copy's episode. The update cuts the rollout into chunks of
    ``cfg["sequence_length"]`` consecutive steps; minibatches are made of whole chunks (all agents of a group
    together), and each chunk is replayed step by step from its stored initial hidden states, zeroed again
    where an episode started inside the chunk and held where an agent waited.

    Models that are not recurrent (a feed-forward critic beside a recurrent policy, say) run as in the
    feed-forward algorithm.
    """

    SUPPORTS_SEQUENCES = True
    SHARED_ROLES = ()  # policy and critic carry hidden states of their own

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sequence_length = int(self.cfg["sequence_length"])
        rollouts, length = self.cfg["rollouts"], self.sequence_length
        if length < 1 or rollouts % length:
            raise ValueError(f"cfg['sequence_length'] is {length} but cfg['rollouts'] is {rollouts}: the rollout is cut "
                             "into whole chunks of consecutive steps, so the chunk length must divide the rollout length")
        for group in self.groups:
            for role in ("policy", "value"):
                model = group.models[role]
                if is_recurrent(model):
                    if int(getattr(model, "hidden_size", 0)) < 1:
                        raise ValueError(f"models[{group.uids[0]!r}][{role!r}] is recurrent but sets no hidden_size")
                    group.hidden[role] = HiddenStates(model.hidden_size)
        self._fresh_start = True  # every hidden state starts at zero at the first training step
        self._ended: Dict[int, torch.Tensor] = {}  # id(group) -> (copies, group): agents whose episode just ended

    def agent_row_roles(self) -> Tuple[str, ...]:
        """None: recurrent models read sequences, not one step's rows of a copy's agents."""
        return ()

    def critic_row_starts(self, group: AgentGroup, agent_starts: torch.Tensor, copy_starts: torch.Tensor) -> torch.Tensor:
        """``(batch, critic rows per copy)`` bool: which rows of the group's critic start afresh, from
        ``agent_starts`` ``(batch, group)`` and ``copy_starts`` ``(batch,)``. The same map gives the rows held
        while their agent waits (:meth:`critic_row_waits`): a row of one agent follows its agent, a row of the
        copy its copy.
        """
        raise NotImplementedError

    def critic_row_waits(self, group: AgentGroup, waiting: torch.Tensor) -> torch.Tensor:
        """``(batch, critic rows per copy)`` bool: which rows of the group's critic hold their hidden state at this
        step, from the agents ``waiting`` ``(batch, group)``: those of one waiting agent (a row of the copy, which
        reads the global state, goes on at every step).
        """
        return self.critic_row_starts(group, waiting, torch.zeros(waiting.shape[0], dtype=torch.bool,
                                                                  device=waiting.device))

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """As the feed-forward algorithm, and the tensors of the hidden states and their starts."""
        super().init(trainer_cfg)
        for group in self.groups:
            group.memory.create_tensor("starts", (group.size,), dtype=torch.bool)
            group.memory.create_tensor("waiting", (group.size,), dtype=torch.bool)
            group.memory.create_tensor("copy_starts", (1,), dtype=torch.bool)
            if "policy" in group.hidden:
                group.memory.create_tensor("policy_hidden", (group.size, group.hidden["policy"].hidden_size))

    # ----------------------------------------------------------------------------- collection
    def _starts(self, group: AgentGroup, infos: Optional[Mapping[str, Any]], batch: int,
                device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(agent_starts (batch, group), copy_starts (batch,), waiting (batch, group))`` of the step about to be
        taken (:func:`~marlparts.agents.ppo.hidden_states.episode_starts`). In training an agent also starts
        afresh after its own episode ended at the step before (it left: its state is zero from then on).
        """
        agent_starts, copy_starts, waiting = episode_starts(infos, group, batch, device)
        if self.training:
            ended = self._ended.get(id(group))
            if ended is not None and ended.shape == agent_starts.shape:
                agent_starts = agent_starts | ended.to(device)
            if self._fresh_start:
                agent_starts, copy_starts = torch.ones_like(agent_starts), torch.ones_like(copy_starts)
        return agent_starts, copy_starts, waiting

    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """As the feed-forward algorithm; the policies read and advance their hidden states."""
        actions = super().act(observations, states, infos, timestep, timesteps)
        if self.training:
            self._fresh_start = False
        return actions

    def policy_act(self, group: AgentGroup, inputs: Dict[str, torch.Tensor],
                   infos: Mapping[str, Any]) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
        """The group's policy on one step, its hidden state in ``inputs["hidden"]``; the starts of the step
        are kept for :meth:`step_samples`.
        """
        batch = inputs["observations"].shape[0] // group.size
        agent_starts, copy_starts, waiting = self._starts(group, infos, batch, inputs["observations"].device)
        if self.training:
            group.cache["starts"], group.cache["copy_starts"], group.cache["waiting"] = agent_starts, copy_starts, waiting
        memory = group.hidden.get("policy")
        if memory is not None:
            inputs = {**inputs, "hidden": memory.take(agent_starts, self.training)}
            if self.training:
                group.cache["policy_hidden"] = inputs["hidden"].unflatten(0, (batch, group.size))
        actions, log_prob, outputs = super().policy_act(group, inputs, infos)
        if memory is not None:
            memory.keep(hold_rows(outputs["hidden"], inputs["hidden"], waiting), self.training)
        return actions, log_prob, outputs

    def step_samples(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                     **step: Any) -> Dict[str, torch.Tensor]:
        """As the feed-forward algorithm, with the hidden states and starts of the step. A recurrent critic values
        the step first, advancing its hidden state over the step's observation: the values of the episodes that
        ended at this step (their final observations) are then read from the state that has seen it.
        """
        values = self._collection_values(group, observations, states) if "value" in group.hidden else None
        samples = super().step_samples(group, observations, states, **step)
        samples["starts"] = group.cache["starts"]
        samples["copy_starts"] = group.cache["copy_starts"].unsqueeze(-1)
        group.memory.create_tensor("waiting", (group.size,), dtype=torch.bool)  # a memory loaded from a checkpoint
        samples["waiting"] = group.cache["waiting"]                              # written without it gets it here
        ended = stack_agents(step["terminated"], group.uids).bool() | stack_agents(step["truncated"], group.uids).bool()
        self._ended[id(group)] = ended.reshape(observations.shape[0], group.size)
        if "policy" in group.hidden:
            samples["policy_hidden"] = group.cache["policy_hidden"]
        if values is not None:
            samples["values"] = values
            group.memory.create_tensor("value_hidden", group.cache["value_hidden"].shape[1:])
            samples["value_hidden"] = group.cache["value_hidden"]
        return samples

    def _collection_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """``V(s_t)`` in return units at a collected step by the group's recurrent critic, its state advanced
        and the state it read kept for :meth:`step_samples`.
        """
        memory = group.hidden["value"]
        hidden = memory.take(self.critic_row_starts(group, group.cache["starts"], group.cache["copy_starts"]), True)
        values, outputs = self._values(group, observations, states, {"hidden": hidden})
        memory.keep(hold_rows(outputs["hidden"], hidden, self.critic_row_waits(group, group.cache["waiting"])), True)
        group.cache["value_hidden"] = hidden.unflatten(0, (observations.shape[0], -1))
        return values

    def final_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """Values of the final observations of the episodes that ended at this step: a recurrent critic reads them
        from the hidden state that has seen the step's observation (no row starts afresh; a row whose agent waited
        at this step reads the state it held).
        """
        memory = group.hidden.get("value")
        if memory is None:
            return super().final_values(group, observations, states)
        batch, device = observations.shape[0], observations.device
        starts = self.critic_row_starts(group, torch.zeros(batch, group.size, dtype=torch.bool, device=device),
                                        torch.zeros(batch, dtype=torch.bool, device=device))
        return self._values(group, observations, states, {"hidden": memory.take(starts, True)})[0]

    def next_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                    infos: Optional[Mapping[str, Any]]) -> torch.Tensor:
        """Values of the observations after the last collected step, from the critic's hidden state (zeroed where
        those observations start an episode), which is left as it is.
        """
        memory = group.hidden.get("value")
        if memory is None:
            return super().next_values(group, observations, states, infos)
        agent_starts, copy_starts, _ = self._starts(group, infos, observations.shape[0], observations.device)
        hidden = memory.take(self.critic_row_starts(group, agent_starts, copy_starts), True)
        return self._values(group, observations, states, {"hidden": hidden})[0]

    def rollout_values(self, group: AgentGroup) -> torch.Tensor:
        """The values a recurrent critic gave each step as it was collected (a feed-forward one values them now)."""
        if "value" in group.hidden:
            return group.memory.get_tensor_by_name("values")
        return super().rollout_values(group)

    def forget_hidden_states(self, training: Optional[bool] = None) -> None:
        """Forget the hidden states (of training, of evaluation, or both): the next step starts afresh."""
        for group in self.groups:
            for memory in group.hidden.values():
                memory.clear(training)
        if training is None or training:
            self._fresh_start = True
            self._ended = {}

    def cut_episodes(self) -> None:
        """As the feed-forward algorithm; the next training episodes start from fresh hidden states."""
        super().cut_episodes()
        self.forget_hidden_states(training=True)

    def set_mode(self, mode: str) -> None:
        """As the feed-forward algorithm; entering evaluation also starts its hidden states afresh."""
        super().set_mode(mode)
        if mode == "eval":
            self.forget_hidden_states(training=False)

    # ----------------------------------------------------------------------------- update on chunks
    def minibatch_indexes(self) -> List[torch.Tensor]:
        """Minibatches of chunk indexes: ``(rollouts / sequence_length) × num_envs`` chunks, shuffled."""
        memory = self.groups[0].memory
        chunks = memory.memory_size // self.sequence_length * memory.num_envs
        if self.cfg["mini_batches"] > chunks:
            raise ValueError(f"cfg['mini_batches'] is {self.cfg['mini_batches']} but the rollout holds only {chunks} "
                             "chunks of cfg['sequence_length'] steps")
        return list(torch.randperm(chunks, device=memory.device).tensor_split(self.cfg["mini_batches"]))

    def critic_loss_alone(self, chunks: torch.Tensor) -> torch.Tensor:
        """The value loss of the minibatch of ``chunks``, from :meth:`minibatch_losses`: its one loop replays every
        recurrent model's hidden states over the chunks, the policy's with the critic's.
        """
        return self.minibatch_losses(chunks)["value"]

    def group_losses(self, group: AgentGroup, chunks: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The PPO losses of ``group`` on the chunks ``chunks``, each replayed from its stored hidden states."""
        names = ["observations", "actions", "log_prob", "old_values", "value_targets", "advantages", "active",
                 "starts", "copy_starts", "waiting"]
        names += ["states"] if self.USES_STATE else []
        names += ["action_mask"] if self._has_action_mask else []
        names += [f"{role}_hidden" for role in ("policy", "value") if role in group.hidden]
        batch = dict(zip(names, group.memory.chunks_by_index(names, chunks, self.sequence_length)))  # (n, L, ...)
        count, length = batch["observations"].shape[:2]
        states = batch.get("states")
        policy_hidden = batch["policy_hidden"][:, 0].flatten(0, 1) if "policy" in group.hidden else None
        value_hidden = batch["value_hidden"][:, 0].flatten(0, 1) if "value" in group.hidden else None
        log_probs, entropies, predictions = [], [], []
        for step in range(length):
            agent_starts, copy_starts = batch["starts"][:, step], batch["copy_starts"][:, step, 0]
            waiting = batch["waiting"][:, step]
            inputs = {"observations": self._policy_inputs(group, batch["observations"][:, step]),
                      "taken_actions": batch["actions"][:, step].flatten(0, 1)}
            if self._has_action_mask:
                inputs["action_mask"] = batch["action_mask"][:, step].flatten(0, 1)
            if policy_hidden is not None:
                inputs["hidden"] = reset_rows(policy_hidden, agent_starts)
            _, log_prob, outputs = group.models["policy"].act(inputs, role="policy")
            if policy_hidden is not None:
                policy_hidden = hold_rows(outputs["hidden"], inputs["hidden"], waiting)
            log_probs.append(log_prob.unflatten(0, (count, group.size)))
            entropies.append(outputs["entropy"].unflatten(0, (count, group.size)))
            if value_hidden is not None:
                hidden = reset_rows(value_hidden, self.critic_row_starts(group, agent_starts, copy_starts))
                predicted, outputs = self.predict_values(group, batch["observations"][:, step],
                                                         states[:, step] if states is not None else None,
                                                         {"hidden": hidden})
                predictions.append(predicted)
                value_hidden = hold_rows(outputs["hidden"], hidden, self.critic_row_waits(group, waiting))
        if value_hidden is None:  # a feed-forward critic reads every step of every chunk at once
            predicted, _ = self.predict_values(group, batch["observations"].flatten(0, 1),
                                               states.flatten(0, 1) if states is not None else None)
            predicted = predicted.unflatten(0, (count, length))
        else:
            predicted = torch.stack(predictions, dim=1)
        return ppo_losses(log_prob=torch.stack(log_probs, dim=1).flatten(0, 2),
                          old_log_prob=batch["log_prob"].flatten(0, 2), advantages=batch["advantages"].flatten(0, 2),
                          entropy=torch.stack(entropies, dim=1).flatten(0, 2), predicted=predicted.flatten(0, 2),
                          targets=batch["value_targets"].flatten(0, 2), old_values=batch["old_values"].flatten(0, 2),
                          active=batch["active"].flatten(0, 2), cfg=self.loss_settings(group),
                          model_sets=group.model_sets)


class RecurrentMAPPO(RecurrentPPOMixin, MAPPO):
    """MAPPO with recurrent policies and/or critics (:class:`~marlparts.models.RecurrentMixin` models), trained
    on chunks of ``cfg["sequence_length"]`` consecutive steps. See :class:`RecurrentPPOMixin`.
    """

    DEFAULT_CONFIG = RECURRENT_MAPPO_DEFAULT_CONFIG

    def critic_row_starts(self, group: AgentGroup, agent_starts: torch.Tensor, copy_starts: torch.Tensor) -> torch.Tensor:
        """With ``"one_hot"`` the critic reads one row per agent, which starts with the agent; otherwise each critic
        reads the global state of the env copy, whose row starts with the copy's episode only.
        """
        if self.cfg["agent_specific_values"] == "one_hot":
            return agent_starts
        return copy_starts.unsqueeze(1).expand(-1, group.model_count("value"))


class RecurrentIPPO(RecurrentPPOMixin, IPPO):
    """IPPO with recurrent policies and/or critics, trained on chunks of ``cfg["sequence_length"]`` consecutive
    steps. See :class:`RecurrentPPOMixin`.
    """

    DEFAULT_CONFIG = RECURRENT_IPPO_DEFAULT_CONFIG

    def critic_row_starts(self, group: AgentGroup, agent_starts: torch.Tensor, copy_starts: torch.Tensor) -> torch.Tensor:
        """Each critic row reads one agent's observation: it starts with the agent."""
        return agent_starts
