"""The PPO machinery shared by MAPPO and IPPO: batched acting per group, rollout storage, update.

The two algorithms differ in what their critics see: :meth:`MultiAgentPPO.predict_values` and
:meth:`MultiAgentPPO.critic_input_rows`, which each overrides.
"""

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch

from marlparts.agents.base import EXPERIMENT_DEFAULTS, MultiAgent
from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.losses import masked_mean_std
from marlparts.agents.common.stacking import stack_groups
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.agents.ppo.advantages import compute_gae, waiting_bootstraps
from marlparts.agents.ppo.losses import ppo_losses
from marlparts.agents.ppo.preprocessing import PPOPreprocessingMixin
from marlparts.memories.base import InexactSampleError
from marlparts.models.base import trial_rows
from marlparts.resources.popart import PopArt
from marlparts.resources.schedulers import KLAdaptiveLR
from marlparts.utils.agent_tensors import stack_agents, unstack_agents
from marlparts.utils.config import Config
from marlparts.utils.distributed import all_reduce_sum, mean_over_ranks
from marlparts.utils.spaces import action_size, compact_storage_dtype, flat_size, is_discrete

PPO_DEFAULT_CONFIG: Config = Config({
    "rollouts": 100,                      # env steps per update (the memory_size of every memory)
    "learning_epochs": 10,                # passes over the rollout per update
    "mini_batches": 2,                    # minibatches per pass (a group's agents stay together)
    "value_min_steps": 20,                # the fewest steps the critic takes per update: below learning_epochs x
                                          # mini_batches (A2C's 1), it goes on alone over the rollout's minibatches
    "discount_factor": 0.99,              # gamma (per agent allowed)
    "gae_lambda": 0.95,                   # GAE lambda (per agent allowed)
    "learning_rate": 7e-4,                # Adam learning rate (per agent allowed)
    "optimizer": torch.optim.Adam,       # the torch.optim class of every trained model
    "optimizer_kwargs": {"fused": True},  # its keyword arguments besides the learning rate (fused: one kernel a step)
    "learning_rate_scheduler": None,      # e.g. KLAdaptiveLR
    "learning_rate_scheduler_kwargs": {},
    "observation_preprocessor": None,     # applied to policy inputs, e.g. RunningStandardScaler
    "observation_preprocessor_kwargs": {},
    "state_preprocessor": None,           # applied to critic inputs (global state / own observation)
    "state_preprocessor_kwargs": {},
    "value_preprocessor": PopArt,         # value normalisation of the critic targets, keeping the critic's
                                          # outputs when its statistics move (None: off)
    "value_preprocessor_kwargs": {},
    "grad_norm_clip": 10.0,               # per model; 0 disables clipping (per agent allowed)
    "ratio_clip": 0.2,                    # PPO clipping of the probability ratio (per agent allowed)
    "value_clip": 0.2,                    # clipping of the predicted value around the stored one (per agent allowed)
    "clip_predicted_values": True,        # (per agent allowed)
    "entropy_loss_scale": 0.01,           # (per agent allowed)
    "final_entropy_loss_scale": None,     # the entropy scale reached linearly at entropy_annealing_timesteps
                                          # (None: constant) (per agent allowed)
    "entropy_annealing_timesteps": None,  # vectorized steps, counted from the run's first step, to reach it
    "value_loss_scale": 1.0,              # (per agent allowed)
    "kl_threshold": 0.0,                  # stop the epochs early past this KL (0: never)
    "time_limit_bootstrap": True,         # bootstrap truncated episodes from their final observation
    "mixed_precision": False,             # CUDA autocast (float16) and a gradient scaler in the update
    "stack_models": True,                 # run agents' own models of one class and shape as one (stacked parameters)
    "experiment": EXPERIMENT_DEFAULTS,
})


def _rows_to_agents(tensor: torch.Tensor, rows: torch.Size) -> torch.Tensor:
    """``(copies * agents, ...)`` rows as ``(copies, agents, ...)`` (a view where the rows allow one)."""
    return tensor.reshape(rows + tensor.shape[1:])


