"""The off-policy machinery shared by MADDPG, MATD3, MASAC, QMIX and VDN: replay per group, gating by
stored steps, target models with polyak updates, batch sampling across groups, checkpoints.

A subclass registers its models with :meth:`OffPolicyMultiAgent.add_off_policy_model`, chooses
actions in :meth:`~OffPolicyMultiAgent.act`, and writes one gradient step in
:meth:`~OffPolicyMultiAgent.gradient_update`; everything else is here.
"""

import copy
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from marlparts.agents.base import EXPERIMENT_DEFAULTS, MultiAgent
from marlparts.agents.common.groups import AgentGroup, agent_order
from marlparts.agents.common.trained_model import TrainedModel
from marlparts.resources.noises import Noise
from marlparts.utils.agent_tensors import stack_agents
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

OFF_POLICY_DEFAULT_CONFIG: Config = Config({
    "batch_size": 1024,                # samples (steps of one env copy) per gradient step
    "gradient_steps": 1,               # gradient steps per update
    "update_interval": 1,              # vectorized env steps between updates
    "learning_starts": 100,            # vectorized env steps stored before the first update
    "random_timesteps": 0,             # vectorized env steps with uniformly random actions
    "discount_factor": 0.95,           # (per agent allowed)
    "polyak": 0.01,                    # soft update factor of the target networks (1.0: copy)
    "target_update_interval": 1,       # gradient steps between target updates (e.g. 200 with polyak 1.0: hard updates)
    "optimizer": torch.optim.Adam,       # the torch.optim class of every trained model
    "optimizer_kwargs": {"fused": True},  # its keyword arguments besides the learning rate (fused: one kernel a step)
    "grad_norm_clip": 0.5,             # per model; 0 disables clipping (per agent allowed)
    "observation_preprocessor": None,  # applied to every agent's observations, e.g. RunningStandardScaler
    "observation_preprocessor_kwargs": {},
    "time_limit_bootstrap": True,      # truncated transitions bootstrap from the final observation (per agent allowed)
    "n_step": 1,                       # rewards summed before bootstrapping (n-step returns), where the algorithm supports it
    "mixed_precision": False,          # CUDA autocast (float16) and a gradient scaler in the update
    "experiment": EXPERIMENT_DEFAULTS,
})


