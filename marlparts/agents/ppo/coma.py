"""Counterfactual Multi-Agent policy gradients (Foerster et al., 2018): a centralised critic of every own action,
and each agent's advantage against the counterfactual baseline of its own policy.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium
import torch
import torch.nn.functional as F

from marlparts.agents.common.groups import AgentGroup, agent_order
from marlparts.agents.common.losses import masked_mean, masked_mean_weights
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.agents.ppo.advantages import compute_gae
from marlparts.agents.ppo.core import PPO_DEFAULT_CONFIG, MultiAgentPPO
from marlparts.agents.ppo.losses import value_errors
from marlparts.resources.schedulers import KLAdaptiveLR
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

COMA_DEFAULT_CONFIG: Config = PPO_DEFAULT_CONFIG.copy()
COMA_DEFAULT_CONFIG["learning_epochs"] = 5         # the critic's passes over the rollout (the actor takes one)
COMA_DEFAULT_CONFIG["value_min_steps"] = 1         # the critic's steps are its passes' (set more to top them up)
COMA_DEFAULT_CONFIG["clip_predicted_values"] = False
for _unread in ("ratio_clip", "kl_threshold"):       # the actor's loss is the plain policy gradient: no ratio
    del COMA_DEFAULT_CONFIG[_unread]


class COMA(MultiAgentPPO):
    """COMA for discrete actions: one centralised critic ``Q(s, u^{-i}, a; i)`` shared by every agent.

    The critic (the ``"value"`` role, one instance for every agent) reads the global state, every agent's
    action one-hot with the valued agent's own left at zeros, and the valued agent's one-hot id, and outputs
    one value per action of that agent. An update:

    1. ``Q`` of every own action at every stored step; the counterfactual baseline
       ``b_i = Σ_a π_i(a|o_i) Q(s, (u^{-i}, a))`` and the advantage ``A_i = Q(s, u)[u_i] − b_i``;
       the critic's targets are the TD(λ) returns of ``Q(s, u)[u_i]`` (the critic as it was at collection
       holds them fixed through the update, as the paper's target critic does);
    2. ``learning_epochs`` passes of minibatches on the critic loss ``(Q(s, u)[u_i] − y)²`` (topped up to
       ``value_min_steps`` steps);
    3. one pass of minibatches on each actor's ``−A_i log π_i(u_i|o_i)`` and the entropy bonus.

    Where an episode is cut (a time limit, the rollout's end) the value that follows is
    ``Σ_a π_i(a|o'_i) Q(s', (u'^{-i}, a))`` with the other agents' next actions drawn from their policies.
    Policies may be shared or each agent's own. ``ratio_clip`` and ``kl_threshold`` are not part of its configuration.
    """

    DEFAULT_CONFIG = COMA_DEFAULT_CONFIG
    USES_STATE = True
    PER_AGENT_KEYS = MultiAgentPPO.PER_AGENT_KEYS - {"ratio_clip"}
    SUPPORTS_TURN_BASED = False

    def __init__(self, **kwargs: Any) -> None:
        spaces, cls_name = kwargs.get("action_spaces") or {}, type(self).__name__
        for uid in kwargs.get("possible_agents") or []:
            if uid in spaces and not isinstance(spaces[uid], gymnasium.spaces.Discrete):
                raise TypeError(f"{cls_name}'s critic values every own action of an agent, so actions must be discrete; "
                                f"agent {uid!r} has the action space {spaces[uid]}")
        scheduler = (kwargs.get("cfg") or {}).get("learning_rate_scheduler")
        if isinstance(scheduler, type) and issubclass(scheduler, KLAdaptiveLR):
            raise ValueError(f"{cls_name}'s actor takes plain policy-gradient steps and measures no KL divergence, so "
                             "cfg['learning_rate_scheduler'] cannot be KLAdaptiveLR (use a torch.optim.lr_scheduler)")
        super().__init__(**kwargs)
        critics = self.distinct_models("value")
        if len(critics) != 1:
            raise ValueError(f"{cls_name} has one centralised critic for every agent: give every "
                             f"agent the same 'value' model instance, got {len(critics)}")
        self.action_counts = [int(self.action_spaces[group.uids[0]].n) for group in self.groups]
        self._action_columns = agent_order(self.groups, self.possible_agents, self.action_counts)
        total = sum(count * group.size for count, group in zip(self.action_counts, self.groups))
        offsets = [0]
        for uid in self.possible_agents:
            offsets.append(offsets[-1] + int(self.action_spaces[uid].n))
        # per group: which columns of the joint actions are each of its agents' own (left at zeros for it)
        self._own_columns = []
        for group in self.groups:
            own = torch.zeros(group.size, total, dtype=torch.bool)
            for row, index in enumerate(group.agent_indexes.tolist()):
                own[row, offsets[index]:offsets[index + 1]] = True
            self._own_columns.append(own.to(self.device))
        self._next_expectation: Optional[Tuple[Mapping[str, torch.Tensor], Dict[int, torch.Tensor]]] = None
        self._final_expectation: Optional[Dict[int, torch.Tensor]] = None
        self._step: Mapping[str, Any] = {}

    # ----------------------------------------------------------------------------- the critic
    def agent_row_roles(self) -> Tuple[str, ...]:
        """None: graph and set layers are not run under COMA."""
        return ()

    def critic_input_size(self, uid: str) -> int:
        """Size of the global state (what the state preprocessor standardises)."""
        return flat_size(self.state_spaces[uid])

    def value_model_shape(self, uid: str) -> Tuple[int, int]:
        """``(state + every agent's action one-hot + number of agents, actions of uid)``."""
        actions = sum(int(self.action_spaces[other].n) for other in self.possible_agents)
        return self.critic_input_size(uid) + actions + len(self.possible_agents), int(self.action_spaces[uid].n)

    def critic_input_rows(self, record: TrainedModel) -> torch.Tensor:
        """The stored global states, one row per env copy and step."""
        return self.groups[0].memory.get_tensor_by_name("states", keepdim=False)

    def joint_actions(self, actions: List[torch.Tensor], active: List[torch.Tensor]) -> torch.Tensor:
        """Each group's ``(batch, group, 1)`` actions as one ``(batch, Σ actions)`` one-hot in agent order; an
        agent inactive at the step (``active``, like ``actions``) has zeros.
        """
        parts = [(F.one_hot(part.squeeze(-1).long(), count) * on).flatten(1).float()
                 for part, on, count in zip(actions, active, self.action_counts)]
        joined = torch.cat(parts, dim=1)
        return joined if self._action_columns is None else joined[:, self._action_columns.to(joined.device)]

    def critic_inputs(self, group: AgentGroup, states: Optional[torch.Tensor], observations: torch.Tensor,
                      joint_actions: torch.Tensor) -> torch.Tensor:
        """The critic's input rows ``(batch, group, features)`` for the group's agents: the (standardised) global
        state, every agent's action one-hot with the agent's own left at zeros, and its one-hot id.
        """
        batch, index = joint_actions.shape[0], self.groups.index(group)
        others = joint_actions.unsqueeze(1) * ~self._own_columns[index].to(joint_actions.device)  # own action left out
        ids = F.one_hot(group.agent_indexes.to(joint_actions.device), len(self.possible_agents)).to(states.dtype)
        return torch.cat([self._preprocess_states(group, states).unsqueeze(1).expand(batch, group.size, -1),
                          others, ids.unsqueeze(0).expand(batch, -1, -1)], dim=-1)

    def q_values(self, group: AgentGroup, states: Optional[torch.Tensor], observations: torch.Tensor,
                 joint_actions: torch.Tensor) -> torch.Tensor:
        """``Q`` of every own action ``(batch, group, actions)`` of the group's agents, in the critic's units
        (``observations`` ``(batch, group, obs)``, ``joint_actions`` from :meth:`joint_actions`).
        """
        rows = self.critic_inputs(group, states, observations, joint_actions)
        predicted, _ = self.critic(group, rows.flatten(0, 1))
        return predicted.unflatten(0, rows.shape[:2])

    def in_return_units(self, group: AgentGroup, values: torch.Tensor) -> torch.Tensor:
        """Critic outputs with the value normalisation undone."""
        normaliser = self.value_normaliser(group)
        return values if normaliser is None else normaliser(values.reshape(-1, 1), inverse=True).reshape(values.shape)

    def policy_probabilities(self, group: AgentGroup, observations: torch.Tensor,
                             masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``π_i(·|o_i)`` ``(batch, group, actions)`` of the group's agents."""
        inputs = {"observations": self._policy_inputs(group, observations)}
        if masks is not None:
            inputs["action_mask"] = masks.flatten(0, 1)
        _, _, outputs = group.models["policy"].act(inputs, role="policy")
        return torch.softmax(outputs["logits"], dim=-1).unflatten(0, observations.shape[:2])

    def expected_values(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor],
                        active: List[torch.Tensor], masks: Optional[List[torch.Tensor]]) -> Dict[int, torch.Tensor]:
        """Per group ``(E, group, 1)``: ``Σ_a π_i(a|o_i) Q(s, (u^{-i}, a))`` in return units, the other agents'
        actions drawn from their policies; ``active`` and ``masks`` (each group's ``(E, group, ...)``, masks may be
        None) say which agents are present at these observations and which of their actions are legal.
        """
        observed = [stack_agents(observations, group.uids) for group in self.groups]
        probabilities = [self.policy_probabilities(group, obs, None if masks is None else masks[index])
                         for index, (group, obs) in enumerate(zip(self.groups, observed))]
        drawn = [torch.multinomial(p.flatten(0, 1), 1).unflatten(0, p.shape[:2]) for p in probabilities]
        joint = self.joint_actions(drawn, active)
        return {index: (probabilities[index] * self.in_return_units(group, self.q_values(group, states, obs, joint)))
                .sum(-1, keepdim=True) for index, (group, obs) in enumerate(zip(self.groups, observed))}

    def record_transition(self, **kwargs: Any) -> None:
        """Store the step (the final observations of truncated episodes are valued on first need, for every
        group with one draw of the other agents' actions).
        """
        self._step, self._final_expectation = kwargs, None
        super().record_transition(**kwargs)

    def final_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """The expected ``Q`` of the final observations of the step just taken: present are the agents that acted
        at the step and did not terminate, with the action masks of the final observations.
        """
        if self._final_expectation is None:
            infos, terminated, truncated = (self._step[key] for key in ("infos", "terminated", "truncated"))
            active = [group.cache["active"] & ~stack_agents(terminated, group.uids).bool() for group in self.groups]
            masks = None
            if infos.get("action_mask") is not None:
                final_masks = infos.get("final_action_mask", infos["action_mask"])
                masks = [torch.where(stack_agents(terminated, g.uids).bool() | stack_agents(truncated, g.uids).bool(),
                                     stack_agents(final_masks, g.uids), stack_agents(infos["action_mask"], g.uids)).bool()
                         for g in self.groups]
            self._final_expectation = self.expected_values(infos["final_observation"], infos.get("final_state"),
                                                           active, masks)
        return self._final_expectation[self.groups.index(group)]

    def next_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                    infos: Optional[Mapping[str, Any]]) -> torch.Tensor:
        """The expected ``Q`` of the observations after the rollout (one draw of the next actions for every group)."""
        if self._next_expectation is None or self._next_expectation[0] is not self._next_observations:
            infos = infos or {}
            active = [self.active_mask(infos, g, self._next_copies(), self.device) for g in self.groups]
            masks = None if infos.get("action_mask") is None else \
                [stack_agents(infos["action_mask"], g.uids).bool() for g in self.groups]
            self._next_expectation = (self._next_observations, self.expected_values(
                self._next_observations, self._next_states, active, masks))
        return self._next_expectation[1][self.groups.index(group)]

    def _next_copies(self) -> int:
        """The number of env copies of the observations that follow the rollout."""
        return next(iter(self._next_observations.values())).shape[0]

    # ----------------------------------------------------------------------------- update
    def compute_advantages(self) -> None:
        """Counterfactual advantages and the critic's TD(λ) targets at every stored step (step 1 of the update)."""
        with torch.no_grad():
            memories = [group.memory for group in self.groups]
            states = memories[0].get_tensor_by_name("states", keepdim=False) if self.USES_STATE else None
            joint = self.joint_actions([memory.get_tensor_by_name("actions", keepdim=False) for memory in memories],
                                       [memory.get_tensor_by_name("active", keepdim=False) for memory in memories])
            for group, memory in zip(self.groups, memories):
                shape = memory.get_tensor_by_name("actions").shape                          # (T, E, group, 1)
                masks = memory.get_tensor_by_name("action_mask", keepdim=False) if self._has_action_mask else None
                observations = memory.get_tensor_by_name("observations", keepdim=False)
                q = self.in_return_units(group, self.q_values(group, states, observations, joint))  # (T E, group, actions)
                taken = q.gather(-1, memory.get_tensor_by_name("actions", keepdim=False)).reshape(shape)
                baseline = (self.policy_probabilities(group, observations, masks) * q).sum(-1, keepdim=True).reshape(shape)
                _, returns = compute_gae(
                    rewards=memory.get_tensor_by_name("rewards"), values=taken,
                    terminated=memory.get_tensor_by_name("terminated"), truncated=memory.get_tensor_by_name("truncated"),
                    final_values=memory.get_tensor_by_name("final_values"),
                    last_values=self.next_values(group, None, self._next_states, self._next_infos),
                    active=memory.get_tensor_by_name("active"),
                    discount_factor=group.cfg["discount_factor"], gae_lambda=group.cfg["gae_lambda"])
                normaliser = self.value_normaliser(group)
                memory.set_tensor_by_name("values", taken)
                memory.set_tensor_by_name("advantages", taken - baseline)
                memory.set_tensor_by_name("returns", returns)
                memory.set_tensor_by_name("value_targets", returns if normaliser is None else normaliser(returns))
                memory.set_tensor_by_name("old_values", taken if normaliser is None else normaliser(taken, clip=False))

    def update(self, timestep: int, timesteps: int) -> None:
        """COMA update on the rollout just collected (see the class documentation for the three steps)."""
        self.annealing_progress = self.progress_of(timestep)
        self.compute_advantages()
        self.plan_steps()
        critics = [self.groups[0].trained["value"]]
        policies = list({id(group.trained["policy"]): group.trained["policy"] for group in self.groups}.values())
        critic_losses = []
        for indexes in self.critic_minibatches():
            with self.autocast():
                loss = self.critic_loss(indexes)
            self.optimize(critics, loss)
            critic_losses.append(loss.detach())
        actor_losses = []
        for indexes in self.minibatch_indexes():
            with self.autocast():
                losses = self.actor_losses(indexes)
            self.optimize(policies, losses["policy"] + losses["entropy"])
            actor_losses.append({key: value.detach() for key, value in losses.items()})
        self.update_preprocessors()
        self.finish_update(0.0, {
            "Loss / policy": float(torch.stack([losses["policy"] for losses in actor_losses]).mean()),
            "Loss / value": float(torch.stack(critic_losses).mean()),
            "Policy / entropy": float(torch.stack([losses["entropy_value"] for losses in actor_losses]).mean())})

    def critic_loss(self, indexes: torch.Tensor) -> torch.Tensor:
        """``(Q(s, u)[u_i] − y)²`` over the agents active at the samples ``indexes``: each set of policies' own mean
        (agents with policies of their own, stacked or not, each weigh as one), then the mean over agents.
        """
        batches = [self.sample_minibatch(group, indexes) for group in self.groups]
        joint = self.joint_actions([batch["actions"] for batch in batches], [batch["active"] for batch in batches])
        losses = []
        for group, batch in zip(self.groups, batches):
            taken = self.q_values(group, batch.get("states"), batch["observations"], joint).gather(-1, batch["actions"])
            errors = value_errors(predicted=taken, targets=batch["value_targets"], old_values=batch["old_values"],
                                  cfg=group.cfg)
            losses.append({"value": group.cfg["value_loss_scale"] * masked_mean(
                errors.reshape(-1, 1), batch["active"].reshape(-1, 1), model_sets=group.model_sets)})
        return self.mean_over_agents(losses)["value"]

    def actor_losses(self, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Each agent's ``−A_i log π_i(u_i|o_i)`` and entropy bonus at the samples ``indexes`` (mean over agents)."""
        losses = []
        for group in self.groups:
            batch = self.sample_minibatch(group, indexes)
            log_prob, outputs = self.policy_log_prob(group, batch)
            weights = masked_mean_weights(batch["active"].reshape(-1, 1), model_sets=group.model_sets,
                                          dtype=log_prob.dtype)
            entropy = (outputs["entropy"].reshape(-1, 1) * weights).sum()
            losses.append({"policy": -(batch["advantages"].reshape(-1, 1) * log_prob.reshape(-1, 1) * weights).sum(),
                           "entropy": -self.loss_settings(group)["entropy_loss_scale"] * entropy,
                           "entropy_value": entropy.detach()})
        return self.mean_over_agents(losses)
