"""Mean-field Q-learning (Yang et al., 2018): each agent's Q-function reads its own observation and the mean action
of the other agents of its team, so its cost does not grow with the number of agents.
"""

from typing import Any, Dict, List, Mapping, Optional

import gymnasium
import torch
import torch.nn.functional as F

from marlparts.agents.common.groups import AgentGroup
from marlparts.agents.common.losses import masked_mean
from marlparts.agents.common.mean_field import others_mean_actions
from marlparts.agents.off_policy.base import OFF_POLICY_DEFAULT_CONFIG, OffPolicyMultiAgent
from marlparts.resources.noises import linear_scale
from marlparts.utils.agent_tensors import stack_agents, unstack_agents
from marlparts.utils.config import Config
from marlparts.utils.spaces import flat_size

MFQ_DEFAULT_CONFIG: Config = OFF_POLICY_DEFAULT_CONFIG.copy()
MFQ_DEFAULT_CONFIG.update({
    "learning_rate": 1e-4,             # (per agent allowed)
    "temperature": 0.1,                # Boltzmann policy π(a) ∝ exp(Q(o, ā, a) / temperature), acting and targets
    "exploration": {                   # uniformly random actions with probability epsilon while training
        "initial_epsilon": 1.0,        # at the first stored step ...
        "final_epsilon": 0.05,         # ... and after `timesteps` stored vectorized steps (linear decay)
        "timesteps": 5_000,
    },
})


