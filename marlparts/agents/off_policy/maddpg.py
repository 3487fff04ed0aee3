"""MADDPG (Lowe et al., 2017): decentralised deterministic actors, centralised Q critics trained from replay.

Each critic reads every agent's observation (or the global state) and every agent's action,
in ``possible_agents`` order, and outputs one Q-value per agent that uses it. Discrete actions
go through straight-through Gumbel-softmax so the critic's gradient reaches the actor.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium
import torch
import torch.nn.functional as F
from torch import nn

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.losses import masked_mean
from marlparts.agents.off_policy.base import OFF_POLICY_DEFAULT_CONFIG, OffPolicyMultiAgent
from marlparts.resources.noises import GaussianNoise, linear_scale
from marlparts.utils.agent_tensors import stack_agents, unstack_agents, with_own_actions
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MADDPG_DEFAULT_CONFIG: Config = OFF_POLICY_DEFAULT_CONFIG.copy()
MADDPG_DEFAULT_CONFIG.update({
    "actor_learning_rate": 1e-3,       # (per agent allowed)
    "critic_learning_rate": 1e-3,      # (per agent allowed)
    "critic_input": "observations",    # "observations": every agent's observation; "state": the global state
    "gumbel_softmax": True,            # discrete actions through straight-through Gumbel-softmax
    "gumbel_temperature": 1.0,         # (per agent allowed)
    "logits_regularization": 1e-3,     # weight of the mean squared logits in the discrete actor loss (per agent allowed)
    "exploration": {                   # noise added to continuous actions while training
        "noise": GaussianNoise,        # a marlparts.resources.noises class, or None
        "noise_kwargs": {"std": 0.1},
        "initial_scale": 1.0,          # noise scale at the first step ...
        "final_scale": 1.0,            # ... and after `timesteps` vectorized steps (linear decay)
        "timesteps": None,
    },
})


class MADDPG(OffPolicyMultiAgent):
    """MADDPG with parameter sharing by model identity.

    Each agent needs a ``"policy"`` (a deterministic model: actions for ``Box`` spaces, logits
    for ``Discrete`` ones) and a ``"critic"`` whose input is every agent's observation (or the
    state) followed by every agent's action (one-hot for discrete agents), all in
    ``possible_agents`` order, and whose output has one Q-value per agent that uses it (in
    ``possible_agents`` order among those agents). Target networks are deep copies made here.
    Replay, gating and targets come from :class:`~marlparts.agents.off_policy.base.OffPolicyMultiAgent`.

    Subclasses change the update through :meth:`target_actions`, :meth:`next_q_values`,
    :meth:`target_values`, :meth:`actor_objective` and :meth:`update_actor_now` (see
    :class:`MATD3` and :class:`MASAC`).
    """

    DEFAULT_CONFIG = MADDPG_DEFAULT_CONFIG
    ROLES = ("policy", "critic")
    CRITIC_ROLES = ("critic",)
    PER_AGENT_KEYS = frozenset({"discount_factor", "actor_learning_rate", "critic_learning_rate", "grad_norm_clip",
                                "gumbel_temperature", "logits_regularization", "time_limit_bootstrap"})
    POLICY_TARGETS = True  # whether the policies have target copies (the TD targets' actions come from them)
    ACTOR_CRITIC_ROLES = ("critic",)  # the critics the actors follow (the smallest of their Q-values)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cfg = self.cfg
        if cfg["critic_input"] not in ("observations", "state"):
            raise ValueError(f"cfg['critic_input'] must be 'observations' or 'state', got {cfg['critic_input']!r}")
        if cfg["critic_input"] == "state" and self.state_spaces is None:
            raise ValueError("cfg['critic_input'] is 'state' but no state_spaces were given")
        self.discrete = {uid: self._check_action_space(uid) for uid in self.possible_agents}
        self.action_widths = {uid: (space.n if self.discrete[uid] else flat_size(space))
                              for uid, space in self.action_spaces.items()}
        observation_size = (flat_size(self.state_spaces[self.possible_agents[0]]) if cfg["critic_input"] == "state"
                            else sum(flat_size(self.observation_spaces[uid]) for uid in self.possible_agents))
        self.critic_input_size = observation_size + sum(self.action_widths.values())
        offsets, start = {}, 0
        for uid in self.possible_agents:
            offsets[uid] = start
            start += self.action_widths[uid]
        self.action_offsets = offsets
        self._action_bounds: Dict[str, tuple] = {}
        self.critic_columns: Dict[Tuple[int, str], torch.Tensor] = {}  # (group index, role) -> Q-value columns
        noise_class = cfg["exploration"]["noise"]
        for index, group in enumerate(self.groups):
            self._check_group(group)
            group.trained["policy"] = self.add_off_policy_model(group.models["policy"], "policy",
                                                                learning_rate_key="actor_learning_rate",
                                                                target=self.POLICY_TARGETS)
            for role in self.CRITIC_ROLES:
                group.trained[role] = self.add_off_policy_model(group.models[role], role,
                                                                learning_rate_key="critic_learning_rate")
                self.critic_columns[(index, role)] = self._owner_positions(group, role)
            if noise_class is not None:
                group.noise = noise_class(**cfg["exploration"]["noise_kwargs"], device=self.device)

    # ----------------------------------------------------------------------------- construction
    def _check_action_space(self, uid: str) -> bool:
        space = self.action_spaces[uid]
        if isinstance(space, gymnasium.spaces.Discrete):
            if not self.cfg["gumbel_softmax"]:
                raise ValueError(f"agent {uid!r} has a Discrete action space ({space}) but cfg['gumbel_softmax'] is "
                                 "False: deterministic policies need Box actions, or set cfg['gumbel_softmax'] = True")
            return True
        if isinstance(space, gymnasium.spaces.Box):
            return False
        raise TypeError(f"{type(self).__name__} supports Discrete and Box action spaces; agent {uid!r} has {space}")

    def _owner_positions(self, group: AgentGroup, role: str) -> torch.Tensor:
        owners = self.owners(group.models[role], role)
        return torch.as_tensor([owners.index(uid) for uid in group.uids], device=self.device)

    def _check_group(self, group: AgentGroup) -> None:
        first = group.uids[0]
        group.models["policy"].check_input_size(expected=flat_size(self.observation_spaces[first]),
                                                outputs=self.action_widths[first],
                                                what=f"models[{first!r}]['policy'] (observation in, action out)")
        for role in self.CRITIC_ROLES:
            critic = group.models[role]
            critic.check_input_size(expected=self.critic_input_size, outputs=len(self.owners(critic, role)),
                                    what=f"models[{first!r}][{role!r}] (every agent's {self.cfg['critic_input']} and "
                                         f"action in, one Q-value per agent using it out)")

    def uses_state(self) -> bool:
        """Transitions hold the global state when the critics read it (``critic_input = "state"``)."""
        return self.cfg["critic_input"] == "state"

    # ----------------------------------------------------------------------------- acting
    def policy_outputs(self, model: nn.Module, observations: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(outputs, log_prob)`` of a policy for ``(batch, group, obs)`` observations: ``(batch, group, width)``
        actions or logits, and ``(batch, group, 1)`` log-probabilities (None for deterministic policies).
        """
        output, log_prob, _ = model.act({"observations": observations.flatten(0, 1)}, role="policy")
        shape = observations.shape[:2]
        return output.unflatten(0, shape), None if log_prob is None else log_prob.unflatten(0, shape)

    def legal_outputs(self, group: AgentGroup, outputs: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        """A discrete group's logits ``(batch, group, actions)`` with the actions ``mask`` forbids at the lowest
        float, so that no sample, argmax or Gumbel-softmax picks them; continuous outputs, and logits without a
        mask, as they are. A row whose mask allows nothing (the final mask of an agent that is gone) is left as
        it is: masked whole, a Gumbel-softmax below a temperature of 1 would turn it into NaN.
        """
        if mask is None or not self.discrete[group.uids[0]]:
            return outputs
        forbidden = ~mask.bool()
        forbidden &= ~forbidden.all(dim=-1, keepdim=True)
        return outputs.masked_fill(forbidden, torch.finfo(outputs.dtype).min)

    def _bounds(self, uid: str, like: torch.Tensor) -> tuple:
        """``(low, high)`` of a Box action space as flat tensors like ``like`` (converted once per agent)."""
        if uid not in self._action_bounds:
            space = self.action_spaces[uid]
            self._action_bounds[uid] = (torch.as_tensor(space.low, dtype=torch.float32).reshape(-1),
                                        torch.as_tensor(space.high, dtype=torch.float32).reshape(-1))
        low, high = self._action_bounds[uid]
        if low.dtype != like.dtype or low.device != like.device:
            low, high = low.to(like), high.to(like)
            self._action_bounds[uid] = (low, high)
        return low, high

    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """Exploring actions in training (Gumbel samples or noisy deterministic actions), greedy ones in eval."""
        actions: Dict[str, torch.Tensor] = {}
        explore = self.training or self.stochastic_evaluation
        exploration = self.cfg["exploration"]
        scale = linear_scale(self.recorded_steps, initial_scale=exploration["initial_scale"],
                             final_scale=exploration["final_scale"], timesteps=exploration["timesteps"])
        random = self.exploring_randomly()
        masks = (infos or {}).get("action_mask")
        for group in self.groups:
            uid = group.uids[0]
            output, _ = self.policy_outputs(group.models["policy"], self.observe(group, observations, infos))
            if self.discrete[uid]:
                if random:
                    output = torch.zeros_like(output)
                output = self.legal_outputs(group, output, None if masks is None else stack_agents(masks, group.uids))
                chosen = (torch.distributions.Categorical(logits=output, validate_args=False).sample().unsqueeze(-1)
                          if explore or random else output.argmax(-1, keepdim=True))
            else:
                low, high = self._bounds(uid, output)
                if random:
                    chosen = low + torch.rand_like(output) * (high - low)
                else:
                    noise = group.noise if self.training else self._evaluation_noise(group, infos)
                    chosen = output + scale * noise.sample(output.shape) if explore and noise is not None else output
                    chosen = torch.max(torch.min(chosen, high), low)
            actions.update(unstack_agents(chosen, group.uids))
        self.track_data("Exploration / noise scale", scale)
        return actions

    # ----------------------------------------------------------------------------- joint inputs
    def action_inputs(self, group: AgentGroup, actions: torch.Tensor) -> torch.Tensor:
        """Stored actions ``(batch, group, columns)`` as critic inputs: one-hot for discrete agents."""
        uid = group.uids[0]
        if self.discrete[uid]:
            return F.one_hot(actions.squeeze(-1), self.action_widths[uid]).to(torch.float32)
        return actions

    def differentiable_actions(self, group: AgentGroup, outputs: torch.Tensor) -> torch.Tensor:
        """Policy outputs as critic inputs with gradient: straight-through Gumbel-softmax for discrete agents."""
        if self.discrete[group.uids[0]]:
            return F.gumbel_softmax(outputs, tau=group.cfg["gumbel_temperature"], hard=True)
        return outputs

    def critic_observations(self, batches: List[Dict[str, torch.Tensor]], key: str) -> torch.Tensor:
        """What the critics read besides actions: every agent's observation, or the global state."""
        if self.cfg["critic_input"] == "state":
            return batches[0]["states" if key == "observations" else "next_states"]
        return self.joint([batch[key] for batch in batches])

    def q_values(self, critic: nn.Module, observations: torch.Tensor, actions: torch.Tensor,
                 columns: torch.Tensor) -> torch.Tensor:
        """Q-values ``(batch, len(columns))`` of ``critic`` for joint ``observations`` and ``actions``."""
        q, _, _ = critic.act({"observations": torch.cat([observations, actions], dim=-1)}, role="critic")
        return q[:, columns]

    # ----------------------------------------------------------------------------- update
    def target_actions(self, group: AgentGroup, next_observations: torch.Tensor,
                       next_mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """``(actions as critic inputs, log_prob)`` of the target policy for ``(batch, group, obs)`` next observations,
        the actions ``next_mask`` forbids (where the env has masks) left out.
        """
        outputs, log_prob = self.policy_outputs(group.trained["policy"].target, next_observations)
        return self.differentiable_actions(group, self.legal_outputs(group, outputs, next_mask)), log_prob

    def next_q_values(self, group: AgentGroup, next_x: torch.Tensor, next_actions: torch.Tensor) -> torch.Tensor:
        """``Q'(x', a')`` of the group's target critic (the smallest over the target critics when there are
        several, as in MATD3 and MASAC), ``(batch, group)``.
        """
        index = self.groups.index(group)
        return torch.stack([self.q_values(group.trained[role].target, next_x, next_actions, self.critic_columns[(index, role)])
                            for role in self.CRITIC_ROLES]).min(dim=0).values

    def next_values(self, group: AgentGroup, q_next: torch.Tensor, log_prob: Optional[torch.Tensor]) -> torch.Tensor:
        """The value of the next step that the TD target discounts, ``(batch, group)``: ``Q'`` (MADDPG)."""
        return q_next

    def target_values(self, batches: List[Dict[str, torch.Tensor]]) -> List[torch.Tensor]:
        """TD targets ``y = r + γ (1 − terminated) Q'(x', a'_1..a'_N)`` per group, ``(batch, group)``."""
        with torch.no_grad():
            sampled = [self.target_actions(g, b["next_observations"], b["next_action_mask"]) if "next_action_mask" in b
                       else self.target_actions(g, b["next_observations"])  # (an override without masks still works)
                       for g, b in zip(self.groups, batches)]
            next_actions = self.joint([actions for actions, _ in sampled])
            next_x = self.critic_observations(batches, "next_observations")
            targets = []
            for group, batch, (_, log_prob) in zip(self.groups, batches, sampled):
                next_value = self.next_values(group, self.next_q_values(group, next_x, next_actions), log_prob)
                not_done = (~batch["terminated"]).squeeze(-1).to(next_value.dtype)
                targets.append(batch["rewards"].squeeze(-1) + group.cfg["discount_factor"] * not_done * next_value)
        return targets

    def critic_loss(self, batches: List[Dict[str, torch.Tensor]], targets: List[torch.Tensor]) -> torch.Tensor:
        """Mean over agents of the squared TD error of each agent's Q-value (of every critic role), on its
        active steps.
        """
        x = self.critic_observations(batches, "observations")
        actions = self.joint([self.action_inputs(g, b["actions"]) for g, b in zip(self.groups, batches)])
        loss = 0.0
        for index, (group, batch, target) in enumerate(zip(self.groups, batches, targets)):
            for role in self.CRITIC_ROLES:
                q = self.q_values(group.models[role], x, actions, self.critic_columns[(index, role)])
                loss = loss + group.size / len(self.possible_agents) * masked_mean((q - target).square(),
                                                                                   batch["active"].squeeze(-1))
        return loss

    def actor_objective(self, group: AgentGroup, own_q: torch.Tensor, outputs: torch.Tensor,
                        log_prob: Optional[torch.Tensor]) -> torch.Tensor:
        """What each agent of ``group`` minimises per sample, ``(batch, group)``: ``−Q_i`` (MADDPG)."""
        return -own_q

    def actor_loss(self, batches: List[Dict[str, torch.Tensor]]) -> torch.Tensor:
        """Mean over agents of ``−Q_i(x, a_1..μ_i(o_i)..a_N)``: each agent's own action from its policy,
        the others' from the replay batch.
        """
        x = self.critic_observations(batches, "observations")
        actions = self.joint([self.action_inputs(g, b["actions"]) for g, b in zip(self.groups, batches)])
        loss = 0.0
        for index, (group, batch) in enumerate(zip(self.groups, batches)):
            outputs, log_prob = self.policy_outputs(group.models["policy"], batch["observations"])
            own = self.differentiable_actions(group, self.legal_outputs(group, outputs, batch.get("action_mask")))
            joint_with_own = with_own_actions(actions, own, [self.action_offsets[uid] for uid in group.uids])
            batch_size, size = own.shape[:2]
            inputs = (x.unsqueeze(1).expand(-1, size, -1).flatten(0, 1), joint_with_own.flatten(0, 1))
            q = torch.stack([self.q_values(group.models[role], *inputs, self.critic_columns[(index, role)])
                             for role in self.ACTOR_CRITIC_ROLES]).min(dim=0).values
            own_q = q.unflatten(0, (batch_size, size)).diagonal(dim1=1, dim2=2)                 # Q_g with agent g's action
            agent_loss = masked_mean(self.actor_objective(group, own_q, outputs, log_prob), batch["active"].squeeze(-1))
            if self.discrete[group.uids[0]]:
                agent_loss = agent_loss + group.cfg["logits_regularization"] * outputs.square().mean()
            loss = loss + group.size / len(self.possible_agents) * agent_loss
        return loss

    def update_actor_now(self) -> bool:
        """Whether this gradient step also updates the actors and the targets (always, in MADDPG)."""
        return True

    def gradient_update(self, batches: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """One gradient step: fit the critics to the TD targets, then (when :meth:`update_actor_now`)
        improve the actors through the critics and move the targets.
        """
        critics = [record for record in self.trained if record.role in self.CRITIC_ROLES]
        policies = [record for record in self.trained if record.role == "policy"]
        with self.autocast():
            critic_loss = self.critic_loss(batches, self.target_values(batches))
        self.optimize(critics, critic_loss)
        losses = {"Loss / critic": critic_loss}
        if self.update_actor_now():
            for critic in critics:  # the actor loss needs gradients through the critics, not for them
                critic.model.requires_grad_(False)
            with self.autocast():
                actor_loss = self.actor_loss(batches)
            self.optimize(policies, actor_loss)
            for critic in critics:
                critic.model.requires_grad_(True)
            self.update_targets()
            losses["Loss / actor"] = actor_loss
        return losses
