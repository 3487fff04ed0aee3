"""Recurrent models in the PPO family: hidden states through collection, and training on chunks of
consecutive steps from the stored initial hidden states.

:class:`RecurrentPPOMixin` is part of :class:`~marlparts.agents.MultiAgentPPO`; with feed-forward
models (``cfg["sequence_length"] = 0``) none of it runs.
"""

import contextlib
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import torch

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.ppo.losses import ppo_losses
from marlparts.agents.ppo.hidden_states import HiddenStates, episode_starts, reset_rows
from marlparts.models.recurrent import is_recurrent


class RecurrentPPOMixin:
    """Hidden states of recurrent policies and critics, kept per group and role (``group.hidden``).

    During collection the hidden state a model reads at each step is stored with the step
    (``policy_hidden``, ``value_hidden``), together with where it started afresh (``starts``: a
    new episode, or an inactive agent, whose state stays at zero; ``copy_starts`` for critics that
    read one row per env copy). The update cuts the rollout into chunks of
    ``cfg["sequence_length"]`` consecutive steps; minibatches are made of whole chunks (all
    agents of a group together), and each chunk is replayed step by step from its stored initial
    hidden state, zeroed again where an episode started inside the chunk.
    """

    sequence_length: int = 0
    _critic_context: Optional[Tuple[AgentGroup, Callable[[int], torch.Tensor], List[torch.Tensor]]] = None

    def _prepare_recurrence(self) -> None:
        """Check the sequence settings and give each recurrent model of each group its hidden states."""
        self.sequence_length = int(self.cfg["sequence_length"])
        recurrent = []
        for group in self.groups:
            for role in ("policy", "value"):
                model = group.models[role]
                if is_recurrent(model):
                    if int(getattr(model, "hidden_size", 0)) < 1:
                        raise ValueError(f"models[{group.uids[0]!r}][{role!r}] is recurrent but sets no hidden_size")
                    group.hidden[role] = HiddenStates(model.hidden_size)
                    recurrent.append(f"models[{group.uids[0]!r}][{role!r}]")
        rollouts, length = self.cfg["rollouts"], self.sequence_length
        if recurrent and length < 1:
            raise ValueError(f"{', '.join(recurrent)} are recurrent: set cfg['sequence_length'] (the length of the chunks "
                             "of consecutive steps the update trains on) to a divisor of cfg['rollouts']")
        if length > rollouts or (length and rollouts % length):
            raise ValueError(f"cfg['sequence_length'] is {length} but cfg['rollouts'] is {rollouts}: the rollout is cut "
                             "into whole chunks, so the chunk length must divide the rollout length")
        self._fresh_start = True  # every hidden state starts at zero at the first training step

    def _recurrent(self, group: AgentGroup) -> bool:
        return bool(group.hidden)

    def _starts(self, group: AgentGroup, infos: Optional[Mapping[str, Any]], batch: int,
                device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(starts (batch, group), copy_starts (batch,))`` of the step about to be taken."""
        starts = episode_starts(infos, group, batch, device)
        episode_end = (infos or {}).get("episode_end")
        copy_starts = (episode_end.reshape(batch).bool().to(device) if episode_end is not None
                       else torch.zeros(batch, dtype=torch.bool, device=device))
        if self.training and self._fresh_start:
            starts, copy_starts = torch.ones_like(starts), torch.ones_like(copy_starts)
        return starts, copy_starts

    @contextlib.contextmanager
    def _critic_hidden(self, group: AgentGroup, hidden_for: Callable[[int], torch.Tensor]) -> Iterator[List[torch.Tensor]]:
        """While open, :meth:`critic_act` of ``group`` reads ``hidden_for(rows)`` and collects the hidden
        states the critic returns into the yielded list.
        """
        returned: List[torch.Tensor] = []
        self._critic_context = (group, hidden_for, returned) if "value" in group.hidden else None
        try:
            yield returned
        finally:
            self._critic_context = None

    def critic_act(self, group: AgentGroup, rows: torch.Tensor) -> torch.Tensor:
        """Run the group's critic on ``rows`` ``(rows, features)``: with its hidden state when it is recurrent."""
        inputs = {"observations": rows}
        context = self._critic_context
        if context is not None and context[0] is group:
            inputs["hidden"] = context[1](rows.shape[0])
        output, _, outputs = group.models["value"].act(inputs, role="value")
        if context is not None and context[0] is group:
            context[2].append(outputs["hidden"])
        return output

    def _collection_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """``V(s_t)`` in return units at a collected step by the group's recurrent critic, its state advanced
        and stored (a feed-forward critic values the whole rollout at the update instead).
        """
        memory = group.hidden["value"]
        starts, copy_starts = group.cache["starts"], group.cache["copy_starts"]
        used: List[torch.Tensor] = []

        def hidden_for(rows: int) -> torch.Tensor:
            used.append(memory.take(rows, True, starts, copy_starts))
            return used[-1]

        with self._critic_hidden(group, hidden_for) as returned:
            values = self._values(group, observations, states)
        memory.keep(returned[-1], True)
        group.cache["value_hidden"] = used[-1].unflatten(0, (observations.shape[0], -1))
        return values

    def _values_after_step(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                           infos: Optional[Mapping[str, Any]], *, reset: bool) -> torch.Tensor:
        """Values in return units of observations that follow the last collected step (final observations
        with ``reset=False``; the next step's with ``reset=True``), the recurrent critic's state left as it is.
        """
        memory = group.hidden.get("value")
        if memory is None:
            return self._values(group, observations, states)
        batch = observations.shape[0]
        if reset:
            starts, copy_starts = self._starts(group, infos, batch, observations.device)
        else:
            starts = torch.zeros(batch, group.size, dtype=torch.bool, device=observations.device)
            copy_starts = starts[:, 0]
        with self._critic_hidden(group, lambda rows: memory.take(rows, True, starts, copy_starts)):
            return self._values(group, observations, states)

    def _recurrent_policy_step(self, group: AgentGroup, inputs: Dict[str, torch.Tensor], batch: int,
                               infos: Optional[Mapping[str, Any]], device: torch.device) -> None:
        """Before a policy step: the starts of this step (cached in training) and the policy's hidden state."""
        starts, copy_starts = self._starts(group, infos, batch, device)
        if self.training:
            group.cache["starts"], group.cache["copy_starts"] = starts, copy_starts
        memory = group.hidden.get("policy")
        if memory is not None:
            inputs["hidden"] = memory.take(batch * group.size, self.training, starts, copy_starts)
            if self.training:
                group.cache["policy_hidden"] = inputs["hidden"].unflatten(0, (batch, group.size))

    def _create_recurrent_tensors(self, group: AgentGroup) -> None:
        memory = group.memory
        memory.create_tensor("starts", (group.size,), dtype=torch.bool)
        memory.create_tensor("copy_starts", (1,), dtype=torch.bool)
        if "policy" in group.hidden:
            memory.create_tensor("policy_hidden", (group.size, group.hidden["policy"].hidden_size))

    def _recurrent_samples(self, group: AgentGroup) -> Dict[str, torch.Tensor]:
        """What a collected step stores for the recurrent models of ``group``."""
        samples = {"starts": group.cache["starts"], "copy_starts": group.cache["copy_starts"].unsqueeze(-1)}
        if "policy" in group.hidden:
            samples["policy_hidden"] = group.cache["policy_hidden"]
        if "value" in group.hidden:
            hidden = group.cache["value_hidden"]
            group.memory.create_tensor("value_hidden", hidden.shape[1:])
            samples["value_hidden"] = hidden
        return samples

    def forget_hidden_states(self, training: Optional[bool] = None) -> None:
        """Forget the hidden states (of training, of evaluation, or both): the next step starts afresh."""
        for group in self.groups:
            for memory in group.hidden.values():
                memory.clear(training)
        if training is None or training:
            self._fresh_start = True

    # ----------------------------------------------------------------------------- update on chunks
    def chunk_minibatches(self) -> List[torch.Tensor]:
        """Minibatches of chunk indexes: ``(rollouts / sequence_length) × num_envs`` chunks, shuffled."""
        memory = self.groups[0].memory
        chunks = memory.memory_size // self.sequence_length * memory.num_envs
        if self.cfg["mini_batches"] > chunks:
            raise ValueError(f"cfg['mini_batches'] is {self.cfg['mini_batches']} but the rollout holds only {chunks} "
                             "chunks of cfg['sequence_length'] steps")
        return list(torch.randperm(chunks, device=memory.device).tensor_split(self.cfg["mini_batches"]))

    def sequence_losses(self, group: AgentGroup, chunks: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The PPO losses of ``group`` on the chunks ``chunks``, each replayed from its stored hidden states."""
        names = ["observations", "actions", "log_prob", "old_values", "value_targets", "advantages", "active",
                 "starts", "copy_starts"]
        names += ["states"] if self.USES_STATE else []
        names += ["action_mask"] if self._has_action_mask else []
        names += [f"{role}_hidden" for role in ("policy", "value") if role in group.hidden]
        batch = dict(zip(names, group.memory.chunks_by_index(names, chunks, self.sequence_length)))  # (n, L, ...)
        count, length = batch["observations"].shape[:2]
        policy = group.models["policy"]
        policy_hidden = batch["policy_hidden"][:, 0].flatten(0, 1) if "policy" in group.hidden else None
        value_hidden = batch["value_hidden"][:, 0].flatten(0, 1) if "value" in group.hidden else None
        log_probs, entropies, predictions = [], [], []
        for step in range(length):
            starts, copy_starts = batch["starts"][:, step], batch["copy_starts"][:, step, 0]
            inputs = {"observations": self._policy_inputs(group, batch["observations"][:, step]),
                      "taken_actions": batch["actions"][:, step].flatten(0, 1)}
            if self._has_action_mask:
                inputs["action_mask"] = batch["action_mask"][:, step].flatten(0, 1)
            if policy_hidden is not None:
                inputs["hidden"] = reset_rows(policy_hidden, starts, copy_starts)
            _, log_prob, outputs = policy.act(inputs, role="policy")
            if policy_hidden is not None:
                policy_hidden = outputs["hidden"]
            log_probs.append(log_prob.unflatten(0, (count, group.size)))
            entropies.append(outputs["entropy"].unflatten(0, (count, group.size)))
            if value_hidden is not None:
                hidden = reset_rows(value_hidden, starts, copy_starts)
                with self._critic_hidden(group, lambda rows, hidden=hidden: hidden) as returned:
                    predictions.append(self.predict_values(group, batch["observations"][:, step],
                                                           batch["states"][:, step] if self.USES_STATE else None))
                value_hidden = returned[-1]
        if value_hidden is None:  # a feed-forward critic reads every step of every chunk at once
            states = batch["states"].flatten(0, 1) if self.USES_STATE else None
            predicted = self.predict_values(group, batch["observations"].flatten(0, 1), states).unflatten(0, (count, length))
        else:
            predicted = torch.stack(predictions, dim=1)
        return ppo_losses(log_prob=torch.stack(log_probs, dim=1).flatten(0, 2),
                          old_log_prob=batch["log_prob"].flatten(0, 2), advantages=batch["advantages"].flatten(0, 2),
                          entropy=torch.stack(entropies, dim=1).flatten(0, 2), predicted=predicted.flatten(0, 2),
                          targets=batch["value_targets"].flatten(0, 2), old_values=batch["old_values"].flatten(0, 2),
                          active=batch["active"].flatten(0, 2), cfg=group.cfg)
