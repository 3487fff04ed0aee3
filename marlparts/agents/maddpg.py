"""MADDPG (Lowe et al., 2017): decentralised deterministic actors, centralised Q critics trained from replay.

Each critic reads every agent's observation (or the global state) and every agent's action,
in ``possible_agents`` order, and outputs one Q-value per agent that uses it. Discrete actions
go through straight-through Gumbel-softmax so the critic's gradient reaches the actor.
"""

import copy
from typing import Any, Dict, List, Mapping, Optional, Tuple

import gymnasium
import torch
import torch.nn.functional as F
from torch import nn

from marlparts.agents.base import EXPERIMENT_DEFAULTS, MultiAgent
from marlparts.agents.groups import AgentGroup
from marlparts.agents.losses import masked_mean
from marlparts.agents.trained_model import TrainedModel
from marlparts.resources.noises import GaussianNoise, Noise, linear_scale
from marlparts.utils.agent_tensors import stack_agents, unstack_agents
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MADDPG_DEFAULT_CONFIG: Config = Config({
    "batch_size": 1024,                # samples (steps of one env copy) per gradient step
    "gradient_steps": 1,               # gradient steps per update
    "update_interval": 1,              # vectorized env steps between updates
    "learning_starts": 100,            # vectorized env steps before the first update
    "random_timesteps": 0,             # vectorized env steps with uniformly random actions
    "discount_factor": 0.95,           # (per agent allowed)
    "polyak": 0.01,                    # soft update factor of the target networks
    "actor_learning_rate": 1e-3,       # (per agent allowed)
    "critic_learning_rate": 1e-3,      # (per agent allowed)
    "grad_norm_clip": 0.5,             # per model; 0 disables clipping (per agent allowed)
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
    "observation_preprocessor": None,  # applied to every agent's observations, e.g. RunningStandardScaler
    "observation_preprocessor_kwargs": {},
    "time_limit_bootstrap": True,      # truncated transitions bootstrap from the final observation (per agent allowed)
    "mixed_precision": False,          # CUDA autocast (float16) and a gradient scaler in the update
    "experiment": EXPERIMENT_DEFAULTS,
})