class MultiAgentPPO(PPOPreprocessingMixin, MultiAgent):
    """PPO for several agents, one batch per group of agents that share models.

    Each agent needs a ``"policy"`` (a stochastic model) and a ``"value"`` model. One Adam
    optimizer is made per distinct model, so a model shared by many agents (or a critic
    shared by every group) takes one step per minibatch with the gradient of the mean of the
    agents' losses. Steps where an agent is inactive (it left the episode) are left out of
    every loss and statistic.

    Everything the update compares is in the units the rollout was collected in: the
    observation and state preprocessors and the value normaliser are held fixed while a
    rollout is collected and optimised, and take in the rollout's statistics (active steps
    only) at the end of each update. The first epoch therefore starts at probability ratio 1,
    with the critic's predictions equal to the stored old values.
    """

    DEFAULT_CONFIG = PPO_DEFAULT_CONFIG
    ROLES = ("policy", "value")
    PER_AGENT_KEYS = frozenset({"discount_factor", "gae_lambda", "learning_rate", "grad_norm_clip", "ratio_clip",
                                "value_clip", "clip_predicted_values", "entropy_loss_scale", "value_loss_scale",
                                "time_limit_bootstrap", "final_entropy_loss_scale"})
    USES_STATE = False
    SUPPORTS_TURN_BASED = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if self.USES_STATE and self.state_spaces is None:
            raise ValueError(f"{type(self).__name__} needs `state_spaces` (the global state of env.state_spaces)")
        self._check_groups()
        self.annealing_progress = 0.0  # the fraction of entropy_annealing_timesteps done at the last update
        annealed = [group.uids for group in self.groups if group.cfg["final_entropy_loss_scale"] is not None]
        steps = self.cfg["entropy_annealing_timesteps"]
        if annealed and (not isinstance(steps, int) or steps < 1):
            raise ValueError(f"final_entropy_loss_scale is set (for {annealed}), so cfg['entropy_annealing_timesteps'] "
                             f"must be the number of vectorized steps over which to anneal (a positive int), got "
                             f"{steps!r}")
        shared = [group.uids for group in self.groups if self.shares_policy_and_value(group)]
        for key in ("preprocessor", "preprocessor_kwargs"):
            if shared and self.cfg[f"state_{key}"] != self.cfg[f"observation_{key}"]:
                raise ValueError(f"the agents {shared} have one model as policy and value, which reads one input, "
                                 f"preprocessed once: cfg['state_{key}'] ({self.cfg[f'state_{key}']!r}) must be "
                                 f"cfg['observation_{key}'] ({self.cfg[f'observation_{key}']!r})")
        if self.cfg["stack_models"] and not shared:  # (a stack holds one role's models)
            self.groups = stack_groups(self.groups, self.ROLES, self._model_input_size, self._per_agent_settings,
                                       optimizer_class=self.cfg.get("optimizer") or torch.optim.Adam)
        for group in self.groups:
            policy, value = group.models["policy"], group.models["value"]
            uid = group.uids[0]
            group.trained["policy"] = policy_record = self.add_trained_model(policy, "policy")
            group.trained["value"] = value_record = self.add_trained_model(value, "value")  # the same if shared
            if policy_record.input_preprocessor is None:
                policy_record.input_preprocessor = self._make_preprocessor(
                    "observation_preprocessor", flat_size(self.observation_spaces[uid]), policy_record)
            if value_record is policy_record:
                if value_record.value_normaliser is None:
                    value_record.value_normaliser = self._make_value_normaliser(value_record, also_policy=True)
            elif value_record.input_preprocessor is None:
                value_record.input_preprocessor = self._make_preprocessor("state_preprocessor",
                                                                          self.critic_input_size(uid), value_record)
                value_record.value_normaliser = self._make_value_normaliser(value_record)
        self._next_observations: Optional[Mapping[str, torch.Tensor]] = None
        self._next_states: Optional[torch.Tensor] = None
        self._next_infos: Optional[Mapping[str, Any]] = None
        self._has_action_mask = False
        self.acted_agents: frozenset = frozenset(self.possible_agents)  # the agents that acted in the last rollout

    # ----------------------------------------------------------------------------- construction
    def agent_row_roles(self) -> Tuple[str, ...]:
        """The policy reads one row per agent of its group, the agents of each env copy consecutive."""
        return ("policy",)

    def critic_input_size(self, uid: str) -> int:
        """Number of values the critic of ``uid`` reads before preprocessing (what the state preprocessor sees)."""
        raise NotImplementedError

    def value_model_shape(self, uid: str) -> Tuple[int, int]:
        """``(inputs, outputs)`` the value model of ``uid`` must have."""
        return self.critic_input_size(uid), 1

    def shares_policy_and_value(self, group: AgentGroup) -> bool:
        """Whether the group's policy is also its value model: one network, whose policy call gives the values of
        the same inputs as ``outputs["values"]`` (the update takes both from one forward pass) and whose call for
        role ``"value"`` gives the values alone (algorithms with ``SHARED_ROLES``; :meth:`_check_groups` checks both).
        """
        return group.models["policy"] is group.models["value"]

    def _check_groups(self) -> None:
        for group in self.groups:
            first = group.uids[0]
            policy, value = group.models["policy"], group.models["value"]
            shared = self.shares_policy_and_value(group)
            policy_role, value_role = ("policy", "value") if shared else ("check", "check")  # (one model: each role)
            action_space = self.action_spaces[first]  # one logit per action, or one mean per action column
            policy.check_input_size(expected=flat_size(self.observation_spaces[first]), outputs=flat_size(action_space),
                                    what=f"models[{first!r}]['policy'] (observation space of {first!r} in, "
                                         f"{'one logit per action' if is_discrete(action_space) else 'the mean action'} "
                                         f"of its action space {action_space} out)", role=policy_role)
            inputs, outputs = self.value_model_shape(first)
            value.check_input_size(expected=inputs, outputs=outputs, what=f"models[{first!r}]['value']"
                                   f" ({type(self).__name__} critic of {first!r}{self.critic_hint()})", role=value_role)
            if shared:
                self._check_values_come_with_the_policy(group, outputs)
            if group.memory.memory_size != self.cfg["rollouts"]:
                raise ValueError(f"memories[{first!r}].memory_size is {group.memory.memory_size} but cfg['rollouts'] is "
                                 f"{self.cfg['rollouts']}: an on-policy memory holds exactly one rollout")

    def _check_values_come_with_the_policy(self, group: AgentGroup, outputs: int) -> None:
        """A model that is policy and value returns ``outputs["values"]``, ``(rows, outputs)``, from its policy call."""
        first, model = group.uids[0], group.models["policy"]
        rows = trial_rows(model, 2)
        with torch.no_grad():
            _, extras = model.compute({"observations": torch.zeros(rows, model.num_observations, device=model.device)},
                                      role="policy")
        values = extras.get("values")
        if not isinstance(values, torch.Tensor) or tuple(values.shape) != (rows, outputs):
            found = "none" if values is None else (tuple(values.shape) if isinstance(values, torch.Tensor)
                                                   else type(values).__name__)
            raise ValueError(f"models[{first!r}]: one {type(model).__name__} is the 'policy' and the 'value', so its "
                             f"compute(inputs, role='policy') must also return the values of the same inputs as "
                             f"outputs['values'], one row of {outputs} per input row ({rows}, {outputs}); got {found}")

    def critic_hint(self) -> str:
        """Extra words for a critic-size error (which option shapes the critic)."""
        return ""

    def _model_input_size(self, uid: str, role: str) -> int:
        """The number of inputs the model of ``role`` of ``uid`` reads."""
        return flat_size(self.observation_spaces[uid]) if role == "policy" else self.value_model_shape(uid)[0]

    def _per_agent_settings(self, group: AgentGroup) -> Dict[str, Any]:
        """The group's values of the per-agent settings (agents whose models are stacked share them)."""
        return {key: group.cfg[key] for key in sorted(self.PER_AGENT_KEYS)}

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Create the experiment folder and each group's rollout tensors."""
        super().init(trainer_cfg)
        for group in self.groups:
            uid, size, memory = group.uids[0], group.size, group.memory
            action_dtype = torch.long if is_discrete(self.action_spaces[uid]) else torch.float32
            # images of bytes stay bytes in the rollout (read back as floats): a quarter of the memory
            memory.create_tensor("observations", (size, flat_size(self.observation_spaces[uid])),
                                 storage_dtype=compact_storage_dtype(self.observation_spaces[uid]))
            if self.USES_STATE:
                memory.create_tensor("states", (flat_size(self.state_spaces[uid]),))
            memory.create_tensor("actions", (size, action_size(self.action_spaces[uid])), dtype=action_dtype)
            for name in ("rewards", "log_prob", "values", "final_values", "returns", "advantages", "value_targets",
                         "old_values"):
                memory.create_tensor(name, (size, 1))
            for name in ("terminated", "truncated", "active"):
                memory.create_tensor(name, (size, 1), dtype=torch.bool)

    # ----------------------------------------------------------------------------- inputs
    def predict_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                       inputs: Optional[Mapping[str, torch.Tensor]] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """The critic's output ``(batch, group size, 1)``, in its own (normalised) units, and the critic's outputs.

        ``observations`` is ``(batch, group size, obs)`` and ``states`` ``(batch, state)``; ``inputs`` are further
        model inputs, one row per row the critic reads (a recurrent critic's ``"hidden"``). This is where the
        algorithms differ: what the critic reads and how its outputs map to the agents.
        """
        raise NotImplementedError

    def critic(self, group: AgentGroup, rows: torch.Tensor,
               inputs: Optional[Mapping[str, torch.Tensor]] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """The group's critic on ``rows`` ``(rows, features)`` (with ``inputs`` beside them): its value and outputs."""
        inputs = {**(inputs or {}), "observations": rows}
        if self.shares_policy_and_value(group):  # a policy's act would sample: the value head alone
            return group.models["value"].compute(inputs, role="value")
        value, _, outputs = group.models["value"].act(inputs, role="value")
        return value, outputs

    def critic_input_rows(self, record: TrainedModel) -> Union[torch.Tensor, List[torch.Tensor]]:
        """The stored critic inputs of the rollout that the state preprocessor of ``record`` takes in:
        one row per input the critic read (inactive agents' rows left out); for stacked critics, one
        such tensor per member.
        """
        raise NotImplementedError

    def _values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                inputs: Optional[Mapping[str, torch.Tensor]] = None) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """Values ``(batch, group, 1)`` in return units (value normalisation undone), and the critic's outputs."""
        predicted, outputs = self.predict_values(group, observations, states, inputs)
        normaliser = self.value_normaliser(group)
        return (predicted if normaliser is None else normaliser(predicted, inverse=True)), outputs

    def next_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor],
                    infos: Optional[Mapping[str, Any]]) -> torch.Tensor:
        """Values in return units of the observations that follow the last collected step (to bootstrap the
        rollout's end).
        """
        return self._values(group, observations, states)[0]

    def final_values(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor]) -> torch.Tensor:
        """Values in return units of the final observations of episodes that ended at the step just collected."""
        return self._values(group, observations, states)[0]

    # ----------------------------------------------------------------------------- hooks
    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """Sample actions per group (greedy ``mean_actions`` in eval mode); one forward pass per group.

        Where the policy returns ``outputs["sampled_actions"]`` (a sample it changed before
        returning it, e.g. clipped into the action space), that sample is what is stored: it is
        what the log-probability belongs to.
        """
        infos = infos or {}
        masks = infos.get("action_mask")
        actions: Dict[str, torch.Tensor] = {}
        for group in self.groups:
            obs = stack_agents(observations, group.uids)
            inputs = {"observations": self._policy_inputs(group, obs)}
            if masks is not None:
                inputs["action_mask"] = stack_agents(masks, group.uids).flatten(0, 1)
            sampled, log_prob, outputs = self.policy_act(group, inputs, infos)
            rows = obs.shape[:2]  # (copies, agents of the group)
            chosen = sampled if self.training or self.stochastic_evaluation else outputs["mean_actions"]
            actions.update(unstack_agents(_rows_to_agents(chosen, rows), group.uids))
            if self.training:
                group.cache["actions"] = _rows_to_agents(outputs.get("sampled_actions", sampled), rows)
                group.cache["log_prob"] = _rows_to_agents(log_prob, rows)
                group.cache["active"] = self.active_mask(infos, group, obs.shape[0], obs.device)
                if masks is not None:
                    group.cache["action_mask"] = _rows_to_agents(inputs["action_mask"], rows)
        return actions

    def policy_act(self, group: AgentGroup, inputs: Dict[str, torch.Tensor],
                   infos: Mapping[str, Any]) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, Any]]:
        """The group's policy on one step's ``inputs``: ``(actions, log_prob, outputs)``."""
        return group.models["policy"].act(inputs, role="policy")

    def record_transition(self, *, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor],
                          actions: Mapping[str, torch.Tensor], rewards: Mapping[str, torch.Tensor],
                          next_observations: Mapping[str, torch.Tensor], next_states: Optional[torch.Tensor],
                          terminated: Mapping[str, torch.Tensor], truncated: Mapping[str, torch.Tensor],
                          infos: Mapping[str, Any], timestep: int, timesteps: int) -> None:
        """Store one step per group and, for truncated episodes, V(final observation). The critic values the
        stored steps when the update begins (:meth:`compute_advantages`): its parameters and input statistics
        do not change within a rollout, so the values are the same, at one forward pass instead of one per step.
        """
        if not self.training:
            return
        infos = infos or {}
        self._next_observations, self._next_states, self._next_infos = next_observations, next_states, infos
        with torch.no_grad():
            for group in self.groups:
                obs = stack_agents(observations, group.uids)
                self._check_batch(group, obs)
                samples = self.step_samples(group, obs, states, rewards=rewards, terminated=terminated,
                                            truncated=truncated, infos=infos)
                if "action_mask" in group.cache:
                    group.memory.create_tensor("action_mask", group.cache["action_mask"].shape[1:], dtype=torch.bool)
                    samples["action_mask"] = group.cache["action_mask"]
                    self._has_action_mask = True
                try:
                    group.memory.add_samples(**samples)
                except InexactSampleError as error:
                    if error.name != "observations":
                        raise
                    uid = group.uids[error.entry[0]]
                    raise ValueError(f"observation of agent {uid!r} in env copy {error.env_copy} holds {error.value}, "
                                     f"outside its observation space {self.observation_spaces[uid]}: the rollout "
                                     f"keeps such observations as bytes (whole numbers 0-255), so the env must give "
                                     f"them as its space says (or declare another dtype)") from error

    def step_samples(self, group: AgentGroup, observations: torch.Tensor, states: Optional[torch.Tensor], *,
                     rewards: Mapping[str, torch.Tensor], terminated: Mapping[str, torch.Tensor],
                     truncated: Mapping[str, torch.Tensor], infos: Mapping[str, Any]) -> Dict[str, torch.Tensor]:
        """What the group stores of the step just taken (``observations`` ``(copies, group, obs)``).

        A truncated agent's value is bootstrapped from its final observation; the critic reads it beside the
        observations, at that moment, of the group's agents that go on (the env's ``final_observation`` is
        only the ended agents'), which a critic over all the agents of a copy needs.
        """
        truncated_group = stack_agents(truncated, group.uids).bool()
        final_values = torch.zeros_like(group.cache["log_prob"])
        if group.cfg["time_limit_bootstrap"] and truncated_group.any() \
                and self.can_bootstrap_time_limits(infos, self.USES_STATE):
            final_obs = stack_agents(infos["final_observation"], group.uids)
            ended = truncated_group | stack_agents(terminated, group.uids).bool()
            if not ended.all():  # (record_transition has just set the observations that follow this step)
                final_obs = torch.where(ended, final_obs, stack_agents(self._next_observations, group.uids))
            final_values = torch.where(truncated_group,
                                       self.final_values(group, final_obs, infos.get("final_state")), 0.0)
        samples = {
            "observations": observations,
            "actions": group.cache["actions"],
            "rewards": stack_agents(rewards, group.uids).float(),
            "terminated": stack_agents(terminated, group.uids).bool(),
            "truncated": truncated_group,
            "active": group.cache["active"],
            "log_prob": group.cache["log_prob"],
            "final_values": final_values,
        }
        if self.USES_STATE:
            samples["states"] = states
        return samples

    def cut_episodes(self) -> None:
        """Mark the last stored step of a rollout in progress as truncated, bootstrapped from the
        observation that followed it: the episodes are cut there (the env will be reset), so the
        advantage chain must neither run into the next episode nor treat the cut as terminal.
        A partial rollout loaded from a checkpoint (whose next observation is unknown) is dropped.
        """
        memory = self.groups[0].memory
        if memory.memory_index == 0 or self._next_observations is None:
            if memory.memory_index and self._next_observations is None:  # a rollout loaded from a checkpoint:
                for group in self.groups:                                 # it cannot be bootstrapped
                    group.memory.reset()
            return
        step = memory.newest_step
        with torch.no_grad():
            for group in self.groups:
                memory = group.memory
                terminated = memory.get_tensor_by_name("terminated")[step]
                truncated = memory.get_tensor_by_name("truncated")[step]
                cut = ~(terminated | truncated)
                next_obs = stack_agents(self._next_observations, group.uids)
                values = self.next_values(group, next_obs, self._next_states, self._next_infos)
                final_values = memory.get_tensor_by_name("final_values")
                final_values[step] = torch.where(cut, values, final_values[step])
                truncated |= cut

    def update_due(self) -> bool:
        """Once ``rollouts`` steps are stored (counted by the memory, not by the trainer's ``timestep``,
        so a rollout may span several ``train()`` calls).
        """
        memory = self.groups[0].memory  # every group's memory takes its steps together
        return memory.filled and memory.memory_index == 0  # the last step just went in

    def _check_batch(self, group: AgentGroup, observations: torch.Tensor) -> None:
        if observations.shape[0] != group.memory.num_envs:
            raise ValueError(f"memories[{group.uids[0]!r}] was made for num_envs={group.memory.num_envs} but the "
                             f"environment steps {observations.shape[0]} copies")

    # ----------------------------------------------------------------------------- update
    def compute_advantages(self) -> None:
        """GAE over each agent's own active steps (what reaches an agent while it waits for its turn goes to
        its last action); advantages normalised over the group's active steps. An action after which the
        agent was still waiting when the rollout (or a time limit) ended is marked inactive: its value
        would rest on an untrained waiting observation (:func:`~marlparts.agents.ppo.advantages.waiting_bootstraps`).

        Also fixes, in the critic's (normalised) units of collection time, the targets and the
        old values the value loss compares predictions with.
        """
        with torch.no_grad():
            for group in self.groups:
                memory = group.memory
                next_obs = stack_agents(self._next_observations, group.uids)
                values = self.rollout_values(group)
                memory.set_tensor_by_name("values", values)
                active = memory.get_tensor_by_name("active")
                next_active = self._next_infos.get("active") if self._next_infos else None
                unusable = None
                if self.turn_based and next_active is not None:  # an action followed only by waiting
                    unusable = waiting_bootstraps(
                        active=active, terminated=memory.get_tensor_by_name("terminated"),
                        truncated=memory.get_tensor_by_name("truncated"),
                        next_active=stack_agents(next_active, group.uids).bool())
                advantages, returns = compute_gae(active=active, unusable=unusable,
                    rewards=memory.get_tensor_by_name("rewards"), values=values,
                    terminated=memory.get_tensor_by_name("terminated"), truncated=memory.get_tensor_by_name("truncated"),
                    final_values=memory.get_tensor_by_name("final_values"),
                    last_values=self.next_values(group, next_obs, self._next_states, self._next_infos),
                    discount_factor=group.cfg["discount_factor"], gae_lambda=group.cfg["gae_lambda"])
                if unusable is not None:
                    active &= ~unusable  # left out of the losses and of the statistics below
                # statistics per set of models (agents with models of their own each have their own); a set with
                # no active step keeps mean 0 and std 1 (nothing of it enters a loss)
                per_set = (group.model_sets, -1)
                advantages, set_active = advantages.unflatten(2, per_set), active.unflatten(2, per_set)
                mean, std = masked_mean_std(advantages, set_active, dims=(0, 1, 3))
                memory.set_tensor_by_name("advantages", ((advantages - mean) / (std + 1e-8)).flatten(2, 3))
                memory.set_tensor_by_name("returns", returns)
                normaliser = self.value_normaliser(group)
                memory.set_tensor_by_name("value_targets", returns if normaliser is None else normaliser(returns))
                memory.set_tensor_by_name("old_values", values if normaliser is None else normaliser(values, clip=False))

    def rollout_values(self, group: AgentGroup) -> torch.Tensor:
        """``V(s_t)`` in return units at every stored step of the rollout, ``(rollouts, num_envs, group, 1)``,
        by a feed-forward critic in one pass.
        """
        memory = group.memory
        observations = memory.get_tensor_by_name("observations")
        states = memory.get_tensor_by_name("states").flatten(0, 1) if self.USES_STATE else None
        return self._values(group, observations.flatten(0, 1), states)[0].unflatten(0, observations.shape[:2])

    def plan_steps(self) -> None:
        """Which models take steps in this update (after :meth:`compute_advantages`): those of the agents with an
        active sample in the stored rollout on any ``torchrun`` rank (:attr:`acted_agents`; every rank decides
        alike). A model, or a member of a stack, whose agents all sat out the rollout (they had left, or it was
        never their turn) has empty losses: it takes no step, its optimizer state stays as it was
        (:meth:`~marlparts.agents.common.trained_model.TrainedModel.plan_steps`).
        """
        acted = torch.cat([group.memory.get_tensor_by_name("active").flatten(0, 1).any(0).reshape(-1)
                           for group in self.groups])
        acted = all_reduce_sum(acted.float()).gt(0).tolist()  # one all-reduce, one read
        uids = [uid for group in self.groups for uid in group.uids]
        self.acted_agents = frozenset(uid for uid, any_active in zip(uids, acted) if any_active)
        for record in self.trained:
            record.plan_steps(self.acted_agents)

    def minibatch_losses(self, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The losses of the minibatch ``indexes`` (the same samples of every group), averaged over the agents:
        ``"policy"``, ``"value"`` and ``"entropy"`` (minimised as their sum), and ``"kl"`` and ``"entropy_value"``
        to report. Each group's losses are its own (:meth:`group_losses`); an algorithm whose value is the
        team's (:class:`~marlparts.agents.VDAC`) overrides this.
        """
        return self.mean_over_agents([self.group_losses(group, indexes) for group in self.groups])

    def group_losses(self, group: AgentGroup, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Clipped-surrogate policy loss, value loss and entropy loss of ``group`` on the samples ``indexes``."""
        batch = self.sample_minibatch(group, indexes)
        log_prob, outputs = self.policy_log_prob(group, batch)
        if self.shares_policy_and_value(group):  # one forward pass gave both
            predicted = outputs["values"]
        else:
            predicted = self.predict_values(group, batch["observations"], batch.get("states"))[0].flatten(0, 1)
        return self.batch_losses(group, batch, log_prob=log_prob, entropy=outputs["entropy"], predicted=predicted)

    def batch_losses(self, group: AgentGroup, batch: Mapping[str, torch.Tensor], *, log_prob: torch.Tensor,
                     entropy: torch.Tensor, predicted: torch.Tensor) -> Dict[str, torch.Tensor]:
        """:func:`~marlparts.agents.ppo.losses.ppo_losses` of ``group`` on the stored ``batch``
        (:meth:`sample_minibatch`), given the policy's ``log_prob`` and ``entropy`` and the critic's ``predicted``
        values, one row per sample.
        """
        return ppo_losses(log_prob=log_prob, old_log_prob=batch["log_prob"].flatten(0, 1),
                          advantages=batch["advantages"].flatten(0, 1), entropy=entropy, predicted=predicted,
                          targets=batch["value_targets"].flatten(0, 1), old_values=batch["old_values"].flatten(0, 1),
                          active=batch["active"].flatten(0, 1), cfg=self.loss_settings(group), model_sets=group.model_sets)

    def sample_minibatch(self, group: AgentGroup, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The stored samples ``indexes`` of ``group`` that the losses read, ``(batch, group, ...)`` each."""
        names = ["observations", "actions", "log_prob", "old_values", "value_targets", "advantages", "active"]
        names += ["states"] if self.USES_STATE else []
        names += ["action_mask"] if self._has_action_mask else []
        return dict(zip(names, group.memory.sample_by_index(names, indexes)))

    def policy_log_prob(self, group: AgentGroup, batch: Mapping[str, torch.Tensor]
                        ) -> Tuple[torch.Tensor, Dict[str, Any]]:
        """The group's policy on the stored ``batch``: the log-probability of each stored action, one row per
        sample, and the policy's outputs (``"entropy"`` among them).
        """
        inputs = {"observations": self._policy_inputs(group, batch["observations"]),
                  "taken_actions": batch["actions"].flatten(0, 1)}
        if self._has_action_mask:
            inputs["action_mask"] = batch["action_mask"].flatten(0, 1)
        _, log_prob, outputs = group.models["policy"].act(inputs, role="policy")
        return log_prob, outputs

    def loss_settings(self, group: AgentGroup) -> Mapping[str, Any]:
        """The settings :func:`~marlparts.agents.ppo.losses.ppo_losses` reads for ``group``: its config, with the
        entropy scale of this point of the run where ``final_entropy_loss_scale`` anneals it (linearly, from
        ``entropy_loss_scale`` at the run's first step to the final scale at ``entropy_annealing_timesteps``,
        counted by the algorithm's own step counter, which checkpoints keep: a resumed run goes on where it was).
        """
        final = group.cfg["final_entropy_loss_scale"]
        if final is None:
            return group.cfg
        start = group.cfg["entropy_loss_scale"]
        return {**group.cfg, "entropy_loss_scale": start + (final - start) * self.annealing_progress}

    def progress_of(self, timestep: int) -> float:
        """The fraction of ``entropy_annealing_timesteps`` done at ``timestep`` (0 without annealing)."""
        steps = self.cfg["entropy_annealing_timesteps"]
        return min((timestep + 1) / steps, 1.0) if steps else 0.0

    def minibatch_indexes(self) -> List[torch.Tensor]:
        """The indexes of one epoch's minibatches (:meth:`group_losses` reads them), shuffled."""
        return self.groups[0].memory.minibatch_indexes(self.cfg["mini_batches"])

    def update(self, timestep: int, timesteps: int) -> None:
        """PPO update (Schulman et al., 2017) on the rollout just collected.

        1. advantages and returns by GAE, per group;
        2. for each epoch, for each shuffled minibatch: the clipped-surrogate, value and entropy
           losses, averaged over agents; one optimizer step per distinct model;
        3. early stop past ``kl_threshold``;
        4. the critics alone, until they have taken ``value_min_steps`` steps (:meth:`train_critics_alone`);
        5. the preprocessors and value normalisers take in the rollout's statistics; learning-rate schedule.
        """
        self.annealing_progress = self.progress_of(timestep)
        self.compute_advantages()
        self.plan_steps()
        epochs: List[Dict[str, float]] = []
        steps = 0
        for _ in range(self.cfg["learning_epochs"]):
            epoch = []
            for indexes in self.minibatch_indexes():
                with self.autocast():
                    losses = self.minibatch_losses(indexes)
                self.optimize(self.trained, losses["policy"] + losses["value"] + losses["entropy"])
                epoch.append({key: value.detach() for key, value in losses.items()})
            steps += len(epoch)
            epochs.append({key: torch.stack([losses[key] for losses in epoch]).float().mean().item() for key in epoch[0]})
            epochs[-1]["kl"] = mean_over_ranks(epochs[-1]["kl"])  # every rank stops, and schedules, on the same KL
            if self.cfg["kl_threshold"] and epochs[-1]["kl"] > self.cfg["kl_threshold"]:
                break
        self.train_critics_alone(steps)
        self.update_preprocessors()
        means = {key: sum(epoch[key] for epoch in epochs) / len(epochs) for key in epochs[0]}
        self.finish_update(epochs[-1]["kl"], {"Loss / policy": means["policy"], "Loss / value": means["value"],
                                              "Policy / entropy": means["entropy_value"], "Policy / KL": means["kl"]})

    def critic_records(self) -> List[TrainedModel]:
        """The records of the models that only value (critics, and mixers where an algorithm has them): what the
        critic's steps alone move. A model that is both policy and critic is not among them: a step of its own
        would move the policy too.
        """
        return [record for record in self.trained if record.role != "policy"]

    def top_up_minibatches(self, steps_taken: int) -> List[torch.Tensor]:
        """The minibatches of the critic's steps alone after it took ``steps_taken`` in this update: as many as
        ``value_min_steps`` asks beyond them, from shuffled passes over the rollout (none where it took enough).
        """
        missing = self.cfg["value_min_steps"] - steps_taken
        minibatches: List[torch.Tensor] = []
        while len(minibatches) < missing:
            minibatches += self.minibatch_indexes()
        return minibatches[:max(missing, 0)]

    def critic_minibatches(self) -> List[torch.Tensor]:
        """The minibatches of a critic trained in a loop of its own (HAPPO, COMA): ``learning_epochs`` shuffled
        passes over the rollout, topped up to ``value_min_steps`` (:meth:`top_up_minibatches`).
        """
        passes = [indexes for _ in range(self.cfg["learning_epochs"]) for indexes in self.minibatch_indexes()]
        return passes + self.top_up_minibatches(len(passes))

    def train_critics_alone(self, steps_taken: int) -> None:
        """Steps of the critics alone on the value loss, until they have taken ``value_min_steps`` in this update
        (:meth:`top_up_minibatches`); the policies stay as the joint steps left them.

        Why: with one gradient step per rollout (A2C's schedule) the critic lags its moving targets, and a policy
        step on the advantages of a lagging critic follows the critic's errors. On simple_spread, IPPO with
        ``learning_epochs=1, mini_batches=1`` and PopArt fell below random play with a critic of one step per
        rollout (greedy -70 and -40 on seeds 0 and 2; random play about -26) and of four (-54 and -39); with
        ten, four seeds of five learned and one ended at -24.0 with a near-deterministic policy; with twenty,
        the default, all five learned (-18 to -22; ``benchmarks/a2c_regime.py``). 20 is the number of steps
        of the default schedule (10 epochs of 2 minibatches): it changes nothing where the epochs take that
        many, unless ``kl_threshold`` cuts them short (the critics then still take 20).
        """
        records = self.critic_records()
        minibatches = self.top_up_minibatches(steps_taken) if records else []
        for indexes in minibatches:
            with self.autocast():
                loss = self.critic_loss_alone(indexes)
            self.optimize(records, loss)

    def critic_loss_alone(self, indexes: torch.Tensor) -> torch.Tensor:
        """The value loss of the minibatch ``indexes`` with the critics alone run (no policy pass: a policy with
        batch statistics or dropout is left as the joint steps left it), averaged over the agents as in
        :meth:`minibatch_losses`. An algorithm whose value loss needs more than each group's critic overrides it.
        """
        return self.mean_over_agents([self.value_losses(group, indexes) for group in self.groups])["value"]

    def value_losses(self, group: AgentGroup, indexes: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The losses of ``group`` on the samples ``indexes`` with the critic alone run: the policy's
        log-probabilities stand at the stored ones and its entropy at 0 (constant policy losses, no policy pass).
        """
        batch = self.sample_minibatch(group, indexes)
        predicted, _ = self.predict_values(group, batch["observations"], batch.get("states"))
        stored = batch["log_prob"].flatten(0, 1)
        return self.batch_losses(group, batch, log_prob=stored, entropy=torch.zeros_like(stored),
                                 predicted=predicted.flatten(0, 1))

    def finish_update(self, kl: float, metrics: Dict[str, float]) -> None:
        """The end of every update: step each learning-rate schedule (a :class:`KLAdaptiveLR` on ``kl``), then
        report ``metrics`` with each model's learning rate.
        """
        for record in self.trained:
            if record.scheduler is not None:
                record.scheduler.step(kl) if isinstance(record.scheduler, KLAdaptiveLR) else record.scheduler.step()
        for record in self.trained:
            metrics.update({f"Learning rate / {name}": rate for name, rate in record.learning_rates().items()})
        self.report_update(metrics)
