"""The PPO machinery shared by MAPPO and IPPO: batched acting per group, rollout storage, update.

The two algorithms differ in what their critics see, which is the one method
:meth:`MultiAgentPPO.predict_values` that each overrides.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from marlparts.agents.advantages import compute_gae
from marlparts.agents.base import EXPERIMENT_DEFAULTS, MultiAgent
from marlparts.agents.groups import AgentGroup
from marlparts.agents.losses import masked_mean
from marlparts.resources.preprocessors import RunningStandardScaler
from marlparts.resources.schedulers import KLAdaptiveLR
from marlparts.utils.agent_tensors import stack_agents, unstack_agents
from marlparts.utils.config import Config
from marlparts.utils.spaces import action_size, flat_size, is_discrete

PPO_DEFAULT_CONFIG: Config = Config({
    "rollouts": 100,                      # env steps per update (the memory_size of every memory)
    "learning_epochs": 10,                # passes over the rollout per update
    "mini_batches": 2,                    # minibatches per pass (a group's agents stay together)
    "discount_factor": 0.99,              # gamma
    "lambda": 0.95,                       # GAE lambda
    "learning_rate": 7e-4,                # Adam learning rate (per agent allowed)
    "learning_rate_scheduler": None,      # e.g. KLAdaptiveLR
    "learning_rate_scheduler_kwargs": {},
    "observation_preprocessor": None,     # applied to policy inputs, e.g. RunningStandardScaler
    "observation_preprocessor_kwargs": {},
    "state_preprocessor": None,           # applied to critic inputs (global state / own observation)
    "state_preprocessor_kwargs": {},
    "value_preprocessor": RunningStandardScaler,  # value normalisation of the critic targets (None: off)
    "value_preprocessor_kwargs": {},
    "grad_norm_clip": 10.0,               # per model; 0 disables clipping
    "ratio_clip": 0.2,                    # PPO clipping of the probability ratio
    "value_clip": 0.2,                    # clipping of the predicted value around the stored one
    "clip_predicted_values": True,
    "entropy_loss_scale": 0.01,           # per agent allowed
    "value_loss_scale": 1.0,
    "kl_threshold": 0.0,                  # stop the epochs early past this KL (0: never)
    "time_limit_bootstrap": True,         # bootstrap truncated episodes from their final observation
    "experiment": EXPERIMENT_DEFAULTS,
})


class MultiAgentPPO(MultiAgent):
    """PPO for several agents, one batch per group of agents that share models.

    Each agent needs a ``"policy"`` (a stochastic model) and a ``"value"`` model. One Adam
    optimizer is made per distinct model, so a model shared by many agents (or a critic
    shared by every group) takes one step per minibatch with the gradient of the mean of the
    agents' losses. Steps where an agent is inactive (it left the episode) are left out of
    every loss and statistic.

    Observation and state preprocessors (e.g. :class:`RunningStandardScaler`) are held fixed
    while a rollout is collected and optimised, and take in the rollout's statistics at the
    end of each update: the inputs the update sees are exactly those the stored log-probs and
    values were computed from, so the first epoch starts at probability ratio 1.
    """

    DEFAULT_CONFIG = PPO_DEFAULT_CONFIG
    ROLES = ("policy", "value")
    USES_STATE = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.USES_STATE and self.state_spaces is None:
            raise ValueError(f"{type(self).__name__} needs `state_spaces` (the global state of env.state_spaces)")
        self._check_groups()
        self.schedulers: Dict[int, Any] = {}
        self.observation_preprocessors: Dict[int, Optional[nn.Module]] = {}
        self.state_preprocessors: Dict[int, Optional[nn.Module]] = {}
        self.value_preprocessors: Dict[int, Optional[nn.Module]] = {}
        for group in self.groups:
            policy, value = group.models["policy"], group.models["value"]
            self._make_optimizer(policy, group)
            self._make_optimizer(value, group)
            uid = group.uids[0]
            self._make_preprocessor(self.observation_preprocessors, "observation_preprocessor", policy,
                                    flat_size(self.observation_spaces[uid]))
            self._make_preprocessor(self.state_preprocessors, "state_preprocessor", value, self.critic_input_size(uid))
            self._make_preprocessor(self.value_preprocessors, "value_preprocessor", value, 1)
        self._next_observations: Optional[Mapping[str, torch.Tensor]] = None
        self._next_states: Optional[torch.Tensor] = None
        self._has_action_mask = False

    # ----------------------------------------------------------------------------- construction
    def critic_input_size(self, uid: str) -> int:
        """Number of values the critic of ``uid`` reads before preprocessing (what the state preprocessor sees)."""
        raise NotImplementedError

    def value_model_shape(self, uid: str) -> Tuple[int, int]:
        """``(inputs, outputs)`` the value model of ``uid`` must have."""
        return self.critic_input_size(uid), 1

    def _check_groups(self) -> None:
        for group in self.groups:
            first = group.uids[0]
            for uid in group.uids[1:]:
                for name, spaces in (("observation", self.observation_spaces), ("action", self.action_spaces)):
                    if spaces[uid] != spaces[first]:
                        raise ValueError(f"agents {first!r} and {uid!r} share models but their {name} spaces differ: "
                                         f"{spaces[first]} vs {spaces[uid]}")
            policy, value = group.models["policy"], group.models["value"]
            policy.check_input_size(expected=flat_size(self.observation_spaces[first]),
                                    what=f"models[{first!r}]['policy'] (observation space of {first!r})")
            inputs, outputs = self.value_model_shape(first)
            value.check_input_size(expected=inputs, outputs=outputs, what=f"models[{first!r}]['value']"
                                   f" ({type(self).__name__} critic of {first!r}{self.critic_hint()})")
            if group.memory.memory_size != self.cfg["rollouts"]:
                raise ValueError(f"memories[{first!r}].memory_size is {group.memory.memory_size} but cfg['rollouts'] is "
                                 f"{self.cfg['rollouts']}: an on-policy memory holds exactly one rollout")

    def critic_hint(self) -> str:
        """Extra words for a critic-size error (which option shapes the critic)."""
        return ""

    def _owner_groups(self, model: nn.Module) -> List[AgentGroup]:
        return [group for group in self.groups if any(m is model for m in group.models.values())]

    def _model_value(self, key: str, model: nn.Module) -> Any:
        values = {repr(self.group_value(key, group)): self.group_value(key, group) for group in self._owner_groups(model)}
        if len(values) > 1:
            raise ValueError(f"cfg[{key!r}] differs among agents that share {self.model_name(model)}: {list(values)}")
        return next(iter(values.values()))

    def _make_optimizer(self, model: nn.Module, group: AgentGroup) -> None:
        if id(model) in self.optimizers:
            return
        name = self.model_name(model)
        optimizer = self.make_optimizer(model, self._model_value("learning_rate", model))
        self.checkpoint_modules[name] = model
        self.checkpoint_modules[f"optimizer:{name}"] = optimizer
        scheduler_class = self.cfg["learning_rate_scheduler"]
        if scheduler_class is not None:
            scheduler = scheduler_class(optimizer, **self.cfg["learning_rate_scheduler_kwargs"])
            self.schedulers[id(model)] = scheduler
            self.checkpoint_modules[f"scheduler:{name}"] = scheduler

    def _make_preprocessor(self, table: Dict[int, Optional[nn.Module]], key: str, model: nn.Module, size: int) -> None:
        if id(model) in table:
            return
        preprocessor_class = self.cfg[key]
        table[id(model)] = None
        if preprocessor_class is not None:
            preprocessor = preprocessor_class(size, **self.cfg[f"{key}_kwargs"]).to(self.device)
            table[id(model)] = preprocessor
            self.checkpoint_modules[f"{key}:{self.model_name(model)}"] = preprocessor

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Create the experiment folder and each group's rollout tensors."""
        super().init(trainer_cfg)
        for group in self.groups:
            uid, size, memory = group.uids[0], group.size, group.memory
            action_dtype = torch.long if is_discrete(self.action_spaces[uid]) else torch.float32
            memory.create_tensor("observations", (size, flat_size(self.observation_spaces[uid])))
            if self.USES_STATE:
                memory.create_tensor("states", (flat_size(self.state_spaces[uid]),))
            memory.create_tensor("actions", (size, action_size(self.action_spaces[uid])), dtype=action_dtype)
            for name in ("rewards", "log_prob", "values", "final_values", "returns", "advantages"):
                memory.create_tensor(name, (size, 1))
            for name in ("terminated", "truncated", "active"):
                memory.create_tensor(name, (size, 1), dtype=torch.bool)

    # ----------------------------------------------------------------------------- inputs
    def predict_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                       train: bool = False) -> torch.Tensor:
        """The critic's output ``(batch, group size, 1)``, in its own (normalised) units.

        ``observations`` is ``(batch, group size, obs)`` and ``states`` ``(batch, state)``;
        ``train`` updates the critic-input preprocessor's statistics. This is where the
        algorithms differ: what the critic reads and how its outputs map to the agents.
        """
        raise NotImplementedError

    def _preprocess_states(self, group: AgentGroup, inputs: torch.Tensor, train: bool) -> torch.Tensor:
        preprocessor = self.state_preprocessors[id(group.models["value"])]
        return inputs if preprocessor is None else preprocessor(inputs, train=train)

    def _policy_inputs(self, group: AgentGroup, observations: torch.Tensor, train: bool) -> torch.Tensor:
        preprocessor = self.observation_preprocessors[id(group.models["policy"])]
        flat = observations.flatten(0, 1)
        return flat if preprocessor is None else preprocessor(flat, train=train)

    def _values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                train: bool = False) -> torch.Tensor:
        """Values ``(batch, group, 1)`` in return units (value normalisation undone)."""
        predicted = self.predict_values(group, observations, states, train)
        normaliser = self.value_preprocessors[id(group.models["value"])]
        return predicted if normaliser is None else normaliser(predicted, inverse=True)

    # ----------------------------------------------------------------------------- hooks
    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """Sample actions per group (greedy ``mean_actions`` in eval mode); one forward pass per group."""
        infos = infos or {}
        masks = infos.get("action_mask")
        actions: Dict[str, torch.Tensor] = {}
        for group in self.groups:
            obs = stack_agents(observations, group.uids)
            inputs = {"observations": self._policy_inputs(group, obs, train=False)}
            if masks is not None:
                inputs["action_mask"] = stack_agents(masks, group.uids).flatten(0, 1)
            sampled, log_prob, outputs = group.models["policy"].act(inputs, role="policy")
            chosen = sampled if self.training or self.stochastic_evaluation else outputs["mean_actions"]
            actions.update(unstack_agents(chosen.unflatten(0, obs.shape[:2]), group.uids))
            if self.training:
                group.cache["log_prob"] = log_prob.unflatten(0, obs.shape[:2])
                group.cache["active"] = self.active_mask(infos, group, obs.shape[0], obs.device)
                if masks is not None:
                    group.cache["action_mask"] = inputs["action_mask"].unflatten(0, obs.shape[:2])
        return actions

    def record_transition(self, *, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor],
                          actions: Mapping[str, torch.Tensor], rewards: Mapping[str, torch.Tensor],
                          next_observations: Mapping[str, torch.Tensor], next_states: Optional[torch.Tensor],
                          terminated: Mapping[str, torch.Tensor], truncated: Mapping[str, torch.Tensor],
                          infos: Mapping[str, Any], timestep: int, timesteps: int) -> None:
        """Store one step per group, with values V(s_t) and, for truncated episodes, V(final observation)."""
        if not self.training:
            return
        infos = infos or {}
        bootstrap = self.cfg["time_limit_bootstrap"]
        with torch.no_grad():
            for group in self.groups:
                obs = stack_agents(observations, group.uids)
                self._check_batch(group, obs)
                truncated_group = stack_agents(truncated, group.uids).bool()
                final_values = torch.zeros_like(group.cache["log_prob"])
                if bootstrap and truncated_group.any():
                    final_obs = stack_agents(infos["final_observation"], group.uids)
                    final_values = torch.where(truncated_group,
                                               self._values(group, final_obs, infos.get("final_state")), 0.0)
                samples = {
                    "observations": obs,
                    "actions": stack_agents(actions, group.uids),
                    "rewards": stack_agents(rewards, group.uids).float(),
                    "terminated": stack_agents(terminated, group.uids).bool(),
                    "truncated": truncated_group,
                    "active": group.cache["active"],
                    "log_prob": group.cache["log_prob"],
                    "values": self._values(group, obs, states),
                    "final_values": final_values,
                }
                if self.USES_STATE:
                    samples["states"] = states
                if "action_mask" in group.cache:
                    group.memory.create_tensor("action_mask", group.cache["action_mask"].shape[1:], dtype=torch.bool)
                    samples["action_mask"] = group.cache["action_mask"]
                    self._has_action_mask = True
                group.memory.add_samples(**samples)
        self._next_observations, self._next_states = next_observations, next_states

    def post_interaction(self, timestep: int, timesteps: int) -> None:
        """Update once ``rollouts`` steps are stored (counted by the memory, not by the trainer's
        ``timestep``, so a rollout may span several ``train()`` calls), then write metrics and checkpoints.
        """
        memory = self.groups[0].memory  # every group's memory takes its steps together
        if self.training and memory.filled and memory.memory_index == 0:  # the last step just went in
            self.update(timestep, timesteps)
        super().post_interaction(timestep, timesteps)

    def _check_batch(self, group: AgentGroup, observations: torch.Tensor) -> None:
        if observations.shape[0] != group.memory.num_envs:
            raise ValueError(f"memories[{group.uids[0]!r}] was made for num_envs={group.memory.num_envs} but the "
                             f"environment steps {observations.shape[0]} copies")

    # ----------------------------------------------------------------------------- update
    def compute_advantages(self) -> None:
        """GAE over the rollout of every group; advantages normalised over the group's active steps."""
        with torch.no_grad():
            for group in self.groups:
                memory = group.memory
                next_obs = stack_agents(self._next_observations, group.uids)
                advantages, returns = compute_gae(
                    rewards=memory.get_tensor_by_name("rewards"), values=memory.get_tensor_by_name("values"),
                    terminated=memory.get_tensor_by_name("terminated"), truncated=memory.get_tensor_by_name("truncated"),
                    final_values=memory.get_tensor_by_name("final_values"),
                    last_values=self._values(group, next_obs, self._next_states),
                    discount_factor=self.cfg["discount_factor"], lambda_coefficient=self.cfg["lambda"])
                active = memory.get_tensor_by_name("active")
                mean = advantages[active].mean()
                std = advantages[active].std() if active.sum() > 1 else torch.ones(())
                memory.set_tensor_by_name("advantages", (advantages - mean) / (std + 1e-8))
                memory.set_tensor_by_name("returns", returns)
                normaliser = self.value_preprocessors[id(group.models["value"])]
                if normaliser is not None:
                    normaliser.update(returns[active].unsqueeze(-1))

    def update_preprocessors(self) -> None:
        """Fold the rollout's policy inputs and critic inputs into the preprocessors' running statistics."""
        with torch.no_grad():
            for group in self.groups:
                memory = group.memory
                observations = memory.get_tensor_by_name("observations").flatten(0, 1)
                states = memory.get_tensor_by_name("states").flatten(0, 1) if self.USES_STATE else None
                self._policy_inputs(group, observations, train=True)
                self.predict_values(group, observations, states, train=True)

    def group_losses(self, group: AgentGroup, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Clipped-surrogate policy loss, value loss and entropy loss of ``group`` on the samples ``indexes``."""
        names = ["observations", "actions", "log_prob", "values", "returns", "advantages", "active"]
        names += ["states"] if self.USES_STATE else []
        names += ["action_mask"] if self._has_action_mask else []
        batch = dict(zip(names, group.memory.sample_by_index(names, indexes)))
        policy, value = group.models["policy"], group.models["value"]
        active = batch["active"].flatten(0, 1)

        inputs = {"observations": self._policy_inputs(group, batch["observations"], train=False),
                  "taken_actions": batch["actions"].flatten(0, 1)}
        if self._has_action_mask:
            inputs["action_mask"] = batch["action_mask"].flatten(0, 1)
        _, log_prob, outputs = policy.act(inputs, role="policy")
        log_ratio = log_prob - batch["log_prob"].flatten(0, 1)
        ratio = log_ratio.exp()
        advantages = batch["advantages"].flatten(0, 1)
        clip = self.group_value("ratio_clip", group)
        surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
        policy_loss = -masked_mean(surrogate, active)
        entropy_loss = -self.group_value("entropy_loss_scale", group) * masked_mean(outputs["entropy"], active)

        predicted = self.predict_values(group, batch["observations"], batch.get("states")).flatten(0, 1)
        returns, old_values = batch["returns"].flatten(0, 1), batch["values"].flatten(0, 1)
        normaliser = self.value_preprocessors[id(value)]
        if normaliser is not None:
            returns, old_values = normaliser(returns), normaliser(old_values)
        value_error = (predicted - returns).square()
        if self.cfg["clip_predicted_values"]:
            limit = self.cfg["value_clip"]
            clipped = old_values + (predicted - old_values).clamp(-limit, limit)
            value_error = torch.max(value_error, (clipped - returns).square())
        value_loss = self.group_value("value_loss_scale", group) * masked_mean(value_error, active)

        with torch.no_grad():
            kl = masked_mean(ratio - 1.0 - log_ratio, active)
        return {"policy": policy_loss, "value": value_loss, "entropy": entropy_loss, "kl": kl,
                "entropy_value": masked_mean(outputs["entropy"].detach(), active)}

    def update(self, timestep: int, timesteps: int) -> None:
        """PPO update (Schulman et al., 2017) on the rollout just collected.

        1. advantages and returns by GAE, per group;
        2. for each epoch, for each shuffled minibatch: the clipped-surrogate, value and entropy
           losses, averaged over agents; one optimizer step per distinct model;
        3. early stop past ``kl_threshold``; learning-rate schedule.
        """
        self.compute_advantages()
        models = self.distinct_models()
        for _ in range(self.cfg["learning_epochs"]):
            epoch = []
            for indexes in self.groups[0].memory.minibatch_indexes(self.cfg["mini_batches"]):
                losses = self.mean_over_agents([self.group_losses(group, indexes) for group in self.groups])
                self.optimize(models, losses["policy"] + losses["value"] + losses["entropy"])
                epoch.append({key: value.detach() for key, value in losses.items()})
            means = {key: torch.stack([losses[key] for losses in epoch]).mean().item() for key in epoch[0]}
            if self.cfg["kl_threshold"] and means["kl"] > self.cfg["kl_threshold"]:
                break
        self.update_preprocessors()
        for scheduler in self.schedulers.values():
            scheduler.step(means["kl"]) if isinstance(scheduler, KLAdaptiveLR) else scheduler.step()
        for key, tag in (("policy", "Loss / policy"), ("value", "Loss / value"), ("entropy_value", "Policy / entropy"),
                         ("kl", "Policy / KL")):
            self.track_data(tag, means[key])
        self.track_data("Learning rate", next(iter(self.optimizers.values())).param_groups[0]["lr"])
