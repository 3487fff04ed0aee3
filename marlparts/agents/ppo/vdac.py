"""Value-Decomposition Actor-Critic (Su et al., 2021): each agent's critic on its own observation, mixed
into the team's value, and every policy trained on the team's advantage.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from marlparts.agents.common.groups import agent_order
from marlparts.agents.common.losses import masked_mean, masked_mean_std, masked_mean_weights
from marlparts.agents.ppo.advantages import compute_gae
from marlparts.agents.ppo.core import PPO_DEFAULT_CONFIG
from marlparts.agents.ppo.ippo import IPPO
from marlparts.agents.ppo.losses import clipped_surrogate, value_errors
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import Config, agreed_value
from marlparts.utils.spaces import flat_size

VDAC_DEFAULT_CONFIG: Config = PPO_DEFAULT_CONFIG.copy()
VDAC_DEFAULT_CONFIG["value_preprocessor"] = None  # the team value is a sum (or mix) of critics: no per-critic scale
VDAC_DEFAULT_CONFIG["team_reward"] = "sum"        # the team's reward from the agents' rewards: "sum" or "mean"
VDAC_DEFAULT_CONFIG["clip_predicted_values"] = False  # value_clip would be in raw return units: it would stall V_tot

TEAM_KEYS = ("discount_factor", "gae_lambda", "value_loss_scale", "value_clip", "clip_predicted_values")


class VDAC(IPPO):
    """VDAC-sum: ``V_tot(s) = Σ_i V_i(o_i)`` over the agents active at the step.

    Each agent needs a ``"policy"`` and a ``"value"`` model on its own observation (one instance for
    several agents shares it). An update:

    1. the team reward ``R_t`` (sum, or mean, of the active agents' rewards) and ``V_tot`` at every step;
    2. GAE of ``V_tot`` on ``R_t``: one advantage per step, the same for every agent (normalised);
    3. epochs of minibatches: each agent's clipped surrogate on the team advantage and its entropy bonus,
       and the team value loss ``(V_tot − returns)²``, whose gradient reaches every critic through the sum.

    With ``learning_epochs = 1`` and ``mini_batches = 1`` every ratio is 1 and the policy loss is the paper's
    actor-critic gradient ``A ∇ log π_i``; more epochs reuse the rollout with PPO's clipping. The team
    discounts one return, so ``discount_factor``, ``gae_lambda`` and the value-loss settings take one value
    for all agents. :class:`VDACMix` mixes with a network of the global state instead of a sum.
    """

    DEFAULT_CONFIG = VDAC_DEFAULT_CONFIG
    SUPPORTS_TURN_BASED = False
    SHARED_ROLES = ()  # the team's value mixes every agent's: a critic of its own

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.cfg["team_reward"] not in ("sum", "mean"):
            raise ValueError(f"cfg['team_reward'] must be 'sum' or 'mean', got {self.cfg['team_reward']!r}")
        if self.cfg["value_preprocessor"] is not None:
            raise ValueError(f"{type(self).__name__} trains the team value, a sum or mix of the agents' critics, so "
                             "a value normaliser per critic does not apply: set cfg['value_preprocessor'] = None")
        self.team_cfg = {key: agreed_value(self.cfg, key, self.possible_agents,
                                           f"the team ({type(self).__name__} trains one team value)")
                         for key in TEAM_KEYS}
        self._agent_order = agent_order(self.groups, self.possible_agents)

    # ----------------------------------------------------------------------------- the team value
    def agent_row_roles(self) -> Tuple[str, ...]:
        """The policy; the agents' values, which the mixer combines, are not run through graph or set layers."""
        return ("policy",)

    def mix(self, agent_values: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """The team value ``(..., 1)`` of the agents' values ``(..., agents)`` (0 for inactive agents)."""
        return agent_values.sum(-1, keepdim=True)

    def joint(self, parts: List[torch.Tensor]) -> torch.Tensor:
        """Per-group tensors ``(..., group, 1)`` as one ``(..., agents)`` tensor in ``possible_agents`` order."""
        joined = torch.cat(parts, dim=-2).squeeze(-1)
        return joined if self._agent_order is None else joined.index_select(-1, self._agent_order.to(joined.device))

    def team_value(self, values: List[torch.Tensor], active: List[torch.Tensor],
                   states: Optional[torch.Tensor]) -> torch.Tensor:
        """``V_tot`` ``(..., 1)`` from each group's values and active masks ``(..., group, 1)``."""
        return self.mix(self.joint([torch.where(a, v, 0.0) for v, a in zip(values, active)]), states)

    # ----------------------------------------------------------------------------- update
    def compute_advantages(self) -> None:
        """Team advantages and returns by GAE of ``V_tot`` on the team reward, stored for every agent of the team.

        The team's episode ends when every agent active at the step has ended; it is terminated when every
        such agent terminated, and truncated (bootstrapped from ``V_tot`` of the final observations) otherwise.
        """
        with torch.no_grad():
            stored: Dict[str, List[torch.Tensor]] = {name: [] for name in
                                                     ("values", "active", "rewards", "terminated", "truncated",
                                                      "final_values")}
            for group in self.groups:
                memory = group.memory
                memory.set_tensor_by_name("values", self.rollout_values(group))
                for name in stored:
                    stored[name].append(memory.get_tensor_by_name(name))
            memory = self.groups[0].memory
            states = memory.get_tensor_by_name("states") if self.USES_STATE else None
            final_states = memory.get_tensor_by_name("final_states") if self.USES_STATE else None
            active = self.joint(stored["active"])                                          # (T, E, N)
            team_active = active.any(-1, keepdim=True)
            values = self.team_value(stored["values"], stored["active"], states)
            final_values = self.team_value(stored["final_values"], stored["active"], final_states)
            terminated, truncated = self.joint(stored["terminated"]), self.joint(stored["truncated"])
            ended = team_active & ((terminated | truncated) | ~active).all(-1, keepdim=True)
            team_terminated = ended & (terminated | ~active).all(-1, keepdim=True)
            rewards = torch.where(active, self.joint(stored["rewards"]), 0.0).sum(-1, keepdim=True)
            if self.cfg["team_reward"] == "mean":
                rewards = rewards / active.sum(-1, keepdim=True).clamp(min=1)
            advantages, returns = compute_gae(
                rewards=rewards, values=values, terminated=team_terminated, truncated=ended & ~team_terminated,
                final_values=final_values, last_values=self.next_team_value(), active=team_active,
                discount_factor=self.team_cfg["discount_factor"], gae_lambda=self.team_cfg["gae_lambda"])
            mean, std = masked_mean_std(advantages, team_active, dims=(0, 1))
            advantages = (advantages - mean) / (std + 1e-8)
            for group in self.groups:
                for name, team in (("advantages", advantages), ("returns", returns), ("value_targets", returns),
                                   ("old_values", values)):
                    group.memory.set_tensor_by_name(name, team.unsqueeze(2).expand(-1, -1, group.size, -1))

    def next_team_value(self) -> torch.Tensor:
        """``V_tot`` ``(E, 1)`` of the observations that follow the rollout's last step."""
        active = self._next_infos.get("active") if self._next_infos else None
        values, actives = [], []
        for group in self.groups:
            observations = stack_agents(self._next_observations, group.uids)
            values.append(self.next_values(group, observations, self._next_states, self._next_infos))
            actives.append(torch.ones_like(values[-1], dtype=torch.bool) if active is None
                           else stack_agents(active, group.uids).bool())
        return self.team_value(values, actives, self._next_states)

    def minibatch_losses(self, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Each agent's clipped surrogate and entropy on the team advantage (mean over agents), and the team
        value loss on the same samples.
        """
        policy_losses, values, actives, batches = [], [], [], []
        for group in self.groups:
            batches.append(batch := self.sample_minibatch(group, indexes))
            log_prob, outputs = self.policy_log_prob(group, batch)
            active = batch["active"].flatten(0, 1)
            cfg = self.loss_settings(group)
            surrogate, ratio, log_ratio = clipped_surrogate(
                log_prob=log_prob.reshape(-1, 1), old_log_prob=batch["log_prob"].flatten(0, 1),
                advantages=batch["advantages"].flatten(0, 1), ratio_clip=cfg["ratio_clip"])
            weights = masked_mean_weights(active, model_sets=group.model_sets, dtype=surrogate.dtype)
            entropy = (outputs["entropy"].reshape(-1, 1) * weights).sum()
            policy_losses.append({"policy": -(surrogate * weights).sum(), "entropy": -cfg["entropy_loss_scale"] * entropy,
                                  "kl": ((ratio - 1.0 - log_ratio) * weights).sum().detach(),
                                  "entropy_value": entropy.detach()})
            values.append(self.predict_values(group, batch["observations"], batch.get("states"))[0])
            actives.append(batch["active"])
        losses = self.mean_over_agents(policy_losses)
        first = batches[0]  # every group stores the team's targets and the state
        team_active = self.joint(actives).any(-1, keepdim=True)
        errors = value_errors(predicted=self.team_value(values, actives, first.get("states")),
                              targets=first["value_targets"][:, 0], old_values=first["old_values"][:, 0],
                              cfg=self.team_cfg)
        losses["value"] = self.team_cfg["value_loss_scale"] * masked_mean(errors, team_active)
        return losses


    def critic_loss_alone(self, indexes: torch.Tensor) -> torch.Tensor:
        """The team value loss of the minibatch ``indexes`` (:meth:`minibatch_losses`: its policy pass runs too)."""
        return self.minibatch_losses(indexes)["value"]


class VDACMix(VDAC):
    """VDAC-mix: ``V_tot(s) = f(V_1(o_1), ..., V_N(o_N); s)`` by a monotonic mixing network of the global state.

    Besides each agent's ``"policy"`` and ``"value"``, every agent's models hold the same ``"mixer"``
    (e.g. :class:`~marlparts.models.mixers.QMixer` with ``state_space=env.state_space``), trained with the
    critics on the team value loss. Everything else is :class:`VDAC`'s.
    """

    ROLES = ("policy", "value", "mixer")
    USES_STATE = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        mixers = self.distinct_models("mixer")
        if len(mixers) != 1:
            raise ValueError(f"{type(self).__name__} needs one mixer instance shared by every agent, got {len(mixers)}")
        self.mixer = mixers[0]
        state_size = flat_size(self.state_spaces[self.possible_agents[0]])
        self.mixer.check_input_size(expected=state_size, outputs=1, what=f"models[...]['mixer'] (the global state of "
                                    f"{state_size} values in, one team value out)")
        record = self.add_trained_model(self.mixer, "mixer")
        for group in self.groups:
            group.trained["mixer"] = record

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Also keep the final global state of episodes cut by a time limit (the mixer values them)."""
        super().init(trainer_cfg)
        for group in self.groups:
            group.memory.create_tensor("final_states", (flat_size(self.state_spaces[group.uids[0]]),))

    def mix(self, agent_values: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """The mixer's team value of ``(..., agents)`` values on ``(..., state)`` states."""
        team, _, _ = self.mixer.act({"observations": states.flatten(0, -2), "agent_values": agent_values.flatten(0, -2)},
                                    role="mixer")
        return team.unflatten(0, agent_values.shape[:-1])

    def step_samples(self, group, observations, states, *, rewards, terminated, truncated, infos):
        """Also the final global state where an episode was truncated (zeros elsewhere)."""
        samples = super().step_samples(group, observations, states, rewards=rewards, terminated=terminated,
                                       truncated=truncated, infos=infos)
        final_state = infos.get("final_state")
        samples["final_states"] = torch.zeros_like(states) if final_state is None else final_state
        return samples

    def cut_episodes(self) -> None:
        """Also value the cut step's final team value from the global state that followed it."""
        memory = self.groups[0].memory
        step, cut_rows = memory.newest_step, None
        if memory.memory_index and self._next_observations is not None:
            ended = [group.memory.get_tensor_by_name("terminated")[step] | group.memory.get_tensor_by_name("truncated")[step]
                     | ~group.memory.get_tensor_by_name("active")[step] for group in self.groups]
            cut_rows = ~self.joint(ended).all(-1)  # an active agent's episode goes on: the copy was not reset
        super().cut_episodes()
        if cut_rows is not None:
            for group in self.groups:
                final_states = group.memory.get_tensor_by_name("final_states")
                final_states[step] = torch.where(cut_rows.unsqueeze(-1), self._next_states, final_states[step])
