"""QMIX (Rashid et al., 2018): per-agent utilities mixed monotonically on the global state, trained from replay."""

from typing import Any, Dict, List, Mapping, Optional

import gymnasium
import torch

from marlparts.agents.common.losses import masked_mean
from marlparts.agents.off_policy.base import OFF_POLICY_DEFAULT_CONFIG, OffPolicyMultiAgent
from marlparts.resources.noises import linear_scale
from marlparts.utils.agent_tensors import stack_agents, unstack_agents
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

QMIX_DEFAULT_CONFIG: Config = OFF_POLICY_DEFAULT_CONFIG.copy()
QMIX_DEFAULT_CONFIG.update({
    "learning_rate": 5e-4,             # Adam, per model (per agent allowed)
    "double_q": True,                  # next actions chosen by the online utilities, valued by the targets
    "team_reward": "mean",             # the team's reward from the agents' rewards: "mean" or "sum"
    "n_step": 1,                       # team rewards summed (discounted) over up to n steps before bootstrapping
    "exploration": {                   # epsilon-greedy over legal actions while training
        "initial_epsilon": 1.0,        # at the first stored step ...
        "final_epsilon": 0.05,         # ... and after `timesteps` stored vectorized steps (linear decay)
        "timesteps": 5_000,
    },
})