class MFQ(OffPolicyMultiAgent):
    """MF-Q for discrete actions: ``Q(o_i, ā_i, ·)``, one utility per own action.

    ``ā_i`` is the mean one-hot action of the other agents of the algorithm that were active at the previous
    step (an agent that died or left is out of the mean; zeros at an episode's first step): the agents choose
    at once, so the mean of the step before stands for the one of this step, as in the paper's experiments.
    Each agent needs a ``"q"`` model reading its observation followed by ``ā_i`` (``actions`` values); one
    instance for several agents shares it. Every agent of the algorithm must have the same number of actions.

    Acting is Boltzmann over legal actions, ``π(a) ∝ exp(Q(o, ā, a) / temperature)``, with uniformly random
    actions at rate epsilon while training; greedy in evaluation. One gradient step:

    1. ``y = r + γ v(o')`` for an agent with a next step (0 after it terminated or left), where
       ``v(o') = Σ_a π(a|o', ā') Q'(o', ā', a)``: the Boltzmann policy of the online utilities weighs the
       target utilities, and ``ā'`` is the mean of the actions taken at the step;
    2. minimise ``(Q(o, ā, a) − y)²`` over the active agents; polyak-average the targets.
    """

    DEFAULT_CONFIG = MFQ_DEFAULT_CONFIG
    ROLES = ("q",)
    OBSERVATION_ROLE = "q"
    PER_AGENT_KEYS = frozenset({"learning_rate", "grad_norm_clip", "discount_factor", "time_limit_bootstrap"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        counts = {uid: getattr(space, "n", None) for uid, space in self.action_spaces.items()}
        for uid, space in self.action_spaces.items():
            if not isinstance(space, gymnasium.spaces.Discrete):
                raise TypeError(f"MFQ has one utility per discrete action; agent {uid!r} has the action space {space}")
        if len(set(counts.values())) > 1:
            raise ValueError(f"MFQ averages the other agents' one-hot actions, so every agent must have the same number "
                             f"of actions; got {counts}")
        self.actions = int(next(iter(counts.values())))
        for group in self.groups:
            uid = group.uids[0]
            group.models["q"].check_input_size(expected=flat_size(self.observation_spaces[uid]) + self.actions,
                                               outputs=self.actions, what=f"models[{uid!r}]['q'] (the observation and "
                                               f"the others' mean action of {self.actions} values in, one utility per "
                                               "action out)")
            group.trained["q"] = self.add_off_policy_model(group.models["q"], "q")
        # per mode, (E, agents, actions): each agent's mean of the others' last actions, the groups' agents in turn
        self._previous: Dict[bool, Optional[torch.Tensor]] = {True: None, False: None}

    def init(self, trainer_cfg: Optional[Mapping[str, Any]] = None) -> None:
        """Also the mean actions each transition was chosen with, and the ones of its next observation."""
        super().init(trainer_cfg)
        for group in self.groups:
            for name in ("mean_actions", "next_mean_actions"):
                group.memory.create_tensor(name, (group.size, self.actions))

    def replay_names(self) -> List[str]:
        """The base's replay tensors and the two mean actions."""
        return super().replay_names() + ["mean_actions", "next_mean_actions"]

    def extra_samples(self, group: AgentGroup) -> Dict[str, torch.Tensor]:
        """The mean actions of the step (from :meth:`act`)."""
        return {"mean_actions": group.cache["mean_actions"], "next_mean_actions": group.cache["next_mean_actions"]}

    def set_mode(self, mode: str) -> None:
        """Switch mode; an evaluation starts new episodes, so its mean actions start from zeros."""
        super().set_mode(mode)
        if mode == "eval":
            self._previous[False] = None

    def cut_episodes(self) -> None:
        """The episodes in progress end here (the env will be reset): the next step's mean actions are zeros."""
        super().cut_episodes()
        self._previous[True] = None

    def observation_size(self, model: torch.nn.Module) -> int:
        """The observation preprocessor standardises the observation, not the mean action after it."""
        return model.num_observations - self.actions

    # ----------------------------------------------------------------------------- acting
    def epsilon(self) -> float:
        """The rate of uniformly random actions at the current stored step."""
        exploration = self.cfg["exploration"]
        return linear_scale(self.recorded_steps, initial_scale=exploration["initial_epsilon"],
                            final_scale=exploration["final_epsilon"], timesteps=exploration["timesteps"])

    def utilities(self, model: torch.nn.Module, observations: torch.Tensor, mean_actions: torch.Tensor,
                  mask: Optional[torch.Tensor]) -> torch.Tensor:
        """``(batch, group, actions)`` utilities of ``(batch, group, ...)`` inputs; illegal actions at -inf."""
        rows = torch.cat([observations, mean_actions.to(observations.dtype)], dim=-1)
        values, _, _ = model.act({"observations": rows.flatten(0, 1)}, role="q")
        values = values.unflatten(0, rows.shape[:2])
        return values if mask is None else values.masked_fill(~mask, float("-inf"))

    def act(self, observations: Mapping[str, torch.Tensor], states: Optional[torch.Tensor], infos: Mapping[str, Any],
            timestep: int, timesteps: int) -> Dict[str, torch.Tensor]:
        """Boltzmann actions with random ones at rate epsilon in training (random ones only for
        ``random_timesteps``), greedy in evaluation; then the mean actions the next step reads.
        """
        infos = infos or {}
        masks = infos.get("action_mask")
        previous = self.previous_mean_actions(infos, next(iter(observations.values())))
        epsilon = 1.0 if self.exploring_randomly() else self.epsilon() if self.training else 0.0
        chosen, active, start = [], [], 0
        for group in self.groups:
            obs = self.observe(group, observations, infos)
            mask = None if masks is None else stack_agents(masks, group.uids).bool()
            mean = previous[:, start:start + group.size]
            start += group.size
            values = self.utilities(group.models["q"], obs, mean, mask)
            if self.training or self.stochastic_evaluation:
                actions = torch.multinomial(torch.softmax(values / self.cfg["temperature"], -1).flatten(0, 1), 1)
                actions = actions.unflatten(0, values.shape[:2])
                if epsilon > 0:
                    legal = torch.ones_like(values, dtype=torch.bool) if mask is None else mask
                    random = torch.multinomial(legal.float().flatten(0, 1), 1).unflatten(0, values.shape[:2])
                    actions = torch.where(torch.rand(actions.shape, device=actions.device) < epsilon, random, actions)
            else:
                actions = values.argmax(-1, keepdim=True)
            group.cache["mean_actions"] = mean
            chosen.append(actions)
            active.append(self.active_mask(infos, group, obs.shape[0], obs.device))
        self.remember_mean_actions(chosen, active)
        if self.training:
            self.track_data("Exploration / epsilon", epsilon)
        return {uid: action for group, actions in zip(self.groups, chosen)
                for uid, action in unstack_agents(actions, group.uids).items()}

    def previous_mean_actions(self, infos: Mapping[str, Any], like: torch.Tensor) -> torch.Tensor:
        """``(E, agents, actions)``, the groups' agents in turn: the mean actions of the previous step, zeros for a
        copy whose episode just began.
        """
        previous = self._previous[self.training]
        if previous is None or previous.shape[0] != like.shape[0]:
            return like.new_zeros(like.shape[0], len(self.possible_agents), self.actions)
        ended = infos.get("episode_end")
        return previous if ended is None else torch.where(ended.reshape(-1, 1, 1).bool(), 0.0, previous)

    def remember_mean_actions(self, chosen: List[torch.Tensor], active: List[torch.Tensor]) -> None:
        """Each agent's mean of the others' actions just chosen, for the next step (and, in training, as the
        ``ā'`` of this transition's target).
        """
        one_hot = torch.cat([F.one_hot(actions.squeeze(-1), self.actions) * on for actions, on in zip(chosen, active)],
                            dim=1).float()                                          # (E, the groups' agents, actions)
        # the others' mean of each agent does not depend on the order of the agents: it stays the groups' order
        mean = others_mean_actions(one_hot.flatten(1), torch.arange(one_hot.shape[1]), self.actions)
        self._previous[self.training] = mean
        for group, part in zip(self.groups, mean.split([group.size for group in self.groups], dim=1)):
            group.cache["next_mean_actions"] = part

    # ----------------------------------------------------------------------------- update
    def gradient_update(self, batches: List[Dict[str, torch.Tensor]]) -> Dict[str, torch.Tensor]:
        """One TD step of every group's utilities (see the class documentation)."""
        losses = []
        with self.autocast():
            for group, batch in zip(self.groups, batches):
                chosen = self.utilities(group.models["q"], batch["observations"], batch["mean_actions"], None)
                chosen = chosen.gather(-1, batch["actions"])
                with torch.no_grad():
                    mask = batch.get("next_action_mask")
                    online = self.utilities(group.models["q"], batch["next_observations"], batch["next_mean_actions"],
                                            mask)
                    policy = torch.softmax(online / self.cfg["temperature"], dim=-1)
                    target = self.utilities(group.trained["q"].target, batch["next_observations"],
                                            batch["next_mean_actions"], None)
                    value = (policy * target).sum(-1, keepdim=True)
                    targets = batch["rewards"] + group.cfg["discount_factor"] * batch["next_active"] * value
                losses.append({"loss": masked_mean((chosen - targets).square(), batch["active"]),
                               "value": masked_mean(chosen.detach(), batch["active"])})
            loss = self.mean_over_agents(losses)
        self.optimize(self.trained, loss["loss"])
        self.update_targets()
        return {"Loss / TD": loss["loss"], "Q / value": loss["value"]}