class MADDPG(MultiAgent):
    """MADDPG with parameter sharing by model identity.

    Each agent needs a ``"policy"`` (a deterministic model: actions for ``Box`` spaces, logits
    for ``Discrete`` ones) and a ``"critic"`` whose input is every agent's observation (or the
    state) followed by every agent's action (one-hot for discrete agents), all in
    ``possible_agents`` order, and whose output has one Q-value per agent that uses it (in
    ``possible_agents`` order among those agents). Target networks are deep copies made here.

    Subclasses change the update through :meth:`target_values`, :meth:`critic_loss`,
    :meth:`target_actions` and :meth:`update_actor_now` (see :class:`MATD3`).
    """

    DEFAULT_CONFIG = MADDPG_DEFAULT_CONFIG
    ROLES = ("policy", "critic")
    CRITIC_ROLES = ("critic",)
    PER_AGENT_KEYS = frozenset({"discount_factor", "actor_learning_rate", "critic_learning_rate", "grad_norm_clip",
                                "gumbel_temperature", "logits_regularization", "time_limit_bootstrap"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        cfg = self.cfg
        self.recorded_steps = 0  # vectorized steps stored; drives learning_starts, update_interval and exploration
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
        self._group_order = [uid for group in self.groups for uid in group.uids]
        self._action_bounds: Dict[str, tuple] = {}
        self._joint_columns: Dict[tuple, Optional[torch.Tensor]] = {}
        self.critic_columns: Dict[Tuple[int, str], torch.Tensor] = {}  # (group index, role) -> Q-value columns
        self._evaluation_noises: Dict[int, Optional[Noise]] = {}
        noise_class = cfg["exploration"]["noise"]
        for index, group in enumerate(self.groups):
            self._check_group(group)
            for role in self.ROLES:
                group.trained[role] = self._prepare_model(group.models[role], role)
            for role in self.CRITIC_ROLES:
                self.critic_columns[(index, role)] = self._owner_positions(group, role)
            if noise_class is not None:
                group.noise = noise_class(**cfg["exploration"]["noise_kwargs"], device=self.device)
        self.gradient_step = 0

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
        model = group.models[role]
        owners = [uid for uid in self.possible_agents if self.models[uid][role] is model]
        return torch.as_tensor([owners.index(uid) for uid in group.uids], device=self.device)

    def _check_group(self, group: AgentGroup) -> None:
        first = group.uids[0]
        for uid in group.uids[1:]:
            if self.observation_spaces[uid] != self.observation_spaces[first] or \
                    self.action_spaces[uid] != self.action_spaces[first]:
                raise ValueError(f"agents {first!r} and {uid!r} share models but their spaces differ")
        group.models["policy"].check_input_size(expected=flat_size(self.observation_spaces[first]),
                                                outputs=self.action_widths[first],
                                                what=f"models[{first!r}]['policy'] (observation in, action out)")
        for role in self.CRITIC_ROLES:
            critic = group.models[role]
            owners = sum(self.models[uid][role] is critic for uid in self.possible_agents)
            critic.check_input_size(expected=self.critic_input_size, outputs=owners,
                                    what=f"models[{first!r}][{role!r}] (every agent's {self.cfg['critic_input']} and "
                                         f"action in, one Q-value per agent using it out)")
        memory = group.memory
        if memory.memory_size * memory.num_envs < self.cfg["batch_size"]:
            raise ValueError(f"memories[{first!r}] holds {memory.memory_size} x {memory.num_envs} samples, fewer than "
                             f"cfg['batch_size'] = {self.cfg['batch_size']}")

    def _prepare_model(self, model: nn.Module, role: str) -> TrainedModel:
        """The record of ``model``: optimizer, target copy and, for policies, the observation preprocessor."""
        key = "actor_learning_rate" if role == "policy" else "critic_learning_rate"
        record = self.add_trained_model(model, role, learning_rate_key=key)
        if record.target is None:
            record.target = copy.deepcopy(model)
            record.target.requires_grad_(False)
            preprocessor_class = self.cfg["observation_preprocessor"]
            if role == "policy" and preprocessor_class is not None:
                record.input_preprocessor = preprocessor_class(model.num_observations,
                                                               **self.cfg["observation_preprocessor_kwargs"]).to(self.device)
        return record

    def observation_preprocessor(self, group: AgentGroup) -> Optional[nn.Module]:
        """The preprocessor of the group's observations (None if not configured)."""
        return group.trained["policy"].input_preprocessor

    def checkpoint_parts(self) -> Dict[str, Any]:
        """The records' parts and each group's exploration noise."""
        parts = super().checkpoint_parts()
        for group in self.groups:
            if group.noise is not None:
                parts[f"noise[{'+'.join(group.uids)}]"] = group.noise
        return parts

    def counters(self) -> Dict[str, Any]:
        """Adds the stored vectorized steps (they drive ``learning_starts``, ``update_interval``, random
        actions and the noise schedule) and the gradient steps (MATD3's delay phase).
        """
        return {**super().counters(), "recorded_steps": self.recorded_steps, "gradient_step": self.gradient_step}

    def load_counters(self, counters: Mapping[str, Any]) -> None:
        """Restore what :meth:`counters` returned."""
        super().load_counters(counters)
        self.recorded_steps = int(counters["recorded_steps"])
        self.gradient_step = int(counters["gradient_step"])

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Create the experiment folder and each group's replay tensors."""
        super().init(trainer_cfg)
        for group in self.groups:
            uid, size, memory = group.uids[0], group.size, group.memory
            obs_size = flat_size(self.observation_spaces[uid])
            action_dtype = torch.long if self.discrete[uid] else torch.float32
            action_columns = 1 if self.discrete[uid] else self.action_widths[uid]
            memory.create_tensor("observations", (size, obs_size))
            memory.create_tensor("next_observations", (size, obs_size))
            memory.create_tensor("actions", (size, action_columns), dtype=action_dtype)
            memory.create_tensor("rewards", (size, 1))
            for name in ("terminated", "active"):
                memory.create_tensor(name, (size, 1), dtype=torch.bool)
            if self.cfg["critic_input"] == "state":
                state_size = flat_size(self.state_spaces[uid])
                memory.create_tensor("states", (state_size,))
                memory.create_tensor("next_states", (state_size,))

    # ----------------------------------------------------------------------------- acting
    def _observations(self, group: AgentGroup, observations: torch.Tensor) -> torch.Tensor:
        """``(batch, group, obs)`` observations, standardised if configured."""
        preprocessor = self.observation_preprocessor(group)
        return observations if preprocessor is None else preprocessor(observations)

    def _policy_outputs(self, model: nn.Module, observations: torch.Tensor) -> torch.Tensor:
        """Policy outputs ``(batch, group, width)`` for ``(batch, group, obs)`` observations."""
        output, _, _ = model.act({"observations": observations.flatten(0, 1)}, role="policy")
        return output.unflatten(0, observations.shape[:2])

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
        for group in self.groups:
            uid = group.uids[0]
            obs = stack_agents(observations, group.uids)
            if self.training:
                group.cache["active"] = active = self.active_mask(infos, group, obs.shape[0], obs.device)
                preprocessor = self.observation_preprocessor(group)
                if preprocessor is not None:  # statistics of the agents that act, not of absent agents' zeros
                    preprocessor.update(obs[active.squeeze(-1)])
            obs = self._observations(group, obs)
            output = self._policy_outputs(group.models["policy"], obs)
            random = self.training and self.recorded_steps < self.cfg["random_timesteps"]
            if self.discrete[uid]:
                if random:
                    output = torch.zeros_like(output)
                chosen = (torch.distributions.Categorical(logits=output, validate_args=False).sample().unsqueeze(-1)
                          if explore or random else output.argmax(-1, keepdim=True))
            else:
                low, high = self._bounds(uid, output)
                if random:
                    chosen = low + torch.rand_like(output) * (high - low)
                else:
                    noise = group.noise if self.training else self._evaluation_noise(group)
                    chosen = output + scale * noise.sample(output.shape) if explore and noise is not None else output
                    chosen = torch.max(torch.min(chosen, high), low)
            actions.update(unstack_agents(chosen, group.uids))
        self.track_data("Exploration / noise scale", scale)
        return actions

    def record_transition(self, *, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor],
                          actions: Mapping[str, torch.Tensor], rewards: Mapping[str, torch.Tensor],
                          next_observations: Mapping[str, torch.Tensor], next_states: Optional[torch.Tensor],
                          terminated: Mapping[str, torch.Tensor], truncated: Mapping[str, torch.Tensor],
                          infos: Mapping[str, Any], timestep: int, timesteps: int) -> None:
        """Store one step per group; where an agent's episode ended, its next observation is the final one.

        Where a copy's episode ended, every agent's next observation is the final one, so the
        zeros of an agent that had left already are stored, not its first observation of the next
        episode (which would enter the other agents' joint critic input).
        """
        if not self.training:
            return
        infos = infos or {}
        final = infos.get("final_observation")
        episode_end = infos.get("episode_end")
        copy_ended = episode_end.reshape(-1, 1, 1).bool() if episode_end is not None else None
        for group in self.groups:
            next_obs = stack_agents(next_observations, group.uids)
            done = stack_agents(terminated, group.uids).bool()
            truncated_group = stack_agents(truncated, group.uids).bool()
            if final is not None:
                ended = done | truncated_group if copy_ended is None else done | truncated_group | copy_ended
                next_obs = torch.where(ended, stack_agents(final, group.uids), next_obs)
            if not group.cfg["time_limit_bootstrap"]:
                done = done | truncated_group
            samples = {"observations": stack_agents(observations, group.uids), "next_observations": next_obs,
                       "actions": stack_agents(actions, group.uids), "rewards": stack_agents(rewards, group.uids).float(),
                       "terminated": done, "active": group.cache["active"]}
            if self.cfg["critic_input"] == "state":
                samples["states"] = states
                samples["next_states"] = (torch.where(copy_ended[:, 0], infos["final_state"], next_states)
                                          if copy_ended is not None else next_states)
            group.memory.add_samples(**samples)
            if group.noise is not None and copy_ended is not None:
                group.noise.reset(copy_ended[:, :, 0].expand(-1, group.size))
        self.recorded_steps += 1

    def _evaluation_noise(self, group: AgentGroup) -> Optional[Noise]:
        """A noise of the group's kind for stochastic evaluation, apart from the training one (whose state it keeps)."""
        index = self.groups.index(group)
        if index not in self._evaluation_noises:
            self._evaluation_noises[index] = None if group.noise is None else copy.deepcopy(group.noise)
            if group.noise is not None:
                self._evaluation_noises[index].reset()
        return self._evaluation_noises[index]

    def cut_episodes(self) -> None:
        """The stored next observations already bootstrap a cut step; the noise processes restart."""
        for group in self.groups:
            if group.noise is not None:
                group.noise.reset()

    def post_interaction(self, timestep: int, timesteps: int) -> None:
        """Update every ``update_interval`` stored steps once ``learning_starts`` steps are stored
        (counted by the agent, not by the trainer's ``timestep``, so several ``train()`` calls continue the count;
        and held in the memory, so a run resumed from a checkpoint without its replay memory refills it first).
        """
        steps, memory = self.recorded_steps, self.groups[0].memory
        stored = len(memory) // memory.num_envs  # a run resumed without its replay refills learning_starts steps
        if self.training and min(steps, stored) >= self.cfg["learning_starts"] and steps % self.cfg["update_interval"] == 0:
            self.update(timestep, timesteps)
        super().post_interaction(timestep, timesteps)

    # ----------------------------------------------------------------------------- update
    def sample_batch(self) -> List[Dict[str, torch.Tensor]]:
        """One replay batch per group, at the same (step, env copy) indexes for every group."""
        indexes = self.groups[0].memory.sample_indexes(self.cfg["batch_size"])
        names = ["observations", "next_observations", "actions", "rewards", "terminated", "active"]
        if self.cfg["critic_input"] == "state":
            names += ["states", "next_states"]
        batches = []
        for group in self.groups:
            batch = dict(zip(names, group.memory.sample_by_index(names, indexes)))
            batch["observations"] = self._observations(group, batch["observations"])
            batch["next_observations"] = self._observations(group, batch["next_observations"])
            batches.append(batch)
        return batches

    def joint(self, parts: List[torch.Tensor]) -> torch.Tensor:
        """Concatenate per-group ``(batch, group, width)`` tensors into ``(batch, total)`` in agent order."""
        joined = torch.cat([part.flatten(1) for part in parts], dim=1)
        widths = tuple(part.shape[-1] for part in parts)
        if widths not in self._joint_columns:
            self._joint_columns[widths] = self._agent_order_columns(widths)
        columns = self._joint_columns[widths]
        return joined if columns is None else joined[:, columns.to(joined.device)]

    def _agent_order_columns(self, widths: tuple) -> Optional[torch.Tensor]:
        """Column permutation from group order to agent order (None when they agree)."""
        if self._group_order == self.possible_agents:
            return None
        agent_widths = [width for group, width in zip(self.groups, widths) for _ in group.uids]
        starts = [sum(agent_widths[:i]) for i in range(len(agent_widths))]
        position = {uid: i for i, uid in enumerate(self._group_order)}
        return torch.cat([torch.arange(starts[position[uid]], starts[position[uid]] + agent_widths[position[uid]])
                          for uid in self.possible_agents])

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

    def target_actions(self, group: AgentGroup, next_observations: torch.Tensor) -> torch.Tensor:
        """Actions of the target policy for ``(batch, group, obs)`` next observations, as critic inputs."""
        outputs = self._policy_outputs(group.trained["policy"].target, next_observations)
        return self.differentiable_actions(group, outputs)

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

    def target_values(self, batches: List[Dict[str, torch.Tensor]]) -> List[torch.Tensor]:
        """TD targets ``y = r + γ (1 − terminated) Q'(x', a'_1..a'_N)`` per group, ``(batch, group)``."""
        with torch.no_grad():
            next_actions = self.joint([self.target_actions(g, b["next_observations"])
                                       for g, b in zip(self.groups, batches)])
            next_x = self.critic_observations(batches, "next_observations")
            targets = []
            for group, batch in zip(self.groups, batches):
                q_next = self.next_q_values(group, next_x, next_actions)
                not_done = (~batch["terminated"]).squeeze(-1).to(q_next.dtype)
                targets.append(batch["rewards"].squeeze(-1) + group.cfg["discount_factor"] * not_done * q_next)
        return targets

    def next_q_values(self, group: AgentGroup, next_x: torch.Tensor, next_actions: torch.Tensor) -> torch.Tensor:
        """``Q'(x', a')`` of the group's target critic, ``(batch, group)``."""
        index = self.groups.index(group)
        return self.q_values(group.trained["critic"].target, next_x, next_actions, self.critic_columns[(index, "critic")])

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

    def actor_loss(self, batches: List[Dict[str, torch.Tensor]]) -> torch.Tensor:
        """Mean over agents of ``−Q_i(x, a_1..μ_i(o_i)..a_N)``: each agent's own action from its policy,
        the others' from the replay batch.
        """
        x = self.critic_observations(batches, "observations")
        actions = self.joint([self.action_inputs(g, b["actions"]) for g, b in zip(self.groups, batches)])
        loss = 0.0
        for index, (group, batch) in enumerate(zip(self.groups, batches)):
            outputs = self._policy_outputs(group.models["policy"], batch["observations"])
            own = self.differentiable_actions(group, outputs)                       # (B, G, width)
            batch_size, size, width = own.shape
            columns = torch.stack([torch.arange(self.action_offsets[uid], self.action_offsets[uid] + width)
                                   for uid in group.uids]).to(own.device)           # (G, width)
            rows = torch.arange(size, device=own.device).unsqueeze(-1).expand(size, width)
            replaced = actions.unsqueeze(1).expand(batch_size, size, actions.shape[-1]).clone()
            replaced[:, rows, columns] = own                                        # agent g's action in row g
            q = self.q_values(group.models["critic"], x.unsqueeze(1).expand(-1, size, -1).flatten(0, 1),
                              replaced.flatten(0, 1), self.critic_columns[(index, "critic")])
            own_q = q.unflatten(0, (batch_size, size)).diagonal(dim1=1, dim2=2)     # Q_g with agent g's action
            agent_loss = -masked_mean(own_q, batch["active"].squeeze(-1))
            if self.discrete[group.uids[0]]:
                agent_loss = agent_loss + group.cfg["logits_regularization"] * outputs.square().mean()
            loss = loss + group.size / len(self.possible_agents) * agent_loss
        return loss

    def update_actor_now(self) -> bool:
        """Whether this gradient step also updates the actors and the targets (always, in MADDPG)."""
        return True

    def update_targets(self) -> None:
        """Soft-update every target network towards its model."""
        for record in self.trained:
            record.target.update_parameters(record.model, polyak=self.cfg["polyak"])

    def update(self, timestep: int, timesteps: int) -> None:
        """``gradient_steps`` times: sample, fit the critics to the TD targets, improve the actors, move the targets."""
        critics = [record for record in self.trained if record.role in self.CRITIC_ROLES]
        policies = [record for record in self.trained if record.role == "policy"]
        critic_losses, actor_losses = [], []
        for _ in range(self.cfg["gradient_steps"]):
            self.gradient_step += 1
            batches = self.sample_batch()
            with self.autocast():
                critic_loss = self.critic_loss(batches, self.target_values(batches))
            self.optimize(critics, critic_loss)
            critic_losses.append(critic_loss.detach())
            if self.update_actor_now():
                for critic in critics:  # the actor loss needs gradients through the critics, not for them
                    critic.model.requires_grad_(False)
                with self.autocast():
                    actor_loss = self.actor_loss(batches)
                self.optimize(policies, actor_loss)
                for critic in critics:
                    critic.model.requires_grad_(True)
                self.update_targets()
                actor_losses.append(actor_loss.detach())
        metrics = {"Loss / critic": torch.stack(critic_losses).mean().item()}
        if actor_losses:
            metrics["Loss / actor"] = torch.stack(actor_losses).mean().item()
        metrics.update({f"Learning rate / {record.name}": record.learning_rate() for record in self.trained})
        self.report_update(metrics)