class OffPolicyMultiAgent(MultiAgent):
    """Base of the off-policy algorithms.

    Each group stores its transitions in its replay memory (observations, next observations,
    actions, rewards, terminated, active, and the global state where :meth:`uses_state`, and
    action masks where the env has them); :meth:`sample_batch` draws the same (step, env copy)
    indexes from every group, so the agents' samples line up for centralised critics and mixers.
    Updates start once ``learning_starts`` vectorized steps are stored (and held in the memory)
    and then run every ``update_interval`` stored steps, ``gradient_steps`` each; random
    actions and exploration schedules count stored steps too, so they continue across
    ``train()`` calls and checkpoints. Every trained model has a target copy moved by polyak
    averaging (:meth:`update_targets`).

    What a subclass overrides: ``DEFAULT_CONFIG``, ``ROLES``, ``OBSERVATION_ROLE`` (the role that
    reads each agent's observation and owns its preprocessor), ``PER_AGENT_KEYS``;
    :meth:`__init__` (registering models with :meth:`add_off_policy_model`), :meth:`act`,
    :meth:`gradient_update`, and where needed :meth:`uses_state`, :meth:`action_columns` and
    :meth:`replay_names`.
    """

    DEFAULT_CONFIG = OFF_POLICY_DEFAULT_CONFIG
    OBSERVATION_ROLE = "policy"
    SUPPORTS_N_STEP: bool = False  # whether gradient_update reads the n-step tensors of sample_batch
    PER_AGENT_KEYS = frozenset({"discount_factor", "grad_norm_clip", "time_limit_bootstrap"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recorded_steps = 0  # vectorized steps stored: drives learning_starts, update_interval and exploration
        self.gradient_step = 0
        self._evaluation_noises: Dict[int, Optional[Noise]] = {}
        self._has_action_mask = False
        self._joint_columns: Dict[tuple, Optional[torch.Tensor]] = {}
        n_step = self.cfg["n_step"]  # a whole number >= 1: checked with the other ranges
        if n_step > 1 and not self.SUPPORTS_N_STEP:
            raise ValueError(f"{type(self).__name__} learns from one-step targets: cfg['n_step'] must be 1, got {n_step} "
                             "(n-step returns are supported by QMIX and VDN)")
        first = self.groups[0]
        for group in self.groups:
            memory = group.memory
            if (memory.memory_size, memory.num_envs) != (first.memory.memory_size, first.memory.num_envs):
                raise ValueError(f"memories[{group.uids[0]!r}] holds {memory.memory_size} steps of {memory.num_envs} copies "
                                 f"but memories[{first.uids[0]!r}] {first.memory.memory_size} of {first.memory.num_envs}: "
                                 "batches are drawn at the same (step, copy) of every group, so the memories must match")
            if memory.memory_size * memory.num_envs < self.cfg["batch_size"]:
                raise ValueError(f"memories[{group.uids[0]!r}] holds {memory.memory_size} x {memory.num_envs} samples, "
                                 f"fewer than cfg['batch_size'] = {self.cfg['batch_size']}")

    # ----------------------------------------------------------------------------- construction
    def add_off_policy_model(self, model: nn.Module, role: str, *, learning_rate_key: str = "learning_rate",
                             target: bool = True) -> TrainedModel:
        """The record of ``model`` (made on first call): optimizer, target copy (unless ``target`` is False)
        and, for ``OBSERVATION_ROLE``, the observation preprocessor.
        """
        record = self.add_trained_model(model, role, learning_rate_key=learning_rate_key)
        if target and record.target is None:
            record.target = copy.deepcopy(model)
            record.target.requires_grad_(False)
        preprocessor_class = self.cfg["observation_preprocessor"]
        if role == self.OBSERVATION_ROLE and preprocessor_class is not None and record.input_preprocessor is None:
            record.input_preprocessor = preprocessor_class(self.observation_size(model),
                                                           **self.cfg["observation_preprocessor_kwargs"]).to(self.device)
        return record

    def observation_size(self, model: nn.Module) -> int:
        """How many of ``model``'s inputs are the agent's observation (what the observation preprocessor takes)."""
        return model.num_observations

    def uses_state(self) -> bool:
        """Whether transitions store the global state (and the next one)."""
        return False

    def action_columns(self, uid: str) -> int:
        """Columns an action of ``uid`` takes in the replay (1 for discrete actions)."""
        space = self.action_spaces[uid]
        return 1 if hasattr(space, "n") else flat_size(space)

    def action_dtype(self, uid: str) -> torch.dtype:
        """How actions of ``uid`` are stored: ``long`` for discrete ones, ``float32`` otherwise."""
        return torch.long if hasattr(self.action_spaces[uid], "n") else torch.float32

    def observation_preprocessor(self, group: AgentGroup) -> Optional[nn.Module]:
        """The preprocessor of the group's observations (None if not configured)."""
        return group.trained[self.OBSERVATION_ROLE].input_preprocessor

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Create the experiment folder and each group's replay tensors."""
        super().init(trainer_cfg)
        for group in self.groups:
            uid, size, memory = group.uids[0], group.size, group.memory
            obs_size = flat_size(self.observation_spaces[uid])
            memory.create_tensor("observations", (size, obs_size))
            memory.create_tensor("next_observations", (size, obs_size))
            memory.create_tensor("actions", (size, self.action_columns(uid)), dtype=self.action_dtype(uid))
            memory.create_tensor("rewards", (size, 1))
            for name in ("terminated", "active", "next_active"):
                memory.create_tensor(name, (size, 1), dtype=torch.bool)
            if self.uses_state():
                state_size = flat_size(self.state_spaces[uid])
                memory.create_tensor("states", (state_size,))
                memory.create_tensor("next_states", (state_size,))
            if self.cfg["n_step"] > 1:
                memory.create_tensor("episode_continues", (1,), dtype=torch.bool)

    # ----------------------------------------------------------------------------- checkpoints
    def checkpoint_parts(self) -> Dict[str, Any]:
        """The records' parts and each group's exploration noise."""
        parts = super().checkpoint_parts()
        for group in self.groups:
            if group.noise is not None:
                parts[f"noise[{'+'.join(group.uids)}]"] = group.noise
        return parts

    def _apply_state(self, state: Mapping[str, Any], sources: Mapping[str, str], *, parts_only: bool = False) -> None:
        """Load a checkpoint; a replay memory saved without ``n_step`` (no ``episode_continues``) gives
        one-step sums for its steps, since nothing says where their episodes went on.
        """
        super()._apply_state(state, sources, parts_only=parts_only)
        if self.cfg["n_step"] > 1:
            for group in self.groups:
                if group.memory.tensors:
                    group.memory.create_tensor("episode_continues", (1,), dtype=torch.bool)

    def counters(self) -> Dict[str, Any]:
        """Adds the stored vectorized steps (they drive ``learning_starts``, ``update_interval``, random
        actions and exploration schedules) and the gradient steps (delayed updates).
        """
        return {**super().counters(), "recorded_steps": self.recorded_steps, "gradient_step": self.gradient_step}

    def load_counters(self, counters: Mapping[str, Any]) -> None:
        """Restore what :meth:`counters` returned."""
        super().load_counters(counters)
        self.recorded_steps = int(counters["recorded_steps"])
        self.gradient_step = int(counters["gradient_step"])

    # ----------------------------------------------------------------------------- acting
    def observe(self, group: AgentGroup, observations: Mapping[str, torch.Tensor], infos: Mapping[str, Any]) -> torch.Tensor:
        """The group's ``(batch, group, obs)`` observations, standardised if configured. In training it also
        keeps which agents act (for storage) and folds the acting agents' observations (never an absent
        agent's zeros) into the preprocessor's statistics.
        """
        obs = stack_agents(observations, group.uids)
        if self.training:
            group.cache["active"] = active = self.active_mask(infos, group, obs.shape[0], obs.device)
            if infos and infos.get("action_mask") is not None:
                group.cache["action_mask"] = stack_agents(infos["action_mask"], group.uids).bool()
            preprocessor = self.observation_preprocessor(group)
            if preprocessor is not None:
                preprocessor.update(obs[active.squeeze(-1)])
        return self._observations(group, obs)

    def _observations(self, group: AgentGroup, observations: torch.Tensor) -> torch.Tensor:
        """``(batch, group, obs)`` observations, standardised if configured."""
        preprocessor = self.observation_preprocessor(group)
        return observations if preprocessor is None else preprocessor(observations)

    def exploring_randomly(self) -> bool:
        """Whether this training step takes uniformly random actions (the first ``random_timesteps`` stored steps)."""
        return self.training and self.recorded_steps < self.cfg["random_timesteps"]

    def set_mode(self, mode: str) -> None:
        """Switch mode; an evaluation starts new episodes, so its noise processes start afresh (a sampled
        evaluation repeats itself, and leaves the training noise as it was).
        """
        super().set_mode(mode)
        if mode == "eval":
            self._evaluation_noises.clear()

    def _evaluation_noise(self, group: AgentGroup, infos: Mapping[str, Any]) -> Optional[Noise]:
        """A noise of the group's kind for stochastic evaluation, apart from the training one (whose state it
        keeps), restarted in the copies whose episode ended at the last step (``infos["episode_end"]``), as the
        training noise is.
        """
        index = self.groups.index(group)
        if index not in self._evaluation_noises:
            self._evaluation_noises[index] = None if group.noise is None else copy.deepcopy(group.noise)
            if group.noise is not None:
                self._evaluation_noises[index].reset()
        noise = self._evaluation_noises[index]
        episode_end = (infos or {}).get("episode_end")
        if noise is not None and episode_end is not None:
            state = getattr(noise, "state", None)
            if state is not None and state.shape[0] != episode_end.numel():
                noise.reset()  # other env copies than the process ran on: it starts afresh on these
            else:
                noise.reset(episode_end.reshape(-1, 1).bool().expand(-1, group.size))
        return noise

    # ----------------------------------------------------------------------------- storage
    def record_transition(self, *, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor],
                          actions: Mapping[str, torch.Tensor], rewards: Mapping[str, torch.Tensor],
                          next_observations: Mapping[str, torch.Tensor], next_states: Optional[torch.Tensor],
                          terminated: Mapping[str, torch.Tensor], truncated: Mapping[str, torch.Tensor],
                          infos: Mapping[str, Any], timestep: int, timesteps: int) -> None:
        """Store one step per group; where an agent's episode ended, its next observation is the final one.

        Where a copy's episode ended, every agent's next observation is the final one, so the
        zeros of an agent that had left already are stored, not its first observation of the next
        episode (which would enter the other agents' joint inputs). ``terminated`` is stored as
        "no bootstrap" (truncations count too when ``time_limit_bootstrap`` is off).
        """
        if not self.training:
            return
        infos = infos or {}
        final = infos.get("final_observation")
        episode_end = infos.get("episode_end")
        copy_ended = episode_end.reshape(-1, 1, 1).bool() if episode_end is not None else None
        masks = infos.get("action_mask")
        next_active = infos.get("active")
        group_samples = []
        episode_goes_on = None  # n-step sums: whether the copy's next stored step goes on from this one
        for group in self.groups:
            next_obs = stack_agents(next_observations, group.uids)
            done = stack_agents(terminated, group.uids).bool()
            truncated_group = stack_agents(truncated, group.uids).bool()
            ended = done | truncated_group if copy_ended is None else done | truncated_group | copy_ended
            if final is not None:
                next_obs = torch.where(ended, stack_agents(final, group.uids), next_obs)
            if not group.cfg["time_limit_bootstrap"] or (
                    truncated_group.any() and not self.can_bootstrap_time_limits(infos, self.uses_state())):
                done = done | truncated_group
            # whether the agent has a next step to value: present at the next step in the same episode, or cut
            # off by a time limit (bootstrapped from its final observation); not after it terminated or had left
            present = torch.ones_like(done) if next_active is None else stack_agents(next_active, group.uids).bool()
            continues = (present & ~ended) | (ended & ~done & group.cache["active"])
            samples = {"observations": stack_agents(observations, group.uids), "next_observations": next_obs,
                       "actions": stack_agents(actions, group.uids), "rewards": stack_agents(rewards, group.uids).float(),
                       "terminated": done, "active": group.cache["active"], "next_active": continues}
            if self.uses_state():
                samples["states"] = states
                final_state = infos.get("final_state")
                samples["next_states"] = (torch.where(copy_ended[:, 0], final_state, next_states)
                                          if copy_ended is not None and final_state is not None else next_states)
            if masks is not None:
                samples.update(self._mask_samples(group, masks, infos.get("final_action_mask"), ended))
            samples.update(self.extra_samples(group))
            group_samples.append(samples)
            if self.cfg["n_step"] > 1:  # a sum goes on only while no agent's episode ends (an agent cut alone by a
                goes_on = ~ended.any(1)[:, 0]  # time limit is valued at its final observation by its step's own target)
                episode_goes_on = goes_on if episode_goes_on is None else episode_goes_on & goes_on
            if group.noise is not None and copy_ended is not None:
                group.noise.reset(copy_ended[:, :, 0].expand(-1, group.size))
        for group, samples in zip(self.groups, group_samples):
            if episode_goes_on is not None:  # one flag for every group
                samples["episode_continues"] = episode_goes_on.unsqueeze(-1)
            group.memory.add_samples(**samples)
        self.recorded_steps += 1

    def extra_samples(self, group: AgentGroup) -> Dict[str, torch.Tensor]:
        """Further tensors ``(batch, group, ...)`` the group stores with each transition (created in :meth:`init`
        and named in :meth:`replay_names` by the subclass that adds them); none here.
        """
        return {}

    def _mask_samples(self, group: AgentGroup, masks: Mapping[str, torch.Tensor],
                      final_masks: Optional[Mapping[str, torch.Tensor]], ended: torch.Tensor) -> Dict[str, Any]:
        """The action masks at the observation and at the next one: where an agent's episode ended, the
        mask of its final observation (a time limit bootstraps from it), not the next episode's.
        """
        next_mask = stack_agents(masks, group.uids).bool()
        final_mask = torch.ones_like(next_mask) if final_masks is None else stack_agents(final_masks, group.uids).bool()
        if "action_mask" not in group.memory.tensors:
            group.memory.create_tensor("action_mask", next_mask.shape[1:], dtype=torch.bool)
            group.memory.create_tensor("next_action_mask", next_mask.shape[1:], dtype=torch.bool)
            self._has_action_mask = True
        return {"action_mask": group.cache["action_mask"], "next_action_mask": torch.where(ended, final_mask, next_mask)}

    def cut_episodes(self) -> None:
        """The stored next observations already bootstrap a cut step; n-step sums stop at it (the copy's next
        stored step begins a new episode); the noise processes restart.
        """
        for group in self.groups:
            if group.noise is not None:
                group.noise.reset()
            memory = group.memory
            if self.cfg["n_step"] > 1 and len(memory):
                memory.get_tensor_by_name("episode_continues")[memory.newest_step] = False

    def update_due(self) -> bool:
        """Every ``update_interval`` stored steps once ``learning_starts`` steps are stored (counted by the
        agent, not by the trainer's ``timestep``, so several ``train()`` calls continue the count; and held in
        the memory, so a run resumed from a checkpoint without its replay memory refills it first).
        """
        steps, memory = self.recorded_steps, self.groups[0].memory
        stored = len(memory) // memory.num_envs  # a run resumed without its replay refills learning_starts steps
        return min(steps, stored) >= self.cfg["learning_starts"] and steps % self.cfg["update_interval"] == 0

    # ----------------------------------------------------------------------------- update
    def replay_names(self) -> List[str]:
        """The replay tensors :meth:`sample_batch` reads."""
        names = ["observations", "next_observations", "actions", "rewards", "terminated", "active", "next_active"]
        names += ["states", "next_states"] if self.uses_state() else []
        names += ["action_mask", "next_action_mask"] if self._has_action_mask else []
        return names

    def sample_batch(self) -> List[Dict[str, torch.Tensor]]:
        """One replay batch per group, at the same (step, env copy) indexes for every group; observations
        standardised with the preprocessor's current statistics.
        """
        indexes = self.groups[0].memory.sample_indexes(self.cfg["batch_size"])
        names = self.replay_names()
        window = self._n_step_window(indexes) if self.cfg["n_step"] > 1 else None
        batches = []
        for group in self.groups:
            batch = dict(zip(names, group.memory.sample_by_index(names, indexes)))
            if window is not None:
                batch.update(self._n_step_samples(group, *window))
            batch["observations"] = self._observations(group, batch["observations"])
            batch["next_observations"] = self._observations(group, batch["next_observations"])
            batches.append(batch)
        return batches

    def _n_step_window(self, indexes: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next ``n_step - 1`` steps of each sampled step's env copy, the same for every group (whose
        memories match and hold the same ``episode_continues``): their flat indexes ``(batch, n)``, which of
        them count ``(batch, n)`` (stored, and no agent's episode ended before them; the first always counts),
        and the flat index of the last that counts ``(batch,)``.
        """
        memory = self.groups[0].memory
        ahead, stored = memory.indexes_ahead(indexes, self.cfg["n_step"])
        continues = memory.sample_by_index(["episode_continues"], ahead.flatten())[0].view(ahead.shape)
        valid = stored.clone()
        valid[:, 1:] &= torch.cumprod(continues[:, :-1], dim=1).bool()
        last = ahead.gather(1, (valid.sum(1, keepdim=True) - 1)).squeeze(1)
        return ahead, valid, last

    def _n_step_samples(self, group: AgentGroup, ahead: torch.Tensor, valid: torch.Tensor,
                        last: torch.Tensor) -> Dict[str, torch.Tensor]:
        """The group's entries of the window of :meth:`_n_step_window`: ``n_step_valid`` ``(batch, n)``,
        ``n_step_rewards``, ``n_step_active`` and ``n_step_terminated`` ``(batch, n, group, 1)`` (zero and
        False where not valid), and the ``next_*`` entries of the last valid step (where the target bootstraps).
        """
        memory = group.memory
        names = ["rewards", "active", "terminated"]
        per_step = memory.sample_by_index(names, ahead.flatten())
        samples = {}
        for name, values in zip(names, per_step):
            values = values.unflatten(0, ahead.shape)
            keep = valid.view(*valid.shape, *([1] * (values.dim() - 2)))
            samples[f"n_step_{name}"] = torch.where(keep, values, torch.zeros((), dtype=values.dtype, device=values.device))
        later = [name for name in self.replay_names() if name.startswith("next_")]
        samples.update(zip(later, memory.sample_by_index(later, last)))
        samples["n_step_valid"] = valid
        return samples

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
        return agent_order(self.groups, self.possible_agents, widths)

    def update_targets(self, records: Optional[Sequence[TrainedModel]] = None) -> None:
        """Move the target networks (of ``records``, or of every trained model) towards their models by
        ``polyak``, at every ``target_update_interval``-th gradient step.
        """
        if self.gradient_step % self.cfg["target_update_interval"]:
            return
        for record in self.trained if records is None else records:
            if record.target is not None:
                record.target.update_parameters(record.model, polyak=self.cfg["polyak"])

    def gradient_update(self, batches: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """One gradient step on ``batches`` (one per group); returns its losses ``{tag: tensor}``."""
        raise NotImplementedError

    def update(self, timestep: int, timesteps: int) -> None:
        """``gradient_steps`` gradient steps on freshly sampled batches; logs the means of their losses."""
        steps: List[Dict[str, torch.Tensor]] = []
        for _ in range(self.cfg["gradient_steps"]):
            self.gradient_step += 1
            steps.append({tag: value.detach() for tag, value in self.gradient_update(self.sample_batch()).items()})
        tags = dict.fromkeys(tag for step in steps for tag in step)
        metrics = {tag: torch.stack([step[tag] for step in steps if tag in step]).float().mean().item() for tag in tags}
        for record in self.trained:
            metrics.update({f"Learning rate / {name}": rate for name, rate in record.learning_rates().items()})
        self.report_update(metrics)