class QMIX(OffPolicyMultiAgent):
    """QMIX for discrete actions.

    Each agent needs a ``"q"`` model (its observation to one utility per action,
    ``DeterministicMixin``; passing one instance for several agents shares it) and the
    ``"mixer"`` (one instance for every agent, e.g. :class:`~marlparts.models.mixers.QMixer`) that
    mixes the agents' utilities of their chosen actions, in ``possible_agents`` order, into the
    team value on the global state. One gradient step (per sampled batch):

    1. ``Q_tot = mixer(Q_1(o_1, a_1), ..., Q_N(o_N, a_N); s)``, with inactive agents' utilities set to 0;
    2. the target ``y = R + γ (1 − done) Q'_tot(s')``: each agent's next action is the argmax of its
       online utilities over its legal actions (double Q-learning), valued by the target utilities and
       mixed by the target mixer; ``R`` is the mean (or sum) of the agents' rewards, and the team is
       done when every agent active at the step has terminated; with ``n_step`` > 1 the rewards of up to
       ``n_step`` steps of the copy's episode are summed (discounted) before the bootstrap;
    3. minimise ``(Q_tot − y)²``; polyak-average the targets.

    Actions are epsilon-greedy over legal actions in training (epsilon decays over stored steps)
    and greedy in evaluation. Subclasses change :meth:`mix` (see :class:`~marlparts.agents.VDN`).
    """

    DEFAULT_CONFIG = QMIX_DEFAULT_CONFIG
    SUPPORTS_N_STEP = True
    ROLES = ("q", "mixer")
    OBSERVATION_ROLE = "q"
    PER_AGENT_KEYS = frozenset({"learning_rate", "grad_norm_clip"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.cfg["team_reward"] not in ("mean", "sum"):
            raise ValueError(f"cfg['team_reward'] must be 'mean' or 'sum', got {self.cfg['team_reward']!r}")
        for uid, space in self.action_spaces.items():
            if not isinstance(space, gymnasium.spaces.Discrete):
                raise TypeError(f"{type(self).__name__} mixes utilities of discrete actions; agent {uid!r} has the "
                                f"action space {space} (for continuous actions use MADDPG, MATD3 or MASAC)")
        for group in self.groups:
            uid = group.uids[0]
            group.models["q"].check_input_size(expected=flat_size(self.observation_spaces[uid]),
                                               outputs=int(self.action_spaces[uid].n),
                                               what=f"models[{uid!r}]['q'] (observation in, one utility per action out)")
            group.trained["q"] = self.add_off_policy_model(group.models["q"], "q")
        self.mixer_record = self._add_mixer()

    def _add_mixer(self) -> Optional[Any]:
        """The mixer's record: one mixer for every agent, reading the global state."""
        if self.state_spaces is None:
            raise ValueError(f"{type(self).__name__}'s mixer reads the global state: pass state_spaces=env.state_spaces "
                             "(a wrapped env without a state of its own gives every observation concatenated)")
        mixers = self.distinct_models("mixer")
        if len(mixers) != 1:
            raise ValueError(f"{type(self).__name__} needs one mixer instance shared by every agent, got {len(mixers)}")
        mixer = mixers[0]
        state_size = flat_size(self.state_spaces[self.possible_agents[0]])
        mixer.check_input_size(expected=state_size, outputs=1,
                               what=f"models[...]['mixer'] (the global state of {state_size} values in, one team value out)")
        record = self.add_off_policy_model(mixer, "mixer")
        for group in self.groups:
            group.trained["mixer"] = record
        return record

    def uses_state(self) -> bool:
        """The mixer reads the global state."""
        return True

    # ----------------------------------------------------------------------------- acting
    def epsilon(self) -> float:
        """The exploration rate at the current stored step."""
        exploration = self.cfg["exploration"]
        return linear_scale(self.recorded_steps, initial_scale=exploration["initial_epsilon"],
                            final_scale=exploration["final_epsilon"], timesteps=exploration["timesteps"])

    def utilities(self, model: torch.nn.Module, observations: torch.Tensor,
                  mask: Optional[torch.Tensor]) -> torch.Tensor:
        """``(batch, group, actions)`` utilities of ``(batch, group, obs)`` observations; illegal actions at -inf."""
        values, _, _ = model.act({"observations": observations.flatten(0, 1)}, role="q")
        values = values.unflatten(0, observations.shape[:2])
        return values if mask is None else values.masked_fill(~mask, float("-inf"))

    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """Epsilon-greedy over legal actions in training (uniformly random ones for ``random_timesteps``),
        greedy in evaluation (``final_epsilon`` with ``stochastic_evaluation``).
        """
        epsilon = 1.0 if self.exploring_randomly() else self.epsilon() if self.training else \
            self.cfg["exploration"]["final_epsilon"] if self.stochastic_evaluation else 0.0
        masks = (infos or {}).get("action_mask")
        actions: Dict[str, torch.Tensor] = {}
        for group in self.groups:
            obs = self.observe(group, observations, infos)
            mask = None if masks is None else stack_agents(masks, group.uids).bool()
            values = self.utilities(group.models["q"], obs, mask)
            chosen = values.argmax(-1, keepdim=True)
            if epsilon > 0:
                legal = torch.ones_like(values, dtype=torch.bool) if mask is None else mask
                random = torch.distributions.Categorical(probs=legal.float()).sample().unsqueeze(-1)
                explore = torch.rand(chosen.shape, device=chosen.device) < epsilon
                chosen = torch.where(explore, random, chosen)
            actions.update(unstack_agents(chosen, group.uids))
        if self.training:
            self.track_data("Exploration / epsilon", epsilon)
        return actions

    # ----------------------------------------------------------------------------- update
    def mix(self, record: Any, agent_values: torch.Tensor, states: torch.Tensor, *, target: bool) -> torch.Tensor:
        """The team value ``(batch,)`` of ``(batch, agents)`` agent values on ``states``, by the mixer (or its target)."""
        mixer = record.target if target else record.model
        team, _, _ = mixer.act({"observations": states, "agent_values": agent_values}, role="mixer")
        return team.squeeze(-1)

    def gradient_update(self, batches: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """One TD step of the mixed team value (see the class documentation)."""
        first = batches[0]
        with self.autocast():
            chosen = self.joint([self.utilities(group.models["q"], batch["observations"], None).gather(-1, batch["actions"])
                                 for group, batch in zip(self.groups, batches)])                      # (B, N)
            active = self.joint([batch["active"] for batch in batches])
            team_value = self.mix(self.mixer_record, torch.where(active, chosen, 0.0), first.get("states"), target=False)
            with torch.no_grad():
                target = self.team_targets(batches)
            # a step where no agent acted (an episode dropped after its env copy failed) holds no transition
            loss = masked_mean((team_value - target).square(), active.any(-1))
        self.optimize(self.trained, loss)
        self.update_targets()
        return {"Loss / TD": loss, "Q / team value": team_value.detach().mean()}

    def team_targets(self, batches: List[Dict[str, torch.Tensor]]) -> torch.Tensor:
        """``y = Σ_{k<m} γ^k R_{t+k} + γ^m (1 − done) Q'_tot(s', argmax_a Q(o', a))`` per sample, ``(batch,)``:
        ``m`` is 1, or with ``n_step`` the stored steps up to ``n_step`` before some agent's episode ends;
        ``s'``, ``o'`` and ``done`` belong to the last of them.
        """
        next_values = []
        for group, batch in zip(self.groups, batches):
            mask = batch.get("next_action_mask")
            target_values = self.utilities(group.trained["q"].target, batch["next_observations"], mask)
            if self.cfg["double_q"]:
                online = self.utilities(group.models["q"], batch["next_observations"], mask)
                next_values.append(target_values.gather(-1, online.argmax(-1, keepdim=True)))
            else:
                next_values.append(target_values.max(-1, keepdim=True).values)
        next_active = self.joint([batch["next_active"] for batch in batches])
        next_team = self.mix(self.mixer_record, torch.where(next_active, self.joint(next_values), 0.0),
                             batches[0].get("next_states"), target=True)
        rewards, active, terminated = (self._joint_steps(batches, name).float() for name in ("rewards", "active", "terminated"))
        valid = batches[0].get("n_step_valid")
        valid = torch.ones_like(rewards[..., 0], dtype=torch.bool) if valid is None else valid         # (B, n)
        team_reward = (rewards * active).sum(-1)
        if self.cfg["team_reward"] == "mean":
            team_reward = team_reward / active.sum(-1).clamp(min=1.0)
        done = (terminated * active).sum(-1) >= active.sum(-1)  # every agent that acted is done
        gamma = self.cfg["discount_factor"]
        discounts = gamma ** torch.arange(valid.shape[1], device=valid.device, dtype=team_reward.dtype)
        steps = valid.sum(1, keepdim=True)
        last_done = done.gather(1, steps - 1).squeeze(1).float()
        returns = (team_reward * discounts * valid).sum(1)
        return returns + gamma ** steps.squeeze(1).to(returns.dtype) * (1.0 - last_done) * next_team

    def _joint_steps(self, batches: List[Dict[str, torch.Tensor]], name: str) -> torch.Tensor:
        """``(batch, n, agents)``: the per-step ``n_step_<name>`` entries in agent order (``(batch, 1, agents)``
        from ``name`` without n-step returns).
        """
        if f"n_step_{name}" not in batches[0]:
            return self.joint([batch[name] for batch in batches]).unsqueeze(1)
        parts = [batch[f"n_step_{name}"] for batch in batches]
        return self.joint([part.flatten(0, 1) for part in parts]).unflatten(0, parts[0].shape[:2])
